/**
 * Policy enforcement in the agent, the coordinator of its parts: API objects and local attachments
 * -> PolicyEngine (intake.ts) -> PolicyFlows, compiled and applied when the flush scheduler says
 * (flush-scheduler.ts) -> the agent's FlowStore, written only by the policy flow writer at the
 * agent's flow sync (policy-flow-writer.ts); plus the packet-in loop (packet-in.ts), new Pods'
 * realization (realization.ts, newpods/), open connections a change denies (conntrack/), rule
 * statistics (rulestats.ts), traceflow and the status figures (status.ts).
 *
 * Consistency: the engine is updated synchronously per event; the flow compile and the bridge
 * bundle follow, and whatever bundle the agent applies (a flush, a CNI ADD, a resync) first
 * compiles every change received so far, so each applied state is the engine's state at one moment.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Flow } from '../flows/flow.js';
import type { FlowStore } from '../flows/store.js';
import type { OpenFlowController } from '../ovs/openflow/index.js';
import type { PacketOut } from '../ovs/openflow/wire.js';
import { PolicyFlows, policyFlowInput, type RuleStatistics } from '../flows/policy/index.js';
import { RuleStatsKeeper } from './rulestats.js';
import { PolicyEngine } from '../policy/engine.js';
import type { KubeObject } from '../policy/types.js';
import type { PodAttachment } from '../node/attachment.js';
import { ClusterWatch, type WatchEvent } from './watch/clusterwatch.js';
import { SERVICE_CIDR_RESOURCE } from './watch/resources.js';
import { buildPolicyReport, type PolicyReport } from './policy-report.js';
import { podRefKey } from './podview.js';
import { type Clock, realClock } from '../clock.js';
import { ConnectionSweeper, type ConntrackIo } from './conntrack/index.js';
import { askPeer, NewPodGate, type PodQuestion, PUBLICATION_PATCH_TYPE, publicationPatch, publicationPath } from './newpods/index.js';
import { newPodGuardFlows } from '../flows/newpod-guard.js';
import { cutConnectionFlows } from '../flows/cut-connections.js';
import type { DnsLearning } from './dns-learning.js';
import { LocalEgressSources } from './egress-sources.js';
import { FlushScheduler } from './flush-scheduler.js';
import { PolicyIntake } from './intake.js';
import { PacketInDispatch } from './packet-in.js';
import { PolicyFlowWriter } from './policy-flow-writer.js';
import { KeptVersions } from './kept-versions.js';
import { Realization } from './realization.js';
import { type EnforcementParts, enforcementMetrics, type EnforcerStatus, enforcerStatus } from './status.js';
import { type TraceBridge, traceContext, traceDestination, type TraceReport, type TraceRequest, Tracer } from './traceflow.js';
import { observeRoutes, type ObserveRoute, remoteObserver } from './trace-observers.js';
import type { EnforcementMetrics } from '../metrics.js';

export type { DnsLearning, DnsPuntHook } from './dns-learning.js';
export type { EnforcerStatus } from './status.js';
export { CUT_CONNECTIONS_OWNER, DNS_INTERCEPT_OWNER, NEW_POD_GUARD_OWNER, POLICY_OWNER } from './policy-flow-writer.js';

export interface EnforcerOptions {
  nodeName: string;
  kubeconfig?: string;
  ovsRunDir: string;
  bridge: string;
  auditLogPath?: string;
  log: Logger;
  /** Least time between two applies during a burst of changes (flush-scheduler.ts). */
  debounceMs?: number;
  /** Timers of the flush scheduling and realization waits (tests step a manual clock). */
  clock?: Clock;
  dns?: DnsLearning;
  /** Each committed batch of API changes: seconds from its first change to the flows on the bridge. */
  onRealized?: (seconds: number) => void;
  /** Where per-rule counts carried across counter-flow changes are kept (survives an agent restart). */
  stateDir?: string;
  /**
   * Open connections a change now denies are cut (conntrack/). `keepNetworkPolicy`: those only
   * Kubernetes NetworkPolicy isolation denies stay open (that kind's connection-based semantics).
   */
  connections?: { datapath: 'system' | 'netdev'; keepNetworkPolicy: boolean };
  /** Each conntrack sweep that cut connections (metrics). */
  onConnectionsCut?: (count: number) => void;
  /**
   * New Pods (newpods/gate.ts): the port every agent answers realization questions on, and how long
   * an ADD waits for the answers before it guards the nodes that did not give them.
   */
  newPods?: { realizationPort: number; confirmWithinMs?: number };
}

