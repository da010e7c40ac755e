/**
 * Multi-step scenarios (pure): a scenario is ordinary multi-document YAML; a document of kind
 * `Step` (apiVersion test.sluice.dev/v1) starts a new step, and the documents after it are
 * applied in that step. A Step may also delete objects and change labels:
 *
 *   apiVersion: test.sluice.dev/v1
 *   kind: Step
 *   metadata: {name: relabel}
 *   label:  [{kind: Pod, namespace: x, name: c, set: {pod: a}, remove: [role]}]
 *   delete: [{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, namespace: "y", name: p}]
 *
 * The documents before the first Step form step 0 ("initial").
 */
import type { KubeObject } from '../../daemon/policy/types.js';

export const STEP_API_VERSION = 'test.sluice.dev/v1';

export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string | undefined;
  name: string;
}

export interface LabelChange {
  kind: 'Pod' | 'Namespace';
  namespace?: string | undefined;
  name: string;
  set: Record<string, string>;
  remove: string[];
}

export interface ScenarioStep {
  name: string;
  apply: KubeObject[];
  delete: ObjectRef[];
  label: LabelChange[];
}

export class StepError extends Error {
  override name = 'StepError';
}

const isStep = (o: KubeObject): boolean => o.kind === 'Step' && o.apiVersion === STEP_API_VERSION;

/** Splits loaded documents into steps; throws StepError naming every malformed Step. */
export function splitSteps(objects: KubeObject[]): ScenarioStep[] {
  const steps: ScenarioStep[] = [{ name: 'initial', apply: [], delete: [], label: [] }];
  const problems: string[] = [];
  for (const o of objects) {
    if (o.kind === 'Step' && o.apiVersion !== STEP_API_VERSION) problems.push(`Step ${o.metadata?.name}: apiVersion must be ${STEP_API_VERSION}`);
    if (!isStep(o)) {
      steps[steps.length - 1]!.apply.push(o);
      continue;
    }
    const where = `Step ${o.metadata?.name ?? `#${steps.length}`}`;
    const step: ScenarioStep = { name: String(o.metadata?.name ?? `step-${steps.length}`), apply: [], delete: [], label: [] };
    const raw = o as unknown as { label?: unknown; delete?: unknown };
    for (const [i, l] of asArray(raw.label, `${where}.label`, problems).entries()) {
      const at = `${where}.label[${i}]`;
      const v = l as Partial<LabelChange> & { set?: unknown; remove?: unknown };
      if (v.kind !== 'Pod' && v.kind !== 'Namespace') problems.push(`${at}.kind: must be Pod or Namespace`);
      if (typeof v.name !== 'string' || !v.name) problems.push(`${at}.name: required`);
      if (v.kind === 'Pod' && typeof v.namespace !== 'string') problems.push(`${at}.namespace: required for a Pod`);
      const set = v.set ?? {};
      if (typeof set !== 'object' || Array.isArray(set) || Object.values(set).some((x) => typeof x !== 'string')) problems.push(`${at}.set: must map label keys to strings`);
      const remove = v.remove ?? [];
      if (!Array.isArray(remove) || remove.some((x) => typeof x !== 'string')) problems.push(`${at}.remove: must be a list of label keys`);
      step.label.push({ kind: v.kind as LabelChange['kind'], ...(v.namespace ? { namespace: v.namespace } : {}), name: String(v.name), set: set as Record<string, string>, remove: remove as string[] });
    }
    for (const [i, d] of asArray(raw.delete, `${where}.delete`, problems).entries()) {
      const v = d as Partial<ObjectRef>;
      if (typeof v.apiVersion !== 'string' || typeof v.kind !== 'string' || typeof v.name !== 'string') problems.push(`${where}.delete[${i}]: needs apiVersion, kind and name`);
      else step.delete.push({ apiVersion: v.apiVersion, kind: v.kind, name: v.name, ...(v.namespace ? { namespace: v.namespace } : {}) });
    }
    steps.push(step);
  }
  if (problems.length) throw new StepError(problems.join('\n'));
  return steps;
}

function asArray(v: unknown, field: string, problems: string[]): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) {
    problems.push(`${field}: must be a list`);
    return [];
  }
  return v;
}

/** The labels after a change. */
export function changedLabels(current: Record<string, string> | undefined, change: LabelChange): Record<string, string> {
  const out = { ...(current ?? {}), ...change.set };
  for (const k of change.remove) delete out[k];
  return out;
}
