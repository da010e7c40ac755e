/**
 * What came and went between two versions of a sorted address list, known without comparing them.
 * The engine replaces a group's sorted member addresses by a new array when a member comes or goes
 * (it never modifies one) and records the step here; a consumer holding an older version (the flow
 * compiler's peer classes) then gets the difference in O(changed addresses) instead of a merge of
 * two lists of every address in the group, which grows with the cluster.
 *
 * Each version keeps the one before it alive for at most MAX_STEPS steps; older versions are let
 * go, and asking across them answers undefined (the caller compares the lists).
 */

/** A version of a list: an array, or any list object that is never modified (sorted-list.ts). */
type Version = object;

interface Step {
  /** The version this one was made from (undefined: let go). */
  from?: Version | undefined;
  gone: readonly string[];
  come: readonly string[];
}

const MAX_STEPS = 8;
const STEPS = new WeakMap<Version, Step>();

/**
 * Records that `to` is `from` without `gone` and with `come` (both lists strictly ascending and
 * unique; `gone` items were in `from`, `come` items were not).
 */
export function recordListStep(from: Version, to: Version, gone: readonly string[], come: readonly string[]): void {
  STEPS.set(to, { from, gone, come });
  // Let go of the versions beyond MAX_STEPS back, so a chain of versions is never all kept.
  let step = STEPS.get(from);
  for (let n = 1; step?.from !== undefined; n++) {
    if (n >= MAX_STEPS) {
      step.from = undefined;
      break;
    }
    step = STEPS.get(step.from);
  }
}

/**
 * What went from `a` and came in `b` (each sorted ascending), when `b` was recorded as made from
 * `a` through recordListStep; undefined when that is not known.
 */
export function knownListDiff(a: Version, b: Version): { gone: string[]; come: string[] } | undefined {
  const steps: Step[] = [];
  let cur: Version | undefined = b;
  while (cur !== a) {
    const step: Step | undefined = cur === undefined ? undefined : STEPS.get(cur);
    if (!step) return undefined;
    steps.push(step);
    cur = step.from;
  }
  if (steps.length === 1) return { gone: [...steps[0]!.gone], come: [...steps[0]!.come] };
  // Oldest step first: an address that came and went again (or the reverse) is no change.
  const net = new Map<string, boolean>();
  for (let i = steps.length - 1; i >= 0; i--) {
    for (const x of steps[i]!.gone) {
      if (net.get(x) === true) net.delete(x);
      else net.set(x, false);
    }
    for (const x of steps[i]!.come) {
      if (net.get(x) === false) net.delete(x);
      else net.set(x, true);
    }
  }
  const gone: string[] = [];
  const come: string[] = [];
  for (const [x, came] of net) (came ? come : gone).push(x);
  const asc = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
  return { gone: gone.sort(asc), come: come.sort(asc) };
}

/** The step `version` was made by (the version before it, what went and what came), if recorded and not let go. */
export function lastListStep(version: Version): { from: Version; gone: readonly string[]; come: readonly string[] } | undefined {
  const step = STEPS.get(version);
  return step?.from === undefined ? undefined : { from: step.from, gone: step.gone, come: step.come };
}
