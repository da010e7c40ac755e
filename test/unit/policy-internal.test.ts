/**
 * Internal objects (seed "NetworkPolicy computation"): shared AddressGroups/AppliedToGroups,
 * per-node AppliedToGroup subsets, ipBlock except as non-overlapping CIDRs, named ports resolved
 * per Pod in the node rule set, and ChangeSets that name only what a change affects.
 */
import t from 'tap';
import { ipBlockCidrs } from '../../daemon/policy/internal.js';
import { type AddressList, addressArray } from '../../daemon/policy/sorted-list.js';
import { modelEngine, namespace, netpol, pod, podIp } from './policy-core-helpers.js';

t.test('ipBlock except becomes non-overlapping CIDRs', async (t) => {
  t.same(ipBlockCidrs('10.0.0.0/8', []), ['10.0.0.0/8']);
  t.same(ipBlockCidrs('10.0.0.0/30', ['10.0.0.1/32']), ['10.0.0.0/32', '10.0.0.2/31']);
  t.same(ipBlockCidrs('10.0.0.0/16', ['10.0.0.0/17', '10.0.128.0/18']), ['10.0.192.0/18']);
  t.same(ipBlockCidrs('10.0.0.0/24', ['10.0.0.0/24']), [], 'everything excepted');
  t.same(ipBlockCidrs('fd00::/126', ['fd00::1/128']), ['fd00::/128', 'fd00::2/127'], 'IPv6');
  t.same(ipBlockCidrs('10.0.0.7/24', []), ['10.0.0.0/24'], 'host bits cleared');
});

t.test('groups are shared between policies using the same selector', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p1', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  e.upsert(netpol('x', 'p2', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 80 }] }] }));
  t.equal(e.appliedToGroups().length, 1, 'one AppliedToGroup for x pod=a');
  t.equal(e.addressGroups().length, 1, 'one AddressGroup for ns=y');
  const [rule1, rule2] = e.internalRules();
  t.same(rule1!.addressGroups, rule2!.addressGroups);
  t.same(e.addressGroups()[0]!.members.map((m) => m.ref), ['y/a', 'y/b', 'y/c']);
  const cs = e.remove({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'p1' });
  t.same(cs.addressGroups, { added: [], updated: [], removed: [] }, 'still used by p2');
  t.same(cs.rules.removed, ['NetworkPolicy/x/p1/ingress-0']);
  const cs2 = e.remove({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'p2' });
  t.equal(cs2.addressGroups.removed.length, 1, 'removed with its last user');
  t.equal(cs2.appliedToGroups.removed.length, 1);
});

t.test('members carry IPs and named-port maps; AppliedToGroups know the local subset', async (t) => {
  const e = modelEngine([], 'node-1');
  e.upsert(netpol('y', 'p', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }] }] }));
  const ag = e.addressGroups()[0]!;
  t.same(ag.members[0], { kind: 'pod', ref: 'x/a', nodeName: 'node-1', ips: [podIp('x', 'a')], ports: ag.members[0]!.ports });
  t.ok(ag.members[0]!.ports.some((p) => p.name === 'serve-80-tcp' && p.containerPort === 80 && p.protocol === 'TCP'));
  const atg = e.appliedToGroups()[0]!;
  t.same(atg.members.map((m) => m.ref), ['y/a', 'y/b', 'y/c']);
  t.same(atg.localMembers, [], 'y Pods run on node-2');
  t.same(e.nodeRuleSet(), [], 'nothing to enforce on node-1');
  e.upsert(netpol('x', 'q', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.244.0.0/16'] } }] }] }));
  const rules = e.nodeRuleSet();
  t.equal(rules.length, 1);
  t.same(rules[0]!.targets, [{ kind: 'pod', ref: 'x/b', ips: [podIp('x', 'b')] }]);
  t.same(rules[0]!.peers, { ips: [], cidrs: ipBlockCidrs('10.0.0.0/8', ['10.244.0.0/16']), services: [] });
});

