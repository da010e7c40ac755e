/**
 * Per-rule statistics read from the bridge's counter flows: parsing ovs-ofctl's dump, totals kept
 * monotonic across an ovs-vswitchd restart, sums per rule over its units, and sluicectl's view.
 */
import t from 'tap';
import { renderRuleStats, matchesPolicy } from '../../daemon/ctl/node-stats.js';
import { CounterBaseline, parseFlowCounters, RuleCountCarrier, ruleKey, ruleStatistics, type MetricFlow, type RuleOfConj } from '../../daemon/flows/policy/stats.js';

// As ovs-ofctl 3.1 prints them (dump-flows --no-names).
const DUMP = [
  'NXST_FLOW reply (xid=0x4):',
  ' cookie=0x51ce02a1b2c3d4e5, duration=12.345s, table=9, n_packets=7, n_bytes=518, priority=190,ct_state=+new+trk,ip,reg5=0xc53feac actions=goto_table:10',
  ' cookie=0x51ce020000000001, duration=12.345s, table=9, n_packets=40, n_bytes=3000, idle_age=1, priority=180,ct_state=-new+trk,ct_label=0xc53feac/0xffffffff,ip actions=goto_table:10',
  ' cookie=0x51ce020000000002, duration=2.1s, table=16, n_packets=3, n_bytes=180, priority=200,ip,reg0=0x1000/0x1000,reg6=0x1234 actions=drop',
  ' cookie=0x51ce000000000003, duration=2.1s, table=16, n_packets=9, n_bytes=900, priority=100,reg0=0x1000/0x1000 actions=drop',
].join('\n');

t.test('counters by cookie from a dump; header lines skipped', async (t) => {
  const c = parseFlowCounters(DUMP);
  t.equal(c.size, 4);
  t.same(c.get('0x51ce02a1b2c3d4e5'), { packets: 7, bytes: 518 });
  t.same(c.get('0x51ce020000000002'), { packets: 3, bytes: 180 });
  t.same(parseFlowCounters(''), new Map());
});

t.test('totals stay monotonic when ovs-vswitchd restarts and replays the flows at zero', async (t) => {
  const b = new CounterBaseline();
  const read = (p: number) => new Map([['0xc1', { packets: p, bytes: p * 100 }]]);
  t.same(b.apply(read(5)).get('0xc1'), { packets: 5, bytes: 500 });
  t.same(b.apply(read(8)).get('0xc1'), { packets: 8, bytes: 800 });
  t.same(b.apply(read(2)).get('0xc1'), { packets: 10, bytes: 1000 }, 'restart: 8 before + 2 since');
  t.same(b.apply(read(3)).get('0xc1'), { packets: 11, bytes: 1100 });
  t.same(b.apply(new Map()).size, 0, 'a flow that is gone');
  t.same(b.apply(read(1)).get('0xc1'), { packets: 1, bytes: 100 }, 'a new flow with the same cookie starts from its own count');
});

t.test('per rule: sessions from first packets, packets/bytes summed over units; rules without counters are zeros', async (t) => {
  const allowRef = { kind: 'AntreaClusterNetworkPolicy' as const, name: 'acnp', rule: 'allow-web', tier: 'application' };
  const dropRef = { kind: 'NetworkPolicy' as const, namespace: 'x', name: 'np', rule: 'ingress-0' };
  const rules = new Map<number, RuleOfConj>([
    [1, { ref: allowRef, direction: 'Egress', action: 'Allow' }],
    [2, { ref: allowRef, direction: 'Egress', action: 'Allow' }], // its svc-post unit: the same rule
    [3, { ref: dropRef, direction: 'Ingress', action: 'Drop' }],
    [4, { ref: { ...dropRef, rule: 'ingress-1' }, direction: 'Ingress', action: 'Reject' }],
  ]);
  const flows: MetricFlow[] = [
    { cookie: '0xa1', conjId: 1, counts: 'new' },
    { cookie: '0xa2', conjId: 1, counts: 'est' },
    { cookie: '0xa3', conjId: 2, counts: 'new' },
    { cookie: '0xa4', conjId: 2, counts: 'est' },
    { cookie: '0xd1', conjId: 3, counts: 'drop' },
    { cookie: '0xr1', conjId: 4, counts: 'drop' },
    { cookie: '0xzz', conjId: 99, counts: 'drop' },
  ];
  const counters = new Map([
    ['0xa1', { packets: 2, bytes: 120 }],
    ['0xa2', { packets: 10, bytes: 1000 }],
    ['0xa3', { packets: 1, bytes: 60 }],
    ['0xa4', { packets: 4, bytes: 400 }],
    ['0xd1', { packets: 6, bytes: 360 }],
  ]);
  const stats = ruleStatistics(flows, counters, (id) => rules.get(id));
  t.same(stats, [
    { ref: allowRef, direction: 'Egress', action: 'Allow', sessions: 3, packets: 17, bytes: 1580 },
    { ref: dropRef, direction: 'Ingress', action: 'Drop', sessions: 0, packets: 6, bytes: 360 },
    { ref: { ...dropRef, rule: 'ingress-1' }, direction: 'Ingress', action: 'Reject', sessions: 0, packets: 0, bytes: 0 },
  ]);
  const table = renderRuleStats(stats);
  t.match(table, /^KIND\s+NAMESPACE\/NAME\s+RULE\s+DIRECTION\s+ACTION\s+SESSIONS\s+PACKETS\s+BYTES$/m);
  t.match(table, /^AntreaClusterNetworkPolicy\s+acnp\s+allow-web\s+Egress\s+Allow\s+3\s+17\s+1580$/m);
  t.match(table, /^NetworkPolicy\s+x\/np\s+ingress-0\s+Ingress\s+Drop\s+-\s+6\s+360$/m);
  t.ok(matchesPolicy(stats[1]!, 'np') && matchesPolicy(stats[1]!, 'x/np'));
  t.notOk(matchesPolicy(stats[1]!, 'y/np'));
  t.equal(renderRuleStats([]), 'no policy rules enforced on this node');
});

