/**
 * Scale bench (prints figures, asserts nothing): a real sluice-controller process computing a large
 * cluster and serving it to many real watch clients, beside a standalone agent of the same cluster.
 *
 * - The lab's API server (its own process) starts with the whole cluster of bench/cluster-model.ts
 *   loaded from a seed file: `--pods` Pods (20 per Namespace) on `--nodes` Nodes, `--policies`
 *   policies of every kind.
 * - sluice-controller (its own process, the real binary) lists it, computes every Node's view and
 *   serves them over HTTPS. Its initial computation is timed from its start to its first Ready.
 * - `--watchers` simulated agents, each with its own Node name and a token bound to that Node, list
 *   and watch their Node's span through the agent's ControlPlaneWatcher (in this process; they
 *   count what they receive and when).
 * - Full agents, each its own process (bench/scale/agent.ts): two in controller mode (node-143,
 *   whose Pod ns-7/pod-3 the churn relabels, and a Node far from it) and, unless
 *   `--no-standalone`, one in standalone mode on node-143 (the whole cluster from the API server,
 *   as every agent is without the controller). They compile their policy flows (no bridge), with
 *   every module of a whole agent loaded (bench/scale/agent.ts), so that their RSS counts its code.
 *
 * Then a churn through the API server, `--reps` times each: a Pod created (with its address) and
 * deleted, a Pod relabelled in and out of groups, a Pod label no policy reads, a NetworkPolicy's
 * podSelector edited, an AdminNetworkPolicy's peer edited. Printed per kind of event:
 * - the controller: its time per event (its own /status figure: engine, views and watch events of
 *   that event) and its process CPU per event (from /proc, so serving the watches counts too);
 * - the watchers: how many received something, the bytes and events they got, and event -> the
 *   last in-span watcher received it (p50/p99 over the reps); the bytes the others got;
 * - the full agents: bytes received, CPU per event (the process's, less the bench's own
 *   instrumentation in it; of it, the part in sluice's handlers: watch callbacks and the timers of
 *   the follower and the flush scheduler, the rest being the runtime receiving the event; beside it
 *   the same window's CPU in reps with nothing to compile), event -> flows compiled, for each mode.
 *
 * usage: node --expose-gc --max-old-space-size=8192 dist/bench/scale.js [--pods 150000] [--nodes 5000] [--policies 10000]
 *          [--watchers 500] [--reps 10] [--no-standalone] [--profile-controller DIR] [--profile-agents DIR]
 * (--profile-controller: the controller runs with --cpu-prof, its profile written to DIR at its exit;
 * --profile-agents: each full agent's CPU profile and allocation samples of the churn, written to DIR.)
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { ControlPlaneWatcher } from '../daemon/controlplane/client.js';
import { AGENT_NODE_FLAGS, agentEnv } from '../daemon/node-flags.js';
import { serviceAccountToken } from '../lab/apiserver/satoken.js';
import { controllerGet, freePort } from '../lab/controller.js';
import { clusterModel, numberArg, podContainers, podLabels, scaleClusterArgs } from './cluster-model.js';
import { writeClusterSeed } from './cluster-seed.js';
import type { ScaleAgentConfig, ScaleAgentFigures, ScaleAgentMessage } from './scale/agent.js';

const { pods: PODS, nodes: NODES, policies: POLICIES } = scaleClusterArgs();
const WATCHERS = Math.min(numberArg('watchers', 500), NODES);
const REPS = numberArg('reps', 10);
const STANDALONE = !process.argv.includes('--no-standalone');
const flag = (name: string) => (process.argv.includes(`--${name}`) ? process.argv[process.argv.indexOf(`--${name}`) + 1] : undefined);
const PROFILE_DIR = flag('profile-controller');
const AGENT_PROFILE_DIR = flag('profile-agents');
const PODS_PER_NS = 20;
const NS = 'sluice-system';
const ADMIN_TOKEN = 'scale-bench-admin';
const SA_KEY = 'scale-bench-service-account-key';
const here = fileURLToPath(new URL('.', import.meta.url));
const root = join(here, '..', '..');

const now = () => performance.timeOrigin + performance.now();
const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]! : Number.NaN);
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(x < 10 ? 2 : 1) : '-');
const kib = (b: number) => `${(b / 1024).toFixed(1)} KiB`;
const mibOf = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A process's resident memory and CPU so far (utime + stime), from /proc. */
function proc(pid: number): { rssMiB: number; cpuMs: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rssMiB: Math.round(rss), cpuMs: ticks * 10 };
}

