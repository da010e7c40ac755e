/**
 * Pieces shared by the upstream admin-policy kinds (policy.networking.k8s.io v1alpha1
 * AdminNetworkPolicy / BaselineAdminNetworkPolicy and v1alpha2 ClusterNetworkPolicy):
 * field-path error collection (../problems.ts, shared by every kind), schema checks that mirror the CRDs' OpenAPI rules,
 * and the subject/peer shapes both API versions share.
 *
 * Pure: no I/O.
 */
import { objectMetaErrors, strictSelectorError, subField } from '../labels.js';
import { integerInRange, type Problems } from '../problems.js';
import type {
  Direction,
  KubeObject,
  LabelSelector,
  NamespaceMatch,
  Peer,
  PolicyKind,
  PortMatch,
} from '../types.js';

export { Problems, emptyResult } from '../problems.js';

export type Json = Record<string, unknown>;

export function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The object's name, or a placeholder so errors about a nameless object still say what it is. */
export function objectName(obj: KubeObject): string {
  const n = obj?.metadata?.name;
  return typeof n === 'string' && n !== '' ? n : '<unnamed>';
}


/** Checks metadata.name and that spec is an object; returns the spec or undefined. */
export function checkObjectBasics(obj: KubeObject, p: Problems): Json | undefined {
  for (const e of objectMetaErrors(obj?.metadata, false)) p.add(e.field, e.message);
  if (obj.spec === undefined || obj.spec === null) {
    p.add('spec', 'is required');
    return undefined;
  }
  if (!isObject(obj.spec)) {
    p.add('spec', 'must be an object');
    return undefined;
  }
  return obj.spec;
}

/**
 * An optional list (absent → []), checked against the CRD's minItems/maxItems.
 * `required` lists must be present.
 */
export function listField(
  v: unknown,
  field: string,
  bounds: { min?: number; max: number; required?: boolean },
  p: Problems,
): unknown[] | undefined {
  if (v === undefined || v === null) {
    if (bounds.required) p.add(field, 'is required and must contain at least one item');
    return bounds.required ? undefined : [];
  }
  if (!Array.isArray(v)) {
    p.add(field, 'must be a list');
    return undefined;
  }
  if (bounds.min !== undefined && v.length < bounds.min) {
    p.add(field, `must contain at least ${bounds.min} item${bounds.min === 1 ? '' : 's'}`);
    return undefined;
  }
  if (v.length > bounds.max) {
    p.add(field, `must contain at most ${bounds.max} items, got ${v.length}`);
    return undefined;
  }
  return v;
}

/**
 * "Exactly one of these fields" (the CRDs' minProperties/maxProperties = 1). Fields the schema
 * does not know are pruned by the API server before that count, so they are ignored here too.
 */
export function exactlyOne(
  v: unknown,
  field: string,
  known: readonly string[],
  p: Problems,
): string | undefined {
  if (!isObject(v)) {
    p.add(field, `must be an object with exactly one of ${known.join(', ')}`);
    return undefined;
  }
  const present = known.filter((k) => v[k] !== undefined && v[k] !== null);
  if (present.length === 1) return present[0];
  if (present.length === 0) {
    const unknown = Object.keys(v).filter((k) => !known.includes(k));
    const hint = unknown.length > 0 ? ` (${unknown.join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not a field here)` : '';
    p.add(field, `must set exactly one of ${known.join(', ')}${hint}`);
  } else {
    p.add(field, `must set exactly one of ${known.join(', ')}, got ${present.join(' and ')}`);
  }
  return undefined;
}

/** A metav1.LabelSelector: only matchLabels / matchExpressions are kept (others are pruned). */
export function labelSelector(v: unknown, field: string, p: Problems): LabelSelector | undefined {
  if (!isObject(v)) {
    p.add(field, 'must be a label selector object');
    return undefined;
  }
  const why = strictSelectorError(v);
  if (why !== undefined) {
    p.add(subField(field, why.field), why.message);
    return undefined;
  }
  const sel: LabelSelector = {};
  if (v.matchLabels !== undefined && v.matchLabels !== null) {
    sel.matchLabels = { ...(v.matchLabels as Record<string, string>) };
  }
  if (Array.isArray(v.matchExpressions) && v.matchExpressions.length > 0) {
    sel.matchExpressions = (v.matchExpressions as Json[]).map((e) => {
      const req: { key: string; operator: any; values?: string[] } = { key: e.key as string, operator: e.operator };
      if (Array.isArray(e.values) && e.values.length > 0) req.values = [...(e.values as string[])];
      return req;
    });
  }
  return sel;
}

function isEmptySelector(s: LabelSelector): boolean {
  return Object.keys(s.matchLabels ?? {}).length === 0 && (s.matchExpressions ?? []).length === 0;
}

function namespaceMatch(sel: LabelSelector): NamespaceMatch {
  return isEmptySelector(sel) ? { kind: 'all' } : { kind: 'selector', selector: sel };
}

/** Every Pod in the Namespaces matching `sel`. */
export function podsInNamespaces(sel: LabelSelector): Peer {
  return { kind: 'pods', namespaces: namespaceMatch(sel), pods: {} };
}

