/**
 * SortedList and KeyedList (daemon/policy/sorted-list.ts): random walks of changes against plain
 * sorted arrays, every old version left as it was, each SortedList step known to the list steps,
 * and their JSON an array.
 */
import t from 'tap';
import { knownListDiff, lastListStep } from '../../daemon/policy/liststeps.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import { addressArray, KeyedList, sameAddressList, SortedList } from '../../daemon/policy/sorted-list.js';
import { rng } from './policy-core-helpers.js';

const ip = (n: number) => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
const asc = (xs: Iterable<string>) => [...new Set(xs)].sort();

t.test('a random walk of changes agrees with a sorted array; old versions stay as they were', async (t) => {
  const rand = rng(7).next;
  let model: string[] = asc(Array.from({ length: 1500 }, (_, i) => ip(i * 3)));
  let list = SortedList.from(model);
  t.same([...list], model, 'from: the same strings in order');
  const versions: { list: SortedList; content: string[] }[] = [{ list, content: model }];
  let failures = 0;
  for (let step = 0; step < 400; step++) {
    // Clustered changes (one chunk) and spread ones (many), some absent or present already.
    const center = Math.floor(rand() * 5000);
    const spread = rand() < 0.5 ? 20 : 5000;
    const come = asc(Array.from({ length: Math.floor(rand() * 40) }, () => ip(Math.max(0, center + Math.floor((rand() - 0.5) * spread)))));
    const gone = asc(Array.from({ length: Math.floor(rand() * 40) }, () => ip(Math.max(0, center + Math.floor((rand() - 0.5) * spread)))));
    const goneNow = gone.filter((x) => model.includes(x));
    const afterGone = model.filter((x) => !gone.includes(x));
    const comeNow = come.filter((x) => !afterGone.includes(x));
    const expected = asc([...afterGone, ...come]);
    const next = list.with(gone, come);
    if (goneNow.length === 0 && comeNow.length === 0) {
      if (next !== list) failures++;
      continue;
    }
    const ok = next.length === expected.length && canonicalJson([...next]) === canonicalJson(expected) && addressArray(next).join() === expected.join();
    if (!ok) failures++;
    // The step names exactly what went and came.
    const diff = knownListDiff(list, next);
    if (!diff || diff.gone.join() !== goneNow.join() || diff.come.join() !== comeNow.join()) failures++;
    versions.push({ list: next, content: expected });
    list = next;
    model = expected;
  }
  t.equal(failures, 0, 'every version: content, length and its recorded step');
  t.ok(versions.length > 300, `${versions.length} versions made`);
  t.ok(versions.every((v) => addressArray(v.list).join() === v.content.join()), 'every earlier version still holds what it held');
  for (const probe of [ip(0), ip(3), ip(4), ip(9999), model[0]!, model.at(-1)!]) t.equal(list.has(probe), model.includes(probe), `has(${probe})`);
});

t.test('growth by thousands splits chunks; the list empties and refills', async (t) => {
  let list = SortedList.EMPTY;
  const all: string[] = [];
  for (let i = 0; i < 3000; i++) {
    const x = ip(i * 7919 % 100_000);
    list = list.with([], [x]);
    all.push(x);
  }
  t.same(addressArray(list), asc(all), '3 000 single insertions in random order');
  const half = asc(all).filter((_, i) => i % 2 === 0);
  list = list.with(half, []);
  t.same(addressArray(list), asc(all).filter((_, i) => i % 2 === 1), 'every other one removed');
  list = list.with(addressArray(list), []);
  t.equal(list.length, 0, 'emptied');
  t.same([...list], []);
  list = list.with([], [ip(5)]);
  t.same(addressArray(list), [ip(5)], 'refilled');
});

t.test('JSON, equality and list steps treat it as the array it stands for', async (t) => {
  const a = SortedList.from([ip(1), ip(2), ip(3)]);
  t.equal(JSON.stringify({ ips: a }), JSON.stringify({ ips: [ip(1), ip(2), ip(3)] }), 'JSON.stringify: an array');
  t.equal(canonicalJson({ ips: a }), canonicalJson({ ips: [ip(1), ip(2), ip(3)] }), 'canonicalJson: the same text');
  const b = a.with([ip(2)], [ip(4)]);
  t.same(lastListStep(b), { from: a, gone: [ip(2)], come: [ip(4)] }, 'the step b was made by');
  t.notOk(sameAddressList(a, b), 'a changed version differs');
  t.ok(sameAddressList(b.with([ip(4)], [ip(2)]), a), 'changed and changed back: the same strings (a known step of no net change)');
  t.ok(sameAddressList(SortedList.from([ip(1), ip(3), ip(4)]), [ip(1), ip(3), ip(4)]), 'a list and an array of the same strings');
  t.notOk(sameAddressList(SortedList.from([ip(1), ip(3), ip(5)]), [ip(1), ip(3), ip(4)]), 'same length, different strings');
  t.equal(a.with([ip(9)], [ip(1)]), a, 'nothing to change: the same version');
});

