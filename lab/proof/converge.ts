/**
 * "Have the agents applied what the API server now holds?" — the wait between an API write and a
 * probe that must see its effect. Two signals, the first one available wins:
 *
 *  1. generation: the agent's GET /status carries `enforcement.resourceVersion` (or
 *     `policy.resourceVersion`): the API resourceVersion whose effects are committed on the bridge
 *     (watches delivered everything up to it, the resulting flows bundled). Converged when every
 *     node's value is >= the API server's current resourceVersion.
 *  2. rules + quiescence (agents without it, as today): every node's `enforcement.rules` in /status
 *     equals the node rule count the policy engine computes for the API server's objects, its
 *     `synced` flag is true, and its flows, `applies` counter and rule count stayed unchanged for
 *     `stableMs`, at least `settleMs` after the write, and the bridge holds exactly the flows the
 *     agent computes for its engine's state (GET /flows). If the counts still differ after `giveUpMs`
 *     of total quiet, the wait ends anyway and says so (signal `quiescence` with a note).
 */
import { pino } from 'pino';
import { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { sluiceOnNodes, type ControlInfo } from '../control.js';
import { exportState as exportAll } from './simulate.js';
import { resolveKind } from '../kinds.js';
import { nodeNetns, ovsDir } from '../net/names.js';
import { runIn, sleep } from '../net/exec.js';
import type { RestClient } from '../restclient.js';

export interface ConvergeOptions {
  timeoutMs?: number;
  /** Quiescence: minimum time after the write before the flows may be called settled. */
  settleMs?: number;
  /** Quiescence: how long the flows must stay unchanged. */
  stableMs?: number;
  pollMs?: number;
  /** Quiescence while the agents' rule counts still differ from the engine's: accept after this long. */
  giveUpMs?: number;
  /** The API state, to compute each node's expected rule count (fetched when absent). */
  state?: KubeObject[];
}

export interface ConvergeResult {
  /**
   * generation: the agents reported the API's resourceVersion; rules+quiescence: every agent's
   * node rule count equals the engine's for the API state and nothing moved; quiescence: nothing
   * moved for `giveUpMs` although the rule counts still differ (reported, never silent).
   */
  signal: 'generation' | 'rules+quiescence' | 'quiescence' | 'no-agent';
  ms: number;
  note?: string;
}

/** The policy generation an agent reports in /status, or undefined when it reports none (pure). */
export function reportedGeneration(status: unknown): bigint | undefined {
  const s = status as { policy?: { resourceVersion?: unknown }; enforcement?: { resourceVersion?: unknown } } | null | undefined;
  const rv = s?.enforcement?.resourceVersion ?? s?.policy?.resourceVersion;
  if (typeof rv === 'string' && /^\d+$/.test(rv)) return BigInt(rv);
  if (typeof rv === 'number' && Number.isInteger(rv)) return BigInt(rv);
  return undefined;
}

/** The flows of a dump without counters, durations or order: what decides packets (pure). */
export function flowFingerprint(dump: string): string {
  return dump
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('OFPST_FLOW') && !l.startsWith('NXST_FLOW'))
    .map((l) => l.replace(/\b(duration|n_packets|n_bytes|idle_age|hard_age|reset_counts)=[^,\s]*,?\s*/g, ''))
    .sort()
    .join('\n');
}

/**
 * Where a node's agent serves /status: 10349 for the agent `sluice-lab up --sluice` starts
 * (lab/agent.ts), 9376 for the one install/sluice.yaml's DaemonSet runs (its ConfigMap's
 * healthAddress). A node runs one or the other; the port that answers is remembered.
 */
const AGENT_HEALTH_PORTS = [10349, 9376];
const healthPort = new Map<string, number>();

