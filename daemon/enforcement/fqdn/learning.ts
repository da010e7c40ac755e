/**
 * FQDN learning as the agent plugs it in: one object that owns the learner (the store of learned
 * names) and its expiry timer, answers the enforcer's DNS punt hook, holds each response whose
 * learning changed the engine until the flows carrying that change are on the bridge, and then
 * releases it.
 *
 *   const fqdn = new FqdnLearning({ clock });
 *   dnsHook: fqdn.hook                                       // (pin, punt, engine) => ChangeSet | undefined
 *   applyFlows: fqdn.wrapApply(() => agent.syncFlows())      // release what this apply covers
 *   fqdn.setPacketOut((po) => controller.packetOut(po))      // once the controller exists
 *   fqdn.startExpiry(engine, (cs) => changed(cs))            // expiries from now on, at the learner's next one
 *   interception flows: fqdn.interceptFlows(enforcer.engine) (the enforcer's DNS owner in the FlowStore)
 *
 * Release rule: a held response is released after the first apply that *started* after its engine
 * update (so the compiled flows include it), whether that apply succeeded or failed, or after
 * `maxHoldMs` at the latest — DNS is never blocked by this mechanism, only delayed.
 */
import { type Clock, realClock, type TimerHandle } from '../../clock.js';
import type { Flow } from '../../flows/flow.js';
import type { DecodedPunt } from '../../flows/punt.js';
import type { PacketIn, PacketOut } from '../../ovs/openflow/wire.js';
import type { ChangeSet } from '../../policy/engine.js';
import type { FqdnPolicy } from '../dns-learning.js';
import { dnsInterceptFlows, DnsPuntOp, type DnsInterceptMode } from './flows.js';
import { expireFqdnsDue, FqdnExpiryTimer, handleDnsPacketIn, isEmptyChangeSet, releaseOf } from './handler.js';
import { FqdnLearner, type LearnerOptions } from './learner.js';

export interface FqdnLearningOptions {
  /** Time of learned addresses' expiries and of the hold deadline (default: the real clock). */
  clock?: Clock;
  learner?: FqdnLearner;
  learnerOptions?: LearnerOptions;
  mode?: DnsInterceptMode;
  /** Longest a response waits for its flows (default 1000 ms). */
  maxHoldMs?: number;
  log?: { debug?: (o: object, msg: string) => void; warn?: (o: object, msg: string) => void };
}

export interface FqdnLearningStats {
  punts: number;
  learned: number;
  releasedAtOnce: number;
  releasedAfterApply: number;
  releasedByTimeout: number;
  releaseFailed: number;
  held: number;
  names: number;
}

interface Held {
  po: PacketOut;
  timer: TimerHandle;
}

export class FqdnLearning {
  readonly learner: FqdnLearner;
  private readonly clock: Clock;
  private readonly expiryTimer: FqdnExpiryTimer;
  /** Where expiries go (startExpiry); until then addresses wait in the learner. */
  private expiryTarget?: { policy: FqdnPolicy; changed: (cs: ChangeSet) => void } | undefined;
  private readonly mode: DnsInterceptMode;
  private readonly maxHoldMs: number;
  private packetOut?: (po: PacketOut) => boolean;
  private held = new Set<Held>();
  private readonly s = { punts: 0, learned: 0, releasedAtOnce: 0, releasedAfterApply: 0, releasedByTimeout: 0, releaseFailed: 0 };

  constructor(private readonly opts: FqdnLearningOptions = {}) {
    this.clock = opts.clock ?? realClock;
    this.learner = opts.learner ?? new FqdnLearner({ clock: this.clock, ...opts.learnerOptions });
    this.expiryTimer = new FqdnExpiryTimer(this.clock, () => this.expireDue(), (e) => this.opts.log?.warn?.({ err: (e as Error).message }, 'fqdn: expiry failed'));
    this.mode = opts.mode ?? 'hold';
    this.maxHoldMs = opts.maxHoldMs ?? 1000;
  }