t.test('named ports split a rule per resolution', async (t) => {
  const e = modelEngine([], 'node-2');
  e.upsert(pod('y', 'a', { node: 'node-2', ports: [{ name: 'web', containerPort: 8080 }] }));
  e.upsert(pod('y', 'b', { node: 'node-2', ports: [{ name: 'web', containerPort: 9090 }] }));
  e.upsert(pod('y', 'c', { node: 'node-2', ports: [{ name: 'other', containerPort: 1 }] }));
  e.upsert(netpol('y', 'in', { podSelector: {}, ingress: [{ ports: [{ port: 'web' }] }] }));
  const ingress = e.nodeRuleSet().filter((r) => r.ref.name === 'in');
  const got = ingress.map((r) => [r.targets.map((x) => x.ref), r.ports]).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
  t.same(got, [
    [['y/a'], [{ protocol: 'TCP', port: 8080 }]],
    [['y/b'], [{ protocol: 'TCP', port: 9090 }]],
  ], 'one rule per port number; y/c (no such name) gets none');
  t.ok(new Set(ingress.map((r) => r.id)).size === 2, 'distinct ids');
  e.upsert(netpol('z', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ to: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 'web' }] }] }));
  const egress = e.nodeRuleSet().filter((r) => r.ref.name === 'out');
  t.equal(egress.length, 2);
  const byPort = Object.fromEntries(egress.map((r) => [String(r.ports[0]!.port), r.peers === 'any' ? 'any' : r.peers.ips]));
  t.same(byPort, { 8080: [podIp('y', 'a')], 9090: [podIp('y', 'b')] }, 'egress splits by destination Pod');
});

t.test('a Pod relabel touches only the groups whose selectors match it before or after', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p1', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { role: 'client' } } }] }] }));
  e.upsert(netpol('y', 'p2', { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] }));
  const cs = e.upsert(pod('x', 'b', { labels: { pod: 'b', role: 'client' } }));
  t.equal(cs.addressGroups.updated.length, 1, 'x role=client gained x/b');
  t.same(cs.appliedToGroups, { added: [], updated: [], removed: [] });
  t.same(cs.rules, { added: [], updated: [], removed: [] }, 'rules refer to groups by id: unchanged');
  const unrelated = e.upsert(pod('z', 'c', { labels: { pod: 'c', extra: '1' } }));
  const none = { added: [], updated: [], removed: [] };
  t.same(unrelated, { addressGroups: none, appliedToGroups: none, rules: none, isolations: none, serviceEndpoints: [] });
  const nsChange = e.upsert(namespace('z', { other: 'label' }));
  t.same(nsChange.addressGroups.updated, [], 'no namespace selector involved');
});

t.test('a group selecting by namespace label holds the Pods of the namespaces that have it, through Pod, namespace and order changes', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'red' } } }] }] }));
  const members = () => e.addressGroups()[0]!.members.map((m) => m.ref).sort();
  t.same(members(), [], 'no namespace has team=red');
  // A Pod of a namespace without the label: the group does not change.
  const quiet = e.upsert(pod('y', 'd', { labels: { pod: 'd' } }));
  t.same(quiet.addressGroups.updated, [], 'a Pod of a namespace without team=red leaves the group alone');
  e.upsert(namespace('y', { team: 'red' }));
  t.same(members(), ['y/a', 'y/b', 'y/c', 'y/d'], 'the namespace labelled: its Pods, the new one too');
  const more = e.upsert(pod('y', 'e', { labels: { pod: 'e' } }));
  t.equal(more.addressGroups.updated.length, 1, 'a new Pod there joins');
  t.same(members(), ['y/a', 'y/b', 'y/c', 'y/d', 'y/e']);
  e.upsert(pod('y', 'e', { labels: { pod: 'e', tier: 'fe' } }));
  t.same(members(), ['y/a', 'y/b', 'y/c', 'y/d', 'y/e'], 'a relabelled Pod stays');
  e.remove({ apiVersion: 'v1', kind: 'Pod', namespace: 'y', name: 'e' });
  t.same(members(), ['y/a', 'y/b', 'y/c', 'y/d'], 'a deleted Pod leaves');
  // A Pod whose namespace is not known yet, then the namespace with the label.
  e.upsert(pod('w', 'a', { labels: { pod: 'a' }, ip: '10.9.9.9' }));
  t.notOk(members().includes('w/a'), 'no namespace w yet: not a member');
  e.upsert(namespace('w', { team: 'red' }));
  t.ok(members().includes('w/a'), 'namespace w arrives with team=red: its Pod joins');
  e.upsert(namespace('y'));
  t.same(members(), ['w/a'], 'team=red removed from y: its Pods leave');
  // The namespace name label counts as a namespace label.
  e.upsert(netpol('x', 'q', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'z' } } }] }] }));
  const byName = e.addressGroups().find((g) => g.members.some((m) => m.ref.startsWith('z/')));
  t.same(byName?.members.map((m) => m.ref).sort(), ['z/a', 'z/b', 'z/c'], 'selected by kubernetes.io/metadata.name');
  e.upsert(pod('z', 'f', { labels: { pod: 'f' }, ip: '10.9.9.10' }));
  t.ok(e.addressGroups().find((g) => g.id === byName!.id)?.members.some((m) => m.ref === 'z/f'), 'a new Pod of z joins it');
});

