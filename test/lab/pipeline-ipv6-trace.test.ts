/**
 * The IPv6 base pipeline in a real OVS (netdev, private directories, in a "v6-tr" network
 * namespace), by `ofproto/trace`: Neighbour Discovery answered or refused, IPv6 spoofing and
 * scopes dropped, delivery by destination, the hop limit, and the re-entrance of IPv6 Service
 * traffic. Each case is judged by the datapath actions OVS computes for the packet.
 */
import { join } from 'node:path';
import t from 'tap';
import { bundleText } from '../../daemon/flows/diff.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { missingPrereq, ovsShell, startTraceBridge, stopTraceBridge } from './datapath-env.js';

const NS = 'v6-tr';
const DIR = `/tmp/${NS}`;
const sh = ovsShell(join(DIR, 'ovs'));
const V6: Record<string, string> = { a: 'fd00:1::11', b: 'fd00:1::12' };
const VMAC = 'aa:bb:cc:dd:ee:ff';

const why = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ovs-appctl', 'ip']);
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  t.teardown(() => stopTraceBridge(NS, DIR));
  const { flowProgrammer, gw, ports } = await startTraceBridge(NS, DIR, 'v6p', { a: '10.1.0.11', b: '10.1.0.12' });
  const flows = computeFlows({
    gatewayOfport: gw.ofport, gatewayMac: gw.mac, nodeIP: '192.168.77.11', nodeIPv6: 'fd00:77::11', serviceCIDRs: ['10.96.0.0/16', 'fd00:96::/112'],
    pods: Object.entries(ports).map(([name, p]) => ({ containerId: `c-${name}`, ofport: p.ofport, mac: p.mac, ips: [p.ip, V6[name]!] })),
  });
  const load = await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--bundle', 'add-flows', flowProgrammer.target, '-'], { input: bundleText({ add: flows, remove: [], unchanged: 0 }), allowFail: true });
  const show = (await sh('ovs-appctl', ['dpif/show'])).stdout;
  const dp = (name: string) => new RegExp(`\\b${name} \\d+/(\\d+)`).exec(show)![1]!;
  const DP = { gw: dp('antrea-gw0'), a: dp('v6pa'), b: dp('v6pb') };
  const A = ports.a!, B = ports.b!;

  const trace = async (flow: string) => {
    const out = (await sh('ovs-appctl', ['ofproto/trace', 'br-int', flow, '--ct-next', 'trk,new'])).stdout;
    return { actions: [...out.matchAll(/Datapath actions: (.*)/g)].pop()?.[1] ?? '', final: /Final flow: (.*)/.exec(out)?.[1] ?? '', out };
  };
  const fromA = `in_port=${A.ofport},dl_src=${A.mac}`;
  const ns = (src: string, target: string, sll: string, where = fromA) =>
    `icmp6,${where},dl_dst=33:33:ff:00:00:01,ipv6_src=${src},ipv6_dst=ff02::1:ff00:1,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=${target},nd_sll=${sll}`;

  t.equal(load.code, 0, `every flow loads${load.code ? `: ${load.stderr}` : ''}`);

  await t.test('a Pod\'s solicitation for its gateway is answered in place with the virtual MAC', async (t) => {
    for (const src of [V6.a!, 'fe80::2800:ff:fe00:11']) {
      const r = await trace(ns(src, 'fd00:1::1', A.mac));
      t.match(r.actions, new RegExp(`,${DP.a}$`), `from ${src}: back out the Pod's port (${r.actions})`);
      t.match(r.actions, /icmpv6\(type=136/, 'turned into an advertisement');
      t.match(r.actions, new RegExp(`nd\\(.*tll=${VMAC}`), 'target link-layer address: the virtual MAC');
      t.match(r.actions, /nd_ext\(nd_reserved=0xe0000000,nd_options_type=2\)/, 'Router, Solicited and Override; a TLL option');
      t.match(r.actions, new RegExp(`ipv6\\(src=fd00:1::1,dst=${src.replace(/:/g, ':')}`), 'from the solicited address to the asker');
      t.match(r.actions, new RegExp(`eth\\(src=${VMAC},dst=${A.mac}\\)`));
    }
  });

  await t.test('the host\'s solicitation for a Pod is answered to the gateway, without the Router flag', async (t) => {
    const r = await trace(ns('fe80::1', V6.b!, gw.mac, `in_port=${gw.ofport},dl_src=${gw.mac}`));
    t.match(r.actions, new RegExp(`,${DP.gw}$`), r.actions);
    t.match(r.actions, /nd_ext\(nd_reserved=0x60000000,nd_options_type=2\)/);
  });

  await t.test('DAD, forged solicitations and every advertisement are dropped', async (t) => {
    t.equal((await trace(ns('::', V6.a!, A.mac))).actions, 'drop', 'DAD of the Pod\'s own address is not answered');
    t.equal((await trace(ns('::', 'fe80::1', gw.mac, `in_port=${gw.ofport},dl_src=${gw.mac}`))).actions, 'drop', 'nor the host\'s');
    t.equal((await trace(ns(V6.a!, 'fd00:1::1', '2a:00:00:00:00:99'))).actions, 'drop', 'another MAC in the SLL option');
    t.equal((await trace(ns(V6.b!, 'fd00:1::1', A.mac))).actions, 'drop', 'another Pod\'s source address');
    t.equal((await trace(ns(V6.a!, 'fd00:1::1', A.mac, `in_port=${A.ofport},dl_src=2a:00:00:00:00:99`))).actions, 'drop', 'another source MAC');
    for (const target of ['fd00:1::1', V6.b!, V6.a!]) {
      const na = `icmp6,${fromA},dl_dst=${gw.mac},ipv6_src=${V6.a},ipv6_dst=ff02::1,nw_ttl=255,icmpv6_type=136,icmpv6_code=0,nd_target=${target},nd_tll=${A.mac}`;
      t.equal((await trace(na)).actions, 'drop', `a Pod's advertisement for ${target}`);
    }
  });

  await t.test('IPv6 spoofing, link-local and multicast never cross the bridge', async (t) => {
    const pkt = (src: string, dst: string, where = fromA, dlDst = VMAC) => `tcp6,${where},dl_dst=${dlDst},ipv6_src=${src},ipv6_dst=${dst},nw_ttl=64,tcp_src=40000,tcp_dst=80`;
    t.equal((await trace(pkt(V6.b!, 'fd00:2::21'))).actions, 'drop', 'another Pod\'s source');
    t.equal((await trace(pkt('fd00:1::99', 'fd00:2::21'))).actions, 'drop', 'an unassigned source');
    t.equal((await trace(pkt(V6.a!, 'fe80::1'))).actions, 'drop', 'to a link-local address');
    t.equal((await trace(pkt('fe80::2800:ff:fe00:11', 'fd00:2::21'))).actions, 'drop', 'from a link-local address');
    t.equal((await trace(pkt(V6.a!, 'ff02::1', fromA, '33:33:00:00:00:01'))).actions, 'drop', 'to a multicast group');
    t.equal((await trace(pkt('fe80::1', 'ff02::16', `in_port=${gw.ofport},dl_src=${gw.mac}`, '33:33:00:00:00:16'))).actions, 'drop', 'the host\'s multicast (MLD, RS) is not reflected');
    t.equal((await trace(pkt(V6.a!, 'fd00:2::21', fromA, 'de:ad:be:ef:de:ad'))).actions, 'drop', 'a Pod frame to the re-entrance MAC');
  });

  await t.test('delivery by destination IPv6 address', async (t) => {
    const r = await trace(`tcp6,${fromA},dl_dst=${VMAC},ipv6_src=${V6.a},ipv6_dst=${V6.b},nw_ttl=64,tcp_src=40000,tcp_dst=80`);
    t.match(r.actions, new RegExp(`,${DP.b}$`), `to the local Pod's port (${r.actions})`);
    t.match(r.actions, new RegExp(`eth\\(src=${VMAC},dst=${B.mac}\\)`));
    t.match(r.actions, /hlimit=63/, `hop limit decremented: the hop the host used to make (${r.actions})`);
    const out = await trace(`udp6,${fromA},dl_dst=${VMAC},ipv6_src=${V6.a},ipv6_dst=fd00:2::21,nw_ttl=64,udp_src=40000,udp_dst=53`);
    t.match(out.actions, new RegExp(`eth\\(dst=${gw.mac}\\).*,${DP.gw}$`), `elsewhere: to the gateway (${out.actions})`);
    t.notMatch(out.actions, /hlim/, 'the host makes that hop itself');
    const host = await trace(`tcp6,in_port=${gw.ofport},dl_src=${gw.mac},dl_dst=${VMAC},ipv6_src=fd00:77::11,ipv6_dst=${V6.a},nw_ttl=64,tcp_src=40000,tcp_dst=80`);
    t.match(host.actions, new RegExp(`,${DP.a}$`), `from the host to a Pod (${host.actions})`);
  });

  await t.test('IPv6 Service traffic goes to the host untouched and comes back by re-entrance', async (t) => {
    const svc = await trace(`tcp6,${fromA},dl_dst=${VMAC},ipv6_src=${V6.a},ipv6_dst=fd00:96::10,nw_ttl=64,tcp_src=40000,tcp_dst=80`);
    t.match(svc.actions, new RegExp(`,${DP.gw}$`), `to the gateway (${svc.actions})`);
    const back = await trace(`tcp6,in_port=${gw.ofport},dl_src=${gw.mac},dl_dst=12:34:56:78:9a:bc,ipv6_src=${V6.a},ipv6_dst=fd00:2::21,nw_ttl=63,tcp_src=40000,tcp_dst=8080`);
    t.match(back.actions, /eth\(src=de:ad:be:ef:de:ad/, `re-entrance: the re-entrance MAC (${back.actions})`);
    t.match(back.actions, new RegExp(`,${DP.gw}$`), 'out the port it came in');
    t.notMatch(back.actions, /ct\(commit/, 'never committed');
  });
}