export class Enforcer {
  readonly engine: PolicyEngine;
  readonly policyFlows = new PolicyFlows();
  private readonly clock: Clock;
  private readonly tracer = new Tracer();
  private readonly stats: RuleStatsKeeper;
  private readonly intake: PolicyIntake;
  private readonly egressSources: LocalEgressSources;
  private readonly flusher: FlushScheduler;
  private readonly writer: PolicyFlowWriter;
  /** The last valid versions of objects invalid now, kept across a restart. */
  private readonly kept: KeptVersions;
  private readonly packetIn: PacketInDispatch;
  private readonly realization: Realization;
  private watch?: ClusterWatch;
  private sweeper?: ConnectionSweeper;
  /** Start-up's first sync is on the bridge. */
  private bridgeSynced = false;
  private closed = false;
  /** Called after each ServiceCIDR event (the node follows the ranges). */
  onServiceCidrs?: () => void;
  readonly newPods?: NewPodGate;

  constructor(private readonly opts: EnforcerOptions) {
    const { log } = opts;
    const engine = new PolicyEngine({
      nodeName: opts.nodeName,
      log: (e) => log.warn({ kind: e.kind, namespace: e.namespace, name: e.name, field: e.field, err: e.message }, 'policy: invalid object ignored'),
    });
    this.engine = engine;
    this.clock = opts.clock ?? realClock;
    this.stats = new RuleStatsKeeper(this.policyFlows, { stateDir: opts.stateDir, log });
    this.kept = new KeptVersions(opts.stateDir && join(opts.stateDir, 'kept-policies.json'), log);
    this.egressSources = new LocalEgressSources(() => policyFlowInput(engine));
    this.writer = new PolicyFlowWriter({
      policy: () => this.policyFlows.flows(),
      policyCountByTable: () => this.policyFlows.countByTable(),
      dnsIntercept: () => opts.dns?.interceptFlows(engine),
      newPodGuards: () => this.newPods && newPodGuardFlows(this.newPods.guarded()),
      // Blocked connections are a flow owner of this side: blocking is a flow sync.
      cutConnections: () => this.sweeper && cutConnectionFlows(this.sweeper.blocked()),
    });
    this.flusher = new FlushScheduler({
      rules: engine,
      clock: this.clock,
      minIntervalMs: opts.debounceMs ?? 20,
      log,
      compile: (dirty) => {
        this.writer.compiled(this.policyFlows.sync(this.egressSources.input(), dirty));
      },
      flowCount: () => this.policyFlows.size,
      deliveredResourceVersion: () => this.watch?.deliveredResourceVersion(),
      committed: () => {
        // The denying flows are on the bridge: connections they deny can go.
        this.sweeper?.request();
        this.realization.poke();
      },
      onRealized: opts.onRealized,
    });
    this.intake = new PolicyIntake({
      engine,
      nodeName: opts.nodeName,
      log,
      changed: (cs) => {
        this.flusher.changed(cs);
        // An invalid update may change no rule (its last valid version stays): written here, not at the compile.
        if (engine.keptVersionsChanged) this.kept.save(engine.keptVersions());
      },
      changes: () => this.flusher.changes,
      podsChanged: () => this.realization.poke(),
      serviceCidrsChanged: () => this.onServiceCidrs?.(),
      seedFor: (o) => this.kept.seedFor(o),
    });
    this.packetIn = new PacketInDispatch({
      fqdnPolicy: engine,
      tracer: this.tracer,
      describe: (id) => this.policyFlows.describe(id),
      dns: opts.dns,
      learned: (cs) => {
        this.flusher.changed(cs);
        // A held DNS response waits for this apply: no minimum interval.
        this.flusher.requestUrgent();
      },
      auditLogPath: opts.auditLogPath,
      log,
    });
    this.realization = new Realization({
      engine,
      clock: this.clock,
      bridgeSynced: () => this.bridgeSynced,
      addressOwner: (ip) => this.intake.addressOwner(ip),
      podFedAt: (ref) => this.intake.podFedAt(ref),
      committedChanges: () => this.flusher.committedChanges,
      settled: () => this.flusher.settled,
    });
    const np = opts.newPods;
    if (np) {
      this.newPods = new NewPodGate({
        nodeName: opts.nodeName,
        span: (namespace, name) => engine.podSpan(namespace, name),
        peerAddress: (node) => engine.cluster.nodes.get(node)?.ips[0],
        publish: (pod) => this.publishAddresses(pod, np.confirmWithinMs ?? 2000),
        ask: (address, pod, waitMs) => askPeer(address, np.realizationPort, pod, waitMs),
        applyFlows: () => this.flusher.applyNow(),
        clock: this.clock,
        log,
        confirmWithinMs: np.confirmWithinMs ?? 2000,
      });
    }
  }

