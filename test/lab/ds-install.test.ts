/**
 * sluice installed the way a cluster admin installs it: a 2-node lab whose Pods run on the primary
 * CNI alone (`up --no-sluice`), then `sluice-lab apply -f install/crds.yaml -f install/sluice.yaml`
 * with the image `npm run image` builds. The lab's DaemonSet controller and podman kubelet run the
 * DaemonSet's Pod on each node (init container install-cni, then sluice-agent and ovs, in-cluster
 * config over HTTPS with the ServiceAccount token). Then:
 * - every node's Pod becomes Ready (readiness probe), the DaemonSet's status says so, `get pods -A`
 *   shows 2/2, each node's conflist chains sluice-cni;
 * - after the workload Pods are re-created (Pods that ran before the install are not adopted yet,
 *   issue 8 §3), the k8s-netpol scenario's verdicts with real packets equal `sluicectl simulate`;
 * - a template change rolls the Pods one node at a time (maxUnavailable 1: never both nodes without
 *   a Ready sluice Pod, each node's new Pod Ready before the next node's old Pod goes), and the
 *   verdicts still equal the simulator's afterwards;
 * - a killed agent container is restarted in the same Pod after its back-off (restartCount 1), the
 *   Pod reported not Ready meanwhile;
 * - a DaemonSet the lab cannot run as specified (a startupProbe) is refused by apply, naming the field.
 *
 * The ConfigMap is edited as install/sluice.yaml asks an admin to: the lab's Service CIDR, and the
 * userspace datapath (this machine's kernel has no openvswitch module).
 */
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadManifests } from '../../daemon/manifests.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { readControl } from '../../lab/control.js';
import { isPodReady, REVISION_LABEL } from '../../lab/daemonset.js';
import { resolveKind } from '../../lab/kinds.js';
import { conflistPath, repoRoot } from '../../lab/net/names.js';
import { clientFor } from '../../lab/ops.js';
import { podContainerLog } from '../../lab/podman-kubelet.js';
import { policyFlowCounts } from '../../lab/proof/converge.js';
import { mismatchTable } from '../../lab/proof/compare.js';
import { verifyScenario, type StepReport } from '../../lab/proof/verify.js';
import { cli, sluiceSkipReason, writeTemp } from './labcli-helpers.js';

const LAB = 'dsi';
const n = ['--name', LAB];
const ROOT = repoRoot();
const MODEL = join(ROOT, 'test', 'scenarios', 'model.yaml');
const SCENARIO = join(ROOT, 'test', 'scenarios', 'k8s-netpol.yaml');
const POD = resolveKind('pods');
const DS = resolveKind('daemonsets');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

function why(): string | undefined {
  const base = sluiceSkipReason();
  if (base) return base;
  if (!has('podman') || !has('runc') || !has('mmdebstrap')) return 'needs podman, runc and mmdebstrap for the image (npm run prepare-host)';
  return undefined;
}

/** install/sluice.yaml with the two ConfigMap settings the lab needs (each must be found). */
function labManifest(): string {
  const text = readFileSync(join(ROOT, 'install', 'sluice.yaml'), 'utf8');
  const edits: [RegExp, string][] = [
    [/^(\s+datapath:) system$/m, '$1 netdev'],
    [/^(\s+serviceCIDRs:) \[10\.100\.0\.0\/16\]/m, '$1 [10.96.0.0/16]'],
  ];
  let out = text;
  for (const [re, to] of edits) {
    if (!re.test(out)) throw new Error(`install/sluice.yaml no longer has ${re}: update this test`);
    out = out.replace(re, to);
  }
  return out;
}

