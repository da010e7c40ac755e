/**
 * IPv6 in the compiled policy flows: address matches in ipv6_src/ipv6_dst under dl_type 0x86dd,
 * ports as tcp6/udp6/sctp6/icmp6, a conjunction's clauses per family (a family some clause lacks
 * installs nothing), counter and isolation flows per family, toServices with IPv6 ClusterIPs.
 */
import t from 'tap';
import type { Flow } from '../../daemon/flows/flow.js';
import { PolicyFlows, portMatches, staticPolicyFlows, type ServiceResolver } from '../../daemon/flows/policy/compile.js';
import type { NodeRule } from '../../daemon/policy/internal.js';

let seq = 0;
function rule(p: Partial<NodeRule> & Pick<NodeRule, 'direction' | 'action'>): NodeRule {
  const id = p.id ?? `r${seq++}`;
  return {
    id, ruleId: id, ref: { kind: 'AntreaClusterNetworkPolicy', name: `pol-${id}`, rule: `rule-${id}`, tier: 'application' },
    direction: p.direction, action: p.action, priority: { stage: 0, tier: 250, policy: 1, rule: 0, tieBreak: `k/${id}` }, order: 0,
    targets: p.targets ?? [{ ref: 'x/a', ips: ['10.1.0.11', 'fd00:1::11'] }],
    peers: p.peers ?? { ips: ['10.2.0.21', 'fd00:2::21'], cidrs: [], services: [] },
    ports: p.ports ?? [],
  };
}
const compile = (rules: NodeRule[], resolve?: ServiceResolver) => {
  const pf = new PolicyFlows();
  pf.sync({ rules, isolations: [], ...(resolve ? { serviceEndpoints: resolve } : {}) });
  const statics = new Set(staticPolicyFlows().map((f) => f.cookie));
  return pf.flows().filter((f) => !statics.has(f.cookie));
};
const matches = (flows: Flow[], table?: string) => flows.filter((f) => !table || f.table === table).map((f) => f.match).filter((m) => !m.startsWith('conj_id=')).sort();

t.test('port conditions in IPv6', async (t) => {
  t.same(portMatches({ protocol: 'TCP', port: 80 }, 6), ['tcp6,tp_dst=80']);
  t.same(portMatches({ protocol: 'UDP', port: 1000, endPort: 1003, sourcePort: 53 }, 6), ['udp6,tp_dst=0x3e8/0xfffc,tp_src=53']);
  t.same(portMatches({ protocol: 'SCTP' }, 6), ['sctp6']);
  t.same(portMatches({ protocol: 'ICMP', icmpType: 128, icmpCode: 0 }, 6), ['icmp6,icmpv6_type=128,icmpv6_code=0'], 'ICMPv6 fields');
  t.same(portMatches({ protocol: 'ICMP' }, 6), ['icmp6']);
  t.same(portMatches({ protocol: 'ICMP', icmpType: 8 }), ['icmp,icmp_type=8'], 'IPv4 unchanged');
});

