/**
 * Following the controller (controller mode): its three watch streams of this Node's view feed a
 * NodePolicyState, and the state is committed (turned into a ChangeSet for the flow compiler) only
 * at consistent cuts:
 *
 * - while the watcher is connected: while a kind is being listed again, the other kinds' events
 *   are held, so a relist never meets a half-followed view (the bridge keeps the last state);
 * - once every kind has delivered the versions the events received so far require: the
 *   controller stamps each event with the versions its Node's whole view had at the end of the
 *   controller's change (`VIEW_VERSIONS_ANNOTATION`), so a policy and the groups it names, sent
 *   on separate streams by one change, are enforced together and never one without the other.
 *
 * Each commit records the versions it took in and the flush scheduler's change count after it, so
 * "does this Node enforce its view as of versions V?" (a new Pod's realization question) is
 * answered exactly: some commit took in at least V and its flush is on the bridge.
 */
import type { Logger } from 'pino';
import type { Clock, TimerHandle } from '../../clock.js';
import type { ControlPlaneConnection } from '../../controlplane/client.js';
import { NodePolicyState } from '../../controlplane/node-state.js';
import { CONTROLPLANE_KINDS, type ControlPlaneEvent, type ControlPlaneKind, type ControlPlaneObject, parseViewVersions, VIEW_VERSIONS_ANNOTATION, type ViewVersions, viewCovers } from '../../controlplane/types.js';
import type { ChangeSet } from '../../policy/internal.js';
import type { ControlPlaneStatus } from '../status.js';

/** What the follower reads of the watcher (ControlPlaneWatcher). */
export interface FollowedWatcher {
  resourceVersions(): Partial<Record<ControlPlaneKind, string>>;
  storeId(): string | undefined;
}

export interface FollowerOptions {
  nodeName: string;
  clock: Clock;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** A committed ChangeSet, for the flush scheduler. */
  changed(cs: ChangeSet): void;
  /** The flush scheduler's change count (after `changed`) and how many of those changes are on the bridge. */
  changes(): number;
  committedChanges(): number;
  /** After each commit (waiters may be satisfied). */
  afterCommit?(): void;
  /** The connection changed state. */
  onConnection?(state: ControlPlaneConnection, reason: string): void;
}

interface Accepted {
  versions: ViewVersions;
  /** The store that issued them (undefined: a server that names none). */
  store: string | undefined;
  /** The flush scheduler's change count right after this commit. */
  seq: number;
}

const MAX_PENDING_COMMITS = 1000;

const versionOf = (rv: string | undefined): bigint => (rv !== undefined && /^[0-9]+$/.test(rv) ? BigInt(rv) : -1n);

export class ControlPlaneFollower {
  readonly state: NodePolicyState;
  private watcher?: FollowedWatcher;
  private connection: { state: ControlPlaneConnection; reason: string; since: number };
  private readonly listed = new Set<ControlPlaneKind>();
  /** The highest versions any event received so far requires of each kind. */
  private readonly required: Record<ControlPlaneKind, bigint> = { NetworkPolicy: 0n, AppliedToGroup: 0n, AddressGroup: 0n };
  private pending = false;
  private timer?: TimerHandle | undefined;
  /** Commits whose flush may not be on the bridge yet, oldest first, and the newest one that is. */
  private accepted: Accepted[] = [];
  private enforced?: Accepted | undefined;
  private rejectedCount = 0;
  private storeChanges = 0;
  private lists = 0;
  private everCommitted = false;
  private readonly syncedWaiters: (() => void)[] = [];
  private closed = false;

  constructor(private readonly opts: FollowerOptions) {
    this.state = new NodePolicyState(opts.nodeName);
    this.connection = { state: 'disconnected', reason: 'not connected yet', since: opts.clock.now() };
  }

  /** The watcher whose versions are read at each commit (set before it starts). */
  bind(watcher: FollowedWatcher): void {
    this.watcher = watcher;
  }

  // ------------------------------------------------------------------ the watcher's callbacks

  onSync(kind: ControlPlaneKind, items: ControlPlaneObject[]): void {
    this.lists++;
    this.state.sync(kind, items);
    this.listed.add(kind);
    for (const o of items) this.require(o.metadata.annotations?.[VIEW_VERSIONS_ANNOTATION]);
    this.schedule();
  }

  /** One event; throws (the watcher then lists again) when it cannot be applied. */
  onEvent(kind: ControlPlaneKind, e: ControlPlaneEvent): void {
    try {
      this.state.event(e);
    } catch (err) {
      this.rejectedCount++;
      this.opts.log.error({ kind, name: e.object.metadata.name, err: (err as Error).message }, 'controller mode: an object could not be applied; listing that kind again');
      throw err;
    }
    this.require(e.object.metadata.annotations?.[VIEW_VERSIONS_ANNOTATION]);
    this.schedule();
  }

  /**
   * The lists now come from another store (another replica leads, or the controller restarted):
   * its versions are not comparable with the old one's. What this Node enforces stays; nothing is
   * committed until every kind is listed from the new store, and no realization question is
   * answered yes from an old store's versions.
   */
  onStoreChange(store: string): void {
    this.opts.log.info({ store }, 'controller mode: another controller store serves this Node; listing every kind again before the next commit');
    this.listed.clear();
    for (const k of CONTROLPLANE_KINDS) this.required[k] = 0n;
    this.accepted = [];
    this.enforced = undefined;
    this.storeChanges++;
  }

  onState(state: ControlPlaneConnection, reason: string): void {
    if (state === this.connection.state && reason === this.connection.reason) return;
    if (state !== this.connection.state) this.connection = { state, reason, since: this.opts.clock.now() };
    else this.connection.reason = reason;
    this.opts.onConnection?.(state, reason);
    if (state === 'connected') this.schedule();
  }

