import t from 'tap';
import { AuditDeduplicator } from '../../daemon/enforcement/auditlog/dedup.js';
import {
  type AuditEvent,
  formatAuditLine,
  formatGoDuration,
  formatTimestamp,
  K8S_DEFAULT_DROP_REFERENCE,
  packetFields,
  policyReference,
} from '../../daemon/enforcement/auditlog/format.js';

// 2021/06/24 23:56:41.346165 UTC in ns
const T0 = BigInt(Date.UTC(2021, 5, 24, 23, 56, 41)) * 1_000_000n + 346_165_000n;
const ms = (n: number) => BigInt(n) * 1_000_000n;

const drop = (over: Partial<AuditEvent> = {}): AuditEvent => ({
  timeNs: T0,
  tableName: 'AntreaPolicyEgressRule',
  policyRef: policyReference({ kind: 'AntreaNetworkPolicy', namespace: 'default', name: 'test-anp' }),
  action: 'Drop',
  priority: 44900,
  srcIp: '10.10.1.65',
  srcPort: 35402,
  dstIp: '10.0.0.5',
  dstPort: 80,
  protocol: 'TCP',
  length: 60,
  ...over,
});

t.test('the example lines of the Antrea documentation, byte for byte', async (t) => {
  t.equal(
    formatAuditLine(drop(), 'utc', { count: 3, durationNs: 1_011_379_442n }),
    '2021/06/24 23:56:41.346165 AntreaPolicyEgressRule AntreaNetworkPolicy:default/test-anp Drop 44900 10.10.1.65 35402 10.0.0.5 80 TCP 60 [3 packets in 1.011379442s]',
  );
  const t2 = BigInt(Date.UTC(2022, 6, 26, 6, 55, 56)) * 1_000_000n + 170_456_000n;
  t.equal(
    formatAuditLine({
      timeNs: t2,
      tableName: 'IngressRule',
      policyRef: policyReference({ kind: 'NetworkPolicy', namespace: 'default', name: 'test-np-log' }),
      action: 'Allow',
      priority: 190,
      srcIp: '10.10.1.82',
      srcPort: 49518,
      dstIp: '10.10.1.84',
      dstPort: 80,
      protocol: 'TCP',
      length: 60,
    }),
    '2022/07/26 06:55:56.170456 IngressRule K8sNetworkPolicy:default/test-np-log Allow 190 10.10.1.82 49518 10.10.1.84 80 TCP 60',
  );
  t.equal(
    formatAuditLine(drop({ timeNs: t2 + ms(972) - 1_000n * 250n, tableName: 'IngressDefaultRule', policyRef: K8S_DEFAULT_DROP_REFERENCE, priority: -1, srcIp: '10.10.1.83', srcPort: 38608, dstIp: '10.10.1.84' })),
    '2022/07/26 06:55:57.142206 IngressDefaultRule K8sNetworkPolicy Drop -1 10.10.1.83 38608 10.10.1.84 80 TCP 60',
  );
  t.equal(formatAuditLine(drop(), 'utc', { count: 1, durationNs: 0n }).endsWith('TCP 60'), true, 'no suffix for a single packet');
});

t.test('policy references of every kind', async (t) => {
  t.equal(policyReference({ kind: 'AntreaClusterNetworkPolicy', name: 'acnp-name' }), 'AntreaClusterNetworkPolicy:acnp-name');
  t.equal(policyReference({ kind: 'AdminNetworkPolicy', name: 'anp' }), 'AdminNetworkPolicy:anp');
  t.equal(policyReference({ kind: 'BaselineAdminNetworkPolicy', name: 'default' }), 'BaselineAdminNetworkPolicy:default');
  t.equal(policyReference({ kind: 'ClusterNetworkPolicy', name: 'cnp' }), 'ClusterNetworkPolicy:cnp');
  t.throws(() => policyReference({ kind: 'NetworkPolicy', name: 'x' }), /NetworkPolicy x has no namespace/);
  t.throws(() => policyReference({ kind: 'Bogus' as 'NetworkPolicy', name: 'x' }), /unknown policy kind "Bogus"/);
});

