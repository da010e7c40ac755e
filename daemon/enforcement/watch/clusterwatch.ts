/**
 * Informers (daemon/kube) for every resource the policy engine needs, reporting each
 * add/update/delete as an upsert or remove of a plain object with apiVersion and kind set.
 *
 * An informer resumes by itself only after 410 Gone or a clean end of its watch; every other
 * failure (socket reset, HTTP 5xx, API server restart) stops it, so the 'error' handler restarts
 * it (resuming at the last resourceVersion; a 410 then relists, and objects missing from the new
 * list are reported deleted). Objects are cached and reported trimmed to what the agent reads
 * (trim.ts). A resource answered by 404 (CRD not installed) is retried until it
 * appears and counts as synced-and-empty meanwhile. Nothing is ever flushed here: until
 * a relist completes, consumers keep the last state they were told.
 */
import { KubeAccess } from '../../kube/access.js';
import { Informer } from '../../kube/informer.js';
import type { KubeObject } from '../../policy/types.js';
import { isNotFound, WATCHED_RESOURCES, type WatchedResource } from './resources.js';
import { trimObject } from './trim.js';

export type WatchEvent = { type: 'upsert'; object: KubeObject } | { type: 'remove'; object: KubeObject };

export interface WatchLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export interface ClusterWatchOptions {
  kubeconfig?: string;
  /** The API connection to use instead of one loaded from `kubeconfig` (offline benches). */
  access?: Pick<KubeAccess, 'getJson' | 'watch'>;
  /** Called for every object event, in the order the informers report them. */
  onEvent: (ev: WatchEvent) => void;
  log: WatchLog;
  resources?: readonly WatchedResource[];
  /** Restart delay after an informer stopped on an error (doubles up to maxRetryMs). */
  retryMs?: number;
  maxRetryMs?: number;
}

type ListObject = { items: unknown[]; metadata?: { resourceVersion?: string } };

function makeLister(access: Pick<KubeAccess, 'getJson'>, r: WatchedResource): () => Promise<ListObject> {
  return async () => {
    const l = (await access.getJson(r.path)) as ListObject;
    if (!l || !Array.isArray(l.items)) throw new Error(`GET ${r.path}: not a list`);
    return l;
  };
}

/** A list item with apiVersion and kind (list items carry neither). */
function plain(item: unknown, r: WatchedResource): KubeObject {
  const o = item as KubeObject;
  o.apiVersion = r.apiVersion;
  o.kind = r.kind;
  return o;
}

interface InformerState {
  resource: WatchedResource;
  informer: Informer<KubeObject>;
  synced: boolean;
  absent: boolean;
  failures: number;
  /** Lists after the first (watch lost, 410) and restarts after an error, for metrics. */
  relists: number;
  restarts: number;
  timer?: NodeJS.Timeout | undefined;
  lastError?: string;
}

export class ClusterWatch {
  private readonly states: InformerState[] = [];
  private stopped = false;
  private syncWaiters: (() => void)[] = [];
  /** Waiters for one resource's first list, by its path. */
  private resourceWaiters = new Map<string, (() => void)[]>();
  /** Date.now() when the informers were started, and when every resource had been listed once. */
  readonly startedAt = Date.now();
  syncedAt?: number;
  /** Relists done after the first (watch loss, 410): for status and tests. */
  relists = 0;
  /** The API connection (for direct reads). */
  access?: KubeAccess;

  private constructor(private readonly opts: ClusterWatchOptions) {}

  static async start(opts: ClusterWatchOptions): Promise<ClusterWatch> {
    const w = new ClusterWatch(opts);
    await w.startAll();
    return w;
  }

  private async startAll(): Promise<void> {
    const access = this.opts.access ?? KubeAccess.load(this.opts.kubeconfig);
    if (access instanceof KubeAccess) this.access = access;
    for (const r of this.opts.resources ?? WATCHED_RESOURCES) {
      const list = makeLister(access, r);
      let state!: InformerState;
      const listFn = async (): Promise<{ items: KubeObject[]; metadata?: { resourceVersion?: string } }> => {
        let l: ListObject;
        try {
          l = await list();
        } catch (err) {
          if (r.optional && isNotFound(err)) {
            if (!state.absent) this.opts.log.info({ resource: r.path }, 'watch: resource not served (CRD not installed); retrying until it appears');
            state.absent = true;
            this.markSynced(state);
          }
          throw err;
        }
        if (state.absent) this.opts.log.info({ resource: r.path }, 'watch: resource appeared');
        state.absent = false;
        if (state.synced) {
          this.relists++;
          state.relists++;
        }
        // The informer fills its cache and reports add/update/delete right after this returns.
        setImmediate(() => this.markSynced(state));
        return { ...(l.metadata ? { metadata: l.metadata } : {}), items: l.items as KubeObject[] };
      };
      // Every listed and watched object is stamped with the resource's apiVersion and kind (list
      // items carry neither; a CRD may be served at several versions), then trimmed to the fields
      // the agent reads (trim.ts): one small copy of each object.
      const informer = new Informer<KubeObject>(access, { path: r.path, list: listFn, transform: (o) => trimObject(plain(o, r)) });
      state = { resource: r, informer, synced: false, absent: false, failures: 0, relists: 0, restarts: 0 };
      const emit = (type: WatchEvent['type']) => (obj: KubeObject) => {
        if (this.stopped) return;
        state.failures = 0;
        this.opts.onEvent({ type, object: obj });
      };
      informer.on('add', emit('upsert'));
      informer.on('update', emit('upsert'));
      informer.on('delete', emit('remove'));
      informer.on('error', (err) => this.restartLater(state, err));
      this.states.push(state);
      informer.start().catch((err) => this.restartLater(state, err));
    }
  }

