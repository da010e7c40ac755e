// Versioned object storage: one global resourceVersion over every resource (like etcd's revision),
// a bounded history of change events for resuming watches, live subscribers, and an optional
// JSON file that survives restarts. It knows nothing about HTTP or Kubernetes kinds.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';

export interface ObjectMeta {
  name?: string | undefined;
  generateName?: string | undefined;
  namespace?: string | undefined;
  uid?: string | undefined;
  resourceVersion?: string | undefined;
  generation?: number | undefined;
  creationTimestamp?: string | undefined;
  deletionTimestamp?: string | undefined;
  labels?: Record<string, string> | undefined;
  annotations?: Record<string, string> | undefined;
  [k: string]: unknown;
}

export interface KObject {
  apiVersion?: string | undefined;
  kind?: string | undefined;
  metadata: ObjectMeta;
  [k: string]: unknown;
}

export type ChangeType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface ChangeEvent {
  type: ChangeType;
  rv: number;
  /** storage key of the resource: "<group>/<plural>", core group empty ("/pods"). */
  resource: string;
  /** the object after the change (for DELETED: its last state, carrying the deletion's RV). */
  object: KObject;
  /** the object before the change (MODIFIED and DELETED). */
  previous?: KObject | undefined;
}

interface DataFile {
  resourceVersion: number;
  resources: Record<string, KObject[]>;
}

const flushDelayMs = 20;

export function objectKey(meta: ObjectMeta): string {
  return meta.namespace ? `${meta.namespace}/${meta.name}` : `${meta.name}`;
}

export class ObjectStore {
  private rv = 0;
  /** Events with rv > floor are all in history; a watch from an RV below floor cannot resume. */
  private floor = 0;
  private history: ChangeEvent[] = [];
  private readonly tables = new Map<string, Map<string, KObject>>();
  private readonly subscribers = new Set<(e: ChangeEvent) => void>();
  private flushScheduled = false;
  private closed = false;

  /**
   * `dataFile` is loaded when it exists and rewritten after changes; `seedFile` (same format) is
   * only read, when there is no data file to load: a large cluster loaded at once (bench/scale)
   * instead of object by object.
   */
  constructor(private readonly historyLimit: number, private readonly dataFile?: string, seedFile?: string) {
    if (!Number.isInteger(historyLimit) || historyLimit < 1) throw new Error(`historyLimit must be a positive integer, got ${historyLimit}`);
    if (dataFile && existsSync(dataFile)) this.load(dataFile);
    else if (seedFile) this.load(seedFile);
    if (dataFile) {
      // Fail at start, with the path named, rather than on the first write.
      try {
        this.flush();
      } catch (e) {
        throw new Error(`cannot write API server data file ${dataFile}: ${(e as Error).message}`);
      }
    }
  }

  private load(file: string): void {
    let data: DataFile;
    try {
      data = JSON.parse(readFileSync(file, 'utf8')) as DataFile;
    } catch (e) {
      throw new Error(`API server data file ${file} is not valid JSON: ${(e as Error).message}`);
    }
    if (!Number.isInteger(data.resourceVersion) || typeof data.resources !== 'object' || data.resources === null) {
      throw new Error(`API server data file ${file} lacks "resourceVersion" (integer) and "resources" (object)`);
    }
    this.rv = data.resourceVersion;
    // History is not persisted: after a restart only watches from the current RV can resume (others get 410).
    this.floor = this.rv;
    for (const [resource, items] of Object.entries(data.resources)) {
      const table = this.table(resource);
      for (const obj of items) table.set(objectKey(obj.metadata), obj);
    }
  }

  get resourceVersion(): number {
    return this.rv;
  }

  private table(resource: string): Map<string, KObject> {
    let t = this.tables.get(resource);
    if (!t) {
      t = new Map();
      this.tables.set(resource, t);
    }
    return t;
  }

  get(resource: string, key: string): KObject | undefined {
    const obj = this.tables.get(resource)?.get(key);
    return obj && structuredClone(obj);
  }

