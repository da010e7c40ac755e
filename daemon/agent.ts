/**
 * sluice-agent: start-up (OVSDB, API server, bridge + gateway, flows, host networking, reconcile
 * with what a previous run left), the CNI handler, and the periodic convergence loops.
 *
 * Restart safety: all Pod state lives in OVSDB external_ids, flows are diffed by cookie, host
 * networking converges; so a restarted agent recomputes the same desired state and touches
 * nothing that is already right.
 */
import { EventEmitter } from 'node:events';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { AgentConfig } from './config.js';
import { type CniHandler, type CniServer, type GcAttachment, type PodRequest, startCniServer } from './cni/server.js';
import { diffFlows } from './flows/diff.js';
import type { Flow } from './flows/flow.js';
import type { RuleStatistics } from './flows/policy/stats.js';
import { FlowSync, type GatewayInfo, Ovs } from './flows/ovs.js';
import { OpenFlowController } from './flows/openflow/controller.js';
import { packetInMeters } from './flows/openflow/punt.js';
import { PipelineOwners } from './flows/pipeline.js';
import type { FlowSource, FlowStore } from './flows/store.js';
import { policiesAnswer } from './enforcement/policy-report.js';
import { TraceError, type TraceReport, type TraceRequest } from './enforcement/traceflow.js';
import { TRACE_COOKIE_PREFIX, type TraceProtocol } from './flows/traceflow.js';
import { type HealthServer, startEndpoint, startHealthServer } from './health.js';
import type { AgentMetrics, EnforcementMetrics } from './metrics.js';
import { HostNetwork, NetnsHelper, PodLinks, podInterfaceIPv4, resolveIptables, SERVICE_GATEWAY_IP, SERVICE_GATEWAY_IPV6 } from './hostnet/index.js';
import { isRepairEvent, isRulesetTamperEvent } from './hostnet/monitor.js';
import { describeRtEvent, ifindexOf, watchRtEvents } from './hostnet/rtevents.js';
import { type AdoptionStatus, type NodePod, planAdoption } from './adoption.js';
import { ChainKeeper, type ChainStatus } from './chainkeeper.js';
import { readCniCache } from './cni/runtime-cache.js';
import { sluiceEntry } from '../install/conflist.js';
import { type AttachStep, attachmentFromPort, egressPortIds, type PodAttachment, PodAttacher, podPortOf, portIds, routedIPs } from './cni/attacher.js';
import { type EventSubject, NodeApi } from './kube/node-api.js';
import { SharedExclusiveLock } from './lock.js';

export interface AgentOptions {
  config: AgentConfig;
  log: Logger;
  /** Test hook: make every ADD fail after this step (exercises rollback end to end). */
  failAfter?: AttachStep;
  /** Start the CNI socket server (false in tests that drive the handler directly). */
  serveCni?: boolean;
  /**
   * Flow sources present from the first sync (e.g. policy). A source added later with
   * addFlowSource() is missing from the start-up sync, whose flows it would then delete and re-add.
   */
  flowSources?: FlowSource[];
  /** Policy enforcement (daemon/enforcement): its flows join the desired set from the first sync. */
  enforcement?: EnforcementHooks;
  /** Prometheus metrics, served on /metrics (health address, and metricsAddress when configured). */
  metrics?: AgentMetrics;
}

/**
 * What the agent calls on the policy side. Ordering guarantees: `prepare` runs after the bridge
 * exists and before the first flow sync (so the first bundle already has every policy flow and a
 * restart deletes nothing); `podAttaching` runs before a new Pod's flows are installed (the same
 * bundle makes the Pod reachable and installs its policy flows).
 */
export interface EnforcementHooks {
  /** Brings the policy side's owners in the agent's FlowStore up to date (policy flows, DNS interception). */
  writeFlows(store: FlowStore): void;
  prepare(agent: Agent, localPods: PodAttachment[]): Promise<void>;
  podAttaching(pod: PodAttachment): Promise<void>;
  podDetached(pod: PodAttachment): void;
  close(): Promise<void>;
  /** Shown under `enforcement` in the agent status (/status, sluicectl node status). */
  status?(): unknown;
  /** The body of GET /policies: what this node enforces and which objects were ignored (sluicectl node policies). */
  policyReport?(): unknown;
  /** A real packet traced through the bridge (GET /traceflow); the destination is resolved from the cluster view. */
  traceflow?(req: Omit<TraceRequest, 'dstIp'>, io: { addFlows(text: string): Promise<void>; removeFlows(): Promise<void> }, port: (ofport: number) => string, gatewayOfport: number): Promise<TraceReport>;
  /** The API object (apiVersion, kind, uid) behind an invalid-object entry of the report. */
  policyObject?(e: { kind: string; namespace?: string | undefined; name: string }): EventSubject | undefined;
  /** Figures for /metrics. */
  metrics?(): EnforcementMetrics;
  /** Per-rule statistics from the bridge's counter flows; `dump` returns the Metric tables' flows with their counters (dump-flows line form). */
  ruleStats?(dump: () => Promise<string>): Promise<RuleStatistics[]>;
  /** Packets each packet-in meter dropped, by what it limits (the bridge's meter statistics). */
  meterDrops?(): Promise<Record<string, number>>;
}

export class StartupError extends Error {}

/** The gateway's permanent neighbours sluice keeps (a kernel event removing one triggers a repair). */
const KEPT_NEIGHBOURS: ReadonlySet<string> = new Set([SERVICE_GATEWAY_IP, SERVICE_GATEWAY_IPV6]);

