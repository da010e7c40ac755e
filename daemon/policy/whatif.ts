/**
 * What-if (pure): the connections whose verdict a proposed change would flip. Two engines are fed
 * the same objects, one with the change applied (objects created or replaced, objects deleted), and
 * both answer the same probes: Pod to Pod and Pod to Service on every port a Pod or Service declares
 * and every port the changed objects name, and between Pods and the addresses of every ipBlock or
 * network the changed objects name. Only probes whose verdict differs are reported.
 */
import { formatIp, parseCidr } from './cidr.js';
import { PolicyEngine } from './engine.js';
import type { DecidedBy, KubeObject, Probe, ProbeResult, ValidationError } from './types.js';

export interface WhatIfOptions {
  /** Only connections from or to this namespace. */
  namespace?: string | undefined;
  ephemeralPorts?: { first: number; last: number };
}

export interface VerdictChange {
  from: string;
  to: string;
  port: number;
  protocol: Probe['protocol'];
  before: { verdict: ProbeResult['verdict']; decidedBy: DecidedBy | null };
  after: { verdict: ProbeResult['verdict']; decidedBy: DecidedBy | null };
}

export interface WhatIfResult {
  /** Connections compared (probes answered by both sides). */
  compared: number;
  changes: VerdictChange[];
  /** Objects of the change that the engine refuses (they would be ignored once applied), and deletions of objects the cluster does not have. */
  problems: string[];
  /** Fields of changed objects their kind's schema does not have (kubectl would refuse or prune them). */
  warnings: ValidationError[];
}

/** Kinds that are not namespaced; every other kind the engine reads is. */
const CLUSTER_SCOPED = new Set(['Namespace', 'Node', 'Tier', 'ClusterGroup', 'ClusterNetworkPolicy', 'AdminNetworkPolicy', 'BaselineAdminNetworkPolicy']);

const group = (apiVersion: string | undefined) => (apiVersion?.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '');
/** Identity of an object across versions of its API group (kubectl apply's view). */
export const objectKey = (o: KubeObject): string => `${group(o.apiVersion)}|${o.kind}|${CLUSTER_SCOPED.has(o.kind) ? '' : (o.metadata.namespace ?? 'default')}|${o.metadata.name}`;
const describe = (o: KubeObject) => `${o.kind} ${CLUSTER_SCOPED.has(o.kind) ? '' : `${o.metadata.namespace ?? 'default'}/`}${o.metadata.name}`;

function engineFor(objects: KubeObject[], opts: WhatIfOptions): PolicyEngine {
  const engine = new PolicyEngine({ ...(opts.ephemeralPorts ? { ephemeralPorts: opts.ephemeralPorts } : {}), log: () => undefined });
  const rank = (o: KubeObject) => (o.kind === 'Namespace' || o.kind === 'Node' ? 0 : o.kind === 'Tier' ? 1 : 2);
  for (const o of [...objects].sort((a, b) => rank(a) - rank(b))) {
    try {
      engine.upsert(o);
    } catch {
      // refused objects are reported through engine.errors() where the engine records them
    }
  }
  return engine;
}

type PortProto = { port: number; protocol: Probe['protocol'] };

/**
 * Ports and networks a policy object names, found by shape rather than per kind: `{protocol?, port}`
 * (NetworkPolicy, Antrea), `portNumber: {protocol, port}` (AdminNetworkPolicy), `{tcp|udp|sctp:
 * {destinationPort: {number} | {range: {start, end}}}}` (ClusterNetworkPolicy v1alpha2), `endPort`,
 * and `cidr` / `networks` / `except` strings.
 */
export function namedPortsAndNetworks(o: KubeObject): { ports: PortProto[]; cidrs: string[] } {
  const ports: PortProto[] = [];
  const cidrs: string[] = [];
  const proto = (v: unknown): Probe['protocol'] | undefined => (typeof v === 'string' && ['TCP', 'UDP', 'SCTP'].includes(v.toUpperCase()) ? (v.toUpperCase() as Probe['protocol']) : undefined);
  const walk = (v: unknown, protocol: Probe['protocol'] | undefined): void => {
    if (Array.isArray(v)) {
      for (const x of v) walk(x, protocol);
      return;
    }
    if (!v || typeof v !== 'object') return;
    const r = v as Record<string, unknown>;
    const here = proto(r.protocol) ?? protocol;
    for (const k of ['port', 'number', 'endPort', 'start', 'end']) {
      const n = r[k];
      if (typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535) ports.push({ port: n, protocol: here ?? 'TCP' });
    }
    for (const k of ['cidr']) if (typeof r[k] === 'string') cidrs.push(r[k] as string);
    for (const k of ['networks', 'except']) if (Array.isArray(r[k])) for (const c of r[k] as unknown[]) if (typeof c === 'string') cidrs.push(c);
    for (const [k, x] of Object.entries(r)) {
      if (k === 'metadata') continue;
      const keyed = ['tcp', 'udp', 'sctp'].includes(k) ? (k.toUpperCase() as Probe['protocol']) : undefined;
      walk(x, keyed ?? here);
    }
  };
  walk(o.spec, undefined);
  return { ports, cidrs };
}

/**
 * The first address of a CIDR that is not its network address (for /31 and /32, /127 and /128,
 * the address itself); IPv4 or IPv6.
 */
