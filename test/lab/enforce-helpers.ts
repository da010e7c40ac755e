/**
 * Shared by the enforcement lab tests: snapshot a running lab's objects into a scenario, run the
 * same probes through `sluice-lab probe` (real packets) and `sluicectl simulate` (the engine) and
 * compare verdicts.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../lab/net/names.js';
import t from 'tap';
import type { TraceReport } from '../../daemon/enforcement/traceflow.js';
import { cli, cliJson, type ListJson, sluiceSkipReason } from './labcli-helpers.js';

export const SLUICECTL = join(repoRoot(), 'dist', 'daemon', 'sluicectl.js');
export const WORKLOAD = join(repoRoot(), 'examples', 'workload.yaml');
export const POLICIES = join(repoRoot(), 'examples', 'policies');

export interface ProbeSpec {
  from: string;
  to: string;
  port: number;
  protocol: 'TCP' | 'UDP';
}
export interface Verdict extends ProbeSpec {
  verdict: 'allow' | 'drop' | 'reject';
  detail?: string;
  decidedBy?: unknown;
}

export function tempDir(prefix = 'enforce-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes every object of the lab (every kind the engine reads) into `dir`, one List file per kind; returns dir. */
export async function snapshot(lab: string, dir: string): Promise<string> {
  const { readControl } = await import('../../lab/control.js');
  const { clientFor } = await import('../../lab/ops.js');
  const { POLICY_INPUT_KINDS: KINDS, apiVersionOf } = await import('../../lab/kinds.js');
  const info = readControl(lab);
  if (!info) throw new Error(`lab ${lab} is not up`);
  const rest = clientFor(info);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await Promise.all(
    KINDS.map(async (k, i) => {
      const list = await rest.list(k);
      const items = list.items.map((o) => ({ ...o, apiVersion: apiVersionOf(k), kind: k.kind }));
      writeFileSync(join(dir, `${String(i).padStart(2, '0')}-${k.plural}.${k.group || 'core'}.json`), JSON.stringify({ apiVersion: 'v1', kind: 'List', items }));
    }),
  );
  return dir;
}

