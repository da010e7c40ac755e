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
 *
 * Rendered owners: an owner whose flows its own source can list again (the policy compiler, which
 * keeps what it needs to build each flow) is declared with `renderedBy()`. The store then keeps
 * only its cookies, each as a number (in a CookieSet), not a copy of its flows: at 150 000 Pods a
 * node's 82 000 policy flows held as flow objects under two maps took 18 MiB. Its flows are listed
 * from the source when every flow is asked for (`flows()`, a verify against the bridge that finds
 * some missing); a delta carries the flow objects the owner stated, until it is taken.
 */
import { CookieSet } from './cookie-set.js';
import { COOKIE_PREFIX, type Flow } from './flow.js';

/** Brings its owners in the store up to date (called before each sync takes the delta). */
export type FlowSource = (store: FlowStore) => void;

/** What the bridge needs to reach the desired set. */
export interface FlowDelta {
  add: Flow[];
  /** Cookies to delete. */
  remove: string[];
}

const SLUICE_COOKIE = new RegExp(`^0x${COOKIE_PREFIX}[0-9a-f]{12}$`);

/**
 * A sluice cookie (`0x51ce` and 12 hex digits: its category and content hash) as the 48-bit number
 * of those 12 digits, exact in a double: what a rendered owner's cookies are kept as.
 */
export function cookieNumber(cookie: string): number {
  const n = sluiceCookieNumber(cookie);
  if (n === undefined) throw new Error(`flow store: cookie ${cookie} is not a sluice cookie (0x${COOKIE_PREFIX} and 12 hex digits)`);
  return n;
}

/** cookieNumber, or undefined for a cookie that is not sluice's. */
function sluiceCookieNumber(cookie: string): number | undefined {
  return SLUICE_COOKIE.test(cookie) ? Number.parseInt(cookie.slice(2 + COOKIE_PREFIX.length), 16) : undefined;
}

/** cookieNumber's inverse. */
export function cookieText(n: number): string {
  return `0x${COOKIE_PREFIX}${n.toString(16).padStart(12, '0')}`;
}

/** What a rendered owner gives the store instead of keeping its flows there (see renderedBy). */
export interface RenderedSource {
  /** Its flows as it last stated them to the store. */
  flows(): readonly Flow[];
  /** How many of them are in each table (for metrics, without listing them). */
  countByTable(): Record<string, number>;
}

interface RenderedOwner {
  /** The cookies the owner states, as cookieNumber()s. */
  cookies: CookieSet;
  source: RenderedSource;
}

export class FlowStore {
  /** The owners whose flows the store keeps. */
  private readonly owners = new Map<string, Map<string, Flow>>();
  /** The owners whose flows their source keeps (see the file comment). */
  private readonly rendered = new Map<string, RenderedOwner>();
  /** Every flow a kept owner wants, by cookie. */
  private readonly held = new Map<string, Flow>();
  /**
   * Owners wanting a cookie, for the cookies more than one owner wants (rare): the others have one,
   * and a count object for each of tens of thousands of flows would be a third of what a flow costs.
   */
  private readonly refs = new Map<string, number>();
  /** Distinct cookies wanted. */
  private wanted = 0;
  /** Cookies wanted since the last take() that were not wanted then. */
  private readonly pendingAdd = new Map<string, Flow>();
  /** Cookies wanted at the last take() that no longer are. */
  private readonly pendingRemove = new Set<string>();
  /** The kept owners' flows in one list, kept until they change. */
  private keptList?: Flow[] | undefined;

  /** Number of distinct desired flows (what the bridge holds once the pending delta is applied). */
  get size(): number {
    return this.wanted;
  }

  /** Whether some change waits for take(). */
  get dirty(): boolean {
    return this.pendingAdd.size + this.pendingRemove.size > 0;
  }

  /**
   * Declares `owner` a rendered owner (see the file comment): `source` lists its flows as it last
   * stated them to the store (a source that has moved on since lists some the store no longer
   * wants, which are left out, and misses some it still does, which are listed by nobody until the
   * owner states its change). Its cookies must be sluice cookies. Declared before it states any flow.
   */
  renderedBy(owner: string, source: RenderedSource): void {
    if (this.owners.has(owner)) throw new Error(`flow store: owner ${owner} already has flows kept here; declare it rendered before it states any`);
    const cur = this.rendered.get(owner);
    if (cur) cur.source = source;
    else this.rendered.set(owner, { cookies: new CookieSet(), source });
  }

