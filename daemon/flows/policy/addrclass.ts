/**
 * Address classes: a peer address set used by several rules at different (table, priority)
 * places gets one bit in a classification register, so each of those rules matches its peers with
 * one flow on that bit instead of one flow per address.
 *
 * Two tables early in the pipeline classify every packet: SrcAddressClass sets the bits of the
 * classes holding the source address (ingress peers), DstAddressClass those holding the destination
 * (egress peers). Each has one flow per prefix (address or CIDR) of any class of its side, at
 * priority CLASS_PRIORITY_BASE + prefix length, setting the bits of every class that contains the
 * prefix, and a pipeline miss flow that goes on with no bit set. OVS uses only the most specific
 * matching prefix, which is why a prefix carries the bits of the classes of every prefix around it:
 * an address's most specific prefix P in the table lies inside every class prefix that holds the
 * address (prefixes either nest or are disjoint, and one more specific than P would have matched).
 * An ipBlock `except` reaches here already subtracted (the engine gives a block as the CIDRs left
 * of it), so the excepted range carries only the classes of the prefixes around it.
 *
 * A set used by several rules at one place (Kubernetes NetworkPolicy rules all share one priority)
 * saves no flows with a bit: its per-address flows are shared already, each carrying one
 * conjunction action per rule. But every rule that comes or goes on it rewrites all of those flows
 * (their actions change); with a bit it changes the one peer flow of that place. Such sets get a bit
 * too, after every set that saves flows, when bits are left.
 *
 * Allocation (pure, so restarts and incremental updates agree): the classes that gain flows are
 * ranked by gain (most first, then by key), then the classes that only save churn, by the flows a
 * rule change would rewrite (most first, then by key); the first `budget` per side get a bit; each
 * gets bit fnv1a(key) mod budget, collisions probed upwards in (natural bit, key) order. A class's
 * bit moves only when the set of classes with bits changes and collides with it. Classes without a
 * bit leave their rules with per-address flows.
 */
import { formatCidr, formatIp, parseCidr, parseIp } from '../../policy/cidr.js';
import { fnv1a } from '../../policy/cluster.js';
import { hex, type TableName } from '../tables.js';

export type ClassSide = 'src' | 'dst';

/**
 * Classification registers per side (32 bits each): reg0-3, reg5, reg6 and reg9 hold the pipeline's
 * own state, these are free.
 */
export const CLASS_REGS: Record<ClassSide, readonly number[]> = { src: [7, 8, 10, 11], dst: [12, 13, 14, 15] };
/** Bits per side (every bit of the side's registers). */
export const CLASS_BITS = 32 * 4;
export const CLASS_TABLE: Record<ClassSide, TableName> = { src: 'SrcAddressClass', dst: 'DstAddressClass' };
/** A classification flow's priority: this plus the prefix length (longest prefix wins). */
export const CLASS_PRIORITY_BASE = 100;
/** A class needs at least this many prefixes to be worth a bit. */
export const CLASS_MIN_PREFIXES = 2;

/** The match of one class bit (a rule's peer clause): `reg12=0x4/0x4`. */
export function classBitMatch(side: ClassSide, bit: number): string {
  const reg = CLASS_REGS[side][bit >> 5];
  if (reg === undefined) throw new Error(`address class bit ${bit} is beyond the ${side} registers`);
  const v = hex((1 << (bit & 31)) >>> 0);
  return `reg${reg}=${v}/${v}`;
}

/** `set_field:0x…->regN` for every register with a bit of `bits` set (ascending registers). */
export function classSetActions(side: ClassSide, bits: Iterable<number>): string[] {
  const words = new Map<number, number>();
  for (const b of bits) words.set(b >> 5, ((words.get(b >> 5) ?? 0) | (1 << (b & 31))) >>> 0);
  return [...words].sort(([a], [b]) => a - b).map(([w, v]) => `set_field:${hex(v)}->reg${CLASS_REGS[side][w]!}`);
}

export interface ClassCandidate {
  key: string;
  side: ClassSide;
  /** Distinct (table, priority) places of the rules using the set: flows per address today. */
  places: number;
  /** Addresses and CIDRs in the set. */
  size: number;
  /** Rules using the set (defaults to one per place). */
  users?: number;
}

/** Flows saved by a bit: (places - 1) x size - 1 (one class flow per prefix, one flow per place). */
export const classGain = (c: Pick<ClassCandidate, 'places' | 'size'>): number => (c.places - 1) * c.size - c.places;

