/**
 * Start-up cost of the sluice-cni plugin: every Pod ADD/DEL runs it once, so it sits on the Pod's
 * critical path. Measures, interleaved, N invocations each of:
 *   - the native front end (dist/bin/sluice-cni): ADD, one round trip to a real startCniServer in
 *     this process whose handler does nothing (the agent runs the plugin's checks); and VERSION,
 *     which it hands to the standalone plugin (one exec more);
 *   - the standalone plugin (dist/bin/sluice-cni-standalone), what the runtime ran before the
 *     front end existed: ADD and VERSION;
 *   - for reference: the Go `ptp` plugin's VERSION (if installed).
 * Prints p50/p95/mean in milliseconds and the ratio of the two ADDs. Not a test: nothing is asserted.
 *
 *   npm run -s build && node dist/bench/cni-startup.js [N]
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { startCniServer, type CniHandler } from '../daemon/cni/server.js';

const N = Number(process.argv[2] ?? 50);
// Compiled to dist/bench/, or run from bench/ by a TS loader: find the repo root either way.
const here = fileURLToPath(new URL('.', import.meta.url));
const root = existsSync(join(here, '..', 'package.json')) ? join(here, '..') : join(here, '..', '..');
const frontEnd = join(root, 'dist', 'bin', 'sluice-cni');
const standalone = join(root, 'dist', 'bin', 'sluice-cni-standalone');
const PTP = '/usr/lib/cni/ptp';

const prevResult = {
  cniVersion: '1.0.0',
  interfaces: [
    { name: 'veth3de5e516', mac: '06:d6:b2:17:c7:08' },
    { name: 'eth0', mac: '12:57:f1:e8:5d:95', sandbox: '/var/run/netns/cn-bench' },
  ],
  ips: [{ interface: 1, address: '10.99.7.3/24', gateway: '10.99.7.1' }],
  routes: [{ dst: '0.0.0.0/0' }],
};

/** Runs one command to completion; resolves with its wall-clock time in ms. */
function timed(cmd: string, args: string[], env: Record<string, string>, stdin: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const child = spawn(cmd, args, { env, stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      if (code !== 0) reject(new Error(`${cmd} exited ${code}: ${stderr}`));
      else resolve(ms);
    });
    child.stdin.on('error', () => undefined); // a plugin may exit without reading stdin (ptp VERSION)
    child.stdin.end(stdin);
  });
}

type Case = { label: string; run: (i: number) => Promise<number> };

/**
 * Runs the cases round-robin (case A #1, case B #1, ..., case A #2, ...) so that load from other
 * processes on a shared machine hits every case alike, then prints each case's percentiles.
 */
async function measure(cases: Case[]): Promise<number[]> {
  for (const c of cases) await c.run(-1); // warm the page cache; not counted
  const samples = cases.map(() => [] as number[]);
  for (let i = 0; i < N; i++) for (const [k, c] of cases.entries()) samples[k]!.push(await c.run(i));
  const p50s: number[] = [];
  for (const [k, c] of cases.entries()) {
    const sorted = samples[k]!.sort((a, b) => a - b);
    const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
    const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
    console.log(`${c.label.padEnd(46)} p50 ${pct(50).toFixed(1).padStart(6)} ms   p95 ${pct(95).toFixed(1).padStart(6)} ms   mean ${mean.toFixed(1).padStart(6)} ms`);
    p50s.push(pct(50));
  }
  return p50s;
}

const build = execFileSync(process.execPath, [join(root, 'scripts', 'build-cni.mjs')], { cwd: root }).toString().trim();
console.log(build);
console.log(`${N} sequential invocations of each case, interleaved; ${process.arch}, node ${process.version}`);

const dir = mkdtempSync('/tmp/cn-bench-');
const socketPath = join(dir, 'cni.sock');
const noop: CniHandler = { add: async () => {}, del: async () => {}, check: async () => {}, status: async () => {}, gc: async () => {} };
const server = await startCniServer(socketPath, noop, pino({ level: 'silent' }));

try {
  const noNode = { PATH: '/nonexistent' };
  const version = JSON.stringify({ cniVersion: '1.1.0' });
  const addConf = (i: number) => JSON.stringify({ cniVersion: '1.0.0', name: 'bench', type: 'sluice-cni', socketPath, prevResult, idx: i });
  const addEnv = (i: number) => ({
    ...noNode,
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: `bench${i + 1}`,
    CNI_NETNS: '/var/run/netns/cn-bench',
    CNI_IFNAME: 'eth0',
    CNI_ARGS: `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-${i + 1}`,
  });

  const cases: Case[] = [
    { label: 'front end   ADD (round trip to agent)', run: (i) => timed(frontEnd, [], addEnv(i), addConf(i)) },
    { label: 'standalone  ADD (round trip to agent)', run: (i) => timed(standalone, [], addEnv(i), addConf(i)) },
    { label: 'front end   VERSION (execs the standalone)', run: () => timed(frontEnd, [], { ...noNode, CNI_COMMAND: 'VERSION' }, version) },
    { label: 'standalone  VERSION', run: () => timed(standalone, [], { ...noNode, CNI_COMMAND: 'VERSION' }, version) },
  ];
  if (existsSync(PTP)) cases.push({ label: 'Go ptp plugin  VERSION (reference)', run: () => timed(PTP, [], { CNI_COMMAND: 'VERSION' }, version) });
  const load = (await import('node:os')).loadavg()[0]!;
  console.log(`load average at start: ${load.toFixed(1)} (figures on a busy shared machine are upper bounds)`);
  const p50s = await measure(cases);
  console.log(`ADD p50, standalone / front end: ${(p50s[1]! / p50s[0]!).toFixed(1)}x`);
} finally {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
}
