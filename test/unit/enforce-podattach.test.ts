/**
 * CNI ADD with enforcement: the Pod's policy flows exist when its forwarding flows are installed
 * (same flow sync), even before the API shows the Pod's IP; a rolled-back ADD removes what the
 * engine learned; DEL gives the engine the API's view back.
 */
import t from 'tap';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import type { PodRequest } from '../../daemon/cni/server.js';
import type { Flow } from '../../daemon/flows/flow.js';
import { podFlows } from '../../daemon/flows/pipeline.js';
import { type AttachDeps, PodAttacher } from '../../daemon/cni/attacher.js';
import type { PodAttachment } from '../../daemon/node/attachment.js';
import { PodRegistry } from '../../daemon/node/pod-registry.js';

const NETNS = '/proc/self/ns/net';
const log = pino({ level: 'silent' });

function setup(failSync = false) {
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } } });
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } } });
  // The API knows the Pod, without an IP yet (the kubelet posts it after CNI ADD).
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'p1', labels: { app: 'p' } }, spec: { nodeName: 'node-1' }, status: { phase: 'Pending' } } });
  const pods = new PodRegistry();
  const syncs: Flow[][] = [];
  const deps: AttachDeps = {
    datapath: 'system',
    bridge: 'br-int',
    ovs: { addPodPort: async () => 7, addEgressPort: async () => 8, freeOfport: async () => 7, removePort: async () => undefined, listPodPorts: async () => [], egressPortOfports: async () => new Map() },
    flowProgrammer: { installedCookies: async () => [] },
    hostnet: {
      movePodRoutes: async () => undefined, restorePodRoutes: async () => undefined, checkPodRoutes: async () => [],
      isolateHostVeth: async () => undefined, releaseHostVeth: async () => undefined, isolatedVeths: async () => [],
    },
    findHostVeth: async () => ({ hostIfName: 'veth1', podMac: '2a:00:00:00:00:01' }),
    podInterfaceIPv4: async () => [],
    disablePodTxOffload: async () => undefined,
    pods,
    syncFlows: async () => {
      // What one bundle would carry: Pod flows + policy flows, computed together.
      syncs.push([...pods.list().flatMap((p) => podFlows(p)), ...enforcer.flows()]);
      if (failSync && pods.size > 0) throw new Error('bundle refused');
    },
    isReady: () => true,
    beforePodFlows: (p) => enforcer.podAttaching(p),
    podFlowsUndone: (p) => enforcer.podDetached(p),
    onPodDetached: (p) => enforcer.podDetached(p),
    log,
  };
  const req: PodRequest = {
    containerId: 'c1', netns: NETNS, ifName: 'eth0', podNamespace: 'x', podName: 'p1', cniVersion: '1.1.0', networkName: 'n', config: {},
    prevResult: { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', sandbox: NETNS }], ips: [{ address: '10.1.0.11/32', interface: 0 }] },
  };
  return { enforcer, attacher: new PodAttacher(deps), syncs, req };
}

const isolationOf = (flows: Flow[], ip: string) => flows.some((f) => f.table === 'IngressDefaultRule' && f.match.includes(`nw_dst=${ip}`) && f.actions === 'drop');
const forwardingOf = (flows: Flow[], ip: string) => flows.some((f) => f.table === 'L3Forwarding' && f.match.includes(`nw_dst=${ip}`));

t.test('ADD: the first bundle with the Pod forwarding also isolates it', async (t) => {
  const { enforcer, attacher, syncs, req } = setup();
  t.teardown(() => enforcer.close());
  await attacher.add(req);
  const first = syncs.find((s) => forwardingOf(s, '10.1.0.11'));
  t.ok(first, 'a sync installed the forwarding flow');
  t.ok(isolationOf(first!, '10.1.0.11'), 'the same sync carries the Pod\'s isolation drop (prevResult IP, before the API has it)');
  t.equal(enforcer.engine.evaluate({ from: 'ip:10.9.9.9', to: 'x/p1', port: 80, protocol: 'TCP' }).verdict, 'drop', 'the engine judges the Pod by its CNI IP');
  await attacher.del(req);
  t.notOk(isolationOf(enforcer.flows(), '10.1.0.11'), 'after DEL the CNI IP is no longer isolated (the API Pod has no IP)');
  t.same(enforcer.flows().filter((f) => f.table === 'IngressDefaultRule' && f.actions === 'drop'), [], 'and a Pod without an address gets no flows (no made-up address on the bridge)');
});

