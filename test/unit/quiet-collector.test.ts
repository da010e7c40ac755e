/**
 * The agent's full garbage collections (daemon/quiet-collector.ts): the decision over fake
 * readings (quiet, grown, not too soon), the collector's floor, and a real node process with
 * --expose-gc whose dead heap a quiet check gives back.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import {
  decideQuietCollection,
  fullCollection,
  QUIET_GROWTH_MIN_BYTES,
  QUIET_MIN_INTERVAL_MS,
  QUIET_UTILIZATION,
  QuietCollector,
} from '../../daemon/quiet-collector.js';

const MiB = 2 ** 20;

t.test('decideQuietCollection: only when quiet, grown past the larger of 16 MiB and a quarter of the floor, and none ran within a minute', async (t) => {
  const s = { floor: 40 * MiB, lastAt: Number.NEGATIVE_INFINITY };
  const at = (heapUsed: number, utilization = 0.01, now = 1_000_000) => decideQuietCollection(s, { heapUsed, utilization, now });
  t.equal(at(80 * MiB), true, 'quiet, 40 MiB over a 40 MiB floor');
  t.equal(at(80 * MiB, QUIET_UTILIZATION), false, 'a busy loop is left alone');
  t.equal(at(40 * MiB + QUIET_GROWTH_MIN_BYTES - 1), false, 'growth under 16 MiB');
  t.equal(at(40 * MiB + QUIET_GROWTH_MIN_BYTES), true, '16 MiB over a 40 MiB floor (a quarter would be 10)');
  const big = { floor: 200 * MiB, lastAt: Number.NEGATIVE_INFINITY };
  t.equal(decideQuietCollection(big, { heapUsed: 240 * MiB, utilization: 0, now: 0 }), false, 'a quarter of a 200 MiB floor is 50 MiB: 40 is under it');
  t.equal(decideQuietCollection(big, { heapUsed: 250 * MiB, utilization: 0, now: 0 }), true);
  s.lastAt = 1_000_000 - QUIET_MIN_INTERVAL_MS + 1;
  t.equal(at(80 * MiB), false, 'one ran less than a minute ago');
  s.lastAt = 1_000_000 - QUIET_MIN_INTERVAL_MS;
  t.equal(at(80 * MiB), true, 'a minute later');
});

/** A collector over a fake heap: collect() leaves `live`, the rest of the readings are set by the test. */
function fake(opts: { gc?: boolean } = {}) {
  const w = { now: 0, heap: 30 * MiB, live: 30 * MiB, utilization: 0, collections: 0 };
  const c = new QuietCollector({
    now: () => w.now,
    heapUsed: () => w.heap,
    utilization: () => w.utilization,
    collect: () => {
      if (opts.gc === false) return false;
      w.collections++;
      w.heap = w.live;
      return true;
    },
  });
  return { w, c };
}

t.test('QuietCollector: collects after a burst once the loop is quiet, at most once a minute; what it leaves is the floor', async (t) => {
  const { w, c } = fake();
  t.equal(c.check(), false, 'nothing grew');
  // A burst: the heap holds 90 MiB of which 40 are live.
  w.heap = 90 * MiB;
  w.live = 40 * MiB;
  w.utilization = 0.6;
  t.equal(c.check(), false, 'not while busy');
  w.utilization = 0.01;
  w.now = 10_000;
  t.equal(c.check(), true, 'quiet: collected');
  t.equal(w.heap, 40 * MiB);
  t.same(c.status(), { collections: 1, lastFreedMiB: 50 });
  // Growth past the new floor (40 + 16 MiB) within the minute waits for the minute.
  w.heap = 70 * MiB;
  w.now = 10_000 + QUIET_MIN_INTERVAL_MS - 1;
  t.equal(c.check(), false, 'within a minute of the last');
  w.now = 10_000 + QUIET_MIN_INTERVAL_MS;
  t.equal(c.check(), true);
  t.equal(w.collections, 2);
  // Live state that grew for good (more Pods) raises the floor: no collection on every look.
  w.heap = 60 * MiB;
  w.live = 60 * MiB;
  w.now += QUIET_MIN_INTERVAL_MS;
  t.equal(c.check(), true, 'the heap grew 20 MiB: one collection finds it live');
  w.now += QUIET_MIN_INTERVAL_MS;
  t.equal(c.check(), false, 'and the next look leaves it alone');
  t.equal(w.collections, 3);
});

