/**
 * Label keys named like Object.prototype members are valid Kubernetes label keys. Random
 * NetworkPolicies and Pods/Namespaces whose labels and selectors use such keys everywhere are
 * judged by the engine and by a small reference matcher written here over Maps (which have no
 * inherited keys); the verdicts must agree. Also checked through the manifest reader (YAML).
 */
import t from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { matchesSelector } from '../../daemon/policy/labels.js';
import { parseManifests } from '../../daemon/manifests.js';
import type { KubeObject, LabelSelector } from '../../daemon/policy/types.js';
import { rng, type Rng } from './policy-core-helpers.js';

// (__proto__ is no valid label key: it must start and end with an alphanumeric.)
const KEYS = ['constructor', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf', 'propertyIsEnumerable', 'app'] as const;
const VALUES = ['a', 'b', ''];
const NAMESPACES = ['x', 'y'];
const PODS = ['p0', 'p1', 'p2'];

/** Own-property labels built without object-literal syntax (which would treat __proto__ as the prototype). */
const labelsOf = (entries: [string, string][]): Record<string, string> => Object.fromEntries(entries);

function randomLabels(r: Rng): [string, string][] {
  const out = new Map<string, string>();
  const n = r.int(3);
  for (let i = 0; i < n; i++) out.set(r.pick(KEYS), r.pick(VALUES));
  return [...out];
}

function randomSelector(r: Rng): LabelSelector {
  const sel: LabelSelector = {};
  if (r.int(2) === 0) sel.matchLabels = labelsOf(randomLabels(r).slice(0, 1));
  if (r.int(2) === 0) {
    const operator = r.pick(['In', 'NotIn', 'Exists', 'DoesNotExist'] as const);
    const key = r.pick(KEYS);
    sel.matchExpressions = [operator === 'In' || operator === 'NotIn' ? { key, operator, values: [r.pick(VALUES.filter(Boolean))] } : { key, operator }];
  }
  return sel;
}

/** The reference: selector semantics over a Map (absent key = undefined, never inherited). */
function refMatches(sel: LabelSelector, labels: Map<string, string>): boolean {
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels.get(k) !== v) return false;
  for (const req of sel.matchExpressions ?? []) {
    const v = labels.get(req.key);
    if (req.operator === 'In' && (v === undefined || !req.values!.includes(v))) return false;
    if (req.operator === 'NotIn' && v !== undefined && req.values!.includes(v)) return false;
    if (req.operator === 'Exists' && v === undefined) return false;
    if (req.operator === 'DoesNotExist' && v !== undefined) return false;
  }
  return true;
}

interface Scenario {
  nsLabels: Map<string, Map<string, string>>;
  pods: { ns: string; name: string; labels: Map<string, string> }[];
  policies: { ns: string; podSelector: LabelSelector; from: { podSelector?: LabelSelector; namespaceSelector?: LabelSelector }[] }[];
}

function randomScenario(r: Rng): Scenario {
  const nsLabels = new Map(NAMESPACES.map((ns) => [ns, new Map([...randomLabels(r), ['kubernetes.io/metadata.name', ns] as [string, string]])]));
  const pods = NAMESPACES.flatMap((ns) => PODS.map((name) => ({ ns, name, labels: new Map(randomLabels(r)) })));
  const policies = Array.from({ length: 1 + r.int(3) }, () => ({
    ns: r.pick(NAMESPACES),
    podSelector: randomSelector(r),
    from: Array.from({ length: 1 + r.int(2) }, () => {
      const which = r.int(3);
      return which === 0 ? { podSelector: randomSelector(r) } : which === 1 ? { namespaceSelector: randomSelector(r) } : { podSelector: randomSelector(r), namespaceSelector: randomSelector(r) };
    }),
  }));
  return { nsLabels, pods, policies };
}

