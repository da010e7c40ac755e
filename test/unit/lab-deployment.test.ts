// lab/cluster/deployment.ts: the lab Deployment controller's decisions (replicas, rolling update with
// maxSurge 0, Recreate, status) and its refusals; lab/cluster/scheduling.ts: host ports keep
// host-network replicas apart; lab/apiserver/apiservice.ts: an APIService's backend from EndpointSlices.
import { join } from 'node:path';
import t from 'tap';
import { loadManifests } from '../../daemon/manifests.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { resolveBackend } from '../../lab/apiserver/apiservice.js';
import { deploymentPod, deploymentProblems, maxUnavailable, planDeployment, TEMPLATE_HASH_LABEL } from '../../lab/cluster/deployment.js';
import { isImagePod, templateHash } from '../../lab/cluster/owners.js';
import { hostPorts, NoFitError, RoundRobin } from '../../lab/cluster/scheduling.js';

const root = join(import.meta.dirname, '..', '..');
const shipped = async (): Promise<KubeObject> => {
  const d = (await loadManifests([join(root, 'install', 'sluice.yaml')])).find((o) => o.kind === 'Deployment')!;
  return { ...d, metadata: { ...d.metadata, uid: 'deploy-uid', generation: 1 } };
};
let n = 0;
const ready = (p: KubeObject, ok = true): KubeObject => ({ ...p, status: { phase: 'Running', conditions: [{ type: 'Ready', status: ok ? 'True' : 'False' }] } });
const pod = (d: KubeObject, ok = true): KubeObject => {
  const p = deploymentPod(d, `s${n++}`);
  return ready({ ...p, metadata: { ...p.metadata, creationTimestamp: `2026-01-01T00:00:0${n % 10}Z` } }, ok);
};
const changed = (d: KubeObject): KubeObject => {
  const next = structuredClone(d);
  (next.spec as any).template.metadata.annotations = { 'lab/restarted-at': 'now' };
  next.metadata.generation = 2;
  return next;
};

t.test("install/sluice.yaml's controller Deployment is accepted as it is", async (t) => {
  const d = await shipped();
  t.same(deploymentProblems(d), []);
  const p = deploymentPod(d, 'abcde');
  t.ok(isImagePod(p), 'its Pods run from the image (podman kubelet)');
  t.equal(p.metadata.labels?.[TEMPLATE_HASH_LABEL], templateHash(d));
  t.match(p.metadata.name, new RegExp(`^sluice-controller-${templateHash(d)}-abcde$`));
  t.notOk(p.spec?.nodeName, 'left to the scheduler');
});

t.test('what the lab cannot honour is named', async (t) => {
  const d = await shipped();
  const bad = structuredClone(d);
  (bad.spec as any).strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1 } };
  (bad.spec as any).template.spec.hostNetwork = false;
  (bad.spec as any).paused = true;
  const problems = deploymentProblems(bad).join('\n');
  t.match(problems, /maxSurge: only 0/);
  t.match(problems, /spec\.template\.spec\.hostNetwork must be true/);
  t.match(problems, /spec\.paused is not supported/);
});

t.test('replicas: created up to the count, extras removed not-Ready first', async (t) => {
  const d = await shipped();
  t.match(planDeployment(d, []), { create: 2, delete: [] });
  const a = pod(d);
  t.match(planDeployment(d, [a]), { create: 1, delete: [] });
  const [b, c] = [pod(d), pod(d, false)];
  const plan = planDeployment(d, [a, b, c]);
  t.equal(plan.create, 0);
  t.same(plan.delete.map((x) => x.name), [c.metadata.name], 'the not-Ready one goes');
  t.match(plan.status, { replicas: 2, readyReplicas: 2, updatedReplicas: 2 });
  const failed = { ...b, status: { phase: 'Failed' } };
  t.match(planDeployment(d, [a, failed]), { create: 1, delete: [{ name: b.metadata.name, why: 'Pod failed' }] });
});

