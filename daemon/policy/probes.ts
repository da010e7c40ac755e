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
const IPV4 = /^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}$/;

/** "ns/pod" | "service:ns/name" | "ip:A.B.C.D" */
export function parseEndpoint(ref: string): ParsedEndpoint {
  if (typeof ref !== 'string') throw new ProbeSyntaxError(`endpoint must be a string, got ${JSON.stringify(ref)}`);
  if (ref.startsWith('ip:')) {
    const ip = ref.slice(3);
    if (!IPV4.test(ip)) throw new ProbeSyntaxError(`"${ref}": not an IPv4 address`);
    return { kind: 'ip', ip };
  }
  const isService = ref.startsWith('service:');
  const rest = isService ? ref.slice('service:'.length) : ref;
  const m = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(rest);
  if (!m) throw new ProbeSyntaxError(`"${ref}": expected ns/pod, service:ns/name or ip:A.B.C.D`);
  return { kind: isService ? 'service' : 'pod', namespace: m[1]!, name: m[3]! };
}

/** Validates a probe array (the JSON probe-file format); throws ProbeSyntaxError naming the entry. */
export function parseProbes(json: unknown): Probe[] {
  if (!Array.isArray(json)) throw new ProbeSyntaxError('a probe file is a JSON array of {from, to, port, protocol, sourcePort?}');
  return json.map((p, i) => {
    const where = `probe ${i}`;
    if (typeof p !== 'object' || p === null) throw new ProbeSyntaxError(`${where}: not an object`);
    const { from, to, port, protocol, sourcePort } = p as Record<string, unknown>;
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
    return {
      from: from as string, to: to as string, port: portNum, protocol: proto as Probe['protocol'],
      ...(typeof sourcePort === 'number' ? { sourcePort } : {}),
    };
  });
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
    const key = `${r.port}/${r.protocol}`;
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
