/**
 * Fan-out bench (prints figures, asserts nothing): what handing one small event to each of many
 * open connections costs the sender's CPU on this machine, by transport: plain TCP, TLS, and an
 * HTTPS response body (chunked, as a watch is). The floor under the controller's cost of a change
 * every Node's view holds (a Pod's address in a cluster-wide group): one write per watch.
 *
 * `--conns` connections (default 500) from a child process over loopback; `--events` rounds
 * (default 40) of one ~400-byte line written to every connection, 30 ms apart (as events are, not
 * back to back); the sender's CPU (user + system) per write. On loopback the kernel also runs the
 * receiving side of TCP in the sender's system call, which a real network does not.
 *
 * usage: node dist/bench/fanout.js [--conns 500] [--events 40]
 */
import { fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

type Transport = 'tcp' | 'tls' | 'https';
const TRANSPORTS: readonly Transport[] = ['tcp', 'tls', 'https'];

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};

/** The child: opens `conns` connections of one transport and reads whatever comes. */
function client(transport: Transport, port: number, conns: number): void {
  for (let i = 0; i < conns; i++) {
    if (transport === 'tcp') net.connect(port, '127.0.0.1').on('data', () => {});
    else {
      const s = tls.connect({ port, host: '127.0.0.1', rejectUnauthorized: false }, () => {
        if (transport === 'https') s.write('GET /watch HTTP/1.1\r\nHost: bench\r\n\r\n');
      });
      s.on('data', () => {});
    }
  }
}

/** The sender's CPU per write, in µs, for one transport. */
async function measure(transport: Transport, conns: number, events: number, key: Buffer, cert: Buffer): Promise<{ user: number; system: number }> {
  const writers: { write(b: Buffer): unknown }[] = [];
  const server =
    transport === 'https'
      ? https.createServer({ key, cert }, (_req, res) => {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.flushHeaders();
          writers.push(res);
        })
      : transport === 'tls'
        ? tls.createServer({ key, cert }, (s) => writers.push(s))
        : net.createServer((s) => writers.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const child = fork(fileURLToPath(import.meta.url), ['--client', transport, String(port), String(conns)], { stdio: 'inherit' });
  const deadline = Date.now() + 60_000;
  while (writers.length < conns) {
    if (Date.now() > deadline) throw new Error(`${transport}: ${writers.length} of ${conns} connections after 60 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => setTimeout(r, 300));
  // A watch event's size: a group's patch with its metadata.
  const line = Buffer.from(`${JSON.stringify({ type: 'MODIFIED', object: { metadata: { name: 'addressgroup-1a2b3c', resourceVersion: '1764000000000123' }, upserted: [{ kind: 'pod', ref: 'ns-9/scale-new', ips: ['10.9.0.1'] }], pad: 'x'.repeat(250) } })}\n`);
  const c0 = process.cpuUsage();
  for (let e = 0; e < events; e++) {
    for (const w of writers) w.write(line);
    await new Promise((r) => setTimeout(r, 30));
  }
  const c = process.cpuUsage(c0);
  child.kill();
  server.close();
  for (const w of writers) (w as { destroy?: () => void }).destroy?.();
  const n = conns * events;
  return { user: c.user / n, system: c.system / n };
}

async function main(): Promise<void> {
  const conns = arg('conns', 500);
  const events = arg('events', 40);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-fanout-'));
  try {
    await execa('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=fanout-bench']);
    const key = readFileSync(join(dir, 'key.pem'));
    const cert = readFileSync(join(dir, 'cert.pem'));
    console.log(`== fan-out: one ~400-byte event to each of ${conns} loopback connections, ${events} rounds 30 ms apart; the sender's CPU per write`);
    for (const t of TRANSPORTS) {
      const r = await measure(t, conns, events, key, cert);
      console.log(`${t.padEnd(6)} ${(r.user + r.system).toFixed(1)} µs per write (user ${r.user.toFixed(1)}, system ${r.system.toFixed(1)}); ${(((r.user + r.system) * conns) / 1000).toFixed(2)} ms per event to ${conns} connections`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--client') client(process.argv[3] as Transport, Number(process.argv[4]), Number(process.argv[5]));
else
  main().catch((err) => {
    console.error(`fanout bench: ${(err as Error).message}`);
    process.exit(1);
  });
