/**
 * A node's whole flow set as the agent computes it, for the native flow-programming tests: the base
 * pipeline with IPv4, dual-stack and IPv6-only Pods (Neighbour Discovery included), compiled policy
 * rules in both address families (every action, logging, port ranges, source ports, ICMP/ICMPv6,
 * SCTP, toServices, isolation), the DNS intercept in both modes and one traceflow's observation
 * flows. Every match field and action kind the agent emits
 * appears here.
 */
import { type Flow, flowText } from '../../daemon/flows/flow.js';
import { computeFlows, type PipelineInput } from '../../daemon/flows/pipeline.js';
import { PolicyFlows } from '../../daemon/flows/policy/compile.js';
import { traceObservationFlows } from '../../daemon/flows/traceflow.js';
import { dnsInterceptFlows } from '../../daemon/enforcement/fqdn/flows.js';
import type { NodeRule } from '../../daemon/policy/noderules.js';

export const PIPELINE: PipelineInput = {
  gatewayOfport: 32769,
  gatewayMac: '0a:58:0a:01:00:01',
  nodeIP: '192.168.100.1',
  nodeIPv6: 'fd00:77::11',
  serviceCIDRs: ['10.96.0.0/12', 'fd00:96::/108'],
  pods: [
    { containerId: 'aaaa', ofport: 3, mac: '0a:58:0a:01:00:0b', ips: ['10.1.0.11'] },
    { containerId: 'bbbb', ofport: 4, mac: '0a:58:0a:01:00:0c', ips: ['10.1.0.12', 'fd00:1::12'] },
    { containerId: 'cccc', ofport: 5, mac: '0a:58:0a:01:00:0d', ips: ['fd00:1::13'], egressV4: { ofport: 6, mac: '0a:58:0a:01:00:0e', ip: '169.254.172.13' } },
  ],
};

let seq = 0;
function rule(p: Partial<NodeRule> & Pick<NodeRule, 'direction' | 'action'>): NodeRule {
  const id = p.id ?? `r${seq++}`;
  return {
    id,
    ruleId: id,
    ref: { kind: 'AntreaClusterNetworkPolicy', name: `pol-${id}`, rule: `rule-${id}`, tier: 'application' },
    direction: p.direction,
    action: p.action,
    priority: p.priority ?? { stage: 0, tier: 250, policy: 1, rule: seq, tieBreak: `k/${id}` },
    order: seq,
    targets: p.targets ?? [{ kind: 'pod', ref: 'x/a', ips: ['10.1.0.11', 'fd00:1::11'] }],
    peers: p.peers ?? { ips: ['10.2.0.21', 'fd00:2::21'], cidrs: [], services: [] },
    ports: p.ports ?? [],
    ...(p.logging ? { logging: p.logging } : {}),
    ...(p.peerSet !== undefined ? { peerSet: p.peerSet } : {}),
  };
}

/** Peer sets used by three rules each: address classes, with bits in the first and last words of each side. */
const CLASS_SETS = [
  { direction: 'Ingress', peerSet: 'src-a', bit: 31, peers: { ips: ['10.4.0.1', '10.4.0.2', 'fd00:4::1'], cidrs: ['10.5.0.0/16', 'fd00:5::/64'], services: [] } },
  { direction: 'Ingress', peerSet: 'src-b', bit: 100, peers: { ips: ['10.4.0.1', '10.4.0.3', '10.5.1.1'], cidrs: [], services: [] } },
  { direction: 'Egress', peerSet: 'dst-a', bit: 127, peers: { ips: ['10.4.0.1', 'fd00:4::2'], cidrs: ['0.0.0.0/0', '::/0'], services: [] } },
  { direction: 'Egress', peerSet: 'dst-b', bit: 0, peers: { ips: ['10.4.0.1', '10.4.0.9'], cidrs: [], services: [] } },
] as const;

