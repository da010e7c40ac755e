/**
 * Lab fixtures for the datapath tests (prefix "dp"): a node network namespace with its own private
 * OVS (netdev datapath), EKS-style Pods (veth, /32, static neighbour), an agent process running in
 * the node namespace, and a minimal CNI socket client. Everything created is removed by cleanup().
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { pino } from 'pino';
import { meterText, packetInMeters } from '../../daemon/flows/punt.js';
import { type GatewayInfo, OvsBridge } from '../../daemon/ovs/bridge.js';
import { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import type { PolicyEngine } from '../../daemon/policy/engine.js';
import type { Probe, Verdict } from '../../daemon/policy/types.js';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export async function sh(cmd: string, args: string[], opts: { input?: string; allowFail?: boolean; env?: Record<string, string> } = {}) {
  const r = await execa(cmd, args, { reject: false, input: opts.input ?? '', ...(opts.env ? { env: opts.env } : {}) });
  if (r.exitCode !== 0 && !opts.allowFail) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.exitCode}: ${r.stderr}`);
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}
export const inNs = (ns: string, cmd: string[], opts: { allowFail?: boolean; input?: string } = {}) => sh('ip', ['netns', 'exec', ns, ...cmd], opts);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const DATAPATH_TOOLS = ['ovs-vswitchd', 'ovsdb-server', 'ovs-vsctl', 'ovs-ofctl', 'ip', 'nft', 'iptables', 'ethtool', 'nsenter', 'nc', 'ping'];

/** Why the lab tests cannot run here (not root, one of `tools` or the OVS schema missing), or undefined. */
export async function missingPrereq(tools: readonly string[] = DATAPATH_TOOLS): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, OVS)';
  for (const tool of tools) {
    const r = await sh('sh', ['-c', `command -v ${tool}`], { allowFail: true });
    if (r.code !== 0) return `missing tool ${tool}`;
  }
  if (!existsSync('/usr/share/openvswitch/vswitch.ovsschema')) return 'missing /usr/share/openvswitch/vswitch.ovsschema';
  return undefined;
}

/** SIGKILL to the process a pid file names, if any (a daemon of a private OVS). */
export function killPidFile(file: string): void {
  if (!existsSync(file)) return;
  try {
    process.kill(Number(readFileSync(file, 'utf8').trim()), 'SIGKILL');
  } catch {
    /* gone */
  }
}

/** Kills a private OVS's daemons (started by startPrivateOvs in `runDir`). */
export function stopPrivateOvs(runDir: string): void {
  for (const d of ['ovs-vswitchd', 'ovsdb-server']) killPidFile(join(runDir, `${d}.pid`));
}

/** `sh` with every OVS tool pointed at the private OVS in `runDir`. */
export function ovsShell(runDir: string): typeof sh {
  const env = privateOvsEnv(runDir);
  return (cmd, args, opts = {}) => sh(cmd, args, { ...opts, env });
}

/** A private OVS bridge for ofproto/trace tests: br-int with antrea-gw0 and one veth port per Pod. */
export interface TraceBridge {
  ovs: OvsBridge;
  flowProgrammer: FlowProgrammer;
  gw: GatewayInfo;
  /** By Pod name: its port, the MAC its flows use (from the last byte of its IPv4 address) and that address. */
  ports: Record<string, { ofport: number; mac: string; ip: string }>;
}

/**
 * Network namespace `ns` with a private OVS (files under `dir`/ovs), br-int and antrea-gw0 as the
 * agent sets them up, the packet-in meters, and for each Pod (name -> IPv4 address) a veth
 * `<devPrefix><name>` attached as the agent attaches Pods (namespace x). Anything left from an
 * earlier run is removed first.
 */
