/**
 * Policy enforcement in the agent: API objects -> PolicyEngine -> PolicyFlows -> the agent's
 * FlowStore (the `policy` owner, patched with each compile's delta, and `dns-intercept`), plus the
 * packet-in loop (Reject replies, audit log, DNS learning hook).
 *
 * Consistency: the engine is updated synchronously per event; the flow compile and the bridge
 * bundle follow, and whatever bundle the agent applies (a flush, a CNI ADD, a resync) first
 * compiles every change received so far, so each applied state is the engine's state at one moment.
 *
 * When: a CoalescingRunner (runner.ts) plans the flushes: on an idle agent a change is applied on
 * the next turn of the event loop, changes during an apply go together into the next one, and a
 * burst becomes a few large applies. Nothing is ever flushed to "allow": a lost watch keeps the
 * last state until the relist reports the differences. Before the agent binds its flows
 * (start-up) nothing is compiled: the initial lists become one full compile, once they are all in.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { AuditLogger, DEFAULT_AUDIT_LOG_PATH } from './auditlog/index.js';
import type { Flow } from '../flows/flow.js';
import type { FlowStore } from '../flows/store.js';
import { type OpenFlowController, runPacketInLoop, type PacketInHandler } from '../ovs/openflow/index.js';
import { type DecodedPunt, PUNT_METER_NAME, PuntCategory, PuntOp } from '../flows/punt.js';
import { TraceError, type TraceIo, type TraceReport, type TraceRequest, Tracer } from './traceflow.js';
import { sendRejectReply } from './reject/index.js';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import { dirtyRuleIds, EgressSourceView, egressRulesOf, PolicyFlows, policyFlowInput, type RuleStatistics } from '../flows/policy/index.js';
import { RuleStatsKeeper } from './rulestats.js';
import { PolicyEngine, type ChangeSet } from '../policy/engine.js';
import { podAddresses } from '../policy/cluster.js';
import { parseIp } from '../policy/cidr.js';
import type { KubeObject } from '../policy/types.js';
import type { PodAttachment } from '../node/attachment.js';
import { ClusterWatch, type WatchEvent } from './watch/clusterwatch.js';
import { trimObject } from './watch/trim.js';
import { SERVICE_CIDR_RESOURCE } from './watch/resources.js';
import { buildPolicyReport, type PolicyReport } from './policy-report.js';
import { PodView, podRefKey, statusAddresses } from './podview.js';
import { AddressClaims } from './claims.js';
import { decidePolicyPunt, rejectReplyMacs } from './punthandler.js';
import type { EnforcementMetrics } from '../metrics.js';
import { type Clock, realClock } from '../clock.js';
import { CoalescingRunner } from './runner.js';
import { ConnectionSweeper, type ConntrackIo, type SweeperStatus } from './conntrack/index.js';
import { askPeer, NewPodGate, type PodQuestion, parseQuestion, PUBLICATION_PATCH_TYPE, publicationPatch, publicationPath } from './newpods/index.js';
import { newPodGuardFlows } from '../flows/newpod-guard.js';
import { cutConnectionFlows } from '../flows/cut-connections.js';
import { podKey } from '../policy/cluster.js';

/** What DNS learning plugs in (enforcement/fqdn): called for every DNS punt; returns the engine's ChangeSet if it learned something. */
export type DnsPuntHook = (pin: PacketIn, punt: DecodedPunt, engine: PolicyEngine) => ChangeSet | undefined | Promise<ChangeSet | undefined>;

/** FQDN learning as the enforcer drives it (fqdn/ FqdnLearning has this shape). */
export interface DnsLearning {
  hook: DnsPuntHook;
  /** Wraps each flow apply (held DNS responses are released after the apply that carries what they taught). */
  wrapApply<T>(apply: () => Promise<T>): () => Promise<T>;
  setPacketOut(fn: (po: PacketOut) => boolean): void;
  /** Learned addresses leave `engine` as they expire (on the learning's own clock); each change goes to `changed`. */
  startExpiry(engine: PolicyEngine, changed: (cs: ChangeSet) => void): void;
  /** DNS interception flows for the local Pods that need them. */
  interceptFlows(engine: PolicyEngine): Flow[];
  stats(): unknown;
  close(): void;
}

