/**
 * The agent's informers against the lab API server (the Kubernetes list/watch protocol): every
 * event reaches the policy engine; CRD kinds that are not installed do not block start-up and are
 * picked up once their CRD appears; dropped watches resume; an expired resourceVersion (410) relists
 * and reports what was deleted meanwhile, without ever dropping objects that still exist.
 * Plus the enforcer's debounced flow application and order independence of its compiled flows,
 * and the API resourceVersion it reports as enforced (with the lab server's bookmarks after each
 * change): it follows writes to any resource, and never passes a change whose flows are not applied.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { seedCrds } from '../../lab/apiserver/resources.js';
import { startLab } from './apiserver-helpers.js';
import { ManualClock } from './manual-clock.js';

const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await sleep(20);
  }
}

const podObj = (ns: string, name: string, ip: string, node: string, labels: Record<string, string>) => ({
  metadata: { name, namespace: ns, labels },
  spec: { nodeName: node, containers: [{ name: 'c', image: 'i', ports: [{ name: 'http', containerPort: 80 }] }] },
  status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
});

t.test('informers feed the engine; CRDs appear later; watch loss and 410 converge', async (t) => {
  const lab = await startLab(t, { installCRDs: false, historyLimit: 5 });
  const dir = mkdtempSync(join(tmpdir(), 'enforce-watch-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());

  for (const n of ['x', 'y']) await lab.core.createNamespace({ body: { metadata: { name: n, labels: { ns: n } } } });
  // Pods with IPs through the status subresource, as a kubelet does.
  const pods: [string, string, string, string, Record<string, string>][] = [
    ['x', 'a', '10.1.0.2', 'node-1', { app: 'a' }], ['x', 'b', '10.1.0.3', 'node-1', { app: 'b' }], ['y', 'c', '10.2.0.2', 'node-2', { app: 'c' }],
  ];
  for (const [ns, name, ip, node, labels] of pods) {
    const p = podObj(ns, name, ip, node, labels);
    await lab.core.createNamespacedPod({ namespace: ns, body: { metadata: p.metadata, spec: p.spec } });
    await lab.core.replaceNamespacedPodStatus({ namespace: ns, name, body: p });
  }
  await lab.net.createNamespacedNetworkPolicy({
    namespace: 'x',
    body: { metadata: { name: 'from-y' }, spec: { podSelector: { matchLabels: { app: 'a' } }, policyTypes: ['Ingress'], ingress: [{ _from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] } },
  });

  const enforcer = new Enforcer({ nodeName: 'node-1', kubeconfig, ovsRunDir: dir, bridge: 'br-int', log });
  t.teardown(() => enforcer.close());
  let applies = 0;
  enforcer.bindFlows(async () => {
    applies++;
  });
  await enforcer.startWatch({ retryMs: 100, maxRetryMs: 300 });
  await enforcer.waitSynced();
  t.ok(enforcer.status().synced, 'synced although no CRD is installed (404 = not there yet)');
  const w = enforcer.clusterWatch!;
  t.ok(w.syncedAt !== undefined && w.syncedAt >= w.startedAt, 'when every resource was first listed is recorded (start-up logs it)');
  const verdict = (from: string, to: string) => enforcer.engine.evaluate({ from, to, port: 80, protocol: 'TCP' }).verdict;
  t.equal(verdict('y/c', 'x/a'), 'allow', 'y may reach x/a');
  t.equal(verdict('x/b', 'x/a'), 'drop', 'x/b may not: the NetworkPolicy (peers sent as "from") arrived intact');
  const k8sFlows = () => enforcer.flows().filter((f) => f.table === 'IngressRule');
  t.ok(k8sFlows().some((f) => f.match.includes('nw_src=10.2.0.2') && f.actions.includes('conjunction(')), 'peer clause for y/c compiled');

  await t.test('a CRD installed later is watched from then on', async (t) => {
    for (const crd of seedCrds()) {
      await lab.custom.createClusterCustomObject({ group: 'apiextensions.k8s.io', version: 'v1', plural: 'customresourcedefinitions', body: crd });
    }
    await lab.custom.createClusterCustomObject({
      group: 'crd.antrea.io', version: 'v1beta1', plural: 'clusternetworkpolicies',
      body: {
        apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'drop-yc' },
        spec: { priority: 1, tier: 'securityops', appliedTo: [{ podSelector: { matchLabels: { app: 'a' } } }], ingress: [{ action: 'Drop', from: [{ podSelector: { matchLabels: { app: 'c' } } }] }] },
      },
    });
    await until('the ACNP reaches the engine', () => verdict('y/c', 'x/a') === 'drop');
    t.match(enforcer.engine.evaluate({ from: 'y/c', to: 'x/a', port: 80, protocol: 'TCP' }).decidedBy, { kind: 'AntreaClusterNetworkPolicy', name: 'drop-yc' });
  });

  await t.test('a dropped watch resumes and sees later changes', async (t) => {
    lab.server.dropWatches();
    await lab.core.patchNamespacedPod({ namespace: 'x', name: 'b', body: [{ op: 'replace', path: '/metadata/labels', value: { app: 'a' } }] });
    await until('relabel of x/b seen', () => enforcer.engine.rules().length > 0 && verdict('y/c', 'x/b') === 'drop');
    t.pass('x/b now selected by the ACNP (label app=a)');
  });

  await t.test('410 Gone: relist reports the deletion, keeps everything else', async (t) => {
    const removed: string[] = [];
    const orig = enforcer.onWatchEvent.bind(enforcer);
    enforcer.onWatchEvent = (ev) => {
      if (ev.type === 'remove') removed.push(`${ev.object.kind}/${ev.object.metadata.namespace ?? ''}/${ev.object.metadata.name}`);
      orig(ev);
    };
    const relists = enforcer.clusterWatch!.relists;
    lab.server.dropWatches();
    // While the informers are down: delete, then make history too short to resume (410 on re-watch).
    await lab.net.deleteNamespacedNetworkPolicy({ namespace: 'x', name: 'from-y' });
    for (let i = 0; i < 8; i++) await lab.core.patchNamespace({ name: 'y', body: [{ op: 'add', path: '/metadata/annotations', value: { n: String(i) } }] });
    lab.server.compact();
    await until('NetworkPolicy deletion seen', () => removed.includes('NetworkPolicy/x/from-y'));
    await until('relisted', () => enforcer.clusterWatch!.relists > relists);
    t.same(removed.filter((r) => r !== 'NetworkPolicy/x/from-y'), [], 'nothing that still exists was removed (no flush to allow)');
    t.equal(verdict('x/b', 'x/a'), 'allow', 'the deleted policy no longer isolates x/a');
    t.equal(verdict('y/c', 'x/a'), 'drop', 'the ACNP still applies');
  });

  t.ok(applies > 0, `engine changes were applied to the bridge (${applies} debounced applies)`);
});

const podX = (i: number): KubeObject => ({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: `p${i}`, labels: { app: 'p' } }, spec: { nodeName: 'node-1' }, status: { phase: 'Running', podIP: `10.1.1.${i + 1}` } });
const denyX: KubeObject = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } };

t.test('coalescing: the events of one read are one apply, with every change in it', async (t) => {
  const clock = new ManualClock();
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 30, clock });
  t.teardown(() => enforcer.close());
  const applied: number[] = [];
  enforcer.bindFlows(async () => {
    applied.push(enforcer.flows().filter((f) => f.table === 'IngressDefaultRule' && f.actions === 'drop').length);
  });
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } } });
  for (let i = 0; i < 20; i++) enforcer.onWatchEvent({ type: 'upsert', object: podX(i) });
  enforcer.onWatchEvent({ type: 'upsert', object: denyX });
  await clock.advance(0);
  t.same(applied, [20], 'one apply, at once (no waiting on an idle agent), with all 20 isolation drops');
  await clock.advance(1000);
  t.same(applied, [20], 'and nothing more');
});

t.test('start-up: before the agent binds its flows, list events are not compiled; binding flushes what is pending', async (t) => {
  const clock = new ManualClock();
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 30, clock });
  t.teardown(() => enforcer.close());
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } } });
  enforcer.onWatchEvent({ type: 'upsert', object: denyX });
  for (let i = 0; i < 5; i++) {
    enforcer.onWatchEvent({ type: 'upsert', object: podX(i) });
    await clock.advance(0);
  }
  await clock.advance(1000);
  t.equal(enforcer.status().policyFlows, 0, 'nothing compiled while the lists arrive, whatever the timers did');
  const drops = () => enforcer.flows().filter((f) => f.table === 'IngressDefaultRule' && f.actions === 'drop').length;
  t.equal(drops(), 5, 'the one compile start-up asks for has every change');
  enforcer.onWatchEvent({ type: 'upsert', object: podX(5) });
  await clock.advance(1000);
  const applied: number[] = [];
  enforcer.bindFlows(async () => {
    applied.push(drops());
  });
  await clock.advance(0);
  t.same(applied, [6], 'a change that came after that compile is applied once the flows are bound');
});

t.test('coalescing: idle changes go at once; changes during an apply wait for it, then for the burst window', async (t) => {
  const clock = new ManualClock();
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 30, clock });
  t.teardown(() => enforcer.close());
  const releases: (() => void)[] = [];
  const started: number[] = [];
  enforcer.bindFlows(() => {
    started.push(clock.now());
    return new Promise<void>((r) => releases.push(r));
  });
  enforcer.onWatchEvent({ type: 'upsert', object: denyX });
  enforcer.onWatchEvent({ type: 'upsert', object: podX(0) });
  await clock.advance(0);
  t.same(started, [0], 'the first change starts an apply on the next turn');
  // Three changes while that apply runs (in separate reads).
  for (let i = 1; i <= 3; i++) {
    await clock.advance(5);
    enforcer.onWatchEvent({ type: 'upsert', object: podX(i) });
  }
  t.same(started, [0], 'no second apply while the first runs');
  releases[0]!();
  await clock.advance(0);
  t.same(started, [0], 'right after it ends, the changes wait out the burst window');
  await clock.advance(29);
  t.same(started, [0]);
  await clock.advance(1);
  t.same(started, [0, 45], 'then the three go together in one apply, 30 ms after the first ended');
  const first = enforcer.status().committedChanges;
  t.ok(first > 0 && first < enforcer.status().changes, 'only the first apply\'s changes are committed so far');
  releases[1]!();
  await clock.advance(0);
  t.equal(enforcer.status().committedChanges, enforcer.status().changes, 'the second apply commits the other three');
  await clock.advance(31);
  enforcer.onWatchEvent({ type: 'remove', object: { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny' } } });
  await clock.advance(0);
  t.same(started, [0, 45, 76], 'after a quiet window a change goes at once again');
  releases[2]!();
  await clock.advance(0);
  t.equal(clock.waiting, 0, 'no timer left behind');
});

t.test('status: a change counts as committed only once the apply that carries it is done', async (t) => {
  const clock = new ManualClock();
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 5, clock });
  t.teardown(() => enforcer.close());
  let release: () => void = () => undefined;
  enforcer.bindFlows(() => new Promise<void>((r) => (release = r)));
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'a', labels: {} }, spec: { nodeName: 'node-1' }, status: { phase: 'Running', podIP: '10.1.1.1' } } });
  enforcer.onWatchEvent({ type: 'upsert', object: denyX });
  const seen = enforcer.status().changes;
  t.ok(seen > 0, `${seen} changes taken in`);
  await clock.advance(40);
  t.equal(enforcer.status().committedChanges, 0, 'the apply is still running: nothing committed');
  const first = release;
  // A change arriving while that apply runs is not in it.
  enforcer.onWatchEvent({ type: 'remove', object: { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny' } } });
  const later = enforcer.status().changes;
  t.ok(later > seen, 'the removal is one more change');
  first();
  await clock.advance(40);
  t.equal(enforcer.status().committedChanges, seen, 'the finished apply commits the changes it was compiled with, not the later one');
  release();
  await clock.advance(20);
  t.equal(enforcer.status().committedChanges, later, 'the next apply commits the removal');
});

t.test('compiled flows do not depend on event order (incremental = full compile)', async (t) => {
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } },
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'y', labels: { ns: 'y' } } },
    ...[['x', 'a', '10.1.0.2', 'node-1'], ['x', 'b', '10.1.0.3', 'node-2'], ['y', 'a', '10.2.0.2', 'node-1'], ['y', 'b', '10.2.0.3', 'node-2']].map(
      ([ns, name, ip, node]) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: ns!, name: name!, labels: { pod: name! } }, spec: { nodeName: node }, status: { phase: 'Running', podIP: ip } }) as KubeObject,
    ),
    { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'from-y' }, spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] }] } },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'r' }, spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { pod: 'a' } } }], ingress: [{ action: 'Reject', from: [{ podSelector: { matchLabels: { pod: 'b' } } }] }] } },
    { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'anp' }, spec: { priority: 3, subject: { namespaces: {} }, egress: [{ action: 'Deny', to: [{ pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'b' } } } }] }] } },
  ];
  const full = new PolicyEngine({ nodeName: 'node-1' });
  for (const o of objs) full.upsert(o);
  const pf = new PolicyFlows();
  pf.sync(policyFlowInput(full));
  const want = pf.flows().map((f) => f.cookie).sort();
  t.ok(want.length > 10, `${want.length} flows in the full compile`);
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let trial = 0; trial < 30; trial++) {
    const order = [...objs].sort(() => rand() - 0.5);
    const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
    for (const o of order) {
      e.onWatchEvent({ type: 'upsert', object: structuredClone(o) });
      if (rand() < 0.5) e.compileNow(); // some orders compile between events
    }
    const got = e.flows().map((f) => f.cookie).sort();
    if (got.join() !== want.join()) {
      t.fail(`order ${order.map((o) => o.metadata.name).join(',')} gives different flows`);
      return;
    }
    await e.close();
  }
  t.pass('30 random orders give the full compile exactly');
});

/**
 * An enforcer whose flow applies are counted, with Namespace x and a local client Pod (x/client,
 * app=c, 10.1.0.5) in its view.
 */
