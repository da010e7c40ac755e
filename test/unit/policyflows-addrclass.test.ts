/**
 * Address classes (flows/policy/addrclass.ts) checked by what a packet meets: the compiled
 * classification table is looked up as OVS does (the highest-priority matching flow), its register
 * writes are applied, and every rule's peer clause (class bit or per-address flows) must match an
 * address exactly when the rule's peer set holds it. Nested and overlapping CIDRs, /32 inside
 * /24, ipBlock excepts (subtracted as the engine does), IPv6, a tiny bit budget (fallback), bit
 * stability, and the size of incremental deltas.
 */
import t from 'tap';
import type { Flow } from '../../daemon/flows/flow.js';
import { allocateClassBits, CLASS_REGS, ClassTable, classPrefix } from '../../daemon/flows/policy/addrclass.js';
import { PolicyFlows } from '../../daemon/flows/policy/compile.js';
import { formatCidr, parseCidr, parseIp, subtractCidrs } from '../../daemon/policy/cidr.js';
import type { NodeRule } from '../../daemon/policy/internal.js';

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 0x100000000;
  };
}

interface PeerSet {
  id: string;
  ips: string[];
  cidrs: string[];
}

let seq = 0;
/** A stage-0 rule of its own policy (so its own priority) with peer set `set`. */
function rule(direction: NodeRule['direction'], set: PeerSet, policy: number, ports: NodeRule['ports'] = []): NodeRule {
  const id = `r${seq++}`;
  return {
    id, ruleId: id, ref: { kind: 'AntreaClusterNetworkPolicy', name: `pol-${id}`, rule: 'r', tier: 'application' }, direction, action: 'Allow',
    priority: { stage: 0, tier: 250, policy, rule: 0, tieBreak: `k/${id}` }, order: policy,
    targets: [{ kind: 'pod', ref: 'x/a', ips: ['10.1.0.11', 'fd00:1::11'] }],
    peers: { ips: [...set.ips].sort(), cidrs: [...set.cidrs].sort(), services: [] }, peerSet: set.id, ports,
  };
}

/** IPv4/IPv6 address or prefix (`a/len`) as a numeric range. */
function range(text: string): { family: 4 | 6; start: bigint; end: bigint } {
  if (text.includes('/')) return parseCidr(text)!;
  const ip = parseIp(text)!;
  return { family: ip.family, start: ip.value, end: ip.value };
}
const inside = (addr: string, prefix: string): boolean => {
  const a = range(addr);
  const p = range(prefix);
  return a.family === p.family && a.start >= p.start && a.start <= p.end;
};
const holds = (set: PeerSet, addr: string): boolean => [...set.ips, ...set.cidrs].some((p) => inside(addr, p));

/** A classification flow (not the bypass of a connection's later packets, which every set has). */
const isClassFlow = (f: Flow, table = /AddressClass$/): boolean => table.test(f.table) && !f.match.startsWith('ct_state=');

/** The prefix a classification/peer match names (`ip` / `ipv6` = the whole family). */
function matchPrefix(match: string): string | undefined {
  if (match === 'ip') return '0.0.0.0/0';
  if (match === 'ipv6') return '::/0';
  return /(?:nw_src|nw_dst|ipv6_src|ipv6_dst)=([^,]+)/.exec(match)?.[1];
}

/** The registers the class table writes for `addr` (the highest-priority matching flow, as OVS). */
function classify(flows: Flow[], table: string, addr: string): Map<number, number> {
  const regs = new Map<number, number>();
  let best: Flow | undefined;
  for (const f of flows) {
    if (f.table !== table) continue;
    const p = matchPrefix(f.match);
    if (p === undefined || !inside(addr, p)) continue;
    if (best && best.priority === f.priority) throw new Error(`${addr}: two ${table} flows at ${f.priority}: ${best.match} and ${f.match}`);
    if (!best || f.priority > best.priority) best = f;
  }
  for (const m of best?.actions.matchAll(/set_field:(0x[0-9a-f]+)->reg(\d+)/g) ?? []) regs.set(Number(m[2]), Number(m[1]));
  return regs;
}

