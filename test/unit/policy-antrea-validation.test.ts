/**
 * What the Antrea admission webhook and the CRD schemas reject, for ClusterNetworkPolicy and
 * NetworkPolicy: each case yields no rules and an error naming the object and the field.
 */
import t, { type Test } from 'tap';
import { acnp, annp, errorsOf, normalize } from './policy-antrea-helpers.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const web = { podSelector: { matchLabels: { app: 'web' } } };
const base = (extra: any) => ({ priority: 1, appliedTo: [web], ...extra });

/** Asserts obj is invalid: no rules, and one error whose field and message match. */
function rejects(t: Test, obj: KubeObject, field: string, message: RegExp): void {
  const r = normalize(obj);
  t.same(r.rules, [], `${obj.metadata.name}: no rules`);
  const hit = r.errors.find((e) => e.field === field && message.test(e.message));
  t.ok(hit, `${obj.metadata.name}: error at ${field} matching ${message} (got ${JSON.stringify(errorsOf(r))})`);
  for (const e of r.errors) {
    t.equal(e.name, obj.metadata.name, 'errors name the object');
    t.equal(e.kind, obj.kind === 'ClusterNetworkPolicy' ? 'AntreaClusterNetworkPolicy' : 'AntreaNetworkPolicy');
  }
}

t.test('spec and priority', async (t) => {
  rejects(t, acnp('no-spec', undefined), 'spec', /required/);
  rejects(t, acnp('no-priority', { appliedTo: [web], ingress: [{ action: 'Drop' }] }), 'spec.priority', /required/);
  rejects(t, acnp('priority-0', base({ priority: 0.5, ingress: [{ action: 'Drop' }] })), 'spec.priority', /between 1.0 and 10000.0/);
  rejects(t, acnp('priority-big', base({ priority: 10000.5, ingress: [{ action: 'Drop' }] })), 'spec.priority', /between/);
  rejects(t, acnp('priority-str', base({ priority: '5', ingress: [{ action: 'Drop' }] })), 'spec.priority', /must be a number/);
  t.same(normalize(acnp('edges', base({ priority: 10000, ingress: [{ action: 'Drop' }] }))).errors, [], '10000 is allowed');
  t.same(normalize(acnp('edges', base({ priority: 1, ingress: [{ action: 'Drop' }] }))).errors, [], '1 is allowed');
});

t.test('tiers and actions', async (t) => {
  rejects(t, acnp('unknown-tier', base({ tier: 'gold', ingress: [{ action: 'Drop' }] })), 'spec.tier', /tier gold does not exist/);
  rejects(t, acnp('pass-baseline', base({ tier: 'baseline', egress: [{ action: 'Drop' }, { action: 'Pass' }] })), 'spec.egress[1].action', /Pass.*Baseline/);
  rejects(t, annp('ns', 'pass-baseline-legacy', base({ tier: 'Baseline', ingress: [{ action: 'Pass' }] })), 'spec.ingress[0].action', /Pass.*Baseline/);
  rejects(t, acnp('no-action', base({ ingress: [{ from: [web] }] })), 'spec.ingress[0].action', /required/);
  rejects(t, acnp('bad-action', base({ ingress: [{ action: 'Deny' }] })), 'spec.ingress[0].action', /one of Allow, Drop, Reject, Pass/);
});

t.test('rule names are unique, generated names included', async (t) => {
  rejects(t, acnp('dup', base({ ingress: [{ action: 'Drop', name: 'x' }], egress: [{ action: 'Drop', name: 'x' }] })), 'spec.egress[0].name', /unique.*spec.ingress\[0\]/);
  rejects(t, acnp('dup-generated', base({ ingress: [{ action: 'Drop', from: [web] }, { action: 'Drop', from: [web] }] })), 'spec.ingress[1].name', /unique/);
  const generated = normalize(acnp('gen', base({ ingress: [{ action: 'Drop', from: [web] }] }))).rules[0]!.ref.rule;
  rejects(t, acnp('dup-with-generated', base({ ingress: [{ action: 'Drop', from: [web] }, { action: 'Allow', name: generated }] })), 'spec.ingress[1].name', /unique/);
  t.same(normalize(acnp('same-rule-both-directions', base({ ingress: [{ action: 'Drop' }], egress: [{ action: 'Drop' }] }))).errors, [], 'the prefix differs per direction');
});

