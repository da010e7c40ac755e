/**
 * The evaluator's precedence order (README, "Policy precedence") and peer kinds, with hand-written IR rules
 * (test-only kind), so every stage is exercised without depending on a kind's normalizer.
 */
import t from 'tap';
import { PolicyEngine, type NormalizerEntry } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import type { Isolation, KubeObject, Peer } from '../../daemon/policy/types.js';
import { ALL, cells, grid, gridWith, inNs, modelEngine, namespace, netpol, node, pod, podIp, podsIn, rule, rulesObject, testKind } from './policy-core-helpers.js';

const everyPod: Peer = { kind: 'pods', namespaces: { kind: 'all' }, pods: {} };
const v = (e: PolicyEngine, from: string, to: string, port = 80, protocol: 'TCP' | 'UDP' | 'SCTP' | 'ICMP' = 'TCP') => e.evaluate({ from, to, port, protocol });

t.test('stage 0: tier, then policy priority, then rule order, then tie-break', async (t) => {
  const e = modelEngine([testKind]);
  const to = [podsIn('x', { pod: 'a' })];
  e.upsert(rulesObject('p', {
    rules: [
      rule({ direction: 'Ingress', action: 'Allow', appliedTo: to }, { tier: 100, policy: 5, rule: 0 }, 'tier100'),
      rule({ direction: 'Ingress', action: 'Drop', appliedTo: to }, { tier: 50, policy: 9, rule: 3 }, 'tier50'),
    ],
  }));
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.name, 'tier50', 'lower tier priority first');
  t.equal(v(e, 'y/a', 'x/a').verdict, 'drop');
  e.upsert(rulesObject('p', {
    rules: [
      rule({ direction: 'Ingress', action: 'Drop', appliedTo: to }, { policy: 2.5, rule: 0 }, 'p2.5'),
      rule({ direction: 'Ingress', action: 'Allow', appliedTo: to }, { policy: 1.5, rule: 4 }, 'p1.5'),
    ],
  }));
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.name, 'p1.5', 'float policy priority, lower first');
  e.upsert(rulesObject('p', {
    rules: [
      rule({ direction: 'Ingress', action: 'Reject', appliedTo: to }, { rule: 1 }, 'second'),
      rule({ direction: 'Ingress', action: 'Allow', appliedTo: to }, { rule: 0 }, 'first'),
    ],
  }));
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.name, 'first', 'rule order');
  e.upsert(rulesObject('p', {
    rules: [
      rule({ direction: 'Ingress', action: 'Reject', appliedTo: to }, { tieBreak: 'b' }, 'tb-b'),
      rule({ direction: 'Ingress', action: 'Allow', appliedTo: to }, { tieBreak: 'a' }, 'tb-a'),
    ],
  }));
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.name, 'tb-a', 'tie-break text');
});

t.test('Reject gives a reject verdict; Drop a drop verdict', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Reject', appliedTo: [podsIn('x', { pod: 'a' })], ports: [{ protocol: 'TCP', port: 80 }] }),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })], ports: [{ protocol: 'UDP', port: 80 }] }),
  ] }));
  t.equal(grid(e, 80), gridWith(cells(ALL.filter((p) => p !== 'x/a'), ['x/a'], 'R')));
  t.equal(grid(e, 80, 'UDP'), gridWith(cells(ALL.filter((p) => p !== 'x/a'), ['x/a'], 'X')));
  t.equal(grid(e, 81), gridWith({}));
});

