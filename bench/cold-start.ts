/**
 * Agent cold-start bench (prints figures, asserts nothing). A 1-node lab "cs1" whose API server
 * holds 10 000 Pods on other nodes (API objects only) and 1 000 policies of every kind
 * (bench/cluster-model.ts), and 110 real Pods on node-1 with the model's labels, so the policies
 * select them. Then the node's agent is killed (SIGKILL) and started again, measuring from the
 * process start to
 *   - "flows converged": the start-up bundle is on the bridge (base, Pod and policy flows);
 *   - "ready": host networking converged too, the agent serves CNI requests;
 * and its memory once ready (RSS, and the JS heap used of the heap reserved from its /status) and
 * again `--settle` seconds later (default 20). Each build's agent starts with the V8 flags its own
 * dist/daemon/node-flags.js names (flags and environment; none when it has none), as its image would start it;
 * `--node-flags "A B"` overrides this build's, and `--env "K=V …"` adds to its environment (with
 * `--baseline` naming this same checkout, an A/B of that setting alone). Two kinds of start, interleaved: `restart` (the bridge keeps the flows,
 * as after an agent upgrade: the bundle should change nothing) and `empty bridge` (every flow
 * deleted first, as after a node reboot).
 *
 * `--empty` adds nothing (the agent of an empty 1-node cluster, for its idle figures).
 * `--realistic`: the API-only Pods carry what a real API server returns (cluster-model's
 * realisticPod: managedFields, container details, statuses), which the synthetic model lacks.
 *
 * A/B in one run: `--baseline DIR` (a checkout with its own dist/, e.g. an older build) starts that
 * build's agent on the same lab, alternating with this one. Runs idle, then with a CPU load
 * generator on every core (`--no-loaded` / `--no-idle` skips that round).
 *
 * usage (root, after a build): node dist/bench/cold-start.js [--reps 2] [--local 110] [--baseline DIR] [--settle 20] [--node-flags "A B"] [--env "K=V"] [--realistic | --empty] [--no-idle | --no-loaded] [--keep]
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import type { KubeObject } from '../daemon/policy/types.js';
import { agentConfigPath, agentLogPath, agentPidPath } from '../lab/agent.js';
import { readControl } from '../lab/control.js';
import { apiVersionOf, KINDS, type ResourceKind } from '../lab/kinds.js';
import { nodeNetns, ovsDir, repoRoot } from '../lab/net/names.js';
import { clientFor, waitForPods } from '../lab/ops.js';
import type { RestClient } from '../lab/restclient.js';
import { clusterModel, namespaceLabels, podContainers, podLabels, realisticPod } from './cluster-model.js';
import { agentHeapMiB, agentRssMiB, flowCount, LogTail, pct, sleep, startLoad } from './lab-agent.js';

const LAB = 'cs1';
const NODE = 'node-1';
const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const REPS = Number(arg('reps') ?? 2);
const LOCAL = Number(arg('local') ?? 110);
const BASELINE = arg('baseline');
const SETTLE_S = Number(arg('settle') ?? 20);
const REALISTIC = process.argv.includes('--realistic');
const NAMESPACES = 500;
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');
const lab = (...args: string[]) => execFileSync(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();
const POD = KINDS.find((k) => k.kind === 'Pod')!;
const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');

function kindOf(o: KubeObject): ResourceKind {
  const k = KINDS.find((k) => k.kind === o.kind && apiVersionOf(k) === o.apiVersion);
  if (!k) throw new Error(`no lab kind for ${o.apiVersion} ${o.kind}`);
  return k;
}

/** Runs `fn` over `items` with at most `width` calls in flight. */
async function pool<T>(items: readonly T[], width: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]!);
  }));
}

