/**
 * The bounded-frequency runner behind the enforcer's flushes, on the manual clock: an idle request
 * runs at once; requests during a run make exactly one more; a run that follows closely waits out
 * the minimum interval from the previous run's end; an urgent request skips it; with a maximum
 * interval a run comes that long after the last one unasked; runs never overlap; close stops what
 * is planned.
 */
import t from 'tap';
import { BoundedFrequencyRunner } from '../../daemon/enforcement/bounded-frequency-runner.js';
import { ManualClock } from './manual-clock.js';

function setup(minIntervalMs = 20, runMs = 10, maxIntervalMs?: number) {
  const clock = new ManualClock();
  const starts: number[] = [];
  let inFlight = 0;
  let most = 0;
  const runner = new BoundedFrequencyRunner({
    clock,
    minIntervalMs,
    ...(maxIntervalMs !== undefined ? { maxIntervalMs } : {}),
    run: async () => {
      starts.push(clock.now());
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise<void>((r) => clock.setTimeout(r, runMs));
      inFlight--;
    },
  });
  return { clock, runner, starts, most: () => most };
}

t.test('an idle request runs at once; requests during a run make one more, after the minimum interval', async (t) => {
  const { clock, runner, starts, most } = setup();
  runner.request();
  t.ok(runner.busy, 'planned');
  await clock.advance(0);
  t.same(starts, [0], 'ran on the next turn');
  runner.request();
  runner.request();
  runner.request();
  await clock.advance(10); // the first run ends at 10
  t.same(starts, [0], 'the second run waits: it follows the first closely');
  await clock.advance(20);
  t.same(starts, [0, 30], 'one more run for the three requests, 20 ms after the first ended');
  await clock.advance(100);
  t.same(starts, [0, 30], 'nothing else');
  t.equal(most(), 1, 'never two at once');
  t.notOk(runner.busy);
});

t.test('after a quiet spell a request runs at once again', async (t) => {
  const { clock, runner, starts } = setup();
  runner.request();
  await clock.advance(50);
  runner.request();
  await clock.advance(0);
  t.same(starts, [0, 50]);
});

t.test('an urgent request skips the minimum interval, also when a run is already planned behind it', async (t) => {
  const { clock, runner, starts } = setup();
  runner.request();
  await clock.advance(10); // ends at 10
  runner.request(); // in the burst: planned for 30
  await clock.advance(5);
  runner.request({ urgent: true });
  await clock.advance(0);
  t.same(starts, [0, 15], 'ran at once, not at 30');
  runner.request({ urgent: true }); // during the run: the next one is urgent too
  await clock.advance(10);
  await clock.advance(0);
  t.same(starts, [0, 15, 25], 'the run after it did not wait the minimum interval');
});

t.test('close stops a planned run and refuses new ones', async (t) => {
  const { clock, runner, starts } = setup();
  runner.request();
  runner.close();
  runner.request();
  await clock.advance(100);
  t.same(starts, []);
  t.equal(clock.waiting, 0, 'no timer left');
});

t.test('a request soon after a run waits only for the rest of the minimum interval', async (t) => {
  const { clock, runner, starts } = setup();
  runner.request();
  await clock.advance(10); // ends at 10
  await clock.advance(5);
  runner.request();
  await clock.advance(14);
  t.same(starts, [0], 'not before 30');
  await clock.advance(1);
  t.same(starts, [0, 30], 'at the end of the first run + 20, not 20 after the request');
});

t.test('with a maximum interval a run comes unasked, and a request brings it forward', async (t) => {
  const { clock, runner, starts } = setup(20, 10, 100);
  t.notOk(runner.busy, 'a periodic run not yet due is not a request');
  await clock.advance(99);
  t.same(starts, [], 'not before the maximum interval');
  await clock.advance(1);
  t.same(starts, [100], 'one run 100 ms after construction');
  await clock.advance(10); // ends at 110
  await clock.advance(50);
  runner.request();
  await clock.advance(0);
  t.same(starts, [100, 160], 'the request runs at once (the minimum interval has passed)');
  await clock.advance(10); // ends at 170
  await clock.advance(99);
  t.same(starts, [100, 160], 'the next unasked run counts from the end of the last run');
  await clock.advance(1);
  t.same(starts, [100, 160, 270]);
  runner.close();
  await clock.advance(1000);
  t.same(starts, [100, 160, 270], 'closed: no periodic run');
  t.equal(clock.waiting, 0, 'no timer left');
});

t.test('a storm of requests runs at most once per minimum interval, never overlapping', async (t) => {
  const { clock, runner, starts, most } = setup(20, 3);
  for (let ms = 0; ms < 200; ms++) {
    runner.request();
    await clock.advance(1);
  }
  await clock.advance(100);
  t.equal(most(), 1, 'never two at once');
  for (let i = 1; i < starts.length; i++) t.ok(starts[i]! - starts[i - 1]! >= 23, `run ${i} starts at least run time + 20 ms after the previous start`);
  t.ok(starts.length <= 10, `a few large runs (${starts.length}), not one per request`);
  t.ok(starts.at(-1)! >= 199 - 23, 'the last requests still got their run');
});

t.test('a maximum interval below the minimum is refused', async (t) => {
  t.throws(() => setup(20, 10, 10), /maxIntervalMs below minIntervalMs/);
});
