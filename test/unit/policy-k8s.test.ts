/**
 * Kubernetes NetworkPolicy semantics, as truth tables over the x/y/z × a/b/c model
 * (rows = from, columns = to, in the order x/a x/b x/c y/a … z/c; "." allowed, "X" dropped).
 * Expectations are written from the upstream API documentation.
 */
import t from 'tap';
import { ALL, cells, grid, gridWith, inNs, modelEngine, namespace, netpol, pod, podIp } from './policy-core-helpers.js';

const others = (...except: string[]) => ALL.filter((p) => !except.includes(p));

t.test('no policy: everything allowed', async (t) => {
  const e = modelEngine();
  t.equal(grid(e, 80), gridWith({}));
  t.equal(grid(e, 81, 'SCTP'), gridWith({}));
});

t.test('podSelector peer: Pods of the policy namespace only', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'b-to-a', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] }));
  t.equal(grid(e, 80), gridWith(cells(others('x/a', 'x/b'), ['x/a'], 'X')));
  t.equal(grid(e, 81, 'UDP'), gridWith(cells(others('x/a', 'x/b'), ['x/a'], 'X')), 'no ports = every port and protocol');
});

t.test('namespaceSelector peer: every Pod of the selected namespaces', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'from-y', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  t.equal(grid(e, 80), gridWith(cells([...inNs('x'), ...inNs('z')].filter((p) => p !== 'x/a'), ['x/a'], 'X')));
});

t.test('podSelector and namespaceSelector in one peer: AND', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'yc', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } }, podSelector: { matchLabels: { pod: 'c' } } }] }] }));
  t.equal(grid(e, 80), gridWith(cells(others('x/a', 'y/c'), ['x/a'], 'X')));
});

t.test('two peers: OR', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'y-or-c', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }, { podSelector: { matchLabels: { pod: 'c' } } }] }] }));
  t.equal(grid(e, 80), gridWith(cells(['x/b', ...inNs('z')], ['x/a'], 'X')));
});

t.test('empty namespaceSelector = all namespaces; empty podSelector peer = own namespace', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'all-ns', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: {} }] }] }));
  t.equal(grid(e, 80), gridWith({}));
  e.upsert(netpol('x', 'all-ns', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: {} }] }] }));
  t.equal(grid(e, 80), gridWith(cells([...inNs('y'), ...inNs('z')], ['x/a'], 'X')));
});

t.test('empty rule / empty from allow all; no rules deny all', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [{}] }));
  t.equal(grid(e, 80), gridWith({}), 'ingress: [{}]');
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [{ from: [] }] }));
  t.equal(grid(e, 80), gridWith({}), 'from: []');
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [{ from: [], ports: [] }] }));
  t.equal(grid(e, 81, 'SCTP'), gridWith({}), 'ports: []');
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [] }));
  const denyX = gridWith(Object.fromEntries(Object.entries(cells(ALL, inNs('x'), 'X')).filter(([k]) => k.split('>')[0] !== k.split('>')[1])));
  t.equal(grid(e, 80), denyX, 'ingress: []');
  e.upsert(netpol('x', 'p', { podSelector: {} }));
  t.equal(grid(e, 80), denyX, 'no ingress field, no policyTypes');
});

t.test('policyTypes defaults and explicit values', async (t) => {
  const e = modelEngine();
  // egress rules present, no policyTypes: Ingress and Egress both apply
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, egress: [{ to: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] }));
  t.equal(grid(e, 80), gridWith({ ...cells(others('x/a'), ['x/a'], 'X'), ...cells(['x/a'], ['x/b', 'x/c', ...inNs('z')], 'X') }));
  // policyTypes [Ingress] with egress rules: egress is not enforced
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress'], ingress: [{}], egress: [{ to: [{ podSelector: { matchLabels: { pod: 'zz' } } }] }] }));
  t.equal(grid(e, 80), gridWith({}));
  // policyTypes [Egress] without egress rules: deny all egress, ingress open
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'] }));
  t.equal(grid(e, 80), gridWith(cells(['x/a'], others('x/a'), 'X')));
  // egress: [] without policyTypes: only Ingress
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{}], egress: [] }));
  t.equal(grid(e, 80), gridWith({}));
});

