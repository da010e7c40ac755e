/**
 * A new Pod's first packets are judged by the policy in force on every node.
 *
 * A node learns which Pod an address belongs to from the API server. Until it has, the Pod's
 * packets are an unknown address there: a rule naming the Pod's namespace or labels does not
 * match, so a Drop lets them through and an allow drops them. At CNI ADD, before the runtime
 * starts the Pod's containers, the gate:
 *
 *  1. publishes the Pod's addresses (the Pod's status condition, policy/cluster.ts
 *     POD_ADDRESSES_CONDITION), so no node waits for the kubelet's report;
 *  2. finds the nodes where knowing the address matters (the span: nodes with Pods whose rules
 *     name the Pod as a peer, engine.podSpan) and asks each one's agent to answer once the Pod is
 *     enforced there with these addresses (peers.ts), within `confirmWithinMs`;
 *  3. for every node that has not answered yes by then, installs the guard on this node: the
 *     Pod's new connections with that node's span Pods are dropped (flows/newpod-guard.ts), and
 *     answers the ADD. It keeps asking that node in the background and lifts its guard once it
 *     answers yes.
 *
 * So a Pod never starts with a hole: each of its peers either knows it or is cut off from it, and
 * it starts without a blackout wherever its peers are healthy. The span and each node's answer are
 * recomputed from the engine, so a Pod that appears later on a lagging node is guarded too.
 */
import { type Clock, Pauses } from '../../clock.js';
import type { GuardedPod } from '../../flows/newpod-guard.js';
import type { PodQuestion } from './peers.js';

export interface NewPod extends PodQuestion {}

export interface NewPodGateDeps {
  nodeName: string;
  /** Node → addresses of its Pods whose rules name the Pod as a peer (engine.podSpan). */
  span(namespace: string, name: string): Map<string, string[]>;
  /** The address of a node's agent, or undefined when the cluster view has no address for it. */
  peerAddress(node: string): string | undefined;
  /** Publishes the Pod's addresses in the API. */
  publish(pod: NewPod): Promise<void>;
  /** Whether the agent at `address` enforces the Pod with its addresses; may wait up to `waitMs` for yes. Rejects when it cannot be asked. */
  ask(address: string, pod: NewPod, waitMs: number): Promise<boolean>;
  /** Brings the bridge's flows to the desired set (guard flows included). */
  applyFlows(): Promise<unknown>;
  clock: Clock;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
  /** How long an ADD waits for the span's answers before it guards the nodes that did not answer. */
  confirmWithinMs: number;
  /** Long-poll length of the background questions to lagging nodes. */
  backgroundWaitMs?: number;
  /** The last guard of a Pod was lifted (every lagging node confirmed or left its span). */
  guardEnded?(pod: NewPod): void;
}

/**
 * The most peer addresses a guard drops pair by pair. Its flows are the Pod's addresses times its
 * peers', both ways: a Pod guarded from thousands of nodes at once (a large cluster, its agents
 * slow to answer) would put hundreds of thousands of flows on the bridge for the few seconds the
 * answers take. Over this, the Pod is cut off from every new connection instead (two flows per
 * address), still failing closed, until enough nodes confirm to bring it under.
 */
export const GUARD_PEER_BUDGET = 512;

export interface AdmitOutcome {
  /** Nodes whose answer was asked for. */
  span: string[];
  /** Nodes the Pod is guarded from (they did not answer yes in time). */
  guarded: string[];
  published: boolean;
  ms: number;
}

interface Guard {
  pod: NewPod;
  /** The span of the address's previous owner, as it was when it lost the address (see admit). */
  previous: ReadonlyMap<string, readonly string[]>;
  /** Nodes that have not answered yes. */
  lagging: Set<string>;
  since: number;
}

const podRef = (p: { namespace: string; name: string }) => `${p.namespace}/${p.name}`;

