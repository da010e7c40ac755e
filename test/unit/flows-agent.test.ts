import t from 'tap';
import type { PodRequest } from '../../daemon/cniserver.js';
import { isRepairEvent, isRulesetTamperEvent } from '../../daemon/hostnet/monitor.js';
import { flowCheckReport } from '../../daemon/ctl/node-flows.js';
import { nameTables, traceFlow } from '../../daemon/ctl/node-trace.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { attachmentFromPort, podIPs, portIds } from '../../daemon/podattach.js';

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
  t.match(r.text, `missing: L3Forwarding (container c1): table=10,priority=200,cookie=${l3.cookie},ip,nw_dst=10.1.0.11`);
  t.match(r.text, 'unexpected sluice flow: cookie 0x51ce01ffffffffff');
});

t.test('node trace output gets table names', async (t) => {
  const raw = ' 0. ip,in_port=1, priority 200\n      goto_table:3\n 4. ip, priority 200\n      ct(table=5,zone=65520)\n       -> The forked pipeline will be resumed at table 5.';
  t.equal(
    nameTables(raw),
    ' 0. [Classifier] ip,in_port=1, priority 200\n      goto_table:SpoofGuard\n 4. [ConntrackZone] ip, priority 200\n      ct(table=ConntrackState,zone=65520)\n       -> The forked pipeline will be resumed at table ConntrackState.',
  );
});

t.test('netlink events that trigger a repair', async (t) => {
  const gw = 'antrea-gw0';
  t.ok(isRepairEvent('Deleted default via 169.254.253.1 dev antrea-gw0 table antrea_service onlink', gw), 'table 300 route');
  t.ok(isRepairEvent('Deleted 10.10.1.5 dev antrea-gw0 scope link', gw), 'a Pod route');
  t.ok(isRepairEvent('Deleted 300:\tfrom all fwmark 0x800/0x800 iif antrea-gw0 lookup antrea_service', gw), 'the rule');
  t.ok(isRepairEvent('Deleted 169.254.253.1 dev antrea-gw0 lladdr 12:34:56:78:9a:bc PERMANENT', gw), 'the permanent neighbour');
  t.notOk(isRepairEvent('Deleted 10.10.1.5 dev antrea-gw0 lladdr aa:bb:cc:dd:ee:ff STALE', gw), 'neighbour GC');
  t.notOk(isRepairEvent('Deleted 10.10.1.5 dev eni0ed3bbcad01 scope link', gw), 'a route on a veth (Pod teardown)');
  t.notOk(isRepairEvent('10.10.1.5 dev antrea-gw0 scope link', gw), 'additions');
  t.notOk(isRepairEvent('Deleted 100:\tfrom all fwmark 0x1 lookup 100', gw), "someone else's rule");
  t.notOk(isRepairEvent('Deleted 10.10.1.5 dev antrea-gw00 scope link', gw), 'another device with a longer name');
  const pods = new Set(['10.10.1.5']);
  t.ok(isRepairEvent('10.10.1.5 dev eni0ed3bbcad01 scope link', gw, pods), "an attached Pod's route replaced onto its veth (no deletion is reported)");
  t.ok(isRepairEvent('10.10.1.5 via 192.168.77.1 dev uplink', gw, pods), "an attached Pod's route replaced by one via another device");
  t.notOk(isRepairEvent('10.10.1.5 dev antrea-gw0 scope link', gw, pods), 'the route sluice keeps (its own repair)');
  t.notOk(isRepairEvent('10.10.1.9 dev eni0ed3bbcad01 scope link', gw, pods), 'a route of a Pod sluice has not attached (an ADD in progress)');
  t.notOk(isRepairEvent('10.10.1.5 dev eni0ed3bbcad01 lladdr aa:bb:cc:dd:ee:ff REACHABLE', gw, pods), 'a neighbour entry');
  t.notOk(isRepairEvent('10.10.1.5 dev eni0ed3bbcad01 table 100 scope link', gw, pods), 'another routing table');
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
