/**
 * PodAttacher against an in-memory model of OVS + host networking: the order of the ADD steps,
 * the reverse-order rollback after a failure at each step, idempotency, DEL and GC. (The same
 * behaviour against the real system is in test/lab/datapath-agent.test.ts.)
 */
import t from 'tap';
import { pino } from 'pino';
import type { PodRequest } from '../../daemon/cni/server.js';
import type { EgressPortIds, PodPortIds, PodPortRecord } from '../../daemon/ovs/bridge.js';
import { podFlows } from '../../daemon/flows/pipeline.js';
import { ATTACH_STEPS, type AttachDeps, type AttachStep, PodAttacher } from '../../daemon/cni/attacher.js';
import { PodRegistry } from '../../daemon/node/pod-registry.js';

const NETNS = '/proc/self/ns/net'; // any path that exists

class World {
  ports = new Map<string, { ofport: number; ids: PodPortIds | EgressPortIds }>();
  routes = new Map<string, string>(); // ip -> dev
  isolated = new Set<string>();
  txOff = new Set<string>();
  installed = new Set<string>();
  calls: string[] = [];
  /** The attachments each flow sync installed flows for (containerId@ofport). */
  flowsAt: string[] = [];
  nextOfport = 1;
  failOn?: string;
  pods = new PodRegistry();
  /** The IPv4 addresses of the Pod's v4if0 (undefined: the Pod has no v4if0). */
  egressV4?: string[];

  private call(name: string) {
    this.calls.push(name);
    if (this.failOn === name) throw new Error(`${name} exploded`);
  }

  /** A port by that name (or the requested OpenFlow port number when free, else the next). */
  addPort(name: string, ids: PodPortIds | EgressPortIds, ofportRequest: number | undefined): number {
    const taken = new Set([...this.ports.values()].map((p) => p.ofport));
    const ofport = this.ports.get(name)?.ofport ?? (ofportRequest !== undefined && !taken.has(ofportRequest) ? ofportRequest : this.nextOfport++);
    this.ports.set(name, { ofport, ids });
    return ofport;
  }

  deps(over: Partial<AttachDeps> = {}): AttachDeps {
    const w = this;
    return {
      datapath: 'netdev',
      bridge: 'br-int',
      ovs: {
        async addPodPort(name, ids, ofportRequest) {
          w.call('addPodPort');
          return w.addPort(name, ids, ofportRequest);
        },
        async addEgressPort(name, ids, ofportRequest) {
          w.call('addEgressPort');
          return w.addPort(name, ids, ofportRequest);
        },
        async egressPortOfports() {
          return new Map([...w.ports].filter(([, p]) => p.ids['sluice-type'] === 'container-egress-v4').map(([name, p]) => [name, p.ofport]));
        },
        async freeOfport() {
          return Math.max(0, ...[...w.ports.values()].map((p) => p.ofport)) + 1;
        },
        async removePort(name) {
          w.call('removePort');
          w.ports.delete(name);
        },
        async listPodPorts(): Promise<PodPortRecord[]> {
          return [...w.ports].flatMap(([name, p]) => (p.ids['sluice-type'] === 'container' ? [{ name, ofport: p.ofport, ids: p.ids }] : []));
        },
      },
      flowProgrammer: {
        async installedCookies() {
          return [...w.installed];
        },
      },
      hostnet: {
        async movePodRoutes(ips) {
          w.call('movePodRoutes');
          for (const ip of ips) w.routes.set(ip, 'antrea-gw0');
        },
        async restorePodRoutes(ips, veth) {
          w.call('restorePodRoutes');
          for (const ip of ips) w.routes.set(ip, veth);
        },
        async checkPodRoutes(ips) {
          return ips.filter((ip) => w.routes.get(ip) !== 'antrea-gw0').map((ip) => `host route for ${ip} does not point at antrea-gw0`);
        },
        async isolateHostVeth(v) {
          w.call('isolateHostVeth');
          w.isolated.add(v);
        },
        async releaseHostVeth(v) {
          w.call('releaseHostVeth');
          w.isolated.delete(v);
        },
        async isolatedVeths() {
          return [...w.isolated];
        },
      },
      async findHostVeth(_ns, ifName) {
        if (ifName === 'v4if0') {
          if (!w.egressV4) throw new Error('Cannot find device "v4if0"');
          return { hostIfName: 'veth0badc0de', podMac: '2A:00:00:00:00:04' };
        }
        return { hostIfName: 'eni1', podMac: '2A:00:00:00:00:01' };
      },
      async podInterfaceIPv4(_ns, ifName) {
        return ifName === 'v4if0' ? (w.egressV4 ?? []) : [];
      },
      async disablePodTxOffload(_ns, ifName) {
        w.call('disablePodTxOffload');
        w.txOff.add(ifName);
      },
      pods: w.pods,
      async syncFlows() {
        w.call('syncFlows');
        w.flowsAt.push(w.pods.list().map((p) => `${p.containerId}@${p.ofport}`).join(','));
        w.installed = new Set(w.pods.list().flatMap((p) => podFlows(p).map((f) => f.cookie)));
      },
      isReady: () => true,
      log: pino({ level: 'silent' }),
      ...over,
    };
  }
}