export class NewPodGate {
  private readonly guards = new Map<string, Guard>();
  /** Pending pauses (asking again), ended by close. */
  private readonly pauses: Pauses;
  private closed = false;
  /** A lift waits for the flows to be applied; an apply for lifts is under way. */
  private liftsWaiting = false;
  private liftsApplying = false;
  /** Figures for status and metrics. */
  private readonly counts = { admitted: 0, guarded: 0, lifted: 0, publishFailures: 0 };

  constructor(private readonly d: NewPodGateDeps) {
    this.pauses = new Pauses(d.clock);
  }

  /**
   * Steps 1–3 of the header; resolves once the Pod may start (its guard, if any, is on the bridge).
   * `previous`: the span of a Pod that held one of these addresses before (a reused address):
   * those nodes must also have let go of the old owner, or they would judge the new Pod as it.
   * `waitMs`: how long the answers are waited for (default `confirmWithinMs`; 0 guards every node
   * of the span at once and asks them in the background).
   */
  async admit(pod: NewPod, previous: ReadonlyMap<string, readonly string[]> = new Map(), waitMs = this.d.confirmWithinMs): Promise<AdmitOutcome> {
    const { d } = this;
    const t0 = d.clock.now();
    const ref = podRef(pod);
    let published = true;
    const publication = d.publish(pod).catch((err: unknown) => {
      published = false;
      this.counts.publishFailures++;
      d.log.warn({ pod: ref, err: (err as Error).message }, 'new Pod: its addresses could not be published; other nodes learn them from the kubelet');
    });
    const span = this.spanNodes(pod, previous);
    // The question may be asked as the publication goes: the answer waits for it.
    const answers = await Promise.all(span.map((node) => this.askOnce(node, pod, waitMs)));
    await publication;
    const lagging = span.filter((_, i) => !answers[i]);
    this.counts.admitted++;
    if (lagging.length > 0) {
      const guard: Guard = { pod, previous, lagging: new Set(lagging), since: d.clock.now() };
      this.guards.set(ref, guard);
      this.counts.guarded++;
      d.log.warn({ pod: ref, nodes: lagging, waitedMs: d.clock.now() - t0 }, 'new Pod: nodes did not confirm they know its address; its connections with their Pods are dropped until they do');
      await d.applyFlows();
      for (const node of lagging) this.follow(ref, guard, node);
    } else {
      this.guards.delete(ref);
    }
    return { span, guarded: lagging, published, ms: d.clock.now() - t0 };
  }

  /** The Pod is gone from this node: its guard goes with its flows. */
  forget(namespace: string, name: string): void {
    this.guards.delete(podRef({ namespace, name }));
  }

  /** Whether the Pod is guarded from some node. */
  guarding(namespace: string, name: string): boolean {
    return this.guards.has(podRef({ namespace, name }));
  }

  /**
   * The guard's pairs as the engine shows them now (each lagging node's current span Pods); a Pod
   * with more peers than GUARD_PEER_BUDGET is guarded whole.
   */
  guarded(): GuardedPod[] {
    const out: GuardedPod[] = [];
    for (const g of this.guards.values()) {
      const peers = this.peersOf(g);
      if (peers.size > GUARD_PEER_BUDGET) out.push({ podIps: g.pod.ips, peerIps: [], all: true });
      else if (peers.size > 0) out.push({ podIps: g.pod.ips, peerIps: [...peers].sort() });
    }
    return out;
  }

  /**
   * The guard's peer addresses, gathered only up to one over the budget: past it the guard is the
   * Pod's whole isolation, and a guard from thousands of Nodes (tens of thousands of addresses) is
   * read again at every apply while they confirm.
   */
  private peersOf(g: Guard): Set<string> {
    const span = this.d.span(g.pod.namespace, g.pod.name);
    const out = new Set<string>();
    for (const n of g.lagging) {
      for (const ip of [...(span.get(n) ?? []), ...(g.previous.get(n) ?? [])]) {
        out.add(ip);
        if (out.size > GUARD_PEER_BUDGET) return out;
      }
    }
    return out;
  }

