// The aggregation layer, as kube-apiserver's kube-aggregator: a request for a group-version that
// an APIService registers with a spec.service is proxied, streaming, to that Service's backend
// over TLS (verified with the APIService's caBundle for <service>.<namespace>.svc), presented
// with the front-proxy client certificate and the caller's identity in X-Remote-* headers (the
// caller's own credentials and identity headers removed). Each APIService's Available condition
// is kept as the aggregator's availability controller keeps it: on changes of the APIService, its
// Service or its Endpoints, periodically, and after each proxied request that could not reach it.
// Where the backends live in other network namespaces (the lab's nodes), `dial` opens the byte
// stream TLS runs over.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import type http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import tls from 'node:tls';
import {
  APISERVICE_STORAGE_KEY, AUTHENTICATION_CONFIGMAP, aggregatedGroups, apiServiceSpec, authenticationConfigMapData,
  FRONT_PROXY_CLIENT_NAME, type FrontProxyMaterial, isIdentityHeader, type ProxiedUser, remoteUserHeaders, resolveBackend,
  withAvailable,
} from './apiservice.js';
import { deepEqual } from './patch.js';
import { ApiError, type Registry } from './registry.js';
import { compareKubeVersions } from './resources.js';
import type { ChangeEvent, KObject, ObjectStore } from './store.js';

/** Hop-by-hop headers (RFC 9110 §7.6.1) are the connection's own and are not forwarded. */
const hopByHop = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);
const CHECK_TIMEOUT_MS = 5000;
const SLICES = 'discovery.k8s.io/endpointslices';
const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
/** The identity of the availability check, as kube-aggregator's: it must always be allowed to read discovery. */
const CHECKER: ProxiedUser = { username: 'system:kube-aggregator', groups: ['system:masters'] };

const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Checks the front-proxy material before the server starts: each PEM parses, the key is the
 * certificate's, the CA signed it, and it names front-proxy-client (what the ConfigMap allows).
 */
export function checkFrontProxyMaterial(m: FrontProxyMaterial): void {
  const parse = (what: string, f: () => X509Certificate) => {
    try {
      return f();
    } catch (e) {
      throw new Error(`the front-proxy ${what} is not a PEM certificate: ${(e as Error).message}`);
    }
  };
  const ca = parse('CA', () => new X509Certificate(m.caCert));
  const cert = parse('client certificate', () => new X509Certificate(m.clientCert));
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey(m.clientKey);
  } catch (e) {
    throw new Error(`the front-proxy client key is not a PEM private key: ${(e as Error).message}`);
  }
  if (!cert.checkPrivateKey(key)) throw new Error('the front-proxy client key does not belong to the front-proxy client certificate');
  if (!cert.verify(ca.publicKey)) throw new Error('the front-proxy client certificate is not signed by the front-proxy CA');
  if (!/(^|\n)CN=front-proxy-client(\n|$)/.test(cert.subject)) throw new Error(`the front-proxy client certificate's subject is "${cert.subject.replace(/\n/g, ', ')}", not CN=${FRONT_PROXY_CLIENT_NAME}`);
}

/** A byte stream to host:port, for backends this process cannot reach by itself. */
export type Dial = (host: string, port: number) => net.Socket;

/** Where a proxied request goes. */
interface Backend {
  apiService: string;
  host: string;
  port: number;
  servername: string;
  tls: { ca?: string; rejectUnauthorized: boolean };
  /** For messages: service/<name> in "<ns>" (host:port). */
  describe: string;
}

/** The proxy and the availability checks of one API server; its front-proxy material is checked by the caller (checkFrontProxyMaterial). */
export class Aggregator {
  private readonly agent: https.Agent;
  private readonly unsubscribe: () => void;
  private readonly timer: NodeJS.Timeout;
  private readonly running = new Map<string, Promise<void>>();
  private readonly rerun = new Set<string>();
  private readonly streams = new Set<{ destroy(): void }>();
  private closed = false;

  constructor(private readonly store: ObjectStore, private readonly registry: Registry,
    private readonly frontProxy: FrontProxyMaterial | undefined, recheckMs = 10_000, dial?: Dial) {
    // Per server, so closing the server also closes the kept-alive connections to backends.
    this.agent = new https.Agent({ keepAlive: true, ...(frontProxy ? { cert: frontProxy.clientCert, key: frontProxy.clientKey } : {}) });
    if (dial) {
      this.agent.createConnection = ((options: tls.ConnectionOptions) =>
        tls.connect({ ...options, socket: dial(String(options.host), Number(options.port)) })) as typeof this.agent.createConnection;
    }
    this.unsubscribe = store.subscribe((e) => this.onChange(e));
    this.timer = setInterval(() => {
      for (const s of this.remoteApiServices()) this.schedule(s.metadata.name!);
    }, recheckMs);
    this.timer.unref();
    for (const s of store.list(APISERVICE_STORAGE_KEY)) this.schedule(s.metadata.name!);
  }

