/**
 * Audit log lines, in the format of Antrea's np.log:
 *
 *   <yyyy/mm/dd> <HH:MM:SS.micro> <ovs-table-name> <policy-reference> <action> <openflow-priority>
 *   <source-ip> <source-port> <destination-ip> <destination-port> <protocol> <packet-length>
 *   [ [<N> packets in <duration>]]
 *
 * e.g. `2021/06/24 23:56:41.346165 AntreaPolicyEgressRule AntreaNetworkPolicy:default/test-anp Drop
 * 44900 10.10.1.65 35402 10.0.0.5 80 TCP 60 [3 packets in 1.011379442s]`. Kubernetes default drops
 * are referenced as plain `K8sNetworkPolicy` with priority -1. Values that do not exist (ports of
 * ICMP) print `<nil>`. The packet length is the IP total length (IPv6: 40 + payload length). The seed's format has no field for
 * a rule's logLabel, so none is written. Pure.
 */
import type { RuleRef } from '../../policy/types.js';
import { decodeEthernet, decodeIpv6Packet, decodePacket, ETH_P_IPV6, ipv6ToString, PROTOCOL_NAMES } from '../../packet.js';

export type AuditAction = 'Allow' | 'Drop' | 'Reject' | 'Pass' | 'Redirect';

export interface AuditEvent {
  /** Wall-clock time of the packet, nanoseconds since the epoch. */
  timeNs: bigint;
  tableName: string;
  /** From policyReference(). */
  policyRef: string;
  action: AuditAction;
  /** OpenFlow priority of the deciding flow; -1 for the Kubernetes default drop. */
  priority: number;
  srcIp: string;
  srcPort?: number;
  dstIp: string;
  dstPort?: number;
  protocol: string;
  /** IP total length of the packet. */
  length: number;
}

export type TimeZone = 'utc' | 'local';

const NIL = '<nil>';

/** The reference for Kubernetes NetworkPolicy default drops (no policy decided). */
export const K8S_DEFAULT_DROP_REFERENCE = 'K8sNetworkPolicy';

const NAMESPACED: Record<RuleRef['kind'], boolean> = {
  NetworkPolicy: true,
  AntreaNetworkPolicy: true,
  AntreaClusterNetworkPolicy: false,
  AdminNetworkPolicy: false,
  BaselineAdminNetworkPolicy: false,
  ClusterNetworkPolicy: false,
};

/** `K8sNetworkPolicy:ns/name`, `AntreaNetworkPolicy:ns/name`, `AntreaClusterNetworkPolicy:name`, `AdminNetworkPolicy:name`… */
export function policyReference(ref: Pick<RuleRef, 'kind' | 'namespace' | 'name'>): string {
  if (!(ref.kind in NAMESPACED)) throw new Error(`audit log: unknown policy kind "${ref.kind}"`);
  if (!ref.name) throw new Error(`audit log: ${ref.kind} reference without a name`);
  const kind = ref.kind === 'NetworkPolicy' ? 'K8sNetworkPolicy' : ref.kind;
  if (NAMESPACED[ref.kind]) {
    if (!ref.namespace) throw new Error(`audit log: ${ref.kind} ${ref.name} has no namespace`);
    return `${kind}:${ref.namespace}/${ref.name}`;
  }
  return `${kind}:${ref.name}`;
}

const p2 = (n: number) => String(n).padStart(2, '0');

/** `2021/06/24 23:56:41.346165` */
export function formatTimestamp(timeNs: bigint, zone: TimeZone = 'utc'): string {
  const ms = Number(timeNs / 1_000_000n);
  const micros = Number((timeNs / 1000n) % 1_000_000n);
  const d = new Date(ms);
  const [y, mo, da, h, mi, s] =
    zone === 'utc'
      ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
      : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
  return `${y}/${p2(mo)}/${p2(da)} ${p2(h)}:${p2(mi)}:${p2(s)}.${String(micros).padStart(6, '0')}`;
}

/** A duration as Go's time.Duration.String() prints it: `1.011379442s`, `600ms`, `1m2.5s`, `0s`. */
export function formatGoDuration(ns: bigint): string {
  if (ns < 0n) return `-${formatGoDuration(-ns)}`;
  if (ns === 0n) return '0s';
  const frac = (value: bigint, unit: bigint, suffix: string): string => {
    const whole = value / unit;
    const rest = (value % unit).toString().padStart(unit.toString().length - 1, '0').replace(/0+$/, '');
    return `${whole}${rest ? `.${rest}` : ''}${suffix}`;
  };
  if (ns < 1000n) return `${ns}ns`;
  if (ns < 1_000_000n) return frac(ns, 1000n, 'µs');
  if (ns < 1_000_000_000n) return frac(ns, 1_000_000n, 'ms');
  const hours = ns / 3_600_000_000_000n;
  const minutes = (ns / 60_000_000_000n) % 60n;
  const seconds = frac(ns % 60_000_000_000n, 1_000_000_000n, 's');
  if (hours > 0n) return `${hours}h${minutes}m${seconds}`;
  if (minutes > 0n) return `${minutes}m${seconds}`;
  return seconds;
}

const field = (v: string | number | undefined): string => (v === undefined || v === '' ? NIL : String(v));

/** The line without its timestamp: also the deduplication key. */
export function eventBody(e: AuditEvent): string {
  return [
    field(e.tableName),
    field(e.policyRef),
    e.action,
    String(e.priority),
    field(e.srcIp),
    field(e.srcPort),
    field(e.dstIp),
    field(e.dstPort),
    field(e.protocol),
    String(e.length),
  ].join(' ');
}

export interface Repeat {
  count: number;
  durationNs: bigint;
}

/** One line, without the trailing newline. */
export function formatAuditLine(e: AuditEvent, zone: TimeZone = 'utc', repeat?: Repeat): string {
  const suffix = repeat && repeat.count > 1 ? ` [${repeat.count} packets in ${formatGoDuration(repeat.durationNs)}]` : '';
  return `${formatTimestamp(e.timeNs, zone)} ${eventBody(e)}${suffix}`;
}

/** The packet fields of an audit event, read from a punted Ethernet frame (IPv4 or IPv6). */
export function packetFields(frame: Buffer): Pick<AuditEvent, 'srcIp' | 'srcPort' | 'dstIp' | 'dstPort' | 'protocol' | 'length'> {
  if (decodeEthernet(frame).etherType === ETH_P_IPV6) {
    const p = decodeIpv6Packet(frame);
    const ports = p.tcp ?? p.ports;
    return {
      srcIp: ipv6ToString(p.src),
      dstIp: ipv6ToString(p.dst),
      protocol: PROTOCOL_NAMES[p.protocol] ?? String(p.protocol),
      length: 40 + p.payloadLength,
      ...(ports ? { srcPort: ports.srcPort, dstPort: ports.dstPort } : {}),
    };
  }
  const p = decodePacket(frame);
  const ports = p.tcp ?? p.ports;
  return {
    srcIp: p.ip.src,
    dstIp: p.ip.dst,
    protocol: PROTOCOL_NAMES[p.protocol] ?? String(p.protocol),
    length: p.ip.totalLength,
    ...(ports ? { srcPort: ports.srcPort, dstPort: ports.dstPort } : {}),
  };
}
