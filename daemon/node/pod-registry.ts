/**
 * The node's attached Pods, by container id: the one place that says which Pods are behind the
 * bridge. The CNI attacher adds and removes them, the reconciler rebuilds them from OVSDB at
 * start-up and repairs them, and the desired flows, host routes, adoption and /status read them.
 * Callers share the attachments themselves: a repair that moves a port updates the one object.
 */
import { type EgressV4Attachment, type PodAttachment, routedIPs, vethsOf } from './attachment.js';

/** One interface behind an OpenFlow port: the Pod's own, or its IPv4 egress interface. */
export interface PortOwner {
  pod: PodAttachment;
  iface: PodAttachment | EgressV4Attachment;
}

export class PodRegistry {
  private readonly byContainer = new Map<string, PodAttachment>();

  /** Registers the attachment (replacing the container's earlier one). */
  add(pod: PodAttachment): void {
    this.byContainer.set(pod.containerId, pod);
  }

  get(containerId: string): PodAttachment | undefined {
    return this.byContainer.get(containerId);
  }

  has(containerId: string): boolean {
    return this.byContainer.has(containerId);
  }

  /** Forgets the container's attachment; false when none was registered. */
  remove(containerId: string): boolean {
    return this.byContainer.delete(containerId);
  }

  /** The attachments, in the order they were registered (a snapshot). */
  list(): PodAttachment[] {
    return [...this.byContainer.values()];
  }

  get size(): number {
    return this.byContainer.size;
  }

  /** The first attachment holding one of `want`'s host veths or routed addresses. */
  holderOf(want: PodAttachment): PodAttachment | undefined {
    const ips = routedIPs(want);
    const veths = vethsOf(want);
    for (const p of this.byContainer.values()) {
      if (routedIPs(p).some((ip) => ips.includes(ip)) || vethsOf(p).some((v) => veths.includes(v))) return p;
    }
    return undefined;
  }

  /** The interface behind an OpenFlow port of the bridge, when a Pod's. */
  atOfport(ofport: number): PortOwner | undefined {
    for (const pod of this.byContainer.values()) {
      if (pod.ofport === ofport) return { pod, iface: pod };
      if (pod.egressV4?.ofport === ofport) return { pod, iface: pod.egressV4 };
    }
    return undefined;
  }

  /** Every OpenFlow port number an attachment holds (its Pod's and its egress port's). */
  ofports(): Set<number> {
    const used = new Set<number>();
    for (const p of this.byContainer.values()) {
      used.add(p.ofport);
      if (p.egressV4) used.add(p.egressV4.ofport);
    }
    return used;
  }
}
