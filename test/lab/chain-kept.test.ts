/**
 * The agent keeps sluice chained on a real lab node (ck, ptp, 1 node, enforcing): "the primary"
 * replaces its conflist without sluice (by rename, as aws-node does) while Pods are being created,
 * and a new file that sorts first appears; the agent re-chains within a fraction of a second, Pods
 * created afterwards cross the bridge and a deny policy applies to them with real packets. A Pod
 * created while the chain was broken (the agent paused, so the window is certain) is adopted once
 * the agent re-chains, and the policy applies to it too.
 */
import t from 'tap';
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { agentPidPath } from '../../lab/agent.js';
import { cniConfDir, conflistPath } from '../../lab/net/names.js';
import { agentStatus, labCli, probe, upEnforcingLab, withEnforcingLab, writeTempFile } from './enforce-helpers.js';
import { cliJson, type ListJson, type PodJson } from './labcli-helpers.js';

const LAB = 'ck';
const NODE = 'node-1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const pod = (name: string, app = name) => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: k, labels: {app: ${app}}}
spec:
  containers:
    - name: s
      ports: [{containerPort: 80}]
`;
const WORKLOAD = `apiVersion: v1\nkind: Namespace\nmetadata: {name: k}\n---\n${pod('server')}---\n${pod('client-0', 'client')}`;
const DENY = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: server-only-from-allowed, namespace: k}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress:
    - from: [{podSelector: {matchLabels: {role: allowed}}}]
`;

const types = (path: string) => (JSON.parse(readFileSync(path, 'utf8')) as { plugins: { type: string }[] }).plugins.map((p) => p.type);
/** Replaces the node's conflist with its primary-only version, as a daemon does (write + rename). */
function primaryRewrites(path: string): void {
  const list = JSON.parse(readFileSync(path, 'utf8')) as { plugins: { type: string }[] };
  list.plugins = list.plugins.filter((p) => p.type !== 'sluice-cni');
  writeFileSync(`${path}.primary-tmp`, JSON.stringify(list, null, 2));
  renameSync(`${path}.primary-tmp`, path);
}
async function chainedAgain(path: string, capMs = 10_000): Promise<number> {
  const t0 = Date.now();
  while (!types(path).includes('sluice-cni')) {
    if (Date.now() - t0 > capMs) throw new Error(`${path} not chained again within ${capMs} ms`);
    await sleep(10);
  }
  return Date.now() - t0;
}

