import t from 'tap';
import { type Flow, flowText, resolveTableNames } from '../../daemon/flows/flow.js';
import { computeFlows, type PipelineInput, podFlows } from '../../daemon/flows/pipeline.js';
import { tableId } from '../../daemon/flows/tables.js';

const GWMAC = '0a:00:00:00:00:01';
const dual = { containerId: 'c1', ofport: 11, mac: '2a:00:00:00:00:11', ips: ['10.1.0.11', 'fd00:1::11'] };
const v6only = { containerId: 'c2', ofport: 12, mac: '2a:00:00:00:00:12', ips: ['fd00:1::12'] };
const v4only = { containerId: 'c3', ofport: 13, mac: '2a:00:00:00:00:13', ips: ['10.1.0.13'] };
const input = (over: Partial<PipelineInput> = {}): PipelineInput => ({
  gatewayOfport: 32769,
  gatewayMac: GWMAC,
  nodeIP: '192.168.77.11',
  nodeIPv6: 'fd00:77::11',
  serviceCIDRs: ['10.96.0.0/12', 'fd00:96::/112'],
  pods: [dual, v6only, v4only],
  ...over,
});
const one = (flows: Flow[], pred: (f: Flow) => boolean, what: string): Flow => {
  const found = flows.filter(pred);
  if (found.length !== 1) throw new Error(`expected exactly one flow for ${what}, got ${found.length}`);
  return found[0]!;
};
const matches = (flows: Flow[], table: string, owner?: string) => flows.filter((f) => f.table === table && (owner === undefined || f.owner === owner)).map((f) => f.match).sort();

t.test('every base flow for IPv4 packets has an IPv6 twin with the same actions', async (t) => {
  const flows = computeFlows(input());
  const base = flows.filter((f) => !f.owner);
  const twin = (m: string) => m.replace(/(^|,)ip(,|$)/, '$1ipv6$2').replace('nw_src=192.168.77.11', 'ipv6_src=fd00:77::11').replace('nw_dst=10.96.0.0/12', 'ipv6_dst=fd00:96::/112');
  const v4 = base.filter((f) => /(^|,)ip(,|$)/.test(f.match));
  t.ok(v4.length >= 15, `${v4.length} IPv4 base flows`);
  for (const f of v4) {
    const m = twin(f.match);
    t.ok(base.some((g) => g.table === f.table && g.priority === f.priority && g.match === m && g.actions === f.actions), `${f.table} ${f.match} -> ${m}`);
  }
});

t.test('a dual-stack Pod gets each family\'s classification, spoof guard and delivery; a single-family Pod only its own', async (t) => {
  const flows = computeFlows(input());
  t.same(matches(flows, 'Classifier', 'c1'), ['ip,in_port=11', 'ipv6,in_port=11']);
  t.same(matches(flows, 'Classifier', 'c2'), ['ipv6,in_port=12']);
  t.same(matches(flows, 'Classifier', 'c3'), ['ip,in_port=13']);
  t.same(matches(flows, 'SpoofGuard', 'c1'), [`ip,in_port=11,dl_src=${dual.mac},nw_src=10.1.0.11`, `ipv6,in_port=11,dl_src=${dual.mac},ipv6_src=fd00:1::11`]);
  const to = one(flows, (f) => f.table === 'L3Forwarding' && f.match === 'ipv6,ipv6_dst=fd00:1::12', 'to the IPv6-only Pod');
  t.equal(to.actions, `set_field:aa:bb:cc:dd:ee:ff->eth_src,set_field:${v6only.mac}->eth_dst,set_field:12->reg1,set_field:0x200/0xf00->reg0,goto_table:L3DecTTL`);
  t.same(matches(flows, 'ARPSpoofGuard', 'c2'), [
    `icmp6,icmp_type=135,icmp_code=0,in_port=12,dl_src=${v6only.mac},ipv6_src=fd00:1::12,nd_sll=${v6only.mac}`,
    `icmp6,icmp_type=135,icmp_code=0,in_port=12,dl_src=${v6only.mac},ipv6_src=fe80::/10,nd_sll=${v6only.mac}`,
  ], 'an IPv6 Pod solicits only from its own address or a link-local one, with its own MAC in the SLL option');
  t.notOk(matches(flows, 'ARPSpoofGuard', 'c2').some((m) => m.startsWith('arp')), 'no ARP for an IPv6-only Pod');
  t.same(matches(flows, 'ARPSpoofGuard', 'c3'), [`arp,in_port=13,dl_src=${v4only.mac},arp_spa=10.1.0.13,arp_sha=${v4only.mac}`], 'no ND for an IPv4-only Pod');
});