t.test('appliedTo placement', async (t) => {
  rejects(t, acnp('both', base({ ingress: [{ action: 'Drop', appliedTo: [web] }] })), 'spec.appliedTo', /both spec and rules/);
  rejects(t, acnp('neither', { priority: 1, ingress: [{ action: 'Drop' }] }), 'spec.appliedTo', /either spec or rules/);
  rejects(t, acnp('some-rules', { priority: 1, ingress: [{ action: 'Drop', appliedTo: [web] }], egress: [{ action: 'Drop' }] }), 'spec.egress[0].appliedTo', /all rules or in none/);
  rejects(t, acnp('group-plus', { priority: 1, appliedTo: [{ group: 'g', podSelector: {} }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].group', /cannot be set with other/);
  rejects(t, acnp('sa-plus', { priority: 1, appliedTo: [{ serviceAccount: { name: 'a', namespace: 'b' }, namespaceSelector: {} }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].serviceAccount', /cannot be set with other/);
  rejects(t, acnp('node-plus', { priority: 1, appliedTo: [{ nodeSelector: {}, podSelector: {} }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].nodeSelector', /cannot be set with other/);
  rejects(t, acnp('node-rule', { priority: 1, ingress: [{ action: 'Drop', appliedTo: [{ nodeSelector: {} }] }] }), 'spec.ingress[0].appliedTo[0].nodeSelector', /only allowed in the policy-level/);
  rejects(t, acnp('ipblock-entry', { priority: 1, appliedTo: [{ ipBlock: { cidr: '10.0.0.0/8' } }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].ipBlock', /cannot be set in appliedTo/);
  rejects(t, acnp('sa-incomplete', { priority: 1, appliedTo: [{ serviceAccount: { name: 'a' } }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].serviceAccount.namespace', /required/);
});

t.test('appliedTo a NodePort Service', async (t) => {
  const svc = { service: { name: 'svc-1', namespace: 'ns-1' } };
  rejects(t, acnp('svc-egress', { priority: 1, appliedTo: [svc], egress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].service', /egress rules cannot be applied to Services/);
  rejects(t, acnp('svc-mixed', { priority: 1, appliedTo: [svc, web], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo', /Services and other peers/);
  rejects(t, acnp('svc-peer', { priority: 1, appliedTo: [svc], ingress: [{ action: 'Drop', from: [web] }] }), 'spec.ingress[0].from', /only use ipBlock/);
  // valid for Antrea, but needs proxyAll without kube-proxy: sluice says so instead of ignoring it
  rejects(t, acnp('svc-rule-level', { priority: 1, ingress: [{ action: 'Drop', appliedTo: [svc], from: [{ ipBlock: { cidr: '1.1.1.0/24' } }] }] }), 'spec.ingress[0].appliedTo', /NodePort Service/);
  rejects(t, acnp('svc-egress-rule', { priority: 1, egress: [{ action: 'Drop', appliedTo: [svc] }] }), 'spec.egress[0].appliedTo[0].service', /egress rules cannot be applied to Services/);
  rejects(t, acnp('acnp-deny-external-client-nodeport-svc-access', { priority: 5, tier: 'securityops', appliedTo: [svc], ingress: [{ action: 'Drop', from: [{ ipBlock: { cidr: '1.1.1.0/24' } }] }] }), 'spec.appliedTo', /NodePort Service/);
});

t.test('peers', async (t) => {
  const ing = (from: any[]) => base({ ingress: [{ action: 'Drop', from }] });
  rejects(t, acnp('ns-and-nssel', ing([{ namespaces: { match: 'Self' }, namespaceSelector: {} }])), 'spec.ingress[0].from[0].namespaces', /cannot be set at the same time/);
  rejects(t, acnp('ns-two', ing([{ namespaces: { match: 'Self', sameLabels: ['a'] } }])), 'spec.ingress[0].from[0].namespaces', /only one matching criterion/);
  rejects(t, acnp('ns-match', ing([{ namespaces: { match: 'Other' } }])), 'spec.ingress[0].from[0].namespaces.match', /must be Self/);
  rejects(t, acnp('samelabels-key', ing([{ namespaces: { sameLabels: ['bad key!'] } }])), 'spec.ingress[0].from[0].namespaces.sameLabels[0]', /invalid label key/);
  rejects(t, acnp('group-plus', ing([{ group: 'g', podSelector: {} }])), 'spec.ingress[0].from[0].group', /cannot be set with other/);
  rejects(t, acnp('sa-plus', ing([{ serviceAccount: { name: 'a', namespace: 'b' }, podSelector: {} }])), 'spec.ingress[0].from[0].serviceAccount', /cannot be set with other/);
  rejects(t, acnp('node-plus', ing([{ nodeSelector: {}, namespaceSelector: {} }])), 'spec.ingress[0].from[0].nodeSelector', /cannot be set with other/);
  rejects(t, acnp('ipblock-plus', ing([{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }])), 'spec.ingress[0].from[0].ipBlock', /cannot be set with other/);
  rejects(t, acnp('clusterset', ing([{ podSelector: {}, scope: 'ClusterSet' }])), 'spec.ingress[0].from[0].scope', /Multi-cluster/);
  rejects(t, acnp('fqdn-ingress', ing([{ fqdn: 'example.com' }])), 'spec.ingress[0].from[0].fqdn', /egress/);
  rejects(t, acnp('fqdn-chars', base({ egress: [{ action: 'Drop', to: [{ fqdn: 'exa_mple.com' }] }] })), 'spec.egress[0].to[0].fqdn', /invalid characters/);
  rejects(t, acnp('label-key', ing([{ podSelector: { matchLabels: { 'bad key': 'x' } } }])), 'spec.ingress[0].from[0].podSelector.matchLabels', /invalid label/);
  rejects(t, acnp('label-value', ing([{ namespaceSelector: { matchLabels: { k: 'bad value' } } }])), 'spec.ingress[0].from[0].namespaceSelector.matchLabels', /invalid label/);
  rejects(t, acnp('selector-op', ing([{ podSelector: { matchExpressions: [{ key: 'a', operator: 'In' }] } }])), 'spec.ingress[0].from[0].podSelector.matchExpressions[0].values', /must be specified when `operator` is 'In' or 'NotIn'/);
  rejects(t, acnp('wrong-side', base({ ingress: [{ action: 'Drop', to: [web] }] })), 'spec.ingress[0].to', /from/);
});

t.test('ipBlock', async (t) => {
  const ing = (ipBlock: any) => base({ ingress: [{ action: 'Drop', from: [{ ipBlock }] }] });
  rejects(t, acnp('no-cidr', ing({})), 'spec.ingress[0].from[0].ipBlock.cidr', /required/);
  rejects(t, acnp('bad-cidr', ing({ cidr: '10.0.0.0/33' })), 'spec.ingress[0].from[0].ipBlock.cidr', /invalid CIDR/);
  rejects(t, acnp('bad-cidr2', ing({ cidr: '10.0.0.1' })), 'spec.ingress[0].from[0].ipBlock.cidr', /invalid CIDR/);
  rejects(t, acnp('bad-except', ing({ cidr: '10.0.0.0/8', except: ['x'] })), 'spec.ingress[0].from[0].ipBlock.except[0]', /invalid except/);
  rejects(t, acnp('except-outside', ing({ cidr: '10.0.0.0/8', except: ['11.0.0.0/16'] })), 'spec.ingress[0].from[0].ipBlock.except[0]', /strict subset/);
  rejects(t, acnp('except-equal', ing({ cidr: '10.0.0.0/8', except: ['10.0.0.0/8'] })), 'spec.ingress[0].from[0].ipBlock.except[0]', /strict subset/);
  t.same(normalize(acnp('v6', ing({ cidr: 'fd00::/64', except: ['fd00::/96'] }))).errors, [], 'IPv6 blocks are valid');
});

t.test('ports', async (t) => {
  const ports = (p: any[]) => base({ ingress: [{ action: 'Allow', ports: p }] });
  rejects(t, acnp('endport-no-port', ports([{ endPort: 90 }])), 'spec.ingress[0].ports[0].endPort', /`port` must be specified/);
  rejects(t, acnp('endport-named', ports([{ port: 'http', endPort: 90 }])), 'spec.ingress[0].ports[0].endPort', /string/);
  rejects(t, acnp('endport-below', ports([{ port: 100, endPort: 90 }])), 'spec.ingress[0].ports[0].endPort', /greater than or equal/);
  rejects(t, acnp('srcend-no-src', ports([{ sourceEndPort: 90 }])), 'spec.ingress[0].ports[0].sourceEndPort', /`sourcePort` must be specified/);
  rejects(t, acnp('srcend-below', ports([{ sourcePort: 100, sourceEndPort: 90 }])), 'spec.ingress[0].ports[0].sourceEndPort', /greater than or equal/);
  rejects(t, acnp('port-range', ports([{ port: 70000 }])), 'spec.ingress[0].ports[0].port', /between 1 and 65535/);
  rejects(t, acnp('port-zero', ports([{ port: 0 }])), 'spec.ingress[0].ports[0].port', /between 1 and 65535/);
  rejects(t, acnp('port-float', ports([{ port: 80.5 }])), 'spec.ingress[0].ports[0].port', /integer/);
  rejects(t, acnp('port-name', ports([{ port: '80' }])), 'spec.ingress[0].ports[0].port', /port name/);
  rejects(t, acnp('protocol', ports([{ protocol: 'ICMP', port: 80 }])), 'spec.ingress[0].ports[0].protocol', /TCP, UDP or SCTP/);
  t.same(normalize(acnp('endport-equal', ports([{ port: 90, endPort: 90 }]))).errors, [], 'endPort == port is a range of one');
});

t.test('protocols: ICMP and IGMP', async (t) => {
  const proto = (dir: 'ingress' | 'egress', protocols: any[], extra: any = {}, action = 'Drop') => base({ [dir]: [{ action, protocols, ...extra }] });
  rejects(t, acnp('both', proto('egress', [{ icmp: {}, igmp: {} }])), 'spec.egress[0].protocols[0]', /exactly one/);
  rejects(t, acnp('neither', proto('egress', [{}])), 'spec.egress[0].protocols[0]', /exactly one/);
  rejects(t, acnp('icmp-type', proto('egress', [{ icmp: { icmpType: 256 } }])), 'spec.egress[0].protocols[0].icmp.icmpType', /between 0 and 255/);
  rejects(t, acnp('icmp-code', proto('egress', [{ icmp: { icmpCode: -1 } }])), 'spec.egress[0].protocols[0].icmp.icmpCode', /between 0 and 255/);
  rejects(t, acnp('igmp-ingress-type', proto('ingress', [{ igmp: { igmpType: 0x16 } }])), 'spec.ingress[0].protocols[0].igmp.igmpType', /query/);
  rejects(t, acnp('igmp-egress-type', proto('egress', [{ igmp: { igmpType: 0x11 } }])), 'spec.egress[0].protocols[0].igmp.igmpType', /reports/);
  rejects(t, acnp('igmp-unicast', proto('egress', [{ igmp: { groupAddress: '10.1.1.1' } }])), 'spec.egress[0].protocols[0].igmp.groupAddress', /not a multicast/);
  rejects(t, acnp('igmp-reject', proto('egress', [{ igmp: {} }], {}, 'Reject')), 'spec.egress[0].action', /IGMP does not support Pass or Reject/);
  rejects(t, acnp('igmp-with-to', proto('egress', [{ igmp: {} }], { to: [web] })), 'spec.egress[0].protocols', /IGMP can not be used with/);
  rejects(t, acnp('igmp-with-icmp', proto('egress', [{ igmp: {} }, { icmp: {} }])), 'spec.egress[0].protocols', /IGMP can not be used with/);
  rejects(t, acnp('igmp-with-ports', proto('egress', [{ igmp: {} }], { ports: [{ port: 80 }] })), 'spec.egress[0].protocols', /IGMP can not be used with/);
});

t.test('multicast egress peers', async (t) => {
  const eg = (to: any[], action = 'Drop') => base({ egress: [{ action, to }] });
  rejects(t, acnp('mc-pass', eg([{ ipBlock: { cidr: '225.1.2.3/32' } }], 'Pass')), 'spec.egress[0].action', /multicast does not support/);
  rejects(t, acnp('mc-uni', eg([{ ipBlock: { cidr: '225.1.2.3/32' } }, { ipBlock: { cidr: '10.0.0.0/8' } }])), 'spec.egress[0].to', /multicast .* unicast/);
  rejects(t, acnp('mc-sel', eg([{ ipBlock: { cidr: '225.1.2.3/32' } }, web])), 'spec.egress[0].to', /multicast .* selectors/);
});

t.test('toServices', async (t) => {
  rejects(t, acnp('svc-with-to', base({ egress: [{ action: 'Drop', to: [web], toServices: [{ name: 'a', namespace: 'b' }] }] })), 'spec.egress[0].toServices', /cannot be used with `to`, `ports` or `protocols`/);
  rejects(t, acnp('svc-with-ports', base({ egress: [{ action: 'Drop', ports: [{ port: 80 }], toServices: [{ name: 'a', namespace: 'b' }] }] })), 'spec.egress[0].toServices', /cannot be used with/);
  rejects(t, acnp('svc-ingress', base({ ingress: [{ action: 'Drop', toServices: [{ name: 'a', namespace: 'b' }] }] })), 'spec.ingress[0].toServices', /only be used in egress/);
  rejects(t, acnp('svc-no-ns', base({ egress: [{ action: 'Drop', toServices: [{ name: 'a' }] }] })), 'spec.egress[0].toServices[0].namespace', /required/);
  rejects(t, acnp('svc-no-name', base({ egress: [{ action: 'Drop', toServices: [{ namespace: 'a' }] }] })), 'spec.egress[0].toServices[0].name', /required/);
});

t.test('other rule fields', async (t) => {
  rejects(t, acnp('l7', base({ ingress: [{ action: 'Allow', l7Protocols: [{ http: { path: '/' } }] }] })), 'spec.ingress[0].l7Protocols', /L7NetworkPolicy/);
  rejects(t, acnp('log-label', base({ ingress: [{ action: 'Allow', enableLogging: true, logLabel: 'has space' }] })), 'spec.ingress[0].logLabel', /at most 63/);
  rejects(t, acnp('log-label-long', base({ ingress: [{ action: 'Allow', enableLogging: true, logLabel: 'a'.repeat(64) }] })), 'spec.ingress[0].logLabel', /at most 63/);
  rejects(t, acnp('logging-type', base({ ingress: [{ action: 'Allow', enableLogging: 'yes' }] })), 'spec.ingress[0].enableLogging', /true or false/);
  rejects(t, acnp('rules-type', base({ ingress: { action: 'Allow' } })), 'spec.ingress', /must be a list/);
  rejects(t, acnp('rule-type', base({ ingress: ['Allow'] })), 'spec.ingress[0]', /must be an object/);
});

t.test('Antrea NetworkPolicy restrictions', async (t) => {
  rejects(t, annp('ns', 'nssel-appliedto', { priority: 1, appliedTo: [{ namespaceSelector: {} }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].namespaceSelector', /not allowed in the appliedTo of an Antrea NetworkPolicy/);
  rejects(t, annp('ns', 'nssel-rule-appliedto', { priority: 1, ingress: [{ action: 'Drop', appliedTo: [{ podSelector: {}, namespaceSelector: {} }] }] }), 'spec.ingress[0].appliedTo[0].namespaceSelector', /not allowed/);
  rejects(t, annp('ns', 'namespaces-peer', base({ ingress: [{ action: 'Drop', from: [{ namespaces: { match: 'Self' } }] }] })), 'spec.ingress[0].from[0].namespaces', /not supported in an Antrea NetworkPolicy/);
  rejects(t, annp('ns', 'sa-peer', base({ egress: [{ action: 'Drop', to: [{ serviceAccount: { name: 'a', namespace: 'ns' } }] }] })), 'spec.egress[0].to[0].serviceAccount', /not supported in an Antrea NetworkPolicy/);
  rejects(t, annp('ns', 'sa-appliedto', { priority: 1, appliedTo: [{ serviceAccount: { name: 'a', namespace: 'ns' } }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].serviceAccount', /not supported/);
  rejects(t, annp('ns', 'node-appliedto', { priority: 1, appliedTo: [{ nodeSelector: {} }], ingress: [{ action: 'Drop' }] }), 'spec.appliedTo[0].nodeSelector', /not supported/);
});

t.test('an invalid object reports every problem, not only the first', async (t) => {
  const r = normalize(acnp('many', { priority: 0, tier: 'nope', appliedTo: [web], ingress: [{ action: 'Nope' }, { action: 'Allow', ports: [{ endPort: 3 }] }] }));
  t.same(r.rules, []);
  t.same(r.errors.map((e) => e.field).sort(), ['spec.ingress[0].action', 'spec.ingress[1].ports[0].endPort', 'spec.priority', 'spec.tier']);
});

t.test('unknown fields are ignored, as the API server prunes them', async (t) => {
  const r = normalize(acnp('extra', { priority: 1, appliedTo: [{ ...web, colour: 'blue' }], futureField: true, ingress: [{ action: 'Drop', from: [{ ...web, extra: 1 }], whatever: {} }] }));
  t.same(r.errors, []);
  t.equal(r.rules.length, 1);
});

t.test('an appliedTo entry with no field is valid: every Pod of the policy\'s Namespace (every Namespace for a cluster policy)', async (t) => {
  const ns = normalize(annp('shop', 'empty-entry', { priority: 1, appliedTo: [{}], ingress: [{ action: 'Drop' }] }));
  t.same(ns.errors, []);
  t.same(ns.rules[0]?.appliedTo, [{ kind: 'pods', namespaces: { kind: 'names', names: ['shop'] }, pods: {} }]);
  const cluster = normalize(acnp('empty-entry', { priority: 1, appliedTo: [{}], ingress: [{ action: 'Drop' }] }));
  t.same(cluster.errors, []);
  t.same(cluster.rules[0]?.appliedTo, [{ kind: 'pods', namespaces: { kind: 'all' }, pods: {} }]);
  const perRule = normalize(annp('shop', 'empty-rule-entry', { priority: 1, egress: [{ action: 'Drop', appliedTo: [{}] }] }));
  t.same(perRule.errors, []);
  t.same(perRule.rules[0]?.appliedTo, [{ kind: 'pods', namespaces: { kind: 'names', names: ['shop'] }, pods: {} }]);
});

t.test('a peer with no field is valid: every Pod of the policy\'s Namespace (every Namespace for a cluster policy)', async (t) => {
  const ns = normalize(annp('shop', 'empty-peer', { priority: 1, appliedTo: [{ podSelector: {} }], ingress: [{ action: 'Drop', from: [{}] }] }));
  t.same(ns.errors, []);
  t.same(ns.rules[0]?.peers, [{ kind: 'pods', namespaces: { kind: 'names', names: ['shop'] }, pods: {} }]);
  const cluster = normalize(acnp('empty-peer', { priority: 1, appliedTo: [{ podSelector: {} }], egress: [{ action: 'Drop', to: [{}] }] }));
  t.same(cluster.errors, []);
  t.same(cluster.rules[0]?.peers, [{ kind: 'pods', namespaces: { kind: 'all' }, pods: {} }]);
});

t.test('a peer namespaces field with no criterion is ignored, as Antrea\'s controller does', async (t) => {
  const only = normalize(acnp('ns-empty-only', { priority: 1, appliedTo: [web], ingress: [{ action: 'Drop', name: 'r', from: [{ namespaces: {} }] }] }));
  t.same(only.errors, []);
  t.equal(only.rules[0]?.peers, undefined, 'its only peer ignored: the rule matches every address');
  const mixed = normalize(acnp('ns-empty-mixed', { priority: 1, appliedTo: [web], ingress: [{ action: 'Drop', name: 'r', from: [{ namespaces: {}, podSelector: { matchLabels: { a: 'b' } } }, { ipBlock: { cidr: '10.0.0.0/8' } }] }] }));
  t.same(mixed.errors, []);
  t.same(mixed.rules[0]?.peers, [{ kind: 'ipBlock', cidr: '10.0.0.0/8', except: [] }], 'the ignored peer (with its podSelector) contributes nothing');
});

t.test('involvedObject: an invalid-object report back to the API object (apiVersion, kind, uid) for its Event', async (t) => {
  const { PolicyEngine } = await import('../../daemon/policy/engine.js');
  const engine = new PolicyEngine({ nodeName: 'n1' });
  const bad = { ...acnp('bad-tier', base({ tier: 'no-such-tier', ingress: [{ action: 'Drop' }] })), apiVersion: 'crd.antrea.io/v1beta1' };
  bad.metadata = { ...bad.metadata, uid: 'uid-acnp-1' };
  const badNp = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'np', namespace: 'x', uid: 'uid-np-1' }, spec: { podSelector: { matchLabels: { a: 5 } } } } as unknown as KubeObject;
  engine.upsert(bad);
  engine.upsert(badNp);
  const errors = engine.errors();
  t.same(errors.map((e) => `${e.kind} ${e.namespace ?? ''}/${e.name}`).sort(), ['AntreaClusterNetworkPolicy /bad-tier', 'NetworkPolicy x/np'], 'both reported invalid');
  t.same(errors.map((e) => engine.involvedObject(e)).sort((a, b) => String(a?.name).localeCompare(String(b?.name))), [
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'bad-tier', uid: 'uid-acnp-1' },
    { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'np', uid: 'uid-np-1' },
  ], "each as the API names it: crd.antrea.io's ClusterNetworkPolicy, not the engine's AntreaClusterNetworkPolicy");
  t.equal(engine.involvedObject({ kind: 'NetworkPolicy', namespace: 'y', name: 'np' }), undefined, 'another namespace: not that object');
  engine.remove({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'np' });
  t.equal(engine.involvedObject({ kind: 'NetworkPolicy', namespace: 'x', name: 'np' }), undefined, 'gone once deleted');
});
