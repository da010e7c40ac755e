/**
 * Sorted lists that are never modified: a change gives a new version sharing every chunk of the
 * old one but those the change touched. A group of every Pod of the cluster holds 150 000 members;
 * copying them at each member that comes or goes costs milliseconds and megabytes per event, where
 * this costs one chunk (at most 2 × CHUNK items) plus the chunk index (length / CHUNK pointers).
 *
 * - `KeyedList<T>`: items sorted by a string key, unique by key; a change removes keys and puts
 *   items (replacing the item of the same key). The controller's AddressGroup members.
 * - `SortedList`: sorted unique strings (a group's member addresses in node rules). Each version
 *   made by `with` is recorded as a list step (liststeps.ts), so a consumer holding an older
 *   version learns what came and went in O(changed) without comparing the lists.
 *
 * Both are iterable and write themselves as JSON arrays (JSON.stringify and canonicalJson).
 */
import { knownListDiff, recordListStep } from './liststeps.js';

/** A chunk grows to at most 2 × CHUNK items before it is split in two. */
const CHUNK = 256;

type Chunks<T> = readonly (readonly T[])[];

/** Items in chunks (non-empty, each sorted, every key of one below every key of the next). */
abstract class ChunkedList<T> implements Iterable<T> {
  private flat: readonly T[] | undefined;

  protected constructor(
    protected readonly chunks: Chunks<T>,
    readonly length: number,
  ) {}

  protected static split<T>(sorted: readonly T[]): T[][] {
    const chunks: T[][] = [];
    for (let i = 0; i < sorted.length; i += CHUNK) chunks.push(sorted.slice(i, i + CHUNK));
    return chunks;
  }

  protected abstract keyOf(item: T): string;

  /** The item of `key`, if any. */
  protected find(key: string): T | undefined {
    const i = chunkOf(this.chunks, key, (x) => this.keyOf(x));
    if (i < 0) return undefined;
    const c = this.chunks[i]!;
    const item = c[lowerBoundBy(c, key, (x) => this.keyOf(x))];
    return item !== undefined && this.keyOf(item) === key ? item : undefined;
  }

  /**
   * The chunks without the items of `removeKeys` and with `put` (each ascending by key, unique),
   * and what changed: the keys removed and the items put (`replace`: whether an item of the same
   * key is replaced or the new one ignored). undefined when nothing changed.
   */
  protected edit(removeKeys: readonly string[], put: readonly T[], replace: boolean): { chunks: Chunks<T>; length: number; removed: string[]; added: T[] } | undefined {
    const keyOf = (x: T) => this.keyOf(x);
    const chunks = [...this.chunks] as T[][];
    /** Chunks already copied for the new version (written in place from then on). */
    const own = new Set<T[]>();
    const writable = (i: number): T[] => {
      let c = chunks[i]!;
      if (!own.has(c)) {
        c = [...c];
        chunks[i] = c;
        own.add(c);
      }
      return c;
    };
    let length = this.length;
    const removed: string[] = [];
    const added: T[] = [];
    for (const key of removeKeys) {
      const i = chunkOf(chunks, key, keyOf);
      if (i < 0) continue;
      const at = lowerBoundBy(chunks[i]!, key, keyOf);
      const item = chunks[i]![at];
      if (item === undefined || keyOf(item) !== key) continue;
      const c = writable(i);
      c.splice(at, 1);
      length--;
      removed.push(key);
      if (c.length === 0) chunks.splice(i, 1);
    }
    for (const item of put) {
      const key = keyOf(item);
      if (chunks.length === 0) {
        const c = [item];
        chunks.push(c);
        own.add(c);
        length++;
        added.push(item);
        continue;
      }
      // The chunk the key falls in, else the first one (the key is below every chunk).
      const i = Math.max(0, chunkOf(chunks, key, keyOf));
      const at = lowerBoundBy(chunks[i]!, key, keyOf);
      const there = chunks[i]![at];
      if (there !== undefined && keyOf(there) === key) {
        if (!replace || there === item) continue;
        writable(i)[at] = item;
        added.push(item);
        continue;
      }
      const c = writable(i);
      c.splice(at, 0, item);
      length++;
      added.push(item);
      if (c.length > 2 * CHUNK) {
        const tail = c.splice(CHUNK);
        chunks.splice(i + 1, 0, tail);
        own.add(tail);
      }
    }
    if (removed.length === 0 && added.length === 0) return undefined;
    return { chunks, length, removed, added };
  }

  *[Symbol.iterator](): Iterator<T> {
    for (const c of this.chunks) yield* c;
  }

  /** Every item in order, as one array (built once per version, for the consumers that index). */
  toArray(): readonly T[] {
    if (this.flat === undefined) this.flat = this.chunks.length === 1 ? this.chunks[0]! : this.chunks.flat();
    return this.flat;
  }