export function policyFlows(): Flow[] {
  seq = 0;
  const k8s = { stage: 1, tier: 0, policy: 0, rule: 0, tieBreak: 'k8s' } as const;
  const rules: NodeRule[] = [
    rule({ direction: 'Ingress', action: 'Allow', ports: [{ protocol: 'TCP', port: 80 }, { protocol: 'UDP', port: 1000, endPort: 1003, sourcePort: 53 }] }),
    rule({ direction: 'Ingress', action: 'Drop', logging: { enabled: true }, ports: [{ protocol: 'SCTP', port: 7000 }] }),
    rule({ direction: 'Ingress', action: 'Reject', logging: { enabled: true }, ports: [{ protocol: 'UDP', port: 5353 }] }),
    rule({ direction: 'Ingress', action: 'Pass', logging: { enabled: true }, peers: { ips: [], cidrs: ['10.3.0.0/16', '2001:db8::/32'], services: [] } }),
    rule({ direction: 'Egress', action: 'Drop', peers: { ips: ['fd00:2::21'], cidrs: ['10.2.0.0/16', '2001:db8::/32', '::/0'], services: [] }, ports: [{ protocol: 'TCP', port: 443 }, { protocol: 'ICMP', icmpType: 8, icmpCode: 0 }, { protocol: 'ICMP', icmpType: 128 }] }),
    rule({ direction: 'Egress', action: 'Reject', peers: { ips: [], cidrs: [], services: [{ ip: '10.96.0.10', protocol: 'TCP', port: 80 }, { ip: 'fd00:96::10', protocol: 'TCP', port: 80 }] } }),
    rule({ direction: 'Egress', action: 'Allow', priority: k8s, peers: 'any', ports: [{ protocol: 'TCP', port: 2000, endPort: 2100 }] }),
    rule({ direction: 'Ingress', action: 'Allow', priority: { ...k8s, stage: 2 }, logging: { enabled: true }, ports: [{ protocol: 'SCTP' }] }),
    ...CLASS_SETS.flatMap((c) => [0, 1, 2].map(() => rule({ direction: c.direction, action: 'Allow', peerSet: c.peerSet, peers: { ips: [...c.peers.ips], cidrs: [...c.peers.cidrs], services: [] }, ports: [{ protocol: 'TCP', port: 9000 }] }))),
  ];
  const pf = new PolicyFlows({ naturalClassBit: (key) => CLASS_SETS.find((c) => key.endsWith(`|${c.peerSet}`))?.bit ?? 0 });
  pf.sync({
    rules,
    isolations: [
      { direction: 'Ingress', ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'iso' }, targets: [{ ref: 'x/a', ips: ['10.1.0.11', 'fd00:1::11'] }], logging: { enabled: true } },
      { direction: 'Egress', ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'iso-out' }, targets: [{ ref: 'x/b', ips: ['10.1.0.12'] }] },
    ],
    serviceEndpoints: (ip, _proto, port) => (ip.includes(':') ? [{ ip: 'fd00:1::12', port: 8080 + port }] : [{ ip: '10.1.0.12', port: 8080 }]),
  });
  return pf.flows();
}

/** The corpus: sluice's flows (unique by cookie) and the traceflow observation flows (text, own cookies). */
export function corpusFlows(): { flows: Flow[]; trace: string[] } {
  const all: Flow[] = [...computeFlows(PIPELINE), ...policyFlows(), ...dnsInterceptFlows({ pods: ['10.1.0.11', 'fd00:10:1::11'], mode: 'hold' }), ...dnsInterceptFlows({ pods: 'all', mode: 'copy' })];
  const flows = [...new Map(all.map((f) => [f.cookie, f])).values()];
  return { flows, trace: [...traceObservationFlows('10.1.0.11').trim().split('\n'), ...traceObservationFlows('fd00:1::11').trim().split('\n')] };
}

/** Every flow of the corpus as ovs-ofctl add-flow text, unique. */
export function corpusFlowTexts(): string[] {
  const { flows, trace } = corpusFlows();
  return [...new Set([...flows.map(flowText), ...trace])];
}
