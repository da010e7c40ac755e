// daemon/clock.ts: the real clock's timers.
import { readFile } from 'node:fs';
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

t.test('a zero delay runs in this loop turn, before a 0 ms Node timer, and can be cancelled', async (t) => {
  // Inside an I/O callback Node runs immediates before the next timers phase, always.
  const order = await new Promise<string[]>((resolve) => {
    readFile(new URL(import.meta.url), () => {
      const seen: string[] = [];
      setTimeout(() => {
        seen.push('node timer');
        resolve(seen);
      }, 0);
      realClock.setTimeout(() => seen.push('clock, 0 ms'), 0);
    });
  });
  t.same(order, ['clock, 0 ms', 'node timer']);
  let fired = false;
  realClock.clearTimeout(realClock.setTimeout(() => (fired = true), 0));
  await new Promise((resolve) => setTimeout(resolve, 5));
  t.equal(fired, false, 'a cancelled zero delay never runs');
});
