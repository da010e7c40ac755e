/**
 * Compiled policy flows for every action, stage and peer/port kind, checked flow by flow on hand-made
 * node rules (the compiler's input contract), plus the static flows and the rule lookup by
 * conjunction id.
 */
import t from 'tap';
import type { Flow } from '../../daemon/flows/flow.js';
import { type NodeIsolation, PolicyFlowError, PolicyFlows, portMatches, staticPolicyFlows } from '../../daemon/flows/policy/compile.js';
import { PRIORITY } from '../../daemon/flows/policy/priorities.js';
import { decodePolicyPuntExtra, policyCopyActions } from '../../daemon/flows/policy/punt.js';
import { tableId } from '../../daemon/flows/tables.js';
import type { NodeRule } from '../../daemon/policy/internal.js';

let seq = 0;
function rule(p: Partial<NodeRule> & Pick<NodeRule, 'direction' | 'action'> & { stage?: 0 | 1 | 2; tier?: number; policy?: number; index?: number }): NodeRule {
  const stage = p.stage ?? 0;
  const id = p.id ?? `r${seq++}`;
  return {
    id,
    ruleId: p.ruleId ?? id,
    ref: p.ref ?? { kind: stage === 1 ? 'NetworkPolicy' : 'AntreaClusterNetworkPolicy', name: `pol-${id}`, rule: `rule-${id}`, ...(stage === 1 ? { namespace: 'x' } : { tier: 'application' }) },
    direction: p.direction,
    action: p.action,
    priority: { stage, tier: p.tier ?? (stage === 1 ? 0 : stage === 2 ? 253 : 250), policy: p.policy ?? 1, rule: p.index ?? 0, tieBreak: `k/${id}` },
    order: 0,
    targets: p.targets ?? [{ ref: 'x/a', ips: ['10.1.0.11'] }, { ref: 'x/b', ips: ['10.1.0.12'] }],
    peers: p.peers ?? { ips: ['10.2.0.21'], cidrs: [], services: [] },
    ports: p.ports ?? [],
    ...(p.logging ? { logging: p.logging } : {}),
  };
}

const compile = (rules: NodeRule[], isolations: NodeIsolation[] = []) => {
  const pf = new PolicyFlows();
  pf.sync({ rules, isolations });
  const staticCookies = new Set(staticPolicyFlows().map((f) => f.cookie));
  return { pf, flows: pf.flows().filter((f) => !staticCookies.has(f.cookie)) };
};
const lines = (flows: Flow[]) => flows.map((f) => `${f.table} ${f.priority} ${f.match} -> ${f.actions}`);
const conjIdOf = (flows: Flow[]) => Number(/conj_id=(\d+)/.exec(flows.find((f) => f.match.startsWith('conj_id='))!.match)![1]);

t.test('static flows: established bypass and the pre-DNAT skip', async (t) => {
  t.same(lines(staticPolicyFlows()), [
    'SrcAddressClass 65000 ct_state=-new+trk,ip -> goto_table:DstAddressClass',
    'SrcAddressClass 65000 ct_state=-new+trk,ipv6 -> goto_table:DstAddressClass',
    'DstAddressClass 65000 ct_state=-new+trk,ip -> goto_table:AntreaPolicyEgressRule',
    'DstAddressClass 65000 ct_state=-new+trk,ipv6 -> goto_table:AntreaPolicyEgressRule',
    'AntreaPolicyEgressRule 65000 ct_state=-new+est+trk,ip -> goto_table:EgressMetric',
    'AntreaPolicyEgressRule 65000 ct_state=-new+est+trk,ipv6 -> goto_table:EgressMetric',
    'AntreaPolicyEgressRule 65000 ct_state=-new+rel+trk,ip -> goto_table:EgressMetric',
    'AntreaPolicyEgressRule 65000 ct_state=-new+rel+trk,ipv6 -> goto_table:EgressMetric',
    'AntreaPolicyIngressRule 65000 ct_state=-new+est+trk,ip -> goto_table:IngressMetric',
    'AntreaPolicyIngressRule 65000 ct_state=-new+est+trk,ipv6 -> goto_table:IngressMetric',
    'AntreaPolicyIngressRule 65000 ct_state=-new+rel+trk,ip -> goto_table:IngressMetric',
    'AntreaPolicyIngressRule 65000 ct_state=-new+rel+trk,ipv6 -> goto_table:IngressMetric',
    'EgressRule 65000 ip,reg0=0x20/0x20 -> goto_table:EgressDefaultRule',
    'EgressRule 65000 ipv6,reg0=0x20/0x20 -> goto_table:EgressDefaultRule',
  ]);
  const pf = new PolicyFlows();
  t.equal(pf.sync({ rules: [], isolations: [] }).add.length, 14, 'an empty rule set still installs them');
  t.same(pf.sync({ rules: [], isolations: [] }), { add: [], remove: [] }, 'and only once');
});

