/**
 * nodeVerdict (daemon/policy/node-verdict.ts) against the reference evaluator: random clusters
 * (Pods on two Nodes with named ports, a Service), random policies of every kind through the real
 * normalizers (Kubernetes NetworkPolicy, Antrea ClusterNetworkPolicy/NetworkPolicy with static and
 * custom tiers, Allow/Drop/Reject/Pass, ipBlocks, nodeSelector, named and source ports, toServices;
 * AdminNetworkPolicy and BaselineAdminNetworkPolicy; relative peers), one standalone engine per
 * Node. For every probe with a local side, the verdicts computed from the node rule set alone equal
 * the evaluator's `explain().sides` for the local sides, deciding rule included. Mutated rule sets
 * (Pass ignored, baseline moved ahead, isolations forgotten) must disagree, so the comparison can
 * see precedence mistakes.
 */
import t from 'tap';
import { serviceBackends } from '../../daemon/policy/endpoints.js';
import type { NodeIsolation, NodeRule } from '../../daemon/policy/internal.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import { decidedByOf, type NodeConnection, type NodeSideVerdict, NodeVerdictError, NodeVerdicts, nodeVerdict, toSideDecision } from '../../daemon/policy/node-verdict.js';
import type { Probe } from '../../daemon/policy/types.js';
import { type AddressList, SortedList } from '../../daemon/policy/sorted-list.js';
import { rng } from './policy-core-helpers.js';
import { CLUSTER_IPS, EXTERNAL, engineFor, NODES, PORTS, randomCluster } from './policy-node-verdict-helpers.js';

interface Tally {
  probes: number;
  sides: number;
  verdicts: Record<string, number>;
  deciders: Record<string, number>;
  passed: number;
  mismatches: string[];
  mismatchCount: number;
  /** Service connections the flows decide on the pre-DNAT packet by a toServices Drop/Reject (documented difference). */
  preDnat: number;
  disagree: number;
  noEndpoint: number;
  service: number;
}
const newTally = (): Tally => ({ probes: 0, sides: 0, verdicts: {}, deciders: {}, passed: 0, mismatches: [], mismatchCount: 0, preDnat: 0, disagree: 0, noEndpoint: 0, service: 0 });
const bump = (m: Record<string, number>, k: string) => (m[k] = (m[k] ?? 0) + 1);

function deciderLabel(s: NodeSideVerdict): string {
  const d = s.decidedBy;
  return d.kind === 'rule' ? `stage${d.stage} ${d.action}` : d.kind;
}

/** Compares the local sides of `explain` with ours; returns what differs (empty = the same). */
function compareSides(theirs: { direction: string; pod: string; verdict: string; decidedBy: unknown }[], mine: NodeSideVerdict[], local: (pod: string) => boolean): string[] {
  const out: string[] = [];
  for (const direction of ['Egress', 'Ingress'] as const) {
    const a = theirs.find((s) => s.direction === direction && local(s.pod));
    const b = mine.find((s) => s.direction === direction);
    if (!a && !b) continue;
    // A local Pod no rule or isolation targets: no side here, the default allow there.
    if (a && !b) {
      if (a.verdict !== 'allow' || a.decidedBy !== null) out.push(`${direction}: evaluator ${a.verdict} ${canonicalJson(a.decidedBy)}, no side here`);
      continue;
    }
    if (!a && b) {
      out.push(`${direction}: no local side in the evaluator, here ${b.verdict} ${canonicalJson(b.decidedBy)}`);
      continue;
    }
    if (a!.pod !== b!.target) out.push(`${direction}: evaluator side of ${a!.pod}, here of ${b!.target}`);
    const mineBy = toSideDecision(b!).decidedBy;
    if (a!.verdict !== b!.verdict || canonicalJson(a!.decidedBy) !== canonicalJson(mineBy)) {
      out.push(`${direction}: evaluator ${a!.verdict} ${canonicalJson(a!.decidedBy)}, here ${b!.verdict} ${canonicalJson(mineBy)}`);
    }
  }
  return out;
}

type Mutation = (rules: NodeRule[], isolations: NodeIsolation[]) => { rules: NodeRule[]; isolations: NodeIsolation[] };

/**
 * One seed: both Nodes' engines, `count` random probes between Pods, Nodes, external addresses and
 * the Service, each compared on every Node that has a local side.
 */
