/**
 * NodeReconciler against fakes: start-up, resync and the flow watchdog with a fake Open vSwitch
 * (ports and flows by cookie), fake host networking, a fake API server and a manual clock. The
 * desired flows are the real pipeline's, programmed by the real FlowSync over the fake switch.
 */
import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import t from 'tap';
import { type PodAttachment, portIds } from '../../daemon/node/attachment.js';
import { PodRegistry } from '../../daemon/node/pod-registry.js';
import type { ApplyTimings, FlowDiff } from '../../daemon/flows/diff.js';
import { flowText } from '../../daemon/flows/flow.js';
import type { GatewayInfo, PodPortIds, PodPortRecord } from '../../daemon/ovs/bridge.js';
import { FlowSync } from '../../daemon/flows/sync.js';
import { SharedExclusiveLock } from '../../daemon/lock.js';
import { type NodeFlowProgrammer, type NodeHostNetwork, type NodeOvs, NodeReconciler } from '../../daemon/node/reconciler.js';
import { type StartupApi, StartupError } from '../../daemon/node/startup.js';
import { ManualClock } from './manual-clock.js';

const log = pino({ level: 'silent' });

/** OVSDB as the reconciler sees it: the bridge, the gateway and the ports. */
class FakeOvs implements NodeOvs {
  readonly db = 'unix:/fake/db.sock';
  pingFailures = 0;
  bridge = false;
  gateway?: GatewayInfo;
  readonly ports = new Map<string, PodPortRecord>();
  /** The Pods' IPv4 egress ports: name → OpenFlow port. */
  readonly egressPorts = new Map<string, number>();
  calls: string[] = [];
  private nextOfport = 10;
  /** When set, listPodPorts waits for it (a slow OVSDB round trip). */
  listGate?: Promise<void> | undefined;

  async ping(): Promise<void> {
    this.calls.push('ping');
    if (this.pingFailures > 0) {
      this.pingFailures--;
      throw new Error(`cannot reach OVSDB at ${this.db}: ENOENT`);
    }
  }
  async ensureBridge(): Promise<string[]> {
    this.calls.push('ensureBridge');
    if (this.bridge) return [];
    this.bridge = true;
    return ['created bridge br-int'];
  }
  async ensureGateway(name: string): Promise<{ gateway: GatewayInfo; changes: string[] }> {
    if (this.gateway) return { gateway: this.gateway, changes: [] };
    this.gateway = { name, ofport: 2, mac: '02:00:00:00:00:02' };
    return { gateway: this.gateway, changes: [`created gateway ${name}`] };
  }
  async listPodPorts(): Promise<PodPortRecord[]> {
    if (this.listGate) await this.listGate;
    return [...this.ports.values()];
  }
  async addPodPort(name: string, ids: PodPortIds): Promise<number> {
    this.calls.push(`addPodPort ${name}`);
    const ofport = this.nextOfport++;
    this.ports.set(name, { name, ofport, ids });
    return ofport;
  }
  async addEgressPort(name: string): Promise<number> {
    this.calls.push(`addEgressPort ${name}`);
    const ofport = this.nextOfport++;
    this.egressPorts.set(name, ofport);
    return ofport;
  }
  async egressPortOfports(): Promise<Map<string, number>> {
    return new Map(this.egressPorts);
  }
  async removePort(name: string): Promise<void> {
    this.calls.push(`removePort ${name}`);
    this.ports.delete(name);
    this.egressPorts.delete(name);
  }
  async endFlowRestoreWait(): Promise<boolean> {
    return false;
  }
}

/** The bridge's flows by cookie, as the reconciler and FlowSync program and read them. */
class FakeFlowProgrammer implements NodeFlowProgrammer {
  /** Installed flows: cookie → ovs-ofctl text. */
  readonly flows = new Map<string, string>();
  readonly bundles: FlowDiff[] = [];
  dumps = 0;
  counts = 0;

