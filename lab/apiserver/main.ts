// Runs the lab API server as its own process:
//   node dist/lab/apiserver/main.js [--host H] [--port N] [--unix PATH] [--token T] [--data FILE]
//        [--no-crds] [--history N] [--service-cidr CIDR[,CIDR]] [--expired-watch http|event]
//        [--seed FILE] [--service-account-key-file FILE]
// Prints one JSON line {"msg":"listening","url":...} on stdout once it serves; stops on SIGTERM/SIGINT.
import { readFileSync } from 'node:fs';
import { startApiServer, type ApiServerOptions } from './server.js';

function usage(problem: string): never {
  process.stderr.write(`${problem}\nusage: main.js [--host H] [--port N] [--unix PATH] [--token T] [--data FILE] [--no-crds] [--history N] [--service-cidr CIDR[,CIDR]] [--expired-watch http|event] [--seed FILE] [--service-account-key-file FILE]\n`);
  process.exit(2);
}

function parseArgs(argv: string[]): ApiServerOptions {
  const opts: ApiServerOptions = {};
  const integer = (flag: string, v: string) => {
    if (!/^[0-9]+$/.test(v)) usage(`${flag} needs a non-negative integer, got "${v}"`);
    return Number(v);
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--no-crds') {
      opts.installCRDs = false;
      continue;
    }
    const value = argv[i + 1];
    if (value === undefined) usage(`${flag} needs a value`);
    i++;
    switch (flag) {
      case '--host': opts.host = value; break;
      case '--port': opts.port = integer(flag, value); break;
      case '--unix': opts.unixSocket = value; break;
      case '--token': opts.token = value; break;
      case '--data': opts.dataFile = value; break;
      case '--seed': opts.seedFile = value; break;
      case '--service-account-key-file':
        try {
          opts.serviceAccountKey = readFileSync(value, 'utf8').trim();
        } catch (e) {
          usage(`--service-account-key-file ${value}: ${(e as Error).message}`);
        }
        if (!opts.serviceAccountKey) usage(`--service-account-key-file ${value}: the file is empty`);
        break;
      case '--history': opts.historyLimit = integer(flag, value); break;
      case '--service-cidr': opts.serviceCIDR = value; break;
      case '--expired-watch':
        if (value !== 'http' && value !== 'event') usage(`--expired-watch must be "http" or "event", got "${value}"`);
        opts.expiredWatch = value;
        break;
      default: usage(`unknown option ${flag}`);
    }
  }
  return opts;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const server = await startApiServer(opts);
  process.stdout.write(`${JSON.stringify({ level: 'info', time: Date.now(), msg: 'listening', url: server.url, port: server.port, unixSocket: opts.unixSocket, pid: process.pid })}\n`);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    void server.close().then(() => {
      process.stdout.write(`${JSON.stringify({ level: 'info', time: Date.now(), msg: 'stopped', signal })}\n`);
      process.exit(0);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((e: unknown) => {
  process.stderr.write(`${JSON.stringify({ level: 'error', time: Date.now(), msg: 'API server failed to start', error: (e as Error).message })}\n`);
  process.exit(1);
});