t.test('a rule whose counter flows are replaced (it moved to another index) keeps its counts', async (t) => {
  const ref = { kind: 'AntreaClusterNetworkPolicy' as const, name: 'p', rule: 'allow-b', tier: 'application' };
  const rule: RuleOfConj = { ref, direction: 'Ingress', action: 'Allow' };
  const key = ruleKey(rule);
  const carrier = new RuleCountCarrier();
  const old = [{ cookie: '0xo1', conjId: 1, counts: 'new' as const, key }, { cookie: '0xo2', conjId: 1, counts: 'est' as const, key }];
  carrier.observe(old, new Map([['0xo1', { packets: 3, bytes: 180 }], ['0xo2', { packets: 27, bytes: 2000 }]]));
  // The rule now has conjunction id 2 and new counter flows; the old ones are gone.
  carrier.retire(new Set(['0xn1', '0xn2']), new Set([key]));
  t.same(carrier.carried().get(key), { sessions: 3, packets: 30, bytes: 2180 });
  const now: MetricFlow[] = [{ cookie: '0xn1', conjId: 2, counts: 'new' }, { cookie: '0xn2', conjId: 2, counts: 'est' }];
  const stats = ruleStatistics(now, new Map([['0xn1', { packets: 1, bytes: 60 }], ['0xn2', { packets: 9, bytes: 600 }]]), () => rule, carrier.carried());
  t.same(stats.map((s) => [s.sessions, s.packets, s.bytes]), [[4, 40, 2840]], 'old + new counter flows');
  carrier.retire(new Set(), new Set());
  t.equal(carrier.carried().size, 0, 'a rule that is gone takes its totals with it');
});

t.test('a counter flow taken over by another rule (same conjunction id, now another index) splits its count at the handover', async (t) => {
  const mk = (rule: string): RuleOfConj => ({ ref: { kind: 'AntreaClusterNetworkPolicy', name: 'p', rule, tier: 'application' }, direction: 'Ingress', action: 'Drop' });
  const reject = mk('reject-d');
  const drop = mk('drop-c');
  const carrier = new RuleCountCarrier();
  const flow = (key: string) => [{ cookie: '0xf', conjId: 7, counts: 'drop' as const, key }];
  carrier.observe(flow(ruleKey(reject)), new Map([['0xf', { packets: 1, bytes: 74 }]])); // read before the change
  carrier.observe(flow(ruleKey(drop)), new Map([['0xf', { packets: 1, bytes: 74 }]])); // after: drop-c holds id 7
  carrier.retire(new Set(['0xf']), new Set([ruleKey(reject), ruleKey(drop)]));
  t.same(carrier.carried().get(ruleKey(reject)), { sessions: 0, packets: 1, bytes: 74 }, 'reject-d keeps its packet');
  const later = new Map([['0xf', { packets: 3, bytes: 222 }]]);
  carrier.observe(flow(ruleKey(drop)), later);
  t.same(carrier.adjusted(later).get('0xf'), { packets: 2, bytes: 148 }, 'drop-c counts from the handover on');
  const again = new RuleCountCarrier(JSON.parse(JSON.stringify(carrier.state())));
  t.same([again.carried().get(ruleKey(reject)), again.adjusted(later).get('0xf')], [{ sessions: 0, packets: 1, bytes: 74 }, { packets: 2, bytes: 148 }], 'the state survives a restart (saved as JSON)');
});
