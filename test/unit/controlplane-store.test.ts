// daemon/controller/store.ts: per-Node views, their events and resourceVersions, batches, the
// bounded log and 410 Gone, wire names, and objects shared by many Nodes never touched.
import t from 'tap';
import { ControlPlaneStore, controlPlaneName, eventJson, GoneError, jsonEqual } from '../../daemon/controller/store.js';
import { KeyedList } from '../../daemon/policy/sorted-list.js';
import { memberKey } from '../../daemon/controlplane/types.js';
import {
  CONTROLPLANE_API_VERSION,
  type ControlPlaneAddressGroup,
  type ControlPlaneAddressGroupPatch,
  type ControlPlaneAppliedToGroup,
  type ControlPlaneEvent,
  type ControlPlaneNetworkPolicy,
  VIEW_VERSIONS_ANNOTATION,
} from '../../daemon/controlplane/types.js';
import type { GroupMember } from '../../daemon/policy/types.js';

const pod = (ref: string, ip: string, nodeName = 'n1'): GroupMember => ({ kind: 'pod', ref, nodeName, ips: [ip], ports: [] });
const ag = (id: string, members: GroupMember[]): ControlPlaneAddressGroup => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: id }, members, ipBlocks: [] });
const atg = (id: string, members: GroupMember[]): ControlPlaneAppliedToGroup => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AppliedToGroup', metadata: { name: id }, members });
const np = (key: string): ControlPlaneNetworkPolicy => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: key }, sourceKey: key, rules: [], isolations: [] });
const patchOf = (id: string, upserted: GroupMember[], removed: string[]): ControlPlaneAddressGroupPatch => ({ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroupPatch', metadata: { name: id }, upserted, removed });

/** Freezes an object and everything in it: a mutation throws in strict mode. */
function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

/** The view-versions annotation of a Node's view at those versions. */
const vv = (np: number, atg: number, ag: number) => ({ [VIEW_VERSIONS_ANNOTATION]: `NetworkPolicy=${np},AppliedToGroup=${atg},AddressGroup=${ag}` });

/** Records a watch's events as "TYPE name@rv". */
function recorder() {
  const events: ControlPlaneEvent[] = [];
  const log = () => events.map((e) => `${e.type} ${e.object.metadata.name}@${e.object.metadata.resourceVersion}`);
  return { events, log, on: (e: ControlPlaneEvent) => events.push(e) };
}

t.test('events per Node: ADDED, MODIFIED, DELETED; other Nodes see nothing', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 100 });
  t.equal(s.resourceVersion(), '100');
  const a = recorder();
  const b = recorder();
  s.watch('n1', 'AddressGroup', '100', a.on);
  s.watch('n2', 'AddressGroup', '100', b.on);
  const g1 = ag('ag-1', [pod('x/a', '10.0.0.1')]);
  s.set('n1', 'AddressGroup', 'ag-1', g1);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.2')]));
  s.set('n1', 'AddressGroup', 'ag-1', undefined);
  s.set('n1', 'AddressGroup', 'ag-1', undefined);
  t.same(a.log(), ['ADDED ag-1@101', 'MODIFIED ag-1@102', 'DELETED ag-1@103'], 'one version per event, deleting the absent is nothing');
  t.same(b.log(), [], 'n2 sees none of n1');
  t.same(a.events[1]!.object, { ...ag('ag-1', [pod('x/a', '10.0.0.2')]), metadata: { name: 'ag-1', resourceVersion: '102', annotations: vv(0, 0, 102) } }, 'MODIFIED carries the whole object with its version');
  t.same(a.events[2]!.object, { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: 'ag-1', resourceVersion: '103', annotations: vv(0, 0, 103) } }, 'DELETED carries the name and the view\'s versions only');
  const other = recorder();
  s.watch('n1', 'NetworkPolicy', '100', other.on);
  t.same(other.log(), [], 'a watch of another kind hears none of them');
});