  /**
   * The desired set, one flow per cookie, owners in the order they first appeared (rendered owners
   * last). Shared with later calls while nothing changed when no rendered owner has flows: do not
   * modify it.
   */
  flows(): Flow[] {
    if (!this.keptList) {
      const out: Flow[] = [];
      const seen = new Set<string>();
      for (const flows of this.owners.values()) {
        for (const [cookie, f] of flows) {
          if (seen.has(cookie)) continue;
          seen.add(cookie);
          out.push(f);
        }
      }
      this.keptList = out;
    }
    let out = this.keptList;
    const seen = new Set<string>();
    for (const r of this.rendered.values()) {
      if (r.cookies.size === 0) continue;
      if (out === this.keptList) out = [...out];
      for (const f of this.renderedFlows(r)) {
        if (this.held.has(f.cookie) || seen.has(f.cookie)) continue;
        seen.add(f.cookie);
        out.push(f);
      }
    }
    return out;
  }

  /**
   * The desired flows per table, without listing a rendered owner's (its source counts them, as of
   * its latest state; a flow both it and another owner want, which none do, would count twice).
   */
  countByTable(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const f of this.held.values()) out[f.table] = (out[f.table] ?? 0) + 1;
    for (const r of this.rendered.values()) {
      if (r.cookies.size === 0) continue;
      for (const [table, n] of Object.entries(r.source.countByTable())) out[table] = (out[table] ?? 0) + n;
    }
    return out;
  }

  has(cookie: string): boolean {
    return this.held.has(cookie) || this.renderedHas(cookie);
  }

  /** The flows one owner states (empty when unknown). */
  ownerFlows(owner: string): Flow[] {
    const r = this.rendered.get(owner);
    if (r) return this.renderedFlows(r);
    return [...(this.owners.get(owner)?.values() ?? [])];
  }

  ownerNames(): string[] {
    return [...this.owners.keys(), ...[...this.rendered].filter(([, r]) => r.cookies.size > 0).map(([name]) => name)];
  }

  /** The owner's flows become `flows` (duplicates by cookie count once); returns how many cookies it gained and lost. */
  replace(owner: string, flows: readonly Flow[]): { added: number; removed: number } {
    const r = this.rendered.get(owner);
    if (r) return this.replaceRendered(r, flows);
    const cur = this.owners.get(owner);
    const next = new Map<string, Flow>();
    for (const f of flows) next.set(f.cookie, f);
    let added = 0;
    let removed = 0;
    if (cur) {
      for (const cookie of cur.keys()) {
        if (next.has(cookie)) continue;
        cur.delete(cookie);
        this.releaseKept(cookie);
        removed++;
      }
    }
    for (const [cookie, f] of next) {
      if (cur?.has(cookie)) continue;
      this.holdKept(f);
      added++;
    }
    if (next.size === 0) this.owners.delete(owner);
    else this.owners.set(owner, next);
    if (added + removed > 0) this.keptList = undefined;
    return { added, removed };
  }

  /**
   * Changes an owner's flows by a delta it computed itself: `remove` (by cookie) first, then `add`.
   * Removing a cookie the owner does not hold, or adding one it already holds, is a no-op.
   */
  patch(owner: string, add: readonly Flow[], remove: readonly (Flow | string)[]): void {
    const r = this.rendered.get(owner);
    if (r) {
      for (const x of remove) {
        const cookie = typeof x === 'string' ? x : x.cookie;
        if (r.cookies.delete(cookieNumber(cookie))) this.release(cookie);
      }
      for (const f of add) this.holdRendered(r, f);
      return;
    }
    let flows = this.owners.get(owner);
    if (!flows) this.owners.set(owner, (flows = new Map()));
    for (const x of remove) {
      const cookie = typeof x === 'string' ? x : x.cookie;
      if (!flows.delete(cookie)) continue;
      this.releaseKept(cookie);
      this.keptList = undefined;
    }
    for (const f of add) {
      if (flows.has(f.cookie)) continue;
      flows.set(f.cookie, f);
      this.holdKept(f);
      this.keptList = undefined;
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
   * repairs. Restore it like take()'s if applying fails. A rendered owner's flows are listed only
   * when the bridge misses some of its cookies.
   */
  takeAgainst(installed: ReadonlySet<string>): FlowDelta {
    const add: Flow[] = [];
    for (const [cookie, f] of this.held) if (!installed.has(cookie)) add.push(f);
    for (const r of this.rendered.values()) {
      let missing = false;
      for (const n of r.cookies) {
        if (installed.has(cookieText(n))) continue;
        missing = true;
        break;
      }
      if (!missing) continue;
      const listed = new Set(add.map((f) => f.cookie));
      for (const f of this.renderedFlows(r)) {
        if (installed.has(f.cookie) || this.held.has(f.cookie) || listed.has(f.cookie)) continue;
        listed.add(f.cookie);
        add.push(f);
      }
    }
    const remove: string[] = [];
    for (const cookie of installed) if (!this.has(cookie)) remove.push(cookie);
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
      if (this.has(f.cookie)) this.pendingAdd.set(f.cookie, this.held.get(f.cookie) ?? f);
    }
    for (const cookie of delta.remove) {
      if (this.pendingAdd.delete(cookie)) continue; // wanted again since: the bridge still has it
      if (!this.has(cookie)) this.pendingRemove.add(cookie);
    }
  }

  private renderedHas(cookie: string): boolean {
    if (this.rendered.size === 0) return false;
    const n = sluiceCookieNumber(cookie);
    if (n === undefined) return false;
    for (const r of this.rendered.values()) if (r.cookies.has(n)) return true;
    return false;
  }

  /** The rendered owner's flows the store holds it to want (its source's, less what it moved on to since). */
  private renderedFlows(r: RenderedOwner): Flow[] {
    return r.source.flows().filter((f) => {
      const n = sluiceCookieNumber(f.cookie);
      return n !== undefined && r.cookies.has(n);
    });
  }

  private replaceRendered(r: RenderedOwner, flows: readonly Flow[]): { added: number; removed: number } {
    const next = new Map<number, Flow>();
    for (const f of flows) next.set(cookieNumber(f.cookie), f);
    let removed = 0;
    for (const n of r.cookies) {
      if (next.has(n)) continue;
      r.cookies.delete(n);
      this.release(cookieText(n));
      removed++;
    }
    let added = 0;
    for (const f of next.values()) if (this.holdRendered(r, f)) added++;
    return { added, removed };
  }

  /** Records `f` for a rendered owner; false when it already held it. */
  private holdRendered(r: RenderedOwner, f: Flow): boolean {
    const n = cookieNumber(f.cookie);
    if (r.cookies.has(n)) return false;
    this.acquire(f);
    r.cookies.add(n);
    return true;
  }

  private holdKept(f: Flow): void {
    this.acquire(f);
    if (!this.held.has(f.cookie)) this.held.set(f.cookie, f);
  }

  /** One more owner wants `f` (counted before the owner records it). */
  private acquire(f: Flow): void {
    const cookie = f.cookie;
    const refs = this.refs.get(cookie);
    if (refs !== undefined) this.refs.set(cookie, refs + 1);
    else if (this.has(cookie)) this.refs.set(cookie, 2);
    else {
      this.wanted++;
      if (!this.pendingRemove.delete(cookie)) this.pendingAdd.set(cookie, f);
    }
  }

  /** A kept owner no longer wants `cookie` (it has removed it from its own flows). */
  private releaseKept(cookie: string): void {
    if (!this.held.has(cookie)) return;
    // Still wanted by another kept owner: its flow stays held.
    const elsewhere = this.refs.has(cookie) && [...this.owners.values()].some((flows) => flows.has(cookie));
    if (!elsewhere) this.held.delete(cookie);
    this.release(cookie);
  }

  /** One owner fewer wants `cookie` (it has removed it from its own records). */
  private release(cookie: string): void {
    const refs = this.refs.get(cookie);
    if (refs !== undefined) {
      if (refs > 2) this.refs.set(cookie, refs - 1);
      else this.refs.delete(cookie);
      return;
    }
    this.wanted--;
    if (!this.pendingAdd.delete(cookie)) this.pendingRemove.add(cookie);
  }
}
