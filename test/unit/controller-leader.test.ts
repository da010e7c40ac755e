/**
 * daemon/controller/leader.ts LeaderElector on manual clocks against an in-memory Lease: acquiring
 * an absent lease, renewing it, a standby taking over once the leader stops renewing (and not
 * before the lease has expired by the standby's own observation), conflicts losing the race, a
 * leader that cannot renew stepping down before a standby can take over, a graceful release
 * handing over at once, and transient API errors retried without a crash.
 *
 * Each replica has its own clock: a replica whose clock the test stops advancing is a dead process.
 */
import t from 'tap';
import { LeaderElector, type LeaderElectionRecord, LeaseConflictError, type LeaseLock, type ObservedLease } from '../../daemon/controller/leader.js';
import { KubeApiError } from '../../daemon/kube/access.js';
import { ManualClock } from './manual-clock.js';

/** The one Lease in memory, with a resourceVersion checked on every update. */
class FakeLeaseStore {
  lease: { record: LeaderElectionRecord; rv: number } | undefined;
  private rv = 0;
  /** "who holder@time" of every successful write, time from `now`. */
  readonly writes: string[] = [];
  constructor(private readonly now: () => number) {}

  /** A write by someone outside the test's electors. */
  force(record: LeaderElectionRecord): void {
    this.lease = { record: { ...record }, rv: ++this.rv };
  }

  lockFor(who: string): FakeLock {
    return new FakeLock(this, who);
  }

  get(): ObservedLease | undefined {
    return this.lease && { record: { ...this.lease.record }, resourceVersion: String(this.lease.rv) };
  }

  create(who: string, record: LeaderElectionRecord): string {
    if (this.lease) throw new LeaseConflictError('leases "lock" already exists');
    this.force(record);
    this.writes.push(`${who} ${record.holderIdentity}@${this.now()}`);
    return String(this.rv);
  }

  update(who: string, record: LeaderElectionRecord, rv: string): string {
    if (!this.lease) throw new KubeApiError('leases "lock" not found', 404, 'NotFound');
    if (String(this.lease.rv) !== rv) throw new LeaseConflictError('the object has been modified');
    this.force(record);
    this.writes.push(`${who} ${record.holderIdentity}@${this.now()}`);
    return String(this.rv);
  }
}

class FakeLock implements LeaseLock {
  readonly description = 'Lease test/lock';
  /** While set, every call rejects with what it returns (a transient API failure). */
  failWith: (() => Error) | undefined;
  /** Runs just before this lock's create or update reaches the store (to lose a race on purpose). */
  beforeWrite: (() => void) | undefined;
  calls = 0;
  constructor(
    private readonly store: FakeLeaseStore,
    private readonly who: string,
  ) {}

  /** While set, every call hangs (an API server that accepted the connection and never answers). */
  hang = false;

  private async check(): Promise<void> {
    this.calls++;
    if (this.hang) await new Promise<never>(() => {});
    await Promise.resolve();
    if (this.failWith) throw this.failWith();
  }

  async get(): Promise<ObservedLease | undefined> {
    await this.check();
    return this.store.get();
  }

  async create(record: LeaderElectionRecord): Promise<string> {
    await this.check();
    this.beforeWrite?.();
    return this.store.create(this.who, record);
  }

  async update(record: LeaderElectionRecord, rv: string): Promise<string> {
    await this.check();
    this.beforeWrite?.();
    return this.store.update(this.who, record, rv);
  }
}

/** One replica: its elector, clock, lock, and what its callbacks saw (with the time on its clock). */
function replica(store: FakeLeaseStore, identity: string, startAt = 0) {
  const clock = new ManualClock();
  const events: string[] = [];
  const logs: string[] = [];
  const lock = store.lockFor(identity);
  const elector = new LeaderElector({
    identity,
    lock,
    clock,
    onStartedLeading: () => events.push(`started@${clock.now() + startAt}`),
    onStoppedLeading: () => events.push(`stopped@${clock.now() + startAt}`),
    onNewLeader: (id) => events.push(`leader=${id}`),
    log: (level, message) => logs.push(`${level}: ${message}`),
  });
  return { identity, clock, events, logs, lock, elector, startAt };
}
type Replica = ReturnType<typeof replica>;