t.test('view versions: every event of one batch asks for the view as the batch left it, across kinds', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const streams = { np: recorder(), atg: recorder(), ag: recorder() };
  s.watch('n1', 'NetworkPolicy', '0', streams.np.on);
  s.watch('n1', 'AppliedToGroup', '0', streams.atg.on);
  s.watch('n1', 'AddressGroup', '0', streams.ag.on);
  t.same(s.lastChanges('n1'), { NetworkPolicy: '0', AppliedToGroup: '0', AddressGroup: '0' }, 'no change yet');
  // One controller change: a policy and the groups it names.
  s.batch(() => {
    s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
    s.set('n1', 'AppliedToGroup', 'atg-1', atg('atg-1', [pod('y/b', '10.0.0.2')]));
    s.set('n1', 'NetworkPolicy', 'NetworkPolicy/y/allow', np('networkpolicy.y.allow'));
  });
  const all = [...streams.np.events, ...streams.atg.events, ...streams.ag.events].map((e) => e.object.metadata.annotations?.[VIEW_VERSIONS_ANNOTATION]);
  t.same(all, ['NetworkPolicy=3,AppliedToGroup=2,AddressGroup=1', 'NetworkPolicy=3,AppliedToGroup=2,AddressGroup=1', 'NetworkPolicy=3,AppliedToGroup=2,AddressGroup=1'], 'the three streams\' events all ask for the whole change');
  t.same(s.lastChanges('n1'), { NetworkPolicy: '3', AppliedToGroup: '2', AddressGroup: '1' }, 'lastChanges: per kind, the last change of the view');
  t.same(s.lastChanges('n2'), { NetworkPolicy: '0', AppliedToGroup: '0', AddressGroup: '0' }, 'a Node without a view');
  s.set('n2', 'AddressGroup', 'ag-1', ag('ag-1', []));
  t.same(s.lastChanges('n1').AddressGroup, '1', 'another Node\'s change is not n1\'s');
  t.same(s.list('n1', 'AddressGroup').items[0]!.metadata.annotations, vv(3, 2, 1), 'a list asks for the view as it is now');
  // A resumed watch replays events with the versions their batch had.
  const late = recorder();
  s.watch('n1', 'AddressGroup', '0', late.on);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.9')]));
  const resumed = recorder();
  s.watch('n1', 'AddressGroup', '3', resumed.on);
  t.same(resumed.events.map((e) => e.object.metadata.annotations), [vv(3, 2, 5)], 'replayed from the log with its own batch\'s versions');
});

t.test('no event when the Node already holds the same or an equal object', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const r = recorder();
  s.watch('n1', 'AppliedToGroup', '0', r.on);
  const g = atg('atg-1', [pod('x/a', '10.0.0.1')]);
  s.set('n1', 'AppliedToGroup', 'atg-1', g);
  s.set('n1', 'AppliedToGroup', 'atg-1', g);
  // The same content with its keys in another order and an undefined property: equal as JSON.
  const reordered = { members: [{ ips: ['10.0.0.1'], ports: [], ref: 'x/a', kind: 'pod', nodeName: 'n1', extra: undefined }], metadata: { name: 'atg-1' }, kind: 'AppliedToGroup', apiVersion: CONTROLPLANE_API_VERSION } as unknown as ControlPlaneAppliedToGroup;
  s.set('n1', 'AppliedToGroup', 'atg-1', reordered);
  t.same(r.log(), ['ADDED atg-1@1']);
  t.equal(s.resourceVersion(), '1', 'no version spent either');
  t.ok(jsonEqual({ a: [1, { b: 2 }] }, { a: [1, { b: 2, c: undefined }] }));
  t.notOk(jsonEqual({ a: [1, 2] }, { a: [2, 1] }), 'array order matters');
  t.notOk(jsonEqual({ a: 1 }, { a: 1, b: null }), 'null is a value');
});

t.test('an AddressGroup change with a patch: the event carries the patch, list the whole group', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const r = recorder();
  s.watch('n1', 'AddressGroup', '0', r.on);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]), patchOf('ag-1', [pod('x/a', '10.0.0.1')], []));
  const after = ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]);
  s.set('n1', 'AddressGroup', 'ag-1', after, patchOf('ag-1', [pod('x/b', '10.0.0.2')], []));
  t.same(r.log(), ['ADDED ag-1@1', 'MODIFIED ag-1@2']);
  t.equal(r.events[0]!.object.kind, 'AddressGroup', 'an ADDED group is whole even when a patch is given');
  t.same(r.events[1]!.object, { ...patchOf('ag-1', [pod('x/b', '10.0.0.2')], []), metadata: { name: 'ag-1', resourceVersion: '2', annotations: vv(0, 0, 2) } });
  t.same(s.list('n1', 'AddressGroup').items, [{ ...after, metadata: { name: 'ag-1', resourceVersion: '2', annotations: vv(0, 0, 2) } }]);
  t.throws(() => s.set('n1', 'AppliedToGroup', 'atg-1', atg('atg-1', []), patchOf('atg-1', [], [])), /only AddressGroups take AddressGroupPatch/);
  t.throws(() => s.set('n1', 'AddressGroup', 'ag-2', atg('ag-2', []) as never), /a AppliedToGroup object given as AddressGroup "ag-2"/);
  t.throws(() => s.set('', 'AddressGroup', 'ag-2', undefined), /Node name is empty/);
});

