// lab/cluster/daemonset.ts: the lab DaemonSet controller's decisions (Pods per node, rolling update order,
// status) and its refusals; lab/cluster/podstatus.ts: back-off, probe thresholds and the Pod status.
import { join } from 'node:path';
import t from 'tap';
import { loadManifests } from '../../daemon/manifests.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import {
  daemonSetPod, daemonSetProblems, eligibleNodes, isDaemonSetPod, isOwnedBy, maxUnavailable, planDaemonSet, REVISION_LABEL, templateHash,
} from '../../lab/cluster/daemonset.js';
import { httpProbe, ProbeCounter, podStatus, readyText, restartDelayMs, type ContainerView } from '../../lab/cluster/podstatus.js';

const root = join(import.meta.dirname, '..', '..');
const sluiceDs = async (): Promise<KubeObject> => {
  const ds = (await loadManifests([join(root, 'install', 'sluice.yaml')])).find((o) => o.kind === 'DaemonSet')!;
  return { ...ds, metadata: { ...ds.metadata, uid: 'ds-uid', generation: 1 } };
};
const node = (name: string, labels: Record<string, string> = {}): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels } });
const nodes = ['node-1', 'node-2', 'node-3'].map((n) => node(n));
const ready = (p: KubeObject, ok = true): KubeObject => ({ ...p, status: { phase: 'Running', conditions: [{ type: 'Ready', status: ok ? 'True' : 'False' }] } });
const podOn = (ds: KubeObject, n: string, name = `${ds.metadata.name}-${n}`): KubeObject => {
  const p = daemonSetPod(ds, n, 'x');
  return { ...p, metadata: { ...p.metadata, name, creationTimestamp: '2026-01-01T00:00:00Z' } };
};
const withTemplateChange = (ds: KubeObject): KubeObject => {
  const next = structuredClone(ds);
  (next.spec as any).template.metadata.annotations['lab/restarted-at'] = 'now';
  next.metadata.generation = 2;
  return next;
};

t.test('install/sluice.yaml is accepted as it is', async (t) => {
  t.same(daemonSetProblems(await sluiceDs()), []);
});

t.test('a Pod per selected node, owned by the DaemonSet', async (t) => {
  const ds = await sluiceDs();
  const plan = planDaemonSet(ds, nodes, []);
  t.same(plan.create, ['node-1', 'node-2', 'node-3']);
  t.same(plan.delete, []);
  const pod = daemonSetPod(ds, 'node-2', 'abcde');
  t.equal(pod.metadata.name, 'sluice-agent-abcde');
  t.equal(pod.spec?.nodeName, 'node-2');
  t.equal(pod.metadata.labels?.[REVISION_LABEL], templateHash(ds));
  t.equal(pod.metadata.labels?.app, 'sluice-agent');
  t.ok(isOwnedBy(pod, ds) && isDaemonSetPod(pod));
  t.equal(pod.spec?.serviceAccountName, 'sluice-agent');
  // nodeSelector picks nodes by label.
  const picky = structuredClone(ds);
  (picky.spec as any).template.spec.nodeSelector = { role: 'edge' };
  t.same(eligibleNodes(picky, [node('node-10', { role: 'edge' }), node('node-2', { role: 'edge' }), node('node-3')]), ['node-2', 'node-10']);
  // Running everywhere already: status counts them.
  const running = planDaemonSet(ds, nodes, nodes.map((n) => ready(podOn(ds, n.metadata.name))));
  t.same(running.create, []);
  t.same(running.status, {
    observedGeneration: 1, desiredNumberScheduled: 3, currentNumberScheduled: 3, numberMisscheduled: 0, numberReady: 3,
    updatedNumberScheduled: 3, numberAvailable: 3, numberUnavailable: 0,
  });
});

t.test('the template hash ignores key order and sees every change', async (t) => {
  const ds = await sluiceDs();
  const reordered = structuredClone(ds);
  const tpl = (reordered.spec as any).template;
  (reordered.spec as any).template = Object.fromEntries(Object.entries(tpl).reverse());
  t.equal(templateHash(reordered), templateHash(ds));
  t.not(templateHash(withTemplateChange(ds)), templateHash(ds));
});

