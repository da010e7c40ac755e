/**
 * The agent's schedules (daemon/node/schedules.ts) on a manual clock, with fakes for the work they
 * start: the periodic resync and the adoption after it, the flow watchdog, invalid-policy Events
 * every 10 s, the quiet-collection look every 10 s, host-change repairs collapsed into one resync, adoption after a re-chain, and stop().
 */
import t from 'tap';
import { QUIET_CHECK_MS } from '../../daemon/quiet-collector.js';
import { ADOPT_AFTER_RECHAIN_MS, INVALID_POLICY_CHECK_MS, NodeSchedules, REPAIR_COLLAPSE_MS, type ScheduledWork } from '../../daemon/node/schedules.js';
import { ManualClock } from './manual-clock.js';

const RESYNC_MS = 60_000;
const FLOW_CHECK_MS = 5000;

/** The work as the schedules see it: every call in order; resyncs end when the test says so. */
class FakeWork implements ScheduledWork {
  calls: string[] = [];
  /** Resyncs asked for and not finished yet, oldest first. */
  readonly running: (() => void)[] = [];
  /** When set, resyncs wait for the test to finish them. */
  holdResyncs = false;

  resync(reason: string): Promise<unknown> {
    this.calls.push(`resync ${reason}`);
    if (!this.holdResyncs) return Promise.resolve([]);
    return new Promise((res) => this.running.push(() => res([])));
  }
  async checkFlows(): Promise<void> {
    this.calls.push('checkFlows');
  }
  async adoptUnattached(reason: string): Promise<void> {
    this.calls.push(`adopt ${reason}`);
  }
  reportInvalidPolicies(): void {
    this.calls.push('invalidPolicies');
  }
  collectIfQuiet(): void {
    this.calls.push('collectIfQuiet');
  }

  /** The calls of one kind (the intervals run side by side). */
  only(prefix: string): string[] {
    return this.calls.filter((c) => c.startsWith(prefix));
  }
}

function setUp() {
  const clock = new ManualClock();
  const work = new FakeWork();
  const schedules = new NodeSchedules({ clock, work, resyncIntervalMs: RESYNC_MS, flowCheckIntervalMs: FLOW_CHECK_MS });
  return { clock, work, schedules };
}

t.test('periodic resync: one per interval, each followed by adoption of unattached Pods once it is done', async (t) => {
  const { clock, work, schedules } = setUp();
  work.holdResyncs = true;
  schedules.start();
  await clock.advance(RESYNC_MS - 1);
  t.same(work.only('resync'), [], 'nothing before the interval');
  await clock.advance(1);
  t.same(work.only('resync'), ['resync periodic']);
  t.same(work.only('adopt'), [], 'adoption waits for the resync');
  work.running.shift()!();
  await clock.advance(0);
  t.same(work.calls.filter((c) => c.startsWith('resync') || c.startsWith('adopt')), ['resync periodic', 'adopt periodic resync']);
  await clock.advance(RESYNC_MS);
  work.running.shift()!();
  await clock.advance(0);
  t.same(work.calls.filter((c) => c.startsWith('resync') || c.startsWith('adopt')), ['resync periodic', 'adopt periodic resync', 'resync periodic', 'adopt periodic resync']);
  schedules.stop();
});

t.test('periodic resync: a tick while a resync still runs asks for one more (the reconciler queues it behind the running one); each adoption follows its own resync', async (t) => {
  const { clock, work, schedules } = setUp();
  work.holdResyncs = true;
  schedules.start();
  await clock.advance(RESYNC_MS);
  await clock.advance(RESYNC_MS);
  t.same(work.only('resync'), ['resync periodic', 'resync periodic'], 'the second tick asks again: NodeReconciler.resync runs it after the first (tested in node-reconciler.test.ts)');
  t.same(work.only('adopt'), [], 'no adoption while neither resync is done');
  work.running.shift()!();
  await clock.advance(0);
  t.same(work.only('adopt'), ['adopt periodic resync'], 'the first resync done: one adoption');
  work.running.shift()!();
  await clock.advance(0);
  t.same(work.only('adopt'), ['adopt periodic resync', 'adopt periodic resync'], 'the second done: another');
  schedules.stop();
});