t.test('a template change rolls one replica at a time (maxUnavailable 1, maxSurge 0)', async (t) => {
  const d = await shipped();
  t.equal(maxUnavailable(d, 2), 1);
  const [a, b] = [pod(d), pod(d)];
  const next = changed(d);
  const first = planDeployment(next, [a, b]);
  t.equal(first.delete.length, 1, 'one old Pod goes');
  t.equal(first.create, 1, 'and a new one takes its place (the scheduler keeps it off a node whose port is still held)');
  const kept = [a, b].find((p) => p.metadata.name !== first.delete[0]!.name)!;
  const fresh = pod(next, false);
  t.match(planDeployment(next, [kept, fresh]), { create: 0, delete: [] }, 'the other old one waits while the new one is not Ready');
  const second = planDeployment(next, [kept, ready(fresh)]);
  t.same(second.delete.map((x) => x.name), [kept.metadata.name], 'then it goes');
  t.equal(second.create, 1);
  t.match(planDeployment(next, [ready(fresh), pod(next)]).status, { replicas: 2, updatedReplicas: 2, readyReplicas: 2 }, 'rolled');
  const recreate = structuredClone(next);
  (recreate.spec as any).strategy = { type: 'Recreate' };
  t.equal(planDeployment(recreate, [a, b]).delete.length, 2, 'Recreate: every old Pod at once');
});

t.test('host-network Pods with the same port never share a node', async (t) => {
  const d = await shipped();
  const nodes = ['node-1', 'node-2'].map((name) => ({ apiVersion: 'v1', kind: 'Node', metadata: { name } }) as KubeObject);
  const withUid = (p: KubeObject, uid: string): KubeObject => ({ ...p, metadata: { ...p.metadata, uid } });
  const a = withUid(deploymentPod(d, 'a'), 'u0');
  const b = withUid(deploymentPod(d, 'b'), 'u1');
  const c = withUid(deploymentPod(d, 'c'), 'u2');
  t.same(hostPorts(a), ['TCP/10351']);
  const rr = new RoundRobin();
  const onA = { ...a, spec: { ...a.spec, nodeName: rr.pick(a, nodes, []) } };
  rr.pick({ ...c, spec: { ...c.spec, hostNetwork: false, containers: [] } } as KubeObject, nodes, []); // the turn moves on
  const nodeB = rr.pick(b, nodes, [onA]);
  t.not(nodeB, onA.spec.nodeName, 'the second replica goes to the other node whatever the turn');
  const onB = { ...b, spec: { ...b.spec, nodeName: nodeB } };
  t.throws(() => rr.pick(c, nodes, [onA, onB]), NoFitError, 'a third finds no node with the port free');
  t.throws(() => rr.pick(c, nodes, [onA, onB]), /with free host ports TCP\/10351/);
  t.same(hostPorts({ ...a, spec: { ...a.spec, hostNetwork: false } }), [], 'a Pod-network Pod holds no host port');
});

t.test("an APIService's backend from the Service's EndpointSlices when there is no Endpoints object", async (t) => {
  const spec = { service: { namespace: 'sluice-system', name: 'sluice-controller', port: 443 } };
  const svc = { metadata: { name: 'sluice-controller', namespace: 'sluice-system' }, spec: { ports: [{ name: 'api', port: 443, targetPort: 10351 }] } };
  const slice = (ready: boolean) => ({
    metadata: { name: 'sluice-controller-x', namespace: 'sluice-system', labels: { 'kubernetes.io/service-name': 'sluice-controller' } },
    ports: [{ name: 'api', port: 10351 }],
    endpoints: [{ addresses: ['192.168.77.12'], conditions: { ready } }],
  });
  t.same(resolveBackend(spec, svc as any, undefined, [slice(true)] as any), { ok: true, host: '192.168.77.12', port: 10351 });
  t.match(resolveBackend(spec, svc as any, undefined, [slice(false)] as any), { ok: false, reason: 'MissingEndpoints' });
  t.match(resolveBackend(spec, svc as any, undefined, []), { ok: false, reason: 'EndpointsNotFound' });
});
