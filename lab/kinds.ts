/**
 * The resource kinds the lab's API server serves, and how a kind name typed on the command line
 * (or an object's apiVersion/kind) maps to a REST path. Pure: no I/O.
 */
import { POLICY_INPUT_RESOURCES } from '../daemon/enforcement/watch/resources.js';

export interface ResourceKind {
  group: string; // '' for the core group
  version: string;
  kind: string;
  plural: string;
  namespaced: boolean;
  /** Extra names accepted on the command line (singular, short names). */
  aliases: string[];
}

const K = (group: string, version: string, kind: string, plural: string, namespaced: boolean, ...aliases: string[]): ResourceKind => ({
  group, version, kind, plural, namespaced, aliases,
});

/** First entry wins when a bare name is ambiguous (e.g. "networkpolicies" = the Kubernetes one). */
export const KINDS: ResourceKind[] = [
  K('', 'v1', 'Namespace', 'namespaces', false, 'namespace', 'ns'),
  K('', 'v1', 'Node', 'nodes', false, 'node', 'no'),
  K('', 'v1', 'Pod', 'pods', true, 'pod', 'po'),
  K('', 'v1', 'Service', 'services', true, 'service', 'svc'),
  K('', 'v1', 'ServiceAccount', 'serviceaccounts', true, 'serviceaccount', 'sa'),
  K('', 'v1', 'ConfigMap', 'configmaps', true, 'configmap', 'cm'),
  K('', 'v1', 'Secret', 'secrets', true, 'secret'),
  K('', 'v1', 'Event', 'events', true, 'event', 'ev'),
  K('', 'v1', 'Endpoints', 'endpoints', true, 'ep'),
  K('coordination.k8s.io', 'v1', 'Lease', 'leases', true, 'lease'),
  K('apiregistration.k8s.io', 'v1', 'APIService', 'apiservices', false, 'apiservice'),
  K('rbac.authorization.k8s.io', 'v1', 'ClusterRole', 'clusterroles', false, 'clusterrole'),
  K('rbac.authorization.k8s.io', 'v1', 'ClusterRoleBinding', 'clusterrolebindings', false, 'clusterrolebinding'),
  K('rbac.authorization.k8s.io', 'v1', 'Role', 'roles', true, 'role'),
  K('rbac.authorization.k8s.io', 'v1', 'RoleBinding', 'rolebindings', true, 'rolebinding'),
  K('apps', 'v1', 'DaemonSet', 'daemonsets', true, 'daemonset', 'ds'),
  K('apps', 'v1', 'ControllerRevision', 'controllerrevisions', true, 'controllerrevision'),
  K('apps', 'v1', 'Deployment', 'deployments', true, 'deployment', 'deploy'),
  K('policy', 'v1', 'PodDisruptionBudget', 'poddisruptionbudgets', true, 'poddisruptionbudget', 'pdb'),
  K('apiextensions.k8s.io', 'v1', 'CustomResourceDefinition', 'customresourcedefinitions', false, 'customresourcedefinition', 'crd', 'crds'),
  K('discovery.k8s.io', 'v1', 'EndpointSlice', 'endpointslices', true, 'endpointslice'),
  K('networking.k8s.io', 'v1', 'NetworkPolicy', 'networkpolicies', true, 'networkpolicy', 'netpol'),
  K('networking.k8s.io', 'v1', 'ServiceCIDR', 'servicecidrs', false, 'servicecidr'),
  K('crd.antrea.io', 'v1beta1', 'Tier', 'tiers', false, 'tier', 'tr'),
  K('crd.antrea.io', 'v1beta1', 'ClusterNetworkPolicy', 'clusternetworkpolicies', false, 'clusternetworkpolicy', 'acnp'),
  K('crd.antrea.io', 'v1beta1', 'NetworkPolicy', 'networkpolicies', true, 'anp.crd.antrea.io', 'antreanetworkpolicy', 'annp'),
  K('crd.antrea.io', 'v1beta1', 'ClusterGroup', 'clustergroups', false, 'clustergroup', 'cg'),
  K('crd.antrea.io', 'v1beta1', 'Group', 'groups', true, 'group', 'grp'),
  K('policy.networking.k8s.io', 'v1alpha1', 'AdminNetworkPolicy', 'adminnetworkpolicies', false, 'adminnetworkpolicy', 'anp'),
  K('policy.networking.k8s.io', 'v1alpha1', 'BaselineAdminNetworkPolicy', 'baselineadminnetworkpolicies', false, 'baselineadminnetworkpolicy', 'banp'),
  K('policy.networking.k8s.io', 'v1alpha2', 'ClusterNetworkPolicy', 'clusternetworkpolicies', false, 'cnp'),
];

