/**
 * The bound on a new Pod's open questions to other agents (newpods/peers.ts QuestionSlots and
 * askPeer): first come first served, a question whose time runs out while it waits is answered
 * no without being asked, a failed question frees its slot, and the long poll asks only for the
 * time left.
 */
import t from 'tap';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { askPeer, QuestionSlots, questionSlots } from '../../daemon/enforcement/newpods/peers.js';

/** A question the test answers by hand. */
function held() {
  let answer!: (v: boolean) => void;
  let fail!: (e: Error) => void;
  const p = new Promise<boolean>((res, rej) => {
    answer = res;
    fail = rej;
  });
  return { p, answer, fail };
}

const turn = () => new Promise((r) => setImmediate(r));

t.test('at most `limit` questions open; the rest start in arrival order as slots free', async (t) => {
  const slots = new QuestionSlots(2);
  const started: string[] = [];
  const qs = new Map<string, ReturnType<typeof held>>();
  const ask = (name: string) =>
    slots.run(Date.now() + 10_000, () => {
      started.push(name);
      const h = held();
      qs.set(name, h);
      return h.p;
    }, false);
  const results = ['a', 'b', 'c', 'd'].map(ask);
  const failed = results[0]!.catch((e: Error) => e.message);
  await turn();
  t.same(started, ['a', 'b'], 'two open');
  t.same(slots.status(), { open: 2, waiting: 2 });
  qs.get('b')!.answer(true);
  await turn();
  t.same(started, ['a', 'b', 'c'], 'the first waiting one takes the freed slot');
  qs.get('a')!.fail(new Error('10.0.0.9:10350: connect ECONNREFUSED'));
  await turn();
  t.same(started, ['a', 'b', 'c', 'd'], 'a failed question frees its slot too');
  qs.get('c')!.answer(false);
  qs.get('d')!.answer(true);
  t.match(await failed, /ECONNREFUSED/);
  t.same(await Promise.all(results.slice(1)), [true, false, true]);
  t.same(slots.status(), { open: 0, waiting: 0 });
});

t.test('a question whose time runs out while it waits is answered no, never asked; the slot count stays right', async (t) => {
  const slots = new QuestionSlots(1);
  const first = held();
  const a = slots.run(Date.now() + 10_000, () => first.p, false);
  let asked = false;
  const late = slots.run(Date.now() + 30, async () => {
    asked = true;
    return true;
  }, false);
  t.equal(await late, false, 'no slot within its 30 ms: no');
  t.equal(asked, false, 'and it was not asked');
  t.same(slots.status(), { open: 1, waiting: 0 });
  first.answer(true);
  t.equal(await a, true);
  t.same(slots.status(), { open: 0, waiting: 0 });
  // The slot is free again: the next question runs at once, with the time it has left.
  let left = -1;
  await slots.run(Date.now() + 5000, async (l) => {
    left = l;
    return true;
  }, false);
  t.ok(left > 4000 && left <= 5000, `asked with ${left} ms left`);
});

t.test('askPeer asks for the time left after waiting for a slot, and reads the answer', async (t) => {
  const seen: URLSearchParams[] = [];
  const server = http.createServer((req, res) => {
    seen.push(new URL(req.url!, 'http://x').searchParams);
    res.end(JSON.stringify({ realized: true }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => server.close(r)));
  const port = (server.address() as AddressInfo).port;
  t.equal(await askPeer('127.0.0.1', port, { namespace: 'x', name: 'a', ips: ['10.1.0.5'] }, 2000), true);
  const waitMs = Number(seen[0]!.get('waitMs'));
  t.ok(waitMs > 1500 && waitMs <= 2000, `long poll of ${waitMs} ms`);
  t.equal(seen[0]!.get('pod'), 'x/a');
  t.same(questionSlots.status(), { open: 0, waiting: 0 }, 'its slot is back');
});
