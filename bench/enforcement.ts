/**
 * Enforcement bench on a 2-node lab "en4" with enforcing agents: ~1 000 Pods known
 * cluster-wide (most are API objects only: spec.nodeName of a node that does not exist, so no
 * kubelet runs them, status.podIP set through /status) and 500 NetworkPolicies applying to node-1's
 * Pods. Prints, for node-1's agent: time from the API call to the agent's "flows committed" (the
 * bundle is on the bridge) for (a) a new NetworkPolicy, (b) a Pod relabel that moves it into a
 * group, (c) a new local Pod (API create to "add: attached", which includes the lab kubelet's
 * sandbox set-up) — p50/p99; flows installed; agent RSS; TCP connection-setup rate between two
 * Pods with 500 policies and with none, alternating three times, with node-1's datapath counters
 * (megaflows, upcalls, subtables searched per hit). `--ip-family dual` runs it on a dual-stack lab (every Pod has an
 * IPv6 address too, the API-only ones fd00:200::/64) and measures the connection-setup rate over
 * IPv6 beside IPv4. Not a test: it asserts nothing, it measures.
 *
 * usage (root, after a build): node dist/bench/enforcement.js [--events 100] [--remote 980] [--policies 500] [--local-events 100] [--gap 100] [--ip-family ipv4|dual] [--lab en4] [--keep]
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { agentLogPath } from '../lab/agent.js';
import { readControl } from '../lab/control.js';
import { resolveKind } from '../lab/kinds.js';
import { podNetns, repoRoot } from '../lab/net/names.js';
import { clientFor } from '../lab/ops.js';
import type { KubeObject } from '../daemon/policy/types.js';
import { agentMemory, datapathCounters, flowCount, LogTail, pct, sleep } from './lab-agent.js';

const labArg = process.argv.indexOf('--lab');
/** The lab's name: another one (`--lab`) lets two runs of this bench share a machine. */
const LAB = (labArg > 0 ? process.argv[labArg + 1] : undefined) ?? 'en4';
const NODE = 'node-1';
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const EVENTS = arg('events', 100);
const LOCAL_EVENTS = arg('local-events', EVENTS);
const REMOTE = arg('remote', 980);
const POLICIES = arg('policies', 500);
/**
 * Pause between two measured events (ms). The agent coalesces an event that follows its last
 * commit within its debounce window (20 ms) into a delayed flush, by design; events spaced wider
 * than that measure an idle agent's latency. `--gap 0` measures back-to-back events.
 */
const GAP_MS = arg('gap', 100);
const LOCAL = 10;
const familyArg = process.argv.indexOf('--ip-family');
const IP_FAMILY = (familyArg > 0 ? process.argv[familyArg + 1] : undefined) ?? 'ipv4';
if (IP_FAMILY !== 'ipv4' && IP_FAMILY !== 'dual') throw new Error(`--ip-family ${IP_FAMILY}: use ipv4 or dual`);
const FAMILIES: (4 | 6)[] = IP_FAMILY === 'dual' ? [4, 6] : [4];
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');
const lab = (...args: string[]) => execFileSync(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();
const execFileAsync = promisify(execFile);

const POD = resolveKind('pods');
const NS = resolveKind('namespaces');
const NETPOL = resolveKind('networkpolicies');

/**
 * The API client with each call retried (twice) when the server had closed the kept-alive
 * connection it went out on (UND_ERR_SOCKET, ECONNRESET), which happens
 * after the pauses of the bench on a loaded machine.
 */
function retrying<C extends object>(client: C): C {
  return new Proxy(client, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return async (...args: unknown[]) => {
        for (let attempt = 0; ; attempt++) {
          try {
            return await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          } catch (err) {
            if (attempt >= 2 || !/UND_ERR_SOCKET|ECONNRESET/.test(String((err as Error).message))) throw err;
          }
        }
      };
    },
  });
}

const ipOf = (i: number): string => `10.200.${Math.floor(i / 250)}.${(i % 250) + 2}`;
const ip6Of = (i: number): string => `fd00:200::${(i + 2).toString(16)}`;

