/**
 * Truth tables through the PolicyEngine for the Antrea-native kinds, over the upstream e2e model:
 * Namespaces x, y, z (labelled ns=<name>) each with Pods a, b, c (labelled pod=<name>), serving
 * 80 and 81 on TCP, UDP and SCTP (container ports named serve-<port>-<proto>).
 *
 * Each case states the expected verdict for every (from, to) pair as a rule in plain code and
 * compares the whole matrix, so a failure prints the full expected and actual tables.
 */
import t, { type Test } from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject, Probe, Verdict } from '../../daemon/policy/types.js';

const NAMESPACES = ['x', 'y', 'z'] as const;
const PODS = ['a', 'b', 'c'] as const;
type Ns = (typeof NAMESPACES)[number];
type PodName = (typeof PODS)[number];
interface P { ns: Ns; pod: PodName }
const ALL: P[] = NAMESPACES.flatMap((ns) => PODS.map((pod) => ({ ns, pod })));

/** Pod IPs: x -> 10.1.0.0/16, y -> 10.2.0.0/16, z -> 10.3.0.0/16; a/b/c -> .1/.2/.3 */
const podIp = (p: P) => `10.${NAMESPACES.indexOf(p.ns) + 1}.0.${PODS.indexOf(p.pod) + 1}`;
/** Nodes: x Pods on node-1, y and z Pods on node-2. */
const nodeOf = (ns: Ns) => (ns === 'x' ? 'node-1' : 'node-2');
const NODE_IP: Record<string, string> = { 'node-1': '192.168.0.1', 'node-2': '192.168.0.2' };

function model(nsLabels: Partial<Record<Ns, Record<string, string>>> = {}): KubeObject[] {
  const objs: KubeObject[] = [];
  objs.push({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1', labels: { role: 'one' } }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP['node-1'] }] } });
  objs.push({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-2', labels: { role: 'two' } }, status: { addresses: [{ type: 'InternalIP', address: NODE_IP['node-2'] }] } });
  for (const ns of NAMESPACES) {
    objs.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { ns, ...(nsLabels[ns] ?? {}) } } });
  }
  for (const p of ALL) {
    const ports = [80, 81].flatMap((port) => ['TCP', 'UDP', 'SCTP'].map((protocol) => ({ name: `serve-${port}-${protocol.toLowerCase()}`, containerPort: port, protocol })));
    objs.push({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { namespace: p.ns, name: p.pod, labels: { pod: p.pod } },
      spec: { nodeName: nodeOf(p.ns), serviceAccountName: `sa-${p.pod}`, containers: [{ name: 'c', ports }] },
      status: { podIP: podIp(p) },
    });
  }
  return objs;
}

function engineWith(objects: KubeObject[], nsLabels?: Partial<Record<Ns, Record<string, string>>>): PolicyEngine {
  const e = new PolicyEngine();
  for (const o of [...model(nsLabels), ...objects]) e.upsert(o);
  return e;
}

const MARK: Record<Verdict, string> = { allow: '.', drop: 'X', reject: 'R' };
const label = (p: P) => `${p.ns}/${p.pod}`;

function table(cell: (from: P, to: P) => string): string {
  const lines = [`     ${ALL.map(label).join(' ')}`];
  for (const from of ALL) lines.push(`${label(from)}  ${ALL.map((to) => cell(from, to).padEnd(3)).join(' ')}`);
  return lines.join('\n');
}

/**
 * Compares the engine's 9x9 matrix on one port/protocol with the expectation. The diagonal is
 * always allowed: a Pod reaching its own address never leaves its network namespace.
 */
function expectMatrix(t: Test, e: PolicyEngine, port: number, protocol: Probe['protocol'], expected: (from: P, to: P) => Verdict, what: string, todo?: string): void {
  const actual = table((from, to) => MARK[e.evaluate({ from: label(from), to: label(to), port, protocol }).verdict]);
  t.equal(actual, table((from, to) => MARK[label(from) === label(to) ? 'allow' : expected(from, to)]), `${what} (${port}/${protocol})`, todo ? { todo } : {});
  t.same(e.errors(), [], 'no invalid objects');
}

const acnp = (name: string, spec: any): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name }, spec });
const annp = (ns: string, name: string, spec: any): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy', metadata: { namespace: ns, name }, spec });
const k8snp = (ns: string, name: string, spec: any): KubeObject => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: ns, name }, spec });
const inNs = (...ns: Ns[]) => ({ namespaceSelector: { matchExpressions: [{ key: 'ns', operator: 'In', values: ns }] } });
const pod = (name: PodName) => ({ podSelector: { matchLabels: { pod: name } } });
const allow = (): Verdict => 'allow';
const cg = (name: string, spec: any): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterGroup', metadata: { name }, spec });

