/**
 * The API resources the agent watches to feed the policy engine: the cluster view (Pods of all
 * nodes, Namespaces, Nodes, Services, EndpointSlices, ServiceAccounts) and every policy kind; and
 * the cluster's Service ranges (ServiceCIDR), which the node uses.
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
  /** A 404 means "not served (yet)", not an error: a CRD kind not installed, a built-in kind of a newer Kubernetes. */
  optional: boolean;
  /** Served by a CustomResourceDefinition (install/crds.yaml defines it). */
  crd: boolean;
}

function resource(apiVersion: string, kind: string, plural: string, served: 'always' | 'crd' | 'newer'): WatchedResource {
  const slash = apiVersion.indexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  const path = group === '' ? `/api/${version}/${plural}` : `/apis/${group}/${version}/${plural}`;
  return { apiVersion, kind, path, group, version, plural, optional: served !== 'always', crd: served === 'crd' };
}

export const SERVICE_CIDR_RESOURCE = resource('networking.k8s.io/v1', 'ServiceCIDR', 'servicecidrs', 'newer');

export const WATCHED_RESOURCES: readonly WatchedResource[] = [
  resource('v1', 'Namespace', 'namespaces', 'always'),
  resource('v1', 'Node', 'nodes', 'always'),
  resource('v1', 'Pod', 'pods', 'always'),
  resource('v1', 'Service', 'services', 'always'),
  resource('v1', 'ServiceAccount', 'serviceaccounts', 'always'),
  resource('discovery.k8s.io/v1', 'EndpointSlice', 'endpointslices', 'always'),
  resource('networking.k8s.io/v1', 'NetworkPolicy', 'networkpolicies', 'always'),
  resource('crd.antrea.io/v1beta1', 'Tier', 'tiers', 'crd'),
  resource('crd.antrea.io/v1beta1', 'ClusterGroup', 'clustergroups', 'crd'),
  resource('crd.antrea.io/v1beta1', 'Group', 'groups', 'crd'),
  resource('crd.antrea.io/v1beta1', 'ClusterNetworkPolicy', 'clusternetworkpolicies', 'crd'),
  resource('crd.antrea.io/v1beta1', 'NetworkPolicy', 'networkpolicies', 'crd'),
  resource('policy.networking.k8s.io/v1alpha1', 'AdminNetworkPolicy', 'adminnetworkpolicies', 'crd'),
  resource('policy.networking.k8s.io/v1alpha1', 'BaselineAdminNetworkPolicy', 'baselineadminnetworkpolicies', 'crd'),
  resource('policy.networking.k8s.io/v1alpha2', 'ClusterNetworkPolicy', 'clusternetworkpolicies', 'crd'),
  // The cluster's Service ranges (node/service-cidrs.ts); served from Kubernetes 1.33 on.
  SERVICE_CIDR_RESOURCE,
];

/** The resources whose objects are policy inputs (the engine reads them): all but the Service ranges. */
export const POLICY_INPUT_RESOURCES: readonly WatchedResource[] = WATCHED_RESOURCES.filter((r) => r !== SERVICE_CIDR_RESOURCE);

/** Whether an error from a list/watch call is an HTTP 404 (resource not served). */
export function isNotFound(err: unknown): boolean {
  if (!err || typeof err !== 'object') return false;
  const e = err as { code?: unknown; statusCode?: unknown; status?: unknown; message?: unknown };
  if (e.code === 404 || e.statusCode === 404 || e.status === 404) return true;
  return typeof e.message === 'string' && /\b(HTTP-Code: 404|404 Not Found|status code 404|Not Found)\b/.test(e.message);
}
