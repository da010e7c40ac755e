// daemon/ovs/: the JSON-RPC stream framing Open vSwitch uses, the OVSDB session and the unixctl
// client, against fake servers on Unix sockets (test/lab/datapath-ovs.test.ts runs them against
// the real daemons).
import t from 'tap';
import { createServer, type Server, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { JsonRpcClosed, JsonRpcConnection, JsonRpcError, JsonSplitter } from '../../daemon/ovs/jsonrpc.js';
import { decodeValue, OvsdbClient, OvsdbError } from '../../daemon/ovs/ovsdb.js';
import { closeUnixctlConnections, unixctl, UnixctlError, UNIXCTL_IN_FLIGHT } from '../../daemon/ovs/unixctl.js';
import { spawn } from 'node:child_process';
import { OvsBridge } from '../../daemon/ovs/bridge.js';
import pino from 'pino';

const dir = mkdtempSync(join(tmpdir(), 'ovs-jsonrpc-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('JsonSplitter: back-to-back values, cut anywhere, braces and quotes inside strings', async (t) => {
  const values: unknown[] = [
    { method: 'echo', params: [], id: 'echo' },
    { result: [{ rows: [{ name: 'a}b{c', note: 'say "hi" \\ {[' }] }], error: null, id: 1 },
    [1, [2, { x: ']' }]],
    { id: 2, result: 'ünïcödé ✓ 😀', error: null },
    { empty: {}, list: [], s: '' },
  ];
  const text = values.map((v) => JSON.stringify(v)).join(' \n');
  // Every cut point of the whole stream, in two chunks, and a random chunking.
  for (let cut = 0; cut <= text.length; cut++) {
    const s = new JsonSplitter();
    const got = [...s.push(text.slice(0, cut)), ...s.push(text.slice(cut))];
    if (JSON.stringify(got) !== JSON.stringify(values)) {
      t.fail(`cut at ${cut}: ${JSON.stringify(got)}`);
      return;
    }
  }
  const s = new JsonSplitter();
  const got: unknown[] = [];
  for (let i = 0; i < text.length; ) {
    const n = 1 + Math.floor(Math.random() * 7);
    got.push(...s.push(text.slice(i, i + n)));
    i += n;
  }
  t.same(got, values, 'random chunks');
  t.throws(() => new JsonSplitter().push('{"a":1}}'), /unbalanced/);
  t.throws(() => new JsonSplitter().push('{"a":1} nope'), /expected an object/);
});

/** A fake JSON-RPC server: `handle` answers each request (or not). */
const open = new Map<Server, Set<Socket>>();
function serve(path: string, handle: (msg: Record<string, unknown>, sock: Socket) => void): Promise<Server> {
  const socks = new Set<Socket>();
  const server = createServer((sock) => {
    socks.add(sock);
    sock.on('close', () => socks.delete(sock));
    const split = new JsonSplitter();
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      for (const m of split.push(d)) handle(m as Record<string, unknown>, sock);
    });
    sock.on('error', () => undefined);
  });
  open.set(server, socks);
  return new Promise((resolve) => server.listen(path, () => resolve(server)));
}
/** Stops listening and drops every session, as a restarted daemon does. */
const close = (s: Server) =>
  new Promise<void>((r) => {
    s.close(() => r());
    for (const sock of open.get(s) ?? []) sock.destroy();
  });

t.test('JsonRpcConnection: replies matched by id out of order, echo answered, notifications, errors', async (t) => {
  const path = join(dir, 'rpc.sock');
  const seen: Record<string, unknown>[] = [];
  let held: { sock: Socket; id: unknown } | undefined;
  const server = await serve(path, (m, sock) => {
    seen.push(m);
    if (m.method === 'slow') held = { sock, id: m.id };
    else if (m.method === 'fast') {
      // Before answering: the server's own keep-alive and a notification.
      sock.write(JSON.stringify({ method: 'echo', params: ['ping', 7], id: 'echo' }));
      sock.write(JSON.stringify({ method: 'update', params: ['mon', { Interface: {} }], id: null }));
      sock.write(JSON.stringify({ result: 'fast done', error: null, id: m.id }));
      held!.sock.write(JSON.stringify({ result: 'slow done', error: null, id: held!.id }));
    } else if (m.method === 'bad') sock.write(JSON.stringify({ result: null, error: 'unknown method', id: m.id }));
  });
  const conn = await JsonRpcConnection.connect(path);
  const notes: unknown[] = [];
  conn.onNotification((method, params) => notes.push([method, params]));
  const slow = conn.request('slow', []);
  await new Promise((r) => setTimeout(r, 20));
  const fast = conn.request('fast', ['x']);
  t.same(await Promise.all([slow, fast]), ['slow done', 'fast done'], 'each reply reaches its request');
  t.same(notes, [['update', ['mon', { Interface: {} }]]], 'the notification');
  for (let i = 0; i < 50 && !seen.some((m) => m.id === 'echo'); i++) await new Promise((r) => setTimeout(r, 10));
  t.same(seen.find((m) => m.id === 'echo'), { result: ['ping', 7], error: null, id: 'echo' }, "the server's echo answered with its own params");
  await t.rejects(conn.request('bad', []), new JsonRpcError('bad', 'unknown method'), 'an error reply rejects with its text');
  await t.rejects(conn.request('never', [], 50), JsonRpcClosed, 'no reply within the timeout');
  conn.close();
  await conn.closed;
  await t.rejects(conn.request('after', []), JsonRpcClosed, 'a closed connection refuses new requests');
  await close(server);
  await t.rejects(JsonRpcConnection.connect(path), /rpc\.sock: connect (ENOENT|ECONNREFUSED)/, 'nothing listening: the path is named');
});

