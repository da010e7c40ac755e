/**
 * All 48 upstream Kubernetes NetworkPolicy e2e cases (as data) through the policy engine:
 * every cell of every expected 9×9 matrix, TCP/UDP/SCTP.
 */
import { CONFORMANCE_SUITE_FILE } from '../fixtures/conformance.js';
import t from 'tap';
import { readFileSync } from 'node:fs';
import { EngineDriver, runCase, type ConformanceSuite } from '../../lab/conformance.js';

const SUITE_PATH = CONFORMANCE_SUITE_FILE;
const suite = JSON.parse(readFileSync(SUITE_PATH, 'utf8')) as ConformanceSuite;

t.equal(suite.cases.length, 48, 'the suite has 48 cases');

for (const c of suite.cases) {
  t.test(c.id, async (t) => {
    const driver = new EngineDriver();
    const outcomes = await runCase(suite, c, driver);
    t.ok(outcomes.length > 0, 'the case has expectations');
    t.same(driver.engine.errors(), [], 'every object of the case is valid');
    for (const o of outcomes) {
      t.equal(o.actual.size, 72, `step ${o.step}: 72 cells probed`);
      t.same(o.mismatches, [], `step ${o.step} ${o.port}/${o.protocol}: every cell as upstream expects`);
    }
  });
}
