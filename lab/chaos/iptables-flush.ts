/** The enforcing node's iptables mangle and raw tables flushed by another process; recovery: until the agent's jumps are back. */
import { performance } from 'node:perf_hooks';
import { runIn, sleep } from '../net/exec.js';
import { nodeNetns } from '../net/names.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function iptablesFlush(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  await run.scenario('iptables mangle and raw tables flushed', run.quick ? 2 : 10, async () => {
    await sleep(500 + Math.random() * 1000);
    const ns = nodeNetns(lab, target);
    await runIn(ns, 'iptables', ['-t', 'mangle', '-F']);
    await runIn(ns, 'iptables', ['-t', 'raw', '-F']);
    const k = performance.now();
    await waitUntil('ANTREA-MANGLE and ANTREA-RAW jumps back', async () => {
      const [m, r] = await Promise.all([runIn(ns, 'iptables', ['-t', 'mangle', '-S', 'PREROUTING'], { allowFail: true }), runIn(ns, 'iptables', ['-t', 'raw', '-S', 'PREROUTING'], { allowFail: true })]);
      return m.stdout.includes('ANTREA-MANGLE') && r.stdout.includes('ANTREA-RAW');
    });
    return Math.round(performance.now() - k);
  });
}
