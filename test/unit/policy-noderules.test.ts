/**
 * The node rule set (what the datapath enforces) against the evaluator (the model):
 *  - named ports on the egress side resolve on the destination Pod for every peer kind;
 *  - NodeRule targets say whether they are Pods or Nodes;
 *  - a property test: for random scenarios and random operations, every side decision the
 *    evaluator makes for this node's Pods equals the one a tiny reference interpreter of
 *    nodeRuleSet()/nodeIsolations() makes over IPs and numeric ports, and every node rule or
 *    isolation whose content changed is named by the ChangeSet (its id or one of its groups).
 */
import t from 'tap';
import { parseCidr, parseIp } from '../../daemon/policy/cidr.js';
import { PolicyEngine, type ChangeSet, type ComputedRule, type NodeIsolation, type NodeRule } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import type { InternalRule, KubeObject, Peer, PortMatch, Probe } from '../../daemon/policy/types.js';
import { addressArray } from '../../daemon/policy/sorted-list.js';
import { namespace, netpol, node, pod, rng, type Rng, rule, rulesObject, testKind } from './policy-core-helpers.js';

// ---------------------------------------------------------------------------------------
// A reference interpreter of the node rule set (IPs, CIDRs, numeric ports only).

function inCidr(cidr: string, ip: string): boolean {
  const c = parseCidr(cidr);
  const a = parseIp(ip);
  return !!c && !!a && c.family === a.family && a.value >= c.start && a.value <= c.end;
}

function peersMatch(peers: NodeRule['peers'], ip: string, protocol: string, port: number): boolean {
  if (peers === 'any') return true;
  return addressArray(peers.ips).includes(ip) || peers.cidrs.some((c) => inCidr(c, ip)) ||
    peers.services.some((s) => s.ip === ip && s.protocol === protocol && s.port === port);
}

function portsMatch(ports: PortMatch[], protocol: string, port: number): boolean {
  if (ports.length === 0) return true;
  return ports.some((p) => {
    if (typeof p.port === 'string') throw new Error(`unresolved named port ${p.port} in the node rule set`);
    if (p.protocol === 'ICMP') return protocol === 'ICMP' && (p.icmpType === undefined || p.icmpType === 8) && (p.icmpCode === undefined || p.icmpCode === 0);
    if (p.protocol === 'IGMP' || p.sourcePort !== undefined) return false; // probes carry no source port
    return p.protocol === protocol && (p.port === undefined || (port >= p.port && port <= (p.endPort ?? p.port)));
  });
}

type Decision = { verdict: string; by: string };

/** One side (egress of a local source Pod, ingress of a local destination Pod) as the datapath decides it. */
function referenceSide(rules: readonly NodeRule[], isolations: readonly NodeIsolation[], dir: 'Ingress' | 'Egress', self: string, otherIp: string, protocol: string, port: number): Decision {
  const mine = rules.filter((r) => r.direction === dir && r.targets.some((x) => x.kind === 'pod' && x.ref === self)).sort((a, b) => a.order - b.order);
  const by = (r: NodeRule) => `${r.ref.kind}/${r.ref.namespace ?? ''}/${r.ref.name}/${r.ref.rule}`;
  const verdict = (a: string) => (a === 'Allow' ? 'allow' : a === 'Reject' ? 'reject' : 'drop');
  const matches = (r: NodeRule) => peersMatch(r.peers, otherIp, protocol, port) && portsMatch(r.ports, protocol, port);
  for (const r of mine.filter((r) => r.priority.stage === 0)) {
    if (!matches(r)) continue;
    if (r.action === 'Pass') break;
    return { verdict: verdict(r.action), by: by(r) };
  }
  for (const r of mine.filter((r) => r.priority.stage === 1)) if (matches(r)) return { verdict: 'allow', by: by(r) };
  const iso = isolations.find((i) => i.direction === dir && i.targets.some((x) => x.ref === self));
  if (iso) return { verdict: 'drop', by: `isolation/${iso.ref.namespace ?? ''}/${iso.ref.name}` };
  for (const r of mine.filter((r) => r.priority.stage === 2)) {
    if (!matches(r)) continue;
    if (r.action === 'Pass') break;
    return { verdict: verdict(r.action), by: by(r) };
  }
  return { verdict: 'allow', by: 'default' };
}

