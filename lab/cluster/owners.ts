/**
 * Which workload controller owns a Pod (its controller ownerReference), and which Pods the lab runs
 * from an image with podman (those of a DaemonSet or a Deployment) rather than as a workload
 * process (every other Pod); the random end of the names they give their Pods.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { KubeObject } from '../../daemon/policy/types.js';
import { stableJson } from '../restclient.js';
import { podSpecProblems } from './podspec.js';

type Obj = Record<string, unknown>;
export interface OwnerRef { apiVersion?: string; kind?: string; name?: string; uid?: string; controller?: boolean }

/** metadata.ownerReferences (not in the shared ObjectMeta type). */
export const ownerRefs = (o: KubeObject): OwnerRef[] => ((o.metadata as { ownerReferences?: OwnerRef[] }).ownerReferences ?? []);

/** The name of the object of `kind` that controls `o`, if one does. */
export const controllerOf = (o: KubeObject, kind: string): string | undefined => ownerRefs(o).find((r) => r.kind === kind && r.controller === true)?.name;

/** Controlled by exactly this object (by uid: a re-created owner of the same name owns nothing yet). */
export const isControlledBy = (o: KubeObject, owner: KubeObject): boolean =>
  ownerRefs(o).some((r) => r.kind === owner.kind && r.uid === owner.metadata.uid && r.controller === true);

/** A Pod the podman kubelet runs from its image: one a DaemonSet or a Deployment created. */
export const isImagePod = (pod: KubeObject): boolean => controllerOf(pod, 'DaemonSet') !== undefined || controllerOf(pod, 'Deployment') !== undefined;

/** A hash of a workload's Pod template (its revision): equal templates hash equally whatever their key order. */
export const templateHash = (workload: KubeObject): string => createHash('sha256').update(stableJson((workload.spec as Obj | undefined)?.template ?? {})).digest('hex').slice(0, 10);

/** The random end of a controller-made Pod name: 5 characters from Kubernetes' alphabet (no vowels). */
export const podNameSuffix = (): string => [...randomBytes(5)].map((b) => 'bcdfghjklmnpqrstvwxz2456789'[b % 27]).join('');

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * What a workload's selector and Pod template must be for the lab's controllers, each problem
 * naming its field: matchLabels only, matching the template's labels; the template's Pod as the
 * podman kubelet can run it (no nodeName: the controller or the scheduler places it).
 */
export function workloadTemplateProblems(workload: KubeObject): string[] {
  const spec = (workload.spec ?? {}) as Obj;
  const problems: string[] = [];
  const selector = isObj(spec.selector) ? spec.selector : undefined;
  if (!selector || !isObj(selector.matchLabels) || Object.keys(selector).some((k) => k !== 'matchLabels')) problems.push('spec.selector: only matchLabels is supported');
  const template = isObj(spec.template) ? spec.template : undefined;
  const labels = (isObj(template?.metadata) ? (template!.metadata as Obj).labels : undefined) as Record<string, string> | undefined;
  if (selector && isObj(selector.matchLabels)) {
    for (const [k, v] of Object.entries(selector.matchLabels)) {
      if (labels?.[k] !== v) problems.push(`spec.selector.matchLabels ${k}=${String(v)} does not match spec.template.metadata.labels`);
    }
  }
  if (!template) return [...problems, 'spec.template is required'];
  const tspec = (template.spec ?? {}) as Obj;
  if (tspec.nodeName !== undefined) problems.push(`spec.template.spec.nodeName must not be set (the ${workload.kind === 'DaemonSet' ? 'controller places one Pod per node' : 'scheduler places the Pods'})`);
  const pod: KubeObject = { apiVersion: 'v1', kind: 'Pod', metadata: { name: workload.metadata.name }, spec: tspec };
  for (const p of podSpecProblems(pod)) problems.push(p.replace(/^spec\./, 'spec.template.spec.'));
  return problems;
}
