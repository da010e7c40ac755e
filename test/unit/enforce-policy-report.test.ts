/**
 * The node policy report (GET /policies, `sluicectl node policies`): built from a real PolicyEngine
 * on node n1 with Pods on n1 and n2, a Kubernetes NetworkPolicy, an Antrea ClusterNetworkPolicy in
 * a custom Tier, an AdminNetworkPolicy and invalid objects; its human rendering; the health
 * server's extra route and the command against it.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { nodePoliciesCommand, renderPolicyReport } from '../../daemon/ctl/node-policies.js';
import { agentStatus } from '../../daemon/ctl/node-common.js';
import { loadConfig } from '../../daemon/config.js';
import { buildPolicyReport, policiesAnswer, type PolicyReport } from '../../daemon/enforcement/policy-report.js';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { startHealthServer } from '../../daemon/health.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, netpol, pod } from './policy-core-helpers.js';

const tier = (name: string, priority: unknown): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name }, spec: { priority } });
const acnp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name }, spec });
const anp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name }, spec });

const nsSel = (ns: string) => ({ namespaceSelector: { matchLabels: { ns } } });

/** Cluster: x/a, y/a, y/c and a hostNetwork Pod on n1; x/b, y/b on n2. */
function engineOnN1(): PolicyEngine {
  const e = new PolicyEngine({ nodeName: 'n1' });
  e.upsert(namespace('x'));
  e.upsert(namespace('y'));
  e.upsert(pod('x', 'a', { node: 'n1', ip: '10.0.1.1' }));
  e.upsert(pod('y', 'a', { node: 'n1', ip: '10.0.1.2' }));
  e.upsert(pod('y', 'c', { node: 'n1', ip: '10.0.1.3' }));
  e.upsert(pod('x', 'b', { node: 'n2', ip: '10.0.2.1' }));
  e.upsert(pod('y', 'b', { node: 'n2', ip: '10.0.2.2' }));
  // Kubernetes NP in x: isolates every Pod of x for ingress, allows from y.
  e.upsert(netpol('x', 'allow-from-y', { podSelector: {}, policyTypes: ['Ingress'], ingress: [{ from: [nsSel('y')] }] }));
  // Kubernetes NP that only selects y/b (on n2).
  e.upsert(netpol('y', 'only-b', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [{ from: [nsSel('x')] }] }));
  // Antrea ACNP in a custom tier on y/a: drop from x, allow to x.
  e.upsert(tier('secops', 20));
  e.upsert(acnp('ya-guard', {
    priority: 5, tier: 'secops',
    appliedTo: [{ ...nsSel('y'), podSelector: { matchLabels: { pod: 'a' } } }],
    ingress: [{ name: 'drop-x', action: 'Drop', from: [nsSel('x')] }],
    egress: [{ name: 'to-x', action: 'Allow', to: [nsSel('x')] }],
  }));
  // Invalid: a tier that does not exist, and a priority out of range.
  e.upsert(acnp('bad-tier', { priority: 3, tier: 'nope', appliedTo: [nsSel('x')], ingress: [{ action: 'Drop', from: [nsSel('y')] }] }));
  e.upsert(acnp('bad-priority', { priority: 0, tier: 'secops', appliedTo: [nsSel('x')], ingress: [{ action: 'Drop', from: [nsSel('y')] }] }));
  // AdminNetworkPolicy on namespace x: deny y on TCP 81.
  e.upsert(anp('x-no-y-81', {
    priority: 10, subject: { namespaces: { matchLabels: { ns: 'x' } } },
    ingress: [{ name: 'deny-y-81', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'y' } } }], ports: [{ portNumber: { protocol: 'TCP', port: 81 } }] }],
  }));
  const host = pod('x', 'host', { node: 'n1', ip: '10.0.0.1', hostNetwork: true });
  e.upsert(host);
  return e;
}

function reportOf(e: PolicyEngine, synced = true): PolicyReport {
  const localPods = [...e.cluster.pods.values()].filter((p) => p.nodeName === 'n1' && !p.hostNetwork).map((p) => `${p.namespace}/${p.name}`);
  return buildPolicyReport({ node: 'n1', synced, rules: e.nodeRuleSet(), isolations: e.nodeIsolations(), errors: e.errors(), localPods });
}

