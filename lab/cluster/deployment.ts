/**
 * The lab's Deployment controller decisions (pure): how many Pods of which template to create, which
 * to delete, and the Deployment's status. The adapter (lab/cluster/deployment-controller.ts) watches
 * Deployments and Pods and carries them out; the scheduler places the Pods.
 *
 * Kubernetes puts a ReplicaSet per template between a Deployment and its Pods; the lab leaves that
 * layer out: a Pod is controlled by the Deployment itself (its uid), and its template revision is
 * the `pod-template-hash` label, as the ReplicaSet's Pods carry it. The Pods are what the lab runs
 * (hostNetwork image Pods, through the podman kubelet), so the template is checked as it checks them.
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import { isPodReady } from './daemonset.js';
import { isControlledBy, templateHash, workloadTemplateProblems } from './owners.js';

export const TEMPLATE_HASH_LABEL = 'pod-template-hash';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

export const isDeploymentPod = (pod: KubeObject, deployment: KubeObject): boolean => isControlledBy(pod, { ...deployment, kind: 'Deployment' });

/** Everything in a Deployment the lab's controller cannot honour, each naming its field (empty when it can). */
export function deploymentProblems(d: KubeObject): string[] {
  const spec = (d.spec ?? {}) as Obj;
  const problems: string[] = [];
  const known = new Set(['replicas', 'selector', 'template', 'strategy', 'minReadySeconds', 'revisionHistoryLimit', 'progressDeadlineSeconds']);
  for (const key of Object.keys(spec)) if (!known.has(key)) problems.push(`spec.${key} is not supported by the lab's Deployment controller`);
  if (spec.replicas !== undefined && !(Number.isInteger(spec.replicas) && (spec.replicas as number) >= 0)) problems.push(`spec.replicas ${JSON.stringify(spec.replicas)} is not a count`);
  if (spec.minReadySeconds !== undefined && spec.minReadySeconds !== 0) problems.push('spec.minReadySeconds: only 0 is supported (a Pod is available as soon as it is Ready)');
  const strategy = (isObj(spec.strategy) ? spec.strategy : {}) as Obj;
  const type = strategy.type ?? 'RollingUpdate';
  if (type !== 'RollingUpdate' && type !== 'Recreate') problems.push(`spec.strategy.type "${String(type)}" is not RollingUpdate or Recreate`);
  const ru = (isObj(strategy.rollingUpdate) ? strategy.rollingUpdate : {}) as Obj;
  // Surge would need room for a second host-network Pod of the same ports; the lab keeps it simple.
  if (type === 'RollingUpdate' && ru.maxSurge !== 0 && ru.maxSurge !== '0%') problems.push('spec.strategy.rollingUpdate.maxSurge: only 0 is supported (old Pods go before new ones come)');
  try {
    maxUnavailable(d, 1);
  } catch (err) {
    problems.push((err as Error).message);
  }
  problems.push(...workloadTemplateProblems({ ...d, kind: 'Deployment' }));
  return problems;
}

const replicasOf = (d: KubeObject): number => (typeof d.spec?.replicas === 'number' ? d.spec.replicas : 1);

/** maxUnavailable as a number of Pods (an integer, or a percentage of the replicas rounded down, as Kubernetes does; at least 1). */
export function maxUnavailable(d: KubeObject, replicas: number): number {
  const ru = ((d.spec as Obj | undefined)?.strategy as Obj | undefined)?.rollingUpdate as Obj | undefined;
  const v = ru?.maxUnavailable ?? '25%';
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return Math.max(1, v);
  const m = typeof v === 'string' ? /^(\d{1,3})%$/.exec(v) : null;
  if (m) return Math.max(1, Math.floor((Number(m[1]) / 100) * replicas));
  throw new Error(`spec.strategy.rollingUpdate.maxUnavailable ${JSON.stringify(v)} is not an integer or a percentage`);
}

