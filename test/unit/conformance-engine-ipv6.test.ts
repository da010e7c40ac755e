/**
 * The 48 upstream Kubernetes NetworkPolicy e2e cases through the policy engine in an IPv6-only
 * cluster model (Pod addresses IPv6, ipBlock placeholders /128 and IPv6 prefixes), and in a
 * dual-stack model judged per family: every cell of every expected matrix.
 */
import { CONFORMANCE_SUITE_FILE } from '../fixtures/conformance.js';
import t from 'tap';
import { readFileSync } from 'node:fs';
import { EngineDriver, defaultPodIp, defaultPodIpv6, runCase, substitutePlaceholders, type ConformanceSuite } from '../../lab/conformance.js';

const suite = JSON.parse(readFileSync(CONFORMANCE_SUITE_FILE, 'utf8')) as ConformanceSuite;
const v4 = (ns: string, name: string) => defaultPodIp(suite.model, ns, name);
const v6 = (ns: string, name: string) => defaultPodIpv6(suite.model, ns, name);
const ipBlockCases = suite.cases.filter((c) => JSON.stringify(c.steps).includes('{{pod'));

t.test('the IPv6 model: distinct IPv6 Pod addresses; placeholders become IPv6 blocks', async (t) => {
  const ips = suite.model.pods.map((p) => v6(p.namespace, p.name));
  t.equal(new Set(ips).size, 9);
  t.equal(v6('x', 'b'), 'fd00:10:244:1::b');
  t.equal(substitutePlaceholders('{{podHostCIDR:x/b}}', v6), 'fd00:10:244:1::b/128');
  t.equal(substitutePlaceholders('{{podPrefixCIDR:x/b:4}}', v6), 'f000::/4');
  t.ok(ipBlockCases.length >= 3, 'some cases use ipBlocks built from Pod addresses');
});

t.test('IPv6-only cluster', async (t) => {
  t.equal(suite.cases.length, 48);
  for (const c of suite.cases) {
    t.test(c.id, async (t) => {
      const driver = new EngineDriver();
      const outcomes = await runCase(suite, c, driver, v6);
      t.same(driver.engine.errors(), [], 'every object of the case is valid');
      t.same([...driver.engine.cluster.pods.values()].map((p) => p.ips.length === 1 && p.ips[0]!.startsWith('fd00:')), Array(9).fill(true), 'every Pod is IPv6-only');
      t.ok(outcomes.length > 0);
      for (const o of outcomes) {
        t.equal(o.actual.size, 72, `step ${o.step}: 72 cells probed`);
        t.same(o.mismatches, [], `step ${o.step} ${o.port}/${o.protocol}: every cell as upstream expects`);
      }
    });
  }
});

t.test('dual-stack cluster, each family judged on its own (ipBlocks of that family)', async (t) => {
  for (const family of [4, 6] as const) {
    for (const c of suite.cases) {
      t.test(`IPv${family} ${c.id}`, async (t) => {
        const driver = new EngineDriver(family);
        const outcomes = await runCase(suite, c, driver, family === 4 ? v4 : v6, true, (ns, n) => [v4(ns, n), v6(ns, n)]);
        t.same(driver.engine.errors(), []);
        t.equal(driver.engine.cluster.pods.get('x/a')!.ips.length, 2, 'Pods are dual-stack');
        for (const o of outcomes) t.same(o.mismatches, [], `step ${o.step} ${o.port}/${o.protocol}`);
      });
    }
  }
});

t.test('dual-stack: an ipBlock of the other family does not hold the Pods (the upstream expectation fails)', async (t) => {
  // The cases' ipBlocks built from IPv6 addresses, judged for IPv4: the blocks match no IPv4 peer,
  // so at least one cell of each such case must differ from upstream's expectation.
  for (const c of ipBlockCases) {
    const driver = new EngineDriver(4);
    const outcomes = await runCase(suite, c, driver, v6, true, (ns, n) => [v4(ns, n), v6(ns, n)]);
    t.ok(outcomes.some((o) => o.mismatches.length > 0), `${c.id}: IPv6 blocks do not match IPv4 traffic`);
  }
});
