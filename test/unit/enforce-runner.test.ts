/**
 * The coalescing runner behind the enforcer's flushes, on the manual clock: an idle request runs
 * at once; requests during a run make exactly one more; a run that follows closely waits the burst
 * delay; an urgent request skips it; runs never overlap; close stops what is planned.
 */
import t from 'tap';
import { CoalescingRunner } from '../../daemon/enforcement/runner.js';
import { ManualClock } from './manual-clock.js';

function setup(burstDelayMs = 20, runMs = 10) {
  const clock = new ManualClock();
  const starts: number[] = [];
  let inFlight = 0;
  let most = 0;
  const runner = new CoalescingRunner({
    clock,
    burstDelayMs,
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

t.test('an idle request runs at once; requests during a run make one more, after the burst delay', async (t) => {
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

t.test('an urgent request skips the burst delay, also when a run is already planned behind it', async (t) => {
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
  t.same(starts, [0, 15, 25], 'the run after it did not wait the burst delay');
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
