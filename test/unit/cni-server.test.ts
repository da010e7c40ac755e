/**
 * startCniServer on its own, spoken to with raw sockets: socket file life cycle, permissions,
 * malformed requests, and clients that misbehave.
 */
import { existsSync, lstatSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { startCniServer } from '../../daemon/cni/server.js';
import { PTP_040 } from './cni-fixtures.js';
import { RecordingHandler, capturingLogger, gate, makeStaleSocket, tempDir, until } from './cni-harness.js';

const tmp = tempDir();
t.teardown(tmp.remove);
let n = 0;
const freshPath = () => join(tmp.dir, `s${++n}`, 'cni.sock');

const addRequest = (containerId = 'c0ffee01') => ({
  command: 'ADD',
  containerId,
  netns: '/var/run/netns/cn-pod',
  ifName: 'eth0',
  args: {},
  cniPath: '',
  config: { cniVersion: '0.4.0', name: 'k8s', type: 'sluice-cni', prevResult: PTP_040 },
});

/** Sends raw bytes, optionally half-closing, and resolves with everything the server sent back. */
function exchange(socketPath: string, payload: string, halfClose = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = createConnection(socketPath);
    let got = '';
    sock.on('data', (d: Buffer) => (got += d.toString()));
    sock.on('end', () => resolve(got));
    sock.on('error', reject);
    sock.on('connect', () => (halfClose ? sock.end(payload) : sock.write(payload)));
  });
}

t.test('creates the socket directory 0700 and the socket 0600, and removes it on close', async (t) => {
  const path = freshPath();
  const server = await startCniServer(path, new RecordingHandler(), capturingLogger().log);
  t.equal(statSync(join(path, '..')).mode & 0o777, 0o700);
  t.ok(lstatSync(path).isSocket());
  t.equal(lstatSync(path).mode & 0o777, 0o600);
  await server.close();
  t.notOk(existsSync(path), 'socket file removed');
});

t.test('a stale socket from a crashed agent is replaced', async (t) => {
  const path = freshPath();
  mkdirSync(join(path, '..'), { recursive: true });
  makeStaleSocket(path);
  t.ok(lstatSync(path).isSocket(), 'stale socket present');
  const { log, lines } = capturingLogger();
  const server = await startCniServer(path, new RecordingHandler(), log);
  t.teardown(() => server.close());
  t.ok(lines.some((l) => l.msg === 'cni: removed stale socket'));
  const answer = JSON.parse(await exchange(path, JSON.stringify(addRequest()) + '\n'));
  t.same(answer, { ok: true, result: PTP_040 }, 'the new server answers');
});

t.test('a path that is not a socket, or a live socket, is refused and left alone', async (t) => {
  const file = freshPath();
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, 'precious');
  await t.rejects(startCniServer(file, new RecordingHandler(), capturingLogger().log), /exists and is not a socket/);
  t.equal(readFileSync(file, 'utf8'), 'precious');

  const live = freshPath();
  const first = await startCniServer(live, new RecordingHandler(), capturingLogger().log);
  t.teardown(() => first.close());
  await t.rejects(startCniServer(live, new RecordingHandler(), capturingLogger().log), /already listening/);
  t.same(JSON.parse(await exchange(live, JSON.stringify(addRequest()) + '\n')), { ok: true, result: PTP_040 }, 'the first server still serves');
});

t.test('malformed and invalid requests get error responses with the right code', async (t) => {
  const path = freshPath();
  const handler = new RecordingHandler();
  const server = await startCniServer(path, handler, capturingLogger().log);
  t.teardown(() => server.close());
  t.match(JSON.parse(await exchange(path, '{nope\n')), { ok: false, code: 6, msg: /not valid JSON/ });
  t.match(JSON.parse(await exchange(path, '"a string"\n')), { ok: false, code: 6, msg: /must be a JSON object/ });
  t.match(JSON.parse(await exchange(path, JSON.stringify({ ...addRequest(), command: 'VERSION' }) + '\n')), { ok: false, code: 4 });
  t.match(JSON.parse(await exchange(path, JSON.stringify({ ...addRequest(), containerId: '../etc' }) + '\n')), { ok: false, code: 4, msg: /CNI_CONTAINERID/ });
  t.equal(handler.calls.length, 0);
  // No trailing newline, then a half-close: still one complete request.
  t.same(JSON.parse(await exchange(path, JSON.stringify(addRequest()), true)), { ok: true, result: PTP_040 });
});

t.test('a handler that throws a non-Error value still gets a well-formed error', async (t) => {
  const path = freshPath();
  const handler = new RecordingHandler();
  handler.behave = async () => {
    throw 'a string, not an Error';
  };
  const server = await startCniServer(path, handler, capturingLogger().log);
  t.teardown(() => server.close());
  t.match(JSON.parse(await exchange(path, JSON.stringify(addRequest()) + '\n')), { ok: false, code: 100, msg: 'a string, not an Error' });
});

t.test('a client that disconnects early does not stop the operation or the server', async (t) => {
  const path = freshPath();
  const handler = new RecordingHandler();
  const g = gate();
  handler.behave = () => g.opened;
  const { log, lines } = capturingLogger();
  const server = await startCniServer(path, handler, log);
  t.teardown(() => server.close());

  const sock = createConnection(path);
  await new Promise<void>((r) => sock.on('connect', () => r()));
  sock.write(JSON.stringify(addRequest('gone01')) + '\n');
  await until(() => handler.count('add') === 1, 'the ADD reaches the handler');
  sock.destroy();
  g.open();
  await until(() => handler.count('add', 'end') === 1, 'the ADD completes');
  await until(() => lines.some((l) => l.msg === 'cni: client went away before the answer; the operation completed anyway'), 'warning logged');

  handler.behave = async () => undefined;
  t.same(JSON.parse(await exchange(path, JSON.stringify(addRequest('next01')) + '\n')), { ok: true, result: PTP_040 }, 'server still serves');
});

t.test('close() waits for running operations before removing the socket', async (t) => {
  const path = freshPath();
  const handler = new RecordingHandler();
  const g = gate();
  handler.behave = () => g.opened;
  const server = await startCniServer(path, handler, capturingLogger().log);
  const answer = exchange(path, JSON.stringify(addRequest()) + '\n');
  await until(() => handler.count('add') === 1, 'ADD running');
  let closed = false;
  const closing = server.close().then(() => (closed = true));
  await new Promise((r) => setImmediate(r));
  t.notOk(closed, 'close waits for the ADD');
  g.open();
  await closing;
  t.same(JSON.parse(await answer), { ok: true, result: PTP_040 }, 'the running ADD was answered');
  t.notOk(existsSync(path));
});
