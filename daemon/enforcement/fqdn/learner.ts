/**
 * What the node has learned from DNS responses: name -> { address -> expiry }, for the names that
 * some policy's fqdn pattern matches. Pure (injected clock); it says which `learnFqdn(name, ips,
 * ttl)` calls bring the policy engine up to date, and when the next address expires.
 *
 * - TTL floor (`minTtlSeconds`, default 10 s): an answer with TTL 0 or 1 would otherwise expire
 *   before the Pod's first packet reaches the bridge (the answer comes first, the connection a few
 *   milliseconds later). Antrea likewise lets the operator keep addresses longer than the DNS TTL;
 *   established connections outlive expiry anyway (conntrack bypasses the rule tables).
 * - Addresses accumulate per name (round-robin DNS hands out different subsets); each keeps its own
 *   expiry, and a repeated address keeps the later of its two expiries.
 * - The engine keeps one expiry per name: the learner always passes the latest expiry of the name's
 *   addresses, and when an earlier address expires it calls `learnFqdn` again with the rest (or
 *   with `[]`, which forgets the name). So the engine never drops an address the learner still has
 *   and never keeps one past the learner's expiry by more than the caller's timer delay.
 * - Names no pattern matches are not kept (policies decide what is worth learning); when patterns
 *   change, names that stop matching are forgotten here and left to expire in the engine.
 * - At most `maxNames` names (default 10 000): beyond that the name expiring soonest is dropped.
 */
import { type FqdnPatternSet, canonicalDnsName } from './patterns.js';

export interface LearnUpdate {
  name: string;
  /** All live addresses of the name, sorted; `[]` = forget the name. */
  ips: string[];
  /** Seconds until the last of them expires (absent with `ips: []`). */
  ttlSeconds?: number;
}

export interface LearnerOptions {
  now?: () => number;
  minTtlSeconds?: number;
  /** Cap on a single answer's TTL (default one day): a bogus huge TTL cannot pin an address. */
  maxTtlSeconds?: number;
  maxNames?: number;
}

export const DEFAULT_MIN_TTL_SECONDS = 10;
export const DEFAULT_MAX_TTL_SECONDS = 86_400;
export const DEFAULT_MAX_NAMES = 10_000;

export class FqdnLearner {
  private readonly now: () => number;
  readonly minTtlSeconds: number;
  readonly maxTtlSeconds: number;
  readonly maxNames: number;
  /** name -> address -> expiry (ms, learner clock). */
  private readonly names = new Map<string, Map<string, number>>();

