/**
 * Cutting the connections a change denies (daemon/enforcement/conntrack): the dump as
 * ovs-vswitchd prints it, the flush tuples, and the enforcer's sweep after each apply with a fake
 * conntrack zone: only connections a local side now denies go, allowed ones are never touched,
 * `keep` spares those only Kubernetes NetworkPolicy denies, ICMPv6 is never flushed on the
 * userspace datapath (it aborts ovs-vswitchd 3.1), and sweeps never overlap.
 */
import t from 'tap';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { ConnectionSweeper, flushTuple, parseConntrackDump, type ConntrackIo } from '../../daemon/enforcement/conntrack/index.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Lines as ovs-vswitchd 3.1 printed them on this machine (userspace datapath), plain and with -m.
const DUMP = [
  'icmpv6,orig=(src=fd09::1,dst=fd09::2,id=6889,type=128,code=0),reply=(src=fd09::2,dst=fd09::1,id=6889,type=129,code=0),zone=65520,mark=32',
  'udp,orig=(src=fd09::1,dst=fd09::2,sport=5556,dport=9999),reply=(src=fd09::2,dst=fd09::1,sport=9999,dport=5556),zone=65520,mark=32',
  'tcp,orig=(src=10.9.0.1,dst=10.9.0.2,sport=59464,dport=8080),reply=(src=10.9.0.2,dst=10.9.0.1,sport=8080,dport=59464),zone=65520,mark=32,protoinfo=(state=TIME_WAIT)',
  'icmp,orig=(src=10.9.0.1,dst=10.9.0.2,id=6888,type=8,code=0),reply=(src=10.9.0.2,dst=10.9.0.1,id=6888,type=0,code=0),zone=65520',
  'tcp,orig=(src=10.9.0.1,dst=10.9.0.2,sport=1,dport=2),reply=(src=10.9.0.2,dst=10.9.0.1,sport=2,dport=1),id=0,zone=65520,status=0,mark=32,protoinfo=(state_orig=FIN_WAIT_2,state_reply=FIN_WAIT_2,wscale_orig=10)',
  'gre,orig=(src=10.9.0.1,dst=10.9.0.2),reply=(src=10.9.0.2,dst=10.9.0.1),zone=65520',
  'not a conntrack line',
].join('\n');

t.test('the dump: every protocol the bridge commits, original tuple, zone and mark; the rest counted', async (t) => {
  const { entries, skipped } = parseConntrackDump(DUMP);
  t.equal(skipped, 2, 'gre and the garbage line');
  t.same(entries[0], { protocol: 'ICMP', family: 6, src: 'fd09::1', dst: 'fd09::2', icmp: { id: 6889, type: 128, code: 0 }, zone: 65520, mark: 32 });
  t.same(entries[1], { protocol: 'UDP', family: 6, src: 'fd09::1', dst: 'fd09::2', sport: 5556, dport: 9999, zone: 65520, mark: 32 });
  t.same(entries[2], { protocol: 'TCP', family: 4, src: '10.9.0.1', dst: '10.9.0.2', sport: 59464, dport: 8080, zone: 65520, mark: 32 });
  t.same(entries[3]!.mark, 0, 'no mark printed: 0');
  t.same([entries[4]!.sport, entries[4]!.dport, entries[4]!.mark], [1, 2, 32], 'the -m form');
  t.same(parseConntrackDump(''), { entries: [], skipped: 0 });
});

t.test('flush tuples name exactly one entry, in the syntax ovs-vswitchd takes', async (t) => {
  const { entries } = parseConntrackDump(DUMP);
  t.equal(flushTuple(entries[2]!), 'ct_nw_src=10.9.0.1,ct_nw_dst=10.9.0.2,ct_nw_proto=6,ct_tp_src=59464,ct_tp_dst=8080');
  t.equal(flushTuple(entries[1]!), 'ct_ipv6_src=fd09::1,ct_ipv6_dst=fd09::2,ct_nw_proto=17,ct_tp_src=5556,ct_tp_dst=9999');
  t.equal(flushTuple(entries[3]!), 'ct_nw_src=10.9.0.1,ct_nw_dst=10.9.0.2,ct_nw_proto=1,icmp_type=8,icmp_code=0,icmp_id=6888');
});

