/**
 * sluice-agent's orchestration: the health, metrics and CNI servers, the order of start-up around
 * the node reconciler (daemon/node/reconciler.ts: OVS, flows, host networking), the host-change
 * watches that ask for repairs, traceflow and /status. The timers live in daemon/node/schedules.ts,
 * adoption of running Pods in daemon/node/adopter.ts, Kubernetes Events in daemon/node/events.ts;
 * daemon/agent-program.ts builds those parts and hands them over.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { AgentConfig } from './config.js';
import { CniError, type CniHandler, type CniServer, type GcAttachment, type PodRequest, startCniServer } from './cni/server.js';
import { CniErrorCode } from '../cni/protocol.js';
import type { RuleStatistics } from './flows/policy/stats.js';
import type { GatewayInfo, OvsBridge } from './ovs/bridge.js';
import type { FlowProgrammer } from './ovs/flow-programmer.js';
import type { OpenFlowController } from './ovs/openflow/controller.js';
import { policiesAnswer } from './enforcement/policy-report.js';
import type { EnforcementHooks } from './enforcement/hooks.js';
import { type TraceBridge, TraceError } from './enforcement/traceflow.js';
import { TRACE_COOKIE_PREFIX, type TraceProtocol } from './flows/traceflow.js';
import { type HealthServer, startEndpoint, startHealthServer } from './health.js';
import type { AgentMetrics } from './metrics.js';
import { type HostNetwork, SERVICE_GATEWAY_IP, SERVICE_GATEWAY_IPV6 } from './hostnet/index.js';
import { isRepairEvent, isRulesetTamperEvent } from './hostnet/monitor.js';
import { describeRtEvent, ifindexOf, watchRtEvents } from './hostnet/rtevents.js';
import type { AdoptionStatus } from './node/adoption.js';
import type { PodAdopter } from './node/adopter.js';
import type { ChainKeeper, ChainStatus } from './node/chainkeeper.js';
import type { Clock } from './clock.js';
import type { PodAttacher } from './cni/attacher.js';
import type { NodeApi } from './kube/node-api.js';
import type { SharedExclusiveLock } from './lock.js';
import { type PodAttachment, routedIPs } from './node/attachment.js';
import type { NodeEvents } from './node/events.js';
import type { PodRegistry } from './node/pod-registry.js';
import type { NodeReconciler, ResyncRecord } from './node/reconciler.js';
import type { NodeSchedules } from './node/schedules.js';
import type { QuietCollector, QuietCollectorStatus } from './quiet-collector.js';

/** The parts daemon/agent-program.ts builds and the agent runs. */
export interface AgentParts {
  config: AgentConfig;
  log: Logger;
  node: NodeReconciler<NodeApi, HostNetwork>;
  attacher: PodAttacher;
  /** Shared by CNI operations, exclusive for resync repairs and adoption. */
  lock: SharedExclusiveLock;
  /** ovs-vswitchd's control socket: the megaflow purge after trace observation flows change. */
  ovs: Pick<OvsBridge, 'appctl'>;
  /** Trace observation flows and the Metric tables' counters. */
  flowProgrammer: Pick<FlowProgrammer, 'addFlows' | 'deleteFlows' | 'dumpCounters'>;
  openflow: Pick<OpenFlowController, 'close'>;
  /** Policy enforcement (daemon/enforcement), when on. */
  enforcement?: EnforcementHooks | undefined;
  /** Prometheus metrics, served on /metrics (health address, and metricsAddress when configured). */
  metrics?: AgentMetrics | undefined;
  clock: Clock;
  /** The periodic resync, flow watchdog and invalid-policy Events; repairs and re-chain adoption. */
  schedules: NodeSchedules;
  /** Full garbage collections: once start-up is done, then when quiet after a burst (also run by the schedules). */
  collector?: Pick<QuietCollector, 'collectNow' | 'status'>;
  /** Adoption of running Pods that cross no bridge. */
  adopter: PodAdopter;
  /** Kubernetes Events (attach failures, adoption, invalid policies). */
  events: NodeEvents;
  /** Keeps sluice chained in the node's CNI configuration (when cniConfDir is set). */
  chainKeeper?: ChainKeeper | undefined;
  /** Where config.serviceCIDRs came from (default: the configuration). */
  serviceCidrSource?: string;
  /** Start the CNI socket server (false in tests that drive the handler directly). */
  serveCni?: boolean;
  /** Closes the adapters agent-program.ts opened (netlink sockets, helper processes, OVSDB session), last. */
  closeAdapters(): void;
}

