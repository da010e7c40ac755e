// daemon/controller/apiserver.ts and daemon/controlplane/client.ts over real HTTP on 127.0.0.1:
// discovery, per-Node lists and objects, watches (resume, bookmarks, timeouts, 410 as an ERROR
// event), Status errors (401, 403, 400, 404, 405, 503), and the agent's watcher: list then watch,
// patches, relist after 410, reconnection with backoff while keeping its state.
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Clock, TimerHandle } from '../../daemon/clock.js';
import { type ControlPlaneApiOptions, type ControlPlaneApiServer, type ControlPlaneIdentity, type ControlPlaneReadiness, startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';
import { askController, type ControlPlaneConnection, ControlPlaneWatcher, postTraceResult, takeTraceTask } from '../../daemon/controlplane/client.js';
import { TraceflowBroker } from '../../daemon/controller/traceflows.js';
import {
  CONTROLPLANE_API_VERSION,
  type ControlPlaneAddressGroup,
  type ControlPlaneAddressGroupPatch,
  type ControlPlaneEvent,
  type ControlPlaneKind,
  type ControlPlaneNetworkPolicy,
  type ControlPlaneObject,
  VIEW_VERSIONS_ANNOTATION,
} from '../../daemon/controlplane/types.js';
import type { GroupMember } from '../../daemon/policy/types.js';
import { ensureLabPki } from '../../lab/pki.js';
import { ManualClock } from './manual-clock.js';

const BASE = `/apis/${CONTROLPLANE_API_VERSION}`;
/** The view-versions annotation of a Node's view at those versions. */
const vv = (np: number, atg: number, ag: number) => ({ [VIEW_VERSIONS_ANNOTATION]: `NetworkPolicy=${np},AppliedToGroup=${atg},AddressGroup=${ag}` });
const pod = (ref: string, ip: string): GroupMember => ({ kind: 'pod', ref, nodeName: 'n1', ips: [ip], ports: [] });
const ag = (id: string, members: GroupMember[]): ControlPlaneAddressGroup => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: id }, members, ipBlocks: [] });
const agPatch = (id: string, upserted: GroupMember[], removed: string[] = []): ControlPlaneAddressGroupPatch => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroupPatch', metadata: { name: id }, upserted, removed });
const np = (key: string): ControlPlaneNetworkPolicy => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: key }, sourceKey: key, rules: [], isolations: [] });

/** Tokens of the tests: two agents, an administrator allowed to read every view, a user who is not. */
const IDENTITIES: Record<string, ControlPlaneIdentity> = {
  'tok-n1': { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'n1' },
  'tok-n2': { user: 'system:serviceaccount:kube-system:sluice-agent', nodeName: 'n2' },
  'tok-admin': { user: 'admin' },
  'tok-viewer': { user: 'viewer' },
};

async function authenticate(req: http.IncomingMessage): Promise<ControlPlaneIdentity | undefined> {
  const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
  return m ? IDENTITIES[m[1]!] : undefined;
}

type Teardown = { teardown(fn: () => unknown): void };

async function serve(
  t: Teardown,
  store: ControlPlaneStore,
  extra: { clock?: Clock; readiness?: () => ControlPlaneReadiness; serving?: () => ControlPlaneReadiness; port?: number; bookmarkIntervalMs?: number; realization?: NonNullable<ControlPlaneApiOptions['realization']> } = {},
): Promise<ControlPlaneApiServer> {
  const server = await startControlPlaneApiServer({ store, authenticate, readAll: (u) => u === 'admin', ...extra });
  t.teardown(() => server.close());
  return server;
}

