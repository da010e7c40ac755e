/** The enforcing node's agent killed with SIGKILL at a random moment and started again; recovery: until it is ready. */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { agentPidPath, startAgent } from '../agent.js';
import { sleep } from '../net/exec.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function agentKill(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  await run.scenario('agent kill -9', run.quick ? 3 : 20, async () => {
    await sleep(300 + Math.random() * 1500);
    const pid = Number(readFileSync(agentPidPath(lab, target), 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    const k = performance.now();
    await startAgent(lab, target);
    await waitUntil('agent ready', async () => (await run.status(target))?.ready === true);
    return Math.round(performance.now() - k);
  });
}
