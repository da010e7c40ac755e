/**
 * The desired flows of the bridge, held by owner (pure, no I/O).
 *
 * Each owner (the base pipeline, one local Pod, the policy compiler, DNS interception...) states
 * its own flows: `replace()` with its whole set (diffed against its previous one, O(that owner)),
 * or `patch()` with flows to add and remove when the owner already knows its delta (the policy
 * compiler does). The store keeps the union by cookie and records, per cookie, what changed since
 * the last `take()`: that pending delta is exactly what the bridge needs, so applying a change
 * costs O(the change), never a diff of the whole desired set.
 *
 * Collisions: a cookie is a hash of the flow's whole content, so two owners naming one cookie want
 * the identical flow. It is installed once and reference-counted: it leaves the bridge only when
 * the last owner that wants it drops it.
 */
import type { Flow } from './flow.js';

/** Brings its owners in the store up to date (called before each sync takes the delta). */
export type FlowSource = (store: FlowStore) => void;

/** What the bridge needs to reach the desired set. */
export interface FlowDelta {
  add: Flow[];
  /** Cookies to delete. */
  remove: string[];
}

export class FlowStore {
  private readonly owners = new Map<string, Map<string, Flow>>();
  /** Every desired flow by cookie. */
  private readonly held = new Map<string, Flow>();
  /**
   * Owners wanting a cookie, for the cookies more than one owner wants (rare): the others have one,
   * and a count object for each of tens of thousands of flows would be a third of what a flow costs.
   */
  private readonly refs = new Map<string, number>();
  /** Cookies wanted since the last take() that were not wanted then. */
  private readonly pendingAdd = new Map<string, Flow>();
  /** Cookies wanted at the last take() that no longer are. */
  private readonly pendingRemove = new Set<string>();
  /** flows(), kept until the desired set changes. */
  private list?: Flow[] | undefined;

  /** Number of distinct desired flows (what the bridge holds once the pending delta is applied). */
  get size(): number {
    return this.held.size;
  }

  /** Whether some change waits for take(). */
  get dirty(): boolean {
    return this.pendingAdd.size + this.pendingRemove.size > 0;
  }

  /** The desired set, one flow per cookie, owners in the order they first appeared (shared: do not modify it). */
  flows(): Flow[] {
    if (!this.list) {
      const out: Flow[] = [];
      const seen = new Set<string>();
      for (const flows of this.owners.values()) {
        for (const [cookie, f] of flows) {
          if (seen.has(cookie)) continue;
          seen.add(cookie);
          out.push(f);
        }
      }
      this.list = out;
    }
    return this.list;
  }

  has(cookie: string): boolean {
    return this.held.has(cookie);
  }

  /** The flows one owner states (empty when unknown). */
  ownerFlows(owner: string): Flow[] {
    return [...(this.owners.get(owner)?.values() ?? [])];
  }

  ownerNames(): string[] {
    return [...this.owners.keys()];
  }

  /** The owner's flows become `flows` (duplicates by cookie count once); returns how many cookies it gained and lost. */
  replace(owner: string, flows: readonly Flow[]): { added: number; removed: number } {
    const cur = this.owners.get(owner);
    const next = new Map<string, Flow>();
    for (const f of flows) next.set(f.cookie, f);
    let added = 0;
    let removed = 0;
    if (cur) {
      for (const cookie of cur.keys()) {
        if (next.has(cookie)) continue;
        this.release(cookie);
        removed++;
      }
    }
    for (const [cookie, f] of next) {
      if (cur?.has(cookie)) continue;
      this.hold(f);
      added++;
    }
    if (next.size === 0) this.owners.delete(owner);
    else this.owners.set(owner, next);
    if (added + removed > 0) this.list = undefined;
    return { added, removed };
  }

  /**
   * Changes an owner's flows by a delta it computed itself: `remove` (by cookie) first, then `add`.
   * Removing a cookie the owner does not hold, or adding one it already holds, is a no-op.
   */
  patch(owner: string, add: readonly Flow[], remove: readonly (Flow | string)[]): void {
    let flows = this.owners.get(owner);
    if (!flows) this.owners.set(owner, (flows = new Map()));
    for (const r of remove) {
      const cookie = typeof r === 'string' ? r : r.cookie;
      if (!flows.delete(cookie)) continue;
      this.release(cookie);
      this.list = undefined;
    }
    for (const f of add) {
      if (flows.has(f.cookie)) continue;
      flows.set(f.cookie, f);
      this.hold(f);
      this.list = undefined;
    }
    if (flows.size === 0) this.owners.delete(owner);
  }

  /** Drops an owner and every flow only it wanted. */
  drop(owner: string): void {
    this.replace(owner, []);
  }

  /**
   * The delta since the last take(), handed over for applying: the store then assumes the bridge
   * holds the desired set. If applying fails, give the delta back with restore().
   */
  take(): FlowDelta {
    const delta: FlowDelta = { add: [...this.pendingAdd.values()], remove: [...this.pendingRemove] };
    this.pendingAdd.clear();
    this.pendingRemove.clear();
    return delta;
  }

  /**
   * The delta from what the bridge actually holds (`installed`: its sluice cookies, normalized) to
   * the desired set, replacing the pending delta (which it includes): for start-up, resync and
   * repairs. Restore it like take()'s if applying fails.
   */
  takeAgainst(installed: ReadonlySet<string>): FlowDelta {
    const add: Flow[] = [];
    for (const [cookie, f] of this.held) if (!installed.has(cookie)) add.push(f);
    const remove: string[] = [];
    for (const cookie of installed) if (!this.held.has(cookie)) remove.push(cookie);
    this.pendingAdd.clear();
    this.pendingRemove.clear();
    return { add, remove: remove.sort() };
  }

  /**
   * A taken delta that was not applied: it becomes pending again, merged with what changed since
   * it was taken (a flow added in it and dropped since is simply no longer pending, and so on).
   */
  restore(delta: FlowDelta): void {
    for (const f of delta.add) {
      if (this.pendingRemove.delete(f.cookie)) continue; // dropped since: the bridge never got it
      const held = this.held.get(f.cookie);
      if (held) this.pendingAdd.set(f.cookie, held);
    }
    for (const cookie of delta.remove) {
      if (this.pendingAdd.delete(cookie)) continue; // wanted again since: the bridge still has it
      if (!this.held.has(cookie)) this.pendingRemove.add(cookie);
    }
  }

  private hold(f: Flow): void {
    if (this.held.has(f.cookie)) {
      this.refs.set(f.cookie, (this.refs.get(f.cookie) ?? 1) + 1);
      return;
    }
    this.held.set(f.cookie, f);
    if (!this.pendingRemove.delete(f.cookie)) this.pendingAdd.set(f.cookie, f);
  }

  private release(cookie: string): void {
    if (!this.held.has(cookie)) return;
    const refs = this.refs.get(cookie);
    if (refs !== undefined) {
      if (refs > 2) this.refs.set(cookie, refs - 1);
      else this.refs.delete(cookie);
      return;
    }
    this.held.delete(cookie);
    if (!this.pendingAdd.delete(cookie)) this.pendingRemove.add(cookie);
  }
}