// ---------------------------------------------------------------------------- the cluster

const dir = mkdtempSync(join(tmpdir(), 'sluice-scale-'));
const namespaces = Math.round(PODS / PODS_PER_NS);
console.log(`== scale: ${PODS} Pods in ${namespaces} Namespaces on ${NODES} Nodes, ${POLICIES} policies; ${WATCHERS} watch clients (load ${loadavg()[0]!.toFixed(1)})`);
const model = clusterModel({ namespaces, podsPerNamespace: PODS_PER_NS, nodes: NODES, policies: POLICIES });
writeClusterSeed(join(dir, 'seed.json'), [
  ...model.cluster, ...model.policies,
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } },
  { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'sluice-agent', namespace: NS } },
]);
const np = model.policies.find((p) => p.apiVersion === 'networking.k8s.io/v1' && p.kind === 'NetworkPolicy');
if (!np) throw new Error(`--policies ${POLICIES}: too few for a Kubernetes NetworkPolicy (the first 500 are of the other kinds)`);
const anp = model.policies.find((p) => p.kind === 'AdminNetworkPolicy')!;
model.cluster.length = 0;
model.policies.length = 0;
writeFileSync(join(dir, 'sa.key'), SA_KEY);

// ---------------------------------------------------------------------------- processes

const children: ChildProcess[] = [];
const cleanup = () => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
};
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));

