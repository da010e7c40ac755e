/**
 * Agents in controller mode (daemon/enforcement/controller-mode) against a real in-process
 * controller (PolicyController, ControlPlaneStore, its HTTP API) fed by the lab API server's
 * list/watch, next to standalone agents of the same Nodes fed by the same API server:
 *  - each Node's compiled policy flows are the standalone agent's, at start and after changes;
 *  - the controller gone: /status says so, the last state stays (no flow changes while the cluster
 *    does), nothing is committed;
 *  - a new controller (a new store: the watches are Gone and list again): the Node converges to the
 *    standalone flows again, in one change.
 */
import t from 'tap';
import { FlowStore } from '../../daemon/flows/store.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { type ControlPlaneApiServer, startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { PolicyController } from '../../daemon/controller/controller.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';
import { ControllerModeEnforcer } from '../../daemon/enforcement/controller-mode/enforcer.js';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { ClusterWatch } from '../../daemon/enforcement/watch/clusterwatch.js';
import { startLab } from './apiserver-helpers.js';
import { askController, askTraceDestination } from '../../daemon/controlplane/client.js';
import { RealizedReporter } from '../../daemon/controlplane/realized-reporter.js';
import { startEndpoint } from '../../daemon/health.js';
import { newPodGuardFlows } from '../../daemon/flows/newpod-guard.js';

const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const NODES = ['node-1', 'node-2'];

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await sleep(20);
  }
}

const cookies = (flows: { flows(): { cookie: string }[] }) => flows.flows().map((f) => f.cookie).sort().join('\n');

/** A controller in this process, wired as its main.ts wires it: the cluster's informers into the engine, the views and realization answers served over HTTP (agents authenticate as "tok-<node>"). */
async function startController(kubeconfig: string, port = 0): Promise<{ server: ControlPlaneApiServer; controller: PolicyController; stop(): Promise<void> }> {
  const store = new ControlPlaneStore();
  const controller = new PolicyController({ log, sink: store, versions: (node) => store.lastChanges(node) });
  const watch = await ClusterWatch.start({
    kubeconfig, log,
    onEvent: (ev) => {
      store.batch(() => controller.onWatchEvent(ev));
      controller.poke();
    },
  });
  const server = await startControlPlaneApiServer({
    store, port, log,
    realization: (q, waitMs, confirmMs) => controller.whenPodRealized(q, waitMs, confirmMs),
    realizedViews: controller.realizedViews,
    traceDestination: (to, family, node) => controller.traceDestination(to, family, node),
    authenticate: async (req: IncomingMessage) => {
      const m = /^Bearer tok-(.+)$/.exec(req.headers.authorization ?? '');
      return m ? { user: `system:serviceaccount:kube-system:sluice-agent`, nodeName: m[1]! } : undefined;
    },
    readAll: () => false,
    readiness: () => (watch.isSynced() ? { ready: true } : { ready: false, reason: 'listing' }),
  });
  return {
    server,
    controller,
    stop: async () => {
      controller.close();
      await server.close();
      await watch.stop();
    },
  };
}