t.test("QuietCollector: V8's own collection lowers the floor; collectNow sets it; nothing counted without gc", async (t) => {
  const { w, c } = fake();
  w.heap = 20 * MiB;
  t.equal(c.check(), false);
  // Floor 20 MiB now: 36 MiB is 16 over it.
  w.heap = 36 * MiB;
  w.live = 25 * MiB;
  t.equal(c.check(), true, 'measured from the lower floor V8 left');
  const n = fake();
  n.w.heap = 100 * MiB;
  n.w.live = 70 * MiB;
  t.equal(n.c.collectNow(), true);
  n.w.heap = 80 * MiB;
  t.equal(n.c.check(), false, 'the start-up collection left 70 MiB: 10 more is not worth one');
  const none = fake({ gc: false });
  none.w.heap = 200 * MiB;
  t.equal(none.c.collectNow(), false);
  t.equal(none.c.check(), false, 'without --expose-gc nothing runs');
  t.same(none.c.status(), { collections: 0 });
});

t.test('fullCollection runs gc() only when it is exposed', async (t) => {
  const g = globalThis as { gc?: () => void };
  const saved = g.gc;
  try {
    let calls = 0;
    g.gc = () => calls++;
    t.equal(fullCollection(), true);
    t.equal(calls, 1);
    delete g.gc;
    t.equal(fullCollection(), false);
  } finally {
    if (saved) g.gc = saved;
  }
});

t.test('a real node process: garbage left by a burst is collected at the first quiet look', async (t) => {
  // The burst leaves 64 MiB of dead strings in the old generation (kept long enough to be
  // promoted, then dropped). A look right after it finds the loop busy; the loop then idles for
  // a moment before the next.
  const script = `
    const { realQuietCollector } = await import('./daemon/quiet-collector.ts');
    const { realClock } = await import('./daemon/clock.ts');
    const { getHeapStatistics } = await import('node:v8');
    const c = realQuietCollector(realClock);
    c.collectNow();
    let keep = [];
    for (let i = 0; i < 64; i++) keep.push('x'.repeat(MiB).split('').join(''));
    await new Promise((r) => setTimeout(r, 50));
    keep = undefined;
    const duringBurst = c.check();
    const before = getHeapStatistics().used_heap_size;
    await new Promise((r) => setTimeout(r, 300));
    const collected = c.check();
    console.log(JSON.stringify({ duringBurst, before, after: getHeapStatistics().used_heap_size, collected, status: c.status() }));`.replace(/MiB/g, String(MiB));
  const run = (flags: string[]) => spawnSync(process.execPath, [...process.execArgv, ...flags, '--input-type=module', '-e', script], { encoding: 'utf8' });
  const r = run(['--expose-gc']);
  t.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout.trim().split('\n').pop()!) as { duringBurst: boolean; before: number; after: number; collected: boolean; status: { collections: number } };
  t.equal(got.duringBurst, false, 'the look that ends the burst finds the loop busy');
  t.ok(got.before - got.after > 48 * MiB, `freed ${((got.before - got.after) / MiB).toFixed(0)} MiB`);
  t.equal(got.collected, true);
  t.equal(got.status.collections, 1);
  const plain = run([]);
  t.equal(plain.status, 0, plain.stderr);
  t.equal((JSON.parse(plain.stdout.trim().split('\n').pop()!) as { collected: boolean }).collected, false, 'without --expose-gc it cannot');
});