t.test('isolation is per direction and rules are additive across policies', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'one', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] }));
  e.upsert(netpol('x', 'two', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }] }));
  const expected = {
    ...cells(others('x/a', 'x/b', ...inNs('z')), ['x/a'], 'X'),
    ...cells(others('x/b', ...inNs('z')), ['x/b'], 'X'),
    ...cells(others('x/c', ...inNs('z')), ['x/c'], 'X'),
  };
  t.equal(grid(e, 80), gridWith(expected));
});

t.test('ports: protocol, number, range, named', async (t) => {
  const e = modelEngine();
  const to = (ports: unknown) => e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ ports }] }));
  const blockedToA = gridWith(cells(others('x/a'), ['x/a'], 'X'));
  to([{ port: 80 }]);
  t.equal(grid(e, 80), gridWith({}), 'TCP is the default protocol');
  t.equal(grid(e, 81), blockedToA);
  t.equal(grid(e, 80, 'UDP'), blockedToA, 'TCP port does not allow UDP');
  t.equal(grid(e, 80, 'SCTP'), blockedToA, 'nor SCTP');
  to([{ protocol: 'UDP', port: 81 }]);
  t.equal(grid(e, 81, 'UDP'), gridWith({}));
  t.equal(grid(e, 81, 'TCP'), blockedToA);
  to([{ protocol: 'SCTP' }]);
  t.equal(grid(e, 80, 'SCTP'), gridWith({}), 'protocol without port = every port');
  t.equal(grid(e, 81, 'SCTP'), gridWith({}));
  t.equal(grid(e, 81, 'TCP'), blockedToA);
  to([{ port: 79, endPort: 80 }]);
  t.equal(grid(e, 80), gridWith({}), 'endPort range includes its end');
  t.equal(grid(e, 81), blockedToA);
  to([{ port: 'serve-81-tcp' }]);
  t.equal(grid(e, 81), gridWith({}), 'named port resolves on the destination Pod');
  t.equal(grid(e, 80), blockedToA);
  to([{ port: 'serve-81-udp' }]);
  t.equal(grid(e, 81, 'UDP'), blockedToA, 'named port with the wrong protocol matches nothing');
  to([{ protocol: 'UDP', port: 'serve-81-udp' }]);
  t.equal(grid(e, 81, 'UDP'), gridWith({}));
});

t.test('named port resolves per destination Pod (egress)', async (t) => {
  const e = modelEngine();
  e.upsert(pod('y', 'a', { ports: [{ name: 'web', containerPort: 8080 }] }));
  e.upsert(pod('y', 'b', { ports: [{ name: 'web', containerPort: 9090 }] }));
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ ports: [{ port: 'web' }] }] }));
  const v = (to: string, port: number) => e.evaluate({ from: 'x/a', to, port, protocol: 'TCP' }).verdict;
  t.equal(v('y/a', 8080), 'allow');
  t.equal(v('y/a', 9090), 'drop');
  t.equal(v('y/b', 9090), 'allow');
  t.equal(v('y/b', 8080), 'drop');
  t.equal(v('y/c', 80), 'drop', 'a Pod without the name');
});

t.test('ipBlock with except (egress)', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', {
    podSelector: { matchLabels: { pod: 'a' } },
    policyTypes: ['Egress'],
    egress: [{ to: [{ ipBlock: { cidr: '10.244.0.0/16', except: [`${podIp('y', 'b')}/32`, '10.244.3.0/24'] } }] }],
  }));
  t.equal(grid(e, 80), gridWith(cells(['x/a'], ['y/b', ...inNs('z')], 'X')));
  t.equal(e.evaluate({ from: 'x/a', to: 'ip:10.9.9.9', port: 80, protocol: 'TCP' }).verdict, 'drop', 'outside the cidr');
  t.equal(e.evaluate({ from: 'x/a', to: 'ip:10.244.200.1', port: 80, protocol: 'TCP' }).verdict, 'allow', 'an external address inside it');
});