function runSeed(seed: number, count: number, tally: Tally, mutate?: Mutation): void {
  const cluster = randomCluster(seed);
  const r = rng(seed * 7919 + 1);
  for (const { name: nodeName, ip: nodeIP } of NODES) {
    const engine = engineFor(nodeName, cluster.objects);
    if (engine.errors().length > 0) throw new Error(`seed ${seed}: invalid generated objects: ${engine.errors().map((e) => `${e.kind} ${e.namespace ?? ""}/${e.name} ${e.field}: ${e.message}`).join('; ')}`);
    let rules = engine.nodeRuleSet();
    let isolations = engine.nodeIsolations();
    if (mutate) ({ rules, isolations } = mutate(rules, isolations));
    const verdicts = new NodeVerdicts(rules, isolations, {
      serviceEndpoints: (ip, protocol, port) => serviceBackends(engine.cluster, ip, protocol, port),
      nodeIPs: [nodeIP],
    });
    const localPods = cluster.pods.filter((p) => p.node === nodeName);
    const local = (pod: string) => engine.cluster.pods.get(pod)?.nodeName === nodeName;
    const anyAddress = () => {
      const roll = r.next();
      if (roll < 0.75) return r.pick(cluster.pods).ip;
      if (roll < 0.9) return r.pick(NODES).ip;
      return r.pick(EXTERNAL);
    };
    for (let i = 0; i < count; i++) {
      // one end local, so every probe has a side here
      const localEnd = r.pick(localPods).ip;
      const other = anyAddress();
      const [src, dst] = r.next() < 0.5 ? [localEnd, other] : [other, localEnd];
      const [protocol, port] = r.pick(PORTS);
      const sourcePort = r.pick([1025, 32000, 50000]);
      const toService = r.next() < 0.15;
      const [p, n] = toService ? r.pick([['TCP', 80], ['UDP', 53]] as const) : [protocol, port];
      const probe: Probe = { from: `ip:${toService ? localEnd : src}`, to: `ip:${toService ? (r.next() < 0.9 ? cluster.clusterIP : r.pick(CLUSTER_IPS)) : dst}`, protocol: p, port: n, family: 4, ...(p === 'ICMP' ? {} : { sourcePort }) };
      const conn: NodeConnection = { src: probe.from.slice(3), dst: probe.to.slice(3), protocol: p, port: n, ...(p === 'ICMP' ? {} : { sourcePort }) };
      tally.probes++;
      const explained = engine.explain(probe);
      let mine: NodeSideVerdict[];
      let theirs = explained.sides;
      if (toService) {
        const sv = verdicts.judgeService(conn);
        const via = / via endpoint ([^;]+)/.exec(` ${explained.result.note ?? ''}`)?.[1];
        // Which endpoint the connection reached is unknown: the sweep keeps these (judge.ts).
        if (!via) {
          if (sv.sides.length > 0) {
            tally.mismatchCount++;
            tally.mismatches.push(`seed ${seed} ${nodeName} ${probe.to}: no endpoint in the evaluator, sides here`);
          }
          tally.noEndpoint++;
          continue;
        }
        if (explained.result.note?.includes('endpoints disagree')) {
          tally.disagree++;
          continue;
        }
        tally.service++;
        const viaIp = engine.cluster.pods.get(via)!.ips[0];
        mine = sv.endpoints.find((e) => e.ip === viaIp)?.sides ?? [];
        // The documented difference: the flows decide a toServices Drop/Reject on the pre-DNAT
        // packet, even where a rule of higher precedence decides the endpoint in the evaluator.
        const e = mine.find((s) => s.direction === 'Egress');
        const ev = theirs.find((s) => s.direction === 'Egress');
        const d = e?.decidedBy;
        if (e && ev && d?.kind === 'rule' && d.action !== 'Allow' && d.action !== 'Pass' && rules.find((x) => x.id === d.id)?.peers !== 'any' &&
            (rules.find((x) => x.id === d.id)!.peers as { services: { ip: string }[] }).services.some((s) => s.ip === conn.dst) &&
            canonicalJson(ev.decidedBy) !== canonicalJson(decidedByOf(e))) {
          tally.preDnat++;
          theirs = theirs.filter((s) => s.direction !== 'Egress');
          mine = mine.filter((s) => s.direction !== 'Egress');
        }
      } else {
        mine = verdicts.judge(conn);
      }
      const diff = compareSides(theirs, mine, local);
      if (diff.length > 0) {
        tally.mismatchCount++;
        if (tally.mismatches.length < 5) tally.mismatches.push(`seed ${seed} ${nodeName} ${probe.protocol} ${probe.from} -> ${probe.to}:${probe.port} sport ${probe.sourcePort ?? '-'}: ${diff.join('; ')}`);
        continue;
      }
      for (const s of mine) {
        tally.sides++;
        bump(tally.verdicts, s.verdict);
        bump(tally.deciders, deciderLabel(s));
        if (s.passed.length > 0) tally.passed++;
      }
    }
  }
}