export function addressIn(cidr: string): string | undefined {
  const text = cidr.trim();
  if (text.includes(':')) {
    const c = parseCidr(text.includes('/') ? text : `${text}/128`);
    if (!c) return undefined;
    return formatIp(6, c.prefix < 127 ? c.start + 1n : c.start);
  }
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)(?:\/(\d+))?$/.exec(text);
  if (!m) return undefined;
  const bits = m[5] === undefined ? 32 : Number(m[5]);
  const octets = m.slice(1, 5).map(Number);
  if (bits > 32 || octets.some((x) => x > 255)) return undefined;
  let n = ((octets[0]! << 24) >>> 0) + (octets[1]! << 16) + (octets[2]! << 8) + octets[3]!;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  n = (n & mask) >>> 0;
  if (bits < 31) n += 1;
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export function whatIf(live: KubeObject[], changed: KubeObject[], deleted: KubeObject[], opts: WhatIfOptions = {}): WhatIfResult {
  const problems: string[] = [];
  const byKey = new Map(live.map((o) => [objectKey(o), o]));
  for (const o of deleted) {
    if (!byKey.delete(objectKey(o))) problems.push(`delete ${describe(o)}: the cluster has no such object`);
  }
  for (const o of changed) {
    const obj = CLUSTER_SCOPED.has(o.kind) || o.metadata.namespace ? o : { ...o, metadata: { ...o.metadata, namespace: 'default' } };
    byKey.set(objectKey(obj), obj);
  }
  const before = engineFor(live, opts);
  const after = engineFor([...byKey.values()], opts);
  const errKey = (e: ValidationError) => `${e.kind}|${e.namespace ?? ''}|${e.name}`;
  const touched = new Set(changed.map((o) => `${o.kind}|${CLUSTER_SCOPED.has(o.kind) ? '' : (o.metadata.namespace ?? 'default')}|${o.metadata.name}`));
  for (const e of after.errors()) if (touched.has(errKey(e))) problems.push(`invalid ${e.kind} ${e.namespace ? `${e.namespace}/` : ''}${e.name}: ${e.field}: ${e.message} (it would be ignored)`);
  const warnings = after.warnings().filter((w) => touched.has(errKey(w)));

  // What to probe.
  const ports = new Map<string, PortProto>();
  const add = (p: PortProto) => ports.set(`${p.port}/${p.protocol}`, p);
  const cidrs = new Set<string>();
  for (const o of [...changed, ...deleted]) {
    const n = namedPortsAndNetworks(o);
    n.ports.forEach(add);
    n.cidrs.forEach((c) => cidrs.add(c));
  }
  const podsOf = (e: PolicyEngine) => [...e.cluster.pods.values()].filter((p) => !p.hostNetwork);
  const afterPods = new Set(podsOf(after).map((p) => `${p.namespace}/${p.name}`));
  const pods = podsOf(before).filter((p) => afterPods.has(`${p.namespace}/${p.name}`)).sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
  for (const p of pods) for (const c of p.ports) add({ port: c.containerPort, protocol: c.protocol as Probe['protocol'] });
  const services = [...before.cluster.services.values()].filter((s) => after.cluster.services.has(`${s.namespace}/${s.name}`));
  const sortedPorts = [...ports.values()].sort((a, b) => a.port - b.port || a.protocol.localeCompare(b.protocol));
  const inScope = (ref: string) => !opts.namespace || ref.startsWith(`${opts.namespace}/`) || ref.startsWith(`service:${opts.namespace}/`);
  const probes: Probe[] = [];
  const push = (p: Probe) => {
    if (inScope(p.from) || inScope(p.to)) probes.push(p);
  };
  const refs = pods.map((p) => `${p.namespace}/${p.name}`);
  for (const { port, protocol } of sortedPorts) {
    for (const from of refs) for (const to of refs) if (from !== to) push({ from, to, port, protocol });
  }
  for (const s of services) {
    for (const sp of s.ports) for (const from of refs) push({ from, to: `service:${s.namespace}/${s.name}`, port: sp.port, protocol: sp.protocol as Probe['protocol'] });
  }
  const addresses = [...new Set([...cidrs].map(addressIn).filter((a): a is string => a !== undefined))].sort();
  for (const a of addresses) {
    for (const { port, protocol } of sortedPorts) {
      for (const pod of refs) {
        push({ from: pod, to: `ip:${a}`, port, protocol });
        push({ from: `ip:${a}`, to: pod, port, protocol });
      }
    }
  }

  const changes: VerdictChange[] = [];
  let compared = 0;
  for (const p of probes) {
    let b: ProbeResult;
    let a: ProbeResult;
    try {
      b = before.evaluate(p);
      a = after.evaluate(p);
    } catch {
      continue; // an endpoint one side does not know (e.g. a Service without a matching port)
    }
    compared++;
    if (a.verdict !== b.verdict) {
      changes.push({
        from: p.from, to: p.to, port: p.port, protocol: p.protocol,
        before: { verdict: b.verdict, decidedBy: b.decidedBy ?? null },
        after: { verdict: a.verdict, decidedBy: a.decidedBy ?? null },
      });
    }
  }
  return { compared, changes, problems, warnings };
}
