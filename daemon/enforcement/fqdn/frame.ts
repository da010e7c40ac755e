/**
 * Finds the DNS message inside a punted Ethernet frame: IPv4 or IPv6, UDP or TCP from port 53.
 * TCP carries the RFC 1035 §4.2.2 two-byte length prefix; only a segment holding a whole message
 * is read (DNS responses for A/AAAA queries fit in one segment in practice; a split message is
 * reported, and its packets are still released unchanged by the handler).
 * Pure; malformed frames give an error value, never an exception.
 */
import { ipv6Text as ipv6 } from './dnswire.js';

export const DNS_PORT = 53;

export interface DnsPayload {
  transport: 'udp' | 'tcp';
  /** The DNS server (packet source) and the client (destination). */
  serverIp: string;
  clientIp: string;
  clientPort: number;
  message: Buffer;
}

export type DnsPayloadResult = { ok: true; payload: DnsPayload } | { ok: false; error: string; /** Not DNS at all (e.g. a bare TCP ACK). */ empty?: boolean };

const ETH_P_IPV4 = 0x0800;
const ETH_P_IPV6 = 0x86dd;
const ETH_P_VLAN = [0x8100, 0x88a8];
const IPPROTO_TCP = 6;
const IPPROTO_UDP = 17;

const ipv4 = (b: Buffer, at: number): string => `${b[at]}.${b[at + 1]}.${b[at + 2]}.${b[at + 3]}`;

export function extractDnsPayload(frame: Buffer): DnsPayloadResult {
  if (frame.length < 14) return { ok: false, error: `frame of ${frame.length} bytes is shorter than an Ethernet header` };
  let at = 12;
  let ethType = frame.readUInt16BE(at);
  while (ETH_P_VLAN.includes(ethType)) {
    at += 4;
    if (frame.length < at + 2) return { ok: false, error: 'VLAN tag is cut off' };
    ethType = frame.readUInt16BE(at);
  }
  at += 2;
  let proto: number;
  let serverIp: string;
  let clientIp: string;
  let l4: number;
  let l4End: number;
  if (ethType === ETH_P_IPV4) {
    if (frame.length < at + 20) return { ok: false, error: 'IPv4 header is cut off' };
    const ihl = (frame[at]! & 0xf) * 4;
    if (frame[at]! >> 4 !== 4 || ihl < 20) return { ok: false, error: 'bad IPv4 header' };
    const total = frame.readUInt16BE(at + 2);
    const frag = frame.readUInt16BE(at + 6);
    if ((frag & 0x3fff) !== 0) return { ok: false, error: 'IPv4 fragment (DNS over fragmented UDP is not read)' };
    if (total < ihl || frame.length < at + total) return { ok: false, error: `IPv4 total length ${total} does not fit the frame` };
    proto = frame[at + 9]!;
    serverIp = ipv4(frame, at + 12);
    clientIp = ipv4(frame, at + 16);
    l4 = at + ihl;
    l4End = at + total;
  } else if (ethType === ETH_P_IPV6) {
    if (frame.length < at + 40) return { ok: false, error: 'IPv6 header is cut off' };
    const payloadLen = frame.readUInt16BE(at + 4);
    proto = frame[at + 6]!;
    serverIp = ipv6(frame, at + 8);
    clientIp = ipv6(frame, at + 24);
    l4 = at + 40;
    l4End = l4 + payloadLen;
    if (frame.length < l4End) return { ok: false, error: `IPv6 payload length ${payloadLen} does not fit the frame` };
  } else {
    return { ok: false, error: `ethertype 0x${ethType.toString(16)} is not IP` };
  }
  if (proto === IPPROTO_UDP) {
    if (l4End < l4 + 8) return { ok: false, error: 'UDP header is cut off' };
    const src = frame.readUInt16BE(l4);
    if (src !== DNS_PORT) return { ok: false, error: `UDP source port ${src} is not ${DNS_PORT}` };
    const udpLen = frame.readUInt16BE(l4 + 4);
    if (udpLen < 8 || l4 + udpLen > l4End) return { ok: false, error: `UDP length ${udpLen} does not fit the packet` };
    return { ok: true, payload: { transport: 'udp', serverIp, clientIp, clientPort: frame.readUInt16BE(l4 + 2), message: frame.subarray(l4 + 8, l4 + udpLen) } };
  }
  if (proto === IPPROTO_TCP) {
    if (l4End < l4 + 20) return { ok: false, error: 'TCP header is cut off' };
    const src = frame.readUInt16BE(l4);
    if (src !== DNS_PORT) return { ok: false, error: `TCP source port ${src} is not ${DNS_PORT}` };
    const off = (frame[l4 + 12]! >> 4) * 4;
    if (off < 20 || l4 + off > l4End) return { ok: false, error: `TCP data offset ${off} does not fit the packet` };
    const data = frame.subarray(l4 + off, l4End);
    if (data.length === 0) return { ok: false, error: 'TCP segment without data', empty: true };
    if (data.length < 2) return { ok: false, error: 'TCP segment too short for the DNS length prefix' };
    const len = data.readUInt16BE(0);
    if (data.length < 2 + len) return { ok: false, error: `TCP segment holds ${data.length - 2} of the message's ${len} bytes (split message is not read)` };
    return { ok: true, payload: { transport: 'tcp', serverIp, clientIp, clientPort: frame.readUInt16BE(l4 + 2), message: data.subarray(2, 2 + len) } };
  }
  return { ok: false, error: `IP protocol ${proto} is neither UDP nor TCP` };
}
