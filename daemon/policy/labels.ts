import { typeName } from './problems.js';
import type { LabelSelector } from './types.js';

/**
 * The value of a label (or annotation) by a key taken from input, own properties only: label keys
 * such as `constructor`, `toString` or `__proto__` are valid in Kubernetes, and a plain object
 * would answer them from Object.prototype.
 */
export function labelValue(labels: Readonly<Record<string, string>>, key: string): string | undefined {
  return Object.hasOwn(labels, key) ? labels[key] : undefined;
}

/** A string map keyed by input (labels, annotations): no prototype, so no key is ever inherited. */
export function stringMapOf(entries: Iterable<readonly [string, string]>): Record<string, string> {
  const out: Record<string, string> = Object.create(null);
  for (const [k, v] of entries) out[k] = v;
  return out;
}

/** Kubernetes label-selector semantics: `{}` matches everything; requirements are ANDed. */
export function matchesSelector(selector: LabelSelector, labels: Record<string, string>): boolean {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labelValue(labels, key) !== value) return false;
  }
  for (const req of selector.matchExpressions ?? []) {
    const value = labelValue(labels, req.key);
    const has = value !== undefined;
    const values = req.values ?? [];
    switch (req.operator) {
      case 'In':
        if (!has || !values.includes(value)) return false;
        break;
      case 'NotIn':
        if (has && values.includes(value)) return false;
        break;
      case 'Exists':
        if (!has) return false;
        break;
      case 'DoesNotExist':
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

/** What is wrong where: `field` is relative to the value checked ("" = the value itself). */
export interface FieldProblem {
  field: string;
  message: string;
}

/** `base` extended by a relative field path ("" keeps base; "[0]" appends without a dot). */
export function subField(base: string, rel: string): string {
  if (rel === '') return base;
  if (base === '') return rel;
  return rel.startsWith('[') ? `${base}${rel}` : `${base}.${rel}`;
}

const isPlainMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Why a selector is invalid, or undefined when it is valid (as the API server decodes and
 * validates a metav1.LabelSelector): every wrong type is named with its field and the type expected.
 */
export function selectorError(selector: unknown): FieldProblem | undefined {
  if (!isPlainMap(selector)) return { field: '', message: `must be an object (a label selector), not ${typeName(selector)}` };
  const { matchLabels, matchExpressions } = selector;
  if (matchLabels !== undefined && matchLabels !== null) {
    if (!isPlainMap(matchLabels)) return { field: 'matchLabels', message: `must be a map of strings, not ${typeName(matchLabels)}` };
    for (const [k, v] of Object.entries(matchLabels)) {
      if (typeof v !== 'string') return { field: `matchLabels.${k}`, message: `must be a string, not ${typeName(v)}` };
    }
  }
  if (matchExpressions === undefined || matchExpressions === null) return undefined;
  if (!Array.isArray(matchExpressions)) return { field: 'matchExpressions', message: `must be a list of objects, not ${typeName(matchExpressions)}` };
  for (const [i, req] of matchExpressions.entries()) {
    const at = `matchExpressions[${i}]`;
    if (!isPlainMap(req)) return { field: at, message: `must be an object, not ${typeName(req)}` };
    if (req.key === undefined || req.key === null || req.key === '') return { field: `${at}.key`, message: 'Required value' };
    if (typeof req.key !== 'string') return { field: `${at}.key`, message: `must be a string, not ${typeName(req.key)}` };
    const values = req.values;
    if (values !== undefined && values !== null) {
      if (!Array.isArray(values)) return { field: `${at}.values`, message: `must be a list of strings, not ${typeName(values)}` };
      const bad = values.findIndex((v) => typeof v !== 'string');
      if (bad >= 0) return { field: `${at}.values[${bad}]`, message: `must be a string, not ${typeName(values[bad])}` };
    }
    const n = Array.isArray(values) ? values.length : 0;
    if (req.operator === 'In' || req.operator === 'NotIn') {
      if (n === 0) return { field: `${at}.values`, message: `must be specified when \`operator\` is 'In' or 'NotIn'` };
    } else if (req.operator === 'Exists' || req.operator === 'DoesNotExist') {
      if (n > 0) return { field: `${at}.values`, message: `may not be specified when \`operator\` is 'Exists' or 'DoesNotExist'` };
    } else if (req.operator === undefined || req.operator === null) {
      return { field: `${at}.operator`, message: 'Required value' };
    } else {
      return { field: `${at}.operator`, message: `Unsupported value: ${JSON.stringify(req.operator)}: supported values: "In", "NotIn", "Exists", "DoesNotExist"` };
    }
  }
  return undefined;
}

/** Syntax of a label name and of a non-empty label value (length, at most 63, checked apart). */
export const QUALIFIED_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
/** Syntax of an RFC 1123 DNS subdomain (length, at most 253, checked apart). */
export const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Why a label key is invalid ("[prefix/]name", as the API server checks it), or undefined. */
export function labelKeyError(key: string): string | undefined {
  if (typeof key !== 'string' || key === '') return 'label key must be non-empty';
  const parts = key.split('/');
  if (parts.length > 2) return `label key "${key}" has more than one "/"`;
  const name = parts[parts.length - 1]!;
  if (parts.length === 2) {
    const prefix = parts[0]!;
    if (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix)) return `label key prefix "${prefix}" must be a DNS subdomain`;
  }
  if (name.length > 63 || !QUALIFIED_NAME.test(name)) {
    return `label key "${key}": name must be 63 characters or less, alphanumeric, '-', '_' or '.', starting and ending alphanumeric`;
  }
  return undefined;
}

/** Why a label value is invalid, or undefined ("" is valid). */
export function labelValueError(value: string): string | undefined {
  if (typeof value !== 'string') return 'label value must be a string';
  if (value === '') return undefined;
  if (value.length > 63 || !QUALIFIED_NAME.test(value)) {
    return `label value "${value}" must be 63 characters or less, alphanumeric, '-', '_' or '.', starting and ending alphanumeric`;
  }
  return undefined;
}

/** selectorError plus label key/value syntax checks (what the API server's ValidateLabelSelector adds). */
export function strictSelectorError(selector: unknown): FieldProblem | undefined {
  const basic = selectorError(selector);
  if (basic) return basic;
  const s = selector as LabelSelector;
  for (const [k, v] of Object.entries(s.matchLabels ?? {})) {
    const e = labelKeyError(k) ?? labelValueError(v);
    if (e) return { field: 'matchLabels', message: e };
  }
  for (const [i, req] of (s.matchExpressions ?? []).entries()) {
    const e = labelKeyError(req.key) ?? (req.values ?? []).map(labelValueError).find((x) => x);
    if (e) return { field: `matchExpressions[${i}]`, message: e };
  }
  return undefined;
}

/** Syntax of an RFC 1123 DNS label (length, at most 63, checked apart). */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/**
 * The API server's checks of metadata.name (a DNS-1123 subdomain, as for NetworkPolicy and every
 * custom resource) and, for namespaced kinds, metadata.namespace (a DNS-1123 label). An absent
 * namespace is left to the caller's default. One validator for every policy kind.
 */
export function objectMetaErrors(meta: { name?: unknown; namespace?: unknown } | undefined, namespaced: boolean): FieldProblem[] {
  const out: FieldProblem[] = [];
  const name = meta?.name;
  if (typeof name !== 'string' || name === '') {
    out.push({ field: 'metadata.name', message: 'is required' });
  } else if (name.length > 253) {
    out.push({ field: 'metadata.name', message: `is not a valid name: a lowercase RFC 1123 subdomain must be no more than 253 characters, not ${name.length}` });
  } else if (!DNS_SUBDOMAIN.test(name)) {
    out.push({ field: 'metadata.name', message: `${JSON.stringify(name)} is not a valid name: a lowercase RFC 1123 subdomain must consist of lowercase alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character` });
  }
  const ns = meta?.namespace;
  if (namespaced && typeof ns === 'string' && ns !== '') {
    if (ns.length > 63) {
      out.push({ field: 'metadata.namespace', message: `is not a valid namespace: a lowercase RFC 1123 label must be no more than 63 characters, not ${ns.length}` });
    } else if (!DNS_LABEL.test(ns)) {
      out.push({ field: 'metadata.namespace', message: `${JSON.stringify(ns)} is not a valid namespace: a lowercase RFC 1123 label must consist of lowercase alphanumeric characters or '-', and must start and end with an alphanumeric character` });
    }
  }
  return out;
}