async function populate(rest: RestClient): Promise<void> {
  const t0 = performance.now();
  // Other nodes' names that no lab node has: the lab kubelet leaves those Pods alone.
  const model = clusterModel({ namespaces: NAMESPACES, podsPerNamespace: 20, nodes: 50, policies: 1000, nodeName: (n) => `far-${n}` });
  const namespaces = model.cluster.filter((o) => o.kind === 'Namespace');
  const pods = model.cluster.filter((o) => o.kind === 'Pod');
  const groups = model.cluster.filter((o) => o.kind !== 'Namespace' && o.kind !== 'Pod' && o.kind !== 'Node');
  await pool(namespaces, 16, (o) => rest.create(kindOf(o), o));
  await pool(pods, 16, async (o0) => {
    const o = REALISTIC ? realisticPod(o0) : o0;
    // Fields the API server sets itself and refuses on create.
    const { resourceVersion: _rv, uid: _uid, creationTimestamp: _ct, ...metadata } = o.metadata;
    const { status, ...rest0 } = { ...o, metadata };
    await rest.create(kindOf(o), rest0 as KubeObject);
    await rest.patch(kindOf(o), o.metadata.name, o.metadata.namespace, { status }, 'status');
  });
  await pool(groups, 16, (o) => rest.create(kindOf(o), o));
  const local = Array.from({ length: LOCAL }, (_, i) => ({ namespace: `ns-${i % NAMESPACES}`, name: `local-${i}`, j: i % 20 }));
  await pool(local, 8, (p) =>
    rest.create(POD, {
      apiVersion: 'v1', kind: 'Pod',
      metadata: { namespace: p.namespace, name: p.name, labels: podLabels(p.j) },
      spec: { nodeName: NODE, containers: podContainers(p.j).map((c) => ({ ...c, image: 'bench' })) },
    }),
  );
  await waitForPods(rest, local, 600_000);
  await pool(model.policies, 16, (o) => rest.create(kindOf(o), o));
  const kinds = new Map<string, number>();
  for (const p of model.policies) kinds.set(`${p.kind} (${p.apiVersion.split('/')[0]})`, (kinds.get(`${p.kind} (${p.apiVersion.split('/')[0]})`) ?? 0) + 1);
  console.log(
    `set-up in ${((performance.now() - t0) / 1000).toFixed(0)} s: ${pods.length} API-only Pods in ${namespaces.length} Namespaces (labels ${JSON.stringify(namespaceLabels(1))}…), ` +
      `${LOCAL} real Pods on ${NODE}, ${model.policies.length} policies: ${[...kinds].map(([k, n]) => `${n} ${k}`).join(', ')}; ${groups.length} ClusterGroups`,
  );
}

function killAgent(): void {
  const pid = Number(readFileSync(agentPidPath(LAB, NODE), 'utf8').trim());
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    return;
  }
  for (let i = 0; i < 100; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    spawnSync('sleep', ['0.05']);
  }
}

interface StartFigures {
  /** The agent's start-up error, when it did not start. */
  failed?: string;
  convergedMs: number;
  readyMs: number;
  added: number;
  removed: number;
  rssMiB: number;
  /** JS heap used and reserved at ready (NaN when /status did not answer). */
  heapUsedMiB: number;
  heapTotalMiB: number;
  /** RSS and JS heap used SETTLE_S seconds after ready. */
  settledRssMiB: number;
  settledHeapUsedMiB: number;
  /** The informers' start -> every initial list delivered (the agent's log; older builds do not say). */
  listedMs?: number;
  /** The start-up bundle, sent -> committed (and purged, netdev). */
  bundleMs?: number;
}

interface Build {
  label: string;
  dist: string;
  /** node flags the agent starts with. */
  flags: readonly string[];
  /** Environment added to the agent's (e.g. a malloc tunable), on top of the bench's own. */
  env: Record<string, string>;
}

/** The agent's V8 flags and environment a build's dist/ names (dist/daemon/node-flags.js), none when it has none. */
async function buildSettings(dist: string): Promise<{ flags: readonly string[]; env: Record<string, string> }> {
  const file = join(dist, 'daemon', 'node-flags.js');
  if (!existsSync(file)) return { flags: [], env: {} };
  const m = (await import(pathToFileURL(file).href)) as { AGENT_NODE_FLAGS: readonly string[]; AGENT_ENV?: Record<string, string>; agentEnv?: () => Record<string, string> };
  return { flags: m.AGENT_NODE_FLAGS, env: { ...(m.agentEnv?.() ?? m.AGENT_ENV ?? {}) } };
}