t.test('the log is bounded per Node: older versions, future ones and a restarted store\'s are Gone', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 10, eventsPerNode: 3 });
  for (let i = 1; i <= 5; i++) s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', `10.0.0.${i}`)]));
  t.equal(s.resourceVersion(), '15');
  // Kept: 13, 14, 15; dropped 11, 12: a watch from 12 still has every later event.
  const r = recorder();
  s.watch('n1', 'AddressGroup', '12', r.on);
  t.same(r.log(), ['MODIFIED ag-1@13', 'MODIFIED ag-1@14', 'MODIFIED ag-1@15']);
  t.throws(() => s.watch('n1', 'AddressGroup', '11', () => {}), GoneError);
  t.throws(() => s.watch('n1', 'AddressGroup', '11', () => {}), /too old resource version: 11 \(12\)/);
  t.throws(() => s.watch('n1', 'AddressGroup', '16', () => {}), /newer than this store's 15/);
  t.throws(() => s.watch('n2', 'AddressGroup', '9', () => {}), GoneError, 'before the store began, even on a Node with no view');
  t.throws(() => s.watch('n1', 'AddressGroup', 'x1', () => {}), /not a decimal integer/);
  // Another Node's log is its own: n2 can still resume from the start.
  const r2 = recorder();
  s.watch('n2', 'AddressGroup', '10', r2.on);
  s.set('n2', 'AddressGroup', 'ag-1', ag('ag-1', []));
  t.same(r2.log(), ['ADDED ag-1@16']);
  t.same(r.log().at(-1), 'MODIFIED ag-1@15', 'n1\'s watch hears nothing of n2');
  // Many more events: the log stays resumable over its last 3 and compacts.
  for (let i = 0; i < 20; i++) s.set('n1', 'AddressGroup', `ag-${i % 2}`, ag(`ag-${i % 2}`, [pod('x/a', `10.1.0.${i}`)]));
  const rv = Number(s.resourceVersion());
  const tail = recorder();
  s.watch('n1', 'AddressGroup', String(rv - 3), tail.on);
  t.equal(tail.events.length, 3);
  t.throws(() => s.watch('n1', 'AddressGroup', String(rv - 4), () => {}), GoneError);
  t.equal(s.nodes().find((n) => n.name === 'n1')!.oldestResumable, String(rv - 3));
  // The floor is per kind: the burst of AddressGroups expired no NetworkPolicy watch.
  t.doesNotThrow(() => s.watch('n1', 'NetworkPolicy', '10', () => {}));
});

t.test('a batch: one version per event, watchers told at the end, list after it', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const r = recorder();
  s.watch('n1', 'NetworkPolicy', '0', r.on);
  const p1 = np('NetworkPolicy/x/allow');
  const p2 = np('ClusterNetworkPolicy//deny');
  let seenInside = -1;
  const result = s.batch(() => {
    s.set('n1', 'NetworkPolicy', p1.sourceKey, p1);
    s.set('n1', 'NetworkPolicy', p2.sourceKey, p2);
    s.set('n2', 'NetworkPolicy', p1.sourceKey, p1);
    seenInside = r.events.length;
    return 'done';
  });
  t.equal(result, 'done');
  t.equal(seenInside, 0, 'nothing delivered inside the batch');
  t.same(r.log(), ['ADDED networkpolicy.x.allow@1', 'ADDED clusternetworkpolicy..deny@2']);
  const list = s.list('n1', 'NetworkPolicy');
  t.equal(list.resourceVersion, '3');
  t.same(list.items.map((i) => `${i.metadata.name}@${i.metadata.resourceVersion}`), ['clusternetworkpolicy..deny@2', 'networkpolicy.x.allow@1'], 'sorted by name');
  t.equal(s.get('n2', 'NetworkPolicy', 'networkpolicy.x.allow')?.metadata.resourceVersion, '3');
  t.equal(s.get('n2', 'NetworkPolicy', 'clusternetworkpolicy..deny'), undefined);
  // A batch that throws keeps what it set and still tells the watchers.
  t.throws(() =>
    s.batch(() => {
      s.set('n1', 'NetworkPolicy', p1.sourceKey, undefined);
      throw new Error('boom');
    }),
  );
  t.same(r.log().at(-1), 'DELETED networkpolicy.x.allow@4');
  // A watch opened inside a batch gets the pending events once.
  const late = recorder();
  s.batch(() => {
    s.set('n1', 'NetworkPolicy', p1.sourceKey, p1);
    s.watch('n1', 'NetworkPolicy', '4', late.on);
  });
  t.same(late.log(), ['ADDED networkpolicy.x.allow@5']);
});

