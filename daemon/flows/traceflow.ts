/**
 * Traceflow, the pure part: a real packet crafted as if the source Pod sent it, injected at the
 * Pod's port, and observed in every table it visits. Pure (no I/O): the frame, the temporary
 * observation flows, and the report assembled from what the bridge sent back.
 *
 * How a table visit is observed: while a trace runs, each table has a flow at the highest priority
 * matching the traced packet (IPv4 or IPv6 from the source Pod with DSCP 63) whose bit in reg9 is still
 * clear. It sends a copy to the agent (a packet-in carrying the table and every register), sets
 * its bit and looks the same table up again, where the table's own flows now decide. So every
 * table the packet really visits reports once per pass, in order, with the registers as the
 * pipeline left them: reg0 (drop decided by a rule), reg1 (output port), reg5/reg6 (the rule).
 * A packet coming back from the host after DNAT (the re-entrance leg of a Service) starts with
 * clear registers and is observed again. Replies are not traced: they are not from the source.
 */
import { ipv4ToBytes, ipv4TransportChecksum, ipv6TransportChecksum, internetChecksum } from '../packet.js';
import { parseIp } from '../policy/cidr.js';
import { puntActions, PuntCategory } from './punt.js';
import { REG0, TABLES, type TableName, VIRTUAL_MAC } from './tables.js';

/** DSCP 63 in the IPv4 TOS byte or the IPv6 traffic class (ECN bits clear). */
export const TRACE_TOS = 0xfc;
/** The observation flows' cookies: outside sluice's content-hash prefix, so flow sync ignores them. */
export const TRACE_COOKIE_PREFIX = 0x7ace;
export const TRACE_COOKIE_FILTER = `cookie=0x${TRACE_COOKIE_PREFIX.toString(16)}000000000000/0xffff000000000000`;
/** One bit per table: the table has reported this pass. */
export const TRACE_REG = 9;

/** ICMP is an echo request: ICMPv6 (type 128) when the addresses are IPv6. */
export type TraceProtocol = 'TCP' | 'UDP' | 'ICMP';

export interface TracePacket {
  srcMac: string;
  /** Both addresses of one family, IPv4 or IPv6. */
  srcIp: string;
  dstIp: string;
  protocol: TraceProtocol;
  /** TCP/UDP destination port (ignored for ICMP). */
  dstPort: number;
  /** TCP/UDP source port, ICMP echo id: a fresh one per trace, so no connection state matches it. */
  srcPort: number;
  ipId: number;
}

const macBytes = (mac: string): Buffer => Buffer.from(mac.split(':').map((h) => Number.parseInt(h, 16)));

/** The 16 bytes of an IPv6 address; throws on anything else. */
function ipv6Bytes(ip: string): Buffer {
  const a = parseIp(ip);
  if (a?.family !== 6) throw new Error(`"${ip}" is not an IPv6 address`);
  return Buffer.from(a.value.toString(16).padStart(32, '0'), 'hex');
}

/**
 * Ethernet + IPv4 or IPv6 (DSCP 63) + TCP SYN / UDP datagram / ICMP(v6) echo request, every
 * checksum set.
 */
