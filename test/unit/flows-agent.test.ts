import t from 'tap';
import type { PodRequest } from '../../daemon/cni/server.js';
import { isRepairEvent, isRulesetTamperEvent } from '../../daemon/hostnet/monitor.js';
import { decodeRtEvent, describeRtEvent, NUD_PERMANENT, type RouteEvent, type RtEvent } from '../../daemon/hostnet/rtevents.js';
import { flowCheckReport } from '../../daemon/ctl/node-flows.js';
import { nameTables, traceFlow } from '../../daemon/ctl/node-trace.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { tableId } from '../../daemon/flows/tables.js';
import { podIPs } from '../../daemon/cni/attacher.js';
import { attachmentFromPort, portIds } from '../../daemon/node/attachment.js';

const req = (prevResult: PodRequest['prevResult'], ifName = 'eth0'): PodRequest => ({
  containerId: 'c1', netns: '/var/run/netns/x', ifName, cniVersion: '1.0.0', networkName: 'n', config: {}, ...(prevResult ? { prevResult } : {}),
});

t.test('podIPs: the IPv4 and IPv6 addresses of CNI_IFNAME only, without prefix, IPv6 canonical', async (t) => {
  const prev = {
    cniVersion: '1.0.0',
    interfaces: [{ name: 'veth1' }, { name: 'eth0', sandbox: '/var/run/netns/x' }, { name: 'net1', sandbox: '/var/run/netns/x' }],
    ips: [
      { address: '10.1.0.11/24', interface: 1 },
      { address: 'FD00:0::11/64', interface: 1 },
      { address: '10.9.0.1/24', interface: 2 },
      { address: '10.1.0.12/32' },
    ],
  };
  t.same(podIPs(req(prev)), ['10.1.0.11', '10.1.0.12', 'fd00::11'], 'other interfaces are left out; unassigned IPs count; both families');
  t.same(podIPs(req(prev, 'net1')), ['10.1.0.12', '10.9.0.1']);
  t.same(podIPs(req(undefined)), []);
});

t.test('OVSDB external_ids round-trip an attachment', async (t) => {
  const pod = { containerId: 'c1', podNamespace: 'ns', podName: 'p', netns: '/var/run/netns/x', ifName: 'eth0', hostVeth: 'eni1', ofport: 7, mac: '2a:00:00:00:00:01', ips: ['10.1.0.11', '10.1.0.12'] };
  const ids = portIds(pod);
  t.equal(ids['ip-address'], '10.1.0.11,10.1.0.12');
  t.equal(ids['sluice-type'], 'container');
  t.same(attachmentFromPort({ name: 'eni1', ofport: 7, ids }), pod);
  t.equal(attachmentFromPort({ name: 'eni1', ofport: 7, ids: { ...ids, 'attached-mac': '' } }), undefined, 'incomplete ids are not usable');
});

t.test('node trace builds the microflow from the port', async (t) => {
  t.equal(
    traceFlow({ from: { ofport: 3, mac: '2a:00:00:00:00:01', ip: '10.1.0.11' }, dst: '10.96.0.10', proto: 'tcp', dport: 53 }),
    'in_port=3,tcp,dl_src=2a:00:00:00:00:01,dl_dst=aa:bb:cc:dd:ee:ff,nw_src=10.1.0.11,nw_dst=10.96.0.10,nw_ttl=64,tp_src=40000,tp_dst=53',
  );
  t.match(traceFlow({ from: { ofport: 3, mac: 'm', ip: '1.1.1.1' }, dst: '2.2.2.2', proto: 'icmp' }), /,icmp,.*icmp_type=8,icmp_code=0$/);
  t.throws(() => traceFlow({ from: { ofport: 32769, mac: 'm' }, dst: '10.1.0.11', proto: 'tcp' }), /--src is required/);
});

