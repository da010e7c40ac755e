// Truth tables through the PolicyEngine for AdminNetworkPolicy / BaselineAdminNetworkPolicy
// (v1alpha1), and the same scenarios as v1alpha2 ClusterNetworkPolicy (table-driven equivalence).
// Model: x/y/z × a/b/c, ports 80/81 over TCP/UDP/SCTP, named serve-<port>-<proto> (see policy-admin-model.ts).
import t from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import {
  ALL_ALLOWED,
  PORT_PROTOCOLS,
  allMatrices,
  decided,
  engineWith,
  expectMatrix,
  matrix,
  nsOf,
  podOf,
  toClusterNetworkPolicy,
  xyzModel,
} from './policy-admin-model.js';

const ns = (name: string) => ({ matchLabels: { ns: name } });
const pods = (namespace: string | undefined, pod: string) => ({
  pods: { namespaceSelector: namespace ? ns(namespace) : {}, podSelector: { matchLabels: { pod } } },
});

function anp(name: string, priority: number, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name }, spec: { priority, ...spec } };
}
function banp(spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' }, spec };
}
function np(namespace: string, name: string, spec: Record<string, unknown>): KubeObject {
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace, name }, spec };
}

interface Scenario {
  name: string;
  /** v1alpha1 objects (plus NetworkPolicies); the CNP form is derived with toClusterNetworkPolicy. */
  objects: KubeObject[];
  /** Expected matrices; port/protocols not listed must be all-allowed unless `others` says otherwise. */
  expect: Record<string, (from: string, to: string) => boolean>;
  others?: (from: string, to: string) => boolean;
}