// ---------------------------------------------------------------------------------- the enforcer

const ns = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name } } });
const pod = (namespace: string, name: string, node: string, ip: string, ip6: string): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace, name, labels: { pod: name } },
  spec: { nodeName: node, containers: [{ name: 'c', image: 'i' }] },
  status: { phase: 'Running', podIP: ip, podIPs: [{ ip }, { ip: ip6 }] },
});
const POD_IPS: Record<string, [string, string, string]> = {
  'x/a': ['node-1', '10.1.0.2', 'fd00:1::2'],
  'y/a': ['node-1', '10.1.0.3', 'fd00:1::3'],
  'z/a': ['node-1', '10.1.0.4', 'fd00:1::4'],
  'z/r': ['node-2', '10.2.0.4', 'fd00:2::4'],
  'y/r': ['node-2', '10.2.0.3', 'fd00:2::3'],
};
const ip = (ref: string, family: 4 | 6 = 4) => POD_IPS[ref]![family === 4 ? 1 : 2];
const emergencyDropFromZ: KubeObject = {
  apiVersion: 'crd.antrea.io/v1beta1',
  kind: 'ClusterNetworkPolicy',
  metadata: { name: 'quarantine-y-a' },
  spec: {
    priority: 1,
    tier: 'emergency',
    appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'y' } }, podSelector: { matchLabels: { pod: 'a' } } }],
    ingress: [{ action: 'Drop', from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }],
  },
};
const isolateYaFromAllButX: KubeObject = {
  apiVersion: 'networking.k8s.io/v1',
  kind: 'NetworkPolicy',
  metadata: { namespace: 'y', name: 'only-x' },
  spec: { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }] }] },
};

const line = (proto: 'tcp' | 'udp', from: string, to: string, sport: number, dport: number, family: 4 | 6 = 4) =>
  `${proto},orig=(src=${ip(from, family)},dst=${ip(to, family)},sport=${sport},dport=${dport}),reply=(src=${ip(to, family)},dst=${ip(from, family)},sport=${dport},dport=${sport}),zone=65520,mark=0`;

/** A conntrack zone: entries by tuple; flush removes one (ENOENT when absent, as ovs-vswitchd answers). */
class FakeZone implements ConntrackIo {
  readonly lines = new Map<string, string>();
  readonly flushed: string[] = [];
  dumps = 0;
  add(text: string): void {
    const e = parseConntrackDump(text).entries[0]!;
    this.lines.set(flushTuple(e), text);
  }
  async dump(): Promise<string> {
    this.dumps++;
    return [...this.lines.values()].join('\n');
  }
  async flush(tuple: string): Promise<void> {
    this.flushed.push(tuple);
    if (!this.lines.delete(tuple)) throw new Error('ovs-appctl dpctl/flush-conntrack: failed to flush conntrack (No such file or directory)');
  }
  has(text: string): boolean {
    return [...this.lines.values()].includes(text);
  }
}

async function enforcerWith(objs: KubeObject[], zone: FakeZone, settings: { datapath?: 'system' | 'netdev'; keepNetworkPolicy?: boolean } = {}): Promise<Enforcer> {
  const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, connections: { datapath: settings.datapath ?? 'system', keepNetworkPolicy: settings.keepNetworkPolicy ?? false } });
  for (const o of objs) e.onWatchEvent({ type: 'upsert', object: structuredClone(o) });
  e.watchConnections(zone);
  e.bindFlows(async () => {});
  e.compileNow();
  return e;
}

/** Waits for the flush the last event planned, then for its sweep. */
async function settle(e: Enforcer): Promise<void> {
  const want = e.status().changes;
  const deadline = Date.now() + 5000;
  while (e.status().committedChanges < want) {
    if (Date.now() > deadline) throw new Error('the change was never applied');
    await sleep(2);
  }
  await e.connectionsSettled();
}

const WORKLOAD = [ns('x'), ns('y'), ns('z'), ...Object.entries(POD_IPS).map(([ref, [node, v4, v6]]) => pod(ref.split('/')[0]!, ref.split('/')[1]!, node, v4, v6))];