t.test('stage 0 beats Kubernetes NetworkPolicy; K8s NP beats baseline; isolation beats baseline allow', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(netpol('x', 'allow-y', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })], peers: [podsIn('y', { pod: 'b' })] }, {}, 'acnp-drop-yb'),
    rule({ direction: 'Ingress', action: 'Allow', appliedTo: [podsIn('x', { pod: 'a' })], peers: [podsIn('z')] }, { stage: 2, tier: 253 }, 'baseline-allow-z'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'b' })], peers: [podsIn('y')] }, { stage: 2, tier: 253 }, 'baseline-drop-y'),
  ] }));
  t.equal(v(e, 'y/b', 'x/a').decidedBy?.name, 'acnp-drop-yb');
  t.equal(v(e, 'y/b', 'x/a').verdict, 'drop');
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.kind, 'NetworkPolicy');
  t.equal(v(e, 'z/a', 'x/a').verdict, 'drop', 'baseline Allow cannot lift K8s isolation');
  t.equal(v(e, 'z/a', 'x/a').decidedBy?.kind, 'K8sNetworkPolicyIsolation');
  t.equal(v(e, 'y/a', 'x/b').decidedBy?.name, 'baseline-drop-y', 'baseline applies where no K8s NP selects the Pod');
  e.upsert(netpol('x', 'allow-y-to-b', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  t.equal(v(e, 'y/a', 'x/b').verdict, 'allow', 'a K8s NP allow overrides a baseline drop');
});

t.test('Pass: skips the rest of stage 0, goes to K8s NP, then baseline', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Pass', appliedTo: [podsIn('x')], peers: [podsIn('y')] }, { tier: 100 }, 'pass-y'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x')] }, { tier: 200 }, 'drop-all'),
    rule({ direction: 'Ingress', action: 'Reject', appliedTo: [podsIn('x', { pod: 'c' })], peers: [podsIn('y', { pod: 'c' })] }, { stage: 2, tier: 253 }, 'baseline-reject'),
    rule({ direction: 'Ingress', action: 'Pass', appliedTo: [podsIn('x', { pod: 'c' })], peers: [podsIn('y', { pod: 'b' })] }, { stage: 2, tier: 254 }, 'baseline-pass'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'c' })], peers: [podsIn('y', { pod: 'b' })] }, { stage: 2, tier: 254, rule: 1 }, 'after-baseline-pass'),
  ] }));
  e.upsert(netpol('x', 'np', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'a' } }, namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  t.equal(v(e, 'z/a', 'x/b').decidedBy?.name, 'drop-all', 'no Pass for z: the lower tier drop decides');
  t.equal(v(e, 'y/a', 'x/a').decidedBy?.kind, 'NetworkPolicy', 'Pass skipped drop-all, K8s NP allowed');
  t.equal(v(e, 'y/b', 'x/a').decidedBy?.kind, 'K8sNetworkPolicyIsolation', 'Pass, then K8s isolation');
  t.equal(v(e, 'y/a', 'x/b').verdict, 'allow', 'Pass, no K8s NP, no baseline: default allow');
  t.equal(v(e, 'y/a', 'x/b').decidedBy, null);
  t.equal(v(e, 'y/c', 'x/c').decidedBy?.name, 'baseline-reject', 'Pass, then baseline');
  t.equal(v(e, 'y/c', 'x/c').verdict, 'reject');
  t.equal(v(e, 'y/b', 'x/c').verdict, 'allow', 'Pass in the baseline stage falls to the default');
});

t.test('egress is decided first and both directions must allow', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Egress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })] }, {}, 'egress-drop'),
    rule({ direction: 'Ingress', action: 'Reject', appliedTo: [podsIn('y', { pod: 'a' })] }, {}, 'ingress-reject'),
  ] }));
  t.same(v(e, 'x/a', 'y/a').decidedBy, { kind: 'AntreaClusterNetworkPolicy', name: 'egress-drop', rule: 'egress-drop', direction: 'Egress', tier: 'application', action: 'Drop' });
  t.equal(v(e, 'x/b', 'y/a').decidedBy?.name, 'ingress-reject');
  t.equal(v(e, 'x/b', 'y/b').decidedBy, null);
});

t.test('an allow reports the egress decision, else the ingress one', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Egress', action: 'Allow', appliedTo: [podsIn('x', { pod: 'a' })] }, {}, 'eg'),
    rule({ direction: 'Ingress', action: 'Allow', appliedTo: [podsIn('y')] }, {}, 'in'),
  ] }));
  t.equal(v(e, 'x/a', 'y/a').decidedBy?.name, 'eg');
  t.equal(v(e, 'x/b', 'y/a').decidedBy?.name, 'in');
});