t.test('the report lists exactly the policies with targets on n1, in evaluation order', async (t) => {
  const e = engineOnN1();
  const r = reportOf(e);
  t.equal(r.node, 'n1');
  t.equal(r.synced, true);
  t.same(r.policies.map((p) => `${p.kind} ${p.namespace ?? ''}/${p.name}`), [
    'AntreaClusterNetworkPolicy /ya-guard',
    'AdminNetworkPolicy /x-no-y-81',
    'NetworkPolicy x/allow-from-y',
  ], 'ACNP (tier 20) before ANP (tier 251) before K8s NP; y/only-b (n2 only) and the invalid ACNPs are absent');
  t.same(r.policies[0], {
    kind: 'AntreaClusterNetworkPolicy', name: 'ya-guard', stage: 0, tier: { name: 'secops', priority: 20 }, priority: 5,
    rules: 2, ingressRules: 1, egressRules: 1, actions: ['Allow', 'Drop'], isolates: [], pods: ['y/a'],
  });
  const adminPolicy = r.policies[1]!;
  t.equal(adminPolicy.tier?.name, 'Admin');
  t.equal(adminPolicy.tier?.priority, 251);
  t.equal(adminPolicy.priority, 10);
  t.same([adminPolicy.rules, adminPolicy.ingressRules, adminPolicy.egressRules], [1, 1, 0]);
  t.same(adminPolicy.actions, ['Drop'], 'ANP Deny is a Drop');
  t.same(adminPolicy.pods, ['x/a'], 'x/b is on n2');
  t.same(r.policies[2], {
    kind: 'NetworkPolicy', namespace: 'x', name: 'allow-from-y', stage: 1,
    rules: 1, ingressRules: 1, egressRules: 0, actions: ['Allow'], isolates: ['Ingress'], pods: ['x/a'],
  }, 'no tier or priority for a K8s NP; isolation shown');
  t.equal(r.localPods, 3, 'x/a, y/a, y/c (the hostNetwork Pod is not counted)');
  t.same(r.unselectedPods, ['y/c']);
});

t.test('invalid objects are listed with field and message, and yield no rules', async (t) => {
  const e = engineOnN1();
  const r = reportOf(e);
  t.same(r.invalid.map((v) => `${v.kind} ${v.name} ${v.field}`), ['AntreaClusterNetworkPolicy bad-priority spec.priority', 'AntreaClusterNetworkPolicy bad-tier spec.tier'], 'the IR kind name (Antrea, not the v1alpha2 ClusterNetworkPolicy)');
  t.match(r.invalid.find((v) => v.name === 'bad-tier')!.message, /tier nope does not exist/);
  t.match(r.invalid.find((v) => v.name === 'bad-priority')!.message, /between 1\.0 and 10000\.0, got 0/);
  t.notOk(e.nodeRuleSet().some((x) => x.ref.name.startsWith('bad-')), 'the engine enforces nothing of them');

  // Creating the missing tier makes bad-tier valid: it moves from invalid to enforced.
  e.upsert(tier('nope', 30));
  const fixed = reportOf(e);
  t.same(fixed.invalid.map((v) => v.name), ['bad-priority']);
  const bt = fixed.policies.find((p) => p.name === 'bad-tier');
  t.same(bt && { tier: bt.tier, pods: bt.pods, actions: bt.actions }, { tier: { name: 'nope', priority: 30 }, pods: ['x/a'], actions: ['Drop'] });
  t.same(fixed.policies.map((p) => p.name), ['ya-guard', 'bad-tier', 'x-no-y-81', 'allow-from-y'], 'tier 20 < tier 30 < Admin 251 < K8s NP');

  // Moving y/a to n2 takes ya-guard off n1's report.
  e.upsert(pod('y', 'a', { node: 'n2', ip: '10.0.2.3' }));
  t.notOk(reportOf(e).policies.some((p) => p.name === 'ya-guard'));
});

t.test('deterministic: same input in another order gives the same report', async (t) => {
  const e = engineOnN1();
  const a = reportOf(e);
  const b = buildPolicyReport({ node: 'n1', synced: true, rules: [...e.nodeRuleSet()].reverse(), isolations: [...e.nodeIsolations()].reverse(), errors: [...e.errors()].reverse(), localPods: ['y/c', 'y/a', 'x/a'] });
  t.same(b, a);
  t.equal(JSON.stringify(b), JSON.stringify(a));
});

t.test('human output: table of policies, unselected Pods, invalid objects', async (t) => {
  const out = renderPolicyReport(reportOf(engineOnN1()));
  const lines = out.split('\n');
  t.equal(lines[0], 'node n1: 3 policies enforced; 2 of 3 local Pod(s) selected by a policy');
  t.match(lines[1], /^KIND\s+NAMESPACE\/NAME\s+TIER\s+PRIORITY\s+RULES\s+ACTIONS\s+APPLIED-TO$/);
  t.match(lines[2], /^AntreaClusterNetworkPolicy\s+ya-guard\s+secops \(20\)\s+5\s+2 \(1 in, 1 out\)\s+Allow, Drop\s+y\/a$/);
  t.match(lines[3], /^AdminNetworkPolicy\s+x-no-y-81\s+Admin \(251\)\s+10\s+1 \(1 in\)\s+Drop\s+x\/a$/);
  t.match(lines[4], /^NetworkPolicy\s+x\/allow-from-y\s+-\s+-\s+1 \(1 in\)\s+Allow, isolate Ingress\s+x\/a$/);
  t.equal(lines[5], 'local Pods selected by no policy (not restricted on this node): y/c');
  t.equal(lines[6], '2 invalid object(s) ignored:');
  t.equal(lines[7], '  AntreaClusterNetworkPolicy bad-priority: spec.priority: must be between 1.0 and 10000.0, got 0');
  t.equal(lines[8], '  AntreaClusterNetworkPolicy bad-tier: spec.tier: tier nope does not exist');
  t.equal(lines.length, 9);
  const empty = renderPolicyReport(buildPolicyReport({ node: 'n9', synced: true, rules: [], isolations: [], errors: [], localPods: [] }));
  t.equal(empty, 'node n9: 0 policies enforced; 0 of 0 local Pod(s) selected by a policy\nno invalid objects');
});