/** Whether `rule`'s peer clause matches a packet whose peer address is `addr`. */
function peerClauseMatches(flows: Flow[], r: NodeRule, addr: string): boolean {
  const side = r.direction === 'Ingress' ? 'src' : 'dst';
  const regs = classify(flows, side === 'src' ? 'SrcAddressClass' : 'DstAddressClass', addr);
  const part = r.direction === 'Ingress' ? 1 : 2;
  const conjId = conjIds.get(r.id)!;
  const clause = flows.filter((f) => f.actions.split(/,(?=conjunction)/).some((a) => a.startsWith(`conjunction(${conjId},${part}/`)));
  return clause.some((f) => {
    const bit = /reg(\d+)=(0x[0-9a-f]+)\/(0x[0-9a-f]+)/.exec(f.match);
    if (bit) return CLASS_REGS[side].includes(Number(bit[1])) && ((regs.get(Number(bit[1])) ?? 0) & Number(bit[3])) >>> 0 === Number(bit[2]);
    const p = matchPrefix(f.match);
    return p !== undefined && inside(addr, p);
  });
}

/** A rule's flow priority and the conjunction id of its main unit (its conj_id flow's), found through describe(). */
const priorities = new Map<string, number>();
const conjIds = new Map<string, number>();
function remember(pf: PolicyFlows, rules: NodeRule[]): void {
  for (const f of pf.flows()) {
    const id = /conj_id=(\d+)/.exec(f.match)?.[1];
    const who = id !== undefined ? pf.describe(Number(id)) : undefined;
    if (who && rules.some((r) => r.id === who.nodeRuleId) && f.actions.includes('Metric')) {
      priorities.set(who.nodeRuleId, who.priority);
      conjIds.set(who.nodeRuleId, Number(id));
    }
  }
}

/** Nested, overlapping and excepted blocks over 10.0.0.0/8 and fd00::/16, and host addresses among them. */
function randomSets(r: () => number, n: number): PeerSet[] {
  const v4 = ['10.0.0.0/8', '10.1.0.0/16', '10.1.2.0/24', '10.1.2.128/25', '10.2.0.0/15', '10.1.0.0/24', '0.0.0.0/0'];
  const v6 = ['fd00::/16', 'fd00:1::/32', 'fd00:1:2::/48', '::/0'];
  const hosts = ['10.1.2.3', '10.1.2.200', '10.2.0.9', '10.3.0.1', '10.1.0.5', '192.168.1.1', 'fd00:1:2::5', 'fd00:1::9', 'fd00:2::1', '2001:db8::1'];
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const out: PeerSet[] = [];
  for (let i = 0; i < n; i++) {
    const cidrs = new Set<string>();
    for (let k = Math.floor(r() * 3); k > 0; k--) {
      const block = pick(r() < 0.7 ? v4 : v6);
      // an ipBlock with an except inside it, subtracted as the engine does
      const except = r() < 0.4 ? [...v4, ...v6].filter((c) => c !== block && inside(c.split('/')[0]!, block) && Number(c.split('/')[1]) > Number(block.split('/')[1])) : [];
      const ex = except.length > 0 ? [parseCidr(pick(except))!] : [];
      for (const piece of subtractCidrs(parseCidr(block)!, ex)) cidrs.add(formatCidr(piece));
    }
    const ips = new Set<string>();
    for (let k = Math.floor(r() * 4); k > 0; k--) ips.add(pick(hosts));
    if (ips.size + cidrs.size < 2) ips.add(pick(hosts)).add(pick(hosts));
    out.push({ id: `set${i}`, ips: [...ips], cidrs: [...cidrs] });
  }
  return out;
}

const PROBES = ['10.0.0.1', '10.1.2.3', '10.1.2.4', '10.1.2.130', '10.1.2.200', '10.1.0.5', '10.1.5.5', '10.2.0.9', '10.3.0.1', '10.200.0.1', '192.168.1.1', '8.8.8.8',
  'fd00:1:2::5', 'fd00:1:2::6', 'fd00:1::9', 'fd00:1:3::1', 'fd00:2::1', 'fd01::1', '2001:db8::1'];

