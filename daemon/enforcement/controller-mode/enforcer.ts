/**
 * Policy enforcement in controller mode: the agent holds no PolicyEngine and watches no cluster
 * object of others. sluice-controller computes the groups once for the whole cluster and serves
 * this Node its span; the follower (follower.ts) turns those streams into the same node rule set
 * and ChangeSets the engine gives in standalone mode, so from there on everything is shared with
 * standalone enforcement: the flush scheduler, the flow compiler, the one flow writer, the
 * packet-in loop, rule statistics, the conntrack sweep (judged from the node's own rules:
 * policy/node-verdict.ts), new Pods' guards.
 *
 * From the API server the agent reads only the ServiceCIDRs (its Service ranges) and writes its
 * own Pods' published addresses (the controller learns a new Pod's address from them).
 *
 * When the controller is unreachable the last state received stays enforced (nothing is ever
 * flushed towards allow), /status, a metric and an Event say so, and the watcher resumes (or lists
 * again and the relisted state is applied as one change) when it is back. New Pods started
 * meanwhile are isolated until the controller confirms their state (new-pods.ts).
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { type Clock, Pauses, realClock } from '../../clock.js';
import { type ControllerAccess, ControlPlaneWatcher, type ControlPlaneConnection, type ControlPlaneWatcherOptions, postTraceResult, takeTraceTask } from '../../controlplane/client.js';
import type { RealizedReporterStatus } from '../../controlplane/realized-reporter.js';
import type { PodRealization, TraceTask, ViewVersions } from '../../controlplane/types.js';
import { cutConnectionFlows } from '../../flows/cut-connections.js';
import { newPodGuardFlows } from '../../flows/newpod-guard.js';
import { PolicyFlows, type PolicyFlowInput, type RuleStatistics } from '../../flows/policy/index.js';
import type { FlowStore } from '../../flows/store.js';
import type { EnforcementMetrics } from '../../metrics.js';
import type { PodAttachment } from '../../node/attachment.js';
import type { OpenFlowController } from '../../ovs/openflow/index.js';
import { cidrContainsIp, parseCidr, parseIp } from '../../policy/cidr.js';
import { NodeVerdicts, toSideDecision } from '../../policy/node-verdict.js';
import { emptyChangeSet } from '../../policy/internal.js';
import type { KubeObject, Probe } from '../../policy/types.js';
import { ConditionWaiters } from '../condition-waiters.js';
import type { DnsLearning, FqdnPolicy } from '../dns-learning.js';
import { type ConnectionPolicy, ConnectionSweeper, type ConntrackIo } from '../conntrack/index.js';
import { LocalEgressSources } from '../egress-sources.js';
import { FlushScheduler } from '../flush-scheduler.js';
import { askPeer, parseQuestion, PUBLICATION_PATCH_TYPE, publicationPatch, publicationPath, type PodQuestion } from '../newpods/index.js';
import { PacketInDispatch } from '../packet-in.js';
import { buildPolicyReport, type PolicyReport } from '../policy-report.js';
import { PolicyFlowWriter } from '../policy-flow-writer.js';
import { RuleStatsKeeper } from '../rulestats.js';
import { type EnforcementParts, enforcementMetrics, type EnforcerStatus, enforcerStatus } from '../status.js';
import { addressTarget, type TraceBridge, traceContext, type TraceDestination, type TraceReport, type TraceRequest, TraceError, Tracer } from '../traceflow.js';
import { observeRoutes, type ObserveRoute, remoteObserver } from '../trace-observers.js';
import { ClusterWatch } from '../watch/clusterwatch.js';
import { SERVICE_CIDR_RESOURCE } from '../watch/resources.js';
import { ControlPlaneFollower } from './follower.js';
import { ControlledPodAdmission } from './new-pods.js';

export interface ControllerModeOptions {
  nodeName: string;
  kubeconfig?: string;
  ovsRunDir: string;
  bridge: string;
  auditLogPath?: string;
  log: Logger;
  debounceMs?: number;
  clock?: Clock;
  onRealized?: (seconds: number) => void;
  stateDir?: string;
  connections?: { datapath: 'system' | 'netdev'; keepNetworkPolicy: boolean };
  onConnectionsCut?: (count: number) => void;
  /** The controller's API, how to reach it and how to authenticate to it. */
  controller: ControllerAccess;
  /** Tests: watcher tuning (backoff, timeouts). */
  watcherTuning?: Partial<Pick<ControlPlaneWatcherOptions, 'initialBackoffMs' | 'maxBackoffMs' | 'idleTimeoutMs' | 'requestTimeoutMs'>>;
  newPods?: { realizationPort: number; confirmWithinMs?: number };
  /** The controller's answer to a new Pod's question (the controlplane client; tests inject one). */
  askController?: (pod: PodQuestion, waitMs: number, confirmMs?: number) => Promise<PodRealization | undefined>;
  /** Told the view versions this Node's bridge enforces, each time they advance (the controlplane's RealizedReporter). */
  realizedViews?: { set(store: string, versions: ViewVersions): void; status?(): RealizedReporterStatus; stop?(): Promise<void> };
  /** The Service ranges in use (connections to them are judged as Service connections). */
  serviceRanges?: () => readonly string[];
  /** FQDN learning (enforcement/fqdn): the names this Node's Pods resolve become members of the fqdn groups the controller sends. */
  dns?: DnsLearning;
  /** Where a trace's destination leads, as the controller sees the cluster (the controlplane client; tests inject one). */
  traceDestination?: (to: string, family: 4 | 6) => Promise<TraceDestination>;
  /** The connection to the controller changed (the agent's Event). */
  onControlPlane?: (state: ControlPlaneConnection, reason: string) => void;
}

