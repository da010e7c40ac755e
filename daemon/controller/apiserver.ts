/**
 * The controller's HTTP(S) API: `controlplane.sluice.io/v1beta1` served the way a Kubernetes
 * aggregated API server serves its group, so agents, the aggregation layer and kubectl all speak
 * the ordinary protocol to it:
 *
 * - discovery: `/apis`, `/apis/controlplane.sluice.io`, `/apis/controlplane.sluice.io/v1beta1`;
 * - `GET …/v1beta1/{networkpolicies,appliedtogroups,addressgroups}?fieldSelector=nodeName=<node>`:
 *   that Node's view as a List; with `watch=1`, newline-delimited JSON watch events (resumable from
 *   `resourceVersion`, BOOKMARKs with `allowWatchBookmarks`, an ERROR event carrying a 410 Expired
 *   Status when the version is too old, `timeoutSeconds`);
 * - `GET …/<resource>/<name>?fieldSelector=nodeName=<node>`: one object of that view;
 * - `GET /realization?pod=<ns>/<name>&ips=<a>,<b>&waitMs=<ms>[&confirmMs=<ms>]` (authenticated,
 *   served by the leader): a new Pod's realization question (a long poll) — `{"realized": true,
 *   "node", "nodes"}` (the Nodes where the Pod matters, each with its address, its Pods the Pod's
 *   rules select and its view's versions that hold the Pod) or `{"realized": false}` at the end of
 *   the wait; with `confirmMs`, the answer waits up to that long (from the question) for the
 *   span's agents to report those versions enforced, and marks the Nodes that have `confirmed`;
 * - `POST /realized-views` (an agent, served by the leader): one long request whose body is a line
 *   of JSON per report, `{"store", "versions"}`, the view versions the agent's bridge enforces now
 *   (what a confirmation waits for); the response's headers come at once (the store that serves),
 *   its body when the agent ends the request;
 * - `GET /trace-destination?to=<ns/pod|service:ns/name|ip:ADDRESS>&family=4|6` (authenticated,
 *   served by the leader): where a traceflow destination leads — `{"ip", "nodes": [{"name",
 *   "address"}], "beyond"?}` (the Nodes whose bridge the packet may reach after the caller's Node)
 *   or a 404 Status naming why there is no such destination;
 * - `POST …/v1beta1/traceflows` (a Traceflow: `spec.from`, `spec.to`, `spec.protocol`, `spec.port`,
 *   `spec.family`; served by the leader, for users allowed by `mayTrace`, never an agent): the
 *   trace run by the source Pod's agent, answered 201 with the report as `status`; that agent takes
 *   it with `GET /traceflow-tasks?waitMs=` (a long poll on its own connection, its Node's traces
 *   only) and answers with `POST /traceflow-results?id=` (traceflows.ts);
 * - `/status` (authenticated): the replica's leadership, computation and watches;
 * - `/healthz`, `/livez` (open), `/readyz` (open; 503 until the views are computed). A replica
 *   that is ready but does not serve (a standby) answers the API with 503 and says who serves.
 *
 * Every view is per Node, so the nodeName field selector is required. Who may read which view is
 * decided here from the caller's identity (`authenticate`): an agent's identity names its Node and
 * reads only that Node's view; an identity without a Node (an administrator through the
 * aggregation layer) reads every view only if `readAll` says so. Errors are Kubernetes Status objects.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { type Clock, every, realClock, type TimerHandle } from '../clock.js';
import {
  CONTROLPLANE_API_VERSION,
  CONTROLPLANE_GROUP,
  CONTROLPLANE_RESOURCES,
  CONTROLPLANE_VERSION,
  type ControlPlaneEvent,
  type ControlPlaneKind,
  type PodRealization,
  STORE_HEADER,
  REALIZED_VIEWS_PATH,
  type TraceDestination,
  type TraceTask,
  type ViewVersions,
  viewVersionsOf,
} from '../controlplane/types.js';
import { parseQuestion, type PodQuestion } from '../enforcement/newpods/peers.js';
import { CONTROLPLANE_KINDS, type ControlPlaneStore, eventJson, GoneError } from './store.js';
import type { TraceflowBroker } from './traceflows.js';

/** Who is asking: the authenticated user and, for an agent, the Node it runs on. */
export interface ControlPlaneIdentity {
  user: string;
  nodeName?: string | undefined;
  /** The user's groups, when the authentication tells them (the aggregation layer's requests do). */
  groups?: string[] | undefined;
}

export type ControlPlaneReadiness = { ready: true } | { ready: false; reason: string };

