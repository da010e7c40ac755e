import t from 'tap';
import { dnsInterceptFlows, dnsInterceptFlowsFor } from '../../daemon/enforcement/fqdn/flows.js';
import { expireFqdnsDue, FqdnExpiryTimer, handleDnsPacketIn, isEmptyChangeSet, processDnsPacketIn } from '../../daemon/enforcement/fqdn/handler.js';
import { FqdnLearner } from '../../daemon/enforcement/fqdn/learner.js';
import { flowText } from '../../daemon/flows/flow.js';
import { PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import type { PacketIn, PacketOut } from '../../daemon/ovs/openflow/wire.js';
import { tableId } from '../../daemon/flows/tables.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { header, question, simpleResponse, tcpDnsFrame, udpDnsFrame, wireName } from './fqdn-helpers.js';
import { ManualClock } from './manual-clock.js';

const CLIENT_IP = '10.10.1.5';
const OTHER_IP = '10.10.1.6';
const DNS_IP = '10.96.0.10';
const POD_OFPORT = 7;

const FQDN_POLICY: KubeObject = {
  apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'fqdn' },
  spec: { priority: 1, appliedTo: [{ podSelector: { matchLabels: { app: 'client' } } }], egress: [
    { action: 'Allow', name: 'web', to: [{ fqdn: '*.example.com' }], ports: [{ protocol: 'TCP', port: 80 }] },
    { action: 'Drop', name: 'rest' },
  ] },
};

function world(): PolicyEngine {
  const e = new PolicyEngine({ nodeName: 'node-1' });
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1' }, status: { addresses: [{ type: 'InternalIP', address: '192.168.0.1' }] } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'client', labels: { app: 'client' } }, spec: { nodeName: 'node-1', containers: [] }, status: { podIP: CLIENT_IP } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'other', labels: { app: 'other' } }, spec: { nodeName: 'node-1', containers: [] }, status: { podIP: OTHER_IP } },
    FQDN_POLICY,
  ];
  for (const o of objs) e.upsert(o);
  return e;
}

function packetIn(frame: Buffer, ops = 0x00, reg1 = POD_OFPORT): PacketIn {
  const registers = new Array<number>(16).fill(0);
  registers[0] = 0x201;
  registers[1] = reg1;
  return {
    tableId: 12, cookie: 0n, reason: 1, packet: frame, totalLength: frame.length, bufferId: 0xffffffff,
    userdata: Buffer.from([0x02, ops]), hasContinuation: false,
    inPort: 32769, registers, ctState: 0x28, ctZone: 65520, ctMark: 0x20, ctLabel: 0n, pktMark: 0, metadata: 0n,
  };
}

function setup() {
  let now = 5_000_000;
  const clk = { now: () => now, advance: (ms: number) => { now += ms; } };
  const engine = world();
  const learner = new FqdnLearner({ clock: clk, minTtlSeconds: 10 });
  return { clk, engine, learner, ctx: { engine, learner } };
}

const verdict = (e: PolicyEngine, ip: string, port = 80) => e.evaluate({ from: 'x/client', to: `ip:${ip}`, port, protocol: 'TCP' }).verdict;

t.test('a DNS response teaches the engine; the rule follows it; expiry takes it back', async (t) => {
  const { clk, engine, ctx } = setup();
  t.equal(verdict(engine, '192.0.2.10'), 'drop', 'before DNS: dropped');
  const frame = udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 5 }]));
  const r = handleDnsPacketIn(packetIn(frame), ctx);
  t.same(r.learned, [{ name: 'www.example.com', ips: ['192.0.2.10'] }]);
  t.notOk(isEmptyChangeSet(r.changes), 'the fqdn AddressGroup changed');
  t.same(r.release, { packet: frame, actions: [{ type: 'output', port: POD_OFPORT }] }, 'held response released out of reg1');
  t.equal(r.nextExpiryAt, clk.now() + 10_000, 'TTL 5 raised to the 10 s floor');
  t.equal(verdict(engine, '192.0.2.10'), 'allow', 'the learned address is allowed');
  t.equal(verdict(engine, '192.0.2.11'), 'drop', 'other addresses are not');
  const web = engine.nodeRuleSet().find((r) => r.ref.rule === 'web');
  t.same(web && web.peers !== 'any' && web.peers.ips, ['192.0.2.10'], 'the node rule set carries the address');

  const again = handleDnsPacketIn(packetIn(frame), ctx);
  t.ok(isEmptyChangeSet(again.changes), 'the same answer again changes nothing');
  t.ok(again.release, 'and is released at once');

  clk.advance(9_999);
  t.ok(isEmptyChangeSet(expireFqdnsDue(ctx).changes), 'not yet due');
  clk.advance(1);
  const ex = expireFqdnsDue(ctx);
  t.same(ex.expired, [{ name: 'www.example.com', ips: [] }]);
  t.notOk(isEmptyChangeSet(ex.changes));
  t.equal(ex.nextExpiryAt, undefined);
  t.equal(verdict(engine, '192.0.2.10'), 'drop', 'expired: dropped again');
});