/** The gateway's permanent neighbours sluice keeps (a kernel event removing one triggers a repair). */
const KEPT_NEIGHBOURS: ReadonlySet<string> = new Set([SERVICE_GATEWAY_IP, SERVICE_GATEWAY_IPV6]);

export interface AgentStatus {
  ready: boolean;
  node: string;
  nodeIP?: string;
  bridge: string;
  datapath: string;
  /** Why `datapath: auto` chose it (absent when the configuration named the datapath). */
  datapathWhy?: string;
  /** The Service ranges in use, where they come from, and Services whose ClusterIP is outside them (their traffic escapes egress enforcement). */
  serviceCIDRs: { cidrs: string[]; source: string; outside?: { service: string; ip: string }[] };
  gateway?: GatewayInfo;
  pods: PodAttachment[];
  lastResync?: ResyncRecord;
  ovsReachable: boolean;
  /** The agent process's memory in MiB: resident set, and the JS heap's live part vs its reservation. */
  memory: { rssMiB: number; heapUsedMiB: number; heapTotalMiB: number; externalMiB: number; quietCollections?: QuietCollectorStatus };
  enforcement?: unknown;
  /** Keeping sluice chained in the node's CNI configuration (when cniConfDir is set). */
  chain?: ChainStatus;
  /**
   * Pods of this node that run on the primary CNI alone (sluice installed after them, or created
   * while the chain was broken): how many were adopted, and those that are not attached, with why.
   */
  adoption?: AdoptionStatus;
}

const TRACE_COOKIE = BigInt(TRACE_COOKIE_PREFIX) << 48n;
const TRACE_COOKIE_MASK = 0xffffn << 48n;

const mib = (bytes: number) => Math.round((bytes / 1048576) * 10) / 10;

export class Agent {
  readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly node: NodeReconciler<NodeApi, HostNetwork>;
  private readonly attacher: PodAttacher;
  private readonly lock: SharedExclusiveLock;
  private readonly ovs: AgentParts['ovs'];
  private readonly flowProgrammer: AgentParts['flowProgrammer'];
  private readonly enforcement: EnforcementHooks | undefined;
  private readonly metrics: AgentMetrics | undefined;
  private readonly schedules: NodeSchedules;
  private readonly adopter: PodAdopter;
  private readonly events: NodeEvents;
  private readonly chainKeeper: ChainKeeper | undefined;
  private cni?: CniServer;
  private health?: HealthServer;
  private metricsServer?: HealthServer;
  private readonly realizationServers: HealthServer[] = [];
  /** Where config.serviceCIDRs came from (node/service-cidrs.ts). */
  private serviceCidrSource: string;
  private monitors: { kill(): unknown }[] = [];
  private closed = false;

  private constructor(private readonly parts: AgentParts) {
    this.config = parts.config;
    this.log = parts.log;
    this.node = parts.node;
    this.attacher = parts.attacher;
    this.lock = parts.lock;
    this.ovs = parts.ovs;
    this.flowProgrammer = parts.flowProgrammer;
    this.enforcement = parts.enforcement;
    this.metrics = parts.metrics;
    this.schedules = parts.schedules;
    this.adopter = parts.adopter;
    this.events = parts.events;
    this.chainKeeper = parts.chainKeeper;
    this.serviceCidrSource = parts.serviceCidrSource ?? 'configuration';
  }