t.test('Kubernetes ingress allow: three clauses (peers, targets, ports) at 200 in IngressRule', async (t) => {
  const r = rule({ direction: 'Ingress', action: 'Allow', stage: 1, peers: { ips: ['10.2.0.21', '10.2.0.22'], cidrs: ['192.168.0.0/16'], services: [] }, ports: [{ protocol: 'TCP', port: 80 }, { protocol: 'UDP', port: 53 }] });
  const { pf, flows } = compile([r]);
  const id = conjIdOf(flows);
  t.same(lines(flows), [
    `IngressRule 200 conj_id=${id} -> set_field:${id}->reg6,goto_table:IngressMetric`,
    `IngressRule 200 ip,nw_dst=10.1.0.11 -> conjunction(${id},2/3)`,
    `IngressRule 200 ip,nw_dst=10.1.0.12 -> conjunction(${id},2/3)`,
    `IngressRule 200 ip,nw_src=10.2.0.21 -> conjunction(${id},1/3)`,
    `IngressRule 200 ip,nw_src=10.2.0.22 -> conjunction(${id},1/3)`,
    `IngressRule 200 ip,nw_src=192.168.0.0/16 -> conjunction(${id},1/3)`,
    `IngressRule 200 tcp,tp_dst=80 -> conjunction(${id},3/3)`,
    `IngressRule 200 udp,tp_dst=53 -> conjunction(${id},3/3)`,
    `IngressMetric 190 ct_state=+new+trk,ip,reg6=${id} -> goto_table:ConntrackCommit`,
    `IngressMetric 180 ct_state=-new+trk,ip,ct_label=0x${id.toString(16)}00000000/0xffffffff00000000 -> goto_table:ConntrackCommit`,
  ]);
  t.same(pf.metricFlows().map((m) => [m.conjId, m.counts]), [[id, 'new'], [id, 'est']], 'the counter flows of the rule: its sessions and their later packets');
  const who = pf.describe(id)!;
  t.same([who.nodeRuleId, who.table, who.priority, who.action, who.direction], [r.id, 'IngressRule', 200, 'Allow', 'Ingress']);
  t.equal(pf.describe(12345), undefined);
});

t.test('stage-0 egress drop: targets by nw_src, peers by nw_dst, never the pre-DNAT packet', async (t) => {
  const r = rule({ direction: 'Egress', action: 'Drop', peers: { ips: [], cidrs: ['0.0.0.0/0', '8.0.0.0/8'], services: [] } });
  const { flows } = compile([r]);
  const id = conjIdOf(flows);
  const p = flows[0]!.priority;
  t.ok(p >= PRIORITY.rangeBottom && p <= PRIORITY.rangeTop);
  t.same(lines(flows), [
    `AntreaPolicyEgressRule ${p} conj_id=${id} -> set_field:${id}->reg5,set_field:0x1000/0x1000->reg0,goto_table:EgressMetric`,
    `AntreaPolicyEgressRule ${p} ip -> conjunction(${id},2/2)`,
    `AntreaPolicyEgressRule ${p} ip,nw_dst=8.0.0.0/8 -> conjunction(${id},2/2)`,
    `AntreaPolicyEgressRule ${p} ip,nw_src=10.1.0.11,reg0=0x0/0x20 -> conjunction(${id},1/2)`,
    `AntreaPolicyEgressRule ${p} ip,nw_src=10.1.0.12,reg0=0x0/0x20 -> conjunction(${id},1/2)`,
    `EgressMetric 200 ip,reg0=0x1000/0x1000,reg5=${id} -> drop`,
  ]);
});