t.test('a watch from "" or "0" starts with the current objects as ADDED', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  s.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', []));
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  const r = recorder();
  s.watch('n1', 'AddressGroup', '', r.on);
  s.set('n1', 'AddressGroup', 'ag-1', undefined);
  t.same(r.log(), ['ADDED ag-1@2', 'ADDED ag-2@1', 'DELETED ag-1@3']);
});

t.test('objects shared by many Nodes are never mutated; views hold them by reference', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const g = deepFreeze(ag('ag-1', [pod('x/a', '10.0.0.1')]));
  const p = deepFreeze(patchOf('ag-1', [pod('x/b', '10.0.0.2')], []));
  const g2 = deepFreeze(ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]));
  const r = recorder();
  s.watch('n1', 'AddressGroup', '0', r.on);
  s.batch(() => {
    for (const n of ['n1', 'n2', 'n3']) s.set(n, 'AddressGroup', 'ag-1', g);
  });
  s.batch(() => {
    for (const n of ['n1', 'n2', 'n3']) s.set(n, 'AddressGroup', 'ag-1', g2, p);
  });
  t.same(g.metadata, { name: 'ag-1' }, 'no resourceVersion written into the shared object');
  t.same(p.metadata, { name: 'ag-1' });
  const items = ['n1', 'n2', 'n3'].map((n) => s.list(n, 'AddressGroup').items[0]!);
  t.same(items.map((i) => i.metadata.resourceVersion), ['4', '5', '6']);
  t.not(items[0], g2, 'served objects are copies...');
  t.equal((items[0] as ControlPlaneAddressGroup).members, g2.members, '...sharing the members by reference');
  t.same(r.log(), ['ADDED ag-1@1', 'MODIFIED ag-1@4']);
});

t.test('wire names: NetworkPolicy source keys made URL-safe, group ids as they are', async (t) => {
  t.equal(controlPlaneName('NetworkPolicy', 'NetworkPolicy/default/allow-web.v2'), 'networkpolicy.default.allow-web.v2');
  t.equal(controlPlaneName('NetworkPolicy', 'AntreaClusterNetworkPolicy//deny'), 'antreaclusternetworkpolicy..deny');
  t.equal(controlPlaneName('AddressGroup', 'ag-0f3a'), 'ag-0f3a');
  t.throws(() => controlPlaneName('NetworkPolicy', 'default/allow'), /NetworkPolicy key "default\/allow" is not "<Kind>\/<namespace>\/<name>"/);
  t.throws(() => controlPlaneName('NetworkPolicy', 'NetworkPolicy/a/b/c'), /not "<Kind>/);
  t.throws(() => controlPlaneName('AppliedToGroup', 'ATG/1'), /AppliedToGroup id "ATG\/1" is not a lowercase DNS-style name/);
  t.throws(() => new ControlPlaneStore({ eventsPerNode: 0 }), /eventsPerNode 0/);
  const s = new ControlPlaneStore();
  t.ok(Number(s.resourceVersion()) >= (Date.now() - 60_000) * 1000, 'the default first version is the wall clock in µs (above a restarted store\'s)');
});

t.test('a watcher that throws is closed with its error; the others go on', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  let closedWith: Error | undefined;
  s.watch('n1', 'AddressGroup', '0', () => {
    throw new Error('consumer broke');
  }, (err) => (closedWith = err));
  const r = recorder();
  s.watch('n1', 'AddressGroup', '0', r.on);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  s.set('n1', 'AddressGroup', 'ag-2', ag('ag-2', []));
  t.equal(closedWith?.message, 'consumer broke');
  t.same(r.log(), ['ADDED ag-1@1', 'ADDED ag-2@2']);
  t.equal(s.nodes()[0]!.watchers, 1);
  const w = s.watch('n1', 'AddressGroup', '2', r.on);
  w.stop();
  w.stop();
  t.equal(s.nodes()[0]!.watchers, 1, 'stop is idempotent');
});

t.test('forgetNode closes its watches; views without a log must list again', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  s.set('gone', 'AddressGroup', 'ag-1', ag('ag-1', []));
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  let closed = false;
  s.watch('gone', 'AddressGroup', '1', () => {}, () => (closed = true));
  s.forgetNode('gone');
  t.ok(closed);
  t.same(s.nodes().map((n) => n.name), ['n1']);
  t.same(s.list('gone', 'AddressGroup').items, []);
  t.throws(() => s.watch('gone', 'AddressGroup', '1', () => {}), GoneError, 'its old version is Gone: a DELETED may be lost');
  t.throws(() => s.watch('new', 'AddressGroup', '1', () => {}), GoneError);
  t.doesNotThrow(() => s.watch('n1', 'AddressGroup', '1', () => {}), 'a Node with a view keeps its log');
  t.same(s.nodes().find((n) => n.name === 'n1')?.objects, { NetworkPolicy: 0, AppliedToGroup: 0, AddressGroup: 1 });
});