  /** The APIService that serves group/version through a Service, if one does. */
  target(group: string, version: string): KObject | undefined {
    const obj = this.store.get(APISERVICE_STORAGE_KEY, `${version}.${group}`);
    return obj && isRecord(obj.spec) && isRecord(obj.spec.service) ? obj : undefined;
  }

  /** The groups served by extension API servers, each's versions by versionPriority. */
  groups(): Map<string, string[]> {
    return aggregatedGroups(this.remoteApiServices(), compareKubeVersions);
  }

  private remoteApiServices(): KObject[] {
    return this.store.list(APISERVICE_STORAGE_KEY).filter((s) => isRecord(s.spec) && isRecord(s.spec.service));
  }

  /** Creates or updates ConfigMap kube-system/extension-apiserver-authentication (Kubernetes' format). */
  publishAuthentication(): void {
    if (!this.frontProxy) return;
    const rt = this.registry.resolve('', 'v1', 'configmaps')!;
    const data = authenticationConfigMapData(this.frontProxy.caCert);
    const { namespace, name } = AUTHENTICATION_CONFIGMAP;
    const existing = this.store.get(rt.storageKey, `${namespace}/${name}`);
    if (!existing) this.registry.create(rt, namespace, { metadata: { name, namespace }, data });
    else if (!deepEqual(existing.data, data)) this.registry.update(rt, namespace, name, { ...existing, data });
  }

  /** Where an APIService's requests go now, or a 503 naming why nowhere (and the condition set False). */
  private backend(apiService: KObject): Backend {
    const name = apiService.metadata.name!;
    const spec = apiServiceSpec(apiService);
    const service = spec.service!;
    const r = resolveBackend({ service },
      this.store.get('/services', `${service.namespace}/${service.name}`),
      this.store.get('/endpoints', `${service.namespace}/${service.name}`),
      this.store.list(SLICES).filter((s) => s.metadata.namespace === service.namespace && s.metadata.labels?.[SERVICE_NAME_LABEL] === service.name));
    if (!r.ok) {
      this.setAvailable(name, 'False', r.reason, r.message);
      throw new ApiError(503, 'ServiceUnavailable', `APIService ${name} is unavailable (${r.reason}): ${r.message}`);
    }
    const tls = spec.insecureSkipTLSVerify ? { rejectUnauthorized: false }
      : { rejectUnauthorized: true, ...(spec.caBundle ? { ca: Buffer.from(spec.caBundle, 'base64').toString('utf8') } : {}) };
    return {
      apiService: name, host: r.host, port: r.port, servername: `${service.name}.${service.namespace}.svc`, tls,
      describe: `service/${service.name} in "${service.namespace}" (${r.host.includes(':') ? `[${r.host}]` : r.host}:${r.port})`,
    };
  }

  private request(b: Backend, method: string, path: string, headers: http.OutgoingHttpHeaders): http.ClientRequest {
    return https.request({ agent: this.agent, host: b.host, port: b.port, method, path, headers, servername: b.servername, ...b.tls });
  }

  /**
   * Proxies req to the APIService's backend as `user`; resolves once the exchange is over. Unlike
   * kube-aggregator, it tries the backend even while the Available condition is False, so a
   * backend that has just come up answers at once (the condition follows the outcome).
   */
  async proxy(req: http.IncomingMessage, res: http.ServerResponse, apiService: KObject, user: ProxiedUser): Promise<void> {
    const b = this.backend(apiService);
    const headers: http.OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !hopByHop.has(k) && !isIdentityHeader(k)) headers[k] = v;
    Object.assign(headers, remoteUserHeaders(user));
    headers.host = `${b.host.includes(':') ? `[${b.host}]` : b.host}:${b.port}`;
    await new Promise<void>((resolve) => {
      const out = this.request(b, req.method ?? 'GET', req.url ?? '/', headers);
      const stream = { destroy: () => { out.destroy(); res.destroy(); } };
      this.streams.add(stream);
      const done = () => {
        this.streams.delete(stream);
        resolve();
      };
      let back: http.IncomingMessage | undefined;
      let callerGone = false;
      out.on('response', (response) => {
        back = response;
        const answer: http.OutgoingHttpHeaders = {};
        for (const [k, v] of Object.entries(back.headers)) if (v !== undefined && !hopByHop.has(k)) answer[k] = v;
        res.writeHead(back.statusCode ?? 502, answer);
        res.flushHeaders(); // a watch's headers now, its events as they come
        back.pipe(res);
        back.on('error', () => res.destroy());
        if (!this.isAvailable(b.apiService)) this.schedule(b.apiService);
      });
      out.on('error', (err) => {
        // Cut because the caller left: nothing to answer, and nothing said about the backend.
        if (callerGone) {
          done();
          return;
        }
        if (res.headersSent) {
          res.destroy();
        } else {
          const why = `error trying to reach ${b.describe}: ${err.message}`;
          this.setAvailable(b.apiService, 'False', 'FailedDiscoveryCheck', `failing or missing response from https://${headers.host}${req.url ?? '/'}: ${err.message}`);
          const status = new ApiError(503, 'ServiceUnavailable', `APIService ${b.apiService} is unavailable: ${why}`).toStatus();
          const text = JSON.stringify(status);
          res.writeHead(503, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
          res.end(text);
        }
        done();
      });
      // The caller going away ends the backend exchange (a watch, above all).
      res.on('close', () => {
        callerGone = !res.writableFinished;
        if (!back?.complete) out.destroy();
        done();
      });
      req.pipe(out);
    });
  }