/** Each Pod's address of each family, once all of `names` run. */
async function waitRunning(rest: ReturnType<typeof clientFor>, names: string[]): Promise<Map<string, Map<4 | 6, string>>> {
  const deadline = Date.now() + 180_000;
  const byFamily = (p: KubeObject) =>
    new Map([...(p.status?.podIP ? [p.status.podIP as string] : []), ...((p.status?.podIPs ?? []) as { ip: string }[]).map((x) => x.ip)].map((ip): [4 | 6, string] => [ip.includes(':') ? 6 : 4, ip]));
  for (;;) {
    const items = (await rest.list(POD, { namespace: 'bench' })).items;
    const ips = new Map(items.filter((p) => p.status?.phase === 'Running' && FAMILIES.every((f) => byFamily(p).has(f))).map((p) => [p.metadata.name, byFamily(p)]));
    if (names.every((n) => ips.has(n))) return ips;
    if (Date.now() > deadline) throw new Error(`Pods not running: ${names.filter((n) => !ips.has(n)).join(', ')}`);
    await sleep(200);
  }
}

/**
 * Completed TCP connections per second from one Pod to another over `seconds`. Each connection is
 * closed with a RST: a FIN close leaves the client's port in TIME_WAIT for 60 s, and a second run
 * would then measure the kernel's search for a free ephemeral port (~10x slower), not the bridge.
 */
async function connectionRate(fromPod: string, ip: string, port: number, seconds = 3): Promise<number> {
  const script = `
    const net = require('node:net'); let n = 0; const end = Date.now() + ${seconds * 1000}; let active = 0;
    const one = () => { if (Date.now() > end) { if (--active === 0) { console.log(n); process.exit(0); } return; }
      const s = net.connect({ host: '${ip}', port: ${port} }, () => { n++; s.resetAndDestroy(); one(); }); s.on('error', () => { s.destroy(); one(); }); };
    for (let i = 0; i < 8; i++) { active++; one(); }`;
  // Not spawnSync: the event loop must keep running, or the API client would reuse a keep-alive
  // connection the server closed meanwhile.
  const { stdout } = await execFileAsync('ip', ['netns', 'exec', podNetns(LAB, 'bench', fromPod), process.execPath, '-e', script], { encoding: 'utf8' });
  return Number(stdout.trim()) / seconds;
}

function netpol(i: number): KubeObject {
  return {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'bench', name: `np-${i}` },
    spec: {
      podSelector: { matchLabels: { srv: `s${i % LOCAL}` } },
      policyTypes: ['Ingress'],
      ingress: [{ from: [{ podSelector: { matchLabels: { role: `r${i % 20}` } } }, { podSelector: { matchLabels: { app: 'cli' } } }], ports: [{ protocol: 'TCP', port: 1000 + i }, { protocol: 'TCP', port: 80 }] }],
    },
  };
}