const scenarios: Scenario[] = [
  {
    name: 'ANP priority: the lower value is checked first',
    objects: [
      anp('deny-y', 20, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-from-y', action: 'Deny', from: [{ namespaces: ns('y') }] }] }),
      anp('allow-ya', 10, { subject: { namespaces: ns('x') }, ingress: [{ name: 'allow-from-ya', action: 'Allow', from: [pods('y', 'a')] }] }),
    ],
    expect: {},
    others: (f, to) => !(nsOf(to) === 'x' && nsOf(f) === 'y' && podOf(f) !== 'a'),
  },
  {
    name: 'ANP priority swapped: the deny now comes first and y/a loses its allow',
    objects: [
      anp('deny-y', 20, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-from-y', action: 'Deny', from: [{ namespaces: ns('y') }] }] }),
      anp('allow-ya', 30, { subject: { namespaces: ns('x') }, ingress: [{ name: 'allow-from-ya', action: 'Allow', from: [pods('y', 'a')] }] }),
    ],
    expect: {},
    others: (f, to) => !(nsOf(to) === 'x' && nsOf(f) === 'y'),
  },
  {
    name: 'rule order within one ANP: allow pod=a, then deny everyone',
    objects: [
      anp('order', 5, {
        subject: { namespaces: ns('z') },
        ingress: [
          { name: 'allow-a', action: 'Allow', from: [pods(undefined, 'a')] },
          { name: 'deny-all', action: 'Deny', from: [{ namespaces: {} }] },
        ],
      }),
    ],
    expect: {},
    others: (f, to) => nsOf(to) !== 'z' || podOf(f) === 'a',
  },
  {
    name: 'rule order within one ANP reversed: deny everyone first',
    objects: [
      anp('order', 5, {
        subject: { namespaces: ns('z') },
        ingress: [
          { name: 'deny-all', action: 'Deny', from: [{ namespaces: {} }] },
          { name: 'allow-a', action: 'Allow', from: [pods(undefined, 'a')] },
        ],
      }),
    ],
    expect: {},
    others: (_f, to) => nsOf(to) !== 'z',
  },
  {
    name: 'ANP Deny beats a K8s NetworkPolicy allow',
    objects: [
      np('x', 'allow-from-y', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: ns('y') }] }] }),
      anp('deny-yb', 1, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-yb', action: 'Deny', from: [pods('y', 'b')] }] }),
    ],
    expect: {},
    // x is isolated for ingress: only y/a and y/c get in (y/b is denied by the ANP first).
    others: (f, to) => nsOf(to) !== 'x' || (nsOf(f) === 'y' && podOf(f) !== 'b'),
  },
  {
    name: 'ANP Allow beats K8s NetworkPolicy isolation',
    objects: [
      np('y', 'deny-all-ingress', { podSelector: {}, policyTypes: ['Ingress'] }),
      anp('allow-za', 1, { subject: { namespaces: ns('y') }, ingress: [{ name: 'allow-za', action: 'Allow', from: [pods('z', 'a')] }] }),
    ],
    expect: {},
    others: (f, to) => nsOf(to) !== 'y' || f === 'z/a',
  },
  {
    name: 'ANP Pass defers to K8s NetworkPolicy, then to the BANP',
    objects: [
      // x/a is isolated for ingress and admits only y/b.
      np('x', 'allow-yb-to-a', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: ns('y'), podSelector: { matchLabels: { pod: 'b' } } }] }] }),
      anp('pass-y', 1, {
        subject: { namespaces: ns('x') },
        ingress: [
          { name: 'pass-from-y', action: 'Pass', from: [{ namespaces: ns('y') }] },
          { name: 'deny-from-y', action: 'Deny', from: [{ namespaces: ns('y') }] }, // skipped by the Pass
        ],
      }),
      banp({ subject: { namespaces: ns('x') }, ingress: [{ name: 'baseline-deny-y', action: 'Deny', from: [{ namespaces: ns('y') }] }] }),
    ],
    expect: {},
    others: (f, to) => {
      if (to === 'x/a') return f === 'y/b'; // NP decides: isolated, y/b allowed
      if (nsOf(to) === 'x') return nsOf(f) !== 'y'; // not isolated: BANP denies y
      return true;
    },
  },
  {
    name: 'BANP applies only where no K8s NetworkPolicy isolates',
    objects: [
      np('y', 'a-egress-to-z', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ to: [{ namespaceSelector: ns('z') }] }] }),
      banp({ subject: { namespaces: {} }, egress: [{ name: 'no-egress-to-z', action: 'Deny', to: [{ namespaces: ns('z') }] }] }),
    ],
    expect: {},
    others: (f, to) => (f === 'y/a' ? nsOf(to) === 'z' : nsOf(to) !== 'z'),
  },
  {
    name: 'BANP rule order and Allow over a later Deny',
    objects: [
      banp({
        subject: { namespaces: ns('y') },
        ingress: [
          { name: 'allow-x', action: 'Allow', from: [{ namespaces: ns('x') }] },
          { name: 'deny-rest', action: 'Deny', from: [{ namespaces: {} }] },
        ],
      }),
    ],
    expect: {},
    others: (f, to) => nsOf(to) !== 'y' || nsOf(f) === 'x',
  },
  {
    name: 'egress networks peer (CIDR of namespace y) and a port',
    objects: [
      anp('nets', 3, {
        subject: { pods: { namespaceSelector: ns('x'), podSelector: { matchLabels: { pod: 'a' } } } },
        egress: [{ name: 'deny-y-cidr-81', action: 'Deny', to: [{ networks: ['10.244.2.0/24'] }], ports: [{ portNumber: { protocol: 'TCP', port: 81 } }] }],
      }),
    ],
    expect: { '81/TCP': (f, to) => !(f === 'x/a' && nsOf(to) === 'y') },
  },
  {
    name: 'named ports (one protocol only) and port ranges',
    objects: [
      anp('ports', 3, {
        subject: { namespaces: ns('y') },
        ingress: [
          { name: 'deny-x-udp81', action: 'Deny', from: [{ namespaces: ns('x') }], ports: [{ namedPort: 'serve-81-udp' }] },
          { name: 'deny-x-tcp80', action: 'Deny', from: [{ namespaces: ns('x') }], ports: [{ namedPort: 'serve-80-tcp' }] },
          { name: 'deny-z-sctp', action: 'Deny', from: [{ namespaces: ns('z') }], ports: [{ portRange: { protocol: 'SCTP', start: 80, end: 81 } }] },
          { name: 'deny-z-tcp81', action: 'Deny', from: [{ namespaces: ns('z') }], ports: [{ portRange: { start: 81, end: 90 } }] },
        ],
      }),
    ],
    expect: {
      '81/UDP': (f, to) => !(nsOf(to) === 'y' && nsOf(f) === 'x'),
      '80/TCP': (f, to) => !(nsOf(to) === 'y' && nsOf(f) === 'x'),
      '80/SCTP': (f, to) => !(nsOf(to) === 'y' && nsOf(f) === 'z'),
      '81/SCTP': (f, to) => !(nsOf(to) === 'y' && nsOf(f) === 'z'),
      '81/TCP': (f, to) => !(nsOf(to) === 'y' && nsOf(f) === 'z'),
    },
  },
  {
    name: 'ANP egress Pass, no K8s NetworkPolicy, BANP allows what a later ANP rule would deny',
    objects: [
      anp('pass-egress', 9, {
        subject: { namespaces: ns('z') },
        egress: [
          { name: 'pass-to-x', action: 'Pass', to: [{ namespaces: ns('x') }] },
          { name: 'deny-all', action: 'Deny', to: [{ namespaces: {} }] },
        ],
      }),
      banp({ subject: { namespaces: ns('z') }, egress: [{ name: 'deny-to-xc', action: 'Deny', to: [pods('x', 'c')] }] }),
    ],
    expect: {},
    // z may reach x (except x/c, denied by the BANP); everything else from z is denied.
    others: (f, to) => nsOf(f) !== 'z' || (nsOf(to) === 'x' && podOf(to) !== 'c'),
  },
];