  // ------------------------------------------------------------------ inputs

  /** Starts the informers (returns at once; see waitSynced). */
  async startWatch(tuning: { retryMs?: number; maxRetryMs?: number } = {}): Promise<void> {
    const { log } = this.opts;
    this.watch = await ClusterWatch.start({ ...(this.opts.kubeconfig ? { kubeconfig: this.opts.kubeconfig } : {}), log, onEvent: (ev) => this.onWatchEvent(ev), ...tuning });
  }

  /** The informers (status, relist count). */
  get clusterWatch(): ClusterWatch | undefined {
    return this.watch;
  }

  /**
   * The cluster's ServiceCIDR objects, or undefined when it does not serve the kind; waits until
   * their list is in (start-up needs the Service ranges before the node's first flows).
   */
  async serviceCidrObjects(): Promise<KubeObject[] | undefined> {
    if (!this.watch) return undefined;
    const { served } = await this.watch.waitListed(SERVICE_CIDR_RESOURCE);
    return served ? this.intake.serviceCidrObjects() : undefined;
  }

  /** The ServiceCIDR objects as the informer has them now (undefined: not served, or not listed yet). */
  currentServiceCidrObjects(): KubeObject[] | undefined {
    const s = this.watch?.status().find((x) => x.resource === SERVICE_CIDR_RESOURCE.path);
    return s?.synced && !s.absent ? this.intake.serviceCidrObjects() : undefined;
  }

  /** Waits until every resource has been listed once, logging what is still missing. */
  async waitSynced(): Promise<void> {
    if (!this.watch) return;
    const t0 = Date.now();
    const tick = setInterval(() => this.opts.log.warn({ pending: this.watch?.pending(), waitedMs: Date.now() - t0 }, 'startup: waiting for the initial lists of policy inputs'), 5000);
    try {
      await this.watch.waitSynced();
    } finally {
      clearInterval(tick);
    }
    const compileStart = Date.now();
    this.compileNow();
    const w = this.watch;
    this.opts.log.info(
      {
        // From the informers' start to the last initial list; waited: how long start-up still waited for it.
        listedMs: w?.syncedAt !== undefined ? w.syncedAt - w.startedAt : undefined,
        waitedMs: compileStart - t0,
        // The one full compile of everything the lists brought.
        compileMs: Date.now() - compileStart,
        rules: this.engine.nodeRuleSet().length,
        policyFlows: this.policyFlows.size,
        invalid: this.engine.errors().length,
      },
      'startup: policy inputs listed',
    );
  }

  /** One object event (from the informers, or tests). */
  onWatchEvent(ev: WatchEvent): void {
    this.intake.onWatchEvent(ev);
  }

  /** Brings the compiled policy flows to the engine's current state (pure, synchronous). */
  compileNow(): void {
    this.flusher.compileNow();
  }

  // ------------------------------------------------------------------ flows

  /**
   * The agent's flow source, the one path into its FlowStore: compiles what changed, then writes
   * the policy side's owners (policy-flow-writer.ts).
   */
  writeFlows(store: FlowStore): void {
    this.compileNow();
    this.writer.write(store);
  }

  /** Policy flows of the engine's current state (+ DNS interception, new-Pod guards, blocked connections), in one list. */
  flows(): Flow[] {
    this.compileNow();
    return this.writer.flows();
  }

  /** A packet-out on the bridge's controller connection (false: not connected or backlogged). */
  packetOut(po: PacketOut): boolean {
    return this.packetIn.packetOut(po);
  }

  // ------------------------------------------------------------------ local Pods (CNI)

  /**
   * CNI ADD, before the Pod's flows are installed: the engine learns the Pod with its IPs (and its
   * labels from the API, read now if the informer has not shown it yet), so the same bundle that
   * makes the Pod reachable carries its policy flows.
   */
  async podAttaching(pod: PodAttachment): Promise<void> {
    if (!pod.podName) return;
    await this.intake.attaching({ ...pod, podName: pod.podName }, this.watch?.access);
    this.setEgressSource(pod, true);
    this.compileNow();
  }

  /**
   * CNI ADD, after the Pod's flows are on the bridge and before the ADD answers (the runtime starts
   * its containers after that): the other nodes know its addresses, or it is guarded from those that
   * do not (newpods/gate.ts).
   */
  async podStarting(pod: PodAttachment): Promise<void> {
    if (!pod.podName || !this.newPods || pod.ips.length === 0) return;
    // A reused address: the nodes of its previous owner's rules must have let go of it too.
    const previous = this.intake.previousSpans(podRefKey(pod.podNamespace, pod.podName), pod.ips);
    const out = await this.newPods.admit({ namespace: pod.podNamespace, name: pod.podName, ips: pod.ips }, previous);
    if (out.span.length > 0) this.opts.log.info({ pod: `${pod.podNamespace}/${pod.podName}`, ...out }, 'new Pod: span asked');
  }

