/**
 * crd.antrea.io ClusterNetworkPolicy / NetworkPolicy -> IR: what each feature of Antrea's
 * Network Policy CRDs becomes.
 */
import t from 'tap';
import { acnp, annp, ctxWith, errorsOf, normalize } from './policy-antrea-helpers.js';
import { normalizers } from '../../daemon/policy/antrea/index.js';

const web = { podSelector: { matchLabels: { app: 'web' } } };

t.test('registry: every kind and version the brief names', async (t) => {
  const entries = normalizers.map((n) => `${n.group} ${n.kind} ${n.versions.join(',')}`).sort();
  t.same(entries, [
    'crd.antrea.io ClusterGroup v1alpha2,v1alpha3,v1beta1',
    'crd.antrea.io ClusterNetworkPolicy v1alpha1,v1beta1',
    'crd.antrea.io Group v1alpha3,v1beta1',
    'crd.antrea.io NetworkPolicy v1alpha1,v1beta1',
    'crd.antrea.io Tier v1alpha1,v1beta1',
  ]);
});

t.test('ACNP with stand-alone selectors (seed example 1)', async (t) => {
  const r = normalize(acnp('acnp-with-stand-alone-selectors', {
    priority: 5,
    tier: 'securityops',
    appliedTo: [{ podSelector: { matchLabels: { role: 'db' } } }, { namespaceSelector: { matchLabels: { env: 'prod' } } }],
    ingress: [{
      action: 'Allow',
      from: [
        { podSelector: { matchLabels: { role: 'frontend' } } },
        { podSelector: { matchLabels: { role: 'nondb' } }, namespaceSelector: { matchLabels: { role: 'db' } } },
      ],
      ports: [{ protocol: 'TCP', port: 8080, endPort: 9000 }, { protocol: 'TCP', port: 6379 }],
      name: 'AllowFromFrontend',
      enableLogging: false,
    }],
    egress: [{ action: 'Drop', to: [{ ipBlock: { cidr: '10.0.10.0/24' } }], ports: [{ protocol: 'TCP', port: 5978 }], name: 'DropToThirdParty', enableLogging: true }],
  }));
  t.same(r.errors, []);
  t.equal(r.rules.length, 2);
  const [ing, eg] = r.rules;
  t.same(ing, {
    id: 'AntreaClusterNetworkPolicy//acnp-with-stand-alone-selectors/ingress/0',
    ref: { kind: 'AntreaClusterNetworkPolicy', name: 'acnp-with-stand-alone-selectors', rule: 'AllowFromFrontend', tier: 'securityops' },
    direction: 'Ingress',
    action: 'Allow',
    priority: { stage: 0, tier: 100, policy: 5, rule: 0, tieBreak: 'AntreaClusterNetworkPolicy//acnp-with-stand-alone-selectors' },
    appliedTo: [
      { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { role: 'db' } } },
      { kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { env: 'prod' } } }, pods: {} },
    ],
    peers: [
      { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { role: 'frontend' } } },
      { kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { role: 'db' } } }, pods: { matchLabels: { role: 'nondb' } } },
    ],
    ports: [{ protocol: 'TCP', port: 8080, endPort: 9000 }, { protocol: 'TCP', port: 6379 }],
  });
  t.equal(ing!.logging, undefined, 'enableLogging: false -> no logging');
  t.same(eg!.peers, [{ kind: 'ipBlock', cidr: '10.0.10.0/24', except: [] }]);
  t.same(eg!.logging, { enabled: true });
  t.equal(eg!.priority.rule, 0, 'egress rules are indexed separately from ingress');
  t.equal(eg!.id, 'AntreaClusterNetworkPolicy//acnp-with-stand-alone-selectors/egress/0');
});

