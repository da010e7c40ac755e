/**
 * The CustomResourceDefinitions of every CRD-backed policy kind the agent watches, for clusters that
 * have neither Antrea's nor network-policy-api's CRDs. Single source for install/crds.yaml (a unit
 * test checks the file equals `crdsYaml()`) and for the lab API server's seeded CRDs. Pure.
 *
 * Regenerate the file after a change: `node dist/install/crds.js > install/crds.yaml`.
 */
import { fileURLToPath } from 'node:url';
import { dumpYaml } from '../daemon/kube-yaml.js';
import { openApiSchema, specSchema } from '../daemon/policy/schema.js';

// A type alias (not an interface) so it is assignable to the lab's index-signature object type.
export type CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string };
  spec: {
    group: string;
    scope: 'Namespaced' | 'Cluster';
    names: { plural: string; singular: string; kind: string; listKind: string; shortNames: string[] };
    versions: {
      name: string;
      served: boolean;
      storage: boolean;
      schema: { openAPIV3Schema: Record<string, unknown> };
      subresources?: { status: Record<string, never> };
    }[];
  };
};

/**
 * The kind's field schema (daemon/policy/schema.ts, the source of sluice's unknown-field
 * warnings too): apiVersion, kind, metadata as for any object, the typed spec, an open status.
 */
function crdSchema(group: string, kind: string): Record<string, unknown> {
  const spec = specSchema(group, kind);
  if (!spec) throw new Error(`no field schema for ${group} ${kind}`);
  return {
    type: 'object',
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      spec: openApiSchema(spec),
      status: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
    },
  };
}

function crd(group: string, plural: string, kind: string, scope: 'Namespaced' | 'Cluster', versions: string[],
  status: boolean, shortNames: string[]): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${plural}.${group}` },
    spec: {
      group, scope,
      names: { plural, singular: kind.toLowerCase(), kind, listKind: `${kind}List`, shortNames },
      versions: versions.map((name, i) => ({
        // The first version is the storage version; all versions share one schema (no conversion needed).
        name, served: true, storage: i === 0,
        schema: { openAPIV3Schema: crdSchema(group, kind) },
        ...(status ? { subresources: { status: {} } } : {}),
      })),
    },
  };
}

/** Every crd.antrea.io and policy.networking.k8s.io resource sluice watches; a fresh copy on each call. */
export function sluiceCrds(): CustomResourceDefinition[] {
  const antrea = ['v1beta1', 'v1alpha1'];
  return [
    crd('crd.antrea.io', 'tiers', 'Tier', 'Cluster', antrea, false, ['tr']),
    crd('crd.antrea.io', 'clusternetworkpolicies', 'ClusterNetworkPolicy', 'Cluster', antrea, true, ['acnp']),
    crd('crd.antrea.io', 'networkpolicies', 'NetworkPolicy', 'Namespaced', antrea, true, ['anp']),
    crd('crd.antrea.io', 'clustergroups', 'ClusterGroup', 'Cluster', antrea, true, ['cg']),
    crd('crd.antrea.io', 'groups', 'Group', 'Namespaced', antrea, true, ['grp']),
    crd('policy.networking.k8s.io', 'adminnetworkpolicies', 'AdminNetworkPolicy', 'Cluster', ['v1alpha1'], true, ['anp']),
    crd('policy.networking.k8s.io', 'baselineadminnetworkpolicies', 'BaselineAdminNetworkPolicy', 'Cluster', ['v1alpha1'], true, ['banp']),
    crd('policy.networking.k8s.io', 'clusternetworkpolicies', 'ClusterNetworkPolicy', 'Cluster', ['v1alpha2'], true, ['cnp']),
  ];
}

const HEADER = `# CustomResourceDefinitions for the policy kinds sluice enforces that are not built into Kubernetes:
#   crd.antrea.io            Tier, ClusterGroup, Group, ClusterNetworkPolicy, NetworkPolicy (v1beta1; v1alpha1 also served)
#   policy.networking.k8s.io AdminNetworkPolicy, BaselineAdminNetworkPolicy (v1alpha1), ClusterNetworkPolicy (v1alpha2)
#
# Apply it once per cluster (kubectl apply -f install/crds.yaml, before or after install/sluice.yaml; the
# agent starts watching a kind as soon as its CRD appears) ONLY on a cluster that has neither Antrea's
# nor network-policy-api's CRDs. A cluster with the upstream CRDs installed must NOT apply this file: it
# would replace their schemas. Deleting these CRDs deletes every object of these kinds.
#
# The schemas are the kinds' field schemas, generated from the one sluice uses to warn about unknown
# fields (daemon/policy/schema.ts): like the upstream CRDs, the API server prunes fields they do not
# have and kubectl's strict field validation refuses them (a typo such as spec.podSelecter would
# otherwise change a policy's meaning). Values are checked in depth by the agent, which validates every
# object itself and ignores an invalid one, with the reason (object and field) in its log and in
# "sluicectl node policies" on each node.
#
# Generated from install/crds.ts (node dist/install/crds.js > install/crds.yaml); do not edit by hand.
`;

/** The text of install/crds.yaml: the header, then one YAML document per CRD. */
export function crdsYaml(): string {
  return HEADER + sluiceCrds().map((c) => '---\n' + dumpYaml(c, { lineWidth: -1 })).join('');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.stdout.write(crdsYaml());
