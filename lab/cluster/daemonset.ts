/**
 * The lab's DaemonSet controller decisions (pure): which nodes should run a Pod of a DaemonSet,
 * which Pods to create and delete, in which order a changed template rolls across the nodes
 * (RollingUpdate with maxUnavailable, or OnDelete), and the DaemonSet's status. The adapter
 * (lab/cluster/daemonset-controller.ts) watches DaemonSets, Nodes and Pods and carries these decisions out.
 *
 * A Pod belongs to a DaemonSet through its controller ownerReference (the DaemonSet's uid); its
 * template revision is the `controller-revision-hash` label, a hash of the Pod template.
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import { controllerOf, isControlledBy, templateHash, workloadTemplateProblems } from './owners.js';

export const REVISION_LABEL = 'controller-revision-hash';
/** Kubernetes' DaemonSet controller adds this to every Pod it creates; kept for tools that read it. */
export const GENERATION_LABEL = 'pod-template-generation';

type Obj = Record<string, unknown>;
export { templateHash };
/** The DaemonSet that controls a Pod, by name. */
export const controllingDaemonSet = (pod: KubeObject): string | undefined => controllerOf(pod, 'DaemonSet');
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

export const isOwnedBy = (pod: KubeObject, ds: KubeObject): boolean => isControlledBy(pod, { ...ds, kind: 'DaemonSet' });

/** True for a Pod a DaemonSet created (the podman kubelet runs those; the workload kubelet does not). */
export const isDaemonSetPod = (pod: KubeObject): boolean =>
  controllingDaemonSet(pod) !== undefined;

export const isPodReady = (pod: KubeObject): boolean =>
  ((pod.status?.conditions ?? []) as { type: string; status: string }[]).some((c) => c.type === 'Ready' && c.status === 'True');

/**
 * Everything in a DaemonSet the lab's controller cannot honour, each naming its field (empty when
 * it can). The Pod template is checked like the podman kubelet checks a Pod.
 */
export function daemonSetProblems(ds: KubeObject): string[] {
  const spec = (ds.spec ?? {}) as Obj;
  const problems: string[] = [];
  const known = new Set(['selector', 'template', 'updateStrategy', 'minReadySeconds', 'revisionHistoryLimit']);
  for (const key of Object.keys(spec)) if (!known.has(key)) problems.push(`spec.${key} is not supported by the lab's DaemonSet controller`);
  if (spec.minReadySeconds !== undefined && spec.minReadySeconds !== 0) problems.push('spec.minReadySeconds: only 0 is supported (a Pod is available as soon as it is Ready)');
  const strategy = (isObj(spec.updateStrategy) ? spec.updateStrategy : {}) as Obj;
  const type = strategy.type ?? 'RollingUpdate';
  if (type !== 'RollingUpdate' && type !== 'OnDelete') problems.push(`spec.updateStrategy.type "${String(type)}" is not RollingUpdate or OnDelete`);
  const ru = (isObj(strategy.rollingUpdate) ? strategy.rollingUpdate : {}) as Obj;
  if (ru.maxSurge !== undefined && ru.maxSurge !== 0 && ru.maxSurge !== '0%') problems.push('spec.updateStrategy.rollingUpdate.maxSurge: only 0 is supported (one Pod per node at a time)');
  try {
    maxUnavailable(ds, 1);
  } catch (err) {
    problems.push((err as Error).message);
  }
  problems.push(...workloadTemplateProblems({ ...ds, kind: 'DaemonSet' }));
  // The lab's nodes have no taints, so tolerations change nothing; an affinity would select nodes.
  if (((spec.template as Obj | undefined)?.spec as Obj | undefined)?.affinity !== undefined) problems.push('spec.template.spec.affinity is not supported by the lab (use nodeSelector)');
  return problems;
}

/** maxUnavailable as a number of nodes (an integer, or a percentage of the nodes, rounded up; at least 1). */
export function maxUnavailable(ds: KubeObject, desired: number): number {
  const ru = ((ds.spec as Obj | undefined)?.updateStrategy as Obj | undefined)?.rollingUpdate as Obj | undefined;
  const v = ru?.maxUnavailable ?? 1;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return Math.max(1, v);
  const m = typeof v === 'string' ? /^(\d{1,3})%$/.exec(v) : null;
  if (m) return Math.max(1, Math.ceil((Number(m[1]) / 100) * desired));
  throw new Error(`spec.updateStrategy.rollingUpdate.maxUnavailable ${JSON.stringify(v)} is not an integer or a percentage`);
}

/** Nodes the DaemonSet runs on: all lab nodes whose labels match the template's nodeSelector. */
export function eligibleNodes(ds: KubeObject, nodes: KubeObject[]): string[] {
  const sel = ((((ds.spec as Obj | undefined)?.template as Obj | undefined)?.spec as Obj | undefined)?.nodeSelector ?? {}) as Record<string, string>;
  return nodes
    .filter((n) => Object.entries(sel).every(([k, v]) => n.metadata.labels?.[k] === v))
    .map((n) => n.metadata.name)
    .sort(byNodeOrder);
}

/** node-2 before node-10. */
const byNodeOrder = (a: string, b: string): number => a.localeCompare(b, 'en', { numeric: true });