t.test('deferLog: no log before startLog, yet views, versions and watched views are kept', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 100, deferLog: true });
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.2')]));
  t.same(s.list('n1', 'AddressGroup').items.map((o) => o.metadata.resourceVersion), ['102'], 'the view holds the last state');
  t.throws(() => s.watch('n1', 'AddressGroup', '101', () => {}), GoneError, 'a version from the unlogged changes cannot be resumed (nothing was logged after it)');
  const fromNow = recorder();
  s.watch('n1', 'AddressGroup', '102', fromNow.on);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.3')]));
  t.same(fromNow.log(), ['MODIFIED ag-1@103'], 'a view someone watches is logged and delivered even before startLog');
  s.set('n2', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.3')]));
  s.startLog();
  s.set('n2', 'AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.4')]));
  const n2 = recorder();
  s.watch('n2', 'AddressGroup', '104', n2.on);
  t.same(n2.log(), ['MODIFIED ag-1@105'], 'after startLog, changes are logged for later watches');
});

t.test('a member-changing patch is an event without comparing the group; an empty one is compared', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 100 });
  const a = recorder();
  s.watch('n1', 'AddressGroup', '100', a.on);
  const members = [pod('x/a', '10.0.0.1')];
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', members));
  // The same members with a patch that names a change: the patch is trusted (the computation's).
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', members), patchOf('ag-1', [pod('x/a', '10.0.0.1')], []));
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', members), patchOf('ag-1', [], []));
  t.same(a.log(), ['ADDED ag-1@101', 'MODIFIED ag-1@102'], 'the empty patch of an equal group makes no event');
});

t.test('listJson is list() serialized: each object\'s content once, its metadata per Node', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 100 });
  const shared = ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]);
  s.set('n1', 'AddressGroup', 'ag-1', shared);
  s.set('n2', 'NetworkPolicy', 'NetworkPolicy/x/p', np('NetworkPolicy/x/p'));
  s.set('n2', 'AddressGroup', 'ag-1', shared);
  s.set('n2', 'AddressGroup', 'ag-2', ag('ag-2', []));
  for (const node of ['n1', 'n2', 'n3']) {
    for (const kind of ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'] as const) {
      const json = s.listJson(node, kind);
      const list = s.list(node, kind);
      t.equal(json.resourceVersion, list.resourceVersion);
      const bytes = Buffer.concat(json.items);
      t.equal(json.bytes, bytes.length);
      t.same(JSON.parse(bytes.toString()), list.items, `${node} ${kind}`);
    }
  }
  const parsed = (node: string) => JSON.parse(Buffer.concat(s.listJson(node, 'AddressGroup').items).toString());
  const [a, b] = [parsed('n1')[0], parsed('n2').find((o: { metadata: { name: string } }) => o.metadata.name === 'ag-1')];
  t.equal(s.listJson('n1', 'AddressGroup').items[1], s.listJson('n2', 'AddressGroup').items[1], 'the shared body is the same bytes, not a copy');
  t.not(a.metadata.resourceVersion, b.metadata.resourceVersion, 'the same object at each Node\'s own version');
  t.same(a.members, b.members);
});

