/**
 * This node's answer to "is Pod p enforced here?" (newpods/peers.ts asks it of every node of a new
 * Pod's span): yes once the engine holds the Pod at each of the asked addresses as their owner and
 * the flush that fed it is committed. A question may wait: it is checked again after each commit
 * and Pod event until its deadline.
 */
import type { Clock } from '../clock.js';
import type { PolicyEngine } from '../policy/engine.js';
import { podKey } from '../policy/cluster.js';
import { type PodQuestion, parseQuestion } from './newpods/index.js';
import { ConditionWaiters } from './condition-waiters.js';

export interface RealizationOptions {
  engine: PolicyEngine;
  clock: Clock;
  /** Start-up's first flow sync is on the bridge. */
  bridgeSynced(): boolean;
  /** The Pod that holds an address Pods claim (claims.ts). */
  addressOwner(ip: string): string | undefined;
  /** The change count after the Pod was last fed (undefined: not in the engine). */
  podFedAt(ref: string): number | undefined;
  /** How many of the first changes are on the bridge. */
  committedChanges(): number;
  /** Nothing waits to be compiled or applied. */
  settled(): boolean;
}

export class Realization {
  /** Questions waiting for a yes. */
  private readonly waiters: ConditionWaiters;

  constructor(private readonly opts: RealizationOptions) {
    this.waiters = new ConditionWaiters(opts.clock);
  }

  /**
   * Pod `q` is enforced on this bridge with every address of `q.ips` as its own: the engine holds
   * it at those addresses and the flows of that state are committed.
   */
  podRealized(q: PodQuestion): boolean {
    const { opts } = this;
    if (!opts.bridgeSynced()) return false;
    const ref = podKey(q);
    for (const ip of q.ips) {
      const p = opts.engine.cluster.podByIp.get(ip);
      // The engine has it there, and no other Pod claims it any more or it lost (claims.ts).
      if (!p || podKey(p) !== ref || opts.addressOwner(ip) !== ref) return false;
    }
    const fed = opts.podFedAt(ref);
    if (fed === undefined) return false;
    return opts.committedChanges() >= fed || opts.settled();
  }

  /** Resolves true as soon as podRealized(q), false after `waitMs` without it. */
  whenPodRealized(q: PodQuestion, waitMs: number): Promise<boolean> {
    return this.waiters.when(() => this.podRealized(q), waitMs);
  }

  /** GET /realized on the realization endpoint (newpods/peers.ts). */
  async answer(query: URLSearchParams): Promise<{ code: number; body: unknown }> {
    const parsed = parseQuestion(query);
    if ('error' in parsed) return { code: 400, body: { error: parsed.error } };
    return { code: 200, body: { realized: await this.whenPodRealized(parsed.question, parsed.waitMs) } };
  }

  /** Something a waiting question depends on changed: each is checked again. */
  poke(): void {
    this.waiters.poke();
  }

  /** Waiting questions are answered no. */
  close(): void {
    this.waiters.close();
  }
}