  private restartLater(state: InformerState, err: unknown): void {
    if (this.stopped || state.timer) return;
    const msg = (err as Error)?.message ?? String(err);
    state.failures++;
    const base = this.opts.retryMs ?? 500;
    const delay = Math.min(base * 2 ** Math.min(state.failures - 1, 6), this.opts.maxRetryMs ?? 5000);
    if (!(state.absent && isNotFound(err))) {
      if (msg !== state.lastError || state.failures === 1) this.opts.log.warn({ resource: state.resource.path, err: msg, retryMs: delay }, 'watch: informer stopped; restarting');
    }
    state.lastError = msg;
    state.restarts++;
    state.timer = setTimeout(() => {
      state.timer = undefined;
      if (this.stopped) return;
      state.informer.start().catch((e) => this.restartLater(state, e));
    }, delay);
  }

  private markSynced(state: InformerState): void {
    if (state.synced) return;
    state.synced = true;
    for (const w of this.resourceWaiters.get(state.resource.path) ?? []) w();
    this.resourceWaiters.delete(state.resource.path);
    if (!this.isSynced()) return;
    this.syncedAt ??= Date.now();
    for (const w of this.syncWaiters.splice(0)) w();
  }

  /** Every resource listed once (or answered 404 for an optional one). */
  isSynced(): boolean {
    return this.states.length > 0 && this.states.every((s) => s.synced);
  }

  /**
   * Resolves once `resource` has been listed (or answered 404): whether the cluster serves it.
   * Rejects for a resource this watch does not follow.
   */
  waitListed(resource: WatchedResource): Promise<{ served: boolean }> {
    const state = this.states.find((s) => s.resource.path === resource.path);
    if (!state) return Promise.reject(new Error(`${resource.path} is not watched`));
    const answer = () => ({ served: !state.absent });
    if (state.synced) return Promise.resolve(answer());
    return new Promise((resolve) => {
      const list = this.resourceWaiters.get(resource.path) ?? [];
      list.push(() => resolve(answer()));
      this.resourceWaiters.set(resource.path, list);
    });
  }

  /** Resolves when every resource has been listed once. */
  waitSynced(): Promise<void> {
    if (this.isSynced()) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /**
   * The API resourceVersion up to which every watched resource has reported its changes: the
   * lowest of the informers' (resources not served are left out). Undefined until every resource
   * is listed, or when a version is not a number (the lab's and etcd's are).
   */
  deliveredResourceVersion(): bigint | undefined {
    if (!this.isSynced()) return undefined;
    let min: bigint | undefined;
    for (const s of this.states) {
      if (s.absent) continue;
      const rv = s.informer.resourceVersionSeen;
      if (!/^\d+$/.test(rv)) return undefined;
      const v = BigInt(rv);
      if (min === undefined || v < min) min = v;
    }
    return min;
  }

  /** Resources not listed yet, with their last error (for start-up logs). */
  pending(): { resource: string; error?: string }[] {
    return this.states.filter((s) => !s.synced).map((s) => ({ resource: s.resource.path, ...(s.lastError ? { error: s.lastError } : {}) }));
  }

  status(): { resource: string; synced: boolean; absent: boolean; objects: number; relists: number; restarts: number }[] {
    return this.states.map((s) => ({ resource: s.resource.path, synced: s.synced, absent: s.absent, objects: s.informer.list().length, relists: s.relists, restarts: s.restarts }));
  }

  /** The cached object, if the informer has it. */
  get(apiVersion: string, kind: string, name: string, namespace?: string): KubeObject | undefined {
    const s = this.states.find((x) => x.resource.apiVersion === apiVersion && x.resource.kind === kind);
    return s?.informer.get(name, namespace);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const s of this.states) clearTimeout(s.timer);
    await Promise.all(this.states.map((s) => s.informer.stop().catch(() => undefined)));
  }
}
