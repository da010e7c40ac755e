/** The single precedence order of rules (README, "Policy precedence"), and small deterministic helpers. */
import type { InternalRule, RulePriority } from './types.js';

export function comparePriority(a: RulePriority, b: RulePriority): number {
  return a.stage - b.stage || a.tier - b.tier || a.policy - b.policy || a.rule - b.rule || (a.tieBreak < b.tieBreak ? -1 : a.tieBreak > b.tieBreak ? 1 : 0);
}

export function compareRules(a: InternalRule, b: InternalRule): number {
  return comparePriority(a.priority, b.priority) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** JSON with object keys sorted: equal values give equal text. */
export function canonicalJson(value: unknown): string {
  if (value === undefined) return 'null';
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  // As JSON.stringify: an object that says how it is written as JSON (a SortedList: its array).
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === 'function') return canonicalJson(toJSON.call(value));
  const keys = Object.keys(value as object).filter((k) => (value as Record<string, unknown>)[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

/** 64-bit (two FNV-1a variants) hash as base-36 text: short, stable ids for shared objects. */
export function stableHash(text: string): string {
  let h1 = 0x811c9dc5;
  let h2 = 0x9747b28c;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ c, 0x5bd1e995) >>> 0;
    h2 ^= h2 >>> 15;
  }
  return h1.toString(36).padStart(7, '0') + h2.toString(36).padStart(7, '0');
}
