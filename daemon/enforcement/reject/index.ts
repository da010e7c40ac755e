export { buildRejectReply, ICMP_DEST_UNREACH, ICMP_HOST_ADMIN_PROHIBITED, type RejectKind, type RejectResult } from './reject.js';
export { type ReplyMacs, sendRejectReply } from './send.js';
export { ICMPV6_ADMIN_PROHIBITED, ICMPV6_DEST_UNREACH } from './reject6.js';
export { decodeIpv6Packet, decodePacket, ipv6ToString, PacketDecodeError, type PacketSummary, PROTOCOL_NAMES } from '../../packet.js';
