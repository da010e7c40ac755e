/**
 * The controller's served state: for every Node, the `controlplane.sluice.io` objects that Node
 * sees (its span), with one resourceVersion counter for the whole store and bounded event logs so
 * an agent's watch resumes where it stopped. The computation (computation.ts) says what each Node
 * sees; this store turns that into list results and watch events. Two ways to say it:
 *
 * - `set(node, …)`: an object of one Node's own (an AppliedToGroup split by Node), logged in that
 *   Node's log;
 * - `share(kind, key, …)` and `hold(node, kind, key, …)`: one object every Node of its span sees
 *   (a NetworkPolicy, an AddressGroup). A change of it is one event in the shared log, not one per
 *   Node: a group every Node needs changes at each new Pod, and its cost must not grow with the
 *   Nodes (the seed's store logs each object's event once and filters it per watcher). Only a Node
 *   joining or leaving the span is an event of that Node's log.
 *
 * Objects given to the store are never copied or mutated: a view holds references, and the name
 * and resourceVersion are added to a shallow copy only when an object is served.
 *
 * Names on the wire (`controlPlaneName`): AppliedToGroup and AddressGroup ids ("atg-…", "ag-…")
 * are used as they are; a NetworkPolicy's source key "<Kind>/<namespace>/<name>" becomes
 * "<kind lowercased>.<namespace>.<name>" (namespace empty for cluster-scoped kinds, e.g.
 * "clusternetworkpolicy..deny-all"). Kinds and namespaces hold no dot, so the first two dots
 * split the name back unambiguously.
 */
import { randomUUID } from 'node:crypto';
import {
  CONTROLPLANE_API_VERSION,
  CONTROLPLANE_KINDS,
  type ControlPlaneAddressGroupPatch,
  type ControlPlaneEvent,
  type ControlPlaneKind,
  type ControlPlaneObject,
  formatViewVersions,
  viewVersionStrings,
  VIEW_VERSIONS_ANNOTATION,
} from '../controlplane/types.js';

export { CONTROLPLANE_KINDS };

/** A watch from a resourceVersion the Node's log no longer reaches (or never issued): the client must list again. */
export class GoneError extends Error {
  override readonly name = 'GoneError';
  readonly code = 410;
}

const SOURCE_KEY = /^([A-Za-z][A-Za-z0-9]*)\/([a-z0-9-]*)\/([a-z0-9]([a-z0-9.-]*[a-z0-9])?)$/;
const GROUP_ID = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/;

/** The URL-safe `metadata.name` of `key` (a NetworkPolicy's source key, a group's id); see the file comment. */
export function controlPlaneName(kind: ControlPlaneKind, key: string): string {
  if (kind === 'NetworkPolicy') {
    const m = SOURCE_KEY.exec(key);
    if (!m) throw new Error(`NetworkPolicy key "${key}" is not "<Kind>/<namespace>/<name>" with a Kubernetes namespace and name`);
    return `${m[1]!.toLowerCase()}.${m[2]}.${m[3]}`;
  }
  if (!GROUP_ID.test(key) || key.length > 253) throw new Error(`${kind} id "${key}" is not a lowercase DNS-style name`);
  return key;
}

export interface ControlPlaneStoreOptions {
  /** Events kept per Node for resuming watches; a watch from before them is Gone (default 1000). */
  eventsPerNode?: number;
  /** Events of shared objects kept for resuming watches; a watch from before them is Gone (default 10 × eventsPerNode). */
  sharedEvents?: number;
  /**
   * The store's resourceVersion before its first change. The default, the wall clock in
   * microseconds, makes a restarted controller's versions start above the old one's (unless it
   * issued more than a million a second), so a watch resuming across the restart is always
   * recognized as from an older store and gets Gone instead of silently skipping events.
   */
  initialResourceVersion?: number;
  /**
   * Keep no event log until `startLog` (default: log from the start). A controller computing the
   * cluster's initial lists serves nobody yet: no agent holds a version of this new store, so
   * logging the millions of view changes of that computation would cost time and memory for
   * events no watch can ask for. Views watched meanwhile are logged all the same.
   */
  deferLog?: boolean;
}

