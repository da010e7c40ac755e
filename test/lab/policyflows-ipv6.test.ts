/**
 * Model = datapath for IPv6 and dual-stack policy flows, by `ofproto/trace`: dual-stack Pods, the
 * compiled policy flows (both families) loaded into a real OVS (netdev, private directories, in a
 * "p6-n1" network namespace) with one `ovs-ofctl --bundle add-flows`, and TCP/UDP/SCTP/ICMP(v6)
 * probes of each family must get the verdict the engine gives for this node's sides.
 * The base pipeline is computeFlows' own, for dual-stack Pods, so IPv6 packets reach the policy
 * tables the way the datapath sends them there.
 */
import { join } from 'node:path';
import t from 'tap';
import { bundleText } from '../../daemon/flows/diff.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject, Probe } from '../../daemon/policy/types.js';
import { missingPrereq, ovsShell, localVerdict, startTraceBridge, stopTraceBridge, traceFirstPacket } from './datapath-env.js';

const NS = 'p6-n1';
const DIR = `/tmp/${NS}`;
const RUN = join(DIR, 'ovs');
const sh = ovsShell(RUN);

const teardown = () => stopTraceBridge(NS, DIR);

// ---- cluster: dual-stack Pods x/a, x/b, x/c here (n1); y/r and y/d on n2 -------------------------

type Ips = { 4: string; 6: string };
const LOCAL: Record<string, Ips> = { a: { 4: '10.1.0.11', 6: 'fd00:1::11' }, b: { 4: '10.1.0.12', 6: 'fd00:1::12' }, c: { 4: '10.1.0.13', 6: 'fd00:1::13' } };
const REMOTE: Record<string, Ips> = { 'y/r': { 4: '10.2.0.21', 6: 'fd00:2::21' }, 'y/d': { 4: '10.2.0.22', 6: 'fd00:2::22' } };
const NODE: Ips = { 4: '192.168.100.1', 6: 'fd00:ff::1' };
const SERVICE_CIDR: Ips = { 4: '10.96.0.0/16', 6: 'fd00:96::/112' };
const ns = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name } } });
const podObj = (namespace: string, name: string, ips: Ips, node: string): KubeObject => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: { pod: name } },
  spec: { nodeName: node, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 80 }] }] },
  status: { podIP: ips[4], podIPs: [{ ip: ips[4] }, { ip: ips[6] }] },
});
const nodeObj = (name: string, ips: string[]): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: ips.map((address) => ({ type: 'InternalIP', address })) } });

const POLICIES: KubeObject[] = [
  // x/a accepts x/c (TCP 80, UDP 53) and y's subnets on TCP 80, in both families, y/d excepted.
  {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'a-in', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [
        { from: [{ podSelector: { matchLabels: { pod: 'c' } } }], ports: [{ port: 80 }, { protocol: 'UDP', port: 53 }] },
        { from: [{ ipBlock: { cidr: 'fd00:2::/64', except: ['fd00:2::22/128'] } }, { ipBlock: { cidr: '10.2.0.0/16', except: ['10.2.0.22/32'] } }], ports: [{ port: 80 }] },
      ],
    },
  },
  // x/b may send TCP 80 to any IPv6 address and UDP 53 to any IPv4 address, nothing else.
  {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'b-out', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'b' } }, policyTypes: ['Egress'],
      egress: [{ to: [{ ipBlock: { cidr: '::/0' } }], ports: [{ port: 80 }] }, { to: [{ ipBlock: { cidr: '0.0.0.0/0' } }], ports: [{ protocol: 'UDP', port: 53 }] }],
    },
  },
  // Antrea: x/b never reaches 2001:db8::/32 and rejects UDP to y/r's IPv6 address; x/c drops
  // ICMPv6 echo from anywhere and ICMP echo from y.
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'sec-b' },
    spec: {
      priority: 1, tier: 'securityops',
      appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'b' } } }],
      egress: [
        { name: 'no-doc-net', action: 'Drop', to: [{ ipBlock: { cidr: '2001:db8::/32' } }] },
        { name: 'reject-udp-r6', action: 'Reject', to: [{ ipBlock: { cidr: 'fd00:2::21/128' } }], ports: [{ protocol: 'UDP' }] },
      ],
    },
  },
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'sec-c' },
    spec: {
      priority: 2, tier: 'securityops',
      appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }],
      ingress: [
        { name: 'no-echo6', action: 'Drop', protocols: [{ icmp: { icmpType: 128 } }] },
        { name: 'no-echo-from-y', action: 'Drop', from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], protocols: [{ icmp: { icmpType: 8 } }] },
      ],
    },
  },
  // AdminNetworkPolicy: x/c may not reach fd00:2::/48 on TCP 443 (its IPv4 peers are not in it).
  {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'c-443' },
    spec: {
      priority: 5, subject: { pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } } },
      egress: [{ name: 'deny-v6-443', action: 'Deny', to: [{ networks: ['fd00:2::/48'] }], ports: [{ portNumber: { protocol: 'TCP', port: 443 } }] }],
    },
  },
];

