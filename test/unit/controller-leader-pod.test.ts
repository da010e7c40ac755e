/**
 * The leader label moves with the Lease, against the lab API server: the new leader's Pod gets it
 * and the old leader's Pod (still there after its container died) loses it; a replica that stops
 * leading removes its own. LeaderPodLabel keeps it so through failed writes.
 */
import t from 'tap';
import { KubeApiError } from '../../daemon/kube/access.js';
import { LEADER_LABEL, LeaderPodLabel, labelLeaderPod } from '../../daemon/controller/leader-pod.js';
import { labAccess, startLab } from './apiserver-helpers.js';
import { ManualClock } from './manual-clock.js';

t.test('the label follows the leader', async (t) => {
  const lab = await startLab(t);
  const io = labAccess(lab);
  await lab.core.createNamespace({ body: { metadata: { name: 'sluice-system' } } });
  for (const name of ['controller-a', 'controller-b']) {
    await lab.core.createNamespacedPod({ namespace: 'sluice-system', body: { metadata: { name, labels: { app: 'sluice-controller' } }, spec: { containers: [{ name: 'c', image: 'sluice:0.1.0' }] } } });
  }
  const leaders = async () => (await lab.core.listNamespacedPod({ namespace: 'sluice-system', labelSelector: `${LEADER_LABEL}=true` })).items.map((p) => p.metadata!.name).sort();
  t.equal(await labelLeaderPod(io, 'sluice-system', 'controller-a', true), true, 'written');
  t.same(await leaders(), ['controller-a']);
  t.equal(await labelLeaderPod(io, 'sluice-system', 'controller-a', true), false, 'already so: nothing written');
  // controller-a dies without stepping down; controller-b takes the Lease.
  await labelLeaderPod(io, 'sluice-system', 'controller-b', true);
  t.same(await leaders(), ['controller-b'], 'the old leader\'s Pod no longer receives agents');
  t.equal(await labelLeaderPod(io, 'sluice-system', 'controller-a', false), false, 'a standby without the label: nothing written');
  const a = await lab.core.readNamespacedPod({ name: 'controller-a', namespace: 'sluice-system' });
  t.same(a.metadata?.labels, { app: 'sluice-controller' }, 'its other labels are kept');
  await labelLeaderPod(io, 'sluice-system', 'controller-b', false);
  t.same(await leaders(), [], 'a replica that steps down removes its own label');
});

/** Pods as a map of name → labelled; patches fail while `failing` > 0. */
function fakePods(labelled: Record<string, boolean>) {
  const state = { labelled, failing: 0, patches: 0 };
  const io = {
    getJson: async () => ({ items: Object.entries(state.labelled).filter(([, on]) => on).map(([name]) => ({ metadata: { name } })) }),
    patchJson: async (path: string, body: unknown) => {
      state.patches++;
      if (state.failing > 0) {
        state.failing--;
        throw new KubeApiError('the server is busy', 503, 'ServiceUnavailable');
      }
      const name = decodeURIComponent(path.split('/').pop()!);
      if (!(name in state.labelled)) throw new KubeApiError(`pods "${name}" not found`, 404, 'NotFound');
      state.labelled[name] = (body as { metadata: { labels: Record<string, string | null> } }).metadata.labels[LEADER_LABEL] === 'true';
      return {};
    },
  };
  return { state, io };
}

t.test('LeaderPodLabel: a write that fails is retried until the label follows the Lease', async (t) => {
  const clock = new ManualClock();
  const { state, io } = fakePods({ a: true, b: false });
  const logs: string[] = [];
  const label = new LeaderPodLabel({ io, namespace: 'sluice-system', pod: 'b', clock, retryMs: 2000, recheckMs: 30_000, log: (level, m) => logs.push(`${level}: ${m}`) });
  t.teardown(() => label.close());
  await clock.advance(0);
  t.same(state.labelled, { a: true, b: false }, 'a standby leaves the leader\'s label alone');
  state.failing = 3;
  label.set(true);
  await clock.advance(0);
  t.same(state.labelled, { a: true, b: false }, 'the first write failed');
  t.match(logs.at(-1), /^warn: leader: could not label Pod sluice-system\/b .*the server is busy; retrying/, 'the failure is logged with the Pod and the cause');
  await clock.advance(1999);
  t.equal(state.patches, 1, 'no retry before the retry period');
  await clock.advance(1 + 2000 * 2);
  t.same(state.labelled, { a: false, b: true }, 'after the API recovered: only the leader\'s Pod is labelled');
  const writes = state.patches;
  await clock.advance(60_000);
  t.equal(state.patches, writes, 'converged: the rechecks write nothing');
  // Someone removed the label by hand: the recheck puts it back.
  state.labelled.b = false;
  await clock.advance(30_000);
  t.same(state.labelled, { a: false, b: true }, 'a label changed behind its back is corrected at the next recheck');
  label.set(false);
  await clock.advance(0);
  t.same(state.labelled, { a: false, b: false }, 'stepping down removes its own label at once');
});

t.test('LeaderPodLabel: the old leader\'s Pod already deleted is no error', async (t) => {
  const clock = new ManualClock();
  const { state, io } = fakePods({ b: false });
  const logs: string[] = [];
  const label = new LeaderPodLabel({ io, namespace: 'sluice-system', pod: 'b', clock, log: (level, m) => logs.push(`${level}: ${m}`) });
  t.teardown(() => label.close());
  // The list still names the deleted Pod (read just before it went).
  const getJson = io.getJson;
  io.getJson = async () => ({ items: [...(await getJson()).items, { metadata: { name: 'gone' } }] });
  label.set(true);
  await clock.advance(0);
  t.same(state.labelled, { b: true });
  t.same(logs.filter((l) => l.startsWith('warn')), [], 'no warning');
});