export class ControllerModeEnforcer {
  readonly policyFlows = new PolicyFlows();
  readonly follower: ControlPlaneFollower;
  private readonly clock: Clock;
  private readonly tracer = new Tracer();
  /** Ends the long poll for the controller's traces (close). */
  private readonly traceTasksStop = new AbortController();
  private readonly pauses: Pauses;
  /**
   * What DNS learning reads and changes: the followed state. A learned change is enforced at once
   * when nothing received from the controller is held back, else with the controller's next
   * consistent commit (an empty ChangeSet now: the held response is released unchanged).
   */
  readonly fqdnPolicy: FqdnPolicy = {
    setFqdnAddresses: (updates) => {
      this.follower.state.setFqdnAddresses(updates);
      return this.follower.localChange() ?? emptyChangeSet();
    },
    fqdnPatterns: () => this.follower.state.fqdnPatterns(),
    fqdnTargetPodIps: () => this.follower.state.fqdnTargetPodIps(),
  };
  private readonly stats: RuleStatsKeeper;
  private readonly egressSources: LocalEgressSources;
  private readonly flusher: FlushScheduler;
  private readonly writer: PolicyFlowWriter;
  private readonly packetIn: PacketInDispatch;
  private readonly watcher: ControlPlaneWatcher;
  private readonly waiters: ConditionWaiters;
  private readonly localPods = new Map<string, PodAttachment>();
  private readonly serviceCidrs = new Map<string, KubeObject>();
  readonly newPods?: ControlledPodAdmission;
  private api?: ClusterWatch;
  private sweeper?: ConnectionSweeper;
  private verdicts?: { rules: unknown; isolations: unknown; v: NodeVerdicts };
  private bridgeSynced = false;
  private closed = false;
  onServiceCidrs?: () => void;