/**
 * An object's content and the version it last changed at: a Node's own (`set`), or shared by the
 * Nodes in `holders` (`share`), whose views all point at this one cell.
 */
interface Cell {
  object: ControlPlaneObject;
  rv: number;
  holders?: Set<NodeView>;
}

/** An object of a Node's view: its cell and the version the Node began holding it at. */
interface Held {
  cell: Cell;
  since: number;
}

/** The version an object of a view is served at: its last change, or the Node's joining if later. */
const heldRv = (h: Held) => Math.max(h.since, h.cell.rv);

interface LogEntry {
  rv: number;
  kind: ControlPlaneKind;
  name: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The object (ADDED, MODIFIED), the patch (MODIFIED of an AddressGroupPatch), undefined (DELETED). */
  object: ControlPlaneObject | ControlPlaneAddressGroupPatch | undefined;
  /** A Node's entry: its view versions at the end of the batch that made it (VIEW_VERSIONS_ANNOTATION); set when the batch ends. */
  viewVersions?: ViewVersions;
  /** A shared entry: the cell it changed, for every Node holding that cell since before it. */
  cell?: Cell;
}

/**
 * A view's versions per kind at the end of a batch. Its text is made when first served: most Nodes
 * of a change have no watch open at that moment, and formatting it for each of thousands of Nodes
 * at every change would cost more than the change.
 */
interface ViewVersions extends Record<ControlPlaneKind, number> {
  text?: string;
}

const versionsText = (v: ViewVersions) => (v.text ??= formatViewVersions(v));

/**
 * A log of the last `bound` entries. Per kind, a watch from a version below `floor` is Gone: events
 * of that kind after it may have been dropped. Per kind, so a burst of one kind does not expire the
 * watches of the others.
 */
class BoundedLog {
  /** The entries from `head` on; those before are dropped and compacted away now and then. */
  private entries: LogEntry[] = [];
  private head = 0;

  constructor(
    private readonly bound: number,
    readonly floor: Record<ControlPlaneKind, number>,
  ) {}

  append(entry: LogEntry): void {
    this.entries.push(entry);
    if (this.entries.length - this.head > this.bound) {
      const dropped = this.entries[this.head]!;
      this.floor[dropped.kind] = dropped.rv;
      this.entries[this.head++] = undefined as unknown as LogEntry;
      // Compact once the dropped prefix is as long as the kept log: amortized O(1) per event.
      if (this.head >= this.bound) {
        this.entries = this.entries.slice(this.head);
        this.head = 0;
      }
    }
  }

  /** The entries of `kind` after version `from`, oldest first (binary search: versions increase). */
  after(kind: ControlPlaneKind, from: number): LogEntry[] {
    let lo = this.head;
    let hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.entries[mid]!.rv <= from) lo = mid + 1;
      else hi = mid;
    }
    const out: LogEntry[] = [];
    for (let i = lo; i < this.entries.length; i++) if (this.entries[i]!.kind === kind) out.push(this.entries[i]!);
    return out;
  }
}

interface Watcher {
  kind: ControlPlaneKind;
  view: NodeView;
  /** The last version delivered: a log entry is delivered once even if a batch flush also carries it. */
  lastRv: number;
  onEvent: (e: ControlPlaneEvent) => void;
  onClose: ((err?: Error) => void) | undefined;
  closed: boolean;
}

interface NodeView {
  objects: Record<ControlPlaneKind, Map<string, Held>>;
  /** This Node's own events: its own objects', and its joining or leaving shared objects. */
  log: BoundedLog;
  watchers: Set<Watcher>;
  /** Per kind, the version of the view's last change of that kind (0: none yet), shared changes included. */
  last: Record<ControlPlaneKind, number>;
  /** The batch whose end `versions` holds (flush stamps each view once per batch). */
  stamped: number;
  versions: ViewVersions | undefined;
}

export interface ControlPlaneNodeStatus {
  name: string;
  objects: Record<ControlPlaneKind, number>;
  watchers: number;
  /** The oldest resourceVersion a watch of this Node (of any kind) can resume from. */
  oldestResumable: string;
}

export interface ControlPlaneList {
  resourceVersion: string;
  items: ControlPlaneObject[];
}

export interface ControlPlaneWatch {
  stop(): void;
}

