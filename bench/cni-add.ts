/**
 * CNI ADD latency through the runtime path (the lab's libcni-like runner, real plugins) on a 1-node
 * lab of its own (default "cadb", no test uses it; refused if a lab of that name is up) with the
 * agent running (OVS netdev): Pods ADDed with [ptp] alone and with
 * [ptp, sluice], interleaved one for one so that load drifting during the run hits both alike. Runs
 * twice: idle, then with a CPU load generator busy on every core (started and stopped by the bench).
 * A third chain, [ptp, tuning] (the reference plugin with nothing to tune: it only enters the Pod's
 * namespace and hands prevResult on), joins the interleaving as the floor of any chained plugin
 * under this runner: a second plugin process to start and feed. What [ptp, sluice] costs above it
 * is sluice's own (the agent's work, ovs-vswitchd attaching the port, the plugin's round trip).
 * Prints p50/p95 of each, their ratio, the agent's own time per ADD (its steps, summed) and the
 * sluice-cni process start time, the agent's RSS, and the CPU time ovs-vswitchd and the agent spend
 * per ADD of each kind (see cpuPerAdd). Not a test: it asserts nothing, it measures.
 *
 * With `--baseline DIR` (another checkout, built), a second lab ("<name>o") runs that build's agent
 * and plugin at the same time, and its [ptp, sluice] ADDs join the interleaving: old and new build
 * side by side, under the same load (the [ptp] ADDs alternate between the two labs' nodes).
 *
 * usage (root, after a build): node dist/bench/cni-add.js [--pods 50] [--only idle|loaded] [--lab NAME] [--baseline DIR]
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { nodeConflist } from '../lab/net/cni-config.js';
import { cniAdd, cniDel, type CniInvocation } from '../lab/net/cni-runner.js';
import { ovsDir, repoRoot, stateDir } from '../lab/net/names.js';
import { readControl } from '../lab/control.js';
import { resolveKind } from '../lab/kinds.js';
import { clientFor } from '../lab/ops.js';
import { startLoad } from './lab-agent.js';

const argLab = process.argv.indexOf('--lab');
const LAB = argLab > 0 ? process.argv[argLab + 1]! : 'cadb';
const NODE = 'node-1';
const argPods = process.argv.indexOf('--pods');
const PODS = argPods > 0 ? Number(process.argv[argPods + 1]) : 50;
const argOnly = process.argv.indexOf('--only');
const ONLY = argOnly > 0 ? process.argv[argOnly + 1] : undefined;
const argBase = process.argv.indexOf('--baseline');
const BASELINE = argBase > 0 ? process.argv[argBase + 1] : undefined;
const BASE_LAB = `${LAB}o`;

interface Build {
  label: string;
  lab: string;
  root: string;
}
const builds: Build[] = [{ label: 'new', lab: LAB, root: repoRoot() }, ...(BASELINE ? [{ label: 'baseline', lab: BASE_LAB, root: BASELINE }] : [])];

const labCli = (b: Build, ...args: string[]) =>
  execFileSync(process.execPath, [join(b.root, 'dist', 'lab', 'cli.js'), ...args, '--name', b.lab], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

type Kind = 'alone' | 'floor' | 'chained' | 'baseline';

/** [ptp, tuning]: the primary and a chained plugin that changes nothing. */
function floorConflist(lab: string): ReturnType<typeof nodeConflist> {
  const list = nodeConflist(lab, NODE, 'ptp', false);
  return { ...list, plugins: [...list.plugins, { type: 'tuning' }] };
}

const BENCH_NAMESPACE = 'bench';

/**
 * Creates (or deletes) the API objects of a round's Pods before their ADDs, as in a cluster: the
 * scheduler binds a Pod before its kubelet runs CNI, so the agent's informer already holds it when
 * the ADD arrives. They name a node no lab node has, or the lab's kubelet would start them itself.
 * On `onLab` alone when given, else on the labs of `kinds`.
 */