/** A GET: its status and JSON (or text) body. */
function get(server: ControlPlaneApiServer, path: string, token?: string, method = 'GET'): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${server.url}${path}`, { method, headers: token ? { Authorization: `Bearer ${token}` } : {} }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // Health answers are text.
        }
        resolve({ status: res.statusCode!, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** Waits until `cond` holds, polling, at most `ms`. */
async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** An open watch stream: its events as they come, and whether the server ended it. */
function openWatch(server: ControlPlaneApiServer, query: string, token = 'tok-n1') {
  const events: { type: string; object: any }[] = [];
  const state = { status: 0, ended: false };
  let res: http.IncomingMessage | undefined;
  const req = http.get(`${server.url}${query}`, { headers: { Authorization: `Bearer ${token}` } }, (r) => {
    res = r;
    state.status = r.statusCode!;
    let buf = '';
    r.setEncoding('utf8');
    r.on('data', (c: string) => {
      buf += c;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        events.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
      }
    });
    r.on('end', () => (state.ended = true));
  });
  req.on('error', () => {});
  const log = () => events.map((e) => `${e.type} ${e.object.metadata?.name ?? ''}@${e.object.metadata?.resourceVersion ?? e.object.code}`);
  return { events, state, log, close: () => (res ? res.destroy() : req.destroy()) };
}

t.test('discovery and health', async (t) => {
  let ready: ControlPlaneReadiness = { ready: true };
  const server = await serve(t, new ControlPlaneStore(), { readiness: () => ready });
  const groups = await get(server, '/apis', 'tok-n1');
  t.equal(groups.status, 200);
  t.same(groups.body, {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: [{ name: 'controlplane.sluice.io', versions: [{ groupVersion: CONTROLPLANE_API_VERSION, version: 'v1beta1' }], preferredVersion: { groupVersion: CONTROLPLANE_API_VERSION, version: 'v1beta1' } }],
  });
  const group = await get(server, '/apis/controlplane.sluice.io/', 'tok-admin');
  t.equal(group.body.kind, 'APIGroup');
  t.equal(group.body.name, 'controlplane.sluice.io');
  const resources = await get(server, BASE, 'tok-viewer');
  t.equal(resources.body.kind, 'APIResourceList');
  t.equal(resources.body.groupVersion, CONTROLPLANE_API_VERSION);
  t.same(
    resources.body.resources.map((r: any) => `${r.name} ${r.kind} ${r.namespaced} ${r.verbs.join(',')}`),
    ['networkpolicies NetworkPolicy false get,list,watch', 'appliedtogroups AppliedToGroup false get,list,watch', 'addressgroups AddressGroup false get,list,watch', 'traceflows Traceflow false create'],
  );
  t.same(await get(server, '/healthz'), { status: 200, body: 'ok' }, 'health is open');
  t.same(await get(server, '/readyz'), { status: 200, body: 'ok' });
  ready = { ready: false, reason: 'not the leader' };
  t.same(await get(server, '/readyz'), { status: 503, body: 'not ready: not the leader' });
  const list = await get(server, `${BASE}/networkpolicies?fieldSelector=nodeName=n1`, 'tok-n1');
  t.equal(list.status, 503);
  t.match(list.body, { kind: 'Status', code: 503, reason: 'ServiceUnavailable', message: 'the control plane views are not served now: not the leader' });
  t.equal((await get(server, BASE, 'tok-n1')).status, 200, 'discovery is served even when not ready');
});

t.test('/status: for authenticated callers, with the open watches and the Nodes with a view', async (t) => {
  const store = new ControlPlaneStore();
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  const server = await startControlPlaneApiServer({ store, authenticate, readAll: () => false, status: () => ({ leading: true }) });
  t.teardown(() => server.close());
  t.equal((await get(server, '/status')).status, 401, 'not without credentials');
  t.same((await get(server, '/status', 'tok-n1')).body, { leading: true, watches: 0, reportStreams: 0, listsWaiting: 0, nodes: 1 });
});

t.test('lists take turns (maxListsInFlight): a list a slow client holds keeps its turn, the next waits, then is served', async (t) => {
  const store = new ControlPlaneStore();
  // Megabytes: more than the socket buffers hold, so the response cannot finish while its client reads nothing.
  store.set('n1', 'AddressGroup', 'ag-big', ag('ag-big', Array.from({ length: 120_000 }, (_, i) => pod(`x/p-${i}`, `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`))));
  store.set('n2', 'AddressGroup', 'ag-small', ag('ag-small', []));
  const server = await startControlPlaneApiServer({ store, authenticate, readAll: () => false, maxListsInFlight: 1 });
  t.teardown(() => server.close());
  let slow!: http.IncomingMessage;
  const slowRequest = http.get(`${server.url}${BASE}/addressgroups?fieldSelector=nodeName%3Dn1`, { headers: { Authorization: 'Bearer tok-n1' } });
  await new Promise<void>((resolve) => slowRequest.on('response', (res) => {
    slow = res;
    res.pause();
    resolve();
  }));
  let second: { status: number; body: any } | undefined;
  const secondDone = get(server, `${BASE}/addressgroups?fieldSelector=nodeName%3Dn2`, 'tok-n2').then((r) => (second = r));
  for (let i = 0; i < 100 && server.api.waitingLists() === 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(server.api.waitingLists(), 1, 'the second list waits while the first is being written');
  t.equal(second, undefined);
  let bytes = 0;
  slow.on('data', (c: Buffer) => (bytes += c.length));
  slow.resume();
  await new Promise((r) => slow.on('end', r));
  t.ok(bytes > 4 * 1024 * 1024, `the first list is whole (${bytes} bytes)`);
  await secondDone;
  t.equal(second!.status, 200);
  t.same(second!.body.items.map((o: ControlPlaneObject) => o.metadata.name), ['ag-small'], 'then the second is served');
  t.equal(server.api.waitingLists(), 0);

  // A client that goes away while its list waits gives its turn back.
  const held = http.get(`${server.url}${BASE}/addressgroups?fieldSelector=nodeName%3Dn1`, { headers: { Authorization: 'Bearer tok-n1' } });
  const heldRes = await new Promise<http.IncomingMessage>((resolve) => held.on('response', resolve));
  heldRes.pause();
  const gone = http.get(`${server.url}${BASE}/addressgroups?fieldSelector=nodeName%3Dn2`, { headers: { Authorization: 'Bearer tok-n2' } });
  gone.on('error', () => {});
  for (let i = 0; i < 100 && server.api.waitingLists() === 0; i++) await new Promise((r) => setTimeout(r, 10));
  gone.destroy();
  heldRes.resume();
  heldRes.on('data', () => {});
  await new Promise((r) => heldRes.on('end', r));
  const after = await get(server, `${BASE}/addressgroups?fieldSelector=nodeName%3Dn2`, 'tok-n2');
  t.equal(after.status, 200, 'a list after a waiting client left is served (its turn was not kept)');

  // A client that takes nothing of its list is cut after listStallMs, and its turn passes on.
  const strict = await startControlPlaneApiServer({ store, authenticate, readAll: () => false, maxListsInFlight: 1, listStallMs: 300 });
  t.teardown(() => strict.close());
  const stuck = http.get(`${strict.url}${BASE}/addressgroups?fieldSelector=nodeName%3Dn1`, { headers: { Authorization: 'Bearer tok-n1' } });
  const stuckRes = await new Promise<http.IncomingMessage>((resolve) => stuck.on('response', resolve));
  stuckRes.pause();
  stuckRes.on('error', () => {});
  const started = Date.now();
  const next = await get(strict, `${BASE}/addressgroups?fieldSelector=nodeName%3Dn2`, 'tok-n2');
  t.equal(next.status, 200, 'the next list is served once the stuck client is cut');
  t.ok(Date.now() - started >= 250, 'not before the stall limit');
  // Read now what was sent before the cut: the connection ends there, the list incomplete.
  let got = 0;
  stuckRes.on('data', (c: Buffer) => (got += c.length));
  const closed = new Promise<void>((resolve) => stuckRes.socket.once('close', () => resolve()));
  stuckRes.resume();
  await closed;
  t.notOk(stuckRes.complete, `the stuck client's list was cut (${got} of ${stuckRes.headers['content-length']} bytes)`);
});