async function agentStatus(lab: string, node: string, path = '/status'): Promise<unknown> {
  const key = `${lab}/${node}`;
  const ports = [...new Set([healthPort.get(key) ?? AGENT_HEALTH_PORTS[0]!, ...AGENT_HEALTH_PORTS])];
  let r: Awaited<ReturnType<typeof runIn>> | undefined;
  for (const port of ports) {
    r = await runIn(nodeNetns(lab, node), 'curl', ['-s', '--max-time', '2', `http://127.0.0.1:${port}${path}`], { allowFail: true, timeoutMs: 5000 });
    if (r.exitCode === 0) {
      healthPort.set(key, port);
      break;
    }
  }
  if (r?.exitCode !== 0) return undefined;
  try {
    return JSON.parse(r.stdout);
  } catch {
    return undefined;
  }
}

const bridges = new Map<string, FlowProgrammer>();
function bridgeOf(lab: string, node: string): FlowProgrammer {
  const key = `${lab}/${node}`;
  if (!bridges.has(key)) bridges.set(key, new FlowProgrammer({ ovsRunDir: ovsDir(lab, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) }));
  return bridges.get(key)!;
}

/** What the enforcement part of /status says about being busy (pure): "" when it has none. */
/**
 * What an agent reports of its enforcement: `rules` counts node rules plus isolations (when the
 * agent reports them), so a policy that only isolates Pods (a default deny, no rules) is seen too.
 */
export function enforcementActivity(status: unknown): { text: string; synced: boolean; rules?: number } {
  const e = (status as { enforcement?: { synced?: unknown; applies?: unknown; rules?: unknown; isolations?: unknown } } | null | undefined)?.enforcement;
  if (!e) return { text: '', synced: true };
  const rules = typeof e.rules === 'number' ? e.rules + (typeof e.isolations === 'number' ? e.isolations : 0) : undefined;
  return { text: `synced=${String(e.synced)} applies=${String(e.applies)} rules=${String(rules)}`, synced: e.synced === true, ...(rules !== undefined ? { rules } : {}) };
}

/**
 * Each node's rule + isolation count as the policy engine computes it for these objects (what an
 * agent that has seen all of them reports as enforcement.rules + enforcement.isolations).
 */
export function expectedRuleCounts(objects: KubeObject[], nodes: string[]): Record<string, number> {
  const rank = (o: KubeObject) => (o.kind === 'Namespace' || o.kind === 'Node' ? 0 : o.kind === 'Tier' ? 1 : 2);
  const sorted = [...objects].sort((a, b) => rank(a) - rank(b));
  return Object.fromEntries(
    nodes.map((node) => {
      const engine = new PolicyEngine({ nodeName: node, log: () => undefined });
      for (const o of sorted) engine.upsert(o);
      return [node, engine.nodeRuleSet().length + engine.nodeIsolations().length];
    }),
  );
}

async function fingerprints(lab: string, nodes: string[], expected: Record<string, number>): Promise<{ text: string; synced: boolean; rulesMatch: boolean; reported: boolean; rules: string; applied: boolean }> {
  const parts = await Promise.all(nodes.map(async (n) => {
    const ovs = bridgeOf(lab, n);
    const [dump, status, desired] = await Promise.all([ovs.ofctl(['dump-flows', '--no-names', '--no-stats', ovs.target]), agentStatus(lab, n), agentStatus(lab, n, '/flows')]);
    const activity = enforcementActivity(status);
    return {
      text: `${n} ${activity.text}\n${flowFingerprint(dump)}`, synced: activity.synced, reported: activity.rules !== undefined,
      rulesMatch: activity.rules === undefined || activity.rules === expected[n], rules: `${n}: agent ${activity.rules ?? '-'}, engine ${expected[n]}`,
      applied: bridgeHasDesired(dump, desired),
    };
  }));
  return {
    text: parts.map((p) => p.text).join('\n'), synced: parts.every((p) => p.synced), rulesMatch: parts.every((p) => p.rulesMatch), reported: parts.some((p) => p.reported),
    rules: parts.map((p) => p.rules).join('; '), applied: parts.every((p) => p.applied),
  };
}

/**
 * Whether the bridge holds exactly the agent's desired flows (GET /flows, which compiles the policy
 * engine's current state): an agent whose engine has the new state but has not committed its flows
 * yet (a busy machine) is not converged, though its flows have not started to change.
 */
