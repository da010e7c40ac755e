/**
 * Per-rule statistics on a real lab (st, ptp, 1 node, enforcing agent): connections made with real
 * packets move exactly the counters of the rule that decided them (sessions of an Allow rule,
 * packets of a Drop and a Reject rule), in `sluicectl node stats` and in /metrics; the counters
 * survive an incremental change that moves the rule to another priority and an agent restart.
 */
import t from 'tap';
import { agentConfigPath } from '../../lab/agent.js';
import { nodeNetns } from '../../lab/net/names.js';
import type { RuleStatistics } from '../../daemon/flows/policy/stats.js';
import { labCli, probe, restartAgent, run, SLUICECTL, upEnforcingLab, withEnforcingLab, writeTempFile } from './enforce-helpers.js';
import { sampleValue } from '../unit/prometheus-text.js';

const LAB = 'st';
const NODE = 'node-1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const pod = (name: string) => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: s, labels: {app: ${name}}}
spec:
  containers:
    - name: s
      ports: [{containerPort: 80}]
`;
const WORKLOAD = ['apiVersion: v1\nkind: Namespace\nmetadata: {name: s}\n', ...['a', 'b', 'c', 'd'].map(pod)].join('---\n');
const policy = (extraFirstRule: boolean) => `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: st-a}
spec:
  priority: 5
  tier: application
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  ingress:
${extraFirstRule ? `    - name: first
      action: Drop
      from: [{ipBlock: {cidr: 192.0.2.0/24}}]
` : ''}    - name: allow-b
      action: Allow
      from: [{podSelector: {matchLabels: {app: b}}}]
      ports: [{protocol: TCP, port: 80}]
    - name: drop-c
      action: Drop
      from: [{podSelector: {matchLabels: {app: c}}}]
    - name: reject-d
      action: Reject
      from: [{podSelector: {matchLabels: {app: d}}}]
`;

async function stats(): Promise<RuleStatistics[]> {
  const r = await run('ip', ['netns', 'exec', nodeNetns(LAB, NODE), process.execPath, SLUICECTL, 'node', 'stats', '--config', agentConfigPath(LAB, NODE), '--policy', 'st-a', '-o', 'json']);
  if (r.code !== 0) throw new Error(`sluicectl node stats: exit ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as RuleStatistics[];
}
const ruleOf = (s: RuleStatistics[], rule: string) => s.find((x) => x.ref.rule === rule);

async function statsUntil(ok: (s: RuleStatistics[]) => boolean, ms = 20_000): Promise<RuleStatistics[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const s = await stats().catch(() => []);
    if (ok(s) || Date.now() > deadline) return s;
    await sleep(250);
  }
}

