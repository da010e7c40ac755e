/**
 * "The primary" rewrites its conflist without sluice (write and rename, as aws-node does) while
 * Pods are being created on the node: the agent chains sluice again, and every Pod created
 * meanwhile ends up attached (through sluice, or adopted once the chain is back). Recovery: until
 * sluice is chained again.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { resolveKind } from '../kinds.js';
import type { Conflist } from '../net/cni-config.js';
import { sleep } from '../net/exec.js';
import { conflistPath } from '../net/names.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function conflistRewrite(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  await run.scenario('conflist rewritten without sluice under Pod churn', run.quick ? 2 : 5, async () => {
    const rest = clientFor(run.info);
    const podKind = resolveKind('pods');
    const path = conflistPath(lab, target);
    const chained = () => (JSON.parse(readFileSync(path, 'utf8')) as Conflist).plugins.some((p) => p.type === 'sluice-cni');
    const names = Array.from({ length: 4 }, (_, i) => `rechain-${i}`);
    const creating = (async () => {
      for (const name of names) {
        await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z' }, spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
        await sleep(150);
      }
    })();
    await sleep(100);
    const list = JSON.parse(readFileSync(path, 'utf8')) as Conflist;
    writeFileSync(`${path}.primary-tmp`, JSON.stringify({ ...list, plugins: list.plugins.filter((p) => p.type !== 'sluice-cni') }, null, 2));
    renameSync(`${path}.primary-tmp`, path);
    const k = performance.now();
    await waitUntil('sluice chained again', async () => chained(), 30_000);
    const rechainMs = Math.round(performance.now() - k);
    await creating;
    await waitUntil('every Pod created meanwhile attached', async () => {
      const attached = new Set((((await run.status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z').map((p) => p.podName));
      return names.every((n) => attached.has(n));
    }, 60_000);
    const allMs = Math.round(performance.now() - k);
    await Promise.all(names.map((name) => rest.delete(podKind, name, 'z')));
    await waitUntil('the churned Pods detached', async () => !(((await run.status(target))?.pods ?? []) as { podName: string }[]).some((p) => p.podName.startsWith('rechain-')), 60_000);
    console.error(`conflist rewrite: sluice chained again after ${rechainMs} ms; the ${names.length} Pods created meanwhile attached after ${allMs} ms`);
    return rechainMs;
  });
}
