import t from 'tap';
import type { KubeObject } from '../../daemon/policy/types.js';
import { parseArgs, UsageError } from '../../lab/args.js';
import { desiredEndpointSlices, diffSlices, resolvePorts } from '../../lab/cluster/endpointslices.js';
import { kindOfObject, parseObjectRef, resolveKind, resourcePath, UnknownKindError } from '../../lab/kinds.js';
import { applyLabelArgs, normalizeForApply, planApply, planDelete, ScenarioError, servedPorts } from '../../lab/scenario.js';
import { compareNodeNames, needsScheduling, NoFitError, RoundRobin } from '../../lab/cluster/scheduling.js';

const pod = (ns: string, name: string, labels: Record<string, string>, extra: Partial<KubeObject> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace: ns, name, labels, uid: `uid-${ns}-${name}` },
  spec: { containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 80 }, { name: 'dns', containerPort: 53, protocol: 'UDP' }] }] },
  ...extra,
});
const running = (p: KubeObject, ip: string, node = 'node-1'): KubeObject => ({
  ...p,
  spec: { ...p.spec, nodeName: node },
  status: { phase: 'Running', podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
});
const node = (name: string, labels: Record<string, string> = {}): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels } });

t.test('kinds: names, aliases, groups and paths', async (t) => {
  t.equal(resolveKind('po').kind, 'Pod');
  t.equal(resolveKind('Services').plural, 'services');
  t.equal(resolveKind('svc').kind, 'Service');
  t.equal(resolveKind('networkpolicies').group, 'networking.k8s.io');
  t.equal(resolveKind('networkpolicies.crd.antrea.io').group, 'crd.antrea.io');
  t.equal(resolveKind('acnp').kind, 'ClusterNetworkPolicy');
  t.equal(resolveKind('acnp').group, 'crd.antrea.io');
  t.equal(resolveKind('anp').kind, 'AdminNetworkPolicy');
  t.throws(() => resolveKind('widgets'), UnknownKindError);
  t.equal(resourcePath(resolveKind('pods')), '/api/v1/pods');
  t.equal(resourcePath(resolveKind('pods'), 'x', 'a'), '/api/v1/namespaces/x/pods/a');
  t.equal(resourcePath(resolveKind('nodes'), undefined, 'node-1'), '/api/v1/nodes/node-1');
  t.equal(resourcePath(resolveKind('netpol'), 'y'), '/apis/networking.k8s.io/v1/namespaces/y/networkpolicies');
  t.equal(resourcePath(resolveKind('anp'), undefined, 'p'), '/apis/policy.networking.k8s.io/v1alpha1/adminnetworkpolicies/p');
  t.throws(() => resourcePath(resolveKind('pods'), undefined, 'a'));
  t.same(parseObjectRef(resolveKind('pods'), 'x/a'), { namespace: 'x', name: 'a' });
  t.same(parseObjectRef(resolveKind('pods'), 'a'), { namespace: 'default', name: 'a' });
  t.same(parseObjectRef(resolveKind('ns'), 'x'), { name: 'x' });
  t.throws(() => parseObjectRef(resolveKind('ns'), 'x/y'), /not namespaced/);
  t.throws(() => parseObjectRef(resolveKind('pods'), 'a/b/c'));
  t.equal(kindOfObject({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy' }).plural, 'networkpolicies');
  t.equal(kindOfObject({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy' }).group, 'crd.antrea.io');
  t.equal(kindOfObject({ apiVersion: 'crd.antrea.io/v1alpha1', kind: 'Tier' }).version, 'v1alpha1');
  t.equal(kindOfObject({ apiVersion: 'policy.networking.k8s.io/v1alpha2', kind: 'ClusterNetworkPolicy' }).version, 'v1alpha2');
  t.throws(() => kindOfObject({ apiVersion: 'apps/v1', kind: 'StatefulSet' }), /does not serve/);
});

t.test('args: commands, defaults and errors', async (t) => {
  t.same(parseArgs(['up']), { cmd: 'up', name: 'sl', nodes: 2, primary: 'ptp', sluice: true, files: [], ipFamily: 'ipv4', policySource: 'controller' }, 'the agents follow the controller by default');
  t.equal((parseArgs(['up', '--policy-source', 'standalone']) as { policySource: string }).policySource, 'standalone');
  t.throws(() => parseArgs(['up', '--policy-source', 'central']), UsageError);
  t.throws(() => parseArgs(['up', '--policy-source', 'controller', '--no-sluice']), /needs the lab's agents/);
  t.equal((parseArgs(['up', '--ip-family', 'dual']) as { ipFamily: string }).ipFamily, 'dual');
  t.equal((parseArgs(['up', '--ip-family', 'ipv6']) as { ipFamily: string }).ipFamily, 'ipv6');
  t.throws(() => parseArgs(['up', '--ip-family', '7']), UsageError);
  t.same(parseArgs(['up', '--ip-family', 'ipv6', '--primary', 'eks']), { cmd: 'up', name: 'sl', nodes: 2, primary: 'eks', sluice: true, files: [], ipFamily: 'ipv6', policySource: 'controller' });
  t.same(parseArgs(['up', '--name', 'lb1', '--nodes', '3', '--primary', 'eks', '-f', 'a.yaml', '-f', 'dir', '--no-sluice']), {
    cmd: 'up', name: 'lb1', nodes: 3, primary: 'eks', sluice: false, files: ['a.yaml', 'dir'], ipFamily: 'ipv4', policySource: 'standalone',
  }, 'without agents, nothing follows the controller');
  t.equal((parseArgs(['up', '--sluice']) as { sluice: boolean }).sluice, true);
  t.equal((parseArgs(['up', '--seed', 'cluster.json']) as { seed?: string }).seed, 'cluster.json');
  t.notOk('seed' in parseArgs(['up']), 'no seed unless given');
  t.throws(() => parseArgs(['up', '--seed', '']), /--seed needs a file/);
  t.equal((parseArgs(['up', '--no-sluice']) as { sluice: boolean }).sluice, false);
  t.same(parseArgs(['get', 'pods', 'x/a', '-o', 'json', '--name', 'lb2']), { cmd: 'get', name: 'lb2', kind: 'pods', ref: 'x/a', output: 'json' });
  t.same(parseArgs(['get', 'nodes']), { cmd: 'get', name: 'sl', kind: 'nodes', output: 'table' });
  t.same(parseArgs(['label', 'pod', 'x/a', 'app=web', 'old-']), { cmd: 'label', name: 'sl', kind: 'pod', ref: 'x/a', labels: ['app=web', 'old-'] });
  t.same(parseArgs(['probe', '--probes', 'p.json', '-o', 'json']), { cmd: 'probe', name: 'sl', probes: 'p.json', output: 'json' });
  t.same(parseArgs(['probe', '--family', '6']), { cmd: 'probe', name: 'sl', family: 6, output: 'table' });
  t.same(parseArgs(['down', '--all']), { cmd: 'down', name: 'sl', all: true });
  t.same(parseArgs(['apply', '-f', 'x.yaml']), { cmd: 'apply', name: 'sl', files: ['x.yaml'] });
  t.same(parseArgs(['delete', '-f', 'x.yaml']), { cmd: 'delete', name: 'sl', files: ['x.yaml'], ignoreNotFound: false });
  t.same(parseArgs(['delete', '--ignore-not-found', '-f', 'a.yaml', '-f', 'b.yaml']), { cmd: 'delete', name: 'sl', files: ['a.yaml', 'b.yaml'], ignoreNotFound: true });
  t.equal(parseArgs(['demo']).cmd, 'demo');
  t.equal((parseArgs(['demo']) as { sluice: boolean }).sluice, true, 'the demo runs enforcing agents by default');
  t.equal((parseArgs(['demo', '--no-sluice']) as { sluice: boolean }).sluice, false);
  t.equal(parseArgs([]).cmd, 'help');
  t.throws(() => parseArgs(['apply']), UsageError);
  t.throws(() => parseArgs(['frobnicate']), UsageError);
  t.throws(() => parseArgs(['up', '--nodes', '0']), /--nodes/);
  t.throws(() => parseArgs(['up', '--primary', 'calico']), UsageError);
  t.throws(() => parseArgs(['up', '--name', 'Bad_Name']), /lab name/);
  t.throws(() => parseArgs(['get', 'pods', '-o', 'yaml']), UsageError);
  t.throws(() => parseArgs(['label', 'pod', 'x/a']), /at least one/);
  const ops = [{ op: 'remove', path: '/spec/template/spec/initContainers' }];
  t.same(parseArgs(['patch', 'daemonset', 'sluice-system/sluice-agent', '--type', 'json', '-p', JSON.stringify(ops)]), { cmd: 'patch', name: 'sl', kind: 'daemonset', ref: 'sluice-system/sluice-agent', type: 'json', patch: ops });
  t.same(parseArgs(['patch', 'pod', 'x/a', '-p', '{"metadata":{"labels":{"a":"b"}}}']), { cmd: 'patch', name: 'sl', kind: 'pod', ref: 'x/a', type: 'merge', patch: { metadata: { labels: { a: 'b' } } } }, 'merge patch by default, as kubectl');
  t.throws(() => parseArgs(['patch', 'pod', 'x/a', '-p', '{nope']), /-p: not JSON/);
  t.throws(() => parseArgs(['patch', 'pod', 'x/a', '--type', 'json', '-p', '{}']), /JSON array of operations/);
  t.throws(() => parseArgs(['patch', 'pod', 'x/a', '-p', '[]']), /must be a JSON object/);
  t.throws(() => parseArgs(['patch', 'pod', 'x/a']), /-p/);
  t.throws(() => parseArgs(['up', '--bogus']), UsageError);
});

t.test('scheduling: round-robin in node order, nodeSelector honoured', async (t) => {
  t.same(['node-10', 'node-2', 'node-1'].sort(compareNodeNames), ['node-1', 'node-2', 'node-10']);
  const rr = new RoundRobin();
  const nodes = [node('node-2'), node('node-1', { zone: 'a' }), node('node-3')];
  const picks = [1, 2, 3, 4].map((i) => rr.pick(pod('x', `p${i}`, {}), nodes));
  t.same(picks, ['node-1', 'node-2', 'node-3', 'node-1']);
  const pinned = pod('x', 'z', {}, { spec: { nodeSelector: { zone: 'a' }, containers: [] } });
  t.equal(rr.pick(pinned, nodes), 'node-1');
  t.throws(() => rr.pick(pod('x', 'q', {}, { spec: { nodeSelector: { zone: 'b' }, containers: [] } }), nodes), NoFitError);
  t.ok(needsScheduling(pod('x', 'a', {})));
  t.notOk(needsScheduling(running(pod('x', 'a', {}), '10.10.1.2')));
});

t.test('endpoint slices: selection, readiness, named ports, diff', async (t) => {
  const svc: KubeObject = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: 'x', name: 'web', uid: 'svc-uid' },
    spec: { selector: { app: 'web' }, ports: [{ name: 'h', port: 8080, targetPort: 'http' }, { name: 'd', port: 53, protocol: 'UDP', targetPort: 53 }] },
  };
  const a = running(pod('x', 'a', { app: 'web' }), '10.10.1.5', 'node-1');
  const b = running(pod('x', 'b', { app: 'web' }), '10.10.2.3', 'node-2');
  const notReady: KubeObject = { ...pod('x', 'c', { app: 'web' }), status: { phase: 'Pending', podIP: '10.10.1.9' } };
  const otherNs = running(pod('y', 'a', { app: 'web' }), '10.10.1.7');
  const otherLabel = running(pod('x', 'd', { app: 'db' }), '10.10.1.8');
  const noIP = pod('x', 'e', { app: 'web' });
  const slices = desiredEndpointSlices(svc, [b, a, notReady, otherNs, otherLabel, noIP])!;
  t.equal(slices.length, 1);
  const s = slices[0]!;
  t.equal(s.metadata.namespace, 'x');
  t.equal(s.metadata.labels?.['kubernetes.io/service-name'], 'web');
  t.same(s.ports, [{ name: 'h', port: 80, protocol: 'TCP' }, { name: 'd', port: 53, protocol: 'UDP' }]);
  const eps = s.endpoints as { addresses: string[]; conditions: { ready: boolean }; nodeName: string; targetRef: { name: string } }[];
  t.same(eps.map((e) => e.addresses[0]), ['10.10.1.5', '10.10.1.9', '10.10.2.3']);
  t.same(eps.map((e) => e.conditions.ready), [true, false, true]);
  t.same(eps.map((e) => e.targetRef.name), ['a', 'c', 'b']);
  t.equal(eps[2]!.nodeName, 'node-2');

  // A Pod whose named port is numbered differently lands in its own slice; one without the name in none.
  const alt = running(
    { ...pod('x', 'f', { app: 'web' }), spec: { containers: [{ ports: [{ name: 'http', containerPort: 8000 }] }] } },
    '10.10.2.9',
  );
  const missing = running({ ...pod('x', 'g', { app: 'web' }), spec: { containers: [{ ports: [] }] } }, '10.10.2.10');
  t.equal(resolvePorts(svc.spec.ports, missing), null);
  const two = desiredEndpointSlices(svc, [a, alt, missing])!;
  t.equal(two.length, 2);
  t.same(two.map((x) => (x.ports as { port: number }[])[0]!.port).sort(), [80, 8000]);
  t.not(two[0]!.metadata.name, two[1]!.metadata.name);

  t.same(desiredEndpointSlices({ ...svc, spec: { ports: svc.spec.ports } }, [a]), null, 'no selector: not managed');
  const empty = desiredEndpointSlices(svc, [])!;
  t.equal(empty.length, 1);
  t.same(empty[0]!.endpoints, []);

  // diff
  const existing = slices.map((x) => ({ ...x, metadata: { ...x.metadata, resourceVersion: '7' } }));
  t.same(diffSlices(slices, existing), { create: [], update: [], delete: [] }, 'unchanged');
  const now = desiredEndpointSlices(svc, [a])!;
  const d = diffSlices(now, existing);
  t.equal(d.update.length, 1);
  t.equal(d.update[0]!.metadata.resourceVersion, '7');
  const d2 = diffSlices(two, existing);
  t.equal(d2.create.length + d2.update.length, 2);
  const d3 = diffSlices([], existing);
  t.equal(d3.delete.length, 1);

  // A dual-stack Service: one slice per family, each Pod under its address of that family.
  const dual = (p: KubeObject, v6: string): KubeObject => ({ ...p, status: { ...p.status, podIPs: [{ ip: p.status.podIP }, { ip: v6 }] } });
  const ds = desiredEndpointSlices({ ...svc, spec: { ...svc.spec, ipFamilies: ['IPv4', 'IPv6'] } }, [dual(b, 'fd00:10:2::3'), dual(a, 'fd00:10:1::5'), notReady])!;
  t.same(ds.map((x) => x.addressType), ['IPv4', 'IPv6']);
  t.same(ds.map((x) => (x.endpoints as { addresses: string[] }[]).map((e) => e.addresses[0])), [['10.10.1.5', '10.10.1.9', '10.10.2.3'], ['fd00:10:1::5', 'fd00:10:2::3']], 'a Pod without IPv6 is only in the IPv4 slice');
  t.equal(ds[0]!.metadata.name, slices[0]!.metadata.name, 'the IPv4 slice keeps its name');
  t.not(ds[1]!.metadata.name, ds[0]!.metadata.name);
  const v6only = desiredEndpointSlices({ ...svc, spec: { ...svc.spec, ipFamilies: ['IPv6'] } }, [a])!;
  t.same(v6only.map((x) => [x.addressType, x.endpoints]), [['IPv6', []]], 'an IPv6 Service over IPv4-only Pods: one empty IPv6 slice');
});

t.test('scenario: order, lab rules, normalization', async (t) => {
  const objs: KubeObject[] = [
    running(pod('x', 'a', {}), '1.2.3.4'),
    { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 's' }, spec: {} },
    { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'np', resourceVersion: '5' }, spec: {} },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', namespace: 'bogus' } },
  ];
  const plan = planApply(objs, ['node-1', 'node-2']);
  t.same(plan.map((p) => p.obj.kind), ['Namespace', 'Service', 'NetworkPolicy', 'Pod']);
  t.equal(plan[0]!.obj.metadata.namespace, undefined, 'cluster-scoped: namespace dropped');
  t.equal(plan[2]!.obj.metadata.namespace, 'default', 'namespaced: defaults to default');
  t.equal(plan[2]!.obj.metadata.resourceVersion, undefined);
  t.equal(plan[3]!.obj.status, undefined, 'Pod status dropped (IPAM decides)');
  t.equal(plan[3]!.obj.spec.nodeName, 'node-1');
  t.same(planDelete(objs).map((p) => p.obj.kind), ['Pod', 'NetworkPolicy', 'Service', 'Namespace']);
  t.throws(() => planApply([{ ...pod('x', 'a', {}), spec: { nodeName: 'node-9', containers: [{}] } }], ['node-1']), /node-9 is not a lab node/);
  t.throws(() => planApply([node('node-7')], ['node-1', 'node-2']), /not a lab node/);
  t.throws(() => planApply([pod('x', 'a', {}), pod('x', 'a', {})], ['node-1']), /appears twice/);
  t.throws(() => planApply([{ apiVersion: 'apps/v1', kind: 'StatefulSet', metadata: { name: 'd' } }], ['node-1']), ScenarioError);
  t.equal(normalizeForApply(pod('x', 'a', {}), resolveKind('pods')).metadata.uid, undefined);

  t.same(applyLabelArgs({ a: '1', b: '2' }, ['c=3', 'a-', 'b=x']), { b: 'x', c: '3' });
  t.same(applyLabelArgs(undefined, ['example.com/k=v']), { 'example.com/k': 'v' });
  t.throws(() => applyLabelArgs({}, ['=v']), ScenarioError);
  t.throws(() => applyLabelArgs({}, ['k=bad value']), /valid label value/);
  t.throws(() => applyLabelArgs({}, []), ScenarioError);

  const p = pod('x', 'a', {}, {
    spec: { containers: [{ ports: [{ containerPort: 80 }, { containerPort: 80, protocol: 'UDP' }, { containerPort: 9, protocol: 'SCTP' }] }, { ports: [{ containerPort: 80 }] }] },
  });
  t.same(servedPorts(p), [{ port: 80, protocol: 'TCP' }, { port: 80, protocol: 'UDP' }]);
});