export const naturalClassBit = (key: string, budget: number): number => fnv1a(key) % budget;

/**
 * Which classes get a bit, and which bit: per side, the `budget` classes of most gain (those that
 * gain nothing get none), bits by hash with collisions probed in (natural bit, key) order.
 */
export function allocateClassBits(candidates: Iterable<ClassCandidate>, budget = CLASS_BITS, natural: (key: string, budget: number) => number = naturalClassBit): Map<string, number> {
  if (!Number.isInteger(budget) || budget < 0 || budget > CLASS_BITS) throw new Error(`address class budget ${budget} is not 0..${CLASS_BITS}`);
  const out = new Map<string, number>();
  /** rank 0: saves flows (gain = flows saved); rank 1: saves churn only (gain = flows a rule change rewrites). */
  const bySide: Record<ClassSide, { key: string; rank: 0 | 1; gain: number }[]> = { src: [], dst: [] };
  for (const c of candidates) {
    if (c.size < CLASS_MIN_PREFIXES) continue;
    const gain = c.places >= 2 ? classGain(c) : 0;
    if (gain > 0) bySide[c.side].push({ key: c.key, rank: 0, gain });
    else if ((c.users ?? c.places) > c.places) bySide[c.side].push({ key: c.key, rank: 1, gain: c.size });
  }
  if (budget === 0) return out;
  for (const list of Object.values(bySide)) {
    list.sort((a, b) => a.rank - b.rank || b.gain - a.gain || cmp(a.key, b.key));
    const chosen = list.slice(0, budget).map(({ key }) => ({ key, bit: natural(key, budget) % budget }));
    chosen.sort((a, b) => a.bit - b.bit || cmp(a.key, b.key));
    const used = new Set<number>();
    for (const { key, bit } of chosen) {
      let n = bit;
      while (used.has(n)) n = (n + 1) % budget;
      used.add(n);
      out.set(key, n);
    }
  }
  return out;
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** A prefix of a class: its canonical text (an address for a host prefix) and its range. */
export interface ClassPrefix {
  text: string;
  family: 4 | 6;
  start: bigint;
  len: number;
}

/**
 * Parsed prefixes by text, for the addresses that come and go. Small: a class table's own entries
 * hold the prefixes it lists (tens of thousands), and a full pass over a class parses each once.
 */
const PREFIX_CACHE = new Map<string, ClassPrefix | null>();
const PREFIX_CACHE_MAX = 1 << 12;

/** An address or CIDR as a class prefix (canonical text), undefined when it is neither. */
export function classPrefix(text: string): ClassPrefix | undefined {
  const known = PREFIX_CACHE.get(text);
  if (known !== undefined) return known ?? undefined;
  const out = parsePrefix(text);
  if (PREFIX_CACHE.size >= PREFIX_CACHE_MAX) PREFIX_CACHE.clear();
  PREFIX_CACHE.set(text, out ?? null);
  return out;
}

/** classPrefix without its cache (a pass over every prefix of a table would only churn it). */
function parsePrefix(text: string): ClassPrefix | undefined {
  let out: ClassPrefix | undefined;
  if (text.includes('/')) {
    const c = parseCidr(text);
    if (c) {
      const max = c.family === 4 ? 32 : 128;
      out = { text: c.prefix === max ? formatIp(c.family, c.start) : formatCidr(c), family: c.family, start: c.start, len: c.prefix };
    }
  } else {
    const ip = parseIp(text);
    if (ip) {
      // The given text when it is already canonical (as the peers' addresses are): one string per address, not two.
      const canonical = formatIp(ip.family, ip.value);
      out = { text: canonical === text ? text : canonical, family: ip.family, start: ip.value, len: ip.family === 4 ? 32 : 128 };
    }
  }
  return out;
}

/**
 * One prefix of a class table: the bits of the classes listing it, and the actions of the flow last
 * rendered for it (`shown`), from which the flow to replace is rebuilt instead of being kept. A host
 * prefix (most of them: every address of every class) is only that, under its text; its range is
 * parsed from the text again when asked for. A CIDR also holds its range (`prefix`), which lookups
 * of the CIDRs around an address read.
 */
interface ClassEntry {
  /** One bit per listing (a class lists a prefix once, bar an address given both bare and as a host CIDR): a number while there is one. */
  bits: number | number[];
  shown: string | undefined;
  /** A CIDR's range (undefined for a host prefix). */
  prefix?: ClassPrefix | undefined;
}

const bitList = (b: number | number[]): readonly number[] => (typeof b === 'number' ? [b] : b);

/** A shared entry's key: its (sorted) bits and the actions shown. */
const entryKey = (e: ClassEntry): string => `${typeof e.bits === 'number' ? e.bits : e.bits.join()}|${e.shown ?? ''}`;

/**
 * The entries of host prefixes once rendered, shared: most addresses are listed by the same
 * classes and show the same flow (an address of a cluster-wide group is in tens of classes), so a
 * Node with 100 000 of them holds a few hundred entries, not an entry and a list of bits each
 * (measured at 150 000 Pods: ~9 MiB of 12 in the source side's table). A shared entry is never
 * changed: the table gives a prefix its own copy before changing it, and shares it again once its
 * flow is shown.
 */
class SharedEntries {
  private readonly byKey = new Map<string, ClassEntry>();
  /** Prefixes holding each shared entry. */
  private readonly users = new Map<ClassEntry, number>();

  has(e: ClassEntry): boolean {
    return this.users.has(e);
  }

  /** The shared entry equal to `e` (a host entry of the caller's own, whose bits it may reorder). */
  share(e: ClassEntry): ClassEntry {
    if (typeof e.bits !== 'number') e.bits.sort((a, b) => a - b);
    const key = entryKey(e);
    const known = this.byKey.get(key);
    if (known) {
      this.users.set(known, this.users.get(known)! + 1);
      return known;
    }
    this.byKey.set(key, e);
    this.users.set(e, 1);
    return e;
  }

  /** A prefix no longer holds shared entry `e`. */
  release(e: ClassEntry): void {
    const n = this.users.get(e);
    if (n === undefined) return;
    if (n > 1) {
      this.users.set(e, n - 1);
      return;
    }
    this.users.delete(e);
    this.byKey.delete(entryKey(e));
  }

  /** Distinct shared entries (for tests). */
  get size(): number {
    return this.byKey.size;
  }
}

/**
 * The classification table of one side: which classes (with a bit) hold each prefix, kept
 * incrementally; `flowOf(prefix)` = the bits a prefix's flow sets (its own classes' and those of
 * every prefix around it). Callers re-render the prefixes `add`/`remove` report as touched, and
 * record what they rendered with `show()`, for every touched prefix: a prefix no class lists stays
 * until its flow is shown gone.
 */
export class ClassTable {
  /** Prefix text -> entry: one per address of every class, tens of thousands, so kept small. */
  private readonly prefixes = new Map<string, ClassEntry>();
  private readonly shared = new SharedEntries();
  /** Per family, per length shorter than a host's: network start -> prefix text (CIDRs around others, while listed). */
  private readonly cidrs: Record<4 | 6, Map<number, Map<bigint, string>>> = { 4: new Map(), 6: new Map() };
  /** Entries with a flow shown. */
  private showing = 0;

  /** Bit `bit` listed at `prefix`; adds the prefixes whose flows may change to `touched`. */
  add(prefix: ClassPrefix, bit: number, touched: Set<string>): void {
    const host = isHost(prefix);
    let e = this.prefixes.get(prefix.text);
    if (!e) {
      e = host ? { bits: [], shown: undefined } : { bits: [], shown: undefined, prefix };
      this.prefixes.set(prefix.text, e);
    } else e = this.own(prefix.text, e);
    const had = bitList(e.bits);
    if (had.length === 0 && !host) this.indexCidr(prefix);
    const first = !had.includes(bit);
    e.bits = had.length === 0 ? bit : [...had, bit];
    touched.add(prefix.text);
    if (first && !host) this.touchInside(prefix, touched);
  }

  remove(prefix: ClassPrefix, bit: number, touched: Set<string>): void {
    let e = this.prefixes.get(prefix.text);
    const had = e ? bitList(e.bits) : [];
    const at = had.indexOf(bit);
    if (!e || at < 0) return;
    e = this.own(prefix.text, e);
    touched.add(prefix.text);
    const left = had.filter((_, i) => i !== at);
    e.bits = left.length === 1 ? left[0]! : left;
    if (left.includes(bit)) return;
    const cidr = e.prefix;
    if (cidr) this.touchInside(cidr, touched);
    if (left.length > 0) return;
    if (cidr) {
      const m = this.cidrs[cidr.family].get(cidr.len);
      m?.delete(cidr.start);
      if (m?.size === 0) this.cidrs[cidr.family].delete(cidr.len);
    }
    if (e.shown === undefined) this.prefixes.delete(prefix.text);
  }

  /** The prefix, and the bits its flow sets; undefined when no class lists it. */
  flowOf(text: string): { prefix: ClassPrefix; bits: number[] } | undefined {
    const e = this.prefixes.get(text);
    if (!e || bitList(e.bits).length === 0) return undefined;
    const prefix = this.prefixOf(text, e);
    const bits = new Set(bitList(e.bits));
    const max = prefix.family === 4 ? 32 : 128;
    for (const [len, m] of this.cidrs[prefix.family]) {
      if (len >= prefix.len) continue;
      const shift = BigInt(max - len);
      const around = m.get((prefix.start >> shift) << shift);
      if (around !== undefined) for (const b of bitList(this.prefixes.get(around)!.bits)) bits.add(b);
    }
    return { prefix, bits: [...bits].sort((a, b) => a - b) };
  }

  /** The actions of the flow last shown for `text` (undefined: none). */
  shown(text: string): string | undefined {
    return this.prefixes.get(text)?.shown;
  }

  /**
   * Records the flow now rendered for a prefix that `add`/`remove` touched (`actions` undefined:
   * none), whether or not it changed. The caller passes the same string for equal actions, so
   * entries share it.
   */
  show(text: string, actions: string | undefined): void {
    let e = this.prefixes.get(text);
    if (!e) {
      if (actions !== undefined) throw new Error(`address class prefix ${text} is shown but no class lists it`);
      return;
    }
    if (e.shown !== actions) {
      e = this.own(text, e);
      this.showing += (actions !== undefined ? 1 : 0) - (e.shown !== undefined ? 1 : 0);
      e.shown = actions;
    }
    if (actions === undefined && bitList(e.bits).length === 0) {
      this.shared.release(e);
      this.prefixes.delete(text);
    } else if (!e.prefix && !this.shared.has(e)) this.prefixes.set(text, this.shared.share(e));
  }

  /** Host entries shared by prefixes, distinct (for tests). */
  get sharedEntries(): number {
    return this.shared.size;
  }

  /**
   * Every prefix with a flow shown (its text and length, what the flow matches), and its actions.
   * A host's length is its family's, read from its text: no address is parsed.
   */
  *shownFlows(): Generator<{ prefix: Pick<ClassPrefix, 'text' | 'len'>; actions: string }> {
    for (const [text, e] of this.prefixes) {
      if (e.shown !== undefined) yield { prefix: e.prefix ?? { text, len: text.includes(':') ? 128 : 32 }, actions: e.shown };
    }
  }

  /** Prefixes with a flow shown. */
  get shownCount(): number {
    return this.showing;
  }

  /** The entry of `text` as the prefix's own, to change: a copy of a shared one. */
  private own(text: string, e: ClassEntry): ClassEntry {
    if (!this.shared.has(e)) return e;
    this.shared.release(e);
    const copy: ClassEntry = { bits: typeof e.bits === 'number' ? e.bits : [...e.bits], shown: e.shown };
    this.prefixes.set(text, copy);
    return copy;
  }

  /** An entry's prefix: a CIDR's own, a host's parsed from its text. */
  private prefixOf(text: string, e: ClassEntry): ClassPrefix {
    const p = e.prefix ?? classPrefix(text);
    if (!p) throw new Error(`address class prefix ${text} is no address`);
    return p;
  }

  private indexCidr(p: ClassPrefix): void {
    const byLen = this.cidrs[p.family];
    let m = byLen.get(p.len);
    if (!m) byLen.set(p.len, (m = new Map()));
    m.set(p.start, p.text);
  }

  /**
   * Every listed prefix strictly inside `outer` (their flows carry its bits). Hosts are parsed from
   * their texts: this runs when a CIDR comes or goes, not per address.
   */
  private touchInside(outer: ClassPrefix, touched: Set<string>): void {
    const max = outer.family === 4 ? 32 : 128;
    const shift = BigInt(max - outer.len);
    for (const [text, e] of this.prefixes) {
      const p = e.prefix ?? parsePrefix(text);
      if (p && p.family === outer.family && p.len > outer.len && (p.start >> shift) << shift === outer.start) touched.add(text);
    }
  }
}

const isHost = (p: ClassPrefix): boolean => p.len === (p.family === 4 ? 32 : 128);
