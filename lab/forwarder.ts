/**
 * A TCP-to-unix-socket forwarder, run inside a node namespace: 127.0.0.1:6443 there reaches the
 * lab API server's plain-HTTP unix socket, so a node agent uses an ordinary kubeconfig
 * (server: http://127.0.0.1:6443), and 127.0.0.1:6444 its HTTPS socket, what a DaemonSet Pod's
 * in-cluster config (KUBERNETES_SERVICE_HOST/PORT) reaches. Bytes are passed through untouched:
 * TLS ends at the API server. Exits when its parent supervisor is gone.
 *
 * usage: forwarder.js --listen 127.0.0.1:6443 --unix PATH [--listen HOST:PORT --unix PATH]... --parent PID
 */
import net from 'node:net';

const usage = 'usage: forwarder.js --listen HOST:PORT --unix PATH [--listen HOST:PORT --unix PATH]... --parent PID';

function all(name: string): string[] {
  const out: string[] = [];
  process.argv.forEach((a, i) => {
    if (a === `--${name}` && process.argv[i + 1]) out.push(process.argv[i + 1]!);
  });
  return out;
}

const listens = all('listen');
const sockets = all('unix');
const parent = Number(all('parent')[0]);
if (listens.length === 0 || listens.length !== sockets.length || !Number.isInteger(parent)) {
  process.stderr.write(`forwarder: each --listen needs one --unix, and --parent is required (${usage})\n`);
  process.exit(2);
}

listens.forEach((listen, i) => {
  const [host, portText] = listen.split(':') as [string, string];
  const unixPath = sockets[i]!;
  const server = net.createServer((client) => {
    const upstream = net.connect(unixPath);
    client.pipe(upstream).pipe(client);
    const close = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
  });
  server.on('error', (err) => {
    process.stderr.write(`forwarder ${listen}: ${err.message}\n`);
    process.exit(1);
  });
  server.listen(Number(portText), host, () => process.stdout.write(`forwarding ${host}:${portText} -> ${unixPath}\n`));
});

setInterval(() => {
  try {
    process.kill(parent, 0);
  } catch {
    process.exit(0);
  }
}, 1000).unref();
process.on('SIGTERM', () => process.exit(0));
