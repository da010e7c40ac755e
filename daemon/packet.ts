/**
 * Minimal, allocation-light decoding of the frames the bridge punts to the agent: Ethernet (with at
 * most one 802.1Q tag), IPv4 and the first bytes of TCP/UDP/SCTP/ICMP. Pure; shared by the reject
 * reply builder and the audit log (which needs the 5-tuple and the IP length of a packet-in).
 */

export const ETH_P_IPV4 = 0x0800;
export const ETH_P_IPV6 = 0x86dd;
export const ETH_P_8021Q = 0x8100;

export const IPPROTO = { ICMP: 1, TCP: 6, UDP: 17, SCTP: 132, ICMPV6: 58 } as const;

export const TCP_FLAGS = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10, URG: 0x20 } as const;

export interface EthernetHeader {
  dst: Buffer;
  src: Buffer;
  /** The 802.1Q tag control information when the frame is tagged. */
  vlanTci?: number;
  etherType: number;
  /** Offset of the L3 header in the frame. */
  l3Offset: number;
}

export interface Ipv4Header {
  version: 4;
  headerLength: number;
  tos: number;
  totalLength: number;
  id: number;
  flags: number;
  fragmentOffset: number;
  ttl: number;
  protocol: number;
  checksum: number;
  src: string;
  dst: string;
  /** Offset of the IPv4 header in the frame. */
  offset: number;
}

export interface L4Ports {
  srcPort: number;
  dstPort: number;
}

export interface TcpHeader extends L4Ports {
  seq: number;
  ack: number;
  dataOffset: number;
  flags: number;
  window: number;
}

export interface IcmpHeader {
  type: number;
  code: number;
}

/** What the audit log and the reject builder need to know about a punted IPv4 packet. */
export interface PacketSummary {
  eth: EthernetHeader;
  ip: Ipv4Header;
  protocol: number;
  tcp?: TcpHeader;
  /** UDP or SCTP ports. */
  ports?: L4Ports;
  icmp?: IcmpHeader;
  /** Bytes of L4 header + payload present in the frame (bounded by the IP total length). */
  l4Length: number;
  l4Offset: number;
}

export class PacketDecodeError extends Error {}

export function ipv4ToString(buf: Buffer, offset: number): string {
  return `${buf[offset]}.${buf[offset + 1]}.${buf[offset + 2]}.${buf[offset + 3]}`;
}

export function ipv4ToBytes(ip: string): Buffer {
  const parts = ip.split('.');
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) {
    throw new PacketDecodeError(`"${ip}" is not an IPv4 address`);
  }
  return Buffer.from(parts.map(Number));
}

export function decodeEthernet(frame: Buffer): EthernetHeader {
  if (frame.length < 14) throw new PacketDecodeError(`frame of ${frame.length} bytes is shorter than an Ethernet header`);
  let etherType = frame.readUInt16BE(12);
  let l3Offset = 14;
  let vlanTci: number | undefined;
  if (etherType === ETH_P_8021Q) {
    if (frame.length < 18) throw new PacketDecodeError('802.1Q-tagged frame is truncated');
    vlanTci = frame.readUInt16BE(14);
    etherType = frame.readUInt16BE(16);
    l3Offset = 18;
  }
  return { dst: frame.subarray(0, 6), src: frame.subarray(6, 12), etherType, l3Offset, ...(vlanTci === undefined ? {} : { vlanTci }) };
}

export function decodeIpv4(frame: Buffer, offset: number): Ipv4Header {
  if (frame.length < offset + 20) throw new PacketDecodeError('IPv4 header is truncated');
  const vihl = frame[offset]!;
  if (vihl >> 4 !== 4) throw new PacketDecodeError(`IP version ${vihl >> 4} where 4 was expected`);
  const headerLength = (vihl & 0xf) * 4;
  if (headerLength < 20) throw new PacketDecodeError(`IPv4 header length ${headerLength} is below 20`);
  if (frame.length < offset + headerLength) throw new PacketDecodeError('IPv4 options are truncated');
  const totalLength = frame.readUInt16BE(offset + 2);
  if (totalLength < headerLength) throw new PacketDecodeError(`IPv4 total length ${totalLength} is below its header length ${headerLength}`);
  const flagsFrag = frame.readUInt16BE(offset + 6);
  return {
    version: 4,
    headerLength,
    tos: frame[offset + 1]!,
    totalLength,
    id: frame.readUInt16BE(offset + 4),
    flags: flagsFrag >> 13,
    fragmentOffset: flagsFrag & 0x1fff,
    ttl: frame[offset + 8]!,
    protocol: frame[offset + 9]!,
    checksum: frame.readUInt16BE(offset + 10),
    src: ipv4ToString(frame, offset + 12),
    dst: ipv4ToString(frame, offset + 16),
    offset,
  };
}

