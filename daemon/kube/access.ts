/**
 * How the agent reaches the API server: the in-cluster service account (production), or a
 * kubeconfig file (the lab, development). Plain JSON over node:http(s), one keep-alive agent.
 *
 * Why not client-node's KubeConfig here: importing it loads every generated API model, which is
 * most of an idle agent's memory (an import of it alone grows a process from ~40 to ~120 MiB). The
 * agent needs only GET, POST and watch streams of JSON, and reads objects as plain JSON anyway
 * (the typed models rename wire fields, e.g. NetworkPolicy `from` becomes `_from`). sluicectl and
 * the lab keep client-node.
 *
 * What is read, as client-go reads it:
 * - in-cluster: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT, the service account's ca.crt
 *   and token. The token file is re-read every minute (bound tokens are rotated by the kubelet).
 * - kubeconfig: current-context (or the only context) → cluster (server,
 *   certificate-authority[-data], insecure-skip-tls-verify, tls-server-name) and user (token,
 *   tokenFile, client-certificate[-data] + client-key[-data], username + password). Relative file
 *   paths are relative to the kubeconfig's directory. exec plugins, auth-provider and proxy-url are
 *   refused with an error naming them: the agent does not run credential plugins.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { dirname, isAbsolute, join } from 'node:path';
import { parseYaml } from '../kube-yaml.js';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** client-go re-reads a token file this often (transport.NewCachedFileTokenSource). */
const TOKEN_FILE_REREAD_MS = 60_000;

export class KubeAccessError extends Error {
  override name = 'KubeAccessError';
}

/** An API error answer: HTTP status, the Status object's reason and message when there is one. */
export class KubeApiError extends Error {
  override name = 'KubeApiError';
  constructor(
    message: string,
    readonly statusCode: number,
    readonly reason?: string,
  ) {
    super(message);
  }
}

interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  rejectUnauthorized: boolean;
  servername?: string;
}

type Auth = { kind: 'none' } | { kind: 'token'; token: string } | { kind: 'tokenFile'; path: string } | { kind: 'basic'; user: string; password: string };

export interface KubeAccessOptions {
  /** Service account directory for the in-cluster configuration (tests point it elsewhere). */
  serviceAccountDir?: string;
  env?: NodeJS.ProcessEnv;
  /** Clock of the token file's re-reads (tests step it). */
  now?: () => number;
}

/** One open stream of watch events; `close()` ends it without an error. */
export interface WatchStream {
  close(): void;
}

export class KubeAccess {
  private readonly agent: http.Agent;
  private cachedToken?: { token: string; readAt: number } | undefined;

  private constructor(
    readonly server: string,
    private readonly tls: TlsMaterial,
    private readonly auth: Auth,
    private readonly now: () => number = Date.now,
  ) {
    const url = new URL(server);
    this.agent = url.protocol === 'https:' ? new https.Agent({ keepAlive: true, ...tlsOptions(tls) }) : new http.Agent({ keepAlive: true });
  }

  /** The kubeconfig file when given, else the in-cluster service account. */
  static load(kubeconfig: string | undefined, opts: KubeAccessOptions = {}): KubeAccess {
    return kubeconfig ? KubeAccess.fromKubeconfig(kubeconfig, opts) : KubeAccess.inCluster(opts);
  }

  static inCluster(opts: KubeAccessOptions = {}): KubeAccess {
    const env = opts.env ?? process.env;
    const dir = opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
    const host = env.KUBERNETES_SERVICE_HOST;
    const port = env.KUBERNETES_SERVICE_PORT;
    if (!host || !port) {
      throw new KubeAccessError('not running in a cluster (KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT unset) and no kubeconfig given');
    }
    const ca = readFileOr(join(dir, 'ca.crt'), 'the service account CA');
    const tokenPath = join(dir, 'token');
    readFileOr(tokenPath, 'the service account token');
    const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
    return new KubeAccess(server, { ca, rejectUnauthorized: true }, { kind: 'tokenFile', path: tokenPath }, opts.now);
  }

