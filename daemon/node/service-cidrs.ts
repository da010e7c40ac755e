/**
 * The Service ranges the node uses (Pod -> ClusterIP traffic takes the re-entrance path only for
 * them, so the egress policy judges the real endpoint): the cluster's ServiceCIDR objects where it
 * serves them (networking.k8s.io/v1, Kubernetes 1.33+), else the configuration's `serviceCIDRs`,
 * else none, which the agent refuses. A Service whose ClusterIP lies outside them would escape
 * egress enforcement: such Services are found and reported. Pure.
 */
import { cidrContainsIp, formatCidr, parseCidr, parseIp } from '../policy/cidr.js';
import type { KubeObject } from '../policy/types.js';

export interface ServiceCidrChoice {
  cidrs: string[];
  /** Where they come from, for the log and /status. */
  source: string;
}

/** The ranges of ServiceCIDR objects: every valid `spec.cidrs` entry, canonical, sorted, once. */
export function serviceCidrsOf(objects: readonly KubeObject[]): string[] {
  const out = new Set<string>();
  for (const o of objects) {
    const cidrs = (o.spec as { cidrs?: unknown } | undefined)?.cidrs;
    if (!Array.isArray(cidrs)) continue;
    for (const c of cidrs) {
      const parsed = typeof c === 'string' ? parseCidr(c) : undefined;
      if (parsed) out.add(formatCidr(parsed));
    }
  }
  return [...out].sort();
}

/**
 * `served`: the ServiceCIDR objects when the cluster serves the kind (undefined: it does not).
 * `configured`: the configuration's serviceCIDRs (empty: not set).
 */
export function chooseServiceCidrs(served: readonly KubeObject[] | undefined, configured: readonly string[]): ServiceCidrChoice | { error: string } {
  const discovered = served ? serviceCidrsOf(served) : [];
  if (discovered.length > 0) {
    const names = served!.map((o) => o.metadata.name).sort().join(', ');
    return { cidrs: discovered, source: `ServiceCIDR ${names}` };
  }
  if (configured.length > 0) return { cidrs: [...configured], source: served ? 'configuration (the cluster serves ServiceCIDR but defines no range)' : 'configuration (the cluster does not serve ServiceCIDR)' };
  return {
    error: `no Service range: the cluster ${served ? 'serves ServiceCIDR but defines no range' : 'does not serve networking.k8s.io/v1 ServiceCIDR (Kubernetes 1.33+)'}, and the configuration sets no serviceCIDRs: set serviceCIDRs in the agent's configuration (the DaemonSet's ConfigMap) to the cluster's --service-cluster-ip-range, e.g. serviceCIDRs: [10.100.0.0/16] on EKS`,
  };
}

export interface ServiceOutside {
  service: string;
  ip: string;
}

/** Services with a ClusterIP outside every range (headless and None ones aside). */
export function clusterIPsOutside(services: Iterable<{ namespace: string; name: string; clusterIPs: readonly string[] }>, cidrs: readonly string[]): ServiceOutside[] {
  const ranges = cidrs.map((c) => parseCidr(c)).filter((c) => c !== undefined);
  const out: ServiceOutside[] = [];
  for (const s of services) {
    for (const ip of s.clusterIPs) {
      const parsed = parseIp(ip);
      if (parsed && !ranges.some((r) => cidrContainsIp(r, parsed))) out.push({ service: `${s.namespace}/${s.name}`, ip });
    }
  }
  return out.sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : a.ip < b.ip ? -1 : 1));
}