/** The part of a test that checkSemantics reports through. */
type Reporter = { fail: (message: string) => unknown };

function checkSemantics(t: Reporter, pf: PolicyFlows, rules: NodeRule[], sets: Map<string, PeerSet>, what: string): number {
  remember(pf, rules);
  const flows = pf.flows();
  let wrong = 0;
  for (const r of rules) {
    const set = sets.get(r.peerSet!)!;
    for (const addr of PROBES) {
      // only the families the rule's targets and peers both have install flows
      const fam = addr.includes(':') ? 6 : 4;
      if (![...set.ips, ...set.cidrs].some((p) => range(p).family === fam)) continue;
      if (peerClauseMatches(flows, r, addr) !== holds(set, addr)) {
        wrong++;
        if (wrong <= 5) t.fail(`${what}: rule ${r.id} (${set.id}: ${[...set.ips, ...set.cidrs].join(' ')}) ${holds(set, addr) ? 'misses' : 'matches'} ${addr}`);
      }
    }
  }
  return wrong;
}

t.test('every rule matches exactly its peer set (nested CIDRs, excepts, /32 in /24, IPv6)', async (t) => {
  for (const [seed, budget] of [[1, undefined], [2, undefined], [3, 3], [4, 1], [5, 0]] as const) {
    const r = rng(seed);
    const sets = randomSets(r, 12);
    const byId = new Map(sets.map((s) => [s.id, s]));
    const rules: NodeRule[] = [];
    let policy = 1;
    for (const s of sets) {
      for (let k = 1 + Math.floor(r() * 3); k > 0; k--) {
        const x = rule(r() < 0.5 ? 'Ingress' : 'Egress', s, policy++);
        // A third are Kubernetes NetworkPolicy rules: one priority per direction, so sets shared at one place.
        rules.push(r() < 0.35 ? { ...x, priority: { stage: 1, tier: 0, policy: 0, rule: 0, tieBreak: `k8s/${x.id}` } } : x);
      }
    }
    const pf = new PolicyFlows(budget === undefined ? {} : { classBits: budget });
    pf.sync({ rules, isolations: [] });
    const classFlows = pf.flows().filter((f) => isClassFlow(f)).length;
    const bitClauses = pf.flows().filter((f) => /^reg(7|8|1[0-5])=/.test(f.match)).length;
    t.equal(checkSemantics(t, pf, rules, byId, `seed ${seed}`), 0, `seed ${seed}, budget ${budget ?? 'all'}: ${rules.length} rules, ${classFlows} classification flows, ${bitClauses} class clauses`);
    if (budget === 0) t.equal(classFlows + bitClauses, 0, 'no bits: every set keeps per-address flows');
    else t.ok(bitClauses > 0, 'some sets have a class');
  }
});