const req = (over: Partial<PodRequest> = {}): PodRequest => ({
  containerId: 'c1',
  netns: NETNS,
  ifName: 'eth0',
  podNamespace: 'default',
  podName: 'p1',
  cniVersion: '1.1.0',
  networkName: 'n',
  config: {},
  prevResult: { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', sandbox: NETNS }], ips: [{ address: '10.1.0.11/32', interface: 0 }] },
  ...over,
});

t.test('ADD runs the steps in order and records everything in OVSDB', async (t) => {
  const w = new World();
  w.routes.set('10.1.0.11', 'eni1');
  const events: string[] = [];
  await new PodAttacher(w.deps({ onPodAttached: (p) => events.push(p.containerId) })).add(req());
  t.same(w.calls.filter((c) => c !== 'syncFlows'), ['isolateHostVeth', 'disablePodTxOffload', 'addPodPort', 'movePodRoutes'], 'the veth isolated, then its port; routes last');
  t.ok(w.calls.indexOf('syncFlows') < w.calls.indexOf('movePodRoutes'), 'the flows are in before the routes move');
  t.same(w.flowsAt, ['c1@1'], 'the flows are for the port number OVS gave');
  t.equal(w.ports.get('eni1')?.ofport, 1);
  t.same(w.ports.get('eni1')?.ids, {
    'sluice-type': 'container', 'container-id': 'c1', 'pod-namespace': 'default', 'pod-name': 'p1',
    'ip-address': '10.1.0.11', 'attached-mac': '2a:00:00:00:00:01', 'net-ns': NETNS, 'if-name': 'eth0',
  });
  t.equal(w.routes.get('10.1.0.11'), 'antrea-gw0');
  t.same(events, ['c1'], 'the policy side hears about the Pod');
});

t.test('a repeated ADD changes nothing; a damaged attachment is repaired', async (t) => {
  const w = new World();
  const a = new PodAttacher(w.deps());
  await a.add(req());
  w.calls = [];
  await a.add(req());
  t.same(w.calls, [], 'no step ran again');
  w.routes.set('10.1.0.11', 'eni1');
  await t.rejects(a.check(req()), { code: 102, message: /host route for 10.1.0.11 does not point at antrea-gw0/ });
  await a.add(req());
  t.equal(w.routes.get('10.1.0.11'), 'antrea-gw0', 'repaired');
  await a.check(req());
  w.isolated.clear();
  await t.rejects(a.check(req()), { code: 102, message: /host veth eni1 is not isolated/ });
  await a.add(req());
  await a.check(req());
});

for (const step of ATTACH_STEPS) {
  t.test(`a failure after ${step} is rolled back completely`, async (t) => {
    const w = new World();
    w.routes.set('10.1.0.11', 'eni1');
    const a = new PodAttacher(w.deps({ failAfter: step as AttachStep }));
    await t.rejects(a.add(req()), { code: 100, message: new RegExp(`failed at step ${step}`) });
    t.same([...w.ports.keys()], [], 'no port');
    t.equal(w.routes.get('10.1.0.11'), 'eni1', 'route on the veth');
    t.same([...w.isolated], [], 'veth not isolated');
    t.same([...w.installed], [], 'no flows');
    t.same(w.pods.list().map((p) => p.containerId), [], 'not registered');
  });
}

t.test('an error inside a step is rolled back in reverse order', async (t) => {
  const w = new World();
  w.routes.set('10.1.0.11', 'eni1');
  w.failOn = 'syncFlows';
  const a = new PodAttacher(w.deps());
  const err = (await a.add(req()).then(
    () => ({ code: 0, message: "no error", details: "" }),
    (e: unknown) => e as { code: number; message: string; details: string },
  ));
  t.match(err, { code: 100, message: /failed at step install-flows: syncFlows exploded/ });
  t.same(w.calls.filter((c) => c !== 'syncFlows'), ['isolateHostVeth', 'disablePodTxOffload', 'addPodPort', 'removePort', 'releaseHostVeth'], 'the port went in meanwhile; undone in reverse order');
  t.equal(w.calls.at(-1), 'syncFlows', 'the flows are undone last (they were the first step begun)');
  t.equal(w.routes.get('10.1.0.11'), 'eni1', 'the routes never moved');
  t.match(err.details, /rollback incomplete: undo install-flows: syncFlows exploded/, 'a failing undo is reported, the others still run');
  t.same([...w.ports.keys()], []);
});

t.test("ADD: the Pod's flows go in while its veth is being isolated; the port only once it is", async (t) => {
  const w = new World();
  w.routes.set('10.1.0.11', 'eni1');
  let isolated!: () => void;
  const gate = new Promise<void>((r) => (isolated = r));
  const d = w.deps();
  const isolate = d.hostnet.isolateHostVeth;
  d.hostnet.isolateHostVeth = async (v) => {
    await gate;
    await isolate(v);
  };
  const adding = new PodAttacher(d).add(req());
  await new Promise((r) => setImmediate(r));
  t.same(w.flowsAt, ['c1@1'], 'flows installed for the requested port while the isolation is pending');
  t.notOk(w.calls.includes('addPodPort'), 'no port before the veth is isolated');
  t.notOk(w.calls.includes('movePodRoutes'), 'routes not moved');
  isolated();
  await adding;
  t.ok(w.calls.indexOf('isolateHostVeth') < w.calls.indexOf('addPodPort'), 'isolated, then attached');
  t.equal(w.calls.at(-1), 'movePodRoutes', 'routes last');
  t.equal(w.routes.get('10.1.0.11'), 'antrea-gw0');
});

t.test('ADD: a failed isolation rolls back the flows that went in meanwhile, and adds no port', async (t) => {
  const w = new World();
  w.routes.set('10.1.0.11', 'eni1');
  w.failOn = 'isolateHostVeth';
  const undone: string[] = [];
  await t.rejects(new PodAttacher(w.deps({ podFlowsUndone: (p) => undone.push(p.containerId) })).add(req()), { code: 100, message: /failed at step isolate-veth: isolateHostVeth exploded/ });
  t.notOk(w.calls.includes('addPodPort'), 'no port');
  t.same([...w.installed], [], 'no flows');
  t.same(w.pods.list().map((p) => p.containerId), [], 'not registered');
  t.same(undone, ['c1'], 'the policy side forgot the Pod');
  t.same([...w.isolated], [], 'veth not isolated');
  t.equal(w.routes.get('10.1.0.11'), 'eni1', 'route on the veth');
});

t.test('DEL: unknown is fine; otherwise flows, port, isolation, routes; GC keeps only valid attachments', async (t) => {
  const w = new World();
  const a = new PodAttacher(w.deps());
  await a.del(req({ containerId: 'never' }));
  await a.add(req());
  w.calls = [];
  await a.del(req());
  t.same(w.calls, ['syncFlows', 'removePort', 'releaseHostVeth', 'restorePodRoutes']);
  t.equal(w.routes.get('10.1.0.11'), 'eni1');
  await a.del(req());
  await a.add(req());
  await a.gc([{ containerId: 'other', ifName: 'eth0' }], { networkName: 'n' });
  t.same([...w.ports.keys()], [], 'GC removed the attachment missing from valid-attachments');
  await a.add(req());
  await a.gc([{ containerId: 'c1', ifName: 'eth0' }], { networkName: 'n' });
  t.same([...w.ports.keys()], ['eni1'], 'GC keeps a valid attachment');
});

t.test('bad input', async (t) => {
  const w = new World();
  const a = new PodAttacher(w.deps());
  await t.rejects(a.add(req({ netns: '/nonexistent/ns' })), { code: 4, message: 'CNI_NETNS /nonexistent/ns does not exist' });
  await t.rejects(new PodAttacher(w.deps({ findHostVeth: async () => Promise.reject(new Error('no such device')) })).add(req()), {
    code: 4,
    message: 'CNI_IFNAME eth0: no such device',
  });
  await t.rejects(a.add(req({ prevResult: { cniVersion: '1.1.0', ips: [] } })), { code: 7, message: /prevResult has no IP address for interface eth0/ });
  await t.rejects(a.add(req({ prevResult: { cniVersion: '1.1.0', ips: [{ address: '10.1.0.5/32' }, { address: 'fe80::1/64' }] } })), { code: 7, message: 'prevResult, interface eth0: "fe80::1" is a link-local address, not a Pod address' });
  await t.rejects(new PodAttacher(w.deps({ isReady: () => false })).add(req()), { code: 11 });
  await t.rejects(new PodAttacher(w.deps({ isReady: () => false })).status(), { code: 50 });
  t.same(w.calls, [], 'nothing was touched');
});

t.test('ADD when OVS gives another port number than requested: the flows follow the port', async (t) => {
  const w = new World();
  w.ports.set('not-a-pod', { ofport: 1, ids: {} as PodPortIds }); // an interface the agent does not attach
  w.nextOfport = 7;
  const a = new PodAttacher(w.deps());
  await a.add(req());
  const pod = w.pods.get('c1')!;
  t.equal(pod.ofport, 7);
  t.equal(w.flowsAt.at(-1), 'c1@7', 'the last flow sync is for the number OVS assigned');
  t.equal(w.flowsAt.length, 2, 'a second sync after the port moved');
  t.same(await a.problems(pod), [], 'the attachment is complete');
});

t.test('concurrent ADDs request different port numbers; a freed number is not handed out again at once', async (t) => {
  const w = new World();
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const d = w.deps({
    async findHostVeth(_ns, ifName) {
      return { hostIfName: `veth-${ifName}`, podMac: ifName === 'eth0' ? '2A:00:00:00:00:01' : '2A:00:00:00:00:02' };
    },
    // The first ADD has requested its number but is not yet among the attached Pods.
    async beforePodFlows(pod) {
      if (pod.containerId === 'c1') await opened;
    },
  });
  const second = req({ containerId: 'c2', ifName: 'eth1', prevResult: { cniVersion: '1.1.0', interfaces: [{ name: 'eth1', sandbox: NETNS }], ips: [{ address: '10.1.0.12/32', interface: 0 }] } });
  const a = new PodAttacher(d);
  const one = a.add(req());
  await new Promise((r) => setImmediate(r));
  t.notOk(w.pods.has('c1'), 'the first ADD is still installing its flows');
  const two = a.add(second);
  await two;
  open();
  await one;
  t.same([w.ports.get('veth-eth0')?.ofport, w.ports.get('veth-eth1')?.ofport], [1, 2]);
  t.same([w.pods.get('c1')?.ofport, w.pods.get('c2')?.ofport], [1, 2]);
  t.equal(w.calls.filter((c) => c === 'syncFlows').length, 2, 'one flow sync per ADD: no port moved');

  await a.del(req());
  await a.add(req({ containerId: 'c3' }));
  t.equal(w.pods.get('c3')?.ofport, 3, 'the number c1 freed is not the next one handed out');
});

t.test('adopting a running Pod: flows first (for the requested port), then port, isolation, routes last', async (t) => {
  const w = new World();
  w.routes.set('10.1.0.11', 'eni1');
  const events: string[] = [];
  const pod = await new PodAttacher(w.deps({ onPodAttached: (p) => events.push(p.containerId) })).adopt(req());
  t.same(w.calls, ['syncFlows', 'addPodPort', 'disablePodTxOffload', 'isolateHostVeth', 'movePodRoutes']);
  t.same(w.flowsAt, ['c1@1'], 'the flows were installed for the port number OVS then gave');
  t.equal(pod.ofport, 1);
  t.equal(w.ports.get('eni1')?.ofport, 1);
  t.equal(w.routes.get('10.1.0.11'), 'antrea-gw0');
  t.ok(w.isolated.has('eni1'));
  t.same(events, ['c1']);
  t.same(await new PodAttacher(w.deps()).problems(pod), [], 'the adopted attachment is complete');
});

t.test('adopting on the kernel datapath: no veth isolation, same order otherwise', async (t) => {
  const w = new World();
  await new PodAttacher(w.deps({ datapath: 'system' })).adopt(req());
  t.same(w.calls, ['syncFlows', 'addPodPort', 'movePodRoutes']);
});

t.test('adopting when OVS gives another port number: the flows follow the port', async (t) => {
  const w = new World();
  const d = w.deps();
  d.ovs.freeOfport = async () => 5;
  w.ports.set('other', { ofport: 5, ids: {} as PodPortIds }); // taken meanwhile
  w.nextOfport = 6;
  const pod = await new PodAttacher(d).adopt(req());
  t.equal(pod.ofport, 6);
  t.same(w.flowsAt, ['c1@5', 'c1@6'], 'flows re-synced for the port OVS assigned');
});

t.test('a failed adoption rolls back every step in reverse order and leaves the Pod as it was', async (t) => {
  for (const failOn of ['addPodPort', 'isolateHostVeth', 'movePodRoutes']) {
    const w = new World();
    w.routes.set('10.1.0.11', 'eni1');
    w.failOn = failOn;
    const undone: string[] = [];
    await t.rejects(new PodAttacher(w.deps({ podFlowsUndone: (p) => undone.push(p.containerId) })).adopt(req()), new RegExp(`failed at step .*${failOn} exploded`), `fails at ${failOn}`);
    t.equal(w.pods.size, 0, `${failOn}: not registered`);
    t.equal(w.ports.size, 0, `${failOn}: no port left`);
    t.equal(w.isolated.size, 0, `${failOn}: veth not isolated`);
    t.equal(w.routes.get('10.1.0.11'), 'eni1', `${failOn}: route still on the Pod's veth`);
    t.equal(w.installed.size, 0, `${failOn}: no flows left`);
    t.same(undone, ['c1'], `${failOn}: the policy side forgot the Pod`);
  }
});

t.test('adoption refuses what it cannot do, naming it', async (t) => {
  const w = new World();
  const a = new PodAttacher(w.deps());
  await t.rejects(a.adopt(req({ netns: '/nonexistent/netns' })), /network namespace \/nonexistent\/netns does not exist/);
  await t.rejects(a.adopt(req({ prevResult: { cniVersion: '1.1.0', interfaces: [], ips: [] } })), /the cached CNI result has no IP address for interface eth0/);
  await a.add(req());
  t.equal((await a.adopt(req())).containerId, 'c1', 'an attached container is returned as is');
  await t.rejects(a.adopt(req({ containerId: 'c2' })), /already attached for container c1/);
  t.same(await new PodAttacher(w.deps({ isReady: () => false })).adopt(req()).catch((e: Error) => e.message), 'sluice-agent is not ready yet');
});

t.test('IPv6-only and dual-stack Pods: every address attached, each with its family\'s flows, CHECK and DEL over both', async (t) => {
  for (const [what, addresses] of [['IPv6-only', ['fd00:10::5/128']], ['dual-stack', ['10.1.0.11/32', 'fd00:10:0::5/128']]] as const) {
    const w = new World();
    const a = new PodAttacher(w.deps());
    const prevResult = { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', sandbox: NETNS }], ips: addresses.map((address) => ({ address, interface: 0 })) };
    const r = req({ prevResult });
    await a.add(r);
    const pod = w.pods.get('c1')!;
    const ips = addresses.map((x) => x.split('/')[0]!.replace('fd00:10:0::5', 'fd00:10::5')).sort();
    t.same(pod.ips, ips, `${what}: every address, IPv6 canonical`);
    t.same([...w.routes.keys()].sort(), ips, `${what}: every address's host route moved`);
    t.ok([...w.routes.values()].every((dev) => dev === 'antrea-gw0'));
    t.equal(w.ports.get('eni1')!.ids['ip-address'], ips.join(','), `${what}: OVSDB records both`);
    const flows = podFlows(pod);
    t.ok(flows.some((f) => f.match === 'ipv6,ipv6_dst=fd00:10::5'), `${what}: delivery to the IPv6 address`);
    t.ok(flows.some((f) => f.match.startsWith('icmp6,icmp_type=135') && f.match.includes('ipv6_src=fd00:10::5')), `${what}: its Neighbour Solicitations pass`);
    t.equal(flows.some((f) => f.match.startsWith('arp')), what === 'dual-stack', `${what}: ARP only with an IPv4 address`);
    t.ok(flows.every((f) => w.installed.has(f.cookie)), `${what}: installed`);
    await a.check(r);
    w.routes.set('fd00:10::5', 'eni1');
    await t.rejects(a.check(r), /host route for fd00:10::5 does not point at antrea-gw0/, `${what}: CHECK looks at the IPv6 route`);
    await a.del(r);
    t.same([...w.routes.values()], ips.map(() => 'eni1'), `${what}: DEL puts both back on the veth`);
  }
});

/** What the AWS VPC CNI's egress-cni leaves in prevResult on an IPv6-only Pod: two more interfaces, no IP. */
const egressReq = (over: Partial<PodRequest> = {}): PodRequest =>
  req({
    prevResult: {
      cniVersion: '1.1.0',
      interfaces: [
        { name: 'eni1' },
        { name: 'eth0', sandbox: NETNS, mac: '1' },
        { name: 'dummy1', mac: '0', sandbox: '0' },
        { name: 'veth0badc0de', mac: '2a:00:00:00:00:05' },
        { name: 'v4if0', mac: '2a:00:00:00:00:04', sandbox: NETNS },
      ],
      ips: [{ address: 'fd00:10:1::11/128', interface: 1 }],
    },
    ...over,
  });

t.test('an IPv6-only Pod with an IPv4 egress interface: a second port, its route on the gateway, its flows; DEL/CHECK/GC cover it', async (t) => {
  const w = new World();
  w.egressV4 = ['169.254.172.9'];
  w.routes.set('fd00:10:1::11', 'eni1');
  w.routes.set('169.254.172.9', 'veth0badc0de');
  const a = new PodAttacher(w.deps());
  await a.add(egressReq());
  t.same(w.calls.filter((c) => c !== 'syncFlows'), ['isolateHostVeth', 'disablePodTxOffload', 'isolateHostVeth', 'disablePodTxOffload', 'addPodPort', 'addEgressPort', 'movePodRoutes', 'movePodRoutes']);
  t.equal(w.calls.filter((c) => c === 'syncFlows').length, 1, 'one flow sync, before the routes move');
  t.ok(w.calls.indexOf('syncFlows') < w.calls.indexOf('movePodRoutes'));
  t.same([w.ports.get('eni1')?.ofport, w.ports.get('veth0badc0de')?.ofport], [1, 2], 'each port got the number requested for it');
  t.same([...w.txOff].sort(), ['eth0', 'v4if0'], 'TX offload off on both Pod interfaces (netdev)');
  t.same([...w.isolated].sort(), ['eni1', 'veth0badc0de'], 'both host veths isolated (netdev)');
  t.same(w.ports.get('veth0badc0de')?.ids, {
    'sluice-type': 'container-egress-v4', 'container-id': 'c1', 'pod-namespace': 'default', 'pod-name': 'p1', 'ip-address': '169.254.172.9', 'attached-mac': '2a:00:00:00:00:04',
  });
  t.match(w.ports.get('eni1')?.ids, { 'egress-v4-veth': 'veth0badc0de', 'egress-v4-ip': '169.254.172.9', 'egress-v4-mac': '2a:00:00:00:00:04', 'egress-v4-if-name': 'v4if0' });
  t.equal(w.routes.get('169.254.172.9'), 'antrea-gw0');
  const pod = w.pods.get('c1')!;
  t.same(pod.egressV4, { ifName: 'v4if0', hostVeth: 'veth0badc0de', ofport: 2, mac: '2a:00:00:00:00:04', ip: '169.254.172.9' });
  const flows = podFlows(pod).map((f) => `${f.table} ${f.match}`);
  t.ok(flows.includes('SpoofGuard ip,in_port=2,dl_src=2a:00:00:00:00:04,nw_src=169.254.172.9'), 'spoof guard by port, MAC and address');
  t.ok(flows.includes('ARPSpoofGuard arp,in_port=2,dl_src=2a:00:00:00:00:04,arp_spa=169.254.172.9,arp_sha=2a:00:00:00:00:04'), 'ARP for its gateway from its own address');
  t.ok(flows.includes('L3Forwarding ip,nw_dst=169.254.172.9'), 'replies delivered to the egress port');
  t.notOk(flows.some((f) => f.includes('in_port=1') && f.includes('nw_src=169.254.172.9')), 'the Pod\'s main port may not use the egress address');
  await a.check(egressReq());

  // A repeated ADD changes nothing; damage to the egress port is found and repaired.
  w.calls = [];
  await a.add(egressReq());
  t.same(w.calls, []);
  w.routes.set('169.254.172.9', 'veth0badc0de');
  w.ports.delete('veth0badc0de');
  await t.rejects(a.check(egressReq()), { code: 102, message: /IPv4 egress port veth0badc0de \(v4if0\) is not on br-int.*host route for 169.254.172.9 does not point at antrea-gw0/ });
  await a.add(egressReq());
  await a.check(egressReq());
  t.equal(w.routes.get('169.254.172.9'), 'antrea-gw0');

  // A restarted agent rebuilds both ports from OVSDB.
  const { attachmentFromPort } = await import('../../daemon/node/attachment.js');
  const rebuilt = attachmentFromPort((await w.deps().ovs.listPodPorts())[0]!, await w.deps().ovs.egressPortOfports());
  t.same(rebuilt?.egressV4, w.pods.get('c1')!.egressV4, 'the egress port is rebuilt from external_ids');

  w.calls = [];
  await a.del(egressReq());
  t.same(w.calls, ['syncFlows', 'removePort', 'removePort', 'releaseHostVeth', 'releaseHostVeth', 'restorePodRoutes', 'restorePodRoutes']);
  t.same([...w.ports.keys()], [], 'both ports gone');
  t.same([...w.isolated], []);
  t.equal(w.routes.get('169.254.172.9'), 'veth0badc0de', 'the egress route back on its veth');
  t.same([...w.installed], []);

  await a.add(egressReq());
  await a.gc([{ containerId: 'other', ifName: 'eth0' }], { networkName: 'n' });
  t.same([...w.ports.keys()], [], 'GC removes both ports');
});

for (const step of ATTACH_STEPS) {
  t.test(`with an IPv4 egress interface, a failure after ${step} is rolled back completely`, async (t) => {
    const w = new World();
    w.egressV4 = ['169.254.172.9'];
    w.routes.set('fd00:10:1::11', 'eni1');
    w.routes.set('169.254.172.9', 'veth0badc0de');
    const a = new PodAttacher(w.deps({ failAfter: step as AttachStep }));
    await t.rejects(a.add(egressReq()), { code: 100, message: new RegExp(`failed at step ${step}`) });
    t.same([...w.ports.keys()], [], 'no port');
    t.equal(w.routes.get('169.254.172.9'), 'veth0badc0de', 'egress route on its veth');
    t.equal(w.routes.get('fd00:10:1::11'), 'eni1');
    t.same([...w.isolated], [], 'no veth isolated');
    t.same([...w.installed], [], 'no flows');
  });
}

t.test('an egress interface sluice cannot put behind the bridge fails the ADD, naming it, and touches nothing', async (t) => {
  const w = new World();
  const a = new PodAttacher(w.deps());
  await t.rejects(a.add(egressReq()), { code: 4, message: /IPv4 egress interface v4if0 \(from prevResult\): Cannot find device "v4if0"/ });
  w.egressV4 = [];
  await t.rejects(a.add(egressReq()), { code: 4, message: 'IPv4 egress interface v4if0 (from prevResult) has no IPv4 address: sluice attaches it with exactly one' });
  w.egressV4 = ['169.254.172.9', '169.254.172.10'];
  await t.rejects(a.add(egressReq()), { code: 4, message: /has 2 IPv4 addresses \(169.254.172.9, 169.254.172.10\)/ });
  w.egressV4 = ['169.254.172.9'];
  const dual = egressReq();
  dual.prevResult!.ips!.push({ address: '10.1.0.11/32', interface: 1 });
  await t.rejects(a.add(dual), { code: 7, message: /interface v4if0 in the Pod besides eth0, which has IPv4 address 10.1.0.11: .*no policy would apply to it/ });
  const two = egressReq();
  two.prevResult!.interfaces!.push({ name: 'v6if0', sandbox: NETNS });
  await t.rejects(a.add(two), { code: 7, message: /interfaces v4if0, v6if0 in the Pod besides eth0/ });
  t.same(w.calls, [], 'nothing was touched');
});

t.test('adopting a running IPv6-only Pod with an IPv4 egress interface attaches both ports, flows first', async (t) => {
  const w = new World();
  w.egressV4 = ['169.254.172.9'];
  const a = new PodAttacher(w.deps());
  const pod = await a.adopt(egressReq());
  t.same(w.calls, ['syncFlows', 'addPodPort', 'addEgressPort', 'disablePodTxOffload', 'isolateHostVeth', 'disablePodTxOffload', 'isolateHostVeth', 'movePodRoutes', 'movePodRoutes']);
  t.equal(pod.egressV4?.ofport, pod.ofport + 1, 'the requested egress port number was given');
  t.equal(w.flowsAt[0], `c1@${pod.ofport}`, 'flows installed for the requested ports before the ports');
  t.equal(w.routes.get('169.254.172.9'), 'antrea-gw0');
});