const SEEDS = Array.from({ length: 24 }, (_, i) => 1000 + i * 37);

t.test('random clusters: the node rule set alone gives the evaluator\'s local sides', async (t) => {
  const tally = newTally();
  for (const seed of SEEDS) runSeed(seed, 250, tally);
  t.comment(`${tally.probes} probes over ${SEEDS.length} seeds x 2 nodes; ${tally.sides} local sides compared`);
  t.comment(`verdicts: ${canonicalJson(tally.verdicts)}`);
  t.comment(`decided by: ${canonicalJson(tally.deciders)}; sides through a Pass: ${tally.passed}`);
  t.comment(`Service probes: ${tally.service} compared, ${tally.noEndpoint} to no endpoint; ${tally.preDnat} decided before DNAT by a toServices Drop/Reject (documented difference), ${tally.disagree} with disagreeing endpoints skipped`);
  t.equal(tally.mismatchCount, 0, 'no probe differs');
  t.same(tally.mismatches, [], 'the first that differ');
  // The walk exercised every outcome (not a vacuous comparison).
  for (const v of ['allow', 'drop', 'reject']) t.ok((tally.verdicts[v] ?? 0) > 50, `${v}: ${tally.verdicts[v] ?? 0} sides`);
  for (const d of ['stage0 Allow', 'stage0 Drop', 'stage0 Reject', 'stage1 Allow', 'isolation', 'stage2 Allow', 'stage2 Drop', 'default']) t.ok((tally.deciders[d] ?? 0) > 10, `decided by ${d}: ${tally.deciders[d] ?? 0}`);
  t.ok(tally.passed > 50, `sides that went through a Pass: ${tally.passed}`);
});

t.test('mutated precedence is caught by the comparison', async (t) => {
  const mutations: Record<string, Mutation> = {
    'Pass ignored (the walk goes on in stage 0)': (rules, isolations) => ({ rules: rules.filter((x) => x.action !== 'Pass'), isolations }),
    'baseline evaluated first': (rules, isolations) => ({ rules: rules.map((x) => (x.priority.stage === 2 ? { ...x, priority: { ...x.priority, stage: 0 as const, tier: 0 } } : x)), isolations }),
    'isolation forgotten': (rules) => ({ rules, isolations: [] }),
    'Reject taken for Drop': (rules, isolations) => ({ rules: rules.map((x) => (x.action === 'Reject' ? { ...x, action: 'Drop' as const } : x)), isolations }),
  };
  for (const [name, mutate] of Object.entries(mutations)) {
    const tally = newTally();
    for (const seed of SEEDS.slice(0, 8)) runSeed(seed, 150, tally, mutate);
    t.ok(tally.mismatchCount > 0, `${name}: ${tally.mismatchCount} probes differ`);
  }
});