export function traceFrame(p: TracePacket): Buffer {
  const v6 = p.srcIp.includes(':');
  if (v6 !== p.dstIp.includes(':')) throw new Error(`trace packet: ${p.srcIp} and ${p.dstIp} are not of one family`);
  const src = v6 ? ipv6Bytes(p.srcIp) : ipv4ToBytes(p.srcIp);
  const dst = v6 ? ipv6Bytes(p.dstIp) : ipv4ToBytes(p.dstIp);
  const transportChecksum = (proto: number, seg: Buffer) => (v6 ? ipv6TransportChecksum(src, dst, proto, seg) : ipv4TransportChecksum(src, dst, proto, seg));
  let l4: Buffer;
  let proto: number;
  if (p.protocol === 'TCP') {
    proto = 6;
    l4 = Buffer.alloc(20);
    l4.writeUInt16BE(p.srcPort, 0);
    l4.writeUInt16BE(p.dstPort, 2);
    l4.writeUInt32BE(0x5ace0000 + (p.ipId & 0xffff), 4); // sequence number
    l4[12] = 5 << 4; // data offset: 5 words
    l4[13] = 0x02; // SYN
    l4.writeUInt16BE(64240, 14); // window
    l4.writeUInt16BE(transportChecksum(proto, l4), 16);
  } else if (p.protocol === 'UDP') {
    proto = 17;
    const payload = Buffer.from('sluice traceflow');
    l4 = Buffer.alloc(8 + payload.length);
    l4.writeUInt16BE(p.srcPort, 0);
    l4.writeUInt16BE(p.dstPort, 2);
    l4.writeUInt16BE(l4.length, 4);
    payload.copy(l4, 8);
    l4.writeUInt16BE(transportChecksum(proto, l4) || 0xffff, 6);
  } else {
    proto = v6 ? 58 : 1;
    const payload = Buffer.from('sluice traceflow');
    l4 = Buffer.alloc(8 + payload.length);
    l4[0] = v6 ? 128 : 8; // echo request
    l4.writeUInt16BE(p.srcPort, 4); // identifier
    l4.writeUInt16BE(1, 6); // sequence
    payload.copy(l4, 8);
    l4.writeUInt16BE(v6 ? ipv6TransportChecksum(src, dst, proto, l4) : internetChecksum(l4), 2);
  }
  const eth = Buffer.alloc(14);
  macBytes(VIRTUAL_MAC).copy(eth, 0);
  macBytes(p.srcMac).copy(eth, 6);
  if (v6) {
    const ip6 = Buffer.alloc(40);
    ip6.writeUInt32BE(((6 << 28) | (TRACE_TOS << 20)) >>> 0, 0); // version 6, traffic class, flow label 0
    ip6.writeUInt16BE(l4.length, 4);
    ip6[6] = proto;
    ip6[7] = 64; // hop limit
    src.copy(ip6, 8);
    dst.copy(ip6, 24);
    eth.writeUInt16BE(0x86dd, 12);
    return Buffer.concat([eth, ip6, l4]);
  }
  const ip = Buffer.alloc(20);
  ip[0] = 0x45;
  ip[1] = TRACE_TOS;
  ip.writeUInt16BE(20 + l4.length, 2);
  ip.writeUInt16BE(p.ipId & 0xffff, 4);
  ip.writeUInt16BE(0x4000, 6); // don't fragment
  ip[8] = 64;
  ip[9] = proto;
  src.copy(ip, 12);
  dst.copy(ip, 16);
  ip.writeUInt16BE(internetChecksum(ip), 10);
  eth.writeUInt16BE(0x0800, 12);
  return Buffer.concat([eth, ip, l4]);
}

/** The observation flows for a trace of packets from `srcIp`, IPv4 or IPv6 (ovs-ofctl add-flows text, one per table). */
export function traceObservationFlows(srcIp: string): string {
  const from = srcIp.includes(':') ? `ipv6,ipv6_src=${srcIp}` : `ip,nw_src=${srcIp}`;
  return TABLES.map((_table, i) => {
    const bit = `0x${(1 << i).toString(16)}`;
    const cookie = `0x${TRACE_COOKIE_PREFIX.toString(16)}${i.toString(16).padStart(12, '0')}`;
    const report = puntActions({ category: PuntCategory.trace, extra: Buffer.from([i]) });
    return `cookie=${cookie},table=${i},priority=65535,${from},nw_tos=${TRACE_TOS},reg${TRACE_REG}=0/${bit},actions=${report},load:1->NXM_NX_REG${TRACE_REG}[${i}],resubmit(,${i})\n`;
  }).join('');
}

/** One table visit as the bridge reported it. */
export interface TraceObservation {
  table: number;
  registers: number[];
}

export interface RuleRef {
  kind: string;
  namespace?: string | undefined;
  name: string;
  rule?: string | undefined;
  tier?: string | undefined;
  /** The policy's priority (kinds that have one). */
  priority?: number | undefined;
  action?: string | undefined;
}

export type TraceVerdict = 'allow' | 'drop' | 'reject';

