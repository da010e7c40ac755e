/**
 * When the engine's changes become flows on the bridge. Every change records the rules it touched;
 * a BoundedFrequencyRunner plans the flushes (on an idle agent a change is applied on the next turn
 * of the event loop, changes during an apply go together into the next one, a burst becomes a few
 * large applies); a flush compiles what is dirty and asks the agent for one flow sync. It also keeps
 * the figures of what is committed: change counts, applies, the resourceVersion enforced.
 *
 * Nothing is ever flushed to "allow": a lost watch keeps the last state until the relist reports
 * the differences. Before the agent binds its flows (start-up) nothing is compiled: the initial
 * lists become one full compile, once they are all in.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { dirtyRuleIds, type RulesByGroup } from '../flows/policy/index.js';
import type { ChangeSet } from '../policy/internal.js';
import { BoundedFrequencyRunner } from './bounded-frequency-runner.js';

export interface FlushSchedulerOptions {
  /** The rules naming each group (the engine in standalone mode, the controller's state otherwise): a group change dirties them. */
  rules: RulesByGroup;
  clock: Clock;
  /** Least time between the end of an apply and the next one (urgent flushes excepted). */
  minIntervalMs: number;
  log: Pick<Logger, 'info' | 'error'>;
  /** Compiles the rules `dirty` names (all of them when undefined) into the desired flows. */
  compile(dirty: ReadonlySet<string> | undefined): void;
  /** Policy flows now (for the commit log line). */
  flowCount(): number;
  /** The resourceVersion up to which the watches delivered everything (undefined: no watch). */
  deliveredResourceVersion(): bigint | undefined;
  /** After each committed flush (the denying flows are on the bridge). */
  committed(): void;
  /** Each committed batch of changes: seconds from its first change to the flows on the bridge. */
  onRealized?: ((seconds: number) => void) | undefined;
}

export class FlushScheduler {
  private dirty = new Set<string>();
  private fullCompile = true;
  private pending = false;
  private dirtySince?: number | undefined;
  private apply?: () => Promise<unknown>;
  private readonly runner: BoundedFrequencyRunner;
  /** Changes taken in, and how many of the first of them are on the bridge. */
  private changeSeq = 0;
  private committedSeq = 0;
  private applies = 0;
  private lastApplyMs?: number;
  /** The delivered resourceVersion the last committed flush had compiled. */
  private committedRv?: bigint | undefined;

  constructor(private readonly opts: FlushSchedulerOptions) {
    this.runner = new BoundedFrequencyRunner({ clock: opts.clock, minIntervalMs: opts.minIntervalMs, run: () => this.flush() });
  }

  /** An engine ChangeSet: the rules it touched are compiled at the next flush (nothing when it is empty). */
  changed(cs: ChangeSet): void {
    const any = cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length > 0 ||
      cs.isolations.added.length + cs.isolations.updated.length + cs.isolations.removed.length > 0 ||
      cs.addressGroups.added.length + cs.addressGroups.updated.length + cs.addressGroups.removed.length > 0 ||
      cs.appliedToGroups.added.length + cs.appliedToGroups.updated.length + cs.appliedToGroups.removed.length > 0 ||
      cs.serviceEndpoints.length > 0;
    if (!any) return;
    // While a full compile is due (start-up's initial lists), which rules changed does not matter.
    this.markDirty(this.fullCompile ? [] : dirtyRuleIds(cs, this.opts.rules));
  }

  /** Records that rules `ids` (and possibly more, unnamed) need a compile, and plans the flush. */
  markDirty(ids: Iterable<string>): void {
    this.changeSeq++;
    for (const id of ids) this.dirty.add(id);
    this.pending = true;
    this.dirtySince ??= this.opts.clock.now();
    this.runner.request();
  }

  /** A flush at once, skipping the minimum interval (something waits on it). */
  requestUrgent(): void {
    this.runner.request({ urgent: true });
  }

  /** Compiles what changed since the last compile, if anything (pure, synchronous). */
  compileNow(): void {
    if (!this.fullCompile && !this.pending) return;
    this.opts.compile(this.fullCompile ? undefined : this.dirty);
    this.fullCompile = false;
    this.pending = false;
    this.dirty = new Set();
  }

  /** From now on flushes apply with `apply` (the agent's flow sync); a change already waiting is flushed. */
  bind(apply: () => Promise<unknown>): void {
    this.apply = apply;
    if (this.pending) this.runner.request();
  }

  /** One flow sync through the bound apply (the new-Pod guards and blocked connections are flows too). */
  applyNow(): Promise<unknown> {
    return this.apply ? this.apply() : Promise.reject(new Error('the bridge is not bound yet'));
  }

  /** Nothing waits to be compiled or applied. */
  get settled(): boolean {
    return !this.pending && !this.runner.busy && !this.fullCompile;
  }

  /** Changes taken in so far (a Pod records the count after it was fed). */
  get changes(): number {
    return this.changeSeq;
  }

  /** How many of the first changes are on the bridge. */
  get committedChanges(): number {
    return this.committedSeq;
  }

  get applyCount(): number {
    return this.applies;
  }

  get lastApply(): number | undefined {
    return this.lastApplyMs;
  }

  /** The resourceVersion whose every change is enforced: when nothing waits to be applied, all that was delivered. */
  enforcedResourceVersion(): bigint | undefined {
    const delivered = this.settled ? this.opts.deliveredResourceVersion() : undefined;
    // Kept as the floor of later reports: the version never goes back while a flush runs.
    if (delivered !== undefined && (this.committedRv === undefined || delivered > this.committedRv)) this.committedRv = delivered;
    return this.committedRv;
  }

  close(): void {
    this.runner.close();
  }

  private async flush(): Promise<void> {
    const { opts } = this;
    if (!this.apply) {
      // Before the agent binds its flows (start-up, while the initial lists arrive) nothing is
      // compiled: the lists' events stay one full compile, which start-up runs once they are all
      // in, and no event pays for finding its dirty rules. The agent's first sync carries them.
      this.dirtySince = undefined;
      return;
    }
    const since = this.dirtySince;
    // Every change counted so far is in this compile (and in the sync's desired set, computed later).
    const seq = this.changeSeq;
    const rv = opts.deliveredResourceVersion();
    const compileStart = opts.clock.now();
    this.compileNow();
    const compileMs = opts.clock.now() - compileStart;
    this.dirtySince = undefined;
    try {
      await this.apply();
      this.applies++;
      this.committedSeq = Math.max(this.committedSeq, seq);
      if (rv !== undefined && (this.committedRv === undefined || rv > this.committedRv)) this.committedRv = rv;
      opts.committed();
      if (since !== undefined) {
        this.lastApplyMs = opts.clock.now() - since;
        opts.onRealized?.(this.lastApplyMs / 1000);
        opts.log.info({ ms: this.lastApplyMs, compileMs, policyFlows: opts.flowCount() }, 'policy: flows committed');
      }
    } catch (err) {
      opts.log.error({ err: (err as Error).message }, 'policy: applying flows failed; the periodic resync retries');
    }
  }
}