t.test('shared objects: one change for every Node holding it; joins and leaves per Node', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const n1 = recorder();
  const n2 = recorder();
  const n3 = recorder();
  s.watch('n1', 'AddressGroup', '0', n1.on);
  s.watch('n2', 'AddressGroup', '0', n2.on);
  s.watch('n3', 'AddressGroup', '0', n3.on);
  t.throws(() => s.hold('n1', 'AddressGroup', 'ag-1', true), /AddressGroup "ag-1" is not shared \(share it first\)/);
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  t.equal(s.resourceVersion(), '0', 'shared with nobody holding it: no event, no version');
  s.batch(() => {
    s.hold('n1', 'AddressGroup', 'ag-1', true);
    s.hold('n2', 'AddressGroup', 'ag-1', true);
    s.hold('n2', 'AddressGroup', 'ag-1', true);
  });
  t.same([n1.log(), n2.log(), n3.log()], [['ADDED ag-1@1'], ['ADDED ag-1@2'], []], 'each Node joining gets the whole object once');
  const after = ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]);
  s.share('AddressGroup', 'ag-1', after, patchOf('ag-1', [pod('x/b', '10.0.0.2')], []));
  t.equal(s.resourceVersion(), '3', 'one version for the change, whatever the Nodes holding it');
  t.same(n1.events[1]!.object, { ...patchOf('ag-1', [pod('x/b', '10.0.0.2')], []), metadata: { name: 'ag-1', resourceVersion: '3', annotations: vv(0, 0, 3) } }, 'the patch, with the Node\'s view versions');
  t.same(n2.log(), ['ADDED ag-1@2', 'MODIFIED ag-1@3']);
  t.same(n3.log(), [], 'a Node not holding it hears nothing');
  t.same([s.lastChanges('n1').AddressGroup, s.lastChanges('n2').AddressGroup, s.lastChanges('n3').AddressGroup], ['3', '3', '0'], 'the holders\' views changed at it');
  t.same(s.list('n2', 'AddressGroup').items, [{ ...after, metadata: { name: 'ag-1', resourceVersion: '3', annotations: vv(0, 0, 3) } }], 'listed whole');
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1'), pod('x/b', '10.0.0.2')]));
  t.equal(s.resourceVersion(), '3', 'equal content: nothing');
  // A join after the change is served at its own version; a leave is a DELETED of that Node only.
  s.hold('n3', 'AddressGroup', 'ag-1', true);
  s.hold('n1', 'AddressGroup', 'ag-1', false);
  s.hold('n1', 'AddressGroup', 'ag-1', false);
  t.same(n3.log(), ['ADDED ag-1@4']);
  t.equal(s.get('n3', 'AddressGroup', 'ag-1')?.metadata.resourceVersion, '4');
  t.equal(s.get('n2', 'AddressGroup', 'ag-1')?.metadata.resourceVersion, '3');
  t.same(n1.log().at(-1), 'DELETED ag-1@5');
  s.share('AddressGroup', 'ag-1', ag('ag-1', []), patchOf('ag-1', [], ['pod:x/a', 'pod:x/b']));
  t.same([n1.log().length, n2.log().at(-1), n3.log().at(-1)], [3, 'MODIFIED ag-1@6', 'MODIFIED ag-1@6'], 'the Node that left hears no more of it');
  // Gone for good: a DELETED to every Node still holding it.
  s.share('AddressGroup', 'ag-1', undefined);
  t.same([n2.log().at(-1), n3.log().at(-1)], ['DELETED ag-1@7', 'DELETED ag-1@8']);
  t.same(s.list('n2', 'AddressGroup').items, []);
  t.throws(() => s.hold('n2', 'AddressGroup', 'ag-1', true), /not shared/, 'and it can no longer be held');
  t.throws(() => s.share('AddressGroup', 'ag-1', atg('ag-1', []) as never), /share: a AppliedToGroup object given as AddressGroup "ag-1"/);
});

t.test('shared changes reach watches whether the holders or the watches are fewer', async (t) => {
  for (const holders of [2, 40]) {
    const s = new ControlPlaneStore({ initialResourceVersion: 0 });
    const nodes = Array.from({ length: 40 }, (_, i) => `n${i}`);
    const streams = new Map(nodes.slice(0, 10).map((n) => [n, recorder()]));
    for (const [n, r] of streams) s.watch(n, 'NetworkPolicy', '0', r.on);
    // A watch of another kind on a holder hears nothing of the policies.
    const other = recorder();
    s.watch('n0', 'AddressGroup', '0', other.on);
    s.share('NetworkPolicy', 'NetworkPolicy/x/p', np('NetworkPolicy/x/p'));
    for (const n of nodes.slice(0, holders)) s.hold(n, 'NetworkPolicy', 'NetworkPolicy/x/p', true);
    const rv = Number(s.resourceVersion());
    s.share('NetworkPolicy', 'NetworkPolicy/x/p', { ...np('NetworkPolicy/x/p'), isolations: [] , rules: [{ id: 'r' } as never] });
    const got = [...streams].filter(([, r]) => r.log().includes(`MODIFIED networkpolicy.x.p@${rv + 1}`)).map(([n]) => n);
    t.same(got, nodes.slice(0, Math.min(holders, 10)), `${holders} holders, 10 watches: each watched holder once`);
    t.same(other.log(), []);
  }
});

