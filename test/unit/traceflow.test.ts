// daemon/flows/traceflow.ts: the traced packet, the observation flows, and the report assembled
// from the bridge's observations (test/lab/traceflow.test.ts traces real packets).
import t from 'tap';
import { decodeEthernet, decodeIpv4, internetChecksum, ipv4ToBytes, ipv4TransportChecksum } from '../../daemon/packet.js';
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

t.test('observation flows: one per table, top priority, this source and DSCP only, each table once per pass', async (t) => {
  const lines = traceObservationFlows('10.10.1.5').trim().split('\n');
  t.equal(lines.length, TABLES.length);
  lines.forEach((l, i) => {
    t.match(l, new RegExp(`^cookie=0x7ace0*${i.toString(16)},table=${i},priority=65535,ip,nw_src=10\\.10\\.1\\.5,nw_tos=252,reg9=0/0x${(1 << i).toString(16)},actions=controller\\(userdata=08\\.00\\.${i.toString(16).padStart(2, '0')},meter_id=260\\),load:1->NXM_NX_REG9\\[${i}\\],resubmit\\(,${i}\\)$`), TABLES[i]!);
  });
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
