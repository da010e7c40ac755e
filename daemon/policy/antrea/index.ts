/**
 * crd.antrea.io kinds: the registry the policy engine dispatches on.
 *
 * Versions: Tier / ClusterNetworkPolicy / NetworkPolicy exist in v1alpha1 and v1beta1.
 * ClusterGroup appeared in v1alpha2 and Group in v1alpha3 (Antrea's own documentation still shows
 * v1alpha3 examples), so those versions are accepted for them as well; the spec is the same except the
 * single `ipBlock`, which v1beta1 dropped in favour of `ipBlocks`.
 */
import type { Normalizer } from '../types.js';
import { ANTREA_GROUP } from './common.js';
import { normalizeGroup } from './groups.js';
import { normalizeAntreaPolicy } from './policy.js';
import { normalizeTier } from './tiers.js';

export { ANTREA_GROUP } from './common.js';
export { STATIC_TIERS, canonicalTierName, staticTierPriority, tierStage } from './tiers.js';
export { appliedToMembers, expandGroupMembers, hasChildGroups } from './groups.js';
export { generatedRuleName } from './rulename.js';

export const normalizers: { group: string; versions: string[]; kind: string; normalize: Normalizer }[] = [
  { group: ANTREA_GROUP, versions: ['v1alpha1', 'v1beta1'], kind: 'Tier', normalize: (obj) => normalizeTier(obj) },
  {
    group: ANTREA_GROUP,
    versions: ['v1alpha1', 'v1beta1'],
    kind: 'ClusterNetworkPolicy',
    normalize: (obj, ctx) => normalizeAntreaPolicy(obj, ctx, 'AntreaClusterNetworkPolicy'),
  },
  {
    group: ANTREA_GROUP,
    versions: ['v1alpha1', 'v1beta1'],
    kind: 'NetworkPolicy',
    normalize: (obj, ctx) => normalizeAntreaPolicy(obj, ctx, 'AntreaNetworkPolicy'),
  },
  { group: ANTREA_GROUP, versions: ['v1alpha2', 'v1alpha3', 'v1beta1'], kind: 'ClusterGroup', normalize: (obj) => normalizeGroup(obj, 'ClusterGroup') },
  { group: ANTREA_GROUP, versions: ['v1alpha3', 'v1beta1'], kind: 'Group', normalize: (obj) => normalizeGroup(obj, 'Group') },
];
