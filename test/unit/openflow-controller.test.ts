import t, { type Test } from 'tap';
import { FlowBundleError, OpenFlowController } from '../../daemon/ovs/openflow/controller.js';
import { addEntry, deleteEntry } from '../../daemon/ovs/flow-programmer.js';
import { runPacketInLoop } from '../../daemon/ovs/openflow/dispatch.js';
import { sendRejectReply } from '../../daemon/enforcement/reject/index.js';
import type { PacketIn } from '../../daemon/ovs/openflow/wire.js';
import { FakeSwitch, header, oxm, packetIn2, u32 } from './openflow-fakeswitch.js';

const FRAME = Buffer.from('0a000000000b0a000000000a08004500', 'hex');
const pin = (i: number) => packetIn2(1000 + i, { packet: FRAME, table: 3, cookie: BigInt(i), reason: 1, metadata: oxm(0x8000, 0, u32(i)), userdata: Buffer.from([1, 2]) });

async function setup(t: Test, opts: Partial<ConstructorParameters<typeof OpenFlowController>[0]> = {}) {
  const sw = new FakeSwitch();
  await sw.listen();
  const c = new OpenFlowController({ socketPath: sw.path, reconnectMinMs: 20, reconnectMaxMs: 100, ...opts });
  t.teardown(async () => {
    await c.close();
    await sw.destroy();
  });
  return { sw, c };
}

t.test('handshake: HELLO, features, packet-in format, meters, then connected', async (t) => {
  const { sw, c } = await setup(t, { meters: [{ meterId: 256, rate: 100, burst: 200 }] });
  c.start();
  const features = await c.waitConnected();
  t.equal(features.datapathId, 0xabcn);
  const types = sw.received.map((r) => r.type);
  t.equal(types[0], 0, 'HELLO first');
  t.ok(types.indexOf(5) > 0, 'FEATURES_REQUEST');
  const setConfig = sw.received.find((r) => r.type === 9);
  t.equal(setConfig?.msg.readUInt16BE(10), 0xffff, 'miss_send_len set: OVS sends async messages to this service connection');
  const fmt = sw.received.find((r) => r.type === 4);
  t.equal(fmt?.msg.readUInt32BE(12), 16, 'NXT_SET_PACKET_IN_FORMAT');
  t.equal(fmt?.msg.readUInt32BE(16), 2, 'NXT_PACKET_IN2');
  const meter = sw.received.find((r) => r.type === 29);
  t.equal(meter?.msg.readUInt32BE(12), 256, 'meter installed');
  t.ok(sw.received.every((r) => r.msg[0] === 6), 'every message is OpenFlow 1.5');
  t.ok(c.isConnected);
});

t.test('packet-ins are delivered in order with their metadata; echo requests answered', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  for (let i = 1; i <= 5; i++) sw.send(pin(i));
  const got: PacketIn[] = [];
  for await (const p of c.packetIns()) {
    got.push(p);
    if (got.length === 5) break;
  }
  t.same(got.map((p) => [p.inPort, p.cookie, p.tableId]), [1, 2, 3, 4, 5].map((i) => [i, BigInt(i), 3]));
  t.same(got[0]!.packet, FRAME);
  sw.send(Buffer.concat([header(2, 12, 77), Buffer.from('ping')]));
  const reply = await sw.waitFor((r) => r.type === 3 && r.xid === 77);
  t.equal(reply.msg.subarray(8).toString(), 'ping', 'echo reply carries the request payload');
  t.equal(c.stats().packetIns, 5);
});

t.test('a slow consumer: the bounded queue drops and counts, control traffic still flows', async (t) => {
  const { sw, c } = await setup(t, { queueSize: 4 });
  c.start();
  await c.waitConnected();
  for (let i = 1; i <= 10; i++) sw.send(pin(i));
  await c.barrier(); // the switch answers after the packet-ins: they have all been read
  const s = c.stats();
  t.equal(s.packetIns, 10);
  t.equal(s.queued, 4);
  t.equal(s.packetInsDropped, 6);
  const kept = [c.takePacketIn(), c.takePacketIn(), c.takePacketIn(), c.takePacketIn(), c.takePacketIn()];
  t.same(kept.map((p) => p?.inPort), [1, 2, 3, 4, undefined], 'the oldest are kept');
});