t.test('a quarantine cuts exactly the connections it denies, on both families; the others are untouched', async (t) => {
  const zone = new FakeZone();
  const denied = [line('udp', 'z/a', 'y/a', 40000, 80), line('tcp', 'z/r', 'y/a', 40001, 80), line('tcp', 'z/a', 'y/a', 40002, 80, 6)];
  const allowed = [
    line('tcp', 'x/a', 'y/a', 40003, 80), // from x: not in the quarantine
    line('udp', 'y/a', 'z/a', 40004, 53), // y/a's egress to z: the policy is ingress only
    line('tcp', 'z/a', 'x/a', 40005, 80), // z/a to another Pod
    line('tcp', 'z/a', 'y/r', 40006, 80), // the remote node's Pod: its own node judges it
  ];
  for (const l of [...denied, ...allowed]) zone.add(l);
  const e = await enforcerWith(WORKLOAD, zone);
  t.teardown(() => e.close());
  t.equal(zone.dumps, 0, 'no sweep before any change was applied');
  e.onWatchEvent({ type: 'upsert', object: structuredClone(emergencyDropFromZ) });
  await settle(e);
  for (const l of denied) t.notOk(zone.has(l), `cut: ${l.slice(0, 60)}`);
  for (const l of allowed) t.ok(zone.has(l), `kept: ${l.slice(0, 60)}`);
  t.equal(zone.flushed.length, denied.length, 'no flush was sent for an allowed connection');
  t.same(e.status().connections?.cut, 3);
  // Removing the quarantine cuts nothing; a second change sweeps again and finds nothing denied.
  e.onWatchEvent({ type: 'remove', object: structuredClone(emergencyDropFromZ) });
  await settle(e);
  t.equal(zone.flushed.length, denied.length, 'nothing more cut once the quarantine is gone');
});

t.test('Kubernetes NetworkPolicy: cut by default; with keep, only its isolation spares them, not an Antrea drop', async (t) => {
  const zz = line('tcp', 'z/a', 'y/a', 41000, 80);
  const xx = line('tcp', 'x/a', 'y/a', 41001, 80);
  for (const keep of [false, true]) {
    const zone = new FakeZone();
    zone.add(zz);
    zone.add(xx);
    const e = await enforcerWith(WORKLOAD, zone, { keepNetworkPolicy: keep });
    e.onWatchEvent({ type: 'upsert', object: structuredClone(isolateYaFromAllButX) });
    await settle(e);
    t.equal(zone.has(zz), keep, keep ? 'keep: the connection only the NetworkPolicy denies stays' : 'cut: the NetworkPolicy cut it');
    t.ok(zone.has(xx), 'the allowed one stays');
    e.onWatchEvent({ type: 'upsert', object: structuredClone(emergencyDropFromZ) });
    await settle(e);
    t.notOk(zone.has(zz), 'an Antrea drop cuts it in either setting');
    t.ok(zone.has(xx), 'and still leaves the allowed one');
    await e.close();
  }
});

t.test('a deleted Pod: connections its address group allowed are judged without it', async (t) => {
  const allowFromZa: KubeObject = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { namespace: 'y', name: 'only-z-a' },
    spec: { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } }, podSelector: { matchLabels: { pod: 'r' } } }] }] },
  };
  const zone = new FakeZone();
  const fromZr = line('tcp', 'z/r', 'y/a', 42000, 80);
  zone.add(fromZr);
  const e = await enforcerWith([...WORKLOAD, allowFromZa], zone);
  t.teardown(() => e.close());
  e.onWatchEvent({ type: 'upsert', object: structuredClone(emergencyDropFromZ) });
  e.onWatchEvent({ type: 'remove', object: structuredClone(emergencyDropFromZ) });
  await settle(e);
  t.ok(zone.has(fromZr), 'allowed while z/r exists');
  e.onWatchEvent({ type: 'remove', object: structuredClone(WORKLOAD.find((o) => o.metadata.name === 'r' && o.metadata.namespace === 'z')!) });
  await settle(e);
  t.notOk(zone.has(fromZr), 'z/r deleted: its old address is no longer in the allowed group, the connection is cut');
});

