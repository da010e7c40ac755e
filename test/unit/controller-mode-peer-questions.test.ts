/**
 * A controller-mode agent's direct questions to other Nodes (controller-mode/peer-questions.ts):
 * one open per Node, asked for the highest versions among the Pods waiting on it; its yes answers
 * every waiter it covers, a later waiter it does not cover gets the next question, each waiter
 * is answered no at its own deadline, and a failed question fails the waiters it was asked for.
 */
import t from 'tap';
import { MIN_REASK_MS, PeerQuestions } from '../../daemon/enforcement/controller-mode/peer-questions.js';
import type { ViewVersions } from '../../daemon/controlplane/types.js';
import type { PodQuestion } from '../../daemon/enforcement/newpods/index.js';
import { ManualClock } from './manual-clock.js';

const v = (np: number, atg: number, ag: number): ViewVersions => ({ NetworkPolicy: BigInt(np), AppliedToGroup: BigInt(atg), AddressGroup: BigInt(ag) });
const pod = (name: string): PodQuestion => ({ namespace: 'x', name, ips: [`10.1.0.${name.length}`] });
const show = (x: ViewVersions) => `${x.NetworkPolicy}/${x.AppliedToGroup}/${x.AddressGroup}`;

/** The questions as the peer side sees them; each answered by hand. */
function setUp() {
  const clock = new ManualClock();
  const asked: { address: string; pod: string; waitMs: number; versions: string; answer(yes: boolean): void; fail(e: Error): void }[] = [];
  const q = new PeerQuestions({
    clock,
    askPeer: (address, p, waitMs, versions) =>
      new Promise<boolean>((answer, fail) => asked.push({ address, pod: p.name, waitMs, versions: show(versions), answer, fail })),
  });
  return { clock, asked, q };
}

/** A waiter's outcome as it stands (pending until settled). */
function track(p: Promise<boolean>) {
  const s: { outcome: boolean | string | 'pending' } = { outcome: 'pending' };
  p.then((yes) => (s.outcome = yes), (e: Error) => (s.outcome = e.message));
  return s;
}

t.test('Pods waiting on one Node share one question, asked for the highest versions; its yes answers all it covers', async (t) => {
  const { clock, asked, q } = setUp();
  const a = track(q.ask('10.0.0.2', pod('a'), v(5, 7, 9), 3000));
  t.equal(asked.length, 1, 'the first waiter asks at once');
  t.same(asked[0], { ...asked[0], address: '10.0.0.2', pod: 'a', waitMs: 3000, versions: '5/7/9' });
  // Two more Pods: one the open question covers, one it does not.
  const b = track(q.ask('10.0.0.2', pod('b'), v(5, 6, 9), 3000));
  const c = track(q.ask('10.0.0.2', pod('c'), v(5, 7, 12), 3000));
  t.equal(asked.length, 1, 'no second question while one is open');
  t.same(q.status(), { asked: 1, waited: 3, open: 1 });
  asked[0]!.answer(true);
  await clock.advance(0);
  t.equal(a.outcome, true);
  t.equal(b.outcome, true, 'covered by the open question: answered by its yes');
  t.equal(c.outcome, 'pending', 'not covered (AddressGroup 12 > 9): waits for the next question');
  t.equal(asked.length, 2);
  t.equal(asked[1]!.versions, '5/7/12');
  asked[1]!.answer(true);
  await clock.advance(0);
  t.equal(c.outcome, true);
  t.same(q.status(), { asked: 2, waited: 3, open: 0 });
});

t.test('the next question asks for the highest of each kind among those waiting, for the longest time left', async (t) => {
  const { clock, asked, q } = setUp();
  void track(q.ask('10.0.0.2', pod('a'), v(1, 1, 1), 1000));
  const b = track(q.ask('10.0.0.2', pod('b'), v(3, 1, 2), 2000));
  const c = track(q.ask('10.0.0.2', pod('c'), v(2, 4, 1), 5000));
  await clock.advance(500);
  asked[0]!.answer(true);
  await clock.advance(0);
  t.equal(asked[1]!.versions, '3/4/2', 'kind by kind');
  t.equal(asked[1]!.waitMs, 4500, "c's time left");
  asked[1]!.answer(true);
  await clock.advance(0);
  t.same([b.outcome, c.outcome], [true, true]);
});

