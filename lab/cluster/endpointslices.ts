/**
 * EndpointSlice computation, the pure half of the lab's EndpointSlice controller: what slices a
 * Service with a selector should have given the Pods, and the diff against what exists.
 */
import { createHash } from 'node:crypto';
import { parseIp } from '../../daemon/policy/cidr.js';
import { labelValue } from '../../daemon/policy/labels.js';
import type { KubeObject } from '../../daemon/policy/types.js';

export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const MANAGED_BY_LABEL = 'endpointslice.kubernetes.io/managed-by';
export const MANAGED_BY = 'endpointslice-controller.sluice-lab';

export interface SlicePort {
  name?: string;
  port: number;
  protocol: 'TCP' | 'UDP' | 'SCTP';
}

interface ServicePort {
  name?: string;
  port: number;
  protocol?: string;
  targetPort?: number | string;
}

interface ContainerPortSpec {
  name?: string;
  containerPort: number;
  protocol?: string;
}

const protocolOf = (p?: string): SlicePort['protocol'] => (p === 'UDP' || p === 'SCTP' ? p : 'TCP');

/** True when every selector label is on the Pod (Services select with plain equality). */
export function selectorMatches(selector: Record<string, string>, labels: Record<string, string> | undefined): boolean {
  return Object.entries(selector).every(([k, v]) => !!labels && labelValue(labels, k) === v);
}

/** Set once a delete has begun (graceful deletion). */
export const isTerminating = (o: KubeObject): boolean => Boolean((o.metadata as { deletionTimestamp?: string }).deletionTimestamp);

export function podIsReady(pod: KubeObject): boolean {
  const conds: { type?: string; status?: string }[] = pod.status?.conditions ?? [];
  return pod.status?.phase === 'Running' && conds.some((c) => c.type === 'Ready' && c.status === 'True');
}

/**
 * A Pod's endpoint ports for a Service: a numeric targetPort is used as is (absent = the Service
 * port); a named one resolves to the Pod's container port of that name and protocol. null when a
 * named port does not resolve on this Pod (the Pod then cannot serve the Service).
 */
export function resolvePorts(svcPorts: ServicePort[], pod: KubeObject): SlicePort[] | null {
  const containerPorts: ContainerPortSpec[] = (pod.spec?.containers ?? []).flatMap((c: { ports?: ContainerPortSpec[] }) => c.ports ?? []);
  const out: SlicePort[] = [];
  for (const sp of svcPorts) {
    const protocol = protocolOf(sp.protocol);
    let port: number | undefined;
    if (typeof sp.targetPort === 'string' && !/^\d+$/.test(sp.targetPort)) {
      port = containerPorts.find((cp) => cp.name === sp.targetPort && protocolOf(cp.protocol) === protocol)?.containerPort;
      if (port === undefined) return null;
    } else {
      port = sp.targetPort === undefined ? sp.port : Number(sp.targetPort);
    }
    out.push(sp.name ? { name: sp.name, port, protocol } : { port, protocol });
  }
  return out;
}

const shortHash = (s: string): string => createHash('sha256').update(s).digest('hex').slice(0, 5);

type AddressType = 'IPv4' | 'IPv6';
const addressTypeOf = (ip: string): AddressType => (ip.includes(':') ? 'IPv6' : 'IPv4');

/** A Pod's address of one family (status.podIPs, status.podIP as the fallback). */
function podAddress(pod: KubeObject, family: AddressType): string | undefined {
  const all = [pod.status?.podIP, ...((pod.status?.podIPs ?? []) as { ip?: string }[]).map((p) => p.ip)];
  return all.find((ip): ip is string => typeof ip === 'string' && ip !== '' && addressTypeOf(ip) === family);
}

/** The families a Service's slices carry: its spec.ipFamilies (IPv4 when unset). */
function serviceFamilies(svc: KubeObject): AddressType[] {
  const listed = ((svc.spec?.ipFamilies ?? []) as unknown[]).filter((f): f is AddressType => f === 'IPv4' || f === 'IPv6');
  return listed.length ? [...new Set(listed)] : ['IPv4'];
}

/**
 * The slices a Service should have: per address family of the Service (spec.ipFamilies), one per
 * distinct set of resolved ports (named ports may resolve differently on different Pods), endpoints
 * sorted by address. A family whose Pods cannot serve gets one empty slice, like the real
 * controller. null for a Service without selector (its slices are someone else's).
 */
export function desiredEndpointSlices(svc: KubeObject, pods: KubeObject[]): KubeObject[] | null {
  const selector: Record<string, string> | undefined = svc.spec?.selector;
  if (!selector || Object.keys(selector).length === 0) return null;
  return serviceFamilies(svc).flatMap((family) => familySlices(svc, selector, pods, family));
}

