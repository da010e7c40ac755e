/**
 * The controller's served state: for every Node, the `controlplane.sluice.io` objects that Node
 * sees (its span), with one resourceVersion counter for the whole store and a bounded event log
 * per Node so an agent's watch resumes where it stopped. The computation (computation.ts) says
 * what each Node sees now with `set`; this store turns that into list results and watch events.
 *
 * Objects given to `set` are shared by every Node that sees them and are never copied or mutated:
 * a view holds references, and the name and resourceVersion are added to a shallow copy only when
 * an object is served.
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

/** An object of a Node's view and the version it last changed at. */
interface Held {
  object: ControlPlaneObject;
  rv: number;
}

interface LogEntry {
  rv: number;
  kind: ControlPlaneKind;
  name: string;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** The object (ADDED, MODIFIED), the patch (MODIFIED of an AddressGroupPatch), undefined (DELETED). */
  object: ControlPlaneObject | ControlPlaneAddressGroupPatch | undefined;
  /** The Node's view versions at the end of the batch that made it (VIEW_VERSIONS_ANNOTATION); set when the batch ends. */
  viewVersions?: ViewVersions;
}

/**
 * A view's versions per kind at the end of a batch. Its text is made when first served: most Nodes
 * of a change have no watch open at that moment, and formatting it for each of thousands of Nodes
 * at every change would cost more than the change.
 */
interface ViewVersions extends Record<ControlPlaneKind, number> {
  text?: string;
}

interface Watcher {
  kind: ControlPlaneKind;
  /** The last version delivered: a log entry is delivered once even if a batch flush also carries it. */
  lastRv: number;
  onEvent: (e: ControlPlaneEvent) => void;
  onClose: ((err?: Error) => void) | undefined;
  closed: boolean;
}

interface NodeView {
  objects: Record<ControlPlaneKind, Map<string, Held>>;
  /** The log from `head` on; entries before `head` are dropped and compacted away now and then. */
  log: LogEntry[];
  head: number;
  /**
   * Per kind, a watch from a version below this is Gone: events of that kind after it may have
   * been dropped. Per kind, so a burst of one kind does not expire the watches of the others.
   */
  floor: Record<ControlPlaneKind, number>;
  watchers: Set<Watcher>;
  /** Per kind, the version of the view's last change of that kind (0: none yet). */
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
  /** Floor of Nodes without a view: raised when a view is forgotten, since its log goes with it. */
  private unknownFloor: number;
  private depth = 0;
  private logging: boolean;
  /** This batch's logged entries and the view of each (two arrays: no pair per Node of a change). */
  private pendingViews: NodeView[] = [];
  private pendingEntries: LogEntry[] = [];
  private batches = 0;
  /** Equality results of this batch by (held, new) reference pair: one object is set on many Nodes. */
  private equalCache = new WeakMap<object, { other: object; equal: boolean }>();
  /** Wire names by kind and key: one change is set on many Nodes, each asking for the same name. */
  private readonly names: Record<ControlPlaneKind, Map<string, string>> = { NetworkPolicy: new Map(), AppliedToGroup: new Map(), AddressGroup: new Map() };

  constructor(opts: ControlPlaneStoreOptions = {}) {
    const n = opts.eventsPerNode ?? 1000;
    if (!Number.isInteger(n) || n < 1) throw new Error(`eventsPerNode ${n} is not a positive integer`);
    const initial = opts.initialResourceVersion ?? Date.now() * 1000;
    if (!Number.isSafeInteger(initial) || initial < 0) throw new Error(`initialResourceVersion ${initial} is not a non-negative safe integer`);
    this.perNode = n;
    this.logging = !opts.deferLog;
    this.rv = initial;
    this.unknownFloor = initial;
  }

  /** The current resourceVersion: every change up to it has been delivered to the watchers. */
  resourceVersion(): string {
    return String(this.rv);
  }