t.test('per-rule appliedTo: each rule only for its own targets', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })], peers: [podsIn('y')] }, { rule: 0 }, 'r0'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'b' })], peers: [podsIn('z')] }, { rule: 1 }, 'r1'),
  ] }));
  t.equal(grid(e, 80), gridWith({ ...cells(inNs('y'), ['x/a'], 'X'), ...cells(inNs('z'), ['x/b'], 'X') }));
});

t.test('self and sameLabels namespace matches are relative to the target', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Allow', appliedTo: [everyPod], peers: [{ kind: 'pods', namespaces: { kind: 'self' }, pods: {} }] }, { rule: 0 }, 'self'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [everyPod] }, { rule: 1 }, 'rest'),
  ] }));
  const sameNs = Object.fromEntries(ALL.flatMap((f) => ALL.filter((to) => f.split('/')[0] !== to.split('/')[0]).map((to) => [`${f}>${to}`, 'X'])));
  t.equal(grid(e, 80), gridWith(sameNs), 'only same-namespace traffic');
  e.upsert(namespace('x', { team: 'red' }));
  e.upsert(namespace('y', { team: 'red' }));
  e.upsert(namespace('z', { team: 'blue' }));
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Allow', appliedTo: [everyPod], peers: [{ kind: 'pods', namespaces: { kind: 'sameLabels', keys: ['team'] }, pods: {} }] }, { rule: 0 }, 'same'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [everyPod] }, { rule: 1 }, 'rest'),
  ] }));
  t.equal(grid(e, 80), gridWith({ ...cells([...inNs('x'), ...inNs('y')], inNs('z'), 'X'), ...cells(inNs('z'), [...inNs('x'), ...inNs('y')], 'X') }));
  e.upsert(namespace('z'));
  t.equal(v(e, 'z/a', 'z/b').verdict, 'drop', 'a target namespace without the key matches nothing');
});

t.test('groups resolve through their definitions, and follow definition changes', async (t) => {
  const e = modelEngine([testKind]);
  const group = (members: unknown[]) => ({ name: 'g', members }) as never;
  e.upsert(rulesObject('g', { groups: [group([podsIn('y', { pod: 'a' }), { kind: 'ipBlock', cidr: '192.168.0.0/24', except: [] }])] }));
  e.upsert(rulesObject('p', { rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x')], peers: [{ kind: 'group', name: 'g' }] })] }));
  t.equal(v(e, 'y/a', 'x/a').verdict, 'drop');
  t.equal(v(e, 'ip:192.168.0.9', 'x/a').verdict, 'drop');
  t.equal(v(e, 'y/b', 'x/a').verdict, 'allow');
  e.upsert(rulesObject('g', { groups: [group([podsIn('y', { pod: 'b' })])] }));
  t.equal(v(e, 'y/a', 'x/a').verdict, 'allow');
  t.equal(v(e, 'y/b', 'x/a').verdict, 'drop');
  e.remove({ apiVersion: 'test.sluice.io/v1', kind: 'Rules', name: 'g' });
  t.equal(v(e, 'y/b', 'x/a').verdict, 'allow', 'an unknown group matches nothing');
});

t.test('serviceAccount peers', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(pod('y', 'a', { sa: 'robot' }));
  e.upsert(rulesObject('p', { rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x')], peers: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: {}, serviceAccount: { namespace: 'y', name: 'robot' } }] })] }));
  t.equal(v(e, 'y/a', 'x/a').verdict, 'drop');
  t.equal(v(e, 'y/b', 'x/a').verdict, 'allow', 'default ServiceAccount');
});

t.test('Nodes, hostNetwork Pods and same-node host traffic', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(node('node-1', '172.18.0.1', { role: 'cp' }));
  e.upsert(node('node-2', '172.18.0.2'));
  e.upsert(pod('y', 'host', { node: 'node-2', hostNetwork: true, labels: { pod: 'host' } }));
  e.upsert(netpol('x', 'deny', { podSelector: {}, ingress: [] }));
  t.equal(v(e, 'ip:172.18.0.1', 'x/a').verdict, 'allow', 'Node to a Pod on the same Node: always allowed');
  t.equal(v(e, 'ip:172.18.0.2', 'x/a').verdict, 'drop', 'another Node is subject to ingress policy');
  t.equal(v(e, 'y/host', 'x/a').verdict, 'drop', 'hostNetwork Pod is its Node: node-2');
  t.equal(v(e, 'y/host', 'y/a').verdict, 'allow');
  e.upsert(netpol('y', 'deny', { podSelector: {}, policyTypes: ['Ingress', 'Egress'] }));
  t.equal(v(e, 'y/host', 'y/a').verdict, 'allow', 'same-node host traffic even into an isolated Pod');
  t.equal(v(e, 'x/a', 'y/host').verdict, 'allow', 'a hostNetwork Pod has no ingress side of its own');
  t.equal(v(e, 'y/a', 'ip:172.18.0.1').verdict, 'drop', 'Pod egress to a Node is policed on the Pod side');
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Allow', appliedTo: [podsIn('x')], peers: [{ kind: 'nodes', selector: { matchLabels: { role: 'cp' } } }] }, {}, 'from-cp'),
    rule({ direction: 'Egress', action: 'Reject', appliedTo: [podsIn('z')], peers: [{ kind: 'nodes', selector: {} }] }, {}, 'to-nodes'),
  ] }));
  t.equal(v(e, 'ip:172.18.0.1', 'x/b').decidedBy, null, 'same node');
  t.equal(v(e, 'z/a', 'ip:172.18.0.2').verdict, 'reject');
  t.equal(v(e, 'z/a', 'y/host').verdict, 'reject', 'hostNetwork Pod address is a Node address');
  t.equal(v(e, 'z/a', 'y/a').verdict, 'drop', 'a Pod is not a Node');
});