/**
 * `{namespaceSelector, podSelector}`. In v1alpha1 both are required; in v1alpha2 an absent
 * namespaceSelector is the empty selector (all Namespaces).
 */
export function namespacedPods(
  v: unknown,
  field: string,
  opts: { namespaceSelectorRequired: boolean },
  p: Problems,
): Peer | undefined {
  if (!isObject(v)) {
    p.add(field, 'must be an object with namespaceSelector and podSelector');
    return undefined;
  }
  let ns: LabelSelector | undefined = {};
  if (v.namespaceSelector === undefined || v.namespaceSelector === null) {
    if (opts.namespaceSelectorRequired) {
      p.add(`${field}.namespaceSelector`, 'is required (use {} for all Namespaces)');
      ns = undefined;
    }
  } else {
    ns = labelSelector(v.namespaceSelector, `${field}.namespaceSelector`, p);
  }
  let pods: LabelSelector | undefined;
  if (v.podSelector === undefined || v.podSelector === null) {
    p.add(`${field}.podSelector`, 'is required (use {} for all Pods)');
  } else {
    pods = labelSelector(v.podSelector, `${field}.podSelector`, p);
  }
  if (!ns || !pods) return undefined;
  return { kind: 'pods', namespaces: namespaceMatch(ns), pods };
}

/** The policy subject: exactly one of `namespaces` (a Namespace selector) or `pods`. */
export function subject(
  v: unknown,
  field: string,
  opts: { namespaceSelectorRequired: boolean },
  p: Problems,
): Peer[] | undefined {
  if (v === undefined || v === null) {
    p.add(field, 'is required');
    return undefined;
  }
  const which = exactlyOne(v, field, ['namespaces', 'pods'], p);
  if (!which) return undefined;
  const s = v as Json;
  if (which === 'namespaces') {
    const sel = labelSelector(s.namespaces, `${field}.namespaces`, p);
    return sel ? [podsInNamespaces(sel)] : undefined;
  }
  const pods = namespacedPods(s.pods, `${field}.pods`, opts, p);
  return pods ? [pods] : undefined;
}

// ---------------------------------------------------------------------------------------
// Ports.

export const PORT_PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
export type PortProtocol = (typeof PORT_PROTOCOLS)[number];

/** A port number both API versions require: present, an integer in 1–65535. */
export function requiredPort(v: unknown, field: string, p: Problems): number | undefined {
  if (v === undefined || v === null) {
    p.add(field, 'is required');
    return undefined;
  }
  return integerInRange(p, v, field, 1, 65535);
}

/**
 * A named port has no protocol of its own in these APIs: it matches the container port of
 * that name whatever its protocol. The IR resolves named ports per protocol, so it becomes
 * one match per protocol (only the container port's actual protocol can match).
 */
export function namedPortMatches(name: string): PortMatch[] {
  return PORT_PROTOCOLS.map((protocol) => ({ protocol, port: name }));
}

/** A named port: any non-empty string (the CRDs do not constrain it; an unknown name matches nothing). */
export function namedPortError(v: unknown): string | undefined {
  if (typeof v !== 'string' || v === '') return 'must be a non-empty port name';
  return undefined;
}

/** `spec.priority` of ANP and CNP: required, 0–1000 (0 when invalid; the error is recorded). */
export function policyPriority(spec: Json, p: Problems): number {
  if (spec.priority === undefined || spec.priority === null) {
    p.add('spec.priority', 'is required (0–1000, lower is checked first)');
    return 0;
  }
  return integerInRange(p, spec.priority, 'spec.priority', 0, 1000) ?? 0;
}

// ---------------------------------------------------------------------------------------
// Rule identity.

/** Short, stable id prefix per kind (ids must differ across kinds that share names). */
const ID_PREFIX: Partial<Record<PolicyKind, string>> = {
  AdminNetworkPolicy: 'anp',
  BaselineAdminNetworkPolicy: 'banp',
  ClusterNetworkPolicy: 'cnp',
};

export function ruleId(kind: PolicyKind, name: string, direction: Direction, index: number): string {
  return `${ID_PREFIX[kind] ?? kind}/${name}/${direction === 'Ingress' ? 'ingress' : 'egress'}/${index}`;
}

/** The rule's own name where it has one, else "<direction>-<index>". */
export function ruleLabel(name: string | undefined, direction: Direction, index: number): string {
  return name !== undefined && name !== '' ? name : `${direction === 'Ingress' ? 'ingress' : 'egress'}-${index}`;
}

/** Deterministic tie-break among policies with the same (stage, tier, priority). */
export function tieBreak(kind: PolicyKind, name: string): string {
  return `${kind}//${name}`;
}

/** Rule name: optional, at most 100 characters. */
export function ruleName(v: unknown, field: string, p: Problems): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') {
    p.add(field, 'must be a string');
    return undefined;
  }
  if (v.length > 100) p.add(field, `must be at most 100 characters, got ${v.length}`);
  return v;
}