t.test('timestamps and Go durations', async (t) => {
  t.equal(formatTimestamp(BigInt(Date.UTC(2026, 0, 2, 3, 4, 5)) * 1_000_000n + 7_000n), '2026/01/02 03:04:05.000007');
  const cases: [bigint, string][] = [
    [0n, '0s'],
    [999n, '999ns'],
    [1_500n, '1.5µs'],
    [600_000_000n, '600ms'],
    [1_011_379_442n, '1.011379442s'],
    [1_000_000_000n, '1s'],
    [62_500_000_000n, '1m2.5s'],
    [3_600_000_000_000n, '1h0m0s'],
  ];
  for (const [ns, s] of cases) t.equal(formatGoDuration(ns), s, s);
});

t.test('missing ports print <nil>; fields read from a frame', async (t) => {
  const event = drop({ protocol: 'ICMP', length: 84 });
  delete event.srcPort;
  delete event.dstPort;
  const line = formatAuditLine(event);
  t.match(line, / 10\.10\.1\.65 <nil> 10\.0\.0\.5 <nil> ICMP 84$/);
  const frame = Buffer.from('0a000000000b0a000000000a0800' + '4500001c00004000400100000a0a01410a000005' + '0800f7ff00000000', 'hex');
  t.same(packetFields(frame), { srcIp: '10.10.1.65', dstIp: '10.0.0.5', protocol: 'ICMP', length: 28 });
  const udp = Buffer.from('0a000000000b0a000000000a0800' + '4500001d00004000401100000a0a01410a000005' + '9c400035000900000a' + '000000', 'hex');
  t.same(packetFields(udp), { srcIp: '10.10.1.65', dstIp: '10.0.0.5', protocol: 'UDP', length: 29, srcPort: 40000, dstPort: 53 });
});

t.test('dedup: drops and rejects held for the window, counted, flushed once', async (t) => {
  const out: string[] = [];
  const d = new AuditDeduplicator((l) => out.push(l));
  d.record(drop());
  d.record(drop({ timeNs: T0 + ms(300) }));
  d.record(drop({ timeNs: T0 + ms(600) }));
  d.record(drop({ timeNs: T0 + ms(100), srcPort: 35403 })); // another connection: its own line
  d.record(drop({ timeNs: T0 + ms(200), action: 'Allow' }));
  d.record(drop({ timeNs: T0 + ms(250), action: 'Pass' }));
  t.equal(out.length, 2, 'Allow and Pass are written at once');
  t.match(out[0], / Allow 44900 /);
  t.equal(d.nextDeadlineNs(), T0 + ms(1000));
  d.flushDue(T0 + ms(999));
  t.equal(out.length, 2, 'nothing before the window closes');
  d.flushDue(T0 + ms(1000));
  t.equal(out.length, 3);
  t.equal(out[2], '2021/06/24 23:56:41.346165 AntreaPolicyEgressRule AntreaNetworkPolicy:default/test-anp Drop 44900 10.10.1.65 35402 10.0.0.5 80 TCP 60 [3 packets in 600ms]');
  t.equal(d.nextDeadlineNs(), T0 + ms(1100));
  d.record(drop({ timeNs: T0 + ms(1050) })); // the first key's window closed: a new window starts
  d.flushDue(T0 + ms(1100));
  t.equal(out[3], '2021/06/24 23:56:41.446165 AntreaPolicyEgressRule AntreaNetworkPolicy:default/test-anp Drop 44900 10.10.1.65 35403 10.0.0.5 80 TCP 60', 'single packet: no suffix');
  t.equal(d.heldCount, 1);
  d.record(drop({ timeNs: T0 + ms(1060), action: 'Reject' }));
  d.record(drop({ timeNs: T0 + ms(1070), action: 'Reject' }));
  d.flushAll();
  t.equal(out.length, 6);
  t.match(out[5], / Reject 44900 .* \[2 packets in 10ms\]$/);
  t.equal(d.nextDeadlineNs(), undefined);
});
