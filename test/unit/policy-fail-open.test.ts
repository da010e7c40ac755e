/**
 * Reproducers of inputs that made enforcement fail open (found by a differential test against a
 * real cluster), through the engine's public API: verdicts, the node rule set and, for the
 * placement of v1alpha2 ClusterNetworkPolicy tier Admin, the OpenFlow priorities derived from it.
 *  1. a label written without a value (`quarantine:`, YAML null) is the label quarantine="", as the
 *     API server stores it; a label value of another type is refused, not dropped;
 *  2. ClusterNetworkPolicy tier Admin sits at 220, before the Antrea application tier;
 *  3. policy names and namespaces are checked as the API server checks them.
 */
import t from 'tap';
import { allocatePriorities } from '../../daemon/flows/policy/priorities.js';
import { parseManifests } from '../../daemon/manifests.js';
import { PolicyEngine, UnknownEndpointError } from '../../daemon/policy/engine.js';
import type { KubeObject, Probe } from '../../daemon/policy/types.js';

const NODE = 'node-1';

/** Namespaces x (labelled `quarantine:`) and y; Pods x/a and y/a labelled `quarantine:`, x/b and y/b not; all on node-1. */
const MODEL = `
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {quarantine: }}
---
apiVersion: v1
kind: Namespace
metadata: {name: "y"}
---
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {quarantine: }}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
status: {addresses: [{type: InternalIP, address: 192.168.0.2}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {pod: a, quarantine: }}
spec: {nodeName: node-1}
status: {podIP: 10.0.1.1}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: x, labels: {pod: b}}
spec: {nodeName: node-1}
status: {podIP: 10.0.1.2}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: "y", labels: {pod: a, quarantine: }}
spec: {nodeName: node-1}
status: {podIP: 10.0.2.1}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: "y", labels: {pod: b}}
spec: {nodeName: node-1}
status: {podIP: 10.0.2.2}
`;

function engineOf(...texts: string[]): PolicyEngine {
  const engine = new PolicyEngine({ nodeName: NODE });
  for (const text of texts) for (const o of parseManifests(text)) engine.upsert(o);
  return engine;
}

const tcp = (from: string, to: string, port = 80): Probe => ({ from, to, port, protocol: 'TCP' });
const verdict = (e: PolicyEngine, from: string, to: string, port = 80) => e.evaluate(tcp(from, to, port)).verdict;

/** The local Pods (or Nodes) a node rule of policy `name` applies to, by direction. */
function nodeTargets(e: PolicyEngine, name: string): string[] {
  return e.nodeRuleSet().filter((r) => r.ref.name === name).flatMap((r) => r.targets.map((x) => `${r.direction} ${r.action} ${x.ref}`)).sort();
}

const SELECTORS: [string, string][] = [
  ['Exists', '{matchExpressions: [{key: quarantine, operator: Exists}]}'],
  ['In [""]', '{matchExpressions: [{key: quarantine, operator: In, values: [""]}]}'],
  ['matchLabels quarantine: ""', '{matchLabels: {quarantine: ""}}'],
];

const acnp = (name: string, appliedTo: string, rules = 'ingress: [{action: Drop, from: [{namespaceSelector: {}}]}]') => `
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: ${name}}
spec:
  priority: 1
  appliedTo: [${appliedTo}]
  ${rules}
`;

t.test('a Pod label written without a value is "", so Exists, In [""] and matchLabels "" select the Pod', async (t) => {
  for (const [what, sel] of SELECTORS) {
    const e = engineOf(MODEL, acnp('quarantine', `{podSelector: ${sel}}`));
    t.same(e.errors(), [], `${what}: nothing refused`);
    t.same(e.cluster.pods.get('x/a')!.labels, { pod: 'a', quarantine: '' }, 'the label is kept as ""');
    t.equal(verdict(e, 'y/b', 'x/a'), 'drop', `${what}: the labelled Pod x/a is quarantined`);
    t.equal(verdict(e, 'y/b', 'y/a'), 'drop', `${what}: so is y/a`);
    t.equal(verdict(e, 'y/a', 'x/b'), 'allow', `${what}: an unlabelled Pod is not`);
    t.same(nodeTargets(e, 'quarantine'), ['Ingress Drop x/a', 'Ingress Drop y/a'], `${what}: the node rule set drops the same Pods`);
  }
});

