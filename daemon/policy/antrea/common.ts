/**
 * Shared helpers for the crd.antrea.io normalizers: the error collector (../problems.ts, shared by
 * every kind) and the result of an invalid object, JSON-shape checks (what the CRD's structural schema would reject), and the label-key /
 * label-value rules the Antrea webhook applies to selectors.
 */
import { DNS_SUBDOMAIN, QUALIFIED_NAME, objectMetaErrors, selectorError, subField } from '../labels.js';
import { emptyResult, type Problems } from '../problems.js';
import type { KubeObject, LabelSelector, NormalizeResult } from '../types.js';

export const ANTREA_GROUP = 'crd.antrea.io';

export { Problems, emptyResult } from '../problems.js';


export function errorResult(problems: Problems): NormalizeResult {
  return emptyResult(problems.list);
}

export function isObject(v: unknown): v is Record<string, any> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Namespaced kinds default to "default" when metadata.namespace is absent, as kubectl does. */
export function objectNamespace(obj: KubeObject): string {
  const ns = obj.metadata.namespace;
  return typeof ns === 'string' && ns !== '' ? ns : 'default';
}

/** metadata.name (and metadata.namespace of a namespaced kind) as the API server checks them. */
export function checkObjectMeta(p: Problems, obj: KubeObject, namespaced: boolean): void {
  for (const e of objectMetaErrors(obj.metadata, namespaced)) p.add(e.field, e.message);
}

/**
 * Reads an optional array field: undefined/null -> []; anything else that is not an array is a
 * schema error (recorded) and also yields [].
 */
export function arrayField(p: Problems, value: unknown, field: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    p.add(field, 'must be a list');
    return [];
  }
  return value;
}

/** An optional string field; records a schema error when present with another type. */
export function stringField(p: Problems, value: unknown, field: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') {
    p.add(field, 'must be a string');
    return undefined;
  }
  return value;
}

// Label syntax (k8s.io/apimachinery validation.IsQualifiedName / IsValidLabelValue), with the
// messages the Antrea webhook gives.

/** Why `key` is not a qualified name ("[prefix/]name"), or undefined. */
export function qualifiedNameError(key: string): string | undefined {
  const parts = key.split('/');
  let name = key;
  if (parts.length === 2) {
    const prefix = parts[0]!;
    name = parts[1]!;
    if (prefix.length === 0) return `"${key}": prefix part must be non-empty`;
    if (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix)) return `"${key}": prefix part must be a DNS subdomain`;
  } else if (parts.length > 2) {
    return `"${key}": a qualified name has at most one "/"`;
  }
  if (name.length === 0) return `"${key}": name part must be non-empty`;
  if (name.length > 63) return `"${key}": name part must be no more than 63 characters`;
  if (!QUALIFIED_NAME.test(name)) {
    return `"${key}": name part must consist of alphanumerics, "-", "_" or ".", and start and end with an alphanumeric`;
  }
  return undefined;
}

export function labelValueError(value: string): string | undefined {
  if (value.length > 63) return `"${value}": a label value must be no more than 63 characters`;
  if (value !== '' && !QUALIFIED_NAME.test(value)) {
    return `"${value}": a label value must be empty or consist of alphanumerics, "-", "_" or ".", and start and end with an alphanumeric`;
  }
  return undefined;
}

/**
 * Validates a LabelSelector field (structure as the API server checks it, plus the label key and
 * value syntax the Antrea webhook checks). Returns the selector when valid.
 */
export function selectorField(p: Problems, value: unknown, field: string): LabelSelector | undefined {
  if (value === undefined || value === null) return undefined;
  const structural = selectorError(value);
  if (structural) {
    p.add(subField(field, structural.field), structural.message);
    return undefined;
  }
  const sel = value as LabelSelector;
  let ok = true;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) {
    const err = qualifiedNameError(k) ?? labelValueError(v);
    if (err) {
      p.add(`${field}.matchLabels`, `invalid label: ${err}`);
      ok = false;
    }
  }
  (sel.matchExpressions ?? []).forEach((req, i) => {
    const keyErr = qualifiedNameError(req.key);
    if (keyErr) {
      p.add(`${field}.matchExpressions[${i}].key`, `invalid label key: ${keyErr}`);
      ok = false;
    }
    for (const v of req.values ?? []) {
      const err = typeof v === 'string' ? labelValueError(v) : 'values must be strings';
      if (err) {
        p.add(`${field}.matchExpressions[${i}].values`, err);
        ok = false;
      }
    }
  });
  if (!ok) return undefined;
  // Keep only the two selector fields, so unknown keys do not leak into the IR.
  const out: LabelSelector = {};
  if (sel.matchLabels && Object.keys(sel.matchLabels).length > 0) out.matchLabels = { ...sel.matchLabels };
  if (sel.matchExpressions && sel.matchExpressions.length > 0) {
    out.matchExpressions = sel.matchExpressions.map((r) => (r.values ? { key: r.key, operator: r.operator, values: [...r.values] } : { key: r.key, operator: r.operator }));
  }
  return out;
}

/** Names of the keys of `obj` that hold a value (Go's "field is not the zero value"). */
export function setKeys(obj: Record<string, unknown>, known: readonly string[]): string[] {
  return known.filter((k) => {
    const v = obj[k];
    if (v === undefined || v === null || v === '' || v === false) return false;
    if (Array.isArray(v) && v.length === 0) return false;
    return true;
  });
}
