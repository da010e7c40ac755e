import t from 'tap';
import { packetFields } from '../../daemon/enforcement/auditlog/format.js';
import { ipv6ToString } from '../../daemon/packet.js';
import { buildRejectReply } from '../../daemon/enforcement/reject/reject.js';
import { CLIENT_MAC, csum, mac, macStr, SERVER_MAC } from './reject-helpers.js';

// Independent test-side encoding and checking (RFC 8200 / RFC 4443 / RFC 793).
const CLIENT = 'fd00:10:0:0:0:0:0:41';
const SERVER = 'fd00:10:0:0:0:0:0:5';
function ip6(s: string): Buffer {
  const b = Buffer.alloc(16);
  s.split(':').forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2));
  return b;
}
function pseudoOk(out: Buffer, l3: number, proto: number): boolean {
  const upper = out.subarray(l3 + 40);
  const pseudo = Buffer.alloc(40);
  out.copy(pseudo, 0, l3 + 8, l3 + 40);
  pseudo.writeUInt32BE(upper.length, 32);
  pseudo[39] = proto;
  return csum(pseudo, upper) === 0;
}
function frame6(next: number, payload: Buffer, opts: { dst?: string; ext?: Buffer } = {}): Buffer {
  const h = Buffer.alloc(40);
  h.writeUInt32BE(0x60000000, 0);
  const body = Buffer.concat([opts.ext ?? Buffer.alloc(0), payload]);
  h.writeUInt16BE(body.length, 4);
  h[6] = opts.ext ? 0 : next; // the extension given is a hop-by-hop header
  h[7] = 64;
  ip6(CLIENT).copy(h, 8);
  ip6(opts.dst ?? SERVER).copy(h, 24);
  return Buffer.concat([mac(SERVER_MAC), mac(CLIENT_MAC), Buffer.from([0x86, 0xdd]), h, body]);
}
const syn = () => {
  const s = Buffer.alloc(20);
  s.writeUInt16BE(40000, 0);
  s.writeUInt16BE(443, 2);
  s.writeUInt32BE(7000, 4);
  s[12] = 0x50;
  s[13] = 0x02;
  return s;
};

t.test('IPv6 TCP SYN -> RST+ACK with valid checksum, addresses swapped', async (t) => {
  const r = buildRejectReply(frame6(6, syn()));
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.kind, 'tcp-rst');
  const out = r.frame;
  t.equal(macStr(out.subarray(0, 6)), CLIENT_MAC);
  t.equal(macStr(out.subarray(6, 12)), SERVER_MAC);
  t.equal(out.readUInt16BE(12), 0x86dd);
  t.equal(out[14]! >> 4, 6);
  t.equal(out.readUInt16BE(18), 20, 'payload length');
  t.equal(out[20], 6, 'next header TCP');
  t.same(out.subarray(22, 38), ip6(SERVER), 'src = original destination');
  t.same(out.subarray(38, 54), ip6(CLIENT), 'dst = original source');
  t.equal(out.readUInt16BE(54), 443);
  t.equal(out.readUInt16BE(56), 40000);
  t.equal(out.readUInt32BE(62), 7001, 'ack = seq + 1');
  t.equal(out[67], 0x14, 'RST|ACK');
  t.ok(pseudoOk(out, 14, 6), 'TCP checksum valid');
});

t.test('IPv6 UDP behind a hop-by-hop header -> ICMPv6 1/1 quoting the packet', async (t) => {
  const udp = Buffer.from('9c400035000d0000' + '6869686921', 'hex');
  const hbh = Buffer.from([17, 0, 5, 2, 0, 0, 1, 0]); // next = UDP, router alert
  const original = frame6(17, udp, { ext: hbh });
  const r = buildRejectReply(original);
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.kind, 'icmpv6-admin-prohibited');
  const out = r.frame;
  t.equal(out[20], 58, 'next header ICMPv6');
  t.equal(out[54], 1, 'type 1 destination unreachable');
  t.equal(out[55], 1, 'code 1 administratively prohibited');
  t.ok(pseudoOk(out, 14, 58), 'ICMPv6 checksum valid');
  t.same(out.subarray(62), original.subarray(14), 'the whole (small) packet is quoted');
  t.same(packetFields(original), { srcIp: 'fd00:10::41', dstIp: 'fd00:10::5', protocol: 'UDP', length: 40 + 8 + 13, srcPort: 40000, dstPort: 53 });
});

t.test('quote is capped so the reply fits the IPv6 minimum MTU', async (t) => {
  const r = buildRejectReply(frame6(17, Buffer.alloc(1400, 1)));
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.frame.length - 14, 1280);
  t.ok(pseudoOk(r.frame, 14, 58));
});

t.test('no IPv6 reply where RFC 4443 forbids one', async (t) => {
  const icmpErr = Buffer.from([1, 4, 0, 0, 0, 0, 0, 0]);
  const rst = syn();
  rst[13] = 0x04;
  const later = Buffer.from([17, 0, 0x00, 0x10, 0, 0, 0, 1]); // fragment header, offset 2
  const fragFrame = frame6(44, Buffer.alloc(8));
  // rewrite next header to fragment and splice the fragment header in front
  const withFrag = Buffer.concat([fragFrame.subarray(0, 54), later, fragFrame.subarray(54)]);
  withFrag[20] = 44;
  withFrag.writeUInt16BE(16, 18);
  const cases: [string, Buffer, RegExp][] = [
    ['ICMPv6 error', frame6(58, icmpErr), /ICMPv6 error/],
    ['TCP RST', frame6(6, rst), /RST/],
    ['multicast destination', frame6(17, Buffer.alloc(8), { dst: 'ff02:0:0:0:0:0:0:fb' }), /not a unicast/],
    ['later fragment', withFrag, /non-first fragment/],
  ];
  for (const [name, f, why] of cases) {
    const r = buildRejectReply(f);
    t.notOk(r.ok, name);
    if (!r.ok) t.match(r.reason, why, `${name}: ${r.reason}`);
  }
  const echo = Buffer.from([128, 0, 0, 0, 0, 1, 0, 1]);
  t.ok(buildRejectReply(frame6(58, echo)).ok, 'an echo request is answered');
});

t.test('IPv6 text form (RFC 5952)', async (t) => {
  t.equal(ipv6ToString(ip6('fd00:10:0:0:0:0:0:41')), 'fd00:10::41');
  t.equal(ipv6ToString(ip6('0:0:0:0:0:0:0:1')), '::1');
  t.equal(ipv6ToString(ip6('1:0:0:2:0:0:0:3')), '1:0:0:2::3');
  t.equal(ipv6ToString(ip6('1:2:3:4:5:6:7:8')), '1:2:3:4:5:6:7:8');
  t.equal(ipv6ToString(ip6('1:0:2:3:4:5:6:7')), '1:0:2:3:4:5:6:7', 'a single zero group is not compressed');
});
