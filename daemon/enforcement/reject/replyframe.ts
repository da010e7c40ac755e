/**
 * The parts of a reject reply that do not depend on the IP family (reject.ts builds IPv4 replies,
 * reject6.ts IPv6 ones). Pure.
 */
import { ETH_P_8021Q, type EthernetHeader, TCP_FLAGS, type TcpHeader } from '../../packet.js';

export type RejectKind = 'tcp-rst' | 'icmp-admin-prohibited' | 'icmpv6-admin-prohibited';

/** A reply frame to send back, or why none is sent. */
export type RejectResult =
  | { ok: true; kind: RejectKind; frame: Buffer }
  | { ok: false; reason: string };

/**
 * A zeroed reply frame with room for `l3Length` bytes after its Ethernet header: MACs swapped,
 * the original VLAN tag kept. Returns [frame, offset of the L3 header].
 */
export function replyEthernet(eth: EthernetHeader, etherType: number, l3Length: number): [Buffer, number] {
  const l3Offset = eth.vlanTci === undefined ? 14 : 18;
  const out = Buffer.alloc(l3Offset + l3Length);
  eth.src.copy(out, 0);
  eth.dst.copy(out, 6);
  if (eth.vlanTci !== undefined) {
    out.writeUInt16BE(ETH_P_8021Q, 12);
    out.writeUInt16BE(eth.vlanTci, 14);
  }
  out.writeUInt16BE(etherType, l3Offset - 2);
  return [out, l3Offset];
}

/**
 * Writes a 20-byte TCP RST answering `tcp` into the zeroed `out` at `th` (all but the checksum,
 * which needs the family's pseudo-header). RFC 793 reset generation: if the offending segment
 * carries an ACK, the RST takes its sequence number from that ACK; otherwise the RST has sequence
 * 0 and acknowledges everything the segment occupied (payload + SYN + FIN), so a client in
 * SYN-SENT accepts it and reports ECONNREFUSED. `l4Length`: TCP header + payload bytes present.
 */
export function writeTcpReset(out: Buffer, th: number, tcp: TcpHeader, l4Length: number): void {
  out.writeUInt16BE(tcp.dstPort, th);
  out.writeUInt16BE(tcp.srcPort, th + 2);
  if (tcp.flags & TCP_FLAGS.ACK) {
    out.writeUInt32BE(tcp.ack, th + 4);
    out[th + 13] = TCP_FLAGS.RST;
  } else {
    const payload = Math.max(0, l4Length - tcp.dataOffset);
    const occupied = payload + (tcp.flags & TCP_FLAGS.SYN ? 1 : 0) + (tcp.flags & TCP_FLAGS.FIN ? 1 : 0);
    out.writeUInt32BE((tcp.seq + occupied) >>> 0, th + 8);
    out[th + 13] = TCP_FLAGS.RST | TCP_FLAGS.ACK;
  }
  out[th + 12] = 5 << 4; // data offset: 5 words, no options; window and urgent pointer stay 0
}
