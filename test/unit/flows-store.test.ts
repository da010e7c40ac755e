/** FlowStore: owners, the exact pending delta, reference-counted collisions, restore after a failed apply. */
import t from 'tap';
import { diffFlows } from '../../daemon/flows/diff.js';
import { type Flow, FlowCategory, withCookie } from '../../daemon/flows/flow.js';
import { flat } from '../../daemon/policy/flat-string.js';
import { computeFlows, PipelineOwners } from '../../daemon/flows/pipeline.js';
import { rng } from './policy-core-helpers.js';
import { cookieNumber, cookieText, FlowStore } from '../../daemon/flows/store.js';

const flow = (n: number): Flow => withCookie({ table: 'L3Forwarding', priority: 200, match: `ip,nw_dst=10.0.${n >> 8}.${n & 255}`, actions: 'drop', category: FlowCategory.policy });
const sorted = (xs: Iterable<string>) => [...xs].sort();
const cookies = (fs: readonly Flow[]) => sorted(fs.map((f) => f.cookie));

t.test('owners replace their sets; the delta is exactly what changed since the last take', async (t) => {
  const s = new FlowStore();
  s.replace('a', [flow(1), flow(2)]);
  s.replace('b', [flow(3)]);
  t.same(cookies(s.take().add), cookies([flow(1), flow(2), flow(3)]));
  t.equal(s.dirty, false);
  t.same(s.replace('a', [flow(2), flow(4)]), { added: 1, removed: 1 });
  const d = s.take();
  t.same(cookies(d.add), cookies([flow(4)]));
  t.same(d.remove, [flow(1).cookie]);
  t.same(cookies(s.flows()), cookies([flow(2), flow(3), flow(4)]));
  t.equal(s.size, 3);
  // Added then dropped before a take: nothing to do on the bridge; dropped then re-added: same.
  s.replace('b', [flow(3), flow(5)]);
  s.replace('b', [flow(3)]);
  s.patch('a', [], [flow(2)]);
  s.patch('a', [flow(2)], []);
  t.same(s.take(), { add: [], remove: [] });
  s.drop('b');
  t.same(s.take(), { add: [], remove: [flow(3).cookie] });
  t.same(s.ownerNames(), ['a']);
});

t.test('one cookie wanted by two owners is installed once and stays while either wants it', async (t) => {
  const s = new FlowStore();
  s.replace('pod/x', [flow(1), flow(2)]);
  s.patch('policy', [flow(2), flow(3)], []);
  const first = s.take();
  t.same(cookies(first.add), cookies([flow(1), flow(2), flow(3)]), 'the shared flow is added once');
  t.equal(s.flows().length, 3);
  s.drop('pod/x');
  t.same(s.take(), { add: [], remove: [flow(1).cookie] }, 'the flow policy still wants is not removed');
  t.ok(s.has(flow(2).cookie));
  s.patch('policy', [], [flow(2).cookie]);
  t.same(s.take(), { add: [], remove: [flow(2).cookie] }, 'gone with its last owner');
  s.patch('policy', [flow(3)], []);
  t.same(s.take(), { add: [], remove: [] }, 'an owner adding a flow it holds changes nothing');
});

t.test('three owners of one cookie: it leaves with the last of them, in any order', async (t) => {
  for (const order of [['a', 'b', 'c'], ['c', 'a', 'b'], ['b', 'c', 'a']]) {
    const s = new FlowStore();
    for (const o of ['a', 'b', 'c']) s.replace(o, [flow(7)]);
    t.same(cookies(s.take().add), [flow(7).cookie], 'installed once');
    for (const [i, o] of order.entries()) {
      s.drop(o);
      const d = s.take();
      t.same(d.remove, i === 2 ? [flow(7).cookie] : [], `after ${order.slice(0, i + 1).join(', ')} dropped it: ${i === 2 ? 'removed' : 'kept'}`);
      t.equal(s.has(flow(7).cookie), i < 2);
    }
    s.replace('a', [flow(7)]);
    t.same(cookies(s.take().add), [flow(7).cookie], 'wanted again: added again');
  }
});

