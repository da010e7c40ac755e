/**
 * sluice-agent's orchestration: the health, metrics and CNI servers, the order of start-up around
 * the node reconciler (daemon/node/reconciler.ts: OVS, flows, host networking), the timers and
 * host-change watches that trigger resyncs and the flow watchdog, adoption of running Pods,
 * Kubernetes Events, traceflow and /status. daemon/main.ts builds the parts and hands them over.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { AgentConfig } from './config.js';
import { type CniHandler, type CniServer, type GcAttachment, type PodRequest, startCniServer } from './cni/server.js';
import type { RuleStatistics } from './flows/policy/stats.js';
import type { GatewayInfo, Ovs } from './flows/ovs.js';
import type { OpenFlowController } from './flows/openflow/controller.js';
import { policiesAnswer } from './enforcement/policy-report.js';
import type { EnforcementHooks } from './enforcement/hooks.js';
import { TraceError } from './enforcement/traceflow.js';
import { TRACE_COOKIE_PREFIX, type TraceProtocol } from './flows/traceflow.js';
import { type HealthServer, startEndpoint, startHealthServer } from './health.js';
import type { AgentMetrics } from './metrics.js';
import { type HostNetwork, SERVICE_GATEWAY_IP, SERVICE_GATEWAY_IPV6 } from './hostnet/index.js';
import { isRepairEvent, isRulesetTamperEvent } from './hostnet/monitor.js';
import { describeRtEvent, ifindexOf, watchRtEvents } from './hostnet/rtevents.js';
import { type AdoptionStatus, type NodePod, planAdoption } from './adoption.js';
import { ChainKeeper, type ChainStatus } from './chainkeeper.js';
import { readCniCache } from './cni/runtime-cache.js';
import { sluiceEntry } from '../install/conflist.js';
import { type PodAttachment, type PodAttacher, routedIPs } from './cni/attacher.js';
import type { EventSubject, NodeApi } from './kube/node-api.js';
import type { SharedExclusiveLock } from './lock.js';
import type { NodeReconciler, ResyncRecord } from './node/reconciler.js';
import { collectStartupGarbage } from './node-flags.js';

/** The parts daemon/main.ts builds and the agent runs. */
export interface AgentParts {
  config: AgentConfig;
  log: Logger;
  node: NodeReconciler<NodeApi, HostNetwork>;
  attacher: PodAttacher;
  /** Shared by CNI operations, exclusive for resync repairs and adoption. */
  lock: SharedExclusiveLock;
  /** Trace observation flows and the Metric tables' counters. */
  ovs: Pick<Ovs, 'addFlows' | 'deleteFlows' | 'appctl' | 'dumpCounters'>;
  openflow: Pick<OpenFlowController, 'close'>;
  /** Policy enforcement (daemon/enforcement), when on. */
  enforcement?: EnforcementHooks | undefined;
  /** Prometheus metrics, served on /metrics (health address, and metricsAddress when configured). */
  metrics?: AgentMetrics | undefined;
  /** Start the CNI socket server (false in tests that drive the handler directly). */
  serveCni?: boolean;
  /** Closes the adapters main.ts opened (netlink sockets, helper processes, OVSDB session), last. */
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
  gateway?: GatewayInfo;
  pods: PodAttachment[];
  lastResync?: ResyncRecord;
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

export class Agent {
  readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly node: NodeReconciler<NodeApi, HostNetwork>;
  private readonly attacher: PodAttacher;
  private readonly lock: SharedExclusiveLock;
  private readonly ovs: AgentParts['ovs'];
  private readonly enforcement: EnforcementHooks | undefined;
  private readonly metrics: AgentMetrics | undefined;
  private cni?: CniServer;
  private health?: HealthServer;
  private timers: NodeJS.Timeout[] = [];
  private metricsServer?: HealthServer;
  private monitors: { kill(): unknown }[] = [];
  private chainKeeper?: ChainKeeper;
  private adoption: AdoptionStatus = { adopted: 0, unattached: [] };
  private adopting?: Promise<void> | undefined;
  private adoptAgain?: string | undefined;
  private readonly attachFailedAt = new Map<string, number>();
  private invalidReported = new Set<string>();
  private monitorTimer?: NodeJS.Timeout;
  private closed = false;