export interface EnforcerOptions {
  nodeName: string;
  kubeconfig?: string;
  ovsRunDir: string;
  bridge: string;
  auditLogPath?: string;
  log: Logger;
  /** Coalescing window, used only during bursts (see the header). */
  debounceMs?: number;
  /** Timers of the coalescing (tests step a manual clock). */
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

export interface EnforcerStatus {
  synced: boolean;
  rules: number;
  /** Local Pods isolated by Kubernetes NetworkPolicies, per direction (isolation-only policies have no rules). */
  isolations: number;
  policyFlows: number;
  errors: number;
  applies: number;
  /**
   * Policy-relevant changes the engine has taken in, and how many of the first of them are on the
   * bridge: a client that sees its change in GET /policies and then reads `changes` here knows its
   * change is enforced once `committedChanges` reaches that figure.
   */
  changes: number;
  committedChanges: number;
  /**
   * The API resourceVersion whose every change is enforced on the bridge (watches delivered all up
   * to it and the resulting flows are committed); absent before the first flows are on the bridge.
   * A lower bound: it moves as watch events and bookmarks arrive.
   */
  resourceVersion?: string;
  lastApplyMs?: number;
  packetIns: { handled: number; unclaimed: number; failed: number };
  rejects: number;
  auditLines: number;
  relists: number;
  openflow?: ReturnType<OpenFlowController['stats']>;
  fqdn?: unknown;
  /** Connections cut because a change denied them (absent without a conntrack adapter). */
  connections?: SweeperStatus;
  /** New Pods admitted at CNI ADD, and those still guarded from nodes that have not confirmed them. */
  newPods?: ReturnType<NewPodGate['status']>;
}

/** `obj` with exactly these addresses in its status (no published ones left to fall back on). */
function withAddresses(obj: KubeObject, ips: string[]): KubeObject {
  const { conditions: _published, ...status } = (obj.status ?? {}) as Record<string, unknown>;
  return { ...obj, status: { ...status, ...statusAddresses(ips) } } as KubeObject;
}

/** The FlowStore owners of the policy side. */
export const POLICY_OWNER = 'policy';
export const DNS_INTERCEPT_OWNER = 'dns-intercept';
export const NEW_POD_GUARD_OWNER = 'new-pod-guard';
export const CUT_CONNECTIONS_OWNER = 'cut-connections';

const isCoreKind = (o: { apiVersion: string; kind: string }, kind: string) => o.apiVersion === 'v1' && o.kind === kind;

export class Enforcer {
  readonly engine: PolicyEngine;
  readonly policyFlows = new PolicyFlows();
  private readonly tracer = new Tracer();
  private readonly stats: RuleStatsKeeper;
  private readonly pods: PodView;
  private watch?: ClusterWatch;
  private controller?: OpenFlowController;
  private audit?: AuditLogger;
  private applyFlows?: () => Promise<unknown>;
  private dirty = new Set<string>();
  /** Local Pods' IPv4 egress addresses (Pod ref -> addresses), sources of their egress only. */
  private readonly egressSources = new Map<string, string[]>();
  private readonly egressSourceView = new EgressSourceView();
  /** The agent's FlowStore, kept up to date by each compile once writeFlows() bound it. */
  private flowStore?: FlowStore | undefined;
  /** A compile ran since the DNS interception flows were last stated. */
  private interceptStale = true;
  private dirtySince?: number | undefined;
  private fullCompile = true;
  private pending = false;
  /** Plans the flushes (runner.ts: at once when idle, coalesced in bursts, never overlapping). */
  private readonly flusher: CoalescingRunner;
  private readonly clock: Clock;
  private closed = false;
  private readonly dispatch = { handled: 0, unclaimed: 0, failed: 0 };
  /** Handled packet-ins by what the agent did with them. */
  private readonly punts = { reject: 0, log: 0, dns: 0 };
  private rejects = 0;
  private applies = 0;
  private changeSeq = 0;
  private committedSeq = 0;
  private lastApplyMs?: number;
  private portMac: (ofport: number) => string | undefined = () => undefined;
  private sweeper?: ConnectionSweeper;
  /** The delivered resourceVersion the last committed flush had compiled. */
  private committedRv?: bigint | undefined;
  /** Start-up's first sync is on the bridge. */
  private bridgeSynced = false;
  /** Each Pod in the engine (cluster-wide) → the change count after it was last fed. */
  private readonly podFedSeq = new Map<string, number>();
  /** The cluster's ServiceCIDR objects by name. */
  private readonly serviceCidrs = new Map<string, KubeObject>();
  /** Called after each ServiceCIDR event (the node follows the ranges). */
  onServiceCidrs?: () => void;
  /** Which Pod each address belongs to when two claim it (claims.ts). */
  private readonly claims = new AddressClaims();
  /** Pods that lost every address to a newer owner → their span when they did. */
  private readonly displaced = new Map<string, Map<string, string[]>>();
  /** Realization questions waiting for a yes (re-checked after each commit and Pod event). */
  private readonly realizationWaiters = new Set<(closing?: boolean) => void>();
  readonly newPods?: NewPodGate;