t.test('a standby is ready (its views computed) but serves no view, and says who does', async (t) => {
  const server = await serve(t, new ControlPlaneStore(), { readiness: () => ({ ready: true }), serving: () => ({ ready: false, reason: 'a standby replica (controller-a leads)' }) });
  t.same(await get(server, '/readyz'), { status: 200, body: 'ok' }, 'ready: a rollout does not wait on the standby');
  const list = await get(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1`, 'tok-n1');
  t.equal(list.status, 503);
  t.match(list.body, { kind: 'Status', code: 503, message: 'the control plane views are not served now: a standby replica (controller-a leads)' });
});

t.test('list and get: each Node its own view, objects with their versions', async (t) => {
  const store = new ControlPlaneStore({ initialResourceVersion: 0 });
  const server = await serve(t, store);
  const p = np('NetworkPolicy/x/allow');
  store.batch(() => {
    store.set('n1', 'NetworkPolicy', p.sourceKey, p);
    store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
    store.set('n2', 'AddressGroup', 'ag-2', ag('ag-2', []));
  });
  const l1 = await get(server, `${BASE}/addressgroups?fieldSelector=nodeName%3Dn1`, 'tok-n1');
  t.equal(l1.status, 200);
  t.same(l1.body, { kind: 'AddressGroupList', apiVersion: CONTROLPLANE_API_VERSION, metadata: { resourceVersion: '3' }, items: [{ ...ag('ag-1', [pod('x/a', '10.0.0.1')]), metadata: { name: 'ag-1', resourceVersion: '2', annotations: vv(1, 0, 2) } }] });
  const l2 = await get(server, `${BASE}/addressgroups?fieldSelector=nodeName==n2`, 'tok-n2');
  t.same(l2.body.items.map((i: any) => i.metadata.name), ['ag-2']);
  const nps = await get(server, `${BASE}/networkpolicies?fieldSelector=nodeName=n1&limit=500`, 'tok-n1');
  t.equal(nps.body.kind, 'NetworkPolicyList');
  t.same(nps.body.items.map((i: any) => i.metadata.name), ['networkpolicy.x.allow']);
  const empty = await get(server, `${BASE}/appliedtogroups?fieldSelector=nodeName=n1`, 'tok-n1');
  t.same(empty.body.items, []);
  const one = await get(server, `${BASE}/networkpolicies/networkpolicy.x.allow?fieldSelector=nodeName=n1`, 'tok-n1');
  t.equal(one.status, 200);
  t.same(one.body, { ...p, metadata: { name: 'networkpolicy.x.allow', resourceVersion: '1', annotations: vv(1, 0, 2) } });
  const missing = await get(server, `${BASE}/addressgroups/ag-2?fieldSelector=nodeName=n1`, 'tok-n1');
  t.equal(missing.status, 404);
  t.same(missing.body, {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message: 'addressgroups.controlplane.sluice.io "ag-2" not found in Node n1\'s view',
    reason: 'NotFound',
    code: 404,
    details: { name: 'ag-2', group: 'controlplane.sluice.io', kind: 'addressgroups' },
  });
  const admin = await get(server, `${BASE}/addressgroups?fieldSelector=nodeName=n2`, 'tok-admin');
  t.same(admin.body.items.map((i: any) => i.metadata.name), ['ag-2'], 'an administrator reads any Node\'s view');
});

t.test('errors are Status objects: 401, 403, 400, 404, 405', async (t) => {
  const server = await serve(t, new ControlPlaneStore());
  const status = async (path: string, token: string | undefined, code: number, message: RegExp | string, method = 'GET') => {
    const r = await get(server, path, token, method);
    t.equal(r.status, code, `${method} ${path} → ${code}`);
    t.match(r.body, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code, message });
  };
  const np1 = `${BASE}/networkpolicies?fieldSelector=nodeName=n1`;
  await status(np1, undefined, 401, 'Unauthorized: no valid credentials');
  await status(BASE, 'tok-unknown', 401, /Unauthorized/);
  await status(np1, 'tok-n2', 403, 'user "system:serviceaccount:kube-system:sluice-agent" is the agent of Node n2: it may read only Node n2\'s view, not Node n1\'s');
  await status(`${BASE}/networkpolicies/x?fieldSelector=nodeName=n1`, 'tok-n2', 403, /only Node n2's view, not Node n1's/);
  await status(np1, 'tok-viewer', 403, 'user "viewer" may not read Node n1\'s view: it is no Node\'s agent and not allowed to read every view');
  await status(`${BASE}/networkpolicies`, 'tok-n1', 400, 'fieldSelector nodeName=<node> is required: every Node has its own view');
  await status(`${BASE}/networkpolicies?fieldSelector=spec.nodeName=n1`, 'tok-n1', 400, 'fieldSelector field "spec.nodeName" is not supported: only nodeName=<node>');
  await status(`${BASE}/networkpolicies?fieldSelector=nodeName!=n1`, 'tok-n1', 400, /nodeName!= is not supported/);
  await status(`${BASE}/networkpolicies?fieldSelector=nodeName=n1,nodeName=n2`, 'tok-admin', 400, 'fieldSelector names two Nodes, "n1" and "n2"');
  await status(`${np1}&labelSelector=a=b`, 'tok-n1', 400, /labelSelector is not supported/);
  await status(`${np1}&watch=1&resourceVersion=abc`, 'tok-n1', 400, /resourceVersion "abc" is not a valid resource version/);
  await status(`${np1}&watch=1&timeoutSeconds=-1`, 'tok-n1', 400, /timeoutSeconds "-1"/);
  await status(`${BASE}/pods?fieldSelector=nodeName=n1`, 'tok-n1', 404, /could not find the requested resource/);
  await status('/apis/other.io/v1', 'tok-n1', 404, /could not find/);
  await status('/api/v1', 'tok-n1', 404, /could not find/);
  await status(np1, 'tok-n1', 405, /POST is not allowed/, 'POST');
});

t.test('watch: events from a listed version, resume, other Nodes filtered, patches', async (t) => {
  const store = new ControlPlaneStore({ initialResourceVersion: 0 });
  const server = await serve(t, store);
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  const rv = (await get(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1`, 'tok-n1')).body.metadata.resourceVersion;
  t.equal(rv, '1');
  const w = openWatch(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1&watch=1&resourceVersion=${rv}`);
  await until(() => w.state.status === 200, 'the watch opened');
  store.set('n2', 'AddressGroup', 'ag-9', ag('ag-9', []));
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]), agPatch('ag-1', [pod('x/b', '10.0.0.2')]));
  store.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', []));
  await until(() => w.events.length === 2, '2 events');
  t.same(w.log(), ['MODIFIED ag-1@3', 'ADDED ag-2@4'], 'n2\'s change is not in n1\'s stream');
  t.same(w.events[0]!.object, { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroupPatch', metadata: { name: 'ag-1', resourceVersion: '3', annotations: vv(0, 0, 3) }, upserted: [pod('x/b', '10.0.0.2')], removed: [] });
  w.close();
  await until(() => server.api.openWatches() === 0, 'the server saw the client go');
  store.set('n1', 'AddressGroup', 'ag-2', undefined);
  const resumed = openWatch(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1&watch=true&resourceVersion=4`);
  await until(() => resumed.events.length === 1, 'the missed event');
  t.same(resumed.log(), ['DELETED ag-2@5']);
  const fresh = openWatch(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1&watch=1`);
  await until(() => fresh.events.length === 1, 'the initial state');
  t.same(fresh.log(), ['ADDED ag-1@3'], 'no version: the current objects as ADDED');
  fresh.close();
  resumed.close();
});

t.test('bookmarks on the injected clock, timeoutSeconds, and watches ended by the server\'s close', async (t) => {
  const clock = new ManualClock();
  const store = new ControlPlaneStore({ initialResourceVersion: 0 });
  const server = await serve(t, store, { clock, bookmarkIntervalMs: 1000 });
  const w = openWatch(server, `${BASE}/networkpolicies?fieldSelector=nodeName=n1&watch=1&resourceVersion=0&allowWatchBookmarks=true`);
  const plain = openWatch(server, `${BASE}/networkpolicies?fieldSelector=nodeName=n1&watch=1&resourceVersion=0&timeoutSeconds=5`);
  await until(() => server.api.openWatches() === 2, 'two watches');
  store.set('n2', 'NetworkPolicy', 'NetworkPolicy/x/p', np('NetworkPolicy/x/p'));
  await clock.advance(1000);
  await until(() => w.events.length === 1, 'a bookmark');
  t.same(w.events[0], { type: 'BOOKMARK', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: '', resourceVersion: '1' } } }, 'the current version: nothing of n1 before it is unsent');
  await clock.advance(4000);
  await until(() => plain.state.ended, 'the watch without bookmarks timed out');
  t.same(plain.events, [], 'and never had a bookmark');
  t.equal(w.events.filter((e) => e.type === 'BOOKMARK').length, 5);
  t.notOk(w.state.ended);
  await server.close();
  await until(() => w.state.ended, 'the watch ended cleanly on close');
});

t.test('a watch from a version too old gets an ERROR event with a 410 Expired Status', async (t) => {
  const store = new ControlPlaneStore({ initialResourceVersion: 0, eventsPerNode: 2 });
  const server = await serve(t, store);
  for (let i = 1; i <= 4; i++) store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', `10.0.0.${i}`)]));
  const w = openWatch(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1&watch=1&resourceVersion=1`);
  await until(() => w.state.ended, 'the stream ends');
  t.equal(w.state.status, 200);
  t.same(w.events, [{ type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message: 'too old resource version: 1 (2)', reason: 'Expired', code: 410 } }]);
  const future = openWatch(server, `${BASE}/addressgroups?fieldSelector=nodeName=n1&watch=1&resourceVersion=99`);
  await until(() => future.state.ended, 'the stream ends');
  t.match(future.events[0], { type: 'ERROR', object: { code: 410, reason: 'Expired', message: /newer than this store's 4/ } });
  await until(() => server.api.openWatches() === 0, 'the server ends the expired watches');
  t.equal(server.api.openWatches(), 0);
});

/** A consumer of the watcher: what it was told, in order, and the state it keeps. */
function consumer() {
  const calls: string[] = [];
  const states: string[] = [];
  const view = new Map<string, ControlPlaneObject>();
  const patches: ControlPlaneEvent[] = [];
  return {
    calls,
    states,
    view,
    patches,
    onSync: (kind: ControlPlaneKind, items: ControlPlaneObject[]) => {
      calls.push(`sync ${kind} ${items.map((i) => i.metadata.name).join(',')}`);
      for (const k of [...view.keys()]) if (k.startsWith(`${kind}/`)) view.delete(k);
      for (const i of items) view.set(`${kind}/${i.metadata.name}`, i);
    },
    onEvent: (kind: ControlPlaneKind, e: ControlPlaneEvent) => {
      calls.push(`${e.type} ${kind} ${e.object.metadata.name}`);
      if (e.type === 'DELETED') view.delete(`${kind}/${e.object.metadata.name}`);
      else if (e.object.kind === 'AddressGroupPatch') patches.push(e);
      else view.set(`${kind}/${e.object.metadata.name}`, e.object as ControlPlaneObject);
    },
    onState: (s: ControlPlaneConnection, reason: string) => states.push(`${s}: ${reason}`),
  };
}

t.test('the agent\'s watcher: list, watch, patches; across a server restart it keeps its state and resumes', async (t) => {
  const store = new ControlPlaneStore({ initialResourceVersion: 0, eventsPerNode: 3 });
  const p = np('NetworkPolicy/x/allow');
  store.set('n1', 'NetworkPolicy', p.sourceKey, p);
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  let server = await serve(t, store);
  const port = server.port;
  const c = consumer();
  const watcher = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: () => 'tok-n1', ...c });
  t.teardown(() => watcher.stop());
  watcher.start();
  await until(() => c.states.length === 1, 'connected');
  t.same(c.states, ['connected: listing and watching networkpolicies, appliedtogroups, addressgroups']);
  t.same([...c.calls].sort(), ['sync AddressGroup ag-1', 'sync AppliedToGroup ', 'sync NetworkPolicy networkpolicy.x.allow']);
  c.calls.length = 0;
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]), agPatch('ag-1', [pod('x/b', '10.0.0.2')]));
  store.set('n2', 'AddressGroup', 'ag-2', ag('ag-2', []));
  await until(() => c.calls.length === 1, 'the patch');
  t.same(c.calls, ['MODIFIED AddressGroup ag-1']);
  t.same(c.patches.map((e) => (e.object as any).upserted.map((m: GroupMember) => m.ref)), [['x/b']]);
  t.equal(watcher.resourceVersions().AddressGroup, '3');

  // The controller goes away: the consumer hears it, keeps its view, and nothing else.
  await server.close();
  await until(() => c.states.length === 2, 'disconnected');
  t.match(c.states[1], /^disconnected: /);
  t.same(c.calls, ['MODIFIED AddressGroup ag-1'], 'no sync, no event: the state is kept');
  t.same([...c.view.keys()].sort(), ['AddressGroup/ag-1', 'NetworkPolicy/networkpolicy.x.allow']);
  // It comes back on the same port with one change it missed: the watcher resumes, no relist.
  store.set('n1', 'NetworkPolicy', p.sourceKey, undefined);
  server = await serve(t, store, { port });
  await until(() => c.calls.length === 2, 'the missed change');
  t.same(c.calls, ['MODIFIED AddressGroup ag-1', 'DELETED NetworkPolicy networkpolicy.x.allow']);
  await until(() => c.states.length === 3, 'connected again');
  t.match(c.states[2], /^connected: /);

  // Down again while more happens than n1's log keeps: back up, the watch is Gone and it relists.
  await server.close();
  await until(() => c.states.length === 4, 'disconnected again');
  for (let i = 3; i <= 7; i++) store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', `10.0.0.${i}`)]));
  store.set('n1', 'AddressGroup', 'ag-3', ag('ag-3', []));
  c.calls.length = 0;
  server = await serve(t, store, { port });
  await until(() => c.calls.includes('sync AddressGroup ag-1,ag-3'), 'the relist after 410');
  t.same(c.calls, ['sync AddressGroup ag-1,ag-3'], 'only the kind whose version expired lists again');
  t.same([...(c.view.get('AddressGroup/ag-1') as ControlPlaneAddressGroup).members][0]!.ips, ['10.0.0.7']);
  await until(() => c.states.length === 5, 'connected');
  await watcher.stop();
  // The server learns of the closed connections when their sockets close, a moment later.
  await until(() => server.api.openWatches() === 0, 'the server sees the watches closed');
  t.equal(server.api.openWatches(), 0, 'stop closes its watches');
});

