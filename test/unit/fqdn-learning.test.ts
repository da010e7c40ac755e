import t from 'tap';
import { FqdnLearning } from '../../daemon/enforcement/fqdn/learning.js';
import { isEmptyChangeSet } from '../../daemon/enforcement/fqdn/handler.js';
import type { PacketIn, PacketOut } from '../../daemon/flows/openflow/wire.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { simpleResponse, udpDnsFrame } from './fqdn-helpers.js';

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

const pin = (name: string, ip: string, ops = 0): PacketIn => {
  const frame = udpDnsFrame('10.96.0.10', '10.0.0.5', simpleResponse(name, [{ ip, ttl: 60 }]));
  const registers = new Array<number>(16).fill(0);
  registers[1] = 3;
  return { tableId: 12, cookie: 0n, reason: 1, packet: frame, totalLength: frame.length, bufferId: 0xffffffff, userdata: Buffer.from([2, ops]), hasContinuation: false, inPort: 9, registers, ctState: 0x28, ctZone: 0, ctMark: 0, ctLabel: 0n, pktMark: 0, metadata: 0n };
};
const punt = (ops = 0) => ({ category: 2, ops, extra: Buffer.alloc(0) });

t.test('held until an apply that started after the learning ends', async (t) => {
  const e = engine();
  let now = 1_000_000;
  const f = new FqdnLearning({ maxHoldMs: 10_000, learnerOptions: { now: () => now } });
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

  now += 1000;
  t.equal(f.hook(pin('www.example.com', '192.0.2.1'), punt(), e), undefined, 'nothing new: no ChangeSet');
  t.equal(out.length, 2, 'and released at once');
  t.equal(f.hook(pin('other.org', '192.0.2.9'), punt(), e), undefined, 'unreferenced names are not learned');
  t.equal(f.hook(pin('www.example.com', '192.0.2.2', 1), punt(1), e) !== undefined, true, 'a copy still teaches');
  t.equal(out.length, 3, 'but is never sent (the original went on)');
  // learned: the first answer, the repeat (its TTL refresh extends the engine's expiry) and the copy.
  t.match(f.stats(), { punts: 4, learned: 3, releasedAtOnce: 2, releasedAfterApply: 1, held: 0, names: 1 });
});

t.test('a failed apply still releases; the hold has a deadline', async (t) => {
  const e = engine();
  const f = new FqdnLearning({ maxHoldMs: 30 });
  const out: PacketOut[] = [];
  f.setPacketOut((po) => { out.push(po); return true; });
  f.hook(pin('www.example.com', '192.0.2.1'), punt(), e);
  await t.rejects(f.wrapApply(async () => { throw new Error('bundle failed'); })(), /bundle failed/);
  t.equal(out.length, 1, 'released after the failed apply');
  f.hook(pin('www.example.com', '192.0.2.3'), punt(), e);
  t.equal(out.length, 1, 'held (no apply comes)');
  await new Promise((r) => setTimeout(r, 200));
  t.equal(out.length, 2, 'released by the deadline');
  t.equal(f.stats().releasedByTimeout, 1);
});

t.test('expire and intercept flows through the same object', async (t) => {
  let now = 1_000_000;
  const e = new PolicyEngine({ nodeName: 'n1', now: () => now });
  for (const o of [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'c' }, spec: { nodeName: 'n1', containers: [] }, status: { podIP: '10.0.0.5' } },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'p' }, spec: { priority: 1, appliedTo: [{ podSelector: {} }], egress: [{ action: 'Allow', to: [{ fqdn: '*.example.com' }] }, { action: 'Drop' }] } },
  ] as KubeObject[]) e.upsert(o);
  const f = new FqdnLearning({ learnerOptions: { now: () => now, minTtlSeconds: 0 } });
  f.setPacketOut(() => true);
  t.same(f.interceptFlows(e).map((x) => x.match.includes('nw_dst=10.0.0.5')), [true, true]);
  f.hook(pin('a.example.com', '192.0.2.1'), punt(), e);
  t.equal(f.nextExpiryAt(), now + 60_000);
  t.equal(e.evaluate({ from: 'x/c', to: 'ip:192.0.2.1', port: 80, protocol: 'TCP' }).verdict, 'allow');
  now += 60_000;
  t.notOk(isEmptyChangeSet(f.expire(e)));
  t.equal(e.evaluate({ from: 'x/c', to: 'ip:192.0.2.1', port: 80, protocol: 'TCP' }).verdict, 'drop');
  f.close();
});