export interface ControlPlaneApiOptions {
  store: ControlPlaneStore;
  /** The caller's identity, undefined when it has none (401). A rejection answers 503: authentication is unavailable, not refused. */
  authenticate(req: IncomingMessage): Promise<ControlPlaneIdentity | undefined>;
  /** Whether a user without a Node may read every Node's view (`resource`: the resource asked for). A rejection answers 503. */
  readAll(user: string, identity: ControlPlaneIdentity, resource: string): boolean | Promise<boolean>;
  /** Whether this replica is ready (its views computed): /readyz. Default always. */
  readiness?: () => ControlPlaneReadiness;
  /** Whether it serves the views now (ready and the leader); default: when ready. */
  serving?: () => ControlPlaneReadiness;
  /** The body of GET /status (authenticated callers), completed with the open watches and the Nodes with a view. */
  status?: () => unknown;
  /** A new Pod's realization question (GET /realization): the answer once the controller holds the Pod, undefined after `waitMs`. */
  realization?: (q: PodQuestion, waitMs: number, confirmMs?: number) => Promise<PodRealization | undefined>;
  /**
   * Agents' reports of the view versions their Node's bridge enforces (POST /realized-views), of
   * this store: `report` for each, `broken` when the request (`source`) that carried them broke
   * instead of being ended by the agent.
   */
  realizedViews?: { report(node: string, versions: ViewVersions, source: object): void; broken(node: string, source: object): void };
  /** Where a traceflow destination leads from Node `node` (GET /trace-destination); throws a TraceError for a destination that names nothing. */
  traceDestination?: (to: string, family: 4 | 6, node: string) => TraceDestination;
  /** Traceflows asked through the controller and taken by the source Node's agent (absent: not served). */
  traceflows?: {
    broker: TraceflowBroker;
    /** The Node the source Pod ("ns/name") runs on; throws a TraceError when there is no such Pod to trace from. */
    sourceNode(from: string): string;
    /** Whether a user (no Node of its own) may ask for traces. A rejection answers 503. */
    mayTrace(identity: ControlPlaneIdentity): boolean | Promise<boolean>;
    /** How long a trace waits for the agent (default 20 000 ms). */
    waitMs?: number;
  };
  /** Period of BOOKMARK events on watches that allow them (default 60 000 ms). */
  bookmarkIntervalMs?: number;
  /** Bytes a watch may have waiting for a slow client before it is cut (default 16 MiB): the client resumes or lists again. */
  maxBufferedBytes?: number;
  /**
   * Lists being written at once (default 8); others wait their turn, first come first served. A
   * Node's view can be megabytes (cluster-wide groups) and every agent lists it after a controller
   * restart: written all at once they would sit in memory together, and the event loop, busy with
   * them, would starve the Lease renewal and lose the leadership.
   */
  maxListsInFlight?: number;
  /** A list whose client takes nothing of it this long is cut (default 30 000 ms), so it cannot keep its turn. */
  listStallMs?: number;
  clock?: Clock;
  log?: Logger;
}

/** A Kubernetes `Status` failure object. */
export interface KubeStatus {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure';
  message: string;
  reason: string;
  code: number;
  details?: { name?: string; group?: string; kind?: string };
}

export function statusObject(code: number, reason: string, message: string, details?: KubeStatus['details']): KubeStatus {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code, ...(details ? { details } : {}) };
}

/** A failure to answer with a Status. */
class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: KubeStatus['details'],
  ) {
    super(message);
  }
  status(): KubeStatus {
    return statusObject(this.code, this.reason, this.message, this.details);
  }
}

const KIND_OF_RESOURCE = new Map<string, ControlPlaneKind>(CONTROLPLANE_KINDS.map((k) => [CONTROLPLANE_RESOURCES[k], k]));
const GROUP_VERSION = { groupVersion: CONTROLPLANE_API_VERSION, version: CONTROLPLANE_VERSION };
const API_GROUP = { name: CONTROLPLANE_GROUP, versions: [GROUP_VERSION], preferredVersion: GROUP_VERSION };

function sendJson(res: ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text), 'Cache-Control': 'no-cache, private', ...headers });
  res.end(text);
}

/** The longest line a realized-views report may be. */
const MAX_REPORT_LINE = 4096;

/** One realized-views line, or what is wrong with it. */
function parseRealizedReport(line: string): { store: string; versions: ViewVersions } | string {
  let o: { store?: unknown; versions?: unknown };
  try {
    o = JSON.parse(line) as typeof o;
  } catch {
    return `not JSON: ${line.slice(0, 100)}`;
  }
  if (typeof o?.store !== 'string' || o.store === '') return 'no "store"';
  const versions = typeof o.versions === 'object' && o.versions !== null ? viewVersionsOf(o.versions as Record<string, string>) : undefined;
  if (!versions) return '"versions" is not {NetworkPolicy, AppliedToGroup, AddressGroup} as decimal strings';
  return { store: o.store, versions };
}