  constructor(opts: LearnerOptions = {}) {
    this.now = opts.now ?? (() => Date.now());
    this.minTtlSeconds = opts.minTtlSeconds ?? DEFAULT_MIN_TTL_SECONDS;
    this.maxTtlSeconds = opts.maxTtlSeconds ?? DEFAULT_MAX_TTL_SECONDS;
    this.maxNames = opts.maxNames ?? DEFAULT_MAX_NAMES;
    for (const [k, v] of [['minTtlSeconds', this.minTtlSeconds], ['maxTtlSeconds', this.maxTtlSeconds], ['maxNames', this.maxNames]] as const) {
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`FqdnLearner ${k} ${v} is not a non-negative number`);
    }
    if (this.maxTtlSeconds < this.minTtlSeconds) throw new RangeError(`FqdnLearner maxTtlSeconds ${this.maxTtlSeconds} is below minTtlSeconds ${this.minTtlSeconds}`);
  }

  /**
   * Records one response's names (name -> addresses with TTLs). Returns the engine updates for the
   * names the patterns match whose address set or latest expiry changed.
   */
  observe(names: ReadonlyMap<string, readonly { address: string; ttl: number }[]>, patterns: FqdnPatternSet): LearnUpdate[] {
    const now = this.now();
    const out: LearnUpdate[] = [];
    for (const [raw, addrs] of names) {
      const name = canonicalDnsName(raw);
      if (addrs.length === 0 || !patterns.matches(name)) continue;
      let rec = this.names.get(name);
      const before = rec ? this.signature(rec) : '';
      if (!rec) {
        rec = new Map();
        this.names.set(name, rec);
      }
      for (const { address, ttl } of addrs) {
        const seconds = Math.min(this.maxTtlSeconds, Math.max(this.minTtlSeconds, ttl));
        const expiry = now + seconds * 1000;
        const prev = rec.get(address);
        if (prev === undefined || prev < expiry) rec.set(address, expiry);
      }
      if (this.signature(rec) !== before) out.push(this.update(name, rec, now));
    }
    this.enforceLimit(out);
    return out;
  }

  /** Drops expired addresses; the updates for the names that lost some (or all) of them. */
  expire(): LearnUpdate[] {
    const now = this.now();
    const out: LearnUpdate[] = [];
    for (const [name, rec] of [...this.names].sort(([a], [b]) => (a < b ? -1 : 1))) {
      let lost = false;
      for (const [ip, exp] of rec) if (exp <= now) { rec.delete(ip); lost = true; }
      if (!lost) continue;
      if (rec.size === 0) {
        this.names.delete(name);
        out.push({ name, ips: [] });
      } else {
        out.push(this.update(name, rec, now));
      }
    }
    return out;
  }

  /** Forgets names the patterns no longer match (the engine lets them expire on its own). */
  retain(patterns: FqdnPatternSet): string[] {
    const dropped: string[] = [];
    for (const name of [...this.names.keys()]) if (!patterns.matches(name)) { this.names.delete(name); dropped.push(name); }
    return dropped.sort();
  }

  /** Clock time (ms) of the next address expiry, undefined when nothing is learned. */
  nextExpiryAt(): number | undefined {
    let min = Infinity;
    for (const rec of this.names.values()) for (const exp of rec.values()) if (exp < min) min = exp;
    return min === Infinity ? undefined : min;
  }

  /** Live addresses of a name (sorted) — for `sluicectl`-style inspection and tests. */
  addresses(name: string): { ip: string; expiresAt: number }[] {
    const rec = this.names.get(canonicalDnsName(name));
    return rec ? [...rec].map(([ip, expiresAt]) => ({ ip, expiresAt })).sort((a, b) => (a.ip < b.ip ? -1 : 1)) : [];
  }

  /** Every learned name with its live addresses, as `learnFqdn` calls (replay into a fresh engine). */
  snapshot(): LearnUpdate[] {
    const now = this.now();
    return [...this.names].filter(([, rec]) => [...rec.values()].some((e) => e > now)).sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, rec]) => this.update(name, rec, now, true));
  }

  get size(): number {
    return this.names.size;
  }

  private update(name: string, rec: Map<string, number>, now: number, liveOnly = false): LearnUpdate {
    const live = [...rec].filter(([, e]) => !liveOnly || e > now);
    const last = Math.max(...live.map(([, e]) => e));
    return { name, ips: live.map(([ip]) => ip).sort(), ttlSeconds: Math.max(0, (last - now) / 1000) };
  }

  private signature(rec: Map<string, number>): string {
    const ips = [...rec.keys()].sort().join(',');
    return `${ips}|${Math.max(...rec.values())}`;
  }

  private enforceLimit(out: LearnUpdate[]): void {
    if (this.names.size <= this.maxNames) return;
    const byLast = [...this.names].map(([name, rec]) => ({ name, last: Math.max(...rec.values()) })).sort((a, b) => a.last - b.last || (a.name < b.name ? -1 : 1));
    for (const { name } of byLast.slice(0, this.names.size - this.maxNames)) {
      this.names.delete(name);
      const i = out.findIndex((u) => u.name === name);
      if (i >= 0) out.splice(i, 1);
      out.push({ name, ips: [] });
    }
  }
}
