/**
 * Conjunction ids: a pure function of the set of keys (rule ids), so a restart with the same rule
 * set gives the same ids and incremental updates agree with a full compile.
 *
 * id = MIN + fnv1a32(key) mod (MAX - MIN + 1); keys whose ids collide are ordered by key and the
 * later ones probe upwards to the next free id. Ids below MIN are reserved (0 = "no rule", e.g. a
 * Kubernetes default drop in audit userdata).
 *
 * Reuse safety: an id changes owner only when the old owner disappears (or a collision reorders
 * owners); the compiler's delta then deletes every flow of the old owner and adds those of the new
 * one, and the adapter applies a delta as one OpenFlow bundle, so no packet ever sees clause flows
 * of one rule combined with the conj_id flow of another.
 */
import { fnv1a } from '../../policy/cluster.js';

export const CONJ_ID_MIN = 0x100;
export const CONJ_ID_MAX = 0x7fffffff;

export function naturalConjId(key: string): number {
  return CONJ_ID_MIN + (fnv1a(key) % (CONJ_ID_MAX - CONJ_ID_MIN + 1));
}

/** `natural` is replaceable for tests (to force collisions). */
export function allocateConjIds(keys: Iterable<string>, natural: (key: string) => number = naturalConjId): Map<string, number> {
  const list = [...new Set(keys)].map((key) => ({ key, id: natural(key) }));
  list.sort((a, b) => a.id - b.id || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const used = new Set<number>();
  const out = new Map<string, number>();
  for (const { key, id } of list) {
    let n = id;
    while (used.has(n)) n = n >= CONJ_ID_MAX ? CONJ_ID_MIN : n + 1;
    used.add(n);
    out.set(key, n);
  }
  return out;
}