t.test('one dimension: the flows carry the action, no conjunction', async (t) => {
  const eg = compile([rule({ direction: 'Egress', action: 'Drop', peers: 'any' })]).flows;
  const egId = Number(/reg5=(\d+)/.exec(eg.at(-1)!.match)![1]);
  t.same(lines(eg).map((l) => l.replace(/ \d+ /, ' P ')), [
    `AntreaPolicyEgressRule P ip,nw_src=10.1.0.11,reg0=0x0/0x20 -> set_field:${egId}->reg5,set_field:0x1000/0x1000->reg0,goto_table:EgressMetric`,
    `AntreaPolicyEgressRule P ip,nw_src=10.1.0.12,reg0=0x0/0x20 -> set_field:${egId}->reg5,set_field:0x1000/0x1000->reg0,goto_table:EgressMetric`,
    `EgressMetric P ip,reg0=0x1000/0x1000,reg5=${egId} -> drop`,
  ]);
  const ing = compile([rule({ direction: 'Ingress', action: 'Allow', stage: 1, peers: 'any' })]).flows.filter((f) => f.table === 'IngressRule');
  t.match(lines(ing), [/^IngressRule 200 ip,nw_dst=10\.1\.0\.11 -> set_field:\d+->reg6,goto_table:IngressMetric$/, /^IngressRule 200 ip,nw_dst=10\.1\.0\.12 -> set_field:\d+->reg6,goto_table:IngressMetric$/]);
  const anyPeerPorts = compile([rule({ direction: 'Ingress', action: 'Drop', peers: 'any', ports: [{ protocol: 'SCTP', port: 9000 }] })]).flows.filter((f) => f.table !== 'IngressMetric');
  t.equal(anyPeerPorts.length, 4, 'any peer + ports: two target flows, one port flow, one action flow');
  t.ok(anyPeerPorts.some((f) => f.match === 'sctp,tp_dst=9000' && /conjunction\(\d+,2\/2\)/.test(f.actions)), 'ports are clause 2 of 2');
});

