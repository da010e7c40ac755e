import t from 'tap';
import {
  decodeHelloVersions,
  decodeOxmEntries,
  decodePacketIn2,
  decodeStandardPacketIn,
  encodeHello,
  encodeMeterMod,
  encodePacketOut,
  encodeSetConfig,
  encodeSetPacketInFormat,
  MessageFramer,
  metadataFromOxm,
  OFPMC,
  OFPP,
} from '../../daemon/ovs/openflow/wire.js';
import { decodePuntUserdata, meterText, packetInMeters, puntActions, PuntCategory, PuntOp } from '../../daemon/flows/punt.js';
import { BoundedQueue } from '../../daemon/ovs/openflow/queue.js';

import { header, oxm, packetIn2, prop, u32, u64 } from './openflow-fakeswitch.js';

const FRAME = Buffer.from('0a000000000b0a000000000a0800450000211234', 'hex');

t.test('HELLO carries a version bitmap with only OpenFlow 1.5', async (t) => {
  const h = encodeHello(7);
  t.equal(h.toString('hex'), '0600001000000007' + '00010008' + '00000040');
  t.same(decodeHelloVersions(h), [6]);
  const ovs = Buffer.concat([header(0, 16, 1), Buffer.from('000100080000007e', 'hex')]);
  t.same(decodeHelloVersions(ovs), [1, 2, 3, 4, 5, 6], 'OVS offering 1.0..1.5');
  t.same(decodeHelloVersions(header(0, 8, 1).fill(4, 0, 1)), [1, 2, 3, 4], 'no bitmap: every version up to the header version');
});

t.test('SET_CONFIG and NXT_SET_PACKET_IN_FORMAT layouts', async (t) => {
  t.equal(encodeSetConfig(2).toString('hex'), '0609000c00000002' + '0000ffff');
  t.equal(encodeSetPacketInFormat(3).toString('hex'), '0604001400000003' + '00002320' + '00000010' + '00000002');
});

t.test('framer reassembles messages split and merged across chunks', async (t) => {
  const a = encodeSetConfig(1);
  const b = encodeHello(2);
  const c = encodeSetConfig(3);
  const stream = Buffer.concat([a, b, c]);
  const f = new MessageFramer();
  const got: Buffer[] = [];
  for (const cut of [[0, 5], [5, 13], [13, 30], [30, stream.length]]) got.push(...f.push(stream.subarray(cut[0], cut[1])));
  t.same(got.map((m) => m.toString('hex')), [a, b, c].map((m) => m.toString('hex')));
  t.equal(f.buffered, 0);
  t.throws(() => new MessageFramer().push(Buffer.from('0600000400000000', 'hex')), /announces length 4/);
});

t.test('NXT_PACKET_IN2: every property and the OF1.5 register encoding', async (t) => {
  const metadata = Buffer.concat([
    oxm(0x8000, 0, u32(7)), // in_port 7
    oxm(0x8001, 0, Buffer.concat([u32(0x2a), u32(0x11)])), // xreg0: reg0=0x2a, reg1=0x11
    oxm(0x8001, 1, Buffer.concat([u32(0), u32(0xdeadbeef)])), // xreg1: reg3
    oxm(0x0001, 105, u32(0x21)), // ct_state +new+trk
    oxm(0x0001, 106, Buffer.from([0xff, 0xf0])), // ct_zone 65520
    oxm(0x0001, 107, u32(0x20)),
    oxm(0x0001, 108, Buffer.concat([Buffer.alloc(12), u32(5)])),
    oxm(0x0001, 33, u32(0x80000000)),
    oxm(0x0001, 9, u32(99)), // NXM_NX_REG9
    oxm(0xffff, 1, Buffer.concat([u32(0x4f4e4600), Buffer.from([1, 2])])), // experimenter field: skipped
  ]);
  const msg = packetIn2(9, { packet: FRAME, table: 21, cookie: 0x51ce02abcdef0123n, reason: 1, metadata, userdata: Buffer.from([1, 3, 9]), extra: [prop(77, Buffer.from([1, 2, 3]))] });
  const p = decodePacketIn2(msg);
  t.equal(p.tableId, 21);
  t.equal(p.cookie, 0x51ce02abcdef0123n);
  t.equal(p.reason, 1);
  t.equal(p.inPort, 7);
  t.same(p.registers.slice(0, 10), [0x2a, 0x11, 0, 0xdeadbeef, 0, 0, 0, 0, 0, 99]);
  t.equal(p.registers.length, 16);
  t.equal(p.ctState, 0x21);
  t.equal(p.ctZone, 65520);
  t.equal(p.ctMark, 0x20);
  t.equal(p.ctLabel, 5n);
  t.equal(p.pktMark, 0x80000000);
  t.same(p.packet, FRAME);
  t.equal(p.totalLength, FRAME.length);
  t.same(p.userdata, Buffer.from([1, 3, 9]));
  t.equal(p.hasContinuation, false);
  t.equal(p.bufferId, 0xffffffff);
});