t.test('TCP responses, names outside the policies, NXDOMAIN, garbage and copies', async (t) => {
  const { engine, ctx } = setup();
  const tcpR = handleDnsPacketIn(packetIn(tcpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('api.example.com', [{ ip: '192.0.2.20', ttl: 60 }]))), ctx);
  t.same(tcpR.learned.map((u) => u.name), ['api.example.com'], 'TCP DNS is read');
  t.equal(verdict(engine, '192.0.2.20'), 'allow');

  const foreign = handleDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('example.com', [{ ip: '192.0.2.30', ttl: 60 }]))), ctx);
  t.same(foreign.learned, [], '"*.example.com" does not match the bare domain');
  t.ok(foreign.release);
  t.equal(verdict(engine, '192.0.2.30'), 'drop');

  const nx = handleDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, Buffer.concat([header({ rcode: 3 }), question(wireName('no.example.com'))]))), ctx);
  t.match(nx.note, /NXDOMAIN/);
  t.ok(nx.release, 'NXDOMAIN is still delivered');

  const junk = udpDnsFrame(DNS_IP, CLIENT_IP, Buffer.from([1, 2, 3]));
  const bad = handleDnsPacketIn(packetIn(junk), ctx);
  t.match(bad.note, /cut off/);
  t.same(bad.release?.packet, junk, 'unreadable responses are released unchanged');

  const copy = handleDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('cdn.example.com', [{ ip: '192.0.2.40', ttl: 60 }])), 0x01), ctx);
  t.equal(copy.release, undefined, 'a copy is not released (the original went on)');
  t.same(copy.learned.map((u) => u.name), ['cdn.example.com']);

  const noPort = handleDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('x.example.com', [])), 0x00, 0), ctx);
  t.match(noPort.note, /no output port/);
});

t.test('processDnsPacketIn commits flows before releasing, and releases even on failure', async (t) => {
  const { engine, ctx } = setup();
  const events: string[] = [];
  const pf = new PolicyFlows();
  pf.sync(policyFlowInput(engine));
  const io = {
    applyChanges: async () => {
      await new Promise((r) => setTimeout(r, 5));
      const delta = pf.sync(policyFlowInput(engine));
      events.push(`apply +${delta.add.length} -${delta.remove.length}`);
    },
    packetOut: (po: PacketOut) => { events.push(`release ${po.actions.map((a) => (a.type === 'output' ? a.port : a.table)).join(',')}`); return true; },
  };
  await processDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 5 }]))), ctx, io);
  t.equal(events.length, 2);
  t.match(events[0], /^apply \+[1-9]/, 'policy flows for the new address first');
  t.equal(events[1], `release ${POD_OFPORT}`, 'then the response');
  t.ok(pf.flows().some((f) => f.match.includes('192.0.2.10')), 'a flow matches the learned address');

  events.length = 0;
  const failing = { ...io, applyChanges: async () => { events.push('apply fails'); throw new Error('bundle refused'); } };
  await t.rejects(processDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('b.example.com', [{ ip: '192.0.2.50', ttl: 5 }]))), ctx, failing), /bundle refused/);
  t.same(events, ['apply fails', `release ${POD_OFPORT}`], 'DNS is not blocked by a failed update');
});