t.test('a failed apply keeps its delta pending, merged with what changed since', async (t) => {
  const s = new FlowStore();
  s.replace('a', [flow(1), flow(2)]);
  s.take();
  s.replace('a', [flow(2), flow(3), flow(4)]);
  const failed = s.take(); // +3 +4 -1
  // Meanwhile: 4 dropped again (never reached the bridge), 1 wanted again (still on the bridge), 5 new.
  s.replace('a', [flow(1), flow(2), flow(3), flow(5)]);
  s.restore(failed);
  const d = s.take();
  t.same(cookies(d.add), cookies([flow(3), flow(5)]));
  t.same(d.remove, []);
  // A failed removal comes back as a removal.
  s.drop('a');
  const gone = s.take();
  s.restore(gone);
  t.same(sorted(s.take().remove), sorted(gone.remove));
});

t.test('takeAgainst: the bridge as it is read back (restart: nothing changes; repair: only the difference)', async (t) => {
  const owners = new PipelineOwners();
  const input = {
    gatewayOfport: 32769, gatewayMac: '0a:00:00:00:00:01', serviceCIDRs: ['10.96.0.0/12'],
    pods: [1, 2, 3].map((i) => ({ containerId: `c${i}`, ofport: i, mac: `2a:00:00:00:00:0${i}`, ips: [`10.1.0.${i}`] })),
  };
  const before = new FlowStore();
  owners.update(before, input);
  before.patch('policy', [flow(1), flow(2)], []);
  const installed = new Set(before.take().add.map((f) => f.cookie));
  // A restarted agent builds its store from scratch and reads the bridge: it changes nothing.
  const after = new FlowStore();
  new PipelineOwners().update(after, input);
  after.patch('policy', [flow(2), flow(1)], []);
  t.same(after.takeAgainst(installed), { add: [], remove: [] });
  t.equal(after.dirty, false, 'the pending delta is part of the comparison');
  // The bridge lost one flow and holds a foreign sluice cookie: exactly those are repaired.
  const lost = [...installed][0]!;
  const broken = new Set([...installed].filter((c) => c !== lost).concat('0x51ce02ffffffffff'));
  const repair = after.takeAgainst(broken);
  t.same(repair.add.map((f) => f.cookie), [lost]);
  t.same(repair.remove, ['0x51ce02ffffffffff']);
});

t.test('random owner operations: store == from-scratch union, taken deltas replay to it', async (t) => {
  let seed = 7;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const s = new FlowStore();
  const model = new Map<string, Set<number>>();
  let bridge = new Set<string>();
  for (let step = 0; step < 2000; step++) {
    const owner = `o${rnd(6)}`;
    const cur = model.get(owner) ?? new Set<number>();
    const op = rnd(4);
    if (op === 0) {
      const next = new Set(Array.from({ length: rnd(8) }, () => rnd(30)));
      s.replace(owner, [...next].map(flow));
      model.set(owner, next);
    } else if (op === 1) {
      const add = Array.from({ length: rnd(4) }, () => rnd(30));
      const remove = Array.from({ length: rnd(4) }, () => rnd(30));
      s.patch(owner, add.map(flow), remove.map((n) => flow(n).cookie));
      for (const n of remove) cur.delete(n);
      for (const n of add) cur.add(n);
      model.set(owner, cur);
    } else if (op === 2) {
      s.drop(owner);
      model.delete(owner);
    } else {
      const d = s.take();
      if (rnd(5) === 0) {
        s.restore(d); // the apply failed: the bridge did not change
      } else {
        for (const c of d.remove) if (!bridge.has(c)) t.fail(`removes ${c}, which the bridge does not hold`);
        for (const f of d.add) if (bridge.has(f.cookie)) t.fail(`adds ${f.cookie}, which the bridge holds`);
        bridge = new Set([...bridge].filter((c) => !d.remove.includes(c)).concat(d.add.map((f) => f.cookie)));
      }
    }
    const want = new Set([...model.values()].flatMap((xs) => [...xs].map((n) => flow(n).cookie)));
    if (sorted(s.flows().map((f) => f.cookie)).join() !== sorted(want).join()) {
      t.fail(`step ${step}: the store's desired set is not the union of its owners`);
      return;
    }
    if (s.size !== want.size) t.fail(`step ${step}: size ${s.size}, want ${want.size}`);
  }
  t.pass('2000 random operations kept the store equal to its owners\' union');
  const last = s.take();
  bridge = new Set([...bridge].filter((c) => !last.remove.includes(c)).concat(last.add.map((f) => f.cookie)));
  t.same(sorted(bridge), sorted(s.flows().map((f) => f.cookie)), 'the bridge ends with the desired set');
  t.same(diffFlows(s.flows(), bridge).add, []);
});