t.test('a batch delivers its own and shared events in version order', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  s.share('AddressGroup', 'ag-s', ag('ag-s', []));
  s.hold('n1', 'AddressGroup', 'ag-s', true);
  const r = recorder();
  s.watch('n1', 'AddressGroup', '1', r.on);
  s.batch(() => {
    s.set('n1', 'AddressGroup', 'ag-own', ag('ag-own', []));
    s.share('AddressGroup', 'ag-s', ag('ag-s', [pod('x/a', '10.0.0.1')]));
    s.set('n1', 'AddressGroup', 'ag-own', ag('ag-own', [pod('x/b', '10.0.0.2')]));
    // Joins after the change in the same batch: the whole object, not the change again.
    s.share('AddressGroup', 'ag-t', ag('ag-t', []));
    s.hold('n1', 'AddressGroup', 'ag-t', true);
  });
  t.same(r.log(), ['ADDED ag-own@2', 'MODIFIED ag-s@3', 'MODIFIED ag-own@4', 'ADDED ag-t@5']);
  t.same(r.events.map((e) => e.object.metadata.annotations), [vv(0, 0, 5), vv(0, 0, 5), vv(0, 0, 5), vv(0, 0, 5)], 'every event asks for the view as the batch left it');
  const n2 = recorder();
  s.batch(() => {
    s.hold('n2', 'AddressGroup', 'ag-s', true);
    s.share('AddressGroup', 'ag-s', ag('ag-s', []));
    s.watch('n2', 'AddressGroup', '5', n2.on);
  });
  t.same(n2.log(), ['ADDED ag-s@6', 'MODIFIED ag-s@7'], 'a Node that joined before the change in the batch gets both');
  const n3 = recorder();
  s.watch('n3', 'AddressGroup', '7', n3.on);
  s.batch(() => {
    s.share('AddressGroup', 'ag-s', ag('ag-s', [pod('x/c', '10.0.0.3')]));
    s.hold('n3', 'AddressGroup', 'ag-s', true);
  });
  t.same(n3.log(), ['ADDED ag-s@9'], 'one that joined after it gets the whole object only');
  t.same(n2.log().at(-1), 'MODIFIED ag-s@8');
});

t.test('resuming: shared events for the objects held since before them, merged with the Node\'s own', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  s.share('AddressGroup', 'ag-1', ag('ag-1', []));
  s.share('AddressGroup', 'ag-2', ag('ag-2', []));
  s.hold('n1', 'AddressGroup', 'ag-1', true); // 1
  s.hold('n2', 'AddressGroup', 'ag-1', true); // 2
  s.hold('n1', 'AddressGroup', 'ag-2', true); // 3
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')])); // 4
  s.set('n1', 'AddressGroup', 'ag-own', ag('ag-own', [])); // 5
  s.share('AddressGroup', 'ag-2', ag('ag-2', [pod('x/b', '10.0.0.2')])); // 6
  s.hold('n2', 'AddressGroup', 'ag-1', false); // 7
  s.hold('n3', 'AddressGroup', 'ag-1', true); // 8
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.9')])); // 9
  s.hold('n1', 'AddressGroup', 'ag-2', false); // 10
  s.hold('n1', 'AddressGroup', 'ag-2', true); // 11
  const from = (node: string, rv: number) => {
    const r = recorder();
    s.watch(node, 'AddressGroup', String(rv), r.on);
    return r;
  };
  t.same(from('n1', 3).log(), ['MODIFIED ag-1@4', 'ADDED ag-own@5', 'MODIFIED ag-1@9', 'DELETED ag-2@10', 'ADDED ag-2@11'],
    'n1: its own events and ag-1\'s changes in order; ag-2\'s change is skipped, the later re-join carries it whole');
  t.same(from('n2', 2).log(), ['DELETED ag-1@7'], 'n2 left: its DELETED, not the changes before it');
  t.same(from('n3', 5).log(), ['ADDED ag-1@8', 'MODIFIED ag-1@9']);
  const resumed = from('n1', 8);
  t.same(resumed.events.map((e) => e.object.metadata.annotations), [vv(0, 0, 11), vv(0, 0, 10), vv(0, 0, 11)],
    'a resumed shared event asks for the view as it is now; the Node\'s own events keep their batch\'s versions');
});

