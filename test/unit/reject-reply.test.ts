import t, { type Test } from 'tap';
import { buildRejectReply } from '../../daemon/enforcement/reject/reject.js';
import { decodePacket } from '../../daemon/packet.js';
import { CLIENT_MAC, csum, mac, macStr, SERVER_MAC } from './reject-helpers.js';

// Frames are built and checked here with an independent, straightforward implementation.
const CLIENT_IP = '10.10.1.65';
const SERVER_IP = '10.0.0.5';

const ip4 = (s: string) => Buffer.from(s.split('.').map(Number));
const ipStr = (b: Buffer) => [...b].join('.');

function ipv4(proto: number, payload: Buffer, opts: { options?: Buffer; fragOffset?: number; src?: string; dst?: string } = {}): Buffer {
  const options = opts.options ?? Buffer.alloc(0);
  const h = Buffer.alloc(20 + options.length);
  h[0] = 0x40 | ((20 + options.length) / 4);
  h.writeUInt16BE(h.length + payload.length, 2);
  h.writeUInt16BE(0x1234, 4);
  h.writeUInt16BE(opts.fragOffset ?? 0x4000, 6);
  h[8] = 63;
  h[9] = proto;
  ip4(opts.src ?? CLIENT_IP).copy(h, 12);
  ip4(opts.dst ?? SERVER_IP).copy(h, 16);
  options.copy(h, 20);
  h.writeUInt16BE(csum(h), 10);
  return Buffer.concat([h, payload]);
}

function ether(l3: Buffer, opts: { vlan?: number; src?: string; pad?: number } = {}): Buffer {
  const tag = opts.vlan === undefined ? Buffer.alloc(0) : Buffer.from([0x81, 0x00, opts.vlan >> 8, opts.vlan & 0xff]);
  const frame = Buffer.concat([mac(SERVER_MAC), mac(opts.src ?? CLIENT_MAC), tag, Buffer.from([0x08, 0x00]), l3]);
  return opts.pad ? Buffer.concat([frame, Buffer.alloc(opts.pad, 0xee)]) : frame;
}

function tcpSegment(flags: number, seq: number, ack: number, payload = Buffer.alloc(0), withOptions = true): Buffer {
  const options = withOptions ? Buffer.from([2, 4, 0x05, 0xb4, 4, 2, 1, 3, 3, 7, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]) : Buffer.alloc(0);
  const h = Buffer.alloc(20 + options.length);
  h.writeUInt16BE(35402, 0);
  h.writeUInt16BE(80, 2);
  h.writeUInt32BE(seq, 4);
  h.writeUInt32BE(ack, 8);
  h[12] = (h.length / 4) << 4;
  h[13] = flags;
  h.writeUInt16BE(64240, 14);
  options.copy(h, 20);
  return Buffer.concat([h, payload]);
}

const udpDatagram = (payload: Buffer) => {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(40000, 0);
  h.writeUInt16BE(53, 2);
  h.writeUInt16BE(8 + payload.length, 4);
  return Buffer.concat([h, payload]);
};

/** Checks the Ethernet + IPv4 header of a reply and returns the offset of its L4 header. */
function checkReplyIp(t: Test, out: Buffer, proto: number, l3Offset = 14): number {
  t.equal(macStr(out.subarray(0, 6)), CLIENT_MAC, 'eth dst = original source MAC');
  t.equal(macStr(out.subarray(6, 12)), SERVER_MAC, 'eth src = original destination MAC');
  t.equal(out.readUInt16BE(l3Offset - 2), 0x0800, 'EtherType IPv4');
  const iph = out.subarray(l3Offset, l3Offset + 20);
  t.equal(iph[0], 0x45, 'IPv4, 20-byte header');
  t.equal(iph.readUInt16BE(2), out.length - l3Offset, 'IP total length = rest of the frame');
  t.ok(iph[8]! > 0, 'TTL set');
  t.equal(iph[9], proto, 'protocol');
  t.equal(ipStr(iph.subarray(12, 16)), SERVER_IP, 'IP src = original destination');
  t.equal(ipStr(iph.subarray(16, 20)), CLIENT_IP, 'IP dst = original source');
  t.equal(csum(iph), 0, 'IPv4 header checksum valid');
  return l3Offset + 20;
}

