/**
 * A set of cookie numbers (the 48-bit integers of cookieNumber()) in one Float64Array: open
 * addressing, linear probing, deletion by shifting back (no tombstones).
 *
 * What a rendered owner of the FlowStore keeps per flow. A Set<number> holds each such number as a
 * heap number (16 bytes; they are beyond V8's small integers) under a hash table of its own, ~40
 * bytes a flow: 4.2 MiB for the 109 000 flows of a Node at 150 000 Pods. Here a slot takes 8 bytes
 * and the table is kept between 3/16 and 3/4 full: 1–2 MiB for those flows.
 *
 * The low 32 bits of a sluice cookie are content hash (its category is above them), so they index
 * the table as they are.
 */
const EMPTY = -1;
const MIN_CAPACITY = 16;
const MAX_LOAD = 0.75;

export class CookieSet {
  private slots = new Float64Array(MIN_CAPACITY).fill(EMPTY);
  private count = 0;

  constructor(values: Iterable<number> = []) {
    for (const v of values) this.add(v);
  }

  get size(): number {
    return this.count;
  }

  has(n: number): boolean {
    return this.slots[this.find(n)] === n;
  }

  /** Adds `n` (a non-negative integer below 2^53); false when it was there. */
  add(n: number): boolean {
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`cookie set: ${n} is not a cookie number`);
    const at = this.find(n);
    if (this.slots[at] === n) return false;
    this.slots[at] = n;
    this.count++;
    if (this.count > this.slots.length * MAX_LOAD) this.resize(this.slots.length * 2);
    return true;
  }

  /** Removes `n`; false when it was not there. */
  delete(n: number): boolean {
    const slots = this.slots;
    const mask = slots.length - 1;
    let hole = this.find(n);
    if (slots[hole] !== n) return false;
    // Shift back the entries after the hole that probed past it, so every entry stays reachable
    // from its home slot without a gap.
    let i = hole;
    for (;;) {
      i = (i + 1) & mask;
      const v = slots[i]!;
      if (v === EMPTY) break;
      const home = homeOf(v, mask);
      // v may move into the hole unless its home lies cyclically in (hole, i].
      if (hole <= i ? home <= hole || home > i : home <= hole && home > i) {
        slots[hole] = v;
        hole = i;
      }
    }
    slots[hole] = EMPTY;
    this.count--;
    if (this.slots.length > MIN_CAPACITY && this.count < this.slots.length * (MAX_LOAD / 4)) this.resize(this.slots.length / 2);
    return true;
  }

  /** The numbers, in no particular order; a copy, so the set may change while it is read. */
  values(): number[] {
    const out: number[] = [];
    for (const v of this.slots) if (v !== EMPTY) out.push(v);
    return out;
  }

  [Symbol.iterator](): Iterator<number> {
    return this.values()[Symbol.iterator]();
  }

  /** The slot holding `n`, or the empty slot where it would go. */
  private find(n: number): number {
    const slots = this.slots;
    const mask = slots.length - 1;
    let i = homeOf(n, mask);
    for (;;) {
      const v = slots[i];
      if (v === n || v === EMPTY) return i;
      i = (i + 1) & mask;
    }
  }

  private resize(capacity: number): void {
    const old = this.slots;
    this.slots = new Float64Array(capacity).fill(EMPTY);
    const mask = capacity - 1;
    for (const v of old) {
      if (v === EMPTY) continue;
      let i = homeOf(v, mask);
      while (this.slots[i] !== EMPTY) i = (i + 1) & mask;
      this.slots[i] = v;
    }
  }
}

const homeOf = (n: number, mask: number): number => (n % 4294967296) & mask;