  private get pods(): PodRegistry {
    return this.node.pods;
  }

  private get kube(): NodeApi | undefined {
    return this.node.api;
  }

  /** The CNI handler the socket server calls: CNI operations share, resyncs exclude. */
  get handler(): CniHandler {
    const a = this.attacher;
    return {
      add: (req: PodRequest) =>
        this.lock
          .runShared(() => a.add(req))
          // Outside the lock: the answers of other nodes may take a while, and resyncs need not wait.
          .then(() => this.podStarting(req.containerId))
          .catch((err: unknown) => {
            this.events.attachFailed(req, err);
            throw err;
          }),
      del: (req: PodRequest) => this.lock.runShared(() => a.del(req)),
      check: (req: PodRequest) => this.lock.runShared(() => a.check(req)),
      status: () => a.status(),
      gc: (valid: GcAttachment[], req: { networkName: string }) => this.lock.runShared(() => a.gc(valid, req)),
    };
  }

  /**
   * The Service ranges changed (the cluster's ServiceCIDRs): the re-entrance flows and the host's
   * rules follow at a resync (both are computed from config.serviceCIDRs).
   */
  serviceCidrsChanged(cidrs: string[], source: string): void {
    if (cidrs.join() === this.config.serviceCIDRs.join()) return;
    this.log.info({ cidrs, was: this.config.serviceCIDRs, source }, 'Service ranges changed');
    this.config.serviceCIDRs = [...cidrs];
    this.serviceCidrSource = source;
    this.node.hostNetwork?.setServiceCIDRs(cidrs);
    this.schedules.repairSoon(`Service ranges changed to ${cidrs.join(', ')}`);
  }

  /** A new Pod's addresses are known where they matter, or it is guarded (EnforcementHooks.podStarting). */
  private async podStarting(containerId: string): Promise<void> {
    const pod = this.pods.get(containerId);
    if (!pod || !this.enforcement?.podStarting) return;
    try {
      await this.enforcement.podStarting(pod);
    } catch (err) {
      throw new CniError(CniErrorCode.AttachFailed, `container ${containerId}: the new Pod's guard could not be installed: ${(err as Error).message}`);
    }
  }

  static async start(parts: AgentParts): Promise<Agent> {
    const agent = new Agent(parts);
    try {
      await agent.startUp(parts.serveCni ?? true);
    } catch (err) {
      await agent.close();
      throw err;
    }
    return agent;
  }

  private async startUp(serveCni: boolean): Promise<void> {
    const { config: cfg, log, node } = this;
    const t0 = this.parts.clock.now();
    this.health = await startHealthServer(cfg.healthAddress, () => this.status(), log, {
      '/policies': () => policiesAnswer(this.enforcement?.policyReport?.()),
      // Per-rule statistics (sluicectl node stats).
      '/stats': async () => {
        const stats = await this.ruleStats();
        return stats ? { code: 200, body: stats } : policiesAnswer(undefined);
      },
      '/traceflow': (q) => this.traceflow(q),
      // The desired set `sluicectl node flows --check` compares with the bridge.
      '/flows': () => (node.gateway ? { code: 200, body: node.desiredFlows() } : { code: 503, body: { error: 'starting: the bridge and gateway are not set up yet' } }),
      ...this.metricsRoutes(),
    });
    if (this.metrics && cfg.metricsAddress) this.metricsServer = await startEndpoint('metrics endpoint (metricsAddress)', cfg.metricsAddress, log, this.metricsRoutes());
    await mkdir(cfg.stateDir, { recursive: true });

    await node.startUp();
    await this.startRealizationEndpoints();

    if (serveCni) this.cni = await startCniServer(cfg.socketPath, this.handler, log, this.metrics && ((c, r, s) => this.metrics!.observeCniRequest(c, r, s)));
    node.ready = true;
    log.info({ ms: this.parts.clock.now() - t0, pods: this.pods.size, nodeIP: node.nodeIP, nodeIPv6: node.nodeIPv6 }, 'startup: ready');
    // Right after the requests already waiting are served.
    this.parts.clock.setTimeout(() => this.parts.collector?.collectNow(), 0);

    this.watchHostChanges();
    // Pods that were running before the agent (sluice installed on a busy node) cross no bridge yet.
    void this.adopter.adoptUnattached('agent start');
    // Controller mode: traces asked through the controller (kubectl sluice traceflow) run here as sluicectl's do.
    this.enforcement?.serveTraceTasks?.((q) => this.traceflow(q));
    // Checked once now, then followed; each re-chain asks the schedules for adoption.
    await this.chainKeeper?.start();
    this.schedules.start();
  }