t.test('KeyedList: puts replace by key, removals by key, a prefix range; old versions unchanged', async (t) => {
  const rand = rng(11).next;
  type Item = { key: string; v: number };
  const keyOf = (x: Item) => x.key;
  const key = (n: number) => `${n % 3 === 0 ? 'service' : 'pod'}:ns/${String(n).padStart(5, '0')}`;
  let model = new Map<string, Item>();
  for (let n = 0; n < 1200; n++) model.set(key(n * 2), { key: key(n * 2), v: 0 });
  const sorted = (m: Map<string, Item>) => [...m.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
  let list = KeyedList.from(sorted(model), keyOf);
  const versions: { list: KeyedList<Item>; content: Item[] }[] = [{ list, content: sorted(model) }];
  let failures = 0;
  for (let step = 1; step <= 300; step++) {
    const center = Math.floor(rand() * 2400);
    const near = () => key(Math.max(0, center + Math.floor((rand() - 0.5) * (rand() < 0.5 ? 30 : 2400))));
    const remove = [...new Set(Array.from({ length: Math.floor(rand() * 10) }, near))];
    const put = [...new Map(Array.from({ length: Math.floor(rand() * 10) }, () => { const k = near(); return [k, { key: k, v: step }] as const; })).values()]
      .filter((x) => !remove.includes(x.key));
    const next = new Map(model);
    for (const k of remove) next.delete(k);
    for (const x of put) next.set(x.key, x);
    const got = list.with(remove, put);
    const want = sorted(next);
    if (got.length !== want.length || got.toArray().some((x, i) => x !== want[i])) failures++;
    if (remove.some((k) => got.get(k) !== undefined) || put.some((x) => got.get(x.key) !== x)) failures++;
    versions.push({ list: got, content: want });
    list = got;
    model = next;
  }
  t.equal(failures, 0, 'every version: content in key order, get by key');
  t.ok(versions.every((v) => v.list.toArray().length === v.content.length && v.list.toArray().every((x, i) => x === v.content[i])), 'every earlier version still holds what it held');
  const services = [...list.withKeyPrefix('service:')];
  t.same(services, sorted(model).filter((x) => x.key.startsWith('service:')), 'withKeyPrefix: exactly the service: items, in order');
  t.same([...list.withKeyPrefix('zzz:')], [], 'a prefix above every key: none');
  t.equal(JSON.stringify(list), JSON.stringify(sorted(model)), 'JSON: the array');
  t.equal(list.with([], [list.get(sorted(model)[0]!.key)!]), list, 'putting the very item already there: the same version');
});

t.test('diffFrom: any two versions of one list, however far apart, and lists sharing nothing', async (t) => {
  const rand = rng(11).next;
  let model = asc(Array.from({ length: 3000 }, (_, i) => ip(i * 2)));
  let list = SortedList.from(model);
  const versions: { list: SortedList; content: string[] }[] = [{ list, content: model }];
  for (let step = 0; step < 120; step++) {
    const center = Math.floor(rand() * 6000);
    const spread = rand() < 0.5 ? 30 : 6000;
    const pick = () => asc(Array.from({ length: Math.floor(rand() * 30) }, () => ip(Math.max(0, center + Math.floor((rand() - 0.5) * spread)))));
    const gone = pick();
    const come = pick();
    model = asc([...model.filter((x) => !gone.includes(x)), ...come]);
    list = list.with(gone, come);
    versions.push({ list, content: model });
  }
  let failures = 0;
  let shortcuts = 0;
  for (let k = 0; k < 300; k++) {
    const a = versions[Math.floor(rand() * versions.length)]!;
    const b = versions[Math.floor(rand() * versions.length)]!;
    const d = b.list.diffFrom(a.list);
    const want = { gone: a.content.filter((x) => !b.content.includes(x)), come: b.content.filter((x) => !a.content.includes(x)) };
    if (canonicalJson(d) !== canonicalJson(want)) failures++;
    if (sameAddressList(a.list, b.list) !== (canonicalJson(a.content) === canonicalJson(b.content))) failures++;
    if (knownListDiff(a.list, b.list) === undefined) shortcuts++;
  }
  t.equal(failures, 0, 'the difference of every pair of versions is the set difference of their contents');
  t.ok(shortcuts > 100, `${shortcuts} of the pairs are beyond the recorded steps (answered from the chunks)`);
  const fresh = SortedList.from(versions[60]!.content);
  t.same(fresh.diffFrom(versions[60]!.list), { gone: [], come: [] }, 'the same content sharing no chunk: nothing went or came');
  t.same(SortedList.from([ip(1), ip(5)]).diffFrom(SortedList.from([ip(1), ip(3)])), { gone: [ip(3)], come: [ip(5)] });
  t.same(SortedList.EMPTY.diffFrom(SortedList.from([ip(2)])), { gone: [ip(2)], come: [] });
});