export async function startTraceBridge(ns: string, dir: string, devPrefix: string, pods: Record<string, string>): Promise<TraceBridge> {
  const runDir = join(dir, 'ovs');
  await stopTraceBridge(ns, dir);
  mkdirSync(runDir, { recursive: true });
  await sh('ip', ['netns', 'add', ns]);
  await sh('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);
  await startPrivateOvs(ns, runDir);
  const opts = { ovsRunDir: runDir, bridge: 'br-int', datapath: 'netdev' as const, log: pino({ level: 'silent' }) };
  const ovs = new OvsBridge(opts);
  const flowProgrammer = new FlowProgrammer(opts);
  await ovs.ensureBridge();
  const gw = (await ovs.ensureGateway('antrea-gw0')).gateway;
  const ports: TraceBridge['ports'] = {};
  for (const [name, ip] of Object.entries(pods)) {
    const dev = `${devPrefix}${name}`;
    await sh('ip', ['netns', 'exec', ns, 'ip', 'link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}x`]);
    await sh('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', dev, 'up']);
    const mac = `2a:00:00:00:00:${ip.split('.')[3]!.padStart(2, '0')}`;
    const ofport = await ovs.addPodPort(dev, {
      'sluice-type': 'container', 'container-id': `c-${name}`, 'pod-namespace': 'x', 'pod-name': name, 'ip-address': ip,
      'attached-mac': mac, 'net-ns': '/var/run/netns/none', 'if-name': 'eth0',
    });
    ports[name] = { ofport, mac, ip };
  }
  for (const m of packetInMeters()) await flowProgrammer.ofctl(['add-meter', flowProgrammer.target, meterText(m)]);
  return { ovs, flowProgrammer, gw, ports };
}

/**
 * One ofproto/trace of a first packet (`flow`, as ofproto/trace reads it) through br-int, judged by
 * its final datapath actions: output ending at port `expectOut` is allow, a policy punt with the
 * reject bit and no output is reject, a drop is drop. `sh` is an OVS-scoped shell (ovsShell).
 */
export async function traceFirstPacket(sh: ReturnType<typeof ovsShell>, flow: string, expectOut: string): Promise<{ verdict: Verdict | 'other'; out: string }> {
  const out = (await sh('ovs-appctl', ['ofproto/trace', 'br-int', flow, '--ct-next', 'trk,new'])).stdout;
  const actions = [...out.matchAll(/Datapath actions: (.*)/g)].pop()?.[1] ?? '';
  if (/controller|userspace/.test(actions)) {
    const ud = [...out.matchAll(/userdata=01\.([0-9a-f]{2})/g)].pop()?.[1];
    if (ud !== undefined && (parseInt(ud, 16) & 0x02) !== 0 && !/,\d+$/.test(actions)) return { verdict: 'reject', out };
    if (/,\d+$/.test(actions) && actions.endsWith(`,${expectOut}`)) return { verdict: 'allow', out };
    return { verdict: ud !== undefined && !/\d$/.test(actions) ? 'drop' : 'other', out };
  }
  if (actions === 'drop') return { verdict: 'drop', out };
  if (new RegExp(`(^|,)${expectOut}$`).test(actions)) return { verdict: 'allow', out };
  return { verdict: 'other', out };
}

/**
 * What one node's bridge must do with a probe: it enforces the egress and the ingress of its own
 * Pods (`localPods`, "ns/name") only, so the verdict is the first non-allow among the local sides
 * of engine.explain(), egress first; with no side of a Pod (hosts, outside), the engine's verdict.
 */
export function localVerdict(engine: PolicyEngine, localPods: ReadonlySet<string>, probe: Probe): { verdict: Verdict; by: string } {
  const { result, sides } = engine.explain(probe);
  if (sides.length === 0) return { verdict: result.verdict, by: result.note ?? '' };
  const bad = sides.filter((s) => localPods.has(s.pod)).find((s) => s.verdict !== 'allow');
  const d = bad?.decidedBy;
  return { verdict: bad?.verdict ?? 'allow', by: d ? `${d.kind} ${d.name} ${d.rule ?? ''} (${d.direction})` : '' };
}

/** Removes what startTraceBridge made: the OVS daemons, the namespace and `dir`. */
export async function stopTraceBridge(ns: string, dir: string): Promise<void> {
  stopPrivateOvs(join(dir, 'ovs'));
  await sh('ip', ['netns', 'del', ns], { allowFail: true });
  rmSync(dir, { recursive: true, force: true });
}

/** Environment that keeps every OVS tool and daemon inside `runDir` (db, sockets, logs). */
export function privateOvsEnv(runDir: string): Record<string, string> {
  return { ...(process.env as Record<string, string>), OVS_RUNDIR: runDir, OVS_DBDIR: runDir, OVS_LOGDIR: runDir };
}

/** ovsdb-server (database created when missing) and ovs-vswitchd inside network namespace `ns`, all files in `runDir`. */
export async function startPrivateOvs(ns: string, runDir: string): Promise<void> {
  const env = privateOvsEnv(runDir);
  if (!existsSync(join(runDir, 'conf.db'))) await sh('ovsdb-tool', ['create', join(runDir, 'conf.db'), '/usr/share/openvswitch/vswitch.ovsschema']);
  await sh('ip', ['netns', 'exec', ns, 'ovsdb-server', `--remote=punix:${runDir}/db.sock`, `--pidfile=${runDir}/ovsdb-server.pid`, '--detach', `--log-file=${runDir}/ovsdb-server.log`, `${runDir}/conf.db`], { env });
  await sh('ovs-vsctl', [`--db=unix:${runDir}/db.sock`, '--no-wait', 'init'], { env });
  await startPrivateVswitchd(ns, runDir);
}

export async function startPrivateVswitchd(ns: string, runDir: string): Promise<void> {
  await sh('ip', ['netns', 'exec', ns, 'ovs-vswitchd', `--pidfile=${runDir}/ovs-vswitchd.pid`, '--detach', `--log-file=${runDir}/ovs-vswitchd.log`, `unix:${runDir}/db.sock`], { env: privateOvsEnv(runDir) });
}

export class Node {
  readonly dir: string;
  readonly runDir: string;
  private cleanups: (() => Promise<unknown>)[] = [];

  constructor(readonly ns: string) {
    this.dir = `/tmp/${ns}`;
    this.runDir = join(this.dir, 'ovs');
  }

  onCleanup(fn: () => Promise<unknown>): void {
    this.cleanups.push(fn);
  }

  async create(): Promise<void> {
    await this.destroy(); // leftovers of an interrupted earlier run
    mkdirSync(this.runDir, { recursive: true });
    await sh('ip', ['netns', 'add', this.ns]);
    await inNs(this.ns, ['ip', 'link', 'set', 'lo', 'up']);
    await inNs(this.ns, ['sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    await this.startOvs();
  }

  ovsEnv(): Record<string, string> {
    return privateOvsEnv(this.runDir);
  }

  startOvs(): Promise<void> {
    return startPrivateOvs(this.ns, this.runDir);
  }

  startVswitchd(): Promise<void> {
    return startPrivateVswitchd(this.ns, this.runDir);
  }

  async killVswitchd(): Promise<void> {
    const pidFile = join(this.runDir, 'ovs-vswitchd.pid');
    if (!existsSync(pidFile)) return;
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
    for (let i = 0; i < 50 && alive(pid); i++) await sleep(100);
    rmSync(pidFile, { force: true });
  }

  vsctl(args: string[]) {
    return sh('ovs-vsctl', [`--db=unix:${this.runDir}/db.sock`, ...args]);
  }

  ofctl(args: string[], input?: string) {
    return sh('ovs-ofctl', ['-O', 'OpenFlow15', ...args], input === undefined ? {} : { input });
  }

  get mgmt(): string {
    return `unix:${this.runDir}/br-int.mgmt`;
  }

  async destroy(): Promise<void> {
    for (const fn of this.cleanups.reverse()) await fn().catch(() => undefined);
    this.cleanups = [];
    for (const daemon of ['ovs-vswitchd', 'ovsdb-server']) {
      const pidFile = join(this.runDir, `${daemon}.pid`);
      if (existsSync(pidFile)) {
        const pid = Number(readFileSync(pidFile, 'utf8').trim());
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          /* gone */
        }
        for (let i = 0; i < 30 && alive(pid); i++) await sleep(100);
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      }
    }
    await sh('ip', ['netns', 'del', this.ns], { allowFail: true });
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Whether a process exists (signal 0). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface Pod {
  ns: string;
  netnsPath: string;
  ip: string;
  hostVeth: string;
  mac: string;
  containerId: string;
}

/** An EKS-style Pod: eth0 with ip/32, 169.254.1.1 as static next hop = host veth, host route ip/32 on the veth. */
export async function createPod(node: Node, name: string, ip: string): Promise<Pod> {
  const ns = `${node.ns}-${name}`;
  const hostVeth = `${node.ns.replace(/-/g, '')}${name}`.slice(0, 15);
  await sh('ip', ['netns', 'del', ns], { allowFail: true });
  await sh('ip', ['netns', 'add', ns]);
  node.onCleanup(() => sh('ip', ['netns', 'del', ns], { allowFail: true }));
  await inNs(node.ns, ['ip', 'link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
  await inNs(node.ns, ['ip', 'link', 'set', hostVeth, 'up']);
  const hostMac = JSON.parse((await inNs(node.ns, ['ip', '-j', 'link', 'show', hostVeth])).stdout)[0].address as string;
  const batch = [
    'link set lo up',
    'link set eth0 up',
    `addr add ${ip}/32 dev eth0`,
    'route add 169.254.1.1 dev eth0 scope link',
    'route add default via 169.254.1.1 dev eth0',
    `neigh replace 169.254.1.1 lladdr ${hostMac} dev eth0 nud permanent`,
  ].join('\n');
  await sh('ip', ['-n', ns, '-batch', '-'], { input: `${batch}\n` });
  await inNs(node.ns, ['ip', 'route', 'add', `${ip}/32`, 'dev', hostVeth, 'scope', 'link']);
  const mac = JSON.parse((await inNs(ns, ['ip', '-j', 'link', 'show', 'eth0'])).stdout)[0].address as string;
  return { ns, netnsPath: `/var/run/netns/${ns}`, ip, hostVeth, mac, containerId: `ctr-${name}-0123456789abcdef` };
}

/** The agent, run from source (through tap's TypeScript loader) inside the node namespace. */
export class AgentProcess {
  child?: ChildProcess;
  log = '';
  readonly socketPath: string;
  readonly configPath: string;

  constructor(
    readonly node: Node,
    readonly extraConfig: Record<string, unknown> = {},
  ) {
    this.socketPath = join(node.dir, 'cni.sock');
    this.configPath = join(node.dir, 'agent.yaml');
  }

  async start(env: Record<string, string> = {}): Promise<void> {
    const cfg = {
      nodeName: 'dp-node',
      datapath: 'netdev',
      serviceCIDRs: ['10.96.0.0/16'],
      socketPath: this.socketPath,
      ovsRunDir: this.node.runDir,
      stateDir: join(this.node.dir, 'state'),
      healthAddress: '127.0.0.1:19376', // inside the node namespace: no clash
      logLevel: 'debug',
      nodeIP: '192.168.100.1',
      rtTablesFile: '',
      flowCheckIntervalSeconds: 1,
      ...this.extraConfig,
    };
    writeFileSync(this.configPath, Object.entries(cfg).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join('\n') + '\n');
    // The built agent (npm test builds first): compiling the sources at every start would cost each
    // start seconds of CPU, and the agent is started many times.
    const child = spawn('ip', ['netns', 'exec', this.node.ns, process.execPath, join(REPO, 'dist', 'daemon', 'main.js'), '--config', this.configPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env, KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '' },
    });
    this.child = child;
    // Never leave an agent behind if the test process dies.
    process.once('exit', () => child.kill('SIGKILL'));
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (this.log += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.log += d));
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`agent exited with ${child.exitCode}:\n${this.log.slice(-3000)}`);
      if (existsSync(this.socketPath)) {
        const r = await cni(this.socketPath, { command: 'STATUS', config: netConf() }).catch(() => undefined);
        if (r?.ok) return;
      }
      await sleep(200);
    }
    throw new Error(`agent not ready within 60 s:\n${this.log.slice(-3000)}`);
  }

  /** kill -9 (crash) or SIGTERM; waits for the exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    // `ip netns exec` execs node, so the pid is the agent's own.
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(signal);
    await exited;
  }
}

export function netConf(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { cniVersion: '1.1.0', name: 'dp-net', type: 'sluice', ...extra };
}

export function prevResult(pod: Pod, ifName = 'eth0'): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    interfaces: [{ name: pod.hostVeth }, { name: ifName, sandbox: pod.netnsPath }],
    ips: [{ address: `${pod.ip}/32`, interface: 1 }],
  };
}

export type CniAnswer = { ok: true; result?: unknown } | { ok: false; code: number; msg: string; details?: string };

/** One request over the agent socket (the wire format of cni/protocol.ts). */
export function cni(socketPath: string, req: Record<string, unknown>): Promise<CniAnswer> {
  return new Promise((resolve, reject) => {
    const s = createConnection(socketPath);
    let buf = '';
    s.setEncoding('utf8');
    s.on('connect', () => s.write(`${JSON.stringify({ containerId: '', netns: '', ifName: '', args: {}, cniPath: '', ...req })}\n`));
    s.on('data', (d: string) => (buf += d));
    s.on('end', () => {
      try {
        resolve(JSON.parse(buf) as CniAnswer);
      } catch (err) {
        reject(new Error(`bad answer "${buf}": ${(err as Error).message}`));
      }
    });
    s.on('error', reject);
  });
}

export function podRequest(command: 'ADD' | 'DEL' | 'CHECK', pod: Pod, over: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    command,
    containerId: pod.containerId,
    netns: pod.netnsPath,
    ifName: 'eth0',
    args: { K8S_POD_NAMESPACE: 'default', K8S_POD_NAME: pod.ns },
    config: netConf({ prevResult: prevResult(pod) }),
    ...over,
  };
}

/** `cookie -> duration seconds` of every sluice flow (duration resets when a flow is re-added). */
export async function flowAges(node: Node): Promise<Map<string, number>> {
  const out = (await node.ofctl(['dump-flows', node.mgmt, 'cookie=0x51ce000000000000/0xffff000000000000'])).stdout;
  const ages = new Map<string, number>();
  for (const m of out.matchAll(/cookie=(0x[0-9a-f]+), duration=([\d.]+)s/g)) ages.set(m[1]!, Number(m[2]));
  return ages;
}

/** n_packets of the flows whose text contains `needle`, summed. */
export async function packets(node: Node, needle: string): Promise<number> {
  await sh('ovs-appctl', ['revalidator/wait'], { env: node.ovsEnv(), allowFail: true });
  const out = (await node.ofctl(['dump-flows', '--names', node.mgmt])).stdout;
  let n = 0;
  for (const line of out.split('\n')) if (line.includes(needle)) n += Number(/n_packets=(\d+)/.exec(line)?.[1] ?? 0);
  return n;
}
