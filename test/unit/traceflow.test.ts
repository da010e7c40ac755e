// daemon/flows/traceflow.ts: the traced packet, the observation flows, and the report assembled
// from the bridge's observations (test/lab/traceflow.test.ts traces real packets).
import t from 'tap';
import { decodeEthernet, decodeIpv4, decodeIpv6Packet, internetChecksum, ipv4ToBytes, ipv4TransportChecksum, ipv6ToString, ipv6TransportChecksum } from '../../daemon/packet.js';
import { REG0, TABLES, tableId, VIRTUAL_MAC } from '../../daemon/flows/tables.js';
import { assembleTrace, describeRule, TRACE_COOKIE_FILTER, TRACE_TOS, traceFrame, traceObservationFlows, type TraceContext } from '../../daemon/flows/traceflow.js';

const base = { srcMac: '2a:00:00:00:00:05', srcIp: '10.10.1.5', dstIp: '10.10.1.3', dstPort: 80, srcPort: 40001, ipId: 77 };

t.test('traceFrame: a valid Ethernet/IPv4 frame with DSCP 63 for each protocol', async (t) => {
  for (const protocol of ['TCP', 'UDP', 'ICMP'] as const) {
    const f = traceFrame({ ...base, protocol });
    const eth = decodeEthernet(f);
    const mac = (b: Buffer) => [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
    t.same([mac(eth.dst), mac(eth.src), eth.etherType], [VIRTUAL_MAC, base.srcMac, 0x0800], `${protocol}: to the virtual MAC, from the Pod`);
    const ip = decodeIpv4(f, 14);
    t.equal(f[15], TRACE_TOS, `${protocol}: DSCP 63`);
    t.equal(internetChecksum(f.subarray(14, 34)), 0, `${protocol}: IPv4 header checksum valid`);
    t.same([ip.src, ip.dst, ip.totalLength, f.length], [base.srcIp, base.dstIp, f.length - 14, f.length]);
    const l4 = f.subarray(34);
    if (protocol === 'ICMP') {
      t.same([l4[0], l4[1], internetChecksum(l4)], [8, 0, 0], 'echo request, checksum valid');
    } else {
      t.equal(ipv4TransportChecksum(ipv4ToBytes(base.srcIp), ipv4ToBytes(base.dstIp), protocol === 'TCP' ? 6 : 17, l4), 0, `${protocol} checksum valid`);
      t.same([l4.readUInt16BE(0), l4.readUInt16BE(2)], [40001, 80], 'ports');
      if (protocol === 'TCP') t.equal(l4[13], 0x02, 'a SYN');
    }
  }
});

t.test('traceFrame: a valid Ethernet/IPv6 frame with traffic class DSCP 63 for each protocol (ICMP: an ICMPv6 echo request)', async (t) => {
  const v6 = { ...base, srcIp: 'fd00:10:1::5', dstIp: 'fd00:10:1::3' };
  for (const protocol of ['TCP', 'UDP', 'ICMP'] as const) {
    const f = traceFrame({ ...v6, protocol });
    t.equal(f.readUInt16BE(12), 0x86dd, `${protocol}: an IPv6 frame`);
    const pkt = decodeIpv6Packet(f);
    t.same([ipv6ToString(pkt.src), ipv6ToString(pkt.dst), pkt.payloadLength, f.length], [v6.srcIp, v6.dstIp, f.length - 54, f.length]);
    t.equal(((f[14]! & 0x0f) << 4) | (f[15]! >> 4), TRACE_TOS, `${protocol}: traffic class DSCP 63`);
    t.equal(f[14]! >> 4, 6, 'version 6');
    const l4 = f.subarray(54);
    const next = protocol === 'TCP' ? 6 : protocol === 'UDP' ? 17 : 58;
    t.equal(f[20], next, `${protocol}: next header ${next}`);
    t.equal(ipv6TransportChecksum(pkt.src, pkt.dst, next, l4), 0, `${protocol}: checksum valid`);
    if (protocol === 'ICMP') t.same([l4[0], l4[1]], [128, 0], 'an ICMPv6 echo request');
  }
  t.throws(() => traceFrame({ ...base, dstIp: 'fd00:10:1::3', protocol: 'TCP' }), /not of one family/);
});

t.test('observation flows: one per table, top priority, this source and DSCP only, each table once per pass', async (t) => {
  const lines = traceObservationFlows('10.10.1.5').trim().split('\n');
  t.equal(lines.length, TABLES.length);
  lines.forEach((l, i) => {
    t.match(l, new RegExp(`^cookie=0x7ace0*${i.toString(16)},table=${i},priority=65535,ip,nw_src=10\\.10\\.1\\.5,nw_tos=252,reg9=0/0x${(1 << i).toString(16)},actions=controller\\(userdata=08\\.00\\.${i.toString(16).padStart(2, '0')},meter_id=260\\),load:1->NXM_NX_REG9\\[${i}\\],resubmit\\(,${i}\\)$`), TABLES[i]!);
  });
  const v6 = traceObservationFlows('fd00:10:1::5').trim().split('\n');
  t.equal(v6.length, TABLES.length);
  t.ok(v6.every((l) => l.includes(',priority=65535,ipv6,ipv6_src=fd00:10:1::5,nw_tos=252,')), 'an IPv6 source: ipv6_src, the traffic class by nw_tos');
  t.equal(TRACE_COOKIE_FILTER, 'cookie=0x7ace000000000000/0xffff000000000000', 'removable by one cookie mask, outside sluice\'s 0x51ce');
});

const ctx: TraceContext = {
  rule: (id) => (id === 7 ? { kind: 'AntreaClusterNetworkPolicy', name: 'p', rule: 'no-z', tier: 'securityops', priority: 5, action: 'Reject' } : id === 9 ? { kind: 'NetworkPolicy', namespace: 'x', name: 'allow', rule: 'ingress-0', action: 'Allow' } : undefined),
  port: (p) => (p === 32769 ? 'antrea-gw0 (port 32769)' : `Pod x/c (port ${p})`),
  gatewayOfport: 32769,
};
const visit = (names: string[], regs: Record<number, number> = {}) =>
  names.map((n) => ({ table: tableId(n as never), registers: Array.from({ length: 16 }, (_v, i) => regs[i] ?? 0) }));

t.test('assembleTrace: allow, rule drop, reject, default-deny drop, a Service in two legs', async (t) => {
  const upTo = (last: string) => TABLES.slice(0, TABLES.indexOf(last as never) + 1);
  const allow = assembleTrace(visit(upTo('Output'), { 1: 2, 6: 9 }), false, ctx);
  t.match(allow, [{ verdict: 'allow', outcome: 'output to Pod x/c (port 2)', ingressRule: { name: 'allow' } }]);
  const dropped = assembleTrace(visit(upTo('IngressMetric'), { 0: REG0.ruleDrop, 6: 7 }), false, ctx);
  t.match(dropped, [{ verdict: 'drop', outcome: /dropped in IngressMetric by AntreaClusterNetworkPolicy p rule no-z \(Reject, tier securityops, priority 5\)/ }]);
  t.match(assembleTrace(visit(upTo('IngressMetric'), { 0: REG0.ruleDrop, 6: 7 }), true, ctx), [{ verdict: 'reject', outcome: /^rejected in IngressMetric/ }], 'the reject punt turns it into reject');
  t.match(assembleTrace(visit(upTo('IngressDefaultRule')), false, ctx), [{ verdict: 'drop', outcome: /dropped in IngressDefaultRule \(the destination is isolated/ }]);
  const svc = assembleTrace([...visit(upTo('Output'), { 1: 32769 }), ...visit(upTo('Output'), { 1: 2 })], false, ctx);
  t.same(svc.map((l) => [l.verdict, l.outcome]), [['allow', 'output to antrea-gw0 (port 32769)'], ['allow', 'output to Pod x/c (port 2)']], 'a new leg whenever table 0 is entered again');
  t.equal(describeRule({ kind: 'NetworkPolicy', namespace: 'x', name: 'allow', rule: 'ingress-0', action: 'Allow' }), 'NetworkPolicy x/allow rule ingress-0 (Allow)');
});