export class UnknownKindError extends Error {
  override name = 'UnknownKindError';
}

export const apiVersionOf = (k: ResourceKind): string => (k.group ? `${k.group}/${k.version}` : k.version);

/**
 * Resolves what a user typed: "pods", "pod", "po", "Pod", or a qualified "networkpolicies.crd.antrea.io".
 */
export function resolveKind(name: string): ResourceKind {
  const n = name.trim();
  const lower = n.toLowerCase();
  const dot = lower.indexOf('.');
  if (dot > 0) {
    const [base, group] = [lower.slice(0, dot), lower.slice(dot + 1)];
    const hit = KINDS.find((k) => k.group === group && matchesName(k, base));
    if (hit) return hit;
  }
  const hit = KINDS.find((k) => matchesName(k, lower));
  if (hit) return hit;
  throw new UnknownKindError(
    `unknown kind "${name}": known kinds are ${[...new Set(KINDS.map((k) => k.plural))].join(', ')} ` +
      `(qualify with the group, e.g. networkpolicies.crd.antrea.io)`,
  );
}

function matchesName(k: ResourceKind, lower: string): boolean {
  return k.plural === lower || k.kind.toLowerCase() === lower || k.aliases.includes(lower);
}

/** The kind of a manifest object, from its apiVersion and kind. */
export function kindOfObject(obj: { apiVersion?: string; kind?: string }): ResourceKind {
  const [group, version] = splitApiVersion(obj.apiVersion ?? '');
  const exact = KINDS.find((k) => k.group === group && k.kind === obj.kind && k.version === version);
  if (exact) return exact;
  // Same group and kind served at another version (e.g. crd.antrea.io v1alpha1 Tier): keep the
  // object's own version in the path; the API server decides whether it serves it.
  const sameKind = KINDS.find((k) => k.group === group && k.kind === obj.kind);
  if (sameKind) return { ...sameKind, version };
  throw new UnknownKindError(`unknown kind ${obj.kind} in apiVersion ${obj.apiVersion}: the lab's API server does not serve it`);
}

export function splitApiVersion(apiVersion: string): [string, string] {
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? ['', apiVersion] : [apiVersion.slice(0, slash), apiVersion.slice(slash + 1)];
}

/** REST path of a collection (namespace undefined = across all namespaces) or of one object. */
export function resourcePath(k: ResourceKind, namespace?: string | undefined, name?: string): string {
  const base = k.group ? `/apis/${k.group}/${k.version}` : `/api/${k.version}`;
  if (k.namespaced && namespace === undefined && name !== undefined) {
    throw new Error(`${k.kind} ${name}: a namespaced object needs a namespace`);
  }
  const ns = k.namespaced && namespace !== undefined ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${base}${ns}/${k.plural}${name !== undefined ? `/${encodeURIComponent(name)}` : ''}`;
}

/** "ns/name" or "name" (namespace defaults to "default" for namespaced kinds). */
export function parseObjectRef(k: ResourceKind, ref: string): { namespace?: string | undefined; name: string } {
  const parts = ref.split('/');
  if (parts.length > 2 || parts.some((p) => !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(p))) {
    throw new Error(`"${ref}": expected ${k.namespaced ? 'namespace/name or name' : 'name'}`);
  }
  if (parts.length === 2) {
    if (!k.namespaced) throw new Error(`"${ref}": ${k.kind} is not namespaced, give only its name`);
    return { namespace: parts[0]!, name: parts[1]! };
  }
  return k.namespaced ? { namespace: 'default', name: parts[0]! } : { name: parts[0]! };
}

/**
 * The kinds the policy engine reads (the agents' watched resources): what a snapshot of the lab is
 * compared on. The install's ConfigMaps, RBAC, DaemonSets and CRDs are not policy inputs.
 */
export const POLICY_INPUT_KINDS: ResourceKind[] = KINDS.filter((k) => POLICY_INPUT_RESOURCES.some((r) => r.group === k.group && r.kind === k.kind));
