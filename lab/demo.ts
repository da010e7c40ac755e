/**
 * `sluice-lab demo` (what `npm run lab` runs): a 2-node lab with the x/y/z × a/b/c workload,
 * the reachability matrix, the example policies applied one by one with their one-line
 * explanations, the matrix again, what changed (with enforcing agents, the default) and whether
 * every real-packet verdict agrees with the policy engine. The lab stays up afterwards.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadManifests } from '../daemon/manifests.js';
import { formatMatrices } from '../daemon/policy/probes.js';
import type { ProbeResult } from '../daemon/policy/types.js';
import type { Primary } from './args.js';
import { hostKubeconfigPath, readControl, supervisorPid } from './control.js';
import { repoRoot } from './net/names.js';
import { apply, clientFor, down, probeLab, summary, up, waitForServices, type Out } from './ops.js';
import { apiVersionOf, KINDS, kindOfObject } from './kinds.js';
import { PolicyEngine } from '../daemon/policy/engine.js';
import type { KubeObject } from '../daemon/policy/types.js';
import { ApiError } from './restclient.js';

export const EXPLAIN_ANNOTATION = 'sluice.dev/explain';

export const examplesDir = (): string => join(repoRoot(), 'examples');

/** Cells whose verdicts differ between two probe runs over the same probes (pure). */
export function matrixDifferences(before: ProbeResult[], after: ProbeResult[]): string[] {
  const key = (r: ProbeResult): string => `${r.from} -> ${r.to} ${r.port}/${r.protocol}`;
  const was = new Map(before.map((r) => [key(r), r.verdict]));
  const diffs: string[] = [];
  for (const r of after) {
    const v = was.get(key(r));
    if (v !== r.verdict) diffs.push(`${key(r)}: ${v ?? 'not probed'} -> ${r.verdict}`);
  }
  for (const r of before) if (!after.some((a) => key(a) === key(r))) diffs.push(`${key(r)}: ${r.verdict} -> not probed`);
  return diffs;
}

export async function demo(opts: { name: string; nodes: number; primary: Primary; sluice: boolean }, out: Out): Promise<void> {
  const started = performance.now();
  const workload = join(examplesDir(), 'workload.yaml');
  const policyDir = join(examplesDir(), 'policies');
  const policyFiles = readdirSync(policyDir).filter((f) => /\.(ya?ml|json)$/.test(f)).sort();
  // Read every example first: a broken file stops the demo before anything changes.
  const policies = await Promise.all(policyFiles.map(async (f) => ({ file: f, objects: await loadManifests([join(policyDir, f)]) })));
  await loadManifests([workload]);

  const running = readControl(opts.name);
  const reusable =
    running !== null && supervisorPid(opts.name) !== null && running.nodes.length === opts.nodes && running.primary === opts.primary && running.sluice === opts.sluice;
  let upMs: number;
  if (reusable) {
    out(`reusing the running lab "${opts.name}": removing the example policies, applying the workload`);
    await removeExamplePolicies(opts.name, policies, out);
    await apply({ name: opts.name, files: [workload] }, () => undefined);
    out(await summary(clientFor(running), opts.name, running));
    upMs = performance.now() - started;
  } else {
    if (supervisorPid(opts.name) !== null) out(`a lab "${opts.name}" with another shape is up: recreating it`);
    else if (running) out(`an earlier lab "${opts.name}" is not running properly: recreating it`);
    await down({ name: opts.name, all: false }, () => undefined);
    upMs = (await up({ name: opts.name, nodes: opts.nodes, primary: opts.primary, sluice: opts.sluice, files: [workload] }, out)).ms;
  }
  const info = readControl(opts.name)!;

  out('\n== Reachability without policies (real packets: every Pod to every Pod, TCP and UDP on 80 and 81) ==');
  const t0 = performance.now();
  const first = await probeLab(info);
  const probeMs = performance.now() - t0;
  const before = info.sluice ? await settledProbe(info, out, first) : first;
  out(formatMatrices(before));
  out(`(${before.length} probes in ${(probeMs / 1000).toFixed(1)} s)`);

  out('\n== Applying the example policies ==');
  for (const p of policies) {
    await apply({ name: opts.name, files: [join(policyDir, p.file)] }, (line) => out(`  examples/policies/${p.file}: ${line}`));
  }
  await waitForServices(clientFor(info), opts.name, info.nodes);

  out('\n== Reachability with the example policies ==');
  const after = info.sluice ? await settledProbe(info, out) : await probeLab(info);
  out(formatMatrices(after));
  out('\nWhat each example is meant to do:');
  for (const p of policies) for (const o of p.objects) out(`  ${p.file}: ${o.metadata.annotations?.[EXPLAIN_ANNOTATION] ?? `${o.kind} ${o.metadata.name}`}`);

  const diffs = matrixDifferences(before, after);
  if (diffs.length === 0) {
    out(
      '\nThe two matrices are IDENTICAL: nothing in this lab enforces the policies' +
        (info.sluice ? ' (sluice-agent runs, yet nothing changed: check node-<i>/agent.log).' : ' (sluice is not chained: --no-sluice; run the demo without it to see them enforced).'),
    );
  } else {
    out(
      `\nThe two matrices DIFFER in ${diffs.length} of ${after.length} probes: ` +
        (info.sluice ? "each node's sluice-agent compiled the example policies to flows on its br-int, and these connections are now dropped or rejected there:" : 'what changed:'),
    );
    for (const d of diffs.slice(0, 40)) out(`  ${d}`);
    if (diffs.length > 40) out(`  ... and ${diffs.length - 40} more`);
  }
  if (info.sluice) {
    const disagree = await engineDisagreements(info, after);
    out(
      disagree.length === 0
        ? `Every one of the ${after.length} real-packet verdicts is what the policy engine computes for the same objects (sluicectl simulate).`
        : `${disagree.length} of ${after.length} real-packet verdicts differ from the policy engine (sluicectl simulate):\n${disagree.slice(0, 20).map((d) => `  ${d}`).join('\n')}`,
    );
  }

  const nameFlag = opts.name === 'sl' ? '' : ` --name ${opts.name}`;
  const next: [string, string][] = [
    [`npx sluice-lab get pods${nameFlag}`, 'Pods with their IPs and nodes (also services, nodes, networkpolicies; -o json)'],
    [`npx sluice-lab probe${nameFlag}`, 'the reachability matrix again (--probes FILE -o json for chosen probes)'],
    ['npx sluicectl simulate -f examples/workload.yaml -f examples/policies', 'what the policies should allow, computed offline'],
    [`npx sluice-lab apply${nameFlag} -f FILE`, 'change the lab (also: delete -f FILE, label pod x/a k=v)'],
    [`KUBECONFIG=${hostKubeconfigPath(opts.name)} kubectl get pods -A`, 'the lab API server over HTTPS, for kubectl or any Kubernetes client'],
    [`npx sluice-lab down${nameFlag}`, 'remove the lab completely'],
  ];
  out(`\nLab "${opts.name}" stays up (${reusable ? 'reused' : 'came up'} in ${(upMs / 1000).toFixed(1)} s; ${after.length}-probe matrix in ${(probeMs / 1000).toFixed(1)} s). Next:`);
  for (const [cmd, what] of next) out(`  ${cmd}\n      ${what}`);
}