  private constructor(private readonly parts: AgentParts) {
    this.config = parts.config;
    this.log = parts.log;
    this.node = parts.node;
    this.attacher = parts.attacher;
    this.lock = parts.lock;
    this.ovs = parts.ovs;
    this.enforcement = parts.enforcement;
    this.metrics = parts.metrics;
  }

  private get pods(): Map<string, PodAttachment> {
    return this.node.pods;
  }

  private get kube(): NodeApi | undefined {
    return this.node.api;
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
      '/flows': () => (node.gateway ? { code: 200, body: node.desiredFlows() } : { code: 503, body: { error: 'starting: the bridge and gateway are not set up yet' } }),
      ...this.metricsRoutes(),
    });
    if (this.metrics && cfg.metricsAddress) this.metricsServer = await startEndpoint('metrics endpoint (metricsAddress)', cfg.metricsAddress, log, this.metricsRoutes());
    await mkdir(cfg.stateDir, { recursive: true });

    await node.startUp();

    if (serveCni) this.cni = await startCniServer(cfg.socketPath, this.handler, log, this.metrics && ((c, r, s) => this.metrics!.observeCniRequest(c, r, s)));
    node.ready = true;
    log.info({ ms: Date.now() - t0, pods: this.pods.size, nodeIP: node.nodeIP, nodeIPv6: node.nodeIPv6 }, 'startup: ready');
    // Right after the requests already waiting are served.
    setTimeout(() => collectStartupGarbage(), 0).unref();

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
      setInterval(() => void node.resync('periodic').then(() => this.adoptUnattached('periodic resync')), cfg.resyncIntervalSeconds * 1000),
      setInterval(() => void node.checkFlows(), cfg.flowCheckIntervalSeconds * 1000),
      setInterval(() => this.reportInvalidPolicies(), 10_000),
    );
    this.reportInvalidPolicies();
  }

  /** GET /metrics, with the figures read from this agent at each scrape. */
  private metricsRoutes(): Record<string, () => Promise<{ code: number; body: string; contentType: string }>> {
    const metrics = this.metrics;
    if (!metrics) return {};
    const node = this.node;
    metrics.setSources({
      pods: () => ({ attached: this.pods.size }),
      flowsByTable: () => {
        const byTable: Record<string, number> = {};
        if (node.gateway) for (const f of node.desiredFlows()) byTable[f.table] = (byTable[f.table] ?? 0) + 1;
        return byTable;
      },
      ovsdbReachable: () => node.ovsReachable,
      resyncs: () => ({ ...node.resyncCounts }),
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
    // The Metric tables' flows with their counters.
    return this.enforcement.ruleStats(() => this.ovs.dumpCounters(['EgressMetric', 'IngressMetric']));
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
    this.monitorTimer = setTimeout(() => void this.node.resync(reason), 200);
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
    const gw = this.node.gateway;
    if (!gw) return { code: 503, body: { error: 'starting: the bridge is not set up yet' } };
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

  status(): AgentStatus {
    return {
      ready: this.node.ready,
      node: this.config.nodeName,
      ...(this.node.nodeIP ? { nodeIP: this.node.nodeIP } : {}),
      bridge: this.config.bridge,
      datapath: this.config.datapath,
      ...(this.node.gateway ? { gateway: this.node.gateway } : {}),
      pods: [...this.pods.values()],
      ...(this.node.lastResync ? { lastResync: this.node.lastResync } : {}),
      ovsReachable: this.node.ovsReachable,
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
    if (this.closed || !this.kube || !this.node.ready) return;
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
    this.node.close();
    for (const t of this.timers) clearInterval(t);
    clearTimeout(this.monitorTimer);
    for (const m of this.monitors) m.kill();
    this.chainKeeper?.close();
    await this.cni?.close();
    await this.enforcement?.close();
    await this.parts.openflow.close();
    await this.health?.close();
    await this.metricsServer?.close();
    await this.node.hostNetwork?.close();
    this.parts.closeAdapters();
  }
}
