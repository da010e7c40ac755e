/**
 * IPv6 and dual-stack in the policy engine: address parsing as Go's netip reads it, probes of
 * either family, and per policy kind which connections of which family each rule decides.
 *
 * Model: namespaces x and y, Pods a and b in each, dual-stack (10.0.<ns>.<pod> and
 * fd00:10:<ns>::<pod>) except y/b, which is IPv6-only; node-1 (x) and node-2 (y) dual-stack; a
 * dual-stack Service y/web in front of y/a.
 */
import t from 'tap';
import { canonicalIp, formatIp, ipFamily, parseCidr, parseIp } from '../../daemon/policy/cidr.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { ProbeSyntaxError, formatMatrices, parseEndpoint, parseProbes } from '../../daemon/policy/probes.js';
import type { KubeObject, Probe } from '../../daemon/policy/types.js';
import { formatAuditLine, packetFields } from '../../daemon/enforcement/auditlog/format.js';

const NODES = { 'node-1': ['192.168.0.1', 'fd00:ff::1'], 'node-2': ['192.168.0.2', 'fd00:ff::2'] } as const;
const v4 = (ns: string, p: string) => `10.0.${ns === 'x' ? 1 : 2}.${p === 'a' ? 10 : 11}`;
const v6 = (ns: string, p: string) => `fd00:10:${ns === 'x' ? 1 : 2}::${p === 'a' ? 'a' : 'b'}`;

function model(): KubeObject[] {
  const objs: KubeObject[] = [];
  for (const [name, ips] of Object.entries(NODES)) {
    objs.push({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { node: name } }, status: { addresses: ips.map((address) => ({ type: 'InternalIP', address })) } });
  }
  for (const ns of ['x', 'y']) {
    objs.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { ns } } });
    for (const p of ['a', 'b']) {
      const ips = ns === 'y' && p === 'b' ? [v6(ns, p)] : [v4(ns, p), v6(ns, p)];
      objs.push({
        apiVersion: 'v1', kind: 'Pod', metadata: { namespace: ns, name: p, labels: { pod: p } },
        spec: { nodeName: ns === 'x' ? 'node-1' : 'node-2', containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 80, protocol: 'TCP' }] }] },
        status: { phase: 'Running', podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) },
      });
    }
  }
  objs.push({
    apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'y', name: 'web' },
    spec: { clusterIPs: ['10.96.0.10', 'fd00:96::10'], selector: { pod: 'a' }, ports: [{ port: 8080, targetPort: 80, protocol: 'TCP' }] },
  });
  return objs;
}

function engineWith(...extra: KubeObject[]): PolicyEngine {
  const e = new PolicyEngine();
  for (const o of [...model(), ...extra]) e.upsert(o);
  return e;
}

const verdict = (e: PolicyEngine, from: string, to: string, family?: 4 | 6, port = 80, protocol: Probe['protocol'] = 'TCP') =>
  e.evaluate({ from, to, port, protocol, ...(family ? { family } : {}) }).verdict;

const netpol = (ns: string, name: string, spec: unknown): KubeObject => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: ns, name }, spec });
const acnp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name }, spec });
const anp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name }, spec });
const cnp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'policy.networking.k8s.io/v1alpha2', kind: 'ClusterNetworkPolicy', metadata: { name }, spec });