t.test('each waiter is answered no at its own deadline; a no from the Node answers nobody and is asked again for those with time', async (t) => {
  const { clock, asked, q } = setUp();
  const a = track(q.ask('10.0.0.2', pod('a'), v(1, 1, 1), 1000));
  const b = track(q.ask('10.0.0.2', pod('b'), v(1, 1, 1), 4000));
  await clock.advance(1000);
  t.equal(a.outcome, false, 'a: no at its deadline');
  t.equal(b.outcome, 'pending');
  asked[0]!.answer(false);
  await clock.advance(0);
  t.equal(b.outcome, 'pending', 'the long poll ran out: not an answer for b');
  t.equal(asked.length, 2, 'asked again for b');
  t.equal(asked[1]!.waitMs, 3000);
  asked[1]!.answer(true);
  await clock.advance(0);
  t.equal(b.outcome, true);
  // A no with only the last milliseconds left is not asked again: the waiter's own deadline answers it.
  const c = track(q.ask('10.0.0.3', pod('c'), v(1, 1, 1), 1000));
  await clock.advance(1000 - MIN_REASK_MS + 1);
  asked[2]!.answer(false);
  await clock.advance(0);
  t.equal(asked.length, 3, 'not asked again');
  await clock.advance(MIN_REASK_MS);
  t.equal(c.outcome, false);
  t.same(q.status(), { asked: 3, waited: 3, open: 0 });
});

t.test('a failed question fails the waiters it was asked for; a waiter it did not cover is asked for next', async (t) => {
  const { clock, asked, q } = setUp();
  const a = track(q.ask('10.0.0.2', pod('a'), v(1, 1, 1), 3000));
  const b = track(q.ask('10.0.0.2', pod('b'), v(1, 1, 2), 3000));
  asked[0]!.fail(new Error('10.0.0.2:10350: connect ECONNREFUSED'));
  await clock.advance(0);
  t.match(a.outcome, /ECONNREFUSED/);
  t.equal(b.outcome, 'pending');
  t.equal(asked.length, 2);
  t.equal(asked[1]!.versions, '1/1/2');
  asked[1]!.answer(true);
  await clock.advance(0);
  t.equal(b.outcome, true);
});

t.test('Nodes are asked independently', async (t) => {
  const { clock, asked, q } = setUp();
  const a = track(q.ask('10.0.0.2', pod('a'), v(1, 1, 1), 3000));
  const b = track(q.ask('10.0.0.3', pod('a'), v(1, 1, 1), 3000));
  t.same(asked.map((x) => x.address), ['10.0.0.2', '10.0.0.3']);
  asked[1]!.answer(true);
  await clock.advance(0);
  t.same([a.outcome, b.outcome], ['pending', true]);
  await clock.advance(3000);
  t.equal(a.outcome, false);
  t.same(q.status().open, 1, "10.0.0.2's question is still open (the HTTP request ends on its own)");
  asked[0]!.answer(true);
  await clock.advance(0);
  t.same(q.status(), { asked: 2, waited: 2, open: 0 });
});

t.test('close answers every waiter no at once and leaves no timer', async (t) => {
  const { clock, q } = setUp();
  const a = track(q.ask('10.0.0.2', pod('a'), v(1, 1, 1), 3000));
  const b = track(q.ask('10.0.0.3', pod('b'), v(1, 1, 1), 3000));
  t.equal(clock.waiting, 2);
  q.close();
  await clock.advance(0);
  t.same([a.outcome, b.outcome], [false, false]);
  t.equal(clock.waiting, 0);
});