  constructor(private readonly opts: EnforcerOptions) {
    this.engine = new PolicyEngine({
      nodeName: opts.nodeName,
      log: (e) => opts.log.warn({ kind: e.kind, namespace: e.namespace, name: e.name, field: e.field, err: e.message }, 'policy: invalid object ignored'),
    });
    this.pods = new PodView(opts.nodeName);
    this.clock = opts.clock ?? realClock;
    this.flusher = new CoalescingRunner({ clock: this.clock, burstDelayMs: opts.debounceMs ?? 20, run: () => this.flush() });
    this.stats = new RuleStatsKeeper(this.policyFlows, { stateDir: opts.stateDir, log: opts.log });
    const np = opts.newPods;
    if (np) {
      this.newPods = new NewPodGate({
        nodeName: opts.nodeName,
        span: (namespace, name) => this.engine.podSpan(namespace, name),
        peerAddress: (node) => this.engine.cluster.nodes.get(node)?.ips[0],
        publish: (pod) => this.publishAddresses(pod, np.confirmWithinMs ?? 2000),
        ask: (address, pod, waitMs) => askPeer(address, np.realizationPort, pod, waitMs),
        applyFlows: () => (this.applyFlows ? this.applyFlows() : Promise.reject(new Error('the bridge is not bound yet'))),
        clock: this.clock,
        log: opts.log,
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
    return served ? [...this.serviceCidrs.values()] : undefined;
  }

  /** The ServiceCIDR objects as the informer has them now (undefined: not served, or not listed yet). */
  currentServiceCidrObjects(): KubeObject[] | undefined {
    const s = this.watch?.status().find((x) => x.resource === SERVICE_CIDR_RESOURCE.path);
    return s?.synced && !s.absent ? [...this.serviceCidrs.values()] : undefined;
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
    const o = ev.object;
    try {
      if (o.apiVersion === SERVICE_CIDR_RESOURCE.apiVersion && o.kind === SERVICE_CIDR_RESOURCE.kind) {
        // Not a policy input: the node's Service ranges (node/service-cidrs.ts).
        if (ev.type === 'upsert') this.serviceCidrs.set(o.metadata.name, o);
        else this.serviceCidrs.delete(o.metadata.name);
        this.onServiceCidrs?.();
      } else if (isCoreKind(o, 'Pod')) {
        const ns = o.metadata.namespace ?? 'default';
        const obj = ev.type === 'upsert' ? this.pods.setApi(o) : this.pods.removeApi(ns, o.metadata.name);
        this.feedPod(obj ?? o, obj !== undefined);
      } else {
        this.feed(o, ev.type);
      }
    } catch (err) {
      this.opts.log.error({ kind: o.kind, name: o.metadata?.name, namespace: o.metadata?.namespace, err: (err as Error).message }, 'policy: event not applied');
    }
  }

  /**
   * A Pod without an address (not started yet) cannot send or receive: it is kept out of the engine,
   * which would otherwise give it a made-up address (for offline scenarios) that the bridge would
   * then match on. hostNetwork Pods use their Node's addresses.
   */
  private feedPod(obj: KubeObject, present: boolean): void {
    const ref = podKey({ namespace: obj.metadata.namespace ?? 'default', name: obj.metadata.name });
    const hostNetwork = obj.spec?.hostNetwork === true;
    // Another Pod sharing an address (a reused one) may win or lose it now: fed again too (claims.ts).
    const rivals = present && !hostNetwork
      ? this.claims.set(ref, podAddresses(obj), { terminating: Boolean(obj.metadata.deletionTimestamp), created: String(obj.metadata.creationTimestamp ?? '') })
      : this.claims.remove(ref);
    this.feedHeld(ref, obj, present);
    for (const other of rivals) {
      const [ns, name] = other.split('/') as [string, string];
      const o = this.pods.effective(podRefKey(ns, name));
      if (o) this.feedHeld(other, o, true);
    }
    this.pokeRealization();
  }

  /** Feeds a Pod with the addresses it holds (all it claims, but those a rival won). */
  private feedHeld(ref: string, obj: KubeObject, present: boolean): void {
    let fed = obj;
    if (present && obj.spec?.hostNetwork !== true) {
      const claimed = podAddresses(obj);
      const held = this.claims.held(ref, claimed);
      if (held.length !== claimed.length) fed = withAddresses(obj, held);
      // Losing its last address takes it out of the engine: where its rules were is kept for the
      // new owner's ADD, whose nodes must let go of it (newpods/gate.ts).
      if (held.length === 0 && claimed.length > 0 && this.engine.cluster.pods.has(ref)) {
        const [ns, name] = ref.split('/') as [string, string];
        this.displaced.set(ref, this.engine.podSpan(ns, name));
      }
    }
    if (!present) this.displaced.delete(ref);
    const addressed = fed.spec?.hostNetwork === true || podAddresses(fed).length > 0;
    this.feed(fed, present && addressed ? 'upsert' : 'remove');
    if (present && addressed) this.podFedSeq.set(ref, this.changeSeq);
    else this.podFedSeq.delete(ref);
  }

  private feed(obj: KubeObject, type: 'upsert' | 'remove'): void {
    const cs =
      type === 'upsert'
        ? this.engine.upsert(obj)
        : this.engine.remove({ apiVersion: obj.apiVersion, kind: obj.kind, name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) });
    this.changed(cs);
  }

  private changed(cs: ChangeSet): void {
    const any = cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length > 0 ||
      cs.isolations.added.length + cs.isolations.updated.length + cs.isolations.removed.length > 0 ||
      cs.addressGroups.added.length + cs.addressGroups.updated.length + cs.addressGroups.removed.length > 0 ||
      cs.appliedToGroups.added.length + cs.appliedToGroups.updated.length + cs.appliedToGroups.removed.length > 0 ||
      cs.serviceEndpoints.length > 0;
    if (!any) return;
    // While a full compile is due (start-up's initial lists), which rules changed does not matter.
    this.markDirty(this.fullCompile ? [] : dirtyRuleIds(cs, this.engine));
  }

  /** Records that rules `ids` (and possibly more, unnamed) need a compile, and plans the flush. */
  private markDirty(ids: Iterable<string>): void {
    this.changeSeq++;
    for (const id of ids) this.dirty.add(id);
    this.pending = true;
    this.dirtySince ??= this.clock.now();
    this.flusher.request();
  }

  /**
   * Brings the compiled policy flows to the engine's current state (pure, synchronous), and the
   * FlowStore the agent bound with writeFlows() by the compile's delta.
   */
  compileNow(): void {
    if (!this.fullCompile && !this.pending) return;
    const dirty = this.fullCompile ? undefined : this.dirty;
    const delta = this.policyFlows.sync(this.egressSourceView.apply(policyFlowInput(this.engine), this.egressSources), dirty);
    this.flowStore?.patch(POLICY_OWNER, delta.add, delta.remove);
    this.interceptStale = true;
    this.fullCompile = false;
    this.pending = false;
    this.dirty = new Set();
  }

  private async flush(): Promise<void> {
    if (!this.applyFlows) {
      // Before the agent binds its flows (start-up, while the initial lists arrive) nothing is
      // compiled: the lists' events stay one full compile, which start-up runs once they are all
      // in, and no event pays for finding its dirty rules. The agent's first sync carries them.
      this.dirtySince = undefined;
      return;
    }
    const since = this.dirtySince;
    // Every change counted so far is in this compile (and in the sync's desired set, computed later).
    const seq = this.changeSeq;
    const rv = this.watch?.deliveredResourceVersion();
    const compileStart = this.clock.now();
    this.compileNow();
    const compileMs = this.clock.now() - compileStart;
    this.dirtySince = undefined;
    try {
      await this.applyFlows();
      this.applies++;
      this.committedSeq = Math.max(this.committedSeq, seq);
      if (rv !== undefined && (this.committedRv === undefined || rv > this.committedRv)) this.committedRv = rv;
      // The denying flows are on the bridge: connections they deny can go.
      this.sweeper?.request();
      this.pokeRealization();
      if (since !== undefined) {
        this.lastApplyMs = this.clock.now() - since;
        this.opts.onRealized?.(this.lastApplyMs / 1000);
        this.opts.log.info({ ms: this.lastApplyMs, compileMs, policyFlows: this.policyFlows.size }, 'policy: flows committed');
      }
    } catch (err) {
      this.opts.log.error({ err: (err as Error).message }, 'policy: applying flows failed; the periodic resync retries');
    }
  }

  /**
   * The agent's flow source: the store's policy owner follows the compiler's deltas from the first
   * call on (the first call states every policy flow); the DNS interception owner is restated
   * after each compile.
   */
  writeFlows(store: FlowStore): void {
    if (store !== this.flowStore) {
      this.flowStore = undefined;
      this.compileNow();
      store.replace(POLICY_OWNER, this.policyFlows.flows());
      this.flowStore = store;
      this.interceptStale = true;
    } else {
      this.compileNow();
    }
    if (this.opts.dns && this.interceptStale) store.replace(DNS_INTERCEPT_OWNER, this.opts.dns.interceptFlows(this.engine));
    this.interceptStale = false;
    // Few or none: a guard lasts only while a node has not confirmed a new Pod (newpods/gate.ts).
    if (this.newPods) store.replace(NEW_POD_GUARD_OWNER, newPodGuardFlows(this.newPods.guarded()));
    if (this.sweeper) store.replace(CUT_CONNECTIONS_OWNER, cutConnectionFlows(this.sweeper.blocked()));
  }

  /** Policy flows of the engine's current state (+ DNS interception and new-Pod guards), in one list. */
  flows(): Flow[] {
    this.compileNow();
    const flows = this.policyFlows.flows();
    const extra = [
      ...(this.opts.dns ? this.opts.dns.interceptFlows(this.engine) : []),
      ...(this.newPods ? newPodGuardFlows(this.newPods.guarded()) : []),
      ...(this.sweeper ? cutConnectionFlows(this.sweeper.blocked()) : []),
    ];
    return extra.length > 0 ? [...flows, ...extra] : flows;
  }

  /** A packet-out on the bridge's controller connection (false: not connected or backlogged). */
  packetOut(po: PacketOut): boolean {
    return this.controller?.packetOut(po) ?? false;
  }

  // ------------------------------------------------------------------ local Pods (CNI)

  /**
   * CNI ADD, before the Pod's flows are installed: the engine learns the Pod with its IPs (and its
   * labels from the API, read now if the informer has not shown it yet), so the same bundle that
   * makes the Pod reachable carries its policy flows.
   */
  async podAttaching(pod: PodAttachment): Promise<void> {
    if (!pod.podName) return;
    const access = this.watch?.access;
    if (!this.pods.hasApi(pod.podNamespace, pod.podName) && access) {
      try {
        const path = `/api/v1/namespaces/${encodeURIComponent(pod.podNamespace)}/pods/${encodeURIComponent(pod.podName)}`;
        const read = (await access.getJson(path, 5000)) as KubeObject;
        read.apiVersion = 'v1';
        read.kind = 'Pod';
        const obj = trimObject(read);
        // Only if the informer still has not delivered it (it is newer when it has).
        if (!this.pods.hasApi(pod.podNamespace, pod.podName)) this.pods.setApi(obj);
      } catch (err) {
        this.opts.log.warn({ pod: `${pod.podNamespace}/${pod.podName}`, err: (err as Error).message }, 'policy: Pod not readable from the API at ADD; enforcing with what is known');
      }
    }
    this.feedPod(this.pods.setLocal({ namespace: pod.podNamespace, name: pod.podName, ips: pod.ips }), true);
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
    const ref = podRefKey(pod.podNamespace, pod.podName);
    // A reused address: the nodes of its previous owner's rules must have let go of it too.
    const previous = new Map<string, string[]>();
    for (const rival of this.claims.rivals(ref, pod.ips)) {
      const [ns, name] = rival.split('/') as [string, string];
      const span = this.displaced.get(rival) ?? this.engine.podSpan(ns, name);
      for (const [node, ips] of span) previous.set(node, [...new Set([...(previous.get(node) ?? []), ...ips])]);
    }
    const out = await this.newPods.admit({ namespace: pod.podNamespace, name: pod.podName, ips: pod.ips }, previous);
    if (out.span.length > 0) this.opts.log.info({ pod: `${pod.podNamespace}/${pod.podName}`, ...out }, 'new Pod: span asked');
  }

  /** Publishes a local Pod's addresses in the API (its status condition; newpods/publication.ts). */
  private async publishAddresses(pod: PodQuestion, timeoutMs: number): Promise<void> {
    const access = this.watch?.access;
    if (!access) throw new Error('no API connection');
    await access.patchJson(publicationPath(pod), publicationPatch(pod, new Date()), PUBLICATION_PATCH_TYPE, timeoutMs);
  }

  /**
   * Pod `q` is enforced on this bridge with every address of `q.ips` as its own: the engine holds
   * it at those addresses and the flows of that state are committed.
   */
  podRealized(q: PodQuestion): boolean {
    if (!this.bridgeSynced) return false;
    const ref = podKey(q);
    for (const ip of q.ips) {
      const p = this.engine.cluster.podByIp.get(ip);
      // The engine has it there, and no other Pod claims it any more or it lost (claims.ts).
      if (!p || podKey(p) !== ref || this.claims.owner(ip) !== ref) return false;
    }
    const fed = this.podFedSeq.get(ref);
    if (fed === undefined) return false;
    return this.committedSeq >= fed || (!this.pending && !this.flusher.busy && !this.fullCompile);
  }

  /** Resolves true as soon as podRealized(q), false after `waitMs` without it. */
  whenPodRealized(q: PodQuestion, waitMs: number): Promise<boolean> {
    if (this.podRealized(q)) return Promise.resolve(true);
    if (waitMs <= 0 || this.closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (v: boolean) => {
        this.realizationWaiters.delete(check);
        this.clock.clearTimeout(timer);
        resolve(v);
      };
      const check = (closing?: boolean) => {
        if (closing) done(false);
        else if (this.podRealized(q)) done(true);
      };
      const timer = this.clock.setTimeout(() => done(false), waitMs);
      this.realizationWaiters.add(check);
    });
  }

  /** GET /realized on the realization endpoint (newpods/peers.ts). */
  async realizedAnswer(query: URLSearchParams): Promise<{ code: number; body: unknown }> {
    const parsed = parseQuestion(query);
    if ('error' in parsed) return { code: 400, body: { error: parsed.error } };
    return { code: 200, body: { realized: await this.whenPodRealized(parsed.question, parsed.waitMs) } };
  }

  private pokeRealization(): void {
    for (const check of [...this.realizationWaiters]) check();
  }

  /** Local attachments found at start-up (before the first sync). */
  localPodsAtStart(pods: PodAttachment[]): void {
    for (const p of pods) {
      if (!p.podName) continue;
      this.feedPod(this.pods.setLocal({ namespace: p.podNamespace, name: p.podName, ips: p.ips }), true);
      this.setEgressSource(p, true);
    }
  }

  podDetached(pod: PodAttachment): void {
    if (!pod.podName) return;
    this.newPods?.forget(pod.podNamespace, pod.podName);
    const obj = this.pods.removeLocal(pod.podNamespace, pod.podName);
    this.feedPod(obj ?? { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: pod.podNamespace, name: pod.podName } }, obj !== undefined);
    this.setEgressSource(pod, false);
  }

