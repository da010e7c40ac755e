/**
 * A new Pod's addresses as its node's agent publishes them at CNI ADD: the status condition
 * POD_ADDRESSES_CONDITION (policy/cluster.ts reads it), set with a strategic merge patch of the
 * status subresource, which merges conditions by type: the kubelet's own conditions stay as they are,
 * and the kubelet keeps a condition type it does not own in its later status updates. Pure.
 */
import { POD_ADDRESSES_CONDITION } from '../../policy/cluster.js';
import type { PodQuestion } from './peers.js';

export const PUBLICATION_PATCH_TYPE = 'application/strategic-merge-patch+json';

export function publicationPath(p: { namespace: string; name: string }): string {
  return `/api/v1/namespaces/${encodeURIComponent(p.namespace)}/pods/${encodeURIComponent(p.name)}/status`;
}

export function publicationPatch(p: PodQuestion, now: Date): unknown {
  return {
    status: {
      conditions: [{ type: POD_ADDRESSES_CONDITION, status: 'True', reason: 'Attached', message: p.ips.join(','), lastTransitionTime: now.toISOString().replace(/\.\d+Z$/, 'Z') }],
    },
  };
}