t.test('a /32 inside a /24 inside a /8, an except, and IPv6: the flows themselves', async (t) => {
  const wide: PeerSet = { id: 'wide', ips: [], cidrs: ['10.0.0.0/8', 'fd00::/16'] };
  // 10.0.0.0/8 except 10.1.2.0/24, as the engine gives it
  const holed: PeerSet = { id: 'holed', ips: [], cidrs: subtractCidrs(parseCidr('10.0.0.0/8')!, [parseCidr('10.1.2.0/24')!]).map(formatCidr) };
  const hosts: PeerSet = { id: 'hosts', ips: ['10.1.2.3', 'fd00::1'], cidrs: ['10.1.2.0/24'] };
  const rules = [wide, holed, hosts].flatMap((s, i) => [rule('Egress', s, 1 + i * 3), rule('Egress', s, 2 + i * 3), rule('Egress', s, 3 + i * 3)]);
  const pf = new PolicyFlows();
  pf.sync({ rules, isolations: [] });
  const sets = new Map([wide, holed, hosts].map((s) => [s.id, s]));
  t.equal(checkSemantics(t, pf, rules, sets, 'fixed sets'), 0, 'every probe right');
  const flows = pf.flows();
  const at = (addr: string) => classify(flows, 'DstAddressClass', addr);
  const bitOf = (s: PeerSet) => {
    const f = flows.find((x) => x.priority === priorities.get(rules.find((r) => r.peerSet === s.id)!.id) && /^reg1[2-5]=/.test(x.match))!;
    const m = /reg(\d+)=(0x[0-9a-f]+)/.exec(f.match)!;
    return { reg: Number(m[1]), bit: Number(m[2]) };
  };
  const has = (regs: Map<number, number>, s: PeerSet) => ((regs.get(bitOf(s).reg) ?? 0) & bitOf(s).bit) !== 0;
  t.same([has(at('10.1.2.3'), wide), has(at('10.1.2.3'), holed), has(at('10.1.2.3'), hosts)], [true, false, true], '/32 in the except: wide and hosts, not holed');
  t.same([has(at('10.1.2.9'), wide), has(at('10.1.2.9'), holed), has(at('10.1.2.9'), hosts)], [true, false, true], 'the /24 (hosts) inside the except');
  t.same([has(at('10.9.0.1'), wide), has(at('10.9.0.1'), holed), has(at('10.9.0.1'), hosts)], [true, true, false], 'outside the except: wide and holed');
  t.same([has(at('fd00::1'), wide), has(at('fd00::1'), hosts), has(at('fd00::2'), hosts)], [true, true, false], 'IPv6 host inside the IPv6 block');
  const f32 = flows.find((f) => f.table === 'DstAddressClass' && f.match === 'ip,nw_dst=10.1.2.3')!;
  t.equal(f32.priority, 132, 'priority = base + prefix length');
  t.match(f32.actions, /goto_table:AntreaPolicyEgressRule$/, 'then on to the egress policy table');
  t.equal(flows.filter((f) => isClassFlow(f, /^Src/)).length, 0, 'no ingress rule: no source classes');
});

t.test('a deliberately broken folding (bits of the prefixes around ignored) is caught', async (t) => {
  const proto = ClassTable.prototype as unknown as { flowOf: (text: string) => { prefix: unknown; bits: number[] } | undefined };
  const real = proto.flowOf;
  const table = new ClassTable();
  const seen = new Set<string>();
  table.add(classPrefix('10.0.0.0/8')!, 1, seen);
  table.add(classPrefix('10.1.2.3')!, 2, seen);
  t.same(table.flowOf('10.1.2.3')?.bits, [1, 2], 'the /32 carries the /8 class too');
  t.same([...seen].sort(), ['10.0.0.0/8', '10.1.2.3']);
  proto.flowOf = function (this: unknown, text: string) {
    const f = real.call(this, text);
    return f && { ...f, bits: f.bits.slice(-1) };
  };
  try {
    const outer: PeerSet = { id: 'outer', ips: [], cidrs: ['10.0.0.0/8', '10.9.0.1/32'] };
    const inner: PeerSet = { id: 'inner', ips: ['10.1.2.3', '10.1.2.4'], cidrs: [] };
    const rules = [outer, outer, outer, inner, inner, inner].map((s, i) => rule('Ingress', s, i + 1));
    const pf = new PolicyFlows();
    pf.sync({ rules, isolations: [] });
    t.equal(pf.flows().filter((f) => /^reg(7|8|10|11)=/.test(f.match)).length, 6, 'both sets have a class');
    let failures = 0;
    const fake: Reporter = { fail: () => failures++ };
    checkSemantics(fake, pf, rules, new Map([outer, inner].map((s) => [s.id, s])), 'broken');
    t.ok(failures > 0, `the semantic check fails (${failures} wrong probes)`);
  } finally {
    proto.flowOf = real;
  }
});

