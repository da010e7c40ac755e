#!/usr/bin/env node
/**
 * `npm run chaos [-- --quick] [-- --name NAME]`: faults injected into a 2-node enforcing lab (`chaos` unless --name says otherwise, ptp, the model
 * of test/scenarios/model.yaml with a default deny on namespace x) while traffic runs, and two
 * invariants checked all along:
 *
 *  - no stale allow: every 250 ms probers in z/a and z/b (one on each node) open new TCP connections
 *    on ports 80 and 81 to every Pod of x (denied) and to y/a and y/c (allowed); a denied one that
 *    succeeds is a gap (must be 0), an allowed one that fails is counted;
 *  - nothing lost: an allowed TCP connection (z/b -> y/b) writes every 20 ms through each scenario
 *    and must never be reset; after each scenario every node's bridge holds exactly the agent's
 *    desired flows and one port per attached Pod, every host route to a Pod address is an attached
 *    Pod's via the gateway, and the IPAM holds no address of a gone Pod (anything else is a leak).
 *
 * Policy churn runs through every scenario (a policy in x appearing and going away, a Pod relabelled:
 * flows recompiled, the probed verdicts unchanged). Scenarios, on x/a's node (the one enforcing the deny): its agent killed with SIGKILL at random
 * moments and started again (time to ready); its ovsdb-server and ovs-vswitchd killed and started
 * again (time until the bridge holds the agent's flows again); its iptables mangle and raw tables
 * flushed, and a Pod's host route moved back onto its veth, by another process (time to repair);
 * 40 Pods created at once and then deleted at once (time until all are attached and detached
 * again); a hostile Pod (z/c) sending to an allowed peer with another Pod's address and then with a
 * MAC it does not own (each such datagram that arrives counts as a gap; recovery: until it connects
 * again with its own); a policy storm (2 000 NetworkPolicies created, then deleted, while the labels
 * of 1 000 API-only Pods their peers select churn: agent memory, CPU time and realization p50/p99
 * printed; recovery: until the rules are back to what they were); a Pod blasting SYNs that a Reject rule answers through the agent (packet-ins
 * received and dropped printed; recovery: how long a Pod created during the flood takes to attach); every watch
 * stream cut with the history compacted, so watches get 410 Gone and relist (time until every agent
 * relisted and is synced); the API server unreachable (the lab supervisor stopped), then back (time until the
 * agents' watches are synced); the node's conflist rewritten without sluice while Pods are created
 * (time until sluice is chained again; every Pod of the window must end up attached); CNI calls in the orders a runtime can make them (lab/chaos-cni.ts:
 * ADDs at once, DEL during ADD, unknown DELs, repeated ADDs, sluice-cni killed mid-call; every
 * answer a result or a CNI error object, nothing half-attached); forged ARP and frames from or to
 * the re-entrance and virtual MACs (lab/forged-frames.py; what reaches a victim and poisoned
 * neighbour entries are gaps); a policy flipping a probed pair between allow and deny, the
 * probers' expectation following the agent's commit (recovery: API change -> enforcement); new Pods
 * talking from their first moment to a Pod that drops them and to one that admits them only (any
 * datagram of the first answered, or a first datagram of the second unanswered, is broken;
 * recovery: sandbox -> first answer) and a quarantine cutting a running flow (recovery: API change
 * -> its last datagram; lab/chaos-time.ts); a soak
 * of steady churn sampling the agent's RSS and open descriptors (a descriptor leak is broken). The
 * BROKEN column counts the other broken promises (CNI answers outside the spec, half-attached
 * containers, a descriptor leak, a flip check that saw nothing). Prints one table and exits 1 when
 * an invariant broke. --quick runs each scenario briefly (about 3 minutes in all).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { OvsBridge } from '../daemon/ovs/bridge.js';
import { FlowProgrammer } from '../daemon/ovs/flow-programmer.js';
import { agentPidPath, startAgent } from './agent.js';
import { type CniAnswer, callPlugin, chainAdd, chainDel, makeNetns, removeNetns } from './chaos-cni.js';
import { readControl, supervisorPid } from './control.js';
import { resolveKind } from './kinds.js';
import { runIn, sleep } from './net/exec.js';
import type { Conflist } from './net/cni-config.js';
import type { CniInvocation, CniResult } from './net/cni-runner.js';
import { checkLabName, conflistPath, ipamDir, nodeNetns, ovsDir, podCidr, podNetns, repoRoot } from './net/names.js';
import { startNodeOvs, stopNodeOvs } from './net/ovs.js';
import { runProbes } from './net/probe-runner.js';

/**
 * A prober process per round, not the workloads' probe sockets: the probers run while scenarios
 * restart agents, Open vSwitch and the API server, and a round that fails there must not depend on
 * a Pod's workload staying healthy through a flood of its own namespace's connections.
 */
const CHAOS_PROBES = { viaWorkload: false };
import { clientFor } from './ops.js';
import { newPodsRound, quarantineRound, type TimeScenarioContext } from './chaos-time.js';
import { bridgeHasDesired } from './proof/converge.js';

const QUICK = process.argv.includes('--quick');
/** `--name NAME`: the lab's name (its namespaces and state), so a run can sit beside another lab. */
const nameAt = process.argv.indexOf('--name');
const LAB = checkLabName(nameAt >= 0 ? (process.argv[nameAt + 1] ?? '') : 'chaos');
/**
 * `--only WORD`: only the scenarios whose name contains WORD (`--only soak` gives the soak the whole
 * 15 minutes, which the full run cannot fit beside the other scenarios).
 */
const onlyAt = process.argv.indexOf('--only');
const ONLY = onlyAt >= 0 ? (process.argv[onlyAt + 1] ?? '') : undefined;
/** The full run stops its soak early enough to finish within 20 minutes. */
const FULL_BUDGET_MS = 19 * 60_000;
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');
const MODEL = join(repoRoot(), 'test', 'scenarios', 'model.yaml');
const DENY_X = 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-in, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n';

interface Row {
  scenario: string;
  iterations: number;
  tried: number;
  gaps: number;
  allowedFailed: number;
  resets: number;
  /** Other broken promises: CNI calls answered outside the spec, a file descriptor leak. */
  broken: number;
  recoveryMs: number[];
  leaks: string[];
  /** API changes made by the policy churn meanwhile. */
  churn: number;
}

async function labCli(args: string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const c = spawn(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'ignore', 'inherit'] });
    c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`sluice-lab ${args.join(' ')} exited ${code}`))));
  });
}