function clientEnforcer(t: Test): { e: Enforcer; up: (o: KubeObject) => void; applies: () => number; clock: ManualClock } {
  const clock = new ManualClock();
  const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 5, clock });
  t.teardown(() => e.close());
  let applies = 0;
  e.bindFlows(async () => {
    applies++;
  });
  const up = (o: KubeObject) => e.onWatchEvent({ type: 'upsert', object: o });
  up({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } });
  up({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'client', labels: { app: 'c' } }, spec: { nodeName: 'node-1' }, status: { phase: 'Running', podIP: '10.1.0.5' } });
  return { e, up, applies: () => applies, clock };
}

t.test('an EndpointSlice change alone re-targets toServices flows after DNAT', async (t) => {
  const { e, up, applies, clock } = clientEnforcer(t);
  for (const [name, ip] of [['s1', '10.2.0.5'], ['s2', '10.2.0.6']] as const) {
    up({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name, labels: { app: 's' } }, spec: { nodeName: 'node-2', containers: [{ name: 'c', ports: [{ containerPort: 8080 }] }] }, status: { phase: 'Running', podIP: ip } });
  }
  up({ apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 's' }, spec: { clusterIP: '10.96.0.10', selector: { app: 's' }, ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 }] } });
  const slice = (pod: string, ip: string): KubeObject => ({
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { namespace: 'x', name: 's-abc', labels: { 'kubernetes.io/service-name': 's' } },
    addressType: 'IPv4', endpoints: [{ addresses: [ip], conditions: { ready: true }, targetRef: { kind: 'Pod', namespace: 'x', name: pod } }], ports: [{ port: 8080, protocol: 'TCP' }],
  });
  up(slice('s1', '10.2.0.5'));
  up({
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'only-svc' },
    spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'c' } } }], egress: [{ action: 'Allow', toServices: [{ name: 's', namespace: 'x' }] }, { action: 'Drop', to: [{ namespaceSelector: {} }] }] },
  });
  const postDnat = (ip: string) => e.flows().some((f) => f.table === 'AntreaPolicyEgressRule' && f.match.includes(`nw_dst=${ip}`) && f.match.includes('tp_dst=8080'));
  t.ok(postDnat('10.2.0.5'), 'post-DNAT toServices flow for the endpoint s1');
  t.notOk(postDnat('10.2.0.6'));
  await clock.advance(30);
  const before = applies();
  up(slice('s2', '10.2.0.6'));
  await clock.advance(60);
  t.ok(applies() > before, 'the EndpointSlice change was applied to the bridge');
  t.ok(postDnat('10.2.0.6') && !postDnat('10.2.0.5'), 'the flow follows the endpoint to s2');
});