  /** As JSON: the array it stands for. */
  toJSON(): readonly T[] {
    return this.toArray();
  }
}

/** Items sorted and unique by a string key (see the file comment). */
export class KeyedList<T> extends ChunkedList<T> {
  private constructor(
    chunks: Chunks<T>,
    length: number,
    private readonly key: (item: T) => string,
  ) {
    super(chunks, length);
  }

  /** The list of `sorted` (ascending by key, unique: not checked), sharing nothing with it. */
  static from<T>(sorted: readonly T[], key: (item: T) => string): KeyedList<T> {
    return new KeyedList(ChunkedList.split(sorted), sorted.length, key);
  }

  protected keyOf(item: T): string {
    return this.key(item);
  }

  /** The item of `key`, if any. */
  get(key: string): T | undefined {
    return this.find(key);
  }

  /** The items whose key starts with `prefix`, in order (O(log n) to the first). */
  *withKeyPrefix(prefix: string): Generator<T> {
    const key = this.key;
    for (let i = Math.max(0, chunkOf(this.chunks, prefix, key)); i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      for (let at = lowerBoundBy(c, prefix, key); at < c.length; at++) {
        if (!key(c[at]!).startsWith(prefix)) return;
        yield c[at]!;
      }
    }
  }

  /**
   * This list without the items of `removeKeys` and with `put`, an item replacing the one of its
   * key (each unique by key, in any order). Returns this list when nothing changes.
   */
  with(removeKeys: readonly string[], put: readonly T[]): KeyedList<T> {
    const e = this.edit(removeKeys, put, true);
    return e ? new KeyedList(e.chunks, e.length, this.key) : this;
  }
}

/** Sorted unique strings, each version's step recorded (see the file comment). */
export class SortedList extends ChunkedList<string> {
  static readonly EMPTY: SortedList = new SortedList([], 0);

  /** The list of `sorted` (ascending, unique: not checked), sharing nothing with it. */
  static from(sorted: readonly string[]): SortedList {
    return sorted.length === 0 ? SortedList.EMPTY : new SortedList(ChunkedList.split(sorted), sorted.length);
  }

  protected keyOf(item: string): string {
    return item;
  }

  has(x: string): boolean {
    return this.find(x) !== undefined;
  }

  /**
   * This list without `gone` and with `come` (each ascending and unique; a `gone` string that is
   * absent and a `come` string already present are ignored). Returns this list when nothing changes.
   */
  with(gone: readonly string[], come: readonly string[]): SortedList {
    const e = this.edit(gone, come, false);
    if (!e) return this;
    const next = new SortedList(e.chunks, e.length);
    recordListStep(this, next, e.removed, e.added);
    return next;
  }

  /**
   * What went from `before` and came in this list (each ascending), from the chunks the two do not
   * share. A version made from another, however many steps back and whether or not the steps are
   * still recorded, shares every chunk no change touched, and a chunk is never modified once a
   * version holds it, so the items of a shared chunk are in both. O(chunks + the items of the
   * unshared chunks); two lists that share nothing cost every item.
   */
  diffFrom(before: SortedList): { gone: string[]; come: string[] } {
    const mine = new Set(this.chunks);
    const theirs = new Set(before.chunks);
    const onlyBefore = new Set<string>();
    for (const c of before.chunks) if (!mine.has(c)) for (const x of c) onlyBefore.add(x);
    const come: string[] = [];
    for (const c of this.chunks) {
      if (theirs.has(c)) continue;
      for (const x of c) if (!onlyBefore.delete(x)) come.push(x);
    }
    return { gone: [...onlyBefore], come };
  }
}

/** The index of the last chunk whose first key is not above `key` (-1: below every chunk). */
function chunkOf<T>(chunks: Chunks<T>, key: string, keyOf: (x: T) => string): number {
  let lo = 0;
  let hi = chunks.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keyOf(chunks[mid]![0]!) <= key) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/** The first index of a list sorted by key whose key is not below `key`. */
export function lowerBoundBy<T>(list: readonly T[], key: string, keyOf: (x: T) => string): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keyOf(list[mid]!) < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A sorted unique address list as node rules carry it: an array (built by hand, or small) or a SortedList. */
export type AddressList = readonly string[] | SortedList;

/** The list as one array (a SortedList's is built once per version). */
export function addressArray(list: AddressList): readonly string[] {
  return list instanceof SortedList ? list.toArray() : list;
}

/** The same strings in the same order (from the recorded steps when one was made from the other). */
export function sameAddressList(a: AddressList, b: AddressList): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  const known = knownListDiff(a, b) ?? (a instanceof SortedList && b instanceof SortedList ? b.diffFrom(a) : undefined);
  if (known) return known.gone.length === 0 && known.come.length === 0;
  const y = b[Symbol.iterator]();
  for (const x of a) if (y.next().value !== x) return false;
  return true;
}
