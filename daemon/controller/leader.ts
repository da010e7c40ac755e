/**
 * Leader election between the sluice-controller's replicas on a `coordination.k8s.io/v1` Lease,
 * as client-go's leaderelection package does it:
 *
 * - A candidate reads the Lease every retry period and takes it (create, or update conditional on
 *   the resourceVersion it read) when it is absent, released (no holder), already its own, or
 *   expired. Expiry is judged on this process's own clock: the lease counts as expired once
 *   leaseDurationSeconds have passed since this process last *saw the record change*, never by
 *   comparing the record's renewTime with local time (the hosts' clocks may disagree).
 * - The leader renews every retry period. A renewal that has not succeeded within the renew
 *   deadline (shorter than the lease duration, so it steps down before any standby can see the
 *   lease expire) ends its leadership; so does a renewal that finds another holder in the record.
 * - A 409 Conflict on create or update means another replica wrote first: this one lost the race.
 * - A graceful stop releases the lease (no holder, a 1 s duration) so a standby takes over at its
 *   next retry instead of waiting out the lease.
 *
 * Timing: with the defaults (15 s / 10 s / 2 s, client-go's), a standby takes over between
 * leaseDuration and leaseDuration + 2 retry periods after the leader's last renewal (it sees that
 * renewal up to one retry period late and checks expiry once per retry period). A stopped leader's
 * lease is taken within one retry period. Retries are not jittered: with a handful of replicas
 * there is no herd to spread, and a fixed period keeps the takeover bound exact.
 *
 * After losing the lease the elector becomes a candidate again, so the callbacks may alternate
 * more than once in a process's life.
 */
import { type Clock, realClock, type TimerHandle } from '../clock.js';
import { KubeApiError, type KubeAccess } from '../kube/access.js';

/** The Lease's spec as leader election reads and writes it (client-go's LeaderElectionRecord). */
export interface LeaderElectionRecord {
  /** '' when the lease is released. */
  holderIdentity: string;
  leaseDurationSeconds: number;
  /** RFC 3339 with microseconds, as metav1.MicroTime. */
  acquireTime: string;
  renewTime: string;
  leaseTransitions: number;
}

/** One read of the lock: its record and the resourceVersion an update must name. */
export interface ObservedLease {
  record: LeaderElectionRecord;
  resourceVersion: string;
}

/**
 * The one Lease an elector competes for. `get` resolves undefined when it does not exist;
 * `create` and `update` resolve the stored resourceVersion and reject with LeaseConflictError when
 * another writer got there first (409). Any other rejection is a transient failure, retried.
 */
export interface LeaseLock {
  /** For messages: "Lease sluice-system/sluice-controller". */
  readonly description: string;
  get(): Promise<ObservedLease | undefined>;
  create(record: LeaderElectionRecord): Promise<string>;
  update(record: LeaderElectionRecord, resourceVersion: string): Promise<string>;
}

/** The lease changed (or was created) since it was read: the write lost the race. */
export class LeaseConflictError extends Error {
  override name = 'LeaseConflictError';
}

export interface LeaderElectorOptions {
  /** This replica's name in holderIdentity (the Pod name, unique among the candidates). */
  identity: string;
  lock: LeaseLock;
  clock?: Clock;
  /** How long a standby waits, after it last saw the lease change, before taking it (default 15). */
  leaseDurationSeconds?: number;
  /** How long the leader keeps retrying a failed renewal before it steps down (default 10 000). */
  renewDeadlineMs?: number;
  /** Between attempts of a candidate, and between renewals of the leader (default 2 000). */
  retryPeriodMs?: number;
  /** This replica now holds the lease: start serving. */
  onStartedLeading: () => void;
  /** This replica no longer holds the lease (lost, not renewed in time, or stopping): stop serving at once. */
  onStoppedLeading: () => void;
  /** The lease names a new holder (this replica included). A released lease (no holder) is not reported. */
  onNewLeader?: (identity: string) => void;
  log?: (level: 'info' | 'warn' | 'error', message: string) => void;
}

export const DEFAULT_LEASE_DURATION_SECONDS = 15;
export const DEFAULT_RENEW_DEADLINE_MS = 10_000;
export const DEFAULT_RETRY_PERIOD_MS = 2_000;

