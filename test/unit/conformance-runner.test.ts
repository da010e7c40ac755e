/** The reusable conformance runner: model objects, placeholders, expected matrices. */
import { CONFORMANCE_SUITE_FILE } from '../fixtures/conformance.js';
import t from 'tap';
import { readFileSync } from 'node:fs';
import { defaultPodIp, expectedMatrix, modelObjects, modelPairs, substitutePlaceholders, type ConformanceSuite } from '../../lab/conformance.js';

const suite = JSON.parse(readFileSync(CONFORMANCE_SUITE_FILE, 'utf8')) as ConformanceSuite;

t.test('placeholders: host /32 and the /N prefix holding the Pod IP', async (t) => {
  const ip = (ns: string, name: string) => (ns === 'x' && name === 'b' ? '10.244.1.11' : '192.168.77.5');
  t.same(substitutePlaceholders({ a: ['{{podHostCIDR:x/b}}', { c: '{{podPrefixCIDR:y/a:4}}' }], n: 3 }, ip), { a: ['10.244.1.11/32', { c: '192.0.0.0/4' }], n: 3 });
  t.equal(substitutePlaceholders('{{podPrefixCIDR:x/b:16}}', ip), '10.244.0.0/16');
  t.equal(substitutePlaceholders('{{podHostCIDR:x/b}}', () => 'fd00::5'), 'fd00::5/128');
});

t.test('model: 3 namespaces, 9 Pods with named ports, 9 Services; 72 ordered pairs', async (t) => {
  const objs = modelObjects(suite.model, (ns, n) => defaultPodIp(suite.model, ns, n));
  t.equal(objs.filter((o) => o.kind === 'Namespace').length, 3);
  const pods = objs.filter((o) => o.kind === 'Pod');
  t.equal(pods.length, 9);
  t.equal(new Set(pods.map((p) => p.status.podIP)).size, 9, 'distinct addresses');
  t.ok(pods[0]!.spec.containers.some((c: { ports: { name: string }[] }) => c.ports[0]!.name === 'serve-81-sctp'));
  t.equal(objs.filter((o) => o.kind === 'Service').length, 9);
  t.equal(modelPairs(suite.model).length, 72);
  t.notOk(modelObjects(suite.model).some((o) => o.status), 'no addresses when the driver assigns them');
});

t.test('expected matrix = default plus exceptions, loopback excluded', async (t) => {
  const m = expectedMatrix(suite.model, { port: 80, protocol: 'TCP', default: true, exceptions: [{ from: 'x/a', to: 'y/b', allowed: false }, { from: 'x/a', to: 'x/a', allowed: false }] });
  t.equal(m.size, 72);
  t.equal(m.get('x/a>y/b'), false);
  t.equal(m.get('x/b>y/b'), true);
  t.notOk(m.has('x/a>x/a'));
});
