/**
 * CNI ADD latency through the runtime path (the lab's libcni-like runner, real plugins): 50 Pods
 * with [ptp] alone, then 50 with [ptp, sluice] (agent running, OVS netdev), on a 1-node lab named
 * "dpb". Prints p50/p95 of each, their ratio, the sluice-cni process start time alone and the
 * agent's RSS. Not a test: it asserts nothing, it measures.
 *
 * usage (root, after a build): node dist/bench/cni-add.js [--pods 50]
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { nodeConflist } from '../lab/net/cni-config.js';
import { cniAdd, cniDel, type CniInvocation } from '../lab/net/cni-runner.js';
import { repoRoot, stateDir } from '../lab/net/names.js';

const LAB = 'dpb';
const NODE = 'node-1';
const argPods = process.argv.indexOf('--pods');
const PODS = argPods > 0 ? Number(process.argv[argPods + 1]) : 50;
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');

const lab = (...args: string[]) => execFileSync(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

async function addMany(chainSluice: boolean): Promise<number[]> {
  const list = nodeConflist(LAB, NODE, 'ptp', chainSluice);
  const times: number[] = [];
  const invs: CniInvocation[] = [];
  for (let i = 0; i < PODS; i++) {
    const netns = `${LAB}-bench-${i}`;
    spawnSync('ip', ['netns', 'del', netns]);
    execFileSync('ip', ['netns', 'add', netns]);
    execFileSync('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
    const inv: CniInvocation = { lab: LAB, node: NODE, containerId: `bench${chainSluice ? 's' : 'p'}${String(i).padStart(4, '0')}`, netns, podNamespace: 'bench', podName: `p${i}` };
    const t0 = performance.now();
    await cniAdd(inv, list);
    times.push(performance.now() - t0);
    invs.push(inv);
  }
  for (const inv of invs) {
    await cniDel(inv, list).catch((err: Error) => process.stderr.write(`DEL ${inv.containerId}: ${err.message}\n`));
    spawnSync('ip', ['netns', 'del', inv.netns]);
  }
  return times;
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

/** p50 of each ADD step as the agent logged it ("add: attached" ms). */
function agentStepP50(): Record<string, number> {
  const steps: Record<string, number[]> = {};
  const log = readFileSync(join(stateDir(LAB), NODE, 'agent.log'), 'utf8');
  for (const line of log.split('\n')) {
    if (!line.includes('"add: attached"')) continue;
    const ms = (JSON.parse(line) as { ms?: Record<string, number> }).ms ?? {};
    for (const [k, v] of Object.entries(ms)) (steps[k] ??= []).push(v);
  }
  return Object.fromEntries(Object.entries(steps).map(([k, v]) => [k, pct(v, 50)]));
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

async function main(): Promise<void> {
  lab('down');
  lab('up', '--nodes', '1', '--primary', 'ptp');
  const alone = await addMany(false);
  lab('down');
  lab('up', '--nodes', '1', '--primary', 'ptp', '--sluice');
  const rssIdle = agentRssMiB();
  const chained = await addMany(true);
  const rssAfter = agentRssMiB();
  const steps = agentStepP50();
  lab('down');
  const p50a = pct(alone, 50);
  const p95a = pct(alone, 95);
  const p50c = pct(chained, 50);
  const p95c = pct(chained, 95);
  console.log(`CNI ADD latency, ${PODS} Pods each (runtime path, 1-node lab, OVS netdev)`);
  console.log(`  [ptp]          p50 ${fmt(p50a)}  p95 ${fmt(p95a)}`);
  console.log(`  [ptp, sluice]  p50 ${fmt(p50c)}  p95 ${fmt(p95c)}`);
  console.log(`  ratio          p50 ${(p50c / p50a).toFixed(2)}x  p95 ${(p95c / p95a).toFixed(2)}x`);
  console.log(`  agent steps p50: ${Object.entries(steps).map(([k, v]) => `${k} ${v} ms`).join(', ')}`);
  console.log(`sluice-cni start (VERSION, p50 of 20): ${fmt(pluginStartMs())}`);
  console.log(`sluice-agent RSS: ${rssIdle?.toFixed(1) ?? '?'} MiB idle, ${rssAfter?.toFixed(1) ?? '?'} MiB after ${PODS} ADDs`);
  console.log(`load average during the run: ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')} (${(await import('node:os')).cpus().length} CPUs)`);
}

main().catch((err: Error) => {
  try {
    lab('down');
  } catch {
    /* best effort */
  }
  process.stderr.write(`bench failed: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