/** metav1.MicroTime's wire form: RFC 3339 with six fractional digits, UTC. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, '000Z');
}

type State = 'idle' | 'candidate' | 'leading' | 'stopped';

export class LeaderElector {
  readonly identity: string;
  private readonly lock: LeaseLock;
  private readonly clock: Clock;
  private readonly leaseDurationSeconds: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  private readonly log: NonNullable<LeaderElectorOptions['log']>;

  private state: State = 'idle';
  /** Bumped at every change of state: the continuation of an attempt started earlier is ignored. */
  private epoch = 0;
  private timer: TimerHandle | undefined;
  private deadline: TimerHandle | undefined;
  /** The attempt under way (one at a time), awaited by stop() before it releases. */
  private inflight: Promise<boolean> | undefined;

  /** The record last read or written, when, by this process's clock, and its resourceVersion. */
  private observed: LeaderElectionRecord | undefined;
  private observedKey = '';
  private observedAt = 0;
  private resourceVersion: string | undefined;
  private reportedLeader = '';

  constructor(private readonly opts: LeaderElectorOptions) {
    this.identity = opts.identity;
    this.lock = opts.lock;
    this.clock = opts.clock ?? realClock;
    this.leaseDurationSeconds = opts.leaseDurationSeconds ?? DEFAULT_LEASE_DURATION_SECONDS;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? DEFAULT_RENEW_DEADLINE_MS;
    this.retryPeriodMs = opts.retryPeriodMs ?? DEFAULT_RETRY_PERIOD_MS;
    this.log = opts.log ?? (() => {});
    if (!this.identity) throw new Error('leader election: the identity is empty (it must name this replica, e.g. its Pod)');
    if (!Number.isInteger(this.leaseDurationSeconds) || this.leaseDurationSeconds < 1) {
      throw new Error(`leader election: leaseDurationSeconds ${this.leaseDurationSeconds} is not a whole number of seconds ≥ 1`);
    }
    if (!(this.retryPeriodMs > 0)) throw new Error(`leader election: retryPeriodMs ${this.retryPeriodMs} must be positive`);
    // client-go's checks: the leader must give up before a standby can see the lease expire, and
    // must get more than one attempt in before its deadline.
    if (!(this.renewDeadlineMs < this.leaseDurationSeconds * 1000)) {
      throw new Error(`leader election: renewDeadlineMs ${this.renewDeadlineMs} must be shorter than the lease duration (${this.leaseDurationSeconds} s)`);
    }
    if (!(this.renewDeadlineMs > 1.2 * this.retryPeriodMs)) {
      throw new Error(`leader election: renewDeadlineMs ${this.renewDeadlineMs} must be longer than 1.2 × retryPeriodMs (${this.retryPeriodMs})`);
    }
  }

  /** Whether this replica holds the lease now. */
  get isLeader(): boolean {
    return this.state === 'leading';
  }

  /** The holder of the lease as last seen ('' when released or not read yet). */
  get leader(): string {
    return this.observed?.holderIdentity ?? '';
  }

  /** Starts competing for the lease (the first attempt runs at once). */
  start(): void {
    if (this.state !== 'idle') throw new Error(`leader election: start() called on a ${this.state} elector`);
    this.becomeCandidate(0);
  }

  /**
   * Stops for good. A leader first calls onStoppedLeading (the work stops before anyone else can
   * take over), then releases the lease so a standby takes it at its next retry. A failed release
   * is logged: the lease then simply expires. It first waits for an attempt under way, which the
   * lock's request timeout bounds (KubeLeaseLock's: 5 s).
   */
  async stop(): Promise<void> {
    if (this.state === 'stopped') return;
    const wasLeading = this.state === 'leading';
    this.enter('stopped');
    if (wasLeading) this.callback('onStoppedLeading', () => this.opts.onStoppedLeading());
    // An attempt under way may be writing the lease: release from what it leaves.
    await this.inflight?.catch(() => false);
    if (this.observed?.holderIdentity === this.identity) await this.release();
  }

  private enter(state: State): void {
    this.state = state;
    this.epoch++;
    this.clock.clearTimeout(this.timer);
    this.clock.clearTimeout(this.deadline);
    this.timer = this.deadline = undefined;
  }

  private becomeCandidate(delayMs: number): void {
    this.enter('candidate');
    const epoch = this.epoch;
    const attempt = () => {
      void this.attempt().then((ok) => {
        if (epoch !== this.epoch) return;
        if (ok) this.becomeLeader();
        else this.timer = this.clock.setTimeout(attempt, this.retryPeriodMs);
      });
    };
    this.timer = this.clock.setTimeout(attempt, delayMs);
  }

  private becomeLeader(): void {
    this.enter('leading');
    this.log('info', `${this.identity} acquired ${this.lock.description}`);
    this.callback('onStartedLeading', () => this.opts.onStartedLeading());
    if (this.state === 'leading') this.scheduleRenewRound();
  }

  /** One renewal round, as client-go's: retry every period until success or the deadline. */
  private scheduleRenewRound(): void {
    const epoch = this.epoch;
    this.timer = this.clock.setTimeout(() => {
      if (epoch !== this.epoch) return;
      this.deadline = this.clock.setTimeout(() => {
        if (epoch === this.epoch) this.stepDown(`could not renew ${this.lock.description} within ${this.renewDeadlineMs} ms`);
      }, this.renewDeadlineMs);
      const attempt = () => {
        void this.attempt().then((ok) => {
          if (epoch !== this.epoch) return;
          if (ok) {
            this.clock.clearTimeout(this.deadline);
            this.deadline = undefined;
            this.scheduleRenewRound();
            return;
          }
          const holder = this.observed?.holderIdentity ?? '';
          if (holder !== '' && holder !== this.identity) this.stepDown(`${this.lock.description} is now held by ${holder}`);
          else this.timer = this.clock.setTimeout(attempt, this.retryPeriodMs);
        });
      };
      attempt();
    }, this.retryPeriodMs);
  }

  private stepDown(why: string): void {
    this.log('warn', `${this.identity} stops leading: ${why}`);
    this.becomeCandidate(this.retryPeriodMs);
    this.callback('onStoppedLeading', () => this.opts.onStoppedLeading());
  }

  private callback(name: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log('error', `leader election: ${name} threw: ${(err as Error).message}`);
    }
  }

  /** tryAcquireOrRenew, errors turned into a false result (retried at the next period). */
  private attempt(): Promise<boolean> {
    const p = this.tryAcquireOrRenew().catch((err: Error) => {
      if (err instanceof LeaseConflictError) this.log('info', `${this.identity}: ${this.lock.description} was written by another replica first: ${err.message}`);
      else this.log('warn', `${this.identity}: ${this.lock.description}: ${err.message} (retrying in ${this.retryPeriodMs} ms)`);
      return false;
    });
    this.inflight = p;
    return p.finally(() => {
      if (this.inflight === p) this.inflight = undefined;
      this.reportLeader();
    });
  }

  private holdsObserved(): boolean {
    return this.observed?.holderIdentity === this.identity;
  }

  private leaseValid(now: number): boolean {
    return this.observed !== undefined && this.observedAt + this.observed.leaseDurationSeconds * 1000 > now;
  }

  private setObserved(record: LeaderElectionRecord, resourceVersion: string): void {
    this.observed = record;
    this.observedKey = recordKey(record);
    this.observedAt = this.clock.now();
    this.resourceVersion = resourceVersion;
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.clock.now();
    const desired: LeaderElectionRecord = {
      holderIdentity: this.identity,
      leaseDurationSeconds: this.leaseDurationSeconds,
      acquireTime: microTime(now),
      renewTime: microTime(now),
      leaseTransitions: 0,
    };
    // 1. The leader's fast path: update the version it wrote last, without reading first.
    if (this.state === 'leading' && this.holdsObserved() && this.leaseValid(now) && this.resourceVersion !== undefined) {
      const next = { ...desired, acquireTime: this.observed!.acquireTime, leaseTransitions: this.observed!.leaseTransitions };
      try {
        this.setObserved(next, await this.lock.update(next, this.resourceVersion));
        return true;
      } catch (err) {
        this.log('info', `${this.identity}: renewing ${this.lock.description} without reading it failed (${(err as Error).message}); reading it`);
      }
    }
    // 2. Read it; create it when absent.
    const current = await this.lock.get();
    if (!current) {
      this.setObserved(desired, await this.lock.create(desired));
      return true;
    }
    // 3. A changed record restarts the expiry clock: it is measured from when this process saw it.
    if (recordKey(current.record) !== this.observedKey) this.setObserved(current.record, current.resourceVersion);
    else this.resourceVersion = current.resourceVersion;
    const holder = current.record.holderIdentity;
    if (holder !== '' && holder !== this.identity && this.leaseValid(now)) return false;
    // 4. Take it (or renew it): keep the acquisition when it is already this replica's.
    const next =
      holder === this.identity
        ? { ...desired, acquireTime: current.record.acquireTime, leaseTransitions: current.record.leaseTransitions }
        : { ...desired, leaseTransitions: current.record.leaseTransitions + 1 };
    this.setObserved(next, await this.lock.update(next, current.resourceVersion));
    return true;
  }

  private async release(): Promise<void> {
    const now = this.clock.now();
    const released: LeaderElectionRecord = {
      holderIdentity: '',
      leaseDurationSeconds: 1,
      acquireTime: microTime(now),
      renewTime: microTime(now),
      leaseTransitions: this.observed?.leaseTransitions ?? 0,
    };
    try {
      let rv = this.resourceVersion;
      if (rv === undefined) return;
      try {
        this.setObserved(released, await this.lock.update(released, rv));
      } catch (err) {
        if (!(err instanceof LeaseConflictError)) throw err;
        // Written since (a renewal's answer was lost): release it only if it is still ours.
        const current = await this.lock.get();
        if (!current || current.record.holderIdentity !== this.identity) return;
        rv = current.resourceVersion;
        this.setObserved(released, await this.lock.update(released, rv));
      }
      this.log('info', `${this.identity} released ${this.lock.description}`);
    } catch (err) {
      this.log('warn', `${this.identity} could not release ${this.lock.description} (it will expire instead): ${(err as Error).message}`);
    }
  }

  private reportLeader(): void {
    const holder = this.observed?.holderIdentity ?? '';
    if (holder === '' || holder === this.reportedLeader) return;
    this.reportedLeader = holder;
    const onNewLeader = this.opts.onNewLeader;
    if (onNewLeader) this.callback('onNewLeader', () => onNewLeader(holder));
  }
}

