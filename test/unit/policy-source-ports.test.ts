/**
 * A probe without a source port stands for a real client, whose source port lies in the
 * ephemeral range (32768-60999 unless configured): rules with sourcePort/sourceEndPort are judged
 * over that range, and the answer says when the verdict depends on the source port.
 */
import t from 'tap';
import { runSimulate } from '../../daemon/ctl/simulate.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { parseProbes } from '../../daemon/policy/probes.js';
import { acnp } from './policy-antrea-helpers.js';
import { modelEngine } from './policy-core-helpers.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dumpYaml } from '../../daemon/kube-yaml.js';

const dropFromSourcePorts = acnp('src-ports', {
  priority: 1,
  appliedTo: [{ podSelector: { matchLabels: { pod: 'b' } } }],
  ingress: [{ action: 'Drop', ports: [{ protocol: 'TCP', port: 80, sourcePort: 40000, sourceEndPort: 45000 }] }],
});

function engineWith(opts: ConstructorParameters<typeof PolicyEngine>[0] = {}): PolicyEngine {
  const base = modelEngine();
  const engine = new PolicyEngine(opts);
  // The model of policy-core-helpers (namespaces x, y, z with Pods a, b, c), with the Antrea policy.
  for (const ns of ['x', 'y', 'z']) engine.upsert({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { ns } } });
  for (const p of base.cluster.pods.values()) {
    engine.upsert({ apiVersion: 'v1', kind: 'Pod', metadata: { name: p.name, namespace: p.namespace, labels: { ...p.labels } }, spec: { containers: [{ name: 'c', ports: p.ports }] }, status: { podIP: p.ips[0] } });
  }
  engine.upsert(dropFromSourcePorts);
  return engine;
}

t.test('no source port: judged over the ephemeral range; a drop on part of it is reported, with the ranges', async (t) => {
  const engine = engineWith();
  t.same(engine.errors(), []);
  const r = engine.evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' });
  t.equal(r.verdict, 'drop', 'some real clients are dropped');
  t.match(r.note, /depends on the source port .*32768-60999.*allow from 32768-39999, drop from 40000-45000, allow from 45001-60999/);
  t.equal(engine.evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', sourcePort: 33000 }).verdict, 'allow');
  const explicit = engine.evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', sourcePort: 40000 });
  t.equal(explicit.verdict, 'drop');
  t.equal(explicit.sourcePort, 40000);
  t.equal(explicit.note, undefined, 'a named source port gives one verdict');
  t.equal(engine.evaluate({ from: 'x/a', to: 'x/b', port: 81, protocol: 'TCP' }).note, undefined, 'other ports do not depend on it');
  const { sides } = engine.explain({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' });
  t.match(sides.find((s) => s.direction === 'Ingress'), { verdict: 'drop', decidedBy: { name: 'src-ports' } }, 'explain shows the side that drops');
});

t.test('the ephemeral range is configurable', async (t) => {
  const engine = engineWith({ ephemeralPorts: { first: 50000, last: 60000 } });
  const r = engine.evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' });
  t.equal(r.verdict, 'allow');
  t.equal(r.note, undefined);
  const all = engineWith({ ephemeralPorts: { first: 41000, last: 42000 } }).evaluate({ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' });
  t.equal(all.verdict, 'drop');
  t.equal(all.note, undefined, 'the whole range is dropped: no dependence');
});

t.test('probe files and the command line accept a source port', async (t) => {
  t.same(parseProbes([{ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', sourcePort: 41000 }]), [{ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', sourcePort: 41000 }]);
  t.throws(() => parseProbes([{ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', sourcePort: 0 }]), /probe 0\.sourcePort: must be an integer 1-65535/);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-srcport-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const base = modelEngine();
  const objects = [
    ...['x'].map((ns) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } })),
    ...[...base.cluster.pods.values()].filter((p) => p.namespace === 'x').map((p) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: p.name, namespace: p.namespace, labels: { ...p.labels } }, spec: { containers: [{ name: 'c', ports: p.ports }] }, status: { podIP: p.ips[0] } })),
    dropFromSourcePorts,
  ];
  const file = join(dir, 's.yaml');
  writeFileSync(file, objects.map((o) => dumpYaml(o)).join('---\n'));
  const run = async (extra: Record<string, unknown>) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runSimulate({ files: [file], from: 'x/a', to: 'x/b', port: 80, ...extra }, { stdout: (s) => out.push(s), stderr: (s) => err.push(s) });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };
  const any = await run({});
  t.equal(any.code, 0, any.err);
  t.match(any.out, /x\/a -> x\/b 80\/TCP: drop/);
  t.match(any.out, /note: .*depends on the source port/);
  const named = await run({ sourcePort: 33000 });
  t.match(named.out, /x\/a \(source port 33000\) -> x\/b 80\/TCP: allow/);
  const narrow = await run({ ephemeralPorts: '50000-60999' });
  t.match(narrow.out, /x\/a -> x\/b 80\/TCP: allow/);
  const bad = await run({ ephemeralPorts: '60999-50000' });
  t.equal(bad.code, 1);
  t.match(bad.err, /--ephemeral-ports: "60999-50000" must be FIRST-LAST/);
});
