// IR produced by the upstream admin-policy normalizers (ANP / BANP v1alpha1, CNP v1alpha2).
import t from 'tap';
import { normalizers } from '../../daemon/policy/admin/index.js';
import type { KubeObject, NormalizeContext, NormalizeResult } from '../../daemon/policy/types.js';

const ctx: NormalizeContext = { tierPriority: () => undefined, namespaceAnnotations: () => undefined };

function normalize(obj: KubeObject): NormalizeResult {
  const [group, version] = obj.apiVersion.split('/');
  const entry = normalizers.find((n) => n.group === group && n.versions.includes(version!) && n.kind === obj.kind);
  if (!entry) throw new Error(`no normalizer for ${obj.apiVersion} ${obj.kind}`);
  return entry.normalize(obj, ctx);
}

const anp = (name: string, spec: any): KubeObject => ({
  apiVersion: 'policy.networking.k8s.io/v1alpha1',
  kind: 'AdminNetworkPolicy',
  metadata: { name },
  spec,
});
const banp = (spec: any, name = 'default'): KubeObject => ({
  apiVersion: 'policy.networking.k8s.io/v1alpha1',
  kind: 'BaselineAdminNetworkPolicy',
  metadata: { name },
  spec,
});
const cnp = (name: string, spec: any): KubeObject => ({
  apiVersion: 'policy.networking.k8s.io/v1alpha2',
  kind: 'ClusterNetworkPolicy',
  metadata: { name },
  spec,
});

const nsX = { matchLabels: { ns: 'x' } };
const nsY = { matchLabels: { ns: 'y' } };

t.test('registry: group, versions and kinds', async (t) => {
  t.same(
    normalizers.map((n) => [n.group, n.versions, n.kind]),
    [
      ['policy.networking.k8s.io', ['v1alpha1'], 'AdminNetworkPolicy'],
      ['policy.networking.k8s.io', ['v1alpha1'], 'BaselineAdminNetworkPolicy'],
      ['policy.networking.k8s.io', ['v1alpha2'], 'ClusterNetworkPolicy'],
    ],
  );
});

t.test('ANP: priority, stage/tier, rule order per direction, actions', async (t) => {
  const r = normalize(
    anp('p1', {
      priority: 7,
      subject: { namespaces: nsX },
      ingress: [
        { name: 'deny-y', action: 'Deny', from: [{ namespaces: nsY }] },
        { name: 'pass-all', action: 'Pass', from: [{ namespaces: {} }] },
      ],
      egress: [{ name: 'allow-y', action: 'Allow', to: [{ namespaces: nsY }] }],
    }),
  );
  t.same(r.errors, []);
  t.same(r.isolations, [], 'admin policies never isolate');
  t.equal(r.rules.length, 3);
  const [i0, i1, e0] = r.rules;
  t.match(i0, {
    id: 'anp/p1/ingress/0',
    ref: { kind: 'AdminNetworkPolicy', name: 'p1', rule: 'deny-y', tier: 'Admin' },
    direction: 'Ingress',
    action: 'Drop',
    priority: { stage: 0, tier: 251, policy: 7, rule: 0, tieBreak: 'AdminNetworkPolicy//p1' },
    appliedTo: [{ kind: 'pods', namespaces: { kind: 'selector', selector: nsX }, pods: {} }],
    peers: [{ kind: 'pods', namespaces: { kind: 'selector', selector: nsY }, pods: {} }],
    ports: [],
  });
  t.equal(i0!.ref.namespace, undefined, 'cluster-scoped');
  t.match(i1, { action: 'Pass', priority: { rule: 1 }, peers: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: {} }] });
  t.match(e0, { id: 'anp/p1/egress/0', direction: 'Egress', action: 'Allow', priority: { rule: 0 }, ref: { rule: 'allow-y' } });
});

t.test('ANP: unnamed rules are referred to as <direction>-<index>', async (t) => {
  const r = normalize(
    anp('p', {
      priority: 1,
      subject: { namespaces: {} },
      ingress: [{ action: 'Allow', from: [{ namespaces: {} }] }, { name: '', action: 'Deny', from: [{ namespaces: {} }] }],
      egress: [{ action: 'Allow', to: [{ namespaces: {} }] }],
    }),
  );
  t.same(r.rules.map((x) => x.ref.rule), ['ingress-0', 'ingress-1', 'egress-0']);
});