/** Starts the agent of `dist` (a build's dist/ directory) the way the lab does, and times its start-up from its log's timestamps. */
async function timedStart(build: Build): Promise<StartFigures> {
  const { dist, flags, env } = build;
  const log = agentLogPath(LAB, NODE);
  writeFileSync(log, '');
  const tail = new LogTail(log);
  const fd = openSync(log, 'a');
  const t0 = Date.now();
  const child = spawn('ip', ['netns', 'exec', nodeNetns(LAB, NODE), process.execPath, ...flags, join(dist, 'daemon', 'main.js'), '--config', agentConfigPath(LAB, NODE)], { detached: true, stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  child.unref();
  writeFileSync(agentPidPath(LAB, NODE), `${child.pid}\n`);
  for (;;) {
    const { line } = await tail.waitFor(['startup'], 300_000);
    if (line.includes('"startup: ready"')) break;
    if (line.includes('startup failed')) {
      const nan = Number.NaN;
      return { failed: (JSON.parse(line) as { err?: string }).err ?? line, convergedMs: nan, readyMs: nan, added: nan, removed: nan, rssMiB: nan, heapUsedMiB: nan, heapTotalMiB: nan, settledRssMiB: nan, settledHeapUsedMiB: nan };
    }
  }
  const lines = readFileSync(log, 'utf8').split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as { msg?: string; time?: number; listedMs?: number; bundleMs?: number; purgeMs?: number; added?: number; removed?: number }];
    } catch {
      return [];
    }
  });
  const line = (msg: string) => {
    const l = lines.find((x) => x.msg === msg);
    if (!l?.time) throw new Error(`agent log has no timed "${msg}" line`);
    return l;
  };
  const converged = line('startup: flows converged');
  const rssMiB = agentRssMiB(LAB, NODE);
  const heap = agentHeapMiB(LAB, NODE);
  await sleep(SETTLE_S * 1000);
  const figures: StartFigures = {
    convergedMs: converged.time! - t0, readyMs: line('startup: ready').time! - t0, added: converged.added ?? Number.NaN, removed: converged.removed ?? Number.NaN,
    rssMiB, heapUsedMiB: heap?.used ?? Number.NaN, heapTotalMiB: heap?.total ?? Number.NaN, settledRssMiB: agentRssMiB(LAB, NODE), settledHeapUsedMiB: agentHeapMiB(LAB, NODE)?.used ?? Number.NaN,
  };
  const inputs = lines.find((x) => x.msg === 'startup: policy inputs listed');
  if (inputs?.listedMs !== undefined) figures.listedMs = inputs.listedMs;
  const applied = lines.slice(0, lines.indexOf(converged)).find((x) => x.msg === 'flows: applied');
  if (applied?.bundleMs !== undefined) figures.bundleMs = applied.bundleMs + (applied.purgeMs ?? 0);
  return figures;
}