t.test('adding an IPv6 address to a Pod leaves its IPv4 flows (and cookies) as they were', async (t) => {
  const v4 = podFlows({ ...dual, ips: ['10.1.0.11'] }).map((f) => f.cookie);
  const both = new Set(podFlows(dual).map((f) => f.cookie));
  t.ok(v4.every((c) => both.has(c)));
});

t.test('one IPv6 address gives the same flows however it is written', async (t) => {
  const a = podFlows({ ...v6only, ips: ['FD00:1:0:0::12'] }).map(flowText);
  t.same(a, podFlows(v6only).map(flowText));
  const b = computeFlows(input({ serviceCIDRs: ['fd00:96:0::/112'], nodeIPv6: 'FD00:77:0::11' })).map(flowText);
  t.same(b, computeFlows(input({ serviceCIDRs: ['fd00:96::/112'] })).map(flowText));
});

t.test('Neighbour Discovery: solicitations answered with the virtual MAC, DAD never answered, advertisements never passed', async (t) => {
  const flows = computeFlows(input());
  for (const type of [135, 136]) one(flows, (f) => f.table === 'Classifier' && f.match === `icmp6,icmp_type=${type},icmp_code=0` && f.actions === 'goto_table:ARPSpoofGuard', `ND ${type} classified`);
  const ipClassifiers = flows.filter((f) => f.table === 'Classifier' && /(^|,)ipv6(,|$)/.test(f.match));
  const nd = flows.filter((f) => f.table === 'Classifier' && f.match.startsWith('icmp6'));
  t.ok(nd.every((n) => ipClassifiers.every((c) => n.priority > c.priority)), 'ND beats every IPv6 classification (it never reaches the IP spoof guard)');
  t.ok(flows.some((f) => f.table === 'ARPSpoofGuard' && f.match === 'icmp6,icmp_type=135,icmp_code=0,in_port=32769'), 'the host may solicit anything');
  t.notOk(flows.some((f) => f.table === 'ARPSpoofGuard' && f.match.includes('icmp_type=136')), 'no advertisement passes the guard, from a Pod or the host');
  const responder = flows.filter((f) => f.table === 'ARPResponder' && f.match.startsWith('icmp6'));
  const dad = one(responder, (f) => f.match === 'icmp6,icmp_type=135,ipv6_src=::', 'DAD');
  t.equal(dad.actions, 'drop');
  t.ok(responder.filter((f) => f.match.includes('icmp_type=135') && f !== dad).every((f) => f.priority < dad.priority), 'DAD beats every answer');
  const toPod = one(responder, (f) => f.match === 'icmp6,icmp_type=135,icmp_code=0', 'answer to a Pod');
  const toHost = one(responder, (f) => f.match === 'icmp6,icmp_type=135,icmp_code=0,in_port=32769', 'answer to the host');
  t.ok(toHost.priority > toPod.priority);
  for (const [f, flags] of [[toPod, '0xe0000000'], [toHost, '0x60000000']] as const) {
    t.equal(f.actions, [
      'move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]', 'set_field:aa:bb:cc:dd:ee:ff->eth_src', 'move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[]', 'move:NXM_NX_ND_TARGET[]->NXM_NX_IPV6_SRC[]',
      'set_field:136->icmpv6_type', `set_field:${flags}->nd_reserved`, 'set_field:2->nd_options_type', 'resubmit(,ARPResponder)',
    ].join(','), `NA flags ${flags}`);
  }
  t.ok(resolveTableNames(toPod.actions).endsWith(`,resubmit(,${tableId('ARPResponder')})`), 'the resubmit names the table by number on the wire');
  const finish = one(responder, (f) => f.match === 'icmp6,icmp_type=136', 'advertisement finished');
  t.equal(finish.actions, 'set_field:aa:bb:cc:dd:ee:ff->nd_tll,IN_PORT');
});