function objects(s: Scenario): KubeObject[] {
  return [
    ...[...s.nsLabels].map(([name, labels]) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: labelsOf([...labels]) } })),
    ...s.pods.map((p, i) => ({
      apiVersion: 'v1', kind: 'Pod',
      metadata: { name: p.name, namespace: p.ns, labels: labelsOf([...p.labels]) },
      spec: { containers: [{ name: 'c', ports: [{ containerPort: 80 }] }] },
      status: { podIP: `10.0.0.${i + 10}` },
    })),
    ...s.policies.map((p, i) => ({
      apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy',
      metadata: { name: `np${i}`, namespace: p.ns },
      spec: { podSelector: p.podSelector, ingress: [{ from: p.from }] },
    })),
  ];
}

/** Ingress-only NetworkPolicies: isolated when some policy selects the Pod; then some peer must match. */
function refVerdict(s: Scenario, from: Scenario['pods'][number], to: Scenario['pods'][number]): 'allow' | 'drop' {
  const selecting = s.policies.filter((p) => p.ns === to.ns && refMatches(p.podSelector, to.labels));
  if (selecting.length === 0) return 'allow';
  const peerMatches = (peer: Scenario['policies'][number]['from'][number], ns: string) =>
    (peer.namespaceSelector ? refMatches(peer.namespaceSelector, s.nsLabels.get(from.ns)!) : from.ns === ns) &&
    refMatches(peer.podSelector ?? {}, from.labels);
  return selecting.some((p) => p.from.some((peer) => peerMatches(peer, p.ns))) ? 'allow' : 'drop';
}

t.test('a selector on a key named like an Object.prototype member does not match a Pod without it', async (t) => {
  for (const key of KEYS.filter((k) => k !== 'app')) {
    t.notOk(matchesSelector({ matchExpressions: [{ key, operator: 'Exists' }] }, { app: 'client' }), `${key} Exists`);
    t.ok(matchesSelector({ matchExpressions: [{ key, operator: 'DoesNotExist' }] }, { app: 'client' }), `${key} DoesNotExist`);
    t.notOk(matchesSelector({ matchLabels: labelsOf([[key, 'x']]) }, { app: 'client' }), `${key} matchLabels`);
    t.ok(matchesSelector({ matchLabels: labelsOf([[key, 'x']]) }, labelsOf([[key, 'x']])), `${key} matchLabels, own`);
  }
});

t.test('prototype-named label keys everywhere: the engine agrees with a Map-based reference', async (t) => {
  const r = rng(20261124);
  let probes = 0;
  let drops = 0;
  for (let iter = 0; iter < 300; iter++) {
    const s = randomScenario(r);
    const engine = new PolicyEngine();
    for (const o of objects(s)) engine.upsert(o);
    t.same(engine.errors(), [], `scenario ${iter} is valid`);
    for (const from of s.pods) for (const to of s.pods) {
      if (from === to) continue;
      const got = engine.evaluate({ from: `${from.ns}/${from.name}`, to: `${to.ns}/${to.name}`, port: 80, protocol: 'TCP' }).verdict;
      const want = refVerdict(s, from, to);
      probes++;
      if (want === 'drop') drops++;
      if (got !== want) {
        t.fail(`scenario ${iter}: ${from.ns}/${from.name} -> ${to.ns}/${to.name}: engine ${got}, reference ${want}`, { scenario: JSON.stringify(objects(s)) });
        return;
      }
    }
  }
  t.ok(drops > probes / 10 && drops < probes - probes / 10, `both verdicts occur (${drops} drops of ${probes})`);
});

t.test('the YAML reader keeps prototype-named keys as own data', async (t) => {
  const objs = parseManifests(`
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {__proto__: a, constructor: b}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: x, labels: {app: client}}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: q, namespace: x, labels: {__proto__: z}}
status: {podIP: 10.0.0.2}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np, namespace: x}
spec:
  podSelector: {}
  ingress: [{from: [{podSelector: {matchExpressions: [{key: constructor, operator: Exists}]}}]}]
`);
  t.ok(Object.hasOwn(objs[0]!.metadata.labels!, '__proto__'));
  t.ok(Object.hasOwn(objs[2]!.metadata.labels!, '__proto__'));
  const engine = new PolicyEngine();
  for (const o of objs) engine.upsert(o);
  t.equal(engine.evaluate({ from: 'x/p', to: 'x/q', port: 80, protocol: 'TCP' }).verdict, 'drop');
});