  private isAvailable(name: string): boolean {
    const status = this.store.get(APISERVICE_STORAGE_KEY, name)?.status;
    const conditions = isRecord(status) && Array.isArray(status.conditions) ? status.conditions : [];
    return conditions.some((c) => isRecord(c) && c.type === 'Available' && c.status === 'True');
  }

  private setAvailable(name: string, status: 'True' | 'False', reason: string, message: string): void {
    if (this.closed) return;
    const obj = this.store.get(APISERVICE_STORAGE_KEY, name);
    if (!obj) return;
    const next = withAvailable(obj.status, { status, reason, message }, now());
    if (deepEqual(next, obj.status)) return;
    const rt = this.registry.resolve('apiregistration.k8s.io', 'v1', 'apiservices')!;
    this.registry.update(rt, undefined, name, { ...obj, status: next }, 'status');
  }

  private onChange(e: ChangeEvent): void {
    if (e.resource === APISERVICE_STORAGE_KEY) {
      if (e.type === 'DELETED' || (e.type === 'MODIFIED' && deepEqual(e.object.spec, e.previous?.spec))) return;
      this.schedule(e.object.metadata.name!);
    } else if (e.resource === '/services' || e.resource === '/endpoints' || e.resource === SLICES) {
      const { namespace } = e.object.metadata;
      const name = e.resource === SLICES ? e.object.metadata.labels?.[SERVICE_NAME_LABEL] : e.object.metadata.name;
      for (const s of this.remoteApiServices()) {
        const svc = apiServiceSpec(s).service!;
        if (svc.namespace === namespace && svc.name === name) this.schedule(s.metadata.name!);
      }
    }
  }

  /** One availability check per APIService at a time; a change during one runs it again after. */
  private schedule(name: string): void {
    if (this.closed) return;
    if (this.running.has(name)) {
      this.rerun.add(name);
      return;
    }
    // Never from inside the store's change notification: the check writes to the store.
    const run = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.check(name)).finally(() => {
      this.running.delete(name);
      if (this.rerun.delete(name)) this.schedule(name);
    });
    this.running.set(name, run);
  }

  /** The availability controller's checks: Service, Endpoints, then GET of the group-version's discovery. */
  private async check(name: string): Promise<void> {
    const obj = this.store.get(APISERVICE_STORAGE_KEY, name);
    if (!obj || this.closed) return;
    if (!isRecord(obj.spec) || !isRecord(obj.spec.service)) {
      this.setAvailable(name, 'True', 'Local', 'Local APIServices are always available');
      return;
    }
    let b: Backend;
    try {
      b = this.backend(obj);
    } catch {
      return; // backend() set the condition
    }
    const spec = apiServiceSpec(obj);
    const path = `/apis/${spec.group}/${spec.version}`;
    const url = `https://${b.host.includes(':') ? `[${b.host}]` : b.host}:${b.port}${path}`;
    const problem = await new Promise<string | undefined>((resolve) => {
      const out = this.request(b, 'GET', path, { accept: 'application/json', ...remoteUserHeaders(CHECKER) });
      const stream = { destroy: () => out.destroy() };
      this.streams.add(stream);
      const finish = (p: string | undefined) => {
        this.streams.delete(stream);
        resolve(p);
      };
      out.setTimeout(CHECK_TIMEOUT_MS, () => out.destroy(new Error(`timed out after ${CHECK_TIMEOUT_MS} ms`)));
      out.on('response', (back) => {
        back.resume();
        const code = back.statusCode ?? 0;
        finish(code >= 200 && code < 300 ? undefined : `bad status from ${url}: ${code}`);
      });
      out.on('error', (err) => finish(`failing or missing response from ${url}: ${err.message}`));
      out.end();
    });
    if (problem) this.setAvailable(name, 'False', 'FailedDiscoveryCheck', problem);
    else this.setAvailable(name, 'True', 'Passed', 'all checks passed');
  }

  /** Cuts every proxied stream (the chaos suite's "every watch cut"). */
  dropStreams(): void {
    for (const s of [...this.streams]) s.destroy();
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    this.unsubscribe();
    this.dropStreams();
    this.agent.destroy();
  }
}
