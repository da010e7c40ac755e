// Property test: random AdminNetworkPolicy/BaselineAdminNetworkPolicy sets (with K8s NetworkPolicies)
// and their v1alpha2 ClusterNetworkPolicy translation give identical matrices on every port/protocol.
// Also: updates to Namespaces, Pods and policies give the same answers as a fresh engine.
import t from 'tap';
import type { KubeObject } from '../../daemon/policy/types.js';
import { rng } from './policy-core-helpers.js';
import { NAMESPACES, PODS, allMatrices, engineWith, toClusterNetworkPolicy, xyzModel } from './policy-admin-model.js';

function generate(seed: number): KubeObject[] {
  const r = rng(seed).next;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const maybe = (p: number) => r() < p;
  const nsSel = () => (maybe(0.2) ? {} : { matchLabels: { ns: pick(NAMESPACES) } });
  const podSel = () => (maybe(0.3) ? {} : maybe(0.5) ? { matchLabels: { pod: pick(PODS) } } : { matchExpressions: [{ key: 'pod', operator: 'NotIn', values: [pick(PODS)] }] });
  const subject = () => (maybe(0.5) ? { namespaces: nsSel() } : { pods: { namespaceSelector: nsSel(), podSelector: podSel() } });
  const peer = (egress: boolean) => {
    const roll = r();
    if (egress && roll < 0.15) return { networks: [`10.244.${1 + Math.floor(r() * 3)}.0/${pick([24, 28, 31])}`] };
    if (roll < 0.55) return { namespaces: nsSel() };
    return { pods: { namespaceSelector: nsSel(), podSelector: podSel() } };
  };
  const port = (): any => {
    const proto = pick(['TCP', 'UDP', 'SCTP']);
    const roll = r();
    if (roll < 0.4) return { portNumber: { protocol: proto, port: pick([80, 81]) } };
    if (roll < 0.7) return { portRange: { protocol: proto, start: 79, end: pick([80, 81]) } };
    return { namedPort: `serve-${pick([80, 81])}-${pick(['tcp', 'udp', 'sctp'])}` };
  };
  const rules = (egress: boolean, actions: string[]) =>
    Array.from({ length: Math.floor(r() * 4) }, (_, i) => {
      const to = Array.from({ length: 1 + Math.floor(r() * 2) }, () => peer(egress));
      const hasAddress = to.some((p) => 'networks' in p);
      let ports = maybe(0.5) ? Array.from({ length: 1 + Math.floor(r() * 2) }, port) : undefined;
      // Named ports cannot go with networks peers (CRD rule): use numbers there.
      if (ports && hasAddress) ports = ports.map((p) => (p.namedPort ? { portNumber: { protocol: 'TCP', port: 80 } } : p));
      return { ...(maybe(0.7) ? { name: `r${i}` } : {}), action: pick(actions), [egress ? 'to' : 'from']: to, ...(ports ? { ports } : {}) };
    });
  const objs: KubeObject[] = [];
  const anps = 1 + Math.floor(r() * 3);
  for (let i = 0; i < anps; i++) {
    objs.push({
      apiVersion: 'policy.networking.k8s.io/v1alpha1',
      kind: 'AdminNetworkPolicy',
      metadata: { name: `anp-${i}` },
      spec: { priority: Math.floor(r() * 4), subject: subject(), ingress: rules(false, ['Allow', 'Deny', 'Pass']), egress: rules(true, ['Allow', 'Deny', 'Pass']) },
    });
  }
  if (maybe(0.7)) {
    objs.push({
      apiVersion: 'policy.networking.k8s.io/v1alpha1',
      kind: 'BaselineAdminNetworkPolicy',
      metadata: { name: 'default' },
      spec: { subject: subject(), ingress: rules(false, ['Allow', 'Deny']), egress: rules(true, ['Allow', 'Deny']) },
    });
  }
  if (maybe(0.6)) {
    const ns = pick(NAMESPACES);
    objs.push({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { namespace: ns, name: 'np' },
      spec: { podSelector: podSel(), policyTypes: ['Ingress'], ingress: maybe(0.5) ? [{ from: [{ namespaceSelector: nsSel() }] }] : [] },
    });
  }
  return objs;
}

const SEEDS = Array.from({ length: 40 }, (_, i) => 1000 + i);

t.test('random ANP/BANP sets and their CNP translation give the same matrices', async (t) => {
  let nonTrivial = 0;
  for (const seed of SEEDS) {
    const objs = generate(seed);
    const v1 = engineWith(xyzModel(), objs);
    const v2 = engineWith(xyzModel(), objs.map(toClusterNetworkPolicy));
    t.same(v1.errors(), [], `seed ${seed}: v1alpha1 objects valid`);
    t.same(v2.errors(), [], `seed ${seed}: v1alpha2 objects valid`);
    const a = allMatrices(v1);
    const b = allMatrices(v2);
    t.same(b, a, `seed ${seed}: same matrices`);
    if (Object.values(a).some((m) => m.join('').includes('X'))) nonTrivial++;
  }
  // The generator must exercise real decisions, not only all-allowed matrices.
  t.ok(nonTrivial >= SEEDS.length / 2, `${nonTrivial}/${SEEDS.length} seeds drop something`);
});

t.test('updates give the same answers as a fresh engine', async (t) => {
  for (const seed of SEEDS.slice(0, 15)) {
    const objs = generate(seed);
    const next = generate(seed + 500);
    // Incremental: start from `objs`, relabel namespace y to look like z and Pod x/a like b, then swap policies.
    const inc = engineWith(xyzModel(), objs);
    allMatrices(inc); // warm caches
    const relabels: KubeObject[] = [
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'y', labels: { ns: 'z' } } },
      ...xyzModel().filter((o) => o.kind === 'Pod' && o.metadata.namespace === 'x' && o.metadata.name === 'a').map((o) => ({ ...o, metadata: { ...o.metadata, labels: { pod: 'b' } } })),
    ];
    for (const o of relabels) inc.upsert(o);
    for (const o of objs) if (o.kind !== 'NetworkPolicy') inc.remove({ apiVersion: o.apiVersion, kind: o.kind, name: o.metadata.name });
    for (const o of next) inc.upsert(o);
    const keptNp = objs.filter((o) => o.kind === 'NetworkPolicy' && !next.some((n) => n.kind === o.kind && n.metadata.namespace === o.metadata.namespace && n.metadata.name === o.metadata.name));
    const fresh = engineWith(xyzModel(), relabels, keptNp, next);
    t.same(allMatrices(inc), allMatrices(fresh), `seed ${seed}`);
  }
});
