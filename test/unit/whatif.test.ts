/**
 * `sluicectl whatif` (pure part and command): the connections a change flips, checked against the
 * engine evaluating the changed object set on its own; deletions, namespace scope, ipBlocks named by
 * the change, and the problems it names (a deletion of something absent, an invalid object).
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readManifests } from '../../daemon/manifests.js';
import { runWhatIf } from '../../daemon/ctl/whatif.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { addressIn, namedPortsAndNetworks, whatIf } from '../../daemon/policy/whatif.js';

const MODEL = join(import.meta.dirname, '..', 'scenarios', 'model.yaml');
const live = async () => (await readManifests([MODEL])).objects;
const np = (name: string, namespace: string, spec: Record<string, unknown>): KubeObject => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace }, spec });
const DENY_X = np('deny-in', 'x', { podSelector: {}, policyTypes: ['Ingress'] });

function engineOf(objects: KubeObject[]): PolicyEngine {
  const e = new PolicyEngine({ log: () => undefined });
  const rank = (o: KubeObject) => (o.kind === 'Namespace' || o.kind === 'Node' ? 0 : o.kind === 'Tier' ? 1 : 2);
  for (const o of [...objects].sort((a, b) => rank(a) - rank(b))) e.upsert(o);
  return e;
}

t.test('a default deny in x: exactly the connections into x flip allow -> drop, and the engine agrees on each', async (t) => {
  const objects = await live();
  const r = whatIf(objects, [DENY_X], []);
  t.ok(r.compared > 300, `${r.compared} connections compared`);
  t.ok(r.changes.length > 0);
  t.ok(r.changes.every((c) => /^(service:)?x\//.test(c.to) && c.before.verdict === 'allow' && c.after.verdict === 'drop'), 'every change is a connection into x, allow -> drop');
  t.ok(r.changes.every((c) => c.after.decidedBy?.kind === 'K8sNetworkPolicyIsolation' && c.after.decidedBy.name === 'deny-in'), 'decided by the new policy');
  const after = engineOf([...objects, DENY_X]);
  for (const c of r.changes) t.equal(after.evaluate({ from: c.from, to: c.to, port: c.port, protocol: c.protocol }).verdict, 'drop');
  const podsIntoX = r.changes.filter((c) => !c.to.startsWith('service:')).length;
  // 9 Pods; x has 3; each x Pod is reached by the 8 others on every port any Pod declares (80, 81 TCP/UDP, 82 SCTP).
  t.equal(podsIntoX, 3 * 8 * 5, 'every Pod-to-Pod connection into x changes, on every declared port');
  t.same(r.problems, []);
});

t.test('deleting the deny restores exactly what it took away', async (t) => {
  const objects = [...(await live()), DENY_X];
  const add = whatIf(await live(), [DENY_X], []);
  const del = whatIf(objects, [], [DENY_X]);
  const key = (c: { from: string; to: string; port: number; protocol: string }) => `${c.from}>${c.to}:${c.port}/${c.protocol}`;
  t.same(del.changes.map(key).sort(), add.changes.map(key).sort());
  t.ok(del.changes.every((c) => c.before.verdict === 'drop' && c.after.verdict === 'allow'));
});

t.test('-n scopes the connections to those from or to the namespace', async (t) => {
  const r = whatIf(await live(), [DENY_X], [], { namespace: 'y' });
  t.ok(r.changes.length > 0);
  t.ok(r.changes.every((c) => c.from.startsWith('y/') || c.to.startsWith('y/') || c.to.startsWith('service:y/')), 'all touch y');
  t.ok(r.changes.length < whatIf(await live(), [DENY_X], []).changes.length);
});

t.test('an egress deny to a network: connections to an address in it are probed and flip', async (t) => {
  const deny = np('no-ext', 'z', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['192.168.77.0/24'] } }], ports: [{ protocol: 'TCP', port: 8443 }] }] });
  const r = whatIf(await live(), [deny], []);
  t.ok(r.changes.some((c) => c.from === 'z/a' && c.to === 'ip:192.168.77.1' && c.port === 8443 && c.after.verdict === 'drop'), 'z/a -> an address of the excepted network on the port the change names: now dropped');
  t.ok(r.changes.some((c) => c.from === 'z/a' && c.to === 'x/a' && c.port === 80 && c.after.verdict === 'drop'), 'z/a -> x/a on a port the rule does not name: now dropped (egress isolated)');
  t.notOk(r.changes.some((c) => c.from === 'z/a' && c.to === 'x/a' && c.port === 8443), 'z/a -> x/a on 8443 stays allowed (inside 0.0.0.0/0, not excepted)');
});

t.test('problems are named: deleting what the cluster lacks, an invalid changed object', async (t) => {
  const bad = np('bad', 'x', { podSelector: {}, ingress: [{ ports: [{ protocol: 'TCP', port: 80, endPort: 70 }] }] });
  const r = whatIf(await live(), [bad], [np('ghost', 'x', { podSelector: {} })]);
  t.match(r.problems, [/delete NetworkPolicy x\/ghost: the cluster has no such object/, /invalid NetworkPolicy x\/bad: .*endPort.*\(it would be ignored\)/]);
  t.same(r.changes, [], 'an ignored object changes nothing');
});

t.test('ports and networks named by any policy kind', async (t) => {
  const anp: KubeObject = { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'a' }, spec: { egress: [{ to: [{ networks: ['10.9.0.0/16'] }], ports: [{ portNumber: { protocol: 'UDP', port: 53 } }] }] } };
  const cnp: KubeObject = { apiVersion: 'policy.networking.k8s.io/v1alpha2', kind: 'ClusterNetworkPolicy', metadata: { name: 'c' }, spec: { ingress: [{ protocols: [{ sctp: { destinationPort: { range: { start: 90, end: 92 } } } }] }] } };
  t.same(namedPortsAndNetworks(anp), { ports: [{ port: 53, protocol: 'UDP' }], cidrs: ['10.9.0.0/16'] });
  t.same(namedPortsAndNetworks(cnp).ports, [{ port: 90, protocol: 'SCTP' }, { port: 92, protocol: 'SCTP' }]);
  t.equal(addressIn('10.9.0.0/16'), '10.9.0.1');
  t.equal(addressIn('192.168.77.250/32'), '192.168.77.250');
  t.equal(addressIn('10.0.0.0/31'), '10.0.0.0');
  t.equal(addressIn('fd00::/64'), 'fd00::1', 'IPv6 networks are probed too');
  t.equal(addressIn('FD00:0:0:1::5/127'), 'fd00:0:0:1::4');
  t.equal(addressIn('fd00::9'), 'fd00::9');
  t.equal(addressIn('fd00::/129'), undefined);
});

t.test('the command: table and JSON from a live source; usage errors exit 1', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'whatif-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'deny.yaml');
  writeFileSync(file, 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-in, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n');
  const out: string[] = [];
  const err: string[] = [];
  const io = { stdout: (s: string) => out.push(s), stderr: (s: string) => err.push(s) };
  t.equal(await runWhatIf({ files: [file], deletes: [], output: 'table' }, live, io), 0);
  t.match(out[0], /^\d+ connections compared; \d+ would change\n\nx\/a -> x\/b 80\/TCP: allow -> drop\n  before: no rule \(the default: allow\)\n  after:  isolated by Kubernetes NetworkPolicy x\/deny-in \(Ingress\)/);
  out.length = 0;
  t.equal(await runWhatIf({ files: [file], deletes: [], output: 'json' }, live, io), 0);
  const json = JSON.parse(out[0]!) as { compared: number; changes: unknown[] };
  t.equal(json.changes.length, whatIf(await live(), [DENY_X], []).changes.length);
  t.equal(await runWhatIf({ files: [], deletes: [], output: 'table' }, live, io), 1);
  t.match(err.pop(), /name the change: -f CHANGED/);
  t.equal(await runWhatIf({ files: [join(dir, 'nope.yaml')], deletes: [], output: 'table' }, live, io), 1);
  t.match(err.pop(), /^sluicectl whatif: -f: .*nope\.yaml/);
});

t.test('dual-stack: a change to an IPv6 block is probed at an IPv6 address of it', async (t) => {
  const pod = (name: string, ips: string[]): KubeObject => ({
    apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'd', name, labels: { app: name } },
    spec: { containers: [{ name: 'c', ports: [{ containerPort: 443 }] }] }, status: { podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) },
  });
  const cluster: KubeObject[] = [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'd' } }, pod('a', ['10.5.0.1', 'fd00:5::1']), pod('b', ['10.5.0.2', 'fd00:5::2'])];
  const deny = np('no-v6-ext', 'd', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '::/0', except: ['2001:db8::/32'] } }] }] });
  const r = whatIf(cluster, [deny], []);
  t.ok(r.changes.some((c) => c.from === 'd/a' && c.to === 'ip:2001:db8::1' && c.after.verdict === 'drop'), 'an address of the excepted IPv6 network: now dropped');
  t.notOk(r.changes.some((c) => c.from === 'd/a' && c.to === 'ip:::1'), 'the ::/0 block itself is probed at ::1, which stays allowed');
  t.ok(r.changes.some((c) => c.from === 'd/a' && c.to === 'd/b' && c.after.verdict === 'drop'), 'd/a -> d/b: its IPv4 connection is now dropped (no IPv4 block allows it)');
});