t.test('rolling update: one node at a time (maxUnavailable 1), the next only once the new Pod is Ready', async (t) => {
  const ds = await sluiceDs();
  const next = withTemplateChange(ds);
  const old = nodes.map((n) => ready(podOn(ds, n.metadata.name)));
  // Everything Ready on the old template: exactly one is deleted, the first node.
  let plan = planDaemonSet(next, nodes, old);
  t.same(plan.delete.map((d) => d.node), ['node-1']);
  t.same(plan.create, []);
  t.equal(plan.status.updatedNumberScheduled, 0);
  // node-1's Pod is gone: a new one is created there and nothing else is deleted.
  plan = planDaemonSet(next, nodes, old.slice(1));
  t.same(plan.create, ['node-1']);
  t.same(plan.delete, []);
  // The new Pod exists but is not Ready: still nothing deleted.
  const new1 = ready(podOn(next, 'node-1', 'new-1'), false);
  plan = planDaemonSet(next, nodes, [new1, ...old.slice(1)]);
  t.same(plan.delete, [], 'waits for the new Pod to be Ready');
  t.equal(plan.status.numberUnavailable, 1);
  // Ready: node-2 is next.
  plan = planDaemonSet(next, nodes, [ready(new1), ...old.slice(1)]);
  t.same(plan.delete.map((d) => d.node), ['node-2']);
  t.equal(plan.status.updatedNumberScheduled, 1);
  // An old Pod that is not Ready anyway goes at once, without using the budget.
  plan = planDaemonSet(next, nodes, [ready(new1), old[1]!, ready(old[2]!, false)]);
  t.same(plan.delete.map((d) => d.node).sort(), ['node-3']);
  // maxUnavailable 2 (or 67%) of 3 nodes: two at a time.
  const two = structuredClone(next);
  (two.spec as any).updateStrategy.rollingUpdate.maxUnavailable = '67%';
  t.equal(maxUnavailable(two, 3), 3);
  (two.spec as any).updateStrategy.rollingUpdate.maxUnavailable = 2;
  t.same(planDaemonSet(two, nodes, old).delete.map((d) => d.node), ['node-1', 'node-2']);
  // OnDelete: nothing is deleted by the controller.
  const onDelete = structuredClone(next);
  (onDelete.spec as any).updateStrategy = { type: 'OnDelete' };
  t.same(planDaemonSet(onDelete, nodes, old).delete, []);
});

t.test('extra, misplaced and failed Pods', async (t) => {
  const ds = await sluiceDs();
  const a = ready(podOn(ds, 'node-1', 'a'));
  const b = { ...podOn(ds, 'node-1', 'b'), metadata: { ...podOn(ds, 'node-1', 'b').metadata, creationTimestamp: '2026-01-02T00:00:00Z' } };
  const failed = { ...podOn(ds, 'node-2', 'f'), status: { phase: 'Failed' } };
  const gone = ready(podOn(ds, 'node-9', 'g'));
  const plan = planDaemonSet(ds, nodes, [a, b, failed, gone]);
  t.same(plan.delete.map((d) => d.name).sort(), ['b', 'f', 'g']);
  t.same(plan.create, ['node-3'], 'node-2 gets its new Pod once the failed one is gone');
  t.equal(plan.status.numberMisscheduled, 1);
});

t.test('refusals name the field', async (t) => {
  const ds = await sluiceDs();
  const edit = (f: (spec: any) => void) => {
    const d = structuredClone(ds);
    f(d.spec);
    return daemonSetProblems(d).join('\n');
  };
  t.match(edit((s) => (s.updateStrategy.rollingUpdate.maxSurge = 1)), /maxSurge/);
  t.match(edit((s) => (s.updateStrategy.type = 'Recreate')), /updateStrategy\.type "Recreate"/);
  t.match(edit((s) => (s.selector = { matchExpressions: [] })), /spec\.selector: only matchLabels/);
  t.match(edit((s) => (s.selector.matchLabels.app = 'other')), /does not match spec\.template\.metadata\.labels/);
  t.match(edit((s) => (s.template.spec.affinity = {})), /spec\.template\.spec\.affinity is not supported/);
  t.match(edit((s) => (s.template.spec.containers[0].lifecycle = {})), /spec\.template\.spec\.containers\[0\]\.lifecycle is not supported/);
  t.match(edit((s) => (s.template.spec.hostNetwork = false)), /spec\.template\.spec\.hostNetwork must be true/);
  t.match(edit((s) => (s.minReadySeconds = 5)), /minReadySeconds/);
  t.match(edit((s) => (s.updateStrategy.rollingUpdate.maxUnavailable = 'half')), /maxUnavailable "half"/);
});

