/**
 * The cluster view the policy engine evaluates against: Pods, Namespaces, Nodes, Services,
 * EndpointSlices and ServiceAccounts converted from Kubernetes objects into the IR's *Info shapes.
 * Pure: no I/O.
 *
 * Pod addresses: every entry of `status.podIPs` (both families in a dual-stack cluster), else
 * `status.podIP`, else the addresses the Pod's node agent published at CNI ADD in the status
 * condition POD_ADDRESSES_CONDITION (podAddresses). Addresses are kept in canonical text (IPv6 compressed, lower case) so that the
 * indexes by IP and probe addresses agree whatever form the object used. A hostNetwork Pod has its Node's
 * addresses. A Pod without an IP (not yet started, or a hand-written scenario) gets a deterministic
 * one: FNV-1a of "<nodeName>/<namespace>/<name>" mapped into 10.128.0.0/9 (never .0 or .255 in the
 * last octet); on a collision with another Pod the hash is re-drawn with a counter suffix. So the
 * same scenario always yields the same addresses, whatever order the objects arrive in (unless two
 * Pods collide, which is rare: ~8M slots).
 */
import type { ContainerPort, KubeObject, NamespaceInfo, NodeInfo, PodInfo, ServiceInfo, ServicePortInfo } from './types.js';
import { canonicalIp, ipFamily } from './cidr.js';
import { labelValue, stringMapOf } from './labels.js';
import { typeName } from './problems.js';

export const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

export interface EndpointSliceInfo {
  namespace: string;
  name: string;
  service: string;
  /** Pod references ("ns/name") of ready endpoints, or bare IPs when no targetRef is given. */
  pods: string[];
  ips: string[];
  /** `addressType`: the family every endpoint of the slice has (undefined: FQDN or absent). */
  family?: 4 | 6;
}

/** An address in canonical form; text that is no address is kept as written (it matches nothing). */
const canonical = (ip: string): string => canonicalIp(ip) ?? ip;

/** Terminated Pods hold no address and are not policy endpoints. */
function isTerminated(obj: KubeObject): boolean {
  const phase = obj.status?.phase;
  return phase === 'Succeeded' || phase === 'Failed';
}

const isPlainMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A map[string]string (labels, annotations, a Service's selector) as the API server decodes it: a
 * null value is "" (`quarantine:` in YAML is the label quarantine=""). Other non-strings are
 * refused before (clusterObjectError); here they are left out.
 */
function stringMap(value: unknown): Record<string, string> {
  if (!isPlainMap(value)) return stringMapOf([]);
  const entries: [string, string][] = [];
  for (const [k, v] of Object.entries(value)) {
    if (typeof v === 'string') entries.push([k, v]);
    else if (v === null) entries.push([k, '']);
  }
  return stringMapOf(entries);
}

/**
 * Why the API server would refuse a cluster object's string maps that selection reads
 * (metadata.labels, a Service's spec.selector), or undefined: a value that is neither a string nor
 * null (a YAML `yes` or `5`) cannot be decoded, so no such object exists. Annotations are not read
 * here: the agent's informers keep only the few the engine uses.
 */
export function clusterObjectError(obj: KubeObject): { field: string; message: string } | undefined {
  // Labels only of the kinds that selectors select; a Service is selected by name, not labels.
  const maps: [string, unknown][] = obj.kind === 'Service' ? [] : [['metadata.labels', obj.metadata.labels]];
  if (obj.kind === 'Service' && isPlainMap(obj.spec)) maps.push(['spec.selector', obj.spec.selector]);
  for (const [field, value] of maps) {
    if (value === undefined || value === null) continue;
    if (!isPlainMap(value)) return { field, message: `must be a map of strings, not ${typeName(value)}` };
    for (const [k, v] of Object.entries(value)) {
      if (v !== null && typeof v !== 'string') return { field: `${field}.${k}`, message: `must be a string, not ${typeName(v)}` };
    }
  }
  return undefined;
}

function podPorts(spec: any): ContainerPort[] {
  const ports: ContainerPort[] = [];
  for (const list of [spec?.containers, spec?.initContainers]) {
    if (!Array.isArray(list)) continue;
    for (const c of list) {
      for (const p of Array.isArray(c?.ports) ? c.ports : []) {
        if (typeof p?.containerPort !== 'number') continue;
        const protocol = p.protocol === 'UDP' || p.protocol === 'SCTP' ? p.protocol : 'TCP';
        // Two literals rather than a conditional spread, which gives each object its own hidden
        // class in V8 (one per port of every Pod of the cluster).
        ports.push(typeof p.name === 'string' && p.name ? { name: p.name, containerPort: p.containerPort, protocol } : { containerPort: p.containerPort, protocol });
      }
    }
  }
  return ports;
}

/**
 * The status condition in which a node's agent publishes a new Pod's addresses at its CNI ADD,
 * before the kubelet reports them: every other node then knows the Pod by its address from its
 * first packet on (enforcement/newpods). A condition, not an annotation: the status subresource is
 * written by the node's agent and the kubelet, never by those who may edit the Pod itself, so no
 * user can claim another Pod's address for their own. Its message is the addresses, comma-separated.
 */
export const POD_ADDRESSES_CONDITION = 'sluice.dev/PodAddresses';

/** The addresses a POD_ADDRESSES_CONDITION message lists (undefined: not such a list). */
export function parsePublishedAddresses(message: unknown): string[] | undefined {
  if (typeof message !== 'string' || message === '') return undefined;
  const ips: string[] = [];
  for (const part of message.split(',')) {
    const ip = canonicalIp(part.trim());
    if (ip === undefined) return undefined;
    if (!ips.includes(ip)) ips.push(ip);
  }
  return ips;
}

/**
 * A Pod's addresses (canonical): the kubelet's `status.podIPs`, else `status.podIP`, else those its
 * node's agent published (POD_ADDRESSES_CONDITION, status True). The kubelet's report wins: it is
 * what the Pod has once the sandbox is up, and the publication only bridges the time before it.
 */
export function podAddresses(obj: KubeObject): string[] {
  const status = obj.status;
  const ips: string[] = [];
  if (Array.isArray(status?.podIPs)) {
    for (const p of status.podIPs) {
      if (typeof p?.ip !== 'string' || !p.ip) continue;
      const ip = canonical(p.ip);
      if (!ips.includes(ip)) ips.push(ip);
    }
  }
  if (ips.length === 0 && typeof status?.podIP === 'string' && status.podIP) ips.push(canonical(status.podIP));
  if (ips.length === 0 && Array.isArray(status?.conditions)) {
    const c = status.conditions.find((x: any) => x?.type === POD_ADDRESSES_CONDITION && x.status === 'True');
    return parsePublishedAddresses(c?.message) ?? [];
  }
  return ips;
}

/** Pod object → PodInfo (ips from status only; the caller fills the rest). */
export function podInfoFromObject(obj: KubeObject): PodInfo {
  const spec = obj.spec ?? {};
  const ips = podAddresses(obj);
  return {
    namespace: obj.metadata.namespace ?? 'default',
    name: obj.metadata.name,
    labels: stringMap(obj.metadata.labels),
    ...(typeof spec.nodeName === 'string' && spec.nodeName ? { nodeName: spec.nodeName } : {}),
    ips,
    hostNetwork: spec.hostNetwork === true,
    serviceAccount: (typeof spec.serviceAccountName === 'string' && spec.serviceAccountName) ||
      (typeof spec.serviceAccount === 'string' && spec.serviceAccount) || 'default',
    ports: podPorts(spec),
  };
}

export function namespaceInfoFromObject(obj: KubeObject): NamespaceInfo {
  // The API server always sets kubernetes.io/metadata.name; hand-written manifests may omit it.
  return {
    name: obj.metadata.name,
    labels: stringMapOf([...Object.entries(stringMap(obj.metadata.labels)), [NAMESPACE_NAME_LABEL, obj.metadata.name]]),
    annotations: stringMap(obj.metadata.annotations),
  };
}

export function nodeInfoFromObject(obj: KubeObject): NodeInfo {
  const ips: string[] = [];
  const addresses = Array.isArray(obj.status?.addresses) ? obj.status.addresses : [];
  for (const type of ['InternalIP', 'ExternalIP']) {
    for (const a of addresses) if (a?.type === type && typeof a.address === 'string' && a.address && !ips.includes(canonical(a.address))) ips.push(canonical(a.address));
  }
  return { name: obj.metadata.name, labels: stringMap(obj.metadata.labels), ips };
}

export function serviceInfoFromObject(obj: KubeObject): ServiceInfo {
  const spec = obj.spec ?? {};
  const clusterIPs: string[] = [];
  const candidates = Array.isArray(spec.clusterIPs) ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  for (const ip of candidates) if (typeof ip === 'string' && ip && ip !== 'None' && !clusterIPs.includes(canonical(ip))) clusterIPs.push(canonical(ip));
  const ports: ServicePortInfo[] = [];
  for (const p of Array.isArray(spec.ports) ? spec.ports : []) {
    if (typeof p?.port !== 'number') continue;
    const protocol = p.protocol === 'UDP' || p.protocol === 'SCTP' ? p.protocol : 'TCP';
    const targetPort = typeof p.targetPort === 'number' || (typeof p.targetPort === 'string' && p.targetPort) ? p.targetPort : p.port;
    ports.push(typeof p.name === 'string' && p.name ? { name: p.name, protocol, port: p.port, targetPort } : { protocol, port: p.port, targetPort });
  }
  const selector = spec.selector && typeof spec.selector === 'object' ? stringMap(spec.selector) : undefined;
  return {
    namespace: obj.metadata.namespace ?? 'default',
    name: obj.metadata.name,
    clusterIPs,
    ...(selector && Object.keys(selector).length > 0 ? { selector } : {}),
    ports,
  };
}

export function endpointSliceInfoFromObject(obj: KubeObject): EndpointSliceInfo {
  const namespace = obj.metadata.namespace ?? 'default';
  const pods: string[] = [];
  const ips: string[] = [];
  for (const ep of Array.isArray((obj as any).endpoints) ? (obj as any).endpoints : []) {
    if (ep?.conditions?.ready === false) continue;
    const ref = ep?.targetRef;
    if (ref?.kind === 'Pod' && typeof ref.name === 'string') pods.push(`${ref.namespace ?? namespace}/${ref.name}`);
    else for (const a of Array.isArray(ep?.addresses) ? ep.addresses : []) if (typeof a === 'string') ips.push(canonical(a));
  }
  const addressType = (obj as any).addressType;
  const family = addressType === 'IPv4' ? 4 : addressType === 'IPv6' ? 6 : undefined;
  return { namespace, name: obj.metadata.name, service: labelValue(stringMap(obj.metadata.labels), 'kubernetes.io/service-name') ?? '', pods, ips, ...(family ? { family } : {}) };
}

/** FNV-1a 32-bit. */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The deterministic address for a Pod without one (see the module comment). `attempt` re-draws. */
export function deterministicPodIp(nodeName: string | undefined, namespace: string, name: string, attempt = 0): string {
  const h = fnv1a(`${nodeName ?? ''}/${namespace}/${name}${attempt ? `#${attempt}` : ''}`);
  const second = 128 + (h & 127);
  const third = (h >>> 7) & 255;
  const fourth = 1 + ((h >>> 15) % 254);
  return `10.${second}.${third}.${fourth}`;
}

export const podKey = (p: { namespace: string; name: string }) => `${p.namespace}/${p.name}`;

/**
 * An input of a Service's endpoints: the Service itself and its EndpointSlices (`svc:ns/name`), a
 * Pod named by a slice (`pod:ns/name`), the Pod at an address a slice lists (`ip:addr`), every Pod of
 * a namespace (`ns:name`, a selector without slices) or the Service at a ClusterIP (`cip:addr`).
 */
export type EndpointRead = `${'svc' | 'pod' | 'ip' | 'ns' | 'cip'}:${string}`;

/** The port a Service port sends to on one endpoint Pod (a named target port resolved on the Pod), if any. */
export function targetPortOn(pod: PodInfo, sp: ServicePortInfo): number | undefined {
  return typeof sp.targetPort === 'number' ? sp.targetPort : pod.ports.find((p) => p.name === sp.targetPort && p.protocol === sp.protocol)?.containerPort;
}

/**
 * The cluster objects, indexed for the evaluator (by IP, by namespace, by node).
 * Every mutator returns what it changed so the engine can re-evaluate only that.
 */
export class ClusterState {
  readonly pods = new Map<string, PodInfo>();
  readonly namespaces = new Map<string, NamespaceInfo>();
  readonly nodes = new Map<string, NodeInfo>();
  readonly services = new Map<string, ServiceInfo>();
  readonly endpointSlices = new Map<string, EndpointSliceInfo>();
  /** EndpointSlices by their Service ("ns/service" -> "ns/slice" -> slice). */
  private readonly slicesByService = new Map<string, Map<string, EndpointSliceInfo>>();
  readonly serviceAccounts = new Set<string>();
  /** Pod (non-hostNetwork) by IP. */
  readonly podByIp = new Map<string, PodInfo>();
  readonly nodeByIp = new Map<string, NodeInfo>();
  readonly serviceByIp = new Map<string, ServiceInfo>();
  readonly podsByNamespace = new Map<string, Map<string, PodInfo>>();
  /** The raw Pod objects, kept to recompute hostNetwork Pod addresses when their Node changes. */
  private readonly podObjects = new Map<string, KubeObject>();

  /** Bumped whenever a Namespace changes: caches of namespace-selector results key on it. */
  namespaceGeneration = 0;

  namespaceLabels(name: string): Record<string, string> {
    return this.namespaces.get(name)?.labels ?? stringMapOf([[NAMESPACE_NAME_LABEL, name]]);
  }

  /** Adds or replaces a Pod; returns [old, new] (either may be undefined). */
  upsertPod(obj: KubeObject): [PodInfo | undefined, PodInfo | undefined] {
    const key = `${obj.metadata.namespace ?? 'default'}/${obj.metadata.name}`;
    const old = this.pods.get(key);
    if (old) this.unindexPod(old);
    this.podObjects.delete(key);
    if (isTerminated(obj)) return [old, undefined];
    this.podObjects.set(key, obj);
    const pod = this.resolvePod(obj);
    this.indexPod(pod);
    return [old, pod];
  }

  removePod(namespace: string, name: string): PodInfo | undefined {
    const key = `${namespace}/${name}`;
    const old = this.pods.get(key);
    if (old) this.unindexPod(old);
    this.podObjects.delete(key);
    return old;
  }

  private resolvePod(obj: KubeObject): PodInfo {
    const pod = podInfoFromObject(obj);
    if (pod.hostNetwork) {
      const node = pod.nodeName ? this.nodes.get(pod.nodeName) : undefined;
      if (node && node.ips.length > 0) pod.ips = [...node.ips];
      return pod;
    }
    if (pod.ips.length === 0) {
      for (let attempt = 0; ; attempt++) {
        const ip = deterministicPodIp(pod.nodeName, pod.namespace, pod.name, attempt);
        if (!this.podByIp.has(ip) && !this.nodeByIp.has(ip)) {
          pod.ips = [ip];
          break;
        }
      }
    }
    return pod;
  }

  private indexPod(pod: PodInfo): void {
    const key = podKey(pod);
    this.pods.set(key, pod);
    if (!pod.hostNetwork) for (const ip of pod.ips) this.podByIp.set(ip, pod);
    let ns = this.podsByNamespace.get(pod.namespace);
    if (!ns) this.podsByNamespace.set(pod.namespace, (ns = new Map()));
    ns.set(key, pod);
  }

  private unindexPod(pod: PodInfo): void {
    const key = podKey(pod);
    this.pods.delete(key);
    for (const ip of pod.ips) if (this.podByIp.get(ip) === pod) this.podByIp.delete(ip);
    const ns = this.podsByNamespace.get(pod.namespace);
    ns?.delete(key);
    if (ns && ns.size === 0) this.podsByNamespace.delete(pod.namespace);
  }

  upsertNamespace(obj: KubeObject): [NamespaceInfo | undefined, NamespaceInfo] {
    const info = namespaceInfoFromObject(obj);
    const old = this.namespaces.get(info.name);
    this.namespaces.set(info.name, info);
    this.namespaceGeneration++;
    return [old, info];
  }

  removeNamespace(name: string): NamespaceInfo | undefined {
    const old = this.namespaces.get(name);
    this.namespaces.delete(name);
    this.namespaceGeneration++;
    return old;
  }

  /** Adds or replaces a Node; returns the hostNetwork Pods whose addresses changed as [old, new] pairs. */
  upsertNode(obj: KubeObject): { old?: NodeInfo; node: NodeInfo; pods: [PodInfo, PodInfo][] } {
    const node = nodeInfoFromObject(obj);
    const old = this.nodes.get(node.name);
    if (old) for (const ip of old.ips) if (this.nodeByIp.get(ip) === old) this.nodeByIp.delete(ip);
    this.nodes.set(node.name, node);
    for (const ip of node.ips) this.nodeByIp.set(ip, node);
    return { ...(old ? { old } : {}), node, pods: this.refreshHostPods(node.name) };
  }

  removeNode(name: string): { old?: NodeInfo; pods: [PodInfo, PodInfo][] } {
    const old = this.nodes.get(name);
    if (!old) return { pods: [] };
    for (const ip of old.ips) if (this.nodeByIp.get(ip) === old) this.nodeByIp.delete(ip);
    this.nodes.delete(name);
    return { old, pods: this.refreshHostPods(name) };
  }

  private refreshHostPods(nodeName: string): [PodInfo, PodInfo][] {
    const changed: [PodInfo, PodInfo][] = [];
    for (const [key, obj] of this.podObjects) {
      const pod = this.pods.get(key)!;
      if (!pod.hostNetwork || pod.nodeName !== nodeName) continue;
      this.unindexPod(pod);
      const fresh = this.resolvePod(obj);
      this.indexPod(fresh);
      changed.push([pod, fresh]);
    }
    return changed;
  }

  /** Adds or replaces a Service; returns [old, new]. */
  upsertService(obj: KubeObject): [ServiceInfo | undefined, ServiceInfo] {
    const svc = serviceInfoFromObject(obj);
    const old = this.removeService(svc.namespace, svc.name);
    this.services.set(`${svc.namespace}/${svc.name}`, svc);
    for (const ip of svc.clusterIPs) this.serviceByIp.set(ip, svc);
    return [old, svc];
  }

  removeService(namespace: string, name: string): ServiceInfo | undefined {
    const old = this.services.get(`${namespace}/${name}`);
    if (!old) return undefined;
    for (const ip of old.clusterIPs) if (this.serviceByIp.get(ip) === old) this.serviceByIp.delete(ip);
    this.services.delete(`${namespace}/${name}`);
    return old;
  }

  /** Adds or replaces an EndpointSlice; returns [old, new]. */
  upsertEndpointSlice(obj: KubeObject): [EndpointSliceInfo | undefined, EndpointSliceInfo] {
    const info = endpointSliceInfoFromObject(obj);
    const old = this.removeEndpointSlice(info.namespace, info.name);
    const key = `${info.namespace}/${info.name}`;
    this.endpointSlices.set(key, info);
    const svc = `${info.namespace}/${info.service}`;
    let slices = this.slicesByService.get(svc);
    if (!slices) this.slicesByService.set(svc, (slices = new Map()));
    slices.set(key, info);
    return [old, info];
  }

  removeEndpointSlice(namespace: string, name: string): EndpointSliceInfo | undefined {
    const key = `${namespace}/${name}`;
    const old = this.endpointSlices.get(key);
    if (!old) return undefined;
    this.endpointSlices.delete(key);
    const svc = `${old.namespace}/${old.service}`;
    const slices = this.slicesByService.get(svc);
    slices?.delete(key);
    if (slices?.size === 0) this.slicesByService.delete(svc);
    return old;
  }

  /**
   * The Pods behind a Service: from its EndpointSlices when any exist, else from its selector.
   * Sorted by "ns/name" so every caller sees the same order. With `family`, the endpoints of that
   * address family (slices of that addressType; Pods that have such an address). `read` is told
   * every input the answer depends on (see EndpointRead), for callers that follow the answer.
   */
  serviceEndpoints(namespace: string, name: string, family?: 4 | 6, read?: (input: EndpointRead) => void): PodInfo[] {
    read?.(`svc:${namespace}/${name}`);
    const all = [...(this.slicesByService.get(`${namespace}/${name}`)?.values() ?? [])];
    // For one family: its slices (addressType), and only Pods with an address of that family.
    const slices = family === undefined ? all : all.filter((s) => s.family === undefined || s.family === family);
    const out = new Map<string, PodInfo>();
    if (all.length > 0) {
      for (const s of slices) {
        for (const ref of s.pods) { read?.(`pod:${ref}`); const p = this.pods.get(ref); if (p) out.set(ref, p); }
        for (const ip of s.ips) { read?.(`ip:${ip}`); const p = this.podByIp.get(ip); if (p) out.set(podKey(p), p); }
      }
    } else {
      const svc = this.services.get(`${namespace}/${name}`);
      if (svc?.selector) {
        read?.(`ns:${namespace}`);
        for (const p of this.podsByNamespace.get(namespace)?.values() ?? []) {
          if (Object.entries(svc.selector).every(([k, v]) => labelValue(p.labels, k) === v)) out.set(podKey(p), p);
        }
      }
    }
    const keys = [...out.keys()].sort();
    const pods = keys.map((k) => out.get(k)!);
    return family === undefined ? pods : pods.filter((p) => p.ips.length === 0 || p.ips.some((ip) => ipFamily(ip) === family));
  }
}