function expectedFor(s: Scenario, key: string): string[] {
  const pred = s.expect[key] ?? s.others;
  return pred ? expectMatrix(pred) : ALL_ALLOWED;
}

for (const s of scenarios) {
  t.test(`ANP/BANP: ${s.name}`, async (t) => {
    const engine = engineWith(xyzModel(), s.objects);
    t.same(engine.errors(), [], 'every object is valid');
    const got = allMatrices(engine);
    for (const [port, proto] of PORT_PROTOCOLS) {
      const key = `${port}/${proto}`;
      t.same(got[key], expectedFor(s, key), key);
    }
  });
}

// The same scenarios written as v1alpha2 ClusterNetworkPolicy give the same matrices.
for (const s of scenarios) {
  t.test(`equivalence v1alpha1 ↔ v1alpha2 CNP: ${s.name}`, async (t) => {
    const cnpObjects = s.objects.map(toClusterNetworkPolicy);
    t.ok(cnpObjects.some((o) => o.kind === 'ClusterNetworkPolicy'), 'the scenario has CNP objects');
    t.notOk(cnpObjects.some((o) => o.apiVersion.endsWith('v1alpha1')), 'no v1alpha1 object is left');
    const v1 = engineWith(xyzModel(), s.objects);
    const v2 = engineWith(xyzModel(), cnpObjects);
    t.same(v2.errors(), [], 'every CNP is valid');
    const a = allMatrices(v1);
    const b = allMatrices(v2);
    for (const [port, proto] of PORT_PROTOCOLS) {
      const key = `${port}/${proto}`;
      t.same(b[key], a[key], `${key} same as v1alpha1`);
      t.same(b[key], expectedFor(s, key), `${key} as expected`);
    }
  });
}

t.test('decidedBy names the kind, policy, rule, direction, tier and action', async (t) => {
  const objects = [
    np('x', 'allow-from-y', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: ns('y') }] }] }),
    anp('deny-yb', 1, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-yb', action: 'Deny', from: [pods('y', 'b')] }] }),
    anp('pass-z', 2, { subject: { namespaces: ns('y') }, ingress: [{ action: 'Pass', from: [{ namespaces: ns('z') }] }] }),
    banp({ subject: { namespaces: ns('y') }, ingress: [{ name: 'deny-z', action: 'Deny', from: [{ namespaces: ns('z') }] }] }),
  ];
  const v1 = engineWith(xyzModel(), objects);
  const ev = (e: ReturnType<typeof engineWith>, from: string, to: string) => decided(e.evaluate({ from, to, port: 80, protocol: 'TCP' }));
  t.equal(ev(v1, 'y/b', 'x/a'), 'AdminNetworkPolicy deny-yb deny-yb Ingress Admin Drop');
  t.equal(ev(v1, 'y/a', 'x/a'), 'NetworkPolicy allow-from-y ingress-0 Ingress  Allow');
  t.match(ev(v1, 'z/a', 'x/a'), /^K8sNetworkPolicyIsolation allow-from-y .*Ingress.*IsolationDrop$/);
  t.equal(ev(v1, 'z/a', 'y/a'), 'BaselineAdminNetworkPolicy default deny-z Ingress Baseline Drop');
  t.equal(ev(v1, 'x/a', 'y/a'), 'default');

  const v2 = engineWith(xyzModel(), objects.map(toClusterNetworkPolicy));
  t.equal(ev(v2, 'y/b', 'x/a'), 'ClusterNetworkPolicy deny-yb deny-yb Ingress Admin Drop');
  t.equal(ev(v2, 'z/a', 'y/a'), 'ClusterNetworkPolicy default deny-z Ingress Baseline Drop');
});

