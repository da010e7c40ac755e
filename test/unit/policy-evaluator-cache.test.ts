/**
 * The evaluator caches, per probe endpoint, its resolution, its rule lists and whether it is a
 * member of each Pod-selecting peer. Every kind of change a membership depends on must show in
 * the next answer: Pod labels, Namespace labels, group definitions, Service endpoints, Pod
 * replacement at the same address, and policy edits.
 */
import t from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import type { Peer } from '../../daemon/policy/types.js';
import { namespace, pod, rule, rulesObject, testKind } from './policy-core-helpers.js';

function engine(): PolicyEngine {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind] });
  e.upsert(namespace('x', { team: 'red' }));
  e.upsert(namespace('y', { team: 'blue' }));
  e.upsert(pod('x', 'a', { ip: '10.1.0.1', labels: { app: 'server' } }));
  e.upsert(pod('y', 'b', { ip: '10.1.0.2', labels: { app: 'client' } }));
  return e;
}

const denyFrom = (peer: Peer) => rulesObject('deny', {
  groups: [{ name: 'clients', members: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'client' } } }] }],
  rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [{ kind: 'pods', namespaces: { kind: 'names', names: ['x'] }, pods: {} }], peers: [peer] }, {}, 'deny')],
});

const verdict = (e: PolicyEngine, from = 'y/b') => e.evaluate({ from, to: 'x/a', port: 80, protocol: 'TCP' }).verdict;

t.test('a Pod relabel changes its memberships', async (t) => {
  const e = engine();
  e.upsert(denyFrom({ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'client' } } }));
  t.equal(verdict(e), 'drop');
  e.upsert(pod('y', 'b', { ip: '10.1.0.2', labels: { app: 'other' } }));
  t.equal(verdict(e), 'allow');
  t.equal(verdict(e, 'ip:10.1.0.2'), 'allow', 'also when named by address');
  e.upsert(pod('y', 'b', { ip: '10.1.0.2', labels: { app: 'client' } }));
  t.equal(verdict(e, 'ip:10.1.0.2'), 'drop');
});

t.test('a Namespace relabel changes namespace-selector memberships', async (t) => {
  const e = engine();
  e.upsert(denyFrom({ kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { team: 'blue' } } }, pods: {} }));
  t.equal(verdict(e), 'drop');
  e.upsert(namespace('y', { team: 'green' }));
  t.equal(verdict(e), 'allow');
});

t.test('a group definition edit changes group memberships', async (t) => {
  const e = engine();
  e.upsert(denyFrom({ kind: 'group', name: 'clients' }));
  t.equal(verdict(e), 'drop');
  e.upsert(rulesObject('groups', { groups: [] }));
  e.upsert(rulesObject('deny', {
    groups: [{ name: 'clients', members: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'nobody' } } }] }],
    rules: [rule({ direction: 'Ingress', action: 'Drop', appliedTo: [{ kind: 'pods', namespaces: { kind: 'names', names: ['x'] }, pods: {} }], peers: [{ kind: 'group', name: 'clients' }] }, {}, 'deny')],
  }));
  t.equal(verdict(e), 'allow');
});

t.test('Service endpoint changes change serviceRef memberships', async (t) => {
  const e = engine();
  e.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'y' }, spec: { clusterIP: '10.96.0.1', selector: { app: 'client' }, ports: [{ port: 80 }] } });
  e.upsert(denyFrom({ kind: 'serviceRef', namespace: 'y', name: 's' }));
  t.equal(verdict(e), 'drop');
  e.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'y' }, spec: { clusterIP: '10.96.0.1', selector: { app: 'nobody' }, ports: [{ port: 80 }] } });
  t.equal(verdict(e), 'allow', 'selector no longer selects b');
  e.upsert({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 's-1', namespace: 'y', labels: { 'kubernetes.io/service-name': 's' } }, endpoints: [{ addresses: ['10.1.0.2'] }] } as never);
  t.equal(verdict(e), 'drop', 'an EndpointSlice lists b by address');
});

t.test('another Pod at the same address is a different endpoint', async (t) => {
  const e = engine();
  e.upsert(denyFrom({ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'client' } } }));
  t.equal(verdict(e, 'ip:10.1.0.2'), 'drop');
  e.remove({ apiVersion: 'v1', kind: 'Pod', namespace: 'y', name: 'b' });
  e.upsert(pod('y', 'c', { ip: '10.1.0.2', labels: { app: 'other' } }));
  t.equal(verdict(e, 'ip:10.1.0.2'), 'allow');
  t.throws(() => verdict(e, 'y/b'), /no Pod y\/b/, 'the removed Pod is unknown');
});

t.test('a policy edit replaces the cached rule lists', async (t) => {
  const e = engine();
  t.equal(verdict(e), 'allow');
  e.upsert(denyFrom({ kind: 'pods', namespaces: { kind: 'all' }, pods: {} }));
  t.equal(verdict(e), 'drop');
  e.remove({ apiVersion: 'test.sluice.io/v1', kind: 'Rules', name: 'deny' });
  t.equal(verdict(e), 'allow');
});