withEnforcingLab(LAB, 'policy-stats-', (dir) => {

  t.test('rule counters move with real connections and survive a priority move and an agent restart', async (t) => {
    await upEnforcingLab(LAB, 1, writeTempFile(dir, 'workload.yaml', WORKLOAD));
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'policy.yaml', policy(false))]);
    const s0 = await statsUntil((s) => s.length === 3);
    t.same(s0.map((s) => [s.ref.rule, s.action, s.sessions, s.packets]), [['allow-b', 'Allow', 0, 0], ['drop-c', 'Drop', 0, 0], ['reject-d', 'Reject', 0, 0]], 'three rules, nothing counted yet');

    const verdicts = await probe(LAB, dir, [
      ...[1, 2, 3].map(() => ({ from: 's/b', to: 's/a', port: 80, protocol: 'TCP' as const })),
      { from: 's/c', to: 's/a', port: 80, protocol: 'TCP' },
      { from: 's/d', to: 's/a', port: 80, protocol: 'TCP' },
    ]);
    t.same(verdicts.map((v) => v.verdict), ['allow', 'allow', 'allow', 'drop', 'reject'], 'real packets: b allowed three times, c dropped, d rejected');
    const s1 = await statsUntil((s) => (ruleOf(s, 'allow-b')?.sessions ?? 0) >= 3 && (ruleOf(s, 'drop-c')?.packets ?? 0) >= 1 && (ruleOf(s, 'reject-d')?.packets ?? 0) >= 1);
    const allow = ruleOf(s1, 'allow-b')!;
    t.equal(allow.sessions, 3, 'allow-b: exactly the three connections b made');
    t.ok(allow.packets > allow.sessions, `allow-b: their packets in both directions (${allow.packets} packets, ${allow.bytes} bytes)`);
    t.ok(ruleOf(s1, 'drop-c')!.packets >= 1, `drop-c: ${ruleOf(s1, 'drop-c')!.packets} dropped packet(s) (SYN and retransmissions)`);
    t.ok(ruleOf(s1, 'reject-d')!.packets >= 1, `reject-d: ${ruleOf(s1, 'reject-d')!.packets} rejected packet(s)`);
    t.equal(ruleOf(s1, 'drop-c')!.sessions + ruleOf(s1, 'reject-d')!.sessions, 0, 'no sessions for rules that drop');

    const scraped = await run('ip', ['netns', 'exec', nodeNetns(LAB, NODE), 'curl', '-s', '-f', 'http://127.0.0.1:10349/metrics']);
    const labels = { kind: 'AntreaClusterNetworkPolicy', namespace: '', name: 'st-a', direction: 'Ingress', node: NODE };
    t.equal(sampleValue(scraped.stdout, 'sluice_policy_rule_sessions_total', { ...labels, rule: 'allow-b', action: 'Allow' }), 3, '/metrics: the same sessions');
    t.ok((sampleValue(scraped.stdout, 'sluice_policy_rule_packets_total', { ...labels, rule: 'drop-c', action: 'Drop' }) ?? 0) >= 1, '/metrics: the dropped packets');

    // A new first rule moves every rule of the policy to another priority: their rule flows are
    // re-installed, their counters are not reset.
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'policy.yaml', policy(true))]);
    const s2 = await statsUntil((s) => s.length === 4);
    t.equal(s2.length, 4, 'the new rule is enforced');
    for (const rule of ['allow-b', 'drop-c', 'reject-d']) {
      t.ok(ruleOf(s2, rule)!.packets >= ruleOf(s1, rule)!.packets, `${rule}: counters kept across the priority move (${ruleOf(s1, rule)!.packets} -> ${ruleOf(s2, rule)!.packets})`);
    }
    t.equal(ruleOf(s2, 'allow-b')!.sessions, 3, 'allow-b still counts its three sessions');
    t.equal(ruleOf(s2, 'reject-d')!.packets, ruleOf(s1, 'reject-d')!.packets, 'reject-d: its count did not move to the rule that took over its index');

    await restartAgent(LAB, NODE);
    const s3 = await statsUntil((s) => s.length === 4);
    t.equal(ruleOf(s3, 'allow-b')!.sessions, 3, 'an agent restart changes no counter flow: still three sessions');
    t.ok(ruleOf(s3, 'drop-c')!.packets >= ruleOf(s1, 'drop-c')!.packets, 'and the drops are kept');

    await probe(LAB, dir, [{ from: 's/b', to: 's/a', port: 80, protocol: 'TCP' }]);
    const s4 = await statsUntil((s) => (ruleOf(s, 'allow-b')?.sessions ?? 0) >= 4);
    t.equal(ruleOf(s4, 'allow-b')!.sessions, 4, 'and counting goes on after the restart');
    const table = await run('ip', ['netns', 'exec', nodeNetns(LAB, NODE), process.execPath, SLUICECTL, 'node', 'stats', '--config', agentConfigPath(LAB, NODE)]);
    t.match(table.stdout, /^AntreaClusterNetworkPolicy\s+st-a\s+allow-b\s+Ingress\s+Allow\s+4\s+\d+\s+\d+$/m, 'the table view');
    t.comment(`sluicectl node stats:\n${table.stdout}`);
  });
});