  async deleteFlows(cookie: bigint, mask: bigint): Promise<void> {
    for (const c of [...this.flows.keys()]) if ((BigInt(c) & mask) === (cookie & mask)) this.flows.delete(c);
  }
  async installedCount(): Promise<number> {
    this.counts++;
    return this.flows.size;
  }
  async installedCookies(): Promise<string[]> {
    this.dumps++;
    return [...this.flows.keys()];
  }
  async applyDiff(diff: FlowDiff): Promise<ApplyTimings> {
    if (diff.add.length > 0 || diff.remove.length > 0) {
      this.bundles.push(diff);
      for (const c of diff.remove) this.flows.delete(c);
      for (const f of diff.add) this.flows.set(f.cookie, flowText(f));
    }
    return { bundleMs: 0, purgeMs: 0 };
  }
}

/** Host networking: which Pod IPs are routed through the gateway, the base state, the veth guards. */
class FakeHostNet implements NodeHostNetwork {
  baseOk = true;
  /** Pod IPs whose host route does not go through the gateway. */
  readonly brokenRoutes = new Set<string>();
  readonly isolated = new Set<string>();
  /** When set, podRouteProblems waits for it (a slow dump of the host's routes). */
  readGate?: Promise<void> | undefined;
  reading = false;

  async ensureBase(): Promise<string[]> {
    if (this.baseOk) return [];
    this.baseOk = true;
    return ['table 300 default route: restored'];
  }
  async podRouteProblems(pods: string[][]): Promise<string[][]> {
    this.reading = true;
    if (this.readGate) await this.readGate;
    this.reading = false;
    return pods.map((ips) => ips.filter((ip) => this.brokenRoutes.has(ip)).map((ip) => `route to ${ip} not via antrea-gw0`));
  }
  async repairPodRoutes(pod: { ips: string[] }, problems: string[]): Promise<string[]> {
    for (const ip of pod.ips) this.brokenRoutes.delete(ip);
    return problems.map((p) => `${p}: restored`);
  }
  async isolatedVeths(): Promise<string[]> {
    return [...this.isolated];
  }
  async isolateHostVeth(ifName: string): Promise<void> {
    this.isolated.add(ifName);
  }
  async resync(pods: { ips: string[] }[]): Promise<string[]> {
    const repairs = await this.ensureBase();
    const problems = await this.podRouteProblems(pods.map((p) => p.ips));
    for (const [i, pod] of pods.entries()) repairs.push(...(await this.repairPodRoutes(pod, problems[i]!)));
    return repairs;
  }
}

class FakeApi implements StartupApi {
  readonly server = 'https://10.0.0.1:6443';
  pods = new Set<string>(['default/web-1', 'default/web-2']);
  async nodeInternalIPs(): Promise<{ nodeIP?: string }> {
    return { nodeIP: '192.168.1.10' };
  }
  async nodePods(): Promise<Set<string>> {
    return this.pods;
  }
}

const pod = (n: number): PodAttachment => ({
  containerId: `c${n}`,
  podNamespace: 'default',
  podName: `web-${n}`,
  netns: `/var/run/netns/cni-${n}`,
  ifName: 'eth0',
  hostVeth: `veth${n}`,
  ofport: 0,
  mac: `0a:00:00:00:00:0${n}`,
  ips: [`10.1.0.${10 + n}`],
});

/** A node: the fakes a reconciler runs on; they survive `reconciler()` calls as a node survives an agent restart. */
class Node {
  readonly ovs = new FakeOvs();
  readonly flowProgrammer = new FakeFlowProgrammer();
  readonly hostnet = new FakeHostNet();
  readonly api = new FakeApi();
  readonly clock = new ManualClock();
  readonly netns = new Set<string>();
  apiDown = false;
  detached: string[] = [];
  lock = new SharedExclusiveLock();

  /** A Pod attached before the agent (re)started: its port and namespace exist. */
  addPod(n: number): PodAttachment {
    const p = pod(n);
    this.ovs.ports.set(p.hostVeth, { name: p.hostVeth, ofport: 20 + n, ids: portIds(p) });
    this.netns.add(p.netns);
    return p;
  }