function tcpChecksumOk(out: Buffer, at: number): boolean {
  const seg = out.subarray(at);
  const pseudo = Buffer.alloc(12);
  out.copy(pseudo, 0, at - 8, at);
  pseudo[9] = 6;
  pseudo.writeUInt16BE(seg.length, 10);
  return csum(pseudo, seg) === 0;
}

t.test('TCP SYN -> RST+ACK acknowledging the SYN', async (t) => {
  const syn = ether(ipv4(6, tcpSegment(0x02, 0xfffffffe + 1, 0))); // seq 0xffffffff: ack wraps to 0
  const r = buildRejectReply(syn);
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.kind, 'tcp-rst');
  const th = checkReplyIp(t, r.frame, 6);
  t.equal(r.frame.length, 14 + 40, 'no payload, no options');
  t.equal(r.frame.readUInt16BE(th), 80, 'src port = original destination port');
  t.equal(r.frame.readUInt16BE(th + 2), 35402, 'dst port = original source port');
  t.equal(r.frame.readUInt32BE(th + 4), 0, 'seq 0 (the SYN had no ACK)');
  t.equal(r.frame.readUInt32BE(th + 8), 0, 'ack = seq + 1 modulo 2^32');
  t.equal(r.frame[th + 12], 0x50, 'data offset 5');
  t.equal(r.frame[th + 13], 0x14, 'flags RST|ACK');
  t.ok(tcpChecksumOk(r.frame, th), 'TCP checksum valid');
});

t.test('ordinary SYN sequence number', async (t) => {
  const r = buildRejectReply(ether(ipv4(6, tcpSegment(0x02, 1000, 0))));
  if (!r.ok) return t.fail(r.reason);
  const th = 14 + 20;
  t.equal(r.frame.readUInt32BE(th + 8), 1001);
  t.ok(tcpChecksumOk(r.frame, th));
});

t.test('segment with ACK -> bare RST with seq = its ack', async (t) => {
  const r = buildRejectReply(ether(ipv4(6, tcpSegment(0x18, 5000, 777777, Buffer.from('hello')))));
  if (!r.ok) return t.fail(r.reason);
  const th = checkReplyIp(t, r.frame, 6);
  t.equal(r.frame.readUInt32BE(th + 4), 777777, 'seq = incoming ack');
  t.equal(r.frame[th + 13], 0x04, 'flags RST only');
  t.ok(tcpChecksumOk(r.frame, th));
});

t.test('data without ACK: ack covers payload and FIN; Ethernet padding ignored', async (t) => {
  const seg = tcpSegment(0x01 | 0x02, 100, 0, Buffer.from('abc'), false);
  const r = buildRejectReply(ether(ipv4(6, seg), { pad: 12 }));
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.frame.readUInt32BE(14 + 20 + 8), 100 + 3 + 1 + 1, 'payload 3 + SYN + FIN');
});

t.test('VLAN tag is kept on the reply', async (t) => {
  const r = buildRejectReply(ether(ipv4(6, tcpSegment(0x02, 1, 0)), { vlan: 0x2064 }));
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.frame.readUInt16BE(12), 0x8100);
  t.equal(r.frame.readUInt16BE(14), 0x2064);
  const th = checkReplyIp(t, r.frame, 6, 18);
  t.ok(tcpChecksumOk(r.frame, th));
});

function checkIcmp(t: Test, original: Buffer, expectQuoteLen: number) {
  const r = buildRejectReply(original);
  if (!r.ok) return t.fail(r.reason);
  t.equal(r.kind, 'icmp-admin-prohibited');
  const ic = checkReplyIp(t, r.frame, 1);
  t.equal(r.frame[ic], 3, 'ICMP type 3 destination unreachable');
  t.equal(r.frame[ic + 1], 10, 'code 10 administratively prohibited');
  t.equal(r.frame.readUInt32BE(ic + 4), 0, 'unused word zero');
  t.equal(csum(r.frame.subarray(ic)), 0, 'ICMP checksum valid');
  const quote = r.frame.subarray(ic + 8);
  t.equal(quote.length, expectQuoteLen, 'quote length = original IP header + 8');
  t.same(quote, original.subarray(14, 14 + expectQuoteLen), 'quote is the original bytes');
}

