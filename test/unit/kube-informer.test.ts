/**
 * daemon/kube Informer against the lab API server's real list/watch protocol: events in order,
 * resume after a cut watch without a relist, 410 Gone (HTTP and in-stream) relists and reports what
 * went missing as deleted, a resource that is not served fails with its 404, stop() ends it.
 */
import t, { type Test } from 'tap';
import * as k8s from '@kubernetes/client-node';
import { KubeAccess } from '../../daemon/kube/access.js';
import { Informer, type ListedObject } from '../../daemon/kube/informer.js';
import { type Lab, pod, startLab, token } from './apiserver-helpers.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

function accessFor(lab: Lab): KubeAccess {
  return KubeAccess.fromKubeconfigObject(
    {
      clusters: [{ name: 'lab', cluster: { server: lab.server.url } }],
      users: [{ name: 'u', user: { token } }],
      contexts: [{ name: 'lab', context: { cluster: 'lab', user: 'u' } }],
      'current-context': 'lab',
    },
    '/',
  );
}

/** An informer on /api/v1/pods with its events as "verb ns/name", its lists and its errors. */
function podInformer(t: Test, lab: Lab, path = '/api/v1/pods') {
  const access = accessFor(lab);
  let lists = 0;
  const informer = new Informer<ListedObject>(access, {
    path,
    list: async () => {
      lists++;
      return (await access.getJson(path)) as { items: ListedObject[]; metadata?: { resourceVersion?: string } };
    },
  });
  const seen: string[] = [];
  const errors: unknown[] = [];
  const k = (o: ListedObject) => `${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`;
  informer.on('add', (o) => seen.push(`add ${k(o)}`));
  informer.on('update', (o) => seen.push(`update ${k(o)}`));
  informer.on('delete', (o) => seen.push(`delete ${k(o)}`));
  informer.on('error', (e) => errors.push(e));
  t.teardown(() => informer.stop());
  const until = async (pred: () => boolean, what: string) => {
    const end = Date.now() + 10_000;
    while (!pred()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; seen ${JSON.stringify(seen)}, errors ${errors.map(String)}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const keys = () => informer.list().map(k).sort();
  return { informer, seen, errors, lists: () => lists, until, keys };
}

async function namespaces(core: k8s.CoreV1Api, ...names: string[]): Promise<void> {
  for (const name of names) await core.createNamespace({ body: { metadata: { name } } });
}

t.test('list, then add, update and delete from the watch, in order', async (t) => {
  const lab = await startLab(t);
  await namespaces(lab.core, 'x');
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  const i = podInformer(t, lab);
  await i.informer.start();
  t.same(i.seen, ['add x/a'], 'the list');
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('b') });
  await lab.core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { v: '2' } } } }, merge);
  await lab.core.deleteNamespacedPod({ namespace: 'x', name: 'b' });
  await i.until(() => i.seen.length === 4, 'the watch events');
  t.same(i.seen, ['add x/a', 'add x/b', 'update x/a', 'delete x/b']);
  t.same((i.informer.get('a', 'x') as { metadata: { labels?: unknown } }).metadata.labels, { v: '2' }, 'the cache holds the updated object');
  t.same(i.keys(), ['x/a']);
  t.equal(i.lists(), 1);
  t.same(i.errors, []);
});

t.test('a cut watch is an error; start() resumes from the last resourceVersion without a relist or a lost event', async (t) => {
  const lab = await startLab(t);
  await namespaces(lab.core, 'x');
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('a') });
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('b') });
  const i = podInformer(t, lab);
  await i.informer.start();
  await new Promise((r) => setTimeout(r, 50)); // the watch request reaches the server
  lab.server.dropWatches();
  await i.until(() => i.errors.length === 1, 'the error of the cut watch');
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('c') });
  await lab.core.patchNamespacedPod({ namespace: 'x', name: 'a', body: { metadata: { labels: { v: '2' } } } }, merge);
  await lab.core.deleteNamespacedPod({ namespace: 'x', name: 'b' });
  await i.informer.start();
  await i.until(() => i.seen.length === 5, 'the events of the gap');
  t.same(i.seen, ['add x/a', 'add x/b', 'add x/c', 'update x/a', 'delete x/b'], 'every change in the gap, in order, once');
  t.equal(i.lists(), 1, 'resumed, not relisted');
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('d') });
  await i.until(() => i.seen.length === 6, 'a later event');
  t.same(i.keys(), ['x/a', 'x/c', 'x/d'], 'the resumed watch is live');
});