const recordKey = (r: LeaderElectionRecord): string => JSON.stringify([r.holderIdentity, r.leaseDurationSeconds, r.acquireTime, r.renewTime, r.leaseTransitions]);

/** The part of KubeAccess the Lease lock uses. */
export type LeaseApi = Pick<KubeAccess, 'getJson' | 'postJson' | 'putJson'>;

const KUBE_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

/**
 * A LeaseLock on `coordination.k8s.io/v1` Lease namespace/name through the agent's KubeAccess.
 * An update replaces the whole object as last read, so labels and annotations others set survive.
 */
export class KubeLeaseLock implements LeaseLock {
  readonly description: string;
  private last: Record<string, unknown> | undefined;

  constructor(
    private readonly api: LeaseApi,
    readonly namespace: string,
    readonly name: string,
    /** Per request; shorter than the renew deadline so a hung request leaves time for another. */
    private readonly timeoutMs = 5_000,
  ) {
    if (!KUBE_NAME.test(namespace)) throw new Error(`Lease namespace "${namespace}" is not a valid Kubernetes name`);
    if (!KUBE_NAME.test(name)) throw new Error(`Lease name "${name}" is not a valid Kubernetes name`);
    this.description = `Lease ${namespace}/${name}`;
  }

  private get collection(): string {
    return `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(this.namespace)}/leases`;
  }