t.test('back-off and probes', async (t) => {
  t.same([1, 2, 3, 4, 5, 6, 7].map(restartDelayMs), [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
  const ds = await sluiceDs();
  const agent = (ds.spec as any).template.spec.containers[0];
  const rp = httpProbe(agent.readinessProbe, agent, '192.168.77.11')!;
  t.same(rp, { scheme: 'HTTP', host: '127.0.0.1', port: 9376, path: '/readyz', initialDelayMs: 0, periodMs: 5000, timeoutMs: 1000, failureThreshold: 3, successThreshold: 1 });
  const lp = httpProbe(agent.livenessProbe, agent, '192.168.77.11')!;
  t.equal(lp.failureThreshold, 6);
  t.equal(httpProbe({ httpGet: { port: 'metrics' } }, agent, '192.168.77.11')?.port, 9377, 'named port');
  t.equal(httpProbe({ httpGet: { port: 'metrics' } }, agent, '192.168.77.11')?.host, '192.168.77.11', 'no host: the Pod IP (the node\'s)');
  t.throws(() => httpProbe({ httpGet: { port: 'nope' } }, agent, 'x'), /probe port "nope"/);
  // Readiness: false until successThreshold successes; false again after failureThreshold failures.
  const r = new ProbeCounter({ failureThreshold: 3, successThreshold: 1 }, false);
  t.equal(r.record(false), false);
  t.equal(r.record(true), true);
  t.equal(r.passing, true);
  t.same([r.record(false), r.record(false), r.record(true), r.record(false), r.record(false)], [false, false, false, false, false], 'a success resets the count');
  t.equal(r.record(false), true);
  t.equal(r.passing, false);
  // Liveness starts passing.
  const l = new ProbeCounter({ failureThreshold: 2, successThreshold: 1 }, true);
  t.same([l.record(false), l.record(false)], [false, true]);
});

t.test('Pod status from container states', async (t) => {
  const c = (name: string, over: Partial<ContainerView>): ContainerView => ({ name, image: 'img', current: { state: 'running', startedAt: 'T0' }, restartCount: 0, ready: false, ...over });
  const since = () => 'T';
  const cond = (s: Record<string, unknown>, type: string) => (s.conditions as { type: string; status: string }[]).find((x) => x.type === type)?.status;
  // Initializing.
  let s = podStatus({ hostIP: '192.168.77.11', startTime: 'T0', init: [c('install-cni', {})], containers: [c('agent', { current: { state: 'waiting', reason: 'PodInitializing' } })] }, since);
  t.equal(s.phase, 'Pending');
  t.equal(cond(s, 'Initialized'), 'False');
  t.equal(s.podIP, '192.168.77.11', 'hostNetwork: the node IP');
  // Init done, one of two ready.
  const done = c('install-cni', { current: { state: 'terminated', exitCode: 0, reason: 'Completed', finishedAt: 'T1' } });
  s = podStatus({ hostIP: 'h', startTime: 'T0', init: [done], containers: [c('agent', { ready: false }), c('ovs', { ready: true })] }, since);
  t.equal(s.phase, 'Running');
  t.equal(cond(s, 'Initialized'), 'True');
  t.equal(cond(s, 'Ready'), 'False');
  t.equal(readyText(s), '1/2');
  // All ready; a restarted container reports its last state.
  s = podStatus({ hostIP: 'h', startTime: 'T0', init: [done], containers: [c('agent', { ready: true, restartCount: 2, last: { state: 'terminated', exitCode: 1, reason: 'Error', finishedAt: 'T2' } }), c('ovs', { ready: true })] }, since);
  t.equal(cond(s, 'Ready'), 'True');
  t.equal(readyText(s), '2/2');
  t.same((s.containerStatuses as any[])[0].lastState, { terminated: { exitCode: 1, reason: 'Error', finishedAt: 'T2' } });
  t.equal((s.containerStatuses as any[])[0].restartCount, 2);
  // Refused: Failed with the message.
  s = podStatus({ hostIP: 'h', startTime: 'T0', failed: { reason: 'LabRefused', message: 'spec.x is not supported' }, init: [], containers: [] }, since);
  t.equal(s.phase, 'Failed');
  t.equal(s.message, 'spec.x is not supported');
});