t.test('bit allocation: a function of the candidates, stable under unrelated ones, bounded by the budget', async (t) => {
  const c = (key: string, side: 'src' | 'dst' = 'dst', places = 3, size = 10) => ({ key, side, places, size });
  const a = allocateClassBits([c('a'), c('b'), c('c')]);
  t.same(allocateClassBits([c('c'), c('b'), c('a')]), a, 'order of the candidates does not matter');
  const more = allocateClassBits([c('a'), c('b'), c('c'), c('d'), c('e', 'src')]);
  for (const k of ['a', 'b', 'c']) t.equal(more.get(k), a.get(k), `${k} keeps its bit when others come`);
  t.equal(allocateClassBits([c('x', 'dst', 1, 100), c('y', 'dst', 5, 1)]).size, 0, 'one place or one prefix: no gain, no bit');
  // collisions: every key hashes to bit 0; probed in key order
  const same = allocateClassBits([c('b'), c('a'), c('c')], 128, () => 0);
  t.same([same.get('a'), same.get('b'), same.get('c')], [0, 1, 2]);
  // budget: the most gain first
  const tight = allocateClassBits([c('small', 'dst', 2, 3), c('big', 'dst', 9, 100), c('mid', 'dst', 3, 10)], 2);
  t.same([...tight.keys()].sort(), ['big', 'mid']);
  t.ok([...tight.values()].every((b) => b >= 0 && b < 2));
  t.throws(() => allocateClassBits([], 129), /address class budget/);
});

t.test('incremental: a member that comes or goes changes one classification flow; a new rule on a set adds one peer flow', async (t) => {
  const set: PeerSet = { id: 'pods', ips: Array.from({ length: 50 }, (_, i) => `10.2.0.${i + 1}`), cidrs: [] };
  const rules = [rule('Ingress', set, 1), rule('Ingress', set, 2), rule('Ingress', set, 3)];
  const pf = new PolicyFlows();
  const first = pf.sync({ rules, isolations: [] });
  t.equal(first.add.filter((f) => isClassFlow(f)).length, 50, 'one classification flow per address');
  t.equal(first.add.filter((f) => /^reg(7|8|10|11)=/.test(f.match)).length, 3, 'one peer flow per rule');
  const grown: PeerSet = { ...set, ips: [...set.ips, '10.2.0.99'] };
  const next = rules.map((r) => ({ ...r, peers: { ips: [...grown.ips].sort(), cidrs: [], services: [] } }));
  const d = pf.sync({ rules: next, isolations: [] }, new Set(next.map((r) => r.ruleId)));
  t.same(d.remove, [], 'nothing removed');
  t.same(d.add.map((f) => `${f.table} ${f.match}`), ['SrcAddressClass ip,nw_src=10.2.0.99'], 'one flow for the address that came');
  const fourth = { ...rule('Ingress', grown, 4), peers: next[0]!.peers };
  const d2 = pf.sync({ rules: [...next, fourth], isolations: [] }, new Set([fourth.ruleId]));
  t.equal(d2.add.filter((f) => isClassFlow(f)).length, 0, 'a new rule on the set: no classification flow');
  t.equal(d2.add.filter((f) => /^reg(7|8|10|11)=/.test(f.match)).length, 1, 'and one peer flow');
  t.equal(d2.remove.length, 0);
  const shrunk = next.map((r) => ({ ...r, peers: { ips: r.peers.ips.filter((a) => a !== '10.2.0.7'), cidrs: [], services: [] } }));
  const fourthShrunk = { ...fourth, peers: shrunk[0]!.peers };
  const d3 = pf.sync({ rules: [...shrunk, fourthShrunk], isolations: [] }, new Set([...shrunk, fourthShrunk].map((r) => r.ruleId)));
  t.same([d3.add.length, d3.remove.map((f) => f.match)], [0, ['ip,nw_src=10.2.0.7']], 'one flow for the address that went');
  // a restart compiles the same flows
  const fresh = new PolicyFlows();
  fresh.sync({ rules: [...shrunk, fourthShrunk], isolations: [] });
  t.same(fresh.flows().map((f) => f.cookie), pf.flows().map((f) => f.cookie), 'a full compile gives the same cookies');
});

