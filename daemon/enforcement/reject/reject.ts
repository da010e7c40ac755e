/**
 * Reject replies: given the frame a Reject rule punted to the agent, build the frame that tells the
 * client "no": a TCP RST for TCP, an ICMP destination-unreachable "communication administratively
 * prohibited" (type 3 code 10; ICMPv6 type 1 code 1 for IPv6, see reject6.ts) for everything else. The reply looks as if it came from the original
 * destination (addresses, ports and MACs swapped) so the client's socket accepts it. Pure.
 *
 * Replies are never built for packets that must not trigger errors (RFC 1122 §3.2.2, RFC 1812
 * §4.3.2.7, RFC 793): TCP RSTs, ICMP error messages, non-first fragments, and packets from or to
 * broadcast/multicast/unspecified addresses.
 */
import { buildRejectReply6 } from './reject6.js';
import { type RejectResult, replyEthernet, writeTcpReset } from './replyframe.js';
import {
  decodeEthernet,
  decodePacket,
  ETH_P_IPV4,
  ETH_P_IPV6,
  internetChecksum,
  ipv4ToBytes,
  ipv4TransportChecksum,
  IPPROTO,
  PacketDecodeError,
  type PacketSummary,
  TCP_FLAGS,
} from '../../packet.js';

export type { RejectKind, RejectResult } from './replyframe.js';

export const ICMP_DEST_UNREACH = 3;
export const ICMP_HOST_ADMIN_PROHIBITED = 10;
/** ICMP types that are error messages (never answered with another error). */
const ICMP_ERROR_TYPES = new Set([3, 4, 5, 11, 12]);
const REPLY_TTL = 64;
const IP_FLAG_DF = 0x4000;

export function buildRejectReply(frame: Buffer): RejectResult {
  let pkt: PacketSummary;
  try {
    if (decodeEthernet(frame).etherType === ETH_P_IPV6) return buildRejectReply6(frame);
    pkt = decodePacket(frame);
  } catch (e) {
    if (e instanceof PacketDecodeError) return { ok: false, reason: e.message };
    throw e;
  }
  const refusal = whyNoReply(pkt);
  if (refusal) return { ok: false, reason: refusal };
  if (pkt.protocol === IPPROTO.TCP) {
    if (!pkt.tcp) return { ok: false, reason: 'TCP header is truncated' };
    return { ok: true, kind: 'tcp-rst', frame: tcpReset(pkt) };
  }
  return { ok: true, kind: 'icmp-admin-prohibited', frame: icmpAdminProhibited(frame, pkt) };
}

function isUnicastIpv4(ip: string): boolean {
  const first = Number(ip.split('.')[0]);
  return ip !== '0.0.0.0' && ip !== '255.255.255.255' && !(first >= 224 && first <= 239);
}

function whyNoReply(pkt: PacketSummary): string | undefined {
  if (pkt.eth.src[0]! & 1) return 'source MAC is multicast';
  if (!isUnicastIpv4(pkt.ip.src)) return `source ${pkt.ip.src} is not a unicast address`;
  if (!isUnicastIpv4(pkt.ip.dst)) return `destination ${pkt.ip.dst} is not a unicast address`;
  if (pkt.ip.fragmentOffset !== 0) return 'packet is a non-first fragment';
  if (pkt.tcp && pkt.tcp.flags & TCP_FLAGS.RST) return 'packet is a TCP RST';
  if (pkt.protocol === IPPROTO.ICMP) {
    if (!pkt.icmp) return 'ICMP header is truncated';
    if (ICMP_ERROR_TYPES.has(pkt.icmp.type)) return `packet is an ICMP error (type ${pkt.icmp.type})`;
  }
  return undefined;
}

/** A 20-byte IPv4 header from the original destination back to the original source. */
function writeReplyIpv4(out: Buffer, at: number, pkt: PacketSummary, protocol: number, totalLength: number): void {
  out[at] = 0x45;
  out[at + 1] = 0;
  out.writeUInt16BE(totalLength, at + 2);
  out.writeUInt16BE(0, at + 4);
  out.writeUInt16BE(IP_FLAG_DF, at + 6);
  out[at + 8] = REPLY_TTL;
  out[at + 9] = protocol;
  out.writeUInt16BE(0, at + 10);
  ipv4ToBytes(pkt.ip.dst).copy(out, at + 12);
  ipv4ToBytes(pkt.ip.src).copy(out, at + 16);
  out.writeUInt16BE(internetChecksum(out.subarray(at, at + 20)), at + 10);
}

/** A TCP RST from the original destination (see writeTcpReset). */
function tcpReset(pkt: PacketSummary): Buffer {
  const [out, ip] = replyEthernet(pkt.eth, ETH_P_IPV4, 40);
  writeReplyIpv4(out, ip, pkt, IPPROTO.TCP, 40);
  const th = ip + 20;
  writeTcpReset(out, th, pkt.tcp!, pkt.l4Length);
  const segment = out.subarray(th, th + 20);
  out.writeUInt16BE(ipv4TransportChecksum(out.subarray(ip + 12, ip + 16), out.subarray(ip + 16, ip + 20), IPPROTO.TCP, segment), th + 16);
  return out;
}

/** ICMP type 3 code 10 quoting the original IP header (with options) and the first 8 bytes after it. */
function icmpAdminProhibited(frame: Buffer, pkt: PacketSummary): Buffer {
  const quoteEnd = Math.min(frame.length, pkt.ip.offset + pkt.ip.totalLength, pkt.l4Offset + 8);
  const quote = frame.subarray(pkt.ip.offset, quoteEnd);
  const totalLength = 20 + 8 + quote.length;
  const [out, ip] = replyEthernet(pkt.eth, ETH_P_IPV4, totalLength);
  writeReplyIpv4(out, ip, pkt, IPPROTO.ICMP, totalLength);
  const ic = ip + 20;
  out[ic] = ICMP_DEST_UNREACH;
  out[ic + 1] = ICMP_HOST_ADMIN_PROHIBITED;
  // bytes ic+2..ic+7: checksum (below) and the unused/next-hop-MTU word, zero
  quote.copy(out, ic + 8);
  out.writeUInt16BE(internetChecksum(out.subarray(ic)), ic + 2);
  return out;
}
