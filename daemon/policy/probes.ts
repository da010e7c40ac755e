import { formatIp, isIpv4Mapped, parseIp } from './cidr.js';
import type { PortRange, Probe, ProbeResult, Verdict } from './types.js';

/** Linux's default net.ipv4.ip_local_port_range: where a client's source port lies. */
export const DEFAULT_EPHEMERAL_PORTS: PortRange = Object.freeze({ first: 32768, last: 60999 });

/** "FIRST-LAST" (1-65535, FIRST <= LAST) -> a PortRange; throws ProbeSyntaxError. */
export function parsePortRange(text: string, what: string): PortRange {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(text.trim());
  const first = m ? Number(m[1]) : NaN;
  const last = m ? Number(m[2]) : NaN;
  if (!m || first < 1 || last > 65535 || first > last) throw new ProbeSyntaxError(`${what}: "${text}" must be FIRST-LAST, ports 1-65535 with FIRST <= LAST`);
  return { first, last };
}

/** Thrown for unusable probe input; the message says what and where. */
export class ProbeSyntaxError extends Error {
  override name = 'ProbeSyntaxError';
}

export type ParsedEndpoint =
  | { kind: 'pod'; namespace: string; name: string }
  | { kind: 'service'; namespace: string; name: string }
  | { kind: 'ip'; ip: string };

const PROTOCOLS = new Set(['TCP', 'UDP', 'SCTP', 'ICMP']);

/**
 * "ns/pod" | "service:ns/name" | "ip:ADDRESS" with an IPv4 (A.B.C.D) or IPv6 address. An IPv6
 * address is read as Go's netip.ParseAddr reads it (compressed forms, a trailing dotted quad) and
 * kept in canonical form, so "ip:FD00:0::1" is the Pod whose status says fd00::1. Zone ids
 * ("fe80::1%eth0") and IPv4-mapped addresses ("::ffff:1.2.3.4") are refused: neither names a Pod,
 * Node or Service address (the API server refuses both in those fields).
 */
export function parseEndpoint(ref: string): ParsedEndpoint {
  if (typeof ref !== 'string') throw new ProbeSyntaxError(`endpoint must be a string, got ${JSON.stringify(ref)}`);
  if (ref.startsWith('ip:')) {
    const text = ref.slice(3);
    if (text.includes('%')) throw new ProbeSyntaxError(`"${ref}": an IPv6 zone id is not allowed in a probe address`);
    const ip = parseIp(text);
    if (!ip) throw new ProbeSyntaxError(`"${ref}": not an IPv4 or IPv6 address`);
    if (isIpv4Mapped(ip)) throw new ProbeSyntaxError(`"${ref}": an IPv4-mapped IPv6 address; write the IPv4 address (ip:${formatIp(4, ip.value & 0xffffffffn)})`);
    return { kind: 'ip', ip: formatIp(ip.family, ip.value) };
  }
  const isService = ref.startsWith('service:');
  const rest = isService ? ref.slice('service:'.length) : ref;
  const m = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(rest);
  if (!m) throw new ProbeSyntaxError(`"${ref}": expected ns/pod, service:ns/name or ip:ADDRESS (IPv4 or IPv6)`);
  return { kind: isService ? 'service' : 'pod', namespace: m[1]!, name: m[3]! };
}

/** Validates a probe array (the JSON probe-file format); throws ProbeSyntaxError naming the entry. */
export function parseProbes(json: unknown): Probe[] {
  if (!Array.isArray(json)) throw new ProbeSyntaxError('a probe file is a JSON array of {from, to, port, protocol, sourcePort?, family?}');
  return json.map((p, i) => {
    const where = `probe ${i}`;
    if (typeof p !== 'object' || p === null) throw new ProbeSyntaxError(`${where}: not an object`);
    const { from, to, port, protocol, sourcePort, family } = p as Record<string, unknown>;
    parseEndpointAt(from, `${where}.from`);
    parseEndpointAt(to, `${where}.to`);
    const proto = typeof protocol === 'string' ? protocol.toUpperCase() : protocol;
    if (typeof proto !== 'string' || !PROTOCOLS.has(proto)) {
      throw new ProbeSyntaxError(`${where}.protocol: must be TCP, UDP, SCTP or ICMP`);
    }
    const portNum = proto === 'ICMP' && port === undefined ? 0 : port;
    if (typeof portNum !== 'number' || !Number.isInteger(portNum) || portNum < 0 || portNum > 65535 || (portNum === 0 && proto !== 'ICMP')) {
      throw new ProbeSyntaxError(`${where}.port: must be an integer 1-65535`);
    }
    if (sourcePort !== undefined && sourcePort !== null) {
      if (proto === 'ICMP') throw new ProbeSyntaxError(`${where}.sourcePort: ICMP has no ports`);
      if (typeof sourcePort !== 'number' || !Number.isInteger(sourcePort) || sourcePort < 1 || sourcePort > 65535) {
        throw new ProbeSyntaxError(`${where}.sourcePort: must be an integer 1-65535`);
      }
    }
    const fam = family === undefined || family === null ? undefined : parseFamily(family, `${where}.family`);
    return {
      from: from as string, to: to as string, port: portNum, protocol: proto as Probe['protocol'],
      ...(typeof sourcePort === 'number' ? { sourcePort } : {}),
      ...(fam !== undefined ? { family: fam } : {}),
    };
  });
}

/** An address family: 4 or 6 (also "4", "6", "IPv4", "IPv6"); throws ProbeSyntaxError naming `where`. */
export function parseFamily(value: unknown, where: string): 4 | 6 {
  const text = String(value).toLowerCase();
  if (text === '4' || text === 'ipv4') return 4;
  if (text === '6' || text === 'ipv6') return 6;
  throw new ProbeSyntaxError(`${where}: the address family must be 4 or 6 (IPv4 or IPv6), not ${JSON.stringify(value)}`);
}

function parseEndpointAt(ref: unknown, where: string): void {
  try {
    parseEndpoint(ref as string);
  } catch (err) {
    throw new ProbeSyntaxError(`${where}: ${(err as Error).message}`);
  }
}

const MARK: Record<Verdict, string> = { allow: '.', drop: 'X', reject: 'R' };

/**
 * A from × to matrix per port/protocol, like the upstream netpol e2e prints:
 * "." allowed, "X" dropped, "R" rejected, "-" not probed.
 */
export function formatMatrices(results: ProbeResult[]): string {
  const groups = new Map<string, ProbeResult[]>();
  for (const r of results) {
    const key = `${r.port}/${r.protocol}${r.family !== undefined ? ` IPv${r.family}` : ''}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key)!.push(r);
  }
  const blocks: string[] = [];
  for (const [key, rs] of groups) {
    const froms = [...new Set(rs.map((r) => r.from))].sort();
    const tos = [...new Set(rs.map((r) => r.to))].sort();
    const cell = new Map(rs.map((r) => [`${r.from}\u0000${r.to}`, MARK[r.verdict]]));
    const width = Math.max(...froms.map((f) => f.length), 4);
    const colWidth = Math.max(...tos.map((t) => t.length));
    const lines = [`${key}  (. allow, X drop, R reject)`];
    lines.push(`${' '.repeat(width)}  ${tos.map((t) => t.padEnd(colWidth)).join(' ')}`);
    for (const f of froms) {
      lines.push(`${f.padEnd(width)}  ${tos.map((t) => (cell.get(`${f}\u0000${t}`) ?? '-').padEnd(colWidth)).join(' ')}`);
    }
    blocks.push(lines.join('\n'));
  }
  return blocks.join('\n\n');
}
