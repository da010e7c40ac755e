/**
 * The policy side of sluice-controller: the cluster's objects, fed as an agent feeds its engine
 * (the same intake: Pods with their published addresses, rival claims of a reused address settled
 * the same way, Pods without an address kept out), into one engine for the whole cluster, whose
 * ChangeSets become every Node's view (computation.ts) in the sink (the store the API serves).
 *
 * Feeding is synchronous per event, so each Node's view changes in the order the cluster did.
 */
import type { Logger } from 'pino';
import { type Clock, realClock } from '../clock.js';
import { type ControlPlaneKind, type PodRealization, type TraceDestination, type ViewVersions, viewVersionsOf } from '../controlplane/types.js';
import { ConditionWaiters } from '../enforcement/condition-waiters.js';
import { PolicyIntake } from '../enforcement/intake.js';
import type { PodQuestion } from '../enforcement/newpods/index.js';
import { TraceError, traceDestination } from '../enforcement/traceflow.js';
import { podKey } from '../policy/cluster.js';
import type { WatchEvent } from '../enforcement/watch/clusterwatch.js';
import { PolicyEngine } from '../policy/engine.js';
import { ClusterComputation, type NodeViewSink } from './computation.js';
import { RealizedViews } from './realized-views.js';

export interface PolicyControllerOptions {
  log: Pick<Logger, 'warn' | 'error'>;
  sink: NodeViewSink;
  /** Per kind, the version of the last change of a Node's view (the store's lastChanges): a realization answer's versions. */
  versions?: (node: string) => Record<ControlPlaneKind, string>;
  clock?: Clock;
}

/** Realization questions waiting at once; more are refused (each is an open request of an agent's ADD). */
const MAX_WAITING_QUESTIONS = 10_000;

export class PolicyController {
  readonly engine: PolicyEngine;
  readonly computation: ClusterComputation;
  /** What each Node's agent reports its bridge enforces (realized-views.ts). */
  readonly realizedViews: RealizedViews;
  private readonly clock: Clock;
  private readonly intake: PolicyIntake;
  private changeCount = 0;
  private readonly waiters: ConditionWaiters;

  constructor(private readonly opts: PolicyControllerOptions) {
    const { log } = opts;
    this.clock = opts.clock ?? realClock;
    this.waiters = new ConditionWaiters(this.clock);
    this.realizedViews = new RealizedViews(this.clock);
    this.engine = new PolicyEngine({
      trackMembers: true,
      log: (e) => log.warn({ kind: e.kind, namespace: e.namespace, name: e.name, field: e.field, err: e.message }, 'policy: invalid object ignored'),
    });
    this.computation = new ClusterComputation(this.engine, opts.sink);
    this.intake = new PolicyIntake({
      engine: this.engine,
      // The controller has no Pods of its own: no local attachment is ever merged in.
      nodeName: '',
      log,
      changed: (cs) => {
        this.changeCount++;
        this.computation.apply(cs);
      },
      changes: () => this.changeCount,
      podsChanged: () => {},
      serviceCidrsChanged: () => {},
    });
  }

  /** One object event of the cluster's informers. */
  onWatchEvent(ev: WatchEvent): void {
    this.intake.onWatchEvent(ev);
  }

  /**
   * Where a new Pod matters, once the engine holds it at every address of `q.ips` as their owner
   * (undefined before): its own Node, the Nodes whose rules name it as a peer and those of a
   * previous owner of a reused address, each with its address and the versions of its view now.
   */
  podRealization(q: PodQuestion): PodRealization | undefined {
    // No view holds anything yet while the initial lists come in (computation.hold).
    if (this.computation.holding) return undefined;
    const ref = podKey(q);
    const { engine } = this;
    for (const ip of q.ips) {
      const p = engine.cluster.podByIp.get(ip);
      if (!p || podKey(p) !== ref || this.intake.addressOwner(ip) !== ref) return undefined;
    }
    const pod = engine.cluster.pods.get(ref);
    if (!pod?.nodeName) return undefined;
    const nodes = new Map<string, Set<string>>([[pod.nodeName, new Set()]]);
    const add = (span: Map<string, string[]>) => {
      for (const [node, ips] of span) {
        let s = nodes.get(node);
        if (!s) nodes.set(node, (s = new Set()));
        for (const ip of ips) s.add(ip);
      }
    };
    add(engine.podSpan(q.namespace, q.name));
    add(this.intake.previousSpans(ref, q.ips));
    const versions = this.opts.versions ?? (() => ({ NetworkPolicy: '0', AppliedToGroup: '0', AddressGroup: '0' }));
    return {
      node: pod.nodeName,
      nodes: [...nodes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([name, ips]) => {
        const address = engine.cluster.nodes.get(name)?.ips[0];
        return { name, ...(address !== undefined ? { address } : {}), podIps: [...ips].sort(), versions: versions(name) };
      }),
    };
  }

