// List/watch of the lab API server driven by @kubernetes/client-node 1.4.0 informers, the way the
// agent watches: event delivery, selectors on watches, resume, 410 Gone, dropped connections,
// server restarts with a data file, bookmarks and timeouts.
import * as k8s from '@kubernetes/client-node';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import t from 'tap';
import { startApiServer } from '../../lab/apiserver/server.js';
import { kubeConfigFor, pod, rawWatch, Recorder, startLab, token, type Lab } from './apiserver-helpers.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
type Teardown = { teardown(fn: () => unknown): void };

/** A Pod informer over all namespaces, optionally narrowed by a field selector (ListWatch, as the agent does). */
function podInformer(t: Teardown, lab: Pick<Lab, 'kc' | 'core'>, opts: { fieldSelector?: string; labelSelector?: string } = {}) {
  let lists = 0;
  const informer = new k8s.ListWatch<k8s.V1Pod>('/api/v1/pods', new k8s.Watch(lab.kc), () => {
    lists++;
    return lab.core.listPodForAllNamespaces(opts);
  }, false, opts.labelSelector, opts.fieldSelector);
  const rec = new Recorder(informer);
  t.teardown(() => rec.stop());
  return { rec, lists: () => lists };
}

async function namespaces(core: k8s.CoreV1Api, ...names: string[]) {
  for (const name of names) await core.createNamespace({ body: { metadata: { name } } });
}

t.test('informer sees add, update and delete with increasing resourceVersions', async (t) => {
  const lab = await startLab(t);
  const { core } = lab;
  await namespaces(core, 'x');
  await core.createNamespacedPod({ namespace: 'x', body: pod('before') });
  const { rec } = podInformer(t, lab);
  await rec.start();
  t.same(rec.log(), ['add x/before'], 'the initial list');
  await core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { v: '2' } } } }, merge);
  await core.replaceNamespacedPodStatus({ namespace: 'x', name: 'a', body: { metadata: { name: 'a' }, status: { phase: 'Running', podIP: '10.1.0.5' } } });
  await core.deleteNamespacedPod({ namespace: 'x', name: 'a' });
  await rec.until(() => rec.seen.length === 5, '5 events');
  t.same(rec.log(), ['add x/before', 'add x/a', 'update x/a', 'update x/a', 'delete x/a']);
  const rvs = rec.seen.map((s) => Number(s.rv));
  t.same([...rvs].sort((a, b) => a - b), rvs, 'resourceVersions increase');
  t.same(rec.seen[2]!.obj.metadata!.labels, { v: '2' });
  t.equal((rec.seen[3]!.obj as k8s.V1Pod).status!.podIP, '10.1.0.5');
  t.same(rec.cacheKeys(), ['x/before']);
  t.equal(rec.errors, 0);
});

t.test('fieldSelector spec.nodeName=node-1: list and watch, Pods moving in and out', async (t) => {
  const lab = await startLab(t);
  const { core } = lab;
  await namespaces(core, 'x');
  await core.createNamespacedPod({ namespace: 'x', body: pod('on1', { nodeName: 'node-1' }) });
  await core.createNamespacedPod({ namespace: 'x', body: pod('on2', { nodeName: 'node-2' }) });
  const { rec } = podInformer(t, lab, { fieldSelector: 'spec.nodeName=node-1' });
  await rec.start();
  t.same(rec.log(), ['add x/on1']);
  await core.createNamespacedPod({ namespace: 'x', body: pod('new2', { nodeName: 'node-2' }) });
  await core.patchNamespacedPod({ namespace: 'x', name: 'on2', body: { metadata: { labels: { touched: 'yes' } } } }, merge);
  await core.createNamespacedPod({ namespace: 'x', body: pod('new1', { nodeName: 'node-1' }) });
  await core.patchNamespacedPod({ namespace: 'x', name: 'on2', body: { spec: { nodeName: 'node-1' } } }, merge);
  await core.patchNamespacedPod({ namespace: 'x', name: 'on1', body: { spec: { nodeName: 'node-2' } } }, merge);
  await core.deleteNamespacedPod({ namespace: 'x', name: 'new2' });
  await core.deleteNamespacedPod({ namespace: 'x', name: 'new1' });
  await rec.until(() => rec.seen.length === 5, '5 events');
  t.same(rec.log(), ['add x/on1', 'add x/new1', 'add x/on2', 'delete x/on1', 'delete x/new1'],
    'node-2 Pods are never seen; moving in is add, moving out is delete');
  t.equal((rec.seen[2]!.obj as k8s.V1Pod).spec!.nodeName, 'node-1');
  t.same(rec.cacheKeys(), ['x/on2']);
});

