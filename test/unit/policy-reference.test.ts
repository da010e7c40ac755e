/**
 * Differential property test: random Kubernetes NetworkPolicy + AdminNetworkPolicy +
 * BaselineAdminNetworkPolicy sets (then with Antrea ClusterNetworkPolicies in tiers and v1alpha2
 * ClusterNetworkPolicies as well) over a model with varied labels, named ports sharing a name on
 * different numbers, ipBlocks with excepts, endPorts and port ranges, TCP/UDP/SCTP, judged by the
 * engine and by the small reference evaluator below, written from the API documentation alone
 * (no engine code). Fixed seed in the unit suite; `SLUICE_REFERENCE_ITERATIONS=N` runs more.
 * Run over IPv4, IPv6-only and dual-stack clusters: in a dual-stack one the blocks are of either
 * family and each probe is of one family (a block matches addresses of its own family only).
 */
import t, { type Test } from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { rng, type Rng } from './policy-core-helpers.js';

type Proto = 'TCP' | 'UDP' | 'SCTP';
type Sel = { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] };
type Family = 4 | 6;
interface Pod { ns: string; name: string; labels: Record<string, string>; ips: Partial<Record<Family, string>>; ports: { name?: string; port: number; protocol: Proto }[] }
interface Model { nsLabels: Record<string, Record<string, string>>; pods: Pod[] }

const NAMESPACES = ['x', 'y', 'z'];
const PROTOS: Proto[] = ['TCP', 'UDP', 'SCTP'];
const PROBE_PORTS = [80, 81, 53, 8080];

// ---- reference semantics ----

function selects(sel: Sel, labels: Record<string, string>): boolean {
  const has = (k: string) => Object.hasOwn(labels, k);
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (!has(k) || labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const present = has(e.key);
    const inValues = present && (e.values ?? []).includes(labels[e.key]!);
    if (e.operator === 'In' && !inValues) return false;
    if (e.operator === 'NotIn' && inValues) return false;
    if (e.operator === 'Exists' && !present) return false;
    if (e.operator === 'DoesNotExist' && present) return false;
  }
  return true;
}

/** An address as a number: IPv4 dotted quad, or IPv6 groups with at most one "::". */
function ipNum(ip: string): bigint {
  if (!ip.includes(':')) return ip.split('.').reduce((n, o) => n * 256n + BigInt(o), 0n);
  const [left, right] = ip.split('::');
  const l = left ? left.split(':') : [];
  const r = right ? right.split(':') : [];
  const groups = ip.includes('::') ? [...l, ...Array(8 - l.length - r.length).fill('0'), ...r] : l;
  return groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g, 16)), 0n);
}
function inCidr(ip: string | undefined, cidr: string): boolean {
  const [base, bits] = cidr.split('/');
  if (ip === undefined || ip.includes(':') !== base!.includes(':')) return false;
  const size = 1n << BigInt((ip.includes(':') ? 128 : 32) - Number(bits));
  const start = (ipNum(base!) / size) * size;
  return ipNum(ip) >= start && ipNum(ip) < start + size;
}

interface Conn { src: Pod; dst: Pod; port: number; protocol: Proto; family: Family }

/** A port on the destination Pod by name: same name, the probe's protocol and number. */
const namedPortIs = (dst: Pod, name: string, port: number, protocol: Proto) => dst.ports.some((p) => p.name === name && p.protocol === protocol && p.port === port);

function k8sPortMatches(ports: any[] | undefined, c: Conn): boolean {
  if (!ports || ports.length === 0) return true;
  return ports.some((p) => {
    const protocol = p.protocol ?? 'TCP';
    if (protocol !== c.protocol) return false;
    if (p.port === undefined) return true;
    if (typeof p.port === 'string') return namedPortIs(c.dst, p.port, c.port, c.protocol);
    return c.port >= p.port && c.port <= (p.endPort ?? p.port);
  });
}