/** Advances the live replicas' clocks together by `ms`, 100 ms at a time. */
async function together(replicas: Replica[], ms: number): Promise<void> {
  for (let done = 0; done < ms; done += 100) for (const r of replicas) await r.clock.advance(Math.min(100, ms - done));
}

/** Advances until `pred` holds (checked every 100 ms), at most `limitMs`; the time it took. */
async function until(replicas: Replica[], pred: () => boolean, limitMs: number): Promise<number> {
  let waited = 0;
  while (!pred()) {
    if (waited >= limitMs) throw new Error(`condition not met within ${limitMs} ms`);
    await together(replicas, 100);
    waited += 100;
  }
  return waited;
}

t.test('acquires an absent lease, then renews it every retry period keeping the acquisition', async (t) => {
  const time = { now: 0 };
  const store = new FakeLeaseStore(() => time.now);
  const a = replica(store, 'a');
  a.elector.start();
  await a.clock.advance(0);
  t.ok(a.elector.isLeader);
  t.same(a.events, ['leader=a', 'started@0']);
  t.match(store.lease!.record, { holderIdentity: 'a', leaseDurationSeconds: 15, leaseTransitions: 0, acquireTime: '1970-01-01T00:00:00.000000Z' });
  const firstRv = store.lease!.rv;
  await a.clock.advance(2_000);
  t.equal(store.lease!.record.renewTime, '1970-01-01T00:00:02.000000Z', 'renewed after one retry period');
  t.equal(store.lease!.record.acquireTime, '1970-01-01T00:00:00.000000Z', 'the acquisition is kept');
  t.equal(store.lease!.rv, firstRv + 1);
  const calls = a.lock.calls;
  await a.clock.advance(20_000);
  t.equal(a.lock.calls - calls, 10, 'one write per renewal: the leader does not read first');
  t.same(a.events, ['leader=a', 'started@0'], 'no other callback');
  await a.elector.stop();
});

t.test('a standby waits while the leader renews and takes over once renewals stop', async (t) => {
  const store = new FakeLeaseStore(() => Math.max(a.clock.now(), b.clock.now()));
  const a = replica(store, 'a');
  const b = replica(store, 'b');
  a.elector.start();
  await a.clock.advance(0);
  b.elector.start();
  await together([a, b], 60_000);
  t.ok(a.elector.isLeader);
  t.notOk(b.elector.isLeader, 'the standby does not take a lease that is being renewed');
  t.same(b.events, ['leader=a']);
  t.equal(store.lease!.record.holderIdentity, 'a');

  // a dies: its clock stops, so it renews no more.
  const lastRenewal = b.clock.now();
  t.equal(store.writes.at(-1), `a a@${lastRenewal}`, 'a renewed last at the moment it died');
  const took = await until([b], () => b.elector.isLeader, 30_000);
  t.ok(took >= 15_000, `not before the lease expired by the standby's observation (took ${took} ms)`);
  t.ok(took <= 15_000 + 2 * 2_000, `within lease duration + 2 retry periods of the last renewal (took ${took} ms)`);
  t.same(b.events, ['leader=a', 'leader=b', `started@${lastRenewal + took}`]);
  t.match(store.lease!.record, { holderIdentity: 'b', leaseTransitions: 1 });
});

t.test('expiry is judged by the observer\'s clock, not by renewTime', async (t) => {
  const store = new FakeLeaseStore(() => 0);
  // A lease renewed "in the future" by a skewed clock, then abandoned.
  store.force({ holderIdentity: 'ghost', leaseDurationSeconds: 15, acquireTime: '2999-01-01T00:00:00.000000Z', renewTime: '2999-01-01T00:00:00.000000Z', leaseTransitions: 3 });
  const b = replica(store, 'b');
  b.elector.start();
  await b.clock.advance(14_000);
  t.notOk(b.elector.isLeader, 'held while 15 s have not passed since b first saw it');
  await b.clock.advance(4_000);
  t.ok(b.elector.isLeader, 'taken once 15 s passed on b\'s own clock, whatever renewTime says');
  t.match(store.lease!.record, { holderIdentity: 'b', leaseTransitions: 4 });
  t.same(b.events, ['leader=ghost', 'leader=b', 'started@16000']);
  await b.elector.stop();
});