t.test('a Namespace label written without a value is "", so namespaceSelector Exists, In [""] and "" select it', async (t) => {
  for (const [what, sel] of SELECTORS) {
    const e = engineOf(MODEL, acnp('quarantine-ns', `{namespaceSelector: ${sel}}`));
    t.same(e.cluster.namespaces.get('x')!.labels, { quarantine: '', 'kubernetes.io/metadata.name': 'x' });
    t.equal(verdict(e, 'y/b', 'x/a'), 'drop', `${what}: x/a is in the quarantined Namespace`);
    t.equal(verdict(e, 'y/b', 'x/b'), 'drop', `${what}: so is x/b`);
    t.equal(verdict(e, 'x/b', 'y/b'), 'allow', `${what}: y is not quarantined`);
    t.same(nodeTargets(e, 'quarantine-ns'), ['Ingress Drop x/a', 'Ingress Drop x/b'], `${what}: the node rule set drops the same Pods`);
  }
  // The same Namespace as a peer (a Kubernetes NetworkPolicy allows only from it).
  const np = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-quarantine, namespace: "y"}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {matchExpressions: [{key: quarantine, operator: Exists}]}}]}]
`;
  const e = engineOf(MODEL, np);
  t.equal(verdict(e, 'x/b', 'y/b'), 'allow', 'a peer in the labelled Namespace is allowed');
  t.equal(verdict(e, 'y/a', 'y/b'), 'drop', 'a peer outside it is not');
});

t.test('a Node label and a Service selector written without a value are "" too', async (t) => {
  const toNodes = acnp('quarantined-nodes', '{podSelector: {matchLabels: {pod: b}}}', 'egress: [{action: Drop, to: [{nodeSelector: {matchExpressions: [{key: quarantine, operator: Exists}]}}]}]');
  const e = engineOf(MODEL, toNodes, `
apiVersion: v1
kind: Service
metadata: {name: s, namespace: x}
spec: {clusterIP: 10.96.0.10, selector: {quarantine: }, ports: [{port: 80}]}
`);
  t.same(e.errors(), []);
  t.same(e.cluster.nodes.get('node-1')!.labels, { quarantine: '' });
  t.equal(verdict(e, 'x/b', 'ip:192.168.0.1'), 'drop', 'the labelled Node is a peer of the Drop rule');
  t.equal(verdict(e, 'x/b', 'ip:192.168.0.2'), 'allow', 'the other Node is not');
  t.same(e.cluster.services.get('x/s')!.selector, { quarantine: '' });
  t.same(e.cluster.serviceEndpoints('x', 's').map((p) => `${p.namespace}/${p.name}`), ['x/a'], 'the Service selects the labelled Pod');
});

t.test('a label value of another type is refused with an error naming the field, never silently dropped', async (t) => {
  const e = engineOf(MODEL, acnp('quarantine', `{podSelector: ${SELECTORS[0]![1]}}`), `