t.test('ICMPv6 is not flushed on the userspace datapath (counted), ICMPv4 is', async (t) => {
  const zone = new FakeZone();
  const echo6 = `icmpv6,orig=(src=${ip('z/a', 6)},dst=${ip('y/a', 6)},id=7,type=128,code=0),reply=(src=${ip('y/a', 6)},dst=${ip('z/a', 6)},id=7,type=129,code=0),zone=65520`;
  const echo4 = `icmp,orig=(src=${ip('z/a')},dst=${ip('y/a')},id=7,type=8,code=0),reply=(src=${ip('y/a')},dst=${ip('z/a')},id=7,type=0,code=0),zone=65520`;
  zone.add(echo6);
  zone.add(echo4);
  const e = await enforcerWith(WORKLOAD, zone, { datapath: 'netdev' });
  t.teardown(() => e.close());
  e.onWatchEvent({ type: 'upsert', object: structuredClone(emergencyDropFromZ) });
  await settle(e);
  t.notOk(zone.has(echo4), 'the ICMPv4 echo is cut');
  t.ok(zone.has(echo6), 'the ICMPv6 echo is left');
  t.equal(e.status().connections?.unflushable, 1);
  t.notOk(zone.flushed.some((f) => f.includes('ct_ipv6')), 'no ICMPv6 flush was sent');
});

t.test('sweeps never overlap: requests during a sweep become one more sweep', async (t) => {
  let inFlight = 0;
  let most = 0;
  let dumps = 0;
  const io: ConntrackIo = {
    dump: async () => {
      dumps++;
      inFlight++;
      most = Math.max(most, inFlight);
      await sleep(20);
      inFlight--;
      return '';
    },
    flush: async () => {},
  };
  const s = new ConnectionSweeper({ io, policy: { explain: () => { throw new Error('unused'); }, isLocalPod: () => true }, datapath: 'system', keepNetworkPolicy: false, log });
  s.request();
  for (let i = 0; i < 5; i++) s.request();
  await s.idle();
  t.equal(most, 1, 'one sweep at a time');
  t.equal(dumps, 2, 'the first sweep and one after it');
});

t.test('a failing flush is reported and counted; an entry already gone is not a failure', async (t) => {
  const text = line('tcp', 'z/a', 'y/a', 1, 80);
  const warnings: string[] = [];
  const warnLog = { info: () => {}, debug: () => {}, warn: (_o: unknown, m: string) => void warnings.push(m) } as never;
  for (const [err, failures] of [['failed to flush conntrack (No such file or directory)', 0], ['ovs-vswitchd: transaction error (End of file)', 1]] as const) {
    const io: ConntrackIo = { dump: async () => text, flush: async () => { throw new Error(err); } };
    const s = new ConnectionSweeper({
      io,
      policy: { explain: () => ({ result: { from: '', to: '', port: 80, protocol: 'TCP', verdict: 'drop' }, sides: [{ direction: 'Ingress', pod: 'y/a', verdict: 'drop', decidedBy: null }] }), isLocalPod: () => true },
      datapath: 'system',
      keepNetworkPolicy: false,
      log: warnLog,
    });
    s.request();
    await s.idle();
    t.equal(s.status().failures, failures, `${err}: ${failures} failure`);
    t.equal(s.status().cut, failures ? 0 : 1);
  }
  t.match(warnings.join('\n'), /could not be removed/);
});