for (const expiredWatch of ['http', 'event'] as const) {
  t.test(`410 Gone (${expiredWatch === 'http' ? 'HTTP status' : 'in-stream ERROR event'}): one relist, what went missing is deleted`, async (t) => {
    const lab = await startLab(t, { expiredWatch });
    await namespaces(lab.core, 'x');
    for (const n of ['keep', 'gone', 'changed']) await lab.core.createNamespacedPod({ namespace: 'x', body: pod(n) });
    const i = podInformer(t, lab);
    await i.informer.start();
    await new Promise((r) => setTimeout(r, 50));
    lab.server.dropWatches();
    await i.until(() => i.errors.length === 1, 'the cut watch');
    await lab.core.deleteNamespacedPod({ namespace: 'x', name: 'gone' });
    await lab.core.patchNamespacedPod({ namespace: 'x', name: 'changed', body: { metadata: { labels: { v: '2' } } } }, merge);
    await lab.core.createNamespacedPod({ namespace: 'x', body: pod('added') });
    lab.server.compact();
    const before = i.seen.length;
    await i.informer.start();
    await i.until(() => i.keys().join() === 'x/added,x/changed,x/keep', 'convergence');
    t.equal(i.lists(), 2, 'relisted once');
    t.same(i.seen.slice(before).filter((s) => !s.startsWith('update x/keep')).sort(), ['add x/added', 'delete x/gone', 'update x/changed']);
    t.equal(i.errors.length, 1, '410 is handled inside the informer: no second error');
  });
}

t.test('a resource that is not served fails with its 404; stop() ends the informer', async (t) => {
  const lab = await startLab(t, { installCRDs: false });
  const i = podInformer(t, lab, '/apis/crd.antrea.io/v1beta1/tiers');
  await i.informer.start();
  t.equal(i.errors.length, 1);
  t.equal((i.errors[0] as { statusCode?: number }).statusCode, 404, 'the list answered 404');
  t.match(String(i.errors[0]), /GET \/apis\/crd\.antrea\.io\/v1beta1\/tiers: HTTP 404/, 'the error names the request');

  const pods = podInformer(t, lab);
  await namespaces(lab.core, 'x');
  await pods.informer.start();
  await pods.informer.stop();
  await lab.core.createNamespacedPod({ namespace: 'x', body: pod('after-stop') });
  await new Promise((r) => setTimeout(r, 200));
  t.same(pods.seen, [], 'no event after stop()');
  t.same(pods.errors, [], 'and stopping is not an error');
});

t.test('a transform applies to listed and watched objects; the resume version is the raw event\'s', async (t) => {
  type Obj = ListedObject & { big?: string };
  const paths: string[] = [];
  let send: ((ev: { type: string; object: Record<string, unknown> }) => void) | undefined;
  let end: ((err?: Error) => void) | undefined;
  const access = {
    watch: (path: string, onEvent: typeof send, onEnd: typeof end) => {
      paths.push(path);
      send = onEvent;
      end = onEnd;
      return { close: () => undefined };
    },
  };
  // Drops everything but the name: the cache must not need resourceVersion on its objects.
  const transform = (o: Obj): Obj => ({ metadata: { name: o.metadata?.name, namespace: o.metadata?.namespace } });
  const informer = new Informer<Obj>(access, {
    path: '/api/v1/pods',
    list: async () => ({ metadata: { resourceVersion: '5' }, items: [{ metadata: { name: 'a', namespace: 'x', resourceVersion: '4' }, big: 'x'.repeat(100) }] }),
    transform,
  });
  const seen: Obj[] = [];
  informer.on('add', (o) => seen.push(o));
  informer.on('update', (o) => seen.push(o));
  informer.on('delete', (o) => seen.push(o));
  await informer.start();
  send!({ type: 'ADDED', object: { metadata: { name: 'b', namespace: 'x', resourceVersion: '6' }, big: 'y' } });
  send!({ type: 'MODIFIED', object: { metadata: { name: 'a', namespace: 'x', resourceVersion: '7' }, big: 'z' } });
  send!({ type: 'DELETED', object: { metadata: { name: 'b', namespace: 'x', resourceVersion: '8' }, big: 'y' } });
  t.same(seen, [{ metadata: { name: 'a', namespace: 'x' } }, { metadata: { name: 'b', namespace: 'x' } }, { metadata: { name: 'a', namespace: 'x' } }, { metadata: { name: 'b', namespace: 'x' } }]);
  t.same(informer.list(), [{ metadata: { name: 'a', namespace: 'x' } }]);
  // The server ends the watch: it resumes from the last event's version, not a relist.
  end!();
  t.equal(paths.length, 2);
  t.match(paths[1], /resourceVersion=8/);
  await informer.stop();
});