t.test('baseline: no policy, everything allowed', async (t) => {
  expectMatrix(t, engineWith([]), 80, 'TCP', allow, 'no policies');
});

t.test('tier ordering: emergency beats application; a custom tier sits between its neighbours', async (t) => {
  const e = engineWith([
    acnp('app-drop', { priority: 1, appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'drop-x', from: [inNs('x')] }] }),
    acnp('emergency-allow', { priority: 100, tier: 'emergency', appliedTo: [{ ...inNs('y'), ...pod('a') }], ingress: [{ action: 'Allow', name: 'allow-x', from: [inNs('x')] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (f.ns === 'x' && to.ns === 'y' && to.pod !== 'a' ? 'drop' : 'allow'), 'emergency Allow wins over application Drop');
  const r = e.evaluate({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP' });
  t.same(r.decidedBy, { kind: 'AntreaClusterNetworkPolicy', name: 'emergency-allow', rule: 'allow-x', direction: 'Ingress', tier: 'emergency', action: 'Allow' });

  const custom = engineWith([
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'between' }, spec: { priority: 120 } },
    acnp('secops-allow-a', { priority: 50, tier: 'securityops', appliedTo: [inNs('z')], ingress: [{ action: 'Allow', name: 'a', from: [pod('a')] }] }),
    acnp('custom-drop', { priority: 50, tier: 'between', appliedTo: [inNs('z')], ingress: [{ action: 'Drop', name: 'ab', from: [{ podSelector: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['a', 'b'] }] } }] }] }),
    acnp('netops-allow', { priority: 1, tier: 'networkops', appliedTo: [inNs('z')], ingress: [{ action: 'Allow', name: 'all' }] }),
  ]);
  expectMatrix(t, custom, 80, 'TCP', (f, to) => (to.ns === 'z' && f.pod === 'b' ? 'drop' : 'allow'), 'securityops(100) > custom(120) > networkops(150)');
});

t.test('policy priority inside a tier, across ACNP and ANNP; rule order inside a policy', async (t) => {
  const e = engineWith([
    acnp('p2-allow', { priority: 2, appliedTo: [inNs('x')], ingress: [{ action: 'Allow', name: 'r', from: [inNs('y')] }] }),
    annp('x', 'p1-drop', { priority: 1, appliedTo: [{ podSelector: {} }], ingress: [{ action: 'Drop', name: 'r', from: [{ namespaceSelector: { matchLabels: { ns: 'y' } }, ...pod('c') }] }] }),
    acnp('p3-drop', { priority: 3, appliedTo: [inNs('x')], ingress: [{ action: 'Drop', name: 'r', from: [inNs('y', 'z')] }] }),
  ]);
  // y/c -> x: p1 (ANNP) drops first; other y -> x: p2 allows before p3; z -> x: p3 drops.
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns !== 'x' ? 'allow' : f.ns === 'z' || (f.ns === 'y' && f.pod === 'c') ? 'drop' : 'allow'), 'lower priority value first');

  const order = engineWith([
    acnp('ordered', { priority: 5, appliedTo: [inNs('y')], ingress: [
      { action: 'Allow', name: 'first', from: [pod('a')] },
      { action: 'Drop', name: 'second' },
      { action: 'Allow', name: 'never', from: [pod('b')] },
    ] }),
  ]);
  expectMatrix(t, order, 80, 'TCP', (f, to) => (to.ns === 'y' && f.pod !== 'a' ? 'drop' : 'allow'), 'rules apply in the order written');
  t.equal(order.evaluate({ from: 'x/b', to: 'y/a', port: 80, protocol: 'TCP' }).decidedBy?.rule, 'second');
});