t.test('node flows --check reports missing and unexpected flows', async (t) => {
  const desired = computeFlows({ gatewayOfport: 32769, gatewayMac: '0a:00:00:00:00:01', serviceCIDRs: ['10.96.0.0/16'], pods: [{ containerId: 'c1', ofport: 3, mac: '2a:00:00:00:00:01', ips: ['10.1.0.11'] }] });
  const all = desired.map((f) => f.cookie);
  t.same(flowCheckReport(desired, all), { ok: true, text: `${desired.length} of ${desired.length} desired flows installed` });
  const l3 = desired.find((f) => f.table === 'L3Forwarding' && f.owner === 'c1')!;
  const r = flowCheckReport(desired, [...all.filter((c) => c !== l3.cookie), '0x51ce01ffffffffff']);
  t.equal(r.ok, false);
  t.match(r.text, `missing: L3Forwarding (container c1): table=${tableId('L3Forwarding')},priority=200,cookie=${l3.cookie},ip,nw_dst=10.1.0.11`);
  t.match(r.text, 'unexpected sluice flow: cookie 0x51ce01ffffffffff');
});

t.test('node trace output gets table names', async (t) => {
  const raw = ' 0. ip,in_port=1, priority 200\n      goto_table:3\n 4. ip, priority 200\n      ct(table=5,zone=65520)\n       -> The forked pipeline will be resumed at table 5.';
  t.equal(
    nameTables(raw),
    ' 0. [Classifier] ip,in_port=1, priority 200\n      goto_table:SpoofGuard\n 4. [ConntrackZone] ip, priority 200\n      ct(table=ConntrackState,zone=65520)\n       -> The forked pipeline will be resumed at table ConntrackState.',
  );
});

t.test('kernel route, rule and neighbour events that trigger a repair', async (t) => {
  const gw = 7; // antrea-gw0's ifindex
  const PODS = ['10.10.1.5', 'fd00:10:10:1::5'];
  const kept = (podIps: string[] = []) => ({ gatewayIfindex: gw, podIps: new Set(podIps), neighbours: new Set(['169.254.253.1']) });
  const veth = 9;
  const route = (deleted: boolean, dst: string, prefixLen: number, ifindex: number, table = 254, family: 4 | 6 = 4): RouteEvent => ({ kind: 'route', deleted, family, dst, prefixLen, table, ifindex });
  const neigh = (ip: string, ifindex: number): RtEvent => ({ kind: 'neigh', deleted: true, family: 4, ip, ifindex, state: 0x20 });
  t.ok(isRepairEvent({ ...route(true, '0.0.0.0', 0, gw, 300), via: '169.254.253.1' }, kept()), 'table 300 route');
  t.ok(isRepairEvent(route(true, '10.10.1.5', 32, gw), kept()), 'a Pod route');
  t.ok(isRepairEvent(route(true, 'fd00:10:10:1::5', 128, gw, 254, 6), kept()), 'an IPv6 Pod route');
  t.ok(isRepairEvent({ kind: 'rule', deleted: true, family: 4, priority: 300, table: 300, fwmark: 0x800, fwmask: 0x800, iif: 'antrea-gw0' }, kept()), 'the rule');
  t.ok(isRepairEvent({ kind: 'rule', deleted: true, family: 6, priority: 300, table: 300, fwmark: 0x800, fwmask: 0x800, iif: 'antrea-gw0' }, kept()), 'the IPv6 rule');
  t.ok(isRepairEvent(neigh('169.254.253.1', gw), kept()), 'the permanent neighbour (deletions are reported FAILED, without lladdr)');
  t.notOk(isRepairEvent(neigh('10.10.1.5', gw), kept()), 'neighbour GC');
  t.notOk(isRepairEvent(neigh('169.254.253.1', 9), kept()), 'that address on another device');
  t.notOk(isRepairEvent(route(true, '10.10.1.5', 32, veth), kept()), 'a route on a veth (Pod teardown)');
  t.notOk(isRepairEvent(route(false, '10.10.1.5', 32, gw), kept()), 'additions');
  t.notOk(isRepairEvent({ kind: 'rule', deleted: true, family: 4, priority: 100, table: 100, fwmark: 1 }, kept()), "someone else's rule");
  t.notOk(isRepairEvent({ kind: 'rule', deleted: true, family: 4, priority: 300, table: 300 }, kept()), 'a rule into table 300 without the mark is not sluice\'s');
  t.notOk(isRepairEvent(route(true, '10.10.1.5', 32, gw), { ...kept(), gatewayIfindex: undefined }), 'no gateway: nothing on it to lose');
  t.ok(isRepairEvent(route(false, '10.10.1.5', 32, veth), kept(PODS)), "an attached Pod's route replaced onto its veth (no deletion is reported)");
  t.ok(isRepairEvent({ ...route(false, '10.10.1.5', 32, 2), via: '192.168.77.1' }, kept(PODS)), "an attached Pod's route replaced by one via another device");
  t.ok(isRepairEvent(route(false, 'fd00:10:10:1::5', 128, veth, 254, 6), kept(PODS)), 'the same for an IPv6 Pod route');
  t.notOk(isRepairEvent(route(false, '10.10.1.5', 32, gw), kept(PODS)), 'the route sluice keeps (its own repair)');
  t.notOk(isRepairEvent(route(false, '10.10.1.9', 32, veth), kept(PODS)), 'a route of a Pod sluice has not attached (an ADD in progress)');
  t.notOk(isRepairEvent(route(false, '10.10.1.0', 24, veth), kept(PODS)), 'a wider route');
  t.notOk(isRepairEvent({ kind: 'neigh', deleted: false, family: 4, ip: '10.10.1.5', ifindex: veth, state: 0x02 }, kept(PODS)), 'a neighbour entry');
  t.notOk(isRepairEvent(route(false, '10.10.1.5', 32, veth, 100), kept(PODS)), 'another routing table');
});