t.test('tier: absent -> application; baseline -> stage 2; custom tier through the context', async (t) => {
  const spec = (tier?: string) => ({ priority: 2.5, ...(tier ? { tier } : {}), appliedTo: [web], ingress: [{ action: 'Drop', name: 'r' }] });
  const none = normalize(acnp('a', spec()));
  t.same(none.rules[0]!.priority, { stage: 0, tier: 250, policy: 2.5, rule: 0, tieBreak: 'AntreaClusterNetworkPolicy//a' });
  t.equal(none.rules[0]!.ref.tier, 'application');
  const base = normalize(acnp('b', spec('baseline')));
  t.same([base.rules[0]!.priority.stage, base.rules[0]!.priority.tier, base.rules[0]!.ref.tier], [2, 253, 'baseline']);
  const emergency = normalize(acnp('c', spec('emergency')));
  t.same([emergency.rules[0]!.priority.stage, emergency.rules[0]!.priority.tier], [0, 50]);
  const custom = normalize(acnp('d', spec('mytier')), ctxWith({ mytier: 120 }));
  t.same([custom.rules[0]!.priority.stage, custom.rules[0]!.priority.tier, custom.rules[0]!.ref.tier], [0, 120, 'mytier']);
  const legacy = normalize(acnp('e', spec('SecurityOps')));
  t.same([legacy.rules[0]!.priority.tier, legacy.rules[0]!.ref.tier], [100, 'securityops'], 'Antrea 0.9 static tier names still resolve');
  const unknown = normalize(acnp('f', spec('nope')));
  t.same(unknown.rules, []);
  t.same(errorsOf(unknown), ['spec.tier: tier nope does not exist']);
  t.same(unknown.errors[0], { kind: 'AntreaClusterNetworkPolicy', name: 'f', field: 'spec.tier', message: 'tier nope does not exist' });
});

t.test('rule order, actions and per-direction indexes', async (t) => {
  const r = normalize(acnp('order', {
    priority: 1,
    appliedTo: [web],
    ingress: [
      { action: 'Pass', name: 'i0' },
      { action: 'Reject', name: 'i1' },
      { action: 'Allow', name: 'i2' },
    ],
    egress: [{ action: 'Drop', name: 'e0' }, { action: 'Allow', name: 'e1' }],
  }));
  t.same(r.rules.map((x) => [x.direction, x.priority.rule, x.action, x.ref.rule]), [
    ['Ingress', 0, 'Pass', 'i0'],
    ['Ingress', 1, 'Reject', 'i1'],
    ['Ingress', 2, 'Allow', 'i2'],
    ['Egress', 0, 'Drop', 'e0'],
    ['Egress', 1, 'Allow', 'e1'],
  ]);
  for (const x of r.rules) {
    t.equal(x.peers, undefined, 'empty from/to matches any peer');
    t.same(x.ports, [], 'no ports = any traffic');
  }
});

t.test('generated rule names are the ones Antrea\'s webhook gives', async (t) => {
  // The three values below are the expectations of Antrea's own mutate_test.go.
  const r = normalize(acnp('mutate-rule-name-tier', {
    priority: 1,
    appliedTo: [{ podSelector: { matchLabels: { foo: 'bar' } } }],
    ingress: [
      { action: 'Allow', from: [{ podSelector: { matchLabels: { foo1: 'bar1' } } }] },
      { action: 'Allow', from: [{ podSelector: { matchLabels: { foo2: 'bar2' } } }] },
    ],
    egress: [{ action: 'Allow', to: [{ podSelector: { matchLabels: { foo2: 'bar2' } } }] }],
  }));
  t.same(r.rules.map((x) => x.ref.rule), ['ingress-allow-c4f16d3', 'ingress-allow-be87b58', 'egress-allow-44b2575']);
  // unknown fields do not change the name (the API server prunes them before the webhook runs)
  const again = normalize(acnp('x', {
    priority: 1,
    appliedTo: [web],
    ingress: [{ action: 'Allow', bogus: 1, from: [{ podSelector: { matchLabels: { foo1: 'bar1' } } }] }],
  }));
  t.equal(again.rules[0]!.ref.rule, 'ingress-allow-c4f16d3');
  // a named rule keeps its name; names differ with content and action
  const named = normalize(acnp('y', { priority: 1, appliedTo: [web], ingress: [{ action: 'Drop', name: 'mine' }, { action: 'Drop', from: [{ ipBlock: { cidr: '1.2.3.0/24' } }] }] }));
  t.equal(named.rules[0]!.ref.rule, 'mine');
  t.match(named.rules[1]!.ref.rule, /^ingress-drop-[0-9a-f]{7}$/);
});

