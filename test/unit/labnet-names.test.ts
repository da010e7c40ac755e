import t from 'tap';
import { nodeConflist } from '../../lab/net/cni-config.js';
import { cniArgs, pluginStdin } from '../../lab/net/cni-runner.js';
import {
  nodeIPv6, podCidr6, checkLabName, eniName, nodeIP, nodeNetns, parseLabNetns, podCidr, podHash, podNetns, podRange, stateDir,
} from '../../lab/net/names.js';
import { createHash } from 'node:crypto';

t.test('lab names: 1-6 lowercase chars starting with a letter', async (t) => {
  t.equal(checkLabName('sl'), 'sl');
  t.equal(checkLabName('la1234'), 'la1234');
  for (const bad of ['', '1a', 'La', 'abcdefg', 'a-b', '../x']) t.throws(() => checkLabName(bad), /must match/, bad);
  t.throws(() => stateDir('../etc'), /must match/);
});

t.test('addressing contract', async (t) => {
  t.equal(nodeIP('node-1'), '192.168.77.11');
  t.equal(nodeIP('node-12'), '192.168.77.22');
  t.equal(podCidr('node-2'), '10.10.2.0/24');
  t.same(podRange('node-3'), { subnet: '10.10.3.0/24', rangeStart: '10.10.3.2', rangeEnd: '10.10.3.254' });
  t.equal(nodeNetns('sl', 'node-2'), 'sl-node-2');
  t.throws(() => nodeIP('node-0'), /not a lab node name/);
  t.throws(() => nodeIP('worker'), /not a lab node name/);
});

t.test('pod netns and eni names are short hashes', async (t) => {
  const h = createHash('sha256').update('x/a').digest('hex').slice(0, 8);
  t.equal(podHash('x', 'a'), h);
  t.equal(podNetns('la', 'x', 'a'), `la-p-${h}`);
  t.not(podHash('x', 'a'), podHash('x', 'b'));
  const id = 'f'.repeat(64);
  t.equal(eniName(id), `eni${createHash('sha1').update(id).digest('hex').slice(0, 11)}`);
  t.ok(eniName(id).length <= 15, 'fits IFNAMSIZ');
});

t.test('parseLabNetns recognises only lab namespaces', async (t) => {
  t.same(parseLabNetns('sl-vpc'), { lab: 'sl', role: 'vpc', rest: 'vpc' });
  t.same(parseLabNetns('la1-node-2'), { lab: 'la1', role: 'node', rest: 'node-2' });
  t.same(parseLabNetns('la1-p-0123abcd'), { lab: 'la1', role: 'pod', rest: 'p-0123abcd' });
  t.equal(parseLabNetns('la1-p-xyz'), null);
  t.equal(parseLabNetns('dpexp'), null);
  t.equal(parseLabNetns('sl-other'), null);
});

t.test('conflists: [primary] or [primary, sluice-cni], host-local under the state dir', async (t) => {
  const ptp = nodeConflist('la', 'node-2', 'ptp', false);
  t.same({ name: ptp.name, cniVersion: ptp.cniVersion, types: ptp.plugins.map((p) => p.type) }, { name: 'lab', cniVersion: '1.0.0', types: ['ptp'] });
  t.same((ptp.plugins[0]!.ipam as Record<string, unknown>).dataDir, '/run/sluice-lab/la/node-2/ipam');
  const eks = nodeConflist('la', 'node-1', 'eks', true);
  t.same(eks.plugins.map((p) => p.type), ['eks-sim', 'sluice-cni']);
  t.same(eks.plugins[1], { type: 'sluice-cni', socketPath: '/run/sluice-lab/la/node-1/cni.sock' });
  t.throws(() => nodeConflist('la', 'node-1', 'calico' as 'ptp', false), /not one of ptp, eks/);
});

t.test('conflists by IP family: host-local gets one range and one default route per family', async (t) => {
  const ipam = (family: 'ipv4' | 'ipv6' | 'dual') => nodeConflist('la', 'node-2', 'ptp', true, family).plugins[0]!.ipam as { ranges: unknown[]; routes: unknown[] };
  t.same(ipam('ipv4').ranges, [[{ subnet: '10.10.2.0/24', rangeStart: '10.10.2.2', rangeEnd: '10.10.2.254' }]]);
  t.same(ipam('ipv6').ranges, [[{ subnet: 'fd00:10:2::/64', rangeStart: 'fd00:10:2::2', rangeEnd: 'fd00:10:2::fe' }]]);
  t.same(ipam('ipv6').routes, [{ dst: '::/0' }]);
  t.same(ipam('dual').ranges.length, 2);
  t.same(ipam('dual').routes, [{ dst: '0.0.0.0/0' }, { dst: '::/0' }]);
  t.equal(nodeIPv6('node-12'), 'fd00:77::16');
  t.equal(podCidr6('node-12'), 'fd00:10:c::/64');
});

t.test('eks conflists by IP family: IPv6-only chains the IPv4 egress plugin, dual-stack does not', async (t) => {
  const types = (family: 'ipv4' | 'ipv6' | 'dual', sluice = true) => nodeConflist('la', 'node-2', 'eks', sluice, family).plugins.map((p) => p.type);
  t.same(types('ipv4'), ['eks-sim', 'sluice-cni']);
  t.same(types('dual'), ['eks-sim', 'sluice-cni']);
  t.same(types('ipv6'), ['eks-sim', 'egress-cni', 'sluice-cni']);
  t.same(types('ipv6', false), ['eks-sim', 'egress-cni']);
  const [primary, egress] = nodeConflist('la', 'node-2', 'eks', false, 'ipv6').plugins;
  t.same((primary!.ipam as { ranges: unknown[] }).ranges, [[{ subnet: 'fd00:10:2::/64', rangeStart: 'fd00:10:2::2', rangeEnd: 'fd00:10:2::fe' }]], 'Pod addresses from the node\'s IPv6 prefix');
  t.same(egress, {
    type: 'egress-cni', mtu: 1500, nodeIP: '192.168.77.12',
    ipam: { type: 'host-local', ranges: [[{ subnet: '169.254.172.0/22' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: '/run/sluice-lab/la/node-2/ipam-egress-v4' },
  }, 'egress addresses from 169.254.172.0/22 in their own store, SNAT to the node\'s IPv4 address');
});

t.test('plugin stdin carries name, cniVersion and prevResult; CNI_ARGS has the pod identity', async (t) => {
  const list = nodeConflist('la', 'node-1', 'ptp', true);
  const prev = { cniVersion: '1.0.0', ips: [{ address: '10.10.1.2/24' }] };
  t.same(pluginStdin(list, list.plugins[1]!, prev), { type: 'sluice-cni', socketPath: '/run/sluice-lab/la/node-1/cni.sock', name: 'lab', cniVersion: '1.0.0', prevResult: prev });
  t.notOk('prevResult' in pluginStdin(list, list.plugins[0]!, undefined));
  t.equal(
    cniArgs({ lab: 'la', node: 'node-1', containerId: 'c1', netns: 'la-p-1', podNamespace: 'x', podName: 'a' }),
    'IgnoreUnknown=1;K8S_POD_NAMESPACE=x;K8S_POD_NAME=a;K8S_POD_INFRA_CONTAINER_ID=c1',
  );
});