/**
 * The Node a request is for, from its field selector: exactly `nodeName=<node>` (or `==`);
 * anything else is a 400 naming what is wrong.
 */
export function nodeFromFieldSelector(selector: string | null): string {
  if (selector === null || selector.trim() === '') throw new ApiError(400, 'BadRequest', 'fieldSelector nodeName=<node> is required: every Node has its own view');
  let node: string | undefined;
  for (const term of selector.split(',')) {
    const m = /^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$/.exec(term);
    if (!m) throw new ApiError(400, 'BadRequest', `fieldSelector term "${term}" is not <field>=<value>`);
    const [, field, op, value] = m;
    if (field !== 'nodeName') throw new ApiError(400, 'BadRequest', `fieldSelector field "${field}" is not supported: only nodeName=<node>`);
    if (op === '!=') throw new ApiError(400, 'BadRequest', 'fieldSelector nodeName!= is not supported: only nodeName=<node>');
    if (value === '') throw new ApiError(400, 'BadRequest', 'fieldSelector nodeName= names no Node');
    if (node !== undefined && node !== value) throw new ApiError(400, 'BadRequest', `fieldSelector names two Nodes, "${node}" and "${value}"`);
    node = value;
  }
  return node!;
}

interface OpenWatch {
  /** Ends the stream cleanly (server close, leadership lost). */
  end(): void;
}

/** A list is written in slices of this many bytes (views of the shared bytes, not copies). */
const WRITE_SLICE = 256 * 1024;

/** The request handler; `startControlPlaneApiServer` puts it behind a listening server. */
export class ControlPlaneApi {
  private readonly clock: Clock;
  private readonly bookmarkMs: number;
  private readonly maxBuffered: number;
  private readonly maxLists: number;
  private readonly listStallMs: number;
  private listsInFlight = 0;
  private readonly listQueue: (() => void)[] = [];
  private readonly watches = new Set<OpenWatch>();
  /** Open realized-views requests of agents (ended with the watches). */
  private readonly reportStreams = new Set<OpenWatch>();

  constructor(private readonly opts: ControlPlaneApiOptions) {
    this.clock = opts.clock ?? realClock;
    this.bookmarkMs = opts.bookmarkIntervalMs ?? 60_000;
    this.maxBuffered = opts.maxBufferedBytes ?? 16 * 1024 * 1024;
    this.maxLists = opts.maxListsInFlight ?? 8;
    this.listStallMs = opts.listStallMs ?? 30_000;
    if (!(this.maxLists >= 1)) throw new Error(`maxListsInFlight ${this.maxLists} must be at least 1`);
    if (!(this.bookmarkMs > 0)) throw new Error(`bookmarkIntervalMs ${this.bookmarkMs} is not positive`);
  }

  /** The node:http request listener. */
  readonly handle = (req: IncomingMessage, res: ServerResponse): void => {
    this.serve(req, res).catch((err: unknown) => {
      const e = err instanceof ApiError ? err : new ApiError(500, 'InternalError', `${req.method} ${req.url}: ${(err as Error).message}`);
      if (e.code >= 500) this.opts.log?.warn({ url: req.url, err: e.message }, 'control plane API: request failed');
      if (!res.headersSent) sendJson(res, e.code, e.status());
      else res.destroy();
    });
  };

