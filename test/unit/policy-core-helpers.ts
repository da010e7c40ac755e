/**
 * Shared fixtures for the policy-engine tests: the upstream e2e model (namespaces x, y, z with
 * Pods a, b, c serving 80/81 over TCP/UDP/SCTP with named ports serve-<port>-<proto>), a
 * reachability grid, and a test-only policy kind whose objects carry hand-written IR rules.
 */
import { PolicyEngine, type NormalizerEntry } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import type { GroupDef, InternalRule, Peer, Isolation, KubeObject, Probe, TierDef } from '../../daemon/policy/types.js';

export const NAMESPACES = ['x', 'y', 'z'];
export const PODS = ['a', 'b', 'c'];
export const ALL = NAMESPACES.flatMap((ns) => PODS.map((p) => `${ns}/${p}`));

export function podIp(ns: string, pod: string): string {
  return `10.244.${NAMESPACES.indexOf(ns) + 1}.${PODS.indexOf(pod) + 10}`;
}

export function namespace(name: string, labels: Record<string, string> = {}, annotations?: Record<string, string>): KubeObject {
  return { apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name, ...labels }, ...(annotations ? { annotations } : {}) } };
}

export function pod(ns: string, name: string, opts: { labels?: Record<string, string>; ip?: string | null; node?: string; hostNetwork?: boolean; sa?: string; ports?: { name?: string; containerPort: number; protocol?: string }[] } = {}): KubeObject {
  const ports = opts.ports ?? [80, 81].flatMap((p) => ['TCP', 'UDP', 'SCTP'].map((proto) => ({ name: `serve-${p}-${proto.toLowerCase()}`, containerPort: p, protocol: proto })));
  const ip = opts.ip === undefined ? (NAMESPACES.includes(ns) && PODS.includes(name) ? podIp(ns, name) : undefined) : opts.ip ?? undefined;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: opts.labels ?? { pod: name } },
    spec: {
      containers: [{ name: 'c', ports }],
      ...(opts.node ? { nodeName: opts.node } : {}),
      ...(opts.hostNetwork ? { hostNetwork: true } : {}),
      ...(opts.sa ? { serviceAccountName: opts.sa } : {}),
    },
    ...(ip ? { status: { podIP: ip } } : {}),
  };
}

export function node(name: string, ip: string, labels: Record<string, string> = {}): KubeObject {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name, labels }, status: { addresses: [{ type: 'InternalIP', address: ip }] } };
}

export function netpol(ns: string, name: string, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: ns }, spec };
}

/** The x/y/z × a/b/c model, Pods on node-1 (x), node-2 (y, z). */
export function modelEngine(extra: NormalizerEntry[] = [], nodeName?: string): PolicyEngine {
  const engine = new PolicyEngine({ normalizers: [...k8s, ...extra], ...(nodeName ? { nodeName } : {}) });
  for (const ns of NAMESPACES) engine.upsert(namespace(ns));
  for (const ns of NAMESPACES) for (const p of PODS) {
    const obj = pod(ns, p);
    obj.spec.nodeName = ns === 'x' ? 'node-1' : 'node-2';
    engine.upsert(obj);
  }
  return engine;
}

const MARK = { allow: '.', drop: 'X', reject: 'R' } as const;

/**
 * Reachability as 9 rows (from x/a … z/c) of 9 characters (to x/a … z/c), rows separated by
 * spaces: "." allowed, "X" dropped, "R" rejected. Loopback cells are evaluated too.
 */
export function grid(engine: PolicyEngine, port: number, protocol: Probe['protocol'] = 'TCP'): string {
  return ALL.map((from) => ALL.map((to) => MARK[engine.evaluate({ from, to, port, protocol }).verdict]).join('')).join(' ');
}

/** A grid where every cell is "." except the listed ones: cells "x/a>y/b": mark. */
export function gridWith(cells: Record<string, string>, base = '.'): string {
  return ALL.map((from) => ALL.map((to) => cells[`${from}>${to}`] ?? base).join('')).join(' ');
}

/** Cells from a set of sources to a set of destinations, all with the same mark. */
export function cells(froms: string[], tos: string[], mark: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of froms) for (const t of tos) out[`${f}>${t}`] = mark;
  return out;
}

export const inNs = (ns: string) => PODS.map((p) => `${ns}/${p}`);

/**
 * Test-only kind: `test.sluice.io/v1 Rules` objects carry IR directly in spec (rules, isolations,
 * groups, tiers), so the evaluator's precedence can be tested without any real kind's normalizer.
 */
export const testKind: NormalizerEntry = {
  group: 'test.sluice.io',
  versions: ['v1'],
  kind: 'Rules',
  normalize: (obj) => ({
    rules: (obj.spec?.rules ?? []) as InternalRule[],
    isolations: (obj.spec?.isolations ?? []) as Isolation[],
    groups: (obj.spec?.groups ?? []) as GroupDef[],
    tiers: (obj.spec?.tiers ?? []) as TierDef[],
    errors: [],
  }),
};

export function rulesObject(name: string, spec: { rules?: InternalRule[]; isolations?: Isolation[]; groups?: GroupDef[] }): KubeObject {
  return { apiVersion: 'test.sluice.io/v1', kind: 'Rules', metadata: { name }, spec };
}

let seq = 0;
/** A hand-written IR rule; defaults: stage 0, tier 250, any peer, any port. */
export function rule(r: Partial<InternalRule> & { direction: InternalRule['direction']; action: InternalRule['action']; appliedTo: InternalRule['appliedTo'] }, p: Partial<InternalRule['priority']> = {}, name = `r${++seq}`): InternalRule {
  return {
    id: `test/${name}`,
    ref: { kind: 'AntreaClusterNetworkPolicy', name, rule: name, tier: 'application' },
    priority: { stage: 0, tier: 250, policy: 1, rule: 0, tieBreak: name, ...p },
    ports: [],
    ...r,
  };
}

export const podsIn = (ns: string, labels: Record<string, string> = {}): Peer => ({ kind: 'pods', namespaces: { kind: 'names', names: [ns] }, pods: { matchLabels: labels } });

/** Small deterministic PRNG (mulberry32) for property tests, so a failure is reproducible from its seed. */
export function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n: number) => Math.floor(next() * n), pick: <T>(xs: readonly T[]) => xs[Math.floor(next() * xs.length)]! };
}
export type Rng = ReturnType<typeof rng>;
