/**
 * The node's one store of learned DNS names: name -> { address -> expiry }, for the names some
 * policy's fqdn pattern matches, and the one clock they expire on. Pure (the clock is injected):
 * every method returns the names whose address set changed, as `{ name, ips }`, which is all the
 * policy engine is told (`PolicyEngine.setFqdnAddresses`; it keeps no expiry of its own).
 *
 * - TTL floor (`minTtlSeconds`, default 10 s): an answer with TTL 0 or 1 would otherwise expire
 *   before the Pod's first packet reaches the bridge (the answer comes first, the connection a few
 *   milliseconds later). Antrea likewise lets the operator keep addresses longer than the DNS TTL;
 *   established connections outlive expiry anyway (conntrack bypasses the rule tables).
 * - TTL cap (`maxTtlSeconds`, default one day): a bogus huge TTL cannot pin an address.
 * - Addresses accumulate per name (round-robin DNS hands out different subsets); each keeps its own
 *   expiry, and a repeated address keeps the later of its two expiries. A later expiry alone changes
 *   no address set, so it tells the engine nothing (and the response that brought it is not held).
 * - Names no pattern matches are not learned (policies decide what is worth learning); a learned
 *   name whose pattern goes away keeps its addresses until they expire, so a policy that brings the
 *   pattern back (re-created, or edited back) allows them again before the Pod asks DNS anew (many
 *   runtimes cache answers for their TTL or longer).
 * - At most `maxNames` names (default 10 000): beyond that the name whose last address expires
 *   soonest is dropped.
 */
import type { Clock } from '../../clock.js';
import { realClock } from '../../clock.js';
import { canonicalDnsName, type FqdnPatternSet } from '../../policy/fqdn.js';

/** A name's address set changed: its live addresses (sorted), `[]` when the name is gone. */
export interface FqdnUpdate {
  name: string;
  ips: string[];
}

export interface LearnerOptions {
  /** Time of the expiries (the agent's clock; a ManualClock in tests). */
  clock?: Pick<Clock, 'now'>;
  minTtlSeconds?: number;
  maxTtlSeconds?: number;
  maxNames?: number;
}

export const DEFAULT_MIN_TTL_SECONDS = 10;
export const DEFAULT_MAX_TTL_SECONDS = 86_400;
export const DEFAULT_MAX_NAMES = 10_000;

const byName = (a: FqdnUpdate, b: FqdnUpdate) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

export class FqdnLearner {
  private readonly clock: Pick<Clock, 'now'>;
  readonly minTtlSeconds: number;
  readonly maxTtlSeconds: number;
  readonly maxNames: number;
  /** name -> address -> expiry (ms, on `clock`). Every name here has at least one address. */
  private readonly names = new Map<string, Map<string, number>>();

  constructor(opts: LearnerOptions = {}) {
    this.clock = opts.clock ?? realClock;
    this.minTtlSeconds = opts.minTtlSeconds ?? DEFAULT_MIN_TTL_SECONDS;
    this.maxTtlSeconds = opts.maxTtlSeconds ?? DEFAULT_MAX_TTL_SECONDS;
    this.maxNames = opts.maxNames ?? DEFAULT_MAX_NAMES;
    for (const [k, v] of [['minTtlSeconds', this.minTtlSeconds], ['maxTtlSeconds', this.maxTtlSeconds], ['maxNames', this.maxNames]] as const) {
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`FqdnLearner ${k} ${v} is not a non-negative number`);
    }
    if (this.maxTtlSeconds < this.minTtlSeconds) throw new RangeError(`FqdnLearner maxTtlSeconds ${this.maxTtlSeconds} is below minTtlSeconds ${this.minTtlSeconds}`);
  }

  /**
   * Records one response's names (name -> addresses with TTLs in seconds). Returns the names the
   * patterns match whose address set changed, and names dropped by the name limit (`ips: []`).
   */
  observe(names: ReadonlyMap<string, readonly { address: string; ttl: number }[]>, patterns: FqdnPatternSet): FqdnUpdate[] {
    const now = this.clock.now();
    const changed = new Set<string>();
    for (const [raw, addrs] of names) {
      const name = canonicalDnsName(raw);
      if (addrs.length === 0 || !patterns.matches(name)) continue;
      let rec = this.names.get(name);
      if (!rec) {
        rec = new Map();
        this.names.set(name, rec);
      }
      for (const { address, ttl } of addrs) {
        const expiry = now + this.ttlSeconds(ttl) * 1000;
        const prev = rec.get(address);
        if (prev === undefined) changed.add(name);
        if (prev === undefined || prev < expiry) rec.set(address, expiry);
      }
    }
    for (const name of this.enforceLimit()) changed.add(name);
    return [...changed].map((name) => this.update(name)).sort(byName);
  }

  /** Drops the addresses whose expiry has come; the names that lost some (or all) of them. */
  expire(): FqdnUpdate[] {
    const now = this.clock.now();
    const out: FqdnUpdate[] = [];
    for (const [name, rec] of this.names) {
      let lost = false;
      for (const [ip, exp] of rec) {
        if (exp <= now) {
          rec.delete(ip);
          lost = true;
        }
      }
      if (!lost) continue;
      if (rec.size === 0) this.names.delete(name);
      out.push(this.update(name));
    }
    return out.sort(byName);
  }

  /** Clock time (ms) of the next address expiry, undefined when nothing is learned. */
  nextExpiryAt(): number | undefined {
    let min = Infinity;
    for (const rec of this.names.values()) for (const exp of rec.values()) if (exp < min) min = exp;
    return min === Infinity ? undefined : min;
  }

  /** Addresses of a name with their expiries (sorted by address): inspection and tests. */
  addresses(name: string): { ip: string; expiresAt: number }[] {
    const rec = this.names.get(canonicalDnsName(name));
    return rec ? [...rec].map(([ip, expiresAt]) => ({ ip, expiresAt })).sort((a, b) => (a.ip < b.ip ? -1 : 1)) : [];
  }

  /** Every learned name with its addresses (sorted by name): inspection and tests. */
  snapshot(): FqdnUpdate[] {
    return [...this.names.keys()].map((name) => this.update(name)).sort(byName);
  }

  get size(): number {
    return this.names.size;
  }

  /** An answer's TTL as kept: floored, capped (RFC 2181 top-bit TTLs arrive here as 0). */
  private ttlSeconds(ttl: number): number {
    return Math.min(this.maxTtlSeconds, Math.max(this.minTtlSeconds, ttl));
  }

  private update(name: string): FqdnUpdate {
    return { name, ips: [...(this.names.get(name)?.keys() ?? [])].sort() };
  }

  /** Drops the names whose last address expires soonest until at most `maxNames` remain. */
  private enforceLimit(): string[] {
    if (this.names.size <= this.maxNames) return [];
    const byLast = [...this.names].map(([name, rec]) => ({ name, last: Math.max(...rec.values()) })).sort((a, b) => a.last - b.last || (a.name < b.name ? -1 : 1));
    const dropped = byLast.slice(0, this.names.size - this.maxNames).map((d) => d.name);
    for (const name of dropped) this.names.delete(name);
    return dropped;
  }
}
