/** Every watch stream cut with the history compacted; recovery: until every agent relisted and is synced. */
import { performance } from 'node:perf_hooks';
import { supervisorPid } from '../control.js';
import { sleep } from '../net/exec.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function watchRelist(run: ChaosRun): Promise<void> {
  const { lab } = run;
  // Every watch stream cut at once with the history compacted: each informer's next watch gets
  // 410 Gone and relists, while the policy churn keeps changing what it lists.
  await run.scenario('watch streams cut, 410 Gone forced', run.quick ? 2 : 10, async () => {
    await sleep(500 + Math.random() * 1000);
    const relists = async () => Promise.all(run.info.nodes.map(async (n) => ((await run.status(n))?.enforcement as { relists?: number } | undefined)?.relists ?? -1));
    const before = await relists();
    process.kill(supervisorPid(lab)!, 'SIGUSR2');
    const k = performance.now();
    await waitUntil('every agent relisted and synced', async () => {
      const after = await relists();
      const all = await Promise.all(run.info.nodes.map((n) => run.status(n)));
      return after.every((r, i) => r > before[i]!) && all.every((s) => (s?.enforcement as { synced?: boolean } | undefined)?.synced === true);
    });
    return Math.round(performance.now() - k);
  });
}