function k8sPeerMatches(peers: any[] | undefined, other: Pod, policyNs: string, m: Model, family: Family): boolean {
  if (!peers || peers.length === 0) return true;
  return peers.some((p) => {
    if (p.ipBlock) return inCidr(other.ips[family], p.ipBlock.cidr) && !(p.ipBlock.except ?? []).some((e: string) => inCidr(other.ips[family], e));
    const nsOk = p.namespaceSelector ? selects(p.namespaceSelector, m.nsLabels[other.ns]!) : other.ns === policyNs;
    return nsOk && selects(p.podSelector ?? {}, other.labels);
  });
}

function adminPortMatches(ports: any[] | undefined, c: Conn): boolean {
  if (!ports || ports.length === 0) return true;
  return ports.some((p) => {
    if (p.portNumber) return p.portNumber.protocol === c.protocol && p.portNumber.port === c.port;
    if (p.portRange) return p.portRange.protocol === c.protocol && c.port >= p.portRange.start && c.port <= p.portRange.end;
    return namedPortIs(c.dst, p.namedPort, c.port, c.protocol);
  });
}

function adminPeerMatches(peers: any[], other: Pod, m: Model, family: Family): boolean {
  return peers.some((p) => {
    if (p.namespaces) return selects(p.namespaces, m.nsLabels[other.ns]!);
    if (p.pods) return selects(p.pods.namespaceSelector, m.nsLabels[other.ns]!) && selects(p.pods.podSelector, other.labels);
    return (p.networks as string[]).some((n) => inCidr(other.ips[family], n));
  });
}

const subjectSelects = (s: any, pod: Pod, m: Model) =>
  s.namespaces ? selects(s.namespaces, m.nsLabels[pod.ns]!) : selects(s.pods.namespaceSelector, m.nsLabels[pod.ns]!) && selects(s.pods.podSelector, pod.labels);

const ANTREA_TIERS: Record<string, number> = { emergency: 50, securityops: 100, networkops: 150, platform: 200, application: 250, baseline: 253 };
const ADMIN_TIER = 251;
/** v1alpha2 ClusterNetworkPolicy tier Admin: before the application tier, as Antrea places it. */
const CNP_ADMIN_TIER = 220;
const BASELINE_ADMIN_TIER = 254;

/** A rule in evaluation order: tier priority, policy priority, rule index. */
interface Ordered { tier: number; priority: number; index: number; action: string; matches: () => boolean }

function cnpPortMatches(protocols: any[] | undefined, c: Conn): boolean {
  if (!protocols || protocols.length === 0) return true;
  return protocols.some((p) => {
    if (p.destinationNamedPort) return namedPortIs(c.dst, p.destinationNamedPort, c.port, c.protocol);
    const proto = p.tcp ? 'TCP' : p.udp ? 'UDP' : 'SCTP';
    const d = (p.tcp ?? p.udp ?? p.sctp).destinationPort;
    return proto === c.protocol && (d.number !== undefined ? c.port === d.number : c.port >= d.range.start && c.port <= d.range.end);
  });
}

/** Antrea ClusterNetworkPolicy peers: podSelector alone selects Pods of every Namespace. */
function antreaPeerMatches(peers: any[] | undefined, other: Pod, m: Model, family: Family): boolean {
  if (!peers || peers.length === 0) return true;
  return peers.some((p) => {
    if (p.ipBlock) return inCidr(other.ips[family], p.ipBlock.cidr) && !(p.ipBlock.except ?? []).some((e: string) => inCidr(other.ips[family], e));
    return selects(p.namespaceSelector ?? {}, m.nsLabels[other.ns]!) && selects(p.podSelector ?? {}, other.labels);
  });
}

/**
 * One Pod's side of a connection. Stage 0 by tier priority: the Antrea tiers, CNP Admin at 220
 * (before the application tier, 250), ANP at 251; Allow/Accept allows, Deny/Drop/Reject denies,
 * Pass goes on to stage 1.
 * Stage 1: NetworkPolicy isolation decides. Stage 2: the Antrea baseline tier (253), then BANP and
 * CNP Baseline (254, BANP first); a Baseline Pass leaves the default. Default: allow.
 */