t.test('Service and Pod events that change no rule get no compile and no apply', async (t) => {
  const { e, up, applies, clock } = clientEnforcer(t);
  const server = (labels: Record<string, string>): KubeObject => ({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 's1', labels }, spec: { nodeName: 'node-2', containers: [{ name: 'c', ports: [{ containerPort: 8080 }] }] }, status: { phase: 'Running', podIP: '10.2.0.5' } });
  up(server({ app: 's' }));
  const service = (port: number): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 's' }, spec: { clusterIP: '10.96.0.10', selector: { app: 's' }, ports: [{ port, protocol: 'TCP', targetPort: 8080 }] } });
  up(service(80));
  up({
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'to-web' },
    spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'c' } } }], egress: [{ action: 'Drop', to: [{ podSelector: { matchLabels: { app: 'web' } } }] }] },
  });
  const flows = JSON.stringify(e.flows());
  await clock.advance(30);
  const before = applies();
  up(service(81));
  up(server({ app: 's', other: 'label' }));
  await clock.advance(60);
  t.equal(applies(), before, 'no rule uses Service endpoints and the Pod joined no group: nothing to apply');
  t.equal(JSON.stringify(e.flows()), flows);
  // Once a rule depends on the endpoints, the same kinds of events are compiled and applied.
  up({
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'only-svc' },
    spec: { priority: 2, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'c' } } }], egress: [{ action: 'Allow', toServices: [{ name: 's', namespace: 'x' }] }] },
  });
  await clock.advance(30);
  const withSvc = applies();
  t.ok(withSvc > before, 'the toServices policy was applied');
  up(service(82));
  await clock.advance(60);
  t.ok(applies() > withSvc, 'a Service change is applied once a toServices rule depends on it');
  t.ok(e.flows().some((f) => f.match.includes('nw_dst=10.96.0.10,tp_dst=82')), 'the pre-DNAT flow has the new Service port');
});