t.test('addresses read as Go netip reads them', async (t) => {
  const ok: [string, string][] = [
    ['fd00::1', 'fd00::1'], ['FD00:0:0::1', 'fd00::1'], ['fd00:0000:0000:0000:0000:0000:0000:0001', 'fd00::1'], ['::', '::'], ['::1', '::1'],
    ['1:2:3:4:5:6:7::', '1:2:3:4:5:6:7:0'], ['::1.2.3.4', '::102:304'], ['64:ff9b::192.0.2.1', '64:ff9b::c000:201'],
    ['::ffff:1.2.3.4', '::ffff:1.2.3.4'], ['::ffff:0102:0304', '::ffff:1.2.3.4'], ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'], ['2001:db8::0:1', '2001:db8::1'],
    ['1:0:1:0:1:0:1:0', '1:0:1:0:1:0:1:0'], ['10.0.0.1', '10.0.0.1'],
  ];
  for (const [text, canonical] of ok) t.equal(canonicalIp(text), canonical, text);
  const bad = ['fe80::1%eth0', '1::2::3', ':1::2', '1:::2', '1:2:3:4:5:6:7:8:9', '1:2:3:4:5:6:7:8::', '12345::1', 'fd00::g', '::1.2.3', '::01.2.3.4', '1.2.3.4::', '[fd00::1]', 'fd00::1/64', ' fd00::1', '1:2:3:4:5:6:7:1.2.3.4'];
  for (const text of bad) t.equal(parseIp(text), undefined, text);
  t.equal(ipFamily('::ffff:1.2.3.4'), 6, 'an IPv4-mapped address is IPv6 (netip: Is4In6, not Is4)');
  t.equal(formatIp(6, 0n), '::');
  t.same(parseCidr('fd00::1/64'), { family: 6, start: 0xfd00n << 112n, end: (0xfd00n << 112n) + (1n << 64n) - 1n, prefix: 64 }, 'host bits cleared');
  t.equal(parseCidr('fd00::/129'), undefined);
});

t.test('probe endpoints of either family', async (t) => {
  t.same(parseEndpoint('ip:FD00:10:1::A'), { kind: 'ip', ip: 'fd00:10:1::a' }, 'canonical form');
  t.same(parseEndpoint('ip:10.0.1.10'), { kind: 'ip', ip: '10.0.1.10' });
  t.throws(() => parseEndpoint('ip:fe80::1%eth0'), /zone id is not allowed/);
  t.throws(() => parseEndpoint('ip:::ffff:10.0.1.10'), /IPv4-mapped IPv6 address; write the IPv4 address \(ip:10\.0\.1\.10\)/);
  t.throws(() => parseEndpoint('ip:fd00::1::2'), /not an IPv4 or IPv6 address/);
  t.throws(() => parseEndpoint('ip:01.2.3.4'), ProbeSyntaxError, 'leading zeros are refused, as netip does');
  t.same(parseProbes([{ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP', family: 6 }, { from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP', family: 'IPv4' }]).map((p) => p.family), [6, 4]);
  t.throws(() => parseProbes([{ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP', family: 5 }]), /probe 0\.family: the address family must be 4 or 6/);
});

t.test('the cluster keeps every address, canonical', async (t) => {
  const e = engineWith({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'odd' }, spec: { nodeName: 'node-1' }, status: { podIP: '10.0.1.99', podIPs: [{ ip: '10.0.1.99' }, { ip: 'FD00:10:1:0::99' }] } });
  t.same(e.cluster.pods.get('x/odd')!.ips, ['10.0.1.99', 'fd00:10:1::99']);
  t.equal(e.cluster.podByIp.get('fd00:10:1::99')?.name, 'odd');
  t.same(e.cluster.nodes.get('node-1')!.ips, ['192.168.0.1', 'fd00:ff::1']);
  t.same(e.cluster.services.get('y/web')!.clusterIPs, ['10.96.0.10', 'fd00:96::10']);
  t.equal(verdict(e, 'ip:fd00:10:1:0:0:0:0:99', 'ip:FD00:10:2::A'), 'allow', 'ip: probes find Pods by any spelling');
});

t.test('families: which are judged, and what a probe that mixes them gets', async (t) => {
  // an ingress ipBlock of one family only: IPv6 from x is allowed, IPv4 is isolated
  const e = engineWith(netpol('y', 'v6-only', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fd00:10:1::/64' } }] }] }));
  t.equal(verdict(e, 'x/a', 'y/a', 6), 'allow');
  t.equal(verdict(e, 'x/a', 'y/a', 4), 'drop');
  const both = e.evaluate({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP' });
  t.equal(both.verdict, 'drop', 'no family given: the most restrictive of both');
  t.match(both.note, /depends on the address family: IPv4 drop \(K8sNetworkPolicyIsolation y\/v6-only\), IPv6 allow/);
  t.equal(verdict(e, 'x/a', 'y/b'), 'allow', 'y/b is IPv6-only: only IPv6 is judged');
  t.equal(verdict(e, 'ip:10.0.1.10', 'y/a'), 'drop', 'an ip: endpoint fixes the family');
  t.equal(verdict(e, 'ip:fd00:10:1::a', 'y/a'), 'allow');
  const alike = engineWith().evaluate({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP' });
  t.equal(alike.note, 'judged for IPv4 and IPv6 alike');
  t.throws(() => e.evaluate({ from: 'x/a', to: 'y/b', port: 80, protocol: 'TCP', family: 4 }), /no IPv4 connection between x\/a and y\/b: x\/a has IPv4 and IPv6, y\/b has IPv6/);
  t.throws(() => e.evaluate({ from: 'ip:10.0.1.10', to: 'y/b', port: 80, protocol: 'TCP' }), /share no address family: ip:10\.0\.1\.10 has IPv4, y\/b has IPv6/);
  t.throws(() => e.evaluate({ from: 'ip:10.0.1.10', to: 'x/a', port: 80, protocol: 'TCP', family: 6 }), /no IPv6 connection/);
  const r = e.evaluate({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP', family: 6 });
  t.equal(r.family, 6, 'the result names the family it was asked for');
  t.match(formatMatrices([r]), /^80\/TCP IPv6 /, 'matrices of one family say so');
  const { sides } = e.explain({ from: 'x/a', to: 'y/a', port: 80, protocol: 'TCP' });
  t.same(sides.map((s) => [s.direction, s.verdict]), [['Egress', 'allow'], ['Ingress', 'drop']], 'explain shows the family reported (IPv4, the restrictive one)');
});

t.test('Kubernetes NetworkPolicy ipBlock: IPv6 CIDR and except; families never cross', async (t) => {
  const e = engineWith(netpol('x', 'egress', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [
    { to: [{ ipBlock: { cidr: 'fd00:10::/32', except: ['fd00:10:2::/64'] } }] },
    { to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.2.0/24'] } }] },
  ] }));
  const table: [string, 4 | 6, string][] = [
    ['x/b', 6, 'allow'], ['x/b', 4, 'allow'], ['y/a', 6, 'drop'], ['y/a', 4, 'drop'], ['y/b', 6, 'drop'],
    ['ip:fd00:10:3::1', 6, 'allow'], ['ip:fd00:11::1', 6, 'drop'], ['ip:2001:db8::1', 6, 'drop'], ['ip:192.0.2.1', 4, 'allow'],
  ];
  for (const [to, family, want] of table) t.equal(verdict(e, 'x/a', to, family), want, `x/a -> ${to} IPv${family}`);

  const any4 = engineWith(netpol('x', 'all-v4', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '0.0.0.0/0' } }] }] }));
  t.equal(verdict(any4, 'x/a', 'ip:2001:db8::1'), 'drop', '0.0.0.0/0 never matches an IPv6 address');
  t.equal(verdict(any4, 'x/a', 'ip:192.0.2.9'), 'allow');
  const any6 = engineWith(netpol('x', 'all-v6', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '::/0' } }] }] }));
  t.equal(verdict(any6, 'x/a', 'ip:192.0.2.9'), 'drop', '::/0 never matches an IPv4 address');
  t.equal(verdict(any6, 'x/a', 'ip:2001:db8::1'), 'allow');
});