  /** The Node a traceflow's source Pod ("ns/name") runs on; a TraceError when it is no Pod that can be traced from. */
  traceSourceNode(from: string): string {
    const pod = this.engine.cluster.pods.get(from);
    if (!pod) throw new TraceError(`from "${from}": no such Pod (ns/name)`);
    if (pod.hostNetwork) throw new TraceError(`from "${from}": a hostNetwork Pod crosses no bridge`);
    if (!pod.nodeName) throw new TraceError(`from "${from}": the Pod is not on a Node yet`);
    return pod.nodeName;
  }

  /** Where a traceflow destination leads from Node `node` (enforcement/traceflow.ts traceDestination over the whole cluster). */
  traceDestination(to: string, family: 4 | 6, node: string): TraceDestination {
    return traceDestination(this.engine.cluster, to, family, node);
  }

  /**
   * Resolves with podRealization(q) as soon as it is defined (checked at each poke), undefined after
   * `waitMs`. With `confirmMs` (counted from now), the answer then waits until every other Node of
   * the span that reports has reported that its bridge enforces the versions named for it, or until
   * `confirmMs` has passed; those that have are marked `confirmed`, without their Pods' addresses.
   * A Node with no report is not waited for (realized-views.ts): it is asked directly.
   */
  async whenPodRealized(q: PodQuestion, waitMs: number, confirmMs?: number): Promise<PodRealization | undefined> {
    const t0 = this.clock.now();
    const answer = await this.whenHeld(q, waitMs);
    if (!answer || confirmMs === undefined) return answer;
    const need = new Map<string, ViewVersions>();
    for (const n of answer.nodes) {
      const v = viewVersionsOf(n.versions);
      if (n.name !== answer.node && v) need.set(n.name, v);
    }
    const left = confirmMs - (this.clock.now() - t0);
    if (left > 0) {
      if (this.realizedViews.waitingQuestions >= MAX_WAITING_QUESTIONS) throw new Error(`${MAX_WAITING_QUESTIONS} realization questions are waiting already`);
      await this.realizedViews.whenConfirmed(need, left);
    }
    return {
      node: answer.node,
      nodes: answer.nodes.map((n) => {
        const v = need.get(n.name);
        return v && this.realizedViews.confirmed(n.name, v) ? { ...n, podIps: [], confirmed: true } : n;
      }),
    };
  }

  private async whenHeld(q: PodQuestion, waitMs: number): Promise<PodRealization | undefined> {
    const now = this.podRealization(q);
    if (now || waitMs <= 0) return now;
    if (this.waiters.size >= MAX_WAITING_QUESTIONS) throw new Error(`${MAX_WAITING_QUESTIONS} realization questions are waiting already`);
    return (await this.waiters.when(() => this.podRealization(q) !== undefined, waitMs)) ? this.podRealization(q) : undefined;
  }

  /** The cluster changed and the views are stored: waiting questions are checked again. */
  poke(): void {
    this.waiters.poke();
  }

  close(): void {
    this.waiters.close();
    this.realizedViews.clear();
  }

  /** Engine changes taken in so far. */
  get changes(): number {
    return this.changeCount;
  }

  /** Figures for /status. */
  status(): { changes: number; invalid: number; objects: ReturnType<ClusterComputation['counts']>; realizedViews: ReturnType<RealizedViews['status']> } {
    return { changes: this.changeCount, invalid: this.engine.errorCount(), objects: this.computation.counts(), realizedViews: this.realizedViews.status() };
  }
}