t.test('a cut connection stays cut: its 5-tuple is blocked both ways before its entry goes, until a change allows it', async (t) => {
  const zone = new FakeZone();
  const order: string[] = [];
  const origFlush = zone.flush.bind(zone);
  zone.flush = async (tuple) => {
    order.push('flush');
    return origFlush(tuple);
  };
  const tcp = line('tcp', 'z/a', 'y/a', 43000, 80);
  const udp6 = line('udp', 'z/r', 'y/a', 43001, 53, 6);
  const kept = line('tcp', 'x/a', 'y/a', 43002, 80);
  for (const l of [tcp, udp6, kept]) zone.add(l);
  const e = await enforcerWith(WORKLOAD, zone);
  t.teardown(() => e.close());
  // Each flow sync the enforcer asks for: whether it carried the blocking flows then.
  e.bindFlows(async () => {
    order.push(`sync ${e.flows().filter((f) => f.table === 'ConntrackState').length}`);
  });
  const blocking = () => e.flows().filter((f) => f.table === 'ConntrackState').map((f) => `${f.match} ${f.actions}`).sort();
  e.onWatchEvent({ type: 'upsert', object: structuredClone(emergencyDropFromZ) });
  await settle(e);
  t.same(blocking(), [
    `tcp,nw_src=${ip('y/a')},nw_dst=${ip('z/a')},tp_src=80,tp_dst=43000 drop`,
    `tcp,nw_src=${ip('z/a')},nw_dst=${ip('y/a')},tp_src=43000,tp_dst=80 drop`,
    `udp6,ipv6_src=${ip('y/a', 6)},ipv6_dst=${ip('z/r', 6)},tp_src=53,tp_dst=43001 drop`,
    `udp6,ipv6_src=${ip('z/r', 6)},ipv6_dst=${ip('y/a', 6)},tp_src=43001,tp_dst=53 drop`,
  ], 'both directions of each cut connection; nothing of the allowed one');
  t.ok(e.flows().filter((f) => f.table === 'ConntrackState').every((f) => f.priority === 250), 'above the +inv drop, before any policy table');
  const firstFlush = order.indexOf('flush');
  t.ok(firstFlush > 0 && order.slice(0, firstFlush).includes('sync 4'), `the blocking flows were synced before the first entry went (${order.join(', ')})`);
  t.match(e.status().connections, { cut: 2, blocked: 2 });
  // Another change that still denies them: still blocked, no new sync for them.
  const syncs = order.filter((o) => o.startsWith('sync')).length;
  e.onWatchEvent({ type: 'upsert', object: { ...structuredClone(isolateYaFromAllButX), metadata: { namespace: 'y', name: 'other' } } });
  await settle(e);
  t.equal(blocking().length, 4, 'still denied: still blocked');
  t.equal(order.filter((o) => o.startsWith('sync')).length, syncs + 1, 'only the change\'s own sync');
  // The quarantine and the isolation go: the connections are allowed again and unblocked.
  e.onWatchEvent({ type: 'remove', object: structuredClone(emergencyDropFromZ) });
  e.onWatchEvent({ type: 'remove', object: { ...structuredClone(isolateYaFromAllButX), metadata: { namespace: 'y', name: 'other' } } });
  await settle(e);
  t.same(blocking(), [], 'allowed again: unblocked');
  t.match(e.status().connections, { blocked: 0 });
});

t.test('blocked connections: aged out after BLOCK_MS, at most MAX_BLOCKED (oldest first)', async (t) => {
  const { BLOCK_MS, MAX_BLOCKED } = await import('../../daemon/enforcement/conntrack/index.js');
  let now = 0;
  let blockedSets: number[] = [];
  const lines: string[] = [];
  const io: ConntrackIo = {
    dump: async () => lines.join('\n'),
    flush: async () => undefined,
    block: async (c) => {
      blockedSets.push(c.length);
    },
  };
  const denyAll = { explain: () => ({ result: { verdict: 'drop' }, sides: [{ pod: 'y/a', direction: 'ingress', verdict: 'drop' }] }), isLocalPod: () => true } as never;
  const sweeper = new ConnectionSweeper({ io, policy: denyAll, datapath: 'system', keepNetworkPolicy: false, log, now: () => now });
  lines.push(line('tcp', 'z/a', 'y/a', 44000, 80));
  sweeper.request();
  await sweeper.idle();
  t.equal(sweeper.blocked().length, 1);
  lines.length = 0;
  now = BLOCK_MS - 1;
  sweeper.request();
  await sweeper.idle();
  t.equal(sweeper.blocked().length, 1, 'still within BLOCK_MS');
  now = BLOCK_MS;
  sweeper.request();
  await sweeper.idle();
  t.equal(sweeper.blocked().length, 0, 'aged out');
  t.same(blockedSets, [1, 0], 'one block per change of the set');
  blockedSets = [];
  for (let i = 0; i < MAX_BLOCKED + 5; i++) lines.push(`tcp,orig=(src=10.9.${(i >> 8) & 255}.${i & 255},dst=10.1.0.3,sport=1000,dport=80),reply=(src=10.1.0.3,dst=10.9.${(i >> 8) & 255}.${i & 255},sport=80,dport=1000),zone=65520`);
  sweeper.request();
  await sweeper.idle();
  t.equal(sweeper.blocked().length, MAX_BLOCKED, 'capped');
});

