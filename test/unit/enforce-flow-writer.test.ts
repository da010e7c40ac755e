/**
 * The one path from the enforcer into the agent's FlowStore: compiles only change the compiled
 * flows (the store moves at the agent's flow sync, writeFlows), several compiles between two syncs
 * net out to exactly the compiled set, a new store is given the whole set, and the bridge fed the
 * store's deltas ends with the desired flows.
 */
import t from 'tap';
import { pino } from 'pino';
import { Enforcer, POLICY_OWNER } from '../../daemon/enforcement/enforcer.js';
import { FlowStore } from '../../daemon/flows/store.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const log = pino({ level: 'silent' });

const pod = (ns: string, name: string, ip: string, node: string): KubeObject =>
  ({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: ns, name, labels: { pod: name } }, spec: { nodeName: node }, status: { phase: 'Running', podIP: ip } }) as KubeObject;

const objs: KubeObject[] = [
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } },
  { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'y', labels: { ns: 'y' } } },
  pod('x', 'a', '10.1.0.2', 'node-1'),
  pod('x', 'b', '10.1.0.3', 'node-2'),
  pod('y', 'a', '10.2.0.2', 'node-1'),
  pod('y', 'b', '10.2.0.3', 'node-2'),
  { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'from-y' }, spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] } },
  { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'r' }, spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { pod: 'a' } } }], ingress: [{ action: 'Reject', from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] } },
  { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'y', name: 'egress' }, spec: { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '203.0.113.0/24' } }] }] } },
];

const cookies = (flows: readonly { cookie: string }[]) => flows.map((f) => f.cookie).sort();

t.test('a compile leaves the store alone; the next write brings it the change', async (t) => {
  const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
  t.teardown(() => e.close());
  for (const o of objs.slice(0, 7)) e.onWatchEvent({ type: 'upsert', object: structuredClone(o) });
  const store = new FlowStore();
  e.writeFlows(store);
  t.same(cookies(store.ownerFlows(POLICY_OWNER)), cookies(e.policyFlows.flows()), 'the first write states the whole set');
  store.take();
  const before = cookies(store.ownerFlows(POLICY_OWNER));
  e.onWatchEvent({ type: 'upsert', object: structuredClone(objs[7]!) });
  e.compileNow();
  t.not(cookies(e.policyFlows.flows()).join(), before.join(), 'the compile changed the policy flows');
  t.notOk(store.dirty, 'the compile did not touch the store');
  t.same(cookies(store.ownerFlows(POLICY_OWNER)), before);
  e.writeFlows(store);
  t.ok(store.dirty, 'the write did');
  t.same(cookies(store.ownerFlows(POLICY_OWNER)), cookies(e.policyFlows.flows()));
  const other = new FlowStore();
  e.writeFlows(other);
  t.same(cookies(other.ownerFlows(POLICY_OWNER)), cookies(e.policyFlows.flows()), 'a new store is given the whole set');
});

t.test('random events, compiles and syncs: the store and the bridge follow the compiled set', async (t) => {
  let seed = 11;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let trial = 0; trial < 20; trial++) {
    const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
    const store = new FlowStore();
    const bridge = new Set<string>();
    const sync = () => {
      e.writeFlows(store);
      const d = store.take();
      for (const c of d.remove) bridge.delete(c);
      for (const f of d.add) bridge.add(f.cookie);
    };
    for (let step = 0; step < 60; step++) {
      const o = objs[Math.floor(rand() * objs.length)]!;
      e.onWatchEvent({ type: rand() < 0.7 ? 'upsert' : 'remove', object: structuredClone(o) });
      const r = rand();
      if (r < 0.4) e.compileNow();
      else if (r < 0.6) sync();
    }
    sync();
    const want = cookies(e.policyFlows.flows());
    if (cookies(store.ownerFlows(POLICY_OWNER)).join() !== want.join() || [...bridge].sort().join() !== cookies(store.flows()).join()) {
      t.fail(`trial ${trial}: the store or the bridge differs from the compiled set`);
      await e.close();
      return;
    }
    await e.close();
  }
  t.pass('20 random histories converge');
});