  /**
   * Copies of the resource's objects, only those `keep` accepts when it is given. `keep` reads the
   * stored objects and must not change them: filtering before copying is what lets a Node's agent
   * or kubelet list its own Pods (a fieldSelector) without the server copying every Pod of the
   * cluster first (~1 s and as much again in garbage collection at 150 000 Pods, during which the
   * server answered nothing else).
   */
  list(resource: string, keep?: (obj: KObject) => boolean): KObject[] {
    const out: KObject[] = [];
    for (const o of this.tables.get(resource)?.values() ?? []) if (!keep || keep(o)) out.push(structuredClone(o));
    return out;
  }

  resources(): string[] {
    return [...this.tables.keys()];
  }

  /** Stores obj (create or replace) under the next resourceVersion and returns the stored copy. */
  write(resource: string, obj: KObject): KObject {
    const stored = structuredClone(obj);
    stored.metadata.resourceVersion = String(++this.rv);
    const table = this.table(resource);
    const key = objectKey(stored.metadata);
    const previous = table.get(key);
    table.set(key, stored);
    this.emit({ type: previous ? 'MODIFIED' : 'ADDED', rv: this.rv, resource, object: stored, previous });
    return structuredClone(stored);
  }

  /** Removes an object; the returned last state carries the deletion's resourceVersion. */
  remove(resource: string, key: string): KObject | undefined {
    const table = this.tables.get(resource);
    const previous = table?.get(key);
    if (!table || !previous) return undefined;
    table.delete(key);
    const last = structuredClone(previous);
    last.metadata.resourceVersion = String(++this.rv);
    this.emit({ type: 'DELETED', rv: this.rv, resource, object: last, previous });
    return structuredClone(last);
  }

  private emit(event: ChangeEvent): void {
    this.history.push(event);
    if (this.history.length > this.historyLimit) {
      const dropped = this.history.splice(0, this.history.length - this.historyLimit);
      this.floor = dropped[dropped.length - 1]!.rv;
    }
    this.scheduleFlush();
    for (const s of [...this.subscribers]) s(event);
  }

  /** Every event after rv, or 'expired' when some of them are no longer kept. */
  eventsSince(rv: number): ChangeEvent[] | 'expired' {
    if (rv < this.floor) return 'expired';
    return this.history.filter((e) => e.rv > rv);
  }

  /** The oldest resourceVersion a watch can still resume from. */
  get oldestResumable(): number {
    return this.floor;
  }

  subscribe(fn: (e: ChangeEvent) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  /** Forgets all history: every watch from an RV before now gets 410 Gone. */
  /**
   * Forgets the watch history: a watch from before the current resourceVersion gets 410 Gone. With
   * `includingPresent`, a watch from the current one too (the fault the lab injects: every informer
   * relists, even one a bookmark brought up to date).
   */
  compact(includingPresent = false): void {
    this.history = [];
    this.floor = includingPresent ? this.rv + 1 : this.rv;
  }

  private scheduleFlush(): void {
    if (!this.dataFile || this.flushScheduled || this.closed) return;
    this.flushScheduled = true;
    // A short delay batches bursts of writes into one file write.
    setTimeout(() => {
      try {
        this.flush();
      } catch (e) {
        // Keep serving; the next change retries the write.
        process.stderr.write(`${JSON.stringify({ level: 'error', msg: 'API server data file not written', file: this.dataFile, error: (e as Error).message })}\n`);
      }
    }, flushDelayMs);
  }

  /** Final flush; later changes are no longer persisted. */
  close(): void {
    this.flush();
    this.closed = true;
  }

  /** Writes the data file now (atomically: temp file + rename). */
  flush(): void {
    this.flushScheduled = false;
    if (!this.dataFile || this.closed) return;
    const data: DataFile = { resourceVersion: this.rv, resources: {} };
    for (const [resource, table] of this.tables) data.resources[resource] = [...table.values()];
    const tmp = `${this.dataFile}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify(data));
    renameSync(tmp, this.dataFile);
  }
}
