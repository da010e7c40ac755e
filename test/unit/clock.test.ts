// daemon/clock.ts: the real clock's timers.
import t from 'tap';
import { MAX_TIMER_MS, realClock } from '../../daemon/clock.js';

t.test('a delay beyond Node timers\' limit is capped, not run at once', async (t) => {
  let fired = false;
  // A day-long TTL times a thousand: without the cap Node runs this after 1 ms.
  const handle = realClock.setTimeout(() => {
    fired = true;
  }, MAX_TIMER_MS * 4);
  await new Promise((resolve) => setTimeout(resolve, 50));
  realClock.clearTimeout(handle);
  t.equal(fired, false, 'still pending 50 ms later');
});