t.test('JsonRpcConnection: a reply that arrived while the event loop was busy past the deadline counts', async (t) => {
  const path = join(dir, 'busy.sock');
  const server = await serve(path, (m, sock) => {
    sock.write(JSON.stringify({ result: 'answered in time', error: null, id: m.id }));
    // The process then computes for longer than the client's deadline (a cold compile, a GC
    // pause): when the loop comes back, the expired timer runs before the socket is read.
    const until = Date.now() + 150;
    while (Date.now() < until);
  });
  const conn = await JsonRpcConnection.connect(path);
  try {
    t.equal(await conn.request('busy', [], 50), 'answered in time', 'the reply that was waiting in the socket is taken, not a timeout');
  } finally {
    conn.close();
    await close(server);
  }
});

t.test('JsonRpcConnection: requests in flight fail when the server goes away', async (t) => {
  const path = join(dir, 'drop.sock');
  const server = await serve(path, (_m, sock) => sock.destroy());
  const conn = await JsonRpcConnection.connect(path);
  await t.rejects(conn.request('x', []), JsonRpcClosed);
  await close(server);
});

t.test('OvsdbClient: transact, errors named by operation, a new session after the server restarted', async (t) => {
  const path = join(dir, 'db.sock');
  const transacts: unknown[] = [];
  const handler = (m: Record<string, unknown>, sock: Socket) => {
    if (m.method !== 'transact') return;
    transacts.push(m.params);
    const ops = (m.params as unknown[]).slice(1) as { op: string; table?: string }[];
    const results = ops.map((op) =>
      op.table === 'Nope' ? { error: 'unknown table', details: 'No table named Nope.' }
      : op.op === 'select' ? { rows: [{ name: 'vt1', ofport: 7, error: ['set', []], external_ids: ['map', [['pod-name', 'a']]], _uuid: ['uuid', 'u-1'] }] }
      : { count: 1 },
    );
    sock.write(JSON.stringify({ result: results, error: null, id: m.id }));
  };
  let server = await serve(path, handler);
  const db = new OvsdbClient(path);
  t.same(await db.select('Interface', [['name', '==', 'vt1']], ['name']), [{ name: 'vt1', ofport: 7, error: [], external_ids: { 'pod-name': 'a' }, _uuid: 'u-1' }], 'select decodes sets, maps and uuids');
  t.same(transacts[0], ['Open_vSwitch', { op: 'select', table: 'Interface', where: [['name', '==', 'vt1']], columns: ['name'] }], 'the request as RFC 7047 writes it');
  await t.rejects(
    db.transact([{ op: 'select', table: 'Interface', where: [] }, { op: 'insert', table: 'Nope', row: {} }]),
    new OvsdbError('OVSDB transact: operation 1 (insert Nope): unknown table: No table named Nope.'),
    "OVSDB's error and details, naming the operation",
  );
  // The server restarts: the session is gone; the next call opens a new one.
  await close(server);
  server = await serve(path, handler);
  let after: unknown;
  for (let i = 0; i < 50 && after === undefined; i++) {
    after = await db.transact([{ op: 'comment', comment: 'hello' }]).catch(() => undefined);
    if (after === undefined) await new Promise((r) => setTimeout(r, 20));
  }
  t.same(after, [{ count: 1 }], 'a new session after the restart');
  db.close();
  await close(server);
  await t.rejects(new OvsdbClient(join(dir, 'none.sock')).transact([]), /cannot reach OVSDB at unix:.*none\.sock \(is ovsdb-server running\?\)/);
  t.same(decodeValue(['set', [['uuid', 'a'], ['uuid', 'b']]]), ['a', 'b']);
});

