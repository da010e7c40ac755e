// The controller's per-event cost figures (/status eventCost): quantiles over the recent window, totals since start.
import t from 'tap';
import { EventCost } from '../../daemon/controller/event-cost.js';

t.test('no events: zeros', async (t) => {
  t.same(new EventCost(4).figures(), { events: 0, totalMs: 0, p50Ms: 0, p90Ms: 0, p99Ms: 0, maxMs: 0 });
});

t.test('quantiles over the last window only; events and total since start', async (t) => {
  const c = new EventCost(4);
  for (const ms of [100, 1, 2, 3, 4]) c.record(ms);
  // 100 has left the window of 4, but stays in the total.
  t.same(c.figures(), { events: 5, totalMs: 110, p50Ms: 3, p90Ms: 4, p99Ms: 4, maxMs: 4 });
  c.record(0.0004);
  t.same(c.figures().p50Ms, 3, 'sorted by value, not by arrival');
  t.same(c.figures().totalMs, 110, 'rounded to the microsecond');
});

t.test('a window below 1 is refused', async (t) => {
  t.throws(() => new EventCost(0), /at least 1/);
});