apiVersion: v1
kind: Pod
metadata: {name: c, namespace: x, labels: {pod: c, quarantine: yes}}
spec: {nodeName: node-1}
status: {podIP: 10.0.1.3}
---
apiVersion: v1
kind: Namespace
metadata: {name: z, labels: {tier: 5}}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: x}
spec: {clusterIP: 10.96.0.10, selector: {app: true}}
---
apiVersion: v1
kind: Node
metadata: {name: node-3, labels: [quarantine]}
`);
  t.same(e.errors().map((x) => `${x.kind} ${x.namespace ?? ''}/${x.name} ${x.field}: ${x.message}`), [
    'Namespace /z metadata.labels.tier: must be a string, not a number (5); the object is refused (as the API server would) and ignored',
    'Node /node-3 metadata.labels: must be a map of strings, not a list; the object is refused (as the API server would) and ignored',
    'Pod x/c metadata.labels.quarantine: must be a string, not a boolean (true); the object is refused (as the API server would) and ignored',
    'Service x/s spec.selector.app: must be a string, not a boolean (true); the object is refused (as the API server would) and ignored',
  ]);
  let unknown: unknown;
  try {
    e.evaluate(tcp('y/b', 'x/c'));
  } catch (err) {
    unknown = err;
  }
  t.ok(unknown instanceof UnknownEndpointError, 'the refused Pod does not exist (no verdict, allow or otherwise)');
  t.notOk(e.cluster.namespaces.has('z'));
  t.notOk(e.cluster.services.has('x/s'));

  // An update the API server would refuse leaves the stored version in force.
  const bad = parseManifests('{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, labels: {pod: a, quarantine: 0}}, spec: {nodeName: node-1}, status: {podIP: 10.0.1.1}}')[0] as KubeObject;
  e.upsert(bad);
  t.equal(verdict(e, 'y/b', 'x/a'), 'drop', 'x/a keeps its quarantine label');
  t.ok(e.errors().some((x) => x.kind === 'Pod' && x.name === 'a' && x.field === 'metadata.labels.quarantine'));
  e.upsert({ ...bad, metadata: { ...bad.metadata, labels: { pod: 'a' } } });
  t.notOk(e.errors().some((x) => x.kind === 'Pod' && x.name === 'a'), 'a valid version clears the error');
  t.equal(verdict(e, 'y/b', 'x/a'), 'allow');
  e.remove({ apiVersion: 'v1', kind: 'Pod', namespace: 'x', name: 'c' });
  t.notOk(e.errors().some((x) => x.name === 'c'), 'removing a refused object clears its error');
});

t.test('a null value in a selector is read as the API server stores it', async (t) => {
  // NetworkPolicy (decoded into Go types): null is "".
  const np = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate-quarantine, namespace: x}
spec:
  podSelector: {matchLabels: {quarantine: }}
  ingress: []
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: isolate-quarantine-in, namespace: "y"}
spec:
  podSelector: {matchExpressions: [{key: quarantine, operator: In, values: [null]}]}
  ingress: []
`;
  const e = engineOf(MODEL, np);
  t.same(e.errors(), [], 'the NetworkPolicies are valid');
  t.same(e.warnings(), []);
  t.equal(verdict(e, 'y/b', 'x/a'), 'drop', 'matchLabels quarantine: null selects quarantine=""');
  t.equal(verdict(e, 'y/b', 'x/b'), 'allow');
  t.equal(verdict(e, 'x/b', 'y/a'), 'drop', 'In [null] is In [""]');
  t.equal(verdict(e, 'x/b', 'y/b'), 'allow');

  // Custom resources: the structural schema drops a null map value, so the key no longer constrains.
  const pruned = engineOf(MODEL, acnp('pruned', '{podSelector: {matchLabels: {pod: b, quarantine: }}}'));
  t.same(pruned.errors(), []);
  t.same(pruned.warnings().map((w) => `${w.kind} ${w.name} ${w.field}`), ['AntreaClusterNetworkPolicy pruned spec.appliedTo[0].podSelector.matchLabels.quarantine']);
  t.equal(verdict(pruned, 'y/a', 'x/b'), 'drop', 'the selector is {pod: b}: it applies to x/b, which has no quarantine label');
  t.equal(verdict(pruned, 'y/b', 'x/a'), 'allow');
  // ...and refuses a null list item, as before.
  const refused = engineOf(MODEL, acnp('null-item', '{podSelector: {matchExpressions: [{key: quarantine, operator: In, values: [null]}]}}'));
  t.ok(refused.errors().some((x) => x.name === 'null-item' && /values/.test(x.field)), JSON.stringify(refused.errors()));
});

// -----------------------------------------------------------------------------------------
// 2. ClusterNetworkPolicy tier Admin at 220.

const XY = `
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: v1
kind: Namespace
metadata: {name: "y"}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {pod: a}}
spec: {nodeName: node-1}
status: {podIP: 10.0.1.1}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: "y", labels: {pod: a}}
spec: {nodeName: node-1}
status: {podIP: 10.0.2.1}
`;

const cnpDeny = (priority: number) => `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: guardrail}
spec:
  tier: Admin
  priority: ${priority}
  subject: {namespaces: {matchLabels: {kubernetes.io/metadata.name: x}}}
  ingress: [{name: deny-y, action: Deny, from: [{namespaces: {matchLabels: {kubernetes.io/metadata.name: "y"}}}]}]
`;

const annpAllow = (tier?: string, priority = 1) => `
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: ns-admin-allow, namespace: x}
spec:
  priority: ${priority}
  ${tier ? `tier: ${tier}` : ''}
  appliedTo: [{podSelector: {}}]
  ingress: [{name: allow-y, action: Allow, from: [{namespaceSelector: {}}]}]
`;

