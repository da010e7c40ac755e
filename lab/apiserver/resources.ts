// The catalogue of served resources: built-in kinds, plus resources defined by
// apiextensions.k8s.io/v1 CustomResourceDefinition objects (the Antrea and network-policy-api
// CRDs are provided as seeds). All versions of a resource share one storage key.
import { sluiceCrds } from '../../install/crds.js';
import type { KObject } from './store.js';

export interface ResourceType {
  group: string;            // '' for the core group
  version: string;
  apiVersion: string;       // 'v1' or '<group>/<version>'
  plural: string;
  singular: string;
  kind: string;
  listKind: string;
  namespaced: boolean;
  /** status is written only through the /status subresource; writes to the main resource keep it. */
  statusSubresource: boolean;
  shortNames: string[];
  /** '<group>/<plural>': the same for every version of the resource. */
  storageKey: string;
}

function builtin(group: string, version: string, plural: string, kind: string, namespaced: boolean,
  statusSubresource: boolean, shortNames: string[] = []): ResourceType {
  return {
    group, version, apiVersion: group ? `${group}/${version}` : version, plural, singular: kind.toLowerCase(), kind,
    listKind: `${kind}List`, namespaced, statusSubresource, shortNames, storageKey: `${group}/${plural}`,
  };
}

export const builtinTypes: readonly ResourceType[] = [
  builtin('', 'v1', 'pods', 'Pod', true, true, ['po']),
  builtin('', 'v1', 'namespaces', 'Namespace', false, true, ['ns']),
  builtin('', 'v1', 'nodes', 'Node', false, true, ['no']),
  builtin('', 'v1', 'services', 'Service', true, true, ['svc']),
  builtin('', 'v1', 'serviceaccounts', 'ServiceAccount', true, false, ['sa']),
  builtin('', 'v1', 'endpoints', 'Endpoints', true, false, ['ep']),
  builtin('discovery.k8s.io', 'v1', 'endpointslices', 'EndpointSlice', true, false),
  builtin('networking.k8s.io', 'v1', 'networkpolicies', 'NetworkPolicy', true, false, ['netpol']),
  // The Service ranges (Kubernetes 1.33: served, the "kubernetes" one created from the flag).
  builtin('networking.k8s.io', 'v1', 'servicecidrs', 'ServiceCIDR', false, true),
  builtin('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition', false, true, ['crd', 'crds']),
  // What an installation manifest (install/sluice.yaml) creates, and what its DaemonSet's Pods
  // come from. Stored and served only: the lab does not enforce RBAC.
  builtin('', 'v1', 'configmaps', 'ConfigMap', true, false, ['cm']),
  builtin('', 'v1', 'secrets', 'Secret', true, false),
  builtin('', 'v1', 'events', 'Event', true, false, ['ev']),
  builtin('events.k8s.io', 'v1', 'events', 'Event', true, false, ['ev']),
  builtin('rbac.authorization.k8s.io', 'v1', 'clusterroles', 'ClusterRole', false, false),
  builtin('rbac.authorization.k8s.io', 'v1', 'clusterrolebindings', 'ClusterRoleBinding', false, false),
  builtin('rbac.authorization.k8s.io', 'v1', 'roles', 'Role', true, false),
  builtin('rbac.authorization.k8s.io', 'v1', 'rolebindings', 'RoleBinding', true, false),
  builtin('apps', 'v1', 'daemonsets', 'DaemonSet', true, true, ['ds']),
  builtin('apps', 'v1', 'controllerrevisions', 'ControllerRevision', true, false),
  builtin('apps', 'v1', 'deployments', 'Deployment', true, true, ['deploy']),
  // Stored and served only: the lab evicts nothing (no drains), so no budget is ever consulted.
  builtin('policy', 'v1', 'poddisruptionbudgets', 'PodDisruptionBudget', true, true, ['pdb']),
  builtin('scheduling.k8s.io', 'v1', 'priorityclasses', 'PriorityClass', false, false, ['pc']),
  // What leader election locks on (the sluice-controller's replicas, kube-controller-manager's).
  builtin('coordination.k8s.io', 'v1', 'leases', 'Lease', true, false),
  // Where extension API servers register their groups (the aggregation layer, aggregator.ts).
  builtin('apiregistration.k8s.io', 'v1', 'apiservices', 'APIService', false, true),
];

