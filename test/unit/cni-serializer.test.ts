import t from 'tap';
import { OperationSerializer } from '../../daemon/cni/serializer.js';

/** A promise the test resolves by hand, so ordering is asserted without timers. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

/** Lets every queued microtask/promise continuation run. */
const settle = () => new Promise<void>((r) => setImmediate(r));

t.test('operations on one key run one at a time, in arrival order', async (t) => {
  const s = new OperationSerializer();
  const log: string[] = [];
  const g = gate();
  const first = s.run('c1', async () => {
    log.push('first start');
    await g.opened;
    log.push('first end');
  });
  const second = s.run('c1', async () => {
    log.push('second start');
  });
  await settle();
  t.same(log, ['first start'], 'second waits while first runs');
  g.open();
  await Promise.all([first, second]);
  t.same(log, ['first start', 'first end', 'second start']);
  await settle();
  t.equal(s.busyKeys, 0, 'finished keys are forgotten');
});

t.test('different keys run concurrently', async (t) => {
  const s = new OperationSerializer();
  const g = gate();
  let otherDone = false;
  const blocked = s.run('c1', () => g.opened);
  await s.run('c2', async () => {
    otherDone = true;
  });
  t.ok(otherDone, 'c2 finished while c1 is still blocked');
  g.open();
  await blocked;
});

t.test('a failed operation does not block the next one on its key', async (t) => {
  const s = new OperationSerializer();
  await t.rejects(
    s.run('c1', async () => {
      throw new Error('boom');
    }),
    /boom/,
  );
  t.equal(await s.run('c1', async () => 'next'), 'next');
});

t.test('an exclusive operation waits for all in flight and holds back later ones', async (t) => {
  const s = new OperationSerializer();
  const log: string[] = [];
  const g1 = gate();
  const gGc = gate();
  const a = s.run('c1', async () => {
    await g1.opened;
    log.push('c1');
  });
  const gc = s.runExclusive(async () => {
    log.push('gc start');
    await gGc.opened;
    log.push('gc end');
  });
  const b = s.run('c2', async () => {
    log.push('c2');
  });
  await settle();
  t.same(log, [], 'gc waits for c1; c2 waits for gc');
  g1.open();
  await a;
  await settle();
  t.same(log, ['c1', 'gc start']);
  gGc.open();
  await Promise.all([gc, b]);
  t.same(log, ['c1', 'gc start', 'gc end', 'c2']);
});
