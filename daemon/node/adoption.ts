/**
 * Adopting Pods that run on the primary CNI alone (pure). They exist when sluice is installed on a
 * node that already runs Pods, or when Pods were created while the runtime's CNI configuration did
 * not chain sluice. Such a Pod crosses no bridge, so no policy applies to it.
 *
 * What the agent needs to attach one, and what the runtime later DELs/CHECKs it with, is what the
 * runtime's CNI library cached when the primary ADDed it (daemon/cni/runtime-cache.ts). This
 * module matches those entries to the node's Pods from the API.
 */
import { canonicalIp } from '../policy/cidr.js';
import type { CachedAttachment } from '../cni/runtime-cache.js';

/** A Pod of this node on the Pod network, as the API shows it. */
export interface NodePod {
  namespace: string;
  name: string;
  ips: string[];
}

export interface AdoptionCandidate {
  pod: NodePod;
  entry: CachedAttachment;
}

/** What /status says about adoption. */
export interface AdoptionStatus {
  adopted: number;
  /** "namespace/name" of each running Pod that crosses no bridge, and why it could not be attached. */
  unattached: { pod: string; reason: string }[];
  lastRun?: { at: string; reason: string };
}

export interface AdoptionPlan {
  adopt: AdoptionCandidate[];
  /** Pods that are not attached and cannot be from what is cached, with the reason. */
  cannot: { pod: NodePod; reason: string }[];
}

/**
 * Which of the node's Pods to adopt and from which cache entry. A Pod is adopted when none of its
 * addresses is attached and one cache entry has its address, names it (when the entry names a Pod
 * at all) and has a network namespace that still exists. Everything else that is not attached is
 * in `cannot`, with what is missing.
 */
export function planAdoption(
  pods: NodePod[],
  attachedIps: ReadonlySet<string>,
  entries: CachedAttachment[],
  netnsExists: (path: string) => boolean,
  cacheDir: string,
): AdoptionPlan {
  const plan: AdoptionPlan = { adopt: [], cannot: [] };
  for (const pod of [...pods].sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`))) {
    const ips = pod.ips.map((ip) => canonicalIp(ip)).filter((ip): ip is string => ip !== undefined);
    if (ips.length === 0 || ips.some((ip) => attachedIps.has(ip))) continue;
    const named = (e: CachedAttachment) => e.podNamespace === undefined || e.podName === undefined || (e.podNamespace === pod.namespace && e.podName === pod.name);
    const forIp = entries.filter((e) => e.ips.some((ip) => ips.includes(ip)));
    const usable = forIp.filter(named).filter((e) => e.netns !== undefined && netnsExists(e.netns));
    // A name match beats an unnamed entry; among equals the file name decides (stable).
    usable.sort((a, b) => Number(b.podName !== undefined) - Number(a.podName !== undefined) || a.file.localeCompare(b.file));
    if (usable[0]) {
      plan.adopt.push({ pod, entry: usable[0] });
      continue;
    }
    let reason: string;
    if (forIp.length === 0) reason = `no CNI result for ${ips.join(',')} is cached in ${cacheDir}/results (the runtime keeps none, or the Pod was created before it did)`;
    else if (!forIp.some(named)) reason = `the CNI result cached for ${ips.join(',')} names another Pod (${forIp.map((e) => `${e.podNamespace}/${e.podName}`).join(', ')})`;
    else reason = `the network namespace of its cached CNI result is gone (${forIp.map((e) => e.netns ?? '(not recorded)').join(', ')})`;
    plan.cannot.push({ pod, reason });
  }
  return plan;
}
