/**
 * The `sluice-lab` commands: thin adapters that read the lab's state, talk to its API server and
 * call lab/net. Each returns normally or throws an Error whose message is what the user sees.
 */
import { spawn } from 'node:child_process';
import { accessSync, closeSync, constants, existsSync, openSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { loadManifests } from '../daemon/manifests.js';
import { formatMatrices, parseProbes } from '../daemon/policy/probes.js';
import type { KubeObject, Probe, ProbeResult } from '../daemon/policy/types.js';
import { DEFAULT_POLICY_SOURCE, type PolicySource, type Primary } from './args.js';
import { hostKubeconfigPath, readControl, requireRunningLab, supervisorLogPath, supervisorPid, isAlive, type ControlInfo } from './control.js';
import { daemonSetProblems } from './cluster/daemonset.js';
import { desiredEndpointSlices, diffSlices, isManagedSlice, SERVICE_NAME_LABEL } from './cluster/endpointslices.js';
import { parseObjectRef, resolveKind } from './kinds.js';
import { createLab, readLabInfo } from './net/lab.js';
import { type IpFamily, nodeIP, nodeName, nodeNetns, netnsPath, podCidr, podNetns, repoRoot, stateDir } from './net/names.js';
import { missingLabPrerequisites } from './net/prereq.js';
import { runProbes } from './net/probe-runner.js';
import { runIn, sleep } from './net/exec.js';
import { destroyLab, listLabs } from './net/teardown.js';
import { formatObjects, table } from './output.js';
import { defaultProbes, planProbes } from './probeplan.js';
import { ApiError, RestClient } from './restclient.js';
import { applyLabelArgs, mergeNodeLabels, objectRef, planApply, planDelete, servedPorts, type PlannedObject } from './scenario.js';
import { servicePortRules } from './cluster/service-rules.js';
import { clusterIPMatch, dnatTarget } from './net/service-nat.js';

export type Out = (text: string) => void;

const POD = resolveKind('pods');
const NODE = resolveKind('nodes');
const SERVICE = resolveKind('services');
const SLICE = resolveKind('endpointslices');

export const clientFor = (info: ControlInfo): RestClient => new RestClient(info.apiUrl, info.token);
const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

// ------------------------------------------------------------------------------------------
// up / down

export interface UpOptions {
  name: string;
  nodes: number;
  primary: Primary;
  sluice: boolean;
  files: string[];
  /** Default ipv4. */
  ipFamily?: IpFamily;
  /** controller (the default, DEFAULT_POLICY_SOURCE): sluice-controller on the host, the agents following it; standalone: each agent computes the cluster. */
  policySource?: PolicySource;
  /** The API server starts with the objects of this file (its data file format). */
  seed?: string;
}

export async function up(opts: UpOptions, out: Out): Promise<{ ms: number; info: ControlInfo }> {
  const started = performance.now();
  const missing = missingLabPrerequisites();
  if (missing.length) throw new Error(`cannot build a lab here, missing: ${missing.join(', ')} (npm run prepare-host installs the packages)`);
  if (opts.sluice) {
    const need = [join(repoRoot(), 'dist', 'daemon', 'main.js'), join(repoRoot(), 'dist', 'bin', 'sluice-cni')].filter((f) => !existsSync(f));
    if (need.length) throw new Error(`--sluice needs ${need.join(' and ')}: build first (npm run build)`);
  }
  const nodes = Array.from({ length: opts.nodes }, (_, k) => nodeName(k + 1));
  // Read and check the scenario before anything is created.
  const plan = planApply(await loadManifests(opts.files), nodes);
  if (opts.seed !== undefined) {
    // The supervisor (its own process and working directory) reads it: named absolutely, checked now.
    const seed = resolve(opts.seed);
    try {
      accessSync(seed, constants.R_OK);
    } catch (err) {
      throw new Error(`--seed ${seed}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
    }
    opts = { ...opts, seed };
  }
  if (supervisorPid(opts.name) !== null) {
    throw new Error(`lab "${opts.name}" is already up; change it with sluice-lab apply, or remove it first with: sluice-lab down --name ${opts.name}`);
  }
  if ((await listLabs()).includes(opts.name)) {
    out(`removing the remains of an earlier lab "${opts.name}"`);
    await stopSupervisor(opts.name);
    await destroyLab(opts.name);
  }
  out(`creating lab "${opts.name}": ${opts.nodes} node(s), primary ${opts.primary}, ${opts.ipFamily ?? 'ipv4'}, sluice ${opts.sluice ? `on (${opts.policySource ?? DEFAULT_POLICY_SOURCE})` : 'off'}`);
  // Interrupted half-way (Ctrl-C): remove what exists rather than leave a half-built lab.
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    interrupted = true;
    out(`\ninterrupted (${signal}): removing lab "${opts.name}"`);
    void stopSupervisor(opts.name)
      .then(() => destroyLab(opts.name))
      .finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const done = (): void => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
  try {
    // Open vSwitch runs per node only for the lab's own agents: without them (--no-sluice) nothing
    // uses it, and sluice installed later from install/sluice.yaml brings its own (the DaemonSet's ovs
    // container), which must find the node's OVS run directory free.
    await createLab({ name: opts.name, nodes: opts.nodes, primary: opts.primary, chainSluice: opts.sluice, ovs: opts.sluice, ...(opts.ipFamily ? { ipFamily: opts.ipFamily } : {}) });
  } catch (err) {
    if (interrupted) await new Promise(() => undefined);
    done();
    throw err;
  }
  try {
    const info = await startSupervisor(opts);
    const rest = clientFor(info);
    if (plan.length) {
      await applyPlan(rest, plan, () => undefined);
      await waitForPods(rest, plannedPods(plan));
      await waitForServices(rest, opts.name, nodes);
    }
    const ms = performance.now() - started;
    out(await summary(rest, opts.name, info));
    out(`lab "${opts.name}" is up (${seconds(ms)})`);
    return { ms, info };
  } catch (err) {
    if (interrupted) await new Promise(() => undefined); // the signal handler removes the lab and exits
    out(`lab "${opts.name}" failed to come up; removing it${logTail(opts.name)}`);
    await stopSupervisor(opts.name);
    await destroyLab(opts.name).catch(() => undefined);
    throw err;
  } finally {
    done();
  }
}

function logTail(lab: string): string {
  try {
    const lines = readFileSync(supervisorLogPath(lab), 'utf8').trim().split('\n').filter((l) => /"level":"(error|fatal|warn)"/.test(l)).slice(-5);
    return lines.length ? `\nsupervisor log (last problems):\n  ${lines.join('\n  ')}` : '';
  } catch {
    return '';
  }
}

async function startSupervisor(opts: UpOptions): Promise<ControlInfo> {
  const script = join(repoRoot(), 'dist', 'lab', 'supervisor.js');
  if (!existsSync(script)) throw new Error(`${script} is missing: build first (npx tsc -p tsconfig.json)`);
  const log = openSync(supervisorLogPath(opts.name), 'a');
  // A seeded cluster's objects and the informers over them outgrow node's default heap limit.
  const args = [...(opts.seed !== undefined ? ['--max-old-space-size=8192'] : []), script, '--name', opts.name, '--nodes', String(opts.nodes), '--primary', opts.primary, ...(opts.sluice ? ['--sluice', '--policy-source', opts.policySource ?? DEFAULT_POLICY_SOURCE] : []),
    ...(opts.seed !== undefined ? ['--seed', opts.seed] : []), '--state-dir', `${stateDir(opts.name)}/`];
  const child = spawn(process.execPath, args, { detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  let exited: number | null | undefined;
  child.on('exit', (code) => (exited = code));
  child.unref();
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const info = readControl(opts.name);
    if (info && info.supervisorPid === child.pid) return info;
    if (exited !== undefined) throw new Error(`the lab supervisor exited (code ${exited}) before it was ready`);
    await sleep(50);
  }
  throw new Error('the lab supervisor was not ready after 120 s');
}

/** SIGTERM the supervisor (it closes its API server and forwarders), SIGKILL if it hangs. */
async function stopSupervisor(lab: string): Promise<void> {
  const pid = supervisorPid(lab);
  if (pid === null) return;
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 50 && isAlive(pid); i++) await sleep(100);
  if (isAlive(pid)) process.kill(pid, 'SIGKILL');
}

export async function down(opts: { name: string; all: boolean }, out: Out): Promise<void> {
  const labs = opts.all ? await listLabs() : [opts.name];
  for (const lab of labs) {
    const exists = (await listLabs()).includes(lab);
    if (!exists) {
      out(`no lab "${lab}" found; nothing to remove`);
      continue;
    }
    await stopSupervisor(lab);
    // DaemonSet Pods' containers (podman) outlive the supervisor, like a kubelet's: removed here.
    // Loaded on demand, as demo in cli.ts: the podman kubelet's informers are heavy to load.
    const containers = await (await import('./cluster/podman-kubelet.js')).removeLabContainers(lab);
    if (containers.length) out(`lab "${lab}": removed ${containers.length} DaemonSet container(s)`);
    const report = await destroyLab(lab);
    out(`lab "${lab}" removed: ${report.netnsDeleted.length} namespace(s), ${report.killed.length} process(es), state dir ${report.stateDirRemoved ? 'removed' : 'absent'}`);
  }
  if (opts.all && labs.length === 0) out('no labs found; nothing to remove');
}

// ------------------------------------------------------------------------------------------
// apply / delete / label

const plannedPods = (plan: PlannedObject[]): { namespace: string; name: string }[] =>
  plan.filter((p) => p.kind.kind === 'Pod').map((p) => ({ namespace: p.obj.metadata.namespace ?? 'default', name: p.obj.metadata.name }));

async function applyPlan(rest: RestClient, plan: PlannedObject[], out: Out): Promise<void> {
  for (const p of plan) {
    const what = `${p.kind.kind.toLowerCase()}/${p.ref}`;
    try {
      if (p.kind.kind === 'Node') {
        const existing = await rest.get(NODE, p.obj.metadata.name);
        await rest.update(NODE, mergeNodeLabels(existing, p.obj));
        out(`${what} labeled`);
        continue;
      }
      if (p.kind.kind === 'Pod') await checkPodUpdate(rest, p.obj);
      const { action } = await rest.apply(p.kind, p.obj);
      out(`${what} ${action}`);
    } catch (err) {
      throw err instanceof ApiError ? new Error(`${what}: ${err.message}`) : err;
    }
  }
}

/**
 * Like a real API server, a Pod's containers, host network and node cannot change once it exists
 * (the lab's kubelet would not restart its sandbox); labels and annotations can.
 */
async function checkPodUpdate(rest: RestClient, pod: KubeObject): Promise<void> {
  const existing = await rest.tryGet(POD, pod.metadata.name, pod.metadata.namespace);
  if (!existing) return;
  const ports = (o: KubeObject) => JSON.stringify(servedPorts(o).map((x) => `${x.name ?? ''}:${x.port}/${x.protocol}`).sort());
  const problems: string[] = [];
  if (ports(existing) !== ports(pod)) problems.push('container ports');
  if (Boolean(existing.spec?.hostNetwork) !== Boolean(pod.spec?.hostNetwork)) problems.push('hostNetwork');
  if (pod.spec?.nodeName && pod.spec.nodeName !== existing.spec?.nodeName) problems.push(`spec.nodeName (it runs on ${existing.spec?.nodeName})`);
  if (problems.length) {
    throw new Error(`Pod ${objectRef(pod)} exists and its ${problems.join(', ')} cannot change: delete it first (sluice-lab delete -f FILE), then apply`);
  }
}

export async function apply(opts: { name: string; files: string[] }, out: Out): Promise<void> {
  const info = requireRunningLab(opts.name);
  const plan = planApply(await loadManifests(opts.files), info.nodes);
  // What the lab's DaemonSet controller and podman kubelet cannot honour is refused before anything is written.
  const refused = plan.filter((p) => p.kind.kind === 'DaemonSet').flatMap((p) => daemonSetProblems(p.obj).map((m) => `daemonset/${p.ref}: ${m}`));
  if (refused.length) throw new Error(`the lab cannot run this as specified (nothing applied):\n  ${refused.join('\n  ')}`);
  const rest = clientFor(info);
  await applyPlan(rest, plan, out);
  if (plan.some((p) => p.kind.kind === 'DaemonSet')) out('DaemonSet Pods start on every node with podman: watch them with `sluice-lab get pods -A`');
  await waitForPods(rest, plannedPods(plan));
  await waitForServices(rest, opts.name, info.nodes);
}

export async function remove(opts: { name: string; files: string[]; ignoreNotFound?: boolean }, out: Out): Promise<void> {
  const info = requireRunningLab(opts.name);
  const plan = planDelete(await loadManifests(opts.files));
  const rest = clientFor(info);
  const failures: string[] = [];
  const gonePods: { namespace: string; name: string }[] = [];
  for (const p of plan) {
    const what = `${p.kind.kind.toLowerCase()}/${p.ref}`;
    if (p.kind.kind === 'Node') {
      failures.push(`${what}: lab nodes cannot be deleted (use sluice-lab down)`);
      continue;
    }
    try {
      // A Namespace takes its Pods along: note them before they disappear from the API.
      const inNamespace = p.kind.kind === 'Namespace' ? (await rest.list(POD, { namespace: p.obj.metadata.name })).items : [];
      await rest.delete(p.kind, p.obj.metadata.name, p.kind.namespaced ? p.obj.metadata.namespace : undefined);
      out(`${what} deleted`);
      if (p.kind.kind === 'Pod') gonePods.push({ namespace: p.obj.metadata.namespace ?? 'default', name: p.obj.metadata.name });
      for (const pod of inNamespace) gonePods.push({ namespace: pod.metadata.namespace!, name: pod.metadata.name });
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.code === 404 && opts.ignoreNotFound) continue;
      failures.push(`${what}: ${err.message}`);
    }
  }
  await waitForPodsGone(rest, opts.name, gonePods);
  await waitForServices(rest, opts.name, info.nodes);
  if (failures.length) throw new Error(failures.join('\n'));
}

export async function label(opts: { name: string; kind: string; ref: string; labels: string[] }, out: Out): Promise<void> {
  const info = requireRunningLab(opts.name);
  const kind = resolveKind(opts.kind);
  const { namespace, name } = parseObjectRef(kind, opts.ref);
  const rest = clientFor(info);
  for (let attempt = 0; ; attempt++) {
    const obj = await rest.get(kind, name, namespace);
    const labels = applyLabelArgs(obj.metadata.labels, opts.labels);
    try {
      await rest.update(kind, { ...obj, metadata: { ...obj.metadata, labels } });
      break;
    } catch (err) {
      if (err instanceof ApiError && err.code === 409 && attempt < 5) continue; // changed meanwhile: redo on the fresh object
      throw err;
    }
  }
  out(`${kind.kind.toLowerCase()}/${opts.ref} labeled`);
  await waitForServices(rest, opts.name, info.nodes);
}

export async function patch(opts: { name: string; kind: string; ref: string; type: 'json' | 'merge'; patch: unknown }, out: Out): Promise<void> {
  const info = requireRunningLab(opts.name);
  const kind = resolveKind(opts.kind);
  const { namespace, name } = parseObjectRef(kind, opts.ref);
  await clientFor(info).patch(kind, name, namespace, opts.patch, undefined, opts.type);
  out(`${kind.kind.toLowerCase()}/${opts.ref} patched`);
}

// ------------------------------------------------------------------------------------------
// waiting for the lab to converge

const podKey = (p: { namespace: string; name: string }): string => `${p.namespace}/${p.name}`;

export async function waitForPods(rest: RestClient, pods: { namespace: string; name: string }[], timeoutMs = 180_000): Promise<void> {
  if (pods.length === 0) return;
  const deadline = Date.now() + timeoutMs;
  let last = new Map<string, KubeObject>();
  while (Date.now() < deadline) {
    last = new Map((await rest.list(POD)).items.map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, p]));
    if (pods.every((p) => last.get(podKey(p))?.status?.phase === 'Running')) return;
    const failed = pods.map((p) => last.get(podKey(p))).filter((o) => o?.status?.phase === 'Failed');
    if (failed.length) throw new Error(`Pods failed to start: ${failed.map((o) => `${objectRef(o!)} on ${o!.spec?.nodeName}: ${o!.status?.message ?? 'no message'}`).join('; ')}`);
    await sleep(100);
  }
  const waiting = pods
    .filter((p) => last.get(podKey(p))?.status?.phase !== 'Running')
    .map((p) => {
      const o = last.get(podKey(p));
      return `${podKey(p)} (${o ? `${o.status?.phase ?? 'no status'}${o.spec?.nodeName ? ` on ${o.spec.nodeName}` : ', not scheduled'}${o.status?.message ? `: ${o.status.message}` : ''}` : 'missing'})`;
    });
  throw new Error(`Pods not running after ${timeoutMs / 1000} s: ${waiting.join(', ')}`);
}

async function waitForPodsGone(rest: RestClient, lab: string, pods: { namespace: string; name: string }[], timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (pods.length && Date.now() < deadline) {
    const present = new Set((await rest.list(POD)).items.map((p) => `${p.metadata.namespace}/${p.metadata.name}`));
    if (pods.every((p) => !present.has(podKey(p)) && !existsSync(netnsPath(podNetns(lab, p.namespace, p.name))))) return;
    await sleep(100);
  }
  if (pods.length) throw new Error(`Pods not torn down after ${timeoutMs / 1000} s: ${pods.map(podKey).join(', ')}`);
}

/**
 * Waits until the EndpointSlice controller has caught up with the Pods and every node's nat table
 * carries every Service's ClusterIP rules, so that a probe right after sees what the objects say.
 */
export async function waitForServices(rest: RestClient, lab: string, nodes: string[], timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let why = '';
  while (Date.now() < deadline) {
    const [services, pods, slices] = await Promise.all([rest.list(SERVICE), rest.list(POD), rest.list(SLICE)]);
    why = '';
    for (const svc of services.items) {
      const desired = desiredEndpointSlices(svc, pods.items.filter((p) => p.metadata.namespace === svc.metadata.namespace));
      if (!desired) continue;
      const existing = slices.items.filter((s) => s.metadata.namespace === svc.metadata.namespace && isManagedSlice(s) && s.metadata.labels?.[SERVICE_NAME_LABEL] === svc.metadata.name);
      const d = diffSlices(desired, existing);
      if (d.create.length + d.update.length + d.delete.length) why = `EndpointSlices of Service ${svc.metadata.namespace}/${svc.metadata.name} not up to date`;
    }
    if (!why) {
      const needles = servicePortRules(services.items, slices.items).flatMap((r) =>
        r.endpoints.length ? [clusterIPMatch(r), ...r.endpoints.map((e) => `--to-destination ${dnatTarget(e)}`)] : [],
      );
      for (const node of nodes) {
        // Both families' nat tables, read as one text: IPv6 Services live in ip6tables.
        const tables = await Promise.all(['iptables-save', 'ip6tables-save'].map((save) => runIn(nodeNetns(lab, node), save, ['-t', 'nat'])));
        const stdout = tables.map((r) => r.stdout).join('\n');
        const missing = needles.find((n) => !stdout.includes(n));
        if (missing) why = `kube-proxy on ${node} has not programmed "${missing}" yet`;
        // Rules for endpoints that are gone must be gone too.
        const stale = [...stdout.matchAll(/--to-destination (\S+)/g)].map((m) => m[1]!).find((dst) => !needles.includes(`--to-destination ${dst}`));
        if (stale) why = `kube-proxy on ${node} still has a rule to ${stale}`;
        if (why) break;
      }
    }
    if (!why) return;
    await sleep(100);
  }
  throw new Error(`Services did not converge within ${timeoutMs / 1000} s: ${why}`);
}

// ------------------------------------------------------------------------------------------
// get / kubeconfig / probe

export async function get(opts: { name: string; kind: string; ref?: string; output: 'table' | 'json' }, out: Out): Promise<void> {
  const info = requireRunningLab(opts.name);
  const kind = resolveKind(opts.kind);
  const rest = clientFor(info);
  let items: KubeObject[];
  if (opts.ref) {
    const { namespace, name } = parseObjectRef(kind, opts.ref);
    items = [await rest.get(kind, name, namespace)];
  } else {
    items = (await rest.list(kind)).items.sort((a, b) => objectRef(a).localeCompare(objectRef(b)));
  }
  if (opts.output === 'json') {
    out(JSON.stringify({ apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: '' }, items: items.map((o) => withTypeMeta(o, kind)) }, null, 2));
  } else {
    out(formatObjects(kind, items));
  }
}

/** List items from the API server may omit apiVersion/kind (like real list responses); a List item needs them. */
const withTypeMeta = (o: KubeObject, kind: ReturnType<typeof resolveKind>): KubeObject => ({
  ...o,
  apiVersion: o.apiVersion ?? (kind.group ? `${kind.group}/${kind.version}` : kind.version),
  kind: o.kind ?? kind.kind,
});

export function kubeconfig(opts: { name: string }, out: Out): void {
  requireRunningLab(opts.name);
  const path = hostKubeconfigPath(opts.name);
  if (!existsSync(path)) throw new Error(`lab "${opts.name}" has no kubeconfig at ${path}`);
  out(path);
}

export async function probe(opts: { name: string; probes?: string; family?: 4 | 6; output: 'table' | 'json' }, out: Out): Promise<ProbeResult[]> {
  const info = requireRunningLab(opts.name);
  const results = await probeLab(info, opts.probes ? await readProbeFile(opts.probes) : undefined, opts.family);
  if (opts.output === 'json') out(JSON.stringify(results, null, 2));
  else out(results.length ? formatMatrices(results) : 'nothing to probe (no running Pods with served ports)');
  return results;
}

async function readProbeFile(file: string): Promise<Probe[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file}: not valid JSON: ${(err as Error).message}`);
  }
  try {
    return parseProbes(json);
  } catch (err) {
    throw new Error(`${file}: ${(err as Error).message}`);
  }
}

/**
 * Sends the probes (default: every Pod to every Pod on every served port) and returns verdicts;
 * `family` applies to every probe without its own. A result names its family when the probe did.
 */
export async function probeLab(info: ControlInfo, probes?: Probe[], family?: 4 | 6): Promise<ProbeResult[]> {
  const rest = clientFor(info);
  const [pods, services] = await Promise.all([rest.list(POD), rest.list(SERVICE)]);
  const list = (probes ?? defaultProbes(pods.items)).map((p) => (family !== undefined && p.family === undefined ? { ...p, family } : p));
  if (list.length === 0) return [];
  const net = planProbes(list, { lab: info.name, nodes: info.nodes, pods: pods.items, services: services.items });
  const verdicts = await runProbes(net);
  return list.map((p, i) => ({ from: p.from, to: p.to, port: p.port, protocol: p.protocol, ...(p.family !== undefined ? { family: p.family } : {}), verdict: verdicts[i]!.verdict }));
}

// ------------------------------------------------------------------------------------------
// what `up` prints

export async function summary(rest: RestClient, lab: string, info: ControlInfo): Promise<string> {
  const [pods, services] = await Promise.all([rest.list(POD), rest.list(SERVICE)]);
  const labInfo = readLabInfo(lab);
  const parts = [
    `NODES (primary CNI ${info.primary}${info.sluice ? ' + sluice' : ''})`,
    indent(table(['NAME', 'INTERNAL-IP', 'POD-CIDR', 'NETNS'], info.nodes.map((n) => [n, nodeIP(n), podCidr(n), nodeNetns(lab, n)]))),
  ];
  if (labInfo) parts.push(`EXTERNAL HOST\n  ${labInfo.ext.netns}  ${labInfo.ext.ip} (also ${labInfo.ext.publicIp})`);
  // A seeded cluster's Pods on Nodes the lab does not run are objects only: counted, not listed.
  const onLab = new Set(info.nodes);
  const userPods = pods.items.filter((p) => p.spec?.nodeName === undefined || onLab.has(p.spec.nodeName)).sort((a, b) => objectRef(a).localeCompare(objectRef(b)));
  if (userPods.length) {
    parts.push('PODS', indent(table(['POD', 'IP', 'NODE', 'STATUS'], userPods.map((p) => [objectRef(p), p.status?.podIP ?? '<none>', p.spec?.nodeName ?? '<none>', p.status?.phase ?? '']))));
  }
  const elsewhere = pods.items.length - userPods.length;
  if (elsewhere > 0) parts.push(`(and ${elsewhere} Pods on Nodes outside the lab, objects only)`);
  const userServices = services.items.filter((s) => !(s.metadata.namespace === 'default' && s.metadata.name === 'kubernetes'));
  if (userServices.length) {
    parts.push('SERVICES', indent(table(['SERVICE', 'CLUSTER-IP', 'PORTS'], userServices.sort((a, b) => objectRef(a).localeCompare(objectRef(b))).map((s) => [objectRef(s), s.spec?.clusterIP ?? '<none>', shortPorts(s)]))));
  }
  parts.push(`kubeconfig: ${hostKubeconfigPath(lab)}  (API server ${info.apiHttpsUrl})`);
  return parts.join('\n');
}

const shortPorts = (s: KubeObject): string =>
  ((s.spec?.ports ?? []) as { port: number; protocol?: string }[]).map((p) => `${p.port}/${p.protocol ?? 'TCP'}`).join(',') || '<none>';

const indent = (s: string): string => s.split('\n').map((l) => `  ${l}`).join('\n');
