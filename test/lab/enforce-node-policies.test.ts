/**
 * `sluicectl node policies` on a real lab (np, ptp, 2 nodes, enforcing agents): with a Kubernetes
 * NetworkPolicy, a valid Antrea ClusterNetworkPolicy and one naming a Tier that does not exist,
 * each node lists the valid policies with exactly its own Pods, and both list the invalid object
 * with its field and reason; --json parses to the same view.
 */
import t from 'tap';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { agentConfigPath } from '../../lab/agent.js';
import { nodeNetns } from '../../lab/net/names.js';
import type { PolicyReport } from '../../daemon/enforcement/policy-report.js';
import { cli, cliJson, skipReason, type ListJson } from './labcli-helpers.js';
import { labCli, POLICIES, run, SLUICECTL, tempDir, WORKLOAD, writeTempFile } from './enforce-helpers.js';

const LAB = 'np';
const NODES = ['node-1', 'node-2'];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const BAD_TIER = `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: np-bad-tier
spec:
  priority: 5
  tier: no-such-tier
  appliedTo:
    - namespaceSelector: {matchLabels: {ns: x}}
  ingress:
    - action: Drop
      from:
        - namespaceSelector: {matchLabels: {ns: z}}
`;

interface PodJson { metadata: { namespace: string; name: string }; spec: { nodeName: string } }

/** `sluicectl node policies` inside the node's network namespace, with the lab agent's config. */
const nodePolicies = (node: string, extra: string[] = []) =>
  run('ip', ['netns', 'exec', nodeNetns(LAB, node), process.execPath, SLUICECTL, 'node', 'policies', '--config', agentConfigPath(LAB, node), ...extra]);

const reason = skipReason() ?? (existsSync(SLUICECTL) ? undefined : `${SLUICECTL} is missing: build first (npx tsc -p tsconfig.json)`);
if (reason) {
  t.plan(0, reason);
} else {
  const dir = tempDir('enforce-np-');
  t.teardown(async () => {
    await cli(['down', '--name', LAB]);
    rmSync(dir, { recursive: true, force: true });
  });

  t.test('each node reports its own enforced policies and every invalid object', async (t) => {
    await cli(['down', '--name', LAB]);
    await labCli(LAB, ['up', '--sluice', '--nodes', '2', '--primary', 'ptp', '-f', WORKLOAD]);
    await labCli(LAB, ['apply', '-f', join(POLICIES, '01-default-deny-x.yaml'), '-f', join(POLICIES, '04-antrea-acnp.yaml'), '-f', writeTempFile(dir, 'bad-tier.yaml', BAD_TIER)]);
    const pods = (await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', '--name', LAB])).items;
    const podsOn = (node: string, ns: string) => pods.filter((p) => p.spec.nodeName === node && p.metadata.namespace === ns).map((p) => `${ns}/${p.metadata.name}`).sort();
    const ycNode = pods.find((p) => p.metadata.namespace === 'y' && p.metadata.name === 'c')!.spec.nodeName;

    for (const node of NODES) {
      // The agent sees the policies through its watches: wait for all three to be judged.
      let report: PolicyReport | undefined;
      let last = '';
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(300)) {
        const r = await nodePolicies(node, ['--json']);
        last = `exit ${r.code}: ${r.stderr}${r.stdout}`;
        if (r.code !== 0) continue;
        const rep = JSON.parse(r.stdout) as PolicyReport;
        const wantNp = podsOn(node, 'x').length > 0;
        if (rep.synced && rep.invalid.length > 0 && rep.policies.some((p) => p.name === 'default-deny-ingress') === wantNp && rep.policies.some((p) => p.name === 'y-c-drop-from-z') === (node === ycNode)) {
          report = rep;
          break;
        }
      }
      if (!report) {
        t.fail(`${node}: no complete policy report within 30 s; last: ${last}`);
        continue;
      }
      t.equal(report.node, node, `${node}: --json parses and names the node`);
      t.same(report.invalid, [{ kind: 'AntreaClusterNetworkPolicy', name: 'np-bad-tier', field: 'spec.tier', message: 'tier no-such-tier does not exist' }], `${node}: the invalid ACNP with its field and reason`);
      const xs = podsOn(node, 'x');
      const np = report.policies.find((p) => p.kind === 'NetworkPolicy');
      t.same(np && { name: `${np.namespace}/${np.name}`, isolates: np.isolates, rules: np.rules, pods: np.pods }, xs.length ? { name: 'x/default-deny-ingress', isolates: ['Ingress'], rules: 0, pods: xs } : undefined, `${node}: the default deny with this node's Pods of x (${xs.join(', ') || 'none'})`);
      const acnp = report.policies.find((p) => p.name === 'y-c-drop-from-z');
      if (node === ycNode) t.same(acnp && { tier: acnp.tier, priority: acnp.priority, actions: acnp.actions, pods: acnp.pods }, { tier: { name: 'securityops', priority: 100 }, priority: 5, actions: ['Drop'], pods: ['y/c'] }, `${node}: the ACNP on y/c`);
      else t.equal(acnp, undefined, `${node}: the ACNP is absent (y/c runs on ${ycNode})`);
      t.equal(report.policies.length, (node === ycNode ? 1 : 0) + (xs.length ? 1 : 0), `${node}: nothing else enforced`);

      const human = await nodePolicies(node);
      t.equal(human.code, 0, `${node}: exit 0`);
      t.equal(human.stderr, '', `${node}: no warning (watches synced)`);
      if (xs.length) t.match(human.stdout, new RegExp(`^NetworkPolicy\\s+x/default-deny-ingress\\s+-\\s+-\\s+0\\s+isolate Ingress\\s+${xs.join(', ')}$`, 'm'), `${node}: NetworkPolicy row`);
      if (node === ycNode) t.match(human.stdout, /^AntreaClusterNetworkPolicy\s+y-c-drop-from-z\s+securityops \(100\)\s+5\s+1 \(1 in\)\s+Drop\s+y\/c$/m, `${node}: ACNP row`);
      t.match(human.stdout, /^1 invalid object\(s\) ignored:\n {2}AntreaClusterNetworkPolicy np-bad-tier: spec\.tier: tier no-such-tier does not exist$/m, `${node}: invalid object line`);

      // The agent's whole desired set, policy flows included, is what the bridge holds.
      const check = await run('ip', ['netns', 'exec', nodeNetns(LAB, node), process.execPath, SLUICECTL, 'node', 'flows', '--check', '--config', agentConfigPath(LAB, node)]);
      t.equal(check.code, 0, `${node}: node flows --check passes on an enforcing node (${check.stdout.split('\n')[0]}${check.stderr})`);
      t.notMatch(check.stdout, /unexpected|missing/, `${node}: no policy flow reported as unexpected or missing`);
    }
  });
}
