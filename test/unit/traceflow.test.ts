// daemon/flows/traceflow.ts: the traced packet, the observation flows, and the report assembled
// from the bridge's observations (test/lab/traceflow.test.ts traces real packets).
import t from 'tap';
import { decodeEthernet, decodeIpv4, decodeIpv6Packet, internetChecksum, ipv4ToBytes, ipv4TransportChecksum, ipv6ToString, ipv6TransportChecksum } from '../../daemon/packet.js';
import { REG0, TABLES, tableId, VIRTUAL_MAC } from '../../daemon/flows/tables.js';
import { assembleTrace, describeRule, TRACE_COOKIE_FILTER, TRACE_TOS, traceFrame, traceObservationFlows, type TraceContext, type TraceLeg } from '../../daemon/flows/traceflow.js';
import { type TraceDestination, type TraceObserver, Tracer } from '../../daemon/enforcement/traceflow.js';

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
const upTo = (last: string) => TABLES.slice(0, TABLES.indexOf(last as never) + 1);
const visit = (names: string[], regs: Record<number, number> = {}) =>
  names.map((n) => ({ table: tableId(n as never), registers: Array.from({ length: 16 }, (_v, i) => regs[i] ?? 0) }));

t.test('assembleTrace: allow, rule drop, reject, default-deny drop, a Service in two legs', async (t) => {
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

// The live part (daemon/enforcement/traceflow.ts): a trace that leaves through antrea-gw0 is
// completed by the bridge of the Node it reaches, whose agent observes it from before it is sent.
const fakeIo = (tracer: Tracer, bridge: { table: number; registers: number[] }[], log: string[]) => ({
  addFlows: async () => void log.push('flows in'),
  removeFlows: async () => void log.push('flows out'),
  packetOut: () => {
    log.push('packet out');
    // The bridge reports each table visit a moment later.
    setTimeout(() => {
      for (const o of bridge) tracer.onTracePunt({ registers: o.registers } as never, { extra: Buffer.from([o.table]) } as never);
    }, 5);
    return true;
  },
});
const request = (destination: TraceDestination) => ({
  source: { pod: 'x/a', ip: '10.10.1.5', mac: '2a:00:00:00:00:05', ofport: 3 }, to: 'x/b', destination, protocol: 'TCP' as const, dstPort: 80,
});
const toNode2 = { ip: '10.10.2.7', nodes: [{ name: 'node-2', address: '10.0.0.2' }] };

function observer(node: string, legs: TraceLeg[] | Error, log: string[], startFails?: Error): TraceObserver {
  return {
    node,
    start: async () => {
      log.push(`${node} observing`);
      if (startFails) throw startFails;
      return 'obs-1';
    },
    result: async () => {
      log.push(`${node} asked`);
      if (legs instanceof Error) throw legs;
      return legs;
    },
    stop: async () => void log.push(`${node} stopped`),
  };
}

const remoteDrop: TraceLeg[] = [{ tables: ['Classifier', 'IngressDefaultRule'], verdict: 'drop', outcome: 'dropped in IngressDefaultRule (the destination is isolated …)' }];

t.test('Tracer: a packet that leaves for another Node is decided there; every leg names its Node', async (t) => {
  const tracer = new Tracer();
  const log: string[] = [];
  const report = await tracer.trace(request(toNode2), fakeIo(tracer, visit(upTo('Output'), { 1: 32769 }), log), ctx, [observer('node-2', remoteDrop, log)], 'node-1');
  t.ok(log.indexOf('node-2 observing') < log.indexOf('packet out'), 'node-2 observes before the packet is sent');
  t.equal(report.verdict, 'drop', 'the end-to-end verdict is node-2\'s');
  t.same(report.legs.map((l) => [l.node, l.verdict, l.toGateway ?? false]), [['node-1', 'allow', true], ['node-2', 'drop', false]]);
  t.equal(report.note, undefined);
  t.notOk(tracer.busy, 'the bridge is free again');
  t.equal(log.filter((l) => l === 'flows out').length >= 2, true, 'the observation flows removed (leftovers first, then after the trace)');
});

t.test('Tracer: a trace that no bridge completes is incomplete, never allow', async (t) => {
  const leaves = visit(upTo('Output'), { 1: 32769 });
  const cases: [string, TraceDestination, (log: string[]) => TraceObserver[], RegExp][] = [
    ['the packet never reached node-2', toNode2, (log) => [observer('node-2', [], log)], /the packet did not reach Node node-2's bridge within \d+ ms/],
    ['node-2 could not observe', toNode2, (log) => [observer('node-2', [], log, new Error('10.0.0.2:10351: connect ECONNREFUSED'))], /Node node-2 could not observe: 10\.0\.0\.2:10351: connect ECONNREFUSED/],
    ['node-2 lost the observation', toNode2, (log) => [observer('node-2', new Error('no answer within 10000 ms'), log)], /Node node-2's observation was lost: no answer/],
    ['the destination\'s Node is not known', { ip: '10.10.9.9', nodes: [], unknown: 'the controller could not be asked where it leads: HTTP 503' }, () => [], /the controller could not be asked where it leads: HTTP 503/],
    ['no Node holds the address', { ip: '10.10.9.9', nodes: [] }, () => [], /no other Node's bridge is known to receive 10\.10\.9\.9/],
  ];
  for (const [what, dest, observers, note] of cases) {
    const tracer = new Tracer();
    const log: string[] = [];
    const r = await tracer.trace(request(dest), fakeIo(tracer, leaves, log), ctx, observers(log), 'node-1');
    t.equal(r.verdict, 'incomplete', `${what}: incomplete`);
    t.match(r.note, note, `${what}: the note says why`);
    t.same(r.legs.map((l) => l.verdict), ['allow'], `${what}: this Node's leg is reported`);
  }
});

t.test('Tracer: beyond sluice\'s bridges the verdict is this Node\'s; decided here, the other Nodes stop observing', async (t) => {
  let tracer = new Tracer();
  let log: string[] = [];
  const out = await tracer.trace(request({ ip: '192.0.2.9', nodes: [], beyond: '192.0.2.9 is no Pod, Service or Node of the cluster: no sluice bridge decides after this one' }),
    fakeIo(tracer, visit(upTo('Output'), { 1: 32769 }), log), ctx, [], 'node-1');
  t.equal(out.verdict, 'allow', 'an address outside the cluster: allowed by this Node');
  t.match(out.note, /left this node through antrea-gw0: 192\.0\.2\.9 is no Pod, Service or Node/);

  tracer = new Tracer();
  log = [];
  const dropped = await tracer.trace(request(toNode2), fakeIo(tracer, visit(upTo('IngressMetric'), { 0: REG0.ruleDrop, 6: 7 }), log), ctx, [observer('node-2', remoteDrop, log)], 'node-1');
  t.equal(dropped.verdict, 'drop', 'dropped on this Node');
  t.equal(dropped.legs[0]!.node, undefined, 'one Node: legs carry no Node');
  await new Promise((r) => setImmediate(r));
  t.ok(log.includes('node-2 stopped') && !log.includes('node-2 asked'), 'node-2 told to stop, not asked');
});

t.test('Tracer.observe: another Node\'s trace observed here, ended by quiet, by a stop, or refused while tracing', async (t) => {
  const tracer = new Tracer();
  const log: string[] = [];
  const io = { addFlows: async (text: string) => void log.push(text.split('\n')[0]!), removeFlows: async () => void log.push('flows out') };
  const id = await tracer.observe('10.10.1.5', io, ctx);
  t.ok(tracer.busy, 'observing holds the bridge');
  t.match(log.join('\n'), /nw_src=10\.10\.1\.5,nw_tos=252/, 'observation flows for the traced source');
  await t.rejects(tracer.trace(request(toNode2), fakeIo(tracer, [], log), ctx), /another trace is running/, 'a trace meanwhile is refused');
  for (const o of visit(upTo('Output'), { 1: 2, 6: 9 })) tracer.onTracePunt({ registers: o.registers } as never, { extra: Buffer.from([o.table]) } as never);
  const legs = await tracer.observed(id, false)!;
  t.match(legs, [{ verdict: 'allow', outcome: 'output to Pod x/c (port 2)', ingressRule: { name: 'allow' } }], 'the legs as this Node names them');
  t.notOk(tracer.busy);
  t.equal(tracer.observed('nope', false), undefined, 'an unknown id');

  const id2 = await tracer.observe('10.10.1.5', io, ctx);
  const started = Date.now();
  t.same(await tracer.observed(id2, true)!, [], 'stopped before anything arrived: no legs');
  t.ok(Date.now() - started < 1000, 'a stop ends the observation at once');
  t.notOk(tracer.busy);
});