t.test('rtnetlink notifications decoded (the layouts the kernel sends)', async (t) => {
  const attr = (type: number, payload: Buffer) => {
    const b = Buffer.alloc((4 + payload.length + 3) & ~3);
    b.writeUInt16LE(4 + payload.length, 0);
    b.writeUInt16LE(type, 2);
    payload.copy(b, 4);
    return b;
  };
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    return b;
  };
  // RTM_DELROUTE: rtmsg {AF_INET, dst_len 32, 0, 0, table 254, proto, scope, type, flags}, RTA_TABLE 254, RTA_DST, RTA_OIF 7
  const rtmsg = Buffer.from([2, 32, 0, 0, 254, 3, 253, 1, 0, 0, 0, 0]);
  t.same(decodeRtEvent(25, Buffer.concat([rtmsg, attr(15, u32(254)), attr(1, Buffer.from([10, 10, 1, 5])), attr(4, u32(7))])), { kind: 'route', deleted: true, family: 4, dst: '10.10.1.5', prefixLen: 32, table: 254, ifindex: 7, via: undefined });
  // table 300 does not fit rtm_table: RTA_TABLE carries it (rtm_table = RT_TABLE_COMPAT)
  const def = Buffer.from([2, 0, 0, 0, 252, 3, 0, 1, 0, 0, 0, 0]);
  t.same(decodeRtEvent(24, Buffer.concat([def, attr(15, u32(300)), attr(5, Buffer.from([169, 254, 253, 1])), attr(4, u32(7))])), { kind: 'route', deleted: false, family: 4, dst: '0.0.0.0', prefixLen: 0, table: 300, ifindex: 7, via: '169.254.253.1' });
  const v6 = Buffer.from([10, 128, 0, 0, 254, 3, 253, 1, 0, 0, 0, 0]);
  const addr6 = Buffer.from('fd000010001000010000000000000005', 'hex');
  t.match(decodeRtEvent(25, Buffer.concat([v6, attr(1, addr6), attr(4, u32(9))])), { family: 6, dst: 'fd00:10:10:1::5', prefixLen: 128, ifindex: 9 }, 'IPv6, zero groups compressed as inet_ntop does');
  // RTM_DELRULE: fib_rule_hdr {AF_INET, 0, 0, 0, table 252, 0, 0, FR_ACT_TO_TBL, flags}
  const frh = Buffer.from([2, 0, 0, 0, 252, 0, 0, 1, 0, 0, 0, 0]);
  t.same(decodeRtEvent(33, Buffer.concat([frh, attr(6, u32(300)), attr(15, u32(300)), attr(10, u32(0x800)), attr(16, u32(0x800)), attr(3, Buffer.from('antrea-gw0\0'))])), { kind: 'rule', deleted: true, family: 4, priority: 300, table: 300, fwmark: 0x800, fwmask: 0x800, iif: 'antrea-gw0' });
  // RTM_DELNEIGH: ndmsg {AF_INET, pad, pad16, ifindex 7, state PERMANENT, flags, type}
  const nd = Buffer.alloc(12);
  nd[0] = 2;
  nd.writeInt32LE(7, 4);
  nd.writeUInt16LE(NUD_PERMANENT, 8);
  t.same(decodeRtEvent(29, Buffer.concat([nd, attr(1, Buffer.from([169, 254, 253, 1])), attr(2, Buffer.from([0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc]))])), { kind: 'neigh', deleted: true, family: 4, ip: '169.254.253.1', ifindex: 7, state: NUD_PERMANENT, lladdr: '12:34:56:78:9a:bc' });
  t.equal(decodeRtEvent(16, Buffer.alloc(16)), undefined, 'a link message is not one of these');
  t.equal(decodeRtEvent(24, Buffer.from([7, 0, 0, 0, 254, 0, 0, 0, 0, 0, 0, 0])), undefined, 'another address family');
  t.equal(
    describeRtEvent({ kind: 'route', deleted: true, family: 4, dst: '0.0.0.0', prefixLen: 0, table: 300, ifindex: 7, via: '169.254.253.1' }, (i) => (i === 7 ? 'antrea-gw0' : undefined)),
    'Deleted route default via 169.254.253.1 dev antrea-gw0 table 300',
  );
});