t.test('Services: probes go to the endpoints; toServices matches the Service itself', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'y' }, spec: { clusterIP: '10.96.0.10', selector: { pod: 'b' }, ports: [{ port: 8080, targetPort: 'serve-81-tcp' }] } });
  t.equal(v(e, 'x/a', 'service:y/web', 8080).verdict, 'allow');
  t.match(v(e, 'x/a', 'service:y/web', 8080).note, /via endpoint y\/b/);
  t.equal(v(e, 'x/a', 'service:y/web', 80).verdict, 'reject', 'a port the Service does not have');
  e.upsert(netpol('y', 'only-81', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ ports: [{ port: 81 }] }] }));
  t.equal(v(e, 'x/a', 'service:y/web', 8080).verdict, 'allow', 'ingress sees the target port 81');
  e.upsert(netpol('y', 'only-81', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ ports: [{ port: 8080 }] }] }));
  t.equal(v(e, 'x/a', 'service:y/web', 8080).verdict, 'drop', 'the Service port is not what ingress sees');
  e.remove({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'y', name: 'only-81' });
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Egress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })], peers: [{ kind: 'service', namespace: 'y', name: 'web' }] }, { rule: 0 }, 'to-svc'),
    rule({ direction: 'Egress', action: 'Reject', appliedTo: [podsIn('x', { pod: 'b' })], peers: [{ kind: 'serviceRef', namespace: 'y', name: 'web' }] }, { rule: 1 }, 'to-backends'),
  ] }));
  t.equal(v(e, 'x/a', 'service:y/web', 8080).decidedBy?.name, 'to-svc');
  t.equal(v(e, 'x/a', 'ip:10.96.0.10', 8080).decidedBy?.name, 'to-svc', 'ip: of the ClusterIP is the Service');
  t.equal(v(e, 'x/a', 'y/b', 81).verdict, 'allow', 'toServices does not cover direct access to the endpoints');
  t.equal(v(e, 'x/b', 'y/b', 81).verdict, 'reject', 'serviceRef covers the endpoints');
  t.equal(v(e, 'x/b', 'y/a', 81).verdict, 'allow');
  e.upsert(pod('y', 'a', { labels: { pod: 'b' } }));
  t.equal(v(e, 'x/b', 'y/a', 81).verdict, 'reject', 'endpoints follow the selector');
  e.upsert({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'web-1', namespace: 'y', labels: { 'kubernetes.io/service-name': 'web' } }, endpoints: [{ addresses: [podIp('y', 'c')], targetRef: { kind: 'Pod', namespace: 'y', name: 'c' } }] } as KubeObject);
  t.equal(v(e, 'x/b', 'y/c', 81).verdict, 'reject', 'EndpointSlices, when present, define the endpoints');
  t.equal(v(e, 'x/b', 'y/b', 81).verdict, 'allow');
});

