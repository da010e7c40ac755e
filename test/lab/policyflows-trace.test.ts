/**
 * Model = datapath for the policy flows, by `ofproto/trace`: the base pipeline plus the compiled
 * policy flows are loaded into a real OVS (netdev, private directories, in a "pf-n1" network
 * namespace) with `ovs-ofctl --bundle add-flows`, and synthetic TCP/UDP/SCTP/ICMP packets must
 * get the verdict the engine gives for this node's sides (PolicyEngine.explain: egress of local
 * sources, ingress of local destinations; equal to evaluate() when both ends are local). SCTP can only be checked this way on this machine
 * (no SCTP sockets in the lab), which the test output says.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { bundleText, diffFlows } from '../../daemon/flows/diff.js';
import { computeFlows } from '../../daemon/flows/pipeline.js';
import { decodePolicyPuntExtra, decodePolicyPuntRegs, dirtyRuleIds, PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { ChangeSet } from '../../daemon/policy/internal.js';
import type { KubeObject, Probe, Verdict } from '../../daemon/policy/types.js';
import { missingPrereq, ovsShell, localVerdict, startTraceBridge, stopTraceBridge, traceFirstPacket } from './datapath-env.js';

const NS = 'pf-n1';
const DIR = `/tmp/${NS}`;
const RUN = join(DIR, 'ovs');
const sh = ovsShell(RUN);
const NODE_IP = '192.168.100.1';

const teardown = () => stopTraceBridge(NS, DIR);

// ---- cluster objects -------------------------------------------------------------------------

const ns = (name: string, annotations?: Record<string, string>): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name }, ...(annotations ? { annotations } : {}) } });
const podObj = (namespace: string, name: string, ip: string, node: string): KubeObject => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: { pod: name } },
  spec: { nodeName: node, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 8080 }, { name: 'dns', containerPort: 53, protocol: 'UDP' }] }] },
  status: { podIP: ip },
});
const nodeObj = (name: string, ip: string): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name }, status: { addresses: [{ type: 'InternalIP', address: ip }] } });

const LOCAL = { a: '10.1.0.11', b: '10.1.0.12', c: '10.1.0.13' } as const;
const REMOTE = { 'y/r': '10.2.0.21', 'x/d': '10.2.0.22' } as const;
const SVC_IP = '10.96.0.10';
const SVC2_IP = '10.96.0.11';

const POLICIES: KubeObject[] = [
  // K8s: x/a accepts x/c on TCP 80 (and the named port http), UDP 53, SCTP 9000, TCP 2000-2100; isolated for ingress.
  {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'a-in', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'a' } },
      ingress: [
        { from: [{ podSelector: { matchLabels: { pod: 'c' } } }], ports: [{ port: 80 }, { port: 81 }, { port: 'http' }, { port: 53, protocol: 'UDP' }, { port: 9000, protocol: 'SCTP' }, { port: 2000, endPort: 2100 }] },
        { from: [{ podSelector: { matchLabels: { pod: 'b' } } }], ports: [{ port: 8080 }, { port: 81 }] },
      ],
    },
  },
  // K8s: x/b may only talk to x/a:80/8080 and 8.8.8.0/24 UDP 53 (egress isolated).
  {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'b-out', namespace: 'x' },
    spec: {
      podSelector: { matchLabels: { pod: 'b' } }, policyTypes: ['Egress'],
      egress: [
        { to: [{ podSelector: { matchLabels: { pod: 'a' } } }], ports: [{ port: 80 }, { port: 8080 }] },
        { to: [{ ipBlock: { cidr: '8.8.8.0/24' } }], ports: [{ port: 53, protocol: 'UDP' }] },
      ],
    },
  },
  // Antrea securityops: into x/a from namespace y: UDP 5353 rejected, SCTP 7000 dropped, the rest passed to K8s.
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'secops-a' },
    spec: {
      priority: 5, tier: 'securityops',
      appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'a' } } }],
      ingress: [
        { name: 'reject-udp', action: 'Reject', enableLogging: true, from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'UDP', port: 5353 }] },
        { name: 'drop-sctp', action: 'Drop', from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'SCTP', port: 7000 }] },
        { name: 'pass-y', action: 'Pass', from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }] },
      ],
    },
  },
  // Antrea application: x/b egress to 8.0.0.0/8 except 8.8.8.0/24 dropped; x/c may not ping from y; x/c egress to the Service rejected.
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'app' },
    spec: {
      priority: 10, tier: 'application',
      egress: [
        { name: 'no-8', action: 'Drop', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'b' } } }], to: [{ ipBlock: { cidr: '8.0.0.0/8', except: ['8.8.8.0/24'] } }] },
        { name: 'no-svc', action: 'Reject', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], toServices: [{ name: 'svc', namespace: 'x' }] },
        { name: 'c-no-d', action: 'Drop', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], to: [{ podSelector: { matchLabels: { pod: 'd' } } }] },
        // toServices Allow before a rule that drops the endpoint: x/c reaches a:81 through svc2 only.
        { name: 'svc2-ok', action: 'Allow', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], toServices: [{ name: 'svc2', namespace: 'x' }] },
        { name: 'c-no-81', action: 'Drop', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], to: [{ ipBlock: { cidr: '10.0.0.0/8' } }], ports: [{ protocol: 'TCP', port: 81 }] },
      ],
      ingress: [
        { name: 'log-web', action: 'Allow', enableLogging: true, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'TCP', port: 80 }] },
        { name: 'no-ping', action: 'Drop', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }], from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], protocols: [{ icmp: { icmpType: 8, icmpCode: 0 } }] },
      ],
    },
  },
  // AdminNetworkPolicy (tier 251, after application): x/c denies SCTP 7777 from y, allows TCP 443 from y.
  {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'anp-c' },
    spec: {
      priority: 3,
      subject: { pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } } },
      ingress: [
        { name: 'deny-sctp', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'y' } } }], ports: [{ portNumber: { protocol: 'SCTP', port: 7777 } }] },
        { name: 'allow-443', action: 'Allow', from: [{ namespaces: { matchLabels: { ns: 'y' } } }], ports: [{ portNumber: { protocol: 'TCP', port: 443 } }] },
      ],
    },
  },
  // Baseline tier: x/c drops TCP 22 from anywhere (c is not isolated by any K8s policy).
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'base' },
    spec: {
      priority: 1, tier: 'baseline',
      appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } }],
      ingress: [{ name: 'no-ssh', action: 'Drop', ports: [{ protocol: 'TCP', port: 22 }] }],
    },
  },
  // Baseline tier: x/a and x/b may not use the Services (b is egress-isolated by K8s: never reached for b).
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'base-svc' },
    spec: {
      priority: 2, tier: 'baseline',
      appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchExpressions: [{ key: 'pod', operator: 'In', values: ['a', 'b'] }] } }],
      egress: [{ name: 'no-svc', action: 'Reject', toServices: [{ name: 'svc', namespace: 'x' }, { name: 'svc2', namespace: 'x' }] }],
    },
  },
  // BaselineAdminNetworkPolicy: x/c rejects UDP 9999 from y.
  {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' },
    spec: {
      subject: { pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: 'c' } } } },
      ingress: [{ name: 'deny-9999', action: 'Deny', from: [{ namespaces: { matchLabels: { ns: 'y' } } }], ports: [{ portNumber: { protocol: 'UDP', port: 9999 } }] }],
    },
  },
];

const why = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ovs-appctl', 'ip']);
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  t.teardown(teardown);
  const { flowProgrammer, gw, ports } = await startTraceBridge(NS, DIR, 'pfp', LOCAL);

  const engine = new PolicyEngine({ nodeName: 'n1' });
  for (const o of [nodeObj('n1', NODE_IP), nodeObj('n2', '192.168.100.2'), ns('x', { 'networkpolicy.antrea.io/enable-logging': 'true' }), ns('y')]) engine.upsert(o);
  for (const [name, ip] of Object.entries(LOCAL)) engine.upsert(podObj('x', name, ip, 'n1'));
  for (const [ref, ip] of Object.entries(REMOTE)) {
    const [n, p] = ref.split('/') as [string, string];
    engine.upsert(podObj(n, p, ip, 'n2'));
  }
  engine.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: SVC_IP, selector: { pod: 'a' }, ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }] } });
  engine.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc2', namespace: 'x' }, spec: { clusterIP: SVC2_IP, selector: { pod: 'a' }, ports: [{ port: 81, targetPort: 81, protocol: 'TCP' }] } });
  for (const svc of ['svc', 'svc2']) {
    engine.upsert({
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: `${svc}-1`, namespace: 'x', labels: { 'kubernetes.io/service-name': svc } },
      endpoints: [{ addresses: [LOCAL.a], conditions: { ready: true }, targetRef: { kind: 'Pod', name: 'a', namespace: 'x' } }],
    } as KubeObject);
  }

  const pipeline = computeFlows({
    gatewayOfport: gw.ofport, gatewayMac: gw.mac, nodeIP: NODE_IP, serviceCIDRs: ['10.96.0.0/16'],
    pods: Object.entries(ports).map(([name, p]) => ({ containerId: `c-${name}`, ofport: p.ofport, mac: p.mac, ips: [p.ip] })),
  });
  const policy = new PolicyFlows();

  /** Loads pipeline + policy flows as the agent would: one bundle of the diff against what is installed. */
  const install = async () => {
    const desired = [...pipeline, ...policy.flows()];
    const diff = diffFlows(desired, await flowProgrammer.installedCookies());
    await flowProgrammer.ofctl(['--bundle', 'add-flows', flowProgrammer.target, '-'], bundleText(diff));
    return diff;
  };

  const dpPorts = async () => {
    const show = (await sh('ovs-appctl', ['dpif/show'])).stdout;
    const of = (name: string) => new RegExp(`\\b${name} \\d+/(\\d+)`).exec(show)?.[1];
    return { gw: of('antrea-gw0')!, ...Object.fromEntries(Object.keys(LOCAL).map((n) => [n, of(`pfp${n}`)!])) } as Record<string, string>;
  };

  /** ofproto/trace wants the protocol keyword before the fields that depend on it. */
  const l4 = (protocol: Probe['protocol'], port: number) =>
    protocol === 'ICMP' ? 'icmp,icmp_type=8,icmp_code=0' : `${protocol.toLowerCase()},${protocol.toLowerCase()}_src=40000,${protocol.toLowerCase()}_dst=${port}`;
  const packet = (where: string, rest: string, l4part: string) => `${l4part.split(',')[0]},${where},${rest},${l4part.split(',').slice(1).join(',')}`.replace(/,$/, '');

  /** The endpoint side of a trace: in_port and addresses. */
  const from = (ref: string): string => {
    const local = /^x\/([abc])$/.exec(ref);
    if (local) {
      const p = ports[local[1]!]!;
      return `in_port=${p.ofport},dl_src=${p.mac},dl_dst=aa:bb:cc:dd:ee:ff,nw_src=${p.ip}`;
    }
    const ip = ref.startsWith('ip:') ? ref.slice(3) : REMOTE[ref as keyof typeof REMOTE];
    if (!ip) throw new Error(`no address for ${ref}`);
    return `in_port=${gw.ofport},dl_src=12:34:56:78:9a:bc,dl_dst=aa:bb:cc:dd:ee:ff,nw_src=${ip}`;
  };
  const addressOf = (ref: string): string => {
    const local = /^x\/([abc])$/.exec(ref);
    if (local) return ports[local[1]!]!.ip;
    if (ref.startsWith('ip:')) return ref.slice(3);
    return REMOTE[ref as keyof typeof REMOTE];
  };

  /** One ofproto/trace of a first packet: its verdict by the final datapath actions. */
  const traceVerdict = (flow: string, expectOut: string) => traceFirstPacket(sh, flow, expectOut);

  /** The datapath's verdict for a probe, Service probes as pre-DNAT + re-entered post-DNAT packets. */
  const datapathVerdict = async (probe: Probe): Promise<{ verdict: Verdict | 'other'; out: string }> => {
    const dp = await dpPorts();
    const outPort = (ip: string) => {
      const local = Object.entries(LOCAL).find(([, v]) => v === ip);
      return local ? dp[local[0]]! : dp.gw!;
    };
    const svc = { 'service:x/svc': { ip: SVC_IP, targetPort: 8080 }, 'service:x/svc2': { ip: SVC2_IP, targetPort: 81 } }[probe.to];
    if (svc) {
      const pre = await traceVerdict(packet(from(probe.from), `nw_dst=${svc.ip},nw_ttl=64`, l4(probe.protocol, probe.port)), dp.gw!);
      if (pre.verdict !== 'allow') return pre;
      // kube-proxy DNATs to the endpoint x/a and the packet comes back from antrea-gw0.
      const src = addressOf(probe.from);
      return traceVerdict(packet(`in_port=${gw.ofport},dl_src=${gw.mac},dl_dst=12:34:56:78:9a:bc`, `nw_src=${src},nw_dst=${LOCAL.a},nw_ttl=64`, l4(probe.protocol, svc.targetPort)), outPort(LOCAL.a));
    }
    const dst = addressOf(probe.to);
    return traceVerdict(packet(from(probe.from), `nw_dst=${dst},nw_ttl=64`, l4(probe.protocol, probe.port)), outPort(dst));
  };

  /**
   * What this node's bridge must do: it enforces the egress of its own Pods and the ingress of its
   * own Pods only (a remote Pod's side is its node's business), so the expected verdict is the first
   * non-allow among the local sides of engine.explain(), egress first.
   */
  const localPods = new Set(Object.keys(LOCAL).map((n) => `x/${n}`));
  const expected = (probe: Probe) => localVerdict(engine, localPods, probe);

  const PROBES: Probe[] = [];
  const add = (from: string, to: string, protocol: Probe['protocol'], port: number) => PROBES.push({ from, to, protocol, port });
  for (const proto of ['TCP', 'UDP', 'SCTP'] as const) for (const port of [80, 81, 53, 9000, 5353, 7000, 2050, 8080]) add('x/c', 'x/a', proto, port);
  for (const proto of ['TCP', 'UDP', 'SCTP'] as const) for (const port of [80, 5353, 7000, 9000]) add('y/r', 'x/a', proto, port);
  add('y/r', 'x/a', 'ICMP', 0);
  add('x/c', 'x/a', 'ICMP', 0);
  for (const [to, proto, port] of [['8.8.8.8', 'UDP', 53], ['8.8.8.8', 'TCP', 53], ['8.1.2.3', 'UDP', 53], ['1.1.1.1', 'UDP', 53]] as const) add('x/b', `ip:${to}`, proto, port);
  for (const port of [80, 8080, 81]) add('x/b', 'x/a', 'TCP', port);
  add('x/b', 'x/c', 'TCP', 80);
  add('x/b', 'y/r', 'TCP', 80);
  for (const proto of ['TCP', 'UDP', 'SCTP'] as const) for (const port of [22, 443, 7777, 9999, 80]) add('y/r', 'x/c', proto, port);
  add('y/r', 'x/c', 'ICMP', 0);
  add('x/a', 'x/c', 'TCP', 22);
  add('ip:192.168.100.1', 'x/a', 'TCP', 12345); // kubelet probe: host-originated, never blocked
  add('ip:192.168.100.2', 'x/a', 'TCP', 80); // another node: isolation applies
  add('x/c', 'x/d', 'TCP', 80);
  add('x/c', 'service:x/svc', 'TCP', 80); // toServices Reject (pre-DNAT)
  add('x/c', 'service:x/svc2', 'TCP', 81); // toServices Allow precedes c-no-81, which drops a:81 itself
  add('x/b', 'service:x/svc', 'TCP', 80); // b -> a:8080 allowed by K8s after DNAT (b's pre-DNAT packet is not an egress verdict)
  add('x/b', 'service:x/svc2', 'TCP', 81); // b -> a:81: b's egress isolation drops the re-entered packet
  add('x/a', 'service:x/svc2', 'TCP', 81); // baseline toServices Reject (a is not egress-isolated)
  add('x/a', 'service:x/svc', 'TCP', 80);
  add('y/r', 'x/a', 'TCP', 2050);

  const compare = async (t: Test, label: string) => {
    const seen: Record<string, number> = {};
    let sctp = 0;
    for (const probe of PROBES) {
      const want = expected(probe);
      const got = await datapathVerdict(probe);
      seen[want.verdict] = (seen[want.verdict] ?? 0) + 1;
      if (probe.protocol === 'SCTP') sctp++;
      const ok = got.verdict === want.verdict;
      t.ok(ok, `${label}: ${probe.from} -> ${probe.to} ${probe.protocol}/${probe.port}: engine ${want.verdict}${want.by ? ` (${want.by})` : ''}, datapath ${got.verdict}`);
      if (!ok) t.comment(got.out.split('\n').filter((l) => /^\s*\d+\.|Datapath actions|Final flow/.test(l)).join('\n'));
    }
    t.comment(`${label}: ${PROBES.length} probes (${sctp} SCTP: verdict from ofproto/trace, not real packets), engine verdicts ${JSON.stringify(seen)}`);
    return seen;
  };

  await t.test('compiled flows load into OVS with one bundle and every probe gets the engine verdict', async (t) => {
    for (const p of POLICIES) engine.upsert(p);
    t.same(engine.errors(), [], 'all policies are valid');
    if (engine.errors().length) t.comment(JSON.stringify(engine.errors(), null, 1));
    const delta = policy.sync(policyFlowInput(engine));
    t.ok(delta.add.length > 20, `${delta.add.length} policy flows compiled`);
    const diff = await install();
    t.equal(diff.add.length, pipeline.length + policy.flows().length, 'ovs-ofctl accepted every flow in one bundle');
    t.same((await flowProgrammer.installedCookies()).sort(), [...pipeline, ...policy.flows()].map((f) => f.cookie).sort(), 'installed = desired');
    const seen = await compare(t, 'initial');
    for (const v of ['allow', 'drop', 'reject']) t.ok((seen[v] ?? 0) > 0, `scenarios include ${v}`);
  });

  await t.test('the audit/reject punt identifies the rule', async (t) => {
    const dp = await dpPorts();
    const r = await traceVerdict(packet(from('y/r'), `nw_dst=${LOCAL.a},nw_ttl=64`, 'udp,udp_src=40000,udp_dst=5353'), dp.a!);
    t.equal(r.verdict, 'reject');
    const ud = /userdata=((?:[0-9a-f]{2}\.?)+)/.exec(r.out)?.[1];
    t.ok(ud, 'trace shows the userdata');
    const bytes = Buffer.from(ud!.split('.').map((x) => parseInt(x, 16)));
    t.equal(bytes[0], 0x01, 'policy category');
    t.equal(bytes[1], 0x03, 'log + reject');
    const punt = decodePolicyPuntExtra(bytes.subarray(2))!;
    const rule = policy.describe(punt.conjId);
    t.equal(rule?.ref.name, 'secops-a');
    t.equal(rule?.ref.rule, 'reject-udp');
    t.equal(rule?.priority, punt.priority, 'priority in userdata = the rule flow priority');
    const regs = /reg2=(0x[0-9a-f]+),reg3=(0x[0-9a-f]+)/.exec([...r.out.matchAll(/Final flow: (.*)/g)].pop()?.[1] ?? '');
    t.ok(regs, 'the final flow shows reg2/reg3');
    t.same(decodePolicyPuntRegs(Number(regs![1]), Number(regs![2])), { ...punt, ops: 3 }, 'the registers carry the same facts (for packet-ins without userdata)');
  });

  await t.test('logging flows punt a metered copy and still decide', async (t) => {
    const dp = await dpPorts();
    const allowLog = await traceVerdict(packet(from('y/r'), `nw_dst=${LOCAL.c},nw_ttl=64`, 'tcp,tcp_src=40000,tcp_dst=80'), dp.c!);
    t.equal(allowLog.verdict, 'allow', 'Allow + log forwards the packet');
    t.match(allowLog.out, /controller\(userdata=01\.01\.[0-9a-f.]+,meter_id=256\)/, 'and sends a metered copy to the agent');
    const isoLog = await traceVerdict(packet(from('y/r'), `nw_dst=${LOCAL.a},nw_ttl=64`, 'tcp,tcp_src=40000,tcp_dst=80'), dp.a!);
    t.equal(isoLog.verdict, 'drop', 'a logged Kubernetes default drop still drops');
    const ud = [...isoLog.out.matchAll(/userdata=((?:[0-9a-f]{2}\.?)+)/g)].pop()?.[1] ?? '';
    const punt = decodePolicyPuntExtra(Buffer.from(ud.split('.').slice(2).map((x) => parseInt(x, 16))));
    t.equal(punt?.conjId, 0, 'default drop: conjunction id 0 (K8sNetworkPolicy)');
    t.equal(punt?.priority, 64500);
  });

  await t.test('incremental change: policy edit and relabel applied as deltas, verdicts follow', async (t) => {
    const before = new Map(policy.flows().map((f) => [f.cookie, f]));
    // y/r is relabelled into x/a's K8s allow list; the Pass of secops-a then leads to an allow on TCP 80.
    const cs1 = engine.upsert(POLICIES[0]!.spec.ingress ? {
      ...POLICIES[0]!,
      spec: { ...POLICIES[0]!.spec, ingress: [...POLICIES[0]!.spec.ingress, { from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ port: 80 }] }] },
    } : POLICIES[0]!);
    const d1 = policy.sync(policyFlowInput(engine), dirtyRuleIds(cs1, engine));
    t.ok(d1.add.length > 0 && d1.add.length < 12, `policy edit: ${d1.add.length} flows added, ${d1.remove.length} removed`);
    const cs2 = engine.remove({ apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', name: 'default' });
    const d2 = policy.sync(policyFlowInput(engine), dirtyRuleIds(cs2, engine));
    t.ok(d2.remove.length > 0, `BANP removed: ${d2.remove.length} flows deleted`);
    // The delta applied to the old set is the new set.
    const after = new Map(before);
    for (const d of [d1, d2]) {
      for (const f of d.remove) after.delete(f.cookie);
      for (const f of d.add) after.set(f.cookie, f);
    }
    t.same([...after.keys()].sort(), policy.flows().map((f) => f.cookie).sort(), 'deltas compose to the full set');
    const diff = await install();
    t.equal(diff.add.length, d1.add.length + d2.add.length - [...d1.add].filter((f) => d2.remove.some((r) => r.cookie === f.cookie)).length, 'the bundle adds only the changed flows');
    await compare(t, 'after change');
  });

  await t.test('policy flows load before the packet-in meters exist (agent start, ovs-vswitchd restart)', async (t) => {
    await flowProgrammer.ofctl(['del-meters', flowProgrammer.target]);
    await flowProgrammer.ofctl(['del-flows', flowProgrammer.target]);
    const diff = await install();
    t.equal(diff.add.length, pipeline.length + policy.flows().length, 'the whole bundle is accepted without meters');
    const dp = await dpPorts();
    const r = await traceVerdict(packet(from('y/r'), `nw_dst=${LOCAL.a},nw_ttl=64`, 'udp,udp_src=40000,udp_dst=5353'), dp.a!);
    t.equal(r.verdict, 'reject', 'Reject still punts');
  });

  await t.test('random policy sets: every probe gets the engine verdict (incremental updates on a live bridge)', async (t) => {
    for (const p of POLICIES) engine.remove({ apiVersion: p.apiVersion, kind: p.kind, ...(p.metadata.namespace ? { namespace: p.metadata.namespace } : {}), name: p.metadata.name });
    let current: KubeObject[] = [];
    const rand = rng(Number(process.env.PF_SEED ?? 2024));
    const probes: Probe[] = [];
    const ends = ['x/a', 'x/b', 'x/c', 'y/r', 'x/d'];
    const l4s: [Probe['protocol'], number][] = [['TCP', 80], ['TCP', 8080], ['UDP', 53], ['SCTP', 9000], ['ICMP', 0], ['TCP', 8050]];
    for (const from of ends) for (const to of ends) {
      if (from === to || (!from.startsWith('x/') && !to.startsWith('x/')) || (!/^x\/[abc]$/.test(from) && !/^x\/[abc]$/.test(to))) continue;
      for (const [protocol, port] of l4s) probes.push({ from, to, protocol, port });
    }
    for (const from of ['x/a', 'x/b', 'x/c']) probes.push({ from, to: 'service:x/svc', protocol: 'TCP', port: 80 }, { from, to: 'service:x/svc2', protocol: 'TCP', port: 81 });
    probes.push({ from: 'ip:192.168.100.1', to: 'x/b', protocol: 'TCP', port: 80 }, { from: 'ip:8.8.8.8', to: 'x/c', protocol: 'UDP', port: 53 });
    let mismatches = 0;
    const seen: Record<string, number> = {};
    const rounds = Number(process.env.PF_ROUNDS ?? 4);
    for (let round = 0; round < rounds; round++) {
      const next = Array.from({ length: 4 + Math.floor(rand() * 4) }, (_, i) => labPolicy(rand, `${round}-${i}`));
      let cs: ChangeSet[] = [];
      for (const p of current) cs.push(engine.remove({ apiVersion: p.apiVersion, kind: p.kind, ...(p.metadata.namespace ? { namespace: p.metadata.namespace } : {}), name: p.metadata.name }));
      for (const p of next) cs.push(engine.upsert(p));
      current = next;
      t.same(engine.errors(), [], `round ${round}: the random policies are valid`);
      for (const c of cs) policy.sync(policyFlowInput(engine), dirtyRuleIds(c, engine));
      cs = [];
      await install();
      for (const probe of probes) {
        const want = expected(probe);
        const got = await datapathVerdict(probe);
        seen[want.verdict] = (seen[want.verdict] ?? 0) + 1;
        if (got.verdict !== want.verdict) {
          mismatches++;
          t.fail(`round ${round}: ${probe.from} -> ${probe.to} ${probe.protocol}/${probe.port}: engine ${want.verdict} ${want.by}, datapath ${got.verdict}`);
          t.comment(JSON.stringify(next));
        }
      }
    }
    t.equal(mismatches, 0, `${rounds} random policy sets x ${probes.length} probes (SCTP by ofproto/trace): verdicts ${JSON.stringify(seen)}`);
  });
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 0x100000000;
  };
}

