/**
 * Agents in controller mode, with real packets (2 nodes, ptp): sluice-controller on the host, its
 * Service reachable in each node namespace, each agent authenticated by a Node-bound token.
 *
 * - Switching every agent from standalone to controller mode (kill -9 and start with the other
 *   setting) rewrites no policy flow: for the same cluster both modes compute the same flows;
 * - every probe of the full set agrees with `sluicectl simulate` on a snapshot of the objects;
 * - the controller killed: the agents say so (/status, the Node's Warning Event) and keep
 *   enforcing the last state — a policy created meanwhile is not enforced, nothing opens; a Pod
 *   created meanwhile starts isolated (every new connection of it dropped);
 * - a new controller (a new store: the agents' watches get 410 and list again): every probe agrees
 *   with the simulation of the objects as they are now, and the isolated Pod is released.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { KubeAccess } from '../../daemon/kube/access.js';
import { serviceAccountToken } from '../../lab/apiserver/satoken.js';
import { hostKubeconfigPath, serviceAccountKeyPath } from '../../lab/control.js';
import { CONTROLLER_NAMESPACE, controllerModeSettings, controllerServiceInNodes, freePort, killControllers, type LabController, startController } from '../../lab/controller.js';
import { cliJson, type ListJson } from './labcli-helpers.js';
import {
  agentStatus, compareWithSimulate, fullProbeSet, labCli, POLICIES, probe, restartAgent, run, traceflow, upEnforcingLab, withEnforcingLab, WORKLOAD, writeTempFile,
} from './enforce-helpers.js';
import { join } from 'node:path';

const LAB = 'cm';
const NODES = ['node-1', 'node-2'];
const NODE_IPS = ['192.168.77.11', '192.168.77.12'];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


async function until<T>(what: string, get: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await get();
      if (v !== undefined) return v;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`timed out (${ms / 1000} s) waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await sleep(200);
  }
}

/** The text of each policy flow seen (for messages). */
const flowText = new Map<string, string>();

/** The policy flows on a node's bridge (cookie category 0x02): cookie -> age in seconds (a flow deleted and added again is younger). */
async function policyFlowAges(node: string): Promise<Map<string, number>> {
  const r = await run('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', `unix:/run/sluice-lab/${LAB}/${node}/ovs/br-int.mgmt`, 'cookie=0x51ce020000000000/0xffffff0000000000']);
  if (r.code !== 0) throw new Error(`dump-flows on ${node}: ${r.stderr}`);
  const out = new Map<string, number>();
  for (const line of r.stdout.split('\n')) {
    const m = /cookie=(0x[0-9a-f]+), duration=([\d.]+)s/.exec(line);
    if (!m) continue;
    out.set(m[1]!, Number(m[2]));
    flowText.set(m[1]!, line.replace(/duration=[^,]*, |n_packets=[^,]*, |n_bytes=[^,]*, |idle_age=[^,]*, /g, '').trim());
  }
  if (out.size === 0) throw new Error(`dump-flows on ${node}: no policy flow (${r.stdout.slice(0, 300)})`);
  return out;
}

interface ControlPlaneStatus { connected: boolean; synced: boolean; reason?: string; held?: string }
interface NewPodsStatus { isolatedPods?: { pod: string }[] }
const controlPlaneOf = async (node: string) => ((await agentStatus(LAB, node)) as { enforcement?: { controlPlane?: ControlPlaneStatus; newPods?: NewPodsStatus } }).enforcement;

