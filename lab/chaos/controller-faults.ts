/**
 * sluice-controller's faults, on a lab whose agents follow it (`--policy-source controller`):
 * - the controller killed (SIGKILL) and a new one started on its address: a new store, so every
 *   agent's watch is Gone and lists again; recovery: until every agent follows it with nothing
 *   held back;
 * - the controller frozen (SIGSTOP) for 60 s (10 s with --quick) while the churn changes policies
 *   and labels, then thawed; recovery: the same.
 * Meanwhile the agents enforce the last state they received: the probers' denied connections must
 * stay denied and the allowed stream unbroken.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { controllerPidPath, startController } from '../controller.js';
import { sleep } from '../net/exec.js';
import { type ChaosRun, waitUntil } from './harness.js';

const REPLICA = 'controller-0';

/** The lab's replica: its pid and the port it listens on (from its command line). */
function replica(lab: string): { pid: number; port: number } {
  const pid = Number(readFileSync(controllerPidPath(lab, REPLICA), 'utf8').trim());
  const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  const listen = args[args.indexOf('--listen') + 1] ?? '';
  const port = Number(listen.split(':').at(-1));
  if (!Number.isInteger(port) || port <= 0) throw new Error(`sluice-controller ${pid}: no --listen port in its command line`);
  return { pid, port };
}

/** Every agent follows the controller, with everything it received enforced. */
async function following(run: ChaosRun): Promise<boolean> {
  const all = await Promise.all(run.info.nodes.map((n) => run.status(n)));
  return all.every((s) => {
    const cp = (s?.enforcement as { controlPlane?: { connected?: boolean; held?: string } } | undefined)?.controlPlane;
    return cp?.connected === true && cp.held === undefined;
  });
}

export async function controllerFaults(run: ChaosRun): Promise<void> {
  if (run.opts.policySource !== 'controller') return;
  const { lab } = run;
  await run.scenario('controller kill -9, a new one', run.quick ? 2 : 5, async () => {
    await sleep(500 + Math.random() * 1500);
    const { pid, port } = replica(lab);
    process.kill(pid, 'SIGKILL');
    await sleep(run.quick ? 1000 : 5000);
    const k = performance.now();
    await startController(lab, REPLICA, port, ['--read-all-users', 'sluice-lab-admin']);
    await waitUntil('agents following the new controller', () => following(run), 90_000);
    return Math.round(performance.now() - k);
  });
  await run.scenario(`controller frozen ${run.quick ? 10 : 60} s`, 1, async () => {
    const { pid } = replica(lab);
    process.kill(pid, 'SIGSTOP');
    await sleep(run.quick ? 10_000 : 60_000);
    process.kill(pid, 'SIGCONT');
    const k = performance.now();
    await waitUntil('agents following the thawed controller', () => following(run), 90_000);
    return Math.round(performance.now() - k);
  });
}
