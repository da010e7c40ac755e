/**
 * The union of a rule's peer groups' address lists, kept from one version to the next.
 *
 * A rule naming several address groups matches the union of their addresses. Merged afresh, that
 * costs every address of every group at each member that comes or goes anywhere in them, and gives
 * the flow compiler a new list it can only compare whole with the one before. Kept per peer set
 * (the same groups give the same union), the union follows the steps its inputs recorded
 * (liststeps.ts): an address that went from an input leaves the union when no input holds it any
 * more, one that came joins it unless it was there. The new union is a SortedList version made by
 * `with`, so its own step is recorded for the compiler. Cost: O(changed × inputs × log size).
 *
 * An input whose step is not known (a list built afresh, or one too many versions back) makes the
 * union merged in full, as does a union not kept (the first of its peer set, or one let go: the
 * MAX_KEPT peer sets used last are kept).
 */
import { knownListDiff } from './liststeps.js';
import { type AddressList, addressArray, lowerBoundBy, SortedList } from './sorted-list.js';

const MAX_KEPT = 512;
/** Peer set -> the inputs of its last union (in its order) and that union; most recently used last. */
const kept = new Map<string, { inputs: readonly AddressList[]; union: SortedList }>();

/**
 * The sorted union of `lists` (each sorted and unique), for the peer set `key`: the same inputs
 * in the same order each time, by their versions. A single non-empty list is returned as it is,
 * so a rule with one peer group keeps its group's versions and their recorded steps.
 */
export function unionOf(key: string, lists: readonly AddressList[]): AddressList {
  const nonEmpty = lists.filter((l) => l.length > 0);
  if (nonEmpty.length <= 1) {
    kept.delete(key);
    return nonEmpty[0] ?? [];
  }
  const was = kept.get(key);
  const union = (was && followSteps(was, lists)) ?? SortedList.from(mergeSorted(nonEmpty));
  kept.delete(key);
  kept.set(key, { inputs: lists, union });
  if (kept.size > MAX_KEPT) kept.delete(kept.keys().next().value!);
  return union;
}

/** The kept union brought to `lists` through their recorded steps; undefined when a step is not known. */
function followSteps(was: { inputs: readonly AddressList[]; union: SortedList }, lists: readonly AddressList[]): SortedList | undefined {
  if (was.inputs.length !== lists.length) return undefined;
  const gone = new Set<string>();
  const came = new Set<string>();
  for (let i = 0; i < lists.length; i++) {
    const before = was.inputs[i]!;
    const now = lists[i]!;
    if (before === now) continue;
    const d = knownListDiff(before, now);
    if (!d) return undefined;
    for (const x of d.gone) gone.add(x);
    for (const x of d.come) came.add(x);
  }
  // An address that moved from one input to another stays: another input holds it, and the union had it.
  const leave = [...gone].filter((x) => !lists.some((l) => holds(l, x))).sort();
  const join = [...came].filter((x) => !was.union.has(x)).sort();
  return was.union.with(leave, join);
}

function holds(list: AddressList, x: string): boolean {
  return list instanceof SortedList ? list.has(x) : list[lowerBoundBy(list, x, (s) => s)] === x;
}

/** The union of sorted lists of unique strings, merged in full. */
export function mergeSorted(lists: readonly AddressList[]): readonly string[] {
  let out: readonly string[] = [];
  for (const list of lists) {
    const next = addressArray(list);
    if (out.length === 0) {
      out = next;
      continue;
    }
    const merged: string[] = [];
    let i = 0;
    let j = 0;
    while (i < out.length || j < next.length) {
      const a = out[i];
      const b = next[j];
      if (b === undefined || (a !== undefined && a < b)) {
        merged.push(a!);
        i++;
      } else if (a === undefined || b < a) {
        merged.push(b);
        j++;
      } else {
        merged.push(a);
        i++;
        j++;
      }
    }
    out = merged;
  }
  return out;
}