t.test('controller mode: the standalone flows on every Node; the last state kept while the controller is gone', async (t) => {
  const lab = await startLab(t);
  const dir = mkdtempSync(join(tmpdir(), 'ctlmode-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());

  for (const [i, name] of NODES.entries()) await lab.core.createNode({ body: { metadata: { name }, status: { addresses: [{ type: 'InternalIP', address: `10.0.0.${i + 1}` }] } } });
  for (const n of ['x', 'y', 'z']) await lab.core.createNamespace({ body: { metadata: { name: n, labels: { ns: n } } } });
  const running = async (ns: string, name: string, node: string, ip: string, labels: Record<string, string> = { app: name }) => {
    await lab.core.createNamespacedPod({ namespace: ns, body: { metadata: { name, labels }, spec: { nodeName: node, containers: [{ name: 'c', image: 'i', ports: [{ name: 'http', containerPort: 8080 }] }] } } });
    await lab.core.replaceNamespacedPodStatus({ namespace: ns, name, body: { metadata: { name, namespace: ns }, status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } } });
  };
  await running('x', 'a', 'node-1', '10.1.0.5');
  await running('x', 'b', 'node-2', '10.2.0.5');
  await running('y', 'c', 'node-1', '10.1.0.6');
  await running('z', 'd', 'node-2', '10.2.0.6');
  // Kinds of every stage: a Kubernetes NetworkPolicy with a named port, an AdminNetworkPolicy Deny.
  await lab.net.createNamespacedNetworkPolicy({ namespace: 'x', body: {
    metadata: { name: 'allow-y' },
    spec: { podSelector: {}, policyTypes: ['Ingress'], ingress: [{ _from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 'http' }] }] },
  } });
  await lab.custom.createClusterCustomObject({
    group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies',
    body: {
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'deny-z' },
      spec: { priority: 10, subject: { namespaces: {} }, ingress: [{ name: 'deny-z', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'z' } } }] }] },
    },
  });

  let controller = await startController(kubeconfig);
  const port = Number(new URL(controller.server.url).port);
  t.teardown(() => controller.stop());

  const agents = await Promise.all(NODES.map(async (node) => {
    const standalone = new Enforcer({ nodeName: node, kubeconfig, ovsRunDir: dir, bridge: 'br-int', log });
    t.teardown(() => standalone.close());
    standalone.bindFlows(async () => {});
    await standalone.startWatch({ retryMs: 100, maxRetryMs: 300 });
    await standalone.waitSynced();
    const cm = new ControllerModeEnforcer({
      nodeName: node, kubeconfig, ovsRunDir: dir, bridge: 'br-int', log,
      controller: { server: controller.server.url, token: `tok-${node}` },
      watcherTuning: { initialBackoffMs: 50, maxBackoffMs: 200 },
    });
    t.teardown(() => cm.close());
    let applies = 0;
    await cm.start();
    await cm.waitSynced();
    cm.bindFlows(async () => {
      applies++;
    });
    cm.flowsConverged();
    return { node, standalone, cm, applies: () => applies };
  }));

  const converged = async (what: string) => {
    for (const a of agents) {
      await until(`${a.node} ${what}: controller mode's flows equal standalone's`, () => {
        a.standalone.compileNow();
        a.cm.writeFlows(new FlowStore());
        return cookies(a.cm.policyFlows) === cookies(a.standalone.policyFlows);
      });
      t.ok(a.cm.policyFlows.size > 0, `${a.node} ${what}: ${a.cm.policyFlows.size} policy flows, as standalone`);
    }
  };
  await converged('at start');
  const atStart = agents.map((a) => cookies(a.cm.policyFlows)).join('|');
  t.match(agents[0]!.cm.status().controlPlane, { connected: true, synced: true, rejected: 0 }, 'status: following the controller');
  // Where a traceflow destination leads, as the controller answers an agent.
  const dest = (node: string, to: string) => askTraceDestination({ server: controller.server.url, token: `tok-${node}` }, to, 4);
  t.same(await dest('node-1', 'x/b'), { ip: '10.2.0.5', nodes: [{ name: 'node-2', address: '10.0.0.2' }] }, 'trace destination: another Node\'s Pod by name, with its Node');
  t.same(await dest('node-2', 'x/b'), { ip: '10.2.0.5', nodes: [] }, 'the asking Node\'s own Pod: no other Node');
  t.same(await dest('node-1', 'ip:10.1.0.6'), { ip: '10.1.0.6', nodes: [] }, 'an address of a local Pod');
  t.match(await dest('node-1', 'ip:10.0.0.2'), { nodes: [], beyond: /address of Node node-2, whose host network sluice does not police/ }, 'a Node\'s address: beyond sluice');
  t.match(await dest('node-1', 'ip:192.0.2.9'), { nodes: [], beyond: /no Pod, Service or Node of the cluster/ }, 'an address outside the cluster');
  await t.rejects(dest('node-1', 'x/nope'), { name: 'TraceDestinationRefused', message: /x\/nope: no such Pod with an IPv4 address/ }, 'no such Pod: refused, with why');
  await t.rejects(dest('node-1', 'ip:fd00::1'), { name: 'TraceDestinationRefused', message: /an IPv6 destination for an IPv4 trace/ });

  // Open connections judged from node-1's own rules: the denied one is cut, the node's own (a kubelet probe) and the allowed one stay.
  const ct = (src: string, dst: string, sport: number) => `tcp,orig=(src=${src},dst=${dst},sport=${sport},dport=8080),reply=(src=${dst},dst=${src},sport=8080,dport=${sport}),zone=65520,mark=32,protoinfo=(state=ESTABLISHED)`;
  const flushed: string[] = [];
  const node1 = agents[0]!.cm;
  node1.watchConnections({ dump: async () => [ct('10.0.0.1', '10.1.0.5', 40001), ct('10.2.0.6', '10.1.0.5', 40002), ct('10.1.0.6', '10.1.0.5', 40003)].join('\n'), flush: async (tuple) => void flushed.push(tuple) }, ['10.0.0.1']);
  node1.flowsConverged();
  await node1.connectionsSettled();
  t.equal(flushed.length, 1, 'one connection cut');
  t.match(flushed[0], /10\.2\.0\.6.*40002/, 'z/d -> x/a (the AdminNetworkPolicy denies z): cut; the node\'s own and y/c\'s stay');
  t.match(node1.status().connections, { cut: 1, blocked: 1 }, 'and blocked both ways until allowed again');

  // Changes of each kind: a Pod relabelled into the policy's peers, a new Pod, a policy edited.
  await running('y', 'e', 'node-2', '10.2.0.7');
  await lab.core.patchNamespacedPod({ namespace: 'z', name: 'd', body: [{ op: 'replace', path: '/metadata/labels', value: { app: 'd', tier: 'front' } }] } as never);
  await lab.net.replaceNamespacedNetworkPolicy({ namespace: 'x', name: 'allow-y', body: {
    metadata: { name: 'allow-y', namespace: 'x' },
    spec: { podSelector: {}, policyTypes: ['Ingress'], ingress: [{ _from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }, { podSelector: { matchLabels: { tier: 'front' } }, namespaceSelector: {} }], ports: [{ port: 'http' }] }] },
  } });
  // An FQDN peer: the controller sends its group with no member; the names a Node's Pods resolve are learned on that Node.
  await lab.custom.createClusterCustomObject({
    group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies',
    body: {
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'no-example' },
      spec: { priority: 5, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }], egress: [{ name: 'drop-example', action: 'Drop', to: [{ fqdn: '*.example.com' }] }] },
    },
  });
  for (const a of agents) await until(`${a.node} enforces no-example`, () => a.cm.policyReport().policies.some((p) => p.name === 'no-example'));
  await converged('after changes');
  const learner = agents[0]!;
  t.same(learner.cm.fqdnPolicy.fqdnTargetPodIps(), learner.standalone.engine.fqdnTargetPodIps(), 'DNS interception for the same local Pods as standalone');
  t.same(learner.cm.fqdnPolicy.fqdnTargetPodIps(), ['10.1.0.5'], 'x/a, the fqdn rule\'s target on node-1');
  t.ok(learner.cm.fqdnPolicy.fqdnPatterns().matches('www.example.com'), 'the rule\'s pattern is learned');
  const learnedCs = learner.cm.fqdnPolicy.setFqdnAddresses([{ name: 'www.example.com', ips: ['192.0.2.7'] }]);
  learner.standalone.engine.setFqdnAddresses([{ name: 'www.example.com', ips: ['192.0.2.7'] }]);
  t.equal(learnedCs.addressGroups.updated.length, 1, 'a learned name changes the fqdn group at once (nothing received is held back)');
  const dropExample = (rules: { ref: { name: string }; peers: unknown }[]) => JSON.stringify(rules.filter((r) => r.ref.name === 'no-example').map((r) => r.peers));
  t.equal(dropExample(learner.cm.follower.state.nodeRuleSet()), dropExample(learner.standalone.engine.nodeRuleSet()), 'the Drop\'s peers hold the learned address, as standalone');
  t.match(dropExample(learner.cm.follower.state.nodeRuleSet()), /192\.0\.2\.7/);
  t.same(learner.cm.policyReport().warnings, [], 'no warning: the rule is enforced as written');
  // Forgotten again (its TTL ran out), so the flows compiled before and the state agree again.
  learner.cm.fqdnPolicy.setFqdnAddresses([{ name: 'www.example.com', ips: [] }]);
  learner.standalone.engine.setFqdnAddresses([{ name: 'www.example.com', ips: [] }]);
  t.not(agents.map((a) => cookies(a.cm.policyFlows)).join('|'), atStart, 'the changes changed flows');

  // The controller is gone: the last state stays while the cluster changes.
  await controller.stop();
  for (const a of agents) await until(`${a.node} notices the controller is gone`, () => a.cm.status().controlPlane?.connected === false);
  const kept = agents.map((a) => ({ flows: cookies(a.cm.policyFlows), applies: a.applies() }));
  await lab.core.deleteNamespacedPod({ namespace: 'y', name: 'c' });
  await lab.net.deleteNamespacedNetworkPolicy({ namespace: 'x', name: 'allow-y' });
  for (const a of agents) await until(`${a.node}'s standalone agent sees the changes`, () => {
    a.standalone.compileNow();
    return !a.standalone.policyFlows.flows().some((f) => JSON.stringify(f).includes('allow-y'));
  });
  agents.forEach((a, i) => {
    a.cm.writeFlows(new FlowStore());
    t.equal(cookies(a.cm.policyFlows), kept[i]!.flows, `${a.node}: without the controller the last state stays`);
    t.equal(a.applies(), kept[i]!.applies, `${a.node}: and nothing is applied`);
    t.match(a.cm.status().controlPlane, { connected: false, reason: /./ }, `${a.node}: status says it is not connected`);
  });

  // A new controller on the same address: its store is new (the agents' versions are Gone there).
  controller = await startController(kubeconfig, port);
  await converged('after the controller came back');
  for (const a of agents) t.match(a.cm.status().controlPlane, { connected: true, rejected: 0 }, `${a.node}: following again`);
});