t.test('another replica whose versions happen to cover the old one\'s: its watch is not resumed from them, the watcher lists again', async (t) => {
  // Two stores numbering from close starting points: the standby's range covers the leader's version.
  const leader = new ControlPlaneStore({ initialResourceVersion: 1000 });
  leader.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  const standby = new ControlPlaneStore({ initialResourceVersion: 990 });
  for (let i = 0; i < 20; i++) standby.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', [pod('x/a', `10.0.0.${i + 1}`)]));
  let server = await serve(t, leader);
  const port = server.port;
  const c = consumer();
  const stores: string[] = [];
  const watcher = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: 'tok-n1', kinds: ['AddressGroup'], ...c, onStoreChange: (s) => stores.push(s) });
  t.teardown(() => watcher.stop());
  watcher.start();
  await until(() => c.states.length === 1, 'connected');
  t.equal(watcher.resourceVersions().AddressGroup, '1001', 'the leader\'s version, which the standby also issued');
  await server.close();
  c.calls.length = 0;
  server = await serve(t, standby, { port });
  await until(() => c.calls.length === 1, 'a relist');
  t.same(c.calls, ['sync AddressGroup ag-2'], 'listed from the standby, not resumed from 1001 in its history');
  t.same(stores, [standby.id], 'the consumer heard of the store change before the list');
  t.not(leader.id, standby.id);
});