  constructor(private readonly opts: ControllerModeOptions) {
    const { log } = opts;
    this.clock = opts.clock ?? realClock;
    this.pauses = new Pauses(this.clock);
    this.waiters = new ConditionWaiters(this.clock);
    this.stats = new RuleStatsKeeper(this.policyFlows, { stateDir: opts.stateDir, log });
    this.follower = new ControlPlaneFollower({
      nodeName: opts.nodeName,
      clock: this.clock,
      log,
      changed: (cs) => this.flusher.changed(cs),
      changes: () => this.flusher.changes,
      committedChanges: () => this.flusher.committedChanges,
      afterCommit: () => this.waiters.poke(),
      onConnection: (state, reason) => {
        if (state === 'connected') log.info('controller mode: following the controller');
        else log.warn({ reason }, 'controller mode: the controller is not followed; the last state received stays enforced');
        opts.onControlPlane?.(state, reason);
      },
    });
    const state = this.follower.state;
    const base = (): PolicyFlowInput => ({ rules: state.nodeRuleSet(), isolations: state.nodeIsolations(), serviceEndpoints: (ip, protocol, port) => state.serviceBackends(ip, protocol, port) });
    this.egressSources = new LocalEgressSources(base);
    this.writer = new PolicyFlowWriter({
      policy: () => this.policyFlows.flows(),
      policyCountByTable: () => this.policyFlows.countByTable(),
      dnsIntercept: () => opts.dns?.interceptFlows(this.fqdnPolicy),
      newPodGuards: () => this.newPods && newPodGuardFlows(this.newPods.guarded()),
      cutConnections: () => this.sweeper && cutConnectionFlows(this.sweeper.blocked()),
    });
    this.flusher = new FlushScheduler({
      rules: state,
      clock: this.clock,
      minIntervalMs: opts.debounceMs ?? 20,
      log,
      compile: (dirty) => this.writer.compiled(this.policyFlows.sync(this.egressSources.input(), dirty)),
      flowCount: () => this.policyFlows.size,
      deliveredResourceVersion: () => undefined,
      committed: () => {
        this.sweeper?.request();
        this.waiters.poke();
        this.reportRealized();
      },
      onRealized: opts.onRealized,
    });
    this.packetIn = new PacketInDispatch({
      fqdnPolicy: this.fqdnPolicy,
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
    this.watcher = new ControlPlaneWatcher({
      ...opts.controller,
      nodeName: opts.nodeName,
      onSync: (kind, items) => this.follower.onSync(kind, items),
      onEvent: (kind, e) => this.follower.onEvent(kind, e),
      onState: (s, reason) => this.follower.onState(s, reason),
      onStoreChange: (store) => this.follower.onStoreChange(store),
      clock: this.clock,
      log,
      ...opts.watcherTuning,
    });
    this.follower.bind(this.watcher);
    const np = opts.newPods;
    const ask = opts.askController;
    if (np && ask) {
      const confirmWithinMs = np.confirmWithinMs ?? 2000;
      this.newPods = new ControlledPodAdmission({
        nodeName: opts.nodeName,
        clock: this.clock,
        log,
        confirmWithinMs,
        publish: (pod) => this.publishAddresses(pod, confirmWithinMs),
        askController: ask,
        whenLocalRealized: (v, waitMs) => this.whenRealized(v, waitMs),
        askPeer: (address, pod, waitMs, versions) => askPeer(address, np.realizationPort, pod, waitMs, versions),
        applyFlows: () => this.flusher.applyNow(),
      });
    }
  }

  // ------------------------------------------------------------------ inputs

  /** Starts following the controller, and the API server's ServiceCIDRs (returns at once). */
  async start(): Promise<void> {
    this.watcher.start();
    this.api = await ClusterWatch.start({
      ...(this.opts.kubeconfig ? { kubeconfig: this.opts.kubeconfig } : {}),
      log: this.opts.log,
      resources: [SERVICE_CIDR_RESOURCE],
      onEvent: (ev) => {
        if (ev.type === 'upsert') this.serviceCidrs.set(ev.object.metadata.name, ev.object);
        else this.serviceCidrs.delete(ev.object.metadata.name);
        this.onServiceCidrs?.();
      },
    });
  }

  /** The ServiceCIDRs' informer (status, relists). */
  get clusterWatch(): ClusterWatch | undefined {
    return this.api;
  }

  async serviceCidrObjects(): Promise<KubeObject[] | undefined> {
    if (!this.api) return undefined;
    const { served } = await this.api.waitListed(SERVICE_CIDR_RESOURCE);
    return served ? [...this.serviceCidrs.values()] : undefined;
  }

  currentServiceCidrObjects(): KubeObject[] | undefined {
    const s = this.api?.status().find((x) => x.resource === SERVICE_CIDR_RESOURCE.path);
    return s?.synced && !s.absent ? [...this.serviceCidrs.values()] : undefined;
  }

  /** Waits until the controller's state is in (connected, every kind listed, consistent), logging while it waits. */
  async waitSynced(): Promise<void> {
    const t0 = Date.now();
    const tick = setInterval(() => this.opts.log.warn({ waitedMs: Date.now() - t0, controlPlane: this.follower.status(this.opts.controller.server) }, 'startup: waiting for the controller\'s state'), 5000);
    try {
      await this.follower.whenSynced();
    } finally {
      clearInterval(tick);
    }
    const compileStart = Date.now();
    this.flusher.compileNow();
    this.opts.log.info({ waitedMs: compileStart - t0, compileMs: Date.now() - compileStart, rules: this.follower.state.nodeRuleSet().length, policyFlows: this.policyFlows.size }, 'startup: the controller\'s state is in');
  }

  // ------------------------------------------------------------------ flows

  writeFlows(store: FlowStore): void {
    this.flusher.compileNow();
    this.writer.write(store);
  }

  // ------------------------------------------------------------------ local Pods (CNI)

  async podAttaching(pod: PodAttachment): Promise<void> {
    if (!pod.podName) return;
    this.localPods.set(`${pod.podNamespace}/${pod.podName}`, pod);
    this.setEgressSource(pod, true);
    this.flusher.compileNow();
  }

  async podStarting(pod: PodAttachment): Promise<void> {
    if (!pod.podName || !this.newPods || pod.ips.length === 0) return;
    const out = await this.newPods.admit({ namespace: pod.podNamespace, name: pod.podName, ips: pod.ips });
    // The span's size, not its names: thousands of Nodes in a large cluster, on every ADD.
    this.opts.log.info({ pod: `${pod.podNamespace}/${pod.podName}`, ...out, span: out.span.length }, 'new Pod: span asked');
  }

  localPodsAtStart(pods: PodAttachment[]): void {
    for (const p of pods) {
      if (!p.podName) continue;
      this.localPods.set(`${p.podNamespace}/${p.podName}`, p);
      this.setEgressSource(p, true);
    }
  }

  podDetached(pod: PodAttachment): void {
    if (!pod.podName) return;
    this.localPods.delete(`${pod.podNamespace}/${pod.podName}`);
    this.newPods?.forget(pod.podNamespace, pod.podName);
    this.setEgressSource(pod, false);
  }

  private setEgressSource(pod: PodAttachment, attached: boolean): void {
    const dirty = this.egressSources.set(pod, attached);
    if (dirty) this.flusher.markDirty(dirty);
  }

  private async publishAddresses(pod: PodQuestion, timeoutMs: number): Promise<void> {
    const access = this.api?.access;
    if (!access) throw new Error('no API connection');
    await access.patchJson(publicationPath(pod), publicationPatch(pod, new Date()), PUBLICATION_PATCH_TYPE, timeoutMs);
  }

  // ------------------------------------------------------------------ realization

  /** This Node enforces its view as of `v` (a commit took it in and its flows are on the bridge). */
  realized(v: ViewVersions): boolean {
    return this.bridgeSynced && this.follower.realized(v);
  }

  whenRealized(v: ViewVersions, waitMs: number): Promise<boolean> {
    return this.waiters.when(() => this.realized(v), waitMs);
  }

  /**
   * GET /realized from another agent: answered from the versions the controller gave the asker.
   * A standalone agent (a cluster switching modes node by node) asks without versions, and only
   * the nodes whose rules name the Pod: yes once a committed state here holds the Pod at those
   * addresses in an AddressGroup.
   */
  async realizedAnswer(query: URLSearchParams): Promise<{ code: number; body: unknown }> {
    const parsed = parseQuestion(query);
    if ('error' in parsed) return { code: 400, body: { error: parsed.error } };
    const { versions, question: q } = parsed;
    if (versions) return { code: 200, body: { realized: await this.whenRealized(versions, parsed.waitMs) } };
    const ref = `${q.namespace}/${q.name}`;
    const held = () => this.bridgeSynced && this.follower.idle && this.flusher.settled && this.follower.state.holdsPeer(ref, q.ips);
    return { code: 200, body: { realized: await this.waiters.when(held, parsed.waitMs) } };
  }

  // ------------------------------------------------------------------ bridge side

  /**
   * `nodeIPs`: the node's own addresses, whose connections (kubelet probes, hostNetwork Pods) are
   * host traffic that no ingress rule judges; without them the sweep would cut such connections.
   */
  async attach(opts: { controller: OpenFlowController; applyFlows: () => Promise<unknown>; portMac: (ofport: number) => string | undefined; conntrack?: ConntrackIo; nodeIPs: readonly string[]; connectTimeoutMs?: number }): Promise<void> {
    if (opts.conntrack) this.watchConnections(opts.conntrack, opts.nodeIPs);
    await this.packetIn.start(opts.controller, opts.portMac, { connectTimeoutMs: opts.connectTimeoutMs, socket: `${this.opts.ovsRunDir}/${this.opts.bridge}.mgmt` });
    this.bindFlows(opts.applyFlows);
  }

  /**
   * From now on every change is compiled and applied (debounced) with `applyFlows`, and learned
   * DNS names expire. attach() calls it; tests without a bridge call it alone.
   */
  bindFlows(applyFlows: () => Promise<unknown>): void {
    const dns = this.opts.dns;
    if (dns) dns.setPacketOut((po) => this.packetIn.packetOut(po));
    dns?.startExpiry(this.fqdnPolicy, (cs) => this.flusher.changed(cs));
    this.flusher.bind(dns ? dns.wrapApply(applyFlows) : applyFlows);
  }

  /** The open connections the node's rules now deny are cut, judged from those rules alone. */
  watchConnections(io: ConntrackIo, nodeIPs: readonly string[]): void {
    const settings = this.opts.connections ?? { datapath: 'system', keepNetworkPolicy: false };
    this.sweeper = new ConnectionSweeper({
      io: { dump: () => io.dump(), flush: (tuple) => io.flush(tuple), block: () => this.flusher.applyNow().then(() => undefined) },
      policy: this.connectionPolicy(nodeIPs),
      datapath: settings.datapath,
      keepNetworkPolicy: settings.keepNetworkPolicy,
      stateFile: this.opts.stateDir && join(this.opts.stateDir, 'cut-connections.json'),
      log: this.opts.log,
      onSwept: ({ cut }) => {
        if (cut) this.opts.onConnectionsCut?.(cut);
      },
    });
  }

  /** Judging from the node's rules (policy/node-verdict.ts): every side it reports is a local Pod's. */
  private connectionPolicy(nodeIPs: readonly string[]): ConnectionPolicy {
    const state = this.follower.state;
    const isServiceIp = (ip: string) => {
      const addr = parseIp(ip);
      return addr !== undefined && (this.opts.serviceRanges?.() ?? []).some((c) => {
        const cidr = parseCidr(c);
        return cidr !== undefined && cidrContainsIp(cidr, addr);
      });
    };
    const verdicts = (): NodeVerdicts => {
      const rules = state.nodeRuleSet();
      const isolations = state.nodeIsolations();
      if (this.verdicts?.rules !== rules || this.verdicts.isolations !== isolations) {
        this.verdicts = {
          rules, isolations,
          v: new NodeVerdicts(rules, isolations, { serviceEndpoints: (ip, protocol, port) => state.serviceBackends(ip, protocol, port), nodeIPs }),
        };
      }
      return this.verdicts.v;
    };
    return {
      explain: (probe: Probe) => {
        const src = probe.from.replace(/^ip:/, '');
        const dst = probe.to.replace(/^ip:/, '');
        const conn = { src, dst, protocol: probe.protocol, port: probe.port, ...(probe.sourcePort !== undefined ? { sourcePort: probe.sourcePort } : {}) };
        if (isServiceIp(dst)) {
          const s = verdicts().judgeService(conn);
          const sides = s.sides.map(toSideDecision);
          return { result: { ...probe, verdict: sides.some((x) => x.verdict !== 'allow') ? 'drop' : 'allow', ...(s.disagree ? { note: 'endpoints disagree' } : {}) }, sides };
        }
        const sides = verdicts().judge(conn).map(toSideDecision);
        return { result: { ...probe, verdict: sides.some((x) => x.verdict !== 'allow') ? 'drop' : 'allow' }, sides };
      },
      isLocalPod: () => true,
      isServiceIp,
    };
  }

  flowsConverged(): void {
    this.bridgeSynced = true;
    this.sweeper?.request();
    this.waiters.poke();
    this.reportRealized();
  }

  /** Tells the controller what the bridge enforces now (nothing before the bridge holds the flows, or without a store to name). */
  private reportRealized(): void {
    const sink = this.opts.realizedViews;
    if (!sink || !this.bridgeSynced) return;
    const e = this.follower.enforcedView();
    if (e?.store !== undefined) sink.set(e.store, e.versions);
  }

  connectionsSettled(): Promise<void> {
    return this.sweeper?.idle() ?? Promise.resolve();
  }

  // ------------------------------------------------------------------ what is shown

  private get parts(): EnforcementParts {
    const state = this.follower.state;
    return {
      policy: { synced: this.follower.synced, rules: state.nodeRuleSet().length, isolations: state.nodeIsolations().length, errors: 0 },
      policyFlowCount: this.policyFlows.size,
      watch: this.api,
      flusher: this.flusher,
      packetIn: this.packetIn,
      sweeper: this.sweeper,
      newPods: this.newPods,
      dns: this.opts.dns,
      controlPlane: { ...this.follower.status(this.opts.controller.server), realizedReports: this.opts.realizedViews?.status?.() },
    };
  }

  status(): EnforcerStatus {
    return enforcerStatus(this.parts, undefined);
  }

  metrics(): EnforcementMetrics {
    return enforcementMetrics(this.parts);
  }

  ruleStats(dump: () => Promise<string>): Promise<RuleStatistics[]> {
    return this.stats.ruleStats(dump);
  }

  meterDrops(): Promise<Record<string, number>> {
    return this.packetIn.meterDrops();
  }

  /**
   * Traces a real packet from a local Pod through the bridge and through the bridge of the Node it
   * leaves for. Where the destination leads is the controller's answer (it sees every Pod and Node);
   * without it only an address or a local Pod can be traced, and a packet that leaves this Node
   * makes the trace incomplete.
   */
  async traceflow(req: Omit<TraceRequest, 'destination'>, bridge: TraceBridge): Promise<TraceReport> {
    const destination = await this.traceDestination(req.to, req.source.ip.includes(':') ? 6 : 4);
    const port = this.opts.newPods?.realizationPort;
    const observers = port === undefined ? [] : destination.nodes.filter((n) => n.name !== this.opts.nodeName).map((n) => remoteObserver(n, port));
    const ctx = traceContext(bridge, (id) => this.policyFlows.describe(id));
    return this.tracer.trace({ ...req, destination }, { ...bridge.io, packetOut: (po) => this.packetIn.packetOut(po) }, ctx, observers, this.opts.nodeName);
  }

  /**
   * Takes, until closed, the traces the controller asks this Node to run (`kubectl sluice
   * traceflow`): a long poll on this agent's own connection to the controller; each one is run by
   * `run` (the agent's GET /traceflow) and its report, or why there is none, goes back.
   */
  serveTraceTasks(run: (q: URLSearchParams) => Promise<{ code: number; body: unknown }>): void {
    const access = this.opts.controller;
    const { log } = this.opts;
    void (async () => {
      let backoffMs = 500;
      while (!this.closed) {
        let task: TraceTask | undefined;
        try {
          task = await takeTraceTask(access, 30_000, this.traceTasksStop.signal);
          backoffMs = 500;
        } catch (err) {
          if (this.closed) return;
          log.debug({ err: (err as Error).message }, 'traceflow: the controller\'s traces cannot be taken now; trying again');
          await this.pauses.sleep(backoffMs);
          backoffMs = Math.min(backoffMs * 2, 10_000);
          continue;
        }
        if (!task) continue;
        const q = new URLSearchParams({ from: task.from, to: task.to, protocol: task.protocol });
        if (task.port !== undefined) q.set('port', String(task.port));
        if (task.family !== undefined) q.set('family', String(task.family));
        let answer: { code: number; body: unknown };
        try {
          answer = await run(q);
        } catch (err) {
          answer = { code: 500, body: { error: (err as Error).message } };
        }
        const outcome = answer.code === 200 ? { report: answer.body } : { error: (answer.body as { error?: string } | undefined)?.error ?? `HTTP ${answer.code}`, code: answer.code };
        log.info({ from: task.from, to: task.to, code: answer.code }, 'traceflow: run for the controller');
        await postTraceResult(access, task.id, outcome).catch((err: Error) => log.warn({ err: err.message }, 'traceflow: the report could not be given to the controller'));
      }
    })();
  }

  traceObserveRoutes(bridge: () => TraceBridge | undefined): Record<string, ObserveRoute> {
    return observeRoutes(this.tracer, bridge, (id) => this.policyFlows.describe(id));
  }

  private async traceDestination(to: string, family: 4 | 6): Promise<TraceDestination> {
    let why = 'the agent has no way to ask the controller';
    if (this.opts.traceDestination) {
      try {
        return await this.opts.traceDestination(to, family);
      } catch (err) {
        if (err instanceof TraceError) throw err;
        why = `the controller could not be asked where it leads: ${(err as Error).message}`;
      }
    }
    const address = addressTarget(to, family);
    const ip = address ?? this.localPods.get(to)?.ips.find((a) => a.includes(':') === (family === 6));
    if (ip === undefined) throw new TraceError(`destination "${to}": ${why}; name a local Pod, or the destination by ip:ADDRESS`);
    return { ip, nodes: [], unknown: why };
  }

  policyReport(): PolicyReport {
    const state = this.follower.state;
    return buildPolicyReport({
      node: this.opts.nodeName,
      synced: this.follower.synced,
      rules: state.nodeRuleSet(),
      isolations: state.nodeIsolations(),
      errors: [],
      warnings: [],
      localPods: [...this.localPods.keys()].sort(),
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.traceTasksStop.abort();
    this.pauses.close();
    this.newPods?.close();
    this.waiters.close();
    this.follower.close();
    this.flusher.close();
    this.sweeper?.close();
    await this.sweeper?.idle();
    await this.watcher.stop();
    await this.opts.realizedViews?.stop?.();
    await this.api?.stop();
    this.packetIn.close();
    this.opts.dns?.close();
  }
}