t.test('packet-out reaches the switch; refused while disconnected', async (t) => {
  const { sw, c } = await setup(t);
  t.notOk(c.packetOut({ packet: FRAME, actions: [{ type: 'output', port: 3 }] }), 'not connected yet');
  c.start();
  await c.waitConnected();
  const mark = sw.received.length;
  t.ok(c.packetOut({ packet: FRAME, inPort: 2, actions: [{ type: 'output', port: 3 }], registers: { 0: 0x2000 } }));
  const po = await sw.waitFor((r) => r.type === 13, mark);
  t.same(po.msg.subarray(po.msg.length - FRAME.length), FRAME);
  t.same(c.stats().packetOuts, 1);
  t.same(c.stats().packetOutsDropped, 1);
});

t.test('switch restart: reconnects, replays setup, meter ADD falls back to MODIFY', async (t) => {
  const { sw, c } = await setup(t, { meters: [{ meterId: 256, rate: 100, burst: 200 }] });
  const events: string[] = [];
  c.on('connected', () => events.push('connected'));
  c.on('disconnected', () => events.push('disconnected'));
  c.start();
  await c.waitConnected();
  await sw.stop();
  await new Promise((r) => setTimeout(r, 150)); // a few failed reconnect attempts (ENOENT/ECONNREFUSED)
  t.notOk(c.isConnected);
  const mark = sw.received.length;
  await sw.listen(); // existingMeters persists: the meter survived, as with an agent restart
  await c.waitConnected();
  t.same(events, ['connected', 'disconnected', 'connected']);
  const meterMods = sw.received.slice(mark).filter((r) => r.type === 29).map((r) => r.msg.readUInt16BE(8));
  t.same(meterMods, [0, 1], 'ADD rejected as existing, then MODIFY');
  sw.send(pin(42));
  const next = await c.packetIns().next();
  t.equal(next.value?.inPort, 42, 'packet-ins flow on the new connection');
  t.equal(c.stats().connects, 2);
});

t.test('a bridge without OpenFlow 1.5 is refused with a clear reason and retried', async (t) => {
  const sw0 = new FakeSwitch();
  sw0.versions = [1, 4];
  await sw0.listen();
  const warnings: string[] = [];
  const c = new OpenFlowController({
    socketPath: sw0.path,
    reconnectMinMs: 20,
    log: { debug() {}, info() {}, warn: (o: object) => warnings.push(JSON.stringify(o)) },
  });
  t.teardown(async () => {
    await c.close();
    await sw0.destroy();
  });
  c.start();
  await t.rejects(c.waitConnected(300), /no OpenFlow connection/);
  t.match(warnings.join('\n'), /not 1\.5 \(0x06\): set Bridge protocols=OpenFlow15/);
  t.ok(sw0.conns.length >= 2, 'retried');
});

t.test('a hung switch (no echo replies) is dropped and reconnected', async (t) => {
  const { sw, c } = await setup(t, { echoIntervalMs: 30 });
  c.start();
  await c.waitConnected();
  sw.answerEcho = false;
  const lost = new Promise((resolve) => c.once('disconnected', resolve));
  t.match(await lost, /closed/);
  sw.answerEcho = true;
  await c.waitConnected();
  t.equal(c.stats().connects, 2);
});

t.test('switch errors for packet-outs are reported, not fatal', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  const err = new Promise<[{ type: number; code: number }, number]>((resolve) => c.once('switchError', (e, x) => resolve([e, x])));
  sw.send(Buffer.concat([header(1, 12, 4242), Buffer.from([0, 2, 0, 4])]));
  const [info, xid] = await err;
  t.same([info.type, info.code, xid], [2, 4, 4242]);
  t.ok(c.isConnected);
  t.equal(c.stats().switchErrors, 1);
});

t.test('close ends the packet-in iterator and rejects waiters', async (t) => {
  const { c } = await setup(t);
  c.start();
  await c.waitConnected();
  const it = c.packetIns();
  const pending = it.next();
  await c.close();
  t.same(await pending, { value: undefined, done: true });
  t.throws(() => new OpenFlowController({ socketPath: '' }), /socketPath is required/);
});