  static fromKubeconfig(path: string, opts: KubeAccessOptions = {}): KubeAccess {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new KubeAccessError(`cannot read kubeconfig ${path}: ${(err as Error).message}`);
    }
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (err) {
      throw new KubeAccessError(`kubeconfig ${path} is not valid YAML: ${(err as Error).message}`);
    }
    return KubeAccess.fromKubeconfigObject(doc, dirname(path), path, opts);
  }

  /** A parsed kubeconfig; `baseDir` resolves its relative file paths. */
  static fromKubeconfigObject(doc: unknown, baseDir: string, what = 'kubeconfig', opts: KubeAccessOptions = {}): KubeAccess {
    const cfg = asObject(doc, what);
    const contexts = namedList(cfg.contexts, 'context', what);
    const current = typeof cfg['current-context'] === 'string' && cfg['current-context'] ? cfg['current-context'] : contexts.size === 1 ? [...contexts.keys()][0]! : '';
    if (!current) throw new KubeAccessError(`${what}: no current-context (and not exactly one context)`);
    const ctx = contexts.get(current);
    if (!ctx) throw new KubeAccessError(`${what}: current-context "${current}" is not among its contexts`);
    const clusterName = str(ctx.cluster);
    const cluster = namedList(cfg.clusters, 'cluster', what).get(clusterName);
    if (!cluster) throw new KubeAccessError(`${what}: context "${current}" names cluster "${clusterName}", which it does not define`);
    const userName = str(ctx.user);
    const user = userName ? namedList(cfg.users, 'user', what).get(userName) : {};
    if (!user) throw new KubeAccessError(`${what}: context "${current}" names user "${userName}", which it does not define`);

    const server = str(cluster.server);
    if (!server) throw new KubeAccessError(`${what}: cluster "${clusterName}" has no server`);
    let url: URL;
    try {
      url = new URL(server);
    } catch {
      throw new KubeAccessError(`${what}: cluster "${clusterName}" server "${server}" is not a URL`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new KubeAccessError(`${what}: cluster "${clusterName}" server "${server}" is neither https nor http`);
    for (const field of ['proxy-url'] as const) {
      if (cluster[field] !== undefined) throw new KubeAccessError(`${what}: cluster "${clusterName}" sets ${field}, which sluice-agent does not support`);
    }
    for (const field of ['exec', 'auth-provider'] as const) {
      if (user[field] !== undefined) throw new KubeAccessError(`${what}: user "${userName}" authenticates with ${field}, which sluice-agent does not run; use a token, a token file or a client certificate`);
    }
    const file = (p: unknown) => (isAbsolute(str(p)) ? str(p) : join(baseDir, str(p)));
    const material = (dataField: string, fileField: string, owner: Record<string, unknown>, ownerWhat: string): Buffer | undefined => {
      if (owner[dataField] !== undefined) {
        const b = Buffer.from(str(owner[dataField]), 'base64');
        if (b.length === 0) throw new KubeAccessError(`${what}: ${ownerWhat} ${dataField} is empty or not base64`);
        return b;
      }
      return owner[fileField] !== undefined ? readFileOr(file(owner[fileField]), `${ownerWhat} ${fileField}`) : undefined;
    };
    const tls: TlsMaterial = { rejectUnauthorized: cluster['insecure-skip-tls-verify'] !== true };
    const ca = material('certificate-authority-data', 'certificate-authority', cluster, `cluster "${clusterName}"`);
    if (ca) tls.ca = ca;
    if (typeof cluster['tls-server-name'] === 'string' && cluster['tls-server-name']) tls.servername = cluster['tls-server-name'];
    const cert = material('client-certificate-data', 'client-certificate', user, `user "${userName}"`);
    const key = material('client-key-data', 'client-key', user, `user "${userName}"`);
    if (Boolean(cert) !== Boolean(key)) throw new KubeAccessError(`${what}: user "${userName}" has a client certificate without its key or a key without its certificate`);
    if (cert && key) {
      tls.cert = cert;
      tls.key = key;
    }
    let auth: Auth = { kind: 'none' };
    if (str(user.token)) auth = { kind: 'token', token: str(user.token) };
    else if (str(user.tokenFile)) {
      readFileOr(file(user.tokenFile), `user "${userName}" tokenFile`);
      auth = { kind: 'tokenFile', path: file(user.tokenFile) };
    } else if (str(user.username)) auth = { kind: 'basic', user: str(user.username), password: str(user.password) };
    return new KubeAccess(server.replace(/\/+$/, ''), tls, auth, opts.now);
  }

  /** GET of an API path as plain JSON; an error answer throws KubeApiError. */
  getJson(path: string, timeoutMs = 30_000): Promise<unknown> {
    return this.requestJson('GET', path, undefined, timeoutMs);
  }

  /** POST of a JSON body; the created object. */
  postJson(path: string, body: unknown, timeoutMs = 30_000): Promise<unknown> {
    return this.requestJson('POST', path, body, timeoutMs);
  }

  /** PUT of a whole object (an update; its metadata.resourceVersion makes it conditional); the stored object. */
  putJson(path: string, body: unknown, timeoutMs = 30_000): Promise<unknown> {
    return this.requestJson('PUT', path, body, timeoutMs);
  }

  /** PATCH with a JSON body of the given patch type (merge, strategic merge); the patched object. */
  patchJson(path: string, body: unknown, contentType: 'application/merge-patch+json' | 'application/strategic-merge-patch+json', timeoutMs = 30_000): Promise<unknown> {
    return this.requestJson('PATCH', path, body, timeoutMs, contentType);
  }

  /**
   * A watch: GET `path` with watch=1, one JSON event per line to `onEvent`. `onEnd` is called once:
   * with no error when the server ends the stream or `close()` is called, with an error when the
   * request fails, the server answers an error status, or a line is not JSON.
   */
  watch(path: string, onEvent: (ev: { type: string; object: Record<string, unknown> }) => void, onEnd: (err?: Error) => void): WatchStream {
    const url = new URL(this.server + path);
    url.searchParams.set('watch', '1');
    let ended = false;
    let closing = false;
    const end = (err?: Error) => {
      if (ended) return;
      ended = true;
      onEnd(closing ? undefined : err);
    };
    const req = this.send('GET', url, undefined, 'application/json', (res) => {
      if (res.statusCode !== 200) {
        readBody(res).then(
          (text) => end(apiError('GET', path, res.statusCode ?? 0, text)),
          (err: Error) => end(err),
        );
        return;
      }
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (chunk: string) => {
        buf += chunk;
        for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          let ev: { type: string; object: Record<string, unknown> };
          try {
            ev = JSON.parse(line) as typeof ev;
          } catch (err) {
            req.destroy();
            end(new Error(`watch ${path}: an event is not JSON: ${(err as Error).message}`));
            return;
          }
          onEvent(ev);
        }
      });
      res.on('end', () => end());
      res.on('error', (err) => end(err));
      res.on('close', () => end(res.complete ? undefined : new Error(`watch ${path}: the stream was cut`)));
    });
    req.on('error', (err) => end(err));
    return {
      close: () => {
        closing = true;
        req.destroy();
        end();
      },
    };
  }

  private requestJson(method: string, path: string, body: unknown, timeoutMs: number, contentType = 'application/json'): Promise<unknown> {
    const url = new URL(this.server + path);
    return new Promise((resolve, reject) => {
      // Response bytes seen: an idle timeout that fires after the event loop was busy does not
      // cut a response that was arriving (see replyDeadline).
      let progress = 0;
      const req = this.send(method, url, body, contentType, (res) => {
        res.on('data', () => progress++);
        readBody(res).then((text) => {
          const code = res.statusCode ?? 0;
          if (code < 200 || code > 299) return reject(apiError(method, path, code, text));
          try {
            resolve(JSON.parse(text));
          } catch (e) {
            reject(new Error(`${method} ${path}: not JSON: ${(e as Error).message}`));
          }
        }, reject);
      });
      req.setTimeout(timeoutMs, () => {
        const seen = progress;
        setImmediate(() => {
          if (progress === seen) req.destroy(new Error(`${method} ${path}: no answer within ${timeoutMs} ms`));
        });
      });
      req.on('error', reject);
    });
  }

  private send(method: string, url: URL, body: unknown, contentType: string, onResponse: (res: http.IncomingMessage) => void): http.ClientRequest {
    const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'sluice-agent' };
    const authorization = this.authorization();
    if (authorization) headers.authorization = authorization;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    if (payload) {
      headers['content-type'] = contentType;
      headers['content-length'] = String(payload.length);
    }
    const mod = url.protocol === 'https:' ? https : http;
    const req = mod.request(url, { method, headers, agent: this.agent, ...(url.protocol === 'https:' ? tlsOptions(this.tls) : {}) }, onResponse);
    req.end(payload);
    return req;
  }

  private authorization(): string | undefined {
    switch (this.auth.kind) {
      case 'none':
        return undefined;
      case 'token':
        return `Bearer ${this.auth.token}`;
      case 'basic':
        return `Basic ${Buffer.from(`${this.auth.user}:${this.auth.password}`).toString('base64')}`;
      case 'tokenFile': {
        const now = this.now();
        if (!this.cachedToken || now - this.cachedToken.readAt >= TOKEN_FILE_REREAD_MS) {
          try {
            this.cachedToken = { token: readFileSync(this.auth.path, 'utf8').trim(), readAt: now };
          } catch (err) {
            // A rotation in progress: keep the token read last (client-go does the same).
            if (!this.cachedToken) throw new KubeAccessError(`cannot read the token ${this.auth.path}: ${(err as Error).message}`);
          }
        }
        return `Bearer ${this.cachedToken.token}`;
      }
    }
  }
}