t.test('ipBlock ingress from an external address; an ip: endpoint equal to a Pod IP is that Pod', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ ipBlock: { cidr: '192.168.0.0/16' } }] }] }));
  t.equal(e.evaluate({ from: 'ip:192.168.1.1', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'allow');
  t.equal(e.evaluate({ from: 'ip:172.16.0.1', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'drop');
  t.equal(e.evaluate({ from: 'x/b', to: `ip:${podIp('x', 'a')}`, port: 80, protocol: 'TCP' }).verdict, 'drop', 'ip: of x/a is x/a');
  t.equal(e.evaluate({ from: `ip:${podIp('x', 'b')}`, to: 'x/c', port: 80, protocol: 'TCP' }).verdict, 'allow');
});

t.test('label changes re-evaluate selectors (Pod and Namespace)', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 'blue' } } }] }] }));
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'drop');
  e.upsert(namespace('y', { team: 'blue' }));
  t.equal(e.evaluate({ from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'allow');
  const relabeled = pod('x', 'a', { labels: { pod: 'a-moved' } });
  e.upsert(relabeled);
  t.equal(e.evaluate({ from: 'z/a', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'allow', 'no longer selected');
});

t.test('verdict details name the deciding policy', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'allow-b', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [{ from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] }));
  t.same(e.evaluate({ from: 'x/b', to: 'x/a', port: 80, protocol: 'TCP' }).decidedBy, {
    kind: 'NetworkPolicy', namespace: 'x', name: 'allow-b', rule: 'ingress-0', direction: 'Ingress', action: 'Allow',
  });
  t.same(e.evaluate({ from: 'x/c', to: 'x/a', port: 80, protocol: 'TCP' }).decidedBy, {
    kind: 'K8sNetworkPolicyIsolation', namespace: 'x', name: 'allow-b', direction: 'Ingress', action: 'IsolationDrop',
  });
  t.equal(e.evaluate({ from: 'x/c', to: 'x/b', port: 80, protocol: 'TCP' }).decidedBy, null, 'default');
});

t.test('namespace annotation enable-logging turns on logging for rules and isolations', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'p', { podSelector: {}, ingress: [{}] }));
  t.notOk(e.rules()[0]!.logging);
  e.upsert(namespace('x', {}, { 'networkpolicy.antrea.io/enable-logging': 'true' }));
  t.same(e.rules()[0]!.logging, { enabled: true });
  t.same(e.isolations()[0]!.logging, { enabled: true });
  e.upsert(namespace('x'));
  t.notOk(e.rules()[0]!.logging, 'removed with the annotation');
});

t.test('removing a policy restores reachability', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'deny', { podSelector: {} , policyTypes: ['Ingress', 'Egress'] }));
  t.not(grid(e, 80), gridWith({}));
  e.remove({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'deny' });
  t.equal(grid(e, 80), gridWith({}));
});