  async get(): Promise<ObservedLease | undefined> {
    let obj: unknown;
    try {
      obj = await this.api.getJson(`${this.collection}/${encodeURIComponent(this.name)}`, this.timeoutMs);
    } catch (err) {
      if (err instanceof KubeApiError && err.statusCode === 404) return undefined;
      throw err;
    }
    return this.remember(obj, 'reading');
  }

  async create(record: LeaderElectionRecord): Promise<string> {
    const body = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.name, namespace: this.namespace }, spec: toSpec(record) };
    return this.write(() => this.api.postJson(this.collection, body, this.timeoutMs), 'creating');
  }

  async update(record: LeaderElectionRecord, resourceVersion: string): Promise<string> {
    const base = this.last ?? { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: this.name, namespace: this.namespace } };
    const metadata = { ...(base.metadata as Record<string, unknown>), resourceVersion };
    const body = { ...base, metadata, spec: toSpec(record) };
    return this.write(() => this.api.putJson(`${this.collection}/${encodeURIComponent(this.name)}`, body, this.timeoutMs), 'updating');
  }

  private async write(send: () => Promise<unknown>, what: string): Promise<string> {
    let obj: unknown;
    try {
      obj = await send();
    } catch (err) {
      if (err instanceof KubeApiError && err.statusCode === 409) throw new LeaseConflictError(err.message);
      throw err;
    }
    return this.remember(obj, what).resourceVersion;
  }

  private remember(obj: unknown, what: string): ObservedLease {
    const lease = obj as { metadata?: { resourceVersion?: unknown }; spec?: Record<string, unknown> } | null;
    const rv = lease?.metadata?.resourceVersion;
    if (!lease || typeof lease !== 'object' || typeof rv !== 'string' || rv === '') {
      throw new Error(`${what} ${this.description}: the answer is not a Lease with a metadata.resourceVersion`);
    }
    this.last = lease as Record<string, unknown>;
    return { record: fromSpec(lease.spec ?? {}), resourceVersion: rv };
  }
}

function toSpec(r: LeaderElectionRecord): Record<string, unknown> {
  return {
    ...(r.holderIdentity ? { holderIdentity: r.holderIdentity } : {}),
    leaseDurationSeconds: r.leaseDurationSeconds,
    acquireTime: r.acquireTime,
    renewTime: r.renewTime,
    leaseTransitions: r.leaseTransitions,
  };
}

/** A Lease's spec as a record; absent fields read as client-go's zero values (a 0 s lease is expired at once). */
function fromSpec(spec: Record<string, unknown>): LeaderElectionRecord {
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  const int = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : 0);
  return {
    holderIdentity: str(spec.holderIdentity),
    leaseDurationSeconds: int(spec.leaseDurationSeconds),
    acquireTime: str(spec.acquireTime),
    renewTime: str(spec.renewTime),
    leaseTransitions: int(spec.leaseTransitions),
  };
}
