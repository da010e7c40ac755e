/**
 * FQDN learning on a real bridge (prefix "fq"): a private OVS (netdev) in namespace fq-node with
 * the base pipeline (computeFlows), the policy flows of a ClusterNetworkPolicy
 *   egress: Allow UDP/TCP 53 to the DNS server (the user's own rule), Allow TCP 80 to fqdn
 *   "*.example.com", Drop everything else
 * and the DNS interception flows, plus the agent's OpenFlow controller in this test process.
 * A Pod namespace (fq-pod) sits on a Pod port; a namespace behind the gateway port (fq-ext) runs a
 * DNS server (UDP and TCP 53: www.example.com A 192.0.2.10 TTL 5, api.example.com A 192.0.2.12,
 * other names NXDOMAIN) and web servers on 192.0.2.10/.11/.12 port 80.
 *
 * Shown with real packets: before DNS the web address is dropped; the Pod's UDP query is held,
 * learned, the flows committed, and the answer released (the query succeeds) — and a connection
 * opened right after the answer is allowed (no race); an address the DNS did not give stays
 * dropped; DNS over TCP works and is learned too; NXDOMAIN answers are delivered; after the TTL
 * the address is dropped again. The hold latency is printed.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import t from 'tap';
import { bundleText, diffFlows } from '../../daemon/flows/diff.js';
import { type Flow, flowText } from '../../daemon/flows/flow.js';
import { OpenFlowController } from '../../daemon/ovs/openflow/controller.js';
import { runPacketInLoop } from '../../daemon/ovs/openflow/dispatch.js';
import { packetInMeters, PuntCategory } from '../../daemon/flows/punt.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { dirtyRuleIds, PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { GATEWAY_OFPORT } from '../../daemon/flows/tables.js';
import { realClock } from '../../daemon/clock.js';
import { parseDnsMessage, resolvedNames } from '../../daemon/enforcement/fqdn/dnswire.js';
import { dnsInterceptFlows, dnsInterceptFlowsFor } from '../../daemon/enforcement/fqdn/flows.js';
import { expireFqdnsDue, FqdnExpiryTimer, processDnsPacketIn } from '../../daemon/enforcement/fqdn/handler.js';
import { FqdnLearner } from '../../daemon/enforcement/fqdn/learner.js';
import { FqdnLearning } from '../../daemon/enforcement/fqdn/learning.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { ChangeSet } from '../../daemon/policy/internal.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { simpleQuery } from '../unit/fqdn-helpers.js';
import { connectProgram, dnsServerProgram, nodeIn, queryProgram as queryProgramTo } from './fqdn-programs.js';
import { startPrivateOvs } from './datapath-env.js';
import { missingPrereq, ovsShell, stopPrivateOvs } from './datapath-env.js';

const NODE = 'fq-node';
const POD_NS = 'fq-pod';
const EXT_NS = 'fq-ext';
const DIR = '/tmp/fq-lab';
const RUN = join(DIR, 'ovs');
const sh = ovsShell(RUN);
const MGMT = join(RUN, 'br-int.mgmt');
const POD_IP = '10.78.0.5';
const POD_MAC = '0a:78:00:00:00:05';
const POD_OFPORT = 1;
const GW_MAC = '0a:78:00:00:00:fe';
const DNS_IP = '192.0.2.53';
const WEB = { www: '192.0.2.10', other: '192.0.2.11', api: '192.0.2.12' } as const;

const env = { ...process.env, OVS_RUNDIR: RUN, OVS_DBDIR: RUN, OVS_LOGDIR: RUN } as Record<string, string>;

const inNs = (ns: string, cmd: string[], opts: { allowFail?: boolean; input?: string } = {}) => sh('ip', ['netns', 'exec', ns, ...cmd], opts);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));



async function teardown(): Promise<void> {
  stopPrivateOvs(RUN);
  for (const ns of [POD_NS, EXT_NS, NODE]) await sh('ip', ['netns', 'del', ns], { allowFail: true });
  rmSync(DIR, { recursive: true, force: true });
}

async function setupLab(): Promise<void> {
  await teardown();
  mkdirSync(RUN, { recursive: true });
  for (const ns of [NODE, POD_NS, EXT_NS]) {
    await sh('ip', ['netns', 'add', ns]);
    await inNs(ns, ['ip', 'link', 'set', 'lo', 'up']);
  }
  await startPrivateOvs(NODE, RUN);
  const vsctl = (args: string[]) => sh('ovs-vsctl', [`--db=unix:${RUN}/db.sock`, '--timeout=10', ...args]);
  await vsctl(['add-br', 'br-int', '--', 'set', 'Bridge', 'br-int', 'datapath_type=netdev', 'fail_mode=secure', 'protocols=OpenFlow15']);
  const nft: string[] = ['add table netdev fq_guard'];
  for (const [ns, host, mac, ofport] of [[POD_NS, 'fqp-h', POD_MAC, POD_OFPORT], [EXT_NS, 'fqg-h', GW_MAC, GATEWAY_OFPORT]] as const) {
    await inNs(NODE, ['ip', 'link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
    await inNs(NODE, ['ip', 'link', 'set', host, 'up']);
    await inNs(ns, ['ip', 'link', 'set', 'eth0', 'address', mac]);
    await inNs(ns, ['ethtool', '-K', 'eth0', 'tx', 'off']);
    nft.push(`add chain netdev fq_guard in_${host.replace('-', '_')} { type filter hook ingress device ${host} priority 0; policy drop; }`);
    await vsctl(['add-port', 'br-int', host, '--', 'set', 'Interface', host, `ofport_request=${ofport}`]);
  }
  await inNs(NODE, ['nft', '-f', '-'], { input: nft.join('\n') + '\n' });
  await sh('ip', ['-n', POD_NS, '-batch', '-'], { input: `addr add ${POD_IP}/24 dev eth0\nlink set eth0 up\nroute add default dev eth0\n` });
  await sh('ip', ['-n', EXT_NS, '-batch', '-'], {
    input: [DNS_IP, ...Object.values(WEB)].map((ip) => `addr add ${ip}/32 dev eth0`).join('\n') + `\nlink set eth0 up\nroute add 10.78.0.0/24 dev eth0\n`,
  });
}

// ---- cluster objects -------------------------------------------------------------------------

const OBJECTS: KubeObject[] = [
  { apiVersion: 'v1', kind: 'Node', metadata: { name: 'fq-n1' }, status: { addresses: [{ type: 'InternalIP', address: '192.168.78.1' }] } },
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } },
  { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'client', labels: { app: 'client' } }, spec: { nodeName: 'fq-n1', containers: [] }, status: { podIP: POD_IP } },
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'fqdn-web' },
    spec: {
      priority: 1, appliedTo: [{ podSelector: { matchLabels: { app: 'client' } } }],
      egress: [
        { action: 'Allow', name: 'dns', to: [{ ipBlock: { cidr: `${DNS_IP}/32` } }], ports: [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }] },
        { action: 'Allow', name: 'web', to: [{ fqdn: '*.example.com' }], ports: [{ protocol: 'TCP', port: 80 }] },
        { action: 'Drop', name: 'rest' },
      ],
    },
  },
];

const SERVERS = dnsServerProgram(DNS_IP, { 'www.example.com': [WEB.www, 5], 'api.example.com': [WEB.api, 30] }, true);
const queryProgram = (query: Buffer, transport: 'udp' | 'tcp', connectAfter: boolean) => queryProgramTo(DNS_IP, query, transport, connectAfter);

/** The DNS/web servers' process: only its pid is needed, to kill it. */
interface Servers {
  proc: { pid?: number | undefined };
}