t.test('a pipeline in the store equals computeFlows', async (t) => {
  const s = new FlowStore();
  const input = { gatewayOfport: 5, gatewayMac: '0a:00:00:00:00:01', nodeIP: '192.168.0.2', serviceCIDRs: ['10.96.0.0/12'], pods: [{ containerId: 'c', ofport: 7, mac: '2a:00:00:00:00:07', ips: ['10.1.0.7'] }] };
  new PipelineOwners().update(s, input);
  t.same(cookies(s.flows()), cookies(computeFlows(input)));
});

t.test('withCookie: exactly the spec fields and the cookie; owner only when given', async (t) => {
  const base = { table: 'L3Forwarding' as const, priority: 200, match: 'ip', actions: 'drop', category: FlowCategory.policy };
  t.same(Object.keys(withCookie(base)).sort(), ['actions', 'category', 'cookie', 'match', 'priority', 'table']);
  const owned = withCookie({ ...base, category: FlowCategory.pod, owner: 'c1' });
  t.equal(owned.owner, 'c1');
  t.notOk('owner' in withCookie(base));
  t.match(owned.cookie, /^0x51ce01[0-9a-f]{10}$/);
  t.not(owned.cookie, withCookie(base).cookie);
});

t.test('a cookie is the same from one sluice version to the next: sha256 of the flow text, as written', async (t) => {
  // Upgrading the agent must change no flow: the cookie derivation is fixed. 91ef3b3369 is the
  // first 40 bits of sha256("table=L3Forwarding,priority=200,ip,nw_dst=10.1.0.11 actions=drop").
  const f = withCookie({ table: 'L3Forwarding', priority: 200, match: 'ip,nw_dst=10.1.0.11', actions: 'drop', category: FlowCategory.pod });
  t.equal(f.cookie, '0x51ce0191ef3b3369');
});

t.test('flat: the same text, whatever it was built from', async (t) => {
  const parts = Array.from({ length: 40 }, (_, i) => `p${i}`);
  let built = '';
  for (const p of parts) built += `${p},`;
  t.equal(flat(built), parts.map((p) => `${p},`).join(''));
  t.equal(flat(''), '');
  t.equal(flat('0x51ce'), '0x51ce', 'a text that reads as a number stays text');
  const spec = { table: 'IngressRule' as const, priority: 200, match: `ip,${'nw_src'}=${'10.0.0.1'}`, actions: `conjunction(${7},${'1/2'})`, category: FlowCategory.policy };
  t.same(withCookie(spec), { ...spec, cookie: withCookie({ ...spec, match: 'ip,nw_src=10.0.0.1', actions: 'conjunction(7,1/2)' }).cookie }, 'a flow of built texts is the flow of the same texts');
});