export class ControlPlaneStore {
  /** This store's identity (STORE_HEADER): its versions mean nothing to another store. */
  readonly id = randomUUID();
  private readonly perNode: number;
  private rv: number;
  private readonly views = new Map<string, NodeView>();
  /** Shared objects by kind and wire name. */
  private readonly cells: Record<ControlPlaneKind, Map<string, Cell & { holders: Set<NodeView> }>> = { NetworkPolicy: new Map(), AppliedToGroup: new Map(), AddressGroup: new Map() };
  /** Changes of shared objects, for every Node holding them. */
  private readonly sharedLog: BoundedLog;
  /** Every open watch by kind: a shared change is delivered by looking at these or at its holders, whichever are fewer. */
  private readonly watching: Record<ControlPlaneKind, Set<Watcher>> = { NetworkPolicy: new Set(), AppliedToGroup: new Set(), AddressGroup: new Set() };
  /** Floor of Nodes without a view: raised when a view is forgotten, since its log goes with it. */
  private unknownFloor: number;
  private depth = 0;
  private logging: boolean;
  /** This batch's entries in version order, and each one's view (undefined: a shared entry). */
  private pendingViews: (NodeView | undefined)[] = [];
  private pendingEntries: LogEntry[] = [];
  private batches = 0;
  /** Wire names by kind and key: one change is set on many Nodes, each asking for the same name. */
  private readonly names: Record<ControlPlaneKind, Map<string, string>> = { NetworkPolicy: new Map(), AppliedToGroup: new Map(), AddressGroup: new Map() };

  constructor(opts: ControlPlaneStoreOptions = {}) {
    const n = opts.eventsPerNode ?? 1000;
    if (!Number.isInteger(n) || n < 1) throw new Error(`eventsPerNode ${n} is not a positive integer`);
    const shared = opts.sharedEvents ?? 10 * n;
    if (!Number.isInteger(shared) || shared < 1) throw new Error(`sharedEvents ${shared} is not a positive integer`);
    const initial = opts.initialResourceVersion ?? Date.now() * 1000;
    if (!Number.isSafeInteger(initial) || initial < 0) throw new Error(`initialResourceVersion ${initial} is not a non-negative safe integer`);
    this.perNode = n;
    this.logging = !opts.deferLog;
    this.rv = initial;
    this.unknownFloor = initial;
    this.sharedLog = new BoundedLog(shared, { NetworkPolicy: initial, AppliedToGroup: initial, AddressGroup: initial });
  }

  /** The current resourceVersion: every change up to it has been delivered to the watchers. */
  resourceVersion(): string {
    return String(this.rv);
  }