t.test('labelSelector on an informer (makeInformer)', async (t) => {
  const lab = await startLab(t);
  const { core, kc } = lab;
  await namespaces(core, 'x');
  await core.createNamespacedPod({ namespace: 'x', body: pod('web', { labels: { app: 'web' } }) });
  await core.createNamespacedPod({ namespace: 'x', body: pod('db', { labels: { app: 'db' } }) });
  const informer = k8s.makeInformer<k8s.V1Pod>(kc, '/api/v1/namespaces/x/pods', () => core.listNamespacedPod({ namespace: 'x', labelSelector: 'app in (web,api)' }), 'app in (web,api)');
  const rec = new Recorder(informer);
  t.teardown(() => rec.stop());
  await rec.start();
  await core.patchNamespacedPod({ namespace: 'x', name: 'db', body: { metadata: { labels: { app: 'api' } } } }, merge);
  await core.patchNamespacedPod({ namespace: 'x', name: 'db', body: { metadata: { labels: { app: 'api', v: '2' } } } }, merge);
  await core.patchNamespacedPod({ namespace: 'x', name: 'web', body: { metadata: { labels: { app: null } } } }, merge);
  await rec.until(() => rec.seen.length === 4, '4 events');
  t.same(rec.log(), ['add x/web', 'add x/db', 'update x/db', 'delete x/web']);
  t.same(rec.cacheKeys(), ['x/db']);
});

t.test('raw watch: resume from a resourceVersion, RV 0 start, selector transitions, namespace scope', async (t) => {
  const lab = await startLab(t);
  const { core, server } = lab;
  await namespaces(core, 'x', 'y');
  const a = await core.createNamespacedPod({ namespace: 'x', body: pod('a', { labels: { app: 'web' } }) });
  const from = a.metadata!.resourceVersion!;
  await core.createNamespacedPod({ namespace: 'y', body: pod('b', { labels: { app: 'web' } }) });
  await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { app: 'db' } } } }, merge);
  await core.createNamespacedService({ namespace: 'x', body: { metadata: { name: 'not-a-pod' }, spec: { ports: [{ port: 1 }] } } });
  await core.deleteNamespacedPod({ namespace: 'y', name: 'b' });
  const watch = (path: string, n: number) => rawWatch(server.url, path, n);

  // Each stream ends after timeoutSeconds, so nothing beyond the expected events can hide; run them together.
  const [resumed, selected, leaving, fresh, noRv] = await Promise.all([
    watch(`/api/v1/pods?watch=1&resourceVersion=${from}&timeoutSeconds=1`, 10),
    watch(`/api/v1/pods?watch=true&resourceVersion=${from}&labelSelector=app%3Dweb&timeoutSeconds=1`, 10),
    watch(`/api/v1/namespaces/x/pods?watch=true&resourceVersion=${from}&labelSelector=app%3Dweb&timeoutSeconds=1`, 10),
    watch('/api/v1/namespaces/x/pods?watch=1&resourceVersion=0&timeoutSeconds=1', 10),
    watch('/api/v1/namespaces?watch=1&timeoutSeconds=1', 20),
  ]);
  t.same(resumed.lines.map((l) => `${l.type} ${l.object.metadata.namespace}/${l.object.metadata.name}`),
    ['ADDED y/b', 'MODIFIED x/a', 'DELETED y/b'], 'exactly the Pod events after the RV');
  t.ok(resumed.lines.every((l) => l.object.kind === 'Pod' && l.object.apiVersion === 'v1'));
  const rvs = resumed.lines.map((l) => Number(l.object.metadata.resourceVersion));
  t.ok(rvs.every((rv, i) => rv > Number(from) && (i === 0 || rv > rvs[i - 1]!)), `RVs ${rvs} after ${from}`);

  t.same(selected.lines.map((l) => `${l.type} ${l.object.metadata.name}`), ['ADDED b', 'DELETED a', 'DELETED b'], 'through a label selector');
  t.same(leaving.lines.map((l) => `${l.type} ${l.object.metadata.name}`), ['DELETED a'], 'a Pod leaving the selection is DELETED');
  t.same(leaving.lines[0]!.object.metadata.labels, { app: 'web' }, 'with its last matching state');
  t.equal(leaving.lines[0]!.object.metadata.resourceVersion, resumed.lines[1]!.object.metadata.resourceVersion, 'at the RV of the change');

  t.same(fresh.lines.map((l) => `${l.type} ${l.object.metadata.name}`), ['ADDED a'], 'RV 0 starts with the current objects');
  t.same(noRv.lines.map((l) => `${l.type} ${l.object.metadata.name}`).sort(),
    ['ADDED default', 'ADDED kube-node-lease', 'ADDED kube-public', 'ADDED kube-system', 'ADDED x', 'ADDED y']);
  const bad = await watch('/api/v1/pods?watch=1&resourceVersion=abc', 1);
  t.equal(bad.status, 400);
});

