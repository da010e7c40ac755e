/**
 * The agent's side of the controller's API: for one Node and each kind of the
 * `controlplane.sluice.io` API, list then watch from the listed resourceVersion, resume from the
 * last version seen after a watch ends or breaks, and list again after 410 Gone (reporting the whole
 * set again so the consumer can diff). Transport errors are retried with exponential backoff
 * (100 ms doubling to 5 s) and never take anything from the consumer: it keeps the last state it
 * was given and hears only that the controller is disconnected.
 */
import http, { type ClientRequest, type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import type { Logger } from 'pino';
import { type Clock, realClock, type TimerHandle } from '../clock.js';
import {
  CONTROLPLANE_API_VERSION,
  CONTROLPLANE_RESOURCES,
  type ControlPlaneEvent,
  type ControlPlaneKind,
  type ControlPlaneObject,
  type PodRealization,
  STORE_HEADER,
  type TraceDestination,
  type TraceNode,
  type TraceTask,
  viewVersionsOf,
} from './types.js';

export type ControlPlaneConnection = 'connected' | 'disconnected';

/** Where the controller is and how to reach and authenticate to it (ControllerAccess), and what to follow. */
export interface ControlPlaneWatcherOptions extends ControllerAccess {
  nodeName: string;
  /** The kinds to follow (default all three). */
  kinds?: readonly ControlPlaneKind[];
  /** After every (re)list: the whole set of `kind` the Node sees now. */
  onSync(kind: ControlPlaneKind, items: ControlPlaneObject[]): void;
  /**
   * A list came from another store than the lists before (another replica leads, or the controller
   * restarted): before its onSync. Versions the consumer keeps from the old store mean nothing now.
   */
  onStoreChange?(store: string): void;
  /** Each watch event (ADDED, MODIFIED with an object or an AddressGroupPatch, DELETED); bookmarks are kept here. */
  onEvent(kind: ControlPlaneKind, event: ControlPlaneEvent): void;
  /** Connected: every kind is listed and watched. Disconnected: one is not (the reason says why); the consumer keeps its state. */
  onState?(state: ControlPlaneConnection, reason: string): void;
  clock?: Clock;
  /** First retry delay (default 100 ms), doubled per failure up to `maxBackoffMs` (default 5000 ms). */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Asked of the server on each watch (default: none, the watch lasts until it breaks). */
  watchTimeoutSeconds?: number;
  /** A watch that hears nothing this long, not even a bookmark, is deemed dead and reopened (default 180 000 ms). */
  idleTimeoutMs?: number;
  /** A list not answered this long fails (default 30 000 ms). */
  requestTimeoutMs?: number;
  log?: Logger;
}

/** A failed request: the transport's error or the server's Status, with its HTTP code when there is one. */
class RequestError extends Error {
  constructor(
    message: string,
    readonly code?: number,
  ) {
    super(message);
  }
}

interface KindLoop {
  kind: ControlPlaneKind;
  /** The version to resume from; undefined: list first. */
  rv: string | undefined;
  /** Listed and watching since the last failure. */
  ok: boolean;
  reason: string;
  request: ClientRequest | undefined;
  /** Wakes a backoff sleep early (stop). */
  wake: (() => void) | undefined;
  /** The store `rv` was issued by (STORE_HEADER of the list). */
  store: string | undefined;
}

const MIN_HEALTHY_WATCH_MS = 1000;

export class ControlPlaneWatcher {
  private readonly clock: Clock;
  private readonly loops: KindLoop[];
  private readonly base: URL;
  private stopped = false;
  private running: Promise<void>[] = [];
  private reported: { state: ControlPlaneConnection; reason: string } | undefined;
  /** The store of the last list (STORE_HEADER). */
  private store: string | undefined;
  /** Aborted by stop(): cuts a request still being prepared (its CA being read). */
  private readonly stopping = new AbortController();

  constructor(private readonly opts: ControlPlaneWatcherOptions) {
    this.clock = opts.clock ?? realClock;
    if (!opts.nodeName) throw new Error('control plane watcher: nodeName is empty');
    try {
      this.base = new URL(opts.server);
    } catch {
      throw new Error(`control plane watcher: server "${opts.server}" is not a URL`);
    }
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') throw new Error(`control plane watcher: server "${opts.server}" is neither http nor https`);
    this.loops = (opts.kinds ?? ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup']).map((kind) => ({
      kind,
      rv: undefined,
      ok: false,
      reason: 'not listed yet',
      request: undefined,
      wake: undefined,
      store: undefined,
    }));
  }

  /** Starts following every kind. */
  start(): void {
    if (this.running.length > 0 || this.stopped) throw new Error('control plane watcher: start() called twice');
    this.running = this.loops.map((k) => this.run(k));
  }

  /** Stops: open requests are cut, pending retries cancelled; resolves once every loop has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort(new Error('stopped'));
    for (const k of this.loops) {
      k.request?.destroy();
      k.wake?.();
    }
    await Promise.all(this.running);
  }

  /** The store the lists came from (STORE_HEADER of the last list; undefined before one or from a server that sends none). */
  storeId(): string | undefined {
    return this.store;
  }

  /** The last resourceVersion seen of each kind (undefined before its first list or after a 410). */
  resourceVersions(): Partial<Record<ControlPlaneKind, string>> {
    return Object.fromEntries(this.loops.filter((k) => k.rv !== undefined).map((k) => [k.kind, k.rv]));
  }

  /** The connection as last reported to onState. */
  state(): { state: ControlPlaneConnection; reason: string } {
    return this.reported ?? { state: 'disconnected', reason: 'not connected yet' };
  }

  private async run(k: KindLoop): Promise<void> {
    let failures = 0;
    const backoff = async () => {
      const initial = this.opts.initialBackoffMs ?? 100;
      const max = this.opts.maxBackoffMs ?? 5000;
      await this.sleep(k, Math.min(max, initial * 2 ** Math.min(failures++, 30)));
    };
    while (!this.stopped) {
      try {
        let listedNow = false;
        if (k.rv === undefined) {
          await this.listAndSync(k);
          listedNow = true;
          failures = 0;
        }
        const started = this.clock.now();
        const outcome = await this.watch(k);
        if (outcome.gone) {
          this.opts.log?.info({ kind: k.kind, rv: k.rv }, 'control plane watch: resourceVersion expired, listing again');
          k.rv = undefined;
          // A server answering Gone to the version it just listed would make a tight loop.
          if (listedNow) await backoff();
          continue;
        }
        if (outcome.events > 0 || this.clock.now() - started >= MIN_HEALTHY_WATCH_MS) failures = 0;
        else await backoff();
      } catch (err) {
        if (this.stopped) break;
        this.failed(k, (err as Error).message);
        await backoff();
      }
    }
  }

  /**
   * Lists `k` and hands the list to the consumer. Its own frame: a list held in run()'s would stay
   * alive for as long as the watch after it runs (an async function keeps its locals while it
   * awaits), and an AddressGroup list is the largest thing an agent receives (12 MiB of heap at
   * 150 000 Pods) while the consumer keeps only what it needs of it.
   */
  private async listAndSync(k: KindLoop): Promise<void> {
    const list = await this.list(k);
    k.rv = list.resourceVersion;
    k.store = list.store;
    if (list.store !== undefined && list.store !== this.store) {
      // Another replica, or a restarted one: versions of the old store mean nothing now.
      if (this.store !== undefined) this.opts.onStoreChange?.(list.store);
      this.store = list.store;
    }
    this.opts.onSync(k.kind, list.items);
  }

  private sleep(k: KindLoop, ms: number): Promise<void> {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      let handle: TimerHandle | undefined;
      k.wake = () => {
        this.clock.clearTimeout(handle);
        k.wake = undefined;
        resolve();
      };
      handle = this.clock.setTimeout(() => k.wake?.(), ms);
    });
  }

  private connected(k: KindLoop): void {
    k.ok = true;
    k.reason = '';
    if (this.loops.every((l) => l.ok)) this.report('connected', `listing and watching ${this.loops.map((l) => CONTROLPLANE_RESOURCES[l.kind]).join(', ')}`);
  }

  private failed(k: KindLoop, reason: string): void {
    k.ok = false;
    // Said once per reason: a controller that stays away would otherwise log every retry.
    if (k.reason !== reason) this.opts.log?.warn({ kind: k.kind, err: reason }, 'control plane: request failed, keeping the last state and retrying');
    k.reason = reason;
    if (this.reported?.state !== 'disconnected') this.report('disconnected', `${CONTROLPLANE_RESOURCES[k.kind]}: ${reason}`);
  }

  private report(state: ControlPlaneConnection, reason: string): void {
    if (this.reported?.state === state) return;
    this.reported = { state, reason };
    this.opts.onState?.(state, reason);
  }

  private url(k: KindLoop, extra: Record<string, string>): URL {
    const u = new URL(`${this.base.pathname.replace(/\/+$/, '')}/apis/${CONTROLPLANE_API_VERSION}/${CONTROLPLANE_RESOURCES[k.kind]}`, this.base);
    u.searchParams.set('fieldSelector', `nodeName=${this.opts.nodeName}`);
    for (const [key, v] of Object.entries(extra)) u.searchParams.set(key, v);
    return u;
  }

  /** Sends a GET; resolves with the response once its headers are in. */
  private get(k: KindLoop, url: URL): Promise<IncomingMessage> {
    return send('GET', url, this.opts, undefined, { signal: this.stopping.signal, onRequest: (req) => (k.request = req) });
  }

  private async list(k: KindLoop): Promise<{ resourceVersion: string; items: ControlPlaneObject[]; store: string | undefined }> {
    const url = this.url(k, {});
    const timeoutMs = this.opts.requestTimeoutMs ?? 30_000;
    const timer = this.clock.setTimeout(() => k.request?.destroy(new Error(`no answer in ${timeoutMs} ms`)), timeoutMs);
    try {
      const res = await this.get(k, url);
      const body = await readBody(res);
      if (res.statusCode !== 200) throw statusError(res.statusCode, body);
      const list = parseJson(body, 'list') as { kind?: unknown; metadata?: { resourceVersion?: unknown }; items?: unknown };
      const rv = list.metadata?.resourceVersion;
      if (list.kind !== `${k.kind}List` || typeof rv !== 'string' || !/^[0-9]+$/.test(rv) || !Array.isArray(list.items)) {
        throw new RequestError(`list of ${CONTROLPLANE_RESOURCES[k.kind]}: not a ${k.kind}List with a resourceVersion and items`);
      }
      return { resourceVersion: rv, items: list.items as ControlPlaneObject[], store: headerValue(res, STORE_HEADER) };
    } finally {
      this.clock.clearTimeout(timer);
      k.request = undefined;
    }
  }

  /**
   * One watch from `k.rv`: events handed to the consumer as they come. Resolves when the server
   * ends it (`gone` when it said 410), rejects on transport errors, other ERROR events, bad
   * lines and silence longer than the idle timeout.
   */
  private async watch(k: KindLoop): Promise<{ gone: boolean; events: number }> {
    const params: Record<string, string> = { watch: '1', resourceVersion: k.rv!, allowWatchBookmarks: 'true' };
    if (this.opts.watchTimeoutSeconds !== undefined) params.timeoutSeconds = String(this.opts.watchTimeoutSeconds);
    const url = this.url(k, params);
    const idleMs = this.opts.idleTimeoutMs ?? 180_000;
    let idle: TimerHandle | undefined;
    // Until the stream is read, silence cuts the request; then it fails the stream with its reason.
    let silent = (err: Error): void => {
      k.request?.destroy(err);
    };
    const arm = () => {
      this.clock.clearTimeout(idle);
      idle = this.clock.setTimeout(() => silent(new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: no event nor bookmark in ${idleMs} ms`)), idleMs);
    };
    arm();
    try {
      const res = await this.get(k, url);
      if (res.statusCode === 410) {
        await readBody(res);
        return { gone: true, events: 0 };
      }
      if (res.statusCode !== 200) throw statusError(res.statusCode, await readBody(res));
      const store = headerValue(res, STORE_HEADER);
      if (store !== undefined && store !== k.store) {
        // A store that did not issue k.rv (another replica took over): its events from k.rv would
        // be another history. List again, as after 410.
        res.destroy();
        return { gone: true, events: 0 };
      }
      this.connected(k);
      return await new Promise((resolve, reject) => {
        let events = 0;
        let buffered = '';
        let done = false;
        const finish = (err: Error | undefined, gone = false) => {
          if (done) return;
          done = true;
          if (err) {
            res.destroy();
            reject(err);
          } else resolve({ gone, events });
        };
        silent = (err) => finish(err);
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (done) return;
          arm();
          buffered += chunk;
          let nl: number;
          while (!done && (nl = buffered.indexOf('\n')) >= 0) {
            const line = buffered.slice(0, nl).trim();
            buffered = buffered.slice(nl + 1);
            if (line === '') continue;
            try {
              const e = parseEvent(line);
              if (e.type === 'ERROR') {
                const status = e.object as { code?: unknown; message?: unknown };
                if (status.code === 410) finish(undefined, true);
                else finish(new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: ${String(status.message ?? 'ERROR event')}`, Number(status.code) || undefined));
                return;
              }
              k.rv = e.object.metadata.resourceVersion;
              if (e.type !== 'BOOKMARK') {
                events++;
                try {
                  this.opts.onEvent(k.kind, e);
                } catch (err) {
                  // The consumer could not apply it (e.g. a patch of a group it does not hold): its
                  // state is out of step with the stream, which only a whole list repairs.
                  k.rv = undefined;
                  finish(new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: event not applied, listing again: ${(err as Error).message}`));
                  return;
                }
              }
            } catch (err) {
              finish(err as Error);
            }
          }
        });
        res.on('end', () => finish(buffered.trim() === '' ? undefined : new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: the stream ended inside an event`)));
        res.on('error', (err) => finish(new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: ${err.message}`)));
        res.on('close', () => finish(res.complete ? undefined : new RequestError(`watch of ${CONTROLPLANE_RESOURCES[k.kind]}: the connection closed`)));
      });
    } finally {
      this.clock.clearTimeout(idle);
      k.request = undefined;
    }
  }
}

/** The controller's address and the agent's credentials for it. */
export interface ControllerAccess {
  /** The controller's base URL, e.g. "https://sluice-controller.sluice-system.svc:443". */
  server: string;
  /** Bearer token, or a function read at every request (projected tokens rotate). */
  token?: string | (() => string) | undefined;
  /**
   * The PEM CA bundle the controller's certificate must chain to (https), or a function read
   * before each request (the CA read through the API, a file that may appear later or rotate);
   * its rejection fails that request with its message.
   */
  ca?: string | Buffer | (() => Promise<string | Buffer>) | undefined;
  /**
   * Resolves the server's host name instead of the system resolver (the `lookup` option of
   * https.request): a host-network agent cannot resolve the controller's Service name, so it is
   * looked up through the API (service-address.ts). The URL keeps the name, which TLS verifies.
   */
  lookup?: LookupFunction | undefined;
}

/**
 * One question to the controller: `answer` reads the status and body of its response. Every
 * failure (no answer within `timeoutMs`, `signal` aborted, the connection lost, `answer` throwing)
 * rejects with an error naming the controller; a TraceDestinationRefused is the controller's
 * answer and rejects as it is.
 */
async function callController<T>(
  access: ControllerAccess,
  req: { method?: 'GET' | 'POST'; path: string; query?: Record<string, string>; body?: unknown; timeoutMs: number; signal?: AbortSignal | undefined },
  answer: (status: number | undefined, body: string) => T,
): Promise<T> {
  const url = new URL(req.path, access.server);
  for (const [k, v] of Object.entries(req.query ?? {})) url.searchParams.set(k, v);
  // Cuts the request, or its preparation (the CA being read), whichever is under way.
  const cut = new AbortController();
  const abort = () => cut.abort(new Error('stopped'));
  if (req.signal?.aborted) abort();
  else req.signal?.addEventListener('abort', abort);
  const timer = setTimeout(() => cut.abort(new Error(`no answer in ${req.timeoutMs} ms`)), req.timeoutMs);
  try {
    const res = await send(req.method ?? 'GET', url, access, req.body, { signal: cut.signal });
    return answer(res.statusCode, await readBody(res));
  } catch (err) {
    if (err instanceof TraceDestinationRefused) throw err;
    throw new Error(`controller ${access.server}: ${(err as Error).message}`);
  } finally {
    clearTimeout(timer);
    req.signal?.removeEventListener('abort', abort);
  }
}

/**
 * A request to the controller with the agent's credentials (and a JSON body); resolves with the
 * response once its headers are in. `signal` aborts it (with its reason) while its CA is read and
 * until the request closes.
 */
async function send(
  method: 'GET' | 'POST',
  url: URL,
  access: Omit<ControllerAccess, 'server'>,
  body?: unknown,
  opts: { signal?: AbortSignal | undefined; onRequest?: (req: ClientRequest) => void; open?: boolean } = {},
): Promise<IncomingMessage> {
  const { signal } = opts;
  signal?.throwIfAborted();
  const https_ = url.protocol === 'https:';
  const ca = !https_ ? undefined : typeof access.ca === 'function' ? await untilAborted(access.ca(), signal) : access.ca;
  const token = typeof access.token === 'function' ? access.token() : access.token;
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const text = body === undefined ? undefined : JSON.stringify(body);
  if (text !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.open) headers['Content-Type'] = 'application/x-ndjson';
  const lookup = access.lookup !== undefined ? { lookup: access.lookup } : {};
  return new Promise((resolve, reject) => {
    const req = https_
      ? https.request(url, { method, headers, ...lookup, ...(ca !== undefined ? { ca } : {}) })
      : http.request(url, { method, headers, ...lookup });
    opts.onRequest?.(req);
    if (signal) {
      const cut = () => req.destroy(signal.reason as Error);
      if (signal.aborted) cut();
      else {
        signal.addEventListener('abort', cut, { once: true });
        req.on('close', () => signal.removeEventListener('abort', cut));
      }
    }
    req.on('response', resolve);
    req.on('error', (err) => reject(new RequestError(`${url.host}: ${err.message}`)));
    // An open body is the caller's to write and end; its headers go now, so the server answers.
    if (opts.open) req.flushHeaders();
    else req.end(text);
  });
}

/**
 * Opens a POST to the controller whose body the caller writes (a line at a time) and ends: an
 * agent's realized-views reports. Resolves once the controller answered 200, with the request and
 * the response (its body comes when the request ends); rejects with an error naming the
 * controller otherwise, the request destroyed.
 */
export async function openControllerStream(access: ControllerAccess, path: string, signal?: AbortSignal): Promise<{ req: ClientRequest; res: IncomingMessage }> {
  let req: ClientRequest | undefined;
  try {
    const res = await send('POST', new URL(path, access.server), access, undefined, { signal, onRequest: (r) => (req = r), open: true });
    if (res.statusCode !== 200) throw statusError(res.statusCode, await readBody(res));
    return { req: req!, res };
  } catch (err) {
    req?.destroy();
    throw new Error(`controller ${access.server}: ${(err as Error).message}`);
  }
}

/** `p`, or the signal's reason once it aborts first. */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * The next trace the controller has for this Node's agent (`GET /traceflow-tasks`, a long poll of
 * up to `waitMs`); undefined when none came. Rejects with an error naming the controller.
 */
export async function takeTraceTask(access: ControllerAccess, waitMs: number, signal?: AbortSignal): Promise<TraceTask | undefined> {
  const query = { waitMs: String(Math.max(0, Math.round(waitMs))) };
  return callController(access, { path: '/traceflow-tasks', query, timeoutMs: waitMs + 5000, signal }, (status, body) => {
    if (status !== 200) throw statusError(status, body);
    const task = (parseJson(body, 'trace task') as { task?: Partial<TraceTask> }).task;
    if (task === undefined) return undefined;
    if (typeof task.id !== 'string' || typeof task.from !== 'string' || typeof task.to !== 'string' || typeof task.protocol !== 'string') {
      throw new RequestError('trace task: not one ({"task": {"id", "from", "to", "protocol"}})');
    }
    return task as TraceTask;
  });
}

/** The outcome of trace `id` to the controller (`POST /traceflow-results`): the report, or why there is none. */
export async function postTraceResult(access: ControllerAccess, id: string, outcome: { report: unknown } | { error: string; code: number }): Promise<void> {
  return callController(access, { method: 'POST', path: '/traceflow-results', query: { id }, body: outcome, timeoutMs: 10_000 }, (status, body) => {
    if (status !== 200) throw statusError(status, body);
  });
}

/**
 * A new Pod's realization question, asked of the controller (its `/realization`, a long poll):
 * which Nodes need Pod `q` at its addresses and at which versions of their views they hold it;
 * undefined when the controller does not hold the Pod at those addresses within `waitMs`. With
 * `confirmMs`, the controller also waits up to that long for the span's agents to report those
 * versions enforced, and marks the Nodes that did `confirmed`. Rejects with an error naming the
 * controller when it cannot be asked or its answer is not one.
 */
export async function askController(
  access: ControllerAccess,
  q: { namespace: string; name: string; ips: readonly string[] },
  waitMs: number,
  confirmMs?: number,
): Promise<PodRealization | undefined> {
  const query: Record<string, string> = { pod: `${q.namespace}/${q.name}`, ips: q.ips.join(','), waitMs: String(Math.max(0, Math.round(waitMs))) };
  if (confirmMs !== undefined) query.confirmMs = String(Math.min(999_999, Math.max(0, Math.round(confirmMs))));
  return callController(access, { path: '/realization', query, timeoutMs: Math.max(waitMs, confirmMs ?? 0) + 5000 }, (status, body) => {
    if (status !== 200) throw statusError(status, body);
    const a = parseJson(body, 'realization') as { realized?: unknown; node?: unknown; nodes?: unknown };
    if (a.realized === false) return undefined;
    if (a.realized !== true || typeof a.node !== 'string' || !Array.isArray(a.nodes) || !a.nodes.every(isRealizationNode)) {
      throw new RequestError('realization: not an answer ({"realized": true, "node", "nodes": [...]} or {"realized": false})');
    }
    return { node: a.node, nodes: a.nodes };
  });
}

/**
 * Where a traceflow destination ("ns/pod", "service:ns/name", "ip:ADDRESS") leads, as the controller
 * sees the cluster (its `/trace-destination`). A destination the controller refuses (no such Pod,
 * a malformed one) rejects with a TraceDestinationRefused naming why; any other failure with an
 * error naming the controller.
 */
export async function askTraceDestination(access: ControllerAccess, to: string, family: 4 | 6): Promise<TraceDestination> {
  return callController(access, { path: '/trace-destination', query: { to, family: String(family) }, timeoutMs: 5000 }, (status, body) => {
    if (status === 400 || status === 404) throw new TraceDestinationRefused(statusError(status, body).message.replace(/^HTTP \d+: /, ''));
    if (status !== 200) throw statusError(status, body);
    const a = parseJson(body, 'trace destination') as Partial<TraceDestination>;
    const isNode = (n: unknown) => typeof (n as TraceNode)?.name === 'string' && ((n as TraceNode).address === undefined || typeof (n as TraceNode).address === 'string');
    if (typeof a.ip !== 'string' || !Array.isArray(a.nodes) || !a.nodes.every(isNode)) throw new RequestError('trace destination: not an answer ({"ip", "nodes": [...]})');
    return {
      ip: a.ip,
      nodes: a.nodes,
      ...(typeof a.beyond === 'string' ? { beyond: a.beyond } : {}),
      ...(typeof a.unknown === 'string' ? { unknown: a.unknown } : {}),
    };
  });
}

/** The controller answered that a trace destination names nothing it can trace to. */
export class TraceDestinationRefused extends Error {
  override name = 'TraceDestinationRefused';
}

function isRealizationNode(n: unknown): n is PodRealization['nodes'][number] {
  const o = n as { name?: unknown; address?: unknown; podIps?: unknown; versions?: unknown; confirmed?: unknown };
  return typeof o?.name === 'string' && (o.address === undefined || typeof o.address === 'string') && Array.isArray(o.podIps) && o.podIps.every((x) => typeof x === 'string') &&
    (o.confirmed === undefined || typeof o.confirmed === 'boolean') &&
    typeof o.versions === 'object' && o.versions !== null && viewVersionsOf(o.versions as Record<string, string>) !== undefined;
}

function headerValue(res: IncomingMessage, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (c: string) => (body += c));
    res.on('end', () => resolve(body));
    res.on('error', reject);
    res.on('close', () => {
      if (!res.complete) reject(new RequestError('the connection closed inside the answer'));
    });
  });
}

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new RequestError(`${what}: the answer is not JSON: ${text.slice(0, 200)}`);
  }
}

/** The error an HTTP failure answers: the Status message when the body is one. */
function statusError(code: number | undefined, body: string): RequestError {
  let message = body.slice(0, 300).trim();
  try {
    const s = JSON.parse(body) as { kind?: unknown; message?: unknown };
    if (s.kind === 'Status' && typeof s.message === 'string') message = s.message;
  } catch {
    // Not a Status: the text itself says what went wrong.
  }
  return new RequestError(`HTTP ${code}: ${message}`, code);
}

type WireEvent = ControlPlaneEvent | { type: 'ERROR'; object: unknown };

/** One line of the watch stream, checked enough that a garbled line fails here and not in the consumer. */
function parseEvent(line: string): WireEvent {
  const e = parseJson(line, 'watch event') as { type?: unknown; object?: { apiVersion?: unknown; metadata?: { resourceVersion?: unknown } } };
  if (e.type === 'ERROR' && typeof e.object === 'object' && e.object !== null) return e as WireEvent;
  if (e.type !== 'ADDED' && e.type !== 'MODIFIED' && e.type !== 'DELETED' && e.type !== 'BOOKMARK') throw new RequestError(`watch event type ${JSON.stringify(e.type)} is unknown`);
  const rv = e.object?.metadata?.resourceVersion;
  if (typeof rv !== 'string' || !/^[0-9]+$/.test(rv)) throw new RequestError(`watch ${e.type} event without a resourceVersion`);
  if (e.type !== 'BOOKMARK' && e.object?.apiVersion !== CONTROLPLANE_API_VERSION) throw new RequestError(`watch ${e.type} event of apiVersion ${JSON.stringify(e.object?.apiVersion)}`);
  return e as WireEvent;
}
