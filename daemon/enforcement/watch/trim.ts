/**
 * What the agent keeps of a watched API object: the informers cache every object of the cluster
 * (every Pod of every node), and a real API object carries far more than the agent reads. A Pod
 * as the API server returns it is ~5–8 KB of JSON (managedFields, container images, env, probes,
 * volumes, conditions, container statuses); the agent reads its name, labels, node, addresses,
 * service account and container ports. Trimming each object as it arrives (as client-go's
 * informer transform does) keeps only those, so the cache, the Pod view and the policy engine
 * share one small copy.
 *
 * Kept per kind, and who reads it:
 *   every kind      metadata name, namespace, uid, resourceVersion (identity; engine reports)
 *   Pod             labels, creationTimestamp, deletionTimestamp (enforcement/claims.ts); spec nodeName, hostNetwork, serviceAccountName, serviceAccount,
 *                   containers[] and initContainers[] name and ports; status phase, podIP,
 *                   podIPs, and of its conditions only sluice's address publication
 *                   (policy/cluster.ts podAddresses, podInfoFromObject, isTerminated; the
 *                   enforcer's "addressed" test; enforcement/podview.ts)
 *   Namespace       labels, annotations (namespaceInfoFromObject; NetworkPolicy audit logging)
 *   Node            labels; status addresses (nodeInfoFromObject)
 *   Service         spec clusterIP, clusterIPs, ports, selector (serviceInfoFromObject)
 *   EndpointSlice   labels (the service-name label); addressType; endpoints[] addresses,
 *                   conditions.ready, targetRef kind/namespace/name (endpointSliceInfoFromObject)
 *   ServiceAccount  nothing more (its existence)
 *   ServiceCIDR     spec cidrs (node/service-cidrs.ts)
 *   policy kinds    everything but metadata.managedFields: the normalizers read the whole spec,
 *                   and unknown spec fields are reported, so nothing of spec may go.
 *
 * A field is copied only when present, so a reader sees the same absent/present answer as on the
 * full object. Reading a field of a kind above means adding it here (test/unit/watch-trim.test.ts
 * checks every field the readers touch survives). Pure.
 */
import type { KubeObject, ObjectMeta } from '../../policy/types.js';
import { POD_ADDRESSES_CONDITION } from '../../policy/cluster.js';

type Fields = Record<string, unknown>;

const isRecord = (v: unknown): v is Fields => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `src`'s own fields among `keys`, those present only (a string key list keeps one object shape per kind). */
function pick(src: unknown, keys: readonly string[]): Fields | undefined {
  if (!isRecord(src)) return undefined;
  const out: Fields = {};
  for (const k of keys) if (Object.hasOwn(src, k)) out[k] = src[k];
  return out;
}

/** `src[key]` as a list mapped item by item (items that are no objects kept as they are). */
function pickList(src: Fields, key: string, item: (o: Fields) => Fields): void {
  const list = src[key];
  if (Array.isArray(list)) src[key] = list.map((o) => (isRecord(o) ? item(o) : o));
}

const META_BASE = ['name', 'namespace', 'uid', 'resourceVersion'] as const;
const META_LABELS = [...META_BASE, 'labels'] as const;
const META_POD = [...META_LABELS, 'creationTimestamp', 'deletionTimestamp'] as const;

function meta(obj: KubeObject, keys: readonly string[]): ObjectMeta {
  return (pick(obj.metadata, keys) ?? obj.metadata) as ObjectMeta;
}

function envelope(obj: KubeObject, metadata: ObjectMeta, rest: Fields): KubeObject {
  const out: KubeObject = { apiVersion: obj.apiVersion, kind: obj.kind, metadata };
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) out[k] = v;
  return out;
}

const container = (c: Fields): Fields => pick(c, ['name', 'ports'])!;

function trimPod(obj: KubeObject): KubeObject {
  const spec = pick(obj.spec, ['nodeName', 'hostNetwork', 'serviceAccountName', 'serviceAccount', 'containers', 'initContainers']);
  if (spec) {
    pickList(spec, 'containers', container);
    pickList(spec, 'initContainers', container);
  }
  const status = pick(obj.status, ['phase', 'podIP', 'podIPs', 'conditions']);
  if (status && Object.hasOwn(status, 'conditions')) {
    const published = Array.isArray(status.conditions) ? status.conditions.filter((c) => isRecord(c) && c.type === POD_ADDRESSES_CONDITION) : [];
    if (published.length > 0) status.conditions = published.map((c) => pick(c, ['type', 'status', 'message']));
    else delete status.conditions;
  }
  return envelope(obj, meta(obj, META_POD), { spec, status });
}

function trimEndpointSlice(obj: KubeObject): KubeObject {
  const endpoint = (ep: Fields): Fields => {
    const out = pick(ep, ['addresses', 'conditions', 'targetRef'])!;
    if (isRecord(out.conditions)) out.conditions = pick(out.conditions, ['ready']);
    if (isRecord(out.targetRef)) out.targetRef = pick(out.targetRef, ['kind', 'namespace', 'name']);
    return out;
  };
  const rest = pick(obj, ['addressType', 'endpoints'])!;
  pickList(rest, 'endpoints', endpoint);
  return envelope(obj, meta(obj, META_LABELS), rest);
}

/** The trimmed copy of `obj` (a new object; `obj` is not changed). */
export function trimObject(obj: KubeObject): KubeObject {
  if (!isRecord(obj.metadata)) return obj;
  if (obj.apiVersion === 'v1') {
    switch (obj.kind) {
      case 'Pod':
        return trimPod(obj);
      case 'Namespace':
        return envelope(obj, meta(obj, [...META_LABELS, 'annotations']), {});
      case 'Node':
        return envelope(obj, meta(obj, META_LABELS), { status: pick(obj.status, ['addresses']) });
      case 'Service': {
        const spec = pick(obj.spec, ['clusterIP', 'clusterIPs', 'ports', 'selector']);
        if (spec) pickList(spec, 'ports', (p) => pick(p, ['name', 'protocol', 'port', 'targetPort'])!);
        return envelope(obj, meta(obj, META_BASE), { spec });
      }
      case 'ServiceAccount':
        return envelope(obj, meta(obj, META_BASE), {});
    }
  }
  if (obj.apiVersion === 'discovery.k8s.io/v1' && obj.kind === 'EndpointSlice') return trimEndpointSlice(obj);
  if (obj.apiVersion === 'networking.k8s.io/v1' && obj.kind === 'ServiceCIDR') return envelope(obj, meta(obj, META_BASE), { spec: pick(obj.spec, ['cidrs']) });
  if (!Object.hasOwn(obj.metadata, 'managedFields')) return obj;
  const { managedFields: _, ...metadata } = obj.metadata as ObjectMeta & { managedFields?: unknown };
  return { ...obj, metadata };
}
