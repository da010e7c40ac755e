// HTTP front end of the lab's Kubernetes API server: routing of /api and /apis paths,
// discovery documents, bearer-token check, list/watch streaming (newline-delimited JSON
// events, resumable from a resourceVersion, 410 Gone when history no longer reaches back), and
// the aggregation layer's proxy to extension API servers (aggregator.ts).
import { existsSync, unlinkSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { dumpYaml, parseYaml } from '../../daemon/kube-yaml.js';
import { Aggregator, checkFrontProxyMaterial, type Dial } from './aggregator.js';
import type { FrontProxyMaterial } from './apiservice.js';
import { patchContentTypes } from './patch.js';
import { openApiDocument, openApiIndex } from './openapi.js';
import { ApiError, Registry, type Selection } from './registry.js';
import { crdStorageKey, type ResourceType } from './resources.js';
import { verifyServiceAccountToken } from './satoken.js';
import { toTable, wantsTable } from './table.js';
import { ObjectStore, type ChangeEvent, type KObject } from './store.js';

export interface ApiServerOptions {
  host?: string;            // default 127.0.0.1
  port?: number;            // default 0 = pick a free port
  unixSocket?: string;      // also listen on this unix socket path
  token?: string;           // bearer token required when set (401 otherwise)
  dataFile?: string;        // persist objects + current resourceVersion here; reload at start
  seedFile?: string;        // start from the objects of this file (dataFile's format), not written back
  installCRDs?: boolean;    // default true: serve the crd.antrea.io and policy.networking.k8s.io resources
  historyLimit?: number;    // watch events kept for resuming; older resourceVersions get 410 Gone (default 1000)
  serviceCIDR?: string;     // ClusterIP allocation range(s), "A" or "A,B" (one per family, primary first), default 10.96.0.0/16
  bookmarkIntervalMs?: number; // period of BOOKMARK events on watches that allow them (default 10000)
  /**
   * Also send a BOOKMARK on every such watch right after each change (coalesced per turn of the
   * event loop), so every watcher learns at once that it has seen everything up to the new
   * resourceVersion, even on resources the change did not touch. The lab turns it on: that is how
   * its tests know an agent has applied a write (the agent reports the version it has enforced).
   */
  bookmarkOnChange?: boolean;
  /**
   * How a watch from an expired resourceVersion fails: 'http' (default) answers HTTP 410;
   * 'event' answers 200 with one ERROR event carrying the 410 Status, then closes, as a
   * kube-apiserver serving the watch from its watch cache does.
   */
  expiredWatch?: 'http' | 'event';
  /**
   * Also serve HTTPS (the same API) with this PEM certificate and key: on a TCP port of host
   * (ApiServer.httpsUrl) and, when given, on unixSocket (what a node's forwarder reaches).
   */
  tls?: { cert: string; key: string; unixSocket?: string };
  /** Also accept ServiceAccount tokens signed with this key (satoken.ts) while the ServiceAccount exists. */
  serviceAccountKey?: string;
  /**
   * The aggregation layer's front-proxy CA and client certificate (CN front-proxy-client, PEM):
   * presented to extension API servers on every proxied request, and the CA published in ConfigMap
   * kube-system/extension-apiserver-authentication so that they trust its X-Remote-* headers.
   * Without it requests are still proxied, but with no client certificate nothing vouches for them.
   */
  frontProxy?: FrontProxyMaterial;
  /** How the aggregation layer reaches backends in other network namespaces (the lab's nodes). */
  dial?: Dial;
}

export interface ApiServer {
  url: string;
  port: number;
  /** With ApiServerOptions.tls: https://host:port. */
  httpsUrl?: string;
  close(): Promise<void>;
  /** See Store.compact. */
  compact(includingPresent?: boolean): void;
  dropWatches(): void;
}

const maxBodyBytes = 8 * 1024 * 1024;

/** Who a bearer token is, as a TokenReview's status.user reports it. */
export interface ReviewedUser {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

/** Whom the lab vouches for to an extension API server when it runs without a token and the caller sent none. */
const ANONYMOUS: ReviewedUser = { username: 'system:anonymous', groups: ['system:unauthenticated'] };

/** The user the admin token (ApiServerOptions.token) stands for. */
export const ADMIN_USER = 'sluice-lab-admin';
/** The audience of every token the lab accepts: the API server's own, as kube-apiserver's default. */
export const API_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';
const TOKENREVIEW_PATH = '/apis/authentication.k8s.io/v1/tokenreviews';
/** Create-only resources served besides the stored ones (listed in discovery, not in the store). */
const virtualResources = [{ group: 'authentication.k8s.io', version: 'v1', name: 'tokenreviews', kind: 'TokenReview', verbs: ['create'] }];
const openPaths = new Set(['/healthz', '/readyz', '/livez', '/version']);

interface Route {
  rt: ResourceType;
  namespace?: string | undefined;
  name?: string | undefined;
  subresource?: 'status' | undefined;
}

interface OpenWatch {
  res: http.ServerResponse;
  end(): void;
}

function sendJson(res: http.ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: http.ServerResponse, err: ApiError): void {
  sendJson(res, err.code, err.toStatus());
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBodyBytes) throw new ApiError(413, 'RequestEntityTooLarge', `request body larger than ${maxBodyBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** A request body: JSON, or YAML when the Content-Type says so (as kube-apiserver accepts). */
function parseBody(req: http.IncomingMessage, text: string): unknown {
  if (text.trim() === '') return undefined;
  const yamlBody = /^application\/(x-)?yaml\b/.test(req.headers['content-type'] ?? '');
  try {
    return yamlBody ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    throw new ApiError(400, 'BadRequest', `the request body is not valid ${yamlBody ? 'YAML' : 'JSON'}: ${(e as Error).message}`);
  }
}

export class ApiServerImpl {
  readonly store: ObjectStore;
  readonly registry: Registry;
  readonly aggregator: Aggregator;
  private readonly watches = new Set<OpenWatch>();
  private readonly servers: (http.Server | https.Server)[] = [];
  private readonly bookmarkIntervalMs: number;

  constructor(private readonly opts: ApiServerOptions) {
    if (opts.frontProxy) checkFrontProxyMaterial(opts.frontProxy);
    this.store = new ObjectStore(opts.historyLimit ?? 1000, opts.dataFile, opts.seedFile);
    this.registry = new Registry(this.store, opts.serviceCIDR ?? '10.96.0.0/16');
    this.registry.seed(opts.installCRDs ?? true);
    this.aggregator = new Aggregator(this.store, this.registry, opts.frontProxy, undefined, opts.dial);
    this.aggregator.publishAuthentication();
    this.bookmarkIntervalMs = opts.bookmarkIntervalMs ?? 10_000;
  }

  async listen(): Promise<ApiServer> {
    const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
      this.handle(req, res).catch((e: unknown) => {
        const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', `internal error: ${(e as Error).message}`);
        if (!res.headersSent) sendError(res, err);
        else res.destroy();
      });
    };
    const listen = (server: http.Server | https.Server, start: (done: () => void) => void) => new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      start(() => {
        server.off('error', reject);
        resolve();
      });
    });
    const tcp = http.createServer(handler);
    let httpsPort: number | undefined;
    try {
      await listen(tcp, (done) => tcp.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', done));
      this.servers.push(tcp);
      if (this.opts.unixSocket) {
        const path = this.opts.unixSocket;
        if (existsSync(path)) unlinkSync(path); // a stale socket from a crashed run
        const unix = http.createServer(handler);
        await listen(unix, (done) => unix.listen(path, done));
        this.servers.push(unix);
      }
      if (this.opts.tls) {
        const { cert, key, unixSocket } = this.opts.tls;
        const secure = https.createServer({ cert, key }, handler);
        await listen(secure, (done) => secure.listen(0, this.opts.host ?? '127.0.0.1', done));
        this.servers.push(secure);
        httpsPort = (secure.address() as AddressInfo).port;
        if (unixSocket) {
          if (existsSync(unixSocket)) unlinkSync(unixSocket);
          const secureUnix = https.createServer({ cert, key }, handler);
          await listen(secureUnix, (done) => secureUnix.listen(unixSocket, done));
          this.servers.push(secureUnix);
        }
      }
    } catch (e) {
      // Nothing half-started: close what did listen.
      await this.close();
      const where = this.opts.unixSocket ? ` / ${this.opts.unixSocket}` : '';
      throw new Error(`API server cannot listen on ${this.opts.host ?? '127.0.0.1'}:${this.opts.port ?? 0}${where}: ${(e as Error).message}`);
    }
    const port = (tcp.address() as AddressInfo).port;
    const host = this.opts.host ?? '127.0.0.1';
    const hostInUrl = host.includes(':') ? `[${host}]` : host;
    return {
      url: `http://${hostInUrl}:${port}`,
      port,
      ...(httpsPort !== undefined ? { httpsUrl: `https://${hostInUrl}:${httpsPort}` } : {}),
      close: () => this.close(),
      compact: (includingPresent?: boolean) => this.store.compact(includingPresent),
      dropWatches: () => {
        for (const w of [...this.watches]) w.res.socket?.destroy();
        this.aggregator.dropStreams();
      },
    };
  }

  private async close(): Promise<void> {
    this.aggregator.close();
    for (const w of [...this.watches]) w.end();
    // Let ended watch streams flush their last chunk before cutting what is left.
    await Promise.all(this.servers.map((s) => new Promise<void>((resolve) => {
      const force = setTimeout(() => s.closeAllConnections(), 500);
      s.close(() => {
        clearTimeout(force);
        resolve();
      });
      s.closeIdleConnections();
    })));
    this.store.close();
    for (const path of [this.opts.unixSocket, this.opts.tls?.unixSocket]) if (path && existsSync(path)) unlinkSync(path);
  }

  private authorized(req: http.IncomingMessage, path: string): boolean {
    if (!this.opts.token || openPaths.has(path)) return true;
    const auth = req.headers.authorization ?? '';
    // RBAC is not enforced: a valid ServiceAccount token may do what the admin token may.
    return auth.startsWith('Bearer ') && this.reviewToken(auth.slice(7)) !== undefined;
  }

  /** Who the caller of an authorized request is (the anonymous user on a lab without a token). */
  private caller(req: http.IncomingMessage): ReviewedUser | undefined {
    const auth = req.headers.authorization ?? '';
    const user = auth.startsWith('Bearer ') ? this.reviewToken(auth.slice(7)) : undefined;
    return user ?? (this.opts.token ? undefined : ANONYMOUS);
  }

  /**
   * The user a bearer token authenticates as, or undefined. A ServiceAccount token holds while its
   * ServiceAccount exists. A Pod-bound one is not also tied to its Pod object, as Kubernetes' is:
   * the lab deletes a Pod at once, without graceful deletion, so its containers are still stopping
   * (and their agent still calling the API) after the object is gone.
   */
  reviewToken(token: string): ReviewedUser | undefined {
    if (!token) return undefined;
    if (this.opts.token && token === this.opts.token) return { username: ADMIN_USER, groups: ['system:masters', 'system:authenticated'] };
    const claims = this.opts.serviceAccountKey ? verifyServiceAccountToken(this.opts.serviceAccountKey, token) : undefined;
    if (!claims) return undefined;
    const sa = this.store.get('/serviceaccounts', `${claims.namespace}/${claims.name}`);
    if (!sa) return undefined;
    const extra: Record<string, string[]> = {};
    if (claims.podName !== undefined) {
      extra['authentication.kubernetes.io/pod-name'] = [claims.podName];
      if (claims.podUid !== undefined) extra['authentication.kubernetes.io/pod-uid'] = [claims.podUid];
      extra['authentication.kubernetes.io/node-name'] = [claims.nodeName!];
    }
    return {
      username: `system:serviceaccount:${claims.namespace}:${claims.name}`,
      ...(sa.metadata.uid ? { uid: sa.metadata.uid } : {}),
      groups: ['system:serviceaccounts', `system:serviceaccounts:${claims.namespace}`, 'system:authenticated'],
      ...(Object.keys(extra).length ? { extra } : {}),
    };
  }

  /**
   * POST tokenreviews: whether spec.token authenticates, and as whom. Like kube-apiserver, an
   * unknown token is a 201 with authenticated false, and a request without a token is 400.
   */
  private async tokenReview(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (req.method !== 'POST') throw new ApiError(405, 'MethodNotAllowed', `${req.method} is not allowed on ${TOKENREVIEW_PATH}: tokenreviews are only created`);
    const body = parseBody(req, await readBody(req)) as { apiVersion?: unknown; kind?: unknown; spec?: { token?: unknown; audiences?: unknown } } | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new ApiError(400, 'BadRequest', 'the request body must be a JSON object (a TokenReview)');
    if (body.kind !== undefined && body.kind !== 'TokenReview') throw new ApiError(400, 'BadRequest', `kind "${String(body.kind)}" is not TokenReview`);
    if (body.apiVersion !== undefined && body.apiVersion !== 'authentication.k8s.io/v1') throw new ApiError(400, 'BadRequest', `apiVersion "${String(body.apiVersion)}" must be authentication.k8s.io/v1 on this path`);
    const spec = body.spec ?? {};
    if (typeof spec.token !== 'string' || spec.token === '') throw new ApiError(400, 'BadRequest', 'token is required for TokenReview in authentication');
    const audiences = spec.audiences;
    if (audiences !== undefined && (!Array.isArray(audiences) || audiences.some((a) => typeof a !== 'string'))) {
      throw new ApiError(400, 'BadRequest', 'spec.audiences must be a list of strings');
    }
    const wanted = (audiences as string[] | undefined) ?? [API_AUDIENCE];
    const user = this.reviewToken(spec.token);
    let status: Record<string, unknown>;
    if (!user) status = { authenticated: false, user: {}, error: 'invalid bearer token' };
    else if (!wanted.includes(API_AUDIENCE)) status = { authenticated: false, user: {}, error: `token audiences ["${API_AUDIENCE}"] is invalid for the target audiences ${JSON.stringify(wanted)}` };
    else status = { authenticated: true, user, audiences: [API_AUDIENCE] };
    sendJson(res, 201, { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', metadata: { creationTimestamp: null }, spec: { token: spec.token, ...(audiences ? { audiences } : {}) }, status });
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://apiserver');
    const path = url.pathname.replace(/\/+$/, '') || '/';
    if (!this.authorized(req, path)) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
    const method = req.method ?? 'GET';

    if (path === '/healthz' || path === '/readyz' || path === '/livez') {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
      return;
    }
    if (path === '/version') {
      sendJson(res, 200, { major: '1', minor: '31', gitVersion: 'v1.31.0-sluice-lab', platform: `${process.platform}/${process.arch}` });
      return;
    }
    if (path === TOKENREVIEW_PATH) {
      await this.tokenReview(req, res);
      return;
    }
    const segments = path.split('/').filter(Boolean).map(decodeURIComponent);
    // /apis/<group>/<version>[/...] of a group-version an extension API server serves: proxied,
    // its discovery document included (the lab serves /apis and /apis/<group> itself).
    const aggregated = segments[0] === 'apis' && segments.length >= 3 ? this.aggregator.target(segments[1]!, segments[2]!) : undefined;
    if (aggregated) {
      const user = this.caller(req);
      if (!user) throw new ApiError(401, 'Unauthorized', 'Unauthorized');
      await this.aggregator.proxy(req, res, aggregated, user);
      return;
    }
    if (segments[0] === 'openapi' && segments[1] === 'v3') {
      if (method !== 'GET') throw new ApiError(405, 'MethodNotAllowed', `${method} is not allowed on ${path}`);
      const types = this.registry.servedTypes();
      sendJson(res, 200, segments.length === 2 ? openApiIndex(types) : (openApiDocument(types, segments.slice(2).join('/')) ?? this.notFound()));
      return;
    }
    const discovery = this.discovery(segments);
    if (discovery) {
      if (method !== 'GET') throw new ApiError(405, 'MethodNotAllowed', `${method} is not allowed on ${path}`);
      sendJson(res, 200, discovery);
      return;
    }

    const { route, watchPrefix } = this.route(segments);
    const q = url.searchParams;
    const sel: Selection = { labelSelector: q.get('labelSelector') ?? undefined, fieldSelector: q.get('fieldSelector') ?? undefined };
    const { rt, namespace, name, subresource } = route;
    const watch = watchPrefix || q.get('watch') === '1' || q.get('watch') === 'true';

    if (name === undefined) {
      switch (method) {
        case 'GET':
          if (watch) this.serveWatch(res, route, sel, q);
          else this.serveList(res, route, sel, wantsTable(req.headers.accept));
          return;
        case 'POST':
          sendJson(res, 201, this.registry.present(rt, this.registry.create(rt, namespace, parseBody(req, await readBody(req)))));
          return;
        case 'DELETE': {
          const items = this.registry.deleteCollection(rt, namespace, sel).map((o) => this.registry.present(rt, o));
          sendJson(res, 200, { apiVersion: rt.apiVersion, kind: rt.listKind, metadata: { resourceVersion: String(this.store.resourceVersion) }, items });
          return;
        }
      }
    } else {
      if (watch && method === 'GET') {
        // Watching one object: the list watch narrowed to its name.
        const byName = `metadata.name=${name}`;
        this.serveWatch(res, { rt, namespace }, { ...sel, fieldSelector: sel.fieldSelector ? `${sel.fieldSelector},${byName}` : byName }, q);
        return;
      }
      switch (method) {
        case 'GET': {
          const obj = this.registry.present(rt, this.registry.get(rt, namespace, name));
          sendJson(res, 200, wantsTable(req.headers.accept) && !subresource ? toTable(rt, [obj], String(this.store.resourceVersion)) : obj);
          return;
        }
        case 'PUT':
          sendJson(res, 200, this.registry.present(rt, this.registry.update(rt, namespace, name, parseBody(req, await readBody(req)), subresource)));
          return;
        case 'PATCH': {
          const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
          if (!(patchContentTypes as readonly string[]).includes(contentType)) {
            throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: ${patchContentTypes.join(', ')}`);
          }
          const body = parseBody(req, await readBody(req));
          sendJson(res, 200, this.registry.present(rt, this.registry.patch(rt, namespace, name, contentType, body, subresource)));
          return;
        }
        case 'DELETE':
          if (subresource) break;
          sendJson(res, 200, this.registry.present(rt, this.registry.delete(rt, namespace, name, parseBody(req, await readBody(req)))));
          return;
      }
    }
    throw new ApiError(405, 'MethodNotAllowed', `${method} is not allowed on ${path}`);
  }

  /** /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>; undefined for other paths. */
  private discovery(seg: string[]): unknown {
    const groups = this.registry.groupVersions();
    for (const [g, versions] of this.aggregator.groups()) groups.set(g, [...(groups.get(g) ?? []), ...versions.filter((v) => !groups.get(g)?.includes(v))]);
    for (const v of virtualResources) if (!groups.get(v.group)?.includes(v.version)) groups.set(v.group, [...(groups.get(v.group) ?? []), v.version]);
    const resourceList = (group: string, version: string) => {
      const types = this.registry.servedTypes().filter((t) => t.group === group && t.version === version);
      const virtual = virtualResources.filter((v) => v.group === group && v.version === version)
        .map((v) => ({ name: v.name, singularName: '', namespaced: false, kind: v.kind, verbs: v.verbs }));
      if (types.length === 0 && virtual.length === 0) return undefined;
      const stored = types.flatMap((t) => {
        const main = { name: t.plural, singularName: t.singular, namespaced: t.namespaced, kind: t.kind,
          verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'],
          ...(t.shortNames.length ? { shortNames: t.shortNames } : {}) };
        const status = { name: `${t.plural}/status`, singularName: '', namespaced: t.namespaced, kind: t.kind, verbs: ['get', 'patch', 'update'] };
        return t.statusSubresource ? [main, status] : [main];
      });
      const resources = [...stored, ...virtual];
      return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group ? `${group}/${version}` : version, resources };
    };
    const apiGroup = (name: string, versions: string[]) => {
      const gv = versions.map((v) => ({ groupVersion: `${name}/${v}`, version: v }));
      return { name, versions: gv, preferredVersion: gv[0] };
    };
    if (seg[0] === 'api') {
      if (seg.length === 1) return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: '127.0.0.1' }] };
      if (seg.length === 2) return resourceList('', seg[1]!) ?? this.notFound();
    }
    if (seg[0] === 'apis') {
      if (seg.length === 1) {
        return { kind: 'APIGroupList', apiVersion: 'v1',
          groups: [...groups].filter(([g]) => g !== '').map(([g, versions]) => apiGroup(g, versions)) };
      }
      if (seg.length === 2) {
        const versions = groups.get(seg[1]!);
        if (!versions || seg[1] === '') return this.notFound();
        return { kind: 'APIGroup', apiVersion: 'v1', ...apiGroup(seg[1]!, versions) };
      }
      if (seg.length === 3) return resourceList(seg[1]!, seg[2]!) ?? this.notFound();
    }
    if (seg.length === 0) return { paths: ['/api', '/api/v1', '/apis', '/healthz', '/openapi/v3', '/readyz', '/version'] };
    return undefined;
  }

  private notFound(): never {
    throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
  }

  /** Resolves a resource path; a legacy /watch/ segment after the version means watch. */
  private route(seg: string[]): { route: Route; watchPrefix: boolean } {
    let group: string;
    let version: string;
    let rest: string[];
    if (seg[0] === 'api' && seg.length >= 3) [group, version, rest] = ['', seg[1]!, seg.slice(2)];
    else if (seg[0] === 'apis' && seg.length >= 4) [group, version, rest] = [seg[1]!, seg[2]!, seg.slice(3)];
    else return this.notFound();
    const watchPrefix = rest[0] === 'watch';
    if (watchPrefix) rest = rest.slice(1);
    const resolve = (plural: string) => this.registry.resolve(group, version, plural);
    // namespaces/<ns>/<plural>[/<name>[/status]] for namespaced kinds
    if (rest[0] === 'namespaces' && rest.length >= 3 && rest.length <= 5) {
      const rt = resolve(rest[2]!);
      if (rt?.namespaced) {
        return { route: { rt, namespace: rest[1], name: rest[3], subresource: this.subresource(rt, rest[4]) }, watchPrefix };
      }
    }
    // <plural>[/<name>[/status]]: cluster-scoped kinds, or a namespaced kind across all namespaces (list/watch only)
    if (rest.length >= 1 && rest.length <= 3) {
      const rt = resolve(rest[0]!);
      if (rt && (!rt.namespaced || rest.length === 1)) {
        return { route: { rt, name: rest[1], subresource: this.subresource(rt, rest[2]) }, watchPrefix };
      }
    }
    return this.notFound();
  }

  private subresource(rt: ResourceType, segment: string | undefined): 'status' | undefined {
    if (segment === undefined) return undefined;
    if (segment === 'status' && rt.statusSubresource) return 'status';
    return this.notFound();
  }

  private serveList(res: http.ServerResponse, route: Route, sel: Selection, table: boolean): void {
    const { rt, namespace } = route;
    const items = this.registry.list(rt, namespace, sel).map((o) => this.registry.present(rt, o));
    const resourceVersion = String(this.store.resourceVersion);
    sendJson(res, 200, table ? toTable(rt, items, resourceVersion) : { kind: rt.listKind, apiVersion: rt.apiVersion, metadata: { resourceVersion }, items });
  }

  private serveWatch(res: http.ServerResponse, route: Route, sel: Selection, q: URLSearchParams): void {
    const { rt, namespace } = route;
    const matches = this.registry.matcher(rt, namespace, sel);
    const from = q.get('resourceVersion') ?? '';
    const timeout = q.get('timeoutSeconds');
    if (timeout !== null && !/^[0-9]+$/.test(timeout)) throw new ApiError(400, 'BadRequest', `timeoutSeconds "${timeout}" is not a non-negative integer`);
    const bookmarks = q.get('allowWatchBookmarks') === 'true' || q.get('allowWatchBookmarks') === '1';

    let backlog: ChangeEvent[] = [];
    const initial = from === '' || from === '0';
    if (!initial) {
      if (!/^[0-9]+$/.test(from)) throw new ApiError(400, 'BadRequest', `resourceVersion "${from}" is not a valid resource version`);
      const events = this.store.eventsSince(Number(from));
      if (events === 'expired') {
        const gone = new ApiError(410, 'Expired', `too old resource version: ${from} (${this.store.oldestResumable})`);
        if (this.opts.expiredWatch !== 'event') throw gone;
        res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private' });
        res.end(`${JSON.stringify({ type: 'ERROR', object: gone.toStatus() })}\n`);
        return;
      }
      backlog = events;
    }

    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private' });
    res.flushHeaders();
    const send = (type: string, object: KObject) => {
      if (!res.destroyed && !res.writableEnded) res.write(`${JSON.stringify({ type, object })}\n`);
    };
    const timers: NodeJS.Timeout[] = [];
    let unsubscribe = () => {};
    const bookmark = () => send('BOOKMARK', { apiVersion: rt.apiVersion, kind: rt.kind, metadata: { resourceVersion: String(this.store.resourceVersion) } });
    const cleanup = () => {
      unsubscribe();
      timers.forEach((t) => clearTimeout(t));
      this.watches.delete(entry);
    };
    const entry: OpenWatch = {
      res,
      end: () => {
        if (res.writableEnded) return;
        cleanup();
        if (bookmarks) bookmark();
        res.end();
      },
    };
    // An event seen through the selector: objects moving out of it are DELETED, into it ADDED.
    const deliver = (e: ChangeEvent) => {
      // A deleted CRD stops serving its resource: end the watch (after its objects' DELETED events).
      if (e.resource === crdStorageKey && e.type === 'DELETED' && !this.registry.resolve(rt.group, rt.version, rt.plural)) {
        entry.end();
        return;
      }
      if (e.resource !== rt.storageKey) return;
      const now = matches(e.object);
      const before = e.previous !== undefined && matches(e.previous);
      if (e.type === 'ADDED') {
        if (now) send('ADDED', this.registry.present(rt, e.object));
      } else if (e.type === 'DELETED') {
        if (before) send('DELETED', this.registry.present(rt, e.object));
      } else if (now && before) send('MODIFIED', this.registry.present(rt, e.object));
      else if (now) send('ADDED', this.registry.present(rt, e.object));
      else if (before) {
        const last = structuredClone(e.previous!);
        last.metadata.resourceVersion = String(e.rv);
        send('DELETED', this.registry.present(rt, last));
      }
    };

    if (initial) for (const obj of this.registry.list(rt, namespace, sel)) send('ADDED', this.registry.present(rt, obj));
    for (const e of backlog) deliver(e);
    if (res.writableEnded) return;
    let bookmarkDue = false;
    const afterChange = (e: ChangeEvent) => {
      deliver(e);
      if (!bookmarks || !this.opts.bookmarkOnChange || bookmarkDue) return;
      bookmarkDue = true;
      setImmediate(() => {
        bookmarkDue = false;
        bookmark();
      });
    };
    unsubscribe = this.store.subscribe(afterChange);
    if (bookmarks) timers.push(setInterval(bookmark, this.bookmarkIntervalMs));
    if (timeout !== null) timers.push(setTimeout(entry.end, Number(timeout) * 1000));
    this.watches.add(entry);
    // 'close' on the response: the stream ended or the client went away.
    res.on('close', cleanup);
  }
}

export async function startApiServer(opts: ApiServerOptions = {}): Promise<ApiServer> {
  return new ApiServerImpl(opts).listen();
}

/**
 * An ordinary kubeconfig that points at the lab API server. Over HTTPS it carries the lab's CA,
 * so any client (kubectl, client-go, @kubernetes/client-node) verifies the server and sends the
 * token. Over plain HTTP it sets insecure-skip-tls-verify, without which @kubernetes/client-node
 * refuses an http:// cluster; kubectl sends no token there.
 */
export function kubeconfigYaml(server: string, token?: string, caCert?: string): string {
  const trust = server.startsWith('http:') ? { 'insecure-skip-tls-verify': true } : caCert ? { 'certificate-authority-data': Buffer.from(caCert).toString('base64') } : {};
  return dumpYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'sluice-lab', cluster: { server, ...trust } }],
    users: [{ name: 'sluice-lab', user: token ? { token } : {} }],
    contexts: [{ name: 'sluice-lab', context: { cluster: 'sluice-lab', user: 'sluice-lab' } }],
    'current-context': 'sluice-lab',
    preferences: {},
  });
}
