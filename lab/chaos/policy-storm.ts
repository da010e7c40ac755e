/**
 * The policy storm: thousands of NetworkPolicies created and deleted while the labels of API-only
 * Pods their peers select churn. Printed: the agent's memory, its CPU time and the realization
 * p50/p99; recovery: until the rules are back to what they were.
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { agentPidPath } from '../agent.js';
import { resolveKind } from '../kinds.js';
import { runIn } from '../net/exec.js';
import { nodeNetns } from '../net/names.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, waitUntil } from './harness.js';

/** CPU seconds (user + system) the agent of `node` has used, from /proc (0 when it is not running). */
function agentCpuSeconds(lab: string, node: string): number {
  try {
    const pid = readFileSync(agentPidPath(lab, node), 'utf8').trim();
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    // After the command: state is field 3, utime and stime are fields 14 and 15 (clock ticks of 1/100 s).
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** The agent's realization histogram: cumulative counts by upper bound (seconds), `+Inf` last. */
async function realizationBuckets(lab: string, node: string): Promise<[string, number][]> {
  const text = (await runIn(nodeNetns(lab, node), 'curl', ['-s', '--max-time', '2', 'http://127.0.0.1:10349/metrics'], { allowFail: true })).stdout;
  return [...text.matchAll(/^sluice_policy_realization_seconds_bucket\{le="([^"]+)"[^}]*\} (\d+)/gm)].map((m) => [m[1]!, Number(m[2])]);
}

function bucketDelta(before: [string, number][], after: [string, number][]): [string, number][] {
  const was = new Map(before);
  return after.map(([le, n]) => [le, n - (was.get(le) ?? 0)]);
}

/** The upper bound of the bucket holding quantile `q` of a cumulative histogram ("-" when empty). */
function quantile(buckets: [string, number][], q: number): string {
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total === 0) return '-';
  const hit = buckets.find(([, n]) => n >= q * total);
  return hit ? (hit[0] === '+Inf' ? '+Inf' : `${Number(hit[0]) * 1000} ms`) : '-';
}

export async function policyStorm(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  // The policy storm: NetworkPolicies created in batches and deleted again while the labels of
  // API-only Pods elsewhere in the cluster churn (Pods bound to a node that does not exist, so no
  // kubelet runs them, with addresses outside every Pod CIDR). The storm's policies take their
  // peers from those Pods' labels, so every relabel changes address groups. Printed: the agent's
  // memory, its CPU time during the storm and the realization histogram's p50/p99 (API change ->
  // flows committed, as the agent measures it).
  const churnPods = run.quick ? 100 : 1000;
  await run.scenario(`policy storm: ${run.quick ? 200 : 2000} NetworkPolicies created, then deleted, labels of ${churnPods} Pods churning`, 1, async () => {
    const rest = clientFor(run.info);
    const np = resolveKind('networkpolicies');
    const podKind = resolveKind('pods');
    const n = run.quick ? 200 : 2000;
    const rss = async () => ((await run.status(target))?.memory as { rssMiB?: number } | undefined)?.rssMiB ?? 0;
    const rules = async () => ((await run.status(target))?.enforcement as { rules?: number } | undefined)?.rules ?? -1;
    await rest.apply(resolveKind('namespaces'), { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'storm', labels: { ns: 'storm' } } } as never);
    const podNames = Array.from({ length: churnPods }, (_, i) => `churn-${i}`);
    for (let i = 0; i < churnPods; i += 50) {
      await Promise.all(podNames.slice(i, i + 50).map(async (name, j) => {
        await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'storm', labels: { churn: String((i + j) % 10) } }, spec: { nodeName: 'node-absent', containers: [{ name: 's', image: 'sluice-lab/workload' }] } } as never);
        const ip = `10.250.${Math.floor((i + j) / 250)}.${((i + j) % 250) + 1}`;
        await rest.patch(podKind, name, 'storm', { status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } }, 'status');
      }));
    }
    const [rss0, rules0] = [await rss(), await rules()];
    const realized0 = await realizationBuckets(lab, target);
    const cpu0 = agentCpuSeconds(lab, target);
    const k = performance.now();
    let relabels = 0;
    let storming = true;
    const labelChurn = (async () => {
      for (let round = 1; storming; round++) {
        for (let i = 0; i < churnPods && storming; i += 50) {
          await Promise.all(podNames.slice(i, i + 50).map((name, j) => rest.patch(podKind, name, 'storm', { metadata: { labels: { churn: String((i + j + round) % 10) } } }).then(() => relabels++)));
        }
      }
    })();
    const names = Array.from({ length: n }, (_, i) => `storm-${i}`);
    for (let i = 0; i < n; i += 50) {
      await Promise.all(names.slice(i, i + 50).map((name, j) => rest.apply(np, {
        apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' },
        // x/c shares x/a's node and is denied already: ports 1000-5999 from z or the storm Pods change no probed verdict.
        spec: {
          podSelector: { matchLabels: { pod: 'c' } },
          ingress: [{
            from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }, { namespaceSelector: { matchLabels: { ns: 'storm' } }, podSelector: { matchLabels: { churn: String((i + j) % 10) } } }],
            ports: [{ protocol: 'TCP', port: 1000 + ((i + j) % 5000) }],
          }],
        },
      } as never)));
    }
    await waitUntil('the storm enforced', async () => (await rules()) >= rules0 + n, 180_000);
    const up = Math.round(performance.now() - k);
    const rssPeak = await rss();
    for (let i = 0; i < n; i += 50) await Promise.all(names.slice(i, i + 50).map((name) => rest.delete(np, name, 'x')));
    await waitUntil('back to the rules before the storm', async () => (await rules()) === rules0, 180_000);
    storming = false;
    await labelChurn;
    const ms = Math.round(performance.now() - k);
    const cpu = agentCpuSeconds(lab, target) - cpu0;
    const realized = bucketDelta(realized0, await realizationBuckets(lab, target));
    for (let i = 0; i < churnPods; i += 50) await Promise.all(podNames.slice(i, i + 50).map((name) => rest.delete(podKind, name, 'storm')));
    await rest.delete(resolveKind('namespaces'), 'storm');
    console.error(
      `policy storm: ${n} policies enforced ${up} ms after the first was created, ${relabels} relabels of ${churnPods} Pods meanwhile; ` +
        `agent RSS ${rss0} MiB before, ${rssPeak} MiB with them, ${await rss()} MiB after they were deleted; ` +
        `agent CPU ${cpu.toFixed(1)} s in ${(ms / 1000).toFixed(1)} s (${Math.round((100 * cpu) / (ms / 1000))} % of a core); ` +
        `realization (API change -> flows committed) p50 <= ${quantile(realized, 0.5)}, p99 <= ${quantile(realized, 0.99)} over ${realized.at(-1)?.[1] ?? 0} commits`,
    );
    return ms;
  });
}