t.test('NXT_PACKET_IN2 unaligned cookie, truncation, errors', async (t) => {
  const body = Buffer.concat([u32(0x2320), u32(30), prop(0, FRAME), prop(1, u32(1500)), prop(4, u64(42n))]);
  const p = decodePacketIn2(Buffer.concat([header(4, 8 + body.length, 1), body]));
  t.equal(p.cookie, 42n, 'cookie without alignment padding');
  t.equal(p.totalLength, 1500, 'full length of a truncated packet');
  t.equal(p.userdata, undefined);
  t.same(p.registers, new Array(16).fill(0), 'no metadata: all zero');
  const noPacket = Buffer.concat([u32(0x2320), u32(30), prop(3, Buffer.from([1]))]);
  t.throws(() => decodePacketIn2(Buffer.concat([header(4, 8 + noPacket.length, 1), noPacket])), /without a packet/);
  const overrun = Buffer.concat([u32(0x2320), u32(30), Buffer.from([0, 0, 0, 200])]);
  t.throws(() => decodePacketIn2(Buffer.concat([header(4, 8 + overrun.length, 1), overrun])), /overruns/);
  t.throws(() => decodeOxmEntries(Buffer.from([0x80, 0, 0, 8, 1, 2])), /overruns/);
});

t.test('standard OFPT_PACKET_IN is decoded too', async (t) => {
  const match = oxm(0x8000, 0, u32(3));
  const matchBlock = Buffer.alloc(8 + ((4 + match.length + 7) & ~7) - 4);
  matchBlock.writeUInt16BE(1, 0);
  matchBlock.writeUInt16BE(4 + match.length, 2);
  match.copy(matchBlock, 4);
  const fixed = Buffer.alloc(16);
  fixed.writeUInt32BE(0xffffffff, 0);
  fixed.writeUInt16BE(FRAME.length, 4);
  fixed[6] = 1;
  fixed[7] = 4;
  fixed.writeBigUInt64BE(0x77n, 8);
  const block = Buffer.concat([fixed, matchBlock.subarray(0, (4 + match.length + 7) & ~7), Buffer.alloc(2), FRAME]);
  const p = decodeStandardPacketIn(Buffer.concat([header(10, 8 + block.length, 1), block]));
  t.equal(p.inPort, 3);
  t.equal(p.tableId, 4);
  t.equal(p.cookie, 0x77n);
  t.same(p.packet, FRAME);
});