t.test('a rolled-back ADD leaves nothing in the engine', async (t) => {
  const { enforcer, attacher, req } = setup(true);
  t.teardown(() => enforcer.close());
  await t.rejects(attacher.add(req), /install-flows/);
  t.notOk(isolationOf(enforcer.flows(), '10.1.0.11'), 'no policy flows for the IP of the failed ADD');
});

t.test('an IPv6-only Pod\'s IPv4 egress address is a source of its egress only: isolation, ipBlock rules, nothing else', async (t) => {
  const enforcer = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log });
  t.teardown(() => enforcer.close());
  enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } } });
  const egressV4 = { ifName: 'v4if0', hostVeth: 'veth0badc0de', ofport: 8, mac: '2a:00:00:00:00:04', ip: '169.254.172.9' };
  const pod = (name: string, ip: string, egress?: typeof egressV4): PodAttachment => ({
    containerId: name, podNamespace: 'x', podName: name, netns: NETNS, ifName: 'eth0', hostVeth: `eni-${name}`, ofport: 7, mac: '2a:00:00:00:00:01', ips: [ip], ...(egress ? { egressV4: egress } : {}),
  });
  for (const name of ['a', 'b']) enforcer.onWatchEvent({ type: 'upsert', object: { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name, labels: { app: name } }, spec: { nodeName: 'node-1' }, status: { phase: 'Running' } } });
  await enforcer.podAttaching(pod('a', 'fd00:10:1::a', egressV4));
  await enforcer.podAttaching(pod('b', 'fd00:10:1::b'));
  const mentions = (flows: Flow[], ip: string) => flows.filter((f) => f.match.includes(ip));
  t.same(mentions(enforcer.flows(), '169.254.172.9'), [], 'no policy: no flow for the egress address');

  // Egress isolation of x/a (and x/b): the egress address is dropped like the Pod's own.
  const isolate = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny-egress' }, spec: { podSelector: {}, policyTypes: ['Egress'] } };
  enforcer.onWatchEvent({ type: 'upsert', object: isolate });
  let flows = mentions(enforcer.flows(), '169.254.172.9');
  t.ok(flows.some((f) => f.table === 'EgressDefaultRule' && f.match.startsWith('ip,nw_src=169.254.172.9,') && f.actions === 'drop'), 'isolated: its IPv4 egress dropped in EgressDefaultRule');
  t.ok(flows.every((f) => f.table === 'EgressDefaultRule'), 'and nothing else');

  // An ipBlock allowing one IPv4 destination: the egress address is the rule's source for x/a only.
  const allow = {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'allow-one' },
    spec: { podSelector: { matchLabels: { app: 'a' } }, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '203.0.113.10/32' } }] }] },
  };
  enforcer.onWatchEvent({ type: 'upsert', object: allow });
  flows = mentions(enforcer.flows(), '169.254.172.9');
  t.ok(flows.some((f) => f.table === 'EgressRule' && f.match === 'ip,nw_src=169.254.172.9' && f.actions.startsWith('conjunction(')), 'the target clause of the ipBlock rule');
  t.ok(flows.every((f) => f.table.startsWith('Egress') && f.match.includes('nw_src=169.254.172.9')), 'only ever as an egress source');
  t.ok(enforcer.flows().some((f) => f.table === 'EgressRule' && f.match.startsWith('ip,nw_dst=203.0.113.10') && f.actions.startsWith('conjunction(')), 'the IPv4 peer clause exists');
  // A rule whose peers are Pods never gains the address as a peer.
  const fromA = {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'ingress-from-a' },
    spec: { podSelector: { matchLabels: { app: 'b' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ podSelector: { matchLabels: { app: 'a' } } }] }] },
  };
  enforcer.onWatchEvent({ type: 'upsert', object: fromA });
  t.notOk(enforcer.flows().some((f) => f.table.startsWith('Ingress') && f.match.includes('169.254.172.9')), 'never an ingress peer or target');

  // DEL: the egress address leaves every flow.
  enforcer.podDetached(pod('a', 'fd00:10:1::a', egressV4));
  t.same(mentions(enforcer.flows(), '169.254.172.9'), [], 'after DEL nothing mentions it');
  // A restarted agent learns it from the attachment again.
  enforcer.localPodsAtStart([pod('a', 'fd00:10:1::a', egressV4)]);
  t.ok(mentions(enforcer.flows(), '169.254.172.9').some((f) => f.table === 'EgressDefaultRule'), 'back after start-up');
});