t.test('a restarted controller (a new store) makes the watcher list again', async (t) => {
  const old = new ControlPlaneStore({ initialResourceVersion: 1000 });
  old.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  let server = await serve(t, old);
  const port = server.port;
  const c = consumer();
  const watcher = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: 'tok-n1', kinds: ['AddressGroup'], ...c });
  t.teardown(() => watcher.stop());
  watcher.start();
  await until(() => c.states.length === 1, 'connected');
  await server.close();
  // The new store's versions start above the old one's (the default is the wall clock).
  const fresh = new ControlPlaneStore({ initialResourceVersion: 5000 });
  fresh.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', []));
  c.calls.length = 0;
  server = await serve(t, fresh, { port });
  await until(() => c.calls.length === 1, 'a relist');
  t.same(c.calls, ['sync AddressGroup ag-2'], 'the consumer diffs the whole set: ag-1 went, ag-2 came');
});

t.test('a list handed to the consumer is not kept by the watcher while it watches', async (t) => {
  // gc() for this test only: the flag takes effect for contexts made after it is set.
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const store = new ControlPlaneStore({ initialResourceVersion: 0 });
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', Array.from({ length: 200 }, (_, i) => pod(`x/p${i}`, `10.0.${i >> 8}.${i & 255}`))));
  const server = await serve(t, store);
  let listed: WeakRef<object> | undefined;
  let events = 0;
  const watcher = new ControlPlaneWatcher({
    server: server.url, nodeName: 'n1', token: 'tok-n1', kinds: ['AddressGroup'],
    // As NodePolicyState does, the consumer keeps what it needs (here nothing), not the list.
    onSync: (_kind, items) => {
      listed = new WeakRef(items);
    },
    onEvent: () => events++,
    onState: () => {},
  });
  t.teardown(() => watcher.stop());
  watcher.start();
  await until(() => listed !== undefined && server.api.openWatches() === 1, 'listed and watching');
  let collected = false;
  for (let i = 0; i < 20 && !collected; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 10));
    collected = listed!.deref() === undefined;
  }
  t.ok(collected, 'the list is garbage once handed over, while the watch runs');
  store.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', []));
  await until(() => events === 1, 'the watch still delivers');
});