  /** Waits for a list's turn (maxListsInFlight); the function returned ends it (once, whatever calls it). */
  private async listTurn(): Promise<() => void> {
    if (this.listsInFlight >= this.maxLists) await new Promise<void>((resolve) => this.listQueue.push(resolve));
    else this.listsInFlight++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      // The turn passes to the next list waiting, or is given back.
      const next = this.listQueue.shift();
      if (next) next();
      else this.listsInFlight--;
    };
  }

  /**
   * Writes `pieces` in slices, each after the client took the one before (the socket drained):
   * only a slice per connection is buffered (a list shares its bytes with every other, and copies
   * of megabytes per connection would add up over thousands of agents). A client that takes
   * nothing for listStallMs is cut: it lists again later, and its turn goes to the next list.
   */
  private async writeStreamed(res: ServerResponse, pieces: Buffer[]): Promise<void> {
    for (const piece of pieces) {
      for (let at = 0; at < piece.length; at += WRITE_SLICE) {
        if (res.destroyed) return;
        if (res.write(piece.subarray(at, at + WRITE_SLICE))) continue;
        const drained = await new Promise<boolean>((resolve) => {
          const done = (ok: boolean) => {
            this.clock.clearTimeout(timer);
            res.off('drain', onDrain);
            res.off('close', onClose);
            resolve(ok);
          };
          const onDrain = () => done(true);
          const onClose = () => done(false);
          const timer = this.clock.setTimeout(() => done(false), this.listStallMs);
          res.on('drain', onDrain);
          res.on('close', onClose);
        });
        if (!drained) {
          if (!res.destroyed) this.opts.log?.warn({ url: res.req?.url, stalledMs: this.listStallMs }, 'control plane API: a client took none of its list for too long; cut');
          res.destroy();
          return;
        }
      }
    }
  }

  /** Lists waiting for their turn now. */
  waitingLists(): number {
    return this.listQueue.length;
  }

  /** The watches being served now. */
  openWatches(): number {
    return this.watches.size;
  }

  /** Ends every watch cleanly: on shutdown, or when this controller stops being the leader. */
  endWatches(): void {
    for (const w of [...this.watches, ...this.reportStreams]) w.end();
  }

  private readiness(): ControlPlaneReadiness {
    return this.opts.readiness?.() ?? { ready: true };
  }

  /** A 503 saying why unless this replica serves now (ready and the leader): `what` is what is not done. */
  private requireServing(what: string): void {
    const ready = this.opts.serving?.() ?? this.readiness();
    if (!ready.ready) throw new ApiError(503, 'ServiceUnavailable', `${what}: ${ready.reason}`);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://controller');
    const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
    const post = req.method === 'POST' && (path === TRACEFLOWS_PATH || path === '/traceflow-results' || path === REALIZED_VIEWS_PATH);
    if (req.method !== 'GET' && !post) throw new ApiError(405, 'MethodNotAllowed', `${req.method} is not allowed: the control plane API is read-only (GET), but for the creation of traceflows and agents' reports`);
    if (path === '/healthz' || path === '/livez') {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('ok');
      return;
    }
    if (path === '/readyz') {
      const r = this.readiness();
      res.writeHead(r.ready ? 200 : 503, { 'Content-Type': 'text/plain' });
      res.end(r.ready ? 'ok' : `not ready: ${r.reason}`);
      return;
    }
    let identity: ControlPlaneIdentity | undefined;
    try {
      identity = await this.opts.authenticate(req);
    } catch (err) {
      throw new ApiError(503, 'ServiceUnavailable', `authentication is unavailable: ${(err as Error).message}`);
    }
    if (!identity) throw new ApiError(401, 'Unauthorized', 'Unauthorized: no valid credentials');
    // What the replica is doing (leadership, views, watches): for any authenticated caller.
    if (path === '/status' && this.opts.status) {
      return sendJson(res, 200, { ...(this.opts.status() as object), watches: this.watches.size, reportStreams: this.reportStreams.size, listsWaiting: this.listQueue.length, nodes: this.opts.store.nodeCount() });
    }
    if (path === '/realization' && this.opts.realization) return this.serveRealization(res, url.searchParams, this.opts.realization);
    if (path === REALIZED_VIEWS_PATH && this.opts.realizedViews) return this.serveRealizedViews(req, res, identity, this.opts.realizedViews);
    if (path === '/trace-destination' && this.opts.traceDestination) return this.serveTraceDestination(res, url.searchParams, identity, this.opts.traceDestination);
    const tf = this.opts.traceflows;
    if (tf && path === TRACEFLOWS_PATH) return this.serveTraceflow(req, res, identity, tf);
    if (tf && path === '/traceflow-tasks') return this.serveTraceTasks(res, url.searchParams, identity, tf.broker);
    if (tf && path === '/traceflow-results') return this.serveTraceResult(req, res, url.searchParams, identity, tf.broker);

    const seg = path.split('/').filter((s) => s !== '');
    const notFound = () => new ApiError(404, 'NotFound', `the server could not find the requested resource (${path})`);
    if (seg[0] !== 'apis') throw notFound();
    if (seg.length === 1) return sendJson(res, 200, { kind: 'APIGroupList', apiVersion: 'v1', groups: [API_GROUP] });
    if (seg[1] !== CONTROLPLANE_GROUP) throw notFound();
    if (seg.length === 2) return sendJson(res, 200, { kind: 'APIGroup', apiVersion: 'v1', ...API_GROUP });
    if (seg[2] !== CONTROLPLANE_VERSION) throw notFound();
    if (seg.length === 3) return sendJson(res, 200, resourceList());
    const kind = KIND_OF_RESOURCE.get(seg[3]!);
    if (!kind || seg.length > 5) throw notFound();
    const name = seg[4];

    this.requireServing('the control plane views are not served now');
    const q = url.searchParams;
    const node = nodeFromFieldSelector(q.get('fieldSelector'));
    if (q.get('labelSelector')) throw new ApiError(400, 'BadRequest', 'labelSelector is not supported: the control plane objects carry no labels');
    await this.authorize(identity, node, seg[3]!);
    const watch = q.get('watch') === '1' || q.get('watch') === 'true';

    if (name !== undefined) {
      if (watch) throw new ApiError(400, 'BadRequest', `watch of one ${kind} is not supported: watch the list (${seg[3]}) instead`);
      const obj = this.opts.store.get(node, kind, name);
      if (!obj) throw new ApiError(404, 'NotFound', `${seg[3]}.${CONTROLPLANE_GROUP} "${name}" not found in Node ${node}'s view`, { name, group: CONTROLPLANE_GROUP, kind: seg[3]! });
      return sendJson(res, 200, obj);
    }
    if (watch) return this.serveWatch(req, res, node, kind, q);
    const done = await this.listTurn();
    res.once('close', done);
    // The client may have gone, or this replica stopped serving, while the list waited its turn.
    if (res.destroyed) return done();
    this.requireServing('the control plane views are not served now');
    const list = this.opts.store.listJson(node, kind);
    const head = Buffer.from(`{"kind":"${kind}List","apiVersion":"${CONTROLPLANE_API_VERSION}","metadata":{"resourceVersion":"${list.resourceVersion}"},"items":`);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': head.length + list.bytes + 1, 'Cache-Control': 'no-cache, private', [STORE_HEADER]: this.opts.store.id });
    await this.writeStreamed(res, [head, ...list.items]);
    if (!res.destroyed) res.end('}');
  }

  private async serveRealization(res: ServerResponse, q: URLSearchParams, answer: NonNullable<ControlPlaneApiOptions['realization']>): Promise<void> {
    this.requireServing('realization questions are not answered now');
    const parsed = parseQuestion(q);
    if ('error' in parsed) throw new ApiError(400, 'BadRequest', parsed.error);
    const confirm = q.get('confirmMs');
    if (confirm !== null && !/^[0-9]{1,6}$/.test(confirm)) throw new ApiError(400, 'BadRequest', `confirmMs "${confirm}" is not a number of milliseconds (0–999999)`);
    let out: PodRealization | undefined;
    try {
      out = await answer(parsed.question, parsed.waitMs, confirm === null ? undefined : Number(confirm));
    } catch (err) {
      throw new ApiError(503, 'ServiceUnavailable', (err as Error).message);
    }
    sendJson(res, 200, out ? { realized: true, ...out } : { realized: false });
  }

  /**
   * An agent's realized-views reports: a line each, applied as it comes, for the caller's own Node
   * only. A line that is not a report ends the request with a Status naming what is wrong (the
   * agent opens another); a report of another store's versions (the agent follows another replica,
   * or has not relisted since this one took over) means nothing here and is counted, not applied.
   * A request that breaks, not ended by the agent, is reported `broken`.
   */
  private serveRealizedViews(req: IncomingMessage, res: ServerResponse, id: ControlPlaneIdentity, sink: NonNullable<ControlPlaneApiOptions['realizedViews']>): Promise<void> {
    const node = id.nodeName;
    if (node === undefined) throw new ApiError(403, 'Forbidden', `user "${id.user}" is no Node's agent: only an agent reports what its own Node enforces`);
    this.requireServing('realized views are not taken now');
    const store = this.opts.store.id;
    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', [STORE_HEADER]: store });
    res.flushHeaders();
    const counts = { applied: 0, otherStore: 0 };
    // What the reports kept name as their request: an empty object, so a kept report holds
    // nothing of the request once it is over.
    const source = {};
    return new Promise((resolve) => {
      let buffered = '';
      let ended = false;
      const end = (failure?: string, broken = false) => {
        if (ended) return;
        ended = true;
        this.reportStreams.delete(stream);
        req.off('data', onData);
        if (broken) sink.broken(node, source);
        if (failure !== undefined) this.opts.log?.warn({ node, err: failure }, 'control plane API: a realized-views report refused; the request is ended');
        if (!res.destroyed) res.end(`${JSON.stringify(failure === undefined ? counts : statusObject(400, 'BadRequest', failure))}\n`);
        resolve();
      };
      const stream: OpenWatch = { end: () => end() };
      this.reportStreams.add(stream);
      const onData = (chunk: string) => {
        buffered += chunk;
        let nl: number;
        while (!ended && (nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (line === '') continue;
          const r = parseRealizedReport(line);
          if (typeof r === 'string') return end(r);
          if (r.store !== store) counts.otherStore++;
          else {
            counts.applied++;
            sink.report(node, r.versions, source);
          }
        }
        if (buffered.length > MAX_REPORT_LINE) end(`a line of over ${MAX_REPORT_LINE} bytes`);
      };
      req.setEncoding('utf8');
      req.on('data', onData);
      req.once('end', () => end());
      // Closed before the agent ended its request: the connection broke (or the agent is gone).
      res.once('close', () => end(undefined, !req.complete));
    });
  }

  private async serveTraceflow(req: IncomingMessage, res: ServerResponse, id: ControlPlaneIdentity, tf: NonNullable<ControlPlaneApiOptions['traceflows']>): Promise<void> {
    if (req.method !== 'POST') throw new ApiError(405, 'MethodNotAllowed', 'traceflows are only created (POST): each is run once and not kept');
    if (id.nodeName !== undefined) throw new ApiError(403, 'Forbidden', `user "${id.user}" is the agent of Node ${id.nodeName}: agents do not ask for traces`, { group: CONTROLPLANE_GROUP, kind: 'traceflows' });
    let allowed: boolean;
    try {
      allowed = await tf.mayTrace(id);
    } catch (err) {
      throw new ApiError(503, 'ServiceUnavailable', `authorization is unavailable: ${(err as Error).message}`);
    }
    if (!allowed) throw new ApiError(403, 'Forbidden', `user "${id.user}" may not create traceflows.${CONTROLPLANE_GROUP}`, { group: CONTROLPLANE_GROUP, kind: 'traceflows' });
    const body = await readJson(req);
    const spec = parseTraceflowSpec(body);
    this.requireServing('traceflows are not run now');
    let node: string;
    try {
      node = tf.sourceNode(spec.from);
    } catch (err) {
      if ((err as Error).name === 'TraceError') throw new ApiError(404, 'NotFound', (err as Error).message);
      throw err;
    }
    const outcome = await tf.broker.run(node, spec, tf.waitMs ?? 20_000);
    if ('error' in outcome) {
      const reason = outcome.code === 504 ? 'Timeout' : outcome.code === 409 ? 'Conflict' : outcome.code === 429 ? 'TooManyRequests' : outcome.code < 500 ? 'BadRequest' : 'ServiceUnavailable';
      throw new ApiError(outcome.code, reason, outcome.error);
    }
    const name = (body as { metadata?: { name?: unknown } }).metadata?.name;
    sendJson(res, 201, {
      apiVersion: CONTROLPLANE_API_VERSION, kind: 'Traceflow',
      metadata: { name: typeof name === 'string' && name ? name : `traceflow-${Date.now().toString(36)}`, creationTimestamp: new Date().toISOString() },
      spec, status: { node, ...(outcome.report as object) },
    });
  }

  private async serveTraceTasks(res: ServerResponse, q: URLSearchParams, id: ControlPlaneIdentity, broker: TraceflowBroker): Promise<void> {
    if (id.nodeName === undefined) throw new ApiError(403, 'Forbidden', `user "${id.user}" is no Node's agent: only agents take traces`);
    this.requireServing('traces are not handed out now');
    const w = q.get('waitMs') ?? '0';
    if (!/^\d+$/.test(w) || Number(w) > 60_000) throw new ApiError(400, 'BadRequest', `waitMs "${w}": use 0-60000`);
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    const task = await broker.take(id.nodeName, Number(w), gone.signal);
    sendJson(res, 200, task ? { task } : {});
  }

  private async serveTraceResult(req: IncomingMessage, res: ServerResponse, q: URLSearchParams, id: ControlPlaneIdentity, broker: TraceflowBroker): Promise<void> {
    if (id.nodeName === undefined) throw new ApiError(403, 'Forbidden', `user "${id.user}" is no Node's agent: only agents answer traces`);
    const body = (await readJson(req)) as { report?: unknown; error?: unknown; code?: unknown };
    const outcome = body.report !== undefined
      ? { report: body.report }
      : { error: typeof body.error === 'string' ? body.error : 'the agent gave no report', code: typeof body.code === 'number' && body.code >= 400 && body.code < 600 ? body.code : 502 };
    if (!broker.complete(id.nodeName, q.get('id') ?? '', outcome)) throw new ApiError(404, 'NotFound', `no trace "${q.get('id') ?? ''}" waits for Node ${id.nodeName}'s answer (it timed out, or is another Node's)`);
    sendJson(res, 200, {});
  }

  private serveTraceDestination(res: ServerResponse, q: URLSearchParams, id: ControlPlaneIdentity, answer: NonNullable<ControlPlaneApiOptions['traceDestination']>): void {
    this.requireServing('trace destinations are not answered now');
    const to = q.get('to') ?? '';
    const family = q.get('family') ?? '4';
    if (!to) throw new ApiError(400, 'BadRequest', 'to: the destination is missing (ns/pod, service:ns/name or ip:ADDRESS)');
    if (family !== '4' && family !== '6') throw new ApiError(400, 'BadRequest', `family "${family}": use 4 or 6`);
    let out: TraceDestination;
    try {
      out = answer(to, Number(family) as 4 | 6, id.nodeName ?? '');
    } catch (err) {
      if ((err as Error).name === 'TraceError') throw new ApiError(404, 'NotFound', (err as Error).message);
      throw err;
    }
    sendJson(res, 200, out);
  }

  private async authorize(id: ControlPlaneIdentity, node: string, resource: string): Promise<void> {
    if (id.nodeName !== undefined) {
      if (id.nodeName !== node) {
        throw new ApiError(403, 'Forbidden', `user "${id.user}" is the agent of Node ${id.nodeName}: it may read only Node ${id.nodeName}'s view, not Node ${node}'s`, { group: CONTROLPLANE_GROUP, kind: resource });
      }
      return;
    }
    let allowed: boolean;
    try {
      allowed = await this.opts.readAll(id.user, id, resource);
    } catch (err) {
      throw new ApiError(503, 'ServiceUnavailable', `authorization is unavailable: ${(err as Error).message}`);
    }
    if (!allowed) throw new ApiError(403, 'Forbidden', `user "${id.user}" may not read Node ${node}'s view: it is no Node's agent and not allowed to read every view`, { group: CONTROLPLANE_GROUP, kind: resource });
  }

  private serveWatch(req: IncomingMessage, res: ServerResponse, node: string, kind: ControlPlaneKind, q: URLSearchParams): void {
    const timeout = q.get('timeoutSeconds');
    if (timeout !== null && !/^[0-9]+$/.test(timeout)) throw new ApiError(400, 'BadRequest', `timeoutSeconds "${timeout}" is not a non-negative integer`);
    const from = q.get('resourceVersion') ?? '';
    if (from !== '' && !/^[0-9]+$/.test(from)) throw new ApiError(400, 'BadRequest', `resourceVersion "${from}" is not a valid resource version (a decimal integer)`);
    const bookmarks = q.get('allowWatchBookmarks') === 'true' || q.get('allowWatchBookmarks') === '1';

    res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-cache, private', [STORE_HEADER]: this.opts.store.id });
    res.flushHeaders();
    req.socket.setKeepAlive(true, 30_000);
    const write = (e: ControlPlaneEvent | { type: 'ERROR'; object: KubeStatus }) => {
      if (res.destroyed || res.writableEnded) return;
      res.write(`${eventJson(e)}\n`);
      // A client that does not read would make the controller hold every event for it.
      if (res.writableLength > this.maxBuffered) {
        this.opts.log?.warn({ node, kind, buffered: res.writableLength }, 'control plane API: watch cut, its client does not keep up');
        res.destroy();
      }
    };
    const bookmark = () =>
      write({ type: 'BOOKMARK', object: { apiVersion: CONTROLPLANE_API_VERSION, kind, metadata: { name: '', resourceVersion: this.opts.store.resourceVersion() } } });

    let stopBookmarks = () => {};
    let timer: TimerHandle | undefined;
    let watcher: { stop(): void } | undefined;
    const cleanup = () => {
      watcher?.stop();
      stopBookmarks();
      this.clock.clearTimeout(timer);
      this.watches.delete(entry);
    };
    const entry: OpenWatch = {
      end: () => {
        cleanup();
        if (!res.writableEnded && !res.destroyed) res.end();
      },
    };
    res.on('close', cleanup);
    try {
      watcher = this.opts.store.watch(node, kind, from, write, (err) => {
        if (err) this.opts.log?.warn({ node, kind, err: err.message }, 'control plane API: watch ended by an error');
        entry.end();
      });
    } catch (err) {
      if (!(err instanceof GoneError)) throw err;
      write({ type: 'ERROR', object: statusObject(410, 'Expired', err.message) });
      entry.end();
      return;
    }
    if (res.writableEnded || res.destroyed) {
      cleanup();
      return;
    }
    this.watches.add(entry);
    if (bookmarks) stopBookmarks = every(this.clock, this.bookmarkMs, bookmark);
    if (timeout !== null) timer = this.clock.setTimeout(entry.end, Number(timeout) * 1000);
  }
}

