/**
 * The node's Pod registry (daemon/node/pod-registry.ts): registration by container id, the holder
 * of a veth or routed address (an IPv4 egress port's included), the Pod behind an OpenFlow port and
 * the port numbers in use.
 */
import t from 'tap';
import type { PodAttachment } from '../../daemon/node/attachment.js';
import { PodRegistry } from '../../daemon/node/pod-registry.js';

const pod = (n: number, over: Partial<PodAttachment> = {}): PodAttachment => ({
  containerId: `c${n}`,
  podNamespace: 'default',
  podName: `p${n}`,
  netns: `/var/run/netns/p${n}`,
  ifName: 'eth0',
  hostVeth: `veth${n}`,
  ofport: n,
  mac: `2a:00:00:00:00:0${n}`,
  ips: [`10.1.0.${n}`],
  ...over,
});

const egress = { ifName: 'v4if0', hostVeth: 'veth-e', ofport: 9, mac: '2a:00:00:00:00:09', ip: '169.254.172.9' };

t.test('add, get, has, remove, list, size', async (t) => {
  const r = new PodRegistry();
  r.add(pod(1));
  r.add(pod(2));
  t.equal(r.size, 2);
  t.ok(r.has('c1'));
  t.equal(r.get('c2')?.hostVeth, 'veth2');
  t.same(r.list().map((p) => p.containerId), ['c1', 'c2'], 'in the order registered');
  const again = pod(1, { ofport: 5 });
  r.add(again);
  t.equal(r.get('c1'), again, 'a container has one attachment: the last registered');
  t.same(r.list().map((p) => p.containerId), ['c1', 'c2']);
  t.equal(r.remove('c1'), true);
  t.equal(r.remove('c1'), false, 'nothing left to remove');
  t.notOk(r.has('c1'));
  const snapshot = r.list();
  r.add(pod(3));
  t.equal(snapshot.length, 1, 'a listing is a snapshot');
});

t.test('holderOf: the attachment holding a veth or a routed address of another', async (t) => {
  const r = new PodRegistry();
  r.add(pod(1));
  r.add(pod(2, { ips: ['fd00::2'], egressV4: egress }));
  t.equal(r.holderOf(pod(3))?.containerId, undefined, 'nothing in common');
  t.equal(r.holderOf(pod(3, { hostVeth: 'veth1' }))?.containerId, 'c1', 'the same veth');
  t.equal(r.holderOf(pod(3, { ips: ['10.1.0.1'] }))?.containerId, 'c1', 'the same address');
  t.equal(r.holderOf(pod(3, { ips: ['169.254.172.9'] }))?.containerId, 'c2', "another Pod's egress address");
  t.equal(r.holderOf(pod(3, { egressV4: { ...egress, ip: '169.254.172.10' } }))?.containerId, 'c2', "another Pod's egress veth");
});

t.test('atOfport and ofports: the Pods behind the bridge ports', async (t) => {
  const r = new PodRegistry();
  r.add(pod(1));
  r.add(pod(2, { egressV4: egress }));
  t.equal(r.atOfport(1)?.iface.mac, '2a:00:00:00:00:01');
  t.same(r.atOfport(9), { pod: r.get('c2'), iface: egress }, "the egress port's interface, and its Pod");
  t.equal(r.atOfport(4), undefined);
  t.same([...r.ofports()].sort(), [1, 2, 9]);
});
