/**
 * CNI ADD latency through the runtime path (the lab's libcni-like runner, real plugins) on a 1-node
 * lab of its own (default "cadb", no test uses it; refused if a lab of that name is up) with the
 * agent running (OVS netdev): Pods ADDed with [ptp] alone and with
 * [ptp, sluice], interleaved one for one so that load drifting during the run hits both alike. Runs
 * twice: idle, then with a CPU load generator busy on every core (started and stopped by the bench).
 * Prints p50/p95 of each, their ratio, the agent's own time per ADD (its steps, summed) and the
 * sluice-cni process start time and the agent's RSS. Not a test: it asserts nothing, it measures.
 *
 * usage (root, after a build): node dist/bench/cni-add.js [--pods 50] [--only idle|loaded] [--lab NAME]
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { nodeConflist } from '../lab/net/cni-config.js';
import { cniAdd, cniDel, type CniInvocation } from '../lab/net/cni-runner.js';
import { repoRoot, stateDir } from '../lab/net/names.js';

const argLab = process.argv.indexOf('--lab');
const LAB = argLab > 0 ? process.argv[argLab + 1]! : 'cadb';
const NODE = 'node-1';
const argPods = process.argv.indexOf('--pods');
const PODS = argPods > 0 ? Number(process.argv[argPods + 1]) : 50;
const argOnly = process.argv.indexOf('--only');
const ONLY = argOnly > 0 ? process.argv[argOnly + 1] : undefined;
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');

const lab = (...args: string[]) => execFileSync(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

/** `PODS` ADDs of each conflist, alternating, then their DELs; the ADD times of each. */
async function addInterleaved(round: string): Promise<{ alone: number[]; chained: number[] }> {
  const lists = { alone: nodeConflist(LAB, NODE, 'ptp', false), chained: nodeConflist(LAB, NODE, 'ptp', true) };
  const times = { alone: [] as number[], chained: [] as number[] };
  const invs: { inv: CniInvocation; list: (typeof lists)['alone'] }[] = [];
  for (let i = 0; i < PODS; i++) {
    for (const kind of i % 2 === 0 ? (['alone', 'chained'] as const) : (['chained', 'alone'] as const)) {
      const netns = `${LAB}-${round}-${kind[0]}${i}`;
      spawnSync('ip', ['netns', 'del', netns]);
      execFileSync('ip', ['netns', 'add', netns]);
      execFileSync('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
      const inv: CniInvocation = { lab: LAB, node: NODE, containerId: `bench${round}${kind[0]}${String(i).padStart(4, '0')}`, netns, podNamespace: 'bench', podName: `${round}-${kind}-${i}` };
      const t0 = performance.now();
      await cniAdd(inv, lists[kind]);
      times[kind].push(performance.now() - t0);
      invs.push({ inv, list: lists[kind] });
    }
  }
  for (const { inv, list } of invs) {
    await cniDel(inv, list).catch((err: Error) => process.stderr.write(`DEL ${inv.containerId}: ${err.message}\n`));
    spawnSync('ip', ['netns', 'del', inv.netns]);
  }
  return times;
}

/** One busy-looping process per core, as a loaded node has. */
function startLoad(): ChildProcess[] {
  return cpus().map(() => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
}

function agentRssMiB(): number | undefined {
  try {
    const pid = readFileSync(join(stateDir(LAB), NODE, 'agent.pid'), 'utf8').trim();
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

const agentLog = () => readFileSync(join(stateDir(LAB), NODE, 'agent.log'), 'utf8');

/** p50 of each ADD step as the agent logged it ("add: attached" ms) after log offset `from`, and of their sum. */
function agentStepP50(from: number): { steps: Record<string, number>; total: number; request: number } {
  const steps: Record<string, number[]> = {};
  const totals: number[] = [];
  const requests: number[] = [];
  for (const line of agentLog().slice(from).split('\n')) {
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

function pluginStartMs(): number {
  const bin = join(repoRoot(), 'dist', 'bin', 'sluice-cni');
  const times: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    spawnSync(bin, [], { env: { CNI_COMMAND: 'VERSION' }, input: '{"cniVersion":"1.1.0"}' });
    times.push(performance.now() - t0);
  }
  return pct(times, 50);
}

const fmt = (n: number) => `${n.toFixed(1)} ms`;

const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** Set once this run brings its lab up: only then may a failure take it down. */
let labIsOurs = false;

async function main(): Promise<void> {
  // Never take over (and tear down) a lab someone else is using.
  if (existsSync(stateDir(LAB))) throw new Error(`a lab named ${LAB} exists (${stateDir(LAB)}); choose another with --lab`);
  labIsOurs = true;
  lab('up', '--nodes', '1', '--primary', 'ptp', '--sluice');
  const rssIdle = agentRssMiB();
  console.log(`CNI ADD latency, ${PODS} Pods per chain and round, [ptp] and [ptp, sluice] interleaved (runtime path, 1-node lab, OVS netdev, ${cpus().length} CPUs)`);
  for (const round of ['idle', 'loaded'] as const) {
    if (ONLY && ONLY !== round) continue;
    const load = round === 'loaded' ? startLoad() : [];
    try {
      const logFrom = agentLog().length;
      const { alone, chained } = await addInterleaved(round);
      const { steps, total, request } = agentStepP50(logFrom);
      console.log(`${round} (load average at the end ${loadavg()}):`);
      console.log(`  [ptp]          p50 ${fmt(pct(alone, 50))}  p95 ${fmt(pct(alone, 95))}`);
      console.log(`  [ptp, sluice]  p50 ${fmt(pct(chained, 50))}  p95 ${fmt(pct(chained, 95))}`);
      console.log(`  ratio          p50 ${(pct(chained, 50) / pct(alone, 50)).toFixed(2)}x  p95 ${(pct(chained, 95) / pct(alone, 95)).toFixed(2)}x`);
      console.log(`  agent time per ADD (sum of its steps) p50 ${fmt(total)}; steps p50: ${Object.entries(steps).map(([k, v]) => `${k} ${v} ms`).join(', ')}`);
      console.log(`  agent's CNI server, request read -> answer written, p50 ${fmt(request)}`);
    } finally {
      for (const p of load) p.kill('SIGKILL');
    }
  }
  const rssAfter = agentRssMiB();
  lab('down');
  console.log(`sluice-cni start (VERSION, p50 of 20): ${fmt(pluginStartMs())}`);
  console.log(`sluice-agent RSS: ${rssIdle?.toFixed(1) ?? '?'} MiB idle, ${rssAfter?.toFixed(1) ?? '?'} MiB after the ADDs`);
}

main().catch((err: Error) => {
  try {
    if (labIsOurs) lab('down');
  } catch {
    /* best effort */
  }
  process.stderr.write(`bench failed: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