  setPacketOut(fn: (po: PacketOut) => boolean): void {
    this.packetOut = fn;
  }

  /** The enforcer's DNS punt hook: learns, returns the engine change (undefined = nothing to apply). */
  readonly hook = (pin: PacketIn, punt: DecodedPunt, policy: FqdnPolicy): ChangeSet | undefined => {
    this.s.punts++;
    let result: ReturnType<typeof handleDnsPacketIn>;
    try {
      result = handleDnsPacketIn(pin, { engine: policy, learner: this.learner });
    } catch (e) {
      // An engine failure must not swallow the response.
      if (punt.ops === DnsPuntOp.hold) this.send(releaseOf(pin), 'releasedAtOnce');
      throw e;
    }
    if (result.note) this.opts.log?.debug?.({ note: result.note }, 'fqdn: DNS response not learned');
    this.s.learned += result.learned.length;
    this.expiryTimer.schedule(result.nextExpiryAt);
    if (isEmptyChangeSet(result.changes)) {
      this.send(result.release, 'releasedAtOnce');
      return undefined;
    }
    if (result.release) this.hold(result.release);
    return result.changes;
  };

  /** Wraps the agent's flow apply: responses held before it starts are released when it ends. */
  wrapApply<T>(apply: () => Promise<T>): () => Promise<T> {
    return async () => {
      const covered = [...this.held];
      try {
        return await apply();
      } finally {
        for (const h of covered) this.release(h, 'releasedAfterApply');
      }
    };
  }

  /**
   * From now on learned addresses leave `policy` when they expire, on the clock, at the learner's
   * next expiry (one timer, re-armed after every learn and every expiry); each expiry's ChangeSet
   * goes to `changed` (the enforcer compiles and applies it).
   */
  startExpiry(policy: FqdnPolicy, changed: (cs: ChangeSet) => void): void {
    this.expiryTarget = { policy, changed };
    this.expiryTimer.cancel();
    this.expiryTimer.schedule(this.learner.nextExpiryAt());
  }

  /** The expiry timer's run: what is due leaves the learner and the engine, then the timer is re-armed. */
  private expireDue(): void {
    const target = this.expiryTarget;
    if (!target) return;
    const r = expireFqdnsDue({ engine: target.policy, learner: this.learner });
    this.expiryTimer.schedule(r.nextExpiryAt);
    if (!isEmptyChangeSet(r.changes)) target.changed(r.changes);
  }

  nextExpiryAt(): number | undefined {
    return this.learner.nextExpiryAt();
  }

  /** The DNS interception flows for the current fqdn rules' local targets (add to the desired flow set). */
  interceptFlows(policy: FqdnPolicy): Flow[] {
    return dnsInterceptFlows({ pods: policy.fqdnTargetPodIps(), mode: this.mode });
  }

  stats(): FqdnLearningStats {
    return { ...this.s, held: this.held.size, names: this.learner.size };
  }

  /** Releases everything still held and stops expiring (agent shutdown). */
  close(): void {
    this.expiryTimer.cancel();
    this.expiryTarget = undefined;
    for (const h of [...this.held]) this.release(h, 'releasedAfterApply');
  }

  private hold(po: PacketOut): void {
    const h: Held = { po, timer: this.clock.setTimeout(() => this.release(h, 'releasedByTimeout'), this.maxHoldMs) };
    this.held.add(h);
  }

  private release(h: Held, how: 'releasedAfterApply' | 'releasedByTimeout'): void {
    if (!this.held.delete(h)) return;
    this.clock.clearTimeout(h.timer);
    if (how === 'releasedByTimeout') this.opts.log?.warn?.({ maxHoldMs: this.maxHoldMs }, 'fqdn: DNS response released before its flows were applied');
    this.send(h.po, how);
  }

  private send(po: PacketOut | undefined, how: 'releasedAtOnce' | 'releasedAfterApply' | 'releasedByTimeout'): void {
    if (!po) return;
    if (this.packetOut?.(po)) this.s[how]++;
    else this.s.releaseFailed++;
  }
}