t.test('watch events for CRD objects carry the version watched', async (t) => {
  const lab = await startLab(t);
  const { custom, server } = lab;
  const list = await custom.listClusterCustomObject({ group: 'crd.antrea.io', version: 'v1alpha1', plural: 'clusternetworkpolicies' }) as { metadata: { resourceVersion: string } };
  await custom.createClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies',
    body: { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'p' }, spec: { priority: 1 } } });
  const [alpha, beta, anp] = <Awaited<ReturnType<typeof rawWatch>>[]>await Promise.all([
    ...['v1alpha1', 'v1beta1'].map((version) => rawWatch(server.url, `/apis/crd.antrea.io/${version}/clusternetworkpolicies?watch=1&resourceVersion=${list.metadata.resourceVersion}&timeoutSeconds=1`, 5)),
    rawWatch(server.url, `/apis/crd.antrea.io/v1beta1/networkpolicies?watch=1&resourceVersion=${list.metadata.resourceVersion}&timeoutSeconds=1`, 5),
  ]);
  for (const [version, w] of [['v1alpha1', alpha], ['v1beta1', beta]] as const) {
    t.same(w!.lines.map((l) => [l.type, l.object.apiVersion, l.object.kind, l.object.metadata.name]), [['ADDED', `crd.antrea.io/${version}`, 'ClusterNetworkPolicy', 'p']]);
  }
  t.same(anp!.lines, [], 'the Antrea NetworkPolicy resource is separate from ClusterNetworkPolicy');
});