t.test('dispatch loop: handlers by punt category, failures isolated; reject replies go out of in_port', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  // A TCP SYN from 10.0.0.1:1000 to 10.0.0.2:80.
  const syn = Buffer.from(
    '0a000000000b0a000000000a0800' + '450000280000400040060000' + '0a0000010a000002' + '03e80050' + '00000064' + '00000000' + '50020000' + '00000000',
    'hex',
  );
  const mk = (userdata: Buffer | undefined, inPort: number) =>
    packetIn2(1, { packet: syn, table: 5, cookie: 1n, reason: 1, metadata: oxm(0x8000, 0, u32(inPort)), ...(userdata ? { userdata } : {}) });
  const seen: number[] = [];
  const errors: string[] = [];
  const loop = runPacketInLoop(
    c,
    {
      1: (pin) => {
        seen.push(pin.inPort);
        const r = sendRejectReply(c, pin);
        if (!r.ok) throw new Error(r.reason);
      },
      2: () => {
        throw new Error('handler bug');
      },
    },
    (e) => errors.push((e as Error).message),
  );
  const mark = sw.received.length;
  sw.send(mk(Buffer.from([1, 2]), 7));
  sw.send(mk(Buffer.from([2, 0]), 8));
  sw.send(mk(undefined, 9));
  sw.send(mk(Buffer.from([1, 2]), 10));
  const outs: Buffer[] = [];
  for (let i = 0; i < 2; i++) outs.push((await sw.waitFor((r) => r.type === 13 && !outs.includes(r.msg), mark)).msg);
  await c.close();
  const stats = await loop;
  t.same(stats, { handled: 2, unclaimed: 1, failed: 1 });
  t.same(errors, ['handler bug']);
  t.same(seen, [7, 10]);
  for (const [i, po] of outs.entries()) {
    const matchLen = po.readUInt16BE(18);
    const action = po.subarray(16 + ((matchLen + 7) & ~7));
    t.equal(action.readUInt32BE(4), [7, 10][i], 'output to the in_port of the punted packet');
    const frame = action.subarray(16);
    t.equal(frame.length, 54, 'a 54-byte RST frame');
    t.equal(frame[14 + 20 + 13], 0x14, 'RST|ACK');
    t.equal(frame.readUInt32BE(14 + 20 + 8), 101, 'acknowledges the SYN');
  }
});

// ---- flow programming and read-back ----

const flowEntry = (text: string) => addEntry(text);

t.test('flow bundle: OPEN, one ADD per flow-mod under its own xid, barrier, COMMIT', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  const from = sw.received.length;
  await c.flowBundle([deleteEntry(0x51ce000000000001n), flowEntry('table=1,priority=5,cookie=0x51ce000000000002,ip actions=drop'), flowEntry('table=2,priority=6,cookie=0x51ce000000000003,arp actions=goto_table:3')]);
  const got = sw.received.slice(from);
  t.same(got.map((r) => r.type), [33, 34, 34, 34, 20, 33], 'OPEN, three adds, BARRIER, COMMIT');
  t.same([got[0]!.msg.readUInt16BE(12), got[5]!.msg.readUInt16BE(12)], [0, 4], 'OPEN_REQUEST ... COMMIT_REQUEST');
  t.ok(got.filter((r) => r.type === 33 || r.type === 34).every((r) => r.msg.readUInt16BE(14) === 3), 'atomic | ordered everywhere');
  const ids = new Set(got.filter((r) => r.type === 33 || r.type === 34).map((r) => r.msg.readUInt32BE(8)));
  t.equal(ids.size, 1, 'one bundle id');
  for (const add of got.filter((r) => r.type === 34)) {
    t.equal(add.msg.readUInt32BE(20), add.xid, 'the inner flow-mod carries the add message\'s xid');
    t.equal(add.msg[17], 14, 'inner message is a FLOW_MOD');
  }
  t.equal(got[1]!.msg[16 + 8 + 17], 3, 'the delete comes first (OFPFC_DELETE)');
  t.equal(got[2]!.msg.readBigUInt64BE(16 + 8), 0x51ce000000000002n, 'then the adds, in order');
});

t.test('a refused add: the bundle is discarded, the error names the flow', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  sw.bundleAddError = (fm) => (fm.readBigUInt64BE(8) === 0x51ce000000000002n ? [2, 10] : undefined);
  const from = sw.received.length;
  const bad = 'table=1,priority=5,cookie=0x51ce000000000002,ip actions=drop';
  const err = await c.flowBundle([flowEntry('table=1,priority=5,cookie=0x51ce000000000001,ip actions=drop'), flowEntry(bad)]).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof FlowBundleError, 'a FlowBundleError');
  t.equal((err as FlowBundleError).flow, bad);
  t.equal((err as Error).message, `the switch refused flow "${bad}": OFPET_BAD_ACTION/OFPBAC_MATCH_INCONSISTENT (type 2, code 10); the bundle was discarded, no flow of it applied`);
  const controls = sw.received.slice(from).filter((r) => r.type === 33).map((r) => r.msg.readUInt16BE(12));
  t.same(controls, [0, 6], 'OPEN then DISCARD, never COMMIT');
  t.equal(c.stats().switchErrors, 0, 'the error was the bundle\'s, not reported as stray');
});