t.test('ipBlock validation across families, as the API server and the Antrea webhook do it', async (t) => {
  const e = new PolicyEngine();
  e.upsert(netpol('x', 'mixed', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fd00::/64', except: ['10.0.0.0/8'] } }] }] }));
  e.upsert(netpol('x', 'outside', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fd00::/64', except: ['fd01::/80'] } }] }] }));
  e.upsert(netpol('x', 'zone', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fe80::%eth0/64' } }] }] }));
  e.upsert(acnp('mixed', { priority: 1, appliedTo: [{ podSelector: {} }], ingress: [{ action: 'Drop', from: [{ ipBlock: { cidr: 'fd00::/64', except: ['10.0.0.0/8'] } }] }] }));
  e.upsert(netpol('x', 'fine', { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: 'fd00::/64', except: ['fd00::/96'] } }] }] }));
  const errs = e.errors().map((x) => `${x.kind} ${x.name} ${x.field}`).sort();
  t.same(errs, [
    'AntreaClusterNetworkPolicy mixed spec.ingress[0].from[0].ipBlock.except[0]',
    'NetworkPolicy mixed spec.ingress[0].from[0].ipBlock.except[0]',
    'NetworkPolicy outside spec.ingress[0].from[0].ipBlock.except[0]',
    'NetworkPolicy zone spec.ingress[0].from[0].ipBlock.cidr',
  ]);
});

t.test('Antrea ClusterNetworkPolicy: ipBlock, nodeSelector and fqdn with IPv6', async (t) => {
  const e = engineWith(acnp('v6', { priority: 1, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }], egress: [
    { action: 'Drop', name: 'block', to: [{ ipBlock: { cidr: 'fd00:10:2::/64', except: ['fd00:10:2::b/128'] } }] },
    { action: 'Reject', name: 'node-two', to: [{ nodeSelector: { matchLabels: { node: 'node-2' } } }], ports: [{ protocol: 'TCP', port: 6443 }] },
    { action: 'Allow', name: 'dns-names', to: [{ fqdn: '*.example.com' }], ports: [{ protocol: 'TCP', port: 443 }] },
    { action: 'Drop', name: 'rest-v6', to: [{ ipBlock: { cidr: '2001:db8::/32' } }] },
  ] }));
  t.equal(verdict(e, 'x/a', 'y/a', 6), 'drop', 'inside the block');
  t.equal(verdict(e, 'x/a', 'y/a', 4), 'allow', 'the same Pod over IPv4: the IPv6 block does not hold it');
  t.equal(verdict(e, 'x/a', 'y/b', 6), 'allow', 'the except');
  t.equal(verdict(e, 'x/a', 'ip:fd00:ff::2', 6, 6443), 'reject', "node-2's IPv6 InternalIP is a Node address");
  t.equal(verdict(e, 'x/a', 'ip:192.168.0.2', 4, 6443), 'reject', 'and its IPv4 one');
  t.equal(verdict(e, 'x/a', 'ip:fd00:ff::1', 6, 6443), 'allow', 'node-1 is not selected');
  t.equal(verdict(e, 'x/a', 'ip:2001:db8::7', 6, 443), 'drop', 'nothing learned yet');
  e.setFqdnAddresses([{ name: 'www.example.com', ips: ['2001:DB8:0::7', '203.0.113.7'] }]);
  t.equal(verdict(e, 'x/a', 'ip:2001:db8::7', 6, 443), 'allow', 'learned from an AAAA answer (any spelling)');
  t.equal(verdict(e, 'x/a', 'ip:203.0.113.7', 4, 443), 'allow', 'and from an A answer');
  t.equal(verdict(e, 'x/a', 'ip:2001:db8::8', 6, 443), 'drop');
  const groups = e.addressGroups().filter((g) => g.members.some((m) => m.kind === 'fqdn'));
  t.same(groups.flatMap((g) => g.members.flatMap((m) => m.ips)).sort(), ['2001:db8::7', '203.0.113.7'], 'the fqdn address group holds both families (for the flows)');
});