/** A random valid policy over the lab's Pods (labels pod=<name>, namespaces x and y). */
function labPolicy(r: () => number, name: string): KubeObject {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const pod = () => pick(['a', 'b', 'c']);
  const dir = r() < 0.5 ? 'ingress' : 'egress';
  const peerKey = dir === 'ingress' ? 'from' : 'to';
  const k8sPorts = () => (r() < 0.3 ? undefined : [pick([{ port: 80 }, { port: 'http' }, { port: 53, protocol: 'UDP' }, { port: 9000, protocol: 'SCTP' }, { port: 8000, endPort: 8063 }])]);
  const k = r();
  if (k < 0.35) {
    const peer = pick([{ podSelector: { matchLabels: { pod: pick(['a', 'b', 'c', 'd']) } } }, { namespaceSelector: { matchLabels: { ns: pick(['x', 'y']) } } }, { ipBlock: { cidr: '10.0.0.0/8', except: ['10.2.0.0/24'] } }]);
    const ports = k8sPorts();
    return {
      apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np-${name}`, namespace: 'x' },
      spec: { podSelector: r() < 0.2 ? {} : { matchLabels: { pod: pod() } }, policyTypes: [dir === 'ingress' ? 'Ingress' : 'Egress'], [dir]: r() < 0.15 ? [] : [{ ...(r() < 0.2 ? {} : { [peerKey]: [peer] }), ...(ports ? { ports } : {}) }] },
    };
  }
  if (k < 0.75) {
    const tier = pick(['securityops', 'application', 'baseline']);
    const action = pick(tier === 'baseline' ? ['Allow', 'Drop', 'Reject'] : ['Allow', 'Drop', 'Reject', 'Pass']);
    const peer = pick([{ namespaceSelector: { matchLabels: { ns: pick(['x', 'y']) } } }, { podSelector: { matchLabels: { pod: pick(['a', 'b', 'c', 'd', 'r']) } }, namespaceSelector: {} }, { ipBlock: { cidr: '10.1.0.0/16' } }]);
    const rule: Record<string, unknown> = { action };
    if (dir === 'egress' && r() < 0.2) rule.toServices = [{ name: pick(['svc', 'svc2']), namespace: 'x' }];
    else {
      if (r() < 0.85) rule[peerKey] = [peer];
      const pr = r();
      if (pr < 0.2) rule.protocols = [{ icmp: { icmpType: 8, icmpCode: 0 } }];
      else if (pr < 0.6) rule.ports = [pick([{ protocol: 'TCP', port: 80 }, { protocol: 'UDP', port: 53 }, { protocol: 'SCTP', port: 9000 }, { protocol: 'TCP', port: 8000, endPort: 8063 }, { protocol: 'TCP', port: 8080 }])];
    }
    return {
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: `acnp-${name}` },
      spec: { priority: 1 + Math.floor(r() * 5), tier, appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: r() < 0.2 ? {} : { matchLabels: { pod: pod() } } }], [dir]: [rule] },
    };
  }
  const subject = { pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { pod: pod() } } } };
  const peer = dir === 'ingress' ? pick([{ namespaces: { matchLabels: { ns: pick(['x', 'y']) } } }, { pods: { namespaceSelector: {}, podSelector: { matchLabels: { pod: pick(['a', 'b', 'c', 'r']) } } } }]) : { pods: { namespaceSelector: {}, podSelector: { matchLabels: { pod: pick(['a', 'b', 'c', 'd', 'r']) } } } };
  const ports = r() < 0.5 ? {} : { ports: [pick([{ portNumber: { protocol: 'TCP', port: 80 } }, { portNumber: { protocol: 'SCTP', port: 9000 } }, { portRange: { protocol: 'TCP', start: 8000, end: 8063 } }])] };
  if (r() < 0.7) {
    return {
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: `anp-${name}` },
      spec: { priority: Math.floor(r() * 20), subject, [dir]: [{ name: 'r', action: pick(['Allow', 'Deny', 'Pass']), [peerKey]: [peer], ...ports }] },
    };
  }
  return {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' },
    spec: { subject, [dir]: [{ name: 'r', action: pick(['Allow', 'Deny']), [peerKey]: [peer], ...ports }] },
  };
}