  /**
   * What `node` now sees of `kind`/`key` (undefined: nothing). `key` is a NetworkPolicy's source
   * key or a group's id. An AddressGroup change may come with its `patch` (what the MODIFIED event
   * carries instead of the whole group); objects equal to what the Node holds make no event.
   */
  set(node: string, kind: ControlPlaneKind, key: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void {
    // Outside a batch, as a batch of its own (inside one, no closure per Node of a change).
    if (this.depth === 0) {
      this.batch(() => this.set(node, kind, key, object, patch));
      return;
    }
    if (typeof node !== 'string' || node === '') throw new Error('set: the Node name is empty');
    if (!CONTROLPLANE_KINDS.includes(kind)) throw new Error(`set: unknown kind "${kind}"`);
    if (object !== undefined && object.kind !== kind) throw new Error(`set: a ${object.kind} object given as ${kind} "${key}"`);
    if (patch !== undefined && (kind !== 'AddressGroup' || patch.kind !== 'AddressGroupPatch')) throw new Error(`set: a patch given for ${kind} "${key}"; only AddressGroups take AddressGroupPatch`);
    const name = this.nameOf(kind, key);
    let view = this.views.get(node);
    const held = view?.objects[kind].get(name);
    if (!held && object === undefined) return;
    // A patch that changes members says the objects differ: comparing a large group member by
    // member, on every change of it, would cost as much as the group.
    const patched = patch !== undefined && (patch.upserted.length > 0 || patch.removed.length > 0);
    if (held && object !== undefined && !patched && this.equal(held.object, object)) return;
    if (!view) this.views.set(node, (view = this.newView()));
    const rv = ++this.rv;
    let entry: LogEntry;
    if (object === undefined) {
      view.objects[kind].delete(name);
      entry = { rv, kind, name, type: 'DELETED', object: undefined };
    } else {
      view.objects[kind].set(name, { object, rv });
      entry = held ? { rv, kind, name, type: 'MODIFIED', object: patch ?? object } : { rv, kind, name, type: 'ADDED', object };
    }
    view.last[kind] = rv;
    if (this.logging || view.watchers.size > 0) {
      this.append(view, entry);
      this.pendingViews.push(view);
      this.pendingEntries.push(entry);
    } else {
      // Not logged: a watch from before this change cannot resume (it lists again).
      view.floor[kind] = rv;
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
   * Runs `fn` (its `set` calls) as one batch: each event still gets its own resourceVersion, but
   * watchers hear of them once, at the end (even if `fn` throws: what it set stays set).
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
      const tail = bodyTail(h.object);
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
    const last = this.views.get(node)?.last;
    return { NetworkPolicy: String(last?.NetworkPolicy ?? 0), AppliedToGroup: String(last?.AppliedToGroup ?? 0), AddressGroup: String(last?.AddressGroup ?? 0) };
  }

  /**
   * Watches `node`'s objects of `kind`: the events after `fromResourceVersion` (delivered before
   * this returns), then every change. An empty version or "0" starts with the current objects as
   * ADDED events. Throws GoneError when the Node's log no longer reaches back to the version or the
   * version was never issued by this store (a future one, or one of a restarted controller's).
   * `onClose` hears when the store ends the watch (`forgetNode`, or `onEvent` threw: the error).
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
    const watcher: Watcher = { kind, lastRv: this.rv, onEvent, onClose, closed: false };
    const initial = fromResourceVersion === undefined || fromResourceVersion === '' || fromResourceVersion === '0';
    let backlog: ControlPlaneEvent[];
    if (initial) {
      backlog = this.list(node, kind).items.map((object) => ({ type: 'ADDED', object }));
    } else {
      if (!/^[0-9]+$/.test(fromResourceVersion)) throw new Error(`resourceVersion "${fromResourceVersion}" is not a decimal integer`);
      const from = Number(fromResourceVersion);
      const floor = view ? view.floor[kind] : this.unknownFloor;
      if (from > this.rv) throw new GoneError(`resourceVersion ${from} is newer than this store's ${this.rv} (a restarted controller): list again`);
      if (from < floor) throw new GoneError(`too old resource version: ${from} (${floor})`);
      backlog = [];
      if (view) {
        for (let i = firstAfter(view, from); i < view.log.length; i++) {
          const e = view.log[i]!;
          if (e.kind === kind) backlog.push(toEvent(e));
        }
      }
    }
    const v = view ?? this.newView();
    if (!view) this.views.set(node, v);
    v.watchers.add(watcher);
    for (const e of backlog) if (!this.deliver(v, watcher, e)) break;
    return { stop: () => this.close(v, watcher) };
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
        oldestResumable: String(Math.max(...Object.values(v.floor))),
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
    this.unknownFloor = this.rv;
    for (const w of [...view.watchers]) this.close(view, w);
  }

  private newView(): NodeView {
    return {
      objects: { NetworkPolicy: new Map(), AppliedToGroup: new Map(), AddressGroup: new Map() },
      log: [],
      head: 0,
      floor: { NetworkPolicy: this.unknownFloor, AppliedToGroup: this.unknownFloor, AddressGroup: this.unknownFloor },
      watchers: new Set(),
      last: { NetworkPolicy: 0, AppliedToGroup: 0, AddressGroup: 0 },
      stamped: 0,
      versions: undefined,
    };
  }

  private append(view: NodeView, entry: LogEntry): void {
    view.log.push(entry);
    if (view.log.length - view.head > this.perNode) {
      const dropped = view.log[view.head]!;
      view.floor[dropped.kind] = dropped.rv;
      view.log[view.head++] = undefined as unknown as LogEntry;
      // Compact once the dropped prefix is as long as the kept log: amortized O(1) per event.
      if (view.head >= this.perNode) {
        view.log = view.log.slice(view.head);
        view.head = 0;
      }
    }
  }

  private flush(): void {
    const views = this.pendingViews;
    const entries = this.pendingEntries;
    this.pendingViews = [];
    this.pendingEntries = [];
    this.equalCache = new WeakMap();
    // Every event of the batch asks for the view as the batch left it: one change reaches a Node on
    // up to three streams, and its agent enforces it only once it holds all of it.
    const batch = ++this.batches;
    for (let i = 0; i < views.length; i++) {
      const view = views[i]!;
      if (view.stamped !== batch || view.versions === undefined) {
        view.stamped = batch;
        view.versions = { ...view.last };
      }
      entries[i]!.viewVersions = view.versions;
    }
    for (let i = 0; i < views.length; i++) {
      const view = views[i]!;
      if (view.watchers.size === 0) continue;
      const entry = entries[i]!;
      const event = toEvent(entry);
      for (const w of [...view.watchers]) if (w.kind === entry.kind && entry.rv > w.lastRv) this.deliver(view, w, event, entry.rv);
    }
  }

  /** Hands `e` to `w`; a watcher whose callback throws is closed with that error. */
  private deliver(view: NodeView, w: Watcher, e: ControlPlaneEvent, rv?: number): boolean {
    if (w.closed) return false;
    if (rv !== undefined) w.lastRv = rv;
    try {
      w.onEvent(e);
      return true;
    } catch (err) {
      this.close(view, w, err instanceof Error ? err : new Error(String(err)));
      return false;
    }
  }

  private close(view: NodeView, w: Watcher, err?: Error): void {
    if (w.closed) return;
    w.closed = true;
    view.watchers.delete(w);
    w.onClose?.(err);
  }

  private equal(a: ControlPlaneObject, b: ControlPlaneObject): boolean {
    if (a === b) return true;
    const cached = this.depth > 0 ? this.equalCache.get(a) : undefined;
    if (cached?.other === b) return cached.equal;
    const equal = jsonEqual(a, b);
    if (this.depth > 0) this.equalCache.set(a, { other: b, equal });
    return equal;
  }
}

/** The index of the first log entry after version `from` (binary search: versions increase). */
function firstAfter(view: NodeView, from: number): number {
  let lo = view.head;
  let hi = view.log.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (view.log[mid]!.rv <= from) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** VIEW_VERSIONS_ANNOTATION's text for a view as it is now (a Node without one: every kind at 0). */
function viewVersionsText(view: NodeView | undefined): string {
  return formatViewVersions(view?.last ?? NO_CHANGES);
}

const NO_CHANGES: Record<ControlPlaneKind, number> = { NetworkPolicy: 0, AppliedToGroup: 0, AddressGroup: 0 };

/** The metadata an object of a view is served with: its wire name, its version in that view, the view's versions. */
function servedMetadata(name: string, held: Held, viewVersions: string): ControlPlaneObject['metadata'] {
  return { ...held.object.metadata, name, resourceVersion: String(held.rv), annotations: { [VIEW_VERSIONS_ANNOTATION]: viewVersions } };
}

function served(name: string, held: Held, viewVersions: string): ControlPlaneObject {
  return { ...held.object, metadata: servedMetadata(name, held, viewVersions) };
}

/**
 * An object's JSON without its metadata and without its opening brace (`"kind":…}`; `}` for an
 * object with nothing else), as bytes, by object: objects are never mutated (see the file comment).
 */
const tails = new WeakMap<ControlPlaneObject, Buffer>();

function bodyTail(object: ControlPlaneObject): Buffer {
  let tail = tails.get(object);
  if (tail === undefined) {
    const { metadata: _own, ...rest } = object;
    tail = Buffer.from(JSON.stringify(rest).slice(1));
    tails.set(object, tail);
  }
  return tail;
}

function toEvent(e: LogEntry): ControlPlaneEvent {
  const v = e.viewVersions;
  const metadata = { name: e.name, resourceVersion: String(e.rv), ...(v ? { annotations: { [VIEW_VERSIONS_ANNOTATION]: (v.text ??= formatViewVersions(v)) } } : {}) };
  if (e.type === 'DELETED') return { type: 'DELETED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: e.kind, metadata } };
  const object = e.object!;
  if (object.kind === 'AddressGroupPatch') return { type: 'MODIFIED', object: { ...object, metadata: { ...object.metadata, ...metadata } } };
  return { type: e.type, object: { ...object, metadata: { ...object.metadata, ...metadata } } };
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
