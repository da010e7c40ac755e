// CRUD, patch, errors, selectors, namespaces, Services and CRDs of the lab API server,
// driven through @kubernetes/client-node 1.4.0 (and raw HTTP where a client hides the detail).
import * as k8s from '@kubernetes/client-node';
import t from 'tap';
import { kubeconfigYaml } from '../../lab/apiserver/server.js';
import { failureCode, kubeConfigFor, pod, startLab, token } from './apiserver-helpers.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const strategic = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch);

t.test('pod create/get/update/delete round trip with server-set metadata', async (t) => {
  const { core } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  const created = await core.createNamespacedPod({ namespace: 'x', body: pod('a', { labels: { app: 'web' } }) });
  t.equal(created.kind, 'Pod');
  t.equal(created.apiVersion, 'v1');
  t.equal(created.metadata!.namespace, 'x');
  t.match(created.metadata!.uid, /^[0-9a-f-]{36}$/);
  t.match(created.metadata!.resourceVersion, /^[0-9]+$/);
  t.equal(created.metadata!.generation, 1);
  t.ok(created.metadata!.creationTimestamp instanceof Date);
  t.equal(created.status!.phase, 'Pending', 'status starts Pending like Kubernetes');
  t.equal(created.spec!.serviceAccountName, 'default');
  t.equal(created.spec!.containers[0]!.ports![0]!.protocol, 'TCP', 'port protocol defaulted');

  const got = await core.readNamespacedPod({ namespace: 'x', name: 'a' });
  t.same(got.metadata!.labels, { app: 'web' });
  t.equal(got.metadata!.resourceVersion, created.metadata!.resourceVersion);

  got.metadata!.labels = { app: 'api' };
  const updated = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: got });
  t.same(updated.metadata!.labels, { app: 'api' });
  t.ok(Number(updated.metadata!.resourceVersion) > Number(created.metadata!.resourceVersion), 'resourceVersion increases');
  t.equal(updated.metadata!.uid, created.metadata!.uid, 'uid kept');
  t.equal(updated.metadata!.generation, 1, 'a label change is not a spec change');

  updated.spec!.containers[0]!.image = 'nginx';
  const respec = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: updated });
  t.equal(respec.metadata!.generation, 2, 'a spec change bumps generation');

  const deleted = await core.deleteNamespacedPod({ namespace: 'x', name: 'a' });
  t.equal(deleted.metadata!.name, 'a', 'delete returns the object');
  t.ok(Number(deleted.metadata!.resourceVersion) > Number(respec.metadata!.resourceVersion));
  t.equal((await failureCode(core.readNamespacedPod({ namespace: 'x', name: 'a' }))).code, 404);
  const gone = await failureCode(core.deleteNamespacedPod({ namespace: 'x', name: 'a' }));
  t.equal(gone.code, 404);
  t.match(gone.body, { kind: 'Status', code: 404, reason: 'NotFound', message: 'pods "a" not found', details: { name: 'a', kind: 'pods' } });
});

t.test('one global resourceVersion across resources; lists carry it and item kinds', async (t) => {
  const { core, net } = await startLab(t);
  const ns = await core.createNamespace({ body: { metadata: { name: 'y' } } });
  const p = await core.createNamespacedPod({ namespace: 'y', body: pod('b') });
  const np = await net.createNamespacedNetworkPolicy({ namespace: 'y', body: { metadata: { name: 'deny' }, spec: { podSelector: {} } } });
  const rvs = [ns, p, np].map((o) => Number(o.metadata!.resourceVersion));
  t.ok(rvs[0]! < rvs[1]! && rvs[1]! < rvs[2]!, `strictly increasing over kinds: ${rvs}`);
  const list = await net.listNetworkPolicyForAllNamespaces();
  t.equal(list.kind, 'NetworkPolicyList');
  t.equal(list.metadata!.resourceVersion, String(rvs[2]));
  t.same(list.items.map((i) => [i.kind, i.apiVersion, i.metadata!.name]), [['NetworkPolicy', 'networking.k8s.io/v1', 'deny']]);
  const pods = await core.listNamespacedPod({ namespace: 'y' });
  t.same(pods.items.map((i) => i.metadata!.name), ['b']);
  t.same((await core.listNamespacedPod({ namespace: 'default' })).items, [], 'other namespace is empty');
});