t.test('Pass falls through to K8s NetworkPolicy and skips the remaining Antrea rules', async (t) => {
  const e = engineWith([
    acnp('pass-x', { priority: 1, tier: 'securityops', appliedTo: [inNs('y')], ingress: [
      { action: 'Pass', name: 'pass-from-x', from: [inNs('x')] },
      { action: 'Drop', name: 'drop-rest', from: [inNs('z')] },
    ] }),
    acnp('netops-drop-all', { priority: 1, tier: 'networkops', appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'all', from: [inNs('x')] }] }),
    k8snp('y', 'allow-a', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: {}, ...pod('a') }] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => {
    if (to.ns !== 'y') return 'allow';
    if (f.ns === 'x') return f.pod === 'a' ? 'allow' : 'drop'; // passed to the K8s NP: a allowed, others isolated
    if (f.ns === 'z') return 'drop'; // Antrea Drop
    return f.pod === 'a' ? 'allow' : 'drop'; // y -> y: no Antrea rule matches, the K8s NP decides
  }, 'Pass');
  const passed = e.evaluate({ from: 'x/b', to: 'y/c', port: 80, protocol: 'TCP' });
  t.equal(passed.decidedBy?.kind, 'K8sNetworkPolicyIsolation', 'after Pass, the K8s isolation decides (not the networkops Drop)');
});

t.test('baseline tier: after K8s NetworkPolicy, and cannot lift isolation', async (t) => {
  const e = engineWith([
    acnp('baseline-deny-from-x', { priority: 1, tier: 'baseline', appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'from-x', from: [inNs('x')] }, { action: 'Allow', name: 'rest' }] }),
    k8snp('y', 'b-from-xa', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, ...pod('a') }] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => {
    if (to.ns !== 'y') return 'allow';
    if (to.pod === 'b') return f.ns === 'x' && f.pod === 'a' ? 'allow' : 'drop'; // K8s NP; the baseline Allow cannot undo isolation
    return f.ns === 'x' ? 'drop' : 'allow'; // not isolated: the baseline decides
  }, 'baseline');
  t.equal(e.evaluate({ from: 'z/a', to: 'y/b', port: 80, protocol: 'TCP' }).decidedBy?.kind, 'K8sNetworkPolicyIsolation');
  t.same(e.evaluate({ from: 'x/c', to: 'y/a', port: 80, protocol: 'TCP' }).decidedBy, { kind: 'AntreaClusterNetworkPolicy', name: 'baseline-deny-from-x', rule: 'from-x', direction: 'Ingress', tier: 'baseline', action: 'Drop' });
});