  status(): { guardedPods: { pod: string; nodes: string[]; peers: number; whole: boolean; sinceMs: number }[]; admitted: number; guarded: number; lifted: number; publishFailures: number } {
    const now = this.d.clock.now();
    return {
      ...this.counts,
      // `peers` counted up to GUARD_PEER_BUDGET + 1 (`whole` past the budget).
      guardedPods: [...this.guards].map(([pod, g]) => {
        const peers = this.peersOf(g).size;
        return { pod, nodes: [...g.lagging].sort(), peers, whole: peers > GUARD_PEER_BUDGET, sinceMs: now - g.since };
      }),
    };
  }

  close(): void {
    this.closed = true;
    this.pauses.close();
  }


  /**
   * Applies the flows once for every lift made meanwhile: thousands of Nodes may confirm within
   * moments of each other (a Pod guarded from a large span), and one apply per lift would each
   * recompute every guard. A lift only lets traffic through, so it may wait for the apply under
   * way; a guard is always put in place at once (admit).
   */
  private applyLifts(): void {
    this.liftsWaiting = true;
    if (this.liftsApplying) return;
    this.liftsApplying = true;
    void (async () => {
      while (this.liftsWaiting && !this.closed) {
        this.liftsWaiting = false;
        await this.d.applyFlows().catch((err: unknown) => this.d.log.warn({ err: (err as Error).message }, 'new Pod: lifting a guard: applying flows failed; the next sync lifts it'));
      }
      this.liftsApplying = false;
    })();
  }

  private spanNodes(pod: NewPod, previous: ReadonlyMap<string, readonly string[]>): string[] {
    return [...new Set([...this.d.span(pod.namespace, pod.name).keys(), ...previous.keys()])].filter((n) => n !== this.d.nodeName).sort();
  }

  /**
   * Asks `node` until it answers yes or `waitMs` is over; false then. An agent that cannot be asked
   * (restarting, not listening yet) is asked again, 100 ms apart, doubling, within the time.
   */
  private async askOnce(node: string, pod: NewPod, waitMs: number): Promise<boolean> {
    const { clock } = this.d;
    const deadline = clock.now() + waitMs;
    for (let attempt = 0; ; attempt++) {
      const left = deadline - clock.now();
      if (left <= 0 || this.closed) return false;
      const address = this.d.peerAddress(node);
      if (address !== undefined) {
        try {
          return await this.d.ask(address, pod, left);
        } catch {
          // Asked again below.
        }
      }
      const pause = Math.min(100 * 2 ** attempt, deadline - clock.now());
      if (pause <= 0) return false;
      await this.pauses.sleep(pause);
    }
  }

  /** Asks `node` again until it answers yes, leaves the Pod's span, or the guard goes; then lifts that part. */
  private follow(ref: string, guard: Guard, node: string, failures = 0): void {
    const { d } = this;
    const current = () => !this.closed && this.guards.get(ref) === guard && guard.lagging.has(node);
    const lift = (why: string) => {
      if (!current()) return;
      guard.lagging.delete(node);
      d.log.info({ pod: ref, node, why, guardedMs: d.clock.now() - guard.since }, 'new Pod: guard lifted for a node');
      if (guard.lagging.size === 0) {
        this.guards.delete(ref);
        this.counts.lifted++;
        d.guardEnded?.(guard.pod);
      }
      this.applyLifts();
    };
    void (async () => {
      if (!current()) return;
      if (!guard.previous.has(node) && !d.span(guard.pod.namespace, guard.pod.name).has(node)) return lift('no longer in the span');
      const address = d.peerAddress(node);
      let yes = false;
      let failed = false;
      if (address !== undefined) {
        try {
          yes = await d.ask(address, guard.pod, d.backgroundWaitMs ?? 10_000);
        } catch {
          failed = true;
        }
      } else failed = true;
      if (yes) return lift('confirmed');
      if (!current()) return;
      // A "no" after a long poll asks again at once; an unreachable agent is asked again later.
      await this.pauses.sleep(failed ? Math.min(5000, 200 * 2 ** Math.min(failures, 5)) : 0);
      this.follow(ref, guard, node, failed ? failures + 1 : 0);
    })();
  }
}