const TRACEFLOWS_PATH = `/apis/${CONTROLPLANE_GROUP}/${CONTROLPLANE_VERSION}/traceflows`;

/** A JSON request body of at most 64 KiB; a 400 names what is wrong. */
function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => {
      text += d;
      if (text.length > 65_536) {
        reject(new ApiError(413, 'RequestEntityTooLarge', 'the request body is over 64 KiB'));
        req.destroy();
      }
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(text));
      } catch (err) {
        reject(new ApiError(400, 'BadRequest', `the request body is not JSON: ${(err as Error).message}`));
      }
    });
    req.on('error', reject);
  });
}

/** A Traceflow's spec, or a 400 naming the field that is wrong. */
function parseTraceflowSpec(body: unknown): Omit<TraceTask, 'id'> {
  const o = body as { kind?: unknown; spec?: Record<string, unknown> } | null;
  if (!o || typeof o !== 'object' || Array.isArray(o)) throw new ApiError(400, 'BadRequest', 'the body must be a Traceflow object');
  if (o.kind !== undefined && o.kind !== 'Traceflow') throw new ApiError(400, 'BadRequest', `kind "${String(o.kind)}" is not Traceflow`);
  const spec = o.spec;
  if (!spec || typeof spec !== 'object') throw new ApiError(400, 'BadRequest', 'spec is required: from, to, and port (TCP, UDP)');
  const str = (k: string) => (typeof spec[k] === 'string' && spec[k] !== '' ? (spec[k] as string) : undefined);
  const from = str('from');
  const to = str('to');
  if (!from) throw new ApiError(400, 'BadRequest', 'spec.from: the source Pod (ns/name) is required');
  if (!to) throw new ApiError(400, 'BadRequest', 'spec.to: the destination (ns/pod, service:ns/name or ip:ADDRESS) is required');
  const protocol = (str('protocol') ?? 'TCP').toUpperCase();
  if (!['TCP', 'UDP', 'ICMP'].includes(protocol)) throw new ApiError(400, 'BadRequest', `spec.protocol "${protocol}": use TCP, UDP or ICMP`);
  const port = spec.port;
  if (port !== undefined && (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535)) throw new ApiError(400, 'BadRequest', `spec.port ${JSON.stringify(port)}: a port 1-65535`);
  const family = spec.family;
  if (family !== undefined && family !== 4 && family !== 6) throw new ApiError(400, 'BadRequest', `spec.family ${JSON.stringify(family)}: 4 or 6`);
  return { from, to, protocol, ...(port !== undefined ? { port: port as number } : {}), ...(family !== undefined ? { family: family as number } : {}) };
}

