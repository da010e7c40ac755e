/**
 * Registry of the upstream admin-policy kinds (policy.networking.k8s.io) for the policy
 * engine: v1alpha1 AdminNetworkPolicy and BaselineAdminNetworkPolicy, v1alpha2
 * ClusterNetworkPolicy. See README.md in this directory for the semantics.
 */
import type { Normalizer } from '../types.js';
import { normalizeAdminNetworkPolicy, normalizeBaselineAdminNetworkPolicy } from './v1alpha1.js';
import { normalizeClusterNetworkPolicy } from './v1alpha2.js';

export const ADMIN_POLICY_GROUP = 'policy.networking.k8s.io';

export const normalizers: { group: string; versions: string[]; kind: string; normalize: Normalizer }[] = [
  { group: ADMIN_POLICY_GROUP, versions: ['v1alpha1'], kind: 'AdminNetworkPolicy', normalize: normalizeAdminNetworkPolicy },
  { group: ADMIN_POLICY_GROUP, versions: ['v1alpha1'], kind: 'BaselineAdminNetworkPolicy', normalize: normalizeBaselineAdminNetworkPolicy },
  { group: ADMIN_POLICY_GROUP, versions: ['v1alpha2'], kind: 'ClusterNetworkPolicy', normalize: normalizeClusterNetworkPolicy },
];

export { normalizeAdminNetworkPolicy, normalizeBaselineAdminNetworkPolicy, normalizeClusterNetworkPolicy };