t.test('a set shared by rules at one place (Kubernetes NetworkPolicy rules) gets a bit: a rule that comes or goes rewrites one flow, not one per address', async (t) => {
  const set: PeerSet = { id: 'monitoring', ips: Array.from({ length: 40 }, (_, i) => `10.3.0.${i + 1}`), cidrs: ['10.9.0.0/24'] };
  const k8s = (n: number): NodeRule => {
    const r = rule('Ingress', set, 0);
    return { ...r, ref: { kind: 'NetworkPolicy', namespace: 'x', name: `np-${n}`, rule: 'ingress[0]' }, priority: { stage: 1, tier: 0, policy: 0, rule: 0, tieBreak: `x/np-${n}` } };
  };
  const rules = [k8s(1), k8s(2)];
  const pf = new PolicyFlows();
  pf.sync({ rules, isolations: [] });
  t.equal(pf.flows().filter((f) => isClassFlow(f)).length, 41, 'the set has a bit: one classification flow per prefix');
  t.equal(pf.flows().filter((f) => f.table === 'IngressRule' && /nw_src=10\.3\./.test(f.match)).length, 0, 'and no per-address peer flow');
  t.equal(checkSemantics(t, pf, rules, new Map([[set.id, set]]), 'two rules'), 0, 'both rules match exactly their set');
  const third = k8s(3);
  const d = pf.sync({ rules: [...rules, third], isolations: [] }, new Set([third.ruleId]));
  t.equal(d.add.filter((f) => isClassFlow(f)).length, 0, 'a third rule on the set: no classification flow changes');
  const peerFlows = (fs: Flow[]) => fs.filter((f) => /^reg(7|8|10|11)=/.test(f.match));
  t.same([peerFlows(d.add).length, peerFlows(d.remove).length], [1, 1], 'the one peer flow of the place is rewritten with the new conjunction');
  t.ok(d.add.length + d.remove.length < 10, `the change is a few flows (${d.add.length} added, ${d.remove.length} removed), not two per address`);
  t.equal(checkSemantics(t, pf, [...rules, third], new Map([[set.id, set]]), 'three rules'), 0, 'all three match exactly their set');
  const d2 = pf.sync({ rules: [rules[0]!, third], isolations: [] }, new Set([rules[1]!.ruleId]));
  t.ok(d2.add.length + d2.remove.length < 10, `a rule that goes: ${d2.add.length} added, ${d2.remove.length} removed`);
  const fresh = new PolicyFlows();
  fresh.sync({ rules: [rules[0]!, third], isolations: [] });
  t.same(fresh.flows().map((f) => f.cookie), pf.flows().map((f) => f.cookie), 'a full compile gives the same cookies');
  // Down to one rule: the set saves nothing any more and goes back to per-address flows.
  const alone = new PolicyFlows();
  alone.sync({ rules: [rules[0]!], isolations: [] });
  t.equal(alone.flows().filter((f) => isClassFlow(f)).length, 0, 'one rule: no class');
  const d3 = pf.sync({ rules: [rules[0]!], isolations: [] }, new Set([third.ruleId]));
  t.ok(d3.remove.length > 0, 'the last but one rule going removes the class');
  t.same(pf.flows().map((f) => f.cookie), alone.flows().map((f) => f.cookie), 'and leaves exactly the flows of a full compile');
  t.equal(checkSemantics(t, pf, [rules[0]!], new Map([[set.id, set]]), 'one rule'), 0, 'the remaining rule matches exactly its set');
});

t.test('sets without a class identity, or used at one place, keep per-address flows', async (t) => {
  const set: PeerSet = { id: 'pods', ips: ['10.2.0.1', '10.2.0.2', '10.2.0.3'], cidrs: [] };
  const one = new PolicyFlows();
  one.sync({ rules: [rule('Egress', set, 1)], isolations: [] });
  t.equal(one.flows().filter((f) => isClassFlow(f)).length, 0, 'one rule: no class');
  const anon = [rule('Egress', set, 1), rule('Egress', set, 2)].map(({ peerSet: _drop, ...r }) => r);
  const pf = new PolicyFlows();
  pf.sync({ rules: anon, isolations: [] });
  t.equal(pf.flows().filter((f) => isClassFlow(f)).length, 0, 'no peerSet (named ports on the peers): no class');
  t.equal(pf.flows().filter((f) => /nw_dst=10\.2\.0\./.test(f.match)).length, 6, 'per-address flows per rule');
});