async function status(node: string, path = '/status'): Promise<Record<string, unknown> | undefined> {
  const r = await runIn(nodeNetns(LAB, node), 'curl', ['-s', '--max-time', '2', `http://127.0.0.1:10349${path}`], { allowFail: true, timeoutMs: 5000 });
  try {
    return r.exitCode === 0 ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

async function waitUntil(what: string, cond: () => Promise<boolean>, timeoutMs = 60_000): Promise<number> {
  const t0 = performance.now();
  while (performance.now() - t0 < timeoutMs) {
    if (await cond().catch(() => false)) return Math.round(performance.now() - t0);
    await sleep(50);
  }
  throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
}

/** The bridge holds exactly the agent's desired flows. */
async function bridgeConverged(node: string): Promise<boolean> {
  const ovs = new FlowProgrammer({ ovsRunDir: ovsDir(LAB, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
  const [dump, desired] = await Promise.all([ovs.ofctl(['dump-flows', '--no-names', '--no-stats', ovs.target]), status(node, '/flows')]);
  return Array.isArray(desired) && bridgeHasDesired(dump, desired);
}

interface AttachedPod { containerId: string; podNamespace: string; podName: string; hostVeth: string; ips: string[] }
const attachedPods = async (node: string): Promise<AttachedPod[]> => ((await status(node))?.pods ?? []) as AttachedPod[];

/**
 * What is on a node that should not be: flows the agent does not want, ports of no attached Pod,
 * host routes to Pod addresses that are not an attached Pod's route via the gateway, and Pod
 * addresses the primary's IPAM still holds for no attached Pod.
 */
async function leaks(nodes: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const node of nodes) {
    if (!(await bridgeConverged(node))) out.push(`${node}: bridge flows differ from the agent's desired flows`);
    const ovs = new OvsBridge({ ovsRunDir: ovsDir(LAB, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
    const ports = (await ovs.listPodPorts()).map((p) => p.name).sort();
    const pods = await attachedPods(node);
    const attached = pods.map((p) => p.hostVeth).sort();
    if (ports.join() !== attached.join()) out.push(`${node}: OVS Pod ports [${ports.join(', ')}] != attached [${attached.join(', ')}]`);
    const ips = pods.flatMap((p) => p.ips).sort();
    const prefix = podCidr(node).replace(/0\/24$/, '');
    const routes = (await runIn(nodeNetns(LAB, node), 'ip', ['-4', 'route', 'show'])).stdout.split('\n').map((l) => /^(\S+) dev (\S+)/.exec(l)).filter((m) => m !== null && m[1]!.startsWith(prefix) && !m[1]!.includes('/'));
    const wrong = routes.filter((m) => !ips.includes(m![1]!) || m![2] !== 'antrea-gw0').map((m) => `${m![1]} dev ${m![2]}`);
    if (wrong.length || routes.length !== ips.length) out.push(`${node}: host routes [${wrong.join(', ')}] are no attached Pod's (${routes.length} Pod routes, ${ips.length} attached Pod addresses)`);
    // host-local keeps one file per address it handed out, in a directory named after the network.
    const network = (JSON.parse(readFileSync(conflistPath(LAB, node), 'utf8')) as Conflist).name;
    const held = readdirSync(join(ipamDir(LAB, node), network)).filter((f) => f.startsWith(prefix)).sort();
    if (held.join() !== ips.join()) out.push(`${node}: IPAM holds [${held.filter((ip) => !ips.includes(ip)).join(', ')}] for no attached Pod`);
  }
  return out;
}

/**
 * A probed target whose verdict a scenario flips: `settled` is the verdict the agent has committed
 * for the current API state, undefined from the API change until the commit; `epoch` counts the
 * API changes.
 */
interface FlippedTarget {
  ip: string;
  port: number;
  epoch: number;
  settled: 'allow' | 'deny' | undefined;
  /** Settled connections that behaved as committed, per verdict (to show the flip is seen at all). */
  seen: { allow: number; deny: number };
}

/** What a probed connection must do; a flipped target is 'unsettled' (not judged) while its verdict changes. */
type Expectation = 'allow' | 'deny' | 'unsettled';

/** leaks(), given 10 s for what the last moments left in flight (a DEL's IPAM release, a flow sync under churn). */
async function settledLeaks(nodes: string[]): Promise<string[]> {
  let leaked = await leaks(nodes);
  for (let i = 0; i < 20 && leaked.length; i++) {
    await sleep(500);
    leaked = await leaks(nodes);
  }
  return leaked;
}

/** The prober: new connections every 250 ms while running, to every denied and every allowed target at once. */
class Prober {
  tried = 0;
  gaps = 0;
  allowedFailed = 0;
  gapDetails: string[] = [];
  private running = true;
  private loop: Promise<void>;
  constructor(sources: string[], denied: string[], allowed: string[], readonly flipped?: FlippedTarget) {
    const targets = sources.flatMap((src) => [...denied.map((ip) => ({ ip, deny: true })), ...allowed.map((ip) => ({ ip, deny: false }))].flatMap((x) => [80, 81].map((port) => ({ ...x, src, port }))));
    this.loop = (async () => {
      while (this.running) {
        // A flipped target's expectation holds for a connection only when the same committed
        // verdict stood from before the connection was opened until it was decided.
        const before = this.flipped && { epoch: this.flipped.epoch, settled: this.flipped.settled };
        const results = await runProbes(targets.map((x) => ({ sourceNetns: x.src, ip: x.ip, port: x.port, protocol: 'TCP' as const })), 1000, CHAOS_PROBES);
        const flipExpect: Expectation = before && before.epoch === this.flipped!.epoch && before.settled ? before.settled : 'unsettled';
        results.forEach((r, i) => {
          const x = targets[i]!;
          const isFlipped = this.flipped !== undefined && x.ip === this.flipped.ip && x.port === this.flipped.port;
          const expect: Expectation = isFlipped ? flipExpect : x.deny ? 'deny' : 'allow';
          this.tried++;
          if (expect === 'deny' && r.verdict === 'allow') {
            this.gaps++;
            this.gapDetails.push(`${new Date().toISOString()} denied connection ${x.src} -> ${x.ip}:${x.port} succeeded`);
          }
          if (expect === 'allow' && r.verdict !== 'allow') this.allowedFailed++;
          if (isFlipped && expect !== 'unsettled' && (r.verdict === 'allow') === (expect === 'allow')) this.flipped!.seen[expect]++;
        });
        await sleep(250);
      }
    })();
  }
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}

/**
 * Policy churn while the faults run: every 300 ms an allow-from-y policy in x appears or goes away
 * and y/c's labels change. Both recompile the flows that decide the probed connections (x's
 * isolation, the peers' address sets) without changing their verdicts: z's connections into x stay
 * denied, those into y allowed.
 */
class Churner {
  changes = 0;
  failures = 0;
  private running = true;
  private loop: Promise<void>;
  constructor(rest: ReturnType<typeof clientFor>) {
    const np = resolveKind('networkpolicies');
    const pods = resolveKind('pods');
    const allowY = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'churn-allow-y', namespace: 'x' }, spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'TCP', port: 80 }] }] } };
    this.loop = (async () => {
      for (let i = 0; this.running; i++) {
        try {
          if (i % 2 === 0) await rest.apply(np, allowY as never);
          else await rest.delete(np, 'churn-allow-y', 'x');
          const yc = (await rest.tryGet(pods, 'c', 'y'))!;
          await rest.apply(pods, { ...yc, metadata: { ...yc.metadata, labels: { ...(yc.metadata.labels ?? {}), churn: String(i % 3) } } } as never);
          this.changes += 2;
        } catch {
          this.failures++; // the API server is unreachable in one scenario
        }
        await sleep(300);
      }
    })();
  }
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}

/** A long-lived allowed TCP connection writing every 20 ms; reports whether it was ever reset. */
const STREAM = `
const s = require('net').connect({ host: process.argv[1], port: 80 });
let sent = 0, echoed = 0, error = null;
s.on('data', (d) => { echoed += d.length; });
s.on('error', (e) => { error = e.code || e.message; });
s.on('close', () => { if (!error) error = 'closed'; });
const t = setInterval(() => { if (!s.destroyed) { s.write('x'); sent++; } }, 20);
process.on('SIGTERM', () => { clearInterval(t); console.log(JSON.stringify({ sent, echoed, error })); process.exit(0); });
`;
function stream(netns: string, ip: string): () => Promise<{ sent: number; echoed: number; error: string | null }> {
  const c = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', STREAM, ip], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  c.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const done = new Promise<void>((r) => c.on('close', () => r()));
  return async () => {
    c.kill('SIGTERM');
    await done;
    return JSON.parse(out.trim().split('\n').pop() || '{"sent":0,"echoed":0,"error":"no output"}') as { sent: number; echoed: number; error: string | null };
  };
}