withEnforcingLab(LAB, 'chain-kept-', (dir) => {

  t.test('re-chained under Pod churn; later Pods enforced; Pods from the broken window adopted', async (t) => {
    await upEnforcingLab(LAB, 1, writeTempFile(dir, 'workload.yaml', WORKLOAD));
    const conflist = conflistPath(LAB, NODE);
    t.ok(types(conflist).includes('sluice-cni'), 'chained after up');
    const st0 = await agentStatus(LAB, NODE);
    t.match(st0.chain, { state: 'chained' });
    t.match(st0.adoption, { unattached: [] });

    // The primary rewrites its file three times while Pods are being created.
    const times: number[] = [];
    const creating = labCli(LAB, ['apply', '-f', writeTempFile(dir, 'clients.yaml', [1, 2, 3, 4].map((i) => pod(`client-${i}`, 'client')).join('---\n'))]);
    for (let i = 0; i < 3; i++) {
      primaryRewrites(conflist);
      times.push(await chainedAgain(conflist));
      await sleep(300);
    }
    await creating;
    t.comment(`re-chained ${times.join(', ')} ms after the primary's rewrites (polled every 10 ms)`);
    t.ok(times.every((ms) => ms < 2000), 'each within 2 s');

    // A new file that sorts first.
    const first = join(cniConfDir(LAB, NODE), '05-new.conflist');
    const primaryOnly = JSON.parse(readFileSync(conflist, 'utf8')) as { plugins: { type: string }[] };
    primaryOnly.plugins = primaryOnly.plugins.filter((p) => p.type !== 'sluice-cni');
    writeFileSync(`${first}.primary-tmp`, JSON.stringify(primaryOnly, null, 2));
    renameSync(`${first}.primary-tmp`, first);
    t.comment(`a new file sorting first chained after ${await chainedAgain(first)} ms`);
    t.same(types(first), ['ptp', 'sluice-cni'], 'the new first file chains sluice after its primary');
    rmSync(first); // the lab's own file is the runtime's choice again (still chained)
    t.ok(types(conflist).includes('sluice-cni'));

    // Pods that escaped during the rewrites are adopted 2 s and 10 s after a re-chain (their IPs reach the API late).
    const ALL = ['client-0', 'client-1', 'client-2', 'client-3', 'client-4', 'server'];
    let attached: string[] = [];
    let adoption = { adopted: 0, unattached: [] as { pod: string }[] };
    for (let i = 0; i < 150; i++) {
      const status = await agentStatus(LAB, NODE);
      attached = (status.pods as { podName: string }[]).map((p) => p.podName).sort();
      adoption = status.adoption as typeof adoption;
      if (attached.join() === ALL.join()) break;
      await sleep(100);
    }
    t.same(attached, ALL, 'every Pod is attached: those that escaped the bridge during the rewrites were adopted');
    t.same(adoption.unattached, [], 'none is left unattached');
    t.comment(`Pods adopted after escaping during the rewrites: ${adoption.adopted}`);

    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'deny.yaml', DENY)]);
    const attachedClients = attached.filter((n) => n.startsWith('client-'));
    const verdicts = await probe(LAB, dir, attachedClients.map((c) => ({ from: `k/${c}`, to: 'k/server', port: 80, protocol: 'TCP' as const })));
    t.same(verdicts.map((v) => v.verdict), attachedClients.map(() => 'drop'), `the deny policy applies to the Pods created around the rewrites (${attachedClients.join(', ')})`);

    // A certain window: the agent paused, the primary rewrites, a Pod is created by the primary alone.
    // The agent stays paused until the lab kubelet has run that Pod's ADD (it has an IP): on a busy
    // machine the kubelet can be slower than the re-chain, and its ADD would then go through sluice.
    const pid = Number(readFileSync(agentPidPath(LAB, NODE), 'utf8').trim());
    process.kill(pid, 'SIGSTOP');
    try {
      primaryRewrites(conflist);
      await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'late.yaml', pod('late', 'client'))]);
      const lateIp = async () => (await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', '--name', LAB])).items.find((p) => p.metadata.name === 'late')?.status?.podIP;
      for (let i = 0; i < 300 && !(await lateIp()); i++) await sleep(100);
      t.ok(await lateIp(), 'the Pod got its address from the primary alone while the agent was paused');
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await chainedAgain(conflist);
    // The adoption counts a Pod once its attach returned, which includes asking the nodes of its span
    // (up to 2 s): the Pod can be listed as attached a moment before it is counted.
    let status = await agentStatus(LAB, NODE);
    const lateAdopted = () => (status.pods as { podName: string }[]).some((p) => p.podName === 'late') && (status.adoption as { adopted: number }).adopted > adoption.adopted;
    for (let i = 0; i < 150 && !lateAdopted(); i++) {
      await sleep(100);
      status = await agentStatus(LAB, NODE);
    }
    t.ok((status.pods as { podName: string }[]).some((p) => p.podName === 'late'), 'the Pod created while the chain was broken is adopted');
    t.ok((status.adoption as { adopted: number }).adopted > adoption.adopted, 'and counted as adopted');
    const late = await probe(LAB, dir, [{ from: 'k/late', to: 'k/server', port: 80, protocol: 'TCP' }]);
    t.same(late.map((v) => v.verdict), ['drop'], 'the deny policy applies to the adopted Pod (real packets)');
  });
});