async function startServers(): Promise<Servers> {
  const p = execa('ip', ['netns', 'exec', EXT_NS, process.execPath, '--input-type=module', '-e', SERVERS], { reject: false, env });
  await new Promise<void>((resolve, reject) => {
    p.stdout?.on('data', (d: Buffer) => { if (d.toString().includes('ready')) resolve(); });
    void p.then((r) => reject(new Error(`servers exited: ${String(r.stderr)}`)));
  });
  return { proc: p };
}

function killServers(s: Servers | undefined): void {
  if (!s?.proc.pid) return;
  try {
    process.kill(s.proc.pid, 'SIGKILL');
  } catch {
    /* gone */
  }
}

// ---- the test --------------------------------------------------------------------------------

t.test('DNS responses are held, learned and released; fqdn rules follow them on a real bridge', async (t) => {
  const missing = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ip', 'nft', 'ethtool']);
  if (missing) {
    t.plan(0, `skipped: ${missing}`);
    return;
  }
  let servers: Servers | undefined;
  let controller: OpenFlowController | undefined;
  let timer: FqdnExpiryTimer | undefined;
  t.teardown(async () => {
    timer?.cancel();
    await controller?.close();
    killServers(servers);
    await teardown();
  });
  await setupLab();

  const engine = new PolicyEngine({ nodeName: 'fq-n1' });
  for (const o of OBJECTS) engine.upsert(o);
  const learner = new FqdnLearner({ minTtlSeconds: 1 });
  const ctx = { engine, learner };
  const policy = new PolicyFlows();
  policy.sync(policyFlowInput(engine));
  const pipeline = computeFlows({ gatewayOfport: GATEWAY_OFPORT, gatewayMac: GW_MAC, serviceCIDRs: [], pods: [{ containerId: 'fq-pod', ofport: POD_OFPORT, mac: POD_MAC, ips: [POD_IP] }] });
  const installed = new Set<string>();
  const desired = (): Flow[] => [...pipeline, ...policy.flows(), ...dnsInterceptFlowsFor(engine)];
  /** As the agent does: the policy delta, then one bundle of the diff against what is installed. */
  let bundles = 0;
  const applyChanges = async (cs?: ChangeSet) => {
    policy.sync(policyFlowInput(engine), cs ? dirtyRuleIds(cs, engine) : undefined);
    const diff = diffFlows(desired(), installed);
    const text = bundleText(diff);
    if (!text) return;
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--bundle', 'add-flows', `unix:${MGMT}`, '-'], { input: text });
    bundles++;
    for (const c of diff.remove) installed.delete(c);
    for (const f of diff.add) installed.add(f.cookie);
  };

  controller = new OpenFlowController({ socketPath: MGMT, meters: packetInMeters() });
  controller.start();
  await controller.waitConnected();
  await applyChanges();
  t.ok(dnsInterceptFlowsFor(engine).length === 2, 'DNS interception flows for the client Pod are installed');
  for (const f of dnsInterceptFlows({ pods: 'all', mode: 'copy' })) {
    const r = await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'parse-flow', flowText(f)], { allowFail: true });
    t.equal(r.code, 0, `OVS accepts the copy-mode flow (${f.match.split(',')[1]}) ${r.stderr.trim()}`);
  }

  const holdMs: number[] = [];
  const notes: string[] = [];
  let expiryRuns: Promise<void>[] = [];
  timer = new FqdnExpiryTimer(realClock, () => {
    const run = (async () => {
      const r = expireFqdnsDue(ctx);
      await applyChanges(r.changes);
      timer!.schedule(r.nextExpiryAt);
    })();
    expiryRuns.push(run);
    return run;
  });
  const c = controller;
  const loop = runPacketInLoop(c, {
    [PuntCategory.dns]: async (pin) => {
      const started = process.hrtime.bigint();
      const r = await processDnsPacketIn(pin, ctx, { applyChanges, packetOut: (po) => c.packetOut(po), onNote: (n) => notes.push(n) });
      holdMs.push(Number(process.hrtime.bigint() - started) / 1e6);
      timer!.schedule(r.nextExpiryAt);
    },
  }, (e) => notes.push(`handler error: ${String(e)}`));

  servers = await startServers();

  t.same(await nodeIn(POD_NS, connectProgram(WEB.www)), { code: 'TIMEOUT' }, 'before DNS: www.example.com\'s address is dropped');

  const q1 = await nodeIn(POD_NS, queryProgram(simpleQuery('www.example.com', 0x1111), 'udp', true));
  t.equal(q1.code, 'ANSWER', 'the UDP query is answered (the held response was released)');
  const parsed = parseDnsMessage(Buffer.from(String(q1.reply), 'hex'));
  const names = parsed.ok ? resolvedNames(parsed.message) : undefined;
  t.same(names?.ok && [...names.names], [['www.example.com', [{ address: WEB.www, ttl: 5 }]]], 'the Pod received the server\'s answer unchanged');
  t.equal(q1.connect, 'CONNECTED', 'a connection opened right after the answer is allowed (flows were committed before the release)');
  t.same(learner.addresses('www.example.com').map((a) => a.ip), [WEB.www], 'the learner holds the mapping');
  t.equal(engine.evaluate({ from: 'x/client', to: `ip:${WEB.www}`, port: 80, protocol: 'TCP' }).verdict, 'allow', 'and the engine allows it');

  t.same(await nodeIn(POD_NS, connectProgram(WEB.other)), { code: 'TIMEOUT' }, 'an address DNS did not give stays dropped');

  const q2 = await nodeIn(POD_NS, queryProgram(simpleQuery('api.example.com', 0x2222), 'tcp', true));
  t.equal(q2.code, 'ANSWER', 'DNS over TCP works through the hold (every segment from port 53 is released)');
  t.equal(q2.connect, 'CONNECTED', 'and its answer is learned before release');

  const q3 = await nodeIn(POD_NS, queryProgram(simpleQuery('missing.example.com', 0x3333), 'udp', false));
  t.same([q3.code, q3.rcode], ['ANSWER', 3], 'NXDOMAIN is delivered');
  t.ok(notes.some((n) => /NXDOMAIN/.test(n)), 'and noted by the handler');

  // www.example.com: TTL 5 s. Wait for the expiry timer to take the address back.
  const expiry = learner.addresses('www.example.com')[0]?.expiresAt ?? Date.now();
  await sleep(Math.max(0, expiry - Date.now()) + 100);
  for (let i = 0; i < 100 && learner.addresses('www.example.com').length > 0; i++) await sleep(50);
  await Promise.all(expiryRuns); // the expiry's flow bundle is on the bridge
  expiryRuns = [];
  t.same(learner.addresses('www.example.com'), [], 'expired in the learner (by the expiry timer)');
  t.same(await nodeIn(POD_NS, connectProgram(WEB.www)), { code: 'TIMEOUT' }, 'after the TTL a new connection is dropped again');
  t.equal((await nodeIn(POD_NS, connectProgram(WEB.api))).code, 'CONNECTED', 'api.example.com (TTL 30) is still allowed');

  const stats = controller.stats();
  t.ok(stats.packetIns >= 2, `packet-ins received: ${stats.packetIns}`);
  t.same(notes.filter((n) => /handler error/.test(n)), [], 'no handler errors');
  const sorted = [...holdMs].sort((a, b) => a - b);
  t.comment(`hold latency (packet-in -> release, incl. flow bundle when something was learned): n=${sorted.length} p50=${sorted[Math.floor(sorted.length / 2)]?.toFixed(1)} ms max=${sorted[sorted.length - 1]?.toFixed(1)} ms; UDP query RTT seen by the Pod ${Number(q1.ms).toFixed(1)} ms; bundles ${bundles}`);
  await controller.close();
  controller = undefined;
  await loop;
});