  reconciler(opts: { nodeIP?: string; kubeconfig?: string; openflow?: EventEmitter & { start(): void } } = {}) {
    return new NodeReconciler({
      config: {
        nodeName: 'node-1',
        bridge: 'br-int',
        gateway: 'antrea-gw0',
        serviceCIDRs: ['10.96.0.0/12'],
        datapath: 'system',
        ...(opts.nodeIP ? { nodeIP: opts.nodeIP } : {}),
        ...(opts.kubeconfig ? { kubeconfig: opts.kubeconfig } : {}),
      },
      log,
      ovs: this.ovs,
      flowProgrammer: this.flowProgrammer,
      flows: new FlowSync(this.flowProgrammer, log),
      connectApi: async () => {
        if (this.apiDown) throw new Error('connect ECONNREFUSED 10.0.0.1:6443');
        return this.api;
      },
      createHostNetwork: async () => this.hostnet,
      clock: this.clock,
      lock: this.lock,
      pods: new PodRegistry(),
      pathExists: (p) => this.netns.has(p),
      detach: async (p) => {
        this.detached.push(p.containerId);
        return [];
      },
      ...(opts.openflow ? { openflow: opts.openflow } : {}),
    });
  }

  /** A reconciler started up (with time moving as far as its waits need) and serving. */
  async started(opts: Parameters<Node['reconciler']>[0] = {}) {
    const r = this.reconciler(opts);
    await r.startUp();
    r.ready = true;
    return r;
  }
}

const installedMatchesDesired = (node: Node, r: NodeReconciler) =>
  [...node.flowProgrammer.flows.keys()].sort().join() === r.desiredFlows().map((f) => f.cookie).sort().join();

t.test('start-up: waits for OVSDB to come up, touching nothing before it answers', async (t) => {
  const node = new Node();
  node.ovs.pingFailures = 2;
  const r = node.reconciler();
  let done = false;
  const up = r.startUp().then(() => (done = true));
  await node.clock.advance(0);
  t.same(node.ovs.calls, ['ping'], 'one attempt so far, and no bridge call');
  await node.clock.advance(999);
  t.same(node.ovs.calls, ['ping'], 'the next attempt a second later, not before');
  await node.clock.advance(1);
  t.same(node.ovs.calls, ['ping', 'ping']);
  t.notOk(done);
  await node.clock.advance(1000);
  await up;
  t.ok(done, 'started once OVSDB answered');
  t.same(node.ovs.calls.slice(0, 4), ['ping', 'ping', 'ping', 'ensureBridge']);
  t.ok(installedMatchesDesired(node, r), 'and converged the bridge');
});

t.test('start-up: OVSDB that never answers fails start-up with its error after 30 s', async (t) => {
  const node = new Node();
  node.ovs.pingFailures = Number.POSITIVE_INFINITY;
  const up = node.reconciler().startUp();
  up.catch(() => undefined);
  await node.clock.advance(31_000);
  await t.rejects(up, /cannot reach OVSDB at unix:\/fake\/db\.sock/);
  t.notOk(node.ovs.calls.includes('ensureBridge'), 'nothing configured');
});

t.test('start-up: a bridge with stale and missing flows is repaired in one delta; leftovers of gone Pods removed', async (t) => {
  const node = new Node();
  node.addPod(1);
  node.addPod(2);
  const first = await node.started();
  const desired = first.desiredFlows().map((f) => f.cookie);
  t.ok(desired.length > 10);
  // The agent is down; meanwhile flows go missing, stale ones appear and a Pod's sandbox goes away.
  const lost = desired.slice(0, 3);
  for (const c of lost) node.flowProgrammer.flows.delete(c);
  node.flowProgrammer.flows.set('0x51ce01aaaaaaaaaa', 'table=0, priority=1 stale');
  node.flowProgrammer.flows.set('0x51ce00bbbbbbbbbb', 'table=10, priority=2 stale');
  node.netns.delete(pod(2).netns);
  node.flowProgrammer.bundles.length = 0;

  const r = await node.started();
  t.equal(node.flowProgrammer.bundles.length, 1, 'one bundle');
  const b = node.flowProgrammer.bundles[0]!;
  const now = new Set(r.desiredFlows().map((f) => f.cookie));
  const goneFlows = desired.filter((c) => !now.has(c) && !lost.includes(c));
  t.ok(goneFlows.length > 0, 'the gone Pod had flows');
  t.same([...b.remove].sort(), ['0x51ce00bbbbbbbbbb', '0x51ce01aaaaaaaaaa', ...goneFlows].sort(), 'removes exactly the stale flows and the gone Pod\'s');
  t.same(b.add.map((f) => f.cookie).sort(), lost.filter((c) => now.has(c)).sort(), 'adds exactly the lost flows');
  t.same(r.pods.list().map((p) => p.containerId), ['c1'], 'the Pod whose netns is gone is not attached');
  t.same(node.detached, ['c2'], 'and its leftovers are removed');
  t.ok(installedMatchesDesired(node, r));
  t.notOk(r.desiredFlows().some((f) => f.match.includes('10.1.0.12')), 'no flow for the gone Pod');
});