const skip = why();
if (skip) {
  t.plan(0, skip);
} else {
  const dir = writeTemp({ 'sluice.yaml': labManifest() });
  let rest: ReturnType<typeof clientFor>;
  const sluicePods = async () => (await rest.list(POD, { namespace: 'sluice-system' })).items.filter((p) => p.metadata.labels?.app === 'sluice-agent');

  t.before(async () => {
    const img = spawnSync(process.execPath, [join(ROOT, 'scripts', 'image.mjs')], { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (img.status !== 0) throw new Error(`npm run image failed:\n${img.stderr}`);
    const built = JSON.parse(img.stdout.trim().split('\n').pop()!) as { image: string; cached: boolean; seconds: number };
    t.comment(`image ${built.image}: ${built.cached ? 'cache hit' : 'built'} in ${built.seconds} s`);
    await cli(['down', ...n]);
    const up = await cli(['up', ...n, '--no-sluice', '-f', MODEL]);
    if (up.code !== 0) throw new Error(`sluice-lab up failed: ${up.stderr}`);
    rest = clientFor(readControl(LAB)!);
  });
  t.teardown(async () => {
    const down = await cli(['down', ...n]);
    if (down.code !== 0) console.error(down.stderr);
  });

  /** A container that restarted is reported with its last state and the tail of its log (not a failure: the kubelet restarts it). */
  const restartReport = (t: Test, p: KubeObject) => {
    for (const c of (p.status?.containerStatuses ?? []) as { name: string; restartCount: number; lastState?: unknown }[]) {
      if (!c.restartCount) continue;
      const lines = podContainerLog(LAB, String(p.spec?.nodeName), String(p.metadata.uid), c.name).trim().split('\n');
      const errors = lines.filter((l) => /"level":(50|60)|error|fatal/i.test(l));
      const tail = (errors.length ? errors : lines).slice(-4).join('\n  ');
      t.comment(`${p.metadata.name}/${c.name} restarted ${c.restartCount}x, last ${JSON.stringify(c.lastState)}; log:\n  ${tail}`);
    }
  };

  const verify = async (t: Test, label: string, objects: KubeObject[]) => {
    const reports: StepReport[] = await verifyScenario(readControl(LAB)!, objects);
    const flows = await policyFlowCounts(readControl(LAB)!);
    let probes = 0;
    for (const r of reports) {
      probes += r.probes.length;
      if (r.mismatches.length) t.comment(`${label} step ${r.step}:\n${mismatchTable(r.mismatches)}`);
      t.same(r.mismatches.map((m) => `${m.probe.from} -> ${m.probe.to} ${m.probe.port}/${m.probe.protocol}: lab ${m.lab}, simulate ${m.simulate}`), [], `${label} step ${r.step}: ${r.probes.length} verdicts with real packets = sluicectl simulate`);
    }
    t.ok(Object.values(flows).every((x) => x > 0), `${label}: policy flows on every node's bridge (${JSON.stringify(flows)})`);
    return probes;
  };

  t.test('apply install/crds.yaml + install/sluice.yaml: a Ready sluice Pod on every node', async (t) => {
    const started = performance.now();
    const apply = await cli(['apply', ...n, '-f', join(ROOT, 'install', 'crds.yaml'), '-f', join(dir, 'sluice.yaml')]);
    t.equal(apply.code, 0, `apply: ${apply.stderr.trim()}`);
    let pods: KubeObject[] = [];
    for (const end = Date.now() + 150_000; Date.now() < end; await sleep(500)) {
      pods = await sluicePods();
      if (pods.length === 2 && pods.every(isPodReady)) break;
    }
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    t.equal(pods.filter(isPodReady).length, 2, `both sluice Pods Ready (${secs} s after apply)`);
    t.comment(`all sluice Pods Ready ${secs} s after apply`);
    t.same(pods.map((p) => p.spec?.nodeName).sort(), ['node-1', 'node-2'], 'one Pod per node');
    for (const p of pods) {
      const init = (p.status?.initContainerStatuses ?? []) as { name: string; state: { terminated?: { exitCode: number } } }[];
      t.same(init.map((c) => [c.name, c.state.terminated?.exitCode]), [['install-cni', 0]], `${p.metadata.name}: install-cni ran and exited 0`);
      t.same(((p.status?.containerStatuses ?? []) as { name: string; ready: boolean }[]).map((c) => [c.name, c.ready]), [['sluice-agent', true], ['ovs', true]]);
      t.equal(p.status?.podIP, p.status?.hostIP, 'hostNetwork: the Pod IP is the node\'s');
      restartReport(t, p);
    }
    for (const node of ['node-1', 'node-2']) t.match(readFileSync(conflistPath(LAB, node), 'utf8'), /"sluice-cni"/, `${node}: conflist chains sluice-cni`);
    const ds = await rest.get(DS, 'sluice-agent', 'sluice-system');
    t.match(ds.status, { desiredNumberScheduled: 2, currentNumberScheduled: 2, numberReady: 2, updatedNumberScheduled: 2, numberAvailable: 2 }, 'DaemonSet status');
    const get = await cli(['get', 'pods', '-A', ...n]);
    const lines = get.stdout.split('\n').filter((l) => l.startsWith('sluice-system'));
    t.equal(lines.length, 2, 'get pods -A lists both');
    for (const l of lines) t.match(l, /^sluice-system\s+sluice-agent-\S+\s+2\/2\s+Running\s/, 'READY 2/2 Running');
  });

  t.test('enforced: workload Pods re-created through the chain, k8s-netpol verdicts = simulate', async (t) => {
    // Pods started on the primary alone never crossed the bridge; adopting them is issue 8 §3.
    const del = await cli(['delete', ...n, '-f', MODEL]);
    t.equal(del.code, 0, `delete model: ${del.stderr.trim()}`);
    const add = await cli(['apply', ...n, '-f', MODEL]);
    t.equal(add.code, 0, `apply model: ${add.stderr.trim()}`);
    const started = performance.now();
    const probes = await verify(t, 'installed', await loadManifests([MODEL, SCENARIO]));
    t.comment(`installed: ${probes} verdicts compared in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  });

  t.test('a template change rolls the Pods one node at a time', async (t) => {
    const before = await sluicePods();
    const oldHash = before[0]!.metadata.labels?.[REVISION_LABEL];
    const started = performance.now();
    await rest.patch(DS, 'sluice-agent', 'sluice-system', { spec: { template: { metadata: { annotations: { 'sluice.dev/restarted-at': new Date().toISOString() } } } } });
    // Sampled every 250 ms: per node, whether a Ready sluice Pod is there and of which template.
    const timeline: { ms: number; ready: Record<string, string> }[] = [];
    let done = false;
    for (const end = Date.now() + 180_000; Date.now() < end && !done; await sleep(250)) {
      const pods = await sluicePods();
      const ready: Record<string, string> = {};
      for (const p of pods) if (isPodReady(p)) ready[String(p.spec?.nodeName)] = p.metadata.labels?.[REVISION_LABEL] === oldHash ? 'old' : 'new';
      timeline.push({ ms: performance.now() - started, ready });
      done = pods.length === 2 && Object.values(ready).filter((v) => v === 'new').length === 2;
    }
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    t.ok(done, `both nodes run a Ready Pod of the new template (${secs} s)`);
    t.comment(`roll of 2 nodes: ${secs} s`);
    const worst = Math.max(...timeline.map((s) => 2 - Object.keys(s.ready).length));
    t.equal(worst, 1, 'at most one node without a Ready sluice Pod at any sample (maxUnavailable 1)');
    // The node that went first had its new Pod Ready before the other node's old Pod went.
    const firstGone = timeline.find((s) => Object.keys(s.ready).length < 2);
    const firstNode = ['node-1', 'node-2'].find((nd) => !firstGone?.ready[nd])!;
    const other = firstNode === 'node-1' ? 'node-2' : 'node-1';
    const otherGoneAt = timeline.findIndex((s) => s.ready[other] !== 'old');
    t.equal(timeline[otherGoneAt]?.ready[firstNode], 'new', `${firstNode} was Ready on the new template when ${other}'s old Pod went`);
    const ds = await rest.get(DS, 'sluice-agent', 'sluice-system');
    t.match(ds.status, { desiredNumberScheduled: 2, numberReady: 2, updatedNumberScheduled: 2 }, 'DaemonSet status after the roll');
    for (const p of await sluicePods()) restartReport(t, p);
    const probes = await verify(t, 'after the roll', await loadManifests([MODEL, SCENARIO]));
    t.comment(`after the roll: ${probes} verdicts compared`);
  });

  t.test('restartPolicy Always: a killed container is restarted after its back-off and the Pod is Ready again', async (t) => {
    const pod = (await sluicePods()).find((p) => p.spec?.nodeName === 'node-2')!;
    const agentName = `${LAB}-${String(pod.metadata.uid).slice(0, 8)}-sluice-agent`;
    const kill = spawnSync('podman', ['--runtime', 'runc', 'kill', '--signal', 'KILL', agentName], { encoding: 'utf8', env: { ...process.env, CONTAINERS_CONF: join(ROOT, 'install', 'image', 'containers.conf') } });
    t.equal(kill.status, 0, `podman kill ${agentName}: ${kill.stderr.trim()}`);
    const started = performance.now();
    let sawNotReady = false;
    let now: KubeObject | undefined;
    for (const end = Date.now() + 60_000; Date.now() < end; await sleep(250)) {
      now = await rest.get(POD, pod.metadata.name, 'sluice-system');
      if (!isPodReady(now)) sawNotReady = true;
      else if (sawNotReady) break;
    }
    const agent = ((now?.status?.containerStatuses ?? []) as { name: string; restartCount: number; ready: boolean; lastState?: { terminated?: { exitCode: number } } }[]).find((c) => c.name === 'sluice-agent');
    t.ok(sawNotReady, 'the Pod was reported not Ready while its agent was down');
    t.ok(now && isPodReady(now), `Ready again ${((performance.now() - started) / 1000).toFixed(1)} s after the kill (10 s back-off)`);
    t.equal(agent?.restartCount, 1, 'restartCount 1');
    t.equal(agent?.lastState?.terminated?.exitCode, 137, 'lastState: killed (137)');
    t.equal(now?.metadata.uid, pod.metadata.uid, 'the same Pod (the kubelet restarted its container)');
  });

  t.test('what the lab cannot honour is refused naming the field, and nothing is applied', async (t) => {
    const before = await rest.get(DS, 'sluice-agent', 'sluice-system');
    const text = labManifest().replace(/^(\s+)readinessProbe:$/m, '$1startupProbe:\n$1  httpGet: { host: 127.0.0.1, path: /readyz, port: 9376 }\n$1readinessProbe:');
    t.not(text, labManifest(), 'a startupProbe added to the agent container');
    const bad = writeTemp({ 'sluice.yaml': text });
    const r = await cli(['apply', ...n, '-f', join(bad, 'sluice.yaml')]);
    t.not(r.code, 0, 'apply fails');
    t.match(r.stderr, /daemonset\/sluice-system\/sluice-agent: spec\.template\.spec\.containers\[0\]\.startupProbe is not supported/, 'the message names the field');
    const after = await rest.get(DS, 'sluice-agent', 'sluice-system');
    t.equal(after.metadata.resourceVersion, before.metadata.resourceVersion, 'the DaemonSet is unchanged');
  });
}