t.test('a dual-stack rule: each family in its own fields, ports of both families, one conjunction', async (t) => {
  const flows = compile([rule({ direction: 'Egress', action: 'Drop', peers: { ips: ['fd00:2::21'], cidrs: ['10.2.0.0/16', '2001:db8::/32', '::/0'], services: [] }, ports: [{ protocol: 'TCP', port: 80 }, { protocol: 'ICMP' }] })]);
  t.same(matches(flows, 'AntreaPolicyEgressRule'), [
    'icmp', 'icmp6', 'ip,nw_dst=10.2.0.0/16', 'ip,nw_src=10.1.0.11,reg0=0x0/0x20', 'ipv6', 'ipv6,ipv6_dst=2001:db8::/32', 'ipv6,ipv6_dst=fd00:2::21',
    'ipv6,ipv6_src=fd00:1::11,reg0=0x0/0x20', 'tcp,tp_dst=80', 'tcp6,tp_dst=80',
  ]);
  const ids = new Set(flows.flatMap((f) => [...f.actions.matchAll(/conjunction\((\d+),/g)].map((m) => m[1])));
  t.equal(ids.size, 1, 'one conjunction id for both families');
  t.same(matches(flows, 'EgressMetric'), [`ip,reg0=0x1000/0x1000,reg5=${[...ids][0]}`, `ipv6,reg0=0x1000/0x1000,reg5=${[...ids][0]}`], 'a drop counter per family');
});

t.test('a family some clause lacks installs nothing of that family', async (t) => {
  const v4target = compile([rule({ direction: 'Ingress', action: 'Allow', targets: [{ ref: 'x/a', ips: ['10.1.0.11'] }], peers: { ips: ['fd00:2::21'], cidrs: ['10.2.0.0/16'], services: [] } })]);
  t.same(matches(v4target, 'AntreaPolicyIngressRule'), ['ip,nw_dst=10.1.0.11', 'ip,nw_src=10.2.0.0/16'], 'IPv4 target: the IPv6 peer is left out');
  t.notOk(v4target.some((f) => f.match.includes('ipv6')), 'no IPv6 counters either');
  t.same(compile([rule({ direction: 'Ingress', action: 'Drop', targets: [{ ref: 'x/a', ips: ['10.1.0.11'] }], peers: { ips: ['fd00:2::21'], cidrs: [], services: [] } })]), [], 'no family complete: nothing');
  const v6only = compile([rule({ direction: 'Ingress', action: 'Allow', targets: [{ ref: 'x/a', ips: ['fd00:1::11'] }], peers: 'any', ports: [{ protocol: 'UDP', port: 53 }] })]);
  t.same(matches(v6only, 'AntreaPolicyIngressRule'), ['ipv6,ipv6_dst=fd00:1::11', 'udp6,tp_dst=53'], 'IPv6-only target: IPv6 ports only');
});

t.test('isolation and toServices with IPv6 addresses', async (t) => {
  const pf = new PolicyFlows();
  pf.sync({ rules: [], isolations: [{ direction: 'Egress', ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'iso' }, targets: [{ ref: 'x/a', ips: ['10.1.0.11', 'fd00:1::11'] }] }, { direction: 'Ingress', ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'iso' }, targets: [{ ref: 'x/a', ips: ['fd00:1::11'] }] }] });
  t.same(pf.flows().filter((f) => f.table.endsWith('DefaultRule') && f.priority !== 65000).map((f) => `${f.table} ${f.match}`).sort(), [
    'EgressDefaultRule ip,nw_src=10.1.0.11,reg0=0x0/0x20', 'EgressDefaultRule ip,nw_src=10.1.0.11,reg0=0x20/0x20',
    'EgressDefaultRule ipv6,ipv6_src=fd00:1::11,reg0=0x0/0x20', 'EgressDefaultRule ipv6,ipv6_src=fd00:1::11,reg0=0x20/0x20',
    'IngressDefaultRule ipv6,ipv6_dst=fd00:1::11',
  ]);
  const resolve: ServiceResolver = (ip) => (ip === 'fd00:96::10' ? [{ ip: 'fd00:1::12', port: 8080 }, { ip: '10.1.0.12', port: 8080 }] : ip === '10.96.0.10' ? [{ ip: '10.1.0.12', port: 8080 }] : []);
  const flows = compile([rule({ direction: 'Egress', action: 'Allow', peers: { ips: [], cidrs: [], services: [{ ip: 'fd00:96::10', protocol: 'TCP', port: 80 }, { ip: '10.96.0.10', protocol: 'TCP', port: 80 }] } })], resolve);
  const m = matches(flows, 'AntreaPolicyEgressRule');
  for (const want of ['tcp6,ipv6_dst=fd00:96::10,tp_dst=80', 'tcp,nw_dst=10.96.0.10,tp_dst=80', 'tcp6,ipv6_dst=fd00:1::12,tp_dst=8080', 'tcp,nw_dst=10.1.0.12,tp_dst=8080']) t.ok(m.includes(want), want);
  t.notOk(m.some((x) => x.startsWith('tcp6') && x.includes('10.1.0.12')), 'an IPv6 ClusterIP never leads to an IPv4 endpoint');
});
