// APIService objects (apiregistration.k8s.io/v1) as kube-aggregator reads them, without I/O:
// validation and defaults, the backend a Service and its Endpoints resolve to, the
// request-header identity sent to an extension API server, the Available condition, and the
// ConfigMap that tells extension servers whom to trust. The proxying is in aggregator.ts.
import type { KObject } from './store.js';

export const APISERVICE_STORAGE_KEY = 'apiregistration.k8s.io/apiservices';

/** The usual front-proxy names (kubeadm's flags): what the ConfigMap publishes and the proxy sends. */
export const FRONT_PROXY_CLIENT_NAME = 'front-proxy-client';
export const USERNAME_HEADER = 'X-Remote-User';
export const GROUP_HEADER = 'X-Remote-Group';
export const EXTRA_HEADER_PREFIX = 'X-Remote-Extra-';
export const AUTHENTICATION_CONFIGMAP = { namespace: 'kube-system', name: 'extension-apiserver-authentication' } as const;

/** The front proxy's TLS material: the CA extension servers verify it with, and its client certificate (PEM). */
export interface FrontProxyMaterial {
  caCert: string;
  clientCert: string;
  clientKey: string;
}

export interface ApiServiceSpec {
  group: string;
  version: string;
  service?: { namespace: string; name: string; port: number };
  caBundle?: string; // base64 of PEM
  insecureSkipTLSVerify?: boolean;
  groupPriorityMinimum: number;
  versionPriority: number;
}

const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dns1035Label = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const base64 = /^[A-Za-z0-9+/]*={0,2}$/;

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** Fills spec.service.port with 443 when absent, as the v1 defaulting does. */
export function defaultApiService(obj: KObject): void {
  const spec = obj.spec;
  if (isRecord(spec) && isRecord(spec.service) && spec.service.port === undefined) spec.service.port = 443;
}

/**
 * Which field of an APIService is unacceptable and why (kube-aggregator's ValidateAPIService), or
 * undefined. Beyond it, a caBundle must decode to PEM certificates here: Kubernetes only finds out
 * when it builds the transport, and the lab would rather refuse the object than every request.
 */
export function apiServiceProblem(obj: KObject): { field: string; message: string } | undefined {
  const spec = obj.spec;
  if (!isRecord(spec)) return { field: 'spec', message: 'Required value' };
  const { group, version } = spec;
  if (typeof version !== 'string' || version === '') return { field: 'spec.version', message: 'Required value' };
  if (!dns1035Label.test(version) || version.length > 63) return { field: 'spec.version', message: `Invalid value: "${version}": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with a letter and end with an alphanumeric character` };
  if (typeof group !== 'string' || group === '') return { field: 'spec.group', message: 'Required value: only v1 of the legacy core group may have an empty group, and the lab serves that itself' };
  if (!dnsSubdomain.test(group) || group.length > 253) return { field: 'spec.group', message: `Invalid value: "${group}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'` };
  const required = `${version}.${group}`;
  if (obj.metadata.name !== required) return { field: 'metadata.name', message: `Invalid value: "${obj.metadata.name}": must be \`spec.version+"."+spec.group\`: "${required}"` };
  const priority = (field: string, max: number) => {
    const v = spec[field];
    return Number.isInteger(v) && (v as number) > 0 && (v as number) <= max ? undefined : { field: `spec.${field}`, message: `Invalid value: ${JSON.stringify(v ?? 0)}: must be positive and less than ${max}` };
  };
  const bad = priority('groupPriorityMinimum', 20000) ?? priority('versionPriority', 1000);
  if (bad) return bad;
  const caBundle = spec.caBundle;
  const insecure = spec.insecureSkipTLSVerify;
  if (insecure !== undefined && typeof insecure !== 'boolean') return { field: 'spec.insecureSkipTLSVerify', message: `Invalid value: ${JSON.stringify(insecure)}: must be a boolean` };
  if (caBundle !== undefined && caBundle !== '') {
    if (typeof caBundle !== 'string' || !base64.test(caBundle)) return { field: 'spec.caBundle', message: 'Invalid value: must be base64 (of a PEM bundle)' };
    if (!Buffer.from(caBundle, 'base64').toString('utf8').includes('-----BEGIN CERTIFICATE-----')) return { field: 'spec.caBundle', message: 'Invalid value: decodes to no PEM certificate' };
  }
  const service = spec.service;
  if (service === undefined || service === null) {
    if (caBundle) return { field: 'spec.caBundle', message: 'Invalid value: local APIServices may not have a caBundle' };
    if (insecure) return { field: 'spec.insecureSkipTLSVerify', message: 'Invalid value: true: local APIServices may not have insecureSkipTLSVerify' };
    return undefined;
  }
  if (!isRecord(service)) return { field: 'spec.service', message: 'Invalid value: must be an object {namespace, name, port}' };
  if (typeof service.namespace !== 'string' || service.namespace === '') return { field: 'spec.service.namespace', message: 'Required value' };
  if (typeof service.name !== 'string' || service.name === '') return { field: 'spec.service.name', message: 'Required value' };
  const port = service.port;
  if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535) return { field: 'spec.service.port', message: `Invalid value: ${JSON.stringify(port)}: must be between 1 and 65535, inclusive` };
  if (insecure && caBundle) return { field: 'spec.insecureSkipTLSVerify', message: 'Invalid value: true: may not be true if caBundle is present' };
  return undefined;
}