/** Decodes an IPv4 frame down to its transport header; throws PacketDecodeError on anything else. */
export function decodePacket(frame: Buffer): PacketSummary {
  const eth = decodeEthernet(frame);
  if (eth.etherType !== ETH_P_IPV4) throw new PacketDecodeError(`EtherType 0x${eth.etherType.toString(16).padStart(4, '0')} is not IPv4`);
  const ip = decodeIpv4(frame, eth.l3Offset);
  const l4Offset = ip.offset + ip.headerLength;
  // Ethernet padding can make the frame longer than the IP packet; a truncated punt shorter.
  const l4End = Math.min(frame.length, ip.offset + ip.totalLength);
  const l4Length = Math.max(0, l4End - l4Offset);
  const summary: PacketSummary = { eth, ip, protocol: ip.protocol, l4Length, l4Offset };
  if (ip.fragmentOffset !== 0) return summary; // no transport header in a non-first fragment
  return Object.assign(summary, decodeTransport(frame, ip.protocol, l4Offset, l4Length, IPPROTO.ICMP));
}

/**
 * The transport header at `at` when enough of it is present: TCP, UDP/SCTP ports, or the ICMP
 * type/code of the family (`icmpProtocol`: ICMP for IPv4, ICMPv6 for IPv6).
 */
function decodeTransport(frame: Buffer, protocol: number, at: number, l4Length: number, icmpProtocol: number): Pick<PacketSummary, 'tcp' | 'ports' | 'icmp'> {
  if (protocol === IPPROTO.TCP && l4Length >= 20) {
    return {
      tcp: {
        srcPort: frame.readUInt16BE(at),
        dstPort: frame.readUInt16BE(at + 2),
        seq: frame.readUInt32BE(at + 4),
        ack: frame.readUInt32BE(at + 8),
        dataOffset: (frame[at + 12]! >> 4) * 4,
        flags: frame[at + 13]!,
        window: frame.readUInt16BE(at + 14),
      },
    };
  }
  if ((protocol === IPPROTO.UDP || protocol === IPPROTO.SCTP) && l4Length >= 4) {
    return { ports: { srcPort: frame.readUInt16BE(at), dstPort: frame.readUInt16BE(at + 2) } };
  }
  if (protocol === icmpProtocol && l4Length >= 2) return { icmp: { type: frame[at]!, code: frame[at + 1]! } };
  return {};
}

/** RFC 1071 one's-complement sum of `data`, continued from `initial` (not yet folded or inverted). */
export function onesComplementSum(data: Buffer, initial = 0): number {
  let sum = initial;
  const even = data.length & ~1;
  for (let i = 0; i < even; i += 2) sum += (data[i]! << 8) | data[i + 1]!;
  if (data.length & 1) sum += data[data.length - 1]! << 8;
  return sum;
}

export function foldChecksum(sum: number): number {
  let s = sum;
  while (s > 0xffff) s = (s & 0xffff) + Math.floor(s / 0x10000);
  return ~s & 0xffff;
}

/** The Internet checksum of `data` (checksum field zeroed by the caller, or included to verify: 0 = valid). */
export const internetChecksum = (data: Buffer): number => foldChecksum(onesComplementSum(data));