/** The Pod the DaemonSet runs on a node (its name gets `suffix`). */
export function daemonSetPod(ds: KubeObject, node: string, suffix: string): KubeObject {
  const template = ((ds.spec as Obj).template ?? {}) as { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec?: Obj };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `${ds.metadata.name}-${suffix}`,
      namespace: ds.metadata.namespace ?? 'default',
      labels: { ...(template.metadata?.labels ?? {}), [REVISION_LABEL]: templateHash(ds), [GENERATION_LABEL]: String(ds.metadata.generation ?? 1) },
      ...(template.metadata?.annotations ? { annotations: { ...template.metadata.annotations } } : {}),
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: ds.metadata.name, uid: ds.metadata.uid, controller: true, blockOwnerDeletion: true }],
    } as KubeObject['metadata'],
    spec: { ...structuredClone(template.spec ?? {}), nodeName: node },
  };
}

export interface DaemonSetStatus {
  observedGeneration: number;
  desiredNumberScheduled: number;
  currentNumberScheduled: number;
  numberMisscheduled: number;
  numberReady: number;
  updatedNumberScheduled: number;
  numberAvailable: number;
  numberUnavailable: number;
}

export interface DaemonSetPlan {
  /** Nodes that get a new Pod. */
  create: string[];
  /** Pods to delete, each with why. */
  delete: { name: string; node: string; why: string }[];
  status: DaemonSetStatus;
}

/**
 * What to do now for a DaemonSet, given the nodes and the Pods it owns. Rolling update: a node whose
 * Pod runs an old template has it deleted (and a new one created on the next pass), but only while
 * fewer than maxUnavailable of the DaemonSet's nodes have no Ready Pod; old Pods that are not Ready
 * anyway go first. A Pod on a node the DaemonSet no longer selects, or a second Pod on a node, is
 * deleted. A Failed Pod is deleted and replaced (as Kubernetes does).
 */
export function planDaemonSet(ds: KubeObject, nodes: KubeObject[], owned: KubeObject[]): DaemonSetPlan {
  const hash = templateHash(ds);
  const eligible = eligibleNodes(ds, nodes);
  const byNode = new Map<string, KubeObject[]>();
  for (const p of owned) {
    const n = String(p.spec?.nodeName ?? '');
    byNode.set(n, [...(byNode.get(n) ?? []), p]);
  }
  const create: string[] = [];
  const del: DaemonSetPlan['delete'] = [];
  const isCurrent = (p: KubeObject) => p.metadata.labels?.[REVISION_LABEL] === hash;
  const failed = (p: KubeObject) => p.status?.phase === 'Failed';
  let misscheduled = 0;
  for (const [node, pods] of byNode) {
    if (!eligible.includes(node)) {
      misscheduled++;
      for (const p of pods) del.push({ name: p.metadata.name, node, why: 'node not selected by the DaemonSet' });
    }
  }
  // The Pod kept per node: a current one if any (Ready first), else the oldest; the rest go.
  const kept = new Map<string, KubeObject>();
  for (const node of eligible) {
    const pods = (byNode.get(node) ?? []).filter((p) => {
      if (!failed(p)) return true;
      del.push({ name: p.metadata.name, node, why: 'Pod failed' });
      return false;
    });
    if (pods.length === 0) {
      if (!(byNode.get(node) ?? []).length) create.push(node);
      continue;
    }
    const rank = (p: KubeObject) => (isCurrent(p) ? 0 : 2) + (isPodReady(p) ? 0 : 1);
    const sorted = [...pods].sort((a, b) => rank(a) - rank(b) || String(a.metadata.creationTimestamp ?? '').localeCompare(String(b.metadata.creationTimestamp ?? '')));
    kept.set(node, sorted[0]!);
    for (const p of sorted.slice(1)) del.push({ name: p.metadata.name, node, why: 'more than one Pod on the node' });
  }
  const strategy = ((ds.spec as Obj).updateStrategy as Obj | undefined)?.type ?? 'RollingUpdate';
  if (strategy === 'RollingUpdate') {
    const limit = maxUnavailable(ds, eligible.length);
    let unavailable = eligible.filter((n) => !kept.get(n) || !isPodReady(kept.get(n)!)).length;
    const old = eligible.filter((n) => kept.get(n) && !isCurrent(kept.get(n)!));
    // Old Pods that are not Ready cost nothing to replace.
    for (const node of old.filter((n) => !isPodReady(kept.get(n)!))) del.push({ name: kept.get(node)!.metadata.name, node, why: 'old template (not Ready)' });
    for (const node of old.filter((n) => isPodReady(kept.get(n)!))) {
      if (unavailable >= limit) break;
      unavailable++;
      del.push({ name: kept.get(node)!.metadata.name, node, why: `old template (rolling update, maxUnavailable ${limit})` });
    }
  }
  const scheduled = eligible.filter((n) => kept.has(n));
  const ready = scheduled.filter((n) => isPodReady(kept.get(n)!)).length;
  return {
    create,
    delete: del,
    status: {
      observedGeneration: Number(ds.metadata.generation ?? 1),
      desiredNumberScheduled: eligible.length,
      currentNumberScheduled: scheduled.length,
      numberMisscheduled: misscheduled,
      numberReady: ready,
      updatedNumberScheduled: scheduled.filter((n) => isCurrent(kept.get(n)!)).length,
      numberAvailable: ready,
      numberUnavailable: eligible.length - ready,
    },
  };
}