/** The spec of a stored (so valid) APIService. */
export function apiServiceSpec(obj: KObject): ApiServiceSpec {
  return obj.spec as unknown as ApiServiceSpec;
}

/** Aggregated group → its versions, highest versionPriority first (then Kubernetes version order via `compare`). */
export function aggregatedGroups(apiServices: KObject[], compare: (a: string, b: string) => number): Map<string, string[]> {
  const byGroup = new Map<string, ApiServiceSpec[]>();
  for (const s of apiServices.map(apiServiceSpec)) byGroup.set(s.group, [...(byGroup.get(s.group) ?? []), s]);
  const out = new Map<string, string[]>();
  for (const [group, specs] of byGroup) {
    out.set(group, specs.sort((a, b) => b.versionPriority - a.versionPriority || compare(a.version, b.version)).map((s) => s.version));
  }
  return out;
}

export type Resolution = { ok: true; host: string; port: number } | { ok: false; reason: string; message: string };

/**
 * The backend of an APIService, as kube-aggregator's endpoint resolver finds it: the Service's
 * port equal to spec.service.port, then, in the Service's Endpoints object, the first subset with a
 * port of the same name (both unnamed counts as the same) and the first ready address of that
 * subset. The port dialled is the Endpoints port (the Service's targetPort is what wrote it).
 * Without an Endpoints object (the lab runs no Endpoints controller), the Service's EndpointSlices
 * are read the same way: a port of that name and a ready endpoint's first address.
 */
export function resolveBackend(spec: Required<Pick<ApiServiceSpec, 'service'>>, service: KObject | undefined, endpoints: KObject | undefined, slices: KObject[] = []): Resolution {
  const { namespace, name, port } = spec.service;
  const where = `service/${name} in "${namespace}"`;
  if (!service) return { ok: false, reason: 'ServiceNotFound', message: `${where} is not present` };
  const ports = isRecord(service.spec) && Array.isArray(service.spec.ports) ? service.spec.ports.filter(isRecord) : [];
  const servicePort = ports.find((p) => p.port === port);
  if (!servicePort) return { ok: false, reason: 'ServicePortError', message: `${where} is not listening on port ${port}` };
  const portName = typeof servicePort.name === 'string' ? servicePort.name : '';
  if (!endpoints && slices.length) {
    for (const slice of slices) {
      const slicePort = (Array.isArray(slice.ports) ? slice.ports.filter(isRecord) : []).find((p) => (typeof p.name === 'string' ? p.name : '') === portName);
      const ready = (Array.isArray(slice.endpoints) ? slice.endpoints.filter(isRecord) : [])
        .find((e) => !(isRecord(e.conditions) && e.conditions.ready === false) && Array.isArray(e.addresses) && typeof e.addresses[0] === 'string');
      if (slicePort && ready && Number.isInteger(slicePort.port)) return { ok: true, host: (ready.addresses as string[])[0]!, port: slicePort.port as number };
    }
    return { ok: false, reason: 'MissingEndpoints', message: `endpoints for ${where} have no ready addresses with port name "${portName}"` };
  }
  if (!endpoints) return { ok: false, reason: 'EndpointsNotFound', message: `cannot find endpoints for ${where}` };
  const subsets = Array.isArray(endpoints.subsets) ? endpoints.subsets.filter(isRecord) : [];
  for (const subset of subsets) {
    const addresses = Array.isArray(subset.addresses) ? subset.addresses.filter(isRecord) : [];
    const epPort = (Array.isArray(subset.ports) ? subset.ports.filter(isRecord) : []).find((p) => (typeof p.name === 'string' ? p.name : '') === portName);
    const address = addresses.find((a) => typeof a.ip === 'string' && a.ip !== '');
    if (epPort && address && Number.isInteger(epPort.port)) return { ok: true, host: address.ip as string, port: epPort.port as number };
  }
  return { ok: false, reason: 'MissingEndpoints', message: `endpoints for ${where} have no addresses with port name "${portName}"` };
}

