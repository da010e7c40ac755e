/** SharedExclusiveLock: shared runs overlap; an exclusive run waits for them and holds back new ones. */
import t from 'tap';
import { SharedExclusiveLock } from '../../daemon/lock.js';

const tick = () => new Promise<void>((r) => setImmediate(r));

function gate(): { open: () => void; wait: Promise<void> } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { open, wait };
}

t.test('shared runs overlap; an exclusive run waits for them, and later shared runs wait for it', async (t) => {
  const lock = new SharedExclusiveLock();
  const log: string[] = [];
  const a = gate();
  const b = gate();
  const x = gate();
  const runA = lock.runShared(async () => {
    log.push('A start');
    await a.wait;
    log.push('A end');
  });
  const runB = lock.runShared(async () => {
    log.push('B start');
    await b.wait;
    log.push('B end');
  });
  await tick();
  t.same(log, ['A start', 'B start'], 'two shared runs at once');
  const runX = lock.runExclusive(async () => {
    log.push('X start');
    await x.wait;
    log.push('X end');
    return 42;
  });
  const runC = lock.runShared(async () => {
    log.push('C');
  });
  await tick();
  t.same(log, ['A start', 'B start'], 'the exclusive run and a later shared one wait');
  a.open();
  await tick();
  t.notOk(log.includes('X start'), 'still one shared run in progress');
  b.open();
  await tick();
  t.same(log.slice(-2), ['B end', 'X start'], 'the exclusive run starts once the shared ones are done');
  t.notOk(log.includes('C'), 'the shared run that came after it waits');
  x.open();
  t.equal(await runX, 42, 'its result is returned');
  await Promise.all([runA, runB, runC]);
  t.same(log.slice(-2), ['X end', 'C'], 'then the waiting shared run goes');
});

t.test('two exclusive runs never overlap; a failing run releases the lock', async (t) => {
  const lock = new SharedExclusiveLock();
  let inside = 0;
  let most = 0;
  const run = (fail: boolean) =>
    lock.runExclusive(async () => {
      most = Math.max(most, ++inside);
      await tick();
      inside--;
      if (fail) throw new Error('boom');
    });
  const results = await Promise.allSettled([run(false), run(true), run(false)]);
  t.same(results.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled']);
  t.equal(most, 1, 'one at a time');
  t.equal(await lock.runShared(async () => 'after'), 'after', 'the lock is free after a failure');
});
