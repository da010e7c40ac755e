/**
 * A reused address (enforcement/claims.ts): the Pod that is not terminating wins it, then the newer
 * Pod; the loser is judged without it (or leaves the engine when it has none left) and gets it
 * back if the winner goes first. Through the enforcer: the new owner's verdicts apply to the
 * address, never the old owner's allow; a realization question about the new owner is answered
 * yes only once the old owner has let go.
 */
import t from 'tap';
import { pino } from 'pino';
import { AddressClaims } from '../../daemon/enforcement/claims.js';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import type { KubeObject } from '../../daemon/policy/types.js';

t.test('claims: not terminating beats terminating, then newer beats older, then the name', async (t) => {
  const c = new AddressClaims();
  t.same(c.set('x/old', ['10.0.0.5'], { terminating: false, created: '2026-11-01T00:00:00Z' }), []);
  t.equal(c.owner('10.0.0.5'), 'x/old');
  t.same(c.set('z/new', ['10.0.0.5', 'fd00::5'], { terminating: false, created: '2026-11-02T00:00:00Z' }), ['x/old'], 'the rival is reported');
  t.equal(c.owner('10.0.0.5'), 'z/new', 'the newer Pod wins');
  t.same(c.held('x/old', ['10.0.0.5']), []);
  t.same(c.held('z/new', ['10.0.0.5', 'fd00::5']), ['10.0.0.5', 'fd00::5']);
  t.same(c.set('z/new', ['10.0.0.5', 'fd00::5'], { terminating: true, created: '2026-11-02T00:00:00Z' }), ['x/old']);
  t.equal(c.owner('10.0.0.5'), 'x/old', 'a terminating Pod loses to one that is not, however new');
  t.same(c.rivals('x/old', ['10.0.0.5']), ['z/new']);
  t.same(c.remove('x/old'), ['z/new'], 'removal reports who shared an address');
  t.equal(c.owner('10.0.0.5'), 'z/new', 'the remaining claimant holds it');
  c.set('a/p', ['10.0.0.9'], { terminating: false, created: '' });
  c.set('b/p', ['10.0.0.9'], { terminating: false, created: '' });
  t.equal(c.owner('10.0.0.9'), 'a/p', 'all else equal: the name decides, alike on every node');
  c.remove('a/p');
  c.remove('b/p');
  t.equal(c.owner('10.0.0.9'), undefined);
});

const log = pino({ level: 'silent' });
const ns = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name } } });
const pod = (namespace: string, name: string, node: string, ip: string, meta: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace, name, labels: { pod: name }, creationTimestamp: '2026-11-01T00:00:00Z', ...meta },
  spec: { nodeName: node, containers: [{ name: 'c', image: 'i' }] },
  status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
});

t.test('the enforcer: a reused address is judged as its new owner; the old owner has it back if the new one goes', async (t) => {
  const e = new Enforcer({ nodeName: 'node-2', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
  t.teardown(() => e.close());
  for (const o of [ns('x'), ns('y'), ns('z'), pod('y', 'd', 'node-2', '10.2.0.5')]) e.onWatchEvent({ type: 'upsert', object: o });
  // y/d admits only namespace x.
  e.onWatchEvent({ type: 'upsert', object: { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'y', name: 'only-x' }, spec: { podSelector: { matchLabels: { pod: 'd' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }] }] } } });
  const verdict = () => e.engine.evaluate({ from: 'ip:10.1.0.7', to: 'y/d', port: 80, protocol: 'TCP' }).verdict;
  const old = pod('x', 'old', 'node-1', '10.1.0.7');
  e.onWatchEvent({ type: 'upsert', object: old });
  t.equal(verdict(), 'allow', 'x/old at 10.1.0.7 is admitted');
  const carrying = () => e.flows().filter((f) => f.match.includes('10.1.0.7')).length;
  t.ok(carrying() > 0, 'the allow rule\'s peer flows carry the address');
  // x/old is deleted (terminating, its status still lists the address), and its address is reused at once by z/new.
  e.onWatchEvent({ type: 'upsert', object: { ...old, metadata: { ...old.metadata, deletionTimestamp: '2026-11-03T00:00:00Z' } } });
  e.onWatchEvent({ type: 'upsert', object: pod('z', 'new', 'node-1', '10.1.0.7', { creationTimestamp: '2026-11-03T00:00:01Z' }) });
  t.equal(verdict(), 'drop', 'the address is z/new\'s now: y/d drops it (x/old\'s allow no longer matches it)');
  t.equal(carrying(), 0, 'no flow carries the address any more (no rule names z)');
  t.ok(e.podRealized({ namespace: 'z', name: 'new', ips: ['10.1.0.7'] }) === false, 'not realized before a flush (nothing bound)');
  e.onWatchEvent({ type: 'remove', object: pod('z', 'new', 'node-1', '10.1.0.7') });
  t.equal(verdict(), 'allow', 'z/new gone first: x/old (still terminating) has its address back');
});