t.test('OvsBridge.addPodPort: the port and the next_cfg request in one transaction, then one wait (no polling) that also reads the ofport', async (t) => {
  const sub = mkdtempSync(join(dir, 'addport-'));
  const transacts: { op: string; table?: string; until?: string; where?: unknown[]; row?: Record<string, unknown> }[][] = [];
  let vswitchdAnswers = true;
  /** Interface/Port names OVSDB already holds: inserting one again breaks their unique name index. */
  const existing = new Set<string>();
  const server = await serve(join(sub, 'db.sock'), (m, sock) => {
    if (m.method !== 'transact') return;
    const ops = (m.params as unknown[]).slice(1) as { op: string; table?: string; until?: string; where?: unknown[]; row?: Record<string, unknown> }[];
    transacts.push(ops);
    const reply = (result: unknown[]) => sock.write(JSON.stringify({ result, error: null, id: m.id }));
    if (ops[0]?.op === 'wait') {
      // ovsdb-server answers a wait once the condition holds (vswitchd raised cur_cfg), or "timed out".
      if (!vswitchdAnswers) return reply([{ error: 'timed out' }]);
      return setTimeout(() => reply([{}, { rows: [{ ofport: 12, error: ['set', []] }] }]), 5);
    }
    const taken = ops.find((op) => op.op === 'insert' && existing.has(String(op.row?.name)));
    const results = ops.map((op) =>
      op.op === 'select' && op.table === 'Open_vSwitch' ? { rows: [{ next_cfg: 41 }] }
      : op.op === 'select' && op.table === 'Interface' ? { rows: existing.has('veth3') ? [{ _uuid: ['uuid', 'i3'], external_ids: ['map', [['other', 'kept']]] }] : [] }
      : op.op === 'select' && op.table === 'Port' ? { rows: [{ _uuid: ['uuid', 'p3'] }] }
      : op.op === 'select' && op.table === 'Bridge' ? { rows: [{ ports: ['uuid', 'p3'] }] }
      : op.op === 'select' ? { rows: [] }
      : op.op === 'mutate' || op.op === 'update' ? { count: 1 }
      : { uuid: ['uuid', 'u'] },
    );
    if (taken) results.push({ error: 'constraint violation', details: `Transaction causes multiple rows in "Interface" table to have identical values (${String(taken.row?.name)}) for index on column "name".` } as never);
    reply(results);
  });
  const ovs = new OvsBridge({ ovsRunDir: sub, bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
  t.equal(await ovs.addPodPort('veth1', { 'sluice-type': 'container', 'container-id': 'c1' } as never), 12);
  t.equal(transacts.length, 2, 'change, wait: two round trips whatever vswitchd takes (a new name needs no look-up)');
  t.same(transacts[0]!.map((o) => `${o.op} ${o.table}`), ['insert Interface', 'insert Port', 'mutate Bridge', 'mutate Open_vSwitch', 'select Open_vSwitch']);
  t.same(transacts[1]!.map((o) => o.op), ['wait', 'select']);
  t.same(transacts[1]![0]!.where, [['cur_cfg', '>=', 41]], 'waits for the configuration the change asked for');

  // A name OVSDB already has (a repeated ADD, a resync): refused as a whole, then re-labelled in place.
  existing.add('veth3');
  transacts.length = 0;
  t.equal(await ovs.addPodPort('veth3', { 'sluice-type': 'container', 'container-id': 'c3' } as never, 7), 12);
  const update = transacts.find((ops) => ops[0]?.op === 'update')!;
  t.ok(update, 'the existing interface is updated, not inserted again');
  t.same(update[0]!.row, { external_ids: ['map', [['other', 'kept'], ['sluice-type', 'container'], ['container-id', 'c3']]], ofport_request: 7 }, 'its other external_ids kept, ours set, the number requested');
  t.same(transacts.at(-1)!.map((o) => o.op), ['wait', 'select'], 'and waits for vswitchd as a new port does');

  vswitchdAnswers = false;
  await t.rejects(ovs.addPodPort('veth2', { 'sluice-type': 'container' } as never), /attach veth2 to br-int: ovs-vswitchd did not apply the change within 15 s \(is it running\?\)/);
  ovs.close();
  await close(server);
});

t.test('unixctl: the result text, or the error text ovs-appctl would print', async (t) => {
  const path = join(dir, 'vswitchd.ctl');
  const server = await serve(path, (m, sock) => {
    if (m.method === 'revalidator/purge') sock.write(JSON.stringify({ result: '', error: null, id: m.id }));
    else if (m.method === 'version') sock.write(JSON.stringify({ result: `ovs-vswitchd ${(m.params as string[]).join(' ')}\n`, error: null, id: m.id }));
    else sock.write(JSON.stringify({ result: null, error: `"${String(m.method)}" is not a valid command\n`, id: m.id }));
  });
  t.equal(await unixctl(path, 'revalidator/purge'), '');
  t.equal(await unixctl(path, 'version', ['a', 'b']), 'ovs-vswitchd a b\n', 'arguments are the params');
  await t.rejects(unixctl(path, 'no/such'), new UnixctlError('"no/such" is not a valid command'));
  await close(server);
});

t.test('unixctl: a connection that answered serves the next command; one the server closed since is replaced', async (t) => {
  const path = join(dir, 'kept.ctl');
  let accepted = 0;
  const answer = (m: Record<string, unknown>, sock: Socket) => sock.write(JSON.stringify({ result: `done ${String(m.method)}`, error: null, id: m.id }));
  let server = await serve(path, answer);
  server.on('connection', () => accepted++);
  for (let i = 0; i < 5; i++) t.equal(await unixctl(path, 'revalidator/purge'), 'done revalidator/purge');
  t.equal(accepted, 1, 'five commands in a row, one connection');
  // A restart: every session dropped, then the socket listens again.
  await close(server);
  server = await serve(path, answer);
  accepted = 0;
  server.on('connection', () => accepted++);
  t.equal(await unixctl(path, 'version'), 'done version', 'answered over a new connection');
  t.equal(accepted, 1);
  closeUnixctlConnections();
  await close(server);
});

t.test('unixctl: many commands at once queue behind a few connections per socket', async (t) => {
  const path = join(dir, 'busy.ctl');
  let pending = 0;
  let most = 0;
  const server = await serve(path, (m, sock) => {
    most = Math.max(most, ++pending);
    // Answers later, so callers pile up the way they do behind a busy ovs-vswitchd.
    setTimeout(() => {
      pending--;
      sock.write(JSON.stringify({ result: `done ${(m.params as string[])[0]}`, error: null, id: m.id }));
    }, 5);
  });
  const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => unixctl(path, 'ofproto/trace', [String(i)])));
  t.same(answers, Array.from({ length: 40 }, (_, i) => `done ${i}`), 'every command answered, each with its own reply');
  t.ok(most <= UNIXCTL_IN_FLIGHT && most > 1, `at most ${UNIXCTL_IN_FLIGHT} commands in flight at once (saw ${most})`);
  await close(server);
});