function sideAllows(dir: 'ingress' | 'egress', pod: Pod, other: Pod, c: Conn, policies: KubeObject[], m: Model): boolean {
  const peerKey = dir === 'ingress' ? 'from' : 'to';
  const ordered: Ordered[] = [];
  for (const p of policies) {
    const rules: any[] = p.spec[dir] ?? [];
    if (p.kind === 'ClusterNetworkPolicy' && p.apiVersion.startsWith('crd.antrea.io/')) {
      if (!p.spec.appliedTo.some((a: any) => selects(a.namespaceSelector ?? {}, m.nsLabels[pod.ns]!) && selects(a.podSelector ?? {}, pod.labels))) continue;
      rules.forEach((r, index) => ordered.push({ tier: ANTREA_TIERS[p.spec.tier ?? 'application']!, priority: p.spec.priority, index, action: r.action, matches: () => antreaPeerMatches(r[peerKey], other, m, c.family) && k8sPortMatches(r.ports, c) }));
    } else if (p.kind === 'AdminNetworkPolicy' || p.kind === 'BaselineAdminNetworkPolicy' || p.kind === 'ClusterNetworkPolicy') {
      if (!subjectSelects(p.spec.subject, pod, m)) continue;
      const tier = p.kind === 'AdminNetworkPolicy' ? ADMIN_TIER : p.spec.tier === 'Admin' ? CNP_ADMIN_TIER : BASELINE_ADMIN_TIER;
      const ports = p.kind === 'ClusterNetworkPolicy' ? (r: any) => cnpPortMatches(r.protocols, c) : (r: any) => adminPortMatches(r.ports, c);
      rules.forEach((r, index) => ordered.push({ tier, priority: p.spec.priority ?? 0, index, action: r.action, matches: () => adminPeerMatches(r[peerKey], other, m, c.family) && ports(r) }));
    }
  }
  ordered.sort((a, b) => a.tier - b.tier || a.priority - b.priority || a.index - b.index);
  const allows = (action: string) => action === 'Allow' || action === 'Accept';
  for (const r of ordered.filter((x) => x.tier < ANTREA_TIERS.baseline!)) {
    if (!r.matches()) continue;
    if (r.action === 'Pass') break;
    return allows(r.action);
  }
  // policyTypes defaults to Ingress, plus Egress when the policy has egress rules.
  const types = (np: KubeObject): string[] => np.spec.policyTypes ?? ['Ingress', ...((np.spec.egress ?? []).length > 0 ? ['Egress'] : [])];
  const nps = policies.filter((p) => p.kind === 'NetworkPolicy' && p.metadata.namespace === pod.ns && selects(p.spec.podSelector, pod.labels) &&
    types(p).includes(dir === 'ingress' ? 'Ingress' : 'Egress'));
  if (nps.length > 0) return nps.some((np) => (np.spec[dir] ?? []).some((r: any) => k8sPeerMatches(r[peerKey], other, np.metadata.namespace!, m, c.family) && k8sPortMatches(r.ports, c)));
  for (const r of ordered.filter((x) => x.tier >= ANTREA_TIERS.baseline!)) {
    if (!r.matches()) continue;
    return r.action === 'Pass' || allows(r.action);
  }
  return true;
}

function referenceAllows(c: Conn, policies: KubeObject[], m: Model): boolean {
  return sideAllows('egress', c.src, c.dst, c, policies, m) && sideAllows('ingress', c.dst, c.src, c, policies, m);
}

// ---- random input ----

/** Which families the cluster has: its Pods' addresses, the blocks policies use, the probes. */
type Stack = 4 | 6 | 'dual';
let STACK: Stack = 4;

