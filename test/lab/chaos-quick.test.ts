// test-schedule: exclusive: it measures gaps, resets and recovery times under injected faults; a second lab beside it would be one more fault.
/**
 * The chaos suite's short run (`npm run chaos -- --quick`, lab/chaos.ts) in npm test: every fault
 * scenario once on its own 2-node lab whose agents follow sluice-controller (the lab's default),
 * with the two invariants checked all along. The table it
 * prints is kept in the test output.
 */
import t from 'tap';
import { join } from 'node:path';
import { run } from '../../lab/net/exec.js';
import { repoRoot } from '../../lab/net/names.js';
import { cli, sluiceSkipReason } from './labcli-helpers.js';

const why = sluiceSkipReason();
if (why) t.plan(0, why);
else {
  // SLUICE_CHAOS_LAB names the lab (default `chaos`), for a run beside another one on the machine.
  const lab = process.env.SLUICE_CHAOS_LAB ?? 'chaos';
  // The suite removes its lab itself; this covers a run killed by the timeout.
  t.teardown(async () => {
    await cli(['down', '--name', lab]);
  });
  t.test('chaos --quick: no gap, no reset, no leak in any scenario', async (t) => {
    const r = await run(process.execPath, [join(repoRoot(), 'dist', 'lab', 'chaos.js'), '--quick', '--name', lab], { allowFail: true, timeoutMs: 600_000 });
    t.comment(r.stdout.trim());
    if (r.stderr.trim()) t.comment(r.stderr.trim());
    const rows = r.stdout.split('\n').filter((l) => /\d+ ms\s+\d+ ms\s+\S+$/.test(l));
    // The agents follow sluice-controller (the lab's default), so its four faults run too.
    t.equal(rows.length, 21, 'twenty-one scenarios ran: seventeen and the controller\'s four');
    for (const name of ['controller kill -9', 'leader kill -9, the standby takes over', 'controller frozen', 'controlplane watches cut']) t.ok(rows.some((l) => l.startsWith(name)), `${name} ran`);
    for (const row of rows) {
      const cols = row.trim().split(/\s{2,}/);
      const [scenario, , churn, tried, gaps, , resets, broken, , , leaks] = cols;
      t.ok(Number(tried) > 0, `${scenario}: ${tried} connections tried`);
      t.ok(Number(churn) > 0, `${scenario}: ${churn} policy changes meanwhile`);
      t.equal(gaps, '0', `${scenario}: no denied connection got through`);
      t.equal(resets, '0', `${scenario}: the allowed connection was not reset`);
      t.equal(broken, '0', `${scenario}: nothing else broken (CNI answers within the spec, no descriptor leak)`);
      t.equal(leaks, 'none', `${scenario}: nothing leaked`);
    }
    t.equal(r.exitCode, 0, 'exit 0: every invariant held');
  });
}
