/**
 * sluice-controller's faults, on a lab whose agents follow it (`--policy-source controller`):
 * - the controller killed (SIGKILL) and a new one started on its address: a new store, so every
 *   agent's watch is Gone and lists again; recovery: until every agent follows it with nothing
 *   held back;
 * - the leader killed with a standby running (a second replica, ready, not leading): the standby
 *   takes the Lease once it expires and serves; the lab's Service endpoint moves to it as the
 *   leader label moves it in a cluster. Recovery: until every agent follows the standby (the
 *   takeover time is printed too). Then the standby stops (releasing the Lease) and the lab's
 *   replica starts again on its address;
 * - the controller frozen (SIGSTOP) for 60 s (10 s with --quick) while the churn changes policies
 *   and labels, then thawed; recovery: the same;
 * - every agent's controlplane watches cut (connections reset, new ones refused) while more changes
 *   reach each Node's view than the controller keeps (the lab runs it with --events-per-node 50):
 *   the resumed watches get 410 Gone and list again; recovery: until every agent listed again and
 *   follows with nothing held back.
 * Meanwhile the agents enforce the last state they received: the probers' denied connections must
 * stay denied and the allowed stream unbroken.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { CA_CONFIGMAP } from '../../daemon/controller/tls-secret.js';
import { CONTROLLER_NAMESPACE, CONTROLLER_PORT_IN_NODE, controllerGet, controllerPidPath, freePort, LAB_CONTROLLER_ARGS, startController, tcpRelay } from '../controller.js';
import { clientFor } from '../ops.js';
import { isAlive } from '../control.js';
import { resolveKind } from '../kinds.js';
import { nodeNetns } from '../net/names.js';
import { killAndWait } from '../net/ovs.js';
import { run as exec } from '../net/exec.js';
import { sleep } from '../net/exec.js';
import { type ChaosRun, waitUntil } from './harness.js';

const REPLICA = 'controller-0';
const STANDBY = 'controller-1';

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
    await startController(lab, REPLICA, port, [...LAB_CONTROLLER_ARGS]);
    await waitUntil('agents following the new controller', () => following(run), 90_000);
    return Math.round(performance.now() - k);
  });
  await run.scenario('leader kill -9, the standby takes over', run.quick ? 1 : 3, async () => {
    const { pid, port } = replica(lab);
    const standby = await startController(lab, STANDBY, await freePort(), [...LAB_CONTROLLER_ARGS]);
    const standbyStatus = async () => {
      const r = await controllerGet(standby.port, '/status', undefined, run.info.token);
      return r.code === 200 ? (JSON.parse(r.body) as { leading?: boolean; viewsComputed?: boolean }) : undefined;
    };
    let moved: { close(): Promise<void> } | undefined;
    try {
      await waitUntil('the standby ready (every view computed), not leading', async () => {
        const s = await standbyStatus();
        return s?.viewsComputed === true && s.leading === false;
      }, 90_000);
      await sleep(500 + Math.random() * 1500);
      process.kill(pid, 'SIGKILL');
      const k = performance.now();
      // Its listening socket is released once the process is gone and reaped (waited for 5 s at most).
      for (let i = 0; i < 500 && isAlive(pid); i++) await sleep(10);
      // The Service's endpoint moves to the standby: new connections to the leader's address reach
      // it. The kernel may release the dead leader's port a moment later still: retried for 5 s.
      for (let i = 0; !moved; i++) {
        moved = await tcpRelay(port, () => standby.port).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'EADDRINUSE' || i >= 100) throw err;
          return undefined;
        });
        if (!moved) await sleep(50);
      }
      await waitUntil('the standby leading', async () => (await standbyStatus())?.leading === true, 60_000);
      const takeover = Math.round(performance.now() - k);
      await waitUntil('agents following the standby', () => following(run), 90_000);
      const ms = Math.round(performance.now() - k);
      console.log(`  standby leading ${takeover} ms after the leader's death; agents following it after ${ms} ms`);
      return ms;
    } finally {
      // Back to one replica on the lab's address: the standby releases the Lease as it stops, so
      // the replica started again leads at once.
      await moved?.close();
      await killAndWait([standby.pid], 15_000);
      await startController(lab, REPLICA, port, [...LAB_CONTROLLER_ARGS]);
      await waitUntil('agents following the lab\'s replica again', () => following(run), 90_000);
    }
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
  await run.scenario('controlplane watches cut past the controller\'s history (410 Gone)', run.quick ? 1 : 3, async () => {
    const rest = clientFor(run.info);
    const np = resolveKind('networkpolicies');
    // The controller's view of each Node, read from the replica as the lab's admin (a read-all user).
    const ca = ((await rest.get(resolveKind('configmaps'), CA_CONFIGMAP, CONTROLLER_NAMESPACE)).data as Record<string, string> | undefined)?.['ca.crt'];
    const view = async (node: string): Promise<string[]> => {
      const path = `/apis/controlplane.sluice.io/v1beta1/networkpolicies?fieldSelector=nodeName=${node}`;
      const r = await controllerGet(replica(lab).port, path, ca, run.info.token);
      if (r.code !== 200) throw new Error(`${path}: HTTP ${r.code}: ${r.body}`);
      return (JSON.parse(r.body) as { items: { metadata: { name: string } }[] }).items.map((o) => o.metadata.name);
    };
    const lists = async () => Promise.all(run.info.nodes.map(async (n) => ((await run.status(n))?.enforcement as { controlPlane?: { lists?: number } } | undefined)?.controlPlane?.lists ?? -1));
    const before = await lists();
    // x is isolated for ingress already: an allow from a peer nothing matches changes no verdict,
    // yet each policy is in the view of every Node with an x Pod.
    const policy = (name: string) => ({
      apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' },
      spec: { podSelector: {}, policyTypes: ['Ingress'], ingress: [{ from: [{ podSelector: { matchLabels: { 'chaos-matches': 'nothing' } } }], ports: [{ port: 9 }] }] },
    });
    const cut = (on: boolean) => Promise.all(run.info.nodes.map(async (n) => {
      const ns = nodeNetns(lab, n);
      const rule = ['OUTPUT', '-o', 'lo', '-p', 'tcp', '--dport', String(CONTROLLER_PORT_IN_NODE), '-j', 'REJECT', '--reject-with', 'tcp-reset'];
      await exec('ip', ['netns', 'exec', ns, 'iptables', on ? '-I' : '-D', ...rule]);
      if (on) await exec('ip', ['netns', 'exec', ns, 'ss', '-K', 'dst', '127.0.0.1', 'dport', '=', String(CONTROLLER_PORT_IN_NODE)]);
    }));
    await cut(true);
    try {
      const names = Array.from({ length: 30 }, (_, i) => `chaos-history-${i}`);
      for (const name of names) await rest.apply(np, policy(name) as never);
      for (const name of names) await rest.delete(np, name, 'x');
      await rest.apply(np, policy('chaos-history-mark') as never);
      // The controller has taken every change in once the mark is in each view and the others are gone.
      await waitUntil('the controller\'s views past the cut', async () => {
        const all = await Promise.all(run.info.nodes.map(view));
        return all.every((held) => held.some((h) => h.endsWith('.chaos-history-mark')) && !held.some((h) => /\.chaos-history-\d+$/.test(h)));
      }, 60_000);
    } finally {
      await cut(false);
    }
    const k = performance.now();
    await waitUntil('every agent listed its view again and follows', async () => {
      const after = await lists();
      return after.every((l, i) => l > before[i]!) && (await following(run));
    }, 90_000);
    const ms = Math.round(performance.now() - k);
    await rest.delete(np, 'chaos-history-mark', 'x');
    return ms;
  });
}