const by = (e: PolicyEngine) => {
  const d = e.evaluate(tcp('y/a', 'x/a')).decidedBy;
  return d ? `${d.kind} ${d.name} ${d.action}` : 'default';
};

t.test('a namespace admin\'s Antrea NetworkPolicy (application tier) cannot override ClusterNetworkPolicy tier Admin', async (t) => {
  for (const order of [[XY, annpAllow(), cnpDeny(1000)], [XY, cnpDeny(1000), annpAllow()]]) {
    const e = engineOf(...order);
    t.same(e.errors(), []);
    t.equal(by(e), 'ClusterNetworkPolicy guardrail Drop', 'the guardrail decides, whatever its priority and the order of arrival');
    const rules = e.nodeRuleSet().filter((r) => r.direction === 'Ingress');
    const cnp = rules.find((r) => r.ref.name === 'guardrail')!;
    const annp = rules.find((r) => r.ref.name === 'ns-admin-allow')!;
    t.equal(cnp.priority.tier, 220);
    t.ok(cnp.order < annp.order, 'the node rule set orders the guardrail first');
    const flows = allocatePriorities('AntreaPolicyIngressRule', rules.filter((r) => r.priority.stage === 0));
    t.ok(flows.get(cnp.ruleId)! > flows.get(annp.ruleId)!, 'and so do the OpenFlow priorities (higher is matched first)');
  }
  // Tiers before 220 still come first; AdminNetworkPolicy (251) stays after the application tier.
  t.equal(by(engineOf(XY, annpAllow('platform'), cnpDeny(0))), 'AntreaNetworkPolicy ns-admin-allow Allow', 'platform (200) comes before 220');
  const anp = `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: anp-allow}
spec:
  priority: 0
  subject: {namespaces: {}}
  ingress: [{name: allow-all, action: Allow, from: [{namespaces: {}}]}]
`;
  t.equal(by(engineOf(XY, anp, cnpDeny(1000))), 'ClusterNetworkPolicy guardrail Drop', 'CNP Admin (220) before ANP (251)');
  t.equal(by(engineOf(XY, anp, annpAllow())), 'AntreaNetworkPolicy ns-admin-allow Allow', 'ANP stays after the application tier');
});

t.test('a custom Tier at 220 shares the place: ordered by policy priority, ties broken by kind, namespace, name', async (t) => {
  const tier220 = `
apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata: {name: at-220}
spec: {priority: 220}
`;
  const cases: [number, number, string][] = [
    [5, 4, 'ClusterNetworkPolicy guardrail Drop'],
    [5, 6, 'AntreaNetworkPolicy ns-admin-allow Allow'],
    [5, 5, 'AntreaNetworkPolicy ns-admin-allow Allow'],
  ];
  for (const [annpPriority, cnpPriority, want] of cases) {
    const objs = [tier220, annpAllow('at-220', annpPriority), cnpDeny(cnpPriority)];
    for (const order of [objs, [...objs].reverse()]) {
      const e = engineOf(XY, ...order);
      t.same(e.errors(), []);
      t.equal(by(e), want, `ANNP ${annpPriority} vs CNP ${cnpPriority} (${order === objs ? 'ANNP' : 'CNP'} first)`);
    }
  }
});

// -----------------------------------------------------------------------------------------
// 3. Names and namespaces as the API server checks them.

const LONG = `a${'b'.repeat(252)}c`; // 254 characters

const OBJECTS: [string, (name: string, namespace: string) => string][] = [
  ['AntreaClusterNetworkPolicy', (n) => acnp(n, '{podSelector: {}}')],
  ['AntreaNetworkPolicy', (n, ns) => `
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: ${n}, namespace: ${ns}}
spec: {priority: 1, appliedTo: [{podSelector: {}}], ingress: [{action: Drop, from: [{namespaceSelector: {}}]}]}
`],
  ['Tier', (n) => `{apiVersion: crd.antrea.io/v1beta1, kind: Tier, metadata: {name: ${n}}, spec: {priority: 10}}`],
  ['ClusterGroup', (n) => `{apiVersion: crd.antrea.io/v1beta1, kind: ClusterGroup, metadata: {name: ${n}}, spec: {podSelector: {}}}`],
  ['Group', (n, ns) => `{apiVersion: crd.antrea.io/v1beta1, kind: Group, metadata: {name: ${n}, namespace: ${ns}}, spec: {podSelector: {}}}`],
  ['AdminNetworkPolicy', (n) => `
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: ${n}}
spec: {priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}
`],
  ['ClusterNetworkPolicy', (n) => `
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: ${n}}
spec: {tier: Admin, priority: 1, subject: {namespaces: {}}, ingress: [{action: Deny, from: [{namespaces: {}}]}]}
`],
  ['NetworkPolicy', (n, ns) => `{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: ${n}, namespace: ${ns}}, spec: {podSelector: {}}}`],
];
const NAMESPACED = new Set(['AntreaNetworkPolicy', 'Group', 'NetworkPolicy']);

