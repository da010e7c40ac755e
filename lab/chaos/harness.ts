/**
 * The chaos suite's harness: it brings up the 2-node enforcing lab with the deny on x, runs each
 * scenario's faults while the probers, the allowed stream and the policy churn (traffic.ts) run,
 * checks every node for leaks after each scenario, and prints the table and the exit status. A
 * scenario (one file each in this folder) is a function of the ChaosRun that calls `scenario()`
 * once with its fault, plus whatever it sets up or reports around it.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { OvsBridge } from '../../daemon/ovs/bridge.js';
import { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import { DEFAULT_POLICY_SOURCE } from '../args.js';
import { type ControlInfo, readControl } from '../control.js';
import { resolveKind } from '../kinds.js';
import type { Conflist } from '../net/cni-config.js';
import { runIn, sleep } from '../net/exec.js';
import { conflistPath, ipamDir, nodeNetns, ovsDir, podCidr, podNetns, repoRoot } from '../net/names.js';
import { runProbes } from '../net/probe-runner.js';
import { clientFor } from '../ops.js';
import { bridgeHasDesired } from '../proof/converge.js';
import { CHAOS_PROBES, Churner, type FlippedTarget, Prober, stream } from './traffic.js';

export interface ChaosOptions {
  /** `--quick`: each scenario briefly. */
  quick: boolean;
  /** `--name NAME`: the lab's name (its namespaces and state), so a run can sit beside another lab. */
  lab: string;
  /** `--only WORD`: only the scenarios whose name contains WORD. */
  only: string | undefined;
  /** What the agents follow (default: the controller, whose faults then run too). */
  policySource?: 'standalone' | 'controller';
}

/** A scenario: calls `run.scenario()` with its fault, with what it needs set up or reported around it. */
export type Scenario = (run: ChaosRun) => Promise<void>;

/** The full run stops its soak early enough to finish within 20 minutes. */
export const FULL_BUDGET_MS = 19 * 60_000;
const CLI = join(repoRoot(), 'dist', 'lab', 'cli.js');
const MODEL = join(repoRoot(), 'test', 'scenarios', 'model.yaml');
const DENY_X = 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-in, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n';

export interface Row {
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

export interface LabPod {
  metadata: { namespace: string; name: string };
  spec: { nodeName: string };
  status: { podIP: string };
}

export interface AttachedPod {
  containerId: string;
  podNamespace: string;
  podName: string;
  hostVeth: string;
  ips: string[];
}

export async function labCli(lab: string, args: string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const c = spawn(process.execPath, [CLI, ...args, '--name', lab], { stdio: ['ignore', 'ignore', 'inherit'] });
    c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`sluice-lab ${args.join(' ')} exited ${code}`))));
  });
}

export async function waitUntil(what: string, cond: () => Promise<boolean>, timeoutMs = 60_000): Promise<number> {
  const t0 = performance.now();
  while (performance.now() - t0 < timeoutMs) {
    if (await cond().catch(() => false)) return Math.round(performance.now() - t0);
    await sleep(50);
  }
  throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
}

/** The lab a chaos run works on, and the scenario runner that records each scenario's row. */
export class ChaosRun {
  readonly rows: Row[] = [];
  /** The running scenario's other broken promises (its fault adds them). */
  broken = 0;
  /** Where x/a runs: the node enforcing the deny, where the faults are injected. */
  readonly target: string;
  /** z/a's namespace, a prober source on the target node. */
  readonly src: string;

  constructor(
    readonly opts: ChaosOptions,
    /** When the run started (performance.now()). */
    readonly t0: number,
    /** A scratch directory for manifests, removed at the end. */
    readonly dir: string,
    readonly info: ControlInfo,
    private readonly pods: LabPod[],
  ) {
    this.target = this.pod('x/a').spec.nodeName;
    this.src = podNetns(opts.lab, 'z', 'a');
  }

  get lab(): string {
    return this.opts.lab;
  }

  get quick(): boolean {
    return this.opts.quick;
  }

