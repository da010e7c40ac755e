/**
 * A new Pod's ADD (enforcement/newpods) between real agents' enforcers and the lab API server (the
 * Kubernetes list/watch protocol), each node's realization endpoint served over HTTP on its own
 * loopback address:
 *  - the ADD publishes the Pod's addresses in its status; the node with a Deny naming the Pod's
 *    namespace learns them from that (no kubelet report yet) and confirms it enforces them;
 *  - a node whose agent does not answer gets the Pod guarded from its span Pods (drop flows both
 *    ways on the Pod's node) until it confirms; then the guard is lifted;
 *  - a Pod that no rule anywhere names as a peer asks nobody;
 *  - malformed realization questions get a 400 that names what is wrong.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import type { PodAttachment } from '../../daemon/node/attachment.js';
import { startEndpoint, type HealthServer } from '../../daemon/health.js';
import { POD_ADDRESSES_CONDITION, podAddresses } from '../../daemon/policy/cluster.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { startLab } from './apiserver-helpers.js';

const log = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await sleep(20);
  }
}

const attachment = (namespace: string, name: string, ip: string): PodAttachment => ({
  containerId: `c-${name}`, podNamespace: namespace, podName: name, netns: '/proc/self/ns/net', ifName: 'eth0', hostVeth: `veth-${name}`, ofport: 7, mac: '2a:00:00:00:00:07', ips: [ip],
});

t.test('new Pods: published, confirmed by the span, guarded from a node that does not answer', async (t) => {
  const lab = await startLab(t);
  const dir = mkdtempSync(join(tmpdir(), 'newpods-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(kubeconfig, lab.kc.exportConfig());

  // A free port, then the same port on every node's address (as the DaemonSet's one setting).
  const probe = await startEndpoint('probe', { host: '127.0.0.2', port: 0 }, log, {});
  const port = probe.port;
  await probe.close();

  for (const [name, ip] of [['node-1', '127.0.0.1'], ['node-2', '127.0.0.2'], ['node-3', '127.0.0.3']] as const) {
    await lab.core.createNode({ body: { metadata: { name }, status: { addresses: [{ type: 'InternalIP', address: ip }] } } });
  }
  for (const n of ['x', 'y', 'z']) await lab.core.createNamespace({ body: { metadata: { name: n, labels: { ns: n } } } });
  const running = async (ns: string, name: string, node: string, ip?: string) => {
    await lab.core.createNamespacedPod({ namespace: ns, body: { metadata: { name, labels: { app: name } }, spec: { nodeName: node, containers: [{ name: 'c', image: 'i' }] } } });
    if (ip) await lab.core.replaceNamespacedPodStatus({ namespace: ns, name, body: { metadata: { name, namespace: ns }, status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } } });
  };
  await running('y', 'c', 'node-2', '10.2.0.5');
  await running('y', 'd', 'node-3', '10.3.0.5');
  await running('x', 'e', 'node-2', '10.2.0.6');
  // Every Pod of y denies what comes from namespace z (an admin guardrail).
  await lab.custom.createClusterCustomObject({
    group: 'policy.networking.k8s.io', version: 'v1alpha1', plural: 'adminnetworkpolicies',
    body: {
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'y-deny-z' },
      spec: { priority: 10, subject: { namespaces: { matchLabels: { ns: 'y' } } }, ingress: [{ name: 'deny-z', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'z' } } }] }] },
    },
  });

  const start = async (node: string, newPods?: { realizationPort: number; confirmWithinMs: number }) => {
    const e = new Enforcer({ nodeName: node, kubeconfig, ovsRunDir: dir, bridge: 'br-int', log, ...(newPods ? { newPods } : {}) });
    t.teardown(() => e.close());
    let applies = 0;
    e.bindFlows(async () => {
      applies++;
    });
    await e.startWatch({ retryMs: 100, maxRetryMs: 300 });
    await e.waitSynced();
    e.flowsConverged();
    return { e, applies: () => applies };
  };
  const node2 = await start('node-2');
  const node1 = await start('node-1', { realizationPort: port, confirmWithinMs: 1500 });
  const servers: HealthServer[] = [];
  t.teardown(async () => {
    for (const s of servers) await s.close();
  });
  const serve = async (host: string, e: Enforcer) => {
    const s = await startEndpoint('realization', { host, port }, log, { '/realized': (q) => e.realizedAnswer(q) });
    servers.push(s);
    return s;
  };
  await serve('127.0.0.2', node2.e);

  const created = async (ns: string, name: string) => {
    await running(ns, name, 'node-1');
    await until(`node-1 sees ${ns}/${name}`, async () => {
      try {
        await lab.core.readNamespacedPod({ namespace: ns, name });
        return true;
      } catch {
        return false;
      }
    });
  };
  const add = async (e: Enforcer, pod: PodAttachment) => {
    await e.podAttaching(pod);
    await e.podStarting(pod);
  };
  const guardFlows = (e: Enforcer) => e.flows().filter((f) => f.priority === 64800);

  await t.test('the node that denies the Pod knows it before the ADD answers; one that does not answer is guarded', async (t) => {
    await created('z', 'new1');
    const verdictOnNode2 = () => node2.e.engine.evaluate({ from: 'ip:10.1.0.21', to: 'y/c', port: 80, protocol: 'TCP' }).verdict;
    t.equal(verdictOnNode2(), 'allow', 'before: node-2 judges the address as unknown, which the Deny does not match');
    const t0 = Date.now();
    await add(node1.e, attachment('z', 'new1', '10.1.0.21'));
    t.ok(Date.now() - t0 >= 1400, 'the ADD waited for node-3 up to the bound');
    t.equal(verdictOnNode2(), 'drop', 'once the ADD answered, node-2 drops the Pod\'s traffic to y/c (the kubelet has reported nothing)');
    t.ok(node2.e.podRealized({ namespace: 'z', name: 'new1', ips: ['10.1.0.21'] }), 'and its flows for it are committed');
    const api = (await lab.core.readNamespacedPod({ namespace: 'z', name: 'new1' })) as unknown as KubeObject;
    t.same(podAddresses(api), ['10.1.0.21'], 'the API Pod carries the published address');
    t.match(api.status?.conditions, [{ type: POD_ADDRESSES_CONDITION, status: 'True', message: '10.1.0.21' }]);
    t.match(node1.e.status().newPods!.guardedPods, [{ pod: 'z/new1', nodes: ['node-3'] }], 'node-3 (y/d, no agent answering) is guarded; node-2 confirmed');
    t.same(
      guardFlows(node1.e).map((f) => `${f.table} ${f.match} ${f.actions}`).sort(),
      [
        'AntreaPolicyEgressRule ct_state=+new+trk,ip,nw_src=10.1.0.21,nw_dst=10.3.0.5 drop',
        'AntreaPolicyIngressRule ct_state=+new+trk,ip,nw_src=10.3.0.5,nw_dst=10.1.0.21 drop',
      ],
      'new connections between the Pod and y/d are dropped both ways; nothing else (y/c and x/e are not guarded)',
    );
  });

  await t.test('the guard is lifted once the node confirms; later Pods start without one', async (t) => {
    // node-3's agent comes up.
    const node3 = await start('node-3');
    await serve('127.0.0.3', node3.e);
    await until('the guard is lifted once node-3 confirms', () => node1.e.status().newPods!.guardedPods.length === 0);
    t.same(guardFlows(node1.e), [], 'the guard flows are gone');
    t.equal(node3.e.engine.evaluate({ from: 'ip:10.1.0.21', to: 'y/d', port: 80, protocol: 'TCP' }).verdict, 'drop', 'and node-3 drops the Pod itself');
    await created('z', 'new2');
    await add(node1.e, attachment('z', 'new2', '10.1.0.22'));
    t.same(node1.e.status().newPods!.guardedPods, [], 'a later Pod: both nodes confirm, nothing is guarded');
    t.same(guardFlows(node1.e), [], 'no guard flows');
    t.match(node1.e.status().newPods, { guarded: 1, lifted: 1, publishFailures: 0 });
  });

  await t.test('a Pod no rule names as a peer asks nobody', async (t) => {
    await created('x', 'new3');
    const before = node1.e.status().newPods!.admitted;
    const t0 = Date.now();
    await add(node1.e, attachment('x', 'new3', '10.1.0.23'));
    t.equal(node1.e.status().newPods!.admitted, before + 1, 'admitted');
    t.same(node1.e.engine.podSpan('x', 'new3'), new Map(), 'its span is empty (no rule names namespace x or its labels)');
    t.ok(Date.now() - t0 < 1500, 'and the ADD did not wait for the bound');
  });

  await t.test('malformed questions are refused with the reason', async (t) => {
    const ask = (q: string) => node2.e.realizedAnswer(new URLSearchParams(q));
    t.match(await ask('pod=z&ips=10.0.0.1'), { code: 400, body: { error: /pod "z": use <namespace>\/<name>/ } });
    t.match(await ask('pod=z/a&ips='), { code: 400, body: { error: /at least one address/ } });
    t.match(await ask('pod=z/a&ips=10.0.0.300'), { code: 400, body: { error: /"10.0.0.300" is not an IP address/ } });
    t.match(await ask('pod=z/a&ips=10.0.0.1&waitMs=-1'), { code: 400, body: { error: /waitMs "-1"/ } });
    t.match(await ask('pod=z/unknown&ips=10.0.0.1&waitMs=50'), { code: 200, body: { realized: false } }, 'an unknown Pod: no, after the wait');
  });
});