t.test('the enforced resourceVersion follows writes to any resource, and only once their flows are applied', async (t) => {
  const lab = await startLab(t, { bookmarkOnChange: true });
  const dir = mkdtempSync(join(tmpdir(), 'enforce-gen-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());
  await lab.core.createNamespace({ body: { metadata: { name: 'x', labels: { ns: 'x' } } } });

  const enforcer = new Enforcer({ nodeName: 'node-1', kubeconfig, ovsRunDir: dir, bridge: 'br-int', log });
  t.teardown(() => enforcer.close());
  await enforcer.startWatch();
  await enforcer.waitSynced();
  // Applies block until the test lets them go, so the window between compile and commit is seen.
  let release: (() => void) | undefined;
  let applying = false;
  enforcer.bindFlows(async () => {
    applying = true;
    await new Promise<void>((r) => (release = r));
    applying = false;
  });
  t.equal(enforcer.status().resourceVersion, undefined, 'nothing reported before the first flows are on the bridge');
  enforcer.flowsConverged();
  const current = async () => BigInt((await lab.core.listNamespace()).metadata!.resourceVersion!);
  const reported = () => (enforcer.status().resourceVersion === undefined ? undefined : BigInt(enforcer.status().resourceVersion!));
  const start = await current();
  await until('the start-up state reported', () => (reported() ?? 0n) >= start);

  // A write that changes no policy input of this node's (a ConfigMap is not watched): the
  // bookmarks still carry every informer past it, and nothing needs applying.
  await lab.core.createNamespacedConfigMap({ namespace: 'x', body: { metadata: { name: 'c' }, data: {} } });
  const afterConfigMap = await current();
  await until('a write to an unwatched resource is reported as enforced', () => (reported() ?? 0n) >= afterConfigMap);
  t.notOk(applying, 'without applying anything');

  // A policy: reported only once its apply is done.
  await lab.net.createNamespacedNetworkPolicy({ namespace: 'x', body: { metadata: { name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } } });
  const afterPolicy = await current();
  await until('the policy is being applied', () => applying);
  await sleep(50);
  const during = reported();
  t.ok(during !== undefined && during >= afterConfigMap && during < afterPolicy, `while its flows are being applied the earlier version stays reported, not the policy's (${during}: ${afterConfigMap} <= it < ${afterPolicy})`);
  release!();
  await until('reported once applied', () => (reported() ?? 0n) >= afterPolicy);
  t.pass(`reported ${reported()} >= ${afterPolicy} once the apply finished`);
});