t.test('deltas applied in turn are flows() and a fresh compile, through members, nested CIDRs, rules and bits that move', async (t) => {
  // Classification flows are not kept by the compiler: the flow a delta removes is built again from
  // what its class table recorded. Applied in turn, the deltas must name exactly the installed flows.
  const rnd = rng(11);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rnd() * list.length)]!;
  const pool = [...Array.from({ length: 12 }, (_, i) => `10.5.0.${i + 1}`), '10.5.1.7', 'fd00:5::1', 'fd00:5::2'];
  const cidrPool = ['10.5.0.0/24', '10.5.0.0/29', '10.0.0.0/8', '10.5.0.4/30', 'fd00:5::/64'];
  const sets: PeerSet[] = ['a', 'b', 'c', 'd'].map((id) => ({ id, ips: [], cidrs: [] }));
  let rules: { r: NodeRule; set: PeerSet }[] = [];
  // Three bits for four sets: bits move as sets gain and lose users.
  const pf = new PolicyFlows({ classBits: 3 });
  const installed = new Map<string, Flow>();
  let problems = 0;
  let classChanges = 0;
  for (let step = 0; step < 250; step++) {
    const op = rnd();
    const set = pick(sets);
    if (op < 0.35) {
      const ip = pick(pool);
      set.ips = set.ips.includes(ip) ? set.ips.filter((x) => x !== ip) : [...set.ips, ip];
    } else if (op < 0.55) {
      const c = pick(cidrPool);
      set.cidrs = set.cidrs.includes(c) ? set.cidrs.filter((x) => x !== c) : [...set.cidrs, c];
    } else if (op < 0.8 || rules.length === 0) {
      rules.push({ r: rule(rnd() < 0.5 ? 'Ingress' : 'Egress', set, 1 + Math.floor(rnd() * 5)), set });
    } else {
      rules = rules.filter((x) => x !== pick(rules));
    }
    const input = rules.map(({ r, set: s }) => ({ ...r, peers: { ips: [...s.ips].sort(), cidrs: [...s.cidrs].sort(), services: [] } }));
    const d = pf.sync({ rules: input, isolations: [] }, new Set(input.map((r) => r.ruleId)));
    for (const f of d.remove) {
      if (isClassFlow(f)) classChanges++;
      if (installed.delete(f.cookie)) continue;
      problems++;
      t.fail(`step ${step}: removes ${f.table} ${f.match} ${f.actions}, which is not installed`);
    }
    for (const f of d.add) {
      if (isClassFlow(f)) classChanges++;
      if (!installed.has(f.cookie)) {
        installed.set(f.cookie, f);
        continue;
      }
      problems++;
      t.fail(`step ${step}: adds ${f.table} ${f.match}, which is installed already`);
    }
    const cookies = (list: Iterable<Flow>) => [...list].map((f) => f.cookie).sort().join('\n');
    const fresh = new PolicyFlows({ classBits: 3 });
    fresh.sync({ rules: input, isolations: [] });
    const byTable: Record<string, number> = {};
    for (const f of installed.values()) byTable[f.table] = (byTable[f.table] ?? 0) + 1;
    const counted = JSON.stringify(Object.entries(pf.countByTable()).sort()) === JSON.stringify(Object.entries(byTable).sort());
    if (cookies(installed.values()) !== cookies(pf.flows()) || cookies(pf.flows()) !== cookies(fresh.flows()) || pf.size !== installed.size || !counted) {
      problems++;
      t.same(cookies(installed.values()), cookies(fresh.flows()), `step ${step}: the deltas lead to a fresh compile's flows`);
      t.same(cookies(pf.flows()), cookies(fresh.flows()), `step ${step}: flows() is a fresh compile's`);
      t.equal(pf.size, installed.size, `step ${step}: size counts the flows`);
      t.same(pf.countByTable(), byTable, `step ${step}: countByTable counts the flows per table`);
    }
  }
  t.equal(problems, 0, 'every delta applied to what the ones before installed; flows(), size and countByTable agree with them and with a fresh compile');
  t.ok(classChanges > 50, `classification flows came and went (${classChanges} in the deltas)`);
});

