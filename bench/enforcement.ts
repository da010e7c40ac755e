/**
 * Enforcement bench on a 2-node lab "en4" with enforcing agents: ~1 000 Pods known
 * cluster-wide (most are API objects only: spec.nodeName of a node that does not exist, so no
 * kubelet runs them, status.podIP set through /status) and 500 NetworkPolicies applying to node-1's
 * Pods. Prints, for node-1's agent: time from the API call to the agent's "flows committed" (the
 * bundle is on the bridge) for (a) a new NetworkPolicy, (b) a Pod relabel that moves it into a
 * group, (c) a new local Pod (API create to "add: attached", which includes the lab kubelet's
 * sandbox set-up) — p50/p99; flows installed; agent RSS; TCP connection-setup rate between two
 * Pods with 0 and with 500 policies. Not a test: it asserts nothing, it measures.
 *
 * usage (root, after a build): node dist/bench/enforcement.js [--events 100] [--remote 980] [--policies 500] [--local-events 100] [--keep]
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { openSync, readSync, closeSync, statSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { agentLogPath, agentPidPath } from '../lab/agent.js';
import { readControl } from '../lab/control.js';
import { resolveKind } from '../lab/kinds.js';
import { nodeNetns, ovsDir, podNetns, repoRoot } from '../lab/net/names.js';
import { clientFor } from '../lab/ops.js';
import type { KubeObject } from '../daemon/policy/types.js';

const LAB = 'en4';
const NODE = 'node-1';
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const EVENTS = arg('events', 100);
const LOCAL_EVENTS = arg('local-events', EVENTS);
const REMOTE = arg('remote', 980);
const POLICIES = arg('policies', 500);
const LOCAL = 10;
const cli = join(repoRoot(), 'dist', 'lab', 'cli.js');
const lab = (...args: string[]) => execFileSync(process.execPath, [cli, ...args, '--name', LAB], { stdio: ['ignore', 'pipe', 'inherit'] }).toString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const POD = resolveKind('pods');
const NS = resolveKind('namespaces');
const NETPOL = resolveKind('networkpolicies');

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** Follows the agent's JSON log from its current end. */
class LogTail {
  private offset: number;
  private buf = '';
  constructor(private readonly file: string) {
    this.offset = statSync(file).size;
  }
  /** Resolves with the first new line containing every needle, and the time it was seen. */
  async waitFor(needles: string[], timeoutMs = 60_000): Promise<{ line: string; at: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const size = statSync(this.file).size;
      if (size > this.offset) {
        const fd = openSync(this.file, 'r');
        const chunk = Buffer.alloc(size - this.offset);
        readSync(fd, chunk, 0, chunk.length, this.offset);
        closeSync(fd);
        this.offset = size;
        this.buf += chunk.toString('utf8');
      }
      const lines = this.buf.split('\n');
      this.buf = lines.pop() ?? '';
      const at = performance.now();
      for (const [i, l] of lines.entries()) {
        if (needles.every((n) => l.includes(n))) {
          this.buf = lines.slice(i + 1).join('\n') + (lines.length > i + 1 ? '\n' : '') + this.buf;
          return { line: l, at };
        }
      }
      if (Date.now() > deadline) throw new Error(`no log line with ${needles.join(' + ')} within ${timeoutMs} ms`);
      await sleep(2);
    }
  }
}

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

