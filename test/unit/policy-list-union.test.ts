/**
 * unionOf (daemon/policy/list-union.ts): the union of a peer set's address lists, kept from version
 * to version. Random walks of changes to the inputs, some through recorded steps (SortedList.with),
 * some as lists built afresh, against a full merge; a union that followed the steps is itself a
 * step of the one before, with exactly the addresses that came and went.
 */
import t from 'tap';
import { mergeSorted, unionOf } from '../../daemon/policy/list-union.js';
import { knownListDiff } from '../../daemon/policy/liststeps.js';
import { type AddressList, addressArray, SortedList } from '../../daemon/policy/sorted-list.js';
import { rng } from './policy-core-helpers.js';

const ip = (n: number) => `10.7.${(n >> 8) & 255}.${n & 255}`;
const asc = (xs: Iterable<string>) => [...new Set(xs)].sort();
const plainUnion = (lists: readonly AddressList[]) => asc(lists.flatMap((l) => [...addressArray(l)]));

t.test('a random walk of the inputs: the union is a full merge at each step, followed through the steps when they are known', async (t) => {
  const rand = rng(23).next;
  const pool = 600;
  const make = (n: number) => SortedList.from(asc(Array.from({ length: n }, () => ip(Math.floor(rand() * pool)))));
  let inputs: AddressList[] = [make(200), make(150), make(0)];
  let union = unionOf('walk', inputs);
  let followed = 0;
  let merged = 0;
  let failures = 0;
  for (let step = 0; step < 600; step++) {
    const i = Math.floor(rand() * inputs.length);
    const cur = inputs[i]!;
    const r = rand();
    let next: AddressList;
    if (r < 0.8 && cur instanceof SortedList) {
      // Members come and go, some shared with another input (moves between groups among them).
      const come = asc(Array.from({ length: Math.floor(rand() * 4) }, () => ip(Math.floor(rand() * pool))));
      const gone = asc([...cur].filter(() => rand() < 0.01));
      next = cur.with(gone, come);
    } else if (r < 0.9) {
      next = asc(Array.from({ length: Math.floor(rand() * 100) }, () => ip(Math.floor(rand() * pool)))); // an array built afresh
    } else {
      next = make(Math.floor(rand() * 120));
    }
    const before = inputs;
    inputs = inputs.map((l, k) => (k === i ? next : l));
    const prev = union;
    union = unionOf('walk', inputs);
    const want = plainUnion(inputs);
    if (JSON.stringify([...addressArray(union)]) !== JSON.stringify(want)) {
      failures++;
      t.same([...addressArray(union)], want, `step ${step}: the union of the inputs`);
      continue;
    }
    const nonEmpty = (ls: AddressList[]) => ls.filter((l) => l.length > 0).length;
    const stepKnown = before.every((l, k) => l === inputs[k] || knownListDiff(l, inputs[k]!) !== undefined);
    if (nonEmpty(before) >= 2 && nonEmpty(inputs) >= 2 && stepKnown) {
      // Followed: the new union is recorded as made from the previous one, by exactly the difference.
      const d = knownListDiff(prev, union);
      const gone = [...addressArray(prev)].filter((x) => !want.includes(x));
      const came = want.filter((x) => !addressArray(prev).includes(x));
      if (!d || JSON.stringify(d) !== JSON.stringify({ gone, come: came })) {
        failures++;
        t.same(d, { gone, come: came }, `step ${step}: the union is a step of the one before`);
      }
      followed++;
    } else merged++;
  }
  t.equal(failures, 0, 'every union equal to a full merge, every followed one a recorded step');
  t.ok(followed > 200, `most unions followed the steps (${followed} followed, ${merged} merged in full)`);
  t.ok(merged > 20, 'and some were merged in full (an input built afresh, a union of one list)');
});

t.test('one non-empty input is returned as it is; none gives an empty list', async (t) => {
  const a = SortedList.from(['10.0.0.1', '10.0.0.2']);
  t.equal(unionOf('one', [a, []]), a, 'the list itself, its steps kept');
  t.same(unionOf('none', [[], SortedList.EMPTY]), []);
});

t.test('a peer set whose inputs come in another order, or another number of them, is merged in full and right', async (t) => {
  const a = SortedList.from(['10.0.0.1', '10.0.0.3']);
  const b = SortedList.from(['10.0.0.2', '10.0.0.3']);
  t.same([...addressArray(unionOf('k', [a, b]))], ['10.0.0.1', '10.0.0.2', '10.0.0.3']);
  t.same([...addressArray(unionOf('k', [b, a.with(['10.0.0.1'], [])]))], ['10.0.0.2', '10.0.0.3']);
  const c = SortedList.from(['10.0.0.9']);
  t.same([...addressArray(unionOf('k', [a, b, c]))], ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.9']);
});

t.test('an address that moves from one input to another stays in the union; one held by two leaves with the last', async (t) => {
  const a = SortedList.from(['10.0.0.1', '10.0.0.5']);
  const b = SortedList.from(['10.0.0.2', '10.0.0.5']);
  const u0 = unionOf('move', [a, b]);
  const a1 = a.with(['10.0.0.1'], []);
  const b1 = b.with([], ['10.0.0.1']);
  const u1 = unionOf('move', [a1, b1]);
  t.same([...addressArray(u1)], ['10.0.0.1', '10.0.0.2', '10.0.0.5']);
  t.equal(u1, u0, 'nothing changed: the same version');
  const u2 = unionOf('move', [a1.with(['10.0.0.5'], []), b1]);
  t.same([...addressArray(u2)], ['10.0.0.1', '10.0.0.2', '10.0.0.5'], 'still held by the other input');
  const u3 = unionOf('move', [a1.with(['10.0.0.5'], []), b1.with(['10.0.0.5'], [])]);
  t.same(knownListDiff(u2, u3), { gone: ['10.0.0.5'], come: [] }, 'gone with the last input holding it');
});

t.test('mergeSorted: the union of sorted lists', async (t) => {
  t.same(mergeSorted([['a', 'c'], ['b', 'c', 'd'], []]), ['a', 'b', 'c', 'd']);
  t.same(mergeSorted([]), []);
});