  /**
   * The realization endpoint other agents ask about new Pods (enforcement/newpods/peers.ts) and ask
   * to observe their traces (enforcement/trace-observers.ts), on each of the node's addresses: where
   * they find this node (its Node object's InternalIP).
   */
  private async startRealizationEndpoints(): Promise<void> {
    const realized = this.enforcement?.realized;
    if (!realized) return;
    for (const host of [this.node.nodeIP, this.node.nodeIPv6]) {
      if (!host) continue;
      this.realizationServers.push(
        await startEndpoint('realization endpoint (realizationPort)', { host, port: this.config.realizationPort }, this.log, {
          '/realized': (q) => realized(q),
          ...this.enforcement?.traceObserveRoutes?.(() => this.traceBridge()),
        }),
      );
    }
  }

  /** GET /metrics, with the figures read from this agent at each scrape. */
  private metricsRoutes(): Record<string, () => Promise<{ code: number; body: string; contentType: string }>> {
    const metrics = this.metrics;
    if (!metrics) return {};
    const node = this.node;
    metrics.setSources({
      pods: () => ({ attached: this.pods.size }),
      flowsByTable: () => (node.gateway ? node.desiredFlowCounts() : {}),
      ovsdbReachable: () => node.ovsReachable,
      resyncs: () => ({ ...node.resyncCounts }),
      enforcement: () => this.enforcement?.metrics?.(),
      ruleStats: () => this.ruleStats(),
      meterDrops: async () => this.enforcement?.meterDrops?.(),
      servicesOutside: () => this.enforcement?.servicesOutside?.(this.config.serviceCIDRs).length,
      chain: () => this.chainKeeper?.status(),
      adoption: () => {
        const a = this.adopter.status();
        return { adopted: a.adopted, unattached: a.unattached.length };
      },
    });
    return { '/metrics': async () => ({ code: 200, body: await metrics.text(), contentType: metrics.contentType }) };
  }

  /** Per-rule statistics, or undefined when enforcement is off. */
  private async ruleStats(): Promise<RuleStatistics[] | undefined> {
    if (!this.enforcement?.ruleStats) return undefined;
    // The Metric tables' flows with their counters.
    return this.enforcement.ruleStats(() => this.flowProgrammer.dumpCounters(['EgressMetric', 'IngressMetric']));
  }

  /**
   * Event-driven repair: rtnetlink notifications report deleted routes, rules and neighbours, and
   * `nft monitor` deleted iptables rules (nft backend) and the veth guard table, so something
   * removing table 300's route, a Pod route or sluice's chains is repaired in a moment instead of at
   * the next periodic resync. Bursts (a Pod teardown, a flushed table) collapse into one resync.
   * With the legacy iptables backend no events exist for its rules; the periodic resync covers them.
   */
  private watchHostChanges(): void {
    const gateway = this.config.gateway;
    const rt = watchRtEvents(
      (ev) => {
        if (this.closed) return;
        const pods = this.pods;
        // Read on access: most events (neighbour state changes) are decided without either.
        const kept = {
          get gatewayIfindex() {
            return ifindexOf(gateway);
          },
          get podIps() {
            return new Set(pods.list().flatMap(routedIPs));
          },
          neighbours: KEPT_NEIGHBOURS,
        };
        if (!isRepairEvent(ev, kept)) return;
        const gwIndex = ifindexOf(gateway);
        this.schedules.repairSoon(`netlink: ${describeRtEvent(ev, (i) => (i === gwIndex ? gateway : undefined))}`);
      },
      // A lost notification (ENOBUFS after a burst) could have been a removal: check everything.
      (err) => this.schedules.repairSoon(`netlink: ${err.message}`),
    );
    this.monitors = [{ kill: () => rt.close() }, this.watchMonitor('nftables', 'nft', ['monitor'], isRulesetTamperEvent)];
  }