/** A new Pod of the Deployment's current template (its name gets `suffix`); the scheduler gives it a node. */
export function deploymentPod(d: KubeObject, suffix: string): KubeObject {
  const template = ((d.spec as Obj).template ?? {}) as { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec?: Obj };
  const hash = templateHash(d);
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: `${d.metadata.name}-${hash}-${suffix}`,
      namespace: d.metadata.namespace ?? 'default',
      labels: { ...(template.metadata?.labels ?? {}), [TEMPLATE_HASH_LABEL]: hash },
      ...(template.metadata?.annotations ? { annotations: { ...template.metadata.annotations } } : {}),
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: d.metadata.name, uid: d.metadata.uid, controller: true, blockOwnerDeletion: true }],
    } as KubeObject['metadata'],
    spec: structuredClone(template.spec ?? {}),
  };
}

export interface DeploymentStatus {
  observedGeneration: number;
  replicas: number;
  updatedReplicas: number;
  readyReplicas: number;
  availableReplicas: number;
  unavailableReplicas: number;
}

export interface DeploymentPlan {
  /** How many Pods of the current template to create. */
  create: number;
  /** Pods to delete, each with why. */
  delete: { name: string; why: string }[];
  status: DeploymentStatus;
}

/**
 * What to do now for a Deployment, given the Pods it owns (not terminating). Current-template Pods
 * are kept up to `replicas`; Failed Pods are replaced. Pods of an old template go (not-Ready ones
 * first, at once) while fewer than maxUnavailable of the replicas are unavailable (RollingUpdate
 * with maxSurge 0), or all at once (Recreate); a new one is created only in a gap they leave.
 */
export function planDeployment(d: KubeObject, owned: KubeObject[]): DeploymentPlan {
  const hash = templateHash(d);
  const replicas = replicasOf(d);
  const del: DeploymentPlan['delete'] = [];
  const live = owned.filter((p) => {
    if (p.status?.phase !== 'Failed') return true;
    del.push({ name: p.metadata.name, why: 'Pod failed' });
    return false;
  });
  const byAge = (a: KubeObject, b: KubeObject) => String(a.metadata.creationTimestamp ?? '').localeCompare(String(b.metadata.creationTimestamp ?? '')) || a.metadata.name.localeCompare(b.metadata.name);
  // Not Ready first, then the newest: what a scale-down removes.
  const removalOrder = (pods: KubeObject[]) => [...pods].sort((a, b) => Number(isPodReady(a)) - Number(isPodReady(b)) || byAge(b, a));
  const current = live.filter((p) => p.metadata.labels?.[TEMPLATE_HASH_LABEL] === hash);
  let old = live.filter((p) => p.metadata.labels?.[TEMPLATE_HASH_LABEL] !== hash);
  const keptCurrent = removalOrder(current).slice(Math.max(0, current.length - replicas));
  for (const p of removalOrder(current).slice(0, Math.max(0, current.length - replicas))) del.push({ name: p.metadata.name, why: `more than ${replicas} replicas` });
  const strategy = ((d.spec as Obj).strategy as Obj | undefined)?.type ?? 'RollingUpdate';
  if (strategy === 'Recreate') {
    for (const p of old) del.push({ name: p.metadata.name, why: 'old template (Recreate)' });
    old = [];
  } else {
    const limit = maxUnavailable(d, replicas);
    const ready = [...keptCurrent, ...old].filter(isPodReady).length;
    let unavailable = Math.max(0, replicas - ready);
    const going: KubeObject[] = [];
    for (const p of removalOrder(old)) {
      if (isPodReady(p)) {
        if (unavailable >= limit) continue;
        unavailable++;
      }
      going.push(p);
      del.push({ name: p.metadata.name, why: isPodReady(p) ? `old template (rolling update, maxUnavailable ${limit})` : 'old template (not Ready)' });
    }
    old = old.filter((p) => !going.includes(p));
  }
  const create = Math.max(0, replicas - keptCurrent.length - old.length);
  const ready = [...keptCurrent, ...old].filter(isPodReady).length;
  return {
    create,
    delete: del,
    status: {
      observedGeneration: Number(d.metadata.generation ?? 1),
      replicas: keptCurrent.length + old.length,
      updatedReplicas: keptCurrent.length,
      readyReplicas: ready,
      availableReplicas: ready,
      unavailableReplicas: Math.max(0, replicas - ready),
    },
  };
}