t.test('the watcher retries with exponential backoff from 100 ms to 5 s, and reports why', async (t) => {
  // A port nobody listens on.
  const probe = http.createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const clock = new ManualClock();
  const delays: number[] = [];
  const recording: Clock = {
    now: () => clock.now(),
    setTimeout: (fn, ms) => {
      if (ms < 10_000) delays.push(ms);
      return clock.setTimeout(fn, ms);
    },
    clearTimeout: (h: TimerHandle | undefined) => clock.clearTimeout(h),
  };
  const c = consumer();
  const watcher = new ControlPlaneWatcher({ server: `http://127.0.0.1:${port}`, nodeName: 'n1', kinds: ['NetworkPolicy'], clock: recording, ...c });
  watcher.start();
  for (let i = 1; i <= 8; i++) {
    await until(() => delays.length === i, `retry ${i}`);
    await clock.advance(delays[i - 1]!);
  }
  t.same(delays.slice(0, 8), [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
  t.equal(c.states.length, 1, 'disconnected is reported once, not per retry');
  t.match(c.states[0], /^disconnected: networkpolicies: 127\.0\.0\.1:\d+: connect ECONNREFUSED/);
  t.same(c.calls, []);
  await watcher.stop();
  t.throws(() => new ControlPlaneWatcher({ server: 'ftp://x', nodeName: 'n1', ...c }), /neither http nor https/);
  t.throws(() => new ControlPlaneWatcher({ server: 'http://x', nodeName: '', ...c }), /nodeName is empty/);
});

t.test('an agent answered 403 stays disconnected with the server\'s reason', async (t) => {
  const server = await serve(t, new ControlPlaneStore());
  const c = consumer();
  const watcher = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: 'tok-n2', kinds: ['AddressGroup'], ...c });
  watcher.start();
  await until(() => c.states.length === 1, 'a state');
  t.same(c.states, ['disconnected: addressgroups: HTTP 403: user "system:serviceaccount:kube-system:sluice-agent" is the agent of Node n2: it may read only Node n2\'s view, not Node n1\'s']);
  await watcher.stop();
});

