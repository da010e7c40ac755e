/**
 * Hand-built DNS wire messages and frames for the fqdn tests (not a test file itself). Written
 * independently of daemon/enforcement/fqdn: names are spelled out label by label, pointers as raw bytes.
 */

/** Uncompressed wire form of a name ("" = root). */
export function wireName(name: string): Buffer {
  const parts = name === '' ? [] : name.split('.');
  return Buffer.concat([...parts.map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])), Buffer.from([0])]);
}

/** Labels followed by a compression pointer to `offset`. */
export function wireNameWithPointer(labels: string, offset: number): Buffer {
  const parts = labels === '' ? [] : labels.split('.');
  return Buffer.concat([...parts.map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])), Buffer.from([0xc0 | (offset >> 8), offset & 0xff])]);
}

export function header(o: { id?: number; qr?: boolean; opcode?: number; tc?: boolean; rcode?: number; qd?: number; an?: number; ns?: number; ar?: number }): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt16BE(o.id ?? 0x1234, 0);
  const flags = ((o.qr ?? true) ? 0x8000 : 0) | ((o.opcode ?? 0) << 11) | (o.tc ? 0x0200 : 0) | 0x0100 /* RD */ | 0x0080 /* RA */ | (o.rcode ?? 0);
  b.writeUInt16BE(flags, 2);
  b.writeUInt16BE(o.qd ?? 1, 4);
  b.writeUInt16BE(o.an ?? 0, 6);
  b.writeUInt16BE(o.ns ?? 0, 8);
  b.writeUInt16BE(o.ar ?? 0, 10);
  return b;
}

export function question(name: Buffer, type = 1, klass = 1): Buffer {
  const t = Buffer.alloc(4);
  t.writeUInt16BE(type, 0);
  t.writeUInt16BE(klass, 2);
  return Buffer.concat([name, t]);
}

export function rr(name: Buffer, type: number, ttl: number, rdata: Buffer, klass = 1): Buffer {
  const f = Buffer.alloc(10);
  f.writeUInt16BE(type, 0);
  f.writeUInt16BE(klass, 2);
  f.writeUInt32BE(ttl >>> 0, 4);
  f.writeUInt16BE(rdata.length, 8);
  return Buffer.concat([name, f, rdata]);
}

export const a = (ip: string): Buffer => Buffer.from(ip.split('.').map(Number));
export const aaaa = (groups: number[]): Buffer => {
  const b = Buffer.alloc(16);
  groups.forEach((g, i) => b.writeUInt16BE(g, 2 * i));
  return b;
};

/** EDNS0 OPT pseudo-record (root name, type 41, class = UDP size). */
export const opt = (): Buffer => rr(Buffer.from([0]), 41, 0, Buffer.alloc(0), 1232);

/** A complete, uncompressed response: `name A ip` records with TTLs. */
export function simpleResponse(name: string, answers: { ip: string; ttl: number }[], id = 0x4242): Buffer {
  return Buffer.concat([
    header({ id, an: answers.length }),
    question(wireName(name)),
    ...answers.map((x) => rr(wireNameWithPointer('', 12), 1, x.ttl, a(x.ip))),
  ]);
}

/** A query for `name` of record type `type` (1 = A, 28 = AAAA). */
export function simpleQuery(name: string, id = 0x4242, type = 1): Buffer {
  return Buffer.concat([header({ id, qr: false }), question(wireName(name), type)]);
}

// ---- frames ----

function csum(data: Buffer): number {
  let sum = 0;
  for (let i = 0; i < data.length; i += 2) sum += (data[i]! << 8) + (i + 1 < data.length ? data[i + 1]! : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}

const mac = (s: string) => Buffer.from(s.split(':').map((h) => parseInt(h, 16)));

export function ipv4Packet(proto: number, src: string, dst: string, payload: Buffer, frag = 0x4000): Buffer {
  const h = Buffer.alloc(20);
  h[0] = 0x45;
  h.writeUInt16BE(20 + payload.length, 2);
  h.writeUInt16BE(7, 4);
  h.writeUInt16BE(frag, 6);
  h[8] = 64;
  h[9] = proto;
  a(src).copy(h, 12);
  a(dst).copy(h, 16);
  h.writeUInt16BE(csum(h), 10);
  return Buffer.concat([h, payload]);
}

export function udp(srcPort: number, dstPort: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt16BE(srcPort, 0);
  h.writeUInt16BE(dstPort, 2);
  h.writeUInt16BE(8 + payload.length, 4);
  return Buffer.concat([h, payload]);
}

export function tcp(srcPort: number, dstPort: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(20);
  h.writeUInt16BE(srcPort, 0);
  h.writeUInt16BE(dstPort, 2);
  h.writeUInt32BE(1000, 4);
  h.writeUInt32BE(2000, 8);
  h[12] = 5 << 4;
  h[13] = 0x18; // PSH ACK
  h.writeUInt16BE(65000, 14);
  return Buffer.concat([h, payload]);
}

export function ethernet(payload: Buffer, ethType = 0x0800, dst = '0a:00:00:00:00:01', src = 'aa:bb:cc:dd:ee:ff'): Buffer {
  const t = Buffer.alloc(2);
  t.writeUInt16BE(ethType, 0);
  return Buffer.concat([mac(dst), mac(src), t, payload]);
}

/** Ethernet/IPv4/UDP frame of a DNS response from server:53 to client:port. */
export function udpDnsFrame(server: string, client: string, message: Buffer, clientPort = 40000): Buffer {
  return ethernet(ipv4Packet(17, server, client, udp(53, clientPort, message)));
}

/** Ethernet/IPv4/TCP frame with the 2-byte length prefix. */
export function tcpDnsFrame(server: string, client: string, message: Buffer, clientPort = 40000): Buffer {
  const len = Buffer.alloc(2);
  len.writeUInt16BE(message.length, 0);
  return ethernet(ipv4Packet(6, server, client, tcp(53, clientPort, Buffer.concat([len, message]))));
}
