/** NetnsHelper: one helper process serves every request, is restarted after it exits, and the nsenter fallback only when it cannot run. */
import t from 'tap';
import { type HelperProcess, NetnsHelper } from '../../daemon/hostnet/netns-helper.js';
import { ManualClock } from './manual-clock.js';

const tick = () => new Promise<void>((r) => setImmediate(r));

/** A helper whose answers the test decides: `answer(line)` returns the reply, or undefined to stay silent. */
class FakeHelpers {
  started = 0;
  requests: string[] = [];
  killed = 0;
  current?: { exit: (why: string) => void } | undefined;
  constructor(private readonly answer: (line: string) => string | undefined) {}

  spawn = (): HelperProcess => {
    this.started++;
    let onLine: (l: string) => void = () => undefined;
    let onExit: (why: string) => void = () => undefined;
    const me = { exit: (why: string) => onExit(why) };
    this.current = me;
    return {
      write: (line) => {
        t.ok(line.endsWith('\n'), 'one request per line');
        this.requests.push(line.trimEnd());
        const a = this.answer(line.trimEnd());
        if (a !== undefined) queueMicrotask(() => onLine(a));
      },
      onLine: (fn) => (onLine = fn),
      onExit: (fn) => (onExit = fn),
      kill: () => {
        this.killed++;
        queueMicrotask(() => me.exit('exited (SIGKILL)'));
      },
    };
  };
}

t.test('every request goes to one helper process; its errors come back with their reason', async (t) => {
  const f = new FakeHelpers((l) => (l.endsWith('\teth9') ? 'err turning TX checksum offload off on eth9: No such device' : 'ok'));
  const fallback: string[] = [];
  const h = new NetnsHelper({ spawn: f.spawn, fallback: async (ns) => void fallback.push(ns) });
  t.notOk(h.running, 'nothing runs before the first request (the kernel datapath never makes one)');
  await Promise.all([h.disableTxOffload('/run/netns/a', 'eth0'), h.disableTxOffload('/run/netns/b', 'eth0')]);
  await t.rejects(h.disableTxOffload('/run/netns/c', 'eth9'), /turning TX checksum offload off on eth9: No such device/);
  t.equal(f.started, 1, 'one process for all of them');
  t.same(f.requests, ['tx-off\t/run/netns/a\teth0', 'tx-off\t/run/netns/b\teth0', 'tx-off\t/run/netns/c\teth9']);
  t.same(fallback, []);
  await t.rejects(h.disableTxOffload('/run/netns/x\ty', 'eth0'), /contains a tab or newline/);
  h.close();
  t.equal(f.killed, 1, 'close stops the helper');
});

t.test('a helper that exits fails the request in flight; the next request starts a new one', async (t) => {
  let die = true;
  const f = new FakeHelpers(() => (die ? undefined : 'ok'));
  const h = new NetnsHelper({ spawn: f.spawn });
  const first = h.disableTxOffload('/run/netns/a', 'eth0');
  await tick();
  f.current!.exit('exited (status 255): FATAL: returning to the helper\'s own namespace: Operation not permitted');
  await t.rejects(first, /netns helper exited \(status 255\): FATAL/);
  t.notOk(h.running);
  die = false;
  await h.disableTxOffload('/run/netns/b', 'eth0');
  t.equal(f.started, 2);
});

t.test('a helper that does not answer is killed after the timeout; the request fails saying so', async (t) => {
  let silent = true;
  const f = new FakeHelpers(() => (silent ? undefined : 'ok'));
  const clock = new ManualClock();
  const h = new NetnsHelper({ spawn: f.spawn, clock, timeoutMs: 5000 });
  const stuck = h.disableTxOffload('/run/netns/a', 'eth0');
  const queued = h.disableTxOffload('/run/netns/b', 'eth0');
  await tick();
  t.equal(f.requests.length, 1, 'requests go one at a time');
  silent = false;
  const failed = t.rejects(stuck, /no answer within 5000 ms \(killed\)/);
  await clock.advance(5000);
  await failed;
  await queued;
  t.equal(f.killed, 1);
  t.equal(f.started, 2, 'the queued request ran on a fresh helper');
});

t.test('where the helper cannot run, each request falls back to one nsenter process', async (t) => {
  const fallback: string[] = [];
  const warnings: string[] = [];
  let spawned = 0;
  const h = new NetnsHelper({
    spawn: () => {
      spawned++;
      return undefined;
    },
    fallback: async (ns, ifName) => void fallback.push(`${ns} ${ifName}`),
    log: { warn: (_o, m) => void warnings.push(m) },
  });
  await h.disableTxOffload('/run/netns/a', 'eth0');
  await h.disableTxOffload('/run/netns/b', 'eth1');
  t.same(fallback, ['/run/netns/a eth0', '/run/netns/b eth1']);
  t.equal(spawned, 1, 'not retried for every Pod');
  t.equal(warnings.length, 1);

  const f = new FakeHelpers(() => undefined);
  const used: string[] = [];
  const h2 = new NetnsHelper({ spawn: f.spawn, fallback: async (ns) => void used.push(ns), log: { warn: () => undefined } });
  const p = h2.disableTxOffload('/run/netns/c', 'eth0');
  await tick();
  f.current!.exit('could not start perl: spawn perl ENOENT');
  await t.rejects(p, /could not start perl/);
  await h2.disableTxOffload('/run/netns/d', 'eth0');
  t.same(used, ['/run/netns/d'], 'a helper that cannot start hands over to the fallback');
});