t.test('peers: Self, sameLabels, serviceAccount, nodeSelector, group, fqdn, ipBlock except', async (t) => {
  const r = normalize(acnp('peers', {
    priority: 1,
    appliedTo: [{ namespaceSelector: {} }],
    ingress: [
      { action: 'Allow', name: 'self', from: [{ namespaces: { match: 'Self' } }] },
      { action: 'Drop', name: 'self-a', from: [{ namespaces: { match: 'Self' }, podSelector: { matchLabels: { app: 'a' } } }] },
      { action: 'Allow', name: 'same', from: [{ namespaces: { sameLabels: ['team', 'env'] } }] },
      { action: 'Allow', name: 'sa', from: [{ serviceAccount: { name: 'sa-2', namespace: 'ns-2' } }] },
      { action: 'Allow', name: 'nodes', from: [{ nodeSelector: { matchLabels: { 'node-role.kubernetes.io/control-plane': '' } } }] },
      { action: 'Allow', name: 'cg', from: [{ group: 'frontends' }] },
      { action: 'Drop', name: 'except', from: [{ ipBlock: { cidr: '10.0.0.0/16', except: ['10.0.1.0/24'] } }] },
    ],
    egress: [{ action: 'Allow', name: 'fqdn', to: [{ fqdn: '*Foobar.com' }] }],
  }));
  t.same(r.errors, []);
  const peers = Object.fromEntries(r.rules.map((x) => [x.ref.rule, x.peers]));
  t.same(peers.self, [{ kind: 'pods', namespaces: { kind: 'self' }, pods: {} }]);
  t.same(peers['self-a'], [{ kind: 'pods', namespaces: { kind: 'self' }, pods: { matchLabels: { app: 'a' } } }]);
  t.same(peers.same, [{ kind: 'pods', namespaces: { kind: 'sameLabels', keys: ['team', 'env'] }, pods: {} }]);
  t.same(peers.sa, [{ kind: 'pods', namespaces: { kind: 'names', names: ['ns-2'] }, pods: {}, serviceAccount: { namespace: 'ns-2', name: 'sa-2' } }]);
  t.same(peers.nodes, [{ kind: 'nodes', selector: { matchLabels: { 'node-role.kubernetes.io/control-plane': '' } } }]);
  t.same(peers.cg, [{ kind: 'group', name: 'frontends' }]);
  t.same(peers.except, [{ kind: 'ipBlock', cidr: '10.0.0.0/16', except: ['10.0.1.0/24'] }]);
  t.same(peers.fqdn, [{ kind: 'fqdn', pattern: '*foobar.com' }], 'FQDNs are case-insensitive');
});

t.test('appliedTo: group, serviceAccount, nodeSelector; per-rule appliedTo', async (t) => {
  const r = normalize(acnp('at', {
    priority: 8,
    appliedTo: [{ group: 'dbs' }, { serviceAccount: { name: 'sa-1', namespace: 'ns-1' } }, { nodeSelector: { matchLabels: { zone: 'a' } } }],
    ingress: [{ action: 'Allow', name: 'r' }],
  }));
  t.same(r.errors, []);
  t.same(r.rules[0]!.appliedTo, [
    { kind: 'group', name: 'dbs' },
    { kind: 'pods', namespaces: { kind: 'names', names: ['ns-1'] }, pods: {}, serviceAccount: { namespace: 'ns-1', name: 'sa-1' } },
    { kind: 'nodes', selector: { matchLabels: { zone: 'a' } } },
  ]);
  const per = normalize(acnp('acnp-appliedto-per-rule', {
    priority: 1,
    ingress: [
      { action: 'Drop', appliedTo: [{ podSelector: { matchLabels: { app: 'db-restricted-west' } } }], from: [{ podSelector: { matchLabels: { app: 'client-east' } } }] },
      { action: 'Drop', appliedTo: [{ podSelector: { matchLabels: { app: 'db-restricted-east' } } }], from: [{ podSelector: { matchLabels: { app: 'client-west' } } }] },
    ],
  }));
  t.same(per.errors, []);
  t.same(per.rules.map((x) => x.appliedTo), [
    [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'db-restricted-west' } } }],
    [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'db-restricted-east' } } }],
  ]);
});