t.test('fqdn peers match learned addresses only', async (t) => {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind] });
  for (const o of [namespace('x'), pod('x', 'a')]) e.upsert(o);
  e.upsert(rulesObject('p', { rules: [rule({ direction: 'Egress', action: 'Drop', appliedTo: [podsIn('x')], peers: [{ kind: 'fqdn', pattern: '*.example.com' }] })] }));
  t.same(e.fqdnPatterns().patterns, ['*.example.com'], 'the rules\' fqdn patterns, for DNS learning');
  t.same([...e.fqdnEgressRules().values()], [['*.example.com']], 'and the rules they come from, for DNS interception');
  t.equal(v(e, 'x/a', 'ip:93.184.216.34').verdict, 'allow', 'unresolved: matches nothing');
  e.setFqdnAddresses([{ name: 'WWW.Example.com.', ips: ['93.184.216.34'] }]);
  t.equal(v(e, 'x/a', 'ip:93.184.216.34').verdict, 'drop');
  t.equal(v(e, 'x/a', 'ip:93.184.216.35').verdict, 'allow');
  e.setFqdnAddresses([{ name: 'example.org', ips: ['93.184.216.35'] }]);
  t.equal(v(e, 'x/a', 'ip:93.184.216.35').verdict, 'allow', 'another name does not match the pattern');
  t.same(e.fqdnAddresses(), [{ name: 'example.org', ips: ['93.184.216.35'] }, { name: 'www.example.com', ips: ['93.184.216.34'] }], 'names are kept canonical');
  const fqdnGroup = () => e.addressGroups().find((g) => g.peer.kind === 'fqdn')!;
  t.same(fqdnGroup().members.map((m) => [m.ref, m.ips]), [['www.example.com', ['93.184.216.34']]], 'the fqdn AddressGroup holds the learned address');
  const cs = e.setFqdnAddresses([{ name: 'www.example.com', ips: [] }]);
  t.equal(v(e, 'x/a', 'ip:93.184.216.34').verdict, 'allow', 'an empty address set forgets the name');
  t.same(cs.addressGroups.updated, [fqdnGroup().id], 'which updates the fqdn AddressGroup');
  t.same(fqdnGroup().members, []);
  e.remove({ apiVersion: 'test.sluice.io/v1', kind: 'Rules', name: 'p' });
  t.equal(e.fqdnPatterns().size, 0, 'the rule gone: no pattern');
  t.equal(e.fqdnEgressRules().size, 0);
});

t.test('ICMP probes and ICMP/IGMP port conditions', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'a' })], ports: [{ protocol: 'ICMP', icmpType: 8, icmpCode: 0 }] }, { rule: 0 }, 'no-ping'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'b' })], ports: [{ protocol: 'ICMP', icmpType: 0 }] }, { rule: 1 }, 'no-echo-reply'),
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x', { pod: 'c' })], ports: [{ protocol: 'IGMP', igmpType: 0x11 }] }, { rule: 2 }, 'igmp'),
  ] }));
  t.equal(v(e, 'y/a', 'x/a', 0, 'ICMP').verdict, 'drop');
  t.equal(v(e, 'y/a', 'x/a', 80).verdict, 'allow');
  t.equal(v(e, 'y/a', 'x/b', 0, 'ICMP').verdict, 'allow', 'echo request is type 8');
  t.equal(v(e, 'y/a', 'x/c', 0, 'ICMP').verdict, 'allow');
});

