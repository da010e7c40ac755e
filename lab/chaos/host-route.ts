/** x/a's host route moved back onto its veth by another process; recovery: until it is on the gateway again. */
import { performance } from 'node:perf_hooks';
import { runIn, sleep } from '../net/exec.js';
import { nodeNetns } from '../net/names.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function hostRoute(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  await run.scenario('a Pod host route moved back to its veth', run.quick ? 2 : 10, async () => {
    await sleep(500 + Math.random() * 1000);
    const ns = nodeNetns(lab, target);
    const a = (((await run.status(target))?.pods ?? []) as { hostVeth: string; ips: string[] }[]).find((p) => p.ips.includes(run.pod('x/a').status.podIP))!;
    await runIn(ns, 'ip', ['route', 'replace', `${a.ips[0]}/32`, 'dev', a.hostVeth, 'scope', 'link']);
    const k = performance.now();
    await waitUntil('route on antrea-gw0 again', async () => (await runIn(ns, 'ip', ['route', 'show', `${a.ips[0]}/32`])).stdout.includes('antrea-gw0'));
    return Math.round(performance.now() - k);
  });
}