const API_START_DEADLINE_MS = 30_000;

export interface AgentStatus {
  ready: boolean;
  node: string;
  nodeIP?: string;
  bridge: string;
  datapath: string;
  gateway?: GatewayInfo;
  pods: PodAttachment[];
  lastResync?: { at: string; repairs: string[]; error?: string };
  ovsReachable: boolean;
  /** The agent process's memory in MiB: resident set, and the JS heap's live part vs its reservation. */
  memory: { rssMiB: number; heapUsedMiB: number; heapTotalMiB: number; externalMiB: number };
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

/** What the policy side listens to: 'pod-attached' / 'pod-detached' with the PodAttachment. */
export interface PodEvents {
  on(event: 'pod-attached' | 'pod-detached', listener: (pod: PodAttachment) => void): this;
}

export class Agent {
  readonly pods = new Map<string, PodAttachment>();
  /** Finds Pods' veths for ADD and adoption over one rtnetlink socket (daemon/hostnet/podlink.ts). */
  private readonly podLinks = new PodLinks();
  private readonly netnsHelper: NetnsHelper;
  readonly podEvents: PodEvents & EventEmitter = new EventEmitter();
  readonly ovs: Ovs;
  private readonly flowSync: FlowSync;
  /**
   * The agent's OpenFlow connection to the bridge: every flow is programmed and read back over it
   * (no ovs-ofctl), and the packet-in path (enforcement) shares it.
   */
  readonly openflow: OpenFlowController;
  private readonly lock = new SharedExclusiveLock();
  /** Resyncs one after another (their host part runs outside the lock). */
  private resyncQueue: Promise<unknown> = Promise.resolve();
  private hostnet?: HostNetwork;
  private gateway?: GatewayInfo;
  private nodeIP?: string | undefined;
  private nodeIPv6?: string | undefined;
  private ready = false;
  private ovsReachable = true;
  private checkingFlows = false;
  private cni?: CniServer;
  private health?: HealthServer;
  private timers: NodeJS.Timeout[] = [];
  private lastResync?: AgentStatus['lastResync'];
  private readonly resyncCounts = { ok: 0, failed: 0, repairs: 0 };
  private metricsServer?: HealthServer;
  private monitors: { kill(): unknown }[] = [];
  private chainKeeper?: ChainKeeper;
  private adoption: AdoptionStatus = { adopted: 0, unattached: [] };
  private adopting?: Promise<void> | undefined;
  private adoptAgain?: string | undefined;
  private readonly attachFailedAt = new Map<string, number>();
  private invalidReported = new Set<string>();
  private kube?: NodeApi;
  private monitorTimer?: NodeJS.Timeout;
  private closed = false;
  readonly attacher: PodAttacher;

  private constructor(
    readonly config: AgentConfig,
    private readonly log: Logger,
    failAfter?: AttachStep,
    private readonly enforcement?: EnforcementHooks,
    private readonly metrics?: AgentMetrics,
  ) {
    this.netnsHelper = new NetnsHelper({ log });
    this.ovs = new Ovs({ ovsRunDir: config.ovsRunDir, bridge: config.bridge, datapath: config.datapath, log });
    this.flowSync = new FlowSync(this.ovs, log);
    this.openflow = new OpenFlowController({
      socketPath: `${config.ovsRunDir}/${config.bridge}.mgmt`,
      meters: packetInMeters(config.packetInRate),
      // After an ovs-vswitchd restart the flows are replayed on reconnection: retry at least every 500 ms.
      reconnectMaxMs: 500,
      log: { debug: (o, m) => log.debug(o, m), info: (o, m) => log.info(o, m), warn: (o, m) => log.warn(o, m) },
    });
    this.ovs.useOpenFlow(this.openflow);
    this.attacher = new PodAttacher({
      datapath: config.datapath,
      bridge: config.bridge,
      ovs: this.ovs,
      hostnet: {
        movePodRoutes: (ips, veth) => this.net.movePodRoutes(ips, veth),
        restorePodRoutes: (ips, veth) => this.net.restorePodRoutes(ips, veth),
        checkPodRoutes: (ips) => this.net.checkPodRoutes(ips),
        isolateHostVeth: (veth) => this.net.isolateHostVeth(veth),
        releaseHostVeth: (veth) => this.net.releaseHostVeth(veth),
        isolatedVeths: () => this.net.isolatedVeths(),
      },
      // One rtnetlink socket for every ADD; no process enters the Pod's namespace.
      findHostVeth: (netns, ifName) => this.podLinks.findHostVeth(netns, ifName),
      podInterfaceIPv4,
      // One long-lived helper process for every Pod (started on the first netdev ADD).
      disablePodTxOffload: (netns, ifName) => this.netnsHelper.disableTxOffload(netns, ifName),
      pods: this.pods,
      syncFlows: (opts) => this.syncFlows(opts),
      isReady: () => this.ready,
      onPodAttached: (p) => this.podEvents.emit('pod-attached', p),
      onPodDetached: (p) => {
        this.enforcement?.podDetached(p);
        this.podEvents.emit('pod-detached', p);
      },
      ...(enforcement
        ? { beforePodFlows: (p: PodAttachment) => enforcement.podAttaching(p), podFlowsUndone: (p: PodAttachment) => enforcement.podDetached(p) }
        : {}),
      ...(failAfter ? { failAfter } : {}),
      log,
    });
  }

