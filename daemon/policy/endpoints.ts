/**
 * Where kube-proxy sends a Service's traffic, and which Services policies follow send it elsewhere
 * after a change. Pure: no I/O.
 *
 * `serviceBackends` resolves one ClusterIP port to its endpoints (address, target port): the
 * Service holding the address, its endpoint Pods (ClusterState.serviceEndpoints), the target port
 * on each Pod. The post-DNAT flows of toServices rules are built from it.
 *
 * `ServiceEndpointTracker` follows the Services that toServices peers name (`watch`/`unwatch`, one
 * count per AddressGroup) and reports which of them resolve differently after an event. A
 * resolution records what it read (EndpointRead: the Service at each ClusterIP, that Service and
 * its slices, the Pods by name, by address or by namespace) in an index, so an event re-resolves
 * only the followed Services that read the object it changed: a Pod that none of them reads costs
 * a few map lookups, however many Pods the cluster has.
 */
import { type ClusterState, type EndpointRead, type EndpointSliceInfo, targetPortOn } from './cluster.js';
import type { PodInfo, ServiceInfo } from './types.js';

/** One endpoint of a Service port: the Pod address and the port the DNAT'ed packet goes to. */
export interface Backend {
  ip: string;
  port: number;
}

/**
 * The endpoints behind one ClusterIP/protocol/port, in a fixed order: every address of each endpoint
 * Pod (sorted by Pod) with the port the Service port targets on it; none when no Service holds the
 * address or it has no such port. `read` is told each input the answer depends on.
 */
export function serviceBackends(cluster: ClusterState, clusterIP: string, protocol: string, port: number, read?: (input: EndpointRead) => void): Backend[] {
  read?.(`cip:${clusterIP}`);
  const svc = cluster.serviceByIp.get(clusterIP);
  if (!svc) return [];
  read?.(`svc:${svc.namespace}/${svc.name}`);
  const sp = svc.ports.find((p) => p.port === port && p.protocol === protocol);
  if (!sp) return [];
  const out: Backend[] = [];
  for (const pod of cluster.serviceEndpoints(svc.namespace, svc.name, undefined, read)) {
    const target = targetPortOn(pod, sp);
    if (target === undefined) continue;
    for (const ip of pod.ips) out.push({ ip, port: target });
  }
  return out;
}

interface Followed {
  /** AddressGroups naming the Service. */
  refs: number;
  /** Its resolution (every ClusterIP x port) as text, to compare. */
  resolved: string;
  /** What the resolution read (keys of `readers`). */
  reads: Set<EndpointRead>;
}

export class ServiceEndpointTracker {
  private readonly followed = new Map<string, Followed>();
  /** Input -> the followed Services ("ns/name") whose resolution read it. */
  private readonly readers = new Map<EndpointRead, Set<string>>();
  private readonly changed = new Set<string>();

  constructor(private readonly cluster: ClusterState) {}

  /** Starts following Service "ns/name" (counted: one call per AddressGroup naming it). */
  watch(key: string): void {
    const f = this.followed.get(key);
    if (f) {
      f.refs++;
      return;
    }
    const entry: Followed = { refs: 1, resolved: '', reads: new Set() };
    this.followed.set(key, entry);
    this.resolve(key, entry);
  }

  unwatch(key: string): void {
    const f = this.followed.get(key);
    if (!f || --f.refs > 0) return;
    this.unindex(key, f);
    this.followed.delete(key);
    this.changed.delete(key);
  }

  podChanged(old: PodInfo | undefined, pod: PodInfo | undefined): void {
    const p = pod ?? old;
    if (!p) return;
    const inputs: EndpointRead[] = [`pod:${p.namespace}/${p.name}`, `ns:${p.namespace}`];
    for (const ip of old?.ips ?? []) inputs.push(`ip:${ip}`);
    for (const ip of pod?.ips ?? []) inputs.push(`ip:${ip}`);
    this.recheck(inputs);
  }

  serviceChanged(old: ServiceInfo | undefined, svc: ServiceInfo | undefined): void {
    const s = svc ?? old;
    if (!s) return;
    const inputs: EndpointRead[] = [`svc:${s.namespace}/${s.name}`];
    for (const ip of old?.clusterIPs ?? []) inputs.push(`cip:${ip}`);
    for (const ip of svc?.clusterIPs ?? []) inputs.push(`cip:${ip}`);
    this.recheck(inputs);
  }

  sliceChanged(old: EndpointSliceInfo | undefined, slice: EndpointSliceInfo | undefined): void {
    const inputs: EndpointRead[] = [];
    for (const s of [old, slice]) if (s) inputs.push(`svc:${s.namespace}/${s.service}`);
    this.recheck(inputs);
  }

  /** The followed Services ("ns/name") whose resolution changed since the last call, sorted. */
  takeChanged(): string[] {
    const out = [...this.changed].sort();
    this.changed.clear();
    return out;
  }

  private recheck(inputs: readonly EndpointRead[]): void {
    const keys = new Set<string>();
    for (const input of inputs) for (const key of this.readers.get(input) ?? []) keys.add(key);
    for (const key of keys) {
      const f = this.followed.get(key)!;
      const was = f.resolved;
      this.unindex(key, f);
      this.resolve(key, f);
      if (f.resolved !== was) this.changed.add(key);
    }
  }

  /** Resolves every ClusterIP x port of the Service as the compiler will ask for them, recording the reads. */
  private resolve(key: string, f: Followed): void {
    const read = (input: EndpointRead) => {
      if (f.reads.has(input)) return;
      f.reads.add(input);
      let set = this.readers.get(input);
      if (!set) this.readers.set(input, (set = new Set()));
      set.add(key);
    };
    read(`svc:${key}`);
    const svc = this.cluster.services.get(key);
    const parts: string[] = [];
    for (const ip of svc?.clusterIPs ?? []) {
      for (const p of svc!.ports) {
        const backends = serviceBackends(this.cluster, ip, p.protocol, p.port, read);
        parts.push(`${ip}|${p.protocol}|${p.port}=${backends.map((b) => `${b.ip}:${b.port}`).join(',')}`);
      }
    }
    f.resolved = parts.join(';');
  }

  private unindex(key: string, f: Followed): void {
    for (const input of f.reads) {
      const set = this.readers.get(input);
      set?.delete(key);
      if (set?.size === 0) this.readers.delete(input);
    }
    f.reads = new Set();
  }
}