async function waitRunning(rest: ReturnType<typeof clientFor>, names: string[]): Promise<Map<string, string>> {
  const deadline = Date.now() + 180_000;
  for (;;) {
    const items = (await rest.list(POD, { namespace: 'bench' })).items;
    const ips = new Map(items.filter((p) => p.status?.phase === 'Running' && p.status?.podIP).map((p) => [p.metadata.name, p.status.podIP as string]));
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
function connectionRate(fromPod: string, ip: string, port: number, seconds = 3): number {
  const script = `
    const net = require('node:net'); let n = 0; const end = Date.now() + ${seconds * 1000}; let active = 0;
    const one = () => { if (Date.now() > end) { if (--active === 0) { console.log(n); process.exit(0); } return; }
      const s = net.connect({ host: '${ip}', port: ${port} }, () => { n++; s.resetAndDestroy(); one(); }); s.on('error', () => { s.destroy(); one(); }); };
    for (let i = 0; i < 8; i++) { active++; one(); }`;
  const r = spawnSync('ip', ['netns', 'exec', podNetns(LAB, 'bench', fromPod), process.execPath, '-e', script], { encoding: 'utf8' });
  return Number(r.stdout.trim()) / seconds;
}

function flowCount(): number {
  const r = spawnSync('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-aggregate', 'br-int'], { env: { ...process.env, OVS_RUNDIR: ovsDir(LAB, NODE) }, encoding: 'utf8' });
  return Number(/flow_count=(\d+)/.exec(r.stdout)?.[1] ?? NaN);
}

/** Agent memory: RSS from /proc, and the JS heap split the agent reports in /status (live vs reserved). */
function agentMemory(): string {
  const pid = readFileSync(agentPidPath(LAB, NODE), 'utf8').trim();
  const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;
  const r = spawnSync('ip', ['netns', 'exec', nodeNetns(LAB, NODE), 'curl', '-s', '--max-time', '5', 'http://127.0.0.1:10349/status'], { encoding: 'utf8' });
  let heap = '';
  try {
    const m = (JSON.parse(r.stdout) as { memory?: { heapUsedMiB: number; heapTotalMiB: number } }).memory;
    if (m) heap = ` (JS heap ${m.heapUsedMiB.toFixed(0)} of ${m.heapTotalMiB.toFixed(0)} MiB)`;
  } catch {
    heap = ' (JS heap: /status unavailable)';
  }
  return `agent RSS ${rss.toFixed(0)} MiB${heap}`;
}

async function settle(tail: LogTail): Promise<void> {
  // Quiet for 2 s: no further commit.
  for (;;) {
    try {
      await tail.waitFor(['policy: flows committed'], 2000);
    } catch {
      return;
    }
  }
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
  lab('up', '--sluice', '--nodes', '2');
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
    await rest.patch(POD, name, 'bench', { status: { phase: 'Running', podIP: ipOf(i), podIPs: [{ ip: ipOf(i) }] } }, 'status');
  }
  console.log(`set-up: ${LOCAL + 1} real Pods, ${REMOTE} API-only Pods (created in ${((performance.now() - tRemote) / 1000).toFixed(1)} s)`);
  const tail = new LogTail(agentLogPath(LAB, NODE));
  await settle(tail);
  const rate0 = connectionRate('cli', ips.get('srv-0')!, 80);
  console.log(`connection setup cli (node-2) -> srv-0 (node-1), 0 policies: ${rate0.toFixed(0)} conn/s; flows on ${NODE}: ${flowCount()}; ${agentMemory()}`);

  const tPol = performance.now();
  for (let i = 0; i < POLICIES; i++) await rest.create(NETPOL, netpol(i));
  await settle(tail);
  console.log(`${POLICIES} NetworkPolicies created and enforced in ${((performance.now() - tPol) / 1000).toFixed(1)} s; flows on ${NODE}: ${flowCount()}; ${agentMemory()}`);

  const measure = async (what: string, n: number, act: (i: number) => Promise<unknown>, needles: (i: number) => string[]): Promise<void> => {
    const ms: number[] = [];
    for (let i = 0; i < n; i++) {
      const start = performance.now();
      const seen = tail.waitFor(needles(i));
      await act(i);
      ms.push((await seen).at - start);
    }
    console.log(`${what}: p50 ${pct(ms, 50).toFixed(1)} ms, p99 ${pct(ms, 99).toFixed(1)} ms (n=${n}, max ${Math.max(...ms).toFixed(1)} ms)`);
  };
  await measure('(a) new NetworkPolicy -> flows committed', EVENTS, (i) => rest.create(NETPOL, netpol(POLICIES + i)), () => ['policy: flows committed']);
  await settle(tail);
  await measure('(b) Pod relabel into a group -> flows committed', EVENTS, (i) => rest.patch(POD, `remote-${i}`, 'bench', { metadata: { labels: { role: `r${(i % 20) + 1}` } } }), () => ['policy: flows committed']);
  await settle(tail);
  await measure(
    '(c) new local Pod (API create, kubelet sandbox, CNI ADD) -> attached with its flows',
    LOCAL_EVENTS,
    (i) => rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'bench', name: `new-${i}`, labels: { srv: `s${i % LOCAL}` } }, spec: { nodeName: NODE, containers: [container] } }),
    (i) => ['add: attached', `bench/new-${i}"`],
  );
  await settle(tail);
  const rate500 = connectionRate('cli', ips.get('srv-0')!, 80);
  console.log(`connection setup cli -> srv-0 with ${POLICIES + EVENTS} policies: ${rate500.toFixed(0)} conn/s (ratio to 0 policies: ${(rate500 / rate0).toFixed(2)})`);
  console.log(`final: flows on ${NODE}: ${flowCount()}; ${agentMemory()}; Pods known cluster-wide: ${LOCAL + 1 + REMOTE + LOCAL_EVENTS}; bench ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  if (!process.argv.includes('--keep')) spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
}

main().catch((err) => {
  console.error(`bench failed: ${(err as Error).stack ?? err}`);
  spawnSync(process.execPath, [cli, 'down', '--name', LAB], { stdio: 'ignore' });
  process.exit(1);
});