t.test('HTTPS: the watcher trusts the given CA and no other; an authenticator failing answers 503', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'ctl-api-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pki = ensureLabPki(dir);
  const store = new ControlPlaneStore();
  store.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  const server = await startControlPlaneApiServer({ store, authenticate, readAll: () => false, tls: { key: pki.key, cert: pki.cert } });
  t.teardown(() => server.close());
  t.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
  const c = consumer();
  const watcher = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: 'tok-n1', ca: pki.caCert, kinds: ['AddressGroup'], ...c });
  watcher.start();
  await until(() => c.states.length === 1, 'connected');
  t.same(c.calls, ['sync AddressGroup ag-1']);
  await watcher.stop();
  const untrusting = consumer();
  const other = new ControlPlaneWatcher({ server: server.url, nodeName: 'n1', token: 'tok-n1', kinds: ['AddressGroup'], ...untrusting });
  other.start();
  await until(() => untrusting.states.length === 1, 'a state');
  t.match(untrusting.states[0], /^disconnected: addressgroups: 127\.0\.0\.1:\d+: .*certificate/);
  await other.stop();

  const broken = await startControlPlaneApiServer({ store, authenticate: () => Promise.reject(new Error('TokenReview: connection refused')), readAll: () => true });
  t.teardown(() => broken.close());
  const r = await get(broken, `${BASE}/addressgroups?fieldSelector=nodeName=n1`, 'tok-n1');
  t.equal(r.status, 503);
  t.equal(r.body.message, 'authentication is unavailable: TokenReview: connection refused');
});

t.test('GET /realization: a new Pod\'s question, answered by the controller; askController reads it', async (t) => {
  const store = new ControlPlaneStore({ initialResourceVersion: 0 });
  const answer = { node: 'n1', nodes: [{ name: 'n1', podIps: [], versions: { NetworkPolicy: '0', AppliedToGroup: '1', AddressGroup: '0' } }, { name: 'n2', address: '10.0.0.2', podIps: ['10.2.0.5'], versions: { NetworkPolicy: '2', AppliedToGroup: '0', AddressGroup: '3' } }] };
  let serving = true;
  const server = await serve(t, store, {
    serving: () => (serving ? { ready: true } : { ready: false, reason: 'a standby replica' }),
    realization: async (q) => (q.name === 'known' ? answer : undefined),
  });
  t.match(await get(server, '/realization?pod=x/known&ips=10.1.0.5&waitMs=0'), { status: 401 }, 'authenticated');
  t.match(await get(server, '/realization?pod=x&ips=10.1.0.5', 'tok-n1'), { status: 400, body: { message: /pod "x": use <namespace>\/<name>/ } }, 'a malformed question names what is wrong');
  t.match(await get(server, '/realization?pod=x/known&ips=10.1.0.5', 'tok-n1'), { status: 200, body: { realized: true, ...answer } });
  t.match(await get(server, '/realization?pod=x/other&ips=10.1.0.5&waitMs=10', 'tok-n1'), { status: 200, body: { realized: false } });
  const access = { server: server.url, token: 'tok-n1' };
  t.same(await askController(access, { namespace: 'x', name: 'known', ips: ['10.1.0.5'] }, 10), answer, 'askController: the answer');
  t.equal(await askController(access, { namespace: 'x', name: 'other', ips: ['10.1.0.5'] }, 10), undefined, 'askController: not held within the wait');
  serving = false;
  t.match(await get(server, '/realization?pod=x/known&ips=10.1.0.5', 'tok-n1'), { status: 503, body: { message: /a standby replica/ } }, 'only the leader answers');
  await t.rejects(askController(access, { namespace: 'x', name: 'known', ips: ['10.1.0.5'] }, 10), new RegExp(`controller ${server.url}: HTTP 503: .*a standby replica`));
  await t.rejects(askController({ server: 'http://127.0.0.1:1' }, { namespace: 'x', name: 'known', ips: ['10.1.0.5'] }, 10), /controller http:\/\/127\.0\.0\.1:1: 127\.0\.0\.1:1: connect ECONNREFUSED/, 'an unreachable controller is named');
});