t.test('actions: Allow, Pass (stage 0 and 2), Reject, and logging', async (t) => {
  const allow = compile([rule({ direction: 'Egress', action: 'Allow' })]).flows.find((f) => f.match.startsWith('conj_id'))!;
  t.match(allow.actions, /^set_field:\d+->reg5,goto_table:EgressMetric$/, 'allow records the rule (reg5, committed to ct_label) and goes on');
  const pass0 = compile([rule({ direction: 'Ingress', action: 'Pass' })]).flows.find((f) => f.match.startsWith('conj_id'))!;
  t.equal(pass0.actions, 'goto_table:IngressRule', 'stage-0 Pass skips to the Kubernetes table');
  const base = compile([rule({ direction: 'Egress', action: 'Drop', stage: 2 })]).flows.filter((f) => f.match.startsWith('ip,nw_src='));
  t.ok(base.length === 2 && base.every((f) => f.match.endsWith(',reg0=0x0/0x20')), 'baseline egress rules judge the endpoint, not the pre-DNAT packet');
  const pass2 = compile([rule({ direction: 'Ingress', action: 'Pass', stage: 2 })]).flows.find((f) => f.match.startsWith('conj_id'))!;
  t.equal(pass2.actions, 'goto_table:IngressMetric', 'baseline Pass falls through to the default allow');
  t.equal(pass2.table, 'IngressDefaultRule');
  t.ok(pass2.priority < PRIORITY.isolation, 'baseline rules sit below the isolation drops');

  const rej = rule({ direction: 'Ingress', action: 'Reject' });
  const rejFlows = compile([rej]).flows;
  const rejAction = rejFlows.find((f) => f.match.startsWith('conj_id'))!;
  const id = conjIdOf(rejFlows);
  const ud = /userdata=([0-9a-f.]+)/.exec(rejAction.actions)![1]!.split('.').map((x) => parseInt(x, 16));
  t.match(rejAction.actions, /^set_field:0x[0-9a-f]+->reg2,set_field:\d+->reg3,controller\(userdata=01\.02\.[0-9a-f.]+,meter_id=256\),set_field:\d+->reg6,set_field:0x1000\/0x1000->reg0,goto_table:IngressMetric$/, 'reject without logging: op reject only, metered packet-in, then counted and dropped in the Metric table');
  t.same(decodePolicyPuntExtra(Buffer.from(ud.slice(2))), { tableId: tableId('AntreaPolicyIngressRule'), disposition: 2, priority: rejAction.priority, conjId: id });

  const logged = (action: NodeRule['action']) => compile([rule({ direction: 'Ingress', action, logging: { enabled: true, label: 'x' } })]).flows.find((f) => f.match.startsWith('conj_id'))!;
  t.match(logged('Reject').actions, /^set_field:0x[0-9a-f]+->reg2,set_field:\d+->reg3,controller\(userdata=01\.03\.[0-9a-f.]+,meter_id=256\),set_field:\d+->reg6,set_field:0x1000\/0x1000->reg0,goto_table:IngressMetric$/, 'reject + log');
  t.match(logged('Drop').actions, /^set_field:0x[0-9a-f]+->reg2,set_field:\d+->reg3,controller\(userdata=01\.01\.[0-9a-f.]+,meter_id=256\),set_field:\d+->reg6,set_field:0x1000\/0x1000->reg0,goto_table:IngressMetric$/, 'drop + log: punt, then counted and dropped in the Metric table');
  t.match(logged('Allow').actions, /^set_field:0x[0-9a-f]+->reg2,set_field:\d+->reg3,controller\(userdata=01\.01\.[0-9a-f.]+,meter_id=256\),set_field:\d+->reg6,goto_table:IngressMetric$/, 'allow + log: metered copy, then continue');
  t.match(logged('Pass').actions, /^set_field:0x[0-9a-f]+->reg2,set_field:\d+->reg3,controller\(userdata=01\.01\.[0-9a-f]{2}\.03\.[0-9a-f.]+,meter_id=256\),goto_table:IngressRule$/, 'pass + log: disposition 3');
  t.equal(policyCopyActions({ table: 'EgressRule', disposition: 0, priority: 200, conjId: 256 }), `set_field:0x10${tableId('EgressRule').toString(16).padStart(2, '0')}00c8->reg2,set_field:256->reg3,controller(userdata=01.01.${tableId('EgressRule').toString(16).padStart(2, '0')}.00.00.c8.00.00.01.00,meter_id=256)`);
});

