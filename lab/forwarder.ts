/**
 * A TCP-to-unix-socket forwarder, run inside a node namespace: 127.0.0.1:6443 there reaches the
 * lab API server's unix socket, so a node agent uses an ordinary kubeconfig
 * (server: http://127.0.0.1:6443). Exits when its parent supervisor is gone.
 *
 * usage: forwarder.js --listen 127.0.0.1:6443 --unix PATH --parent PID
 */
import net from 'node:net';

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : undefined;
  if (!v) {
    process.stderr.write(`forwarder: --${name} is required (usage: forwarder.js --listen HOST:PORT --unix PATH --parent PID)\n`);
    process.exit(2);
  }
  return v;
}

const [host, portText] = arg('listen').split(':') as [string, string];
const unixPath = arg('unix');
const parent = Number(arg('parent'));

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
  process.stderr.write(`forwarder: ${err.message}\n`);
  process.exit(1);
});
server.listen(Number(portText), host, () => process.stdout.write(`forwarding ${host}:${portText} -> ${unixPath}\n`));

setInterval(() => {
  try {
    process.kill(parent, 0);
  } catch {
    process.exit(0);
  }
}, 1000).unref();
process.on('SIGTERM', () => process.exit(0));
