/**
 * The leader label moves with the Lease, against the lab API server: the new leader's Pod gets it
 * and the old leader's Pod (still there after its container died) loses it; a replica that stops
 * leading removes its own.
 */
import t from 'tap';
import { LEADER_LABEL, labelLeaderPod } from '../../daemon/controller/leader-pod.js';
import { labAccess, startLab } from './apiserver-helpers.js';

t.test('the label follows the leader', async (t) => {
  const lab = await startLab(t);
  const io = labAccess(lab);
  await lab.core.createNamespace({ body: { metadata: { name: 'sluice-system' } } });
  for (const name of ['controller-a', 'controller-b']) {
    await lab.core.createNamespacedPod({ namespace: 'sluice-system', body: { metadata: { name, labels: { app: 'sluice-controller' } }, spec: { containers: [{ name: 'c', image: 'sluice:0.1.0' }] } } });
  }
  const leaders = async () => (await lab.core.listNamespacedPod({ namespace: 'sluice-system', labelSelector: `${LEADER_LABEL}=true` })).items.map((p) => p.metadata!.name).sort();
  await labelLeaderPod(io, 'sluice-system', 'controller-a', true);
  t.same(await leaders(), ['controller-a']);
  // controller-a dies without stepping down; controller-b takes the Lease.
  await labelLeaderPod(io, 'sluice-system', 'controller-b', true);
  t.same(await leaders(), ['controller-b'], 'the old leader\'s Pod no longer receives agents');
  const a = await lab.core.readNamespacedPod({ name: 'controller-a', namespace: 'sluice-system' });
  t.same(a.metadata?.labels, { app: 'sluice-controller' }, 'its other labels are kept');
  await labelLeaderPod(io, 'sluice-system', 'controller-b', false);
  t.same(await leaders(), [], 'a replica that steps down removes its own label');
});
