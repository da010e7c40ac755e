import type { Normalizer } from '../types.js';
import { normalizeNetworkPolicy } from './networkpolicy.js';

/** The Kubernetes policy kinds the engine dispatches on. */
export const normalizers: { group: string; versions: string[]; kind: string; normalize: Normalizer }[] = [
  { group: 'networking.k8s.io', versions: ['v1'], kind: 'NetworkPolicy', normalize: normalizeNetworkPolicy },
];