t.test('egress to nodes and networks outside the Pod network', async (t) => {
  const objects = [
    anp('egress-peers', 4, {
      subject: { pods: { namespaceSelector: ns('x'), podSelector: { matchLabels: { pod: 'a' } } } },
      egress: [
        { name: 'deny-node-one', action: 'Deny', to: [{ nodes: { matchLabels: { node: 'one' } } }] },
        { name: 'allow-dns-range', action: 'Allow', to: [{ networks: ['8.8.8.0/24'] }], ports: [{ portNumber: { protocol: 'UDP', port: 53 } }] },
        { name: 'deny-internet', action: 'Deny', to: [{ networks: ['0.0.0.0/0'] }] },
      ],
    }),
  ];
  for (const [label, objs] of [['v1alpha1', objects], ['v1alpha2', objects.map(toClusterNetworkPolicy)]] as const) {
    const e = engineWith(xyzModel(), objs);
    t.same(e.errors(), [], `${label}: valid`);
    const v = (from: string, to: string, port = 80, protocol: 'TCP' | 'UDP' = 'TCP') => e.evaluate({ from, to, port, protocol }).verdict;
    t.equal(v('x/a', 'ip:192.168.0.1'), 'drop', `${label}: node-1 (node=one) denied by the nodes peer`);
    t.match(decided(e.evaluate({ from: 'x/a', to: 'ip:192.168.0.1', port: 80, protocol: 'TCP' })), /deny-node-one Egress Admin Drop$/);
    t.equal(v('x/a', 'ip:192.168.0.2'), 'drop', `${label}: node-2 is not a nodes match but 0.0.0.0/0 covers it`);
    t.match(decided(e.evaluate({ from: 'x/a', to: 'ip:192.168.0.2', port: 80, protocol: 'TCP' })), /deny-internet Egress Admin Drop$/);
    t.equal(v('x/a', 'ip:8.8.8.8', 53, 'UDP'), 'allow', `${label}: networks + port allow`);
    t.equal(v('x/a', 'ip:8.8.8.8', 53, 'TCP'), 'drop', `${label}: other protocol falls to the deny`);
    t.equal(v('x/a', 'ip:1.1.1.1'), 'drop', `${label}: 0.0.0.0/0 also covers external addresses`);
    t.equal(v('x/a', 'y/b'), 'drop', `${label}: 0.0.0.0/0 also covers Pod traffic`);
    t.equal(v('x/b', 'ip:192.168.0.1'), 'allow', `${label}: other Pods are not subjects`);
    t.equal(v('x/b', 'ip:1.1.1.1'), 'allow');
  }
});