t.test('traceflows: created by a user, taken by the source Node\'s agent on its own connection, answered with its report', async (t) => {
  const broker = new TraceflowBroker();
  const server = await startControlPlaneApiServer({
    store: new ControlPlaneStore(), authenticate, readAll: () => false,
    traceflows: {
      broker, waitMs: 1500,
      sourceNode: (from) => {
        if (from === 'x/a') return 'n1';
        throw Object.assign(new Error(`from "${from}": no such Pod (ns/name)`), { name: 'TraceError' });
      },
      mayTrace: (id) => id.user === 'admin',
    },
  });
  t.teardown(() => server.close());
  const create = (token: string, spec: unknown) => new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = http.request(`${server.url}${BASE}/traceflows`, { method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c)).on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(JSON.stringify({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'Traceflow', metadata: { name: 'tf-1' }, spec }));
  });
  const n1 = { server: server.url, token: 'tok-n1' };
  const n2 = { server: server.url, token: 'tok-n2' };

  // The agent of n1 waits for work; n2's gets none of n1's traces.
  const other = takeTraceTask(n2, 300);
  const taking = takeTraceTask(n1, 5000);
  const asked = create('tok-admin', { from: 'x/a', to: 'x/b', port: 80 });
  const task = await taking;
  t.match(task, { from: 'x/a', to: 'x/b', protocol: 'TCP', port: 80 }, 'the source Node\'s agent takes the trace');
  t.equal(await other, undefined, 'another Node\'s agent does not');
  await t.rejects(postTraceResult(n2, task!.id, { report: {} }), /HTTP 404: no trace ".*" waits for Node n2's answer/, 'nor can it answer it');
  await postTraceResult(n1, task!.id, { report: { verdict: 'drop', legs: [{ node: 'n1', verdict: 'allow' }, { node: 'n2', verdict: 'drop' }] } });
  const done = await asked;
  t.equal(done.status, 201, 'created');
  t.match(done.body, { kind: 'Traceflow', metadata: { name: 'tf-1' }, spec: { from: 'x/a', to: 'x/b', protocol: 'TCP', port: 80 }, status: { node: 'n1', verdict: 'drop' } }, 'with the report as its status');

  // The agent's refusal comes back with its code; an agent that never takes it: 504; refusals before that.
  const refusedTask = takeTraceTask(n1, 5000);
  const refused = create('tok-admin', { from: 'x/a', to: 'nowhere', port: 80 });
  await postTraceResult(n1, (await refusedTask)!.id, { error: 'destination "nowhere": use ns/pod, service:ns/name or ip:ADDRESS', code: 409 });
  t.match(await refused, { status: 409, body: { kind: 'Status', message: /destination "nowhere"/ } }, 'the agent\'s refusal, with its code');
  t.match(await create('tok-admin', { from: 'x/a', to: 'x/b', port: 80 }), { status: 504, body: { reason: 'Timeout', message: /Node n1's agent did not take and finish the trace within 2 s \(only an agent with policySource: controller takes traces/ } });
  t.match(await create('tok-admin', { from: 'x/zz', to: 'x/b', port: 80 }), { status: 404, body: { message: 'from "x/zz": no such Pod (ns/name)' } });
  t.match(await create('tok-admin', { from: 'x/a', to: 'x/b', port: 0 }), { status: 400, body: { message: /spec.port 0/ } });
  t.match(await create('tok-admin', { to: 'x/b' }), { status: 400, body: { message: /spec.from/ } });
  t.match(await create('tok-viewer', { from: 'x/a', to: 'x/b', port: 80 }), { status: 403, body: { message: 'user "viewer" may not create traceflows.controlplane.sluice.io' } });
  t.match(await create('tok-n1', { from: 'x/a', to: 'x/b', port: 80 }), { status: 403, body: { message: /agents do not ask for traces/ } });
  await t.rejects(takeTraceTask({ server: server.url, token: 'tok-admin' }, 0), /HTTP 403: user "admin" is no Node's agent/, 'only agents take traces');
  t.equal((await get(server, `${BASE}/traceflows`, 'tok-admin')).status, 405, 'traceflows are only created');
});