t.test('toServices -> service peers; ports, source ports, ICMP, IGMP, logLabel', async (t) => {
  const r = normalize(acnp('misc', {
    priority: 5,
    appliedTo: [web],
    egress: [
      { action: 'Drop', name: 'svc', toServices: [{ name: 'svcName', namespace: 'svcNamespace' }], enableLogging: true, logLabel: 'to-svc' },
      { action: 'Reject', name: 'ping', protocols: [{ icmp: { icmpType: 8, icmpCode: 0 } }] },
      { action: 'Allow', name: 'ports', ports: [{ port: 'http' }, { protocol: 'UDP', port: 53 }, { protocol: 'SCTP', sourcePort: 1000, sourceEndPort: 2000 }] },
      { action: 'Drop', name: 'igmp', protocols: [{ igmp: { igmpType: 0x16, groupAddress: '225.1.2.3' } }] },
    ],
    ingress: [{ action: 'Allow', name: 'igmp-query', protocols: [{ igmp: { igmpType: 0x11, groupAddress: '224.0.0.1' } }] }],
  }));
  t.same(r.errors, []);
  const by = Object.fromEntries(r.rules.map((x) => [x.ref.rule, x]));
  t.same(by.svc!.peers, [{ kind: 'service', namespace: 'svcNamespace', name: 'svcName' }]);
  t.same(by.svc!.logging, { enabled: true, label: 'to-svc' });
  t.same(by.ping!.ports, [{ protocol: 'ICMP', icmpType: 8, icmpCode: 0 }]);
  t.same(by.ports!.ports, [
    { protocol: 'TCP', port: 'http' },
    { protocol: 'UDP', port: 53 },
    { protocol: 'SCTP', sourcePort: 1000, sourceEndPort: 2000 },
  ], 'protocol defaults to TCP; named ports stay names');
  t.same(by.igmp!.ports, [{ protocol: 'IGMP', igmpType: 0x16, groupAddress: '225.1.2.3' }]);
  t.same(by['igmp-query']!.ports, [{ protocol: 'IGMP', igmpType: 0x11, groupAddress: '224.0.0.1' }]);
  t.equal(by.ping!.peers, undefined);
});

t.test('multicast egress ipBlock (seed example)', async (t) => {
  const r = normalize(acnp('acnp-with-multicast-traffic-drop', {
    priority: 5,
    tier: 'securityops',
    appliedTo: [{ podSelector: { matchLabels: { app: 'mcjoin6' } } }],
    egress: [{ action: 'Drop', to: [{ ipBlock: { cidr: '225.1.2.3/32' } }], name: 'dropMcastUDPTraffic' }],
  }));
  t.same(r.errors, []);
  t.same(r.rules[0]!.peers, [{ kind: 'ipBlock', cidr: '225.1.2.3/32', except: [] }]);
});

t.test('ANNP scoping: own namespace, Groups in the namespace, toServices namespace default', async (t) => {
  const r = normalize(annp('default', 'test-anp', {
    priority: 5,
    tier: 'securityops',
    appliedTo: [{ podSelector: { matchLabels: { role: 'db' } } }, { group: 'dbs' }],
    ingress: [{
      action: 'Allow',
      name: 'AllowFromFrontend',
      from: [
        { podSelector: { matchLabels: { role: 'frontend' } } },
        { podSelector: { matchLabels: { role: 'nondb' } }, namespaceSelector: { matchLabels: { role: 'db' } } },
        { namespaceSelector: {} },
        { group: 'frontends' },
      ],
    }],
    egress: [{ action: 'Drop', name: 'svc', toServices: [{ name: 'api' }, { name: 'dns', namespace: 'kube-system' }] }],
  }));
  t.same(r.errors, []);
  const [ing, eg] = r.rules;
  t.same(ing!.ref, { kind: 'AntreaNetworkPolicy', namespace: 'default', name: 'test-anp', rule: 'AllowFromFrontend', tier: 'securityops' });
  t.equal(ing!.priority.tieBreak, 'AntreaNetworkPolicy/default/test-anp');
  t.equal(ing!.id, 'AntreaNetworkPolicy/default/test-anp/ingress/0');
  t.same(ing!.appliedTo, [
    { kind: 'pods', namespaces: { kind: 'names', names: ['default'] }, pods: { matchLabels: { role: 'db' } } },
    { kind: 'group', namespace: 'default', name: 'dbs' },
  ]);
  t.same(ing!.peers, [
    { kind: 'pods', namespaces: { kind: 'names', names: ['default'] }, pods: { matchLabels: { role: 'frontend' } } },
    { kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { role: 'db' } } }, pods: { matchLabels: { role: 'nondb' } } },
    { kind: 'pods', namespaces: { kind: 'selector', selector: {} }, pods: {} },
    { kind: 'group', namespace: 'default', name: 'frontends' },
  ]);
  t.same(eg!.peers, [
    { kind: 'service', namespace: 'default', name: 'api' },
    { kind: 'service', namespace: 'kube-system', name: 'dns' },
  ]);
  const noNs = normalize({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy', metadata: { name: 'n' }, spec: { priority: 1, appliedTo: [web], ingress: [{ action: 'Drop', name: 'r' }] } });
  t.equal(noNs.rules[0]!.ref.namespace, 'default', 'a missing namespace defaults to "default" as with kubectl');
});