function familySlices(svc: KubeObject, selector: Record<string, string>, pods: KubeObject[], family: AddressType): KubeObject[] {
  const namespace = svc.metadata.namespace ?? 'default';
  const svcPorts: ServicePort[] = svc.spec?.ports ?? [];
  const groups = new Map<string, { ports: SlicePort[]; endpoints: unknown[] }>();
  const members = pods
    .filter((p) => (p.metadata.namespace ?? 'default') === namespace && podAddress(p, family) && selectorMatches(selector, p.metadata.labels))
    .filter((p) => p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed')
    .sort((a, b) => compareIPs(podAddress(a, family)!, podAddress(b, family)!));
  for (const pod of members) {
    const ports = resolvePorts(svcPorts, pod);
    if (!ports) continue;
    const key = JSON.stringify(ports);
    if (!groups.has(key)) groups.set(key, { ports, endpoints: [] });
    const ready = podIsReady(pod) && !isTerminating(pod);
    groups.get(key)!.endpoints.push({
      addresses: [podAddress(pod, family)],
      conditions: { ready, serving: podIsReady(pod), terminating: isTerminating(pod) },
      ...(pod.spec?.nodeName ? { nodeName: pod.spec.nodeName } : {}),
      targetRef: { kind: 'Pod', namespace, name: pod.metadata.name, ...(pod.metadata.uid ? { uid: pod.metadata.uid } : {}) },
    });
  }
  if (groups.size === 0) groups.set('[]', { ports: [], endpoints: [] });
  const base = svc.metadata.name.slice(0, 57);
  // IPv4 slices keep the names they had before slices had a family; IPv6 ones hash the family in.
  const suffix = family === 'IPv4' ? '' : '/IPv6';
  return [...groups.entries()].map(([key, g]) => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${base}-${shortHash(key + suffix)}`,
      namespace,
      labels: { [SERVICE_NAME_LABEL]: svc.metadata.name, [MANAGED_BY_LABEL]: MANAGED_BY },
      ...(svc.metadata.uid
        ? { ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: svc.metadata.name, uid: svc.metadata.uid, controller: true, blockOwnerDeletion: true }] }
        : {}),
    } as KubeObject['metadata'],
    addressType: family,
    endpoints: g.endpoints,
    ports: g.ports,
  }));
}

/** Numeric address order within one family. */
function compareIPs(a: string, b: string): number {
  const n = (ip: string): bigint => parseIp(ip)?.value ?? 0n;
  const d = n(a) - n(b);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
}

export interface SliceDiff {
  create: KubeObject[];
  /** Desired objects carrying the existing resourceVersion, ready for a PUT. */
  update: KubeObject[];
  delete: KubeObject[];
}

/** Diff desired slices against the existing ones this controller manages (by name). */
export function diffSlices(desired: KubeObject[], existing: KubeObject[]): SliceDiff {
  const have = new Map(existing.map((s) => [s.metadata.name, s]));
  const want = new Set(desired.map((s) => s.metadata.name));
  const diff: SliceDiff = { create: [], update: [], delete: [] };
  for (const d of desired) {
    const e = have.get(d.metadata.name);
    if (!e) diff.create.push(d);
    else if (!sameSlice(d, e)) diff.update.push({ ...d, metadata: { ...d.metadata, resourceVersion: e.metadata.resourceVersion } as KubeObject['metadata'] });
  }
  for (const e of existing) if (!want.has(e.metadata.name)) diff.delete.push(e);
  return diff;
}

/** Compares only the fields this controller sets, so server-side defaults cause no update loop. */
function sameSlice(a: KubeObject, b: KubeObject): boolean {
  type Ep = { addresses?: string[]; conditions?: Record<string, boolean>; nodeName?: string; targetRef?: { name?: string } };
  const view = (s: KubeObject): string =>
    JSON.stringify([
      s.metadata.labels?.[SERVICE_NAME_LABEL],
      s.metadata.labels?.[MANAGED_BY_LABEL],
      s.addressType,
      ((s.endpoints ?? []) as Ep[]).map((e) => [
        e.addresses ?? [], Boolean(e.conditions?.ready), Boolean(e.conditions?.serving), Boolean(e.conditions?.terminating),
        e.nodeName ?? null, e.targetRef?.name ?? null,
      ]),
      ((s.ports ?? []) as SlicePort[]).map((p) => [p.name ?? '', p.port, p.protocol ?? 'TCP']),
    ]);
  return view(a) === view(b);
}

/** Whether an existing slice is ours to manage. */
export const isManagedSlice = (s: KubeObject): boolean => s.metadata.labels?.[MANAGED_BY_LABEL] === MANAGED_BY;
