// Label and field selectors in the string form of the Kubernetes REST API
// (?labelSelector=app=web,tier in (fe,be),!legacy and ?fieldSelector=spec.nodeName=node-1).
// Parsing throws SelectorError with a message naming the bad part; the HTTP layer turns it into 400.

export class SelectorError extends Error {
  override name = 'SelectorError';
}

type LabelRequirement =
  | { key: string; op: 'eq' | 'neq'; value: string }
  | { key: string; op: 'in' | 'notin'; values: string[] }
  | { key: string; op: 'exists' | 'absent' };

export type Labels = Record<string, string> | undefined;

/** Splits on commas that are not inside parentheses ("a in (x,y),b" -> ["a in (x,y)", "b"]). */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
    if (depth < 0) throw new SelectorError(`unbalanced ')' in selector "${text}"`);
  }
  if (depth !== 0) throw new SelectorError(`unbalanced '(' in selector "${text}"`);
  parts.push(text.slice(start));
  return parts.map((p) => p.trim()).filter((p) => p !== '');
}

const labelKey = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const labelValue = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

function checkKey(key: string, whole: string): string {
  if (!labelKey.test(key)) throw new SelectorError(`invalid label key "${key}" in selector "${whole}"`);
  return key;
}
function checkValue(value: string, whole: string): string {
  if (!labelValue.test(value) || value.length > 63) throw new SelectorError(`invalid label value "${value}" in selector "${whole}"`);
  return value;
}

function parseRequirement(part: string, whole: string): LabelRequirement {
  const set = /^(\S+)\s+(in|notin)\s*\((.*)\)$/.exec(part);
  if (set) {
    const values = set[3]!.split(',').map((v) => checkValue(v.trim(), whole));
    return { key: checkKey(set[1]!, whole), op: set[2] as 'in' | 'notin', values };
  }
  const cmp = /^([^=!\s]+)\s*(==|=|!=)\s*(.*)$/.exec(part);
  if (cmp) {
    return { key: checkKey(cmp[1]!, whole), op: cmp[2] === '!=' ? 'neq' : 'eq', value: checkValue(cmp[3]!.trim(), whole) };
  }
  if (part.startsWith('!')) return { key: checkKey(part.slice(1).trim(), whole), op: 'absent' };
  if (/^\S+$/.test(part)) return { key: checkKey(part, whole), op: 'exists' };
  throw new SelectorError(`cannot parse requirement "${part}" in label selector "${whole}"`);
}

function matchesRequirement(r: LabelRequirement, labels: Record<string, string>): boolean {
  const has = Object.hasOwn(labels, r.key);
  switch (r.op) {
    case 'eq': return has && labels[r.key] === r.value;
    case 'neq': return !has || labels[r.key] !== r.value;
    case 'in': return has && r.values.includes(labels[r.key]!);
    case 'notin': return !has || !r.values.includes(labels[r.key]!);
    case 'exists': return has;
    case 'absent': return !has;
  }
}

export type LabelMatcher = (labels: Labels) => boolean;

export function parseLabelSelector(text: string | undefined): LabelMatcher {
  if (!text || text.trim() === '') return () => true;
  const reqs = splitTopLevel(text).map((p) => parseRequirement(p, text));
  return (labels) => reqs.every((r) => matchesRequirement(r, labels ?? {}));
}

/** Field paths each resource supports in field selectors, as the real API server does. */
const commonFields = ['metadata.name', 'metadata.namespace'];
const extraFieldsByResource: Record<string, string[]> = {
  '/pods': ['spec.nodeName', 'status.phase', 'spec.serviceAccountName', 'status.podIP', 'spec.restartPolicy', 'spec.schedulerName'],
  '/namespaces': ['status.phase'],
  '/nodes': ['spec.unschedulable'],
  // What kubectl describe asks for to find an object's Events.
  '/events': ['involvedObject.kind', 'involvedObject.namespace', 'involvedObject.name', 'involvedObject.uid', 'involvedObject.apiVersion', 'involvedObject.resourceVersion', 'involvedObject.fieldPath', 'reason', 'reportingComponent', 'type'],
};

function fieldValue(obj: Record<string, unknown>, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return '';
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur === undefined || cur === null ? '' : String(cur);
}

export type FieldMatcher = (obj: Record<string, unknown>) => boolean;

/** storageKey is "<group>/<plural>" (core group empty), used to look up the supported fields. */
export function parseFieldSelector(text: string | undefined, storageKey: string): FieldMatcher {
  if (!text || text.trim() === '') return () => true;
  const allowed = [...commonFields, ...(extraFieldsByResource[storageKey] ?? [])];
  const reqs = splitTopLevel(text).map((part) => {
    const m = /^([^=!\s]+)\s*(==|=|!=)\s*(.*)$/.exec(part);
    if (!m) throw new SelectorError(`cannot parse requirement "${part}" in field selector "${text}" (use field=value or field!=value)`);
    if (!allowed.includes(m[1]!)) {
      throw new SelectorError(`field label not supported: ${m[1]} (supported here: ${allowed.join(', ')})`);
    }
    return { path: m[1]!, negate: m[2] === '!=', value: m[3]!.trim() };
  });
  return (obj) => reqs.every((r) => (fieldValue(obj, r.path) === r.value) !== r.negate);
}
