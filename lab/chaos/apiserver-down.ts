/** The API server unreachable (the lab supervisor stopped), then back; recovery: until the agents' watches are synced. */
import { performance } from 'node:perf_hooks';
import { supervisorPid } from '../control.js';
import { sleep } from '../net/exec.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function apiServerDown(run: ChaosRun): Promise<void> {
  const { lab } = run;
  await run.scenario(`API server unreachable ${run.quick ? 10 : 60} s`, 1, async () => {
    const pid = supervisorPid(lab)!;
    process.kill(pid, 'SIGSTOP');
    await sleep(run.quick ? 10_000 : 60_000);
    process.kill(pid, 'SIGCONT');
    const k = performance.now();
    await waitUntil('watches synced', async () => {
      const all = await Promise.all(run.info.nodes.map((n) => run.status(n)));
      return all.every((s) => (s?.enforcement as { synced?: boolean } | undefined)?.synced === true);
    });
    return Math.round(performance.now() - k);
  });
}
