#!/usr/bin/env node
/**
 * `npm run chaos [-- --quick]`: faults injected into a 2-node enforcing lab (`chaos`, ptp, the model
 * of test/scenarios/model.yaml with a default deny on namespace x) while traffic runs, and two
 * invariants checked all along:
 *
 *  - no stale allow: every 250 ms probers in z/a and z/b (one on each node) open new TCP connections
 *    on ports 80 and 81 to every Pod of x (denied) and to y/a and y/c (allowed); a denied one that
 *    succeeds is a gap (must be 0), an allowed one that fails is counted;
 *  - nothing lost: an allowed TCP connection (z/b -> y/b) writes every 20 ms through each scenario
 *    and must never be reset; after each scenario every node's bridge holds exactly the agent's
 *    desired flows and one port per attached Pod (anything else is a leak).
 *
 * Policy churn runs through every scenario (a policy in x appearing and going away, a Pod relabelled:
 * flows recompiled, the probed verdicts unchanged). Scenarios, on x/a's node (the one enforcing the deny): its agent killed with SIGKILL at random
 * moments and started again (time to ready); its ovsdb-server and ovs-vswitchd killed and started
 * again (time until the bridge holds the agent's flows again); its iptables mangle and raw tables
 * flushed, and a Pod's host route moved back onto its veth, by another process (time to repair);
 * 40 Pods created at once and then deleted at once (time until all are attached and detached
 * again); a hostile Pod (z/c) sending to an allowed peer with another Pod's address and then with a
 * MAC it does not own (each such datagram that arrives counts as a gap; recovery: until it connects
 * again with its own); a policy storm (2 000 NetworkPolicies created, then deleted: agent memory
 * printed; recovery: until the rules are back to what they were); a Pod blasting SYNs that a Reject rule answers through the agent (packet-ins
 * received and dropped printed; recovery: how long a Pod created during the flood takes to attach); the API server unreachable (the lab supervisor stopped), then back (time until the
 * agents' watches are synced). Prints one table and exits 1 when an invariant broke. --quick runs each
 * scenario briefly (under a minute in all).
 */
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pino } from 'pino';
import { Ovs } from '../daemon/flows/ovs.js';
import { agentPidPath, startAgent } from './agent.js';
import { readControl, supervisorPid } from './control.js';
import { resolveKind } from './kinds.js';
import { runIn, sleep } from './net/exec.js';
import { nodeNetns, ovsDir, podNetns, repoRoot } from './net/names.js';
import { startNodeOvs, stopNodeOvs } from './net/ovs.js';
import { runProbes } from './net/probe-runner.js';
import { clientFor } from './ops.js';
import { bridgeHasDesired } from './proof/converge.js';

const LAB = 'chaos';
const QUICK = process.argv.includes('--quick');
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
  const ovs = new Ovs({ ovsRunDir: ovsDir(LAB, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
  const [dump, desired] = await Promise.all([ovs.ofctl(['dump-flows', '--no-names', '--no-stats', ovs.target]), status(node, '/flows')]);
  return Array.isArray(desired) && bridgeHasDesired(dump, desired);
}

/** What is on a node that should not be: flows the agent does not want, ports of no attached Pod. */
async function leaks(nodes: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const node of nodes) {
    if (!(await bridgeConverged(node))) out.push(`${node}: bridge flows differ from the agent's desired flows`);
    const ovs = new Ovs({ ovsRunDir: ovsDir(LAB, node), bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }) });
    const ports = (await ovs.listPodPorts()).map((p) => p.name).sort();
    const attached = (((await status(node))?.pods ?? []) as { hostVeth: string }[]).map((p) => p.hostVeth).sort();
    if (ports.join() !== attached.join()) out.push(`${node}: OVS Pod ports [${ports.join(', ')}] != attached [${attached.join(', ')}]`);
  }
  return out;
}

