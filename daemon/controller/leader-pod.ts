/**
 * Which replica the Service sends agents to: the leader's Pod carries a label the Service selects
 * on. Both replicas stay Ready (each computes every view, so a rollout never waits on a standby),
 * and the label moves with the Lease: the new leader sets it on its own Pod and removes it from
 * any other (a leader that died keeps its Pod, and the label, until it is replaced).
 */
import type { KubeAccess } from '../kube/access.js';

export const LEADER_LABEL = 'sluice.dev/controller-leader';

type Io = Pick<KubeAccess, 'getJson' | 'patchJson'>;

const podPath = (ns: string, pod: string) => `/api/v1/namespaces/${encodeURIComponent(ns)}/pods/${encodeURIComponent(pod)}`;

function setLabel(io: Io, ns: string, pod: string, on: boolean): Promise<unknown> {
  // A merge patch with null removes the label.
  return io.patchJson(podPath(ns, pod), { metadata: { labels: { [LEADER_LABEL]: on ? 'true' : null } } }, 'application/merge-patch+json');
}

/** Labels Pod `pod` as the leader's (and only it) when `leading`, else removes its label. */
export async function labelLeaderPod(io: Io, ns: string, pod: string, leading: boolean): Promise<void> {
  if (!leading) {
    await setLabel(io, ns, pod, false);
    return;
  }
  await setLabel(io, ns, pod, true);
  const list = (await io.getJson(`/api/v1/namespaces/${encodeURIComponent(ns)}/pods?labelSelector=${encodeURIComponent(`${LEADER_LABEL}=true`)}`)) as { items?: { metadata: { name: string } }[] };
  for (const p of list.items ?? []) if (p.metadata.name !== pod) await setLabel(io, ns, p.metadata.name, false);
}