  /**
   * Records (or forgets) the Pod's IPv4 egress address as a source of its egress (see
   * egress-sources.ts); the egress rules that target the Pod are compiled again when it changed.
   */
  private setEgressSource(pod: PodAttachment, attached: boolean): void {
    const ref = `${pod.podNamespace}/${pod.podName}`;
    const want = attached && pod.egressV4 ? [pod.egressV4.ip] : undefined;
    const cur = this.egressSources.get(ref);
    if ((cur ?? []).join() === (want ?? []).join()) return;
    if (want) this.egressSources.set(ref, want);
    else this.egressSources.delete(ref);
    this.markDirty(egressRulesOf(this.engine.nodeRuleSet(), ref));
  }

  // ------------------------------------------------------------------ bridge side

  /**
   * Takes the packet-in path on the agent's OpenFlow connection (which installs the punt meters,
   * replays flows when it reconnects, and is closed by the agent) and hands the enforcer the agent's
   * flow sync. Waits for the connection up to `connectTimeoutMs` (punt flows use
   * `controller(meter_id=)`, which OVS accepts before the meter exists, so a slow connection only
   * delays metering).
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
    this.portMac = opts.portMac;
    if (opts.conntrack) this.watchConnections(opts.conntrack);
    const { log } = this.opts;
    this.audit = new AuditLogger({ path: this.opts.auditLogPath ?? DEFAULT_AUDIT_LOG_PATH });
    const controller = opts.controller;
    this.controller = controller;
    const timeout = opts.connectTimeoutMs ?? 10_000;
    const ok = await Promise.race([controller.waitConnected().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), timeout).unref())]);
    if (ok) log.info({ socket: `${this.opts.ovsRunDir}/${this.opts.bridge}.mgmt` }, 'openflow: connected, punt meters installed');
    else log.warn({ timeoutMs: timeout }, 'openflow: not connected yet; continuing (Reject and audit logging start once it connects)');
    const handlers: Record<number, PacketInHandler> = {
      [PuntCategory.policy]: (pin, punt) => this.onPolicyPunt(pin, punt),
      [PuntCategory.dns]: (pin, punt) => this.onDnsPunt(pin, punt),
      [PuntCategory.trace]: (pin, punt) => this.tracer.onTracePunt(pin, punt),
    };
    void runPacketInLoop(controller, handlers, (err) => log.warn({ err: (err as Error).message }, 'packet-in: handler failed'), this.dispatch);
    this.bindFlows(opts.applyFlows);
  }

  /**
   * From now on every engine change is compiled and applied (debounced) with `applyFlows`, and
   * learned DNS names expire. attach() calls it; tests without a bridge call it alone.
   */
  bindFlows(applyFlows: () => Promise<unknown>): void {
    const dns = this.opts.dns;
    if (dns) dns.setPacketOut((po) => this.packetOut(po));
    this.applyFlows = dns ? dns.wrapApply(applyFlows) : applyFlows;
    dns?.startExpiry(this.engine, (cs) => this.changed(cs));
    if (this.pending) this.flusher.request();
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
        block: () => (this.applyFlows ? this.applyFlows() : Promise.reject(new Error('the bridge is not bound yet'))).then(() => undefined),
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
    this.pokeRealization();
  }