t.test('controller mode, new Pods: the controller names the Nodes and versions; the ADD waits for them, or isolates the Pod', async (t) => {
  const lab = await startLab(t);
  const dir = mkdtempSync(join(tmpdir(), 'ctlmode-new-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());
  const probe = await startEndpoint('probe', { host: '127.0.0.2', port: 0 }, log, {});
  const port = probe.port;
  await probe.close();

  for (const [i, name] of NODES.entries()) await lab.core.createNode({ body: { metadata: { name }, status: { addresses: [{ type: 'InternalIP', address: `127.0.0.${i + 1}` }] } } });
  for (const n of ['y', 'z']) await lab.core.createNamespace({ body: { metadata: { name: n, labels: { ns: n } } } });
  await lab.core.createNamespacedPod({ namespace: 'y', body: { metadata: { name: 'c', labels: { app: 'c' } }, spec: { nodeName: 'node-2', containers: [{ name: 'c', image: 'i' }] } } });
  await lab.core.replaceNamespacedPodStatus({ namespace: 'y', name: 'c', body: { metadata: { name: 'c', namespace: 'y' }, status: { phase: 'Running', podIP: '10.2.0.5', podIPs: [{ ip: '10.2.0.5' }] } } });
  // Every Pod of y denies what comes from namespace z: node-2 must know a new z Pod before it runs.
  await lab.custom.createClusterCustomObject({
    group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies',
    body: {
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'y-deny-z' },
      spec: { priority: 10, subject: { namespaces: { matchLabels: { ns: 'y' } } }, ingress: [{ name: 'deny-z', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'z' } } }] }] },
    },
  });
  let controller = await startController(kubeconfig);
  const server = controller.server.url;
  t.teardown(() => controller.stop());
  // What each node's realization endpoint was asked directly (a new Pod's agent asks only the nodes the controller did not confirm).
  const asked = new Map<string, number>(NODES.map((n) => [n, 0]));
  const reporters = new Map<string, RealizedReporter>();
  const agents = await Promise.all(NODES.map(async (node, i) => {
    const reporter = new RealizedReporter({ server, token: `tok-${node}`, initialBackoffMs: 50, maxBackoffMs: 200 });
    reporters.set(node, reporter);
    const cm = new ControllerModeEnforcer({
      nodeName: node, kubeconfig, ovsRunDir: dir, bridge: 'br-int', log,
      controller: { server, token: `tok-${node}` },
      watcherTuning: { initialBackoffMs: 50, maxBackoffMs: 200 },
      newPods: { realizationPort: port, confirmWithinMs: 1500 },
      askController: (pod, waitMs, confirmMs) => askController({ server, token: `tok-${node}` }, pod, waitMs, confirmMs),
      realizedViews: reporter,
    });
    t.teardown(() => cm.close());
    await cm.start();
    reporter.start();
    await cm.waitSynced();
    cm.bindFlows(async () => {});
    cm.flowsConverged();
    const endpoint = await startEndpoint('realization', { host: `127.0.0.${i + 1}`, port }, log, {
      '/realized': (q) => {
        asked.set(node, asked.get(node)! + 1);
        return cm.realizedAnswer(q);
      },
    });
    t.teardown(() => endpoint.close());
    return cm;
  }));
  const [node1, node2] = agents as [ControllerModeEnforcer, ControllerModeEnforcer];
  await until('both nodes\' reports reach the controller', () => controller.controller.realizedViews.status().nodes === 2);
  const flowsOf = (e: ControllerModeEnforcer) => {
    e.writeFlows(new FlowStore());
    return e.policyFlows.flows().map((f) => `${f.table} ${f.match} ${f.actions}`);
  };
  const guards = (e: ControllerModeEnforcer) => e.newPods!.guarded();
  const newPod = async (name: string, ip: string) => {
    await lab.core.createNamespacedPod({ namespace: 'z', body: { metadata: { name, labels: { app: name } }, spec: { nodeName: 'node-1', containers: [{ name: 'c', image: 'i' }] } } });
    const pod = { containerId: `c-${name}`, podNamespace: 'z', podName: name, netns: '/proc/self/ns/net', ifName: 'eth0', hostVeth: `veth-${name}`, ofport: 7, mac: '2a:00:00:00:00:07', ips: [ip] };
    await node1.podAttaching(pod);
    await node1.podStarting(pod);
  };

  await newPod('new1', '10.1.0.21');
  t.ok(flowsOf(node2).some((f) => f.includes('10.1.0.21')), 'when the ADD answers, node-2 already has the new Pod\'s address in its flows (from the published status, through the controller)');
  t.same(guards(node1), [], 'both nodes confirmed: nothing guarded');
  t.match(node1.status().newPods, { admitted: 1, guarded: 0, isolated: 0, answersHeld: 0, spanNodes: 2, confirmedByController: 1 }, 'admitted with no guard: node-2 confirmed through the controller; the answer is not kept');
  t.equal(asked.get('node-2'), 0, 'node-2 was not asked: its report to the controller answered');
  const reports = node2.status().controlPlane?.realizedReports;
  t.match(reports, { connected: true, opened: 1 }, 'node-2 reports what it enforces, on one request');
  t.notOk(reports && 'lastError' in reports, 'no failure since it opened (the controller answered 503 while it listed)');

  // node-2's reports stop reaching the controller: its last one is older than the new Pod, so
  // node-1 asks node-2 itself once the controller's wait is over.
  await reporters.get('node-2')!.stop();
  await newPod('new1b', '10.1.0.23');
  t.ok(flowsOf(node2).some((f) => f.includes('10.1.0.23')), 'node-2 holds the second Pod too');
  t.same(guards(node1), [], 'node-2 confirmed when asked directly: nothing guarded');
  t.equal(asked.get('node-2'), 1, 'node-2 was asked directly, once');
  t.match(node1.status().newPods, { admitted: 2, guarded: 0, spanNodes: 4, confirmedByController: 1 }, 'the controller did not confirm node-2 this time');
  // A standalone agent (a cluster switching modes) asks without versions: answered from the groups held.
  t.match(await node2.realizedAnswer(new URLSearchParams('pod=z/new1&ips=10.1.0.21&waitMs=0')), { code: 200, body: { realized: true } }, 'asked without versions: node-2 holds z/new1 in its groups');
  t.match(await node2.realizedAnswer(new URLSearchParams('pod=z/other&ips=10.1.0.99&waitMs=20')), { code: 200, body: { realized: false } }, 'a Pod it holds in no group: no');
  t.match(await node2.realizedAnswer(new URLSearchParams('pod=z/new1&ips=10.1.0.21&versions=NetworkPolicy=x')), { code: 400, body: { error: /versions "NetworkPolicy=x"/ } }, 'malformed versions are named');

  // The controller is gone: the next new Pod starts isolated, and is released once it is back.
  await controller.stop();
  await newPod('new2', '10.1.0.22');
  t.same(guards(node1), [{ podIps: ['10.1.0.22'], peerIps: [], all: true }], 'the Pod\'s every new connection is dropped (its policies are unknown here)');
  t.same(newPodGuardFlows(guards(node1)).map((f) => `${f.table} ${f.match} ${f.actions}`).sort(), [
    'AntreaPolicyEgressRule ct_state=+new+trk,ip,nw_src=10.1.0.22 drop',
    'AntreaPolicyIngressRule ct_state=+new+trk,ip,nw_dst=10.1.0.22 drop',
  ], 'as two flows on its node');
  t.match(node1.status().newPods, { isolatedPods: [{ pod: 'z/new2' }], controllerUnanswered: 1 });
  controller = await startController(kubeconfig, Number(new URL(server).port));
  await until('the isolation is lifted once the controller answers and the nodes hold the Pod', () => guards(node1).length === 0, 30_000);
  t.ok(flowsOf(node2).some((f) => f.includes('10.1.0.22')), 'node-2 drops the released Pod\'s traffic itself');
  t.match(node1.status().newPods, { isolated: 1, released: 1, isolatedPods: [], answersHeld: 0 });
});