t.test('Antrea ingress from Nodes over IPv6, and ICMPv6 echo', async (t) => {
  const e = engineWith(acnp('in', { priority: 1, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ingress: [
    { action: 'Drop', name: 'from-node-1', from: [{ nodeSelector: { matchLabels: { node: 'node-1' } } }] },
    { action: 'Drop', name: 'echo-v4-type', protocols: [{ icmp: { icmpType: 8, icmpCode: 0 } }] },
  ] }));
  t.same(e.errors(), []);
  t.equal(verdict(e, 'ip:fd00:ff::1', 'y/b', 6), 'drop', 'node-1 by its IPv6 address');
  t.equal(verdict(e, 'ip:fd00:ff::2', 'y/b', 6), 'allow', 'node-2 (same Node: kubelet probes pass anyway)');
  e.upsert({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'host' }, spec: { nodeName: 'node-1', hostNetwork: true }, status: { podIP: '192.168.0.1', podIPs: [{ ip: '192.168.0.1' }, { ip: 'fd00:ff::1' }] } });
  t.same(e.cluster.pods.get('x/host')!.ips, ['192.168.0.1', 'fd00:ff::1'], "a hostNetwork Pod has its Node's addresses");
  const fromHost = e.evaluate({ from: 'x/host', to: 'y/b', port: 80, protocol: 'TCP' });
  t.equal(fromHost.verdict, 'drop', 'a hostNetwork Pod on node-1 reaches the IPv6-only y/b from the Node IPv6 address');
  t.notMatch(fromHost.note ?? '', /IPv4/, 'judged over IPv6 only');
  t.equal(verdict(e, 'x/a', 'y/a', 4, 0, 'ICMP'), 'drop', 'type 8 is the IPv4 echo request');
  t.equal(verdict(e, 'x/a', 'y/a', 6, 0, 'ICMP'), 'allow', 'an ICMPv6 echo request is type 128, not 8');
  const v6echo = engineWith(acnp('in', { priority: 1, appliedTo: [{ podSelector: {} }], ingress: [{ action: 'Drop', name: 'e', protocols: [{ icmp: { icmpType: 128 } }] }] }));
  t.equal(verdict(v6echo, 'x/a', 'y/a', 6, 0, 'ICMP'), 'drop');
  t.equal(verdict(v6echo, 'x/a', 'y/a', 4, 0, 'ICMP'), 'allow');
});