t.test('a class table keeps a prefix no class lists until its flow is shown gone', async (t) => {
  const table = new ClassTable();
  const touched = new Set<string>();
  table.add(classPrefix('10.0.0.0/8')!, 1, touched);
  table.add(classPrefix('10.1.2.3')!, 2, touched);
  table.show('10.1.2.3', 'A');
  table.show('10.0.0.0/8', 'B');
  t.equal(table.shownCount, 2);
  table.remove(classPrefix('10.1.2.3')!, 2, touched);
  t.equal(table.flowOf('10.1.2.3'), undefined, 'no class lists it: no flow');
  t.equal(table.shown('10.1.2.3'), 'A', 'but what was shown is known, to remove it');
  table.show('10.1.2.3', undefined);
  t.equal(table.shown('10.1.2.3'), undefined);
  t.equal(table.shownCount, 1);
  t.same([...table.shownFlows()].map((f) => [f.prefix.text, f.actions]), [['10.0.0.0/8', 'B']], 'and it is gone');
  t.throws(() => table.show('10.9.9.9', 'C'), /no class lists it/, 'a prefix no class lists cannot be shown');
  // A CIDR that leaves stops lending its bits to the prefixes inside it, and comes back with them.
  table.add(classPrefix('10.1.2.3')!, 2, touched);
  t.same(table.flowOf('10.1.2.3')?.bits, [1, 2]);
  table.remove(classPrefix('10.0.0.0/8')!, 1, touched);
  t.same(table.flowOf('10.1.2.3')?.bits, [2], 'the /8 no longer listed');
  table.add(classPrefix('10.0.0.0/8')!, 3, touched);
  t.same(table.flowOf('10.1.2.3')?.bits, [2, 3], 'listed again, with its new bit');
});

t.test('host prefixes listed by the same classes, showing the same flow, share one entry; a change to one is its own', async (t) => {
  const table = new ClassTable();
  const touched = new Set<string>();
  const hosts = Array.from({ length: 50 }, (_, i) => `10.2.0.${i + 1}`);
  // Bits listed in different orders: the same classes.
  hosts.forEach((h, i) => {
    for (const b of i % 2 === 0 ? [3, 7, 1] : [1, 3, 7]) table.add(classPrefix(h)!, b, touched);
  });
  for (const h of hosts) table.show(h, 'A');
  t.equal(table.sharedEntries, 1, '50 prefixes, one entry');
  table.add(classPrefix(hosts[0]!)!, 9, touched);
  t.same(table.flowOf(hosts[0]!)?.bits, [1, 3, 7, 9], 'the changed prefix has its new bit');
  t.same(table.flowOf(hosts[1]!)?.bits, [1, 3, 7], 'the others are as they were');
  table.show(hosts[0]!, 'B');
  t.equal(table.sharedEntries, 2, 'shown again, it shares an entry of its own kind');
  t.equal(table.shown(hosts[1]!), 'A');
  table.remove(classPrefix(hosts[0]!)!, 9, touched);
  table.show(hosts[0]!, 'A');
  t.equal(table.sharedEntries, 1, 'back with the others: the entry it left is gone');
  for (const h of hosts) for (const b of [1, 3, 7]) table.remove(classPrefix(h)!, b, touched);
  t.same(table.flowOf(hosts[5]!), undefined, 'no class lists them');
  t.equal(table.shown(hosts[5]!), 'A', 'what was shown stays until shown gone');
  for (const h of hosts) table.show(h, undefined);
  t.equal(table.sharedEntries, 0, 'every prefix gone: nothing is held');
  t.equal(table.shownCount, 0);
});
