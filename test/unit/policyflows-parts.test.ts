/**
 * The pure parts of the policy flow compiler: port range -> value/mask decomposition, the
 * priority allocator of the ordered tables, conjunction-id allocation and the punt userdata.
 */
import t from 'tap';
import { allocateConjIds, CONJ_ID_MIN, naturalConjId } from '../../daemon/flows/policy/conjids.js';
import { maskedPortContains, maskedPortText, PortRangeError, rangeToMasks } from '../../daemon/flows/policy/portmasks.js';
import { allocatePriorities, PRIORITY, PriorityError, type OrderedRule } from '../../daemon/flows/policy/priorities.js';
import { decodePolicyPuntExtra, decodePolicyPuntRegs, Disposition, policyPuntActions, policyPuntExtra, policyPuntReg2 } from '../../daemon/flows/policy/punt.js';
import { tableId } from '../../daemon/flows/tables.js';
import type { RulePriority } from '../../daemon/policy/types.js';

/** Deterministic PRNG so failures reproduce. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 0x100000000;
  };
}

t.test('port ranges become an exact cover of aligned value/mask blocks', async (t) => {
  t.same(rangeToMasks(80, 80), [{ value: 80, mask: 0xffff }]);
  t.equal(maskedPortText(rangeToMasks(80, 80)[0]!), '80');
  t.same(rangeToMasks(1000, 1010).map(maskedPortText), ['0x3e8/0xfff8', '0x3f0/0xfffe', '1010']);
  t.same(rangeToMasks(0, 65535), [{ value: 0, mask: 0 }], 'the whole space is one wildcard block');
  t.same(rangeToMasks(32768, 65535), [{ value: 32768, mask: 0x8000 }]);
  t.equal(rangeToMasks(1, 65534).length, 30, 'worst case: 2 x 15 blocks');
  t.throws(() => rangeToMasks(10, 9), PortRangeError);
  t.throws(() => rangeToMasks(-1, 9), /range start -1 is not a port number/);
  t.throws(() => rangeToMasks(1, 70000), /range end 70000/);

  const rand = rng(7);
  const cases: [number, number][] = [[0, 0], [65535, 65535], [1, 1], [0, 1], [65534, 65535]];
  for (let i = 0; i < 300; i++) {
    const a = Math.floor(rand() * 65536);
    const b = rand() < 0.5 ? Math.min(65535, a + Math.floor(rand() * 300)) : Math.floor(rand() * 65536);
    cases.push([Math.min(a, b), Math.max(a, b)]);
  }
  let bad = 0;
  for (const [lo, hi] of cases) {
    const blocks = rangeToMasks(lo, hi);
    // Exact cover: every port in [lo-1, hi+1] and a sample elsewhere is in exactly the blocks it should be.
    const probe = new Set<number>([lo, hi, Math.max(0, lo - 1), Math.min(65535, hi + 1)]);
    for (let k = 0; k < 200; k++) probe.add(Math.floor(rand() * 65536));
    for (let p = lo; p <= Math.min(hi, lo + 2000); p++) probe.add(p);
    for (const p of probe) {
      const hits = blocks.filter((m) => maskedPortContains(m, p)).length;
      if (hits !== (p >= lo && p <= hi ? 1 : 0)) bad++;
    }
    // Every block is aligned: value has no bits outside the mask.
    for (const m of blocks) if ((m.value & ~m.mask & 0xffff) !== 0) bad++;
    if (blocks.length > 30) bad++;
  }
  t.equal(bad, 0, `${cases.length} random ranges are covered exactly, blocks disjoint and aligned`);
});

const prio = (tier: number, policy: number, rule: number, tieBreak = 'p', stage: 0 | 2 = 0): RulePriority => ({ stage, tier, policy, rule, tieBreak });

t.test('priority allocation keeps the evaluation order, is deterministic and leaves room', async (t) => {
  const rules: OrderedRule[] = [
    { id: 'app-p5-r0', priority: prio(250, 5, 0) },
    { id: 'app-p5-r1', priority: prio(250, 5, 1) },
    { id: 'app-p1-r0', priority: prio(250, 1, 0) },
    { id: 'secops-p1-r0', priority: prio(100, 1, 0) },
    { id: 'admin-p10-r0', priority: prio(251, 10, 0, 'AdminNetworkPolicy//a') },
    { id: 'admin-p10-r0b', priority: prio(251, 10, 0, 'AdminNetworkPolicy//b') },
  ];
  const a = allocatePriorities('T', rules);
  const b = allocatePriorities('T', [...rules].reverse());
  t.same([...a].sort(), [...b].sort(), 'input order does not matter');
  const order = ['secops-p1-r0', 'app-p1-r0', 'app-p5-r0', 'app-p5-r1', 'admin-p10-r0', 'admin-p10-r0b'];
  for (let i = 1; i < order.length; i++) t.ok(a.get(order[i - 1]!)! > a.get(order[i]!)!, `${order[i - 1]} before ${order[i]}`);
  for (const p of a.values()) t.ok(p >= PRIORITY.rangeBottom && p <= PRIORITY.rangeTop);
  // Three tiers -> three bands of 21000; a policy's rules sit 10 apart per unit of policy priority.
  t.equal(a.get('secops-p1-r0'), 64000 - 10);
  t.equal(a.get('app-p1-r0'), 64000 - 21000 - 10);
  t.equal(a.get('app-p5-r1'), 64000 - 21000 - 51);
  t.equal(a.get('admin-p10-r0'), 64000 - 42000 - 100);
  t.equal(a.get('admin-p10-r0b'), 64000 - 42000 - 101, 'equal ideal: the later one is pushed down by one');

  // Adding a rule in a policy with free room leaves every other priority unchanged.
  const more = allocatePriorities('T', [...rules, { id: 'app-p3-r0', priority: prio(250, 3, 0) }]);
  for (const [id, p] of a) t.equal(more.get(id), p, `${id} keeps its priority`);

  // A crowded policy pushes into the room below; order is still strict.
  const crowd: OrderedRule[] = [];
  for (let i = 0; i < 40; i++) crowd.push({ id: `c${String(i).padStart(2, '0')}`, priority: prio(250, 1, i) });
  crowd.push({ id: 'next', priority: prio(250, 2, 0) });
  const c = allocatePriorities('T', crowd);
  const sorted = [...crowd].map((r) => c.get(r.id)!);
  for (let i = 1; i < sorted.length; i++) t.ok(sorted[i - 1]! > sorted[i]!, 'strictly decreasing');
  t.equal(c.get('next'), c.get('c39')! - 1, 'the next policy is pushed just below the crowded one');

  // Table overflow: more rules than the ideal layout allows -> evenly re-spaced, still ordered.
  const many: OrderedRule[] = [];
  for (let i = 0; i < 20000; i++) many.push({ id: `m${i}`, priority: prio(50, 0, i) });
  const m = allocatePriorities('T', many);
  t.equal(m.get('m0'), PRIORITY.rangeTop);
  t.ok(m.get('m19999')! >= PRIORITY.rangeBottom, 'the last rule still fits');
  let ordered = true;
  for (let i = 1; i < many.length; i++) if (m.get(`m${i - 1}`)! <= m.get(`m${i}`)!) ordered = false;
  t.ok(ordered, '20000 rules in one tier stay ordered');
  const tooMany: OrderedRule[] = [];
  for (let i = 0; i < 63002; i++) tooMany.push({ id: `x${i}`, priority: prio(50, 0, i) });
  t.throws(() => allocatePriorities('AntreaPolicyEgressRule', tooMany), PriorityError);
  t.throws(() => allocatePriorities('AntreaPolicyEgressRule', tooMany), /AntreaPolicyEgressRule: 63002 rules do not fit/);
});

t.test('conjunction ids: deterministic, unique, collisions resolved by key order', async (t) => {
  const keys = Array.from({ length: 20000 }, (_, i) => `rule-${i}`);
  const a = allocateConjIds(keys);
  const b = allocateConjIds([...keys].reverse());
  t.same([...a].sort(), [...b].sort(), 'same set, same ids');
  t.equal(new Set(a.values()).size, keys.length, 'unique');
  t.ok([...a.values()].every((id) => id >= CONJ_ID_MIN && id <= 0x7fffffff), 'in range, small ids reserved');
  t.equal(a.get('rule-7'), naturalConjId('rule-7'));
  // Forced collisions: every key hashes to the same id.
  const collide = allocateConjIds(['b', 'a', 'c'], () => 500);
  t.same([collide.get('a'), collide.get('b'), collide.get('c')], [500, 501, 502]);
  const partial = allocateConjIds(['a', 'c'], () => 500);
  t.same([partial.get('a'), partial.get('c')], [500, 501], 'without b, c takes the next free id');
  const wrap = allocateConjIds(['a', 'b'], () => 0x7fffffff);
  t.same([wrap.get('a'), wrap.get('b')], [0x7fffffff, CONJ_ID_MIN], 'probing wraps around');
});

t.test('policy punt userdata round-trips', async (t) => {
  const extra = policyPuntExtra({ table: 'IngressDefaultRule', disposition: Disposition.reject, priority: 64500, conjId: 0xdeadbeef });
  t.same(decodePolicyPuntExtra(extra), { tableId: tableId('IngressDefaultRule'), disposition: 2, priority: 64500, conjId: 0xdeadbeef });
  t.equal(decodePolicyPuntExtra(Buffer.alloc(3)), undefined);
  const actions = policyPuntActions({ table: 'EgressRule', disposition: Disposition.drop, priority: 200, conjId: 258, log: true, reject: true });
  const tid = tableId('EgressRule').toString(16).padStart(2, '0');
  t.equal(actions, `set_field:0x31${tid}00c8->reg2,set_field:258->reg3,controller(userdata=01.03.${tid}.01.00.c8.00.00.01.02,meter_id=256)`);
  const reg2 = policyPuntReg2({ table: 'IngressDefaultRule', disposition: Disposition.pass, priority: 64500, ops: 3 });
  t.same(decodePolicyPuntRegs(reg2, 0xfffffffe), { ops: 3, disposition: 3, tableId: tableId('IngressDefaultRule'), priority: 64500, conjId: 0xfffffffe }, 'registers round-trip');
});
