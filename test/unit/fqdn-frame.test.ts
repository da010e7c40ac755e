import t from 'tap';
import { extractDnsPayload } from '../../daemon/enforcement/fqdn/frame.js';
import { ethernet, ipv4Packet, simpleResponse, tcp, tcpDnsFrame, udp, udpDnsFrame } from './fqdn-helpers.js';

const MSG = simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 5 }]);

t.test('UDP from port 53', async (t) => {
  const r = extractDnsPayload(udpDnsFrame('10.96.0.10', '10.10.1.5', MSG, 41000));
  t.ok(r.ok);
  if (!r.ok) return;
  t.same({ ...r.payload, message: r.payload.message.toString('hex') }, { transport: 'udp', serverIp: '10.96.0.10', clientIp: '10.10.1.5', clientPort: 41000, message: MSG.toString('hex') });
});

t.test('Ethernet padding after a short UDP datagram is not part of the message', async (t) => {
  const frame = Buffer.concat([udpDnsFrame('10.96.0.10', '10.10.1.5', MSG), Buffer.alloc(6)]);
  const r = extractDnsPayload(frame);
  t.ok(r.ok && r.payload.message.equals(MSG));
});

t.test('TCP with the length prefix, whole message in one segment', async (t) => {
  const r = extractDnsPayload(tcpDnsFrame('10.96.0.10', '10.10.1.5', MSG));
  t.ok(r.ok && r.payload.transport === 'tcp' && r.payload.message.equals(MSG));
});

t.test('TCP: split messages, bare ACKs and short segments are reported', async (t) => {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(MSG.length + 10, 0);
  const split = extractDnsPayload(ethernet(ipv4Packet(6, '10.96.0.10', '10.10.1.5', tcp(53, 40000, Buffer.concat([len, MSG])))));
  t.match(!split.ok && split.error, /split message/);
  const ack = extractDnsPayload(ethernet(ipv4Packet(6, '10.96.0.10', '10.10.1.5', tcp(53, 40000, Buffer.alloc(0)))));
  t.ok(!ack.ok && ack.empty, 'a segment without data is flagged empty');
  const one = extractDnsPayload(ethernet(ipv4Packet(6, '10.96.0.10', '10.10.1.5', tcp(53, 40000, Buffer.from([0])))));
  t.match(!one.ok && one.error, /length prefix/);
});

t.test('not DNS: other ports, fragments, ARP, other protocols, short frames', async (t) => {
  const cases: [Buffer, RegExp][] = [
    [ethernet(ipv4Packet(17, '10.0.0.1', '10.0.0.2', udp(5353, 53, MSG))), /source port 5353/],
    [ethernet(ipv4Packet(17, '10.0.0.1', '10.0.0.2', udp(53, 4000, MSG), 0x2000)), /fragment/],
    [ethernet(Buffer.alloc(28), 0x0806), /ethertype 0x806/],
    [ethernet(ipv4Packet(1, '10.0.0.1', '10.0.0.2', Buffer.alloc(8))), /protocol 1/],
    [Buffer.alloc(10), /shorter than an Ethernet header/],
    [ethernet(ipv4Packet(17, '10.0.0.1', '10.0.0.2', udp(53, 4000, MSG))).subarray(0, 30), /IPv4 header is cut off/],
    [ethernet(ipv4Packet(17, '10.0.0.1', '10.0.0.2', udp(53, 4000, MSG))).subarray(0, 50), /total length/],
  ];
  for (const [frame, re] of cases) {
    const r = extractDnsPayload(frame);
    t.match(!r.ok && r.error, re);
  }
  const badUdpLen = udpDnsFrame('10.0.0.1', '10.0.0.2', MSG);
  badUdpLen.writeUInt16BE(2000, 14 + 20 + 4);
  t.match((extractDnsPayload(badUdpLen) as { error: string }).error, /UDP length 2000/);
});

t.test('IPv6 and VLAN-tagged frames', async (t) => {
  const u = udp(53, 40000, MSG);
  const h = Buffer.alloc(40);
  h[0] = 0x60;
  h.writeUInt16BE(u.length, 4);
  h[6] = 17;
  h[7] = 64;
  h.writeUInt16BE(0xfd00, 8);
  h.writeUInt16BE(0x53, 22);
  h.writeUInt16BE(0xfd00, 24);
  h.writeUInt16BE(0x10, 26);
  h.writeUInt16BE(5, 38);
  const r6 = extractDnsPayload(ethernet(Buffer.concat([h, u]), 0x86dd));
  t.ok(r6.ok);
  t.same(r6.ok && [r6.payload.serverIp, r6.payload.clientIp], ['fd00::53', 'fd00:10::5']);
  const plain = udpDnsFrame('10.96.0.10', '10.10.1.5', MSG);
  const tagged = Buffer.concat([plain.subarray(0, 12), Buffer.from([0x81, 0x00, 0x00, 0x05]), plain.subarray(12)]);
  const rv = extractDnsPayload(tagged);
  t.ok(rv.ok && rv.payload.message.equals(MSG));
});