t.test('a policy edit changes only its own rules', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p1', { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }, { ports: [{ port: 81 }] }] }));
  e.upsert(netpol('y', 'p2', { podSelector: {}, ingress: [{}] }));
  const cs = e.upsert(netpol('x', 'p1', { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }, { ports: [{ port: 82 }] }] }));
  t.same(cs.rules, { added: [], updated: ['NetworkPolicy/x/p1/ingress-1'], removed: [] });
  t.same(cs.addressGroups, { added: [], updated: [], removed: [] });
});

t.test('isolations are internal objects too, with local targets per node', async (t) => {
  const e = modelEngine([], 'node-1');
  const cs = e.upsert(netpol('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress', 'Egress'] }));
  t.same(cs.isolations.added, ['NetworkPolicy/x/deny/Egress', 'NetworkPolicy/x/deny/Ingress']);
  t.equal(cs.appliedToGroups.added.length, 1, 'the isolation holds its AppliedToGroup');
  t.same(e.nodeIsolations().map((i) => [i.direction, i.targets.map((x) => x.ref)]), [['Egress', ['x/a']], ['Ingress', ['x/a']]]);
  const moved = e.upsert(pod('x', 'a', { node: 'node-2' }));
  t.same(moved.appliedToGroups.updated.length, 1, 'x/a moved to node-2: its AppliedToGroup changed (local subset)');
  t.same(e.nodeIsolations(), [], 'nothing local any more');
  const edit = e.upsert(netpol('x', 'deny', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress'] }));
  t.same(edit.isolations, { added: [], updated: [], removed: ['NetworkPolicy/x/deny/Egress'] });
});

t.test('IPv4 text to number', async (t) => {
  const { ipv4ToNumber } = await import('../../daemon/policy/cidr.js');
  t.equal(ipv4ToNumber('10.0.0.1'), 0x0a000001);
  t.equal(ipv4ToNumber('255.255.255.255'), 0xffffffff);
  t.equal(ipv4ToNumber('0.0.0.0'), 0);
  for (const bad of ['', '1.2.3', '1.2.3.4.5', '256.1.1.1', '01.2.3.4', '1..2.3', 'a.b.c.d', 'fd00::1', '1.2.3.4 ']) t.equal(ipv4ToNumber(bad), -1, bad);
});

t.test('egress to any peer on a named port resolves on every Pod, and follows Pod changes', async (t) => {
  const e = modelEngine([], 'node-1');
  e.upsert(netpol('x', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ ports: [{ port: 'serve-81-udp', protocol: 'UDP' }] }] }));
  const rules = e.nodeRuleSet();
  t.equal(rules.length, 1);
  t.same(rules[0]!.ports, [{ protocol: 'UDP', port: 81 }]);
  const ips = addressArray((rules[0]!.peers as { ips: AddressList }).ips);
  t.equal(ips.length, 9, 'every model Pod serves serve-81-udp');
  const cs = e.upsert(pod('z', 'c', { ports: [{ name: 'other', containerPort: 1 }] }));
  t.equal(cs.addressGroups.updated.length, 1, 'the all-Pods group changed with the Pod');
  t.notOk(addressArray((e.nodeRuleSet()[0]!.peers as { ips: AddressList }).ips).includes(podIp('z', 'c')), 'z/c no longer has the name');
});
