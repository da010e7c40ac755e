import t from 'tap';
import type { LearnerOptions } from '../../daemon/enforcement/fqdn/learner.js';
import { FqdnLearning } from '../../daemon/enforcement/fqdn/learning.js';
import { isEmptyChangeSet } from '../../daemon/enforcement/fqdn/handler.js';
import type { ChangeSet } from '../../daemon/policy/engine.js';
import type { PacketIn, PacketOut } from '../../daemon/ovs/openflow/wire.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { simpleResponse, udpDnsFrame } from './fqdn-helpers.js';
import { ManualClock } from './manual-clock.js';

function engine(): PolicyEngine {
  const e = new PolicyEngine({ nodeName: 'n1' });
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '192.168.0.1' }] } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x' } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'c', labels: { app: 'c' } }, spec: { nodeName: 'n1', containers: [] }, status: { podIP: '10.0.0.5' } },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'p' }, spec: { priority: 1, appliedTo: [{ podSelector: {} }], egress: [{ action: 'Allow', to: [{ fqdn: 'www.example.com' }] }, { action: 'Drop' }] } },
  ];
  for (const o of objs) e.upsert(o);
  return e;
}

const pin = (name: string, ip: string, ops = 0, ttl = 60): PacketIn => {
  const frame = udpDnsFrame('10.96.0.10', '10.0.0.5', simpleResponse(name, [{ ip, ttl }]));
  const registers = new Array<number>(16).fill(0);
  registers[1] = 3;
  return { tableId: 12, cookie: 0n, reason: 1, packet: frame, totalLength: frame.length, bufferId: 0xffffffff, userdata: Buffer.from([2, ops]), hasContinuation: false, inPort: 9, registers, ctState: 0x28, ctZone: 0, ctMark: 0, ctLabel: 0n, pktMark: 0, metadata: 0n };
};
const punt = (ops = 0) => ({ category: 2, ops, extra: Buffer.alloc(0) });

t.test('held until an apply that started after the learning ends', async (t) => {
  const e = engine();
  const clock = new ManualClock();
  const f = new FqdnLearning({ clock, maxHoldMs: 10_000 });
  const out: PacketOut[] = [];
  f.setPacketOut((po) => { out.push(po); return true; });

  // An apply already running when the response arrives does not cover it.
  let finishEarly!: () => void;
  const early = f.wrapApply(() => new Promise<void>((r) => { finishEarly = r; }))();
  const cs = f.hook(pin('www.example.com', '192.0.2.1'), punt(), e);
  t.ok(cs && !isEmptyChangeSet(cs), 'the engine changed: the hook returns the ChangeSet');
  finishEarly();
  await early;
  t.equal(out.length, 0, 'still held after an apply that started before the learning');
  await f.wrapApply(async () => { t.equal(out.length, 0, 'not released while the covering apply runs'); })();
  t.equal(out.length, 1, 'released once the covering apply finished');
  t.equal(out[0]!.actions[0]!.type === 'output' && out[0]!.actions[0]!.port, 3);

  await clock.advance(1000);
  t.equal(f.hook(pin('www.example.com', '192.0.2.1'), punt(), e), undefined, 'nothing new (only a later expiry): no ChangeSet');
  t.equal(out.length, 2, 'and released at once');
  t.equal(f.hook(pin('other.org', '192.0.2.9'), punt(), e), undefined, 'unreferenced names are not learned');
  t.equal(f.hook(pin('www.example.com', '192.0.2.2', 1), punt(1), e) !== undefined, true, 'a copy still teaches');
  t.equal(out.length, 3, 'but is never sent (the original went on)');
  // learned: the first answer and the copy (the repeat changed no address set).
  t.match(f.stats(), { punts: 4, learned: 2, releasedAtOnce: 2, releasedAfterApply: 1, held: 0, names: 1 });
  f.close();
});

t.test('a failed apply still releases; the hold has a deadline on the clock', async (t) => {
  const e = engine();
  const clock = new ManualClock();
  const f = new FqdnLearning({ clock, maxHoldMs: 30 });
  const out: PacketOut[] = [];
  f.setPacketOut((po) => { out.push(po); return true; });
  f.hook(pin('www.example.com', '192.0.2.1'), punt(), e);
  await t.rejects(f.wrapApply(async () => { throw new Error('bundle failed'); })(), /bundle failed/);
  t.equal(out.length, 1, 'released after the failed apply');
  f.hook(pin('www.example.com', '192.0.2.3'), punt(), e);
  t.equal(out.length, 1, 'held (no apply comes)');
  await clock.advance(29);
  t.equal(out.length, 1, 'still held 1 ms before the deadline');
  await clock.advance(1);
  t.equal(out.length, 2, 'released by the deadline');
  t.equal(f.stats().releasedByTimeout, 1);
  f.close();
});