  /** See EnforcerStatus.resourceVersion: when nothing waits to be applied, all that was delivered is enforced. */
  private enforcedResourceVersion(): bigint | undefined {
    if (!this.bridgeSynced) return undefined;
    const idle = !this.pending && !this.flusher.busy && !this.fullCompile;
    const delivered = idle ? this.watch?.deliveredResourceVersion() : undefined;
    // Kept as the floor of later reports: the version never goes back while a flush runs.
    if (delivered !== undefined && (this.committedRv === undefined || delivered > this.committedRv)) this.committedRv = delivered;
    return this.committedRv;
  }

  /** Resolves when no conntrack sweep runs or is due (tests). */
  connectionsSettled(): Promise<void> {
    return this.sweeper?.idle() ?? Promise.resolve();
  }

  private onPolicyPunt(pin: PacketIn, punt: DecodedPunt): void {
    // A traced packet is not traffic: its reject is the trace's verdict, and it is not audit-logged.
    if (this.tracer.busy && (punt.ops & PuntOp.reject) !== 0 && this.tracer.claimsReject(pin)) return;
    const d = decidePolicyPunt(pin, punt, (id) => this.policyFlows.describe(id));
    if (d.reject) this.punts.reject++;
    else if (d.audit) this.punts.log++;
    if (d.reject && this.controller) this.reject(pin);
    if (d.audit) this.audit?.log(d.audit);
  }