t.test('a cut connection\'s flows: its 5-tuple both ways, per protocol and family', async (t) => {
  const { cutConnectionFlows } = await import('../../daemon/flows/cut-connections.js');
  const flows = cutConnectionFlows([
    { protocol: 'SCTP', family: 4, src: '10.1.0.4', dst: '10.1.0.3', sport: 5000, dport: 80 },
    { protocol: 'SCTP', family: 4, src: '10.1.0.4', dst: '10.1.0.3', sport: 5000, dport: 80 },
  ]);
  t.same(flows.map((f) => `${f.table} ${f.priority} ${f.match} ${f.actions}`).sort(), [
    'ConntrackState 250 sctp,nw_src=10.1.0.3,nw_dst=10.1.0.4,tp_src=80,tp_dst=5000 drop',
    'ConntrackState 250 sctp,nw_src=10.1.0.4,nw_dst=10.1.0.3,tp_src=5000,tp_dst=80 drop',
  ], 'one pair of flows for a tuple given twice');
});

t.test('the blocked set survives a restart: a new sweeper reads what the last one kept', async (t) => {
  const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'sweeper-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const stateFile = join(dir, 'cut-connections.json');
  const lines = [line('tcp', 'z/a', 'y/a', 45000, 80), line('udp', 'z/a', 'y/a', 45001, 53, 6)];
  const io: ConntrackIo = { dump: async () => lines.join('\n'), flush: async () => undefined, block: async () => undefined };
  const denyAll = { explain: () => ({ result: { verdict: 'drop' }, sides: [{ pod: 'y/a', direction: 'ingress', verdict: 'drop' }] }), isLocalPod: () => true } as never;
  const first = new ConnectionSweeper({ io, policy: denyAll, datapath: 'system', keepNetworkPolicy: false, log, stateFile });
  first.request();
  await first.idle();
  t.equal(first.blocked().length, 2);
  const second = new ConnectionSweeper({ io, policy: denyAll, datapath: 'system', keepNetworkPolicy: false, log, stateFile });
  t.same(second.blocked(), first.blocked(), 'the restarted agent blocks the same connections before its first sweep');
  writeFileSync(stateFile, '{not json');
  const third = new ConnectionSweeper({ io, policy: denyAll, datapath: 'system', keepNetworkPolicy: false, log, stateFile });
  t.same(third.blocked(), [], 'an unreadable file: starts without (and says so)');
});

t.test('the pre-DNAT leg of a Service connection is cut but not blocked (its packets are judged post-DNAT one by one)', async (t) => {
  const flushed: string[] = [];
  const lines = [
    'tcp,orig=(src=10.1.0.4,dst=10.96.0.10,sport=46000,dport=80),reply=(src=10.96.0.10,dst=10.1.0.4,sport=80,dport=46000),zone=65520',
    'tcp,orig=(src=10.1.0.4,dst=10.1.0.3,sport=46001,dport=80),reply=(src=10.1.0.3,dst=10.1.0.4,sport=80,dport=46001),zone=65520',
  ];
  const io: ConntrackIo = { dump: async () => lines.join('\n'), flush: async (tuple) => void flushed.push(tuple), block: async () => undefined };
  const policy = { explain: () => ({ result: { verdict: 'drop' }, sides: [{ pod: 'y/a', direction: 'ingress', verdict: 'drop' }] }), isLocalPod: () => true, isServiceIp: (ip: string) => ip === '10.96.0.10' } as never;
  const s = new ConnectionSweeper({ io, policy, datapath: 'system', keepNetworkPolicy: false, log });
  s.request();
  await s.idle();
  t.equal(flushed.length, 2, 'both entries cut');
  t.same(s.blocked().map((b) => b.dst), ['10.1.0.3'], 'only the Pod-to-Pod connection is blocked');
});
