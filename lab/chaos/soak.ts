/** Steady churn sampling the agent's RSS and open descriptors: a descriptor leak is broken; recovery: each churned Pod's time to attach. */
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { agentPidPath } from '../agent.js';
import { resolveKind } from '../kinds.js';
import { sleep } from '../net/exec.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, FULL_BUDGET_MS, waitUntil } from './harness.js';

export async function soak(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  // The soak: steady churn (the policy churn above, plus a Pod created and one deleted on the
  // enforcing node every 2 s) while the agent's RSS and open file descriptors are sampled. Open
  // descriptors growing from the first third of the samples to the last is a leak; RSS is printed
  // with its trend, not judged (the JS heap grows and shrinks with the collector). The full run
  // stops it early enough to end within its 20 minutes. Recovery: each churned Pod's time to attach.
  const soakMs = run.quick ? 40_000 : Math.max(60_000, Math.min(15 * 60_000, FULL_BUDGET_MS - (performance.now() - run.t0)));
  await run.scenario(`soak: ${Math.round(soakMs / 1000)} s of policy, label and Pod churn, agent RSS and fds sampled`, 1, async () => {
    const rest = clientFor(run.info);
    const podKind = resolveKind('pods');
    const samples: { t: number; rss: number; fds: number }[] = [];
    const sample = async () => {
      const pid = Number(readFileSync(agentPidPath(lab, target), 'utf8').trim());
      const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
      samples.push({ t: (performance.now() - k) / 1000, rss, fds: readdirSync(`/proc/${pid}/fd`).length });
    };
    const attachMs: number[] = [];
    const k = performance.now();
    let next = 0;
    let lastSample = -Infinity;
    const live: string[] = [];
    while (performance.now() - k < soakMs) {
      if (performance.now() - lastSample >= (run.quick ? 2000 : 5000)) {
        lastSample = performance.now();
        await sample();
      }
      const name = `soak-${next++}`;
      const a = performance.now();
      await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z', labels: { soak: String(next % 3) } }, spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
      await waitUntil(`soak Pod ${name} attached`, async () => (await run.attachedPods(target)).some((p) => p.podNamespace === 'z' && p.podName === name), 60_000);
      attachMs.push(Math.round(performance.now() - a));
      live.push(name);
      if (live.length > 3) await rest.delete(podKind, live.shift()!, 'z');
      await sleep(2000);
    }
    await sample();
    for (const name of live) await rest.delete(podKind, name, 'z');
    await waitUntil('every soak Pod detached', async () => !(await run.attachedPods(target)).some((p) => p.podName.startsWith('soak-')), 60_000);
    // The first sixth is warm-up (caches filling, the first Pods' modules loading).
    const warm = samples.slice(Math.floor(samples.length / 6));
    const third = Math.max(1, Math.floor(warm.length / 3));
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
    const slope = (key: 'rss' | 'fds') => {
      const mt = warm.reduce((n, s) => n + s.t, 0) / warm.length;
      const mv = warm.reduce((n, s) => n + s[key], 0) / warm.length;
      const cov = warm.reduce((n, s) => n + (s.t - mt) * (s[key] - mv), 0);
      const vt = warm.reduce((n, s) => n + (s.t - mt) ** 2, 0);
      return vt > 0 ? (cov / vt) * 60 : 0;
    };
    const figures = (key: 'rss' | 'fds') => {
      const first = median(warm.slice(0, third).map((s) => s[key]));
      const last = median(warm.slice(-third).map((s) => s[key]));
      return { start: samples[0]![key], end: samples.at(-1)![key], max: Math.max(...samples.map((s) => s[key])), first, last, slope: slope(key) };
    };
    const fds = figures('fds');
    const rss = figures('rss');
    // A descriptor per churned Pod or policy change would add dozens; a handful is sockets in flight.
    const fdLeak = fds.last - fds.first >= 5 && fds.slope > 0;
    const rssGrowth = rss.last > rss.first * 1.2;
    console.error(`soak: ${samples.length} samples over ${Math.round((performance.now() - k) / 1000)} s, ${next} Pods created and deleted`);
    console.error(`soak: agent fds start ${fds.start}, end ${fds.end}, max ${fds.max}; median first third ${fds.first}, last third ${fds.last}; slope ${fds.slope.toFixed(2)}/min${fdLeak ? ': LEAK' : ': no growth'}`);
    console.error(`soak: agent RSS start ${rss.start.toFixed(0)} MiB, end ${rss.end.toFixed(0)} MiB, max ${rss.max.toFixed(0)} MiB; median first third ${rss.first.toFixed(0)}, last third ${rss.last.toFixed(0)} MiB; slope ${rss.slope.toFixed(2)} MiB/min${rssGrowth ? ': grew more than 20% (printed, not judged)' : ''}`);
    if (fdLeak) run.broken++;
    return attachMs;
  });
}