/** The prober: new connections every 250 ms while running, to every denied and every allowed target at once. */
class Prober {
  tried = 0;
  gaps = 0;
  allowedFailed = 0;
  gapDetails: string[] = [];
  private running = true;
  private loop: Promise<void>;
  constructor(sources: string[], denied: string[], allowed: string[]) {
    const targets = sources.flatMap((src) => [...denied.map((ip) => ({ ip, deny: true })), ...allowed.map((ip) => ({ ip, deny: false }))].flatMap((x) => [80, 81].map((port) => ({ ...x, src, port }))));
    this.loop = (async () => {
      while (this.running) {
        const results = await runProbes(targets.map((x) => ({ sourceNetns: x.src, ip: x.ip, port: x.port, protocol: 'TCP' as const })), 1000);
        results.forEach((r, i) => {
          const x = targets[i]!;
          this.tried++;
          if (x.deny && r.verdict === 'allow') {
            this.gaps++;
            this.gapDetails.push(`${new Date().toISOString()} denied connection ${x.src} -> ${x.ip}:${x.port} succeeded`);
          }
          if (!x.deny && r.verdict !== 'allow') this.allowedFailed++;
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

async function main(): Promise<void> {
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
    await waitUntil('the deny enforced', async () => (await runProbes([{ sourceNetns: src, ip: pod('x/a').status.podIP, port: 80, protocol: 'TCP' }], 1000))[0]!.verdict === 'drop');

    const scenario = async (name: string, iterations: number, fault: () => Promise<number>) => {
      // Sources on both nodes: z/a shares x/a's node, z/b does not (its packets reach x/a through the host route).
      const prober = new Prober([src, podNetns(LAB, 'z', 'b')], ['x/a', 'x/b', 'x/c'].map((r) => pod(r).status.podIP), ['y/a', 'y/c'].map((r) => pod(r).status.podIP));
      const stop = stream(podNetns(LAB, 'z', 'b'), pod('y/b').status.podIP);
      const churn = new Churner(clientFor(info));
      await sleep(1000);
      const recoveryMs: number[] = [];
      for (let i = 0; i < iterations; i++) recoveryMs.push(await fault());
      await churn.stop();
      await sleep(2000);
      await prober.stop();
      const s = await stop();
      const leaked = await leaks(info.nodes);
      rows.push({ scenario: name, iterations, tried: prober.tried, gaps: prober.gaps, allowedFailed: prober.allowedFailed, resets: s.error ? 1 : 0, recoveryMs, leaks: leaked, churn: churn.changes });
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
      await waitUntil('z/c reaches y/a again', async () => (await runProbes([{ sourceNetns: ns, ip: to, port: 80, protocol: 'TCP' }], 1000))[0]!.verdict === 'allow');
      return Math.round(performance.now() - k);
    });
    rows[rows.length - 1]!.gaps += spoofedThrough;
    console.error(`hostile Pod: ${spoofedThrough} of ${spoofed} spoofed datagrams reached y/a`);

    await scenario(`policy storm: ${QUICK ? 200 : 2000} NetworkPolicies created, then deleted`, 1, async () => {
      const rest = clientFor(info);
      const np = resolveKind('networkpolicies');
      const n = QUICK ? 200 : 2000;
      const rss = async () => ((await status(target))?.memory as { rssMiB?: number } | undefined)?.rssMiB ?? 0;
      const rules = async () => ((await status(target))?.enforcement as { rules?: number } | undefined)?.rules ?? -1;
      const [rss0, rules0] = [await rss(), await rules()];
      const k = performance.now();
      const names = Array.from({ length: n }, (_, i) => `storm-${i}`);
      for (let i = 0; i < n; i += 50) {
        await Promise.all(names.slice(i, i + 50).map((name, j) => rest.apply(np, {
          apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' },
          // x/c shares x/a's node and is denied already: ports 1000-5999 from z change no probed verdict.
          spec: { podSelector: { matchLabels: { pod: 'c' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }], ports: [{ protocol: 'TCP', port: 1000 + ((i + j) % 5000) }] }] },
        } as never)));
      }
      await waitUntil('the storm enforced', async () => (await rules()) >= rules0 + n, 180_000);
      const up = Math.round(performance.now() - k);
      const rssPeak = await rss();
      for (let i = 0; i < n; i += 50) await Promise.all(names.slice(i, i + 50).map((name) => rest.delete(np, name, 'x')));
      await waitUntil('back to the rules before the storm', async () => (await rules()) === rules0, 180_000);
      console.error(`policy storm: ${n} policies enforced ${up} ms after the first was created; agent RSS ${rss0} MiB before, ${rssPeak} MiB with them, ${await rss()} MiB after they were deleted`);
      return Math.round(performance.now() - k);
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

  } finally {
    // Even after a failure or an interrupted run: nothing of the lab is left behind.
    await labCli(['down']).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
  const pct = (xs: number[], p: number) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]! : 0);
  const header = ['SCENARIO', 'ITERATIONS', 'POLICY CHANGES', 'CONNECTIONS', 'GAPS', 'ALLOWED FAILED', 'RESETS', 'RECOVERY P50', 'RECOVERY P99', 'LEAKS'];
  const body = rows.map((r) => [r.scenario, String(r.iterations), String(r.churn), String(r.tried), String(r.gaps), String(r.allowedFailed), String(r.resets), `${pct(r.recoveryMs, 50)} ms`, `${pct(r.recoveryMs, 99)} ms`, r.leaks.length ? String(r.leaks.length) : 'none']);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  for (const line of [header, ...body]) console.log(line.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd());
  console.log(`chaos ${QUICK ? '--quick ' : ''}done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  const broken = rows.some((r) => r.gaps > 0 || r.resets > 0 || r.leaks.length > 0);
  if (broken) console.log('an invariant broke (gaps, resets or leaks above); see the lines on stderr');
  process.exitCode = broken ? 1 : 0;
}

main().catch((err: Error) => {
  console.error(`chaos: ${err.message}`);
  process.exitCode = 2;
});