t.test('nft monitor events that trigger a repair (lines as nft 1.0.6 prints them)', async (t) => {
  t.ok(isRulesetTamperEvent('delete rule ip mangle ANTREA-MANGLE handle 4'), 'a rule of sluice\'s chain');
  t.ok(isRulesetTamperEvent('delete rule ip mangle PREROUTING handle 3'), 'the jump (iptables -t mangle -F)');
  t.ok(isRulesetTamperEvent('delete rule ip raw PREROUTING handle 9'), 'the raw jump');
  t.ok(isRulesetTamperEvent('delete chain ip raw ANTREA-RAW'), 'sluice\'s chain');
  t.ok(isRulesetTamperEvent('delete rule ip filter ANTREA-FORWARD handle 2'), 'the forward chain');
  t.ok(isRulesetTamperEvent('delete table ip mangle'), 'the table (nft flush ruleset)');
  t.ok(isRulesetTamperEvent('delete rule ip6 mangle PREROUTING handle 3'), 'ip6tables too');
  t.ok(isRulesetTamperEvent('delete table netdev sluice_veth_guard'), 'the veth guard table');
  t.notOk(isRulesetTamperEvent('delete chain netdev sluice_veth_guard g-veth1234'), 'a guard chain: the agent removes one on every DEL');
  t.notOk(isRulesetTamperEvent('delete rule ip nat KUBE-SERVICES handle 7'), "kube-proxy's own chains");
  t.notOk(isRulesetTamperEvent('delete rule ip filter KUBE-FORWARD handle 7'), "kube-proxy's filter chain");
  t.notOk(isRulesetTamperEvent('delete table ip nat'), 'a table sluice does not use');
  t.notOk(isRulesetTamperEvent('add rule ip mangle PREROUTING counter packets 0 bytes 0 jump ANTREA-MANGLE'), 'additions');
  t.notOk(isRulesetTamperEvent('# new generation 6 by process 4637 (iptables-nft)'), 'generation comments');
  t.notOk(isRulesetTamperEvent('delete table netdev other'), "someone else's netdev table");
});