  private get net(): HostNetwork {
    if (!this.hostnet) throw new Error('host networking is not initialised yet');
    return this.hostnet;
  }

  /** The CNI handler the socket server calls: CNI operations share, resyncs exclude. */
  get handler(): CniHandler {
    const a = this.attacher;
    return {
      add: (req: PodRequest) => this.lock.runShared(() => a.add(req)).catch((err: unknown) => {
        this.attachFailedEvent(req, err);
        throw err;
      }),
      del: (req: PodRequest) => this.lock.runShared(() => a.del(req)),
      check: (req: PodRequest) => this.lock.runShared(() => a.check(req)),
      status: () => a.status(),
      gc: (valid: GcAttachment[], req: { networkName: string }) => this.lock.runShared(() => a.gc(valid, req)),
    };
  }

  static async start(opts: AgentOptions): Promise<Agent> {
    const agent = new Agent(opts.config, opts.log, opts.failAfter, opts.enforcement, opts.metrics);
    for (const source of opts.flowSources ?? []) agent.addFlowSource(source);
    if (opts.enforcement) {
      const e = opts.enforcement;
      agent.addFlowSource((store) => e.writeFlows(store));
    }
    try {
      await agent.startUp(opts.serveCni ?? true);
    } catch (err) {
      await agent.close();
      throw err;
    }
    return agent;
  }

  private async startUp(serveCni: boolean): Promise<void> {
    const { config: cfg, log } = this;
    const t0 = Date.now();
    this.health = await startHealthServer(cfg.healthAddress, () => this.status(), log, {
      '/policies': () => policiesAnswer(this.enforcement?.policyReport?.()),
      // Per-rule statistics (sluicectl node stats).
      '/stats': async () => {
        const stats = await this.ruleStats();
        return stats ? { code: 200, body: stats } : policiesAnswer(undefined);
      },
      '/traceflow': (q) => this.traceflow(q),
      // The desired set `sluicectl node flows --check` compares with the bridge.
      '/flows': () => (this.gateway ? { code: 200, body: this.desiredFlows() } : { code: 503, body: { error: 'starting: the bridge and gateway are not set up yet' } }),
      ...this.metricsRoutes(),
    });
    if (this.metrics && cfg.metricsAddress) this.metricsServer = await startEndpoint('metrics endpoint (metricsAddress)', cfg.metricsAddress, log, this.metricsRoutes());
    await mkdir(cfg.stateDir, { recursive: true });

    await this.waitForOvsdb();
    log.info({ db: this.ovs.db }, 'startup: OVSDB reachable');

    const { nodeIP, nodeIPv6, livePods } = await this.connectApi();
    this.nodeIP = nodeIP;
    this.nodeIPv6 = nodeIPv6;

    const bridgeChanges = await this.ovs.ensureBridge();
    const gw = await this.ovs.ensureGateway(cfg.gateway);
    this.gateway = gw.gateway;
    log.info({ bridge: cfg.bridge, gateway: gw.gateway, changes: [...bridgeChanges, ...gw.changes] }, 'startup: bridge and gateway');
    this.startOpenFlow();

    const stale = await this.loadAttachments(livePods);
    if (this.enforcement) {
      await this.enforcement.prepare(this, [...this.pods.values()]);
      log.info({ ms: Date.now() - t0 }, 'startup: policy enforcement prepared');
    }
    const diff = await this.syncFlows({ verify: true });
    log.info({ added: diff.add.length, removed: diff.remove.length, unchanged: diff.unchanged, pods: this.pods.size }, 'startup: flows converged');
    if (await this.ovs.endFlowRestoreWait()) log.info('startup: flow-restore-wait ended (ovs-vswitchd forwards by the new flows)');
    // Observation flows of a trace the previous agent did not finish.
    await this.ovs.deleteFlows(TRACE_COOKIE, TRACE_COOKIE_MASK);

    const iptables = await resolveIptables(cfg.iptablesBackend);
    log.info({ backend: iptables.commands.backend ?? 'iptables', why: iptables.why }, 'startup: iptables backend');
    this.hostnet = await HostNetwork.create({
      gateway: cfg.gateway,
      serviceCIDRs: cfg.serviceCIDRs,
      ...(nodeIP ? { nodeIP } : {}),
      ...(nodeIPv6 ? { nodeIPv6 } : {}),
      rtTablesFile: cfg.rtTablesFile,
      iptables: iptables.commands,
      log,
    });
    const repairs = await this.hostnet.resync(this.podRoutes());
    log.info({ repairs }, 'startup: host networking converged');

    for (const { pod, reason } of stale) {
      log.warn({ containerId: pod.containerId, veth: pod.hostVeth, reason }, 'startup: removing leftover attachment');
      const failures = await this.attacher.detach(pod);
      if (failures.length) log.error({ containerId: pod.containerId, failures }, 'startup: leftover not fully removed');
    }

    if (serveCni) this.cni = await startCniServer(cfg.socketPath, this.handler, log, this.metrics && ((c, r, s) => this.metrics!.observeCniRequest(c, r, s)));
    this.ready = true;
    log.info({ ms: Date.now() - t0, pods: this.pods.size, nodeIP, nodeIPv6 }, 'startup: ready');

    this.watchHostChanges();
    // Pods that were running before the agent (sluice installed on a busy node) cross no bridge yet.
    void this.adoptUnattached('agent start');
    if (cfg.cniConfDir) {
      this.chainKeeper = new ChainKeeper({
        confDir: cfg.cniConfDir,
        binDir: cfg.cniBinDir,
        entry: sluiceEntry(cfg.socketPath),
        log,
        onRechained: (file) => this.afterRechain(file),
      });
      await this.chainKeeper.start();
    }
    this.timers.push(
      setInterval(() => void this.resync('periodic').then(() => this.adoptUnattached('periodic resync')), cfg.resyncIntervalSeconds * 1000),
      setInterval(() => void this.checkFlows(), cfg.flowCheckIntervalSeconds * 1000),
      setInterval(() => this.reportInvalidPolicies(), 10_000),
    );
    this.reportInvalidPolicies();
  }