async function startApiServer(): Promise<string> {
  const child = spawn(process.execPath, ['--max-old-space-size=8192', join(root, 'dist/lab/apiserver/main.js'), '--port', '0', '--token', ADMIN_TOKEN,
    '--seed', join(dir, 'seed.json'), '--service-account-key-file', join(dir, 'sa.key'), '--history', '100000'], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  for await (const line of createInterface({ input: child.stdout! })) {
    const m = JSON.parse(line) as { msg: string; url?: string };
    if (m.msg === 'listening') return m.url!;
  }
  throw new Error('the API server exited before it listened');
}

const apiT0 = performance.now();
const apiUrl = await startApiServer();
console.log(`API server: ${apiUrl}, cluster loaded in ${((performance.now() - apiT0) / 1000).toFixed(1)} s`);
const kubeconfig = join(dir, 'kubeconfig');
writeFileSync(kubeconfig, JSON.stringify({
  apiVersion: 'v1', kind: 'Config', 'current-context': 'scale',
  clusters: [{ name: 'scale', cluster: { server: apiUrl } }], users: [{ name: 'admin', user: { token: ADMIN_TOKEN } }],
  contexts: [{ name: 'scale', context: { cluster: 'scale', user: 'admin' } }],
}));

async function api(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<Record<string, unknown>> {
  for (let attempt = 1; ; attempt++) {
    const res = await fetch(`${apiUrl}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': contentType }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
    const text = await res.text();
    if (res.ok) return JSON.parse(text) as Record<string, unknown>;
    if (res.status < 500 || attempt >= 5) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    await sleep(100 * attempt);
  }
}

const port = await freePort();
const controllerLogPath = join(dir, 'controller.log');
const controllerLog = openSync(controllerLogPath, 'w');
/** The controller's log lines (pino JSON) so far. */
const controllerLines = () => readFileSync(controllerLogPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
const ctlT0 = now();
const controller = spawn(process.execPath, [...(PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []), join(root, 'dist/daemon/controller/main.js'), '--kubeconfig', kubeconfig, '--listen', `127.0.0.1:${port}`,
  '--namespace', NS, '--identity', 'scale-bench', '--certificate-ips', '127.0.0.1', '--read-all-users', 'sluice-lab-admin'], { stdio: ['ignore', controllerLog, controllerLog] });
closeSync(controllerLog);
children.push(controller);
const controllerUrl = `https://127.0.0.1:${port}`;
let status: Record<string, unknown> = {};
for (;;) {
  const r = await controllerGet(port, '/status', undefined, ADMIN_TOKEN);
  if (r.code === 200) {
    status = JSON.parse(r.body) as Record<string, unknown>;
    if (status.leading === true && status.viewsComputed === true) break;
  }
  if (controller.exitCode !== null) throw new Error(`sluice-controller exited (${controller.exitCode})`);
  await sleep(100);
}
const ctlReady = now();
const ctlStart = proc(controller.pid!);
const computedLine = controllerLines().find((l) => l.msg === 'cluster listed: every Node\'s view is computed');
console.log(`controller: serving every Node's view ${((ctlReady - ctlT0) / 1000).toFixed(1)} s after its start (its lists of the API server included; the views computed in ${String(computedLine?.computeMs ?? '?')} ms once they were in), CPU ${(ctlStart.cpuMs / 1000).toFixed(1)} s, RSS ${ctlStart.rssMiB} MiB; ` +
  `${JSON.stringify(status.objects)}, ${String(status.nodes)} Nodes with a view`);

let ca = '';
for (;;) {
  try {
    ca = ((await api('GET', `/api/v1/namespaces/${NS}/configmaps/sluice-ca`)).data as Record<string, string>)['ca.crt'] ?? '';
    if (ca) break;
  } catch {
    // not published yet
  }
  await sleep(100);
}
writeFileSync(join(dir, 'ca.crt'), ca);
const tokenFor = (node: string) => serviceAccountToken(SA_KEY, NS, 'sluice-agent', { podName: `sluice-agent-${node}`, nodeName: node });

// ---------------------------------------------------------------------------- full agents

interface FullAgent {
  label: string;
  child: ChildProcess;
  ready: Promise<{ at: number; figures: ScaleAgentFigures }>;
  commits: number[];
  /** `collect`: after a full GC (memory); off for CPU readings, which the GC would be charged to. */
  figures(collect?: boolean): Promise<ScaleAgentFigures>;
}

const profiled: string[] = [];
function fullAgent(label: string, config: ScaleAgentConfig): FullAgent {
  // With the V8 flags and environment sluice-agent runs with (the image's wrapper, the lab): its memory as deployed.
  const child = fork(join(here, 'scale', 'agent.js'), [], {
    execArgv: [...AGENT_NODE_FLAGS, '--max-old-space-size=8192'], env: { ...agentEnv(), ...process.env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.push(child);
  const commits: number[] = [];
  let asked: ((f: ScaleAgentFigures) => void)[] = [];
  let readyResolve!: (r: { at: number; figures: ScaleAgentFigures }) => void;
  const ready = new Promise<{ at: number; figures: ScaleAgentFigures }>((resolve, reject) => {
    readyResolve = resolve;
    child.once('exit', (code) => reject(new Error(`agent ${label} exited (${code})`)));
  });
  child.on('message', (m: ScaleAgentMessage) => {
    if (m.type === 'ready') readyResolve({ at: m.at, figures: m.figures });
    else if (m.type === 'commit') commits.push(m.at);
    else if (m.type === 'profiled') profiled.push(m.file);
    else if (m.type === 'figures') {
      const waiting = asked;
      asked = [];
      for (const w of waiting) w(m.figures);
    }
  });
  child.send({ type: 'start', config });
  return {
    label, child, ready, commits,
    figures: (collect = true) => new Promise((resolve) => {
      asked.push(resolve);
      child.send({ type: 'figures', collect });
    }),
  };
}

const FAR = `node-${Math.floor(NODES / 2) + 1}`;
const controlled = (node: string) => ({ mode: 'controller' as const, nodeName: node, server: controllerUrl, caFile: join(dir, 'ca.crt'), token: tokenFor(node) });
const agentT0 = now();
const agents: FullAgent[] = [fullAgent('controller mode, node-143', controlled('node-143')), fullAgent(`controller mode, ${FAR}`, controlled(FAR))];
if (STANDALONE) agents.push(fullAgent('standalone, node-143', { mode: 'standalone', nodeName: 'node-143', kubeconfig }));
for (const a of agents) {
  const r = await a.ready;
  const f = r.figures;
  console.log(`agent ${a.label}: first state compiled ${((r.at - agentT0) / 1000).toFixed(1)} s after start; received ${mibOf(f.bytes)}; RSS ${f.rssMiB} MiB (heap ${f.heapMiB} MiB; the whole agent's modules, loaded first, ${f.codeRssMiB} MiB of it); ${f.rules} node rules, ${f.flows} policy flows; CPU ${(f.cpuMs / 1000).toFixed(1)} s`);
}

// ---------------------------------------------------------------------------- watch clients

interface Watched {
  node: string;
  bytes: number;
  events: number;
  last: number;
  /** Events of the current churn step: arrival and JSON bytes. */
  step: { at: number; bytes: number }[];
  synced: boolean;
  watcher: ControlPlaneWatcher;
}
const watched: Watched[] = [];
const wT0 = now();
let syncedCount = 0;
let allSynced!: () => void;
const allSyncedP = new Promise<void>((r) => (allSynced = r));
for (let i = 0; i < WATCHERS; i++) {
  // A stride prime to the Node count: evenly spread Nodes of every residue (Pods are placed by index modulo the Node count).
  const node = `node-${(i * 7919) % NODES}`;
  const listed = new Set<string>();
  const w: Watched = {
    node, bytes: 0, events: 0, last: 0, step: [], synced: false,
    watcher: new ControlPlaneWatcher({
      server: controllerUrl, nodeName: node, token: tokenFor(node), ca,
      onSync: (kind, items) => {
        for (const o of items) w.bytes += JSON.stringify(o).length;
        listed.add(kind);
        if (listed.size === 3 && !w.synced) {
          w.synced = true;
          if (++syncedCount === WATCHERS) allSynced();
        }
      },
      onEvent: (_kind, e) => {
        const bytes = JSON.stringify(e.object).length;
        w.events++;
        w.bytes += bytes;
        w.last = now();
        w.step.push({ at: w.last, bytes });
      },
    }),
  };
  watched.push(w);
  w.watcher.start();
}
await allSyncedP;
const initialBytes = watched.map((w) => w.bytes);
const listedStatus = JSON.parse((await controllerGet(port, '/status', ca, ADMIN_TOKEN)).body) as { memory?: Record<string, number> };
console.log(`${WATCHERS} watch clients (one process, parsing every list): every view listed ${((now() - wT0) / 1000).toFixed(1)} s after they started; per client p50 ${mibOf(pct(initialBytes, 0.5))}, max ${mibOf(Math.max(...initialBytes))}, ${mibOf(initialBytes.reduce((a, b) => a + b, 0))} in all; ` +
  `controller RSS ${proc(controller.pid!).rssMiB} MiB (${JSON.stringify(listedStatus.memory)}), this process (the clients) ${Math.round(process.memoryUsage().rss / 2 ** 20)} MiB`);

// ---------------------------------------------------------------------------- churn

const podPath = (ns: string, name = '') => `/api/v1/namespaces/${ns}/pods${name ? `/${name}` : ''}`;
const podBody = (ns: string, name: string, k: number, labels: Record<string, string>) => {
  const ip = `10.${16 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`;
  return {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: ns, labels },
    spec: { nodeName: `node-${k % NODES}`, containers: podContainers(k % PODS_PER_NS) },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
  };
};
const merge = 'application/merge-patch+json';
const npSpec = np.spec as Record<string, unknown>;
const anpSpec = anp.spec as { ingress?: { from?: unknown[] }[] };

interface ChurnKind {
  name: string;
  run(i: number): Promise<void>;
}
const churn: ChurnKind[] = [
  {
    name: 'Pod created / deleted (ns-9/scale-new)', run: async (i) => {
      if (i % 2) {
        await api('DELETE', podPath('ns-9', 'scale-new'));
        return;
      }
      const body = podBody('ns-9', 'scale-new', PODS + 7, podLabels(4));
      const created = await api('POST', podPath('ns-9'), body);
      // Kubernetes writes a new Pod's address with its status (the kubelet's report).
      if (!(created.status as { podIP?: string } | undefined)?.podIP) await api('PATCH', `${podPath('ns-9', 'scale-new')}/status`, { status: body.status }, merge);
    },
  },
  { name: 'Pod relabelled (ns-7/pod-3, tier fe <-> be)', run: (i) => api('PATCH', podPath('ns-7', 'pod-3'), { metadata: { labels: { tier: i % 2 ? 'fe' : 'be' } } }, merge).then(() => undefined) },
  { name: 'Pod label no policy reads', run: (i) => api('PATCH', podPath('ns-7', 'pod-4'), { metadata: { labels: { 'pod-template-hash': `h${i}` } } }, merge).then(() => undefined) },
  {
    name: `NetworkPolicy ${np.metadata.namespace}/${np.metadata.name}: podSelector edited`, run: (i) =>
      api('PATCH', `/apis/networking.k8s.io/v1/namespaces/${np.metadata.namespace}/networkpolicies/${np.metadata.name}`,
        { spec: { podSelector: i % 2 ? npSpec.podSelector : { matchLabels: { tier: 'fe' } } } }, merge).then(() => undefined),
  },
  {
    name: `AdminNetworkPolicy ${anp.metadata.name}: a peer edited`, run: (i) => {
      const ingress = structuredClone(anpSpec.ingress ?? []);
      if (i % 2 === 0 && ingress[0]) ingress[0].from = [{ namespaces: { matchLabels: { team: `t${(i / 2) % 20}` } } }];
      return api('PATCH', `/apis/policy.networking.k8s.io/v1alpha1/adminnetworkpolicies/${anp.metadata.name}`, { spec: { ingress } }, merge).then(() => undefined);
    },
  },
];

interface CostFigures {
  events: number;
  totalMs?: number;
}
const controllerCost = async (): Promise<CostFigures> => {
  const r = await controllerGet(port, '/status', ca, ADMIN_TOKEN);
  return (JSON.parse(r.body) as { eventCost: CostFigures }).eventCost;
};

/** Until nothing more arrives: no watch client and no full agent heard anything for `quietMs`. */
async function settle(quietMs = 1000): Promise<void> {
  for (;;) {
    const last = Math.max(...watched.map((w) => w.last), ...agents.map((a) => a.commits.at(-1) ?? 0));
    if (now() - last >= quietMs) return;
    await sleep(50);
  }
}

await settle();
if (AGENT_PROFILE_DIR) for (const a of agents) a.child.send({ type: 'profile' });
for (const kind of churn) {
  const controllerMs: number[] = [];
  const updated: number[] = [];
  const bytesIn: number[] = [];
  const eventsIn: number[] = [];
  const lastReceived: number[] = [];
  const agentFigures = new Map<string, { bytes: number[]; cpu: number[]; handlerCpu: number[]; idleCpu: number[]; compiled: number[] }>(agents.map((a) => [a.label, { bytes: [], cpu: [], handlerCpu: [], idleCpu: [], compiled: [] }]));
  const cpu0 = proc(controller.pid!).cpuMs;
  let controllerEvents = 0;
  for (let i = 0; i < REPS; i++) {
    for (const w of watched) w.step = [];
    const agentBefore = await Promise.all(agents.map((a) => a.figures(false)));
    const commitsBefore = agents.map((a) => a.commits.length);
    const cost0 = await controllerCost();
    const t = now();
    await kind.run(i);
    await settle();
    const cost1 = await controllerCost();
    controllerEvents += cost1.events - cost0.events;
    controllerMs.push((cost1.totalMs ?? 0) - (cost0.totalMs ?? 0));
    let n = 0;
    let latest = 0;
    for (const w of watched) {
      // Only what came after the write: anything earlier belongs to the step before.
      const mine = w.step.filter((e) => e.at >= t);
      const b = mine.reduce((sum, e) => sum + e.bytes, 0);
      if (mine.length > 0) {
        n++;
        bytesIn.push(b);
        eventsIn.push(mine.length);
        latest = Math.max(latest, mine.at(-1)!.at - t);
      }
    }
    updated.push(n);
    if (n > 0) lastReceived.push(latest);
    const after = await Promise.all(agents.map((a) => a.figures(false)));
    agents.forEach((a, j) => {
      const fig = agentFigures.get(a.label)!;
      fig.bytes.push(after[j]!.bytes - agentBefore[j]!.bytes);
      const commits = a.commits.slice(commitsBefore[j]!).filter((at) => at >= t);
      if (commits.length > 0) {
        fig.cpu.push(after[j]!.cpuMs - agentBefore[j]!.cpuMs);
        fig.handlerCpu.push(after[j]!.handlerCpuMs - agentBefore[j]!.handlerCpuMs);
        fig.compiled.push(commits.at(-1)! - t);
      } else fig.idleCpu.push(after[j]!.cpuMs - agentBefore[j]!.cpuMs);
    });
  }
  const cpu = proc(controller.pid!).cpuMs - cpu0;
  console.log(`\n${kind.name} (${REPS} reps, ${controllerEvents} controller events):`);
  console.log(`  controller: p50 ${f1(pct(controllerMs, 0.5))} ms p90 ${f1(pct(controllerMs, 0.9))} ms per rep (its /status timing); process CPU ${f1(cpu / REPS)} ms per rep (serving the watches included, 10 ms ticks)`);
  console.log(`  watch clients: ${f1(pct(updated, 0.5))} of ${WATCHERS} received something (p50); those got p50 ${kib(pct(bytesIn, 0.5))} in ${f1(pct(eventsIn, 0.5))} events (the others: no event, no byte); ` +
    `write -> last in-span client received p50 ${f1(pct(lastReceived, 0.5))} ms p99 ${f1(pct(lastReceived, 0.99))} ms`);
  for (const a of agents) {
    const fig = agentFigures.get(a.label)!;
    console.log(`  agent ${a.label}: received p50 ${kib(pct(fig.bytes, 0.5))} per rep; ` +
      (fig.compiled.length ? `${fig.compiled.length} reps ${a.label.startsWith('standalone') ? 'taken in (every event is)' : 'compiled flows'}: CPU p50 ${f1(pct(fig.cpu, 0.5))} ms (in sluice's handlers p50 ${f1(pct(fig.handlerCpu, 0.5))} ms), write -> flows compiled p50 ${f1(pct(fig.compiled, 0.5))} ms p99 ${f1(pct(fig.compiled, 0.99))} ms` : 'not in span (no compile)') +
      (fig.idleCpu.length ? `; reps with nothing to compile: CPU p50 ${f1(pct(fig.idleCpu, 0.5))} ms` : ''));
  }
}

if (AGENT_PROFILE_DIR) {
  agents.forEach((a, j) => a.child.send({ type: 'profile-stop', file: join(AGENT_PROFILE_DIR, `agent-${j}-${a.label.replace(/[^a-z0-9]+/gi, '-')}.cpuprofile`) }));
  while (profiled.length < agents.length) await sleep(100);
  console.log(`agent CPU profiles of the churn: ${profiled.join(', ')}`);
}
const endFigures = await Promise.all(agents.map((a) => a.figures()));
const finalStatus = JSON.parse((await controllerGet(port, '/status', ca, ADMIN_TOKEN)).body) as { memory?: Record<string, number> };
console.log(`\nafter the churn: controller RSS ${proc(controller.pid!).rssMiB} MiB (${JSON.stringify(finalStatus.memory)}); ${agents.map((a, j) => `agent ${a.label} RSS ${endFigures[j]!.rssMiB} MiB (heap ${endFigures[j]!.heapMiB} MiB, ${endFigures[j]!.flows} flows)`).join('; ')}`);
const warnings = controllerLines().filter((l) => Number(l.level) >= 40);
const leadership = warnings.filter((l) => /leading|Lease/.test(String(l.msg)));
console.log(`controller log: ${warnings.length} warnings or errors; about its leadership: ${leadership.length ? leadership.map((l) => l.msg).join(' | ') : 'none (it led throughout)'}`);
// What they said, each distinct message once (with what it names), so a run explains itself.
const said = new Map<string, number>();
for (const w of warnings) {
  const { level: _l, time: _t, pid: _p, hostname: _h, component: _c, identity: _i, ...rest } = w;
  const text = JSON.stringify(rest);
  said.set(text, (said.get(text) ?? 0) + 1);
}
for (const [text, n] of [...said].slice(0, 5)) console.log(`  ${n}x ${text.slice(0, 300)}`);
for (const w of watched) void w.watcher.stop();
if (PROFILE_DIR) {
  // The profile is written at a clean exit (SIGTERM: it releases its Lease and returns).
  const exited = new Promise((r) => controller.once('exit', r));
  controller.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 30_000))]);
  console.log(`controller CPU profile in ${PROFILE_DIR}`);
}
process.exit(0);
