/**
 * The API resources the agent watches to feed the policy engine: the cluster view (Pods of all
 * nodes, Namespaces, Nodes, Services, EndpointSlices, ServiceAccounts) and every policy kind.
 * CRD-backed kinds may be absent from a cluster: they are watched once they appear. Pure.
 */
export interface WatchedResource {
  /** apiVersion stamped on objects (list items carry none). */
  apiVersion: string;
  kind: string;
  /** Cluster-wide collection path, e.g. /api/v1/pods, /apis/crd.antrea.io/v1beta1/tiers. */
  path: string;
  /** Group ('' = core), version and plural, for the lister. */
  group: string;
  version: string;
  plural: string;
  /** Served by a CustomResourceDefinition: a 404 means "not installed (yet)", not an error. */
  optional: boolean;
}

function resource(apiVersion: string, kind: string, plural: string, optional: boolean): WatchedResource {
  const slash = apiVersion.indexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  const path = group === '' ? `/api/${version}/${plural}` : `/apis/${group}/${version}/${plural}`;
  return { apiVersion, kind, path, group, version, plural, optional };
}

export const WATCHED_RESOURCES: readonly WatchedResource[] = [
  resource('v1', 'Namespace', 'namespaces', false),
  resource('v1', 'Node', 'nodes', false),
  resource('v1', 'Pod', 'pods', false),
  resource('v1', 'Service', 'services', false),
  resource('v1', 'ServiceAccount', 'serviceaccounts', false),
  resource('discovery.k8s.io/v1', 'EndpointSlice', 'endpointslices', false),
  resource('networking.k8s.io/v1', 'NetworkPolicy', 'networkpolicies', false),
  resource('crd.antrea.io/v1beta1', 'Tier', 'tiers', true),
  resource('crd.antrea.io/v1beta1', 'ClusterGroup', 'clustergroups', true),
  resource('crd.antrea.io/v1beta1', 'Group', 'groups', true),
  resource('crd.antrea.io/v1beta1', 'ClusterNetworkPolicy', 'clusternetworkpolicies', true),
  resource('crd.antrea.io/v1beta1', 'NetworkPolicy', 'networkpolicies', true),
  resource('policy.networking.k8s.io/v1alpha1', 'AdminNetworkPolicy', 'adminnetworkpolicies', true),
  resource('policy.networking.k8s.io/v1alpha1', 'BaselineAdminNetworkPolicy', 'baselineadminnetworkpolicies', true),
  resource('policy.networking.k8s.io/v1alpha2', 'ClusterNetworkPolicy', 'clusternetworkpolicies', true),
];

/** Whether an error from a list/watch call is an HTTP 404 (resource not served). */
export function isNotFound(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; statusCode?: unknown; status?: unknown; message?: unknown };
  if (e.code === 404 || e.statusCode === 404 || e.status === 404) return true;
  return typeof e.message === 'string' && /\b(HTTP-Code: 404|404 Not Found|status code 404|Not Found)\b/.test(e.message);
}
