/** Pods created at once on the enforcing node, then deleted at once; recovery: until all are attached and detached again. */
import { performance } from 'node:perf_hooks';
import { resolveKind } from '../kinds.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function podStorm(run: ChaosRun): Promise<void> {
  const { target } = run;
  await run.scenario(`Pod storm: ${run.quick ? 10 : 40} Pods created at once, then deleted at once`, 1, async () => {
    const rest = clientFor(run.info);
    const pods = resolveKind('pods');
    const names = Array.from({ length: run.quick ? 10 : 40 }, (_, i) => `storm-${i}`);
    const k = performance.now();
    await Promise.all(names.map((name) => rest.apply(pods, {
      apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z', labels: { storm: 'yes' } },
      spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] },
    } as never)));
    const attachedAll = async () => {
      const attached = new Set((((await run.status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z').map((p) => p.podName));
      return names.every((n) => attached.has(n));
    };
    await waitUntil('every storm Pod attached', attachedAll, 180_000);
    const created = Math.round(performance.now() - k);
    await Promise.all(names.map((name) => rest.delete(pods, name, 'z')));
    await waitUntil('every storm Pod detached', async () => {
      const attached = (((await run.status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z' && p.podName.startsWith('storm-'));
      return attached.length === 0;
    }, 180_000);
    console.error(`Pod storm: ${names.length} Pods attached ${created} ms after they were created`);
    return Math.round(performance.now() - k);
  });
}