/** Probes whose real verdict differs from the policy engine fed the lab's current objects. */
async function engineDisagreements(info: NonNullable<ReturnType<typeof readControl>>, results: ProbeResult[]): Promise<string[]> {
  const rest = clientFor(info);
  const engine = new PolicyEngine();
  const lists = await Promise.all(KINDS.map((k) => rest.list(k).catch(() => ({ items: [] as KubeObject[] }))));
  for (const [i, l] of lists.entries()) {
    const k = KINDS[i]!;
    for (const o of l.items as KubeObject[]) engine.upsert({ ...o, apiVersion: apiVersionOf(k), kind: k.kind });
  }
  const out: string[] = [];
  for (const r of results) {
    const v = engine.evaluate({ from: r.from, to: r.to, port: r.port, protocol: r.protocol }).verdict;
    if (v !== r.verdict) out.push(`${r.from} -> ${r.to} ${r.port}/${r.protocol}: packets ${r.verdict}, engine ${v}`);
  }
  return out;
}

/**
 * With an agent, policies take effect asynchronously: probe until two runs agree (at most 5 runs),
 * so the matrix shows what the agent settled on rather than a moment mid-update.
 */
async function settledProbe(info: NonNullable<ReturnType<typeof readControl>>, out: Out, firstRun?: ProbeResult[]): Promise<ProbeResult[]> {
  let last = firstRun ?? (await probeLab(info));
  for (let i = 0; i < 4; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const next = await probeLab(info);
    if (matrixDifferences(last, next).length === 0) return next;
    out(`  (still changing: ${matrixDifferences(last, next).length} probes differ from the run before; probing again)`);
    last = next;
  }
  return last;
}

async function removeExamplePolicies(lab: string, policies: { file: string; objects: { apiVersion: string; kind: string; metadata: { name: string; namespace?: string | undefined } }[] }[], out: Out): Promise<void> {
  const info = readControl(lab)!;
  const rest = clientFor(info);
  let removed = 0;
  for (const p of policies) {
    for (const o of p.objects) {
      const kind = kindOfObject(o);
      try {
        await rest.delete(kind, o.metadata.name, kind.namespaced ? o.metadata.namespace ?? 'default' : undefined);
        removed++;
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 404)) throw err;
      }
    }
  }
  if (removed) out(`  removed ${removed} example polic${removed === 1 ? 'y' : 'ies'} left from an earlier run`);
}