  /** TCP RST / ICMP admin-prohibited back out of the port the packet came in on. */
  private reject(pin: PacketIn): void {
    const macs = rejectReplyMacs(this.portMac(pin.inPort));
    if (!macs) {
      this.opts.log.warn({ inPort: pin.inPort }, 'packet-in: reject for a packet from an unknown port; not answered');
      return;
    }
    const sent = sendRejectReply(this.controller!, pin, macs);
    if (sent.ok) this.rejects++;
    else this.opts.log.debug({ reason: sent.reason }, 'packet-in: no reject reply');
  }

  private async onDnsPunt(pin: PacketIn, punt: DecodedPunt): Promise<void> {
    this.punts.dns++;
    // FQDN learning (enforcement/fqdn): without it DNS punts are only counted.
    if (!this.opts.dns) return;
    const cs = await this.opts.dns.hook(pin, punt, this.engine);
    if (!cs) return;
    this.changed(cs);
    // A held DNS response waits for this apply: no burst delay.
    this.flusher.request({ urgent: true });
  }

  status(): EnforcerStatus {
    const rv = this.enforcedResourceVersion();
    return {
      synced: this.watch?.isSynced() ?? false,
      rules: this.engine.nodeRuleSet().length,
      isolations: this.engine.nodeIsolations().length,
      policyFlows: this.policyFlows.size,
      errors: this.engine.errors().length,
      applies: this.applies,
      changes: this.changeSeq,
      committedChanges: this.committedSeq,
      ...(rv !== undefined ? { resourceVersion: String(rv) } : {}),
      ...(this.lastApplyMs !== undefined ? { lastApplyMs: this.lastApplyMs } : {}),
      packetIns: { ...this.dispatch },
      rejects: this.rejects,
      auditLines: this.audit?.linesWritten ?? 0,
      relists: this.watch?.relists ?? 0,
      ...(this.controller ? { openflow: this.controller.stats() } : {}),
      ...(this.opts.dns ? { fqdn: this.opts.dns.stats() } : {}),
      ...(this.sweeper ? { connections: this.sweeper.status() } : {}),
      ...(this.newPods ? { newPods: this.newPods.status() } : {}),
    };
  }

