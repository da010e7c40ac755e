/**
 * A small REST client for the lab's API server (create/get/list/update/delete by kind), used by
 * the CLI and the lab's controllers for writes. Watches go through @kubernetes/client-node
 * informers; this only does request/response. Errors carry the Kubernetes Status message.
 */
import type { KubeObject } from '../daemon/policy/types.js';
import { resolveKind, resourcePath, type ResourceKind } from './kinds.js';

export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/** The request got no HTTP answer; `code` is the socket error (ECONNREFUSED, ECONNRESET, …). */
class TransportError extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

export interface KubeList {
  apiVersion: string;
  kind: string;
  metadata: { resourceVersion?: string };
  items: KubeObject[];
}

/**
 * How a request that never got an answer is tried again: the lab's API server is a process on a
 * loaded 2-CPU machine, and one refused or reset connection must not fail a whole test case. The
 * bound keeps a server that is really gone a prompt, clear error.
 */
export interface RetryPolicy {
  attempts: number;
  /** Delay before the second attempt; doubled each time. */
  firstDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 5, firstDelayMs: 100 };

/** Errors where the request certainly never reached the server: any method may be sent again. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOENT', 'EADDRNOTAVAIL']);

export class RestClient {
  constructor(
    readonly server: string,
    private readonly token?: string,
    private readonly retry: RetryPolicy = DEFAULT_RETRY,
  ) {}

  /**
   * One request, sent again (with a bound) after a transport failure: always when the connection
   * was refused, and for idempotent methods after any other failure (a reset mid-way). A DELETE
   * retried after a reset may find the object gone: the first attempt deleted it, so that counts as
   * done. A POST reset mid-way is not repeated: it may have been applied.
   */
  async request<T>(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<T> {
    let delay = this.retry.firstDelayMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once<T>(method, path, body, contentType);
      } catch (err) {
        if (!(err instanceof TransportError)) {
          if (attempt > 1 && method === 'DELETE' && err instanceof ApiError && err.code === 404) return undefined as T;
          throw err;
        }
        const retriable = NOT_SENT.has(err.code) || method !== 'POST';
        if (!retriable || attempt >= this.retry.attempts) {
          const tries = attempt > 1 ? ` (${attempt} attempts)` : '';
          throw new ApiError(0, 'Unreachable', `cannot reach the lab API server at ${this.server}: ${err.code}${tries}`);
        }
        await new Promise((r) => setTimeout(r, delay));
        delay *= 2;
      }
    }
  }

  private async once<T>(method: string, path: string, body: unknown, contentType: string): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.server}${path}`, {
        method,
        headers: {
          accept: 'application/json',
          ...(body !== undefined ? { 'content-type': contentType } : {}),
          ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new TransportError(cause?.code ?? cause?.message ?? (err as Error).message);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      throw new TransportError(`reading the response: ${(err as Error).message}`);
    }
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    if (!res.ok) {
      const status = json as { message?: string; reason?: string } | undefined;
      throw new ApiError(res.status, status?.reason ?? res.statusText, status?.message ?? `${method} ${path}: HTTP ${res.status} ${text.slice(0, 200)}`);
    }
    return json as T;
  }

  list(kind: ResourceKind, opts: { namespace?: string | undefined | undefined; labelSelector?: string | undefined; fieldSelector?: string | undefined } = {}): Promise<KubeList> {
    const q = new URLSearchParams();
    if (opts.labelSelector) q.set('labelSelector', opts.labelSelector);
    if (opts.fieldSelector) q.set('fieldSelector', opts.fieldSelector);
    const qs = q.toString();
    return this.request<KubeList>('GET', `${resourcePath(kind, opts.namespace)}${qs ? `?${qs}` : ''}`);
  }

  get(kind: ResourceKind, name: string, namespace?: string): Promise<KubeObject> {
    return this.request('GET', resourcePath(kind, namespace, name));
  }

  /** The object, or undefined when it does not exist. */
  async tryGet(kind: ResourceKind, name: string, namespace?: string): Promise<KubeObject | undefined> {
    try {
      return await this.get(kind, name, namespace);
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return undefined;
      throw err;
    }
  }

  create(kind: ResourceKind, obj: KubeObject): Promise<KubeObject> {
    return this.request('POST', resourcePath(kind, kind.namespaced ? obj.metadata.namespace ?? 'default' : undefined), obj);
  }

  update(kind: ResourceKind, obj: KubeObject, subresource?: 'status'): Promise<KubeObject> {
    const path = resourcePath(kind, kind.namespaced ? obj.metadata.namespace ?? 'default' : undefined, obj.metadata.name);
    return this.request('PUT', subresource ? `${path}/${subresource}` : path, obj);
  }

  /** A JSON merge patch (RFC 7386), or with type 'json' a JSON patch (RFC 6902). */
  patch(kind: ResourceKind, name: string, namespace: string | undefined, patch: unknown, subresource?: 'status', type: 'merge' | 'json' = 'merge'): Promise<KubeObject> {
    const path = resourcePath(kind, namespace, name);
    return this.request('PATCH', subresource ? `${path}/${subresource}` : path, patch, type === 'json' ? 'application/json-patch+json' : 'application/merge-patch+json');
  }

  delete(kind: ResourceKind, name: string, namespace?: string): Promise<unknown> {
    return this.request('DELETE', resourcePath(kind, namespace, name));
  }

  /**
   * create, or update when it exists (like `kubectl apply` without the last-applied annotation:
   * the object replaces the stored one, keeping server-owned status).
   */
  async apply(kind: ResourceKind, obj: KubeObject): Promise<{ action: 'created' | 'configured' | 'unchanged'; obj: KubeObject }> {
    const ns = kind.namespaced ? obj.metadata.namespace ?? 'default' : undefined;
    const existing = await this.tryGet(kind, obj.metadata.name, ns);
    if (!existing) {
      try {
        return { action: 'created', obj: await this.create(kind, obj) };
      } catch (err) {
        if (!(err instanceof ApiError && err.code === 409)) throw err;
        return this.apply(kind, obj); // created meanwhile: update instead
      }
    }
    const merged: KubeObject = {
      ...obj,
      metadata: { ...existing.metadata, labels: obj.metadata.labels, annotations: obj.metadata.annotations },
      ...(existing.status !== undefined ? { status: existing.status } : {}),
    };
    if (!merged.metadata.labels) delete merged.metadata.labels;
    if (!merged.metadata.annotations) delete merged.metadata.annotations;
    if (kind.kind === 'Pod' && existing.spec?.nodeName && !obj.spec?.nodeName) merged.spec = { ...obj.spec, nodeName: existing.spec.nodeName };
    if (kind.kind === 'Service' && existing.spec) {
      // What the server filled in (the ClusterIP, the families, the defaults) is kept unless the
      // manifest says otherwise, so that re-applying the same Service changes nothing.
      const kept = Object.fromEntries(SERVICE_SERVER_FIELDS.filter((k) => existing.spec[k] !== undefined && obj.spec?.[k] === undefined).map((k) => [k, existing.spec[k]]));
      const ports = Array.isArray(obj.spec?.ports) ? (obj.spec.ports as Record<string, unknown>[]).map((p) => ({ protocol: 'TCP', targetPort: p.port, ...p })) : undefined;
      merged.spec = { ...kept, ...obj.spec, ...(ports ? { ports } : {}) };
    }
    if (sameContent(existing, merged)) return { action: 'unchanged', obj: existing };
    return { action: 'configured', obj: await this.update(kind, merged) };
  }
}

/** Service spec fields the API server sets when a manifest leaves them out. */
const SERVICE_SERVER_FIELDS = ['clusterIP', 'clusterIPs', 'type', 'sessionAffinity', 'internalTrafficPolicy', 'ipFamilies', 'ipFamilyPolicy'];

function sameContent(a: KubeObject, b: KubeObject): boolean {
  const strip = (o: KubeObject): unknown => {
    const { status: _s, metadata, ...rest } = o;
    return { rest, labels: metadata.labels ?? {}, annotations: metadata.annotations ?? {} };
  };
  return stableJson(strip(a)) === stableJson(strip(b));
}

export function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** Runs a write whose target may already be gone (a delete racing the garbage collector): 404 is success. */
export async function ignore404(fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 404)) throw err;
  }
}

/** Records an Event on `involved` (an apps/v1 workload) as `component`; a failure to record it is ignored. */
export function recordEvent(rest: RestClient, involved: KubeObject, e: { type: 'Normal' | 'Warning'; reason: string; message: string; component: string }): Promise<unknown> {
  return rest.create(resolveKind('events'), {
    apiVersion: 'v1', kind: 'Event',
    metadata: { name: `${involved.metadata.name}.${Date.now().toString(16)}`, namespace: involved.metadata.namespace },
    involvedObject: { apiVersion: involved.apiVersion ?? 'apps/v1', kind: involved.kind, name: involved.metadata.name, namespace: involved.metadata.namespace, uid: involved.metadata.uid },
    type: e.type, reason: e.reason, message: e.message, source: { component: e.component }, count: 1,
  } as KubeObject).catch(() => undefined);
}