t.test('Enforcer.policyReport: the engine fed by watch events, local Pods of this node only', async (t) => {
  const enforcer = new Enforcer({ nodeName: 'n1', ovsRunDir: '/nonexistent', bridge: 'br-int', log: pino({ level: 'silent' }) });
  t.teardown(() => enforcer.close());
  const upsert = (object: KubeObject) => enforcer.onWatchEvent({ type: 'upsert', object });
  upsert(namespace('x'));
  upsert(pod('x', 'a', { node: 'n1', ip: '10.0.1.1' }));
  upsert(pod('x', 'b', { node: 'n2', ip: '10.0.2.1' }));
  upsert(pod('x', 'pending', { node: 'n1', ip: null }));
  upsert(netpol('x', 'deny-all', { podSelector: {}, policyTypes: ['Ingress', 'Egress'] }));
  upsert(acnp('bad-tier', { priority: 3, tier: 'nope', appliedTo: [nsSel('x')], ingress: [{ action: 'Drop' }] }));
  const r = enforcer.policyReport();
  t.equal(r.synced, false, 'no watch started: not synced');
  t.same(r.policies.map((p) => ({ name: p.name, isolates: p.isolates, pods: p.pods })), [{ name: 'deny-all', isolates: ['Egress', 'Ingress'], pods: ['x/a'] }]);
  t.equal(r.localPods, 1, 'a Pod without an address is not in the engine');
  t.same(r.invalid.map((e) => `${e.name} ${e.field}`), ['bad-tier spec.tier']);
  t.same(enforcer.status().errors, r.invalid.length, '/status counts the same invalid objects');
});

/** Runs the command's handler with console output captured. */
async function runCommand(argv: Record<string, unknown>): Promise<{ stdout: string; stderr: string; exitCode: number | undefined }> {
  const out: string[] = [];
  const err: string[] = [];
  const log = console.log;
  const error = console.error;
  const before = process.exitCode;
  process.exitCode = undefined;
  console.log = (s: string) => out.push(s);
  console.error = (s: string) => err.push(s);
  try {
    await (nodePoliciesCommand.handler as (a: unknown) => Promise<void>)({ _: [], $0: 'sluicectl', json: false, ...argv });
    return { stdout: out.join('\n'), stderr: err.join('\n'), exitCode: process.exitCode as number | undefined };
  } finally {
    console.log = log;
    console.error = error;
    process.exitCode = before;
  }
}

t.test('health server /policies route and `sluicectl node policies` against it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'policy-report-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let report: PolicyReport | undefined = reportOf(engineOnN1(), false);
  const view = () => ({ ready: true, ovsReachable: true, node: 'n1' });
  const server = await startHealthServer({ host: '127.0.0.1', port: 0 }, view, pino({ level: 'silent' }), {
    '/policies': () => policiesAnswer(report), // as the agent wires it
  });
  t.teardown(() => server.close());
  const configPath = join(dir, 'agent.yaml');
  writeFileSync(configPath, `nodeName: n1\nhealthAddress: 127.0.0.1:${server.port}\n`);
  const config = await loadConfig(configPath);

  t.same(await agentStatus(config), view(), '/status unchanged (the view as JSON)');
  const human = await runCommand({ config: configPath });
  t.equal(human.exitCode, undefined, 'exit code 0');
  t.match(human.stderr, /warning: the agent has not listed every policy input yet \(watches not synced\)/);
  t.equal(human.stdout, renderPolicyReport(report));
  const json = await runCommand({ config: configPath, json: true });
  t.same(JSON.parse(json.stdout), report, '--json prints the report');

  report = { ...report, synced: true };
  t.equal((await runCommand({ config: configPath })).stderr, '', 'no warning once synced');

  report = undefined;
  const off = await runCommand({ config: configPath });
  t.equal(off.exitCode, 1);
  t.equal(off.stderr, 'sluicectl node policies: the agent answered 404: policy enforcement is off on this node (enforcePolicies: false, or no API server configured): no policies are enforced');
  t.equal(off.stdout, '');

  const unknown = await fetch(`http://127.0.0.1:${server.port}/nope`);
  t.equal(unknown.status, 404);
  t.match(((await unknown.json()) as { error: string }).error, 'try /healthz, /readyz, /status, /policies');

  await server.close();
  const down = await runCommand({ config: configPath });
  t.equal(down.exitCode, 1, 'exit 1 when the agent is unreachable');
  t.match(down.stderr, new RegExp(`^sluicectl node policies: agent not reachable at http://127\\.0\\.0\\.1:${server.port}/policies \\(.*ECONNREFUSED.*\\); is sluice-agent running on this node\\?$`));
});