t.test('create errors: 409 AlreadyExists, 404 missing namespace, 422 Invalid, generateName', async (t) => {
  const { core, server } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  await core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  const dup = await failureCode(core.createNamespacedPod({ namespace: 'x', body: pod('a') }));
  t.match(dup, { code: 409, body: { reason: 'AlreadyExists', message: 'pods "a" already exists' } });
  const noNs = await failureCode(core.createNamespacedPod({ namespace: 'nope', body: pod('a') }));
  t.match(noNs, { code: 404, body: { reason: 'NotFound', message: 'namespaces "nope" not found' } });
  const noName = await failureCode(core.createNamespacedPod({ namespace: 'x', body: { metadata: {}, spec: pod('z').spec! } }));
  t.match(noName, { code: 422, body: { kind: 'Status', reason: 'Invalid', message: /metadata\.name: Required value/ } });
  const badName = await failureCode(core.createNamespacedPod({ namespace: 'x', body: pod('Bad_Name') }));
  t.match(badName, { code: 422, body: { reason: 'Invalid', message: /Bad_Name/ } });
  const noContainers = await failureCode(core.createNamespacedPod({ namespace: 'x', body: { metadata: { name: 'c' }, spec: { containers: [] } } }));
  t.match(noContainers, { code: 422, body: { message: /spec\.containers/ } });

  // kind/apiVersion that do not match the path (raw HTTP: the typed client would overwrite them)
  const post = (path: string, body: unknown) => fetch(server.url + path, {
    method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const wrongKind = await post('/api/v1/namespaces/x/pods', { apiVersion: 'v1', kind: 'Service', metadata: { name: 'w' } });
  t.equal(wrongKind.status, 422);
  t.match(await wrongKind.json(), { kind: 'Status', reason: 'Invalid', message: /kind/ });
  const wrongVersion = await post('/apis/networking.k8s.io/v1/namespaces/x/networkpolicies', { apiVersion: 'v1', kind: 'NetworkPolicy', metadata: { name: 'w' } });
  t.equal(wrongVersion.status, 422);
  const badJson = await post('/api/v1/namespaces/x/pods', undefined);
  t.equal(badJson.status, 400, 'an empty body is a bad request');

  const generated = await core.createNamespacedPod({ namespace: 'x', body: { metadata: { generateName: 'web-' }, spec: pod('z').spec! } });
  t.match(generated.metadata!.name, /^web-[a-z0-9]{5}$/);
});

t.test('update 409 Conflict on a stale resourceVersion; unconditional update without one', async (t) => {
  const { core } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  const v1 = await core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  const v2 = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: { ...v1, metadata: { ...v1.metadata, labels: { n: '2' } } } });
  const stale = await failureCode(core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: { ...v1, metadata: { ...v1.metadata, labels: { n: '3' } } } }));
  t.match(stale, { code: 409, body: { reason: 'Conflict', message: /the object has been modified/ } });
  t.same((await core.readNamespacedPod({ namespace: 'x', name: 'a' })).metadata!.labels, { n: '2' }, 'the stale write changed nothing');
  const noRv = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: { ...v2, metadata: { name: 'a', labels: { n: '4' } } } });
  t.same(noRv.metadata!.labels, { n: '4' });
  const same = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: noRv });
  t.equal(same.metadata!.resourceVersion, noRv.metadata!.resourceVersion, 'a no-op update keeps the resourceVersion');
  const del = await failureCode(core.deleteNamespacedPod({ namespace: 'x', name: 'a', body: { preconditions: { resourceVersion: v1.metadata!.resourceVersion! } } }));
  t.equal(del.code, 409, 'delete precondition on a stale resourceVersion');
});

t.test('pod status only through /status; main-resource status writes are ignored', async (t) => {
  const { core } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  const p = await core.createNamespacedPod({ namespace: 'x', body: { ...pod('a'), status: { phase: 'Running', podIP: '10.0.0.9' } } });
  t.same(p.status, { phase: 'Pending' }, 'status in a create is replaced');
  const viaMain = await core.replaceNamespacedPod({ namespace: 'x', name: 'a', body: { ...p, status: { phase: 'Running' } } });
  t.equal(viaMain.status!.phase, 'Pending', 'status via the main resource is ignored');
  t.equal(viaMain.metadata!.resourceVersion, p.metadata!.resourceVersion, 'and it is a no-op');
  const s1 = await core.replaceNamespacedPodStatus({ namespace: 'x', name: 'a',
    body: { ...viaMain, spec: { ...viaMain.spec!, nodeName: 'ignored' }, status: { phase: 'Running', podIP: '10.10.1.5', podIPs: [{ ip: '10.10.1.5' }] } } });
  t.equal(s1.status!.podIP, '10.10.1.5');
  t.equal(s1.spec!.nodeName, undefined, 'spec changes through /status are ignored');
  const s2 = await core.patchNamespacedPodStatus({ namespace: 'x', name: 'a', body: { status: { phase: 'Succeeded' } } }, merge);
  t.equal(s2.status!.phase, 'Succeeded');
  t.equal(s2.status!.podIP, '10.10.1.5', 'merge patch kept the rest of status');
  const patchedMain = await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { l: '1' } }, status: { phase: 'Failed' } } }, merge);
  t.equal(patchedMain.status!.phase, 'Succeeded', 'status in a main-resource patch is ignored');
  t.same(patchedMain.metadata!.labels, { l: '1' });
});

