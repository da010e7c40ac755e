/** CookieSet: a Set's answers over random walks, whole cookie numbers, changes while read. */
import t from 'tap';
import { CookieSet } from '../../daemon/flows/cookie-set.js';
import { cookieNumber, cookieText } from '../../daemon/flows/store.js';
import { rng } from './policy-core-helpers.js';

t.test('a cookie set agrees with a Set over random walks of adds and deletes, through growth and shrinking', async (t) => {
  for (const seed of [1, 7, 42, 1234]) {
    const r = rng(seed).next;
    const set = new CookieSet();
    const model = new Set<number>();
    // Few distinct low bits: numbers that share home slots and long probe runs, the case deletion must keep reachable.
    const pick = () => Math.floor(r() * 64) * 4294967296 + Math.floor(r() * 256) * (seed % 2 === 0 ? 1 : 65536);
    let problems = 0;
    for (let step = 0; step < 20_000; step++) {
      const n = pick();
      // Grow for the first half, then mostly delete (the table shrinks).
      const adding = step < 10_000 ? r() < 0.7 : r() < 0.2;
      const want = adding ? !model.has(n) : model.has(n);
      const got = adding ? set.add(n) : set.delete(n);
      if (adding) model.add(n);
      else model.delete(n);
      if (got !== want || set.size !== model.size) problems++;
      if (step % 997 === 0) {
        for (const m of model) if (!set.has(m)) problems++;
        if (set.values().length !== model.size) problems++;
      }
    }
    for (let k = 0; k < 2_000; k++) {
      const n = pick();
      if (set.has(n) !== model.has(n)) problems++;
    }
    t.same(set.values().sort((a, b) => a - b), [...model].sort((a, b) => a - b), `seed ${seed}: the same members at the end (${model.size})`);
    t.equal(problems, 0, `seed ${seed}: every add, delete, has and size as a Set's`);
  }
});

t.test('a cookie set holds whole 48-bit cookie numbers, and can change while it is read', async (t) => {
  const cookies = ['0x51ce000000000000', '0x51ceffffffffffff', '0x51ce01ab12cd34ef', '0x51ce02ab12cd34ef'].map(cookieNumber);
  const set = new CookieSet(cookies);
  t.equal(set.size, 4);
  t.same(set.values().map(cookieText).sort(), ['0x51ce000000000000', '0x51ce01ab12cd34ef', '0x51ce02ab12cd34ef', '0x51ceffffffffffff'], 'equal low bits, told apart by the high ones');
  for (const n of set) set.delete(n);
  t.equal(set.size, 0, 'deleting each while iterating empties it');
  t.throws(() => set.add(-1), /not a cookie number/);
  t.throws(() => set.add(0.5), /not a cookie number/);
});