async function apiPods(round: string, kinds: Kind[], action: 'create' | 'delete', onLab?: string): Promise<void> {
  for (const lab of onLab ? [onLab] : new Set(kinds.map((k) => (k === 'baseline' ? BASE_LAB : LAB)))) {
    const info = readControl(lab);
    if (!info) throw new Error(`lab ${lab} has no control file`);
    const rest = clientFor(info);
    if (action === 'create' && !(await rest.tryGet(resolveKind('namespaces'), BENCH_NAMESPACE))) {
      await rest.create(resolveKind('namespaces'), { apiVersion: 'v1', kind: 'Namespace', metadata: { name: BENCH_NAMESPACE } });
    }
    for (const kind of kinds) {
      for (let i = 0; i < PODS; i++) {
        const name = `${round}-${kind}-${i}`;
        if (action === 'delete') await rest.delete(resolveKind('pods'), name, BENCH_NAMESPACE).catch(() => undefined);
        else await rest.create(resolveKind('pods'), { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: BENCH_NAMESPACE, name, labels: { app: 'bench' } }, spec: { nodeName: 'bench-elsewhere', containers: [{ name: 'c', image: 'bench' }] } });
      }
    }
  }
  // The informers see them within milliseconds; this keeps the first ADDs off the watch's heels.
  await new Promise((r) => setTimeout(r, 500));
}

/** `PODS` ADDs of each kind, in an order rotating every round, then their DELs; the ADD times of each. */
async function addInterleaved(round: string): Promise<Record<Kind, number[]>> {
  const lists = {
    alone: { lab: LAB, list: nodeConflist(LAB, NODE, 'ptp', false) },
    floor: { lab: LAB, list: floorConflist(LAB) },
    chained: { lab: LAB, list: nodeConflist(LAB, NODE, 'ptp', true) },
    baseline: { lab: BASE_LAB, list: nodeConflist(BASE_LAB, NODE, 'ptp', true) },
  };
  // With a baseline, the [ptp] ADDs take turns on the two labs' nodes: each one's new veth and
  // route make that node's ovs-vswitchd reconfigure (at a cost that grows with the bridge's ports)
  // and its agent handle netlink events, which on one node alone would slow that build's ADDs.
  const aloneOnBaseline = { lab: BASE_LAB, list: nodeConflist(BASE_LAB, NODE, 'ptp', false) };
  const kinds: Kind[] = BASELINE ? ['alone', 'floor', 'chained', 'baseline'] : ['alone', 'floor', 'chained'];
  const times: Record<Kind, number[]> = { alone: [], floor: [], chained: [], baseline: [] };
  const invs: { inv: CniInvocation; list: (typeof lists)['alone']['list'] }[] = [];
  await apiPods(round, kinds, 'create');
  for (let i = 0; i < PODS; i++) {
    for (const kind of [...kinds.slice(i % kinds.length), ...kinds.slice(0, i % kinds.length)]) {
      const { lab, list } = kind === 'alone' && BASELINE && i % 2 === 1 ? aloneOnBaseline : lists[kind];
      const netns = `${lab}-${round}-${kind[0]}${i}`;
      spawnSync('ip', ['netns', 'del', netns]);
      execFileSync('ip', ['netns', 'add', netns]);
      execFileSync('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
      const inv: CniInvocation = { lab, node: NODE, containerId: `bench${round}${kind[0]}${String(i).padStart(4, '0')}`, netns, podNamespace: BENCH_NAMESPACE, podName: `${round}-${kind}-${i}` };
      const t0 = performance.now();
      await cniAdd(inv, list);
      times[kind].push(performance.now() - t0);
      invs.push({ inv, list });
    }
  }
  for (const { inv, list } of invs) {
    await cniDel(inv, list).catch((err: Error) => process.stderr.write(`DEL ${inv.containerId}: ${err.message}\n`));
    spawnSync('ip', ['netns', 'del', inv.netns]);
  }
  await apiPods(round, kinds, 'delete');
  return times;
}


/** CPU time (ms, user + system) a process has used so far, from /proc. */
function cpuMs(pid: string): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
}
const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/**
 * CPU time of ovs-vswitchd and of the agent per ADD, each kind's ADDs run back to back (not
 * interleaved, so each one's trailing work, e.g. ovs-vswitchd reconfiguring after a link event, is
 * counted with its own kind), counters read before the first and 500 ms after the last ADD; the
 * DELs come after. Shows where a chained ADD's extra time goes on this datapath.
 */
