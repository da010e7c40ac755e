/**
 * Requests that come through the Kubernetes aggregation layer (`kubectl get
 * addressgroups.controlplane.sluice.io`): the API server has authenticated the user and proxies
 * the request with its front-proxy client certificate and the user in X-Remote-User /
 * X-Remote-Group headers. The controller trusts those headers only on a connection whose client
 * certificate its TLS server verified against the front-proxy CA the cluster publishes in
 * kube-system/extension-apiserver-authentication, with a name that ConfigMap allows (as every
 * extension API server does: "requestheader" authentication).
 *
 * Such a user has no Node of its own: whether it may read the views is asked of the API server
 * with a SubjectAccessReview (list on the resource in controlplane.sluice.io), so RBAC decides;
 * positive answers are cached briefly, failures are errors (503), never an allow.
 */
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { type Clock, realClock } from '../clock.js';
import { CONTROLPLANE_GROUP } from '../controlplane/types.js';
import { KubeApiError, type KubeAccess } from '../kube/access.js';
import type { ControlPlaneIdentity } from './apiserver.js';
import { NODE_NAME_EXTRA } from './auth.js';

export const AUTHENTICATION_CONFIGMAP = '/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication';

export interface RequestHeaderConfig {
  /** PEM of the CA the front-proxy client certificate is signed by. */
  clientCa: string;
  /** Common names a front-proxy certificate may have (empty: any the CA signed). */
  allowedNames: string[];
  usernameHeaders: string[];
  groupHeaders: string[];
  /** Prefixes of the user's extra headers (X-Remote-Extra-<key>, the key percent-encoded). */
  extraPrefixes: string[];
}

const jsonList = (text: string | undefined): string[] => {
  if (!text) return [];
  const v = JSON.parse(text) as unknown;
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new Error(`expected a JSON list of strings, got ${text}`);
  return v as string[];
};

/**
 * The cluster's requestheader settings from the ConfigMap, or undefined when it publishes none (no
 * aggregation layer: only tokens are accepted).
 */
export async function loadRequestHeaderConfig(io: Pick<KubeAccess, 'getJson'>): Promise<RequestHeaderConfig | undefined> {
  let cm: { data?: Record<string, string> };
  try {
    cm = (await io.getJson(AUTHENTICATION_CONFIGMAP)) as typeof cm;
  } catch (err) {
    if (err instanceof KubeApiError && err.statusCode === 404) return undefined;
    throw new Error(`reading kube-system/extension-apiserver-authentication: ${(err as Error).message}`);
  }
  const d = cm.data ?? {};
  const clientCa = d['requestheader-client-ca-file'];
  if (!clientCa) return undefined;
  try {
    return {
      clientCa,
      allowedNames: jsonList(d['requestheader-allowed-names']),
      usernameHeaders: jsonList(d['requestheader-username-headers']),
      groupHeaders: jsonList(d['requestheader-group-headers']),
      extraPrefixes: jsonList(d['requestheader-extra-headers-prefix']),
    };
  } catch (err) {
    throw new Error(`kube-system/extension-apiserver-authentication: ${(err as Error).message}`);
  }
}

/**
 * The user the aggregation layer vouches for, or undefined when the request did not come from it
 * (no verified front-proxy certificate, or no user header): the caller must then authenticate
 * otherwise (its token).
 */
export function proxiedIdentity(req: IncomingMessage, cfg: RequestHeaderConfig): ControlPlaneIdentity | undefined {
  const socket = req.socket as TLSSocket;
  if (typeof socket.getPeerCertificate !== 'function' || !socket.authorized) return undefined;
  const cn = socket.getPeerCertificate()?.subject?.CN;
  if (cfg.allowedNames.length > 0 && (typeof cn !== 'string' || !cfg.allowedNames.includes(cn))) return undefined;
  const header = (name: string): string[] => {
    const v = req.headers[name.toLowerCase()];
    return v === undefined ? [] : Array.isArray(v) ? v : [v];
  };
  const user = cfg.usernameHeaders.flatMap(header).find((u) => u !== '');
  if (!user) return undefined;
  const groups = cfg.groupHeaders.flatMap(header).flatMap((g) => g.split(',')).map((g) => g.trim()).filter(Boolean);
  // An agent's Pod-bound token keeps its Node through the proxy: it still reads only that Node's view.
  const nodeName = cfg.extraPrefixes.flatMap((prefix) => header(`${prefix}${encodeURIComponent(NODE_NAME_EXTRA)}`)).find((n) => n !== '');
  return { user, groups, ...(nodeName ? { nodeName } : {}) };
}

/** RBAC's answer, through the API server, to "may this user list this resource of controlplane.sluice.io". */
export class SubjectAccessReviewer {
  private readonly cache = new Map<string, number>();
  private readonly clock: Pick<Clock, 'now'>;

  constructor(private readonly api: Pick<KubeAccess, 'postJson'>, opts: { clock?: Pick<Clock, 'now'>; ttlMs?: number } = {}) {
    this.clock = opts.clock ?? realClock;
    this.ttlMs = opts.ttlMs ?? 10_000;
  }

  private readonly ttlMs: number;

  async mayList(id: ControlPlaneIdentity, resource: string, verb: 'list' | 'create' = 'list'): Promise<boolean> {
    const key = JSON.stringify([id.user, [...(id.groups ?? [])].sort(), resource, verb]);
    const until = this.cache.get(key);
    if (until !== undefined && until > this.clock.now()) return true;
    const answer = (await this.api.postJson('/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview',
      spec: { user: id.user, groups: id.groups ?? [], resourceAttributes: { group: CONTROLPLANE_GROUP, resource, verb } },
    }, 5000)) as { status?: { allowed?: unknown } };
    const allowed = answer.status?.allowed === true;
    if (allowed) {
      if (this.cache.size > 4096) this.cache.clear();
      this.cache.set(key, this.clock.now() + this.ttlMs);
    }
    return allowed;
  }
}