t.test('the agent-facing FqdnLearning: enforcer hook, debounced apply, release after the covering bundle', async (t) => {
  const missing = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ip', 'nft', 'ethtool']);
  if (missing) {
    t.plan(0, `skipped: ${missing}`);
    return;
  }
  let servers: Servers | undefined;
  let controller: OpenFlowController | undefined;
  let fqdn: FqdnLearning | undefined;
  t.teardown(async () => {
    fqdn?.close();
    await controller?.close();
    killServers(servers);
    await teardown();
  });
  await setupLab();
  const engine = new PolicyEngine({ nodeName: 'fq-n1' });
  for (const o of OBJECTS) engine.upsert(o);
  const policy = new PolicyFlows();
  fqdn = new FqdnLearning({ learnerOptions: { minTtlSeconds: 1 }, maxHoldMs: 5000 });
  const f = fqdn;
  const pipeline = computeFlows({ gatewayOfport: GATEWAY_OFPORT, gatewayMac: GW_MAC, serviceCIDRs: [], pods: [{ containerId: 'fq-pod', ofport: POD_OFPORT, mac: POD_MAC, ips: [POD_IP] }] });
  const installed = new Set<string>();
  // The agent's flow sync: every flow source, one bundle of the diff (as Agent.syncFlows does).
  const syncFlows = async () => {
    policy.sync(policyFlowInput(engine));
    const diff = diffFlows([...pipeline, ...policy.flows(), ...f.interceptFlows(engine)], installed);
    const text = bundleText(diff);
    if (!text) return;
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--bundle', 'add-flows', `unix:${MGMT}`, '-'], { input: text });
    for (const c of diff.remove) installed.delete(c);
    for (const fl of diff.add) installed.add(fl.cookie);
  };
  const applyFlows = f.wrapApply(syncFlows);
  // The enforcer's coalescing: a ChangeSet schedules one apply 20 ms later.
  let pending: NodeJS.Timeout | undefined;
  const changed = () => { pending ??= setTimeout(() => { pending = undefined; void applyFlows(); }, 20); };

  controller = new OpenFlowController({ socketPath: MGMT, meters: packetInMeters() });
  controller.start();
  await controller.waitConnected();
  const c = controller;
  f.setPacketOut((po) => c.packetOut(po));
  await applyFlows();
  const loop = runPacketInLoop(c, {
    [PuntCategory.dns]: (pin, punt) => { if (f.hook(pin, punt, engine)) changed(); },
  });
  servers = await startServers();

  t.same(await nodeIn(POD_NS, connectProgram(WEB.www)), { code: 'TIMEOUT' }, 'before DNS: dropped');
  const q = await nodeIn(POD_NS, queryProgram(simpleQuery('www.example.com', 0x4444), 'udp', true));
  t.equal(q.code, 'ANSWER', 'the query is answered');
  t.equal(q.connect, 'CONNECTED', 'the connection right after the answer is allowed');
  t.same(await nodeIn(POD_NS, connectProgram(WEB.other)), { code: 'TIMEOUT' }, 'other addresses stay dropped');
  const again = await nodeIn(POD_NS, queryProgram(simpleQuery('www.example.com', 0x5555), 'udp', false));
  t.equal(again.code, 'ANSWER', 'a repeated query is answered too');
  t.match(f.stats(), { releasedAfterApply: 1, releasedByTimeout: 0, releaseFailed: 0, held: 0 }, 'the first answer waited for its bundle; none hit the deadline');
  t.ok(f.stats().releasedAtOnce >= 1, 'the repeat (nothing new for the flows) went at once');
  t.comment(`FqdnLearning stats ${JSON.stringify(f.stats())}; query RTT ${Number(q.ms).toFixed(1)} ms (first, held) vs ${Number(again.ms).toFixed(1)} ms (repeat)`);
  clearTimeout(pending);
  await controller.close();
  controller = undefined;
  await loop;
});