t.test('hand-written cases', async (t) => {
  const ref = (name: string, tier?: string) => ({ kind: 'AntreaClusterNetworkPolicy' as const, name, rule: name, ...(tier ? { tier } : {}) });
  const base = (id: string, over: Partial<NodeRule>): NodeRule => ({
    id, ruleId: id, ref: ref(id, 'application'), direction: 'Egress', action: 'Allow', order: 0,
    priority: { stage: 0, tier: 250, policy: 1, rule: 0, tieBreak: id },
    targets: [{ kind: 'pod', ref: 'x/a', ips: ['10.0.0.1'] }], peers: 'any', ports: [], ...over,
  });
  const conn = (over: Partial<NodeConnection> = {}): NodeConnection => ({ src: '10.0.0.1', dst: '10.0.0.2', protocol: 'TCP', port: 80, sourcePort: 40000, ...over });

  await t.test('Pass in stage 0 skips to Kubernetes rules; isolation drops; baseline never reached', async (t) => {
    const rules = [
      base('pass', { action: 'Pass', peers: { ips: ['10.0.0.2'], cidrs: [], services: [] } }),
      base('drop', { action: 'Drop', priority: { stage: 0, tier: 250, policy: 2, rule: 0, tieBreak: 'drop' } }),
      base('bl', { action: 'Allow', priority: { stage: 2, tier: 253, policy: 1, rule: 0, tieBreak: 'bl' } }),
    ];
    const iso: NodeIsolation = { id: 'iso', ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'np', rule: '' }, direction: 'Egress', targets: [{ kind: 'pod', ref: 'x/a', ips: ['10.0.0.1'] }] };
    const [s] = nodeVerdict(rules, [iso], conn());
    t.equal(s!.verdict, 'drop');
    t.same(s!.decidedBy, { kind: 'isolation', id: 'iso', ref: iso.ref });
    t.same(s!.passed, ['pass']);
    t.same(decidedByOf(s!), { kind: 'K8sNetworkPolicyIsolation', namespace: 'x', name: 'np', direction: 'Egress', action: 'IsolationDrop' });
    // another peer: the Drop decides
    const [d] = nodeVerdict(rules, [iso], conn({ dst: '10.0.0.3' }));
    t.equal(d!.verdict, 'drop');
    t.equal(d!.decidedBy.kind === 'rule' && d!.decidedBy.id, 'drop');
    // without isolation the baseline allows
    const [b] = nodeVerdict(rules, [], conn());
    t.equal(b!.decidedBy.kind === 'rule' && b!.decidedBy.id, 'bl');
  });

  await t.test('ports, source ports, CIDRs, ICMP, unresolved names, Node targets', async (t) => {
    const rules = [
      base('src', { action: 'Reject', peers: { ips: [], cidrs: ['10.0.0.0/30'], services: [] }, ports: [{ protocol: 'TCP', port: 80, sourcePort: 1000, sourceEndPort: 2000 }] }),
      base('icmp', { action: 'Drop', priority: { stage: 0, tier: 250, policy: 2, rule: 0, tieBreak: 'icmp' }, ports: [{ protocol: 'ICMP', icmpType: 8 }] }),
      base('named', { action: 'Drop', priority: { stage: 0, tier: 250, policy: 3, rule: 0, tieBreak: 'named' }, ports: [{ protocol: 'TCP', port: 'http' }] }),
      base('host', { action: 'Drop', priority: { stage: 0, tier: 250, policy: 4, rule: 0, tieBreak: 'host' }, targets: [{ kind: 'node', ref: 'node-1', ips: ['10.0.0.1'] }] }),
    ];
    t.equal(nodeVerdict(rules, [], conn({ sourcePort: 1500 }))[0]!.verdict, 'reject');
    t.equal(nodeVerdict(rules, [], conn({ sourcePort: 2500 }))[0]!.decidedBy.kind, 'default', 'source port outside; the named port never matches; a Node target is not judged');
    t.equal(nodeVerdict(rules, [], conn({ dst: '10.0.0.9', sourcePort: 1500 }))[0]!.decidedBy.kind, 'default', 'outside the CIDR');
    t.equal(nodeVerdict(rules, [], conn({ protocol: 'ICMP' }))[0]!.verdict, 'drop', 'echo request by default');
    t.equal(nodeVerdict(rules, [], conn({ protocol: 'ICMP', icmpType: 0 }))[0]!.verdict, 'allow', 'echo reply is another type');
    t.same(nodeVerdict(rules, [], conn({ dst: '10.0.0.1' })), [], 'loopback: no side');
  });

  await t.test('IPv6: addresses compared in canonical form, CIDRs of their own family', async (t) => {
    const rules = [
      base('v6', { action: 'Drop', targets: [{ kind: 'pod', ref: 'x/a', ips: ['10.0.0.1', 'fd00::1'] }], peers: { ips: [], cidrs: ['fd00:1::/64', '10.9.0.0/16'], services: [] } }),
    ];
    const v6 = (over: Partial<NodeConnection>) => conn({ src: 'FD00:0::1', dst: 'fd00:1::5', ...over });
    t.equal(nodeVerdict(rules, [], v6({}))[0]!.verdict, 'drop');
    t.equal(nodeVerdict(rules, [], v6({}))[0]!.target, 'x/a');
    t.equal(nodeVerdict(rules, [], v6({ dst: 'fd00:2::5' }))[0]!.verdict, 'allow');
    t.equal(nodeVerdict(rules, [], v6({ protocol: 'ICMP', icmpType: 128 }))[0]!.verdict, 'drop');
  });

  await t.test('peer lists: a SortedList of canonical addresses answered as it is, other lists through their canonical forms', async (t) => {
    const peers = (ips: AddressList) => ({ ips, cidrs: [], services: [] });
    const sorted = SortedList.from(['10.0.0.2', '10.0.0.7', 'fd00:1::5']);
    // The same addresses, one written long: canonical forms are looked up instead.
    const longForm = SortedList.from(['10.0.0.2', '10.0.0.7', 'fd00:1:0:0::5']);
    const plain = ['fd00:1:0::5', '10.0.0.7', '10.0.0.2'];
    for (const [name, list] of [['sorted', sorted], ['sorted, one long form', longForm], ['array', plain]] as const) {
      const rules = [base('drop', { action: 'Drop', targets: [{ kind: 'pod', ref: 'x/a', ips: ['10.0.0.1', 'fd00::1'] }], peers: peers(list) })];
      t.equal(nodeVerdict(rules, [], conn({ dst: '10.0.0.7' }))[0]!.verdict, 'drop', `${name}: a member`);
      t.equal(nodeVerdict(rules, [], conn({ dst: '10.0.0.3' }))[0]!.verdict, 'allow', `${name}: not a member`);
      t.equal(nodeVerdict(rules, [], conn({ src: 'fd00::1', dst: 'FD00:1::5' }))[0]!.verdict, 'drop', `${name}: an IPv6 member asked in another form`);
    }
  });

  await t.test('host traffic is exempt from ingress rules', async (t) => {
    const rules = [base('in', { direction: 'Ingress', action: 'Drop' })];
    t.equal(nodeVerdict(rules, [], conn({ src: '172.18.0.1', dst: '10.0.0.1' }))[0]!.verdict, 'drop');
    t.same(nodeVerdict(rules, [], conn({ src: '172.18.0.1', dst: '10.0.0.1' }), { nodeIPs: ['172.18.0.1'] }), []);
  });

  await t.test('Services: a toServices Drop decides before DNAT; an Allow keeps its place after', async (t) => {
    const svc = { ips: [], cidrs: [], services: [{ ip: '10.96.0.10', protocol: 'TCP', port: 80 }] };
    const resolve = (ip: string, protocol: string, port: number) => (ip === '10.96.0.10' && protocol === 'TCP' && port === 80 ? [{ ip: '10.0.0.2', port: 8080 }] : []);
    // Allow to the endpoint first, toServices Drop second: the flows drop the pre-DNAT packet.
    const dropping = [base('allow-ep', { peers: { ips: ['10.0.0.2'], cidrs: [], services: [] } }), base('svc-drop', { action: 'Drop', peers: svc, priority: { stage: 0, tier: 250, policy: 2, rule: 0, tieBreak: 's' } })];
    const v = new NodeVerdicts(dropping, [], { serviceEndpoints: resolve });
    const s = v.judgeService(conn({ dst: '10.96.0.10', port: 80 }));
    t.equal(s.endpoints.length, 1);
    t.equal(s.sides[0]!.decidedBy.kind === 'rule' && s.sides[0]!.decidedBy.id, 'svc-drop');
    // toServices Allow before a drop-all: allowed after DNAT too
    const allowing = [base('svc-allow', { peers: svc }), base('drop-all', { action: 'Drop', priority: { stage: 0, tier: 250, policy: 2, rule: 0, tieBreak: 'd' } })];
    const a = new NodeVerdicts(allowing, [], { serviceEndpoints: resolve }).judgeService(conn({ dst: '10.96.0.10', port: 80 }));
    t.equal(a.sides[0]!.verdict, 'allow');
    t.equal(a.sides[0]!.decidedBy.kind === 'rule' && a.sides[0]!.decidedBy.id, 'svc-allow');
    // the same endpoint reached directly: the drop-all
    t.equal(new NodeVerdicts(allowing, []).judge(conn({ dst: '10.0.0.2', port: 8080 }))[0]!.verdict, 'drop');
    t.same(new NodeVerdicts(allowing, [], { serviceEndpoints: () => [] }).judgeService(conn({ dst: '10.96.0.10' })), { endpoints: [], sides: [], disagree: false });
  });

  await t.test('bad input is refused with a clear error', async (t) => {
    t.throws(() => nodeVerdict([], [], conn({ src: 'nope' })), NodeVerdictError);
    t.throws(() => nodeVerdict([], [], conn({ dst: 'fd00::1' })), /different families/);
    t.throws(() => nodeVerdict([], [], { src: '10.0.0.1', dst: '10.0.0.2', protocol: 'TCP', port: 80 }), /needs its source port/);
    t.throws(() => nodeVerdict([base('a', {}), base('a', {})], [], conn()), /appears twice/);
    t.throws(() => nodeVerdict([base('c', { peers: { ips: [], cidrs: ['10.0.0.0/40'], services: [] } })], [], conn()), /not a CIDR/);
    t.throws(() => new NodeVerdicts([], []).judgeService(conn({ dst: '10.96.0.10' })), /no Service endpoint resolver/);
  });
});