/** Compares the evaluator's side decisions for local Pods with the reference; returns mismatch descriptions. */
function compareSides(e: PolicyEngine, probe: Probe, localNode: string): string[] {
  const ipOf = (ep: string) => (ep.startsWith('ip:') ? ep.slice(3) : e.cluster.pods.get(ep)!.ips[0]!);
  const { sides } = e.explain(probe);
  const rules = e.nodeRuleSet();
  const isolations = e.nodeIsolations();
  const out: string[] = [];
  for (const side of sides) {
    if (e.cluster.pods.get(side.pod)?.nodeName !== localNode) continue;
    const other = side.direction === 'Egress' ? probe.to : probe.from;
    const got = referenceSide(rules, isolations, side.direction, side.pod, ipOf(other), probe.protocol, probe.port);
    const d = side.decidedBy;
    const want: Decision = {
      verdict: side.verdict,
      by: !d ? 'default' : d.kind === 'K8sNetworkPolicyIsolation' ? `isolation/${d.namespace ?? ''}/${d.name}` : `${d.kind}/${d.namespace ?? ''}/${d.name}/${d.rule}`,
    };
    if (got.verdict !== want.verdict || got.by !== want.by) {
      out.push(`${probe.from} -> ${probe.to} ${probe.protocol}/${probe.port} ${side.direction} of ${side.pod}: evaluator ${want.verdict} by ${want.by}, node rules ${got.verdict} by ${got.by}`);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Named ports on the egress side, per peer kind

const httpPod = (ns: string, name: string, ip: string, nodeName = 'node-1', port = 8080) =>
  pod(ns, name, { ip, node: nodeName, labels: { pod: name }, ports: [{ name: 'http', containerPort: port }] });

function namedEngine(): PolicyEngine {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
  e.upsert(namespace('x'));
  e.upsert(node('node-1', '172.18.0.1', { zone: 'a' }));
  e.upsert(node('node-2', '172.18.0.2', { zone: 'b' }));
  e.upsert(httpPod('x', 'a', '10.1.0.10'));
  e.upsert(httpPod('x', 'c', '10.1.0.12', 'node-2', 9090));
  e.upsert(pod('x', 'n', { ip: '10.1.0.13', node: 'node-2', labels: { pod: 'n' }, ports: [{ name: 'other', containerPort: 8080 }] }));
  return e;
}

t.test('egress to an ipBlock on a named port covers the Pods inside the CIDR that have the port', async (t) => {
  const e = namedEngine();
  e.upsert(netpol('x', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '10.0.0.0/8' } }], ports: [{ port: 'http' }] }] }));
  t.equal(e.evaluate({ from: 'x/a', to: 'x/c', port: 9090, protocol: 'TCP' }).verdict, 'allow', 'the model allows a -> c:http');
  t.equal(e.evaluate({ from: 'x/a', to: 'x/n', port: 8080, protocol: 'TCP' }).verdict, 'drop', 'n has no port named http');
  const rules = e.nodeRuleSet().filter((r) => r.ref.name === 'out');
  t.same(rules.map((r) => [r.ports, r.peers]), [
    [[{ protocol: 'TCP', port: 8080 }], { ips: ['10.1.0.10'], cidrs: [], services: [] }],
    [[{ protocol: 'TCP', port: 9090 }], { ips: ['10.1.0.12'], cidrs: [], services: [] }],
  ], 'one node rule per resolution over the Pods in the CIDR having http (a itself, c); not n');
  t.same(rules[0]?.targets, [{ kind: 'pod', ref: 'x/a', ips: ['10.1.0.10'] }]);
  t.same(compareSides(e, { from: 'x/a', to: 'x/c', port: 9090, protocol: 'TCP' }, 'node-1'), []);
  // The rule follows Pods entering and leaving the CIDR.
  const cs = e.upsert(httpPod('x', 'd', '10.2.0.20', 'node-2', 7070));
  t.ok(dirtyRuleIds(cs, e.internalRules()).has('NetworkPolicy/x/out/egress-0'), 'a new Pod with the port in the CIDR: the ChangeSet names the rule (through its group)');
  t.same(e.nodeRuleSet().filter((r) => r.ref.name === 'out').map((r) => r.ports[0]!.port).sort(), [7070, 8080, 9090]);
  const outside = e.upsert(httpPod('x', 'e', '192.168.0.5', 'node-2'));
  t.notOk(dirtyRuleIds(outside, e.internalRules()).has('NetworkPolicy/x/out/egress-0'), 'a Pod outside the CIDR does not concern the rule');
});

