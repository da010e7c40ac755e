/**
 * Scenario handling (pure): turns manifest objects into the requests the lab makes against its API
 * server — in dependency order, with lab rules applied (status dropped, Nodes only add labels,
 * spec.nodeName must name a lab node) and lab-specific mistakes reported before anything changes.
 */
import type { KubeObject } from '../daemon/policy/types.js';
import { kindOfObject, type ResourceKind } from './kinds.js';

export class ScenarioError extends Error {
  override name = 'ScenarioError';
}

export interface PlannedObject {
  kind: ResourceKind;
  obj: KubeObject;
  /** "ns/name" or "name", for messages. */
  ref: string;
}

/** Lower applies first: things others refer to come before what refers to them. */
const ORDER: Record<string, number> = {
  CustomResourceDefinition: -1, Namespace: 0, Tier: 1, ServiceAccount: 2, Node: 3, ClusterGroup: 4, Group: 5, Service: 6,
  Pod: 9, DaemonSet: 10,
};
const rank = (kind: string): number => ORDER[kind] ?? 7;

export const objectRef = (o: { metadata: { namespace?: string | undefined; name: string } }): string =>
  o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;

/**
 * Validates and orders objects for `apply`/`up`. Throws ScenarioError listing every problem.
 * `labNodes` are the lab's node names.
 */
export function planApply(objects: KubeObject[], labNodes: string[]): PlannedObject[] {
  const problems: string[] = [];
  const planned: PlannedObject[] = [];
  const seen = new Set<string>();
  for (const original of objects) {
    let kind: ResourceKind;
    try {
      kind = kindOfObject(original);
    } catch (err) {
      problems.push(`${original.kind} ${original.metadata.name}: ${(err as Error).message}`);
      continue;
    }
    const obj = normalizeForApply(original, kind);
    const ref = objectRef(obj);
    const key = `${kind.group}/${kind.kind}/${ref}`;
    if (seen.has(key)) problems.push(`${kind.kind} ${ref} appears twice`);
    seen.add(key);
    if (kind.kind === 'Node' && !labNodes.includes(obj.metadata.name)) {
      problems.push(`Node ${obj.metadata.name}: not a lab node (the lab has ${labNodes.join(', ')}); scenario Nodes only add labels`);
    }
    if (kind.kind === 'Pod') {
      const node = obj.spec?.nodeName;
      if (node !== undefined && !labNodes.includes(node)) {
        problems.push(`Pod ${ref}: spec.nodeName ${node} is not a lab node (the lab has ${labNodes.join(', ')})`);
      }
      if (!Array.isArray(obj.spec?.containers) || obj.spec.containers.length === 0) {
        problems.push(`Pod ${ref}: spec.containers must list at least one container`);
      }
    }
    planned.push({ kind, obj, ref });
  }
  if (problems.length) throw new ScenarioError(problems.join('\n'));
  return planned.sort((a, b) => rank(a.kind.kind) - rank(b.kind.kind));
}

/** Deletion runs in the reverse order (Pods before Services before Namespaces). */
export function planDelete(objects: KubeObject[]): PlannedObject[] {
  const problems: string[] = [];
  const planned: PlannedObject[] = [];
  for (const o of objects) {
    try {
      const kind = kindOfObject(o);
      const obj = normalizeForApply(o, kind);
      planned.push({ kind, obj, ref: objectRef(obj) });
    } catch (err) {
      problems.push(`${o.kind} ${o.metadata.name}: ${(err as Error).message}`);
    }
  }
  if (problems.length) throw new ScenarioError(problems.join('\n'));
  return planned.sort((a, b) => rank(b.kind.kind) - rank(a.kind.kind));
}

/**
 * What the lab sends for an object: server-owned metadata removed, namespace defaulted for
 * namespaced kinds (and removed for cluster-scoped ones), a Pod's status dropped (IPAM and the
 * kubelet write it).
 */
export function normalizeForApply(o: KubeObject, kind: ResourceKind): KubeObject {
  const { resourceVersion: _rv, uid: _uid, creationTimestamp: _ct, ...meta } = o.metadata as KubeObject['metadata'] & Record<string, unknown>;
  delete (meta as Record<string, unknown>).managedFields;
  delete (meta as Record<string, unknown>).generation;
  delete (meta as Record<string, unknown>).deletionTimestamp;
  if (kind.namespaced) meta.namespace = meta.namespace ?? 'default';
  else delete meta.namespace;
  const out: KubeObject = { ...o, metadata: meta as KubeObject['metadata'] };
  if (kind.kind === 'Pod') delete out.status;
  return out;
}

/** A Node from a scenario only adds its labels to the lab node: the merged object to PUT. */
export function mergeNodeLabels(existing: KubeObject, scenario: KubeObject): KubeObject {
  return {
    ...existing,
    metadata: { ...existing.metadata, labels: { ...(existing.metadata.labels ?? {}), ...(scenario.metadata.labels ?? {}) } },
  };
}

/**
 * `label` arguments: "k=v" sets, "k-" removes. Returns the new label map; throws for malformed
 * arguments.
 */
export function applyLabelArgs(labels: Record<string, string> | undefined, args: string[]): Record<string, string> {
  if (args.length === 0) throw new ScenarioError('label: give at least one k=v or k- argument');
  const out = { ...(labels ?? {}) };
  const KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
  const VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;
  for (const a of args) {
    if (a.endsWith('-') && !a.includes('=')) {
      const key = a.slice(0, -1);
      if (!KEY.test(key)) throw new ScenarioError(`label: "${key}" is not a valid label key`);
      delete out[key];
      continue;
    }
    const eq = a.indexOf('=');
    if (eq <= 0) throw new ScenarioError(`label: "${a}" is neither k=v nor k-`);
    const [key, value] = [a.slice(0, eq), a.slice(eq + 1)];
    if (!KEY.test(key)) throw new ScenarioError(`label: "${key}" is not a valid label key`);
    if (!VALUE.test(value)) throw new ScenarioError(`label: "${value}" is not a valid label value (for key ${key})`);
    out[key] = value;
  }
  return out;
}

/** Served ports of a Pod: TCP and UDP container ports (SCTP cannot be served in the lab). */
export function servedPorts(pod: KubeObject): { port: number; protocol: 'TCP' | 'UDP'; name?: string }[] {
  const out: { port: number; protocol: 'TCP' | 'UDP'; name?: string }[] = [];
  const seen = new Set<string>();
  for (const c of (pod.spec?.containers ?? []) as { ports?: { containerPort: number; protocol?: string; name?: string }[] }[]) {
    for (const p of c.ports ?? []) {
      const protocol = p.protocol ?? 'TCP';
      if (protocol !== 'TCP' && protocol !== 'UDP') continue;
      const key = `${p.containerPort}/${protocol}`;
      if (seen.has(key)) continue;
      seen.add(key);
      out.push({ port: p.containerPort, protocol, ...(p.name ? { name: p.name } : {}) });
    }
  }
  return out;
}
