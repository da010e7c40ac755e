/**
 * A cluster written as the lab API server's data file (its `--seed`, `sluice-lab up --seed`): every
 * object stored under its kind's storage key with a uid and resourceVersion, as the API server
 * would have created them, so a large cluster loads at once instead of object by object.
 */
import { writeFileSync } from 'node:fs';
import type { KubeObject } from '../daemon/policy/types.js';
import { builtinTypes, seedCrds, typesFromCrd } from '../lab/apiserver/resources.js';

/** Writes `objects` (given metadata in place) to `file`; throws naming a kind the API server does not serve. */
export function writeClusterSeed(file: string, objects: Iterable<KubeObject>): void {
  const storage = new Map<string, string>();
  for (const t of [...builtinTypes, ...seedCrds().flatMap(typesFromCrd)]) storage.set(`${t.apiVersion}/${t.kind}`, t.storageKey);
  const resources: Record<string, KubeObject[]> = {};
  let rv = 0;
  for (const o of objects) {
    const key = storage.get(`${o.apiVersion}/${o.kind}`);
    if (!key) throw new Error(`no storage for ${o.apiVersion} ${o.kind}`);
    rv++;
    o.metadata = { ...o.metadata, uid: `uid-${rv}`, resourceVersion: String(rv), creationTimestamp: '2026-11-29T00:00:00Z' };
    (resources[key] ??= []).push(o);
  }
  writeFileSync(file, JSON.stringify({ resourceVersion: rv, resources }));
}