t.test('AdminNetworkPolicy and ClusterNetworkPolicy networks and nodes with IPv6', async (t) => {
  const e = engineWith(anp('deny-v6-net', { priority: 10, subject: { namespaces: { matchLabels: { ns: 'x' } } }, egress: [
    { name: 'nodes', action: 'Deny', to: [{ nodes: { matchLabels: { node: 'node-2' } } }] },
    { name: 'v6-net', action: 'Deny', to: [{ networks: ['fd00:10:2::/48'] }] },
  ] }));
  t.equal(verdict(e, 'x/a', 'y/a', 6), 'drop');
  t.equal(verdict(e, 'x/a', 'y/a', 4), 'allow');
  t.equal(verdict(e, 'x/a', 'ip:fd00:ff::2', 6), 'drop', "nodes: node-2's IPv6 address");
  t.equal(verdict(e, 'x/a', 'ip:fd00:ff::1', 6), 'allow');
  const c = engineWith(cnp('admin', { tier: 'Admin', priority: 5, subject: { namespaces: { matchLabels: { ns: 'y' } } }, egress: [
    { name: 'v6-x', action: 'Deny', to: [{ networks: ['fd00:10:1::/64'] }] },
  ] }));
  t.same(c.errors(), []);
  t.equal(verdict(c, 'y/a', 'x/b', 6), 'drop');
  t.equal(verdict(c, 'y/a', 'x/b', 4), 'allow');
  t.equal(verdict(c, 'x/b', 'y/a', 6), 'allow');
});

t.test('Services: every ClusterIP, endpoints per family (EndpointSlice addressType)', async (t) => {
  const e = engineWith(acnp('to-svc', { priority: 1, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }], egress: [
    { action: 'Drop', name: 'svc', toServices: [{ name: 'web', namespace: 'y' }] },
  ] }));
  t.equal(verdict(e, 'x/a', 'ip:fd00:96::10', undefined, 8080), 'drop', 'the IPv6 ClusterIP is the Service');
  t.equal(verdict(e, 'x/a', 'ip:10.96.0.10', undefined, 8080), 'drop', 'so is the IPv4 one');
  t.equal(verdict(e, 'x/a', 'service:y/web', 6, 8080), 'drop');
  t.equal(verdict(e, 'y/b', 'service:y/web', 6, 8080), 'allow');

  // Endpoints from EndpointSlices: an IPv6 slice names y/b only, the IPv4 slice y/a only.
  const slice = (name: string, addressType: string, pod: string, address: string): KubeObject => ({
    apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { namespace: 'y', name, labels: { 'kubernetes.io/service-name': 'web' } },
    addressType, endpoints: [{ addresses: [address], targetRef: { kind: 'Pod', namespace: 'y', name: pod }, conditions: { ready: true } }],
  });
  const s = engineWith(slice('web-v4', 'IPv4', 'a', v4('y', 'a')), slice('web-v6', 'IPv6', 'b', v6('y', 'b')),
    netpol('y', 'only-a', { podSelector: { matchLabels: { pod: 'b' } }, ingress: [] }));
  t.equal(s.cluster.serviceEndpoints('y', 'web', 6).map((p) => p.name).join(), 'b');
  t.equal(s.cluster.serviceEndpoints('y', 'web', 4).map((p) => p.name).join(), 'a');
  t.equal(verdict(s, 'x/a', 'service:y/web', 4, 8080), 'allow', 'IPv4 reaches y/a');
  const r6 = s.evaluate({ from: 'x/a', to: 'service:y/web', port: 8080, protocol: 'TCP', family: 6 });
  t.equal(r6.verdict, 'drop', 'IPv6 reaches y/b, which is isolated');
  t.match(r6.note, /via endpoint y\/b/);
});