t.test('IPv6 scopes the bridge never routes, and Service CIDRs and the node address per family', async (t) => {
  const flows = computeFlows(input());
  const guard = flows.filter((f) => f.table === 'SpoofGuard');
  const podPass = guard.filter((f) => f.owner).map((f) => f.priority);
  for (const m of ['ipv6,ipv6_src=fe80::/10', 'ipv6,ipv6_dst=fe80::/10', 'ipv6,ipv6_dst=ff00::/8']) {
    const f = one(guard, (g) => g.match === m, m);
    t.equal(f.actions, 'drop');
    t.ok(podPass.every((p) => f.priority > p) && f.priority > one(guard, (g) => g.match === 'ipv6,in_port=32769', 'gw').priority, `${m} before any pass`);
  }
  one(flows, (f) => f.table === 'ConntrackZone' && f.match === 'ipv6,ipv6_dst=fd00:96::/112' && f.actions.startsWith('set_field:0x20/0x20->reg0,ct('), 'IPv6 Service CIDR marked');
  one(flows, (f) => f.table === 'L3Forwarding' && f.match === 'ipv6,ipv6_dst=fd00:96::/112', 'IPv6 Service CIDR to the gateway');
  t.notOk(flows.some((f) => f.match.includes('nw_dst=fd00') || f.match.includes('ipv6_dst=10.')), 'no CIDR under the other family\'s field');
  one(flows, (f) => f.table === 'Classifier' && f.match === 'ipv6,in_port=32769,ipv6_src=fd00:77::11' && f.actions.startsWith('set_field:0x11/0x1f->reg0'), 'host-originated IPv6');
  t.notOk(computeFlows(input({ nodeIPv6: undefined })).some((f) => f.match.includes('fd00:77::11')), 'no node IPv6, no host flow');
});

t.test('an IPv6-only Pod\'s IPv4 egress port: the Pod\'s flows cover it, its address and port are checked like the Pod\'s', async (t) => {
  const egress = { ...v6only, egressV4: { ofport: 22, mac: '2a:00:00:00:00:22', ip: '169.254.172.7' } };
  const flows = computeFlows(input({ pods: [egress] }));
  const mine = flows.filter((f) => f.owner === 'c2').map((f) => `${f.table} ${f.match} -> ${f.actions}`);
  t.ok(mine.some((f) => f.startsWith('Classifier ip,in_port=22 -> ')), 'its IPv4 is classified as the Pod\'s');
  t.ok(mine.some((f) => f.startsWith('SpoofGuard ip,in_port=22,dl_src=2a:00:00:00:00:22,nw_src=169.254.172.7 -> goto_table:')));
  t.ok(mine.some((f) => f.startsWith('L3Forwarding ip,nw_dst=169.254.172.7 -> ') && f.includes('set_field:2a:00:00:00:00:22->eth_dst') && f.includes('set_field:22->reg1')));
  t.notOk(mine.some((f) => f.includes('in_port=22') && (f.includes('ipv6') || f.includes('icmp6'))), 'no IPv6 from the egress port');
  const podOnly = computeFlows(input({ pods: [v6only] })).filter((f) => f.owner === 'c2').map((f) => f.cookie);
  t.same(flows.filter((f) => f.owner === 'c2').map((f) => f.cookie).filter((c) => podOnly.includes(c)), podOnly, 'the Pod\'s own flows are unchanged');
  t.throws(() => computeFlows(input({ pods: [{ ...egress, egressV4: { ...egress.egressV4, ofport: 12 } }] })), /egressV4.ofport 12 is the Pod's own port/);
  t.throws(() => computeFlows(input({ pods: [egress, { ...v4only, ofport: 22 }] })), /ofport 22 is already used by container c2 \(IPv4 egress port\)/);
  t.throws(() => computeFlows(input({ pods: [egress, { ...v4only, ips: ['169.254.172.7'] }] })), /IP 169.254.172.7 is already used by container c2/);
  t.throws(() => computeFlows(input({ pods: [{ ...dual, egressV4: egress.egressV4 }] })), /the Pod has an IPv4 address of its own/);
  t.throws(() => computeFlows(input({ pods: [{ ...v6only, egressV4: { ...egress.egressV4, ip: 'fd00::7' } }] })), /egressV4.ip: "fd00::7" is not an IPv4 address/);
});