export function bridgeHasDesired(dump: string, desired: unknown): boolean {
  if (!Array.isArray(desired)) return true; // an agent without GET /flows: rule counts and quiet alone
  const want = new Set(desired.map((f) => String((f as { cookie?: unknown }).cookie)));
  const have = new Set([...dump.matchAll(/cookie=(0x51ce[0-9a-f]+)/g)].map((m) => m[1]!));
  if (want.size !== have.size) return false;
  for (const c of want) if (!have.has(c)) return false;
  return true;
}

/** Waits until every node's agent has applied the API server's current state (see the module comment). */
export async function waitForAgents(info: ControlInfo, rest: RestClient, writtenAt: number, opts: ConvergeOptions = {}): Promise<ConvergeResult> {
  const started = Date.now();
  if (!sluiceOnNodes(info)) return { signal: 'no-agent', ms: 0 };
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const pollMs = opts.pollMs ?? 100;
  const deadline = started + timeoutMs;
  const target = BigInt((await rest.list(resolveKind('namespaces'))).metadata.resourceVersion ?? '0');
  const statuses = await Promise.all(info.nodes.map((n) => agentStatus(info.name, n)));
  if (statuses.every((s) => reportedGeneration(s) !== undefined)) {
    let behind = '';
    for (;;) {
      const gens = await Promise.all(info.nodes.map(async (n) => reportedGeneration(await agentStatus(info.name, n))));
      behind = info.nodes.flatMap((n, i) => (gens[i] === undefined || gens[i]! < target ? [`${n} at ${gens[i] ?? 'none'}`] : [])).join(', ');
      if (!behind) return { signal: 'generation', ms: Date.now() - started };
      if (Date.now() > deadline) throw new Error(`agents did not reach resourceVersion ${target} within ${timeoutMs / 1000} s: ${behind}`);
      await sleep(pollMs);
    }
  }
  const settleMs = opts.settleMs ?? 500;
  const stableMs = opts.stableMs ?? 400;
  const giveUpMs = opts.giveUpMs ?? 5000;
  const expected = expectedRuleCounts(opts.state ?? (await exportAll(rest)), info.nodes);
  let last = await fingerprints(info.name, info.nodes, expected);
  let since = Date.now();
  for (;;) {
    await sleep(pollMs);
    const now = await fingerprints(info.name, info.nodes, expected);
    if (now.text !== last.text) {
      last = now;
      since = Date.now();
    } else if (now.synced && Date.now() - writtenAt >= settleMs) {
      const quiet = Date.now() - since;
      if (now.rulesMatch && now.applied && quiet >= stableMs) return { signal: now.reported ? 'rules+quiescence' : 'quiescence', ms: Date.now() - started };
      if (quiet >= giveUpMs) return { signal: 'quiescence', ms: Date.now() - started, note: `rule counts differ after ${giveUpMs / 1000} s of quiet: ${now.rules}` };
    }
    if (Date.now() > deadline) throw new Error(`agents not converged within ${timeoutMs / 1000} s (${last.synced ? 'watches synced' : 'watches not synced'}; ${last.rules})`);
  }
}

/** Cookie mask of sluice's policy flows: 0x51ce, category byte 2 (daemon/flows/README.md). */
const POLICY_COOKIE = 'cookie=0x51ce020000000000/0xffffff0000000000';

/** How many policy flows each node's bridge holds: 0 everywhere means the agents do not enforce. */
export async function policyFlowCounts(info: ControlInfo): Promise<Record<string, number>> {
  if (!sluiceOnNodes(info)) return Object.fromEntries(info.nodes.map((n) => [n, 0])); // no bridges at all
  const counts = await Promise.all(info.nodes.map(async (n) => {
    const ovs = bridgeOf(info.name, n);
    const dump = await ovs.ofctl(['dump-flows', '--no-names', '--no-stats', ovs.target, POLICY_COOKIE]);
    return dump.split('\n').filter((l) => l.includes('cookie=')).length;
  }));
  return Object.fromEntries(info.nodes.map((n, i) => [n, counts[i]!]));
}