t.test('patch types: merge, strategic (as merge), JSON patch, and their errors', async (t) => {
  const { core, server } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  await core.createNamespacedPod({ namespace: 'x', body: pod('a', { labels: { a: '1', b: '2' } }) });
  const m = await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { a: null, c: '3' } } } }, merge);
  t.same(m.metadata!.labels, { b: '2', c: '3' }, 'merge patch: null deletes, new key added');
  const s = await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { d: '4' } } } }, strategic);
  t.same(s.metadata!.labels, { b: '2', c: '3', d: '4' });
  // client-node's default patch type is JSON patch
  const j = await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: [
    { op: 'test', path: '/metadata/labels/b', value: '2' },
    { op: 'remove', path: '/metadata/labels/b' },
    { op: 'add', path: '/metadata/labels/e', value: '5' },
    { op: 'replace', path: '/spec/containers/0/image', value: 'nginx' },
    { op: 'copy', from: '/metadata/labels/e', path: '/metadata/labels/f' },
    { op: 'move', from: '/metadata/labels/c', path: '/metadata/labels/g' },
  ] });
  t.same(j.metadata!.labels, { d: '4', e: '5', f: '5', g: '3' });
  t.equal(j.spec!.containers[0]!.image, 'nginx');
  t.equal(j.metadata!.generation, 2, 'image change bumped generation');
  const failedTest = await failureCode(core.patchNamespacedPod({ namespace: 'x', name: 'a', body: [{ op: 'test', path: '/metadata/labels/e', value: 'no' }, { op: 'remove', path: '/metadata/labels' }] }));
  t.equal(failedTest.code, 422);
  t.same((await core.readNamespacedPod({ namespace: 'x', name: 'a' })).metadata!.labels, { d: '4', e: '5', f: '5', g: '3' }, 'a failed JSON patch changes nothing');
  const stale = await failureCode(core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { resourceVersion: '1', labels: { z: '1' } } } }, merge));
  t.equal(stale.code, 409, 'a patch naming a stale resourceVersion conflicts');
  const missing = await failureCode(core.patchNamespacedPod({ namespace: 'x', name: 'nope', body: { metadata: { labels: { z: '1' } } } }, merge));
  t.equal(missing.code, 404);
  const unsupported = await fetch(`${server.url}/api/v1/namespaces/x/pods/a`, {
    method: 'PATCH', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/yaml' }, body: 'a: b',
  });
  t.equal(unsupported.status, 415);
  t.match(await unsupported.json(), { kind: 'Status', reason: 'UnsupportedMediaType' });
});