t.test('audit log lines carry IPv6 addresses in canonical form', async (t) => {
  // an IPv6/UDP frame, fd00:10:1::a:40000 -> fd00:10:2::b:53, 5 bytes of payload
  const ip6 = (groups: number[]) => Buffer.from(groups.flatMap((g) => [g >> 8, g & 255]));
  const udp = Buffer.from([0x9c, 0x40, 0, 53, 0, 13, 0, 0, 1, 2, 3, 4, 5]);
  const header = Buffer.concat([Buffer.from([0x60, 0, 0, 0, 0, udp.length, 17, 64]), ip6([0xfd00, 0x10, 1, 0, 0, 0, 0, 0xa]), ip6([0xfd00, 0x10, 2, 0, 0, 0, 0, 0xb])]);
  const frame = Buffer.concat([Buffer.alloc(12, 1), Buffer.from([0x86, 0xdd]), header, udp]);
  const fields = packetFields(frame);
  const line = formatAuditLine({ timeNs: 0n, tableName: 'IngressDefaultRule', policyRef: 'K8sNetworkPolicy', action: 'Drop', priority: -1, ...fields });
  t.equal(line, '1970/01/01 00:00:00.000000 IngressDefaultRule K8sNetworkPolicy Drop -1 fd00:10:1::a 40000 fd00:10:2::b 53 UDP 53');
  t.equal(canonicalIp(fields.srcIp), fields.srcIp, 'the same text the engine uses for that address');
});

t.test('an IPv6-only Pod\'s IPv4 egress (an IPv4 path out SNATed to its node): judged by its egress rules', async (t) => {
  // y/b is IPv6-only; on the AWS VPC CNI it still reaches IPv4 destinations through egress-cni.
  t.equal(verdict(engineWith(), 'y/b', 'ip:203.0.113.10'), 'allow', 'not isolated: allowed, like its IPv6 egress');
  const e = engineWith(netpol('y', 'egress', { podSelector: {}, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '203.0.113.10/32' } }] }] }));
  const allowed = e.evaluate({ from: 'y/b', to: 'ip:203.0.113.10', port: 80, protocol: 'TCP' });
  t.equal(allowed.verdict, 'allow');
  t.match(allowed.decidedBy, { kind: 'NetworkPolicy', namespace: 'y', name: 'egress', direction: 'Egress' });
  t.equal(verdict(e, 'y/b', 'ip:203.0.113.11'), 'drop', 'egress-isolated: every other IPv4 destination is dropped');
  t.equal(verdict(e, 'y/b', 'ip:203.0.113.10', 4), 'allow', 'family 4 may be named');
  t.equal(verdict(e, 'y/b', 'ip:fd00:10:1::a'), 'drop', 'its IPv6 egress as before');
  // Only towards addresses outside the cluster's Pods and Services: those see the node's address.
  t.throws(() => e.evaluate({ from: 'y/b', to: 'ip:10.0.1.10', port: 80, protocol: 'TCP' }), /share no address family: y\/b has IPv6, ip:10\.0\.1\.10 has IPv4/);
  t.throws(() => e.evaluate({ from: 'y/b', to: 'ip:10.96.0.10', port: 80, protocol: 'TCP' }), /share no address family/);
  t.throws(() => e.evaluate({ from: 'y/b', to: 'ip:203.0.113.10', port: 80, protocol: 'TCP', family: 6 }), /no IPv6 connection/);
  t.throws(() => e.evaluate({ from: 'ip:203.0.113.10', to: 'y/b', port: 80, protocol: 'TCP' }), /share no address family/, 'nothing connects to it');
});