t.test('toServices: ClusterIP+port clause, no pre-DNAT exclusion', async (t) => {
  const r = rule({ direction: 'Egress', action: 'Reject', peers: { ips: [], cidrs: [], services: [{ ip: '10.96.0.10', protocol: 'TCP', port: 80 }, { ip: '10.96.0.10', protocol: 'UDP', port: 53 }] } });
  const { flows } = compile([r]);
  const id = conjIdOf(flows);
  t.ok(flows.some((f) => f.match === `conj_id=${id}`), 'action flow');
  t.ok(flows.some((f) => f.match === 'ip,nw_src=10.1.0.11' && f.actions === `conjunction(${id},1/2)`), 'targets clause without reg0 condition: the pre-DNAT packet is the one to judge');
  t.ok(flows.some((f) => f.match === 'tcp,nw_dst=10.96.0.10,tp_dst=80' && f.actions === `conjunction(${id},2/2)`));
  t.ok(flows.some((f) => f.match === 'udp,nw_dst=10.96.0.10,tp_dst=53'));
  t.same(flows.filter((f) => f.table === 'EgressMetric').map((f) => f.match), [`ip,reg0=0x1000/0x1000,reg5=${id}`], 'the pre-DNAT Reject is counted');
  t.equal(flows.length, 6);

  // With the endpoints known, the re-entered post-DNAT packet (from the gateway) matches too.
  const pf = new PolicyFlows();
  pf.sync({ rules: [r], isolations: [], serviceEndpoints: (ip, proto, port) => (ip === '10.96.0.10' && proto === 'TCP' && port === 80 ? [{ ip: '10.1.0.13', port: 8080 }, { ip: '10.2.0.9', port: 8080 }] : []) });
  const post = pf.flows().filter((f) => /^ip,nw_src=10\.1\.0\.1[12],reg0=0x1\/0x2f$/.test(f.match));
  t.equal(post.length, 2, 'post-DNAT targets clause: the Pod source arriving from the gateway, not to a ClusterIP');
  const postId = Number(/conjunction\((\d+),1\/2\)/.exec(post[0]!.actions)![1]);
  t.match(pf.flows().find((f) => f.match === `conj_id=${postId}`)!.actions, /controller\(userdata=01\.02\./, 'same action (Reject)');
  t.same(pf.flows().filter((f) => f.actions.includes(`conjunction(${postId},2/2)`)).map((f) => f.match), ['tcp,nw_dst=10.1.0.13,tp_dst=8080', 'tcp,nw_dst=10.2.0.9,tp_dst=8080']);
  t.equal(pf.describe(postId)?.nodeRuleId, r.id);
  const elsewhere = { rules: [r], isolations: [], serviceEndpoints: (_ip: string, proto: string) => (proto === 'TCP' ? [{ ip: '10.1.0.14', port: 8080 }] : []) };
  t.same(pf.sync(elsewhere, new Set()), { add: [], remove: [] }, 'a rule the dirty ids do not name is not resolved again (the ChangeSet names the rules whose endpoints moved)');
  const moved = pf.sync(elsewhere, new Set([r.ruleId]));
  t.same([moved.add.map((f) => f.match), moved.remove.map((f) => f.match).sort()], [['tcp,nw_dst=10.1.0.14,tp_dst=8080'], ['tcp,nw_dst=10.1.0.13,tp_dst=8080', 'tcp,nw_dst=10.2.0.9,tp_dst=8080']], 'named dirty, the rule follows its endpoints: only the post-DNAT peer flows change');
});

t.test('ports: ranges as masks, source ports, ICMP, SCTP; inexpressible conditions match nothing', async (t) => {
  t.same(portMatches({ protocol: 'TCP', port: 1000, endPort: 1010 }), ['tcp,tp_dst=0x3e8/0xfff8', 'tcp,tp_dst=0x3f0/0xfffe', 'tcp,tp_dst=1010']);
  t.same(portMatches({ protocol: 'UDP', port: 53, sourcePort: 1024, sourceEndPort: 2047 }), ['udp,tp_dst=53,tp_src=0x400/0xfc00']);
  t.same(portMatches({ protocol: 'SCTP' }), ['sctp']);
  t.same(portMatches({ protocol: 'TCP', port: 0, endPort: 65535 }), ['tcp'], 'the full range is the bare protocol');
  t.same(portMatches({ protocol: 'ICMP', icmpType: 8, icmpCode: 0 }), ['icmp,icmp_type=8,icmp_code=0']);
  t.same(portMatches({ protocol: 'ICMP' }), ['icmp']);
  t.same(portMatches({ protocol: 'IGMP', igmpType: 0x11 }), []);
  t.same(portMatches({ protocol: 'TCP', port: 'http' }), [], 'an unresolved named port: the destination has no such port');
  t.same(compile([rule({ direction: 'Ingress', action: 'Drop', ports: [{ protocol: 'IGMP' }] })]).flows, [], 'a rule that can only match IGMP installs nothing');
  t.same(compile([rule({ direction: 'Ingress', action: 'Drop', peers: { ips: [], cidrs: [], services: [] } })]).flows, [], 'no peer at all: nothing');
  t.same(compile([rule({ direction: 'Ingress', action: 'Drop', targets: [] })]).flows, [], 'no local target: nothing');
  t.same(compile([rule({ direction: 'Egress', action: 'Drop', targets: [{ ref: 'n1', ips: ['192.168.100.1'] }] })]).flows, [], 'a Node target (host traffic) is not enforced on the bridge');
  const dual = compile([rule({ direction: 'Ingress', action: 'Drop', targets: [{ ref: 'x/a', ips: ['10.1.0.11', 'fd00::11'] }], peers: { ips: ['fd00::21'], cidrs: ['fd00::/64', '10.2.0.0/16'], services: [] } })]).flows;
  t.same(dual.filter((f) => f.table !== 'IngressMetric').map((f) => f.match).sort(), [
    'conj_id=' + /conjunction\((\d+)/.exec(dual.find((f) => f.actions.startsWith('conjunction'))!.actions)![1],
    'ip,nw_dst=10.1.0.11', 'ip,nw_src=10.2.0.0/16', 'ipv6,ipv6_dst=fd00::11', 'ipv6,ipv6_src=fd00::/64', 'ipv6,ipv6_src=fd00::21',
  ].sort(), 'each family in its own match fields');
});

t.test('flows shared by rules carry several conjunctions; a hard flow wins a clash', async (t) => {
  const a = rule({ id: 'a', direction: 'Ingress', action: 'Allow', stage: 1, peers: { ips: ['10.2.0.21'], cidrs: [], services: [] } });
  const b = rule({ id: 'b', direction: 'Ingress', action: 'Allow', stage: 1, peers: { ips: ['10.2.0.22'], cidrs: [], services: [] }, targets: [{ ref: 'x/a', ips: ['10.1.0.11'] }] });
  const pf = new PolicyFlows();
  pf.sync({ rules: [a, b], isolations: [] });
  const shared = pf.flows().find((f) => f.match === 'ip,nw_dst=10.1.0.11')!;
  const ids = [...shared.actions.matchAll(/conjunction\((\d+),2\/2\)/g)].map((m) => Number(m[1]));
  t.equal(ids.length, 2, 'one flow, two conjunction actions');
  t.ok(ids[0]! < ids[1]!, 'in id order');
  const delta = pf.sync({ rules: [a], isolations: [] }, new Set(['b']));
  const gone = pf.describe(ids[0]!) ? ids[1]! : ids[0]!;
  t.same(delta.remove.map((f) => f.match).sort(), [
    `conj_id=${gone}`, `ct_state=+new+trk,ip,reg6=${gone}`, `ct_state=-new+trk,ip,ct_label=0x${gone.toString(16)}00000000/0xffffffff00000000`, 'ip,nw_dst=10.1.0.11', 'ip,nw_src=10.2.0.22',
  ].sort(), "the rule's flows and its counter flows");
  t.same(delta.add.map((f) => f.match), ['ip,nw_dst=10.1.0.11'], 'the shared flow is replaced by its one-conjunction version');
  t.match(delta.add[0]!.actions, /^conjunction\(\d+,2\/2\)$/);

  // A rule with one dimension and a conjunctive rule meet on the same match and priority.
  const hard = rule({ id: 'h', direction: 'Ingress', action: 'Allow', stage: 1, peers: 'any', targets: [{ ref: 'x/a', ips: ['10.1.0.11'] }] });
  const both = new PolicyFlows();
  both.sync({ rules: [a, hard], isolations: [] });
  t.match(both.flows().find((f) => f.match === 'ip,nw_dst=10.1.0.11')!.actions, /^set_field:\d+->reg6,goto_table:IngressMetric$/, 'the flow acts (both rules allow)');
  t.throws(() => new PolicyFlows().sync({ rules: [a, { ...a }], isolations: [] }), PolicyFlowError);
});

t.test('stage-0 priorities follow tier, policy and rule order', async (t) => {
  const rs = [
    rule({ id: 'app1', direction: 'Ingress', action: 'Drop', tier: 250, policy: 1 }),
    rule({ id: 'sec', direction: 'Ingress', action: 'Drop', tier: 100, policy: 9 }),
    rule({ id: 'app2', direction: 'Ingress', action: 'Allow', tier: 250, policy: 1, index: 1 }),
    rule({ id: 'anp', direction: 'Ingress', action: 'Drop', tier: 251, policy: 0 }),
  ];
  const { pf } = compile(rs);
  const prio = (id: string) => pf.describe(conjFor(pf, id))!.priority;
  t.ok(prio('sec') > prio('app1') && prio('app1') > prio('app2') && prio('app2') > prio('anp'));
});

function conjFor(pf: PolicyFlows, nodeRuleId: string): number {
  const m = pf.flows().map((f) => /conj_id=(\d+)/.exec(f.match)).filter((x): x is RegExpExecArray => !!x).map((x) => Number(x[1]));
  return m.find((id) => pf.describe(id)?.nodeRuleId === nodeRuleId)!;
}

t.test('Kubernetes isolation: one drop per local Pod and direction, logged if any policy logs', async (t) => {
  const iso = (name: string, direction: 'Ingress' | 'Egress', ips: string[], log = false): NodeIsolation => ({
    direction, ref: { kind: 'NetworkPolicy', namespace: 'x', name }, targets: ips.map((ip, i) => ({ ref: `x/p${i}`, ips: [ip] })), ...(log ? { logging: { enabled: true } } : {}),
  });
  const pf = new PolicyFlows();
  pf.sync({ rules: [], isolations: [iso('n1', 'Ingress', ['10.1.0.11', '10.1.0.12']), iso('n2', 'Ingress', ['10.1.0.11']), iso('n3', 'Egress', ['10.1.0.11'])] });
  const isoFlows = pf.flows().filter((f) => f.priority === PRIORITY.isolation);
  t.same(lines(isoFlows), [
    'EgressDefaultRule 64500 ip,nw_src=10.1.0.11,reg0=0x0/0x20 -> drop',
    'EgressDefaultRule 64500 ip,nw_src=10.1.0.11,reg0=0x20/0x20 -> goto_table:EgressMetric',
    'IngressDefaultRule 64500 ip,nw_dst=10.1.0.11 -> drop',
    'IngressDefaultRule 64500 ip,nw_dst=10.1.0.12 -> drop',
  ]);
  const d = pf.sync({ rules: [], isolations: [iso('n1', 'Ingress', ['10.1.0.11', '10.1.0.12']), iso('n2', 'Ingress', ['10.1.0.11'], true)] });
  t.same(d.remove.map((f) => f.match).sort(), ['ip,nw_dst=10.1.0.11', 'ip,nw_src=10.1.0.11,reg0=0x0/0x20', 'ip,nw_src=10.1.0.11,reg0=0x20/0x20']);
  t.same(d.add.map((f) => f.match), ['ip,nw_dst=10.1.0.11']);
  const punt = /userdata=([0-9a-f.]+)/.exec(d.add[0]!.actions)![1]!.split('.').map((x) => parseInt(x, 16));
  t.same(decodePolicyPuntExtra(Buffer.from(punt.slice(2))), { tableId: tableId('IngressDefaultRule'), disposition: 1, priority: PRIORITY.isolation, conjId: 0 });
});

t.test('counter flows keep their cookies when the rule moves or others change (statistics survive)', async (t) => {
  const counted = rule({ id: 'counted', direction: 'Ingress', action: 'Allow', tier: 250, policy: 5 });
  const pf = new PolicyFlows();
  pf.sync({ rules: [counted], isolations: [] });
  const before = pf.metricFlows();
  t.equal(before.length, 2);
  const priorityBefore = pf.describe(before[0]!.conjId)!.priority;
  // A higher-precedence rule in the same tier pushes the rule to another priority: its rule flows
  // are re-installed, its counter flows are not.
  const first = rule({ id: 'first', direction: 'Ingress', action: 'Drop', tier: 250, policy: 5 });
  const delta = pf.sync({ rules: [first, { ...counted, priority: { ...counted.priority, rule: 1 } }], isolations: [] });
  t.not(pf.describe(before[0]!.conjId)!.priority, priorityBefore, 'the rule moved');
  const removed = new Set(delta.remove.map((f) => f.cookie));
  t.ok(before.every((m) => !removed.has(m.cookie)), 'no counter flow of the moved rule was removed');
  t.same(pf.metricFlows().filter((m) => m.conjId === before[0]!.conjId), before, 'same counter flows, same cookies');
  // A restart compiles the same rules from scratch: the same counter cookies.
  const again = new PolicyFlows();
  again.sync({ rules: [first, { ...counted, priority: { ...counted.priority, rule: 1 } }], isolations: [] });
  t.same(again.metricFlows().map((m) => m.cookie).sort(), pf.metricFlows().map((m) => m.cookie).sort());
});

t.test('every Drop/Reject action flow goes to the Metric table, whose catch-all drops (never fails open)', async (t) => {
  const { flows } = compile([
    rule({ direction: 'Egress', action: 'Drop' }),
    rule({ direction: 'Ingress', action: 'Reject', logging: { enabled: true } }),
    rule({ direction: 'Ingress', action: 'Drop', peers: 'any' }),
  ]);
  const deciding = flows.filter((f) => !f.table.endsWith('Metric') && !f.actions.startsWith('conjunction('));
  t.ok(deciding.length >= 3);
  for (const f of deciding) t.match(f.actions, /set_field:0x1000\/0x1000->reg0,goto_table:(Egress|Ingress)Metric$/, `${f.table} ${f.match}`);
});

t.test('a rule whose peer addresses alone change: exactly the flows of the addresses that came and went, as a fresh compile', async (t) => {
  const peers = (ips: string[], cidrs: string[] = []) => ({ ips, cidrs, services: [] });
  const cases: { name: string; base: Parameters<typeof rule>[0]; from: string[]; to: string[]; cidrs?: string[]; changed: number }[] = [
    { name: 'ingress, with ports', base: { id: 'pi', direction: 'Ingress', action: 'Allow', stage: 1, ports: [{ protocol: 'TCP', port: 80 }] }, from: ['10.2.0.21', '10.2.0.22'], to: ['10.2.0.21', '10.2.0.23'], changed: 2 },
    { name: 'egress stage 0, no ports, a CIDR beside', base: { id: 'pe', direction: 'Egress', action: 'Drop' }, from: ['10.2.0.21'], to: ['10.2.0.20', '10.2.0.21', '10.2.0.30'], cidrs: ['192.168.0.0/16'], changed: 2 },
    { name: 'addresses out of order (not the engine\'s form)', base: { id: 'pu', direction: 'Ingress', action: 'Allow', stage: 1 }, from: ['10.2.0.9', '10.2.0.10'], to: ['10.2.0.9', '10.2.0.11', '10.2.0.10'], changed: 1 },
    { name: 'the last address goes: the main unit goes', base: { id: 'pl', direction: 'Egress', action: 'Allow', stage: 1 }, from: ['10.2.0.21'], to: [], changed: 6 },
    { name: 'an IPv6 address only', base: { id: 'p6', direction: 'Ingress', action: 'Allow', stage: 1 }, from: ['10.2.0.21'], to: ['10.2.0.21', 'fd00::1'], changed: 0 },
  ];
  for (const c of cases) {
    const before = rule({ ...c.base, peers: peers(c.from, c.cidrs) });
    const after = rule({ ...c.base, peers: peers(c.to, c.cidrs) });
    const pf = new PolicyFlows();
    pf.sync({ rules: [before], isolations: [] });
    const delta = pf.sync({ rules: [after], isolations: [] }, new Set([after.ruleId]));
    const fresh = new PolicyFlows();
    fresh.sync({ rules: [after], isolations: [] });
    t.same(lines(pf.flows()), lines(fresh.flows()), `${c.name}: the flows of a fresh compile`);
    t.equal(delta.add.length + delta.remove.length, c.changed, `${c.name}: ${c.changed} flows added or removed`);
    const gone = c.from.filter((ip) => !c.to.includes(ip));
    if (c.to.length > 0) t.ok(delta.remove.every((f) => gone.some((ip) => f.match.endsWith(`=${ip}`))), `${c.name}: only flows of addresses that went are removed`);
  }
});