t.test('label and field selectors on lists', async (t) => {
  const { core } = await startLab(t);
  await core.createNamespace({ body: { metadata: { name: 'x' } } });
  await core.createNamespace({ body: { metadata: { name: 'y' } } });
  await core.createNamespacedPod({ namespace: 'x', body: pod('a', { labels: { app: 'web', tier: 'fe' }, nodeName: 'node-1' }) });
  await core.createNamespacedPod({ namespace: 'x', body: pod('b', { labels: { app: 'web', tier: 'be' }, nodeName: 'node-2' }) });
  await core.createNamespacedPod({ namespace: 'y', body: pod('c', { labels: { app: 'db' }, nodeName: 'node-1' }) });
  await core.createNamespacedPod({ namespace: 'y', body: pod('d', { nodeName: 'node-2' }) });
  const names = async (opts: { labelSelector?: string; fieldSelector?: string }) =>
    (await core.listPodForAllNamespaces(opts)).items.map((p) => `${p.metadata!.namespace}/${p.metadata!.name}`).sort();
  t.same(await names({ labelSelector: 'app=web' }), ['x/a', 'x/b']);
  t.same(await names({ labelSelector: 'app==web,tier!=fe' }), ['x/b']);
  t.same(await names({ labelSelector: 'app in (web, db)' }), ['x/a', 'x/b', 'y/c']);
  t.same(await names({ labelSelector: 'app notin (web)' }), ['y/c', 'y/d'], 'notin matches pods without the key');
  t.same(await names({ labelSelector: 'tier' }), ['x/a', 'x/b']);
  t.same(await names({ labelSelector: '!app' }), ['y/d']);
  t.same(await names({ labelSelector: 'app in (web,db),!tier' }), ['y/c']);
  t.same(await names({ fieldSelector: 'spec.nodeName=node-1' }), ['x/a', 'y/c']);
  t.same(await names({ fieldSelector: 'spec.nodeName!=node-1,metadata.namespace=y' }), ['y/d']);
  t.same(await names({ fieldSelector: 'metadata.name=b' }), ['x/b']);
  t.same(await names({ fieldSelector: 'status.phase=Pending', labelSelector: 'app=db' }), ['y/c']);
  t.same((await core.listNamespacedPod({ namespace: 'x', fieldSelector: 'spec.nodeName=node-1' })).items.map((p) => p.metadata!.name), ['a']);
  const badField = await failureCode(core.listPodForAllNamespaces({ fieldSelector: 'spec.hostname=x' }));
  t.match(badField, { code: 400, body: { reason: 'BadRequest', message: /field label not supported: spec\.hostname/ } });
  const badLabel = await failureCode(core.listPodForAllNamespaces({ labelSelector: 'app in (web' }));
  t.match(badLabel, { code: 400, body: { message: /unbalanced/ } });
  const nsField = await failureCode(core.listNamespace({ fieldSelector: 'spec.nodeName=node-1' }));
  t.equal(nsField.code, 400, 'spec.nodeName is a Pod field only');
});

t.test('namespaces: metadata.name label, default ServiceAccount, cascade delete', async (t) => {
  const { core, net } = await startLab(t);
  const ns = await core.createNamespace({ body: { metadata: { name: 'team', labels: { env: 'dev' } } } });
  t.same(ns.metadata!.labels, { env: 'dev', 'kubernetes.io/metadata.name': 'team' });
  t.equal(ns.status!.phase, 'Active');
  const relabel = await core.patchNamespace({ name: 'team', body: { metadata: { labels: { 'kubernetes.io/metadata.name': null, env: 'prod' } } } }, merge);
  t.same(relabel.metadata!.labels, { env: 'prod', 'kubernetes.io/metadata.name': 'team' }, 'the name label cannot be removed');
  t.same((await core.listNamespacedServiceAccount({ namespace: 'team' })).items.map((s) => s.metadata!.name), ['default']);
  const sysNs = (await core.listNamespace()).items.map((n) => n.metadata!.name);
  t.ok(sysNs.includes('default') && sysNs.includes('kube-system'), 'a fresh cluster has default and kube-system');

  await core.createNamespacedPod({ namespace: 'team', body: pod('p') });
  await core.createNamespacedService({ namespace: 'team', body: { metadata: { name: 's' }, spec: { ports: [{ port: 80 }] } } });
  await net.createNamespacedNetworkPolicy({ namespace: 'team', body: { metadata: { name: 'np' }, spec: { podSelector: {} } } });
  await core.createNamespace({ body: { metadata: { name: 'other' } } });
  await core.createNamespacedPod({ namespace: 'other', body: pod('q') });
  const gone = await core.deleteNamespace({ name: 'team' }) as k8s.V1Namespace;
  t.equal(gone.status?.phase, 'Terminating');
  t.equal((await failureCode(core.readNamespace({ name: 'team' }))).code, 404);
  t.same((await core.listPodForAllNamespaces()).items.map((p) => `${p.metadata!.namespace}/${p.metadata!.name}`), ['other/q']);
  t.same((await core.listServiceForAllNamespaces()).items, []);
  t.same((await net.listNetworkPolicyForAllNamespaces()).items, []);
  t.same((await core.listServiceAccountForAllNamespaces()).items.map((s) => s.metadata!.namespace).sort(),
    ['default', 'kube-node-lease', 'kube-public', 'kube-system', 'other']);
  t.equal((await failureCode(core.createNamespacedPod({ namespace: 'team', body: pod('p') }))).code, 404);
});