export interface TraceLeg {
  /** The Node whose bridge the leg crossed (set on every leg of a trace that crossed more than one). */
  node?: string | undefined;
  /** Tables visited, in order. */
  tables: TableName[];
  verdict: TraceVerdict;
  /** Where the packet went (allow), or where it was dropped. */
  outcome: string;
  /** The egress/ingress rule that decided, when one did. */
  egressRule?: RuleRef | undefined;
  ingressRule?: RuleRef | undefined;
  /** Allowed out through antrea-gw0: the host routes it on (to another Node, or back after a Service's DNAT). */
  toGateway?: boolean | undefined;
}

export interface TraceContext {
  /** The policy rule behind a conjunction id (the compiler's describe). */
  rule(conjId: number): RuleRef | undefined;
  /** A name for an OpenFlow port: "antrea-gw0", "Pod x/a (port 3)". */
  port(ofport: number): string;
  gatewayOfport: number;
}

/**
 * The legs of a trace from its observations in arrival order (a new leg starts whenever the packet
 * enters table 0 again) and the reject punts seen for it (their count per leg is not known, so a
 * reject applies to the last leg that reached a Metric table with a rule's drop).
 */
export function assembleTrace(observations: TraceObservation[], rejected: boolean, ctx: TraceContext): TraceLeg[] {
  const legs: TraceObservation[][] = [];
  for (const o of observations) {
    if (o.table === 0 || legs.length === 0) legs.push([]);
    legs[legs.length - 1]!.push(o);
  }
  return legs.map((obs, i) => {
    const tables = obs.map((o) => TABLES[o.table]!).filter(Boolean);
    const last = obs[obs.length - 1]!;
    const lastTable = TABLES[last.table]!;
    const regs = last.registers;
    const reg = (n: number) => regs[n] ?? 0;
    const egress = reg(5) ? ctx.rule(reg(5)) : undefined;
    const ingress = reg(6) ? ctx.rule(reg(6)) : undefined;
    const rules = { ...(egress ? { egressRule: egress } : {}), ...(ingress ? { ingressRule: ingress } : {}) };
    const ruleDrop = (reg(0) & REG0.ruleDrop) !== 0 && (lastTable === 'EgressMetric' || lastTable === 'IngressMetric');
    if (ruleDrop) {
      const rule = lastTable === 'EgressMetric' ? egress : ingress;
      const verdict: TraceVerdict = rejected && i === legs.length - 1 ? 'reject' : 'drop';
      return { tables, verdict, outcome: `${verdict === 'reject' ? 'rejected' : 'dropped'} in ${lastTable} by ${rule ? describeRule(rule) : 'a rule'}`, ...rules };
    }
    if (lastTable === 'Output') {
      const out = reg(1);
      return { tables, verdict: 'allow', outcome: `output to ${ctx.port(out)}`, ...rules, ...(out === ctx.gatewayOfport ? { toGateway: true } : {}) };
    }
    return { tables, verdict: 'drop', outcome: `dropped in ${lastTable}${dropReason(lastTable)}`, ...rules };
  });
}

function dropReason(table: TableName): string {
  switch (table) {
    case 'IngressDefaultRule':
      return ' (the destination is isolated for ingress by a Kubernetes NetworkPolicy and no rule allows this)';
    case 'EgressDefaultRule':
      return ' (the source is isolated for egress by a Kubernetes NetworkPolicy and no rule allows this)';
    case 'SpoofGuard':
      return ' (source address or MAC not the Pod\'s own)';
    case 'ConntrackState':
      return ' (conntrack state invalid)';
    default:
      return '';
  }
}

export function describeRule(r: RuleRef): string {
  const name = `${r.namespace ? `${r.namespace}/` : ''}${r.name}`;
  const detail = [r.action, r.tier && `tier ${r.tier}`, r.priority !== undefined && `priority ${r.priority}`].filter(Boolean).join(', ');
  return `${r.kind} ${name}${r.rule ? ` rule ${r.rule}` : ''}${detail ? ` (${detail})` : ''}`;
}

/** The trace's overall verdict: what the last leg did (a Service's pre-DNAT leg only hands the packet to the host). */
export function traceVerdict(legs: TraceLeg[]): TraceVerdict | undefined {
  return legs[legs.length - 1]?.verdict;
}
