/** The enforcing node's ovsdb-server and ovs-vswitchd killed and started again; recovery: until the bridge holds the agent's flows again. */
import { performance } from 'node:perf_hooks';
import { sleep } from '../net/exec.js';
import { startNodeOvs, stopNodeOvs } from '../net/ovs.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function ovsRestart(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  await run.scenario('ovsdb-server + ovs-vswitchd killed', run.quick ? 1 : 3, async () => {
    await sleep(500);
    const k = performance.now();
    await stopNodeOvs(lab, target);
    await startNodeOvs(lab, target);
    await waitUntil('flows replayed', () => run.bridgeConverged(target));
    return Math.round(performance.now() - k);
  });
}