t.test('named egress ports resolve on the destination Pod for every peer kind', async (t) => {
  const peers: Record<string, Peer> = {
    pods: { kind: 'pods', namespaces: { kind: 'all' }, pods: {} },
    ipBlock: { kind: 'ipBlock', cidr: '10.1.0.0/16', except: ['10.1.0.13/32'] },
    group: { kind: 'group', name: 'g' },
    groupIpBlock: { kind: 'group', name: 'gip' },
    serviceRef: { kind: 'serviceRef', namespace: 'x', name: 'svc' },
    fqdn: { kind: 'fqdn', pattern: '*.example.com' },
    nodes: { kind: 'nodes', selector: {} },
  };
  for (const [label, peer] of Object.entries(peers)) {
    const e = namedEngine();
    e.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: '10.96.0.1', selector: { pod: 'c' }, ports: [{ port: 80, targetPort: 'http' }] } });
    e.setFqdnAddresses([{ name: 'c.example.com', ips: ['10.1.0.12', '192.168.0.9'] }]);
    e.upsert(rulesObject('named', {
      groups: [{ name: 'g', members: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { pod: 'c' } } }] }, { name: 'gip', members: [{ kind: 'ipBlock', cidr: '10.1.0.12/32', except: [] }] }],
      rules: [rule({ direction: 'Egress', action: 'Drop', appliedTo: [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { pod: 'a' } } }], peers: [peer], ports: [{ protocol: 'TCP', port: 'http' }] }, {}, `named-${label}`)],
    }));
    const model = e.evaluate({ from: 'x/a', to: 'x/c', port: 9090, protocol: 'TCP' }).verdict;
    t.equal(model, label === 'nodes' ? 'allow' : 'drop', `${label}: the model ${label === 'nodes' ? 'never resolves a named port on a Node' : 'drops a -> c:http'}`);
    const mismatches = [];
    for (const to of ['x/c', 'x/n', 'ip:192.168.0.9', 'ip:172.18.0.2']) for (const port of [8080, 9090]) mismatches.push(...compareSides(e, { from: 'x/a', to, port, protocol: 'TCP' }, 'node-1'));
    t.same(mismatches, [], `${label}: the node rule set decides as the model`);
  }
});

// ---------------------------------------------------------------------------------------
// ChangeSet: every change of a node rule is named (by rule id or by one of its groups)

/** The computed-rule ids a ChangeSet names: its rules, and the rules holding one of its groups. */
function dirtyRuleIds(cs: ChangeSet, rules: readonly ComputedRule[]): Set<string> {
  const out = new Set([...cs.rules.added, ...cs.rules.updated, ...cs.rules.removed]);
  const groups = new Set([cs.addressGroups, cs.appliedToGroups].flatMap((d) => [...d.added, ...d.updated, ...d.removed]));
  for (const r of rules) if ([...r.addressGroups, ...r.appliedToGroups].some((g) => groups.has(g))) out.add(r.id);
  return out;
}