function resourceList() {
  return {
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: CONTROLPLANE_API_VERSION,
    resources: [
      ...CONTROLPLANE_KINDS.map((kind): { name: string; singularName: string; namespaced: boolean; kind: string; verbs: string[] } => ({
        name: CONTROLPLANE_RESOURCES[kind],
        singularName: kind.toLowerCase(),
        namespaced: false,
        kind,
        verbs: ['get', 'list', 'watch'],
      })),
      { name: 'traceflows', singularName: 'traceflow', namespaced: false, kind: 'Traceflow', verbs: ['create'] },
    ],
  };
}

export interface ControlPlaneServerOptions extends ControlPlaneApiOptions {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: a free port. */
  port?: number;
  /** Serve HTTPS with this PEM key and certificate (plain HTTP without). */
  /**
   * HTTPS. `clientCa`: client certificates are asked for and verified against it (the aggregation
   * layer's front-proxy certificate); a client without one still connects (agents send tokens).
   */
  tls?: { key: string | Buffer; cert: string | Buffer; clientCa?: string | Buffer | undefined };
}

export interface ControlPlaneApiServer {
  url: string;
  port: number;
  api: ControlPlaneApi;
  /** Serves a renewed certificate to new connections (HTTPS only; open ones keep theirs). */
  setCertificate(tls: { key: string | Buffer; cert: string | Buffer }): void;
  /** Ends every watch cleanly, then stops listening. */
  close(): Promise<void>;
}

/** Listens and serves the control plane API until `close`. */
export async function startControlPlaneApiServer(opts: ControlPlaneServerOptions): Promise<ControlPlaneApiServer> {
  const api = new ControlPlaneApi(opts);
  const server = opts.tls
    ? https.createServer({ key: opts.tls.key, cert: opts.tls.cert, ...(opts.tls.clientCa ? { ca: opts.tls.clientCa, requestCert: true, rejectUnauthorized: false } : {}) }, api.handle)
    : http.createServer(api.handle);
  const host = opts.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`control plane API cannot listen on ${host}:${opts.port ?? 0}: ${err.message}`)));
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const hostInUrl = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `${opts.tls ? 'https' : 'http'}://${hostInUrl}:${port}`,
    port,
    api,
    setCertificate: (tls) => {
      if (!(server instanceof https.Server)) throw new Error('the control plane API is served without TLS: no certificate to renew');
      server.setSecureContext({ key: tls.key, cert: tls.cert, ...(opts.tls?.clientCa ? { ca: opts.tls.clientCa } : {}) });
    },
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        api.endWatches();
        // Ended watches flush their last chunk; connections still open after a grace are cut.
        const force = setTimeout(() => server.closeAllConnections(), 500);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      })),
  };
}