t.test('flow watchdog every flowCheckInterval; invalid policies at start and every 10 s', async (t) => {
  const { clock, work, schedules } = setUp();
  schedules.start();
  t.same(work.calls, ['invalidPolicies'], 'invalid policies are looked for at once');
  await clock.advance(FLOW_CHECK_MS * 3);
  t.equal(work.only('checkFlows').length, 3);
  t.equal(work.only('invalidPolicies').length, 2, 'at start and at 10 s');
  await clock.advance(INVALID_POLICY_CHECK_MS * 6 - FLOW_CHECK_MS * 3);
  t.equal(work.only('checkFlows').length, 12, 'one a 5 s for a minute');
  t.equal(work.only('invalidPolicies').length, 7, 'one at start and one every 10 s for a minute');
  schedules.start();
  await clock.advance(INVALID_POLICY_CHECK_MS);
  t.equal(work.only('invalidPolicies').length, 8, 'a second start() arms nothing twice');
  schedules.stop();
});

t.test('a look for a quiet moment to collect garbage in, every QUIET_CHECK_MS from start', async (t) => {
  const { clock, work, schedules } = setUp();
  schedules.start();
  t.same(work.only('collectIfQuiet'), [], 'none at start: start-up runs its own collection');
  await clock.advance(QUIET_CHECK_MS * 6);
  t.equal(work.only('collectIfQuiet').length, 6);
  schedules.stop();
  await clock.advance(QUIET_CHECK_MS * 6);
  t.equal(work.only('collectIfQuiet').length, 6, 'none after stop');
});

t.test('host-change repairs: a burst within 200 ms of each other collapses into one resync, for the last reason', async (t) => {
  const { clock, work, schedules } = setUp();
  schedules.repairSoon('netlink: route deleted');
  await clock.advance(150);
  schedules.repairSoon('netlink: neighbour deleted');
  await clock.advance(150);
  schedules.repairSoon('nftables: delete rule');
  await clock.advance(REPAIR_COLLAPSE_MS - 1);
  t.same(work.calls, [], 'nothing while the burst goes on');
  await clock.advance(1);
  t.same(work.calls, ['resync nftables: delete rule'], 'one resync 200 ms after the last');
  await clock.advance(10_000);
  t.same(work.calls, ['resync nftables: delete rule'], 'and no other');
  schedules.repairSoon('netlink: route deleted');
  await clock.advance(REPAIR_COLLAPSE_MS);
  t.same(work.calls, ['resync nftables: delete rule', 'resync netlink: route deleted'], 'a later change: another resync');
  t.equal(clock.waiting, 0);
});

t.test('after a re-chain, unattached Pods are looked for at 2 s and at 10 s', async (t) => {
  const { clock, work, schedules } = setUp();
  t.same(ADOPT_AFTER_RECHAIN_MS, [2000, 10_000]);
  schedules.afterRechain('10-aws.conflist');
  await clock.advance(1999);
  t.same(work.calls, []);
  await clock.advance(1);
  t.same(work.calls, ['adopt re-chained 10-aws.conflist'], 'at 2 s');
  await clock.advance(7999);
  t.equal(work.calls.length, 1);
  await clock.advance(1);
  t.same(work.calls, ['adopt re-chained 10-aws.conflist', 'adopt re-chained 10-aws.conflist'], 'at 10 s');
  await clock.advance(600_000);
  t.equal(work.calls.length, 2, 'and not again');
  t.equal(clock.waiting, 0);
});

t.test('stop() cancels every timer; repairs and re-chains asked for afterwards start nothing', async (t) => {
  const { clock, work, schedules } = setUp();
  schedules.start();
  schedules.repairSoon('netlink: route deleted');
  schedules.afterRechain('10-aws.conflist');
  t.ok(clock.waiting >= 7, 'four intervals, a repair and two re-chain adoptions wait');
  schedules.stop();
  t.equal(clock.waiting, 0, 'no timer left');
  schedules.repairSoon('netlink: route deleted');
  schedules.afterRechain('10-aws.conflist');
  t.equal(clock.waiting, 0, 'none armed after stop');
  await clock.advance(10 * RESYNC_MS);
  t.same(work.calls, ['invalidPolicies'], 'only the look at start ran');
});