  /** Publishes a local Pod's addresses in the API (its status condition; newpods/publication.ts). */
  private async publishAddresses(pod: PodQuestion, timeoutMs: number): Promise<void> {
    const access = this.watch?.access;
    if (!access) throw new Error('no API connection');
    await access.patchJson(publicationPath(pod), publicationPatch(pod, new Date()), PUBLICATION_PATCH_TYPE, timeoutMs);
  }

  /** Pod `q` is enforced on this bridge at every address of `q.ips` (realization.ts). */
  podRealized(q: PodQuestion): boolean {
    return this.realization.podRealized(q);
  }

  /** Resolves true as soon as podRealized(q), false after `waitMs` without it. */
  whenPodRealized(q: PodQuestion, waitMs: number): Promise<boolean> {
    return this.realization.whenPodRealized(q, waitMs);
  }

  /** GET /realized on the realization endpoint (newpods/peers.ts). */
  realizedAnswer(query: URLSearchParams): Promise<{ code: number; body: unknown }> {
    return this.realization.answer(query);
  }

  /** Local attachments found at start-up (before the first sync). */
  localPodsAtStart(pods: PodAttachment[]): void {
    for (const p of pods) {
      if (!p.podName) continue;
      this.intake.attached({ ...p, podName: p.podName });
      this.setEgressSource(p, true);
    }
  }

  podDetached(pod: PodAttachment): void {
    if (!pod.podName) return;
    this.newPods?.forget(pod.podNamespace, pod.podName);
    this.intake.detached({ ...pod, podName: pod.podName });
    this.setEgressSource(pod, false);
  }

  /** The Pod's IPv4 egress address as a source of its egress (egress-sources.ts); its egress rules are compiled again when it changed. */
  private setEgressSource(pod: PodAttachment, attached: boolean): void {
    const dirty = this.egressSources.set(pod, attached);
    if (dirty) this.flusher.markDirty(dirty);
  }

  // ------------------------------------------------------------------ bridge side

  /**
   * Takes the packet-in path on the agent's OpenFlow connection (which installs the punt meters,
   * replays flows when it reconnects, and is closed by the agent) and hands the enforcer the agent's
   * flow sync. Waits for the connection up to `connectTimeoutMs` (packet-in.ts).
   */
  async attach(opts: {
    controller: OpenFlowController;
    applyFlows: () => Promise<unknown>;
    /** MAC of what is behind an OpenFlow port (gateway, local Pod), for reject replies. */
    portMac: (ofport: number) => string | undefined;
    /** The bridge's conntrack zone: connections a change denies are cut there. */
    conntrack?: ConntrackIo;
    connectTimeoutMs?: number;
  }): Promise<void> {
    if (opts.conntrack) this.watchConnections(opts.conntrack);
    await this.packetIn.start(opts.controller, opts.portMac, { connectTimeoutMs: opts.connectTimeoutMs, socket: `${this.opts.ovsRunDir}/${this.opts.bridge}.mgmt` });
    this.bindFlows(opts.applyFlows);
  }

  /**
   * From now on every engine change is compiled and applied (debounced) with `applyFlows`, and
   * learned DNS names expire. attach() calls it; tests without a bridge call it alone.
   */
  bindFlows(applyFlows: () => Promise<unknown>): void {
    const dns = this.opts.dns;
    if (dns) dns.setPacketOut((po) => this.packetOut(po));
    const apply = dns ? dns.wrapApply(applyFlows) : applyFlows;
    dns?.startExpiry(this.engine, (cs) => this.flusher.changed(cs));
    this.flusher.bind(apply);
  }

  /** Cuts, after each policy apply, the open connections the policy now denies (conntrack/). */
  watchConnections(io: ConntrackIo): void {
    const { log, nodeName } = this.opts;
    const settings = this.opts.connections ?? { datapath: 'system', keepNetworkPolicy: false };
    this.sweeper = new ConnectionSweeper({
      // Blocked connections are a flow owner of this side (writeFlows): blocking is a flow sync.
      io: {
        dump: () => io.dump(),
        flush: (tuple) => io.flush(tuple),
        block: () => this.flusher.applyNow().then(() => undefined),
      },
      policy: {
        explain: (probe) => this.engine.explain(probe),
        isLocalPod: (ref) => this.engine.cluster.pods.get(ref)?.nodeName === nodeName,
        isServiceIp: (ip) => this.engine.cluster.serviceByIp.has(ip),
      },
      datapath: settings.datapath,
      keepNetworkPolicy: settings.keepNetworkPolicy,
      stateFile: this.opts.stateDir && join(this.opts.stateDir, 'cut-connections.json'),
      log,
      onSwept: ({ cut }) => {
        if (cut) this.opts.onConnectionsCut?.(cut);
      },
    });
  }