function tlsOptions(tls: TlsMaterial): https.AgentOptions {
  return {
    rejectUnauthorized: tls.rejectUnauthorized,
    ...(tls.ca ? { ca: tls.ca } : {}),
    ...(tls.cert ? { cert: tls.cert } : {}),
    ...(tls.key ? { key: tls.key } : {}),
    ...(tls.servername ? { servername: tls.servername } : {}),
  };
}

function readBody(res: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
  });
}

/** The API's Status answer as an error: its message and reason when the body is one. */
function apiError(method: string, path: string, code: number, text: string): KubeApiError {
  let reason: string | undefined;
  let message = text.slice(0, 200);
  try {
    const status = JSON.parse(text) as { kind?: string; reason?: string; message?: string };
    if (status.kind === 'Status') {
      reason = status.reason;
      if (status.message) message = status.message;
    }
  } catch {
    // not a Status object: the text as it came
  }
  return new KubeApiError(`${method} ${path}: HTTP ${code}${reason ? ` ${reason}` : ''}: ${message}`, code, reason);
}

function readFileOr(path: string, what: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new KubeAccessError(`cannot read ${what} (${path}): ${(err as Error).message}`);
  }
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function asObject(v: unknown, what: string): Record<string, unknown> {
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new KubeAccessError(`${what} is not a YAML mapping`);
  return v as Record<string, unknown>;
}

/** `clusters` / `users` / `contexts`: a list of {name, <field>: {...}}, by name. */
function namedList(v: unknown, field: string, what: string): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  if (v === undefined || v === null) return out;
  if (!Array.isArray(v)) throw new KubeAccessError(`${what}: ${field}s is not a list`);
  for (const item of v) {
    const o = asObject(item, `${what}: an entry of ${field}s`);
    const name = str(o.name);
    const body = o[field] === undefined || o[field] === null ? {} : asObject(o[field], `${what}: ${field} "${name}"`);
    if (!out.has(name)) out.set(name, body);
  }
  return out;
}