t.test('PACKET_OUT 1.5 layout: in_port and registers in the match, then actions, then data', async (t) => {
  const m = encodePacketOut(5, { packet: FRAME, inPort: 3, actions: [{ type: 'output', port: 9 }, { type: 'resubmit', table: 12 }], registers: { 0: 0x2000, 3: 7 } });
  t.equal(m[1], 13);
  t.equal(m.readUInt16BE(2), m.length);
  t.equal(m.readUInt32BE(8), 0xffffffff, 'no buffer');
  t.equal(m.readUInt16BE(12), 32, 'actions length');
  t.equal(m.readUInt16BE(16), 1, 'OXM match');
  const matchLen = m.readUInt16BE(18);
  t.equal(matchLen, 4 + 8 + 12 + 12);
  const fields = decodeOxmEntries(m.subarray(20, 16 + matchLen));
  t.same(metadataFromOxm(fields).registers.slice(0, 4), [0x2000, 0, 0, 7]);
  t.equal(metadataFromOxm(fields).inPort, 3);
  const actions = m.subarray(16 + ((matchLen + 7) & ~7));
  t.equal(actions.readUInt16BE(0), 0, 'OFPAT_OUTPUT');
  t.equal(actions.readUInt32BE(4), 9);
  t.equal(actions.readUInt16BE(16), 0xffff, 'experimenter action');
  t.equal(actions.readUInt32BE(20), 0x2320);
  t.equal(actions.readUInt16BE(24), 14, 'NXAST_RESUBMIT_TABLE');
  t.equal(actions.readUInt16BE(26), 0xfff8, 'in_port kept');
  t.equal(actions[28], 12);
  t.same(actions.subarray(32), FRAME);
  const plain = encodePacketOut(6, { packet: FRAME, actions: [{ type: 'output', port: OFPP.IN_PORT }] });
  t.equal(metadataFromOxm(decodeOxmEntries(plain.subarray(20, 28))).inPort, OFPP.CONTROLLER, 'default in_port CONTROLLER');
  t.throws(() => encodePacketOut(1, { packet: FRAME, actions: [], registers: { 16: 1 } }), /register index 16/);
  t.throws(() => encodePacketOut(1, { packet: Buffer.alloc(70000), actions: [] }), /exceeds/);
});

t.test('METER_MOD: pktps drop band, validation', async (t) => {
  const m = encodeMeterMod(4, OFPMC.ADD, { meterId: 256, rate: 5000, burst: 10000 });
  t.equal(m.toString('hex'), '061d002000000004' + '0000' + '000e' + '00000100' + '0001' + '0010' + '00001388' + '00002710' + '00000000');
  t.throws(() => encodeMeterMod(1, OFPMC.ADD, { meterId: 0, rate: 1, burst: 1 }), /meter id 0/);
  t.throws(() => encodeMeterMod(1, OFPMC.ADD, { meterId: 5, rate: 0, burst: 1 }), /rate 0/);
});

t.test('punt contract: metered controller action and userdata', async (t) => {
  t.equal(puntActions({ category: PuntCategory.policy, ops: PuntOp.log | PuntOp.reject }), 'controller(userdata=01.03,meter_id=256)');
  t.equal(puntActions({ category: PuntCategory.dns, maxLen: 512 }), 'controller(max_len=512,userdata=02.00,meter_id=258)');
  t.same(decodePuntUserdata(Buffer.from([1, 2, 7])), { category: 1, ops: 2, extra: Buffer.from([7]) });
  t.equal(decodePuntUserdata(undefined), undefined);
  t.equal(puntActions({ category: PuntCategory.trace, extra: Buffer.from([14]) }), 'controller(userdata=08.00.0e,meter_id=260)', 'traceflow observations: their own meter');
  t.same(packetInMeters(100), [{ meterId: 256, rate: 100, burst: 200 }, { meterId: 258, rate: 100, burst: 200 }, { meterId: 260, rate: 100, burst: 200 }], 'one meter per category group');
  t.equal(meterText({ meterId: 256, rate: 5, burst: 10 }), 'meter=256,pktps,burst,stats,bands=type=drop,rate=5,burst_size=10');
  t.throws(() => packetInMeters(0), /not a positive integer/);
});

t.test('bounded queue drops and counts when full; iterator waits and ends', async (t) => {
  const q = new BoundedQueue<number>(3);
  for (let i = 0; i < 5; i++) q.push(i);
  t.equal(q.length, 3);
  t.equal(q.dropped, 2);
  const it = q[Symbol.asyncIterator]();
  t.same([(await it.next()).value, (await it.next()).value, (await it.next()).value], [0, 1, 2], 'FIFO, oldest kept');
  const waiting = it.next();
  q.push(9);
  t.same(await waiting, { value: 9, done: false }, 'a waiting consumer gets the next push');
  const ending = it.next();
  q.end();
  t.same(await ending, { value: undefined, done: true });
  t.notOk(q.push(1));
  t.throws(() => new BoundedQueue(0), /capacity 0/);
});