async function round(name: string, builds: Build[]): Promise<void> {
  const loadGen = name === 'loaded' ? startLoad() : [];
  const results = new Map<string, StartFigures[]>();
  // A `restart` must find the flows of a converged start on the bridge: one unmeasured start of
  // this build first, and again after any start that failed.
  const thisBuild = builds[builds.length - 1]!;
  const warmUp = async () => {
    killAgent();
    const f = await timedStart(thisBuild);
    if (f.failed) throw new Error(`warm-up start of ${thisBuild.label} failed: ${f.failed}`);
  };
  try {
    await warmUp();
    for (let r = 0; r < REPS; r++) {
      for (const kind of ['restart', 'empty bridge'] as const) {
        for (const b of r % 2 ? [...builds].reverse() : builds) {
          killAgent();
          if (kind === 'empty bridge') {
            execFileSync('ovs-ofctl', ['-O', 'OpenFlow15', 'del-flows', 'br-int'], { env: { ...process.env, OVS_RUNDIR: ovsDir(LAB, NODE) } });
          }
          const key = `${b.label}: ${kind}`;
          const f = await timedStart(b);
          results.set(key, [...(results.get(key) ?? []), f]);
          if (f.failed) await warmUp();
        }
      }
    }
  } finally {
    for (const p of loadGen) p.kill('SIGKILL');
  }
  console.log(`${name} (load average at the end ${load()}), ${REPS} starts each, p50 (max):`);
  for (const [key, all] of results) {
    const failures = all.filter((f) => f.failed);
    if (failures.length) console.log(`  ${key.padEnd(32)} ${failures.length} of ${all.length} starts failed: ${failures[0]!.failed}`);
    const fs = all.filter((f) => !f.failed);
    if (fs.length === 0) continue;
    const col = (xs: number[]) => `${pct(xs, 50).toFixed(0)} (${Math.max(...xs).toFixed(0)})`;
    const listed = fs.flatMap((f) => (f.listedMs === undefined ? [] : [f.listedMs]));
    const bundles = fs.flatMap((f) => (f.bundleMs === undefined ? [] : [f.bundleMs]));
    console.log(
      `  ${key.padEnd(32)} start -> flows converged ${col(fs.map((f) => f.convergedMs))} ms; -> ready ${col(fs.map((f) => f.readyMs))} ms; ` +
        `${listed.length ? `policy inputs listed ${col(listed)} ms after the informers started; ` : ''}bundle +${fs[0]!.added}/-${fs[0]!.removed} flows` +
        `${bundles.length ? ` in ${col(bundles)} ms` : ''}; RSS at ready ${pct(fs.map((f) => f.rssMiB), 50).toFixed(0)} MiB ` +
        `(JS heap ${pct(fs.map((f) => f.heapUsedMiB), 50).toFixed(0)} of ${pct(fs.map((f) => f.heapTotalMiB), 50).toFixed(0)} MiB), ${SETTLE_S} s later ${pct(fs.map((f) => f.settledRssMiB), 50).toFixed(0)} MiB (JS heap ${pct(fs.map((f) => f.settledHeapUsedMiB), 50).toFixed(0)})`,
    );
  }
}

async function main(): Promise<void> {
  const t0 = performance.now();
  spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
  lab('up', '--sluice', '--nodes', '1');
  const rest = clientFor(readControl(LAB)!);
  if (process.argv.includes('--empty')) console.log('--empty: no Pods or policies added (an idle agent)');
  else await populate(rest);
  await new LogTail(agentLogPath(LAB, NODE)).settle();
  console.log(`enforcing: ${flowCount(LAB, NODE)} flows on ${NODE}; agent RSS ${agentRssMiB(LAB, NODE).toFixed(0)} MiB; load average ${load()}`);
  const own = join(repoRoot(), 'dist');
  const ownSettings = await buildSettings(own);
  const ownFlags = arg('node-flags')?.split(' ').filter(Boolean) ?? ownSettings.flags;
  const extraEnv = Object.fromEntries((arg('env') ?? '').split(' ').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
  const envText = Object.entries(extraEnv).map(([k, v]) => `${k}=${v}`).join(' ');
  const builds: Build[] = [{ label: envText ? `this build, ${envText}` : 'this build', dist: own, flags: ownFlags, env: { ...ownSettings.env, ...extraEnv } }];
  if (BASELINE) {
    const dist = join(resolve(BASELINE), 'dist');
    if (!existsSync(join(dist, 'daemon', 'main.js'))) throw new Error(`--baseline ${BASELINE}: ${dist}/daemon/main.js is missing (build it first)`);
    builds.unshift({ label: `baseline ${BASELINE}`, ...(await buildSettings(dist)), dist });
  }
  for (const b of builds) console.log(`${b.label}: ${Object.entries(b.env).map(([k, v]) => `${k}=${v} `).join('')}node ${b.flags.length ? b.flags.join(' ') : '(no flags)'}`);
  if (!process.argv.includes('--no-idle')) await round('idle', builds);
  if (!process.argv.includes('--no-loaded')) await round('loaded', builds);
  console.log(`bench ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  if (!process.argv.includes('--keep')) spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
}

main().catch((err) => {
  console.error(`bench failed: ${(err as Error).stack ?? err}`);
  if (!process.argv.includes('--keep')) spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
  process.exit(1);
});
