/**
 * Upstream NetworkPolicy e2e cases through the CLI path: the scenario is written as manifests,
 * each expect step runs the compiled `sluicectl simulate -f DIR --probes FILE -o json`, and the
 * JSON verdicts must give the upstream matrix.
 */
import { CONFORMANCE_SUITE_FILE } from '../fixtures/conformance.js';
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dumpYaml } from '../../daemon/kube-yaml.js';
import { defaultPodIp, defaultPodIpv6, runCase, type ConformanceSuite, type Driver, type ExpectStep } from '../../lab/conformance.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const ROOT = new URL('../..', import.meta.url).pathname;
const CLI = join(ROOT, 'dist/daemon/sluicectl.js');
const suite = JSON.parse(readFileSync(CONFORMANCE_SUITE_FILE, 'utf8')) as ConformanceSuite;

if (!existsSync(CLI)) execFileSync('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: ROOT, stdio: 'ignore' });

/** Keeps the scenario as files; probes by running the CLI on them. */
class SimulateDriver implements Driver {
  private objects = new Map<string, KubeObject>();
  constructor(private readonly dir: string, private readonly family?: 4 | 6) {}
  private key(o: { kind: string; metadata?: { namespace?: string | undefined; name: string }; namespace?: string | undefined; name?: string }) {
    return `${o.kind}/${o.metadata?.namespace ?? o.namespace ?? ''}/${o.metadata?.name ?? o.name}`;
  }
  setUp(objects: KubeObject[]) { this.objects = new Map(objects.map((o) => [this.key(o), o])); }
  apply(objects: KubeObject[]) { for (const o of objects) this.objects.set(this.key(o), o); }
  delete(refs: { kind: string; namespace?: string | undefined; name: string }[]) { for (const r of refs) this.objects.delete(this.key(r)); }
  relabel(obj: KubeObject) { this.objects.set(this.key(obj), obj); }
  probe(pairs: [string, string][], port: number, protocol: ExpectStep['protocol']) {
    writeFileSync(join(this.dir, 'scenario.yaml'), [...this.objects.values()].map((o) => dumpYaml(o)).join('---\n'));
    const probeFile = join(this.dir, 'probes.json');
    writeFileSync(probeFile, JSON.stringify(pairs.map(([from, to]) => ({ from, to, port, protocol, ...(this.family ? { family: this.family } : {}) }))));
    const r = spawnSync('node', [CLI, 'simulate', '-f', join(this.dir, 'scenario.yaml'), '--probes', probeFile, '-o', 'json'], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`sluicectl simulate exited ${r.status}: ${r.stderr}`);
    const results = JSON.parse(r.stdout) as { from: string; to: string; verdict: string }[];
    return new Map(results.map((x) => [`${x.from}>${x.to}`, x.verdict === 'allow']));
  }
}

// A spread of kinds: default deny, namespace selector, named port, label update, ipBlock except, SCTP.
const picked = ['/01-', '/10-', '/17-', '/21-', '/35-', '/47-'];
for (const c of suite.cases.filter((c) => picked.some((p) => c.id.includes(p)))) {
  t.test(c.id, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-sim-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const outcomes = await runCase(suite, c, new SimulateDriver(dir));
    t.ok(outcomes.length > 0);
    for (const o of outcomes) t.same(o.mismatches, [], `step ${o.step} ${o.port}/${o.protocol}: matrix as upstream expects`);
  });
}

// The ipBlock cases in a dual-stack model with IPv6 blocks, probed over IPv6 through the CLI.
for (const c of suite.cases.filter((c) => ['/35-', '/36-'].some((p) => c.id.includes(p)))) {
  t.test(`${c.id} (dual-stack, IPv6 blocks and probes)`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-sim6-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const v6 = (ns: string, name: string) => defaultPodIpv6(suite.model, ns, name);
    const outcomes = await runCase(suite, c, new SimulateDriver(dir, 6), v6, true, (ns, name) => [defaultPodIp(suite.model, ns, name), v6(ns, name)]);
    t.ok(outcomes.length > 0);
    t.match(readFileSync(join(dir, 'scenario.yaml'), 'utf8'), /fd00:10:244:\d::b\/128/, 'the policy names an IPv6 block');
    for (const o of outcomes) t.same(o.mismatches, [], `step ${o.step} ${o.port}/${o.protocol}: matrix as upstream expects`);
  });
}