async function main(): Promise<void> {
  const t0 = performance.now();
  spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
  lab('up', '--sluice', '--nodes', '2', '--ip-family', IP_FAMILY);
  const info = readControl(LAB)!;
  const rest = retrying(clientFor(info));
  await rest.create(NS, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'bench', labels: { ns: 'bench' } } });
  const container = { name: 's', image: 'bench', ports: [{ name: 'http', containerPort: 80, protocol: 'TCP' }] };
  const local = Array.from({ length: LOCAL }, (_, i) => `srv-${i}`);
  for (const [i, name] of local.entries()) {
    await rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'bench', name, labels: { app: 'srv', srv: `s${i}` } }, spec: { nodeName: NODE, containers: [container] } });
  }
  await rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'bench', name: 'cli', labels: { app: 'cli' } }, spec: { nodeName: 'node-2', containers: [container] } });
  const ips = await waitRunning(rest, [...local, 'cli']);
  const tRemote = performance.now();
  for (let i = 0; i < REMOTE; i++) {
    const name = `remote-${i}`;
    await rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'bench', name, labels: { role: `r${i % 20}`, grp: `g${i % 50}` } }, spec: { nodeName: 'node-9', containers: [container] } });
    const podIPs = [ipOf(i), ...(FAMILIES.includes(6) ? [ip6Of(i)] : [])].map((ip) => ({ ip }));
    await rest.patch(POD, name, 'bench', { status: { phase: 'Running', podIP: ipOf(i), podIPs } }, 'status');
  }
  console.log(`set-up: ${LOCAL + 1} real Pods, ${REMOTE} API-only Pods (created in ${((performance.now() - tRemote) / 1000).toFixed(1)} s)`);
  const tail = new LogTail(agentLogPath(LAB, NODE));
  await tail.settle();
  // IPv4 and IPv6 measured by turns, so that a change in the machine's load hits both alike.
  const counters = datapathCounters(LAB, NODE);
  let lastCounters = '';
  const rates = async (): Promise<Map<4 | 6, number>> => {
    const sums = new Map<4 | 6, number>(FAMILIES.map((f) => [f, 0]));
    counters.start();
    for (let round = 0; round < 2; round++) for (const f of FAMILIES) sums.set(f, sums.get(f)! + (await connectionRate('cli', ips.get('srv-0')!.get(f)!, 80)) / 2);
    lastCounters = counters.read();
    return sums;
  };
  const show = (r: Map<4 | 6, number>) => `${FAMILIES.map((f) => `IPv${f} ${r.get(f)!.toFixed(0)}`).join(', ')} conn/s (${NODE}'s datapath: ${lastCounters})`;
  const load = () => `load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}`;
  const rate0 = await rates();
  console.log(`connection setup cli (node-2) -> srv-0 (node-1), 0 policies: ${show(rate0)}; flows on ${NODE}: ${flowCount(LAB, NODE)}; ${agentMemory(LAB, NODE)}; ${load()}`);

  const tPol = performance.now();
  for (let i = 0; i < POLICIES; i++) await rest.create(NETPOL, netpol(i));
  await tail.settle();
  console.log(`${POLICIES} NetworkPolicies created and enforced in ${((performance.now() - tPol) / 1000).toFixed(1)} s; flows on ${NODE}: ${flowCount(LAB, NODE)}; ${agentMemory(LAB, NODE)}`);

  const measure = async (what: string, agentShare: string, n: number, act: (i: number) => Promise<unknown>, needles: (i: number) => string[]): Promise<void> => {
    const ms: number[] = [];
    const inAgent: number[] = [];
    // The parts of a policy commit the agent logs: the compile, and its bundle's apply (the
    // bundle with its barrier, then on netdev the megaflow purge; see FlowProgrammer.applyDiff).
    const parts = { compile: [] as number[], bundle: [] as number[], purge: [] as number[] };
    for (let i = 0; i < n; i++) {
      if (GAP_MS > 0) await sleep(GAP_MS);
      // Wall-clock, to compare with the log line's own timestamp (pino "time", epoch ms): the tail
      // polls the file, so when the bench sees the line is a few ms later than when it was written.
      const start = performance.timeOrigin + performance.now();
      const passed: string[] = [];
      const seen = tail.waitFor(needles(i), 60_000, passed);
      await act(i);
      const line = JSON.parse((await seen).line) as { time: number; ms?: number | Record<string, number>; compileMs?: number };
      ms.push(line.time - start);
      const applied = passed.filter((l) => l.includes('flows: applied')).map((l) => JSON.parse(l) as { bundleMs?: number; purgeMs?: number });
      if (line.compileMs !== undefined && applied.length > 0) {
        parts.compile.push(line.compileMs);
        parts.bundle.push(applied.reduce((a, x) => a + (x.bundleMs ?? 0), 0));
        parts.purge.push(applied.reduce((a, x) => a + (x.purgeMs ?? 0), 0));
      }
      // The agent's share: "flows committed" carries the time from the change reaching its engine
      // to commit, "add: attached" the time of each step of the CNI ADD.
      if (typeof line.ms === 'number') inAgent.push(line.ms);
      else if (line.ms) inAgent.push(Object.values(line.ms).reduce((a, b) => a + b, 0));
    }
    const split = inAgent.length === n ? `; in the agent (${agentShare}) p50 ${pct(inAgent, 50).toFixed(1)} ms, p99 ${pct(inAgent, 99).toFixed(1)} ms, so the rest ~${(pct(ms, 50) - pct(inAgent, 50)).toFixed(1)} ms` : '';
    const inParts = parts.compile.length > 0 ? `; its parts p50: compile ${pct(parts.compile, 50).toFixed(1)} ms, bundle ${pct(parts.bundle, 50).toFixed(1)} ms, purge ${pct(parts.purge, 50).toFixed(1)} ms (n=${parts.compile.length})` : '';
    console.log(`${what}: p50 ${pct(ms, 50).toFixed(1)} ms, p99 ${pct(ms, 99).toFixed(1)} ms (n=${n}, max ${Math.max(...ms).toFixed(1)} ms, events ${GAP_MS} ms apart)${split}${inParts}`);
  };
  await measure('(a) new NetworkPolicy -> flows committed', 'engine -> committed; the rest is the API server and watch delivery', EVENTS, (i) => rest.create(NETPOL, netpol(POLICIES + i)), () => ['policy: flows committed']);
  await tail.settle();
  await measure('(b) Pod relabel into a group -> flows committed', 'engine -> committed; the rest is the API server and watch delivery', EVENTS, (i) => rest.patch(POD, `remote-${i}`, 'bench', { metadata: { labels: { role: `r${(i % 20) + 1}` } } }), () => ['policy: flows committed']);
  await tail.settle();
  await measure(
    '(c) new local Pod (API create, kubelet sandbox, CNI ADD) -> attached with its flows',
    'the steps of its CNI ADD; the rest is the kubelet, the sandbox and the primary plugin',
    LOCAL_EVENTS,
    (i) => rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'bench', name: `new-${i}`, labels: { srv: `s${i % LOCAL}` } }, spec: { nodeName: NODE, containers: [container] } }),
    (i) => ['add: attached', `bench/new-${i}"`],
  );
  await tail.settle();
  // The 0-policy figure above was taken minutes earlier, under whatever load the machine had then.
  // The ratio that counts alternates: with every policy, then with none (all deleted), then all
  // created again, three times, so that a drift of the machine's load hits both sides alike.
  const all = (await rest.list(NETPOL, { namespace: 'bench' })).items;
  const withSum = new Map<4 | 6, number>(FAMILIES.map((f) => [f, 0]));
  const withoutSum = new Map<4 | 6, number>(FAMILIES.map((f) => [f, 0]));
  const add = (sum: Map<4 | 6, number>, r: Map<4 | 6, number>) => {
    for (const f of FAMILIES) sum.set(f, sum.get(f)! + r.get(f)!);
  };
  for (let round = 1; round <= 3; round++) {
    const withRate = await rates();
    add(withSum, withRate);
    console.log(`connection setup cli -> srv-0, round ${round}, ${all.length} policies: ${show(withRate)}; ${load()}`);
    for (const o of all) await rest.delete(NETPOL, o.metadata.name, 'bench');
    await tail.settle();
    const withoutRate = await rates();
    add(withoutSum, withoutRate);
    console.log(`connection setup cli -> srv-0, round ${round}, 0 policies: ${show(withoutRate)}; ${load()}`);
    if (round < 3) {
      for (const o of all) await rest.create(NETPOL, { apiVersion: o.apiVersion, kind: o.kind, metadata: { namespace: 'bench', name: o.metadata.name }, spec: o.spec });
      await tail.settle();
    }
  }
  const ratio = (a: Map<4 | 6, number>, b: Map<4 | 6, number>) => FAMILIES.map((f) => `IPv${f} ${(a.get(f)! / b.get(f)!).toFixed(2)}`).join(', ');
  console.log(`connection setup ratio, ${all.length} policies ÷ 0 policies, 3 alternating rounds: ${ratio(withSum, withoutSum)}`);
  console.log(`final: flows on ${NODE}: ${flowCount(LAB, NODE)}; ${agentMemory(LAB, NODE)}; Pods known cluster-wide: ${LOCAL + 1 + REMOTE + LOCAL_EVENTS}; bench ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  if (!process.argv.includes('--keep')) spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
}

main().catch((err) => {
  console.error(`bench failed: ${(err as Error).stack ?? err}`);
  spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
  process.exit(1);
});