t.test('Reject, egress and ingress sides', async (t) => {
  const e = engineWith([
    acnp('reject-to-zc', { priority: 1, appliedTo: [{ ...inNs('z'), ...pod('c') }], ingress: [{ action: 'Reject', name: 'r', from: [pod('a')] }] }),
    acnp('drop-from-xb', { priority: 1, appliedTo: [{ ...inNs('x'), ...pod('b') }], egress: [{ action: 'Drop', name: 'r', to: [inNs('y')] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => {
    if (f.ns === 'x' && f.pod === 'b' && to.ns === 'y') return 'drop';
    if (to.ns === 'z' && to.pod === 'c' && f.pod === 'a') return 'reject';
    return 'allow';
  }, 'Reject and egress Drop');
});

t.test('namespaces: Self and sameLabels (seed examples)', async (t) => {
  const allowSelf = acnp('allow-self-ns', { priority: 1, tier: 'platform', appliedTo: [{ namespaceSelector: {} }],
    ingress: [{ action: 'Allow', from: [{ namespaces: { match: 'Self' } }] }, { action: 'Drop' }],
    egress: [{ action: 'Allow', to: [{ namespaces: { match: 'Self' } }] }, { action: 'Drop' }] });
  expectMatrix(t, engineWith([allowSelf]), 80, 'TCP', (f, to) => (f.ns === to.ns ? 'allow' : 'drop'), 'allow-self-ns');
  const denyAB = acnp('deny-self-ns-a-to-b', { priority: 1, tier: 'securityops', appliedTo: [{ namespaceSelector: {}, ...pod('b') }],
    ingress: [{ action: 'Drop', from: [{ namespaces: { match: 'Self' }, ...pod('a') }] }] });
  expectMatrix(t, engineWith([allowSelf, denyAB]), 80, 'TCP', (f, to) => (f.ns !== to.ns || (f.pod === 'a' && to.pod === 'b') ? 'drop' : 'allow'), 'with deny-self-ns-a-to-b');

  const same = acnp('same-team', { priority: 1, appliedTo: [{ namespaceSelector: {} }],
    ingress: [{ action: 'Allow', name: 'same-team', from: [{ namespaces: { sameLabels: ['team'] } }] }, { action: 'Drop', name: 'rest' }] });
  const teams = { x: { team: 'blue' }, y: { team: 'blue' }, z: { team: 'red' } };
  expectMatrix(t, engineWith([same], teams), 80, 'TCP', (f, to) => (teams[f.ns].team === teams[to.ns].team ? 'allow' : 'drop'), 'sameLabels team');
  // a Namespace without the key shares labels with nobody
  expectMatrix(t, engineWith([same], { x: { team: 'blue' }, y: { team: 'blue' } }), 80, 'TCP',
    (f, to) => (to.ns !== 'z' && f.ns !== 'z' ? 'allow' : 'drop'), 'sameLabels: target Namespace without the key');
});

t.test('ClusterGroup with childGroups; serviceReference group', async (t) => {
  const e = engineWith([
    cg('pods-a', pod('a')),
    cg('ns-z', { namespaceSelector: { matchLabels: { ns: 'z' } } }),
    cg('parent', { childGroups: ['pods-a', 'ns-z'] }),
    cg('x-pods', { namespaceSelector: { matchLabels: { ns: 'x' } } }),
    acnp('drop-parent-to-x', { priority: 1, appliedTo: [{ group: 'x-pods' }], ingress: [{ action: 'Drop', name: 'r', from: [{ group: 'parent' }] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'x' && (f.pod === 'a' || f.ns === 'z') ? 'drop' : 'allow'), 'childGroups union');

  const svc: KubeObject = { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'y', name: 'svc-b' }, spec: { selector: { pod: 'b' }, clusterIP: '10.96.0.10', ports: [{ port: 8080, targetPort: 80, protocol: 'TCP' }] } };
  const s = engineWith([
    svc,
    cg('backends', { serviceReference: { name: 'svc-b', namespace: 'y' } }),
    acnp('drop-to-backends', { priority: 1, appliedTo: [inNs('x')], egress: [{ action: 'Drop', name: 'r', to: [{ group: 'backends' }] }] }),
  ]);
  expectMatrix(t, s, 80, 'TCP', (f, to) => (f.ns === 'x' && to.ns === 'y' && to.pod === 'b' ? 'drop' : 'allow'), 'serviceReference = the Service\'s backend Pods');
});

t.test('Group in an Antrea NetworkPolicy is looked up in the policy\'s Namespace', async (t) => {
  const grp = (ns: string, name: string, spec: any): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Group', metadata: { namespace: ns, name }, spec });
  const e = engineWith([
    grp('y', 'clients', { podSelector: { matchLabels: { pod: 'c' } } }), // y/c only (own Namespace)
    grp('x', 'clients', { namespaceSelector: {} }), // a same-named Group elsewhere must not be used
    grp('y', 'servers', { podSelector: { matchLabels: { pod: 'a' } } }),
    annp('y', 'drop-clients', { priority: 1, appliedTo: [{ group: 'servers' }], ingress: [{ action: 'Drop', name: 'r', from: [{ group: 'clients' }] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'y' && to.pod === 'a' && f.ns === 'y' && f.pod === 'c' ? 'drop' : 'allow'), 'Group scoping');
});

t.test('ANNP: podSelector without namespaceSelector is the policy\'s Namespace', async (t) => {
  const e = engineWith([annp('x', 'only-own-ns', { priority: 1, appliedTo: [pod('a')], ingress: [{ action: 'Drop', name: 'r', from: [{ podSelector: {} }] }] })]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'x' && to.pod === 'a' && f.ns === 'x' ? 'drop' : 'allow'), 'ANNP scoping');
  const c = engineWith([acnp('all-ns', { priority: 1, appliedTo: [{ ...inNs('x'), ...pod('a') }], ingress: [{ action: 'Drop', name: 'r', from: [{ podSelector: {} }] }] })]);
  expectMatrix(t, c, 80, 'TCP', (_f, to) => (to.ns === 'x' && to.pod === 'a' ? 'drop' : 'allow'), 'ACNP: podSelector alone is every Namespace');
});

t.test('per-rule appliedTo', async (t) => {
  const e = engineWith([acnp('per-rule', { priority: 1, ingress: [
    { action: 'Drop', name: 'to-xa', appliedTo: [{ ...inNs('x'), ...pod('a') }], from: [inNs('y')] },
    { action: 'Drop', name: 'to-yb', appliedTo: [{ ...inNs('y'), ...pod('b') }], from: [inNs('z')] },
  ] })]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => ((label(to) === 'x/a' && f.ns === 'y') || (label(to) === 'y/b' && f.ns === 'z') ? 'drop' : 'allow'), 'each rule has its own targets');
});

t.test('serviceAccount in appliedTo and peers', async (t) => {
  const e = engineWith([acnp('acnp-service-account', { priority: 5, tier: 'securityops', appliedTo: [{ serviceAccount: { name: 'sa-a', namespace: 'x' } }],
    egress: [{ action: 'Drop', name: 'ServiceAccountEgressRule', to: [{ serviceAccount: { name: 'sa-b', namespace: 'y' } }] }] })]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (label(f) === 'x/a' && label(to) === 'y/b' ? 'drop' : 'allow'), 'serviceAccount');
});

t.test('named ports, port ranges, protocols', async (t) => {
  const e = engineWith([acnp('named', { priority: 1, appliedTo: [inNs('x')], ingress: [
    { action: 'Allow', name: 'web', ports: [{ port: 'serve-80-tcp' }] },
    { action: 'Drop', name: 'rest' },
  ] })]);
  expectMatrix(t, e, 80, 'TCP', allow, 'named port serve-80-tcp');
  expectMatrix(t, e, 81, 'TCP', (_f, to) => (to.ns === 'x' ? 'drop' : 'allow'), 'other port');
  expectMatrix(t, e, 80, 'UDP', (_f, to) => (to.ns === 'x' ? 'drop' : 'allow'), 'same port number, other protocol');

  const r = engineWith([acnp('range', { priority: 1, appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'r', ports: [{ protocol: 'UDP', port: 80, endPort: 81 }] }] })]);
  for (const port of [80, 81]) expectMatrix(t, r, port, 'UDP', (_f, to) => (to.ns === 'y' ? 'drop' : 'allow'), 'UDP 80-81 dropped');
  expectMatrix(t, r, 80, 'TCP', allow, 'TCP untouched');
  expectMatrix(t, r, 80, 'SCTP', allow, 'SCTP untouched');

  const sctp = engineWith([acnp('sctp', { priority: 1, appliedTo: [inNs('z')], egress: [{ action: 'Reject', name: 'r', ports: [{ protocol: 'SCTP', port: 81 }] }] })]);
  expectMatrix(t, sctp, 81, 'SCTP', (f) => (f.ns === 'z' ? 'reject' : 'allow'), 'SCTP 81 egress Reject');
  expectMatrix(t, sctp, 80, 'SCTP', allow, 'SCTP 80 allowed');
});

t.test('ipBlock with except', async (t) => {
  const e = engineWith([acnp('cidr', { priority: 1, appliedTo: [inNs('x')], ingress: [{ action: 'Drop', name: 'r', from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.2.0.0/16', '10.3.0.3/32'] } }] }] })]);
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'x' && (f.ns === 'x' || label(f) === 'z/a' || label(f) === 'z/b') ? 'drop' : 'allow'), 'cidr minus except');
});

t.test('nodeSelector peers', async (t) => {
  const e = engineWith([acnp('egress-node-two', { priority: 1, appliedTo: [inNs('x')], egress: [{ action: 'Drop', name: 'r', to: [{ nodeSelector: { matchLabels: { role: 'two' } } }], ports: [{ protocol: 'TCP', port: 6443 }] }] })]);
  t.equal(e.evaluate({ from: 'x/a', to: `ip:${NODE_IP['node-2']}`, port: 6443, protocol: 'TCP' }).verdict, 'drop');
  t.equal(e.evaluate({ from: 'x/a', to: `ip:${NODE_IP['node-1']}`, port: 6443, protocol: 'TCP' }).verdict, 'allow');
  t.equal(e.evaluate({ from: 'x/a', to: `ip:${NODE_IP['node-2']}`, port: 443, protocol: 'TCP' }).verdict, 'allow');
  t.equal(e.evaluate({ from: 'y/a', to: `ip:${NODE_IP['node-2']}`, port: 6443, protocol: 'TCP' }).verdict, 'allow');

  const i = engineWith([acnp('ingress-from-node-one', { priority: 1, appliedTo: [{ namespaceSelector: {} }], ingress: [{ action: 'Drop', name: 'r', from: [{ nodeSelector: { matchLabels: { role: 'one' } } }] }] })]);
  for (const p of ALL) {
    const v = i.evaluate({ from: `ip:${NODE_IP['node-1']}`, to: label(p), port: 80, protocol: 'TCP' }).verdict;
    // x Pods run on node-1: a Node always reaches its own Pods (kubelet probes)
    t.equal(v, p.ns === 'x' ? 'allow' : 'drop', `node-1 -> ${label(p)}`);
  }
});

t.test('toServices matches the Service, not direct access to its endpoints', async (t) => {
  const svc: KubeObject = { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'y', name: 'svc-b' }, spec: { selector: { pod: 'b' }, clusterIP: '10.96.0.10', ports: [{ port: 8080, targetPort: 80, protocol: 'TCP' }] } };
  const e = engineWith([svc, acnp('acnp-drop-to-services', { priority: 5, tier: 'securityops', appliedTo: [inNs('x')], egress: [{ action: 'Drop', name: 'DropToServices', toServices: [{ name: 'svc-b', namespace: 'y' }] }] })]);
  for (const p of ALL) {
    const v = e.evaluate({ from: label(p), to: 'service:y/svc-b', port: 8080, protocol: 'TCP' });
    t.equal(v.verdict, p.ns === 'x' ? 'drop' : 'allow', `${label(p)} -> service:y/svc-b`);
  }
  expectMatrix(t, e, 80, 'TCP', allow, 'direct Pod access is not affected');
});

t.test('fqdn egress rules use learned DNS answers', async (t) => {
  const e = engineWith([acnp('acnp-fqdn-all-foobar', { priority: 1, appliedTo: [{ ...inNs('x'), ...pod('a') }], egress: [
    { action: 'Allow', name: 'foobar', to: [{ fqdn: '*foobar.com' }], ports: [{ protocol: 'TCP', port: 8080 }] },
    { action: 'Drop', name: 'rest' },
  ] })]);
  e.setFqdnAddresses([{ name: 'www.foobar.com', ips: ['203.0.113.7'] }]);
  t.equal(e.evaluate({ from: 'x/a', to: 'ip:203.0.113.7', port: 8080, protocol: 'TCP' }).verdict, 'allow');
  t.equal(e.evaluate({ from: 'x/a', to: 'ip:203.0.113.8', port: 8080, protocol: 'TCP' }).verdict, 'drop');
  t.equal(e.evaluate({ from: 'x/a', to: 'ip:203.0.113.7', port: 80, protocol: 'TCP' }).verdict, 'drop');
  t.equal(e.evaluate({ from: 'x/b', to: 'ip:203.0.113.8', port: 80, protocol: 'TCP' }).verdict, 'allow');
});

t.test('invalid Antrea objects are reported and change nothing', async (t) => {
  const e = engineWith([
    acnp('pass-in-baseline', { priority: 1, tier: 'baseline', appliedTo: [{ namespaceSelector: {} }], ingress: [{ action: 'Pass' }] }),
    acnp('unknown-tier', { priority: 1, tier: 'gold', appliedTo: [{ namespaceSelector: {} }], ingress: [{ action: 'Drop' }] }),
  ]);
  const actual = table((from, to) => MARK[e.evaluate({ from: label(from), to: label(to), port: 80, protocol: 'TCP' }).verdict]);
  t.equal(actual, table(() => '.'), 'nothing enforced');
  t.same(e.errors().map((x) => `${x.kind} ${x.name} ${x.field}`).sort(), [
    'AntreaClusterNetworkPolicy pass-in-baseline spec.ingress[0].action',
    'AntreaClusterNetworkPolicy unknown-tier spec.tier',
  ]);
  // creating the Tier afterwards makes the policy valid
  e.upsert({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'gold' }, spec: { priority: 10 } });
  t.equal(e.evaluate({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP' }).verdict, 'drop', 'the policy applies once its Tier exists');
});

t.test('updates: a ClusterGroup edit, a Namespace relabel and a policy edit change the verdicts', async (t) => {
  const e = engineWith([
    cg('clients', pod('a')),
    acnp('drop-clients', { priority: 1, appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'r', from: [{ group: 'clients' }] }] }),
    acnp('same-team', { priority: 2, appliedTo: [inNs('z')], ingress: [{ action: 'Allow', name: 'team', from: [{ namespaces: { sameLabels: ['team'] } }] }, { action: 'Drop', name: 'rest' }] }),
  ], { z: { team: 'red' } });
  const before = (f: P, to: P): Verdict => ((to.ns === 'y' && f.pod === 'a') || (to.ns === 'z' && f.ns !== 'z') ? 'drop' : 'allow');
  expectMatrix(t, e, 80, 'TCP', before, 'initial');
  e.upsert(cg('clients', pod('b')));
  e.upsert({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x', team: 'red' } } });
  const after = (f: P, to: P): Verdict => ((to.ns === 'y' && f.pod === 'b') || (to.ns === 'z' && f.ns === 'y') ? 'drop' : 'allow');
  expectMatrix(t, e, 80, 'TCP', after, 'group now selects b; x joins team red');
  e.upsert(acnp('drop-clients', { priority: 1, appliedTo: [inNs('y')], ingress: [{ action: 'Reject', name: 'r', from: [{ group: 'clients' }] }] }));
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'y' && f.pod === 'b' ? 'reject' : after(f, to)), 'policy edit: Drop -> Reject');
  e.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterGroup', name: 'clients' });
  expectMatrix(t, e, 80, 'TCP', (f, to) => (to.ns === 'z' && f.ns === 'y' ? 'drop' : 'allow'), 'a missing group selects nothing');
});

// Antrea group semantics that limit what a group may select.

t.test('an ipBlock ClusterGroup in appliedTo is ignored (the policy has no effect)', async (t) => {
  const e = engineWith([cg('ips', { ipBlocks: [{ cidr: '10.1.0.0/16' }] }), acnp('on-ips', { priority: 1, appliedTo: [{ group: 'ips' }], ingress: [{ action: 'Drop', name: 'r' }] })]);
  expectMatrix(t, e, 80, 'TCP', allow, 'ipBlock group as appliedTo');
});

t.test('a ClusterGroup nested two levels deep is not realized (selects nothing)', async (t) => {
  const e = engineWith([
    cg('leaf', pod('a')), cg('mid', { childGroups: ['leaf'] }), cg('top', { childGroups: ['mid'] }),
    acnp('from-top', { priority: 1, appliedTo: [inNs('y')], ingress: [{ action: 'Drop', name: 'r', from: [{ group: 'top' }] }] }),
  ]);
  expectMatrix(t, e, 80, 'TCP', allow, 'top has a child with children');
});

t.test('a Group with Pods in other Namespaces cannot be the appliedTo of an Antrea NetworkPolicy', async (t) => {
  const e = engineWith([
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'Group', metadata: { namespace: 'y', name: 'wide' }, spec: { namespaceSelector: {}, podSelector: {} } },
    annp('y', 'annp-wide', { priority: 1, appliedTo: [{ group: 'wide' }], ingress: [{ action: 'Drop', name: 'r' }] }),
  ]);
  // Antrea reports Realizable=False and enforces nothing; above all, an ANNP in y never applies to Pods of x or z.
  expectMatrix(t, e, 80, 'TCP', allow, 'cross-namespace Group as ANNP appliedTo');
});
