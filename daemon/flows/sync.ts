/**
 * FlowSync: the desired flows of one FlowStore made the bridge's, over any FlowSwitch (the agent's
 * FlowProgrammer; fakes in tests). It does no I/O of its own.
 */
import type { Logger } from 'pino';
import { type ApplyTimings, type FlowDiff, isEmptyDiff } from './diff.js';
import { type FlowDelta, FlowStore } from './store.js';

/**
 * Desired-state flow programming over a FlowStore. One sync runs at a time; callers that arrive
 * while one runs share the next one (it brings the store up to date when it starts, so it covers
 * all of them). A sync applies the store's pending delta as one bundle, so a CNI ADD or a policy
 * change costs a bundle of what changed. `verify` (start-up, resync, the flow watchdog's repairs)
 * reads the installed cookies and applies the difference from them to the whole desired set; so
 * does the first sync, and the one after a failed bundle (the bridge's state is then unknown).
 */
/** What FlowSync needs of the switch: the installed sluice cookies, and a diff applied atomically. */
export interface FlowSwitch {
  installedCookies(): Promise<string[]>;
  applyDiff(diff: FlowDiff): Promise<ApplyTimings>;
}

export class FlowSync {
  private running: Promise<unknown> = Promise.resolve();
  private next?: { promise: Promise<FlowDiff>; verify: boolean } | undefined;
  private mustVerify = true;

  constructor(
    private readonly ovs: FlowSwitch,
    private readonly log: Pick<Logger, 'info'>,
    readonly store: FlowStore = new FlowStore(),
  ) {}

  /** `update` brings the store's owners up to date right before the delta is taken. */
  sync(update: (store: FlowStore) => void, opts: { verify?: boolean } = {}): Promise<FlowDiff> {
    const verify = opts.verify ?? false;
    if (this.next && (this.next.verify || !verify)) return this.next.promise;
    const slot: { promise: Promise<FlowDiff>; verify: boolean } = { verify, promise: undefined as never };
    slot.promise = this.running.then(() => {
      if (this.next === slot) this.next = undefined;
      return this.apply(update, verify);
    });
    this.next = slot;
    this.running = slot.promise.catch(() => undefined);
    return slot.promise;
  }

  /** Forget what the bridge is known to hold (e.g. ovs-vswitchd restarted): the next sync dumps. */
  invalidate(): void {
    this.mustVerify = true;
  }

  private async apply(update: (store: FlowStore) => void, verify: boolean): Promise<FlowDiff> {
    const store = this.store;
    let delta: FlowDelta;
    if (verify || this.mustVerify) {
      const installed = new Set(await this.ovs.installedCookies());
      update(store);
      delta = store.takeAgainst(installed);
    } else {
      update(store);
      delta = store.take();
    }
    const diff: FlowDiff = { add: delta.add, remove: delta.remove, unchanged: store.size - delta.add.length };
    if (!isEmptyDiff(diff)) {
      let timings: ApplyTimings;
      try {
        timings = await this.ovs.applyDiff(diff);
      } catch (err) {
        store.restore(delta);
        this.mustVerify = true;
        throw err;
      }
      this.log.info({ added: diff.add.length, removed: diff.remove.length, unchanged: diff.unchanged, ...timings }, 'flows: applied');
    }
    this.mustVerify = false;
    return diff;
  }
}
