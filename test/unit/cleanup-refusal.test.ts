// `sluice-agent --cleanup` refuses to run while an agent serves: something on the health address,
// or a live CNI socket. A stale socket file (crashed agent) and a free port do not block it.
import t from 'tap';
import { createServer, type Server } from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runningAgent } from '../../daemon/node/cleanup.js';
import { parseConfig } from '../../daemon/config.js';

const dir = mkdtempSync(join(tmpdir(), 'cleanup-refusal-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const listen = (s: Server, where: number | string) =>
  new Promise<void>((resolve) => (typeof where === 'number' ? s.listen(where, '127.0.0.1', resolve) : s.listen(where, resolve)));
const close = (s: Server) => new Promise<void>((resolve) => s.close(() => resolve()));

/** A free TCP port on 127.0.0.1 (bound, read, released). */
async function freePort(): Promise<number> {
  const s = createServer();
  await listen(s, 0);
  const port = (s.address() as { port: number }).port;
  await close(s);
  return port;
}

const config = (port: number, socketPath: string) =>
  parseConfig(`nodeName: n1\nhealthAddress: 127.0.0.1:${port}\nsocketPath: ${socketPath}\nstateDir: ${dir}/state\n`, 'test.yaml', {});

t.test('nothing serves: not refused', async (t) => {
  t.equal(await runningAgent(config(await freePort(), join(dir, 'none.sock'))), undefined);
});

t.test('a stale socket file nobody listens on: not refused', async (t) => {
  const stale = join(dir, 'stale.sock');
  const s = createServer();
  await listen(s, stale);
  // Closing a unix server unlinks its file in Node; recreate a dead one by hand.
  await close(s);
  writeFileSync(stale, '');
  t.equal(await runningAgent(config(await freePort(), stale)), undefined);
});

t.test('the health address answers: refused, naming it', async (t) => {
  const s = createServer((c) => c.end());
  await listen(s, 0);
  const port = (s.address() as { port: number }).port;
  try {
    t.match(await runningAgent(config(port, join(dir, 'none.sock'))), new RegExp(`health address 127\\.0\\.0\\.1:${port}.*stop it first`));
  } finally {
    await close(s);
  }
});

t.test('the CNI socket is live: refused, naming it', async (t) => {
  const sock = join(dir, 'cni.sock');
  const s = createServer((c) => c.end());
  await listen(s, sock);
  try {
    t.match(await runningAgent(config(await freePort(), sock)), new RegExp(`CNI socket ${sock} is live`));
  } finally {
    await close(s);
  }
});