t.test('unixctl: a connect refused with EAGAIN (listen backlog full) is retried until the deadline', async (t) => {
  // A server in another process that listens with a backlog of 1 and then does not accept for
  // 600 ms: further connects fail with EAGAIN, as they do when ovs-vswitchd is busy.
  const path = join(dir, 'stalled.ctl');
  const child = spawn(process.execPath, ['-e', `
    const net = require('node:net');
    const s = net.createServer((c) => {
      let buf = '';
      c.setEncoding('utf8');
      c.on('error', () => {});
      c.on('data', (d) => { buf += d; try { const m = JSON.parse(buf); c.write(JSON.stringify({ result: 'ok ' + m.params[0], error: null, id: m.id })); } catch {} });
    });
    s.listen({ path: ${JSON.stringify(path)}, backlog: 1 }, () => {
      process.stdout.write('listening\\n');
      setTimeout(() => { const end = Date.now() + 600; while (Date.now() < end); }, 20);
    });
    process.stdin.on('end', () => process.exit(0));
    process.stdin.resume();
  `], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.teardown(() => child.stdin!.end());
  await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
  await new Promise((r) => setTimeout(r, 60)); // the child is now stalled, not accepting
  // Raw connects first, to show the backlog really overflows with EAGAIN.
  const raw = await Promise.all(
    Array.from({ length: 4 }, () => JsonRpcConnection.connect(path, 2000).then(
        (c) => {
          c.close();
          return 'ok';
        },
        (e: JsonRpcClosed) => e.code ?? e.message,
      ),
    ),
  );
  t.ok(raw.includes('EAGAIN'), `a plain connect fails with EAGAIN while the server is stalled (${raw.join(', ')})`);
  await new Promise((r) => setTimeout(r, 20));
  const answers = await Promise.all(Array.from({ length: 4 }, (_, i) => unixctl(path, 'version', [String(i)], 5000)));
  t.same(answers, ['ok 0', 'ok 1', 'ok 2', 'ok 3'], 'unixctl waits it out and every command is answered');
});