async function cpuPerAdd(b: Build): Promise<Record<'alone' | 'chained', { vswitchd: number; agent: number }>> {
  const vswitchd = readFileSync(join(ovsDir(b.lab, NODE), 'ovs-vswitchd.pid'), 'utf8').trim();
  const agent = agentPid(b.lab);
  const kinds = ['alone', 'chained'] as const;
  await apiPods('cpu', [...kinds], 'create', b.lab);
  const out = {} as Record<'alone' | 'chained', { vswitchd: number; agent: number }>;
  for (const kind of kinds) {
    const list = nodeConflist(b.lab, NODE, 'ptp', kind === 'chained');
    const invs: CniInvocation[] = [];
    const v0 = cpuMs(vswitchd);
    const a0 = cpuMs(agent);
    for (let i = 0; i < PODS; i++) {
      const netns = `${b.lab}-cpu-${kind[0]}${i}`;
      spawnSync('ip', ['netns', 'del', netns]);
      execFileSync('ip', ['netns', 'add', netns]);
      const inv: CniInvocation = { lab: b.lab, node: NODE, containerId: `cpu${kind[0]}${String(i).padStart(4, '0')}`, netns, podNamespace: BENCH_NAMESPACE, podName: `cpu-${kind}-${i}` };
      await cniAdd(inv, list);
      invs.push(inv);
    }
    await new Promise((r) => setTimeout(r, 500));
    out[kind] = { vswitchd: (cpuMs(vswitchd) - v0) / PODS, agent: (cpuMs(agent) - a0) / PODS };
    for (const inv of invs) {
      await cniDel(inv, list).catch((err: Error) => process.stderr.write(`DEL ${inv.containerId}: ${err.message}\n`));
      spawnSync('ip', ['netns', 'del', inv.netns]);
    }
  }
  await apiPods('cpu', [...kinds], 'delete', b.lab);
  return out;
}

const agentPid = (lab: string) => readFileSync(join(stateDir(lab), NODE, 'agent.pid'), 'utf8').trim();

function agentRssMiB(lab: string): number | undefined {
  try {
    const pid = agentPid(lab);
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

const agentLog = (lab: string) => readFileSync(join(stateDir(lab), NODE, 'agent.log'), 'utf8');

/** p50 of each ADD step as the agent logged it ("add: attached" ms) after log offset `from`, and of their sum. */
function agentStepP50(lab: string, from: number): { steps: Record<string, number>; total: number; request: number } {
  const steps: Record<string, number[]> = {};
  const totals: number[] = [];
  const requests: number[] = [];
  for (const line of agentLog(lab).slice(from).split('\n')) {
    if (line.includes('"cni: request done"') && line.includes('"command":"ADD"')) requests.push((JSON.parse(line) as { ms: number }).ms);
    if (!line.includes('"add: attached"')) continue;
    const ms = (JSON.parse(line) as { ms?: Record<string, number> }).ms ?? {};
    for (const [k, v] of Object.entries(ms)) (steps[k] ??= []).push(v);
    totals.push(Object.values(ms).reduce((a, b) => a + b, 0));
  }
  return {
    steps: Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, pct(v, 50)])),
    total: totals.length ? pct(totals, 50) : Number.NaN,
    request: requests.length ? pct(requests, 50) : Number.NaN,
  };
}

/** p50 of 20 VERSION runs of each build's plugin binary, interleaved. */
function pluginStartMs(): number[] {
  const bins = builds.map((b) => join(b.root, 'dist', 'bin', 'sluice-cni'));
  const times = bins.map(() => [] as number[]);
  for (let i = 0; i < 20; i++) {
    for (const [k, bin] of bins.entries()) {
      const t0 = performance.now();
      spawnSync(bin, [], { env: { CNI_COMMAND: 'VERSION' }, input: '{"cniVersion":"1.1.0"}' });
      times[k]!.push(performance.now() - t0);
    }
  }
  return times.map((t) => pct(t, 50));
}

const fmt = (n: number) => `${n.toFixed(1)} ms`;

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** The labs this run brought up: only those may it take down. */
const ours: Build[] = [];