t.test('every policy kind refuses a name that is not a DNS-1123 subdomain, and a namespace that is not a DNS-1123 label', async (t) => {
  for (const [kind, make] of OBJECTS) {
    const valid = engineOf(XY, make(`ok.${'n'.repeat(250)}`, 'x'));
    t.same(valid.errors(), [], `${kind}: a 253-character name is valid`);
    const bad: [string, string, string, RegExp][] = [
      ['Bad_Name', 'x', 'metadata.name', /^"Bad_Name" is not a valid name: a lowercase RFC 1123 subdomain must consist of lowercase alphanumeric characters, '-' or '\.', and must start and end with an alphanumeric character$/],
      ['-a', 'x', 'metadata.name', /not a valid name: a lowercase RFC 1123 subdomain/],
      [LONG, 'x', 'metadata.name', /^is not a valid name: a lowercase RFC 1123 subdomain must be no more than 253 characters, not 254$/],
    ];
    if (NAMESPACED.has(kind)) {
      bad.push(['p', 'Bad_NS', 'metadata.namespace', /^"Bad_NS" is not a valid namespace: a lowercase RFC 1123 label must consist of lowercase alphanumeric characters or '-'/]);
      bad.push(['p', 'a.b', 'metadata.namespace', /not a valid namespace/]);
      bad.push(['p', 'n'.repeat(64), 'metadata.namespace', /^is not a valid namespace: a lowercase RFC 1123 label must be no more than 63 characters, not 64$/]);
    }
    for (const [name, ns, field, message] of bad) {
      const e = engineOf(XY, make(name, ns));
      const hit = e.errors().find((x) => x.kind === kind && x.field === field);
      t.ok(hit && message.test(hit.message), `${kind} ${NAMESPACED.has(kind) ? `${ns}/` : ''}${name.slice(0, 20)}: ${field} (got ${JSON.stringify(e.errors())})`);
      t.same(e.rules(), [], `${kind}: the refused object yields no rules`);
    }
  }
});

t.test('a refused policy is handled like any invalid policy: reported, and yields nothing', async (t) => {
  // Today's handling of an invalid policy: no rules (as if it did not exist), an error in errors().
  const e = engineOf(XY, acnp('Bad_Name', '{podSelector: {}}'), acnp('good', '{podSelector: {matchLabels: {pod: a}}}', 'ingress: [{action: Drop, from: [{podSelector: {}, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: "y"}}}]}]'));
  t.same(e.errors().map((x) => `${x.kind} ${x.name} ${x.field}`), ['AntreaClusterNetworkPolicy Bad_Name metadata.name']);
  t.same([...new Set(e.rules().map((r) => r.ref.name))], ['good'], 'only the valid policy has rules');
  t.equal(verdict(e, 'y/a', 'x/a'), 'drop', 'the valid policy is in force');
  t.same(e.involvedObject({ kind: 'AntreaClusterNetworkPolicy', name: 'Bad_Name' }), { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'Bad_Name' });
  // A ClusterGroup or Tier the API server would refuse cannot be used either.
  const tiered = engineOf(XY, '{apiVersion: crd.antrea.io/v1beta1, kind: Tier, metadata: {name: Bad.Tier}, spec: {priority: 10}}', acnp('in-bad-tier', '{podSelector: {}}').replace('priority: 1', 'priority: 1\n  tier: Bad.Tier'));
  t.ok(tiered.errors().some((x) => x.name === 'in-bad-tier' && x.field === 'spec.tier'), 'a policy in a refused Tier is invalid too');
});