function wildcardEngine(): PolicyEngine {
  const e = new PolicyEngine({ nodeName: 'n1' });
  for (const o of [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'c' }, spec: { nodeName: 'n1', containers: [] }, status: { podIP: '10.0.0.5' } },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'p' }, spec: { priority: 1, appliedTo: [{ podSelector: {} }], egress: [{ action: 'Allow', to: [{ fqdn: '*.example.com' }] }, { action: 'Drop' }] } },
  ] as KubeObject[]) e.upsert(o);
  return e;
}

/** FqdnLearning on a ManualClock with its expiry started, as the enforcer wires it. */
function expiring(learnerOptions: LearnerOptions = {}) {
  const e = wildcardEngine();
  const clock = new ManualClock();
  const f = new FqdnLearning({ clock, learnerOptions });
  f.setPacketOut(() => true);
  const changes: ChangeSet[] = [];
  f.startExpiry(e, (cs) => changes.push(cs));
  const verdict = (ip: string) => e.evaluate({ from: 'x/c', to: `ip:${ip}`, port: 80, protocol: 'TCP' }).verdict;
  /** One answer, then the apply that releases it (as the enforcer follows the hook with an apply). */
  const learn = async (name: string, ip: string, ttl: number) => {
    const cs = f.hook(pin(name, ip, 0, ttl), punt(), e);
    await f.wrapApply(async () => undefined)();
    return cs;
  };
  return { e, clock, f, changes, verdict, learn };
}

t.test('one store, one clock: one of several addresses expires, the engine keeps the rest', async (t) => {
  const { e, clock, f, changes, verdict, learn } = expiring();
  t.same(f.interceptFlows(e).map((x) => x.match.includes('nw_dst=10.0.0.5')), [true, true], 'interception flows through the same object');
  await learn('a.example.com', '192.0.2.1', 60);
  await clock.advance(10_000);
  await learn('a.example.com', '192.0.2.2', 120);
  t.same(e.fqdnAddresses(), [{ name: 'a.example.com', ips: ['192.0.2.1', '192.0.2.2'] }], 'round-robin answers accumulate in the engine');
  t.equal(f.nextExpiryAt(), 60_000);
  t.equal(clock.waiting, 1, 'one expiry timer is armed');

  await clock.advance(49_999);
  t.equal(changes.length, 0, 'nothing expires before the first TTL');
  t.equal(verdict('192.0.2.1'), 'allow');
  await clock.advance(1);
  t.equal(changes.length, 1, 'the timer fired at the first expiry and handed over the engine\'s change');
  t.notOk(isEmptyChangeSet(changes[0]!));
  t.same(e.fqdnAddresses(), [{ name: 'a.example.com', ips: ['192.0.2.2'] }], 'only the expired address left the engine');
  t.equal(verdict('192.0.2.1'), 'drop');
  t.equal(verdict('192.0.2.2'), 'allow', 'the other address of the name stays allowed');
  t.same(f.learner.addresses('a.example.com').map((a) => a.ip), ['192.0.2.2']);

  await clock.advance(69_999);
  t.equal(changes.length, 1);
  await clock.advance(1);
  t.equal(changes.length, 2, 'the second expiry, re-armed by the first');
  t.same(e.fqdnAddresses(), [], 'the last address gone: the engine forgot the name');
  t.equal(verdict('192.0.2.2'), 'drop');
  t.equal(clock.waiting, 0, 'nothing left to expire: no timer');
  f.close();
});

t.test('TTL floor and cap through the single store', async (t) => {
  const { e, clock, f, changes, verdict, learn } = expiring({ minTtlSeconds: 10, maxTtlSeconds: 100 });
  await learn('floor.example.com', '192.0.2.1', 1);
  await learn('cap.example.com', '192.0.2.2', 1_000_000);
  await clock.advance(9_999);
  t.equal(verdict('192.0.2.1'), 'allow', 'a TTL of 1 s still holds at 9.999 s (the 10 s floor)');
  await clock.advance(1);
  t.equal(verdict('192.0.2.1'), 'drop', 'and expires at the floor');
  t.equal(changes.length, 1);
  await clock.advance(89_999);
  t.equal(verdict('192.0.2.2'), 'allow', 'a huge TTL holds until the cap');
  await clock.advance(1);
  t.equal(verdict('192.0.2.2'), 'drop', 'and no longer');
  t.same(e.fqdnAddresses(), []);
  f.close();
});

t.test('the name limit through the single store: the engine forgets the dropped name', async (t) => {
  const { e, f, verdict, learn } = expiring({ maxNames: 2 });
  await learn('a.example.com', '192.0.2.1', 30);
  await learn('b.example.com', '192.0.2.2', 20);
  const cs = await learn('c.example.com', '192.0.2.3', 40);
  t.ok(cs && !isEmptyChangeSet(cs));
  t.same(e.fqdnAddresses().map((n) => n.name), ['a.example.com', 'c.example.com'], 'the name expiring soonest was dropped from the engine');
  t.equal(verdict('192.0.2.2'), 'drop');
  t.equal(verdict('192.0.2.3'), 'allow');
  t.equal(f.stats().names, 2);
  f.close();
});