t.test('start-up: a restart over a converged bridge changes nothing', async (t) => {
  const node = new Node();
  node.addPod(1);
  await node.started();
  node.flowProgrammer.bundles.length = 0;
  node.ovs.calls = [];
  const before = new Map(node.flowProgrammer.flows);
  const r = await node.started();
  t.same(node.flowProgrammer.bundles, [], 'no flow change');
  t.same(node.flowProgrammer.flows, before);
  t.same(node.ovs.calls.filter((c) => /Port/.test(c)), [], 'no port added or removed');
  t.same(node.detached, []);
  t.same(r.pods.list().map((p) => p.containerId), ['c1']);
  t.equal(r.nodeIP, '192.168.1.10', 'the Node InternalIP from the API');
});

t.test('start-up: an unreachable API server without a configured nodeIP is a StartupError naming it', async (t) => {
  const node = new Node();
  node.apiDown = true;
  const up = node.reconciler({ kubeconfig: '/etc/sluice/kubeconfig' }).startUp();
  up.catch(() => undefined);
  await node.clock.advance(40_000);
  const err = await up.then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof StartupError, 'a StartupError');
  t.match((err as Error).message, /Node node-1 could not be read from the API server \(kubeconfig \/etc\/sluice\/kubeconfig\): connect ECONNREFUSED 10\.0\.0\.1:6443/);
  t.notOk(node.ovs.calls.includes('ensureBridge'), 'nothing configured');
});

t.test('start-up: a Node without an InternalIP is a StartupError at once, not retried', async (t) => {
  const node = new Node();
  node.api.nodeInternalIPs = async () => ({});
  const err = await node.reconciler().startUp().then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof StartupError);
  t.match((err as Error).message, 'Node node-1 has no InternalIP; set nodeIP (and/or nodeIPv6) in the config');
  t.equal(node.clock.waiting, 0, 'no retry scheduled');
});

t.test('start-up: with a configured nodeIP an unreachable API server is not fatal', async (t) => {
  const node = new Node();
  node.apiDown = true;
  node.addPod(1);
  const r = await node.started({ nodeIP: '192.168.1.99' });
  t.equal(r.nodeIP, '192.168.1.99');
  t.equal(r.api, undefined);
  t.same(r.pods.list().map((p) => p.containerId), ['c1'], 'leftovers judged by their netns alone');
});

t.test('resync: a Pod whose port vanished is re-attached and its flows follow the new OpenFlow port', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  const oldPort = r.pods.get('c1')!.ofport;
  node.ovs.ports.delete('veth1');
  const repairs = await r.resync('test');
  t.ok(repairs.includes('re-attached port veth1 (container c1)'), 'reported');
  const now = node.ovs.ports.get('veth1');
  t.ok(now, 'the port is back');
  t.not(now!.ofport, oldPort, 'under a new OpenFlow port');
  t.equal(r.pods.get('c1')!.ofport, now!.ofport);
  t.ok([...node.flowProgrammer.flows.values()].some((f) => f.includes(`in_port=${now!.ofport}`)), 'flows for the new port');
  t.notOk([...node.flowProgrammer.flows.values()].some((f) => f.includes(`in_port=${oldPort},`)), 'none left for the old one');
  t.ok(installedMatchesDesired(node, r));
  t.same(r.lastResync?.repairs, repairs);
  t.equal(r.resyncCounts.ok, 1);
});