t.test('validation as the API server does it', async (t) => {
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ['bad-cidr', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/33' } }] }] }, 'spec.ingress[0].from[0].ipBlock.cidr', /valid CIDR/],
    ['cidr-missing', { podSelector: {}, ingress: [{ from: [{ ipBlock: {} }] }] }, 'spec.ingress[0].from[0].ipBlock.cidr', /Required/],
    ['except-outside', { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/16', except: ['10.1.0.0/24'] } }] }] }, 'spec.egress[0].to[0].ipBlock.except[0]', /strict subset/],
    ['except-equal', { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/16', except: ['10.0.0.0/16'] } }] }] }, 'spec.egress[0].to[0].ipBlock.except[0]', /strict subset/],
    ['endport-below', { podSelector: {}, ingress: [{ ports: [{ port: 80, endPort: 79 }] }] }, 'spec.ingress[0].ports[0].endPort', /greater than or equal/],
    ['endport-named', { podSelector: {}, ingress: [{ ports: [{ port: 'http', endPort: 90 }] }] }, 'spec.ingress[0].ports[0].endPort', /non-numeric/],
    ['endport-alone', { podSelector: {}, ingress: [{ ports: [{ endPort: 90 }] }] }, 'spec.ingress[0].ports[0].endPort', /not specified/],
    ['bad-protocol', { podSelector: {}, ingress: [{ ports: [{ protocol: 'ICMP' }] }] }, 'spec.ingress[0].ports[0].protocol', /Unsupported value/],
    ['port-range', { podSelector: {}, ingress: [{ ports: [{ port: 70000 }] }] }, 'spec.ingress[0].ports[0].port', /between 1 and 65535/],
    ['port-zero', { podSelector: {}, ingress: [{ ports: [{ port: 0 }] }] }, 'spec.ingress[0].ports[0].port', /between 1 and 65535/],
    ['port-name', { podSelector: {}, ingress: [{ ports: [{ port: 'Not_A_Name' }] }] }, 'spec.ingress[0].ports[0].port', /lowercase/],
    ['port-name-digits', { podSelector: {}, ingress: [{ ports: [{ port: '8080' }] }] }, 'spec.ingress[0].ports[0].port', /letter/],
    ['bad-selector', { podSelector: { matchExpressions: [{ key: 'a', operator: 'In' }] } }, 'spec.podSelector.matchExpressions[0].values', /must be specified when `operator` is 'In' or 'NotIn'/],
    ['bad-label', { podSelector: { matchLabels: { 'bad key!': 'x' } } }, 'spec.podSelector.matchLabels', /label key/],
    ['bad-peer-selector', { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchExpressions: [{ key: 'a', operator: 'Bogus' }] } }] }] }, 'spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].operator', /Unsupported value: "Bogus"/],
    ['empty-peer', { podSelector: {}, ingress: [{ from: [{}] }] }, 'spec.ingress[0].from[0]', /must specify a peer/],
    ['two-peer-kinds', { podSelector: {}, ingress: [{ from: [{ podSelector: {}, ipBlock: { cidr: '10.0.0.0/8' } }] }] }, 'spec.ingress[0].from[0]', /more than 1 peer/],
    ['bad-type', { podSelector: {}, policyTypes: ['Inbound'] }, 'spec.policyTypes[0]', /Unsupported value/],
    ['three-types', { podSelector: {}, policyTypes: ['Ingress', 'Egress', 'Ingress'] }, 'spec.policyTypes', /more than two/],
    ['ignored-direction-still-validated', { podSelector: {}, policyTypes: ['Ingress'], egress: [{ ports: [{ port: 0 }] }] }, 'spec.egress[0].ports[0].port', /between/],
  ];
  for (const [name, spec, field, message] of cases) {
    const e = modelEngine();
    e.upsert(netpol('x', 'valid', { podSelector: { matchLabels: { pod: 'a' } }, ingress: [] }));
    const logged: string[] = [];
    const cs = e.upsert(netpol('x', name, spec));
    const errs = e.errors().filter((x) => x.name === name);
    t.ok(errs.some((x) => x.field === field && message.test(x.message)), `${name}: ${field} ${message} (got ${JSON.stringify(errs)})`);
    t.ok(errs.every((x) => x.kind === 'NetworkPolicy' && x.namespace === 'x'), `${name}: error names the object`);
    t.same(cs.rules.added, [], `${name}: no rules from an invalid policy`);
    t.equal(e.rules().length + e.isolations().length, 1, `${name}: only the valid policy's isolation remains`);
    t.equal(e.evaluate({ from: 'x/b', to: 'x/a', port: 80, protocol: 'TCP' }).verdict, 'drop', `${name}: the valid policy still applies`);
    t.equal(e.evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' }).verdict, 'allow', `${name}: invalid policy isolates nothing`);
    void logged;
  }
});

t.test('valid edge cases are accepted', async (t) => {
  const e = modelEngine();
  e.upsert(netpol('x', 'ok', {
    podSelector: { matchExpressions: [{ key: 'pod', operator: 'Exists' }] },
    policyTypes: ['Ingress', 'Egress'],
    ingress: [{ from: [{ ipBlock: { cidr: '10.244.1.7/16', except: ['10.244.1.0/24'] } }], ports: [{ port: 1, endPort: 65535 }, { protocol: 'SCTP', port: 'serve-80-sctp' }] }],
    egress: [{ to: [{ ipBlock: { cidr: 'fd00::/64', except: ['fd00::/96'] } }] }],
    unknownField: true,
  }));
  t.same(e.errors(), []);
  t.equal(e.rules().length, 2);
});

t.test('unknown kinds and unserved versions are reported, not fatal', async (t) => {
  const e = modelEngine();
  e.upsert({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'd', namespace: 'x' } });
  e.upsert({ apiVersion: 'networking.k8s.io/v1beta1', kind: 'NetworkPolicy', metadata: { name: 'old', namespace: 'x' }, spec: { podSelector: {} } });
  const errs = e.errors();
  t.match(errs.find((x) => x.name === 'd')?.message, /unsupported kind Deployment/);
  t.match(errs.find((x) => x.name === 'old')?.message, /not served in networking.k8s.io\/v1beta1/);
  t.equal(grid(e, 80), gridWith({}));
});
