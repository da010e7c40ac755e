/**
 * IPv6 reject replies: TCP RST, or ICMPv6 destination unreachable code 1 "communication with
 * destination administratively prohibited" quoting as much of the packet as fits in the minimum
 * IPv6 MTU (RFC 4443 §2.4(c)). Same refusals as IPv4: no reply to RSTs, ICMPv6 errors (types < 128),
 * later fragments, or multicast/unspecified addresses. Pure.
 */
import { decodeIpv6Packet, ETH_P_IPV6, IPPROTO, ipv6TransportChecksum, type Ipv6Summary, TCP_FLAGS } from '../../packet.js';
import { type RejectResult, replyEthernet, writeTcpReset } from './replyframe.js';

export const ICMPV6_DEST_UNREACH = 1;
export const ICMPV6_ADMIN_PROHIBITED = 1;
const IPV6_MIN_MTU = 1280;
const REPLY_HOP_LIMIT = 64;

const isMulticast6 = (a: Buffer): boolean => a[0] === 0xff;
const isUnspecified6 = (a: Buffer): boolean => a.every((b) => b === 0);

export function buildRejectReply6(frame: Buffer): RejectResult {
  const pkt = decodeIpv6Packet(frame);
  if (pkt.eth.src[0]! & 1) return { ok: false, reason: 'source MAC is multicast' };
  if (isMulticast6(pkt.src) || isUnspecified6(pkt.src)) return { ok: false, reason: 'IPv6 source is not a unicast address' };
  if (isMulticast6(pkt.dst) || isUnspecified6(pkt.dst)) return { ok: false, reason: 'IPv6 destination is not a unicast address' };
  if (pkt.laterFragment) return { ok: false, reason: 'packet is a non-first fragment' };
  if (pkt.protocol === IPPROTO.TCP) {
    if (!pkt.tcp) return { ok: false, reason: 'TCP header is truncated' };
    if (pkt.tcp.flags & TCP_FLAGS.RST) return { ok: false, reason: 'packet is a TCP RST' };
    return { ok: true, kind: 'tcp-rst', frame: tcpReset6(pkt) };
  }
  if (pkt.protocol === IPPROTO.ICMPV6) {
    if (!pkt.icmp) return { ok: false, reason: 'ICMPv6 header is truncated' };
    if (pkt.icmp.type < 128) return { ok: false, reason: `packet is an ICMPv6 error (type ${pkt.icmp.type})` };
  }
  return { ok: true, kind: 'icmpv6-admin-prohibited', frame: icmp6AdminProhibited(frame, pkt) };
}

function replyFrame(pkt: Ipv6Summary, upperLength: number, protocol: number): [Buffer, number] {
  const [out, l3] = replyEthernet(pkt.eth, ETH_P_IPV6, 40 + upperLength);
  out.writeUInt32BE(0x60000000, l3);
  out.writeUInt16BE(upperLength, l3 + 4);
  out[l3 + 6] = protocol;
  out[l3 + 7] = REPLY_HOP_LIMIT;
  pkt.dst.copy(out, l3 + 8);
  pkt.src.copy(out, l3 + 24);
  return [out, l3];
}

function tcpReset6(pkt: Ipv6Summary): Buffer {
  const [out, l3] = replyFrame(pkt, 20, IPPROTO.TCP);
  const th = l3 + 40;
  writeTcpReset(out, th, pkt.tcp!, pkt.l4Length);
  out.writeUInt16BE(ipv6TransportChecksum(out.subarray(l3 + 8, l3 + 24), out.subarray(l3 + 24, l3 + 40), IPPROTO.TCP, out.subarray(th)), th + 16);
  return out;
}

function icmp6AdminProhibited(frame: Buffer, pkt: Ipv6Summary): Buffer {
  const packetEnd = Math.min(frame.length, pkt.offset + 40 + pkt.payloadLength);
  const quote = frame.subarray(pkt.offset, Math.min(packetEnd, pkt.offset + IPV6_MIN_MTU - 40 - 8));
  const [out, l3] = replyFrame(pkt, 8 + quote.length, IPPROTO.ICMPV6);
  const ic = l3 + 40;
  out[ic] = ICMPV6_DEST_UNREACH;
  out[ic + 1] = ICMPV6_ADMIN_PROHIBITED;
  quote.copy(out, ic + 8);
  out.writeUInt16BE(ipv6TransportChecksum(out.subarray(l3 + 8, l3 + 24), out.subarray(l3 + 24, l3 + 40), IPPROTO.ICMPV6, out.subarray(ic)), ic + 2);
  return out;
}