t.test('ANP: subject pods and peers pods (namespaceSelector + podSelector)', async (t) => {
  const r = normalize(
    anp('p', {
      priority: 0,
      subject: { pods: { namespaceSelector: {}, podSelector: { matchLabels: { pod: 'a' } } } },
      ingress: [
        {
          action: 'Allow',
          from: [
            { pods: { namespaceSelector: nsY, podSelector: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['b', 'c'] }] } } },
            { namespaces: nsX },
          ],
        },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules[0]!.appliedTo, [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { pod: 'a' } } }]);
  t.same(r.rules[0]!.peers, [
    {
      kind: 'pods',
      namespaces: { kind: 'selector', selector: nsY },
      pods: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['b', 'c'] }] },
    },
    { kind: 'pods', namespaces: { kind: 'selector', selector: nsX }, pods: {} },
  ]);
});

t.test('ANP: egress nodes, networks and domainNames peers', async (t) => {
  const r = normalize(
    anp('p', {
      priority: 3,
      subject: { namespaces: {} },
      egress: [
        {
          name: 'to-nodes-and-nets',
          action: 'Deny',
          to: [{ nodes: { matchLabels: { role: 'cp' } } }, { networks: ['10.1.2.3/16', '192.168.0.0/24', 'FD00:0::1/8'] }],
        },
        { name: 'dns', action: 'Allow', to: [{ domainNames: ['example.com', '*.Kubernetes.io.'] }] },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules[0]!.peers, [
    { kind: 'nodes', selector: { matchLabels: { role: 'cp' } } },
    { kind: 'ipBlock', cidr: '10.1.0.0/16', except: [] },
    { kind: 'ipBlock', cidr: '192.168.0.0/24', except: [] },
    { kind: 'ipBlock', cidr: 'fd00::/8', except: [] },
  ]);
  t.same(r.rules[1]!.peers, [
    { kind: 'fqdn', pattern: 'example.com' },
    { kind: 'fqdn', pattern: '*.kubernetes.io' },
  ]);
});

t.test('ANP: ports portNumber / namedPort / portRange, protocol defaults to TCP', async (t) => {
  const r = normalize(
    anp('p', {
      priority: 3,
      subject: { namespaces: {} },
      ingress: [
        {
          action: 'Allow',
          from: [{ namespaces: {} }],
          ports: [
            { portNumber: { port: 80 } },
            { portNumber: { protocol: 'UDP', port: 53 } },
            { namedPort: 'serve-81-sctp' },
            { portRange: { start: 8000, end: 8080 } },
            { portRange: { protocol: 'SCTP', start: 1, end: 65535 } },
          ],
        },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules[0]!.ports, [
    { protocol: 'TCP', port: 80 },
    { protocol: 'UDP', port: 53 },
    // A named port matches the container port of that name, whatever its protocol.
    { protocol: 'TCP', port: 'serve-81-sctp' },
    { protocol: 'UDP', port: 'serve-81-sctp' },
    { protocol: 'SCTP', port: 'serve-81-sctp' },
    { protocol: 'TCP', port: 8000, endPort: 8080 },
    { protocol: 'SCTP', port: 1, endPort: 65535 },
  ]);
});

t.test('ANP: unknown fields are ignored like the API server prunes them', async (t) => {
  const r = normalize(
    anp('p', {
      priority: 3,
      futureField: true,
      subject: { namespaces: nsX, bogus: 1 },
      ingress: [{ action: 'Allow', from: [{ namespaces: nsY, somethingNew: {} }], extra: 'x' }],
    }),
  );
  t.same(r.errors, []);
  t.equal(r.rules.length, 1);
});

t.test('ANP without rules is valid and yields nothing', async (t) => {
  const r = normalize(anp('empty', { priority: 1000, subject: { namespaces: {} } }));
  t.same(r, { rules: [], isolations: [], groups: [], tiers: [], errors: [] });
});

t.test('BANP: stage 2 tier 254, no policy priority, Allow/Deny', async (t) => {
  const r = normalize(
    banp({
      subject: { pods: { namespaceSelector: nsX, podSelector: {} } },
      ingress: [
        { name: 'allow-y', action: 'Allow', from: [{ namespaces: nsY }] },
        { name: 'deny-all', action: 'Deny', from: [{ namespaces: {} }] },
      ],
      egress: [{ name: 'deny-net', action: 'Deny', to: [{ networks: ['0.0.0.0/0'] }], ports: [{ portNumber: { protocol: 'TCP', port: 81 } }] }],
    }),
  );
  t.same(r.errors, []);
  t.same(
    r.rules.map((x) => [x.id, x.action, x.priority, x.ref]),
    [
      ['banp/default/ingress/0', 'Allow', { stage: 2, tier: 254, policy: 0, rule: 0, tieBreak: 'BaselineAdminNetworkPolicy//default' }, { kind: 'BaselineAdminNetworkPolicy', name: 'default', rule: 'allow-y', tier: 'Baseline' }],
      ['banp/default/ingress/1', 'Drop', { stage: 2, tier: 254, policy: 0, rule: 1, tieBreak: 'BaselineAdminNetworkPolicy//default' }, { kind: 'BaselineAdminNetworkPolicy', name: 'default', rule: 'deny-all', tier: 'Baseline' }],
      ['banp/default/egress/0', 'Drop', { stage: 2, tier: 254, policy: 0, rule: 0, tieBreak: 'BaselineAdminNetworkPolicy//default' }, { kind: 'BaselineAdminNetworkPolicy', name: 'default', rule: 'deny-net', tier: 'Baseline' }],
    ],
  );
  t.same(r.rules[2]!.peers, [{ kind: 'ipBlock', cidr: '0.0.0.0/0', except: [] }]);
  t.same(r.rules[2]!.ports, [{ protocol: 'TCP', port: 81 }]);
});

t.test('CNP Admin tier: tier 220, before the Antrea application tier; Accept/Deny/Pass', async (t) => {
  const r = normalize(
    cnp('c1', {
      tier: 'Admin',
      priority: 7,
      subject: { namespaces: nsX },
      ingress: [
        { name: 'a', action: 'Accept', from: [{ namespaces: nsY }] },
        { name: 'd', action: 'Deny', from: [{ pods: { podSelector: { matchLabels: { pod: 'b' } } } }] },
        { name: 'p', action: 'Pass', from: [{ namespaces: {} }] },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules.map((x) => x.action), ['Allow', 'Drop', 'Pass']);
  t.same(r.rules[0]!.priority, { stage: 0, tier: 220, policy: 7, rule: 0, tieBreak: 'ClusterNetworkPolicy//c1' });
  t.same(r.rules[0]!.ref, { kind: 'ClusterNetworkPolicy', name: 'c1', rule: 'a', tier: 'Admin' });
  t.equal(r.rules[0]!.id, 'cnp/c1/ingress/0');
  // v1alpha2: an absent namespaceSelector is the empty selector (every Namespace).
  t.same(r.rules[1]!.peers, [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { pod: 'b' } } }]);
});

t.test('CNP Baseline tier: stage 2 tier 254, with its own priority; Pass allowed', async (t) => {
  const r = normalize(
    cnp('b1', {
      tier: 'Baseline',
      priority: 20,
      subject: { pods: { namespaceSelector: nsX, podSelector: {} } },
      egress: [
        { name: 'pass-y', action: 'Pass', to: [{ namespaces: nsY }] },
        { name: 'deny-all', action: 'Deny', to: [{ networks: ['0.0.0.0/0'] }] },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules.map((x) => [x.action, x.priority.stage, x.priority.tier, x.priority.policy, x.priority.rule, x.ref.tier]), [
    ['Pass', 2, 254, 20, 0, 'Baseline'],
    ['Drop', 2, 254, 20, 1, 'Baseline'],
  ]);
});

t.test('CNP protocols: number, range, named port per protocol', async (t) => {
  const r = normalize(
    cnp('c', {
      tier: 'Admin',
      priority: 1,
      subject: { namespaces: {} },
      egress: [
        {
          action: 'Deny',
          to: [{ pods: { namespaceSelector: {}, podSelector: {} } }],
          protocols: [
            { tcp: { destinationPort: { number: 80 } } },
            { udp: { destinationPort: { range: { start: 80, end: 81 } } } },
            { sctp: { destinationPort: { number: 81 } } },
            { destinationNamedPort: 'serve-80-udp' },
          ],
        },
      ],
    }),
  );
  t.same(r.errors, []);
  t.same(r.rules[0]!.ports, [
    { protocol: 'TCP', port: 80 },
    { protocol: 'UDP', port: 80, endPort: 81 },
    { protocol: 'SCTP', port: 81 },
    { protocol: 'TCP', port: 'serve-80-udp' },
    { protocol: 'UDP', port: 'serve-80-udp' },
    { protocol: 'SCTP', port: 'serve-80-udp' },
  ]);
  t.equal(r.rules[0]!.ref.rule, 'egress-0');
});

t.test('normalizing is deterministic and pure', async (t) => {
  const obj = anp('p', {
    priority: 5,
    subject: { namespaces: nsX },
    ingress: [{ name: 'r', action: 'Deny', from: [{ namespaces: nsY }], ports: [{ portNumber: { port: 80 } }] }],
  });
  const copy = JSON.parse(JSON.stringify(obj));
  const a = normalize(obj);
  const b = normalize(obj);
  t.same(a, b);
  t.same(obj, copy, 'input is not modified');
  // The IR does not alias the input: mutating the output leaves the input alone.
  (a.rules[0]!.appliedTo[0] as any).namespaces.selector.matchLabels.ns = 'changed';
  t.same(obj, copy);
});