t.test('a write conflict loses the race', async (t) => {
  const store = new FakeLeaseStore(() => 0);
  const b = replica(store, 'b');
  const rival = { holderIdentity: 'c', leaseDurationSeconds: 15, acquireTime: 'x', renewTime: 'x', leaseTransitions: 0 };
  // c creates the lease between b's read (absent) and b's create.
  b.lock.beforeWrite = () => {
    b.lock.beforeWrite = undefined;
    store.force(rival);
  };
  b.elector.start();
  await b.clock.advance(0);
  t.notOk(b.elector.isLeader, 'create → AlreadyExists: lost');
  t.equal(store.lease!.record.holderIdentity, 'c');
  t.match(b.logs.join('\n'), /written by another replica first/);
  await b.clock.advance(2_000);
  t.same(b.events, ['leader=c'], 'the winner is reported at the next read; b stays a standby');

  // c abandons it; b and d both see it expire, d's update lands first.
  await b.clock.advance(16_000);
  t.ok(b.elector.isLeader, 'then b takes the expired lease');
  t.test('a leader that finds its lease taken steps down at once', async (t) => {
    const at = b.clock.now();
    store.force({ ...rival, holderIdentity: 'd', renewTime: 'y' });
    await b.clock.advance(2_000);
    t.notOk(b.elector.isLeader);
    t.same(b.events.slice(-3), [`started@${at}`, 'leader=d', `stopped@${at + 2_000}`], 'at its next renewal, not at the renew deadline');
    t.equal(store.lease!.record.holderIdentity, 'd', 'and leaves d\'s lease alone');
    await b.clock.advance(10_000);
    t.notOk(b.elector.isLeader, 'd\'s lease is valid: b waits');
    await b.elector.stop();
  });
});

t.test('a leader that cannot renew within the renew deadline steps down before a standby takes over', async (t) => {
  const store = new FakeLeaseStore(() => b.clock.now());
  const a = replica(store, 'a');
  const b = replica(store, 'b');
  a.elector.start();
  await a.clock.advance(0);
  b.elector.start();
  await together([a, b], 10_000);
  const lastRenewal = b.clock.now();
  // a's API server connection fails from now on (b's works).
  a.lock.failWith = () => Object.assign(new Error('connect ECONNREFUSED 10.96.0.1:443'), { code: 'ECONNREFUSED' });
  const stepDown = await until([a, b], () => !a.elector.isLeader, 20_000);
  t.ok(stepDown > 10_000 && stepDown <= 12_000, `stepped down ${stepDown} ms after its last renewal: within retry period + renew deadline`);
  t.same(a.events, ['leader=a', 'started@0', `stopped@${lastRenewal + stepDown}`]);
  t.match(a.logs.join('\n'), /could not renew Lease test\/lock within 10000 ms/);
  t.notOk(b.elector.isLeader, 'the standby has not taken over yet: no moment with two leaders');
  const takeover = stepDown + (await until([a, b], () => b.elector.isLeader, 20_000));
  t.ok(takeover >= 15_000 && takeover <= 19_000, `the standby took over ${takeover} ms after a's last renewal`);
  t.notOk(a.elector.isLeader, 'a, still cut off, stays a candidate');
  a.lock.failWith = undefined;
  await together([a, b], 10_000);
  t.notOk(a.elector.isLeader, 'and a standby once it can read the lease again');
  t.equal(a.events.at(-1), 'leader=b');
  await a.elector.stop();
  await b.elector.stop();
});

t.test('a renewal that never answers does not keep a leader leading past the renew deadline', async (t) => {
  const store = new FakeLeaseStore(() => a.clock.now());
  const a = replica(store, 'a');
  a.elector.start();
  await a.clock.advance(4_000);
  a.lock.hang = true;
  await a.clock.advance(12_000);
  t.notOk(a.elector.isLeader);
  t.same(a.events, ['leader=a', 'started@0', 'stopped@16000'], 'stepped down at the deadline of the round that started at 6 s');
});