  /** Start-up's first sync is on the bridge: connections opened before (under another policy) are judged. */
  flowsConverged(): void {
    this.bridgeSynced = true;
    this.sweeper?.request();
    this.realization.poke();
  }

  /** Resolves when no conntrack sweep runs or is due (tests). */
  connectionsSettled(): Promise<void> {
    return this.sweeper?.idle() ?? Promise.resolve();
  }

  // ------------------------------------------------------------------ what is shown

  private get parts(): EnforcementParts {
    const { engine } = this;
    return {
      policy: { synced: this.watch?.isSynced() ?? false, rules: engine.nodeRuleSet().length, isolations: engine.nodeIsolations().length, errors: engine.errors().length },
      policyFlowCount: this.policyFlows.size,
      watch: this.watch,
      flusher: this.flusher,
      packetIn: this.packetIn,
      dns: this.opts.dns,
      sweeper: this.sweeper,
      newPods: this.newPods,
    };
  }

  status(): EnforcerStatus {
    // See EnforcerStatus.resourceVersion: absent until start-up's first sync is on the bridge.
    const rv = this.bridgeSynced ? this.flusher.enforcedResourceVersion() : undefined;
    return enforcerStatus(this.parts, rv);
  }

  /** Figures for /metrics. */
  metrics(): EnforcementMetrics {
    return enforcementMetrics(this.parts);
  }

  /** Per-rule statistics: the counter flows of every enforced rule, read from `dump` (the Metric tables). */
  ruleStats(dump: () => Promise<string>): Promise<RuleStatistics[]> {
    return this.stats.ruleStats(dump);
  }

  /** Packets each packet-in meter dropped on the bridge, by what the meter limits. */
  meterDrops(): Promise<Record<string, number>> {
    return this.packetIn.meterDrops();
  }

  /**
   * Traces a real packet from a local Pod through the bridge (sluicectl node traceflow), and through
   * the bridge of the Node it leaves for, whose agent observes it (trace-observers.ts).
   */
  async traceflow(req: Omit<TraceRequest, 'destination'>, bridge: TraceBridge): Promise<TraceReport> {
    const destination = traceDestination(this.engine.cluster, req.to, req.source.ip.includes(':') ? 6 : 4, this.opts.nodeName);
    const port = this.opts.newPods?.realizationPort;
    const observers = port === undefined ? [] : destination.nodes.map((n) => remoteObserver(n, port));
    const ctx = traceContext(bridge, (id) => this.policyFlows.describe(id));
    return this.tracer.trace({ ...req, destination }, { ...bridge.io, packetOut: (po) => this.packetOut(po) }, ctx, observers, this.opts.nodeName);
  }

  /** The routes another Node's trace asks this agent to observe on its bridge with. */
  traceObserveRoutes(bridge: () => TraceBridge | undefined): Record<string, ObserveRoute> {
    return observeRoutes(this.tracer, bridge, (id) => this.policyFlows.describe(id));
  }

  /** The API object behind an invalid-object report (for its Event). */
  policyObject(e: { kind: string; namespace?: string | undefined; name: string }) {
    return this.engine.involvedObject(e);
  }

  /** What this node enforces per policy and which objects were ignored as invalid (GET /policies). */
  policyReport(): PolicyReport {
    const localPods: string[] = [];
    for (const p of this.engine.cluster.pods.values()) if (p.nodeName === this.opts.nodeName && !p.hostNetwork) localPods.push(`${p.namespace}/${p.name}`);
    return buildPolicyReport({
      node: this.opts.nodeName,
      synced: this.watch?.isSynced() ?? false,
      rules: this.engine.nodeRuleSet(),
      isolations: this.engine.nodeIsolations(),
      errors: this.engine.errors(),
      warnings: this.engine.warnings(),
      localPods,
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.newPods?.close();
    this.realization.close();
    this.flusher.close();
    this.sweeper?.close();
    await this.sweeper?.idle();
    await this.watch?.stop();
    this.opts.dns?.close();
    this.packetIn.close();
  }
}