  /** OVS may start after the agent (e.g. two DaemonSet containers): wait up to 30 s for OVSDB. */
  private async waitForOvsdb(): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        await this.ovs.ping();
        return;
      } catch (err) {
        if (Date.now() > deadline || this.closed) throw err;
        this.log.warn({ err: (err as Error).message }, 'startup: OVSDB not reachable yet, retrying');
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  /** nodeIP / nodeIPv6 (configured or the Node's InternalIPs) and, when the API answers, the Pods on this node. */
  private async connectApi(): Promise<{ nodeIP?: string; nodeIPv6?: string; livePods?: Set<string> }> {
    const { config: cfg, log } = this;
    const deadline = Date.now() + API_START_DEADLINE_MS;
    const configured = { ...(cfg.nodeIP ? { nodeIP: cfg.nodeIP } : {}), ...(cfg.nodeIPv6 ? { nodeIPv6: cfg.nodeIPv6 } : {}) };
    let lastErr: unknown;
    for (let attempt = 0; ; attempt++) {
      try {
        const kube = await NodeApi.connect(cfg.kubeconfig);
        const { nodeIP, nodeIPv6 } = cfg.nodeIP || cfg.nodeIPv6 ? configured : await kube.nodeInternalIPs(cfg.nodeName);
        if (!nodeIP && !nodeIPv6) throw new StartupError(`Node ${cfg.nodeName} has no InternalIP; set nodeIP (and/or nodeIPv6) in the config`);
        const livePods = await kube.nodePods(cfg.nodeName);
        this.kube = kube;
        log.info({ server: kube.server, nodeIP, nodeIPv6, pods: livePods.size }, 'startup: API server reachable');
        return { ...(nodeIP ? { nodeIP } : {}), ...(nodeIPv6 ? { nodeIPv6 } : {}), livePods };
      } catch (err) {
        lastErr = err;
        if (err instanceof StartupError) throw err;
        if (cfg.nodeIP || cfg.nodeIPv6) {
          // Enough to run the datapath; leftovers are then judged by their netns alone.
          log.warn({ err: (err as Error).message }, 'startup: API server unavailable; continuing with the configured nodeIP');
          return configured;
        }
        if (Date.now() > deadline) break;
        log.warn({ err: (err as Error).message, attempt }, 'startup: API server not reachable yet, retrying');
        await new Promise((r) => setTimeout(r, Math.min(1000 * 2 ** attempt, 5000)));
      }
    }
    throw new StartupError(
      `cannot learn this node's IP: nodeIP is not configured and the Node ${cfg.nodeName} could not be read from the API server ` +
        `(${cfg.kubeconfig ? `kubeconfig ${cfg.kubeconfig}` : 'in-cluster config'}): ${(lastErr as Error)?.message}`,
    );
  }

  /** Rebuilds the registry from OVSDB; returns attachments whose Pod is gone. */
  private async loadAttachments(livePods?: Set<string>): Promise<{ pod: PodAttachment; reason: string }[]> {
    const stale: { pod: PodAttachment; reason: string }[] = [];
    const egressOfports = await this.ovs.egressPortOfports();
    for (const rec of await this.ovs.listPodPorts()) {
      const pod = attachmentFromPort(rec, egressOfports);
      if (!pod) {
        this.log.warn({ port: rec.name }, 'startup: removing a sluice port with incomplete external_ids');
        await this.ovs.removePort(rec.name);
        continue;
      }
      const reason =
        rec.ofport < 1 ? `interface gone (${rec.error ?? 'no OpenFlow port'})`
        : !pod.netns || !existsSync(pod.netns) ? `netns ${pod.netns} gone`
        : livePods && pod.podName && !livePods.has(`${pod.podNamespace}/${pod.podName}`) ? `Pod ${pod.podNamespace}/${pod.podName} is not on this node in the API`
        : undefined;
      if (reason) stale.push({ pod, reason });
      else this.pods.set(pod.containerId, pod);
    }
    return stale;
  }

  private readonly flowSources: FlowSource[] = [];
  private readonly pipeline = new PipelineOwners();

  /**
   * Adds owners of flows to the desired set (policy enforcement plugs in here). Call syncFlows()
   * after the source's flows changed; the periodic resync and the watchdog include it automatically.
   */
  addFlowSource(source: FlowSource): void {
    this.flowSources.push(source);
  }

  /** The desired flow set (shared with later calls while nothing changed: do not modify it). */
  desiredFlows(): Flow[] {
    this.updateFlowStore(this.flowSync.store);
    return this.flowSync.store.flows();
  }

  /** Every owner of the desired flows brought up to date: the pipeline's (base, each Pod) and the sources'. */
  private updateFlowStore(store: FlowStore): void {
    if (!this.gateway) throw new Error('gateway not initialised');
    this.pipeline.update(store, {
      gatewayOfport: this.gateway.ofport,
      gatewayMac: this.gateway.mac,
      ...(this.nodeIP ? { nodeIP: this.nodeIP } : {}),
      ...(this.nodeIPv6 ? { nodeIPv6: this.nodeIPv6 } : {}),
      serviceCIDRs: this.config.serviceCIDRs,
      pods: [...this.pods.values()].map(podPortOf),
    });
    for (const source of this.flowSources) source(store);
  }

  /** GET /metrics, with the figures read from this agent at each scrape. */
  private metricsRoutes(): Record<string, () => Promise<{ code: number; body: string; contentType: string }>> {
    const metrics = this.metrics;
    if (!metrics) return {};
    metrics.setSources({
      pods: () => ({ attached: this.pods.size }),
      flowsByTable: () => {
        const byTable: Record<string, number> = {};
        if (this.gateway) for (const f of this.desiredFlows()) byTable[f.table] = (byTable[f.table] ?? 0) + 1;
        return byTable;
      },
      ovsdbReachable: () => this.ovsReachable,
      resyncs: () => ({ ...this.resyncCounts }),
      enforcement: () => this.enforcement?.metrics?.(),
      ruleStats: () => this.ruleStats(),
      meterDrops: async () => this.enforcement?.meterDrops?.(),
      chain: () => this.chainKeeper?.status(),
      adoption: () => ({ adopted: this.adoption.adopted, unattached: this.adoption.unattached.length }),
    });
    return { '/metrics': async () => ({ code: 200, body: await metrics.text(), contentType: metrics.contentType }) };
  }

  /** Per-rule statistics, or undefined when enforcement is off. */
  private async ruleStats(): Promise<RuleStatistics[] | undefined> {
    if (!this.enforcement?.ruleStats) return undefined;
    return this.enforcement.ruleStats(() => this.dumpMetricCounters());
  }

  /** The Metric tables' flows with their counters (per-rule statistics). */
  dumpMetricCounters(): Promise<string> {
    return this.ovs.dumpCounters(['EgressMetric', 'IngressMetric']);
  }

  /** MAC of the interface behind an OpenFlow port of the bridge: the gateway or a local Pod. */
  portMac(ofport: number): string | undefined {
    if (this.gateway && this.gateway.ofport === ofport) return this.gateway.mac;
    for (const p of this.pods.values()) {
      if (p.ofport === ofport) return p.mac;
      if (p.egressV4?.ofport === ofport) return p.egressV4.mac;
    }
    return undefined;
  }

  syncFlows(opts: { verify?: boolean } = {}) {
    return this.flowSync.sync((store) => this.updateFlowStore(store), opts);
  }

  private podRoutes(): { ips: string[]; hostVeth: string }[] {
    return [...this.pods.values()].map((p) => ({ ips: routedIPs(p), hostVeth: p.hostVeth }));
  }

  /**
   * Full convergence: bridge, gateway, Pod ofports, flows, host networking. Logs what it repaired.
   * Resyncs run one at a time. CNI operations wait only while Pod state is compared and repaired:
   * the OVS part (OVSDB and OpenFlow round trips) and, after the host part was read without the
   * lock (node-wide state no CNI operation touches: table 300, rules, iptables chains; then the
   * Pods' routes and veth guards in one dump each), the repair of the Pods still attached as read.
   */
  resync(reason: string): Promise<string[]> {
    const run = () => this.resyncOnce(reason);
    const result = this.resyncQueue.then(run, run);
    this.resyncQueue = result.catch(() => undefined);
    return result;
  }

  private async resyncOnce(reason: string): Promise<string[]> {
    if (this.closed) return [];
    const repairs: string[] = [];
    try {
      await this.lock.runExclusive(async () => {
        if (this.closed) return;
        repairs.push(...(await this.ovs.ensureBridge()));
        const gw = await this.ovs.ensureGateway(this.config.gateway);
        repairs.push(...gw.changes);
        this.gateway = gw.gateway;
        const ports = new Map((await this.ovs.listPodPorts()).map((r) => [r.name, r]));
        const egressPorts = await this.ovs.egressPortOfports();
        for (const pod of this.pods.values()) {
          const rec = ports.get(pod.hostVeth);
          if (!rec) {
            repairs.push(`re-attached port ${pod.hostVeth} (container ${pod.containerId})`);
            pod.ofport = await this.ovs.addPodPort(pod.hostVeth, portIds(pod));
          } else if (rec.ofport > 0 && rec.ofport !== pod.ofport) {
            repairs.push(`port ${pod.hostVeth} moved from OpenFlow port ${pod.ofport} to ${rec.ofport}`);
            pod.ofport = rec.ofport;
          }
          const e = pod.egressV4;
          if (e) {
            const egressOfport = egressPorts.get(e.hostVeth);
            if (egressOfport === undefined || egressOfport < 1) {
              repairs.push(`re-attached IPv4 egress port ${e.hostVeth} (container ${pod.containerId})`);
              e.ofport = await this.ovs.addEgressPort(e.hostVeth, egressPortIds({ ...pod, egressV4: e }));
            } else if (egressOfport !== e.ofport) {
              repairs.push(`IPv4 egress port ${e.hostVeth} moved from OpenFlow port ${e.ofport} to ${egressOfport}`);
              e.ofport = egressOfport;
            }
          }
        }
        const diff = await this.syncFlows({ verify: true });
        if (diff.add.length || diff.remove.length) repairs.push(`flows: +${diff.add.length} -${diff.remove.length}`);
        if (await this.ovs.endFlowRestoreWait()) repairs.push('flow-restore-wait ended (ovs-vswitchd was restarted over the bridge)');
      });
      if (this.closed) return repairs;
      repairs.push(...(await this.net.ensureBase()));
      const seen = [...this.pods.values()];
      const routeProblems = await this.net.podRouteProblems(seen.map(routedIPs));
      const isolated = this.config.datapath === 'netdev' ? new Set(await this.net.isolatedVeths()) : undefined;
      await this.lock.runExclusive(async () => {
        if (this.closed) return;
        for (const [i, pod] of seen.entries()) {
          // A Pod DELeted or re-ADDed since it was read: that operation set its routes and guard.
          if (this.pods.get(pod.containerId) !== pod) continue;
          repairs.push(...(await this.net.repairPodRoutes({ ips: routedIPs(pod), hostVeth: pod.hostVeth }, routeProblems[i]!)));
          for (const veth of [pod.hostVeth, ...(pod.egressV4 ? [pod.egressV4.hostVeth] : [])]) {
            if (isolated && !isolated.has(veth)) {
              await this.net.isolateHostVeth(veth);
              repairs.push(`re-isolated host veth ${veth} (container ${pod.containerId})`);
            }
          }
        }
      });
      this.ovsReachable = true;
      this.lastResync = { at: new Date().toISOString(), repairs };
      this.resyncCounts.ok++;
      this.resyncCounts.repairs += repairs.length;
      if (repairs.length) this.log.warn({ reason, repairs }, 'resync: repaired');
      else this.log.debug({ reason }, 'resync: nothing to repair');
    } catch (err) {
      this.lastResync = { at: new Date().toISOString(), repairs, error: (err as Error).message };
      this.resyncCounts.failed++;
      this.log.error({ reason, err: (err as Error).message }, 'resync: failed');
    }
    return repairs;
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
            return new Set([...pods.values()].flatMap(routedIPs));
          },
          neighbours: KEPT_NEIGHBOURS,
        };
        if (!isRepairEvent(ev, kept)) return;
        const gwIndex = ifindexOf(gateway);
        this.repairSoon(`netlink: ${describeRtEvent(ev, (i) => (i === gwIndex ? gateway : undefined))}`);
      },
      // A lost notification (ENOBUFS after a burst) could have been a removal: check everything.
      (err) => this.repairSoon(`netlink: ${err.message}`),
    );
    this.monitors = [{ kill: () => rt.close() }, this.watchMonitor('nftables', 'nft', ['monitor'], isRulesetTamperEvent)];
  }

  private repairSoon(reason: string): void {
    if (this.closed) return;
    clearTimeout(this.monitorTimer);
    this.monitorTimer = setTimeout(() => void this.resync(reason), 200);
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
      if (hit !== undefined) this.repairSoon(`${what}: ${hit.trim()}`);
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
    if (!this.gateway) return { code: 503, body: { error: 'starting: the bridge is not set up yet' } };
    if (!['TCP', 'UDP', 'ICMP'].includes(protocol)) return bad(`protocol "${protocol}": use TCP, UDP or ICMP`);
    if (protocol !== 'ICMP' && !(Number.isInteger(port) && port >= 1 && port <= 65535)) return bad(`port "${q.get('port') ?? ''}": a port 1-65535 is needed for ${protocol}`);
    if (!to) return bad('to: the destination is missing (ns/pod, service:ns/name or ip:ADDRESS)');
    const src = [...this.pods.values()].find((p) => `${p.podNamespace}/${p.podName}` === from);
    if (!src) return bad(`from "${from}": no Pod of that name is attached on ${this.config.nodeName} (traceflow runs on the source Pod's node)`);
    // The family: an ip: destination's, else ?family=4|6, else IPv4 when the source has it.
    const asked = q.get('family');
    if (asked !== null && asked !== '4' && asked !== '6') return bad(`family "${asked}": use 4 or 6`);
    const fixed = /^ip:(.*)$/.exec(to)?.[1];
    const family = fixed !== undefined ? (fixed.includes(':') ? 6 : 4) : asked ? Number(asked) : src.ips.some((a) => !a.includes(':')) ? 4 : 6;
    if (asked && Number(asked) !== family) return bad(`family ${asked}: the destination ${to} is an IPv${family} address`);
    const ip = src.ips.find((a) => a.includes(':') === (family === 6));
    if (!ip) return bad(`from "${from}": the Pod has no IPv${family} address`);
    const byPort = new Map([...this.pods.values()].map((p) => [p.ofport, `Pod ${p.podNamespace}/${p.podName} (port ${p.ofport})`]));
    const gw = this.gateway;
    const name = (ofport: number) => (ofport === gw.ofport ? `${gw.name} (port ${ofport})` : byPort.get(ofport) ?? `port ${ofport}`);
    try {
      const report = await this.enforcement.traceflow(
        { source: { pod: from, ip, mac: src.mac, ofport: src.ofport }, to, protocol: protocol as TraceProtocol, dstPort: protocol === 'ICMP' ? 0 : port },
        {
          // Cached datapath flows of the source's traffic were made without the observation flows
          // and could carry the traced packet past them: purged after each change.
          addFlows: async (text) => {
            await this.ovs.addFlows(text.split('\n').filter((l) => l.trim() !== ''));
            await this.ovs.appctl(['revalidator/purge']);
          },
          removeFlows: async () => {
            await this.ovs.deleteFlows(TRACE_COOKIE, TRACE_COOKIE_MASK);
            await this.ovs.appctl(['revalidator/purge']);
          },
        },
        name,
        gw.ofport,
      );
      return { code: 200, body: report };
    } catch (err) {
      if (err instanceof TraceError) return { code: 409, body: { error: err.message } };
      throw err;
    }
  }

  /**
   * Connects to the bridge's management socket (it exists once the bridge does) and keeps
   * reconnecting. The first flow sync waits for the connection (bounded, see Ovs.useOpenFlow); every
   * later connection means ovs-vswitchd restarted or the socket was lost: the meters are back (the
   * handshake installs them) and every flow is replayed.
   */
  private startOpenFlow(): void {
    let first = true;
    this.openflow.on('connected', () => {
      if (first) {
        first = false;
        return;
      }
      this.log.warn('openflow: reconnected to the bridge; replaying flows');
      void this.resync('openflow reconnected');
    });
    this.openflow.on('disconnected', (reason: string) => this.log.warn({ reason }, 'openflow: disconnected from the bridge'));
    this.openflow.start();
  }

  /**
   * Cheap watchdog: if OVS lost sluice's flows (ovs-vswitchd restarted), converge everything now.
   * It asks only for the number of sluice flows installed (one aggregate-statistics request); the
   * cookies are read, and compared with the desired set, only when that number differs. (A flow
   * lost while a stale one is left over keeps the count; the next sync removes the stale one, and
   * the periodic resync reads the cookies anyway.)
   */
  private async checkFlows(): Promise<void> {
    // One check at a time: while ovs-vswitchd is down each one waits for the connection (bounded).
    if (this.closed || !this.ready || this.checkingFlows) return;
    this.checkingFlows = true;
    try {
      // Changes a read of the desired set (GET /flows, metrics) brought into the store but no sync
      // applied yet are applied first, so the count compares what the bridge should hold.
      const store = this.flowSync.store;
      if (store.dirty) await this.syncFlows();
      if ((await this.ovs.installedCount()) === store.size) {
        this.ovsReachable = true;
        return;
      }
      const diff = diffFlows(store.flows(), await this.ovs.installedCookies());
      this.ovsReachable = true;
      if (diff.add.length) {
        this.log.warn({ missing: diff.add.length }, 'flows missing from the bridge (ovs-vswitchd restarted?); converging');
        await this.resync('flows missing');
      }
    } catch (err) {
      if (this.ovsReachable) this.log.error({ err: (err as Error).message }, 'flow check: OVS unreachable');
      this.ovsReachable = false;
    } finally {
      this.checkingFlows = false;
    }
  }

  status(): AgentStatus {
    return {
      ready: this.ready,
      node: this.config.nodeName,
      ...(this.nodeIP ? { nodeIP: this.nodeIP } : {}),
      bridge: this.config.bridge,
      datapath: this.config.datapath,
      ...(this.gateway ? { gateway: this.gateway } : {}),
      pods: [...this.pods.values()],
      ...(this.lastResync ? { lastResync: this.lastResync } : {}),
      ovsReachable: this.ovsReachable,
      memory: (({ rss, heapUsed, heapTotal, external }) => ({ rssMiB: mib(rss), heapUsedMiB: mib(heapUsed), heapTotalMiB: mib(heapTotal), externalMiB: mib(external) }))(process.memoryUsage()),
      ...(this.enforcement?.status ? { enforcement: this.enforcement.status() } : {}),
      ...(this.chainKeeper ? { chain: this.chainKeeper.status() } : {}),
      ...(this.kube ? { adoption: this.adoption } : {}),
    };
  }

  /**
   * Pods created while the chain was broken are adopted: looked for 2 s and 10 s after a re-chain
   * (ADDs that started before it finish, and a Pod's IP reaches the API only after its sandbox is up).
   */
  private afterRechain(file: string): void {
    for (const ms of [2000, 10_000]) setTimeout(() => void this.adoptUnattached(`re-chained ${file}`), ms).unref();
  }

  /**
   * Attaches this node's running Pods that are not attached (daemon/adoption.ts): at start-up, after
   * a re-chain and at every periodic resync. Each one is adopted under the exclusive lock (no CNI
   * operation runs meanwhile, so no ADD takes the OpenFlow port number its flows were installed
   * for). Adopted Pods and those that cannot be are named in the log, /status and an Event on the
   * Pod. Calls while one runs are folded into one more run after it.
   */
  adoptUnattached(reason: string): Promise<void> {
    if (this.adopting) {
      this.adoptAgain = reason;
      return this.adopting;
    }
    this.adopting = this.adoptOnce(reason).finally(() => {
      this.adopting = undefined;
      const again = this.adoptAgain;
      this.adoptAgain = undefined;
      if (again && !this.closed) void this.adoptUnattached(again);
    });
    return this.adopting;
  }

  private async adoptOnce(reason: string): Promise<void> {
    if (this.closed || !this.kube || !this.ready) return;
    const { log } = this;
    const node = this.config.nodeName;
    let pods: NodePod[];
    try {
      pods = await this.kube.nodePodNetworkPods(node);
    } catch (err) {
      log.warn({ reason, err: (err as Error).message }, 'adopt: could not list this node\'s Pods; unattached Pods are looked for again at the next resync');
      return;
    }
    const { entries, problems } = await readCniCache(this.config.cniCacheDir);
    if (problems.length) log.debug({ problems }, 'adopt: unusable CNI cache files');
    const attachedIps = new Set([...this.pods.values()].flatMap((p) => p.ips));
    const plan = planAdoption(pods, attachedIps, entries, existsSync, this.config.cniCacheDir);
    const cannot = [...plan.cannot];
    for (const { pod, entry } of plan.adopt) {
      const req: PodRequest = {
        containerId: entry.containerId, netns: entry.netns!, ifName: entry.ifName, podNamespace: pod.namespace, podName: pod.name,
        cniVersion: String(entry.result.cniVersion ?? '1.0.0'), networkName: entry.networkName, prevResult: entry.result, config: {},
      };
      try {
        const t0 = performance.now();
        // Attached meanwhile (its ADD went through sluice after all): nothing to adopt.
        const a = await this.lock.runExclusive(async () => (this.pods.has(req.containerId) ? undefined : this.attacher.adopt(req)));
        if (!a) continue;
        this.adoption.adopted++;
        const ms = Math.round(performance.now() - t0);
        log.warn({ reason, pod: `${pod.namespace}/${pod.name}`, containerId: a.containerId, veth: a.hostVeth, ips: a.ips, ms }, 'adopt: a running Pod that crossed no bridge is now attached; policies apply to it from now on');
        void this.event(pod, 'Normal', 'SluiceAdopted', `sluice-agent on ${node} attached this running Pod to its bridge (${reason}); network policies apply to it from now on`);
      } catch (err) {
        cannot.push({ pod, reason: (err as Error).message });
      }
    }
    const before = new Set(this.adoption.unattached.map((u) => u.pod));
    this.adoption = {
      adopted: this.adoption.adopted,
      unattached: cannot.map(({ pod, reason: why }) => ({ pod: `${pod.namespace}/${pod.name}`, reason: why })),
      lastRun: { at: new Date().toISOString(), reason },
    };
    for (const { pod, reason: why } of cannot) {
      if (before.has(`${pod.namespace}/${pod.name}`)) continue;
      log.error({ pod: `${pod.namespace}/${pod.name}`, why }, 'adopt: a running Pod crosses no bridge and cannot be attached: no policy applies to it (re-create it)');
      void this.event(pod, 'Warning', 'SluiceNotEnforced', `sluice-agent on ${node} cannot attach this Pod to its bridge, so no network policy applies to it: ${why}. Re-creating the Pod attaches it.`);
    }
  }

  private async event(obj: Omit<EventSubject, 'kind'> & { kind?: string }, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    const kind = obj.kind ?? 'Pod';
    try {
      await this.kube?.objectEvent(this.config.nodeName, { ...obj, kind }, type, reason, message);
    } catch (err) {
      this.log.warn({ object: `${kind} ${obj.namespace ? `${obj.namespace}/` : ''}${obj.name}`, reason, err: (err as Error).message }, 'could not record an Event');
    }
  }

  /**
   * A failed CNI ADD as a Warning Event on the Pod (what failed and what to check), at most one per
   * Pod a minute: the runtime retries a failed sandbox over and over.
   */
  private attachFailedEvent(req: PodRequest, err: unknown): void {
    if (!req.podNamespace || !req.podName) return;
    const key = `${req.podNamespace}/${req.podName}`;
    const now = Date.now();
    for (const [k, at] of this.attachFailedAt) if (now - at > 60_000) this.attachFailedAt.delete(k);
    if (this.attachFailedAt.has(key)) return;
    this.attachFailedAt.set(key, now);
    const e = err as { message?: string; details?: string };
    const msg = `sluice-agent on ${this.config.nodeName} could not attach the Pod's network (the runtime retries): ${e.message ?? String(err)}${e.details ? ` (${e.details})` : ''}. Check: sluicectl node status on the node, and the agent's log.`;
    void this.event({ namespace: req.podNamespace, name: req.podName }, 'Warning', 'SluiceAttachFailed', msg);
  }

  /**
   * Policy objects this node ignores as invalid, as a Warning Event on each (field and reason, as
   * `sluicectl node policies` shows them): once per object and problem while it lasts; an object
   * fixed and broken again is reported again. Cluster-scoped objects' Events go to "default".
   */
  private reportInvalidPolicies(): void {
    const report = this.enforcement?.policyReport?.() as { invalid?: { kind: string; namespace?: string | undefined; name: string; field: string; message: string }[] } | undefined;
    if (!report?.invalid || !this.kube) return;
    const now = new Set<string>();
    for (const e of report.invalid) {
      const key = JSON.stringify([e.kind, e.namespace ?? '', e.name, e.field, e.message]);
      now.add(key);
      if (this.invalidReported.has(key)) continue;
      const msg = `ignored by sluice-agent on ${this.config.nodeName} (no rule of it is enforced): ${e.field}: ${e.message}`;
      // Under the object's own apiVersion, kind and uid; the report's kind when it is gone meanwhile.
      const target = this.enforcement?.policyObject?.(e) ?? { kind: e.kind, ...(e.namespace ? { namespace: e.namespace } : {}), name: e.name };
      void this.event(target, 'Warning', 'SluiceInvalidPolicy', msg);
    }
    this.invalidReported = now;
  }

  /** Stops serving; leaves bridge, flows, ports and routes in place (restart must not disturb Pods). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.ready = false;
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.monitorTimer);
    for (const m of this.monitors) m.kill();
    this.chainKeeper?.close();
    await this.cni?.close();
    await this.enforcement?.close();
    await this.openflow.close();
    await this.health?.close();
    await this.metricsServer?.close();
    await this.hostnet?.close();
    this.podLinks.close();
    this.netnsHelper.close();
    this.ovs.close();
  }
}
