/**
 * What the node knows about one attached Pod, and its translations: the external_ids its OVS ports
 * carry (so a restarted agent, the DEL of a port the registry lost, and the uninstall cleanup
 * rebuild it from OVSDB alone), the bridge's view its flows are computed from, and the addresses
 * and veths it holds.
 */
import type { PodPort } from '../flows/pipeline.js';
import type { EgressPortIds, PodPortIds, PodPortRecord } from '../ovs/bridge.js';

/**
 * A Pod's second interface for IPv4 egress (the AWS VPC CNI's `egress-cni` on IPv6 clusters:
 * `v4if0`, a 169.254.172.0/22 address, SNAT to the node). Attached as a second port of the Pod, so
 * its IPv4 egress crosses the bridge and the Pod's egress rules judge it.
 */
export interface EgressV4Attachment {
  /** The interface inside the Pod (`v4if0`). */
  ifName: string;
  hostVeth: string;
  ofport: number;
  /** MAC of the Pod's egress interface. */
  mac: string;
  /** Its IPv4 address (no prefix length). */
  ip: string;
}

/** What the agent knows about one attached Pod (rebuilt from OVSDB external_ids after a restart). */
export interface PodAttachment {
  containerId: string;
  podNamespace: string;
  podName: string;
  netns: string;
  ifName: string;
  hostVeth: string;
  ofport: number;
  /** MAC of the Pod's own interface. */
  mac: string;
  ips: string[];
  /** The Pod's IPv4 egress port, when a chained plugin gave it one. */
  egressV4?: EgressV4Attachment | undefined;
}

export function portIds(p: PodAttachment): PodPortIds {
  return {
    'sluice-type': 'container',
    'container-id': p.containerId,
    'pod-namespace': p.podNamespace,
    'pod-name': p.podName,
    'ip-address': p.ips.join(','),
    'attached-mac': p.mac,
    'net-ns': p.netns,
    'if-name': p.ifName,
    ...(p.egressV4
      ? { 'egress-v4-veth': p.egressV4.hostVeth, 'egress-v4-ip': p.egressV4.ip, 'egress-v4-mac': p.egressV4.mac, 'egress-v4-if-name': p.egressV4.ifName }
      : {}),
  };
}

/** external_ids of a Pod's IPv4 egress port (its Pod is found by container-id). */
export function egressPortIds(p: PodAttachment & { egressV4: EgressV4Attachment }): EgressPortIds {
  return { 'sluice-type': 'container-egress-v4', 'container-id': p.containerId, 'pod-namespace': p.podNamespace, 'pod-name': p.podName, 'ip-address': p.egressV4.ip, 'attached-mac': p.egressV4.mac };
}

/** Every address of an attachment the host routes to the gateway: the Pod's and its egress port's. */
export const routedIPs = (p: PodAttachment): string[] => (p.egressV4 ? [...p.ips, p.egressV4.ip] : p.ips);

/** The host veths of an attachment: the Pod's and its IPv4 egress interface's. */
export const vethsOf = (p: PodAttachment): string[] => (p.egressV4 ? [p.hostVeth, p.egressV4.hostVeth] : [p.hostVeth]);

/**
 * Rebuilds an attachment from its OVSDB port (and the OpenFlow port numbers of the egress ports,
 * -1 when its egress port is missing); undefined when the record is not usable.
 */
export function attachmentFromPort(r: PodPortRecord, egressOfports: Map<string, number> = new Map()): PodAttachment | undefined {
  const ids = r.ids;
  if (!ids['container-id'] || !ids['attached-mac'] || !ids['ip-address']) return undefined;
  const ev = ids['egress-v4-veth'];
  const egressV4 =
    ev && ids['egress-v4-ip'] && ids['egress-v4-mac']
      ? { ifName: ids['egress-v4-if-name'] ?? 'v4if0', hostVeth: ev, ofport: egressOfports.get(ev) ?? -1, mac: ids['egress-v4-mac'], ip: ids['egress-v4-ip'] }
      : undefined;
  return {
    ...(egressV4 ? { egressV4 } : {}),
    containerId: ids['container-id'],
    podNamespace: ids['pod-namespace'] ?? '',
    podName: ids['pod-name'] ?? '',
    netns: ids['net-ns'] ?? '',
    ifName: ids['if-name'] ?? 'eth0',
    hostVeth: r.name,
    ofport: r.ofport,
    mac: ids['attached-mac'],
    ips: ids['ip-address'].split(',').filter(Boolean),
  };
}

/** Whether two attachments put the same interfaces behind the bridge (OpenFlow port numbers aside). */
export function sameAttachment(a: PodAttachment, b: PodAttachment): boolean {
  const egress = (p: PodAttachment) => (p.egressV4 ? `${p.egressV4.ifName}|${p.egressV4.hostVeth}|${p.egressV4.mac}|${p.egressV4.ip}` : '');
  return a.hostVeth === b.hostVeth && a.mac === b.mac && a.ips.join(',') === b.ips.join(',') && a.ifName === b.ifName && a.netns === b.netns && egress(a) === egress(b);
}

/** The bridge's view of an attachment (what its flows are computed from). */
export function podPortOf(p: PodAttachment): PodPort {
  return { containerId: p.containerId, ofport: p.ofport, mac: p.mac, ips: p.ips, ...(p.egressV4 ? { egressV4: { ofport: p.egressV4.ofport, mac: p.egressV4.mac, ip: p.egressV4.ip } } : {}) };
}