/** TCP/UDP checksum over the IPv4 pseudo-header and `segment` (0 when verifying a valid segment). */
export function ipv4TransportChecksum(src: Buffer, dst: Buffer, protocol: number, segment: Buffer): number {
  const pseudo = Buffer.alloc(12);
  src.copy(pseudo, 0);
  dst.copy(pseudo, 4);
  pseudo[9] = protocol;
  pseudo.writeUInt16BE(segment.length, 10);
  return foldChecksum(onesComplementSum(segment, onesComplementSum(pseudo)));
}

export const PROTOCOL_NAMES: Record<number, string> = { 1: 'ICMP', 2: 'IGMP', 6: 'TCP', 17: 'UDP', 58: 'ICMPv6', 132: 'SCTP' };

// ---- IPv6 ----

export interface Ipv6Summary {
  eth: EthernetHeader;
  /** Offset of the IPv6 header. */
  offset: number;
  payloadLength: number;
  src: Buffer;
  dst: Buffer;
  /** Upper-layer protocol after the extension headers (59 = none). */
  protocol: number;
  /** Offset of the upper-layer header. */
  l4Offset: number;
  /** Upper-layer bytes present (bounded by the payload length). */
  l4Length: number;
  /** True for a fragment other than the first (no upper-layer header present). */
  laterFragment: boolean;
  tcp?: TcpHeader;
  ports?: L4Ports;
  icmp?: IcmpHeader;
}

const IPV6_EXT = { HOP_BY_HOP: 0, ROUTING: 43, FRAGMENT: 44, AH: 51, DEST_OPTS: 60 } as const;

export function ipv6ToString(b: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(b.readUInt16BE(i).toString(16));
  // RFC 5952: compress the longest run (>= 2) of zero groups.
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** Decodes an IPv6 frame through its extension headers to the upper-layer header. */
export function decodeIpv6Packet(frame: Buffer): Ipv6Summary {
  const eth = decodeEthernet(frame);
  if (eth.etherType !== ETH_P_IPV6) throw new PacketDecodeError(`EtherType 0x${eth.etherType.toString(16).padStart(4, '0')} is not IPv6`);
  const o = eth.l3Offset;
  if (frame.length < o + 40) throw new PacketDecodeError('IPv6 header is truncated');
  if (frame[o]! >> 4 !== 6) throw new PacketDecodeError(`IP version ${frame[o]! >> 4} where 6 was expected`);
  const payloadLength = frame.readUInt16BE(o + 4);
  const end = Math.min(frame.length, o + 40 + payloadLength);
  let next = frame[o + 6]!;
  let at = o + 40;
  let laterFragment = false;
  while (next === IPV6_EXT.HOP_BY_HOP || next === IPV6_EXT.ROUTING || next === IPV6_EXT.DEST_OPTS || next === IPV6_EXT.FRAGMENT || next === IPV6_EXT.AH) {
    if (at + 8 > end) throw new PacketDecodeError(`IPv6 extension header ${next} is truncated`);
    const len = next === IPV6_EXT.FRAGMENT ? 8 : next === IPV6_EXT.AH ? (frame[at + 1]! + 2) * 4 : (frame[at + 1]! + 1) * 8;
    if (next === IPV6_EXT.FRAGMENT && frame.readUInt16BE(at + 2) >> 3 !== 0) laterFragment = true;
    next = frame[at]!;
    at += len;
    if (laterFragment) break;
  }
  const l4Length = Math.max(0, end - at);
  const s: Ipv6Summary = { eth, offset: o, payloadLength, src: frame.subarray(o + 8, o + 24), dst: frame.subarray(o + 24, o + 40), protocol: next, l4Offset: at, l4Length, laterFragment };
  if (laterFragment) return s;
  return Object.assign(s, decodeTransport(frame, next, at, l4Length, IPPROTO.ICMPV6));
}

/** Upper-layer checksum over the IPv6 pseudo-header and `segment` (0 when verifying a valid one). */
export function ipv6TransportChecksum(src: Buffer, dst: Buffer, protocol: number, segment: Buffer): number {
  const pseudo = Buffer.alloc(40);
  src.copy(pseudo, 0);
  dst.copy(pseudo, 16);
  pseudo.writeUInt32BE(segment.length, 32);
  pseudo[39] = protocol;
  return foldChecksum(onesComplementSum(segment, onesComplementSum(pseudo)));
}