  /** Per-rule statistics: the counter flows of every enforced rule, read from `dump` (the Metric tables). */
  ruleStats(dump: () => Promise<string>): Promise<RuleStatistics[]> {
    return this.stats.ruleStats(dump);
  }

  /**
   * Packets each packet-in meter dropped on the bridge, before they reached the agent (the meters'
   * drop bands), by what the meter limits. Asked over the OpenFlow connection at each scrape.
   */
  async meterDrops(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    if (!this.controller?.isConnected) return out;
    for (const m of await this.controller.meterStats()) {
      const name = PUNT_METER_NAME[m.meterId];
      if (name) out[name] = Number(m.bands.reduce((sum, b) => sum + b.packets, 0n));
    }
    return out;
  }

  /** Figures for /metrics. */
  metrics(): EnforcementMetrics {
    const of = this.controller?.stats();
    return {
      rules: this.engine.nodeRuleSet().length,
      invalidObjects: this.engine.errors().length,
      openflowConnected: of?.connected ?? false,
      openflowConnects: of?.connects ?? 0,
      packetIns: { ...this.punts, unclaimed: this.dispatch.unclaimed, failed: this.dispatch.failed },
      packetInsDropped: of?.packetInsDropped ?? 0,
      rejects: this.rejects,
      auditLines: this.audit?.linesWritten ?? 0,
      auditSuppressed: this.audit?.suppressed ?? 0,
      watch: this.watch?.status().map(({ resource, synced, absent, objects, relists, restarts }) => ({ resource, synced, absent, objects, relists, restarts })) ?? [],
    };
  }