t.test('CNP Admin (tier 220) comes before every ANP (tier 251), whatever their priorities', async (t) => {
  const anpDeny = anp('zz-deny', 10, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-y', action: 'Deny', from: [{ namespaces: ns('y') }] }] });
  const cnpAccept = (priority: number): KubeObject => ({
    apiVersion: 'policy.networking.k8s.io/v1alpha2',
    kind: 'ClusterNetworkPolicy',
    metadata: { name: 'aa-accept' },
    spec: { tier: 'Admin', priority, subject: { namespaces: ns('x') }, ingress: [{ name: 'accept-y', action: 'Accept', from: [{ namespaces: ns('y') }] }] },
  });
  const probe = { from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' as const };
  const cases: [number, string, string][] = [
    [9, 'allow', 'ClusterNetworkPolicy aa-accept accept-y Ingress Admin Allow'],
    [10, 'allow', 'ClusterNetworkPolicy aa-accept accept-y Ingress Admin Allow'],
    [1000, 'allow', 'ClusterNetworkPolicy aa-accept accept-y Ingress Admin Allow'],
  ];
  for (const [priority, verdict, by] of cases) {
    for (const order of [[anpDeny, cnpAccept(priority)], [cnpAccept(priority), anpDeny]]) {
      const r = engineWith(xyzModel(), order).evaluate(probe);
      t.equal(r.verdict, verdict, `CNP priority ${priority} vs ANP 10 (${order[0]!.kind} applied first)`);
      t.equal(decided(r), by);
    }
  }
});

t.test('CNP Baseline Pass ends evaluation at the default allow', async (t) => {
  const base = (name: string, priority: number, ingress: unknown[]): KubeObject => ({
    apiVersion: 'policy.networking.k8s.io/v1alpha2',
    kind: 'ClusterNetworkPolicy',
    metadata: { name },
    spec: { tier: 'Baseline', priority, subject: { namespaces: ns('x') }, ingress },
  });
  const e = engineWith(xyzModel(), [
    base('pass-ya', 5, [{ name: 'pass-ya', action: 'Pass', from: [pods('y', 'a')] }]),
    base('deny-y', 10, [{ name: 'deny-y', action: 'Deny', from: [{ namespaces: ns('y') }] }]),
  ]);
  t.same(e.errors(), []);
  t.same(
    matrix(e, 80, 'TCP'),
    expectMatrix((f, to) => nsOf(to) !== 'x' || nsOf(f) !== 'y' || f === 'y/a'),
  );
  const r = e.evaluate({ from: 'y/a', to: 'x/b', port: 80, protocol: 'TCP' });
  t.equal(r.verdict, 'allow');
  t.equal(r.decidedBy ?? null, null, 'the default decided (Pass is not an allow rule)');

  // An Admin-tier Pass continues into the Baseline tier, unlike a Baseline Pass.
  const admin = engineWith(xyzModel(), [
    { ...base('admin-pass', 1, [{ name: 'pass-y', action: 'Pass', from: [{ namespaces: ns('y') }] }]), spec: { tier: 'Admin', priority: 1, subject: { namespaces: ns('x') }, ingress: [{ name: 'pass-y', action: 'Pass', from: [{ namespaces: ns('y') }] }] } },
    base('deny-y', 10, [{ name: 'deny-y', action: 'Deny', from: [{ namespaces: ns('y') }] }]),
  ]);
  t.equal(admin.evaluate({ from: 'y/a', to: 'x/b', port: 80, protocol: 'TCP' }).verdict, 'drop');
});

t.test('invalid admin objects are reported and do not affect valid ones', async (t) => {
  const good = anp('good', 1, { subject: { namespaces: ns('x') }, ingress: [{ name: 'deny-y', action: 'Deny', from: [{ namespaces: ns('y') }] }] });
  const bad = anp('bad', 2000, { subject: { namespaces: ns('x') }, ingress: [{ name: 'allow-y', action: 'Allow', from: [{ namespaces: ns('y') }] }] });
  const badBanp = { ...banp({ subject: { namespaces: {} }, ingress: [{ action: 'Deny', from: [{ namespaces: {} }] }] }), metadata: { name: 'second' } };
  const e = engineWith(xyzModel(), [good, bad, badBanp]);
  t.same(
    e.errors().map((x) => `${x.kind}/${x.name} ${x.field}`),
    ['AdminNetworkPolicy/bad spec.priority', 'BaselineAdminNetworkPolicy/second metadata.name'],
  );
  t.same(matrix(e, 80, 'TCP'), expectMatrix((f, to) => !(nsOf(to) === 'x' && nsOf(f) === 'y')));
  // Fixing the object applies it; removing it restores the previous answers.
  e.upsert({ ...bad, spec: { ...bad.spec, priority: 0 } });
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'allow');
  e.remove({ apiVersion: bad.apiVersion, kind: bad.kind, name: 'bad' });
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'drop');
});

t.test('node rule set: ANP named port resolves to the container port protocol; nodes/networks become addresses', async (t) => {
  const e = new PolicyEngine({ nodeName: 'node-1' });
  for (const o of xyzModel()) e.upsert(o);
  e.upsert(
    anp('p', 1, {
      subject: { namespaces: ns('x') },
      ingress: [{ name: 'named', action: 'Deny', from: [{ namespaces: ns('y') }], ports: [{ namedPort: 'serve-81-udp' }] }],
      egress: [{ name: 'nodes', action: 'Deny', to: [{ nodes: { matchLabels: { node: 'two' } } }, { networks: ['8.8.8.0/24'] }] }],
    }),
  );
  const rules = e.nodeRuleSet().filter((r) => r.ref.kind === 'AdminNetworkPolicy');
  const named = rules.filter((r) => r.ref.rule === 'named');
  t.equal(named.length, 1, 'the named port becomes one rule (all local targets share the port number)');
  t.same(named[0]!.ports, [{ protocol: 'UDP', port: 81 }], 'only the UDP container port carries that name');
  t.same(named[0]!.targets.map((x) => x.ref), ['x/a', 'x/b', 'x/c'], 'targets: the local subject Pods');
  t.same(named[0]!.peers, { ips: ['10.244.2.10', '10.244.2.11', '10.244.2.12'], cidrs: [], services: [] });
  const nodes = rules.find((r) => r.ref.rule === 'nodes')!;
  t.same(nodes.peers, { ips: ['192.168.0.2'], cidrs: ['8.8.8.0/24'], services: [] });
  t.same(nodes.ports, []);
});