const ratioLine = (label: string, adds: number[], alone: number[]) =>
  `  ${label.padEnd(22)} p50 ${fmt(pct(adds, 50))}  p95 ${fmt(pct(adds, 95))}  ratio to [ptp] p50 ${(pct(adds, 50) / pct(alone, 50)).toFixed(2)}x  p95 ${(pct(adds, 95) / pct(alone, 95)).toFixed(2)}x`;

function report(label: string, adds: number[], alone: number[], floor: number[], agent: ReturnType<typeof agentStepP50>): void {
  console.log(`${ratioLine(label, adds, alone)}  above [ptp, tuning] p50 ${fmt(pct(adds, 50) - pct(floor, 50))}`);
  console.log(`  ${''.padEnd(22)} agent time per ADD (sum of its steps; attach-port and install-flows run at once, so this overcounts) p50 ${fmt(agent.total)}; steps p50: ${Object.entries(agent.steps).map(([k, v]) => `${k} ${v} ms`).join(', ')}`);
  console.log(`  ${''.padEnd(22)} agent's CNI server, request read -> answer written, p50 ${fmt(agent.request)}; left for plugin start and runner p50 ${fmt(pct(adds, 50) - pct(alone, 50) - agent.request)}`);
}

async function main(): Promise<void> {
  // Never take over (and tear down) a lab someone else is using.
  for (const b of builds) if (existsSync(stateDir(b.lab))) throw new Error(`a lab named ${b.lab} exists (${stateDir(b.lab)}); choose another with --lab`);
  for (const b of builds) {
    ours.push(b);
    labCli(b, 'up', '--nodes', '1', '--primary', 'ptp', '--sluice');
  }
  const rssIdle = builds.map((b) => agentRssMiB(b.lab));
  console.log(`CNI ADD latency, ${PODS} Pods per chain and round, [ptp], [ptp, tuning] and [ptp, sluice]${BASELINE ? ` and the baseline build's [ptp, sluice] (${BASELINE})` : ''} interleaved (runtime path, 1-node lab, OVS netdev, ${cpus().length} CPUs)`);
  for (const round of ['idle', 'loaded'] as const) {
    if (ONLY && ONLY !== round) continue;
    const load = round === 'loaded' ? startLoad() : [];
    try {
      const logFrom = builds.map((b) => agentLog(b.lab).length);
      const before = loadavg();
      const times = await addInterleaved(round);
      console.log(`${round} (load average at the start ${before}, at the end ${loadavg()}):`);
      console.log(`  ${'[ptp]'.padEnd(22)} p50 ${fmt(pct(times.alone, 50))}  p95 ${fmt(pct(times.alone, 95))}`);
      console.log(ratioLine('[ptp, tuning]', times.floor, times.alone));
      report('[ptp, sluice]', times.chained, times.alone, times.floor, agentStepP50(LAB, logFrom[0]!));
      if (BASELINE) report('baseline [ptp, sluice]', times.baseline, times.alone, times.floor, agentStepP50(BASE_LAB, logFrom[1]!));
    } finally {
      for (const p of load) p.kill('SIGKILL');
    }
  }
  const rssAfter = builds.map((b) => agentRssMiB(b.lab));
  for (const b of builds) {
    const cpu = await cpuPerAdd(b);
    console.log(
      `${b.label}: CPU per ADD (${PODS} of each kind back to back, idle): ovs-vswitchd [ptp] ${fmt(cpu.alone.vswitchd)}, [ptp, sluice] ${fmt(cpu.chained.vswitchd)}; ` +
        `sluice-agent [ptp] ${fmt(cpu.alone.agent)}, [ptp, sluice] ${fmt(cpu.chained.agent)}`,
    );
  }
  for (const b of ours.splice(0)) labCli(b, 'down');
  const starts = pluginStartMs();
  for (const [k, b] of builds.entries()) {
    console.log(`${b.label}: sluice-cni start (VERSION, p50 of 20) ${fmt(starts[k]!)}; sluice-agent RSS ${rssIdle[k]?.toFixed(1) ?? '?'} MiB idle, ${rssAfter[k]?.toFixed(1) ?? '?'} MiB after the ADDs`);
  }
}

main().catch((err: Error) => {
  for (const b of ours) {
    try {
      labCli(b, 'down');
    } catch {
      /* best effort */
    }
  }
  process.stderr.write(`bench failed: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
