/**
 * The last valid versions of policy objects that are invalid now (PolicyEngine.keptVersions),
 * kept across a restart. The engine keeps a valid object's rules in force when an update makes it
 * invalid; after a restart the list holds only the invalid version, which alone yields nothing.
 * So the kept versions are written to the state directory whenever they change, and at start-up
 * each one is fed just before the live object of the same uid (a recreated object is another
 * object and gets nothing from its predecessor).
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { Logger } from 'pino';
import type { KubeObject } from '../policy/types.js';

const keyOf = (o: KubeObject) => `${o.apiVersion.split('/').slice(0, -1).join('/')}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

export class KeptVersions {
  /** What start-up may still feed, by group/kind/namespace/name (each used at most once). */
  private readonly seeds = new Map<string, KubeObject>();
  private written = '';

  constructor(private readonly file: string | undefined, private readonly log: Pick<Logger, 'warn' | 'info'>) {
    if (!file || !existsSync(file)) return;
    try {
      const list = JSON.parse(readFileSync(file, 'utf8')) as KubeObject[];
      if (!Array.isArray(list)) throw new Error('not a list');
      for (const o of list) if (o?.metadata?.uid) this.seeds.set(keyOf(o), o);
      this.written = JSON.stringify(list);
      if (this.seeds.size > 0) log.info({ file, objects: this.seeds.size }, 'policy: last valid versions of invalid objects restored');
    } catch (err) {
      log.warn({ file, err: (err as Error).message }, 'policy: the kept last valid versions could not be read; objects invalid now yield nothing');
    }
  }

  /** The kept version to feed before `obj`, when `obj` is the same object (uid) seen for the first time. */
  seedFor(obj: KubeObject): KubeObject | undefined {
    if (this.seeds.size === 0) return undefined;
    const key = keyOf(obj);
    const seed = this.seeds.get(key);
    if (!seed) return undefined;
    this.seeds.delete(key);
    return seed.metadata.uid === obj.metadata.uid ? seed : undefined;
  }

  /** Writes the kept versions when they changed (atomically); a failure is logged and retried at the next change. */
  save(kept: readonly KubeObject[]): void {
    if (!this.file) return;
    const text = JSON.stringify([...kept].sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : 1)));
    if (text === this.written) return;
    try {
      writeFileSync(`${this.file}.tmp`, text);
      renameSync(`${this.file}.tmp`, this.file);
      this.written = text;
    } catch (err) {
      this.log.warn({ file: this.file, err: (err as Error).message }, 'policy: the kept last valid versions could not be written; a restart would not keep them');
    }
  }
}