/** A block of the model's IPv4 plan, or (per STACK) its IPv6 counterpart in fd00:244::/32. */
function block(r: Rng, v4: string): string {
  const family = STACK === 'dual' ? r.pick([4, 6]) : STACK;
  if (family === 4) return v4;
  const [addr, bits] = v4.split('/');
  if (bits === '16') return 'fd00:244::/32';
  const [, , c, d] = addr!.split('.').map(Number);
  return `fd00:244:${c}::${d ? d!.toString(16) : ''}/${Number(bits) + 96}`;
}

function randomModel(r: Rng): Model {
  const nsLabels: Model['nsLabels'] = {};
  for (const ns of NAMESPACES) nsLabels[ns] = { ns, 'kubernetes.io/metadata.name': ns, ...(r.int(2) ? { env: r.pick(['prod', 'dev']) } : {}) };
  const pods: Pod[] = [];
  NAMESPACES.forEach((ns, i) => ['a', 'b', 'c'].forEach((name, j) => {
    const labels: Record<string, string> = { pod: name };
    if (r.int(2)) labels.app = r.pick(['web', 'db']);
    // "web" names port 80 on some Pods and 81 on others; "dns" is UDP 53.
    const web = r.int(2) ? 80 : 81;
    pods.push({
      ns, name, labels,
      ips: { ...(STACK !== 6 ? { 4: `10.244.${i + 1}.${j + 10}` } : {}), ...(STACK !== 4 ? { 6: `fd00:244:${i + 1}::${(j + 10).toString(16)}` } : {}) },
      ports: [{ name: 'web', port: web, protocol: 'TCP' }, { port: web === 80 ? 81 : 80, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }, { name: 'sctp', port: 8080, protocol: 'SCTP' }],
    });
  }));
  return { nsLabels, pods };
}

function randomSelector(r: Rng, kind: 'pod' | 'ns'): Sel {
  const roll = r.int(5);
  if (roll === 0) return {};
  if (kind === 'ns') {
    if (roll === 1) return { matchLabels: { env: r.pick(['prod', 'dev']) } };
    if (roll === 2) return { matchExpressions: [{ key: 'env', operator: r.pick(['Exists', 'DoesNotExist']) }] };
    return { matchLabels: { ns: r.pick(NAMESPACES) } };
  }
  if (roll === 1) return { matchLabels: { app: r.pick(['web', 'db']) } };
  if (roll === 2) return { matchExpressions: [{ key: 'pod', operator: r.pick(['In', 'NotIn']), values: [r.pick(['a', 'b', 'c'])] }] };
  if (roll === 3) return { matchExpressions: [{ key: 'app', operator: r.pick(['Exists', 'DoesNotExist']) }] };
  return { matchLabels: { pod: r.pick(['a', 'b', 'c']) } };
}

function randomK8sPorts(r: Rng): any[] | undefined {
  if (r.int(3) === 0) return undefined;
  return Array.from({ length: 1 + r.int(2) }, () => {
    const roll = r.int(5);
    const protocol = r.pick(PROTOS);
    if (roll === 0) return { protocol };
    if (roll === 1) return { protocol: protocol === 'TCP' && r.int(2) ? undefined : protocol, port: r.pick(['web', 'dns', 'sctp']) };
    if (roll === 2) return { protocol, port: 80, endPort: r.pick([81, 8080]) };
    return { protocol, port: r.pick(PROBE_PORTS) };
  }).map((p) => Object.fromEntries(Object.entries(p).filter(([, v]) => v !== undefined)));
}

function randomK8sPeer(r: Rng): any {
  const roll = r.int(4);
  if (roll === 0) {
    if (!r.int(2)) return { ipBlock: { cidr: block(r, `10.244.${1 + r.int(3)}.0/${r.pick([24, 28, 31])}`) } };
    // cidr and except of one family (the API refuses a mix)
    const cidr = block(r, '10.244.0.0/16');
    const ex = `10.244.${1 + r.int(3)}.0/24`;
    return { ipBlock: { cidr, except: [cidr.includes(':') ? `fd00:244:${ex.split('.')[2]}::/120` : ex] } };
  }
  if (roll === 1) return { podSelector: randomSelector(r, 'pod') };
  if (roll === 2) return { namespaceSelector: randomSelector(r, 'ns') };
  return { podSelector: randomSelector(r, 'pod'), namespaceSelector: randomSelector(r, 'ns') };
}