  private watchMonitor(what: string, cmd: string, args: string[], relevant: (line: string) => boolean): ChildProcess {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    child.on('error', (err) => this.log.warn({ err: err.message }, `${what} monitor unavailable; relying on the periodic resync`));
    let buf = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      buf += d;
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      const hit = lines.find(relevant);
      if (hit !== undefined) this.schedules.repairSoon(`${what}: ${hit.trim()}`);
    });
    return child;
  }

  /**
   * GET /traceflow?from=ns/pod&to=…&port=N&protocol=TCP|UDP|ICMP[&family=4|6]: a real packet from a local Pod
   * through the bridge (sluicectl node traceflow). 400 names what is wrong with the request.
   */
  private async traceflow(q: URLSearchParams): Promise<{ code: number; body: unknown }> {
    const bad = (error: string) => ({ code: 400, body: { error } });
    const from = q.get('from') ?? '';
    const to = q.get('to') ?? '';
    const protocol = (q.get('protocol') ?? 'TCP').toUpperCase();
    const port = Number(q.get('port') ?? (protocol === 'ICMP' ? 0 : NaN));
    if (!this.enforcement?.traceflow) return { code: 503, body: { error: 'policy enforcement is off on this node: nothing to trace' } };
    if (!['TCP', 'UDP', 'ICMP'].includes(protocol)) return bad(`protocol "${protocol}": use TCP, UDP or ICMP`);
    if (protocol !== 'ICMP' && !(Number.isInteger(port) && port >= 1 && port <= 65535)) return bad(`port "${q.get('port') ?? ''}": a port 1-65535 is needed for ${protocol}`);
    if (!to) return bad('to: the destination is missing (ns/pod, service:ns/name or ip:ADDRESS)');
    const src = this.pods.list().find((p) => `${p.podNamespace}/${p.podName}` === from);
    if (!src) return bad(`from "${from}": no Pod of that name is attached on ${this.config.nodeName} (traceflow runs on the source Pod's node)`);
    // The family: an ip: destination's, else ?family=4|6, else IPv4 when the source has it.
    const asked = q.get('family');
    if (asked !== null && asked !== '4' && asked !== '6') return bad(`family "${asked}": use 4 or 6`);
    const fixed = /^ip:(.*)$/.exec(to)?.[1];
    const family = fixed !== undefined ? (fixed.includes(':') ? 6 : 4) : asked ? Number(asked) : src.ips.some((a) => !a.includes(':')) ? 4 : 6;
    if (asked && Number(asked) !== family) return bad(`family ${asked}: the destination ${to} is an IPv${family} address`);
    const own = src.ips.find((a) => a.includes(':') === (family === 6));
    // An IPv6-only Pod's IPv4 leaves through its egress interface, to addresses outside the cluster only.
    const egress = own === undefined && family === 4 ? src.egressV4 : undefined;
    if (egress && fixed === undefined) return bad(`from "${from}": the Pod has no IPv4 address; its IPv4 egress interface ${egress.ifName} reaches only addresses outside the cluster (use --to ip:ADDRESS)`);
    const source = egress ? { pod: from, ip: egress.ip, mac: egress.mac, ofport: egress.ofport } : own !== undefined ? { pod: from, ip: own, mac: src.mac, ofport: src.ofport } : undefined;
    if (!source) return bad(`from "${from}": the Pod has no IPv${family} address`);
    const bridge = this.traceBridge();
    if (!bridge) return { code: 503, body: { error: 'starting: the bridge is not set up yet' } };
    try {
      const report = await this.enforcement.traceflow({ source, to, protocol: protocol as TraceProtocol, dstPort: protocol === 'ICMP' ? 0 : port }, bridge);
      return { code: 200, body: report };
    } catch (err) {
      if (err instanceof TraceError) return { code: 409, body: { error: err.message } };
      throw err;
    }
  }

  /** The bridge as a trace sees it (undefined before the gateway is set up): its observation flows and its ports' names. */
  private traceBridge(): TraceBridge | undefined {
    const gw = this.node.gateway;
    if (!gw) return undefined;
    const byPort = new Map<number, string>();
    for (const p of this.pods.list()) {
      byPort.set(p.ofport, `Pod ${p.podNamespace}/${p.podName} (port ${p.ofport})`);
      if (p.egressV4) byPort.set(p.egressV4.ofport, `Pod ${p.podNamespace}/${p.podName} ${p.egressV4.ifName} (port ${p.egressV4.ofport})`);
    }
    return {
      io: {
        // Cached datapath flows of the source's traffic were made without the observation flows
        // and could carry the traced packet past them: purged after each change.
        addFlows: async (text) => {
          await this.flowProgrammer.addFlows(text.split('\n').filter((l) => l.trim() !== ''));
          await this.ovs.appctl(['revalidator/purge']);
        },
        removeFlows: async () => {
          await this.flowProgrammer.deleteFlows(TRACE_COOKIE, TRACE_COOKIE_MASK);
          await this.ovs.appctl(['revalidator/purge']);
        },
      },
      port: (ofport) => (ofport === gw.ofport ? `${gw.name} (port ${ofport})` : byPort.get(ofport) ?? `port ${ofport}`),
      gatewayOfport: gw.ofport,
    };
  }

  status(): AgentStatus {
    return {
      ready: this.node.ready,
      node: this.config.nodeName,
      ...(this.node.nodeIP ? { nodeIP: this.node.nodeIP } : {}),
      bridge: this.config.bridge,
      datapath: this.config.datapath,
      ...(this.config.datapathWhy ? { datapathWhy: this.config.datapathWhy } : {}),
      serviceCIDRs: { cidrs: this.config.serviceCIDRs, source: this.serviceCidrSource, ...(this.enforcement?.servicesOutside ? { outside: this.enforcement.servicesOutside(this.config.serviceCIDRs) } : {}) },
      ...(this.node.gateway ? { gateway: this.node.gateway } : {}),
      pods: this.pods.list(),
      ...(this.node.lastResync ? { lastResync: this.node.lastResync } : {}),
      ovsReachable: this.node.ovsReachable,
      memory: (({ rss, heapUsed, heapTotal, external }) => ({
        rssMiB: mib(rss),
        heapUsedMiB: mib(heapUsed),
        heapTotalMiB: mib(heapTotal),
        externalMiB: mib(external),
        ...(this.parts.collector ? { quietCollections: this.parts.collector.status() } : {}),
      }))(process.memoryUsage()),
      ...(this.enforcement?.status ? { enforcement: this.enforcement.status() } : {}),
      ...(this.chainKeeper ? { chain: this.chainKeeper.status() } : {}),
      ...(this.kube ? { adoption: this.adopter.status() } : {}),
    };
  }

  /** Stops serving; leaves bridge, flows, ports and routes in place (restart must not disturb Pods). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.node.close();
    this.schedules.stop();
    this.adopter.close();
    for (const m of this.monitors) m.kill();
    this.chainKeeper?.close();
    await this.cni?.close();
    await this.enforcement?.close();
    await this.parts.openflow.close();
    await this.health?.close();
    await this.metricsServer?.close();
    for (const s of this.realizationServers) await s.close();
    await this.node.hostNetwork?.close();
    this.parts.closeAdapters();
  }
}
