// The lab API server accepts sluice's real installation manifests (install/crds.yaml,
// install/sluice.yaml, install/uninstall.yaml) as `sluice-lab apply` sends them, and serves every
// object back through the kind's own API group.
import { join } from 'node:path';
import t from 'tap';
import { loadManifests } from '../../daemon/manifests.js';
import { startApiServer } from '../../lab/apiserver/server.js';
import { resolveKind } from '../../lab/kinds.js';
import { RestClient } from '../../lab/restclient.js';
import { planApply, planDelete } from '../../lab/scenario.js';

const root = join(import.meta.dirname, '..', '..');
const manifests = (...names: string[]) => loadManifests(names.map((n) => join(root, 'install', n)));

t.test('install/crds.yaml + install/sluice.yaml apply, re-apply unchanged, and delete', async (t) => {
  const server = await startApiServer({ token: 'tk' });
  t.teardown(() => server.close());
  const rest = new RestClient(server.url, 'tk');
  const plan = planApply(await manifests('crds.yaml', 'sluice.yaml'), ['node-1']);
  // Things referred to come first: CRDs and the Namespace before what lives in it, the DaemonSet last.
  t.equal(plan[0]!.kind.kind, 'CustomResourceDefinition');
  t.equal(plan.find((p) => p.kind.kind !== 'CustomResourceDefinition')!.kind.kind, 'Namespace');
  t.equal(plan.at(-1)!.kind.kind, 'DaemonSet');
  const actions = [];
  for (const p of plan) actions.push(`${p.kind.kind} ${(await rest.apply(p.kind, p.obj)).action}`);
  t.ok(actions.includes('Namespace created'));
  t.ok(actions.includes('DaemonSet created'));
  t.ok(actions.includes('ClusterRoleBinding created'));
  // The seeded CRDs are the same definitions: nothing to change.
  t.ok(actions.filter((a) => a.startsWith('CustomResourceDefinition')).every((a) => a.endsWith('unchanged')), actions.join(', '));

  const ds = await rest.get(resolveKind('daemonsets'), 'sluice-agent', 'sluice-system');
  t.equal(ds.apiVersion, 'apps/v1');
  t.equal(ds.metadata.generation, 1);
  t.equal((ds.spec as any).template.spec.containers[0].name, 'sluice-agent');
  const cm = await rest.get(resolveKind('configmaps'), 'sluice-agent-config', 'sluice-system');
  t.match((cm as any).data['agent.yaml'], /socketPath: \/var\/run\/sluice\/cni.sock/);
  const crb = await rest.get(resolveKind('clusterrolebindings'), 'sluice-agent');
  t.equal((crb as any).subjects[0].name, 'sluice-agent');
  t.equal((await rest.get(resolveKind('clusterroles'), 'sluice-agent')).apiVersion, 'rbac.authorization.k8s.io/v1');
  t.ok(await rest.get(resolveKind('serviceaccounts'), 'sluice-agent', 'sluice-system'));

  // A Namespace reads back with the server's default spec.finalizers, so its re-apply is a no-op PUT.
  for (const p of plan.filter((p) => p.kind.kind !== 'Namespace')) {
    t.equal((await rest.apply(p.kind, p.obj)).action, 'unchanged', `${p.kind.kind} ${p.ref} re-applied`);
  }

  // The uninstall DaemonSet applies beside it; deleting both removes every namespaced object.
  for (const p of planApply(await manifests('uninstall.yaml'), ['node-1'])) await rest.apply(p.kind, p.obj);
  t.ok(await rest.get(resolveKind('daemonsets'), 'sluice-uninstall', 'sluice-system'));
  for (const p of planDelete(await manifests('uninstall.yaml', 'sluice.yaml'))) {
    await rest.delete(p.kind, p.obj.metadata.name, p.kind.namespaced ? p.obj.metadata.namespace : undefined).catch((e) => {
      if (e.code !== 404) throw e; // the Namespace appears in both files
    });
  }
  t.equal(await rest.tryGet(resolveKind('clusterroles'), 'sluice-agent'), undefined);
  t.equal(await rest.tryGet(resolveKind('daemonsets'), 'sluice-agent', 'sluice-system'), undefined);
});

t.test('a template change bumps the DaemonSet generation; status goes through its subresource', async (t) => {
  const server = await startApiServer({ token: 'tk' });
  t.teardown(() => server.close());
  const rest = new RestClient(server.url, 'tk');
  for (const p of planApply(await manifests('sluice.yaml'), ['node-1'])) await rest.apply(p.kind, p.obj);
  const DS = resolveKind('daemonsets');
  const ds = await rest.get(DS, 'sluice-agent', 'sluice-system');
  (ds.spec as any).template.metadata.annotations['lab/restartedAt'] = 'x';
  const updated = await rest.update(DS, ds);
  t.equal(updated.metadata.generation, 2);
  await rest.patch(DS, 'sluice-agent', 'sluice-system', { status: { desiredNumberScheduled: 1 } }, 'status');
  t.same((await rest.get(DS, 'sluice-agent', 'sluice-system')).status, { desiredNumberScheduled: 1 });
});