  // ------------------------------------------------------------------ commits

  private require(annotation: string | undefined): void {
    if (annotation === undefined) return;
    const v = parseViewVersions(annotation);
    if (!v) {
      this.opts.log.warn({ annotation }, 'controller mode: an unreadable view-versions annotation is ignored');
      return;
    }
    for (const k of CONTROLPLANE_KINDS) if (v[k] > this.required[k]) this.required[k] = v[k];
  }

  /** The events read together (one turn of the loop) are committed together. */
  private schedule(): void {
    this.pending = true;
    if (this.timer !== undefined || this.closed) return;
    this.timer = this.opts.clock.setTimeout(() => {
      this.timer = undefined;
      this.commitIfConsistent();
    }, 0);
  }

  /** Why the state received is not committed now (undefined: it can be). */
  private holdReason(delivered: ViewVersions): string | undefined {
    if (this.connection.state !== 'connected') return `not connected: ${this.connection.reason}`;
    const missing = CONTROLPLANE_KINDS.filter((k) => !this.listed.has(k));
    if (missing.length > 0) return `not listed yet: ${missing.join(', ')}`;
    const behind = CONTROLPLANE_KINDS.filter((k) => delivered[k] < this.required[k]);
    if (behind.length > 0) return `waiting for ${behind.map((k) => `${k} ${this.required[k]}`).join(', ')}`;
    return undefined;
  }

  private delivered(): ViewVersions {
    const rvs = this.watcher?.resourceVersions() ?? {};
    return { NetworkPolicy: versionOf(rvs.NetworkPolicy), AppliedToGroup: versionOf(rvs.AppliedToGroup), AddressGroup: versionOf(rvs.AddressGroup) };
  }

  private commitIfConsistent(): void {
    if (!this.pending || this.closed) return;
    const delivered = this.delivered();
    if (this.holdReason(delivered) !== undefined) return;
    this.pending = false;
    const cs = this.state.commit();
    this.opts.changed(cs);
    this.accepted.push({ versions: delivered, store: this.watcher?.storeId(), seq: this.opts.changes() });
    this.everCommitted = true;
    // Flushes that keep failing must not grow this without bound: dropping an older pending commit
    // only makes a realization answer wait for a newer one (later, never wrong).
    if (this.accepted.length > MAX_PENDING_COMMITS) this.accepted.splice(0, this.accepted.length - MAX_PENDING_COMMITS);
    const firstSync = this.syncedWaiters.length > 0;
    for (const w of this.syncedWaiters.splice(0)) w();
    if (firstSync) this.opts.log.info(this.state.counts(), 'controller mode: the controller\'s state is in');
    this.opts.afterCommit?.();
  }

  /**
   * A change this Node made to the state (learned DNS names) on top of what the controller sent: its
   * ChangeSet at once when nothing received is held back, else undefined and it goes with the next
   * commit (committing now would enforce a partial view of the controller's).
   */
  localChange(): ChangeSet | undefined {
    if (this.pending || this.closed || !this.everCommitted) return undefined;
    return this.state.commit();
  }

  /** Resolves at the first commit (every kind listed, connected, consistent). */
  whenSynced(): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve) => this.syncedWaiters.push(resolve));
  }

  /** A commit took the controller's state in (once true, stays true: the state is kept across stores). */
  get synced(): boolean {
    return this.everCommitted;
  }

  /** The versions of the newest commit whose flows are on the bridge (undefined: none yet). */
  enforcedVersions(): ViewVersions | undefined {
    const done = this.opts.committedChanges();
    while (this.accepted.length > 0 && this.accepted[0]!.seq <= done) this.enforced = this.accepted.shift();
    return this.enforced?.versions;
  }

  /** The newest commit whose flows are on the bridge, with the store its versions are of (undefined: none yet, or none since the store changed). */
  enforcedView(): { versions: ViewVersions; store: string | undefined } | undefined {
    this.enforcedVersions();
    return this.enforced && { versions: this.enforced.versions, store: this.enforced.store };
  }

  /** This Node enforces its view as of `v`: a commit took in at least `v` of every kind and its flows are on the bridge. */
  realized(v: ViewVersions): boolean {
    const e = this.enforcedVersions();
    return e !== undefined && viewCovers(e, v);
  }

  /** Everything received is committed (nothing held back). */
  get idle(): boolean {
    return !this.pending;
  }

  get connected(): boolean {
    return this.connection.state === 'connected';
  }

  /** Figures for /status. */
  status(server: string): ControlPlaneStatus {
    const delivered = this.delivered();
    const held = this.pending ? this.holdReason(delivered) : undefined;
    const show = (v: ViewVersions | undefined) => (v ? Object.fromEntries(CONTROLPLANE_KINDS.filter((k) => v[k] >= 0n).map((k) => [k, String(v[k])])) : {});
    const c = this.state.counts();
    return {
      server,
      connected: this.connected,
      ...(this.connected ? {} : { reason: this.connection.reason }),
      since: new Date(this.connection.since).toISOString(),
      synced: this.synced,
      ...(held ? { held } : {}),
      received: show(delivered),
      enforced: show(this.enforcedVersions()),
      policies: c.policies,
      enforcedPolicies: c.enforced,
      waiting: c.waiting,
      appliedToGroups: c.appliedToGroups,
      addressGroups: c.addressGroups,
      rejected: this.rejectedCount,
      lists: this.lists,
      storeChanges: this.storeChanges,
    };
  }

  close(): void {
    this.closed = true;
    this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}