t.test('the shared log is bounded: a watch from before its oldest event is Gone', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0, sharedEvents: 2 });
  s.share('AddressGroup', 'ag-1', ag('ag-1', []));
  s.hold('n1', 'AddressGroup', 'ag-1', true);
  for (let i = 1; i <= 4; i++) s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', `10.0.0.${i}`)]));
  t.equal(s.resourceVersion(), '5');
  t.same((() => {
    const r = recorder();
    s.watch('n1', 'AddressGroup', '3', r.on);
    return r.log();
  })(), ['MODIFIED ag-1@4', 'MODIFIED ag-1@5']);
  t.throws(() => s.watch('n1', 'AddressGroup', '2', () => {}), /too old resource version: 2 \(3\)/);
  t.doesNotThrow(() => s.watch('n1', 'NetworkPolicy', '1', () => {}), 'other kinds keep their floor');
  t.equal(s.nodes()[0]!.oldestResumable, '3');
  t.throws(() => new ControlPlaneStore({ sharedEvents: 0 }), /sharedEvents 0/);
});

t.test('a Node\'s own object and a shared one of the same name replace each other', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const r = recorder();
  s.watch('n1', 'AddressGroup', '0', r.on);
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  s.hold('n1', 'AddressGroup', 'ag-1', true);
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.2')]));
  s.set('n1', 'AddressGroup', 'ag-1', ag('ag-1', []));
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.3')]));
  t.same(r.log(), ['ADDED ag-1@1', 'MODIFIED ag-1@2', 'MODIFIED ag-1@3', 'MODIFIED ag-1@4'], 'the last shared change no longer reaches it');
  t.same((s.get('n1', 'AddressGroup', 'ag-1') as ControlPlaneAddressGroup).members, []);
  s.forgetNode('n1');
  s.share('AddressGroup', 'ag-1', ag('ag-1', []));
  t.equal(s.resourceVersion(), '4', 'a forgotten Node holds nothing');
});

t.test('deferLog: shared changes before startLog are delivered, not logged', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 100, deferLog: true });
  s.share('AddressGroup', 'ag-1', ag('ag-1', []));
  s.hold('n1', 'AddressGroup', 'ag-1', true);
  const r = recorder();
  s.watch('n1', 'AddressGroup', '101', r.on);
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]));
  t.same(r.log(), ['MODIFIED ag-1@102']);
  t.throws(() => s.watch('n1', 'AddressGroup', '101', () => {}), GoneError, 'not resumable from before it');
  s.startLog();
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.2')]));
  const later = recorder();
  s.watch('n1', 'AddressGroup', '102', later.on);
  t.same(later.log(), ['MODIFIED ag-1@103']);
});

t.test('eventJson: the JSON of every kind of event, its content written once for all watches', async (t) => {
  const s = new ControlPlaneStore({ initialResourceVersion: 0 });
  const a = recorder();
  const b = recorder();
  s.watch('n1', 'AddressGroup', '0', a.on);
  s.watch('n2', 'AddressGroup', '0', b.on);
  s.watch('n1', 'NetworkPolicy', '0', a.on);
  const members = KeyedList.from([pod('x/a', '10.0.0.1'), pod('x/"q"', '10.0.0.2')], memberKey);
  s.share('AddressGroup', 'ag-1', { ...ag('ag-1', []), members } as never);
  s.batch(() => {
    s.hold('n1', 'AddressGroup', 'ag-1', true);
    s.hold('n2', 'AddressGroup', 'ag-1', true);
    s.set('n1', 'NetworkPolicy', 'NetworkPolicy/x/p', np('NetworkPolicy/x/p'));
  });
  s.share('AddressGroup', 'ag-1', ag('ag-1', [pod('x/a', '10.0.0.1')]), patchOf('ag-1', [], ['pod:x/"q"']));
  s.set('n1', 'NetworkPolicy', 'NetworkPolicy/x/p', undefined);
  s.set('n1', 'AddressGroup', 'ag-own', { ...ag('ag-own', []), metadata: { name: 'ag-own' } });
  const events = [...a.events, ...b.events];
  t.same(a.log(), ['ADDED ag-1@1', 'ADDED networkpolicy.x.p@3', 'MODIFIED ag-1@4', 'DELETED networkpolicy.x.p@5', 'ADDED ag-own@6']);
  for (const e of events) t.same(JSON.parse(eventJson(e)), JSON.parse(JSON.stringify(e)), `${e.type} ${e.object.metadata.name}@${e.object.metadata.resourceVersion}`);
  const [n1, n2] = [a.events[2]!, b.events[1]!];
  t.not(eventJson(n1), eventJson(n2), 'each watch its own metadata');
  t.equal(eventJson(n1).replace(/"metadata":\{[^}]*\}\}/, ''), eventJson(n2).replace(/"metadata":\{[^}]*\}\}/, ''), 'the same content');
  const bookmark = { type: 'BOOKMARK', object: { kind: 'AddressGroup', metadata: { name: '', resourceVersion: '9' } } };
  t.equal(eventJson(bookmark), JSON.stringify(bookmark), 'another event: plain JSON');
});
