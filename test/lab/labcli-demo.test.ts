/**
 * `sluice-lab demo` (what `npm run lab` runs) through the real CLI: a 2-node lab with the x/y/z ×
 * a/b/c workload, the matrix before and after the example policies with one explanation per
 * example, a truthful statement whether the two matrices differ, the lab left up, a second run
 * reusing it, and `down` removing it. Prints the lab up time and the 9×9×4 probe time. Lab lb3.
 */
import t from 'tap';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../lab/net/names.js';
import { agentStatus } from './enforce-helpers.js';
import { cli, cliJson, labRemains, skipReason, type ListJson, type PodJson } from './labcli-helpers.js';

const LAB = 'lb3';
const reason = skipReason();

/** The matrix block between two headings of the demo output. */
function section(text: string, from: string, to: string): string {
  const start = text.indexOf(from);
  const end = text.indexOf(to, start + from.length);
  return start < 0 || end < 0 ? '' : text.slice(start + from.length, end).trim();
}

function matrixRows(block: string): string[] {
  return block.split('\n').filter((l) => /^[xyz]\/[abc]\s/.test(l)).map((l) => l.trimEnd());
}

if (reason) {
  t.plan(0, reason);
} else {
  const n = ['--name', LAB];
  t.before(async () => {
    await cli(['down', ...n]);
  });
  t.teardown(async () => {
    await cli(['down', ...n]);
  });

  t.test('demo prints two matrices, the explanations and whether they differ', async (t) => {
    const r = await cli(['demo', ...n]);
    t.equal(r.code, 0, `demo exits 0 (${r.stderr})`);
    const out = r.stdout;
    const figures = /came up in ([\d.]+) s; (\d+)-probe matrix in ([\d.]+) s/.exec(out);
    t.ok(figures, 'prints the lab up time and the probe time');
    if (figures) t.comment(`demo: lab up ${figures[1]} s; ${figures[2]} probes (9 Pods × 9 Pods × 2 ports × TCP/UDP) in ${figures[3]} s; whole demo ${(r.ms / 1000).toFixed(1)} s`);
    t.equal(figures?.[2], '324', '9×9×4 probes');
    t.match(out, /sluice on \(controller\)/, 'the agents follow sluice-controller (the lab\'s default)');
    for (const node of ['node-1', 'node-2']) {
      const cp = ((await agentStatus(LAB, node)) as { enforcement?: { controlPlane?: { connected?: boolean } } }).enforcement?.controlPlane;
      t.equal(cp?.connected, true, `${node}'s agent follows the controller (its /status)`);
    }

    const before = section(out, '== Reachability without policies', '== Applying the example policies ==');
    const after = section(out, '== Reachability with the example policies ==', 'What each example is meant to do:');
    for (const [name, block] of [['before', before], ['after', after]] as const) {
      for (const key of ['80/TCP', '80/UDP', '81/TCP', '81/UDP']) t.match(block, new RegExp(`^${key} `, 'm'), `${name}: a ${key} matrix`);
      t.equal(matrixRows(block).length, 4 * 9, `${name}: 9 rows per matrix`);
    }
    t.ok(matrixRows(before).every((l) => /^[xyz]\/[abc](\s+\.)+\s*$/.test(l)), 'without policies everything is reachable');

    const identical = matrixRows(before).join('\n') === matrixRows(after).join('\n');
    t.match(out, identical ? /The two matrices are IDENTICAL/ : /The two matrices DIFFER/, `the output says plainly that they ${identical ? 'are identical' : 'differ'}`);
    t.notMatch(out, identical ? /DIFFER/ : /IDENTICAL/, 'and not the opposite');

    const files = readdirSync(join(repoRoot(), 'examples', 'policies')).filter((f) => /\.ya?ml$/.test(f));
    t.ok(files.length >= 5, 'at least five example policies');
    const explanations = out.slice(out.indexOf('What each example is meant to do:'));
    for (const f of files) t.match(explanations, new RegExp(`^  ${f.replace('.', '\\.')}: \\S.+`, 'm'), `${f} is explained in one line`);
    for (const kind of ['NetworkPolicy', 'Antrea ClusterNetworkPolicy', 'AdminNetworkPolicy']) t.match(explanations, kind);
    for (const hint of ['sluicectl', 'sluice-lab probe', 'sluice-lab down']) t.match(out, hint, `tells how to use ${hint}`);

    const pods = await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', ...n]);
    t.equal(pods.items.filter((p) => p.status.phase === 'Running').length, 9, 'the lab stays up with its 9 Pods');
    t.same([...new Set(pods.items.map((p) => p.spec.nodeName))].sort(), ['node-1', 'node-2'], 'spread over both nodes');
  });

  t.test('a second demo reuses the running lab', async (t) => {
    const ips = async () => (await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', ...n])).items.map((p) => `${p.metadata.namespace}/${p.metadata.name}=${p.status.podIP}`).sort();
    const before = await ips();
    const r = await cli(['demo', ...n]);
    t.equal(r.code, 0, `demo again exits 0 (${r.stderr})`);
    t.match(r.stdout, /reusing the running lab/);
    t.match(r.stdout, /The two matrices (are IDENTICAL|DIFFER)/);
    t.same(await ips(), before, 'same Pods, same IPs');
  });

  t.test('down removes the demo lab', async (t) => {
    const r = await cli(['down', ...n]);
    t.equal(r.code, 0);
    t.same(labRemains(LAB), [], 'no namespace, process or state dir left');
  });
}