  /** A Pod of the model by `namespace/name`, as it was when the run started. */
  pod(ref: string): LabPod {
    return this.pods.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === ref)!;
  }

  labCli(args: string[]): Promise<void> {
    return labCli(this.lab, args);
  }

  /** The agent's local API (`/status`, `/flows`, `/policies`) on a node; undefined when it does not answer. */
  async status(node: string, path = '/status'): Promise<Record<string, unknown> | undefined> {
    const r = await runIn(nodeNetns(this.lab, node), 'curl', ['-s', '--max-time', '2', `http://127.0.0.1:10349${path}`], { allowFail: true, timeoutMs: 5000 });
    try {
      return r.exitCode === 0 ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined;
    } catch {
      return undefined;
    }
  }

  /** The bridge holds exactly the agent's desired flows. */
  async bridgeConverged(node: string): Promise<boolean> {
    const ovs = new FlowProgrammer({ ovsRunDir: ovsDir(this.lab, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
    const [dump, desired] = await Promise.all([ovs.ofctl(['dump-flows', '--no-names', '--no-stats', ovs.target]), this.status(node, '/flows')]);
    return Array.isArray(desired) && bridgeHasDesired(dump, desired);
  }

  async attachedPods(node: string): Promise<AttachedPod[]> {
    return ((await this.status(node))?.pods ?? []) as AttachedPod[];
  }

  /**
   * What is on a node that should not be: flows the agent does not want, ports of no attached Pod,
   * host routes to Pod addresses that are not an attached Pod's route via the gateway, and Pod
   * addresses the primary's IPAM still holds for no attached Pod.
   */
  async leaks(nodes: string[]): Promise<string[]> {
    const out: string[] = [];
    for (const node of nodes) {
      if (!(await this.bridgeConverged(node))) out.push(`${node}: bridge flows differ from the agent's desired flows`);
      const ovs = new OvsBridge({ ovsRunDir: ovsDir(this.lab, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
      const ports = (await ovs.listPodPorts()).map((p) => p.name).sort();
      const pods = await this.attachedPods(node);
      const attached = pods.map((p) => p.hostVeth).sort();
      if (ports.join() !== attached.join()) out.push(`${node}: OVS Pod ports [${ports.join(', ')}] != attached [${attached.join(', ')}]`);
      const ips = pods.flatMap((p) => p.ips).sort();
      const prefix = podCidr(node).replace(/0\/24$/, '');
      const routes = (await runIn(nodeNetns(this.lab, node), 'ip', ['-4', 'route', 'show'])).stdout.split('\n').map((l) => /^(\S+) dev (\S+)/.exec(l)).filter((m) => m !== null && m[1]!.startsWith(prefix) && !m[1]!.includes('/'));
      const wrong = routes.filter((m) => !ips.includes(m![1]!) || m![2] !== 'antrea-gw0').map((m) => `${m![1]} dev ${m![2]}`);
      if (wrong.length || routes.length !== ips.length) out.push(`${node}: host routes [${wrong.join(', ')}] are no attached Pod's (${routes.length} Pod routes, ${ips.length} attached Pod addresses)`);
      // host-local keeps one file per address it handed out, in a directory named after the network.
      const network = (JSON.parse(readFileSync(conflistPath(this.lab, node), 'utf8')) as Conflist).name;
      const held = readdirSync(join(ipamDir(this.lab, node), network)).filter((f) => f.startsWith(prefix)).sort();
      if (held.join() !== ips.join()) out.push(`${node}: IPAM holds [${held.filter((ip) => !ips.includes(ip)).join(', ')}] for no attached Pod`);
    }
    return out;
  }

  /** leaks(), given 10 s for what the last moments left in flight (a DEL's IPAM release, a flow sync under churn). */
  async settledLeaks(nodes: string[]): Promise<string[]> {
    let leaked = await this.leaks(nodes);
    for (let i = 0; i < 20 && leaked.length; i++) {
      await sleep(500);
      leaked = await this.leaks(nodes);
    }
    return leaked;
  }

  /** The row of the scenario that just ran, if it was the one named (`--only` may have skipped it). */
  ranLast(prefix: string): Row | undefined {
    return this.rows.at(-1)?.scenario.startsWith(prefix) ? this.rows.at(-1) : undefined;
  }

  /**
   * Runs `fault` `iterations` times (each returns its recovery time or times) while the probers,
   * the allowed stream and the policy churn run, then records the scenario's row and prints its
   * gaps, its reset and its leaks on stderr. Skipped when `--only` names another scenario.
   */
  async scenario(name: string, iterations: number, fault: () => Promise<number | number[]>, flipped?: FlippedTarget): Promise<void> {
    if (this.opts.only !== undefined && !name.includes(this.opts.only)) return;
    this.broken = 0;
    // Sources on both nodes: z/a shares x/a's node, z/b does not (its packets reach x/a through the host route).
    const prober = new Prober([this.src, podNetns(this.lab, 'z', 'b')], ['x/a', 'x/b', 'x/c'].map((r) => this.pod(r).status.podIP), ['y/a', 'y/c'].map((r) => this.pod(r).status.podIP), flipped);
    const stop = stream(podNetns(this.lab, 'z', 'b'), this.pod('y/b').status.podIP);
    const churn = new Churner(clientFor(this.info));
    await sleep(1000);
    const recoveryMs: number[] = [];
    try {
      for (let i = 0; i < iterations; i++) recoveryMs.push(...[await fault()].flat());
    } catch (err) {
      // The traffic stops with the fault, so the fault's own error is the one reported.
      await Promise.allSettled([churn.stop(), prober.stop(), stop()]);
      throw new Error(`${name}: ${(err as Error).message}`);
    }
    await churn.stop();
    await sleep(2000);
    await prober.stop();
    const s = await stop();
    const leaked = await this.settledLeaks(this.info.nodes);
    this.rows.push({ scenario: name, iterations, tried: prober.tried, gaps: prober.gaps, allowedFailed: prober.allowedFailed, resets: s.error ? 1 : 0, broken: this.broken, recoveryMs, leaks: leaked, churn: churn.changes });
    for (const g of prober.gapDetails) console.error(`${name}: GAP ${g}`);
    if (s.error) console.error(`${name}: the allowed connection ended: ${s.error} (${s.sent} written, ${s.echoed} echoed)`);
    for (const l of leaked) console.error(`${name}: LEAK ${l}`);
  }
}

/**
 * The whole run: a fresh lab (any earlier one of the name taken down), the deny on x enforced, the
 * scenarios in order, the lab taken down whatever happened, then the table. Sets process.exitCode:
 * 1 when an invariant broke, 2 when `--only` matched no scenario; throws when the run cannot go on.
 */
export async function runChaos(opts: ChaosOptions, scenarios: Scenario[]): Promise<void> {
  if (opts.only === '') throw new Error('--only needs a word of a scenario name (e.g. --only soak)');
  const t0 = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'chaos-'));
  await labCli(opts.lab, ['down']).catch(() => undefined);
  await labCli(opts.lab, ['up', '--nodes', '2', '--primary', 'ptp', '--policy-source', opts.policySource ?? DEFAULT_POLICY_SOURCE, '-f', MODEL]);
  let rows: Row[] = [];
  try {
    const deny = join(dir, 'deny.yaml');
    writeFileSync(deny, DENY_X);
    await labCli(opts.lab, ['apply', '-f', deny]);
    const info = readControl(opts.lab)!;
    const pods = (await clientFor(info).list(resolveKind('pods'))).items as LabPod[];
    const run = new ChaosRun(opts, t0, dir, info, pods);
    rows = run.rows;
    await waitUntil('the deny enforced', async () => (await runProbes([{ sourceNetns: run.src, ip: run.pod('x/a').status.podIP, port: 80, protocol: 'TCP' }], 1000, CHAOS_PROBES))[0]!.verdict === 'drop');
    for (const scenario of scenarios) await scenario(run);
  } finally {
    // Even after a failure or an interrupted run: nothing of the lab is left behind.
    await labCli(opts.lab, ['down']).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
  report(opts, rows, t0);
}

/** The table on stdout, the verdict, and the exit status. */
function report(opts: ChaosOptions, rows: Row[], t0: number): void {
  const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]! : 0);
  const header = ['SCENARIO', 'ITERATIONS', 'POLICY CHANGES', 'CONNECTIONS', 'GAPS', 'ALLOWED FAILED', 'RESETS', 'BROKEN', 'RECOVERY P50', 'RECOVERY P99', 'LEAKS'];
  const body = rows.map((r) => [r.scenario, String(r.iterations), String(r.churn), String(r.tried), String(r.gaps), String(r.allowedFailed), String(r.resets), String(r.broken), `${pct(r.recoveryMs, 50)} ms`, `${pct(r.recoveryMs, 99)} ms`, r.leaks.length ? String(r.leaks.length) : 'none']);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  for (const line of [header, ...body]) console.log(line.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd());
  console.log(`chaos ${opts.quick ? '--quick ' : ''}done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const failed = rows.some((r) => r.gaps > 0 || r.resets > 0 || r.broken > 0 || r.leaks.length > 0);
  if (failed) console.log('an invariant broke (gaps, resets, broken or leaks above); see the lines on stderr');
  if (opts.only !== undefined && rows.length === 0) {
    console.error(`chaos: --only ${opts.only} matches no scenario`);
    process.exitCode = 2;
    return;
  }
  process.exitCode = failed ? 1 : 0;
}