t.test('410 Gone after compact(): HTTP 410, and an informer relists and converges', async (t) => {
  const lab = await startLab(t);
  const { core, server } = lab;
  await namespaces(core, 'x');
  for (const n of ['keep', 'gone', 'changed']) await core.createNamespacedPod({ namespace: 'x', body: pod(n) });
  const { rec, lists } = podInformer(t, lab);
  await rec.start();
  t.same(rec.log(), ['add x/changed', 'add x/gone', 'add x/keep']);
  const seenRv = (await core.listPodForAllNamespaces()).metadata!.resourceVersion!;
  await rec.stop();
  const stopped = rec.seen.length;
  const errorsAtStop = rec.errors; // client-node reports its own abort on stop() as an error

  await core.deleteNamespacedPod({ namespace: 'x', name: 'gone' });
  await core.patchNamespacedPod({ namespace: 'x', name: 'changed', body: { metadata: { labels: { v: '2' } } } }, merge);
  await core.createNamespacedPod({ namespace: 'x', body: pod('added') });
  server.compact();

  const expired = await rawWatch(server.url, `/api/v1/pods?watch=1&resourceVersion=${seenRv}`, 1);
  t.equal(expired.status, 410);
  t.match(expired.lines[0]!.object, { kind: 'Status', status: 'Failure', code: 410, reason: 'Expired', message: /too old resource version/ });
  const current = (await core.listPodForAllNamespaces()).metadata!.resourceVersion!;
  const ok = await rawWatch(server.url, `/api/v1/pods?watch=1&resourceVersion=${current}&timeoutSeconds=1`, 1);
  t.equal(ok.status, 200, 'the current RV is still watchable after compaction');

  await rec.start();
  await rec.until(() => rec.cacheKeys().join() === 'x/added,x/changed,x/keep' && rec.seen.length >= stopped + 3, 'convergence');
  t.equal(lists(), 2, 'it relisted once');
  t.same(rec.log().slice(stopped).sort(), ['add x/added', 'delete x/gone', 'update x/changed'], 'the deleted Pod produced delete');
  t.same(rec.informer.get('changed', 'x')!.metadata!.labels, { v: '2' });
  t.equal(rec.errors, errorsAtStop, '410 is handled inside the informer, no error');
});

t.test('expiredWatch:event sends an in-stream ERROR 410 and the informer relists', async (t) => {
  const lab = await startLab(t, { expiredWatch: 'event' });
  const { core, server } = lab;
  await namespaces(core, 'x');
  await core.createNamespacedPod({ namespace: 'x', body: pod('gone') });
  const rv = (await core.listPodForAllNamespaces()).metadata!.resourceVersion!;
  const { rec, lists } = podInformer(t, lab);
  await rec.start();
  await rec.stop();
  await core.deleteNamespacedPod({ namespace: 'x', name: 'gone' });
  await core.createNamespacedPod({ namespace: 'x', body: pod('new') });
  server.compact();
  const raw = await rawWatch(server.url, `/api/v1/pods?watch=1&resourceVersion=${rv}`, 5);
  t.equal(raw.status, 200);
  t.same(raw.lines.map((l) => [l.type, l.object.code, l.object.reason]), [['ERROR', 410, 'Expired']], 'one ERROR event, then the stream ends');
  await rec.start();
  await rec.until(() => rec.cacheKeys().join() === 'x/new', 'convergence');
  t.same(rec.log(), ['add x/gone', 'delete x/gone', 'add x/new']);
  t.equal(lists(), 2);
});

t.test('dropWatches(): an informer restarted from its error handler resumes without losing events', async (t) => {
  const lab = await startLab(t);
  const { core, server } = lab;
  await namespaces(core, 'x');
  await core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  await core.createNamespacedPod({ namespace: 'x', body: pod('b') });
  let lists = 0;
  const informer = new k8s.ListWatch<k8s.V1Pod>('/api/v1/pods', new k8s.Watch(lab.kc), () => {
    lists++;
    return core.listPodForAllNamespaces();
  }, false);
  const rec = new Recorder(informer, 300); // restart late enough for writes to land in the gap
  t.teardown(() => rec.stop());
  await rec.start(); // resolves once the watch response has started, so the server holds it
  server.dropWatches();
  await rec.until(() => rec.errors === 1, 'the error from the dropped connection');
  await core.createNamespacedPod({ namespace: 'x', body: pod('c') });
  await core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { v: '2' } } } }, merge);
  await core.deleteNamespacedPod({ namespace: 'x', name: 'b' });
  await rec.until(() => rec.seen.length === 5, 'the gap events');
  t.same(rec.log(), ['add x/a', 'add x/b', 'add x/c', 'update x/a', 'delete x/b'], 'every change in the gap, in order, once');
  t.equal(lists, 1, 'resumed from the last RV, no relist');
  t.same(rec.cacheKeys(), ['x/a', 'x/c']);
  await core.createNamespacedPod({ namespace: 'x', body: pod('d') });
  await rec.until(() => rec.seen.length === 6, 'a later event');
  t.same(rec.log().slice(5), ['add x/d'], 'the restarted watch is live');
});