t.test('interception flows: table, priority, match and scope', async (t) => {
  const { engine } = setup();
  t.same(engine.fqdnTargetPodIps(), [CLIENT_IP], 'only the fqdn rule\'s local targets');
  const flows = dnsInterceptFlowsFor(engine);
  t.same(flows.map(flowText).map((s) => s.replace(/cookie=0x[0-9a-f]+/, 'cookie=C')), [
    `table=${tableId('IngressSecurityClassifier')},priority=220,cookie=C,ct_state=+rpl+trk,udp,reg0=0x200/0xf00,nw_dst=${CLIENT_IP},tp_src=53 actions=controller(userdata=02.00,meter_id=258)`,
    `table=${tableId('IngressSecurityClassifier')},priority=220,cookie=C,ct_state=+rpl+trk,tcp,reg0=0x200/0xf00,nw_dst=${CLIENT_IP},tp_src=53 actions=controller(userdata=02.00,meter_id=258)`,
  ]);
  const copy = dnsInterceptFlows({ pods: 'all', mode: 'copy' });
  t.same(copy.map((f) => `${f.match} ${f.actions}`), [
    'ct_state=+rpl+trk,udp,reg0=0x200/0xf00,tp_src=53 controller(userdata=02.01,meter_id=258),goto_table:AntreaPolicyIngressRule',
    'ct_state=+rpl+trk,tcp,reg0=0x200/0xf00,tp_src=53 controller(userdata=02.01,meter_id=258),goto_table:AntreaPolicyIngressRule',
    'ct_state=+rpl+trk,udp6,reg0=0x200/0xf00,tp_src=53 controller(userdata=02.01,meter_id=258),goto_table:AntreaPolicyIngressRule',
    'ct_state=+rpl+trk,tcp6,reg0=0x200/0xf00,tp_src=53 controller(userdata=02.01,meter_id=258),goto_table:AntreaPolicyIngressRule',
  ]);
  t.same(dnsInterceptFlows({ pods: [] }), [], 'no fqdn targets: nothing intercepted');
  t.same(dnsInterceptFlows({ pods: ['fd00::1'] }).map((f) => f.match), [
    'ct_state=+rpl+trk,udp6,reg0=0x200/0xf00,ipv6_dst=fd00::1,tp_src=53',
    'ct_state=+rpl+trk,tcp6,reg0=0x200/0xf00,ipv6_dst=fd00::1,tp_src=53',
  ], 'an IPv6 Pod address: its responses over IPv6');
  t.throws(() => dnsInterceptFlows({ pods: ['10.1.0.300'] }), /"10.1.0.300" is not an IP address/);
  engine.upsert({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'client', labels: { app: 'client' } }, spec: { nodeName: 'node-1', containers: [] }, status: { podIP: CLIENT_IP, podIPs: [{ ip: CLIENT_IP }, { ip: 'fd00:10:1::5' }] } });
  t.same(engine.fqdnTargetPodIps(), [CLIENT_IP, 'fd00:10:1::5'], 'a dual-stack target: both addresses (DNS may answer over either family)');
  const ruleOnly = (egress: object[]) => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'fqdn' }, spec: { priority: 1, appliedTo: [{ podSelector: { matchLabels: { app: 'client' } } }], egress } });
  engine.upsert(ruleOnly([{ action: 'Drop', name: 'rest' }]));
  t.same(engine.fqdnTargetPodIps(), [], 'the policy loses its fqdn rule: no targets');
  engine.upsert(ruleOnly([{ action: 'Allow', name: 'web', to: [{ fqdn: 'www.example.com' }] }]));
  t.same(engine.fqdnTargetPodIps(), [CLIENT_IP, 'fd00:10:1::5'], 'and gains one back');
  engine.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'fqdn' });
  t.same(engine.fqdnTargetPodIps(), [], 'policy gone: no targets');
});

t.test('a learned name outlives its pattern until it expires', async (t) => {
  const { engine, learner, ctx, clk } = setup();
  handleDnsPacketIn(packetIn(udpDnsFrame(DNS_IP, CLIENT_IP, simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 60 }]))), ctx);
  const policy = FQDN_POLICY;
  engine.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'fqdn' });
  t.equal(verdict(engine, '192.0.2.10'), 'allow', 'no policy left: nothing isolates the client');
  t.equal(learner.size, 1, 'the name stays learned');
  engine.upsert(policy);
  t.equal(verdict(engine, '192.0.2.10'), 'allow', 'the re-created policy allows the address at once, with no new DNS answer');
  t.equal(verdict(engine, '192.0.2.11'), 'drop');
  engine.remove({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'fqdn' });
  clk.advance(60_000);
  const { expired } = expireFqdnsDue(ctx);
  t.same(expired, [{ name: 'www.example.com', ips: [] }], 'the TTL still ends it');
  t.same(engine.fqdnAddresses(), [], 'in the engine too');
  engine.upsert(policy);
  t.equal(verdict(engine, '192.0.2.10'), 'drop', 'a policy created after the expiry waits for a new answer');
});

t.test('expiry timer fires at the earliest scheduled time, on the injected clock', async (t) => {
  const clock = new ManualClock();
  let fired = 0;
  const timer = new FqdnExpiryTimer(clock, () => { fired++; });
  timer.schedule(10_000);
  timer.schedule(5);
  timer.schedule(20_000);
  t.equal(timer.armedAt, 5, 'the earliest time asked is armed');
  t.equal(clock.waiting, 1, 'one timer');
  await clock.advance(4);
  t.equal(fired, 0);
  await clock.advance(1);
  t.equal(fired, 1, 'the earlier schedule replaced the later one and fired once');
  await clock.advance(30_000);
  t.equal(fired, 1, 'and nothing else was left armed');
  timer.schedule(clock.now() + 5);
  timer.cancel();
  await clock.advance(10);
  t.equal(fired, 1, 'cancelled');
  t.equal(clock.waiting, 0);
});