t.test('resync: an IPv6-only Pod\'s IPv4 egress port (its second port) is loaded, re-attached when it vanished, and its address routed', async (t) => {
  const node = new Node();
  const p = { ...pod(1), ips: ['fd00:10:1::11'], egressV4: { ifName: 'v4if0', hostVeth: 'vethe1', ofport: 0, mac: '0a:00:00:00:0e:01', ip: '169.254.172.11' } };
  node.ovs.ports.set(p.hostVeth, { name: p.hostVeth, ofport: 21, ids: portIds(p) });
  node.ovs.egressPorts.set('vethe1', 22);
  node.netns.add(p.netns);
  const r = await node.started();
  t.equal(r.pods.get('c1')?.egressV4?.ofport, 22, 'start-up reads the egress port\'s OpenFlow port');
  t.same(await r.resync('clean'), [], 'converged: nothing to repair');
  t.ok([...node.flowProgrammer.flows.values()].some((f) => f.includes('in_port=22')), 'flows for the egress port');
  node.ovs.egressPorts.delete('vethe1');
  node.hostnet.brokenRoutes.add('169.254.172.11');
  const repairs = await r.resync('test');
  t.ok(repairs.includes('re-attached IPv4 egress port vethe1 (container c1)'), 'the vanished egress port is re-attached');
  t.ok(repairs.includes('route to 169.254.172.11 not via antrea-gw0: restored'), 'its address is routed to the gateway again');
  const now = node.ovs.egressPorts.get('vethe1');
  t.ok(now !== undefined && now !== 22, 'under a new OpenFlow port');
  t.equal(r.pods.get('c1')?.egressV4?.ofport, now);
  t.ok([...node.flowProgrammer.flows.values()].some((f) => f.includes(`in_port=${now}`)), 'flows follow the new port');
  t.notOk([...node.flowProgrammer.flows.values()].some((f) => f.includes('in_port=22,')), 'none left for the old one');
  t.equal(r.portMac(now!), '0a:00:00:00:0e:01', 'portMac knows the egress port');
  t.ok(installedMatchesDesired(node, r));
});

t.test('resync: a missing Pod route and node-wide state are repaired; a converged node reports nothing', async (t) => {
  const node = new Node();
  node.addPod(1);
  node.addPod(2);
  const r = await node.started();
  t.same(await r.resync('clean'), [], 'nothing to repair');
  node.hostnet.brokenRoutes.add('10.1.0.12');
  node.hostnet.baseOk = false;
  const repairs = await r.resync('test');
  t.same(repairs, ['table 300 default route: restored', 'route to 10.1.0.12 not via antrea-gw0: restored']);
  t.equal(node.hostnet.brokenRoutes.size, 0);
});

t.test('resync: the exclusive lock is held around the OVS compare-and-apply, not while the host is read', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  let release!: () => void;
  node.ovs.listGate = new Promise((res) => (release = res));
  const resync = r.resync('test');
  await node.clock.advance(0);
  let cniDone = false;
  const cni = node.lock.runShared(async () => void (cniDone = true));
  await node.clock.advance(0);
  t.notOk(cniDone, 'a CNI request waits while the bridge is compared and repaired');
  node.ovs.listGate = undefined;
  release();
  await cni;
  t.ok(cniDone);
  await resync;

  // The slow host read: a CNI request is served meanwhile.
  let readDone!: () => void;
  node.hostnet.readGate = new Promise((res) => (readDone = res));
  node.hostnet.brokenRoutes.add('10.1.0.11');
  const second = r.resync('test 2');
  for (let i = 0; i < 20 && !node.hostnet.reading; i++) await node.clock.advance(0);
  t.ok(node.hostnet.reading, 'the resync is reading the host');
  let served = false;
  const cni2 = node.lock.runShared(async () => void (served = true));
  await node.clock.advance(0);
  t.ok(served, 'a CNI request is not blocked meanwhile');
  t.ok(node.hostnet.reading, 'and the read is still going on');
  readDone();
  await cni2;
  t.same(await second, ['route to 10.1.0.11 not via antrea-gw0: restored']);
});

t.test('resync: one asked for while another runs (an overlapping periodic tick) starts only after it', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  // The first holds no lock while it reads the host: only the resync queue keeps the second out.
  let readDone!: () => void;
  node.hostnet.readGate = new Promise((res) => (readDone = res));
  node.ovs.calls = [];
  const first = r.resync('periodic');
  for (let i = 0; i < 20 && !node.hostnet.reading; i++) await node.clock.advance(0);
  t.ok(node.hostnet.reading, 'the first resync is reading the host');
  const second = r.resync('periodic');
  await node.clock.advance(0);
  t.same(node.ovs.calls, ['ensureBridge'], 'the second has not started');
  node.hostnet.readGate = undefined;
  readDone();
  await first;
  await second;
  t.same(node.ovs.calls, ['ensureBridge', 'ensureBridge'], 'it runs once the first is done');
});