/** Who the caller is, as the proxy vouches for it. */
export interface ProxiedUser {
  username: string;
  groups: string[];
  extra?: Record<string, string[]> | undefined;
}

/** A header name holds token characters only; the rest of an extra's key is percent-encoded, as client-go's transport does. */
function headerKeyEscape(key: string): string {
  return [...Buffer.from(key, 'utf8')].map((b) => {
    const c = String.fromCharCode(b);
    return /[A-Za-z0-9!#$&'*+\-.^_`|~]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }).join('');
}

/** The request headers that carry the user to the extension server (one X-Remote-Group per group). */
export function remoteUserHeaders(user: ProxiedUser): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = { [USERNAME_HEADER]: user.username };
  if (user.groups.length) headers[GROUP_HEADER] = [...user.groups];
  for (const [key, values] of Object.entries(user.extra ?? {})) headers[EXTRA_HEADER_PREFIX + headerKeyEscape(key)] = [...values];
  return headers;
}

/** Whether a caller's header could pass for an identity the proxy asserts: such headers never reach the backend. */
export function isIdentityHeader(name: string): boolean {
  const n = name.toLowerCase();
  return n === 'authorization' || n.startsWith('x-remote-') || n.startsWith('impersonate-');
}

export interface AvailableCondition {
  type: 'Available';
  status: 'True' | 'False';
  lastTransitionTime: string;
  reason: string;
  message: string;
}

/** The status with Available set; the transition time moves only when the status flips. */
export function withAvailable(status: unknown, next: Omit<AvailableCondition, 'type' | 'lastTransitionTime'>, now: string): Record<string, unknown> {
  const old = isRecord(status) ? status : {};
  const conditions = Array.isArray(old.conditions) ? old.conditions.filter(isRecord) : [];
  const before = conditions.find((c) => c.type === 'Available');
  const lastTransitionTime = before && before.status === next.status && typeof before.lastTransitionTime === 'string' ? before.lastTransitionTime : now;
  const condition: AvailableCondition = { type: 'Available', status: next.status, lastTransitionTime, reason: next.reason, message: next.message };
  return { ...old, conditions: [...conditions.filter((c) => c.type !== 'Available'), condition] };
}

/**
 * The data of ConfigMap kube-system/extension-apiserver-authentication as kube-apiserver
 * publishes it: the front-proxy CA and the request-header names (JSON arrays in strings), and the
 * client CA when there is one.
 */
export function authenticationConfigMapData(frontProxyCaCert: string, clientCaCert?: string): Record<string, string> {
  return {
    ...(clientCaCert ? { 'client-ca-file': clientCaCert } : {}),
    'requestheader-allowed-names': JSON.stringify([FRONT_PROXY_CLIENT_NAME]),
    'requestheader-client-ca-file': frontProxyCaCert,
    'requestheader-extra-headers-prefix': JSON.stringify([EXTRA_HEADER_PREFIX]),
    'requestheader-group-headers': JSON.stringify([GROUP_HEADER]),
    'requestheader-username-headers': JSON.stringify([USERNAME_HEADER]),
  };
}