t.test('rendered owners: every step gives what the store gives when it keeps every owner\'s flows', async (t) => {
  for (const seed0 of [11, 29, 47]) {
    const next = rng(seed0).next;
    const rnd = (n: number) => Math.floor(next() * n);
    // The owners' sets as stated; a rendered owner's source lists its set from here.
    const model = new Map<string, Set<number>>();
    const kept = new FlowStore();
    const lean = new FlowStore();
    const ownerFlows = (owner: string) => [...(model.get(owner) ?? [])].map(flow);
    const countByTable = (flows: readonly Flow[]) => {
      const out: Record<string, number> = {};
      for (const f of flows) out[f.table] = (out[f.table] ?? 0) + 1;
      return out;
    };
    for (const owner of ['o0', 'o1']) lean.renderedBy(owner, { flows: () => ownerFlows(owner), countByTable: () => countByTable(ownerFlows(owner)) });
    const pool = 24;
    const deltaKey = (d: { add: Flow[]; remove: string[] }) => `${cookies(d.add).join()}|${sorted(d.remove).join()}`;
    let failures = 0;
    const check = (ok: boolean, what: string) => {
      if (ok) return;
      failures++;
      t.fail(`seed ${seed0}: ${what}`);
    };
    for (let step = 0; step < 1500 && failures < 5; step++) {
      const owner = `o${rnd(4)}`;
      const op = rnd(6);
      if (op === 0) {
        const set = new Set(Array.from({ length: rnd(8) }, () => rnd(pool)));
        const a = kept.replace(owner, [...set].map(flow));
        const b = lean.replace(owner, [...set].map(flow));
        check(a.added === b.added && a.removed === b.removed, `step ${step}: replace counts ${JSON.stringify(b)}, kept store ${JSON.stringify(a)}`);
        model.set(owner, set);
      } else if (op === 1) {
        const add = Array.from({ length: rnd(4) }, () => rnd(pool));
        const remove = Array.from({ length: rnd(4) }, () => rnd(pool));
        kept.patch(owner, add.map(flow), remove.map((n) => flow(n).cookie));
        lean.patch(owner, add.map(flow), remove.map((n) => flow(n).cookie));
        const cur = model.get(owner) ?? new Set<number>();
        for (const n of remove) cur.delete(n);
        for (const n of add) cur.add(n);
        model.set(owner, cur);
      } else if (op === 2) {
        kept.drop(owner);
        lean.drop(owner);
        model.delete(owner);
      } else if (op === 3) {
        const a = kept.take();
        const b = lean.take();
        check(deltaKey(a) === deltaKey(b), `step ${step}: take ${deltaKey(b)}, kept store ${deltaKey(a)}`);
        if (rnd(3) === 0) {
          kept.restore(a);
          lean.restore(b);
        }
      } else if (op === 4) {
        // The bridge read back: some of the pool, and a cookie that is not sluice's.
        const installed = new Set([...Array.from({ length: rnd(pool) }, () => flow(rnd(pool)).cookie), '0x00000000000000aa']);
        const a = kept.takeAgainst(installed);
        const b = lean.takeAgainst(installed);
        check(deltaKey(a) === deltaKey(b), `step ${step}: takeAgainst ${deltaKey(b)}, kept store ${deltaKey(a)}`);
        if (rnd(2) === 0) {
          kept.restore(a);
          lean.restore(b);
        }
      } else {
        check(sorted(lean.ownerFlows(owner).map((f) => f.cookie)).join() === sorted(kept.ownerFlows(owner).map((f) => f.cookie)).join(), `step ${step}: ${owner}'s flows`);
      }
      check(lean.size === kept.size, `step ${step}: size ${lean.size}, kept store ${kept.size}`);
      check(lean.dirty === kept.dirty, `step ${step}: dirty ${lean.dirty}, kept store ${kept.dirty}`);
      check(cookies(lean.flows()).join() === cookies(kept.flows()).join(), `step ${step}: the desired set`);
      check(lean.flows().length === new Set(lean.flows().map((f) => f.cookie)).size, `step ${step}: a cookie listed twice`);
      for (let n = 0; n < pool; n++) check(lean.has(flow(n).cookie) === kept.has(flow(n).cookie), `step ${step}: has ${n}`);
      check(sorted(lean.ownerNames()).join() === sorted(kept.ownerNames()).join(), `step ${step}: owners ${lean.ownerNames()}`);
    }
    t.equal(failures, 0, `seed ${seed0}: 1500 random operations, the same store whether two owners are rendered or kept`);
  }
});

t.test('a rendered owner: declared before it states flows, with sluice cookies only', async (t) => {
  const s = new FlowStore();
  s.replace('pipeline', [flow(1)]);
  t.throws(() => s.renderedBy('pipeline', { flows: () => [], countByTable: () => ({}) }), /owner pipeline already has flows kept here/);
  s.renderedBy('policy', { flows: () => [flow(2)], countByTable: () => ({ L3Forwarding: 1 }) });
  s.replace('policy', [flow(2)]);
  t.ok(s.has(flow(2).cookie));
  t.same(s.countByTable(), { L3Forwarding: 2 }, 'the kept flow and the rendered owner\'s count');
  t.throws(() => s.patch('policy', [{ ...flow(3), cookie: '0x1234' }], []), /cookie 0x1234 is not a sluice cookie/);
  t.equal(cookieText(cookieNumber(flow(2).cookie)), flow(2).cookie, 'a cookie number gives its cookie back');
});