t.test('v1alpha1 objects normalize like v1beta1', async (t) => {
  const spec = { priority: 3, appliedTo: [web], ingress: [{ action: 'Drop', from: [{ podSelector: {} }] }] };
  t.same(normalize(acnp('p', spec, 'v1alpha1')), normalize(acnp('p', spec)));
  t.same(normalize(annp('ns', 'p', spec, 'v1alpha1')), normalize(annp('ns', 'p', spec)));
});

t.test('externalEntitySelector selects nothing in a sluice cluster', async (t) => {
  const r = normalize(acnp('ee', {
    priority: 1,
    appliedTo: [web, { externalEntitySelector: { matchLabels: { x: 'y' } } }],
    ingress: [{ action: 'Drop', name: 'r', from: [{ externalEntitySelector: {} }] }],
  }));
  t.same(r.errors, []);
  t.equal(r.rules[0]!.appliedTo.length, 1, 'the ExternalEntity target is dropped');
  t.same(r.rules[0]!.peers, [], 'a rule whose only peer selects ExternalEntities matches no peer');
});

t.test('identical inputs give identical output (ids, order, names)', async (t) => {
  const spec = { priority: 1, appliedTo: [web], ingress: [{ action: 'Allow', from: [{ podSelector: { matchLabels: { b: '1', a: '2' } } }] }] };
  t.same(normalize(acnp('d', spec)), normalize(acnp('d', JSON.parse(JSON.stringify(spec)))));
  const reordered = { priority: 1, appliedTo: [web], ingress: [{ from: [{ podSelector: { matchLabels: { a: '2', b: '1' } } }], action: 'Allow' }] };
  t.equal(normalize(acnp('d', reordered)).rules[0]!.ref.rule, normalize(acnp('d', spec)).rules[0]!.ref.rule, 'key order does not change the generated name');
});

t.test('rule serialization follows the Go struct field order of the v1beta1 Rule', async (t) => {
  const { goRuleJson } = await import('../../daemon/policy/antrea/rulename.js');
  // Keys deliberately in a different order than Go's; Go order: action, ports, protocols,
  // l7Protocols, from, to, toServices, name, enableLogging, logLabel, appliedTo.
  const rule = {
    appliedTo: [{ nodeSelector: {}, podSelector: { matchExpressions: [{ operator: 'In', key: 'k', values: ['v'] }], matchLabels: { b: '2', a: '1' } } }],
    logLabel: 'l',
    to: [{ scope: 'Cluster', ipBlock: { except: ['10.0.0.0/24'], cidr: '10.0.0.0/16' } }, { namespaces: { match: 'Self' } }, { fqdn: 'a<b>&c' }],
    ports: [{ sourceEndPort: 9, sourcePort: 8, endPort: 81, port: 80, protocol: 'UDP' }, { port: 'http' }],
    protocols: [{ icmp: { icmpCode: 0, icmpType: 8 } }, { igmp: {} }],
    toServices: [{ namespace: 'n', name: 's' }],
    name: 'ignored',
    action: 'Drop',
    from: [],
  };
  t.equal(goRuleJson(rule),
    '{"action":"Drop","ports":[{"protocol":"UDP","port":80,"endPort":81,"sourcePort":8,"sourceEndPort":9},{"port":"http"}],' +
    '"protocols":[{"icmp":{"icmpType":8,"icmpCode":0}},{"igmp":{}}],' +
    '"to":[{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.0.0.0/24"]},"scope":"Cluster"},{"namespaces":{"match":"Self"}},{"fqdn":"a\\u003cb\\u003e\\u0026c"}],' +
    '"toServices":[{"name":"s","namespace":"n"}],"enableLogging":false,"logLabel":"l",' +
    '"appliedTo":[{"podSelector":{"matchLabels":{"a":"1","b":"2"},"matchExpressions":[{"key":"k","operator":"In","values":["v"]}]},"nodeSelector":{}}]}');
});