t.test('server restart with a data file keeps objects and RVs; informers resume or relist and converge', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/apiserver-data-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const dataFile = `${dir}/state.json`;
  const first = await startApiServer({ token, dataFile });
  let second: Awaited<ReturnType<typeof startApiServer>> | undefined;
  t.teardown(async () => {
    await second?.close();
  });
  const kc = kubeConfigFor(first.url);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await namespaces(core, 'x');
  const a = await core.createNamespacedPod({ namespace: 'x', body: pod('a', { nodeName: 'node-1' }) });
  await core.createNamespacedPod({ namespace: 'x', body: pod('b') });
  const svc = await core.createNamespacedService({ namespace: 'x', body: { metadata: { name: 's' }, spec: { ports: [{ port: 80 }] } } });

  const live = podInformer(t, { kc, core });
  const lagging = podInformer(t, { kc, core });
  await live.rec.start();
  await lagging.rec.start();
  await lagging.rec.stop(); // misses what follows, so its RV becomes too old across the restart
  await core.deleteNamespacedPod({ namespace: 'x', name: 'b' });
  await live.rec.until(() => live.rec.seen.length === 3, 'delete of b');
  const before = (await core.listPodForAllNamespaces()).metadata!.resourceVersion!;

  await first.close();
  second = await startApiServer({ token, dataFile, port: first.port });
  const afterList = await core.listPodForAllNamespaces();
  t.equal(afterList.metadata!.resourceVersion, before, 'the resourceVersion survives the restart');
  const a2 = await core.readNamespacedPod({ namespace: 'x', name: 'a' });
  t.equal(a2.metadata!.uid, a.metadata!.uid);
  t.equal(a2.metadata!.resourceVersion, a.metadata!.resourceVersion);
  t.equal((await core.readNamespacedService({ namespace: 'x', name: 's' })).spec!.clusterIP, svc.spec!.clusterIP);
  t.same((await core.listNamespace()).items.map((n) => n.metadata!.name).filter((n) => n === 'x'), ['x'], 'no duplicate seeds');

  const c = await core.createNamespacedPod({ namespace: 'x', body: pod('c') });
  t.ok(Number(c.metadata!.resourceVersion) > Number(before), 'new writes continue above the old RVs');
  await live.rec.until(() => live.rec.log().includes('add x/c'), 'the live informer resuming on the new server');
  t.same(live.rec.log(), ['add x/a', 'add x/b', 'delete x/b', 'add x/c']);
  t.equal(live.lists(), 1, 'it resumed from its RV without relisting');

  await lagging.rec.start(); // its RV predates the restart: 410, relist
  await lagging.rec.until(() => lagging.rec.cacheKeys().join() === 'x/a,x/c', 'convergence after relist');
  t.same(lagging.rec.log(), ['add x/a', 'add x/b', 'delete x/b', 'add x/c']);
  t.equal(lagging.lists(), 2);
});

t.test('bookmarks, timeoutSeconds and close() end streams cleanly', async (t) => {
  const lab = await startLab(t, { bookmarkIntervalMs: 100 });
  const { core, server } = lab;
  await namespaces(core, 'x');
  const rv = (await core.listNamespacedPod({ namespace: 'x' })).metadata!.resourceVersion!;
  const w = await rawWatch(server.url, `/api/v1/namespaces/x/pods?watch=1&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=1`, 1000);
  const bookmarks = w.lines.filter((l) => l.type === 'BOOKMARK');
  t.ok(bookmarks.length >= 2, `periodic bookmarks (${bookmarks.length})`);
  t.same(Object.keys(bookmarks[0]!.object.metadata), ['resourceVersion'], 'a bookmark carries only metadata.resourceVersion');
  t.match(bookmarks[0]!.object, { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: rv } });
  t.ok(w.lines.length < 1000, 'the stream ended by itself after timeoutSeconds');
  const plain = await rawWatch(server.url, `/api/v1/namespaces/x/pods?watch=1&resourceVersion=${rv}&timeoutSeconds=1`, 1000);
  t.same(plain.lines, [], 'no bookmarks unless allowed');

  await core.createNamespacedPod({ namespace: 'x', body: pod('p') });
  const res = await fetch(`${server.url}/api/v1/namespaces/x/pods?watch=1&resourceVersion=${rv}`, { headers: { Authorization: `Bearer ${token}` } });
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('\n')) text += new TextDecoder().decode((await reader.read()).value);
  t.match(JSON.parse(text), { type: 'ADDED', object: { metadata: { name: 'p' } } }, 'the replayed event');
  await server.close();
  let rest = await reader.read();
  while (!rest.done) rest = await reader.read(); // would throw if the stream were cut instead of ended
  t.ok(rest.done, 'close() ended the open watch cleanly');
});