t.test('services: ClusterIP allocation, headless, requested and immutable IPs', async (t) => {
  const { core } = await startLab(t, { serviceCIDR: '10.100.0.0/29' });
  const svc = (name: string, spec: k8s.V1ServiceSpec = {}) => core.createNamespacedService({ namespace: 'default',
    body: { metadata: { name }, spec: { ports: [{ name: 'http', port: 80, targetPort: 'http' }], ...spec } } });
  const a = await svc('a');
  t.equal(a.spec!.clusterIP, '10.100.0.2');
  t.same(a.spec!.clusterIPs, ['10.100.0.2']);
  t.equal(a.spec!.type, 'ClusterIP');
  t.equal(a.spec!.ports![0]!.protocol, 'TCP');
  t.equal(a.spec!.ports![0]!.targetPort, 'http', 'a named targetPort is kept');
  const h = await svc('h', { clusterIP: 'None' });
  t.equal(h.spec!.clusterIP, 'None');
  t.same(h.spec!.clusterIPs, ['None']);
  const r = await svc('r', { clusterIP: '10.100.0.5' });
  t.equal(r.spec!.clusterIP, '10.100.0.5');
  t.match(await failureCode(svc('dup', { clusterIP: '10.100.0.5' })), { code: 422, body: { message: /already allocated/ } });
  t.match(await failureCode(svc('out', { clusterIP: '10.200.0.5' })), { code: 422, body: { message: /not in the valid range/ } });
  const b = await svc('b');
  t.equal(b.spec!.clusterIP, '10.100.0.3', 'the next free address');
  const c = await svc('c');
  t.equal(c.spec!.clusterIP, '10.100.0.4');
  await svc('d');
  t.match(await failureCode(svc('e')), { code: 500, body: { message: /range .* is full/ } }, 'a /29 holds .2-.6');
  // Updating without a clusterIP keeps it; changing it is refused.
  const kept = await core.replaceNamespacedService({ namespace: 'default', name: 'a', body: { metadata: { name: 'a' }, spec: { ports: [{ port: 81 }] } } });
  t.equal(kept.spec!.clusterIP, '10.100.0.2');
  t.equal((await failureCode(core.patchNamespacedService({ namespace: 'default', name: 'a', body: { spec: { clusterIP: '10.100.0.6' } } }, merge))).code, 422);
  await core.deleteNamespacedService({ namespace: 'default', name: 'b' });
  t.equal((await svc('f')).spec!.clusterIP, '10.100.0.3', 'a deleted Service frees its address');
});