/** Runs a command to completion, collecting its output (never rejects on a non-zero exit). */
export function run(cmd: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export async function simulate(scenarioDir: string, probes: ProbeSpec[]): Promise<Verdict[]> {
  const file = join(scenarioDir, '..', `sim-probes-${process.pid}-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(probes));
  try {
    const r = await run(process.execPath, [SLUICECTL, 'simulate', '-f', scenarioDir, '--probes', file, '-o', 'json']);
    if (r.code !== 0) throw new Error(`sluicectl simulate exited ${r.code}: ${r.stderr}`);
    return JSON.parse(r.stdout) as Verdict[];
  } finally {
    rmSync(file, { force: true });
  }
}

export async function probe(lab: string, dir: string, probes: ProbeSpec[]): Promise<Verdict[]> {
  const file = join(dir, `probes-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(probes));
  try {
    return await cliJson<Verdict[]>(['probe', '--probes', file, '-o', 'json', '--name', lab]);
  } finally {
    rmSync(file, { force: true });
  }
}

export const PODS = ['x/a', 'x/b', 'x/c', 'y/a', 'y/b', 'y/c', 'z/a', 'z/b', 'z/c'];

/** Pod -> Pod on every served port, Pod -> every other Pod's Service (80 TCP/UDP, 81 TCP), each node -> every Pod. */
export function fullProbeSet(nodeIPs: string[]): ProbeSpec[] {
  const out: ProbeSpec[] = [];
  for (const [port, protocol] of [[80, 'TCP'], [80, 'UDP'], [81, 'TCP'], [81, 'UDP']] as const) {
    for (const from of PODS) for (const to of PODS) out.push({ from, to, port, protocol });
  }
  for (const [port, protocol] of [[80, 'TCP'], [80, 'UDP'], [81, 'TCP']] as const) {
    // Not a Pod to its own Service: the lab's kube-proxy does not masquerade hairpin traffic (lab/README.md).
    for (const from of PODS) for (const to of PODS) if (from !== to) out.push({ from, to: `service:${to}`, port, protocol });
  }
  for (const ip of nodeIPs) for (const to of PODS) out.push({ from: `ip:${ip}`, to, port: 80, protocol: 'TCP' });
  return out;
}

export interface Comparison {
  probes: number;
  /** Probes to Services without endpoints: not compared (the lab's kube-proxy drops them, a real one rejects). */
  skipped: number;
  /** Disagreements probed again (a packet lost in a burst); those that persist are mismatches. */
  retried: number;
  mismatches: { probe: string; lab: string; simulate: string; decidedBy?: unknown }[];
  counts: Record<string, number>;
}

const label = (p: ProbeSpec) => `${p.from} -> ${p.to} ${p.port}/${p.protocol}`;

/** Probes the lab and simulates the same probes against a snapshot of the same objects. */
export async function compareWithSimulate(lab: string, dir: string, probes: ProbeSpec[]): Promise<Comparison> {
  const scen = await snapshot(lab, join(dir, 'snapshot'));
  const withEndpoints = servicesWithEndpoints(scen);
  const all = probes;
  probes = all.filter((p) => !p.to.startsWith('service:') || withEndpoints.has(p.to.slice('service:'.length)));
  const [real, sim] = await Promise.all([probe(lab, dir, probes), simulate(scen, probes)]);
  if (real.length !== probes.length || sim.length !== probes.length) throw new Error(`expected ${probes.length} verdicts, got lab ${real.length}, simulate ${sim.length}`);
  // A burst of hundreds of new flows at once can lose a packet in the userspace datapath (upcall
  // queue); probe a disagreement again (same objects, same flows) before calling it a mismatch.
  let retried = 0;
  for (let round = 0; round < 2; round++) {
    const idx = probes.map((_, i) => i).filter((i) => real[i]!.verdict !== sim[i]!.verdict);
    if (idx.length === 0 || idx.length > 20) break;
    retried += idx.length;
    const again = await probe(lab, dir, idx.map((i) => probes[i]!));
    idx.forEach((i, k) => (real[i] = again[k]!));
  }
  const mismatches: Comparison['mismatches'] = [];
  const counts: Record<string, number> = {};
  probes.forEach((p, i) => {
    const a = real[i]!;
    const b = sim[i]!;
    counts[a.verdict] = (counts[a.verdict] ?? 0) + 1;
    if (a.verdict !== b.verdict) mismatches.push({ probe: label(p), lab: `${a.verdict}${a.detail ? ` (${a.detail})` : ''}`, simulate: b.verdict, decidedBy: b.decidedBy });
  });
  return { probes: probes.length, skipped: all.length - probes.length, retried, mismatches, counts };
}

/** "ns/name" of every Service with at least one ready endpoint in the snapshot. */
function servicesWithEndpoints(scenarioDir: string): Set<string> {
  const file = readdirSync(scenarioDir).find((f) => f.includes('-endpointslices.'));
  const out = new Set<string>();
  if (!file) return out;
  const list = JSON.parse(readFileSync(join(scenarioDir, file), 'utf8')) as ListJson<{ metadata: { namespace: string; labels?: Record<string, string> }; endpoints?: { conditions?: { ready?: boolean } }[] }>;
  for (const s of list.items) {
    const svc = s.metadata.labels?.['kubernetes.io/service-name'];
    if (svc && (s.endpoints ?? []).some((e) => e.conditions?.ready !== false)) out.add(`${s.metadata.namespace}/${svc}`);
  }
  return out;
}

/** Real packets with the prober's detail (ECONNREFUSED, EHOSTUNREACH, echo, timeout...). */
export async function probeDetailed(lab: string, probes: ProbeSpec[]): Promise<{ verdict: string; detail: string; ms: number }[]> {
  const { runProbes } = await import('../../lab/net/probe-runner.js');
  const { podNetns } = await import('../../lab/net/names.js');
  const pods = await cliJson<ListJson<{ metadata: { namespace: string; name: string }; status: { podIP: string } }>>(['get', 'pods', '-o', 'json', '--name', lab]);
  const svcs = await cliJson<ListJson<{ metadata: { namespace: string; name: string }; spec: { clusterIP: string } }>>(['get', 'services', '-o', 'json', '--name', lab]);
  const ipOf = (ref: string): string => {
    if (ref.startsWith('service:')) {
      const s = svcs.items.find((x) => `${x.metadata.namespace}/${x.metadata.name}` === ref.slice(8));
      if (!s) throw new Error(`no Service ${ref}`);
      return s.spec.clusterIP;
    }
    const p = pods.items.find((x) => `${x.metadata.namespace}/${x.metadata.name}` === ref);
    if (!p) throw new Error(`no Pod ${ref}`);
    return p.status.podIP;
  };
  const net = probes.map((p) => {
    const [ns, name] = p.from.split('/') as [string, string];
    return { sourceNetns: podNetns(lab, ns, name), ip: ipOf(p.to), port: p.port, protocol: p.protocol };
  });
  return (await runProbes(net)).map((r) => ({ verdict: r.verdict, detail: r.detail, ms: r.ms }));
}

export async function labCli(lab: string, args: string[]): Promise<string> {
  const r = await cli([...args, '--name', lab]);
  if (r.code !== 0) throw new Error(`sluice-lab ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

export function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/**
 * kill -9 of a node's agent and a restart the way the lab starts it (with `config` over the lab's
 * settings); resolves once it is ready again.
 */
export async function restartAgent(lab: string, node: string, config: Record<string, unknown> = {}): Promise<void> {
  const { agentLogPath, agentPidPath, startAgent } = await import('../../lab/agent.js');
  const pid = Number(readText(agentPidPath(lab, node)).trim());
  if (pid > 0) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  const readyCount = () => readText(agentLogPath(lab, node)).split('\n').filter((l) => l.includes('"startup: ready"')).length;
  const before = readyCount();
  await startAgent(lab, node, 30_000, {}, config);
  const deadline = Date.now() + 60_000;
  while (readyCount() <= before) {
    if (Date.now() > deadline) throw new Error(`agent on ${node} not ready again within 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The agent's /status (health port inside the node namespace). */
export async function agentStatus(lab: string, node: string): Promise<Record<string, unknown>> {
  const { nodeNetns } = await import('../../lab/net/names.js');
  const r = await run('ip', ['netns', 'exec', nodeNetns(lab, node), 'curl', '-s', 'http://127.0.0.1:10349/status']);
  if (r.code !== 0) throw new Error(`status of ${node}: curl exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

/**
 * Freezes `node`'s agent (SIGSTOP: its flows stay, it answers nothing) until the returned thaw is
 * called, which the test's teardown also does.
 */
export async function freezeAgent(t: { teardown(fn: () => void): void }, lab: string, node: string): Promise<() => void> {
  const { agentPidPath } = await import('../../lab/agent.js');
  const pid = Number(readFileSync(agentPidPath(lab, node), 'utf8').trim());
  process.kill(pid, 'SIGSTOP');
  let thawed = false;
  const thaw = () => {
    if (!thawed) process.kill(pid, 'SIGCONT');
    thawed = true;
  };
  t.teardown(thaw);
  return thaw;
}

/** `sluicectl node traceflow` run on `node` (inside its namespace, with its agent's config); with `-o json` the report parsed. */
export async function traceflow(lab: string, node: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string; report?: TraceReport | undefined }> {
  const { nodeNetns } = await import('../../lab/net/names.js');
  const { agentConfigPath } = await import('../../lab/agent.js');
  const r = await run('ip', ['netns', 'exec', nodeNetns(lab, node), process.execPath, SLUICECTL, 'node', 'traceflow', '--config', agentConfigPath(lab, node), ...args]);
  return { ...r, report: r.code !== 1 && args.includes('json') ? (JSON.parse(r.stdout) as TraceReport) : undefined };
}

export function writeTempFile(dir: string, name: string, text: string): string {
  const file = join(dir, name);
  writeFileSync(file, text);
  return file;
}

/**
 * A test file's own enforcing lab named `lab`: the file is skipped with the reason when this machine
 * cannot run one; otherwise `body` gets a temporary directory, and the lab and the directory are
 * removed when the file ends (after a failure too). `upEnforcingLab` starts it from a clean slate.
 */
export function withEnforcingLab(lab: string, dirPrefix: string, body: (dir: string) => void): void {
  const reason = sluiceSkipReason();
  if (reason) {
    t.plan(0, reason);
    return;
  }
  const dir = tempDir(dirPrefix);
  t.teardown(async () => {
    await cli(['down', '--name', lab]);
    rmSync(dir, { recursive: true, force: true });
  });
  body(dir);
}

/** `sluice-lab down` then `up --sluice --primary ptp` with `nodes` nodes and the workload file. */
export async function upEnforcingLab(lab: string, nodes: number, workloadFile: string): Promise<void> {
  await cli(['down', '--name', lab]);
  await labCli(lab, ['up', '--sluice', '--policy-source', 'standalone', '--nodes', String(nodes), '--primary', 'ptp', '-f', workloadFile]);
}