t.test('namespace deletion is seen as Pod deletes and a namespace update then delete', async (t) => {
  const lab = await startLab(t);
  const { core, kc } = lab;
  await namespaces(core, 'gone', 'stay');
  await core.createNamespacedPod({ namespace: 'gone', body: pod('p1') });
  await core.createNamespacedPod({ namespace: 'gone', body: pod('p2') });
  await core.createNamespacedPod({ namespace: 'stay', body: pod('p3') });
  const pods = podInformer(t, lab);
  const nsInformer = k8s.makeInformer<k8s.V1Namespace>(kc, '/api/v1/namespaces', () => core.listNamespace({ labelSelector: 'kubernetes.io/metadata.name in (gone,stay)' }), 'kubernetes.io/metadata.name in (gone,stay)');
  const ns = new Recorder(nsInformer);
  t.teardown(() => ns.stop());
  await pods.rec.start();
  await ns.start();
  await core.deleteNamespace({ name: 'gone' });
  await pods.rec.until(() => pods.rec.seen.length === 5, 'pod deletes');
  await ns.until(() => ns.seen.length === 4, 'namespace events');
  t.same(pods.rec.log().slice(3).sort(), ['delete gone/p1', 'delete gone/p2']);
  t.same(ns.log(), ['add gone', 'add stay', 'update gone', 'delete gone']);
  t.equal((ns.seen[2]!.obj as k8s.V1Namespace).status!.phase, 'Terminating');
  t.same(pods.rec.cacheKeys(), ['stay/p3']);
});

t.test('installCRDs:false: an informer on a CRD resource errors until the CRD exists, then works', async (t) => {
  const lab = await startLab(t, { installCRDs: false });
  const { kc, custom } = lab;
  const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
  type Obj = k8s.KubernetesObject;
  const informer = k8s.makeInformer<Obj>(kc, '/apis/crd.antrea.io/v1beta1/tiers',
    () => custom.listClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'tiers' }) as Promise<k8s.KubernetesListObject<Obj>>);
  const rec = new Recorder(informer, 100);
  t.teardown(() => rec.stop());
  void rec.start();
  await rec.until(() => rec.errors >= 1, 'a 404 error');
  t.equal((rec.lastError as { code?: number }).code, 404);
  await ext.createCustomResourceDefinition({ body: {
    metadata: { name: 'tiers.crd.antrea.io' },
    spec: { group: 'crd.antrea.io', scope: 'Cluster', names: { plural: 'tiers', kind: 'Tier' }, versions: [{ name: 'v1beta1', served: true, storage: true }] },
  } });
  await custom.createClusterCustomObject({ group: 'crd.antrea.io', version: 'v1beta1', plural: 'tiers',
    body: { apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'emergency' }, spec: { priority: 50 } } });
  await rec.until(() => rec.cacheKeys().join() === 'emergency', 'the Tier in the cache');
  t.same(rec.log(), ['add emergency']);

  // Deleting the CRD deletes its objects (seen by the informer) and ends the watch; re-watching gets 404.
  const errorsBefore = rec.errors;
  await ext.deleteCustomResourceDefinition({ name: 'tiers.crd.antrea.io' });
  await rec.until(() => rec.errors > errorsBefore, 'the informer failing once the resource is gone');
  t.same(rec.log(), ['add emergency', 'delete emergency']);
  t.equal((rec.lastError as { statusCode?: number }).statusCode, 404, 'the re-watch answered 404');
});