t.test('egress to any peer on a named port: only Pods with that port change the rule', async (t) => {
  const e = namedEngine();
  e.upsert(netpol('x', 'out', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Egress'], egress: [{ ports: [{ port: 'http' }] }] }));
  const id = 'NetworkPolicy/x/out/egress-0';
  const none = { added: [], updated: [], removed: [] };
  const without = e.upsert(pod('x', 'q', { ip: '10.1.0.30', node: 'node-2', ports: [{ name: 'metrics', containerPort: 9100 }] }));
  t.same(without, { addressGroups: none, appliedToGroups: none, rules: none, isolations: none, serviceEndpoints: [] }, 'a Pod without the port changes nothing');
  const withPort = e.upsert(httpPod('x', 'r', '10.1.0.31', 'node-2', 8443));
  t.ok(dirtyRuleIds(withPort, e.internalRules()).has(id), 'a Pod with the port is named');
  t.ok(e.nodeRuleSet().some((r) => r.ruleId === id && r.ports[0]!.port === 8443));
  const renamed = e.upsert(pod('x', 'r', { ip: '10.1.0.31', node: 'node-2', ports: [{ name: 'web', containerPort: 8443 }] }));
  t.ok(dirtyRuleIds(renamed, e.internalRules()).has(id), 'the port renamed away is named too');
  t.notOk(e.nodeRuleSet().some((r) => r.ruleId === id && r.ports[0]!.port === 8443));
});

// ---------------------------------------------------------------------------------------
// NodeRule targets carry their kind

t.test('node rule targets say whether they are Pods or Nodes', async (t) => {
  const e = namedEngine();
  e.upsert(rulesObject('targets', { rules: [
    rule({ direction: 'Ingress', action: 'Drop', appliedTo: [{ kind: 'nodes', selector: { matchLabels: { zone: 'a' } } }, { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { pod: 'a' } } }] }, {}, 'both'),
  ] }));
  e.upsert(netpol('x', 'iso', { podSelector: { matchLabels: { pod: 'a' } }, policyTypes: ['Ingress'] }));
  const [r] = e.nodeRuleSet().filter((x) => x.ref.name === 'both');
  t.same(r?.targets, [{ kind: 'pod', ref: 'x/a', ips: ['10.1.0.10'] }, { kind: 'node', ref: 'node-1', ips: ['172.18.0.1'] }].sort((a, b) => (a.ref < b.ref ? -1 : 1)));
  t.same(e.nodeIsolations()[0]?.targets, [{ kind: 'pod', ref: 'x/a', ips: ['10.1.0.10'] }]);
});

// ---------------------------------------------------------------------------------------
// Property test: random scenarios, the node rule set against the evaluator

const NS = ['x', 'y'];
const NAMES = ['a', 'b', 'c', 'd'];
const APPS = ['web', 'db'];
const NODE_IPS = { 'node-1': '172.18.0.1', 'node-2': '172.18.0.2' } as const;
const EXTERNAL = ['ip:10.1.9.9', 'ip:192.168.5.5', 'ip:172.18.0.1', 'ip:172.18.0.2'];
const PROBE_PORTS: [Probe['protocol'], number][] = [['TCP', 80], ['TCP', 8080], ['TCP', 81], ['UDP', 53], ['SCTP', 81], ['ICMP', 0]];

const selector = (r: Rng) => r.pick([{}, { matchLabels: { app: r.pick(APPS) } }, { matchExpressions: [{ key: 'tier', operator: 'Exists' as const }] }]);

function randomPod(r: Rng, ns: string, name: string, index: number): KubeObject {
  const ports: { name?: string; containerPort: number; protocol?: string }[] = [];
  if (r.next() < 0.7) ports.push({ name: 'http', containerPort: r.pick([80, 8080]) });
  if (r.next() < 0.5) ports.push({ name: 'dns', containerPort: 53, protocol: 'UDP' });
  if (r.next() < 0.3) ports.push({ name: 'serve', containerPort: 81, protocol: 'SCTP' });
  if (r.next() < 0.2) ports.push({ name: 'http', containerPort: 81, protocol: 'UDP' });
  const labels: Record<string, string> = { app: r.pick(APPS), ...(r.next() < 0.5 ? { tier: 'front' } : {}) };
  return pod(ns, name, { labels, ip: `10.1.${index % 3}.${10 + index}`, node: r.pick(['node-1', 'node-2']), ports, ...(r.next() < 0.08 ? { hostNetwork: true } : {}) });
}

function randomIrPeer(r: Rng, dir: 'Ingress' | 'Egress'): Peer {
  const choices: (() => Peer)[] = [
    () => ({ kind: 'pods', namespaces: r.pick([{ kind: 'all' as const }, { kind: 'names' as const, names: [r.pick(NS)] }, { kind: 'self' as const }, { kind: 'sameLabels' as const, keys: ['team'] }]), pods: selector(r) }),
    () => ({ kind: 'ipBlock', cidr: r.pick(['10.1.0.0/16', '10.0.0.0/8', '172.18.0.0/24', '192.168.0.0/16']), except: r.next() < 0.5 ? [`10.1.${r.int(3)}.0/24`] : [] }),
    () => ({ kind: 'nodes', selector: r.pick([{}, { matchLabels: { zone: 'a' } }]) }),
    () => ({ kind: 'group', name: r.pick(['g1', 'g2']) }),
    () => ({ kind: 'serviceRef', namespace: 'x', name: 'svc' }),
    () => ({ kind: 'fqdn', pattern: r.pick(['*.example.com', 'db.example.com']) }),
  ];
  const n = dir === 'Egress' ? choices.length : choices.length - 1;
  return choices[r.int(n)]!();
}

const PORT_SETS: PortMatch[][] = [
  [], [{ protocol: 'TCP', port: 80 }], [{ protocol: 'TCP', port: 'http' }], [{ protocol: 'UDP', port: 'dns' }],
  [{ protocol: 'TCP', port: 'http' }, { protocol: 'TCP', port: 81 }], [{ protocol: 'TCP', port: 80, endPort: 8080 }],
  [{ protocol: 'TCP' }], [{ protocol: 'ICMP' }], [{ protocol: 'SCTP', port: 'serve' }, { protocol: 'UDP', port: 'http' }],
];

function randomIrPolicy(r: Rng, name: string): KubeObject {
  const rules: InternalRule[] = [];
  for (let i = 0; i < 1 + r.int(3); i++) {
    const direction = r.pick(['Ingress', 'Egress'] as const);
    const stage = r.pick([0, 0, 2] as const);
    const appliedTo: Peer[] = [r.pick<Peer>([
      { kind: 'pods', namespaces: { kind: 'all' }, pods: selector(r) },
      { kind: 'pods', namespaces: { kind: 'names', names: [r.pick(NS)] }, pods: {} },
      { kind: 'group', name: 'g1' },
      { kind: 'nodes', selector: {} },
    ])];
    const toServices = direction === 'Egress' && r.next() < 0.1;
    rules.push(rule({
      direction, action: r.pick(stage === 0 ? ['Allow', 'Drop', 'Reject', 'Pass'] as const : ['Allow', 'Drop', 'Pass'] as const), appliedTo,
      ...(toServices ? { peers: [{ kind: 'service', namespace: 'x', name: 'svc' }] } : r.next() < 0.8 ? { peers: Array.from({ length: 1 + r.int(2) }, () => randomIrPeer(r, direction)) } : {}),
      ports: toServices ? [] : r.pick(PORT_SETS),
    }, { stage, tier: stage === 0 ? 250 : 253, policy: r.int(3), rule: i }, `${name}-${i}`));
  }
  return rulesObject(name, { rules });
}

function randomK8sPeer(r: Rng) {
  return r.pick([
    () => ({ podSelector: selector(r) }),
    () => ({ namespaceSelector: { matchLabels: { team: r.pick(['red', 'blue']) } }, podSelector: selector(r) }),
    () => ({ ipBlock: { cidr: r.pick(['10.1.0.0/16', '10.0.0.0/8', '172.18.0.0/16']), except: r.next() < 0.5 ? [`10.1.${r.int(3)}.0/24`] : [] } }),
  ])();
}

function randomNetpol(r: Rng, ns: string, name: string): KubeObject {
  const portChoices = [[{ port: 80 }], [{ port: 'http' }], [{ protocol: 'UDP', port: 'dns' }], [{ port: 80, endPort: 8080 }], [{ port: 'http' }, { protocol: 'UDP', port: 53 }]];
  const rules = () => Array.from({ length: r.int(3) }, () => ({
    ...(r.next() < 0.75 ? { peers: Array.from({ length: 1 + r.int(2) }, () => randomK8sPeer(r)) } : {}),
    ...(r.next() < 0.7 ? { ports: r.pick(portChoices) } : {}),
  }));
  const ingress = rules().map(({ peers, ...rest }) => ({ ...rest, ...(peers ? { from: peers } : {}) }));
  const egress = rules().map(({ peers, ...rest }) => ({ ...rest, ...(peers ? { to: peers } : {}) }));
  return netpol(ns, name, { podSelector: selector(r), ingress, egress, policyTypes: r.pick([['Ingress'], ['Egress'], ['Ingress', 'Egress']]) });
}

function groupsObject(r: Rng): KubeObject {
  return rulesObject('groups', { groups: [
    { name: 'g1', members: [{ kind: 'pods', namespaces: r.next() < 0.5 ? { kind: 'all' } : { kind: 'selector', selector: { matchLabels: { team: r.pick(['red', 'blue']) } } }, pods: selector(r) }] },
    { name: 'g2', members: [{ kind: 'group', name: 'g1' }, { kind: 'ipBlock', cidr: `10.1.${r.int(3)}.0/24`, except: [] }, ...(r.next() < 0.5 ? [{ kind: 'nodes' as const, selector: {} }] : [])] },
  ] });
}

const serviceObject = (r: Rng): KubeObject => ({
  apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' },
  spec: { clusterIP: '10.96.0.1', selector: { app: r.pick(APPS) }, ports: [{ port: 80, targetPort: 'http' }] },
});

const keyOf = (o: KubeObject) => `${o.apiVersion}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

/** Node rules and isolations by the id the ChangeSet speaks of (computed rule id / isolation id), without `order`. */
function enforcedById(e: PolicyEngine): Map<string, string> {
  const out = new Map<string, NodeRule[]>();
  for (const r of e.nodeRuleSet()) {
    let list = out.get(r.ruleId);
    if (!list) out.set(r.ruleId, (list = []));
    list.push(r);
  }
  const m = new Map([...out].map(([id, list]) => [`rule:${id}`, canonicalJson(list.map(({ order: _order, ...rest }) => rest))]));
  for (const i of e.nodeIsolations()) m.set(`isolation:${i.id}`, canonicalJson(i));
  return m;
}

for (let seed = 1; seed <= 14; seed++) {
  t.test(`random scenario ${seed}: the node rule set decides as the evaluator, and the ChangeSet names its changes`, async (t) => {
    const r = rng(seed * 7919);
    const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
    const objects = new Map<string, KubeObject>();
    const apply = (o: KubeObject) => { objects.set(keyOf(o), o); return e.upsert(o); };
    const drop = (o: KubeObject) => { objects.delete(keyOf(o)); return e.remove({ apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name }); };
    for (const [n, ip] of Object.entries(NODE_IPS)) apply(node(n, ip, { zone: n === 'node-1' ? 'a' : 'b' }));
    for (const ns of NS) apply(namespace(ns, { team: r.pick(['red', 'blue']) }));
    const index = (ns: string, name: string) => NS.indexOf(ns) * NAMES.length + NAMES.indexOf(name);
    for (const ns of NS) for (const name of NAMES.slice(0, 3)) apply(randomPod(r, ns, name, index(ns, name)));
    apply(groupsObject(r));
    apply(serviceObject(r));
    e.setFqdnAddresses([{ name: 'db.example.com', ips: ['10.1.1.11', '192.168.5.5'] }]);
    for (let i = 0; i < 3; i++) apply(randomIrPolicy(r, `ir-${i}`));
    for (let i = 0; i < 2; i++) apply(randomNetpol(r, r.pick(NS), `np-${i}`));

    const problems: string[] = [];
    let compared = 0;
    let decidedByRules = 0;
    for (let step = 0; step < 40; step++) {
      const before = enforcedById(e);
      const rulesBefore = e.internalRules();
      const isolationsBefore = e.internalIsolations();
      let label: string;
      let cs: ChangeSet;
      const pods = [...objects.values()].filter((o) => o.kind === 'Pod');
      const op = r.int(9);
      if (op <= 1 || pods.length === 0) {
        const ns = r.pick(NS), name = r.pick(NAMES);
        label = `pod add/replace ${ns}/${name}`;
        cs = apply(randomPod(r, ns, name, index(ns, name)));
      } else if (op === 2) {
        const p = r.pick(pods);
        label = `pod remove ${keyOf(p)}`;
        cs = drop(p);
      } else if (op === 3) {
        const ns = r.pick(NS);
        label = `namespace relabel ${ns}`;
        cs = apply(namespace(ns, { team: r.pick(['red', 'blue']) }));
      } else if (op === 4) {
        label = 'groups edit';
        cs = apply(groupsObject(r));
      } else if (op === 5) {
        label = 'service edit';
        cs = apply(serviceObject(r));
      } else if (op === 6) {
        label = 'fqdn learned';
        const ips = [...new Set(pods.map((p) => p.status?.podIP as string).filter(Boolean))];
        cs = e.setFqdnAddresses([{ name: r.pick(['db.example.com', 'api.example.com']), ips: [r.pick(ips.length ? ips : ['10.1.0.10']), '192.168.5.5'] }]);
      } else if (op === 7) {
        const ns = r.pick(NS), name = `np-${r.int(3)}`;
        label = `netpol add/edit ${ns}/${name}`;
        cs = apply(randomNetpol(r, ns, name));
      } else {
        const name = `ir-${r.int(4)}`;
        label = `IR policy add/edit ${name}`;
        cs = apply(randomIrPolicy(r, name));
      }
      // Soundness of the ChangeSet for the enforcement side.
      const after = enforcedById(e);
      const named = new Set([...dirtyRuleIds(cs, rulesBefore), ...dirtyRuleIds(cs, e.internalRules())].map((id) => `rule:${id}`));
      // The engine's group -> rules index (what the agent's dirtyRuleIds reads) agrees with a scan
      // of its rules, for every group in use and every group the change named (removed ones too).
      const rulesNow = e.internalRules();
      const changedGroups = [cs.addressGroups, cs.appliedToGroups].flatMap((d) => [...d.added, ...d.updated, ...d.removed]);
      for (const g of new Set([...rulesNow.flatMap((x) => [...x.addressGroups, ...x.appliedToGroups]), ...changedGroups])) {
        const scanned = rulesNow.filter((x) => x.addressGroups.includes(g) || x.appliedToGroups.includes(g)).map((x) => x.id).sort();
        const indexed = [...e.rulesNamingGroups([g])].sort();
        if (indexed.join() !== scanned.join()) problems.push(`step ${step} (${label}): group ${g}: the index names [${indexed}], the rules [${scanned}]`);
      }
      const groups = new Set([cs.appliedToGroups].flatMap((d) => [...d.added, ...d.updated, ...d.removed]));
      for (const i of [...isolationsBefore, ...e.internalIsolations()]) {
        if ([...cs.isolations.added, ...cs.isolations.updated, ...cs.isolations.removed].includes(i.id) || i.appliedToGroups.some((g) => groups.has(g))) named.add(`isolation:${i.id}`);
      }
      for (const id of new Set([...before.keys(), ...after.keys()])) {
        if (before.get(id) !== after.get(id) && !named.has(id)) problems.push(`step ${step} (${label}): ${id} changed but the ChangeSet does not name it`);
      }
      // The datapath's decisions against the model's.
      const endpoints = [...[...objects.values()].filter((o) => o.kind === 'Pod').map((o) => `${o.metadata.namespace}/${o.metadata.name}`), ...EXTERNAL];
      for (let i = 0; i < 60; i++) {
        const [protocol, port] = r.pick(PROBE_PORTS);
        const probe: Probe = { from: r.pick(endpoints), to: r.pick(endpoints), protocol, port };
        if (probe.from.startsWith('ip:') && probe.to.startsWith('ip:')) continue;
        const found = compareSides(e, probe, 'node-1');
        problems.push(...found.map((p) => `step ${step} (${label}): ${p}`));
        compared++;
        const res = e.evaluate(probe);
        if (res.decidedBy && res.decidedBy.kind !== 'K8sNetworkPolicyIsolation') decidedByRules++;
      }
    }
    t.same(problems.slice(0, 10), [], `no disagreement (${problems.length} in all, ${compared} probes compared)`);
    t.ok(decidedByRules > 20, `rules decided a fair share of the probes (${decidedByRules})`);
  });
}