t.test('source ports match only probes that carry one', async (t) => {
  const e = modelEngine([testKind]);
  e.upsert(rulesObject('p', { rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x')], ports: [{ protocol: 'TCP', sourcePort: 1000, sourceEndPort: 2000 }] })] }));
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP', sourcePort: 1500 } as never).verdict, 'drop');
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP', sourcePort: 2500 } as never).verdict, 'allow');
  t.equal(v(e, 'y/a', 'x/a').verdict, 'allow');
});

t.test('K8s isolation from hand-written Isolations', async (t) => {
  const e = modelEngine([testKind]);
  const iso: Isolation = { ref: { kind: 'NetworkPolicy', namespace: 'z', name: 'iso', rule: 'egress-isolation' }, direction: 'Egress', appliedTo: [podsIn('z', { pod: 'c' })] };
  e.upsert(rulesObject('p', { isolations: [iso] }));
  t.equal(grid(e, 80), gridWith(cells(['z/c'], ALL.filter((p) => p !== 'z/c'), 'X')));
});

t.test('unknown endpoints are errors, not verdicts', async (t) => {
  const e = modelEngine();
  t.throws(() => v(e, 'x/zz', 'x/a'), /no Pod x\/zz/);
  t.throws(() => v(e, 'x/a', 'service:x/none'), /no Service/);
  t.throws(() => v(e, 'x/a', 'nonsense'), /expected ns\/pod/);
});

// Tier dependency, with stand-in Antrea kinds (the real ones live in daemon/policy/antrea/).
const fakeTier: NormalizerEntry = {
  group: 'crd.antrea.io', versions: ['v1beta1'], kind: 'Tier',
  normalize: (obj) => ({ rules: [], isolations: [], groups: [], errors: [], tiers: [{ name: obj.metadata.name, priority: obj.spec.priority }] }),
};
const fakePolicy: NormalizerEntry = {
  group: 'crd.antrea.io', versions: ['v1beta1'], kind: 'ClusterNetworkPolicy',
  normalize: (obj, ctx) => {
    const tier = ctx.tierPriority(obj.spec.tier);
    if (tier === undefined) return { rules: [], isolations: [], groups: [], tiers: [], errors: [{ kind: 'ClusterNetworkPolicy', name: obj.metadata.name, field: 'spec.tier', message: `tier ${obj.spec.tier} does not exist` }] };
    return { rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [podsIn('x')] }, { tier }, obj.metadata.name)], isolations: [], groups: [], tiers: [], errors: [] };
  },
};

t.test('a policy naming an unknown tier is invalid until the Tier exists', async (t) => {
  const e = modelEngine([fakeTier, fakePolicy]);
  const acnp: KubeObject = { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'acnp' }, spec: { tier: 'mytier' } };
  const tier: KubeObject = { apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'mytier' }, spec: { priority: 10 } };
  e.upsert(acnp);
  t.match(e.errors()[0]?.message, /does not exist/);
  t.equal(e.errorCount(), e.errors().length, 'errorCount counts what errors lists');
  t.equal(v(e, 'y/a', 'x/a').verdict, 'allow');
  const cs = e.upsert(tier);
  t.same(e.errors(), []);
  t.equal(e.errorCount(), 0);
  t.equal(v(e, 'y/a', 'x/a').verdict, 'drop');
  t.equal(cs.rules.added.length, 1, 'the Tier change re-normalized the policy');
  t.equal(e.tierPriority('mytier'), 10);
  t.equal(e.tierPriority('baseline'), 253, 'static tiers are always known');
  e.upsert({ ...tier, metadata: { name: 'dup' } });
  t.match(e.errors().find((x) => x.name === 'dup')?.message, /already used by Tier "mytier"/, 'two Tiers may not share a priority');
  t.equal(e.errorCount(), e.errors().length, 'errorCount counts a refused Tier too');
  e.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', name: 'mytier' });
  t.notOk(e.errors().some((x) => x.name === 'dup'), 'the refused Tier becomes valid once the priority is free');
  t.equal(e.tierPriority('dup'), 10);
  // Antrea refuses to delete a Tier that policies use; here it went anyway: the policy is invalid,
  // and its last valid version (in mytier, priority 10) stays in force rather than failing open.
  t.equal(v(e, 'y/a', 'x/a').verdict, 'drop', 'the policy keeps its last valid version');
  t.match(e.errors().find((x) => x.name === 'acnp')?.message, /does not exist; its last valid version stays enforced/, 'reported as invalid, saying what stays');
  e.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'acnp' });
  t.equal(v(e, 'y/a', 'x/a').verdict, 'allow', 'deleted: gone');
});