const why = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ovs-appctl', 'ip']);
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  t.teardown(teardown);
  const { flowProgrammer, gw, ports } = await startTraceBridge(NS, DIR, 'p6p', Object.fromEntries(Object.entries(LOCAL).map(([name, ips]) => [name, ips[4]])));

  const engine = new PolicyEngine({ nodeName: 'n1' });
  for (const o of [nodeObj('n1', [NODE[4], NODE[6]]), nodeObj('n2', ['192.168.100.2', 'fd00:ff::2']), ns('x'), ns('y')]) engine.upsert(o);
  for (const [name, ips] of Object.entries(LOCAL)) engine.upsert(podObj('x', name, ips, 'n1'));
  for (const [ref, ips] of Object.entries(REMOTE)) engine.upsert(podObj(ref.split('/')[0]!, ref.split('/')[1]!, ips, 'n2'));
  for (const p of POLICIES) engine.upsert(p);

  const pipeline = computeFlows({
    gatewayOfport: gw.ofport, gatewayMac: gw.mac, nodeIP: NODE[4], nodeIPv6: NODE[6], serviceCIDRs: [SERVICE_CIDR[4], SERVICE_CIDR[6]],
    pods: Object.entries(ports).map(([name, p]) => ({ containerId: `c-${name}`, ofport: p.ofport, mac: p.mac, ips: [LOCAL[name]![4], LOCAL[name]![6]] })),
  });
  const policy = new PolicyFlows();
  policy.sync(policyFlowInput(engine));

  const dpPorts = async () => {
    const show = (await sh('ovs-appctl', ['dpif/show'])).stdout;
    const of = (name: string) => new RegExp(`\\b${name} \\d+/(\\d+)`).exec(show)?.[1];
    return { gw: of('antrea-gw0')!, ...Object.fromEntries(Object.keys(LOCAL).map((n) => [n, of(`p6p${n}`)!])) } as Record<string, string>;
  };

  const addressOf = (ref: string, family: 4 | 6): string => {
    if (ref.startsWith('ip:')) return ref.slice(3);
    const local = /^x\/([abc])$/.exec(ref);
    return (local ? LOCAL[local[1]!] : REMOTE[ref])![family];
  };
  /** The trace flow of a probe's first packet in one family. */
  const traceFlow = (probe: Probe, family: 4 | 6): string => {
    const local = /^x\/([abc])$/.exec(probe.from);
    const where = local
      ? `in_port=${ports[local[1]!]!.ofport},dl_src=${ports[local[1]!]!.mac},dl_dst=aa:bb:cc:dd:ee:ff`
      : `in_port=${gw.ofport},dl_src=12:34:56:78:9a:bc,dl_dst=aa:bb:cc:dd:ee:ff`;
    const addrs = family === 4 ? `nw_src=${addressOf(probe.from, 4)},nw_dst=${addressOf(probe.to, 4)}` : `ipv6_src=${addressOf(probe.from, 6)},ipv6_dst=${addressOf(probe.to, 6)}`;
    const p = probe.protocol.toLowerCase();
    const l4 = probe.protocol === 'ICMP'
      ? (family === 4 ? ['icmp', 'icmp_type=8,icmp_code=0'] : ['icmp6', 'icmpv6_type=128,icmpv6_code=0'])
      : [family === 4 ? p : `${p}6`, `${p}_src=40000,${p}_dst=${probe.port}`];
    return `${l4[0]},${where},${addrs},nw_ttl=64,${l4[1]}`;
  };

  /** One ofproto/trace of a first packet: its verdict by the final datapath actions. */
  const traceVerdict = (flow: string, expectOut: string) => traceFirstPacket(sh, flow, expectOut);

  /** This node's verdict: the first non-allow among the local sides of engine.explain(). */
  const localPods = new Set(Object.keys(LOCAL).map((n) => `x/${n}`));
  const expected = (probe: Probe) => localVerdict(engine, localPods, probe);

  const PROBES: Probe[] = [];
  const both = (from: string, to: string, protocol: Probe['protocol'], port: number) => {
    for (const family of [4, 6] as const) PROBES.push({ from, to, protocol, port, family });
  };
  const one = (from: string, to: string, protocol: Probe['protocol'], port: number) => PROBES.push({ from, to, protocol, port });
  for (const proto of ['TCP', 'UDP', 'SCTP'] as const) for (const port of [80, 81, 53]) both('x/c', 'x/a', proto, port);
  for (const from of ['y/r', 'y/d', 'x/b']) both(from, 'x/a', 'TCP', 80);
  both('y/r', 'x/a', 'UDP', 53);
  for (const from of ['y/r', 'x/a']) both(from, 'x/c', 'ICMP', 0);
  both('x/b', 'y/r', 'UDP', 53);
  both('x/b', 'y/r', 'TCP', 80);
  both('x/b', 'y/d', 'UDP', 53);
  both('x/c', 'y/r', 'TCP', 443);
  both('x/c', 'y/r', 'TCP', 80);
  for (const ip of ['2001:db8::5', '2001:db9::5', 'fd00:2::99', 'fd00:3::1']) for (const [proto, port] of [['TCP', 80], ['UDP', 53], ['TCP', 443]] as const) {
    one('x/b', `ip:${ip}`, proto, port);
    one('x/c', `ip:${ip}`, proto, port);
  }
  for (const ip of ['8.8.8.8', '10.2.0.99']) for (const [proto, port] of [['TCP', 80], ['UDP', 53]] as const) one('x/b', `ip:${ip}`, proto, port);

  await t.test('dual-stack policy flows load into OVS in one bundle', async (t) => {
    t.same(engine.errors(), [], 'all policies are valid');
    if (engine.errors().length) t.comment(JSON.stringify(engine.errors()));
    const flows = policy.flows();
    const v6 = flows.filter((f) => /\bipv6\b|ipv6_|tcp6|udp6|sctp6|icmp6/.test(f.match));
    t.ok(v6.length >= 15, `${v6.length} of ${flows.length} policy flows match IPv6`);
    t.ok(flows.some((f) => f.match.includes('icmpv6_type=128')), 'an ICMPv6 type match');
    const desired = [...pipeline, ...flows];
    const r = await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--bundle', 'add-flows', flowProgrammer.target, '-'], { input: bundleText({ add: desired, remove: [], unchanged: 0 }), allowFail: true });
    t.equal(r.code, 0, `ovs-ofctl accepted every flow${r.code ? `: ${r.stderr}` : ''}`);
    const dumped = (await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', flowProgrammer.target])).stdout.split('\n').filter((l) => l.includes('cookie=')).length;
    t.equal(dumped, desired.length, 'every flow is installed');
  });

  await t.test('every probe of each family gets the engine verdict from ofproto/trace', async (t) => {
    const dp = await dpPorts();
    const seen: Record<string, number> = {};
    for (const probe of PROBES) {
      const family = probe.family ?? (addressOf(probe.to, 4).includes(':') ? 6 : 4);
      const want = expected(probe);
      const dst = probe.to.startsWith('x/') ? dp[probe.to.slice(2)]! : dp.gw!;
      const got = await traceVerdict(traceFlow(probe, family), dst);
      seen[`${want.verdict}/IPv${family}`] = (seen[`${want.verdict}/IPv${family}`] ?? 0) + 1;
      const ok = got.verdict === want.verdict;
      t.ok(ok, `IPv${family} ${probe.from} -> ${probe.to} ${probe.protocol}/${probe.port}: engine ${want.verdict}${want.by ? ` (${want.by})` : ''}, datapath ${got.verdict}`);
      if (!ok) t.comment(got.out.split('\n').filter((l) => /^\s*\d+\.|Datapath actions|Final flow/.test(l)).join('\n'));
    }
    t.comment(`${PROBES.length} probes, engine verdicts ${JSON.stringify(seen)}`);
    for (const v of ['allow/IPv6', 'drop/IPv6', 'reject/IPv6', 'allow/IPv4', 'drop/IPv4']) t.ok((seen[v] ?? 0) > 0, `the probes include ${v}`);
    const differ = PROBES.filter((p) => p.family === 4).filter((p) => expected(p).verdict !== expected({ ...p, family: 6 }).verdict);
    t.ok(differ.length >= 3, `${differ.length} probes get a different verdict per family`);
  });
}