t.test('a large bundle: every add in order; an add that cannot be encoded stops it before anything is sent', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  let from = sw.received.length;
  const many = Array.from({ length: 700 }, (_, i) => flowEntry(`table=1,priority=${i + 1},cookie=0x51ce00000000${(i + 1).toString(16).padStart(4, '0')},ip actions=drop`));
  await c.flowBundle(many);
  let got = sw.received.slice(from);
  t.equal(got.filter((r) => r.type === 34).length, 700, 'every add arrived');
  t.same(got.filter((r) => r.type === 34).map((r) => r.msg.readUInt16BE(16 + 8 + 22)), many.map((_, i) => i + 1), 'in order');
  t.same(got.filter((r) => r.type === 33).map((r) => r.msg.readUInt16BE(12)), [0, 4], 'OPEN ... COMMIT');

  from = sw.received.length;
  const unencodable = { text: 'an oversized flow', encode: (): Buffer => { throw new Error('OpenFlow message of 70000 bytes exceeds 65535'); } };
  await t.rejects(c.flowBundle([...many.slice(0, 300), unencodable, many[300]!]), /exceeds 65535/);
  await c.flowBundle(many.slice(0, 2));
  got = sw.received.slice(from);
  t.same(got.filter((r) => r.type === 33).map((r) => r.msg.readUInt16BE(12)), [0, 4], 'no bundle was opened for it; the next one commits');
  t.equal(got.filter((r) => r.type === 34).length, 2, 'none of its adds was sent');
});

t.test('a flow refused at COMMIT is named too; a commit error of its own is reported by name', async (t) => {
  const { sw, c } = await setup(t);
  c.start();
  await c.waitConnected();
  const texts = ['table=1,priority=5,cookie=0x51ce000000000001,ip actions=drop', 'table=1,priority=6,cookie=0x51ce000000000002,ip actions=drop'];
  sw.commitError = { index: 1, type: 5, code: 1 };
  await t.rejects(c.flowBundle(texts.map(flowEntry)), { message: `the switch refused flow "${texts[1]}": OFPET_FLOW_MOD_FAILED/OFPFMFC_TABLE_FULL (type 5, code 1); the bundle was discarded, no flow of it applied` });
  sw.commitError = undefined;
  sw.commitOnlyError = [17, 14];
  await t.rejects(c.flowBundle(texts.map(flowEntry)), { message: 'the switch refused to commit a bundle of 2 flow-mods: OFPET_BUNDLE_FAILED/OFPBFC_TIMEOUT (type 17, code 14)' });
  sw.commitOnlyError = undefined;
  await c.flowBundle(texts.map(flowEntry));
  t.pass('the next bundle goes through');
});

t.test('flow read-back: descriptions over several reply parts, aggregate count; not connected is an error', async (t) => {
  const { sw, c } = await setup(t);
  await t.rejects(c.flowDesc({ cookie: 0n, cookieMask: 0n }), /not connected/);
  await t.rejects(c.flowBundle([flowEntry('table=0 actions=drop')]), /not connected/);
  c.start();
  await c.waitConnected();
  sw.flowDescs = [1, 2, 3, 4, 5].map((i) => ({ table: i, priority: 100 + i, cookie: 0x51ce000000000000n + BigInt(i), packets: BigInt(i), bytes: BigInt(i * 60) }));
  const from = sw.received.length;
  const got = await c.flowDesc({ cookie: 0x51ce000000000000n, cookieMask: 0xffff000000000000n });
  t.same(got, sw.flowDescs, 'five flows from three parts (OFPMPF_REPLY_MORE)');
  const req = sw.received.slice(from).find((r) => r.type === 18)!;
  t.equal(req.msg[16], 0xff, 'all tables');
  t.same([req.msg.readBigUInt64BE(32), req.msg.readBigUInt64BE(40)], [0x51ce000000000000n, 0xffff000000000000n], 'cookie filter');
  t.same(await c.aggregateStats({ cookie: 0x51ce000000000000n, cookieMask: 0xffff000000000000n }), { flowCount: 5, packets: 7n, bytes: 700n });
});
