/**
 * `sluicectl node policies` on a real lab (np, ptp, 2 nodes, enforcing agents): with a Kubernetes
 * NetworkPolicy, a valid Antrea ClusterNetworkPolicy and one naming a Tier that does not exist,
 * each node lists the valid policies with exactly its own Pods, and both list the invalid object
 * with its field and reason; --json parses to the same view.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { agentConfigPath, agentLogPath, agentPidPath, startAgent } from '../../lab/agent.js';
import { nodeNetns } from '../../lab/net/names.js';
import type { PolicyReport } from '../../daemon/enforcement/policy-report.js';
import { cli, cliJson, skipReason, type ListJson } from './labcli-helpers.js';
import net from 'node:net';
import { ControlPlaneWatcher } from '../../daemon/controlplane/client.js';
import { NodePolicyState } from '../../daemon/controlplane/node-state.js';
import { buildPolicyReport } from '../../daemon/enforcement/policy-report.js';
import { KubeAccess } from '../../daemon/kube/access.js';
import { serviceAccountToken } from '../../lab/apiserver/satoken.js';
import { hostKubeconfigPath, serviceAccountKeyPath } from '../../lab/control.js';
import { CONTROLLER_NAMESPACE, controllerGet, freePort, killControllers, type LabController, startController } from '../../lab/controller.js';
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
    await labCli(LAB, ['up', '--sluice', '--policy-source', 'standalone', '--nodes', '2', '--primary', 'ptp', '-f', WORKLOAD]);
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

  type Ev = { metadata: { namespace: string }; involvedObject: { apiVersion?: string; kind: string; namespace?: string; name: string; uid?: string }; type: string; reason: string; message: string; source?: { host?: string } };
  const events = async (reason: string): Promise<Ev[]> => (await cliJson<ListJson<Ev>>(['get', 'events', '-o', 'json', '--name', LAB])).items.filter((e) => e.reason === reason);

  t.test('Events: an invalid policy once per node, a failing CNI ADD once per Pod and minute; both as kubectl describe finds them', async (t) => {
    // SluiceInvalidPolicy on the ACNP with a missing tier, under its own apiVersion, kind and uid.
    const acnp = (await cliJson<ListJson<{ metadata: { name: string; uid: string } }>>(['get', 'clusternetworkpolicies.crd.antrea.io', '-o', 'json', '--name', LAB])).items.find((o) => o.metadata.name === 'np-bad-tier')!;
    let invalid: Ev[] = [];
    for (const deadline = Date.now() + 30_000; Date.now() < deadline && invalid.length < NODES.length; await sleep(500)) invalid = await events('SluiceInvalidPolicy');
    t.same(invalid.map((e) => e.source?.host).sort(), NODES, 'one Warning Event from each node');
    for (const e of invalid) {
      t.same(e.involvedObject, { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', name: 'np-bad-tier', uid: acnp.metadata.uid }, `${e.source?.host}: names the object as the API does, uid included`);
      t.equal(e.metadata.namespace, 'default', 'a cluster-scoped object: in default');
      t.match(e.message, /spec\.tier: tier no-such-tier does not exist/, 'with the field and reason');
      t.equal(e.type, 'Warning');
    }
    await sleep(12_000); // past the next report round: nothing is repeated while nothing changed
    t.equal((await events('SluiceInvalidPolicy')).length, NODES.length, 'not repeated while the object stays as it is');

    // SluiceAttachFailed: node-2's agent fails every ADD after attach-port (the test failpoint).
    const node = 'node-2';
    const restart = async (env: Record<string, string>) => {
      const pid = Number(readFileSync(agentPidPath(LAB, node), 'utf8').trim());
      const ready = () => readFileSync(agentLogPath(LAB, node), 'utf8').split('\n').filter((l) => l.includes('"startup: ready"')).length;
      const before = ready();
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // already gone
      }
      for (let i = 0; i < 100 && existsSync(`/proc/${pid}`); i++) await sleep(100);
      await startAgent(LAB, node, 30_000, env);
      for (const deadline = Date.now() + 60_000; Date.now() < deadline && ready() <= before; ) await sleep(100);
    };
    await restart({ SLUICE_FAILPOINT: 'attach-port' });
    const pod = writeTempFile(dir, 'failing.yaml', `apiVersion: v1\nkind: Pod\nmetadata: {name: failing, namespace: x}\nspec: {nodeName: ${node}, containers: [{name: c, image: sluice-lab/workload}]}\n`);
    const applied = await cli(['apply', '-f', pod, '--name', LAB]);
    t.not(applied.code, 0, `the Pod cannot start while every ADD fails (${applied.stderr.trim().split('\n').pop()})`);
    const uid = (await cliJson<ListJson<{ metadata: { name: string; namespace: string; uid: string } }>>(['get', 'pods', '-o', 'json', '--name', LAB])).items.find((p) => p.metadata.namespace === 'x' && p.metadata.name === 'failing')?.metadata.uid;
    const failed = await events('SluiceAttachFailed');
    t.equal(failed.length, 1, `one Event although the runtime tried several times (${failed.length})`);
    t.same(failed[0]?.involvedObject, { apiVersion: 'v1', kind: 'Pod', namespace: 'x', name: 'failing', uid }, 'on the Pod, uid included');
    t.match(failed[0]?.message, /could not attach the Pod's network \(the runtime retries\): .*failed at step attach-port.*Check: sluicectl node status/, 'what failed and what to check');
    await restart({});
    t.equal((await cli(['delete', '-f', pod, '--name', LAB])).code, 0, 'the failed Pod deleted, the agent back to normal');
  });

  // A user's kubectl against the lab, as against a cluster: HTTPS verified with the lab's CA, the
  // token sent, server-side printing, OpenAPI for apply, Events for describe, and the plugin.
  const kubectl = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
  const noKubectl = kubectl.error || kubectl.status !== 0 ? 'no kubectl on PATH (the lab does not install one: Debian\'s kubernetes-client is 1.20, older than the OpenAPI v3 this needs)' : undefined;
  t.test('a real kubectl: get, apply, describe with Events, and kubectl sluice whatif', { skip: noKubectl ?? false }, async (t) => {
    const kubeconfig = (await cli(['kubeconfig', '--name', LAB])).stdout.trim();
    const config = readFileSync(kubeconfig, 'utf8');
    t.match(config, /server: https:\/\/127\.0\.0\.1:\d+/, 'the kubeconfig points at the HTTPS endpoint');
    t.match(config, /certificate-authority-data: /, 'with the lab\'s CA');
    t.notMatch(config, /insecure-skip-tls-verify/, 'and verifies it');
    const pluginDir = tempDir('kubectl-plugin-');
    symlinkSync(SLUICECTL, join(pluginDir, 'kubectl-sluice'));
    const env = { ...process.env, KUBECONFIG: kubeconfig, PATH: `${pluginDir}:${process.env.PATH ?? ''}` };
    const k = (...args: string[]) => {
      const r = spawnSync('kubectl', args, { encoding: 'utf8', env, timeout: 60_000 });
      return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
    };

    const pods = (await cliJson<ListJson<PodJson & { status: { podIP: string } }>>(['get', 'pods', '-o', 'json', '--name', LAB])).items;
    const wide = k('get', 'pods', '-A', '-o', 'wide');
    t.equal(wide.code, 0, 'kubectl get pods -A -o wide');
    t.match(wide.out, /^NAMESPACE\s+NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\s+IP\s+NODE\b/, 'the columns kube-apiserver prints');
    for (const p of pods) {
      t.match(wide.out, new RegExp(`^${p.metadata.namespace}\\s+${p.metadata.name}\\s+1/1\\s+Running\\s+0\\s+\\S+\\s+${p.status.podIP.replaceAll('.', '\\.')}\\s+${p.spec.nodeName}\\b`, 'm'), `${p.metadata.namespace}/${p.metadata.name}: ready, running, its IP and node`);
    }

    const applied = k('apply', '-f', POLICIES);
    t.equal(applied.code, 0, `kubectl apply -f examples/policies (${applied.out.trim().split('\n').pop()})`);
    t.match(applied.out, /networkpolicy\.networking\.k8s\.io\/allow-from-y created/, 'a new NetworkPolicy is created');
    t.match(applied.out, /clusternetworkpolicy\.crd\.antrea\.io\/y-c-drop-from-z (configured|unchanged)/, 'the Antrea policy the lab CLI applied is taken over');
    const again = k('apply', '-f', POLICIES);
    t.equal(again.code, 0, 'applied again');
    t.notMatch(again.out, /created|warning|error/i, `nothing created, nothing to warn about: ${again.out.trim().split('\n').join('; ')}`);
    const listed = k('get', 'networkpolicies', '-n', 'x');
    t.match(listed.out, /^allow-from-y\s+<none>\s+\S+$/m, 'kubectl get lists what it applied, with its Pod selector');

    const described = k('describe', 'clusternetworkpolicy', 'np-bad-tier');
    t.equal(described.code, 0, 'kubectl describe clusternetworkpolicy np-bad-tier');
    t.match(described.out, /Events:\n\s+Type\s+Reason\s+Age\s+From\s+Message\n[\s-]+\n\s+Warning\s+SluiceInvalidPolicy\s+\S+\s+sluice-agent\s+ignored by sluice-agent on node-\d \(no rule of it is enforced\): spec\.tier: tier no-such-tier does not exist/, 'shows the agents\' Warning Event');

    const denyY = writeTempFile(dir, 'deny-y.yaml', 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-y, namespace: "y"}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n');
    const whatif = k('sluice', 'whatif', '-f', denyY);
    t.equal(whatif.code, 0, `kubectl sluice whatif -f deny-y.yaml (${whatif.out.trim().split('\n').pop()})`);
    t.match(whatif.out, /^\d+ connections compared; \d+ would change$/m, 'the plugin compares the live cluster with the change');
    t.match(whatif.out, /^x\/a -> y\/a 80\/TCP: allow -> drop$/m, 'and names connections the change would drop');
    t.equal(k('get', 'networkpolicy', 'deny-y', '-n', 'y').code, 1, 'whatif wrote nothing to the cluster');
  });

  // sluice-controller: two replicas on the host against this lab's API server, as the Deployment's
  // replicas behind their Service (a TCP forwarder to whichever is ready plays the Service). Each
  // Node's view from the leader, rebuilt as an agent rebuilds it, gives the policies the Node's own
  // agent enforces; a Node-bound token reads only its Node; the standby takes over when the leader
  // dies and the watch resumes there.
  t.test('sluice-controller: each Node\'s span gives its agent\'s policies; a standby takes over', async (t) => {
    const controllers: LabController[] = [];
    t.teardown(() => killControllers(controllers));
    // The namespace, the agents' ServiceAccount, and the controller's API registered with the API
    // server's aggregation layer: APIService -> Service -> Endpoints (written below: the lab's
    // stand-in for the Service selecting the leader's Pod). The controllers fill in its caBundle.
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'controller-ns.yaml', [
      `apiVersion: v1\nkind: Namespace\nmetadata: {name: ${CONTROLLER_NAMESPACE}}`,
      `apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sluice-agent, namespace: ${CONTROLLER_NAMESPACE}}`,
      `apiVersion: v1\nkind: Service\nmetadata: {name: sluice-controller, namespace: ${CONTROLLER_NAMESPACE}}\nspec: {ports: [{port: 443}]}`,
      `apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.controlplane.sluice.io}\nspec: {group: controlplane.sluice.io, version: v1beta1, service: {name: sluice-controller, namespace: ${CONTROLLER_NAMESPACE}, port: 443}, groupPriorityMinimum: 1000, versionPriority: 100}`,
    ].join('\n---\n'))]);
    const ports = [await freePort(), await freePort()];
    // The lab enforces no RBAC (no SubjectAccessReview): its admin is allowed by name.
    const flags = ['--read-all-users', 'sluice-lab-admin'];
    controllers.push(await startController(LAB, 'controller-a', ports[0]!, flags), await startController(LAB, 'controller-b', ports[1]!, flags));
    const saKey = readFileSync(serviceAccountKeyPath(LAB), 'utf8').trim();
    const tokenFor = (node: string) => serviceAccountToken(saKey, CONTROLLER_NAMESPACE, 'sluice-agent', { podName: `sluice-agent-${node}`, nodeName: node });
    const view = (c: LabController) => controllerGet(c.port, '/apis/controlplane.sluice.io/v1beta1/networkpolicies?fieldSelector=nodeName=node-1', undefined, tokenFor('node-1'));
    const serves = async (c: LabController) => (await view(c)).code === 200;
    let leader: LabController | undefined;
    for (const deadline = Date.now() + 60_000; !leader && Date.now() < deadline; await sleep(200)) {
      for (const c of controllers) if (await serves(c)) leader = c;
    }
    if (!leader) return t.fail('no replica served the views within 60 s');
    const standby = controllers.find((c) => c !== leader)!;
    t.equal((await controllerGet(standby.port, '/readyz')).code, 200, `${standby.identity} is ready (its views computed)`);
    const refused = await view(standby);
    t.ok(refused.code === 503 && refused.body.includes(`${leader.identity} leads`), `but serves no view while ${leader.identity} leads (${refused.body.slice(0, 160)})`);

    const access = KubeAccess.load(hostKubeconfigPath(LAB));
    const caCert = ((await access.getJson(`/api/v1/namespaces/${CONTROLLER_NAMESPACE}/configmaps/sluice-ca`)) as { data: Record<string, string> }).data['ca.crt']!;
    const endpoints = (c: LabController) => labCli(LAB, ['apply', '-f', writeTempFile(dir, 'controller-endpoints.yaml',
      `apiVersion: v1\nkind: Endpoints\nmetadata: {name: sluice-controller, namespace: ${CONTROLLER_NAMESPACE}}\nsubsets: [{addresses: [{ip: 127.0.0.1}], ports: [{port: ${c.port}}]}]\n`)]);
    await endpoints(leader);
    /** One Node's AddressGroups as the API server's aggregation layer returns them to its admin (kubectl's path). */
    const aggregated = async (node: string) => {
      let last = '';
      for (const deadline = Date.now() + 30_000; Date.now() < deadline; await sleep(300)) {
        try {
          const list = (await access.getJson(`/apis/controlplane.sluice.io/v1beta1/addressgroups?fieldSelector=nodeName=${node}`)) as { kind: string; items: { metadata: { name: string } }[] };
          return list;
        } catch (err) {
          last = (err as Error).message;
        }
      }
      throw new Error(`no answer through the aggregation layer within 30 s: ${last}`);
    };
    const direct = JSON.parse((await controllerGet(leader.port, '/apis/controlplane.sluice.io/v1beta1/addressgroups?fieldSelector=nodeName=node-1', caCert, tokenFor('node-1'))).body) as { items: { metadata: { name: string } }[] };
    const proxied = await aggregated('node-1');
    t.equal(proxied.kind, 'AddressGroupList', 'the aggregation layer serves the group (its CA published by the leader)');
    t.same(proxied.items.map((i) => i.metadata.name).sort(), direct.items.map((i) => i.metadata.name).sort(), 'the same view as the agent of node-1 gets');
    if (noKubectl) t.comment(`kubectl get addressgroups.controlplane.sluice.io not run: ${noKubectl}`);
    else {
      const kubeconfig = (await cli(['kubeconfig', '--name', LAB])).stdout.trim();
      const k = spawnSync('kubectl', ['get', 'addressgroups.controlplane.sluice.io', '--field-selector', 'nodeName=node-1', '-o', 'name'], { encoding: 'utf8', env: { ...process.env, KUBECONFIG: kubeconfig }, timeout: 60_000 });
      t.same(k.stdout.trim().split('\n').filter(Boolean).sort(), direct.items.map((i) => `addressgroup.controlplane.sluice.io/${i.metadata.name}`).sort(), `a real kubectl lists node-1's AddressGroups through the API server (${k.stderr.trim().split('\n').pop() ?? ''})`);
    }

    // The Service: connections go to the replica that serves.
    let target = leader;
    const service = net.createServer((conn) => {
      const up = net.connect(target.port, '127.0.0.1');
      conn.pipe(up).pipe(conn);
      const end = () => { conn.destroy(); up.destroy(); };
      conn.on('error', end);
      up.on('error', end);
    });
    await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
    t.teardown(() => service.close());
    const servicePort = (service.address() as net.AddressInfo).port;

    const other = await controllerGet(leader.port, '/apis/controlplane.sluice.io/v1beta1/addressgroups?fieldSelector=nodeName=node-2', caCert, tokenFor('node-1'));
    t.equal(other.code, 403, `a token bound to node-1 may not read node-2's view (${other.body.slice(0, 120)})`);

    const agents = NODES.map((node) => {
      const state = new NodePolicyState(node);
      const states: string[] = [];
      const watcher = new ControlPlaneWatcher({
        server: `https://127.0.0.1:${servicePort}`, nodeName: node, token: tokenFor(node), ca: caCert,
        onSync: (kind, items) => state.sync(kind, items),
        onEvent: (_kind, e) => state.event(e),
        onState: (s, reason) => states.push(`${s}: ${reason}`),
      });
      watcher.start();
      return { node, state, watcher, states };
    });
    t.teardown(() => Promise.all(agents.map((a) => a.watcher.stop())));
    /** Waits until the policies rebuilt from the controller's view of `node` are those its agent reports. */
    const sameAsAgents = async (what: string) => {
      for (const a of agents) {
        let last = '';
        let equal = false;
        for (const deadline = Date.now() + 30_000; !equal && Date.now() < deadline; await sleep(300)) {
          a.state.commit();
          const r = await nodePolicies(a.node, ['--json']);
          if (r.code !== 0) continue;
          const agent = (JSON.parse(r.stdout) as PolicyReport).policies;
          const fromController = buildPolicyReport({ node: a.node, synced: true, rules: a.state.nodeRuleSet(), isolations: a.state.nodeIsolations(), errors: [], localPods: [] }).policies;
          equal = JSON.stringify(agent) === JSON.stringify(fromController) && agent.length > 0;
          last = `agent ${JSON.stringify(agent.map((p) => p.name))}, controller ${JSON.stringify(fromController.map((p) => p.name))}`;
        }
        t.ok(equal, `${a.node} ${what}: the controller's span gives the policies its agent enforces (${last})`);
      }
    };
    await sameAsAgents('at first');
    const extra = writeTempFile(dir, 'controller-extra.yaml', 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: y-a-from-x, namespace: "y"}\nspec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress: [{from: [{namespaceSelector: {matchLabels: {ns: x}}}], ports: [{port: 80}]}]\n');
    await labCli(LAB, ['apply', '-f', extra]);
    await sameAsAgents('after a policy change');

    // The leader dies (no release): the standby takes over; the watches resume on it.
    const died = Date.now();
    process.kill(leader.pid, 'SIGKILL');
    target = standby;
    await endpoints(standby);
    let tookOver = false;
    for (const deadline = Date.now() + 40_000; !tookOver && Date.now() < deadline; await sleep(200)) tookOver = await serves(standby);
    t.ok(tookOver, `${standby.identity} took over`);
    t.comment(`takeover ${((Date.now() - died) / 1000).toFixed(1)} s after the leader's death (lease 11 s, retry 2 s)`);
    await labCli(LAB, ['delete', '-f', extra]);
    await sameAsAgents('after the takeover and another change');
    t.equal((await aggregated('node-2')).kind, 'AddressGroupList', 'the aggregation layer reaches the new leader');
    for (const a of agents) {
      // A Node whose view the change did not touch may still be in its reconnection backoff (at most 5 s).
      for (const deadline = Date.now() + 30_000; a.watcher.state().state !== 'connected' && Date.now() < deadline; ) await sleep(200);
      t.ok(a.states.some((s) => s.startsWith('disconnected')) && a.watcher.state().state === 'connected', `${a.node}: the watch was cut and resumed (${a.states.join('; ')})`);
    }
  });

}