t.test('a graceful stop releases the lease: the standby takes over at its next retry', async (t) => {
  const store = new FakeLeaseStore(() => b.clock.now());
  const a = replica(store, 'a');
  const b = replica(store, 'b');
  a.elector.start();
  await a.clock.advance(0);
  b.elector.start();
  await together([a, b], 7_000);
  const order: string[] = [];
  const stopped = a.events.length;
  a.lock.beforeWrite = () => order.push(`write after ${a.events.slice(stopped).join(',')}`);
  await a.elector.stop();
  t.same(order, ['write after stopped@7000'], 'onStoppedLeading ran before the release was written');
  t.match(store.lease!.record, { holderIdentity: '', leaseDurationSeconds: 1 });
  t.notOk(a.elector.isLeader);
  const took = await until([b], () => b.elector.isLeader, 5_000);
  t.ok(took <= 2_000, `b took the released lease ${took} ms later (one retry period at most)`);
  t.match(store.lease!.record, { holderIdentity: 'b', leaseDurationSeconds: 15 });
  await a.clock.advance(60_000);
  t.equal(a.clock.waiting, 0, 'a stopped elector has no timer left');
  await b.elector.stop();
});

t.test('transient API errors are retried every retry period; short ones do not cost the lease', async (t) => {
  const store = new FakeLeaseStore(() => a.clock.now());
  const a = replica(store, 'a');
  let failures = 0;
  const errors = [
    () => new KubeApiError('GET /apis/coordination.k8s.io/v1/namespaces/test/leases/lock: HTTP 503 ServiceUnavailable: etcd is down', 503, 'ServiceUnavailable'),
    () => new Error('GET /apis/coordination.k8s.io/v1/namespaces/test/leases/lock: no answer within 5000 ms'),
    () => Object.assign(new Error('connect ECONNREFUSED 10.96.0.1:443'), { code: 'ECONNREFUSED' }),
  ];
  a.lock.failWith = () => {
    const e = errors[failures++]!();
    if (failures === errors.length) a.lock.failWith = undefined;
    return e;
  };
  a.elector.start();
  await a.clock.advance(0);
  t.notOk(a.elector.isLeader);
  await a.clock.advance(4_000);
  t.notOk(a.elector.isLeader, 'still failing');
  await a.clock.advance(2_000);
  t.ok(a.elector.isLeader, 'acquired at the first attempt that reached the API (t = 6 s)');
  t.same(a.events, ['leader=a', 'started@6000']);
  t.equal(a.logs.filter((l) => l.startsWith('warn:')).length, 3, 'each failure logged');
  t.match(a.logs[0], /HTTP 503 .*retrying in 2000 ms/);

  // Renewals failing for 6 s (shorter than the renew deadline): still the leader.
  a.lock.failWith = () => new KubeApiError('PUT: HTTP 500 InternalError', 500, 'InternalError');
  await a.clock.advance(8_000);
  t.ok(a.elector.isLeader);
  a.lock.failWith = undefined;
  await a.clock.advance(4_000);
  t.ok(a.elector.isLeader);
  t.same(a.events, ['leader=a', 'started@6000'], 'no step-down');
  t.equal(store.lease!.record.holderIdentity, 'a');
  await a.elector.stop();
});

t.test('stopping a standby writes nothing and calls nothing; bad options are refused', async (t) => {
  const store = new FakeLeaseStore(() => 0);
  store.force({ holderIdentity: 'other', leaseDurationSeconds: 15, acquireTime: 'x', renewTime: 'x', leaseTransitions: 0 });
  const b = replica(store, 'b');
  b.elector.start();
  await b.clock.advance(5_000);
  await b.elector.stop();
  t.same(store.writes, []);
  t.same(b.events, ['leader=other']);
  t.equal(b.clock.waiting, 0);
  t.throws(() => b.elector.start(), /start\(\) called on a stopped elector/);

  const base = { lock: store.lockFor('x'), onStartedLeading: () => {}, onStoppedLeading: () => {} };
  t.throws(() => new LeaderElector({ ...base, identity: '' }), /identity is empty/);
  t.throws(() => new LeaderElector({ ...base, identity: 'x', renewDeadlineMs: 15_000 }), /must be shorter than the lease duration/);
  t.throws(() => new LeaderElector({ ...base, identity: 'x', retryPeriodMs: 9_000 }), /longer than 1.2 × retryPeriodMs/);
  t.throws(() => new LeaderElector({ ...base, identity: 'x', leaseDurationSeconds: 1.5 }), /whole number of seconds/);
});