t.test('resync: a Pod deleted while the host was read is not repaired', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  let readDone!: () => void;
  node.hostnet.readGate = new Promise((res) => (readDone = res));
  node.hostnet.brokenRoutes.add('10.1.0.11');
  const resync = r.resync('test');
  for (let i = 0; i < 20 && !node.hostnet.reading; i++) await node.clock.advance(0);
  // A CNI DEL runs while the host is read.
  await node.lock.runShared(async () => void r.pods.remove('c1'));
  readDone();
  t.same(await resync, [], 'its route is left to the DEL');
});

t.test('watchdog: when the counts match it reads no cookies and changes nothing', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  const dumps = node.flowProgrammer.dumps;
  node.flowProgrammer.bundles.length = 0;
  await r.checkFlows();
  await r.checkFlows();
  t.equal(node.flowProgrammer.counts, 2, 'asked for the count each time');
  t.equal(node.flowProgrammer.dumps, dumps, 'no dump');
  t.same(node.flowProgrammer.bundles, []);
  t.equal(r.resyncCounts.ok, 0, 'no resync');
});

t.test('watchdog: not ready yet, it does nothing', async (t) => {
  const node = new Node();
  const r = node.reconciler();
  await r.startUp();
  await r.checkFlows();
  t.equal(node.flowProgrammer.counts, 0);
});

t.test('watchdog: a count mismatch reads the cookies and repairs the missing flows', async (t) => {
  const node = new Node();
  node.addPod(1);
  const r = await node.started();
  const lost = [...node.flowProgrammer.flows.keys()][5]!;
  node.flowProgrammer.flows.delete(lost);
  const dumps = node.flowProgrammer.dumps;
  await r.checkFlows();
  t.ok(node.flowProgrammer.dumps > dumps, 'the cookies were read');
  t.ok(node.flowProgrammer.flows.has(lost), 'the lost flow is back');
  t.equal(r.resyncCounts.ok, 1, 'through a resync');
  t.ok(installedMatchesDesired(node, r));
});

t.test('watchdog: ovs-vswitchd restarted (every flow gone) → everything replayed in one bundle', async (t) => {
  const node = new Node();
  node.addPod(1);
  node.addPod(2);
  const r = await node.started();
  const all = node.flowProgrammer.flows.size;
  node.flowProgrammer.flows.clear();
  node.flowProgrammer.bundles.length = 0;
  await r.checkFlows();
  t.equal(node.flowProgrammer.bundles.length, 1);
  t.equal(node.flowProgrammer.bundles[0]!.add.length, all, 'every flow replayed');
  t.ok(installedMatchesDesired(node, r));
  t.ok(r.ovsReachable);
});

t.test('watchdog: OVS unreachable is reported in ovsReachable, and recovers', async (t) => {
  const node = new Node();
  const r = await node.started();
  const count = node.flowProgrammer.installedCount.bind(node.flowProgrammer);
  node.flowProgrammer.installedCount = async () => {
    throw new Error('openflow: not connected');
  };
  await r.checkFlows();
  t.notOk(r.ovsReachable);
  node.flowProgrammer.installedCount = count;
  await r.checkFlows();
  t.ok(r.ovsReachable);
});

t.test('OpenFlow reconnection (ovs-vswitchd restart) replays the flows; the first connection does not resync', async (t) => {
  const node = new Node();
  node.addPod(1);
  let started = 0;
  const openflow = Object.assign(new EventEmitter(), { start: () => void started++ });
  const r = await node.started({ openflow });
  t.equal(started, 1, 'started once the bridge exists');
  openflow.emit('connected');
  await node.clock.advance(0);
  t.equal(r.resyncCounts.ok, 0, 'the first connection is the start-up one');
  node.flowProgrammer.flows.clear();
  openflow.emit('disconnected', 'EOF');
  openflow.emit('connected');
  await node.clock.advance(0);
  await r.resync('barrier');
  t.equal(r.resyncCounts.ok, 2, 'the reconnection resynced');
  t.ok(installedMatchesDesired(node, r), 'every flow replayed');
});