export const crdStorageKey = 'apiextensions.k8s.io/customresourcedefinitions';

export const verbs = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];

interface CrdVersion { name?: unknown; served?: unknown; storage?: unknown; subresources?: { status?: unknown } }
interface CrdSpec {
  group?: unknown;
  scope?: unknown;
  names?: { plural?: unknown; singular?: unknown; kind?: unknown; listKind?: unknown; shortNames?: unknown };
  versions?: CrdVersion[];
}

/** A Kubernetes API version name (v1, v1beta1, v1alpha2): major, stability, stability number. */
const KUBE_VERSION = /^v([0-9]+)(?:(alpha|beta)([0-9]+))?$/;

/** Which field of a CustomResourceDefinition is unacceptable and why, or undefined when it is fine. */
export function crdProblem(crd: KObject): { field: string; message: string } | undefined {
  const spec = crd.spec as CrdSpec | undefined;
  if (!spec || typeof spec !== 'object') return { field: 'spec', message: 'Required value' };
  if (typeof spec.group !== 'string' || !spec.group.includes('.')) return { field: 'spec.group', message: 'Invalid value: should be a domain with at least one dot' };
  if (typeof spec.names?.plural !== 'string' || spec.names.plural === '') return { field: 'spec.names.plural', message: 'Required value' };
  if (typeof spec.names.kind !== 'string' || spec.names.kind === '') return { field: 'spec.names.kind', message: 'Required value' };
  if (spec.scope !== 'Namespaced' && spec.scope !== 'Cluster') return { field: 'spec.scope', message: 'Unsupported value: must be "Namespaced" or "Cluster"' };
  if (!Array.isArray(spec.versions) || spec.versions.length === 0) return { field: 'spec.versions', message: 'Required value' };
  if (spec.versions.some((v) => typeof v.name !== 'string' || !KUBE_VERSION.test(v.name))) {
    return { field: 'spec.versions[].name', message: 'Invalid value: must look like v1, v1beta1 or v1alpha2' };
  }
  if (crd.metadata.name !== `${spec.names.plural}.${spec.group}`) {
    return { field: 'metadata.name', message: `Invalid value: "${crd.metadata.name}": must be spec.names.plural+"."+spec.group` };
  }
  return undefined;
}

/** The served (group, version, resource) triples of a valid CRD. */
export function typesFromCrd(crd: KObject): ResourceType[] {
  if (crdProblem(crd)) return [];
  const spec = crd.spec as Required<CrdSpec> & { names: Record<string, unknown> };
  const group = spec.group as string;
  const plural = spec.names.plural as string;
  const kind = spec.names.kind as string;
  const shortNames = Array.isArray(spec.names.shortNames) ? spec.names.shortNames.map(String) : [];
  return spec.versions.filter((v) => v.served !== false).map((v) => ({
    group, version: v.name as string, apiVersion: `${group}/${v.name as string}`, plural,
    singular: typeof spec.names.singular === 'string' ? spec.names.singular : kind.toLowerCase(),
    kind, listKind: typeof spec.names.listKind === 'string' ? spec.names.listKind : `${kind}List`,
    namespaced: spec.scope === 'Namespaced', statusSubresource: Boolean(v.subresources?.status), shortNames,
    storageKey: `${group}/${plural}`,
  }));
}

/** The CRDs installCRDs:true creates: every crd.antrea.io and policy.networking.k8s.io resource sluice
 * watches, the same definitions as install/crds.yaml (one source: install/crds.ts). */
export function seedCrds(): KObject[] {
  return sluiceCrds();
}

/** Kubernetes version priority: GA > beta > alpha, then higher numbers first. Negative when a sorts first. */
export function compareKubeVersions(a: string, b: string): number {
  const rank = (v: string): [number, number, number] => {
    const m = KUBE_VERSION.exec(v);
    if (!m) return [0, 0, 0];
    return [m[2] === undefined ? 3 : m[2] === 'beta' ? 2 : 1, Number(m[1]), Number(m[3] ?? 0)];
  };
  const [ra, rb] = [rank(a), rank(b)];
  for (let i = 0; i < 3; i++) if (ra[i] !== rb[i]) return rb[i]! - ra[i]!;
  return a.localeCompare(b);
}
