/**
 * The lab's cluster controllers against the real lab API server (in process, no root needed):
 * the scheduler binds Pods round-robin, the EndpointSlice controller follows Pods and Services,
 * and the REST client's apply/errors behave like kubectl's.
 */
import t from 'tap';
import type { KubeObject } from '../../daemon/policy/types.js';
import { startApiServer } from '../../lab/apiserver/server.js';
import { startEndpointSliceController, startScheduler } from '../../lab/cluster/controllers.js';
import { kubeConfigFor } from '../../lab/cluster/informers.js';
import { resolveKind } from '../../lab/kinds.js';
import { ApiError, RestClient } from '../../lab/restclient.js';
import { nodeObject } from '../../lab/supervisor.js';

const POD = resolveKind('pods');
const NODE = resolveKind('nodes');
const SVC = resolveKind('services');
const NS = resolveKind('namespaces');
const SLICE = resolveKind('endpointslices');
const quiet = () => undefined;

async function eventually<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const pod = (name: string, labels: Record<string, string>, extra: Record<string, unknown> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace: 'w', name, labels },
  spec: { containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 8080 }] }], ...extra },
});

t.test('scheduler, EndpointSlice controller and REST client on the lab API server', async (t) => {
  const api = await startApiServer({ token: 'tok' });
  t.teardown(() => api.close());
  const rest = new RestClient(api.url, 'tok');
  const kc = kubeConfigFor(api.url, 'tok');

  await t.rejects(new RestClient(api.url, 'wrong').list(POD), { code: 401 }, 'the token is checked');
  for (const n of ['node-1', 'node-2', 'node-3']) await rest.create(NODE, nodeObject(n));
  await rest.create(NS, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'w' } });

  const scheduler = startScheduler(kc, rest, quiet);
  const slicer = startEndpointSliceController(kc, rest, quiet);
  t.teardown(() => Promise.all([scheduler.stop(), slicer.stop()]));
  await Promise.all([scheduler.synced, slicer.synced]);

  // Scheduler: one at a time in creation order, round-robin over node-1..3; a pinned Pod is left alone.
  await rest.create(POD, pod('pinned', { app: 'web' }, { nodeName: 'node-3' }));
  for (const name of ['p1', 'p2', 'p3', 'p4']) await rest.create(POD, pod(name, { app: 'web' }));
  const placed = await eventually('all Pods scheduled', async () => {
    const items = (await rest.list(POD, { namespace: 'w' })).items;
    return items.every((p) => p.spec?.nodeName) ? new Map(items.map((p) => [p.metadata.name, p.spec.nodeName])) : undefined;
  });
  t.same(Object.fromEntries(placed), { pinned: 'node-3', p1: 'node-1', p2: 'node-2', p3: 'node-3', p4: 'node-1' });
  await rest.create(POD, pod('picky', {}, { nodeSelector: { 'kubernetes.io/hostname': 'node-2' } }));
  t.equal(await eventually('picky scheduled', async () => (await rest.get(POD, 'picky', 'w')).spec?.nodeName), 'node-2', 'nodeSelector honoured');

  // EndpointSlices: the Service sees Pods once they report an IP and Ready, with the named port resolved.
  await rest.create(SVC, { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'w', name: 'web' }, spec: { selector: { app: 'web' }, ports: [{ name: 'h', port: 80, targetPort: 'http' }] } });
  const slicesOf = async () => (await rest.list(SLICE, { namespace: 'w', labelSelector: 'kubernetes.io/service-name=web' })).items;
  const empty = await eventually('placeholder slice', async () => ((await slicesOf()).length === 1 ? (await slicesOf())[0] : undefined));
  t.same(empty.endpoints, [], 'no Pod has an IP yet: an empty slice');
  const ready = (ip: string) => ({ status: { phase: 'Running', podIP: ip, podIPs: [{ ip }], conditions: [{ type: 'Ready', status: 'True' }] } });
  await rest.patch(POD, 'p1', 'w', ready('10.10.1.2'), 'status');
  await rest.patch(POD, 'p2', 'w', ready('10.10.2.2'), 'status');
  const eps = (s: KubeObject) => ((s.endpoints ?? []) as { addresses: string[]; conditions: { ready: boolean } }[]).map((e) => `${e.addresses[0]}:${e.conditions.ready}`);
  const two = await eventually('two endpoints', async () => {
    const s = (await slicesOf())[0];
    return s && eps(s).length === 2 ? s : undefined;
  });
  t.same(eps(two), ['10.10.1.2:true', '10.10.2.2:true']);
  t.same(two.ports, [{ name: 'h', port: 8080, protocol: 'TCP' }], 'named targetPort resolved to the container port');
  t.equal(two.metadata.labels?.['endpointslice.kubernetes.io/managed-by'], 'endpointslice-controller.sluice-lab');

  // Deleting a Pod and relabelling another follow through; deleting the Service removes its slices.
  await rest.delete(POD, 'p2', 'w');
  const p1 = await rest.get(POD, 'p1', 'w');
  await rest.update(POD, { ...p1, metadata: { ...p1.metadata, labels: { app: 'other' } } });
  await eventually('slice emptied', async () => ((await slicesOf())[0] && eps((await slicesOf())[0]!).length === 0 ? true : undefined));
  t.pass('the slice follows Pod deletion and label changes');
  await rest.delete(SVC, 'web', 'w');
  await eventually('slices removed', async () => ((await slicesOf()).length === 0 ? true : undefined));
  t.pass('the slices go with their Service');

  // REST client: apply creates, then reports unchanged/configured; API errors carry the Status message.
  const cm: KubeObject = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'w', name: 'np' }, spec: { podSelector: {} } };
  const netpol = resolveKind('netpol');
  t.equal((await rest.apply(netpol, cm)).action, 'created');
  t.equal((await rest.apply(netpol, cm)).action, 'unchanged');
  t.equal((await rest.apply(netpol, { ...cm, metadata: { ...cm.metadata, labels: { a: 'b' } } })).action, 'configured');
  const err = (await rest.get(POD, 'nope', 'w').catch((e: unknown) => e)) as ApiError;
  t.ok(err instanceof ApiError);
  t.equal(err.code, 404);
  t.match(err.message, /pods "nope" not found/);
  const unreachable = (await new RestClient('http://127.0.0.1:1', 'x').list(POD).catch((e: unknown) => e)) as ApiError;
  t.match(unreachable.message, /cannot reach the lab API server/);
});