/** CPU seconds (user + system) the agent of `node` has used, from /proc (0 when it is not running). */
function agentCpuSeconds(node: string): number {
  try {
    const pid = readFileSync(agentPidPath(LAB, node), 'utf8').trim();
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    // After the command: state is field 3, utime and stime are fields 14 and 15 (clock ticks of 1/100 s).
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** The agent's realization histogram: cumulative counts by upper bound (seconds), `+Inf` last. */
async function realizationBuckets(node: string): Promise<[string, number][]> {
  const text = (await runIn(nodeNetns(LAB, node), 'curl', ['-s', '--max-time', '2', 'http://127.0.0.1:10349/metrics'], { allowFail: true })).stdout;
  return [...text.matchAll(/^sluice_policy_realization_seconds_bucket\{le="([^"]+)"[^}]*\} (\d+)/gm)].map((m) => [m[1]!, Number(m[2])]);
}

function bucketDelta(before: [string, number][], after: [string, number][]): [string, number][] {
  const was = new Map(before);
  return after.map(([le, n]) => [le, n - (was.get(le) ?? 0)]);
}

/** The upper bound of the bucket holding quantile `q` of a cumulative histogram ("-" when empty). */
function quantile(buckets: [string, number][], q: number): string {
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total === 0) return '-';
  const hit = buckets.find(([, n]) => n >= q * total);
  return hit ? (hit[0] === '+Inf' ? '+Inf' : `${Number(hit[0]) * 1000} ms`) : '-';
}

async function main(): Promise<void> {
  if (ONLY === '') throw new Error('--only needs a word of a scenario name (e.g. --only soak)');
  const t0 = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'chaos-'));
  await labCli(['down']).catch(() => undefined);
  await labCli(['up', '--nodes', '2', '--primary', 'ptp', '-f', MODEL]);
  const rows: Row[] = [];
  try {
    const deny = join(dir, 'deny.yaml');
    writeFileSync(deny, DENY_X);
    await labCli(['apply', '-f', deny]);
    const info = readControl(LAB)!;
    const pods = (await clientFor(info).list(resolveKind('pods'))).items as { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string } }[];
    const pod = (ref: string) => pods.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === ref)!;
    const target = pod('x/a').spec.nodeName; // the node enforcing the deny
    const src = podNetns(LAB, 'z', 'a');
    await waitUntil('the deny enforced', async () => (await runProbes([{ sourceNetns: src, ip: pod('x/a').status.podIP, port: 80, protocol: 'TCP' }], 1000, CHAOS_PROBES))[0]!.verdict === 'drop');

    let broken = 0; // the running scenario's other broken promises (its fault adds them)
    /** The row of the scenario that just ran, if it was the one named (`--only` may have skipped it). */
    const ranLast = (prefix: string): Row | undefined => (rows.at(-1)?.scenario.startsWith(prefix) ? rows.at(-1) : undefined);
    const scenario = async (name: string, iterations: number, fault: () => Promise<number | number[]>, flipped?: FlippedTarget) => {
      if (ONLY !== undefined && !name.includes(ONLY)) return;
      broken = 0;
      // Sources on both nodes: z/a shares x/a's node, z/b does not (its packets reach x/a through the host route).
      const prober = new Prober([src, podNetns(LAB, 'z', 'b')], ['x/a', 'x/b', 'x/c'].map((r) => pod(r).status.podIP), ['y/a', 'y/c'].map((r) => pod(r).status.podIP), flipped);
      const stop = stream(podNetns(LAB, 'z', 'b'), pod('y/b').status.podIP);
      const churn = new Churner(clientFor(info));
      await sleep(1000);
      const recoveryMs: number[] = [];
      for (let i = 0; i < iterations; i++) recoveryMs.push(...[await fault()].flat());
      await churn.stop();
      await sleep(2000);
      await prober.stop();
      const s = await stop();
      const leaked = await settledLeaks(info.nodes);
      rows.push({ scenario: name, iterations, tried: prober.tried, gaps: prober.gaps, allowedFailed: prober.allowedFailed, resets: s.error ? 1 : 0, broken, recoveryMs, leaks: leaked, churn: churn.changes });
      for (const g of prober.gapDetails) console.error(`${name}: GAP ${g}`);
      if (s.error) console.error(`${name}: the allowed connection ended: ${s.error} (${s.sent} written, ${s.echoed} echoed)`);
      for (const l of leaked) console.error(`${name}: LEAK ${l}`);
    };

    await scenario('agent kill -9', QUICK ? 3 : 20, async () => {
      await sleep(300 + Math.random() * 1500);
      const pid = Number(readFileSync(agentPidPath(LAB, target), 'utf8').trim());
      process.kill(pid, 'SIGKILL');
      const k = performance.now();
      await startAgent(LAB, target);
      await waitUntil('agent ready', async () => (await status(target))?.ready === true);
      return Math.round(performance.now() - k);
    });

    await scenario('ovsdb-server + ovs-vswitchd killed', QUICK ? 1 : 3, async () => {
      await sleep(500);
      const k = performance.now();
      await stopNodeOvs(LAB, target);
      await startNodeOvs(LAB, target);
      await waitUntil('flows replayed', () => bridgeConverged(target));
      return Math.round(performance.now() - k);
    });

    await scenario('iptables mangle and raw tables flushed', QUICK ? 2 : 10, async () => {
      await sleep(500 + Math.random() * 1000);
      const ns = nodeNetns(LAB, target);
      await runIn(ns, 'iptables', ['-t', 'mangle', '-F']);
      await runIn(ns, 'iptables', ['-t', 'raw', '-F']);
      const k = performance.now();
      await waitUntil('ANTREA-MANGLE and ANTREA-RAW jumps back', async () => {
        const [m, r] = await Promise.all([runIn(ns, 'iptables', ['-t', 'mangle', '-S', 'PREROUTING'], { allowFail: true }), runIn(ns, 'iptables', ['-t', 'raw', '-S', 'PREROUTING'], { allowFail: true })]);
        return m.stdout.includes('ANTREA-MANGLE') && r.stdout.includes('ANTREA-RAW');
      });
      return Math.round(performance.now() - k);
    });

    await scenario('a Pod host route moved back to its veth', QUICK ? 2 : 10, async () => {
      await sleep(500 + Math.random() * 1000);
      const ns = nodeNetns(LAB, target);
      const a = (((await status(target))?.pods ?? []) as { hostVeth: string; ips: string[] }[]).find((p) => p.ips.includes(pod('x/a').status.podIP))!;
      await runIn(ns, 'ip', ['route', 'replace', `${a.ips[0]}/32`, 'dev', a.hostVeth, 'scope', 'link']);
      const k = performance.now();
      await waitUntil('route on antrea-gw0 again', async () => (await runIn(ns, 'ip', ['route', 'show', `${a.ips[0]}/32`])).stdout.includes('antrea-gw0'));
      return Math.round(performance.now() - k);
    });

    await scenario(`Pod storm: ${QUICK ? 10 : 40} Pods created at once, then deleted at once`, 1, async () => {
      const rest = clientFor(info);
      const pods = resolveKind('pods');
      const names = Array.from({ length: QUICK ? 10 : 40 }, (_, i) => `storm-${i}`);
      const k = performance.now();
      await Promise.all(names.map((name) => rest.apply(pods, {
        apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z', labels: { storm: 'yes' } },
        spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] },
      } as never)));
      const attachedAll = async () => {
        const attached = new Set((((await status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z').map((p) => p.podName));
        return names.every((n) => attached.has(n));
      };
      await waitUntil('every storm Pod attached', attachedAll, 180_000);
      const created = Math.round(performance.now() - k);
      await Promise.all(names.map((name) => rest.delete(pods, name, 'z')));
      await waitUntil('every storm Pod detached', async () => {
        const attached = (((await status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z' && p.podName.startsWith('storm-'));
        return attached.length === 0;
      }, 180_000);
      console.error(`Pod storm: ${names.length} Pods attached ${created} ms after they were created`);
      return Math.round(performance.now() - k);
    });

    // "The primary" rewrites its conflist without sluice (write and rename, as aws-node does) while
    // Pods are being created on the node: the agent chains sluice again, and every Pod created
    // meanwhile ends up attached (through sluice, or adopted once the chain is back).
    await scenario('conflist rewritten without sluice under Pod churn', QUICK ? 2 : 5, async () => {
      const rest = clientFor(info);
      const podKind = resolveKind('pods');
      const path = conflistPath(LAB, target);
      const chained = () => (JSON.parse(readFileSync(path, 'utf8')) as Conflist).plugins.some((p) => p.type === 'sluice-cni');
      const names = Array.from({ length: 4 }, (_, i) => `rechain-${i}`);
      const creating = (async () => {
        for (const name of names) {
          await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z' }, spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
          await sleep(150);
        }
      })();
      await sleep(100);
      const list = JSON.parse(readFileSync(path, 'utf8')) as Conflist;
      writeFileSync(`${path}.primary-tmp`, JSON.stringify({ ...list, plugins: list.plugins.filter((p) => p.type !== 'sluice-cni') }, null, 2));
      renameSync(`${path}.primary-tmp`, path);
      const k = performance.now();
      await waitUntil('sluice chained again', async () => chained(), 30_000);
      const rechainMs = Math.round(performance.now() - k);
      await creating;
      await waitUntil('every Pod created meanwhile attached', async () => {
        const attached = new Set((((await status(target))?.pods ?? []) as { podName: string; podNamespace: string }[]).filter((p) => p.podNamespace === 'z').map((p) => p.podName));
        return names.every((n) => attached.has(n));
      }, 60_000);
      const allMs = Math.round(performance.now() - k);
      await Promise.all(names.map((name) => rest.delete(podKind, name, 'z')));
      await waitUntil('the churned Pods detached', async () => !(((await status(target))?.pods ?? []) as { podName: string }[]).some((p) => p.podName.startsWith('rechain-')), 60_000);
      console.error(`conflist rewrite: sluice chained again after ${rechainMs} ms; the ${names.length} Pods created meanwhile attached after ${allMs} ms`);
      return rechainMs;
    });

    // The runtime's CNI calls in odd orders, on the real plugin binaries and real namespaces: Pod
    // ADDs all at once; every fifth one raced by its own DEL, every fifth killed in sluice-cni
    // mid-call and then DELeted as containerd does after its timeout, every fifth ADDed to sluice
    // again (twice at once) once attached; DELs of containers nobody ADDed meanwhile. Every answer
    // must be a result or a CNI error object; then every container still ADDed must be attached
    // whole and every DELeted one gone whole; the runtime's DELs at the end must leave nothing.
    await scenario(`CNI storm: ${QUICK ? 20 : 100} ADDs at once, DEL during ADD, unknown DELs, repeated ADDs, plugin killed mid-call`, 1, async () => {
      const n = QUICK ? 20 : 100;
      const list = JSON.parse(readFileSync(conflistPath(LAB, target), 'utf8')) as Conflist;
      const sluice = list.plugins.find((p) => p.type === 'sluice-cni')!;
      const hex = Date.now().toString(16);
      const invs: CniInvocation[] = Array.from({ length: n }, (_, i) => ({
        lab: LAB, node: target, containerId: `cnistorm${hex}${String(i).padStart(4, '0')}`, netns: podNetns(LAB, 'cnistorm', `c${i}`), podNamespace: 'cnistorm', podName: `c${i}`,
      }));
      const answers: CniAnswer[] = [];
      const results = new Map<number, CniResult>();
      /** Containers the runtime DELeted (raced or timed out): nothing of them may remain. */
      const gone = new Set<number>();
      const k = performance.now();
      await Promise.all(invs.map((inv) => makeNetns(inv.netns)));
      const unknown = Array.from({ length: Math.ceil(n / 4) }, (_, i): CniInvocation => ({
        lab: LAB, node: target, containerId: `cnistormunknown${hex}${i}`, netns: podNetns(LAB, 'cnistorm', `never-${i}`), podNamespace: 'cnistorm', podName: `never-${i}`,
      }));
      await Promise.all([
        ...invs.map(async (inv, i) => {
          if (i % 5 === 1) {
            const [add] = await Promise.all([chainAdd(inv, list), sleep(Math.random() * 80).then(async () => answers.push(...(await chainDel(inv, list))))]);
            answers.push(...add);
            // The runtime's ADD was cancelled by its DEL: it DELs once more when the ADD returns.
            answers.push(...(await chainDel(inv, list, add.at(-1)?.result ?? add[0]?.result)));
            gone.add(i);
          } else if (i % 5 === 2) {
            const add = await chainAdd(inv, list, Math.random() * 60);
            answers.push(...add);
            answers.push(...(await chainDel(inv, list, add[0]?.result)));
            gone.add(i);
          } else {
            const add = await chainAdd(inv, list);
            answers.push(...add);
            const last = add.at(-1)!;
            if (last.kind === 'ok' && last.result) results.set(i, last.result);
            else {
              answers.push(...(await chainDel(inv, list, add[0]?.result)));
              gone.add(i);
            }
            if (i % 5 === 3 && last.kind === 'ok') {
              const prev = add[0]!.result;
              answers.push(...(await Promise.all([callPlugin(inv, 'ADD', list, sluice, prev), callPlugin(inv, 'ADD', list, sluice, prev)])));
            }
          }
        }),
        ...unknown.map(async (inv) => answers.push(...(await chainDel(inv, list)))),
      ]);
      const storm = Math.round(performance.now() - k);
      // Whole or nothing: attached (port, flows, route via the gateway) exactly the containers still ADDed.
      const attached = (await attachedPods(target)).filter((p) => p.podNamespace === 'cnistorm');
      const want = invs.filter((_, i) => !gone.has(i)).map((inv) => inv.containerId).sort();
      const have = attached.map((p) => p.containerId).sort();
      if (want.join() !== have.join()) {
        broken++;
        console.error(`CNI storm: attached [${have.join(', ')}], but the runtime holds [${want.join(', ')}]`);
      }
      const half = await settledLeaks([target]);
      for (const l of half) console.error(`CNI storm: HALF-ATTACHED before the runtime's DELs: ${l}`);
      broken += half.length;
      // The Pods go away: the runtime's DELs, then the namespaces.
      await Promise.all(invs.map(async (inv, i) => {
        answers.push(...(await chainDel(inv, list, results.get(i))));
        await removeNetns(inv.netns);
      }));
      const bad = answers.filter((a) => a.kind === 'broken');
      broken += bad.length;
      for (const a of bad) console.error(`CNI storm: BROKEN ANSWER ${a.plugin} ${a.command}: ${a.detail}`);
      const count = (kind: string) => answers.filter((a) => a.kind === kind).length;
      const byCode = new Map<string, { n: number; first: string }>();
      for (const a of answers.filter((a) => a.kind === 'cni-error')) {
        const key = `${a.plugin} ${a.command} code ${a.code}`;
        const seen = byCode.get(key) ?? { n: 0, first: a.detail.slice(0, 100) };
        seen.n++;
        byCode.set(key, seen);
      }
      const codes = [...byCode].map(([key, { n, first }]) => `${n}× ${key}, e.g. "${first}"`).join('; ');
      const slowest = Math.max(0, ...answers.filter((a) => a.plugin === 'sluice-cni').map((a) => a.ms));
      console.error(`CNI storm: ${answers.length} plugin calls in ${storm} ms: ${count('ok')} succeeded, ${count('cni-error')} CNI errors (${codes || 'none'}), ${count('killed')} killed mid-call, ${bad.length} broken; slowest sluice-cni call ${slowest} ms; ${have.length} of ${n} containers attached after the storm, ${gone.size} DELeted whole`);
      return storm;
    });

    // Spoofing is seen where it would land: a UDP listener in y/a records every source address that
    // reaches it, so a spoofed datagram that the bridge let through is counted (a TCP connect from a
    // forged address fails anyway, its replies going elsewhere).
    let spoofed = 0;
    let spoofedThrough = 0;
    await scenario('hostile Pod: another Pod\'s source IP, then a forged MAC', QUICK ? 1 : 5, async () => {
      const ns = podNetns(LAB, 'z', 'c');
      const to = pod('y/a').status.podIP;
      const own = pod('z/c').status.podIP;
      const forged = pod('y/c').status.podIP;
      const listener = spawn('ip', ['netns', 'exec', podNetns(LAB, 'y', 'a'), process.execPath, '-e', "require('dgram').createSocket('udp4').on('message',(m,r)=>console.log(r.address+' '+m)).bind(9999)"], { stdio: ['ignore', 'pipe', 'ignore'] });
      let heard = '';
      listener.stdout.setEncoding('utf8').on('data', (d: string) => (heard += d));
      await sleep(300);
      const send = (tag: string, from?: string) => runIn(ns, process.execPath, ['-e', `const s=require('dgram').createSocket('udp4');s.bind({${from ? `address:'${from}'` : ''}},()=>{let n=0;const t=setInterval(()=>{s.send('${tag}',9999,'${to}');if(++n===5){clearInterval(t);setTimeout(()=>process.exit(0),100)}},20)})`], { allowFail: true, timeoutMs: 5000 });
      try {
        await send('own');
        await runIn(ns, 'ip', ['addr', 'add', `${forged}/32`, 'dev', 'eth0']);
        try {
          await send('forged-ip', forged);
        } finally {
          await runIn(ns, 'ip', ['addr', 'del', `${forged}/32`, 'dev', 'eth0'], { allowFail: true });
        }
        const mac = (await runIn(ns, 'cat', ['/sys/class/net/eth0/address'])).stdout.trim();
        await runIn(ns, 'ip', ['link', 'set', 'eth0', 'address', '02:de:ad:be:ef:01']);
        try {
          await send('forged-mac');
        } finally {
          await runIn(ns, 'ip', ['link', 'set', 'eth0', 'address', mac]);
        }
        await sleep(300);
      } finally {
        listener.kill();
      }
      const lines = heard.trim().split('\n').filter(Boolean);
      spoofed += 10;
      spoofedThrough += lines.filter((l) => l.endsWith(' forged-ip') || l.endsWith(' forged-mac')).length;
      if (!lines.some((l) => l === `${own} own`)) throw new Error(`hostile Pod: y/a heard nothing from z/c's own address (${lines.join(', ') || 'nothing'}): the check cannot see spoofing`);
      const k = performance.now();
      await waitUntil('z/c reaches y/a again', async () => (await runProbes([{ sourceNetns: ns, ip: to, port: 80, protocol: 'TCP' }], 1000, CHAOS_PROBES))[0]!.verdict === 'allow');
      return Math.round(performance.now() - k);
    });
    const spoofRow = ranLast('hostile Pod: another');
    if (spoofRow) {
      spoofRow.gaps += spoofedThrough;
      console.error(`hostile Pod: ${spoofedThrough} of ${spoofed} spoofed datagrams reached y/a`);
    }

    // Forged frames from the hostile Pod's eth0 (raw frames: lab/forged-frames.py): gratuitous ARP
    // replies and requests claiming the gateway's and y/b's addresses (broadcast and unicast to y/b),
    // and UDP from or to the re-entrance MAC, from the virtual MAC, to the broadcast MAC. Sniffers on
    // y/b (same node), y/a (other node) and the node's antrea-gw0 record every ARP frame and every
    // tagged datagram that arrives: only the controls (z/c's own frames to the virtual MAC) and the
    // ARP responder's answers may; any forged one that does is a gap, as is a victim's neighbour
    // entry pointing at the hostile Pod's or a forged MAC.
    const python = spawnSync('python3', ['--version']).status === 0;
    if (!python) console.error('forged frames: SKIPPED, no python3 on this machine to send raw frames (the rest of the scenario ran)');
    let forgedSent = 0;
    let forgedThrough = 0;
    let poisoned = 0;
    await scenario('hostile Pod: forged ARP, frames from/to the re-entrance and virtual MACs', QUICK ? 1 : 5, async () => {
      const k = performance.now();
      if (!python) return 0;
      const frames = join(repoRoot(), 'lab', 'forged-frames.py');
      const ns = podNetns(LAB, 'z', 'c');
      const macOf = async (netns: string) => (await runIn(netns, 'cat', ['/sys/class/net/eth0/address'])).stdout.trim();
      const [zc, yb, ya] = [pod('z/c'), pod('y/b'), pod('y/a')];
      const [zMac, ybMac] = [await macOf(ns), await macOf(podNetns(LAB, 'y', 'b'))];
      const gwIP = (await runIn(ns, 'ip', ['-4', 'route', 'show', 'default'])).stdout.split(' ')[2]!;
      const V = 'aa:bb:cc:dd:ee:ff';
      const R = 'de:ad:be:ef:de:ad';
      const B = 'ff:ff:ff:ff:ff:ff';
      const Z = '00:00:00:00:00:00';
      const udp = (tag: string, src: string, dst: string, to: string) => ({ kind: 'udp', src, dst, ip_src: zc.status.podIP, ip_dst: to, tag });
      const arp = (src: string, dst: string, op: number, sha: string, spa: string, tha: string, tpa: string) => ({ kind: 'arp', src, dst, op, sha, spa, tha, tpa });
      const controls = [udp('own-local', zMac, V, yb.status.podIP), udp('own-remote', zMac, V, ya.status.podIP)];
      const forged = [
        arp(zMac, B, 2, zMac, gwIP, B, gwIP), // gratuitous reply: "I am the gateway"
        arp(zMac, B, 2, zMac, yb.status.podIP, B, yb.status.podIP), // gratuitous reply: "I am y/b"
        arp(zMac, B, 1, zMac, yb.status.podIP, Z, yb.status.podIP), // gratuitous request claiming y/b
        arp(zMac, ybMac, 2, zMac, gwIP, ybMac, yb.status.podIP), // unicast to y/b: "the gateway is at my MAC"
        arp(zMac, B, 2, '02:de:ad:be:ef:02', gwIP, B, gwIP), // the gateway at a MAC nobody has
        arp(R, B, 1, R, zc.status.podIP, Z, gwIP), // from the re-entrance MAC
        arp(V, B, 2, V, gwIP, B, gwIP), // as the ARP responder itself
        udp('from-reentrance-local', R, V, yb.status.podIP),
        udp('from-reentrance-remote', R, V, ya.status.podIP),
        udp('from-virtual-local', V, V, yb.status.podIP),
        udp('from-virtual-remote', V, V, ya.status.podIP),
        udp('to-reentrance-local', zMac, R, yb.status.podIP),
        udp('to-reentrance-remote', zMac, R, ya.status.podIP),
        udp('to-broadcast-local', zMac, B, yb.status.podIP),
      ];
      const sniff = (netns: string, dev: string) => runIn(netns, 'python3', [frames, 'sniff', dev, '2.5'], { timeoutMs: 10_000 });
      const heard = Promise.all([sniff(podNetns(LAB, 'y', 'b'), 'eth0'), sniff(podNetns(LAB, 'y', 'a'), 'eth0'), sniff(nodeNetns(LAB, target), 'antrea-gw0')]);
      await sleep(500);
      const sent = await runIn(ns, 'python3', [frames, 'send', 'eth0', JSON.stringify([...controls, ...forged])]);
      forgedSent += Number(sent.stdout.trim()) - controls.length * 3;
      const [atYb, atYa, atGw] = (await heard).map((r) => r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; src: string; sha?: string; tag?: string }));
      if (!atYb!.some((f) => f.tag === 'own-local') || !atYa!.some((f) => f.tag === 'own-remote')) {
        throw new Error(`forged frames: the controls did not arrive (y/b heard ${JSON.stringify(atYb)}, y/a ${JSON.stringify(atYa)}): the check cannot see`);
      }
      for (const [where, got] of [['y/b', atYb!], ['y/a', atYa!], ['the node', atGw!]] as const) {
        // The ARP responder answers with the virtual MAC; every other ARP frame here is forged.
        const through = got.filter((f) => (f.kind === 'arp' && f.sha !== V) || (f.kind === 'udp' && !f.tag?.startsWith('own-')));
        forgedThrough += through.length;
        for (const f of through) console.error(`forged frames: GAP at ${where}: ${JSON.stringify(f)}`);
      }
      const bad = [zMac, R, '02:de:ad:be:ef:02'];
      for (const [where, netns, dev] of [['y/b', podNetns(LAB, 'y', 'b'), 'eth0'], ['y/a', podNetns(LAB, 'y', 'a'), 'eth0'], ['the node', nodeNetns(LAB, target), 'antrea-gw0']] as const) {
        const neigh = (await runIn(netns, 'ip', ['neigh', 'show', 'dev', dev])).stdout.split('\n').filter((l) => bad.some((m) => l.includes(m)));
        poisoned += neigh.length;
        for (const l of neigh) console.error(`forged frames: POISONED neighbour entry at ${where}: ${l}`);
      }
      return Math.round(performance.now() - k);
    });
    const forgedRow = ranLast('hostile Pod: forged');
    if (forgedRow) forgedRow.gaps += forgedThrough + poisoned;
    if (forgedRow && python) console.error(`forged frames: ${forgedSent} sent, ${forgedThrough} reached a victim, ${poisoned} neighbour entries poisoned`);

    // Churn that changes a probed verdict: a policy allowing z into x/c on port 81 appears and goes
    // away. The probers' expectation for that pair follows the agent's commit, read from x/c's node:
    // the policy's presence in GET /policies, then `changes` in /status at that moment, then
    // `committedChanges` reaching it. Recovery is the API change -> enforcement window.
    const xc = pod('x/c');
    const flipped: FlippedTarget = { ip: xc.status.podIP, port: 81, epoch: 0, settled: 'deny', seen: { allow: 0, deny: 0 } };
    // The edges of time (chaos-time.ts): new Pods' first packets, and connections a change denies.
    let timeRound = 0;
    const timeCtx: TimeScenarioContext = {
      lab: LAB,
      rest: clientFor(info),
      nodes: info.nodes,
      broke: (what) => {
        broken++;
        console.error(`edges of time: ${what}`);
      },
    };
    const newPods = QUICK ? 5 : 10;
    await scenario(`new Pods: ${newPods} of z (dropped) and ${newPods} of x (admitted only) talking from their first moment, per round`, QUICK ? 1 : 3, () => newPodsRound(timeCtx, timeRound++, newPods));
    await scenario('quarantine from z while a z flow runs (recovery: change → last datagram)', QUICK ? 2 : 5, () => quarantineRound(timeCtx, timeRound++));

    const FLIP = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'flip-allow-z-81', namespace: 'x' }, spec: { podSelector: { matchLabels: { pod: 'c' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }], ports: [{ protocol: 'TCP', port: 81 }] }] } };
    let flips = 0;
    await scenario(`verdict flips: z -> x/c:81 allowed and denied by turns`, QUICK ? 6 : 20, async () => {
      const rest = clientFor(info);
      const np = resolveKind('networkpolicies');
      const allow = flipped.settled !== 'allow';
      const enforced = async () => ((((await status(xc.spec.nodeName, '/policies'))?.policies ?? []) as { name: string }[]).some((p) => p.name === FLIP.metadata.name));
      const enforcement = async () => (await status(xc.spec.nodeName))?.enforcement as { changes: number; committedChanges: number } | undefined;
      flipped.settled = undefined;
      flipped.epoch++;
      const k = performance.now();
      if (allow) await rest.apply(np, FLIP as never);
      else await rest.delete(np, FLIP.metadata.name, 'x');
      await waitUntil('the flip seen by the agent', async () => (await enforced()) === allow, 30_000);
      const seen = (await enforcement())!.changes;
      await waitUntil('the flip committed', async () => ((await enforcement())?.committedChanges ?? 0) >= seen, 30_000);
      const window = Math.round(performance.now() - k);
      flipped.settled = allow ? 'allow' : 'deny';
      flips++;
      // Long enough for the probers to open several connections under the committed verdict.
      await sleep(QUICK ? 3500 : 4000);
      return window;
    }, flipped);
    if (flipped.settled === 'allow') await clientFor(info).delete(resolveKind('networkpolicies'), FLIP.metadata.name, 'x');
    const flipRow = ranLast('verdict flips');
    if (flipRow) console.error(`verdict flips: ${flips} flips; under a committed verdict z -> x/c:81 connected ${flipped.seen.allow} times while allowed and failed ${flipped.seen.deny} times while denied`);
    if (flipRow && (flipped.seen.allow === 0 || flipped.seen.deny === 0)) {
      flipRow.broken++;
      console.error('verdict flips: BROKEN: the probers never saw one of the two verdicts, so the flip check saw nothing');
    }

    // The policy storm: NetworkPolicies created in batches and deleted again while the labels of
    // API-only Pods elsewhere in the cluster churn (Pods bound to a node that does not exist, so no
    // kubelet runs them, with addresses outside every Pod CIDR). The storm's policies take their
    // peers from those Pods' labels, so every relabel changes address groups. Printed: the agent's
    // memory, its CPU time during the storm and the realization histogram's p50/p99 (API change ->
    // flows committed, as the agent measures it).
    const churnPods = QUICK ? 100 : 1000;
    await scenario(`policy storm: ${QUICK ? 200 : 2000} NetworkPolicies created, then deleted, labels of ${churnPods} Pods churning`, 1, async () => {
      const rest = clientFor(info);
      const np = resolveKind('networkpolicies');
      const podKind = resolveKind('pods');
      const n = QUICK ? 200 : 2000;
      const rss = async () => ((await status(target))?.memory as { rssMiB?: number } | undefined)?.rssMiB ?? 0;
      const rules = async () => ((await status(target))?.enforcement as { rules?: number } | undefined)?.rules ?? -1;
      await rest.apply(resolveKind('namespaces'), { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'storm', labels: { ns: 'storm' } } } as never);
      const podNames = Array.from({ length: churnPods }, (_, i) => `churn-${i}`);
      for (let i = 0; i < churnPods; i += 50) {
        await Promise.all(podNames.slice(i, i + 50).map(async (name, j) => {
          await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'storm', labels: { churn: String((i + j) % 10) } }, spec: { nodeName: 'node-absent', containers: [{ name: 's', image: 'sluice-lab/workload' }] } } as never);
          const ip = `10.250.${Math.floor((i + j) / 250)}.${((i + j) % 250) + 1}`;
          await rest.patch(podKind, name, 'storm', { status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } }, 'status');
        }));
      }
      const [rss0, rules0] = [await rss(), await rules()];
      const realized0 = await realizationBuckets(target);
      const cpu0 = agentCpuSeconds(target);
      const k = performance.now();
      let relabels = 0;
      let storming = true;
      const labelChurn = (async () => {
        for (let round = 1; storming; round++) {
          for (let i = 0; i < churnPods && storming; i += 50) {
            await Promise.all(podNames.slice(i, i + 50).map((name, j) => rest.patch(podKind, name, 'storm', { metadata: { labels: { churn: String((i + j + round) % 10) } } }).then(() => relabels++)));
          }
        }
      })();
      const names = Array.from({ length: n }, (_, i) => `storm-${i}`);
      for (let i = 0; i < n; i += 50) {
        await Promise.all(names.slice(i, i + 50).map((name, j) => rest.apply(np, {
          apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' },
          // x/c shares x/a's node and is denied already: ports 1000-5999 from z or the storm Pods change no probed verdict.
          spec: {
            podSelector: { matchLabels: { pod: 'c' } },
            ingress: [{
              from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }, { namespaceSelector: { matchLabels: { ns: 'storm' } }, podSelector: { matchLabels: { churn: String((i + j) % 10) } } }],
              ports: [{ protocol: 'TCP', port: 1000 + ((i + j) % 5000) }],
            }],
          },
        } as never)));
      }
      await waitUntil('the storm enforced', async () => (await rules()) >= rules0 + n, 180_000);
      const up = Math.round(performance.now() - k);
      const rssPeak = await rss();
      for (let i = 0; i < n; i += 50) await Promise.all(names.slice(i, i + 50).map((name) => rest.delete(np, name, 'x')));
      await waitUntil('back to the rules before the storm', async () => (await rules()) === rules0, 180_000);
      storming = false;
      await labelChurn;
      const ms = Math.round(performance.now() - k);
      const cpu = agentCpuSeconds(target) - cpu0;
      const realized = bucketDelta(realized0, await realizationBuckets(target));
      for (let i = 0; i < churnPods; i += 50) await Promise.all(podNames.slice(i, i + 50).map((name) => rest.delete(podKind, name, 'storm')));
      await rest.delete(resolveKind('namespaces'), 'storm');
      console.error(
        `policy storm: ${n} policies enforced ${up} ms after the first was created, ${relabels} relabels of ${churnPods} Pods meanwhile; ` +
          `agent RSS ${rss0} MiB before, ${rssPeak} MiB with them, ${await rss()} MiB after they were deleted; ` +
          `agent CPU ${cpu.toFixed(1)} s in ${(ms / 1000).toFixed(1)} s (${Math.round((100 * cpu) / (ms / 1000))} % of a core); ` +
          `realization (API change -> flows committed) p50 <= ${quantile(realized, 0.5)}, p99 <= ${quantile(realized, 0.99)} over ${realized.at(-1)?.[1] ?? 0} commits`,
      );
      return ms;
    });

    // A Pod blasting connection attempts that a Reject rule answers: every SYN is a packet-in. The
    // bridge's meter must hold the rate the agent sees, and the agent must keep serving (a Pod created
    // meanwhile is attached: recovery is that time).
    const REJECT = `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: chaos-reject-82}
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {matchLabels: {ns: "y"}}}]
  ingress:
    - {name: reject-z-82, action: Reject, from: [{namespaceSelector: {matchLabels: {ns: z}}}], ports: [{protocol: TCP, port: 82}]}
`;
    const rejectFile = join(dir, 'reject.yaml');
    writeFileSync(rejectFile, REJECT);
    await labCli(['apply', '-f', rejectFile]);
    const yb = pod('y/b');
    const metric = async (name: string) => {
      const text = (await runIn(nodeNetns(LAB, yb.spec.nodeName), 'curl', ['-s', '--max-time', '2', 'http://127.0.0.1:10349/metrics'], { allowFail: true })).stdout;
      return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, 'gm'))].reduce((n, m) => n + Number(m[1]), 0);
    };
    await scenario(`packet-in flood: ${QUICK ? 5 : 30} s of SYNs to a Reject rule`, 1, async () => {
      const seconds = QUICK ? 5 : 30;
      const [in0, dropped0] = [await metric('sluice_packet_ins_total'), await metric('sluice_packet_ins_dropped_total')];
      const flood = spawn('ip', ['netns', 'exec', podNetns(LAB, 'z', 'a'), process.execPath, '-e',
        `const net=require('net');const end=Date.now()+${seconds * 1000};let n=0;(function go(){for(let i=0;i<50;i++){const s=net.connect({host:'${yb.status.podIP}',port:82});s.on('error',()=>{});s.on('connect',()=>s.destroy());n++}if(Date.now()<end)setTimeout(go,5);else setTimeout(()=>{console.log(n);process.exit(0)},1500)})()`], { stdio: ['ignore', 'pipe', 'ignore'] });
      let attempts = '';
      flood.stdout.setEncoding('utf8').on('data', (d: string) => (attempts += d));
      const done = new Promise<void>((r) => flood.on('close', () => r()));
      await sleep(1000);
      const rest = clientFor(info);
      const k = performance.now();
      await rest.apply(resolveKind('pods'), { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'during-flood', namespace: 'y' }, spec: { nodeName: yb.spec.nodeName, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
      await waitUntil('a Pod created during the flood is attached', async () => (((await status(yb.spec.nodeName))?.pods ?? []) as { podName: string }[]).some((p) => p.podName === 'during-flood'), 60_000);
      const ms = Math.round(performance.now() - k);
      await done;
      const [in1, dropped1] = [await metric('sluice_packet_ins_total'), await metric('sluice_packet_ins_dropped_total')];
      console.error(`packet-in flood: ${attempts.trim()} connection attempts in ${seconds} s; the agent received ${in1 - in0} packet-ins (${Math.round((in1 - in0) / seconds)}/s; the bridge meters them per category), dropped ${dropped1 - dropped0} from its queue; a Pod created meanwhile was attached after ${ms} ms`);
      await rest.delete(resolveKind('pods'), 'during-flood', 'y');
      return ms;
    });
    await labCli(['delete', '-f', rejectFile]);

    // Every watch stream cut at once with the history compacted: each informer's next watch gets
    // 410 Gone and relists, while the policy churn keeps changing what it lists.
    await scenario('watch streams cut, 410 Gone forced', QUICK ? 2 : 10, async () => {
      await sleep(500 + Math.random() * 1000);
      const relists = async () => Promise.all(info.nodes.map(async (n) => ((await status(n))?.enforcement as { relists?: number } | undefined)?.relists ?? -1));
      const before = await relists();
      process.kill(supervisorPid(LAB)!, 'SIGUSR2');
      const k = performance.now();
      await waitUntil('every agent relisted and synced', async () => {
        const after = await relists();
        const all = await Promise.all(info.nodes.map((n) => status(n)));
        return after.every((r, i) => r > before[i]!) && all.every((s) => (s?.enforcement as { synced?: boolean } | undefined)?.synced === true);
      });
      return Math.round(performance.now() - k);
    });

    await scenario(`API server unreachable ${QUICK ? 10 : 60} s`, 1, async () => {
      const pid = supervisorPid(LAB)!;
      process.kill(pid, 'SIGSTOP');
      await sleep(QUICK ? 10_000 : 60_000);
      process.kill(pid, 'SIGCONT');
      const k = performance.now();
      await waitUntil('watches synced', async () => {
        const all = await Promise.all(info.nodes.map((n) => status(n)));
        return all.every((s) => (s?.enforcement as { synced?: boolean } | undefined)?.synced === true);
      });
      return Math.round(performance.now() - k);
    });

    // The soak: steady churn (the policy churn above, plus a Pod created and one deleted on the
    // enforcing node every 2 s) while the agent's RSS and open file descriptors are sampled. Open
    // descriptors growing from the first third of the samples to the last is a leak; RSS is printed
    // with its trend, not judged (the JS heap grows and shrinks with the collector). The full run
    // stops it early enough to end within its 20 minutes. Recovery: each churned Pod's time to attach.
    const soakMs = QUICK ? 40_000 : Math.max(60_000, Math.min(15 * 60_000, FULL_BUDGET_MS - (performance.now() - t0)));
    await scenario(`soak: ${Math.round(soakMs / 1000)} s of policy, label and Pod churn, agent RSS and fds sampled`, 1, async () => {
      const rest = clientFor(info);
      const podKind = resolveKind('pods');
      const samples: { t: number; rss: number; fds: number }[] = [];
      const sample = async () => {
        const pid = Number(readFileSync(agentPidPath(LAB, target), 'utf8').trim());
        const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) / 1024;
        samples.push({ t: (performance.now() - k) / 1000, rss, fds: readdirSync(`/proc/${pid}/fd`).length });
      };
      const attachMs: number[] = [];
      const k = performance.now();
      let next = 0;
      let lastSample = -Infinity;
      const live: string[] = [];
      while (performance.now() - k < soakMs) {
        if (performance.now() - lastSample >= (QUICK ? 2000 : 5000)) {
          lastSample = performance.now();
          await sample();
        }
        const name = `soak-${next++}`;
        const a = performance.now();
        await rest.apply(podKind, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'z', labels: { soak: String(next % 3) } }, spec: { nodeName: target, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
        await waitUntil(`soak Pod ${name} attached`, async () => (await attachedPods(target)).some((p) => p.podNamespace === 'z' && p.podName === name), 60_000);
        attachMs.push(Math.round(performance.now() - a));
        live.push(name);
        if (live.length > 3) await rest.delete(podKind, live.shift()!, 'z');
        await sleep(2000);
      }
      await sample();
      for (const name of live) await rest.delete(podKind, name, 'z');
      await waitUntil('every soak Pod detached', async () => !(await attachedPods(target)).some((p) => p.podName.startsWith('soak-')), 60_000);
      // The first sixth is warm-up (caches filling, the first Pods' modules loading).
      const warm = samples.slice(Math.floor(samples.length / 6));
      const third = Math.max(1, Math.floor(warm.length / 3));
      const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
      const slope = (key: 'rss' | 'fds') => {
        const mt = warm.reduce((n, s) => n + s.t, 0) / warm.length;
        const mv = warm.reduce((n, s) => n + s[key], 0) / warm.length;
        const cov = warm.reduce((n, s) => n + (s.t - mt) * (s[key] - mv), 0);
        const vt = warm.reduce((n, s) => n + (s.t - mt) ** 2, 0);
        return vt > 0 ? (cov / vt) * 60 : 0;
      };
      const figures = (key: 'rss' | 'fds') => {
        const first = median(warm.slice(0, third).map((s) => s[key]));
        const last = median(warm.slice(-third).map((s) => s[key]));
        return { start: samples[0]![key], end: samples.at(-1)![key], max: Math.max(...samples.map((s) => s[key])), first, last, slope: slope(key) };
      };
      const fds = figures('fds');
      const rss = figures('rss');
      // A descriptor per churned Pod or policy change would add dozens; a handful is sockets in flight.
      const fdLeak = fds.last - fds.first >= 5 && fds.slope > 0;
      const rssGrowth = rss.last > rss.first * 1.2;
      console.error(`soak: ${samples.length} samples over ${Math.round((performance.now() - k) / 1000)} s, ${next} Pods created and deleted`);
      console.error(`soak: agent fds start ${fds.start}, end ${fds.end}, max ${fds.max}; median first third ${fds.first}, last third ${fds.last}; slope ${fds.slope.toFixed(2)}/min${fdLeak ? ': LEAK' : ': no growth'}`);
      console.error(`soak: agent RSS start ${rss.start.toFixed(0)} MiB, end ${rss.end.toFixed(0)} MiB, max ${rss.max.toFixed(0)} MiB; median first third ${rss.first.toFixed(0)}, last third ${rss.last.toFixed(0)} MiB; slope ${rss.slope.toFixed(2)} MiB/min${rssGrowth ? ': grew more than 20% (printed, not judged)' : ''}`);
      if (fdLeak) broken++;
      return attachMs;
    });

  } finally {
    // Even after a failure or an interrupted run: nothing of the lab is left behind.
    await labCli(['down']).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
  const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]! : 0);
  const header = ['SCENARIO', 'ITERATIONS', 'POLICY CHANGES', 'CONNECTIONS', 'GAPS', 'ALLOWED FAILED', 'RESETS', 'BROKEN', 'RECOVERY P50', 'RECOVERY P99', 'LEAKS'];
  const body = rows.map((r) => [r.scenario, String(r.iterations), String(r.churn), String(r.tried), String(r.gaps), String(r.allowedFailed), String(r.resets), String(r.broken), `${pct(r.recoveryMs, 50)} ms`, `${pct(r.recoveryMs, 99)} ms`, r.leaks.length ? String(r.leaks.length) : 'none']);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  for (const line of [header, ...body]) console.log(line.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd());
  console.log(`chaos ${QUICK ? '--quick ' : ''}done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const failed = rows.some((r) => r.gaps > 0 || r.resets > 0 || r.broken > 0 || r.leaks.length > 0);
  if (failed) console.log('an invariant broke (gaps, resets, broken or leaks above); see the lines on stderr');
  if (ONLY !== undefined && rows.length === 0) {
    console.error(`chaos: --only ${ONLY} matches no scenario`);
    process.exitCode = 2;
    return;
  }
  process.exitCode = failed ? 1 : 0;
}

main().catch((err: Error) => {
  console.error(`chaos: ${err.message}`);
  process.exitCode = 2;
});