  /**
   * What `node` now sees of `kind`/`key` as its own object (undefined: nothing). `key` is a
   * NetworkPolicy's source key or a group's id. An AddressGroup change may come with its `patch`
   * (what the MODIFIED event carries instead of the whole group); objects equal to what the Node
   * holds make no event. A shared object the Node held is replaced by this one.
   */
  set(node: string, kind: ControlPlaneKind, key: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void {
    // Outside a batch, as a batch of its own (inside one, no closure per Node of a change).
    if (this.depth === 0) {
      this.batch(() => this.set(node, kind, key, object, patch));
      return;
    }
    if (typeof node !== 'string' || node === '') throw new Error('set: the Node name is empty');
    checkObject('set', kind, key, object, patch);
    const name = this.nameOf(kind, key);
    let view = this.views.get(node);
    const held = view?.objects[kind].get(name);
    if (!held && object === undefined) return;
    if (held && object !== undefined && !held.cell.holders && !changesMembers(patch) && jsonEqual(held.cell.object, object)) return;
    if (!view) this.views.set(node, (view = this.newView()));
    held?.cell.holders?.delete(view);
    const rv = ++this.rv;
    if (object === undefined) {
      view.objects[kind].delete(name);
      this.record(view, { rv, kind, name, type: 'DELETED', object: undefined });
    } else {
      view.objects[kind].set(name, { cell: { object, rv }, since: held ? held.since : rv });
      this.record(view, held ? { rv, kind, name, type: 'MODIFIED', object: patch ?? object } : { rv, kind, name, type: 'ADDED', object });
    }
  }

  /**
   * What every Node holding the shared `kind`/`key` now sees (undefined: it is gone, and so from
   * every view holding it). One event for all of them, carrying `patch` (an AddressGroup's member
   * changes) when given; nothing when it equals what they hold or nobody holds it yet.
   */
  share(kind: ControlPlaneKind, key: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void {
    if (this.depth === 0) {
      this.batch(() => this.share(kind, key, object, patch));
      return;
    }
    checkObject('share', kind, key, object, patch);
    const name = this.nameOf(kind, key);
    const cells = this.cells[kind];
    const cell = cells.get(name);
    if (object === undefined) {
      if (!cell) return;
      cells.delete(name);
      for (const view of cell.holders) {
        view.objects[kind].delete(name);
        this.record(view, { rv: ++this.rv, kind, name, type: 'DELETED', object: undefined });
      }
      return;
    }
    if (!cell) {
      cells.set(name, { object, rv: this.rv, holders: new Set() });
      return;
    }
    if (cell.object === object || (!changesMembers(patch) && jsonEqual(cell.object, object))) return;
    cell.object = object;
    if (cell.holders.size === 0) {
      cell.rv = this.rv;
      return;
    }
    const rv = (cell.rv = ++this.rv);
    for (const view of cell.holders) view.last[kind] = rv;
    const entry: LogEntry = { rv, kind, name, type: 'MODIFIED', object: patch ?? object, cell };
    // Not logged while the log is deferred: a watch from before this change cannot resume (it lists again).
    if (this.logging) this.sharedLog.append(entry);
    else this.sharedLog.floor[kind] = rv;
    this.pendingViews.push(undefined);
    this.pendingEntries.push(entry);
  }

  /**
   * Whether `node` holds the shared `kind`/`key` (given to `share` before): it joins the object's
   * span (an ADDED event of the whole object) or leaves it (DELETED), in that Node's log.
   */
  hold(node: string, kind: ControlPlaneKind, key: string, holds: boolean): void {
    if (this.depth === 0) {
      this.batch(() => this.hold(node, kind, key, holds));
      return;
    }
    if (typeof node !== 'string' || node === '') throw new Error('hold: the Node name is empty');
    checkObject('hold', kind, key, undefined, undefined);
    const name = this.nameOf(kind, key);
    let view = this.views.get(node);
    const held = view?.objects[kind].get(name);
    if (!holds) {
      if (!held) return;
      held.cell.holders?.delete(view!);
      view!.objects[kind].delete(name);
      this.record(view!, { rv: ++this.rv, kind, name, type: 'DELETED', object: undefined });
      return;
    }
    const cell = this.cells[kind].get(name);
    if (!cell) throw new Error(`hold: ${kind} "${key}" is not shared (share it first)`);
    if (held?.cell === cell) return;
    if (!view) this.views.set(node, (view = this.newView()));
    const rv = ++this.rv;
    cell.holders.add(view);
    view.objects[kind].set(name, { cell, since: rv });
    this.record(view, { rv, kind, name, type: held ? 'MODIFIED' : 'ADDED', object: cell.object });
  }

  /** A change of one Node's view: its versions, its log (or its floor while the log is deferred), its watchers at the batch's end. */
  private record(view: NodeView, entry: LogEntry): void {
    view.last[entry.kind] = entry.rv;
    if (this.logging || view.watchers.size > 0) {
      view.log.append(entry);
      this.pendingViews.push(view);
      this.pendingEntries.push(entry);
    } else {
      // Not logged: a watch from before this change cannot resume (it lists again).
      view.log.floor[entry.kind] = entry.rv;
    }
  }

  private nameOf(kind: ControlPlaneKind, key: string): string {
    const names = this.names[kind];
    let name = names.get(key);
    if (name === undefined) {
      name = controlPlaneName(kind, key);
      if (names.size >= 1 << 16) names.clear();
      names.set(key, name);
    }
    return name;
  }

  /** Logs every change from now on (see ControlPlaneStoreOptions.deferLog). */
  startLog(): void {
    this.logging = true;
  }

  /**
   * Runs `fn` (its `set`, `share` and `hold` calls) as one batch: each event still gets its own
   * resourceVersion, but watchers hear of them once, at the end (even if `fn` throws: what it set
   * stays set).
   */
  batch<T>(fn: () => T): T {
    this.depth++;
    try {
      return fn();
    } finally {
      if (--this.depth === 0) this.flush();
    }
  }

  /**
   * `node`'s objects of `kind`, sorted by name, and the version they are current at. Each carries
   * the view's versions now: the other kinds' lists or watches must reach them too before an agent
   * enforces this list (a consistent cut of the whole view).
   */
  list(node: string, kind: ControlPlaneKind): ControlPlaneList {
    const view = this.views.get(node);
    const held = view?.objects[kind];
    const names = held ? [...held.keys()].sort() : [];
    const versions = viewVersionsText(view);
    return { resourceVersion: String(this.rv), items: names.map((n) => served(n, held!.get(n)!, versions)) };
  }

  /**
   * list(node, kind) as the JSON bytes of its items array, in pieces to write one after the other.
   * Each object's content is serialized once, kept as bytes and shared by every Node and every
   * list that serves it (only the metadata differs per Node): a group every Node needs is served
   * to thousands of agents after a controller restart, and written this way it is neither
   * serialized nor copied again for each of them.
   */
  listJson(node: string, kind: ControlPlaneKind): { resourceVersion: string; items: Buffer[]; bytes: number } {
    const view = this.views.get(node);
    const held = view?.objects[kind];
    const names = held ? [...held.keys()].sort() : [];
    const versions = viewVersionsText(view);
    const items: Buffer[] = [];
    let text = '[';
    for (const [i, n] of names.entries()) {
      const h = held!.get(n)!;
      const tail = bodyTail(h.cell.object);
      // The metadata first, then the shared rest of the object.
      text += `${i > 0 ? ',' : ''}{"metadata":${JSON.stringify(servedMetadata(n, h, versions))}`;
      if (tail.length > 1) {
        items.push(Buffer.from(`${text},`), tail);
        text = '';
      } else text += '}';
    }
    items.push(Buffer.from(`${text}]`));
    return { resourceVersion: String(this.rv), items, bytes: items.reduce((n, b) => n + b.length, 0) };
  }

  /** One object of `node`'s view by its wire name, or undefined. */
  get(node: string, kind: ControlPlaneKind, name: string): ControlPlaneObject | undefined {
    const view = this.views.get(node);
    const held = view?.objects[kind].get(name);
    return held && served(name, held, viewVersionsText(view));
  }

  /**
   * Per kind, the resourceVersion of the last change of `node`'s view (its view of that kind as of
   * now is complete at that version; "0" when it never changed): what a new Pod's realization
   * answer tells the agents to wait for.
   */
  lastChanges(node: string): Record<ControlPlaneKind, string> {
    return viewVersionStrings(this.views.get(node)?.last ?? NO_CHANGES);
  }

  /**
   * Watches `node`'s objects of `kind`: the events after `fromResourceVersion` (delivered before
   * this returns), then every change. An empty version or "0" starts with the current objects as
   * ADDED events. Throws GoneError when a log no longer reaches back to the version or the version
   * was never issued by this store (a future one, or one of a restarted controller's).
   * `onClose` hears when the store ends the watch (`forgetNode`, or `onEvent` threw: the error).
   *
   * Resumed shared events ask for the view's versions now rather than their batch's: the watch
   * delivers everything up to now before it returns, so the agent enforces the backlog as one change.
   */
  watch(
    node: string,
    kind: ControlPlaneKind,
    fromResourceVersion: string | undefined,
    onEvent: (e: ControlPlaneEvent) => void,
    onClose?: (err?: Error) => void,
  ): ControlPlaneWatch {
    if (!CONTROLPLANE_KINDS.includes(kind)) throw new Error(`watch: unknown kind "${kind}"`);
    const view = this.views.get(node);
    const initial = fromResourceVersion === undefined || fromResourceVersion === '' || fromResourceVersion === '0';
    let backlog: ControlPlaneEvent[];
    if (initial) {
      backlog = this.list(node, kind).items.map((object) => ({ type: 'ADDED', object }));
    } else {
      if (!/^[0-9]+$/.test(fromResourceVersion)) throw new Error(`resourceVersion "${fromResourceVersion}" is not a decimal integer`);
      const from = Number(fromResourceVersion);
      const floor = view ? Math.max(view.log.floor[kind], this.sharedLog.floor[kind]) : this.unknownFloor;
      if (from > this.rv) throw new GoneError(`resourceVersion ${from} is newer than this store's ${this.rv} (a restarted controller): list again`);
      if (from < floor) throw new GoneError(`too old resource version: ${from} (${floor})`);
      backlog = view ? this.backlog(view, kind, from) : [];
    }
    const v = view ?? this.newView();
    if (!view) this.views.set(node, v);
    const watcher: Watcher = { kind, view: v, lastRv: this.rv, onEvent, onClose, closed: false };
    v.watchers.add(watcher);
    this.watching[kind].add(watcher);
    for (const e of backlog) if (!this.deliver(watcher, e)) break;
    return { stop: () => this.close(watcher) };
  }

  /** The view's events of `kind` after `from`: its own log's and the shared log's for the objects it held then and holds still. */
  private backlog(view: NodeView, kind: ControlPlaneKind, from: number): ControlPlaneEvent[] {
    const own = view.log.after(kind, from);
    const held = view.objects[kind];
    const shared = this.sharedLog.after(kind, from).filter((e) => {
      const h = held.get(e.name);
      // Held since before the change and still: a Node that left since hears DELETED in its own
      // log, one that joined since got the whole object in an ADDED.
      return h !== undefined && h.cell === e.cell && h.since < e.rv;
    });
    const now = viewVersionsText(view);
    const out: ControlPlaneEvent[] = [];
    let i = 0;
    let j = 0;
    while (i < own.length || j < shared.length) {
      if (j >= shared.length || (i < own.length && own[i]!.rv < shared[j]!.rv)) out.push(toEvent(own[i++]!));
      else out.push(toEvent(shared[j++]!, now));
    }
    return out;
  }

  /** How many Nodes have a view (cheap: /status reads it at every request). */
  nodeCount(): number {
    return this.views.size;
  }

  /** Every Node with a view (or a watcher), for status. */
  nodes(): ControlPlaneNodeStatus[] {
    return [...this.views]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([name, v]) => ({
        name,
        objects: { NetworkPolicy: v.objects.NetworkPolicy.size, AppliedToGroup: v.objects.AppliedToGroup.size, AddressGroup: v.objects.AddressGroup.size },
        watchers: v.watchers.size,
        oldestResumable: String(Math.max(...Object.values(v.log.floor), ...Object.values(this.sharedLog.floor))),
      }));
  }

  /**
   * Forgets a deleted Node: its view, log and watchers (closed). Its log goes, so every Node
   * without a view must list again before resuming a watch (their floor rises to now).
   */
  forgetNode(node: string): void {
    const view = this.views.get(node);
    if (!view) return;
    this.views.delete(node);
    for (const kind of CONTROLPLANE_KINDS) for (const held of view.objects[kind].values()) held.cell.holders?.delete(view);
    this.unknownFloor = this.rv;
    for (const w of [...view.watchers]) this.close(w);
  }

  private newView(): NodeView {
    return {
      objects: { NetworkPolicy: new Map(), AppliedToGroup: new Map(), AddressGroup: new Map() },
      log: new BoundedLog(this.perNode, { NetworkPolicy: this.unknownFloor, AppliedToGroup: this.unknownFloor, AddressGroup: this.unknownFloor }),
      watchers: new Set(),
      last: { NetworkPolicy: 0, AppliedToGroup: 0, AddressGroup: 0 },
      stamped: 0,
      versions: undefined,
    };
  }

  /** The view's versions at the end of this batch (flush time: every change of the batch is in). */
  private stamp(view: NodeView, batch: number): ViewVersions {
    if (view.stamped !== batch || view.versions === undefined) {
      view.stamped = batch;
      view.versions = { ...view.last };
    }
    return view.versions;
  }

  private flush(): void {
    const views = this.pendingViews;
    const entries = this.pendingEntries;
    this.pendingViews = [];
    this.pendingEntries = [];
    // Every event of the batch asks for the view as the batch left it: one change reaches a Node on
    // up to three streams, and its agent enforces it only once it holds all of it.
    const batch = ++this.batches;
    for (let i = 0; i < views.length; i++) {
      const view = views[i];
      if (view) entries[i]!.viewVersions = this.stamp(view, batch);
    }
    // In version order: a watch's events must arrive in the order of their versions.
    for (let i = 0; i < views.length; i++) {
      const view = views[i];
      const entry = entries[i]!;
      if (view) {
        if (view.watchers.size === 0) continue;
        const event = toEvent(entry);
        for (const w of [...view.watchers]) if (w.kind === entry.kind && entry.rv > w.lastRv) this.deliver(w, event, entry.rv);
      } else this.deliverShared(entry, batch);
    }
  }

  /** A shared change to the watches of the Nodes that held its object before it and hold it still. */
  private deliverShared(entry: LogEntry, batch: number): void {
    const cell = entry.cell!;
    const watching = this.watching[entry.kind];
    const holds = (view: NodeView) => {
      const h = view.objects[entry.kind].get(entry.name);
      return h !== undefined && h.cell === cell && h.since < entry.rv;
    };
    const send = (view: NodeView, w: Watcher) => {
      if (w.kind === entry.kind && entry.rv > w.lastRv) this.deliver(w, toEvent(entry, versionsText(this.stamp(view, batch))), entry.rv);
    };
    if (cell.holders!.size <= watching.size) {
      for (const view of cell.holders!) if (view.watchers.size > 0 && holds(view)) for (const w of [...view.watchers]) send(view, w);
    } else {
      for (const w of [...watching]) if (holds(w.view)) send(w.view, w);
    }
  }

  /** Hands `e` to `w`; a watcher whose callback throws is closed with that error. */
  private deliver(w: Watcher, e: ControlPlaneEvent, rv?: number): boolean {
    if (w.closed) return false;
    if (rv !== undefined) w.lastRv = rv;
    try {
      w.onEvent(e);
      return true;
    } catch (err) {
      this.close(w, err instanceof Error ? err : new Error(String(err)));
      return false;
    }
  }

  private close(w: Watcher, err?: Error): void {
    if (w.closed) return;
    w.closed = true;
    w.view.watchers.delete(w);
    this.watching[w.kind].delete(w);
    w.onClose?.(err);
  }
}

/** A patch that changes members says the objects differ: comparing a large group member by member, on every change of it, would cost as much as the group. */
const changesMembers = (patch: ControlPlaneAddressGroupPatch | undefined) => patch !== undefined && (patch.upserted.length > 0 || patch.removed.length > 0);

function checkObject(op: string, kind: ControlPlaneKind, key: string, object: ControlPlaneObject | undefined, patch: ControlPlaneAddressGroupPatch | undefined): void {
  if (!CONTROLPLANE_KINDS.includes(kind)) throw new Error(`${op}: unknown kind "${kind}"`);
  if (object !== undefined && object.kind !== kind) throw new Error(`${op}: a ${object.kind} object given as ${kind} "${key}"`);
  if (patch !== undefined && (kind !== 'AddressGroup' || patch.kind !== 'AddressGroupPatch')) throw new Error(`${op}: a patch given for ${kind} "${key}"; only AddressGroups take AddressGroupPatch`);
}

/** VIEW_VERSIONS_ANNOTATION's text for a view as it is now (a Node without one: every kind at 0). */
function viewVersionsText(view: NodeView | undefined): string {
  return formatViewVersions(view?.last ?? NO_CHANGES);
}

const NO_CHANGES: Record<ControlPlaneKind, number> = { NetworkPolicy: 0, AppliedToGroup: 0, AddressGroup: 0 };

/** The metadata an object of a view is served with: its wire name, its version in that view, the view's versions. */
function servedMetadata(name: string, held: Held, viewVersions: string): ControlPlaneObject['metadata'] {
  return { ...held.cell.object.metadata, name, resourceVersion: String(heldRv(held)), annotations: { [VIEW_VERSIONS_ANNOTATION]: viewVersions } };
}

function served(name: string, held: Held, viewVersions: string): ControlPlaneObject {
  return { ...held.cell.object, metadata: servedMetadata(name, held, viewVersions) };
}

/**
 * An object's (or a patch's) JSON without its metadata and without its opening brace (`"kind":…}`;
 * `}` for an object with nothing else): what a list or a watch event writes after the metadata it
 * makes per Node. Cached by object, as bytes for lists and as text for events: objects are never
 * mutated (see the file comment).
 */
function bodyText(object: object): string {
  const { metadata: _own, ...rest } = object as { metadata?: unknown };
  return JSON.stringify(rest).slice(1);
}

const tails = new WeakMap<ControlPlaneObject, Buffer>();

function bodyTail(object: ControlPlaneObject): Buffer {
  let tail = tails.get(object);
  if (tail === undefined) tails.set(object, (tail = Buffer.from(bodyText(object))));
  return tail;
}

/** A log entry as an event: with its batch's view versions, or `versions` (a shared entry's, per Node). */
function toEvent(e: LogEntry, versions?: string): ControlPlaneEvent {
  const v = versions ?? (e.viewVersions && versionsText(e.viewVersions));
  // The store's metadata is the whole of it: the objects it is given carry only their name.
  const metadata: ControlPlaneObject['metadata'] = v !== undefined
    ? { name: e.name, resourceVersion: String(e.rv), annotations: { [VIEW_VERSIONS_ANNOTATION]: v } }
    : { name: e.name, resourceVersion: String(e.rv) };
  if (e.type === 'DELETED') return { type: 'DELETED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: e.kind, metadata } };
  const object = e.object!;
  const event = (object.kind === 'AddressGroupPatch'
    ? { type: 'MODIFIED', object: { ...object, metadata } }
    : { type: e.type, object: { ...object, metadata } }) as ControlPlaneEvent;
  eventBodies.set(event, object);
  return event;
}

const VERSIONS_KEY = JSON.stringify(VIEW_VERSIONS_ANNOTATION);

/** The object an event of the store was made from: its JSON is written once, whatever the watches it goes to. */
const eventBodies = new WeakMap<ControlPlaneEvent, object>();
const bodyTexts = new WeakMap<object, string>();

/**
 * An event's JSON text (a line of a watch). For the store's events, the object's content is
 * serialized once and shared by every watch it goes to (a group change every Node needs goes to
 * thousands): only the metadata, which carries each Node's view versions, is written per watch.
 */
export function eventJson(e: ControlPlaneEvent | { type: string; object: unknown }): string {
  const body = eventBodies.get(e as ControlPlaneEvent);
  if (body === undefined) return JSON.stringify(e);
  let tail = bodyTexts.get(body);
  if (tail === undefined) bodyTexts.set(body, (tail = bodyText(body)));
  // The metadata toEvent made: a name, a version and at most the view versions.
  const { name, resourceVersion, annotations } = (e as ControlPlaneEvent).object.metadata;
  const versions = annotations?.[VIEW_VERSIONS_ANNOTATION];
  const metadata = `{"name":${JSON.stringify(name)},"resourceVersion":${JSON.stringify(resourceVersion)}${versions === undefined ? '' : `,"annotations":{${VERSIONS_KEY}:${JSON.stringify(versions)}}`}}`;
  return `{"type":${JSON.stringify(e.type)},"object":{"metadata":${metadata}${tail.length > 1 ? `,${tail}` : '}'}}`;
}

/**
 * Equality of two values as JSON sees them (what canonical JSON texts would compare): key order
 * does not matter and properties holding undefined count as absent.
 */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  // An object that says how it is written as JSON (a member KeyedList: an array) compares as that.
  if (hasToJson(a) || hasToJson(b)) return jsonEqual(hasToJson(a) ? a.toJSON() : a, hasToJson(b) ? b.toJSON() : b);
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    if (a.length !== bb.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i] ?? null, bb[i] ?? null)) return false;
    return true;
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  let count = 0;
  for (const k in ao) {
    if (!Object.hasOwn(ao, k) || ao[k] === undefined) continue;
    count++;
    if (!Object.hasOwn(bo, k) || !jsonEqual(ao[k], bo[k])) return false;
  }
  for (const k in bo) if (Object.hasOwn(bo, k) && bo[k] !== undefined) count--;
  return count === 0;
}

function hasToJson(x: object): x is { toJSON(): unknown } {
  return typeof (x as { toJSON?: unknown }).toJSON === 'function';
}