t.test('UDP -> ICMP 3/10 quoting IP header + 8 bytes', async (t) => {
  checkIcmp(t, ether(ipv4(17, udpDatagram(Buffer.from('some dns query bytes')))), 28);
});

t.test('quote includes IP options', async (t) => {
  const options = Buffer.from([0x94, 0x04, 0x00, 0x00]); // router alert
  checkIcmp(t, ether(ipv4(17, udpDatagram(Buffer.from('x')), { options })), 24 + 8);
});

t.test('short payload is quoted as far as it goes, not past the IP length', async (t) => {
  checkIcmp(t, ether(ipv4(99, Buffer.from([1, 2, 3])), { pad: 20 }), 23);
});

t.test('SCTP and ICMP echo -> ICMP 3/10', async (t) => {
  const sctp = Buffer.alloc(28);
  sctp.writeUInt16BE(5000, 0);
  sctp.writeUInt16BE(6000, 2);
  checkIcmp(t, ether(ipv4(132, sctp)), 28);
  const echo = Buffer.from([8, 0, 0, 0, 0, 1, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9]);
  echo.writeUInt16BE(csum(echo), 2);
  checkIcmp(t, ether(ipv4(1, echo)), 28);
});

t.test('no reply where RFCs forbid one', async (t) => {
  const cases: [string, Buffer, RegExp][] = [
    ['TCP RST', ether(ipv4(6, tcpSegment(0x04, 1, 0))), /RST/],
    ['ICMP error', ether(ipv4(1, Buffer.from([3, 3, 0, 0, 0, 0, 0, 0]))), /ICMP error/],
    ['non-first fragment', ether(ipv4(17, udpDatagram(Buffer.alloc(8)), { fragOffset: 0x0010 })), /fragment/],
    ['multicast destination', ether(ipv4(17, udpDatagram(Buffer.alloc(8)), { dst: '224.0.0.251' })), /not a unicast/],
    ['broadcast destination', ether(ipv4(17, udpDatagram(Buffer.alloc(8)), { dst: '255.255.255.255' })), /not a unicast/],
    ['unspecified source', ether(ipv4(17, udpDatagram(Buffer.alloc(8)), { src: '0.0.0.0' })), /not a unicast/],
    ['multicast source MAC', ether(ipv4(17, udpDatagram(Buffer.alloc(8))), { src: '01:00:5e:00:00:01' }), /multicast/],
    ['ARP', Buffer.concat([Buffer.alloc(12), Buffer.from([0x08, 0x06]), Buffer.alloc(28)]), /0x0806 is not IPv4/],
    ['runt', Buffer.alloc(10), /shorter than an Ethernet header/],
    ['truncated TCP', ether(ipv4(6, Buffer.alloc(10))), /TCP header is truncated/],
  ];
  for (const [name, frame, why] of cases) {
    const r = buildRejectReply(frame);
    t.notOk(r.ok, name);
    if (!r.ok) t.match(r.reason, why, `${name}: ${r.reason}`);
  }
});

t.test('decodePacket reads the 5-tuple the audit log needs', async (t) => {
  const p = decodePacket(ether(ipv4(6, tcpSegment(0x02, 1, 0)), { pad: 4 }));
  t.equal(p.ip.src, CLIENT_IP);
  t.equal(p.ip.dst, SERVER_IP);
  t.equal(p.ip.totalLength, 60, 'IP length of a SYN with 20 option bytes');
  t.equal(p.tcp?.srcPort, 35402);
  t.equal(p.tcp?.dstPort, 80);
  t.equal(p.l4Length, 40, 'padding excluded');
  const u = decodePacket(ether(ipv4(17, udpDatagram(Buffer.from('q')))));
  t.same(u.ports, { srcPort: 40000, dstPort: 53 });
  t.throws(() => decodePacket(ether(Buffer.from([0x60, 0, 0, 0]))), /IPv4 header is truncated/);
});