t.test('services: dual-stack ClusterIPs from an IPv4 and an IPv6 range', async (t) => {
  const { core } = await startLab(t, { serviceCIDR: '10.100.0.0/29,fd00:96::/124' });
  const svc = (name: string, spec: k8s.V1ServiceSpec = {}) => core.createNamespacedService({ namespace: 'default',
    body: { metadata: { name }, spec: { ports: [{ port: 80 }], ...spec } } });
  const single = await svc('single');
  t.same([single.spec!.clusterIPs, single.spec!.ipFamilies, single.spec!.ipFamilyPolicy], [['10.100.0.2'], ['IPv4'], 'SingleStack'], 'the primary family by default');
  const dual = await svc('dual', { ipFamilyPolicy: 'PreferDualStack' });
  t.same([dual.spec!.clusterIP, dual.spec!.clusterIPs, dual.spec!.ipFamilies], ['10.100.0.3', ['10.100.0.3', 'fd00:96::2'], ['IPv4', 'IPv6']], 'PreferDualStack: one of each');
  const v6first = await svc('v6first', { ipFamilyPolicy: 'RequireDualStack', ipFamilies: ['IPv6', 'IPv4'] });
  t.same(v6first.spec!.clusterIPs, ['fd00:96::3', '10.100.0.4'], 'in the order of ipFamilies');
  const v6 = await svc('v6', { ipFamilies: ['IPv6'] });
  t.same([v6.spec!.clusterIPs, v6.spec!.ipFamilyPolicy], [['fd00:96::4'], 'SingleStack'], 'IPv6 alone');
  const asked = await svc('asked', { ipFamilyPolicy: 'RequireDualStack', clusterIPs: ['10.100.0.6', 'FD00:96:0::0a'] });
  t.same(asked.spec!.clusterIPs, ['10.100.0.6', 'fd00:96::a'], 'requested addresses, in canonical form');
  t.match(await failureCode(svc('dupv6', { clusterIPs: ['fd00:96::a'] })), { code: 422, body: { message: /already allocated/ } });
  t.match(await failureCode(svc('outv6', { clusterIPs: ['fd00:97::5'] })), { code: 422, body: { message: /not in the valid range.*fd00:96::\/124/ } });
  t.match(await failureCode(svc('two', { ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv4', 'IPv6'] })), { code: 422, body: { message: /SingleStack/ } });
  const kept = await core.replaceNamespacedService({ namespace: 'default', name: 'dual', body: { metadata: { name: 'dual' }, spec: { ports: [{ port: 81 }] } } });
  t.same([kept.spec!.clusterIPs, kept.spec!.ipFamilies, kept.spec!.ipFamilyPolicy], [['10.100.0.3', 'fd00:96::2'], ['IPv4', 'IPv6'], 'PreferDualStack'], 'an update keeps both');
  const { core: v4only } = await startLab(t, { serviceCIDR: '10.100.0.0/29' });
  const prefer = await v4only.createNamespacedService({ namespace: 'default', body: { metadata: { name: 'p' }, spec: { ports: [{ port: 80 }], ipFamilyPolicy: 'PreferDualStack' } } });
  t.same(prefer.spec!.clusterIPs, ['10.100.0.2'], 'PreferDualStack on a single-stack cluster: one address');
  t.match(await failureCode(v4only.createNamespacedService({ namespace: 'default', body: { metadata: { name: 'r' }, spec: { ports: [{ port: 80 }], ipFamilyPolicy: 'RequireDualStack' } } })), { code: 422, body: { message: /not configured for dual-stack/ } });
});

t.test('CRD-backed resources: served by default in both Antrea versions and the policy API groups', async (t) => {
  const { custom, server } = await startLab(t);
  const acnp = { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'deny-all' },
    spec: { priority: 5, tier: 'securityops', appliedTo: [{ podSelector: {} }], ingress: [{ action: 'Drop' }] } };
  const created = await custom.createClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies', body: acnp }) as Record<string, any>;
  t.equal(created.metadata.generation, 1);
  const asAlpha = await custom.getClusterCustomObject({ group: 'crd.antrea.io', version: 'v1alpha1', plural: 'clusternetworkpolicies', name: 'deny-all' }) as Record<string, any>;
  t.equal(asAlpha.apiVersion, 'crd.antrea.io/v1alpha1', 'same object through v1alpha1');
  t.equal(asAlpha.metadata.uid, created.metadata.uid);
  const anp = await custom.createNamespacedCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', namespace: 'default', plural: 'networkpolicies',
    body: { apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy', metadata: { name: 'n1' }, spec: { priority: 1 } } }) as Record<string, any>;
  t.equal(anp.metadata.namespace, 'default');
  const tier = await custom.createClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'tiers', body: { apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 't1' }, spec: { priority: 10 } } }) as Record<string, any>;
  t.equal(tier.kind, 'Tier');
  for (const [version, plural, kind] of <[string, string, string][]>[['v1alpha1', 'adminnetworkpolicies', 'AdminNetworkPolicy'], ['v1alpha1', 'baselineadminnetworkpolicies', 'BaselineAdminNetworkPolicy'], ['v1alpha2', 'clusternetworkpolicies', 'ClusterNetworkPolicy']]) {
    const o = await custom.createClusterCustomObject({ group: 'policy.networking.k8s.io', version, plural,
      body: { apiVersion: `policy.networking.k8s.io/${version}`, kind, metadata: { name: 'default' }, spec: { subject: { namespaces: {} } } } }) as Record<string, any>;
    t.equal(o.kind, kind);
    const list = await custom.listClusterCustomObject({ group: 'policy.networking.k8s.io', version, plural }) as Record<string, any>;
    t.same(list.items.map((i: any) => [i.kind, i.metadata.name]), [[kind, 'default']], `${plural} list`);
  }
  const wrongScope = await fetch(`${server.url}/apis/policy.networking.k8s.io/v1alpha2/adminnetworkpolicies`, { headers: { Authorization: `Bearer ${token}` } });
  t.equal(wrongScope.status, 404, 'adminnetworkpolicies is not served at v1alpha2');
  const cnpPatch = await custom.patchClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies', name: 'deny-all', body: { spec: { priority: 6 } } }, merge) as Record<string, any>;
  t.equal(cnpPatch.spec.priority, 6);
  t.equal(cnpPatch.metadata.generation, 2);
  await custom.deleteClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies', name: 'deny-all' });
  t.equal((await failureCode(custom.getClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies', name: 'deny-all' }))).code, 404);
});

t.test('installCRDs:false: 404 until the CRD exists, served after, gone (with its objects) when it is deleted', async (t) => {
  const { custom, kc } = await startLab(t, { installCRDs: false });
  const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
  const list = () => custom.listClusterCustomObject({ group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies' });
  t.equal((await failureCode(list())).code, 404);
  const apis = kc.makeApiClient(k8s.ApisApi);
  t.notOk((await apis.getAPIVersions()).groups.some((g) => g.name === 'policy.networking.k8s.io'), 'not in discovery yet');
  const bad = await failureCode(ext.createCustomResourceDefinition({ body: {
    metadata: { name: 'wrong.policy.networking.k8s.io' },
    spec: { group: 'policy.networking.k8s.io', scope: 'Cluster', names: { plural: 'adminnetworkpolicies', kind: 'AdminNetworkPolicy' }, versions: [{ name: 'v1alpha1', served: true, storage: true }] },
  } }));
  t.match(bad, { code: 422, body: { message: /metadata\.name/ } }, 'CRD name must be plural.group');
  t.same((bad.body.details as { causes: unknown }).causes, [{
    reason: 'FieldValueInvalid', field: 'metadata.name', message: 'Invalid value: "wrong.policy.networking.k8s.io": must be spec.names.plural+"."+spec.group',
  }], 'the cause names the field and keeps the whole message');
  const crd = await ext.createCustomResourceDefinition({ body: {
    metadata: { name: 'adminnetworkpolicies.policy.networking.k8s.io' },
    spec: { group: 'policy.networking.k8s.io', scope: 'Cluster', names: { plural: 'adminnetworkpolicies', kind: 'AdminNetworkPolicy' },
      versions: [{ name: 'v1alpha1', served: true, storage: true, subresources: { status: {} } }] },
  } });
  t.match(crd.status!.conditions, [{ type: 'NamesAccepted', status: 'True' }, { type: 'Established', status: 'True' }]);
  const badUpdate = await failureCode(ext.replaceCustomResourceDefinition({ name: crd.metadata!.name!, body: { ...crd, spec: { ...crd.spec, scope: 'Global' } } }));
  t.match(badUpdate, { code: 422, body: { message: /spec\.scope: Unsupported value/, details: { causes: [{ field: 'spec.scope', message: 'Unsupported value: must be "Namespaced" or "Cluster"' }] } } }, 'an update is checked as a create is');
  t.same(((await list()) as Record<string, any>).items, []);
  const group = (await apis.getAPIVersions()).groups.find((g) => g.name === 'policy.networking.k8s.io');
  t.same(group?.versions.map((v) => v.version), ['v1alpha1']);
  await custom.createClusterCustomObject({ group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies',
    body: { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'a' }, spec: { priority: 3 }, status: { conditions: [] } } });
  const a = await custom.getClusterCustomObject({ group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies', name: 'a' }) as Record<string, any>;
  t.equal(a.status, undefined, 'status is dropped on create when the CRD has a status subresource');
  t.equal((await failureCode(custom.listClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'tiers' }))).code, 404, 'other CRDs still absent');
  await ext.deleteCustomResourceDefinition({ name: 'adminnetworkpolicies.policy.networking.k8s.io' });
  t.equal((await failureCode(list())).code, 404, 'deleting the CRD stops serving it');
  await ext.createCustomResourceDefinition({ body: { ...crd, metadata: { name: crd.metadata!.name! } } });
  t.same(((await list()) as Record<string, any>).items, [], 'objects of a deleted CRD are gone');
});

t.test('discovery, version, health, auth and kubeconfig', async (t) => {
  const { server, kc, core } = await startLab(t);
  const raw = async (path: string, auth = true) => {
    const res = await fetch(server.url + path, { headers: auth ? { Authorization: `Bearer ${token}` } : {} });
    return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? await res.json() as any : await res.text() };
  };
  const v1 = await raw('/api/v1');
  t.equal(v1.body.kind, 'APIResourceList');
  const pods = v1.body.resources.find((r: any) => r.name === 'pods');
  t.match(pods, { namespaced: true, kind: 'Pod', verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'] });
  t.match(v1.body.resources.find((r: any) => r.name === 'nodes'), { namespaced: false, kind: 'Node' });
  t.ok(v1.body.resources.some((r: any) => r.name === 'pods/status'));
  t.same((await raw('/api')).body.versions, ['v1']);
  const groups = (await raw('/apis')).body.groups.map((g: any) => `${g.name}:${g.preferredVersion.version}`).sort();
  t.same(groups, [
    'apiextensions.k8s.io:v1', 'apiregistration.k8s.io:v1', 'apps:v1', 'authentication.k8s.io:v1', 'coordination.k8s.io:v1', 'crd.antrea.io:v1beta1', 'discovery.k8s.io:v1', 'events.k8s.io:v1', 'networking.k8s.io:v1',
    'policy.networking.k8s.io:v1alpha2', 'policy:v1', 'rbac.authorization.k8s.io:v1', 'scheduling.k8s.io:v1',
  ]);
  const antrea = (await raw('/apis/crd.antrea.io/v1beta1')).body.resources.filter((r: any) => !r.name.includes('/'));
  t.same(antrea.map((r: any) => `${r.name}:${r.namespaced}:${r.kind}`).sort(), [
    'clustergroups:false:ClusterGroup', 'clusternetworkpolicies:false:ClusterNetworkPolicy', 'groups:true:Group',
    'networkpolicies:true:NetworkPolicy', 'tiers:false:Tier']);
  t.same((await raw('/apis/discovery.k8s.io/v1')).body.resources.map((r: any) => r.name), ['endpointslices']);
  t.equal((await raw('/apis/nope.io/v1')).status, 404);
  t.match((await raw('/version', false)).body, { major: '1', gitVersion: /^v1\./ });
  t.equal((await raw('/healthz', false)).body, 'ok');
  t.equal((await raw('/readyz', false)).status, 200);
  const unauth = await raw('/api/v1/pods', false);
  t.match(unauth, { status: 401, body: { kind: 'Status', code: 401, reason: 'Unauthorized' } });
  const wrongToken = kubeConfigFor(server.url, 'nope').makeApiClient(k8s.CoreV1Api);
  t.equal((await failureCode(wrongToken.listNamespace())).code, 401);
  t.equal((await raw('/api/v1/bogus')).status, 404);

  // KubernetesObjectApi resolves kinds through discovery, like kubectl.
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  await objects.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1', labels: { 'kubernetes.io/hostname': 'node-1' } } });
  await objects.create({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'web-1', namespace: 'default', labels: { 'kubernetes.io/service-name': 'web' } }, addressType: 'IPv4', endpoints: [] } as k8s.KubernetesObject);
  t.equal((await core.readNode({ name: 'node-1' })).metadata!.labels!['kubernetes.io/hostname'], 'node-1');

  // An ordinary kubeconfig file loads and works.
  const fromFile = new k8s.KubeConfig();
  fromFile.loadFromString(kubeconfigYaml(server.url, token));
  t.equal(fromFile.getCurrentCluster()!.server, server.url);
  t.same((await fromFile.makeApiClient(k8s.DiscoveryV1Api).listEndpointSliceForAllNamespaces()).items.map((e) => e.metadata!.name), ['web-1']);
});

t.test('unix socket listener', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const http = await import('node:http');
  const dir = mkdtempSync(`${tmpdir()}/apiserver-sock-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const socketPath = `${dir}/api.sock`;
  const { core } = await startLab(t, { unixSocket: socketPath });
  await core.createNamespace({ body: { metadata: { name: 'via-tcp' } } });
  const body = await new Promise<string>((resolve, reject) => {
    http.get({ socketPath, path: '/api/v1/namespaces/via-tcp', headers: { Authorization: `Bearer ${token}` } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
  t.equal(JSON.parse(body).metadata.name, 'via-tcp', 'the same storage is served on the socket');
});

t.test('YAML bodies, and start-up failures that name the problem', async (t) => {
  const { server } = await startLab(t);
  const res = await fetch(`${server.url}/api/v1/namespaces`, {
    method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/yaml' },
    body: 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: from-yaml\n',
  });
  t.equal(res.status, 201);
  t.match(await res.json(), { kind: 'Namespace', metadata: { name: 'from-yaml' } });
  const bad = await fetch(`${server.url}/api/v1/namespaces`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: '{nope' });
  t.match({ status: bad.status, body: await bad.json() }, { status: 400, body: { reason: 'BadRequest', message: /not valid JSON/ } });

  const { startApiServer } = await import('../../lab/apiserver/server.js');
  await t.rejects(startApiServer({ port: server.port }), /cannot listen on 127\.0\.0\.1:[0-9]+.*EADDRINUSE/);
  await t.rejects(startApiServer({ dataFile: '/nonexistent-dir/state.json' }), /cannot write API server data file \/nonexistent-dir\/state\.json/);
  await t.rejects(startApiServer({ serviceCIDR: '10.0.0.0' }), /serviceCIDR "10\.0\.0\.0"/);
});