withEnforcingLab(LAB, 'controller-mode-', (dir) => {
  t.test('agents following sluice-controller: same flows, same verdicts, the last state kept while it is gone', async (t) => {
    await upEnforcingLab(LAB, 2, WORKLOAD);
    await labCli(LAB, ['apply', '-f', join(POLICIES, '01-default-deny-x.yaml'), '-f', join(POLICIES, '02-allow-from-y.yaml'), '-f', join(POLICIES, '04-antrea-acnp.yaml'), '-f', join(POLICIES, '05-admin-anp.yaml')]);
    // The controller's namespace and the agents' ServiceAccount (their tokens name it).
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'controller-ns.yaml', [
      `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${CONTROLLER_NAMESPACE}}`,
      `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sluice-agent, namespace: ${CONTROLLER_NAMESPACE}}`,
    ].join('\n---\n'))]);
    const probes = fullProbeSet(NODE_IPS);
    const standalone = await until('the standalone agents to agree with simulate', async () => {
      const c = await compareWithSimulate(LAB, dir, probes);
      return c.mismatches.length === 0 ? c : undefined;
    }, 120_000);
    t.comment(`standalone: ${standalone.probes} probes agree with simulate (${JSON.stringify(standalone.counts)})`);
    const before = new Map(await Promise.all(NODES.map(async (n) => [n, await policyFlowAges(n)] as const)));
    const switchedAt = Date.now();

    const controllers: LabController[] = [];
    t.teardown(() => killControllers(controllers));
    const flags = ['--read-all-users', 'sluice-lab-admin'];
    controllers.push(await startController(LAB, 'controller-a', await freePort(), flags));
    const service = await controllerServiceInNodes(LAB, NODES, controllers[0]!.port);
    t.teardown(() => service.close());
    const access = KubeAccess.load(hostKubeconfigPath(LAB));
    const caCert = await until('the controller to publish its CA', async () =>
      ((await access.getJson(`/api/v1/namespaces/${CONTROLLER_NAMESPACE}/configmaps/sluice-ca`)) as { data?: Record<string, string> }).data?.['ca.crt']);
    const saKey = readFileSync(serviceAccountKeyPath(LAB), 'utf8').trim();
    for (const node of NODES) {
      const token = serviceAccountToken(saKey, CONTROLLER_NAMESPACE, 'sluice-agent', { podName: `sluice-agent-${node}`, nodeName: node });
      await restartAgent(LAB, node, controllerModeSettings(LAB, node, caCert, token));
      const cp = (await controlPlaneOf(node))?.controlPlane;
      t.ok(cp?.connected && cp.synced, `${node}: started in controller mode, following the controller (${JSON.stringify(cp)})`);
    }

    for (const node of NODES) {
      const after = await policyFlowAges(node);
      const old = before.get(node)!;
      const added = [...after.keys()].filter((c) => !old.has(c)).map((c) => flowText.get(c));
      const removed = [...old.keys()].filter((c) => !after.has(c)).map((c) => flowText.get(c));
      t.same({ added, removed }, { added: [], removed: [] }, `${node}: the same ${old.size} policy flows in controller mode as standalone`);
      const elapsed = (Date.now() - switchedAt) / 1000;
      const rewritten = [...old].filter(([cookie, age]) => (after.get(cookie) ?? 0) < age + elapsed - 1).map(([c]) => c);
      t.same(rewritten, [], `${node}: no policy flow was deleted and added again by the switch`);
    }
    const cm = await compareWithSimulate(LAB, dir, probes);
    t.same(cm.mismatches, [], `controller mode: ${cm.probes} probes agree with simulate (${JSON.stringify(cm.counts)}, ${cm.retried} probed again)`);

    // Traceflow by name to another node's Pod: the controller says where it is, that node observes and decides.
    const pods = (await cliJson<ListJson<{ metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP?: string } }>>(['get', 'pods', '-o', 'json', '--name', LAB])).items;
    const nodeOf = new Map(pods.map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, p.spec.nodeName]));
    const xa = nodeOf.get('x/a')!;
    const from = (ns: string) => [...nodeOf].find(([ref, node]) => ref.startsWith(`${ns}/`) && node !== xa)!;
    const [zRemote, zNode] = from('z');
    const [yRemote, yNode] = from('y');
    // One trace at a time per node (the source's and the destination's bridges are both busy during one).
    const traced = [];
    for (const [src, node] of [[zRemote, zNode], [yRemote, yNode]]) traced.push(await traceflow(LAB, node!, ['--from', src!, '--to', 'x/a', '--port', '80', '-o', 'json']));
    const simulated = await probe(LAB, dir, [{ from: zRemote, to: 'x/a', port: 80, protocol: 'TCP' }, { from: yRemote, to: 'x/a', port: 80, protocol: 'TCP' }]);
    t.same(traced.map((r) => r.report?.verdict ?? r.stderr), simulated.map((v) => v.verdict), `traceflow across nodes by name, in controller mode: ${zRemote} and ${yRemote} -> x/a on ${xa} as the packets go (${simulated.map((v) => v.verdict).join(', ')})`);
    t.same(traced.map((r) => r.report?.legs.map((l) => l.node)), [[zNode, xa], [yNode, xa]], 'each decided on x/a\'s node, which observed it');

    // The controller dies. The agents keep the state they have.
    process.kill(controllers[0]!.pid, 'SIGKILL');
    for (const node of NODES) {
      const cp = await until(`${node} to notice the controller is gone`, async () => {
        const s = (await controlPlaneOf(node))?.controlPlane;
        return s && !s.connected ? s : undefined;
      }, 30_000);
      t.ok(cp.reason, `${node}: /status says it is not connected (${cp.reason})`);
    }
    const events = await until('the Nodes\' Warning Events', async () => {
      const list = await cliJson<ListJson<{ reason: string; involvedObject: { kind: string; name: string } }>>(['get', 'events', '-A', '-o', 'json', '--name', LAB]);
      const nodes = new Set(list.items.filter((e) => e.reason === 'SluiceControllerUnreachable' && e.involvedObject.kind === 'Node').map((e) => e.involvedObject.name));
      return NODES.every((n) => nodes.has(n)) ? nodes : undefined;
    });
    t.equal(events.size, 2, 'each Node has a SluiceControllerUnreachable Warning Event');

    // Changes while it is gone: a policy that would open x/a to z (not enforced: the last state stays),
    // and a new Pod of x (it starts, isolated: its policies are not known on its node).
    const open = writeTempFile(dir, 'open-x-a.yaml', 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: x-a-from-z, namespace: x}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: z}}}]}]\n');
    await labCli(LAB, ['apply', '-f', open]);
    const blind = await traceflow(LAB, zNode!, ['--from', zRemote, '--to', `ip:${pods.find((p) => p.metadata.namespace === 'x' && p.metadata.name === 'a')?.status.podIP}`, '--port', '80']);
    t.equal(blind.code, 3, `without the controller, a trace to another node's Pod is incomplete (exit 3): ${blind.stdout.split('\n')[0]}`);
    t.match(blind.stdout, /note: .*the controller could not be asked where it leads/, 'and says why');
    const kept = await probe(LAB, dir, [{ from: 'z/a', to: 'x/a', port: 80, protocol: 'TCP' }, { from: 'y/a', to: 'x/a', port: 80, protocol: 'TCP' }]);
    t.same(kept.map((v) => v.verdict), ['drop', 'allow'], `without the controller the last state stays: z/a -> x/a still dropped, y/a -> x/a still allowed (${kept.map((v) => v.detail ?? v.verdict).join('; ')})`);
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'new-pod.yaml', 'apiVersion: v1\nkind: Pod\nmetadata: {name: newpod, namespace: x, labels: {pod: newpod}}\nspec: {nodeName: node-1, containers: [{name: server, image: sluice-lab/workload, ports: [{name: serve-80-tcp, containerPort: 80, protocol: TCP}]}]}\n')]);
    await until('x/newpod to start isolated on node-1', async () => ((await controlPlaneOf('node-1'))?.newPods?.isolatedPods ?? []).some((p) => p.pod === 'x/newpod') || undefined);
    const isolated = await probe(LAB, dir, [{ from: 'x/newpod', to: 'y/a', port: 80, protocol: 'TCP' }, { from: 'y/a', to: 'x/newpod', port: 80, protocol: 'TCP' }]);
    t.same(isolated.map((v) => v.verdict), ['drop', 'drop'], `x/newpod, started while the controller is gone, is isolated both ways (${isolated.map((v) => v.detail ?? v.verdict).join('; ')})`);

    // A new controller: a new store, so the agents' watches are Gone and list again.
    controllers.push(await startController(LAB, 'controller-b', await freePort(), flags));
    service.setTarget(controllers[1]!.port);
    for (const node of NODES) {
      await until(`${node} to follow the new controller`, async () => {
        const s = (await controlPlaneOf(node))?.controlPlane;
        return s?.connected && !s.held ? s : undefined;
      }, 60_000);
    }
    await until('x/newpod to be released', async () => ((await controlPlaneOf('node-1'))?.newPods?.isolatedPods ?? []).length === 0 || undefined, 60_000);
    const back = await until('every probe to agree with simulate after the controller came back', async () => {
      const c = await compareWithSimulate(LAB, dir, [...probes, { from: 'x/newpod', to: 'y/a', port: 80, protocol: 'TCP' }, { from: 'z/a', to: 'x/newpod', port: 80, protocol: 'TCP' }]);
      return c.mismatches.length === 0 ? c : undefined;
    }, 60_000);
    t.ok(back.probes > probes.length - 50, `after the controller came back: ${back.probes} probes agree with simulate, the policy made meanwhile and the new Pod included (${JSON.stringify(back.counts)})`);
    const opened = await probe(LAB, dir, [{ from: 'z/a', to: 'x/a', port: 80, protocol: 'TCP' }]);
    t.equal(opened[0]!.verdict, 'allow', 'the policy created while the controller was gone is enforced now');
  });
});
