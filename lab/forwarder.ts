/**
 * A TCP-to-unix-socket forwarder, run inside a node namespace: 127.0.0.1:6443 there reaches the
 * lab API server's plain-HTTP unix socket, so a node agent uses an ordinary kubeconfig
 * (server: http://127.0.0.1:6443), and 127.0.0.1:6444 its HTTPS socket, what a DaemonSet Pod's
 * in-cluster config (KUBERNETES_SERVICE_HOST/PORT) reaches. Bytes are passed through untouched:
 * TLS ends at the API server.
 *
 * The other way, run inside the VPC namespace (`--dial PATH`): each connection to the unix socket
 * PATH names its destination in a first line (`HOST PORT\n`) and is then joined to a TCP
 * connection to it, so the API server on the host reaches what the nodes serve (the aggregation
 * layer's proxy to a host-network extension API server such as sluice-controller's Pods).
 *
 * Exits when its parent supervisor is gone.
 *
 * usage: forwarder.js (--listen HOST:PORT --unix PATH)... [--dial PATH] --parent PID
 */
import net from 'node:net';

const usage = 'usage: forwarder.js (--listen HOST:PORT --unix PATH)... [--dial PATH] --parent PID';

function all(name: string): string[] {
  const out: string[] = [];
  process.argv.forEach((a, i) => {
    if (a === `--${name}` && process.argv[i + 1]) out.push(process.argv[i + 1]!);
  });
  return out;
}

const listens = all('listen');
const sockets = all('unix');
const dials = all('dial');
const parent = Number(all('parent')[0]);
if ((listens.length === 0 && dials.length === 0) || listens.length !== sockets.length || !Number.isInteger(parent)) {
  process.stderr.write(`forwarder: each --listen needs one --unix, and --parent is required (${usage})\n`);
  process.exit(2);
}

for (const path of dials) {
  const server = net.createServer((client) => {
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(10);
      if (nl < 0) {
        if (head.length > 300) client.destroy();
        return;
      }
      client.off('data', onData);
      client.pause();
      const [host, portText] = head.subarray(0, nl).toString('utf8').trim().split(' ');
      const upstream = net.connect(Number(portText), host ?? '');
      const rest = head.subarray(nl + 1);
      if (rest.length) upstream.write(rest);
      client.pipe(upstream).pipe(client);
      client.resume();
      const close = (): void => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
      client.on('close', close);
      upstream.on('close', close);
    };
    client.on('data', onData);
    client.on('error', () => client.destroy());
  });
  server.on('error', (err) => {
    process.stderr.write(`forwarder --dial ${path}: ${err.message}\n`);
    process.exit(1);
  });
  server.listen(path, () => process.stdout.write(`dialing from ${path}\n`));
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
