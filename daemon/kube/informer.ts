/**
 * A list-then-watch cache of one resource, as client-go's reflector keeps one: list (remember the
 * list's resourceVersion), then watch from it; every event updates the cache and is reported as
 * add / update / delete. A watch the server ends (its timeout) is resumed from the last
 * resourceVersion seen (bookmarks included); 410 Gone (that version is compacted away) relists, and
 * the relist reports as deleted what the cache held and the new list lacks. Any other failure (the
 * list failing, a refused or cut watch) stops the informer and is reported as 'error': the owner
 * decides when to start() it again, which resumes where it stopped.
 */
import type { KubeAccess, WatchStream } from './access.js';

export interface ListedObject {
  metadata?: { name?: string | undefined; namespace?: string | undefined; resourceVersion?: string | undefined };
}

type Handler<T> = (obj: T) => void;

export interface InformerOptions<T> {
  /** Collection path, e.g. /api/v1/pods. */
  path: string;
  /** The list (the owner adapts it: plain objects, 404 of a CRD not installed). */
  list: () => Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>;
  /** Seconds a watch may stay open before the server ends it (client-go picks 5–10 min). */
  watchTimeoutSeconds?: () => number;
  /**
   * Applied to every listed and watched object before it is cached and reported (client-go's
   * SetTransform): the owner keeps only what it reads. Returns the object to keep (may be new).
   */
  transform?: (obj: T) => T;
}

const key = (o: ListedObject): [string, string] => [o.metadata?.namespace ?? '', o.metadata?.name ?? ''];

export class Informer<T extends ListedObject> {
  private objects = new Map<string, Map<string, T>>();
  private resourceVersion = '';
  private stream?: WatchStream | undefined;
  private stopped = true;
  /** Bumped by stop()/start(): callbacks of an older run are ignored. */
  private generation = 0;
  private readonly handlers = { add: [] as Handler<T>[], update: [] as Handler<T>[], delete: [] as Handler<T>[], error: [] as Handler<unknown>[] };

  constructor(
    private readonly access: Pick<KubeAccess, 'watch'>,
    private readonly opts: InformerOptions<T>,
  ) {}

  on(event: 'add' | 'update' | 'delete', fn: Handler<T>): void;
  on(event: 'error', fn: Handler<unknown>): void;
  on(event: 'add' | 'update' | 'delete' | 'error', fn: Handler<never>): void {
    (this.handlers[event] as Handler<never>[]).push(fn);
  }

  /** Lists (unless a resourceVersion to resume from is known) and starts watching. */
  async start(): Promise<void> {
    this.stopped = false;
    const gen = ++this.generation;
    this.stream?.close();
    this.stream = undefined;
    await this.run(gen);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.generation++;
    this.stream?.close();
    this.stream = undefined;
  }

  /**
   * The resourceVersion of the last list, event or bookmark: every change of this resource up to it
   * has been reported (handlers run before it advances). "" before the first list.
   */
  get resourceVersionSeen(): string {
    return this.resourceVersion;
  }

  get(name: string, namespace?: string): T | undefined {
    return this.objects.get(namespace ?? '')?.get(name);
  }

  list(): T[] {
    const out: T[] = [];
    for (const byName of this.objects.values()) out.push(...byName.values());
    return out;
  }

  private async run(gen: number): Promise<void> {
    if (!this.resourceVersion) {
      let listed: Awaited<ReturnType<InformerOptions<T>['list']>>;
      try {
        listed = await this.opts.list();
      } catch (err) {
        if (gen === this.generation) this.fail(err);
        return;
      }
      if (gen !== this.generation) return;
      const transform = this.opts.transform;
      this.replace(transform ? listed.items.map(transform) : listed.items);
      this.resourceVersion = listed.metadata?.resourceVersion ?? '';
    }
    this.watchFrom(gen);
  }

  private watchFrom(gen: number): void {
    const params = new URLSearchParams({ allowWatchBookmarks: 'true', resourceVersion: this.resourceVersion });
    const timeout = this.opts.watchTimeoutSeconds?.() ?? 300 + Math.floor(Math.random() * 300);
    params.set('timeoutSeconds', String(timeout));
    let gone = false;
    this.stream = this.access.watch(
      `${this.opts.path}?${params}`,
      (ev) => {
        if (gen !== this.generation) return;
        const obj = ev.object as T & { code?: number };
        const kept = (o: T): T => (this.opts.transform ? this.opts.transform(o) : o);
        switch (ev.type) {
          case 'ADDED':
          case 'MODIFIED':
            this.put(kept(obj));
            break;
          case 'DELETED':
            this.remove(kept(obj));
            break;
          case 'BOOKMARK':
            break;
          case 'ERROR':
            // 410 Gone: the version we resume from is compacted; relist when the stream ends.
            if (obj.code === 410) gone = true;
            return;
          default:
            return;
        }
        this.resourceVersion = obj.metadata?.resourceVersion ?? this.resourceVersion;
      },
      (err) => {
        if (gen !== this.generation || this.stopped) return;
        this.stream = undefined;
        const status = (err as { statusCode?: number } | undefined)?.statusCode;
        if (gone || status === 410) this.resourceVersion = '';
        else if (err) return this.fail(err);
        void this.run(gen);
      },
    );
  }

  /** A relist: what the cache holds and the list lacks is deleted; the rest is added or updated. */
  private replace(items: T[]): void {
    const fresh = new Map<string, Map<string, T>>();
    for (const o of items) {
      const [ns, name] = key(o);
      let byName = fresh.get(ns);
      if (!byName) fresh.set(ns, (byName = new Map()));
      byName.set(name, o);
    }
    for (const [ns, byName] of this.objects) {
      for (const [name, old] of byName) {
        if (!fresh.get(ns)?.has(name)) {
          byName.delete(name);
          this.emit('delete', old);
        }
      }
      if (byName.size === 0) this.objects.delete(ns);
    }
    for (const o of items) this.put(o);
  }

  private put(o: T): void {
    const [ns, name] = key(o);
    let byName = this.objects.get(ns);
    if (!byName) this.objects.set(ns, (byName = new Map()));
    const had = byName.has(name);
    byName.set(name, o);
    this.emit(had ? 'update' : 'add', o);
  }

  private remove(o: T): void {
    const [ns, name] = key(o);
    const byName = this.objects.get(ns);
    const old = byName?.get(name);
    byName?.delete(name);
    if (byName && byName.size === 0) this.objects.delete(ns);
    this.emit('delete', old ?? o);
  }

  private emit(event: 'add' | 'update' | 'delete', o: T): void {
    for (const fn of this.handlers[event]) fn(o);
  }

  private fail(err: unknown): void {
    this.stopped = true;
    for (const fn of this.handlers.error) fn(err);
  }
}