function randomNetworkPolicy(r: Rng, i: number): KubeObject {
  const rules = (peerKey: string) => Array.from({ length: r.int(3) }, () => {
    const rule: any = {};
    if (r.int(4)) rule[peerKey] = Array.from({ length: 1 + r.int(2) }, () => randomK8sPeer(r));
    const ports = randomK8sPorts(r);
    if (ports) rule.ports = ports;
    return rule;
  });
  const spec: any = { podSelector: randomSelector(r, 'pod') };
  if (r.int(2)) spec.ingress = rules('from');
  if (r.int(2)) spec.egress = rules('to');
  if (r.int(3) === 0) spec.policyTypes = r.pick([['Ingress'], ['Egress'], ['Ingress', 'Egress']]);
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np${i}`, namespace: r.pick(NAMESPACES) }, spec };
}

function randomAdminPorts(r: Rng): any[] | undefined {
  if (r.int(3) === 0) return undefined;
  return Array.from({ length: 1 + r.int(2) }, () => {
    const roll = r.int(3);
    if (roll === 0) return { portNumber: { protocol: r.pick(PROTOS), port: r.pick(PROBE_PORTS) } };
    if (roll === 1) return { namedPort: r.pick(['web', 'dns', 'sctp']) };
    return { portRange: { protocol: r.pick(PROTOS), start: 53, end: r.pick([80, 81, 8080]) } };
  });
}

function randomAdminPeer(r: Rng, egress: boolean): any {
  const roll = r.int(egress ? 3 : 2);
  if (roll === 0) return { namespaces: randomSelector(r, 'ns') };
  if (roll === 1) return { pods: { namespaceSelector: randomSelector(r, 'ns'), podSelector: randomSelector(r, 'pod') } };
  return { networks: [block(r, r.pick(['10.244.0.0/16', '10.244.2.0/24', '10.244.1.10/31']))] };
}

function randomAdminPolicy(r: Rng, kind: 'AdminNetworkPolicy' | 'BaselineAdminNetworkPolicy', i: number, priority: number): KubeObject {
  const actions = kind === 'AdminNetworkPolicy' ? ['Allow', 'Deny', 'Pass'] : ['Allow', 'Deny'];
  const rules = (peerKey: string, egress: boolean) => Array.from({ length: r.int(3) }, () => {
    const rule: any = { action: r.pick(actions), [peerKey]: Array.from({ length: 1 + r.int(2) }, () => randomAdminPeer(r, egress)) };
    // The API refuses named ports together with networks peers.
    const withNetworks = rule[peerKey].some((p: any) => p.networks);
    const ports = randomAdminPorts(r)?.filter((p) => !(withNetworks && p.namedPort));
    if (ports && ports.length > 0) rule.ports = ports;
    return rule;
  });
  const subject = r.int(2) ? { namespaces: randomSelector(r, 'ns') } : { pods: { namespaceSelector: randomSelector(r, 'ns'), podSelector: randomSelector(r, 'pod') } };
  const spec: any = { subject, ingress: rules('from', false), egress: rules('to', true) };
  if (kind === 'AdminNetworkPolicy') spec.priority = priority;
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind, metadata: { name: kind === 'AdminNetworkPolicy' ? `anp${i}` : 'default' }, spec };
}

function randomAntreaPolicy(r: Rng, i: number, priority: number): KubeObject {
  const tier = r.pick([undefined, 'emergency', 'securityops', 'application', 'baseline']);
  const actions = tier === 'baseline' ? ['Allow', 'Drop', 'Reject'] : ['Allow', 'Drop', 'Reject', 'Pass'];
  const peer = () => {
    const roll = r.int(4);
    if (roll === 0) {
      const cidr = block(r, '10.244.0.0/16');
      const k = 1 + r.int(3);
      return { ipBlock: { cidr, except: [cidr.includes(':') ? `fd00:244:${k}::/120` : `10.244.${k}.0/24`] } };
    }
    if (roll === 1) return { podSelector: randomSelector(r, 'pod') };
    if (roll === 2) return { namespaceSelector: randomSelector(r, 'ns') };
    return { podSelector: randomSelector(r, 'pod'), namespaceSelector: randomSelector(r, 'ns') };
  };
  const rules = (dir: string, peerKey: string) => Array.from({ length: r.int(3) }, (_, k) => {
    const rule: any = { name: `${dir}-${k}`, action: r.pick(actions) };
    if (r.int(4)) rule[peerKey] = Array.from({ length: 1 + r.int(2) }, peer);
    const ports = randomK8sPorts(r);
    if (ports) rule.ports = ports.map((p) => ({ protocol: 'TCP', ...p }));
    return rule;
  });
  const appliedTo = [r.int(2) ? { podSelector: randomSelector(r, 'pod') } : { podSelector: randomSelector(r, 'pod'), namespaceSelector: randomSelector(r, 'ns') }];
  return {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: `acnp${i}` },
    spec: { ...(tier ? { tier } : {}), priority, appliedTo, ingress: rules('in', 'from'), egress: rules('out', 'to') },
  };
}

function randomClusterNetworkPolicy(r: Rng, i: number, tier: 'Admin' | 'Baseline', priority: number): KubeObject {
  const protocols = (): any[] | undefined => {
    if (r.int(3) === 0) return undefined;
    return Array.from({ length: 1 + r.int(2) }, () => {
      const roll = r.int(3);
      if (roll === 0) return { destinationNamedPort: r.pick(['web', 'dns', 'sctp']) };
      const proto = r.pick(['tcp', 'udp', 'sctp']);
      return { [proto]: { destinationPort: roll === 1 ? { number: r.pick(PROBE_PORTS) } : { range: { start: 53, end: r.pick([80, 81, 8080]) } } } };
    });
  };
  const rules = (dir: string, peerKey: string, egress: boolean) => Array.from({ length: r.int(3) }, (_, k) => {
    const rule: any = { name: `${dir}-${k}`, action: r.pick(['Accept', 'Deny', 'Pass']), [peerKey]: Array.from({ length: 1 + r.int(2) }, () => randomAdminPeer(r, egress)) };
    const withNetworks = rule[peerKey].some((p: any) => p.networks);
    const list = protocols()?.filter((p) => !(withNetworks && p.destinationNamedPort));
    if (list && list.length > 0) rule.protocols = list;
    return rule;
  });
  const subject = r.int(2) ? { namespaces: randomSelector(r, 'ns') } : { pods: { namespaceSelector: randomSelector(r, 'ns'), podSelector: randomSelector(r, 'pod') } };
  return {
    apiVersion: 'policy.networking.k8s.io/v1alpha2', kind: 'ClusterNetworkPolicy', metadata: { name: `cnp${i}` },
    spec: { tier, priority, subject, ingress: rules('in', 'from', false), egress: rules('out', 'to', true) },
  };
}

function clusterObjects(m: Model): KubeObject[] {
  return [
    ...NAMESPACES.map((name) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: m.nsLabels[name] } })),
    ...m.pods.map((p) => ({
      apiVersion: 'v1', kind: 'Pod', metadata: { name: p.name, namespace: p.ns, labels: p.labels },
      spec: { containers: [{ name: 'c', ports: p.ports.map((x) => ({ ...(x.name ? { name: x.name } : {}), containerPort: x.port, protocol: x.protocol })) }] },
      status: { podIP: p.ips[4] ?? p.ips[6], podIPs: Object.values(p.ips).map((ip) => ({ ip })) },
    })),
  ];
}

function runIterations(t: Test, seed: number, iterations: number, withAntrea: boolean, withCnp: boolean, stack: Stack = 4): void {
  STACK = stack;
  const r = rng(seed);
  let probes = 0;
  let drops = 0;
  for (let iter = 0; iter < iterations; iter++) {
    const m = randomModel(r);
    // Distinct priorities: the order of equal priorities across policies is not defined upstream.
    const priorities = [...Array(20).keys()].map((p) => p + 1).sort(() => r.next() - 0.5);
    const policies: KubeObject[] = [
      ...Array.from({ length: r.int(4) }, (_, i) => randomNetworkPolicy(r, i)),
      ...Array.from({ length: r.int(3) }, (_, i) => randomAdminPolicy(r, 'AdminNetworkPolicy', i, priorities[i]!)),
      ...(r.int(2) ? [randomAdminPolicy(r, 'BaselineAdminNetworkPolicy', 0, 0)] : []),
      ...(withAntrea ? Array.from({ length: r.int(3) }, (_, i) => randomAntreaPolicy(r, i, priorities[5 + i]! + 0.5)) : []),
      ...(withCnp ? Array.from({ length: r.int(3) }, (_, i) => randomClusterNetworkPolicy(r, i, r.pick(['Admin', 'Baseline'] as const), priorities[10 + i]!)) : []),
    ];
    const engine = new PolicyEngine();
    for (const o of [...clusterObjects(m), ...policies]) engine.upsert(o);
    const errors = engine.errors();
    if (errors.length > 0) {
      t.fail(`iteration ${iter}: generated policies are invalid`, { errors, policies: JSON.stringify(policies) });
      return;
    }
    for (const src of m.pods) for (const dst of m.pods) {
      if (src === dst) continue;
      const port = r.pick(PROBE_PORTS);
      const protocol = r.pick(PROTOS);
      const family: Family = stack === 'dual' ? r.pick([4, 6] as const) : stack;
      const want = referenceAllows({ src, dst, port, protocol, family }, policies, m);
      const got = engine.evaluate({ from: `${src.ns}/${src.name}`, to: `${dst.ns}/${dst.name}`, port, protocol, ...(stack === 'dual' ? { family } : {}) }).verdict === 'allow';
      probes++;
      if (!want) drops++;
      if (got !== want) {
        t.fail(`seed ${seed} iteration ${iter}: ${src.ns}/${src.name} -> ${dst.ns}/${dst.name} ${port}/${protocol} IPv${family}: engine ${got ? 'allow' : 'deny'}, reference ${want ? 'allow' : 'deny'}`,
          { model: JSON.stringify(m), policies: JSON.stringify(policies) });
        return;
      }
    }
  }
  t.pass(`${iterations} random policy sets, ${probes} probes agree (${drops} denied)`);
  t.ok(drops > probes / 20 && drops < probes - probes / 20, 'both verdicts are common');
}

const ITERATIONS = Number(process.env.SLUICE_REFERENCE_ITERATIONS ?? 150);
const SEED = Number(process.env.SLUICE_REFERENCE_SEED ?? 20261124);

t.test('the engine agrees with the reference evaluator (NetworkPolicy + ANP + BANP)', async (t) => {
  runIterations(t, SEED, ITERATIONS, false, false);
});

t.test('... with Antrea ClusterNetworkPolicies in tiers and v1alpha2 ClusterNetworkPolicies too', async (t) => {
  runIterations(t, SEED + 1, ITERATIONS, true, true);
});

t.test('IPv6-only cluster: every kind, IPv6 blocks and networks', async (t) => {
  runIterations(t, SEED + 2, ITERATIONS, true, true, 6);
});

t.test('dual-stack cluster: blocks of either family, each probe of one family', async (t) => {
  runIterations(t, SEED + 3, ITERATIONS, true, true, 'dual');
});
