/**
 * Meter statistics over the agent's OpenFlow connection: the request's bytes, the reply's decoding
 * (parts joined, bad lengths refused) and the controller's round trip against a fake switch.
 */
import t, { type Test } from 'tap';
import { OpenFlowController } from '../../daemon/ovs/openflow/controller.js';
import { decodeMeterStatsReply, encodeMeterStatsRequest, OFPM_ALL } from '../../daemon/ovs/openflow/wire.js';
import { FakeSwitch } from './openflow-fakeswitch.js';

async function setup(t: Test) {
  const sw = new FakeSwitch();
  await sw.listen();
  const c = new OpenFlowController({ socketPath: sw.path, reconnectMinMs: 20, reconnectMaxMs: 100 });
  t.teardown(async () => {
    await c.close();
    await sw.destroy();
  });
  return { sw, c };
}

t.test('the request: OFPT_MULTIPART_REQUEST of type OFPMP_METER_STATS for all meters', async (t) => {
  const m = encodeMeterStatsRequest(42);
  t.equal(m.length, 24);
  t.same([m[0], m[1], m.readUInt16BE(2), m.readUInt32BE(4)], [6, 18, 24, 42], 'OpenFlow 1.5 header, type 18');
  t.equal(m.readUInt16BE(8), 9, 'multipart type: meter statistics');
  t.equal(m.readUInt32BE(16), OFPM_ALL, 'every meter');
  t.equal(encodeMeterStatsRequest(1, 256).readUInt32BE(16), 256, 'or one');
});

t.test('the reply: entries with their bands; truncated or mis-sized entries refused', async (t) => {
  const entry = Buffer.alloc(56);
  entry.writeUInt32BE(258, 0);
  entry.writeUInt16BE(56, 4);
  entry.writeUInt32BE(3, 12);
  entry.writeBigUInt64BE(1000n, 16);
  entry.writeBigUInt64BE(64000n, 24);
  entry.writeBigUInt64BE(250n, 40);
  entry.writeBigUInt64BE(16000n, 48);
  const reply = (flags: number, body: Buffer) => {
    const h = Buffer.alloc(16);
    h[0] = 6;
    h[1] = 19;
    h.writeUInt16BE(16 + body.length, 2);
    h.writeUInt16BE(9, 8);
    h.writeUInt16BE(flags, 10);
    return Buffer.concat([h, body]);
  };
  t.same(decodeMeterStatsReply(reply(0, entry)), {
    more: false,
    meters: [{ meterId: 258, flowCount: 3, packetsIn: 1000n, bytesIn: 64000n, bands: [{ packets: 250n, bytes: 16000n }] }],
  });
  t.equal(decodeMeterStatsReply(reply(1, entry)).more, true, 'OFPMPF_REPLY_MORE');
  t.same(decodeMeterStatsReply(reply(0, Buffer.alloc(0))).meters, [], 'no meters');
  t.throws(() => decodeMeterStatsReply(reply(0, entry.subarray(0, 30))), /entry at byte 16 is truncated/, 'truncated entry');
  const bad = Buffer.from(entry);
  bad.writeUInt16BE(50, 4);
  t.throws(() => decodeMeterStatsReply(reply(0, bad)), /bad length 50/, 'a length that is not 40 + 16 per band');
  const other = reply(0, entry);
  other.writeUInt16BE(1, 8);
  t.throws(() => decodeMeterStatsReply(other), /not meter statistics/, 'another multipart type');
});

t.test('the controller asks the switch and joins a reply sent in parts', async (t) => {
  const { sw, c } = await setup(t);
  await t.rejects(c.meterStats(), /not connected/, 'refused before the connection is up');
  c.start();
  await c.waitConnected();
  sw.meterStats = [256, 258, 260].map((meterId, i) => ({ meterId, packetsIn: BigInt(100 * (i + 1)), dropped: BigInt(i) }));
  sw.meterStatsPerPart = 2;
  const stats = await c.meterStats();
  t.same(stats.map((m) => [m.meterId, m.packetsIn, m.bands[0]?.packets]), [[256, 100n, 0n], [258, 200n, 1n], [260, 300n, 2n]], 'all three meters from two parts');
  sw.meterStats = [];
  t.same(await c.meterStats(), [], 'a switch without meters');
  t.ok(await c.meterStats().then(() => true), 'the connection still answers after those requests');
});