  /**
   * Traces a real packet from a local Pod through the bridge (sluicectl node traceflow). `io` adds
   * and removes the observation flows; `port` names an OpenFlow port.
   */
  traceflow(req: TraceRequest, io: Omit<TraceIo, 'packetOut'>, port: (ofport: number) => string, gatewayOfport: number): Promise<TraceReport> {
    return this.tracer.trace(req, { ...io, packetOut: (po) => this.packetOut(po) }, {
      rule: (conjId) => {
        const r = this.policyFlows.describe(conjId);
        return r && { ...r.ref, action: r.action, ...(r.ref.kind === 'NetworkPolicy' ? {} : { priority: r.policyPriority }) };
      },
      port,
      gatewayOfport,
    });
  }

  /**
   * The address of `family` a traceflow destination names: "ns/pod", "service:ns/name" (its
   * ClusterIP) or "ip:ADDRESS" (which must be of that family).
   */
  traceTarget(to: string, family: 4 | 6 = 4): string {
    const ofFamily = (a: string) => a.includes(':') === (family === 6);
    const ip = /^ip:(.+)$/.exec(to);
    if (ip) {
      const parsed = parseIp(ip[1]!);
      if (!parsed) throw new TraceError(`${to}: not an IPv4 or IPv6 address`);
      if (parsed.family !== family) throw new TraceError(`${to}: an IPv${parsed.family} destination for an IPv${family} trace`);
      return ip[1]!;
    }
    const svc = /^service:([^/]+)\/(.+)$/.exec(to);
    if (svc) {
      const s = [...this.engine.cluster.services.values()].find((x) => x.namespace === svc[1] && x.name === svc[2]);
      const cip = s?.clusterIPs.find(ofFamily);
      if (!cip) throw new TraceError(`${to}: no such Service with an IPv${family} ClusterIP`);
      return cip;
    }
    const pod = /^([^/:]+)\/([^/]+)$/.exec(to);
    if (pod) {
      const p = [...this.engine.cluster.pods.values()].find((x) => x.namespace === pod[1] && x.name === pod[2]);
      const pip = p?.ips.find(ofFamily);
      if (!pip) throw new TraceError(`${to}: no such Pod with an IPv${family} address`);
      return pip;
    }
    throw new TraceError(`destination "${to}": use ns/pod, service:ns/name or ip:ADDRESS`);
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
    for (const check of [...this.realizationWaiters]) check(true);
    this.flusher.close();
    this.sweeper?.close();
    await this.sweeper?.idle();
    await this.watch?.stop();
    this.opts.dns?.close();
    this.audit?.close();
  }
}