t.test('an update that makes a policy invalid keeps its last valid version in force until it is fixed or deleted', async (t) => {
  const dropFromY = 'ingress: [{action: Drop, from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: "y"}}}]}]';
  const e = engineOf(MODEL, acnp('guard', '{podSelector: {matchLabels: {pod: a}}}', dropFromY));
  t.equal(verdict(e, 'y/b', 'x/a'), 'drop', 'the Drop is in force');
  const targets = nodeTargets(e, 'guard');
  t.same(targets, ['Ingress Drop x/a', 'Ingress Drop y/a'], 'on the Pods labelled pod=a');
  const logged: string[] = [];
  const upsert = (text: string) => {
    for (const o of parseManifests(text)) e.upsert(o);
  };
  // A typo in the action: the API server's schema would refuse it; here the engine sees it.
  const typo = acnp('guard', '{podSelector: {matchLabels: {pod: a}}}', dropFromY.replace('Drop', 'Dorp'));
  const watched = new PolicyEngine({ nodeName: NODE, log: (x) => logged.push(`${x.field}: ${x.message}`) });
  for (const o of parseManifests(MODEL + '\n---\n' + acnp('guard', '{podSelector: {matchLabels: {pod: a}}}', dropFromY))) watched.upsert(o);
  for (const o of parseManifests(typo)) watched.upsert(o);
  upsert(typo);
  t.equal(verdict(e, 'y/b', 'x/a'), 'drop', 'after the invalid update the last valid version still drops');
  t.same(nodeTargets(e, 'guard'), targets, 'and its node rules stay');
  const err = e.errors().find((x) => x.name === 'guard');
  t.match(err, { kind: 'AntreaClusterNetworkPolicy', field: 'spec.ingress[0].action' }, 'the update is reported as invalid');
  t.match(err?.message, /; its last valid version stays enforced until it is fixed or deleted$/, 'saying what stays in force');
  t.ok(logged.some((l) => l.startsWith('spec.ingress[0].action') && l.endsWith('stays enforced until it is fixed or deleted')), `the log says so too (${logged.join(' | ')})`);
  // A second invalid version keeps the same last valid one.
  upsert(typo.replace('Dorp', 'Dr0p'));
  t.equal(verdict(e, 'y/b', 'x/a'), 'drop', 'a second invalid update: still the last valid version');
  // Fixed: the new version replaces it.
  upsert(acnp('guard', '{podSelector: {matchLabels: {pod: b}}}', dropFromY));
  t.same(e.errors().filter((x) => x.name === 'guard'), [], 'fixed: no error');
  t.equal(verdict(e, 'y/b', 'x/a'), 'allow', 'the fixed version applies to x/b, no longer to x/a');
  t.equal(verdict(e, 'y/a', 'x/b'), 'drop', 'the fixed version is in force');
  // Deleted while invalid: nothing stays.
  upsert(typo);
  t.equal(verdict(e, 'y/a', 'x/b'), 'drop', 'invalid again: the fixed version stays');
  e.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'guard' });
  t.equal(verdict(e, 'y/a', 'x/b'), 'allow', 'deleted: gone');
  t.same(e.errors().filter((x) => x.name === 'guard'), [], 'and no longer reported');
  // An object that was never valid yields nothing, as before.
  upsert(typo);
  t.equal(verdict(e, 'y/b', 'x/a'), 'allow', 'created invalid: nothing in force');
  t.notMatch(e.errors().find((x) => x.name === 'guard')?.message, /stays enforced/, 'and nothing said to stay');
});

t.test('a Kubernetes NetworkPolicy made invalid keeps its isolation and rules too', async (t) => {
  const np = (port: string) => `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-80, namespace: x}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress: [{ports: [{port: ${port}}]}]
`;
  const e = engineOf(MODEL, np('80'));
  t.equal(verdict(e, 'y/a', 'x/a', 81), 'drop', 'x/a isolated: 81 dropped');
  for (const o of parseManifests(np('70000'))) e.upsert(o);
  t.ok(e.errors().some((x) => x.name === 'only-80' && /stays enforced/.test(x.message)), 'the out-of-range port is reported, the last valid version kept');
  t.equal(verdict(e, 'y/a', 'x/a', 81), 'drop', 'x/a stays isolated');
  t.equal(verdict(e, 'y/a', 'x/a', 80), 'allow', 'and 80 stays open');
});
