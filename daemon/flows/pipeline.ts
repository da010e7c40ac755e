/**
 * The policy-only pipeline, computed from node settings and the local Pod ports (pure, no I/O).
 *
 * Packet walks (see reentrance-findings.md for the measured reasons):
 *  - Pod -> local Pod: L3Forwarding by destination IP (eth_src := virtual MAC, eth_dst := Pod MAC),
 *    TTL - 1 like the host's routing hop it replaces.
 *  - Pod -> anything else, and everything from the gateway that is not for a local Pod: eth_dst :=
 *    gateway MAC, out antrea-gw0.
 *  - Pod -> Service CIDR: to antrea-gw0 untouched (kube-proxy DNATs; the mark/table 300 sends it
 *    back post-DNAT). Back from the gateway and out to the gateway again = re-entrance: eth_src :=
 *    de:ad:be:ef:de:ad (the host's raw table skips conntrack for it), out IN_PORT, no OVS commit.
 *  - Replies of connections that entered from the gateway go back to the gateway (ct_mark), so the
 *    host undoes its DNAT even when the endpoint is a local Pod.
 */
import { isIPv4 } from 'node:net';
import { type Flow, FlowCategory, type FlowSpec, withCookie } from './flow.js';
import {
  CT_MARK_FROM_GATEWAY,
  CT_ZONE,
  masked,
  nextTable,
  POLICY_HOOK_TABLES,
  REENTRANCE_MAC,
  REG0,
  RULE_REG,
  type TableName,
  VIRTUAL_MAC,
} from './tables.js';

/** Commits the deciding rules' conjunction ids into the connection's ct_label (per-rule statistics). */
const ruleLabels = (['Egress', 'Ingress'] as const).map((d) => `move:${RULE_REG[d].field}->NXM_NX_CT_LABEL[${RULE_REG[d].label}]`).join(',');

export interface PodPort {
  containerId: string;
  ofport: number;
  /** MAC of the Pod's own interface (inside its netns): the only source MAC it may use. */
  mac: string;
  /** The Pod's IPv4 addresses (no prefix length). */
  ips: string[];
}

export interface PipelineInput {
  gatewayOfport: number;
  gatewayMac: string;
  /** Packets from the gateway with this source are host-originated (kubelet probes etc.). */
  nodeIP?: string | undefined;
  serviceCIDRs: string[];
  pods: PodPort[];
}

export class PipelineInputError extends Error {}

const MAC_RE = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

function checkMac(mac: string, field: string): void {
  if (typeof mac !== 'string' || !MAC_RE.test(mac)) throw new PipelineInputError(`${field}: "${mac}" is not a lower-case MAC address`);
}
function checkOfport(p: number, field: string): void {
  if (!Number.isInteger(p) || p < 1 || p >= 0xff00) throw new PipelineInputError(`${field}: ${p} is not a valid OpenFlow port number`);
}
function checkIPv4(ip: string, field: string): void {
  if (!isIPv4(ip)) throw new PipelineInputError(`${field}: "${ip}" is not an IPv4 address`);
}
export function checkCIDR(cidr: string, field: string): void {
  const m = /^([^/]+)\/(\d{1,2})$/.exec(cidr);
  if (!m || !isIPv4(m[1]!) || Number(m[2]) > 32) throw new PipelineInputError(`${field}: "${cidr}" is not an IPv4 CIDR`);
  const bits = Number(m[2]);
  const n = ipToInt(m[1]!);
  const hostMask = 2 ** (32 - bits) - 1;
  if (n % (hostMask + 1) !== 0) throw new PipelineInputError(`${field}: "${cidr}" has host bits set`);
}
export const ipToInt = (ip: string): number => ip.split('.').reduce((a, o) => ((a << 8) | Number(o)) >>> 0, 0);

export function validatePipelineInput(input: PipelineInput): void {
  checkOfport(input.gatewayOfport, 'gatewayOfport');
  checkMac(input.gatewayMac, 'gatewayMac');
  if (input.nodeIP !== undefined) checkIPv4(input.nodeIP, 'nodeIP');
  input.serviceCIDRs.forEach((c, i) => checkCIDR(c, `serviceCIDRs[${i}]`));
  const ofports = new Map<number, string>([[input.gatewayOfport, 'the gateway']]);
  const ips = new Map<string, string>();
  for (const [i, pod] of input.pods.entries()) {
    const where = `pods[${i}] (container ${pod.containerId})`;
    if (!pod.containerId) throw new PipelineInputError(`pods[${i}].containerId is empty`);
    checkOfport(pod.ofport, `${where}.ofport`);
    checkMac(pod.mac, `${where}.mac`);
    if (pod.ips.length === 0) throw new PipelineInputError(`${where}.ips is empty`);
    const other = ofports.get(pod.ofport);
    if (other) throw new PipelineInputError(`${where}.ofport ${pod.ofport} is already used by ${other}`);
    ofports.set(pod.ofport, `container ${pod.containerId}`);
    for (const ip of pod.ips) {
      checkIPv4(ip, `${where}.ips`);
      const owner = ips.get(ip);
      if (owner) throw new PipelineInputError(`${where}: IP ${ip} is already used by container ${owner}`);
      ips.set(ip, pod.containerId);
    }
  }
}

const goto = (t: TableName): string => `goto_table:${t}`;
const setReg0 = (value: number, mask: number): string => `set_field:${masked(value, mask)}->reg0`;

/** The ARP reply built in place: swap addresses, answer with the virtual MAC, send back. */
const ARP_RESPONDER_ACTIONS = [
  'move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]',
  `set_field:${VIRTUAL_MAC}->eth_src`,
  'set_field:2->arp_op',
  'move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[]',
  `set_field:${VIRTUAL_MAC}->arp_sha`,
  'move:NXM_OF_ARP_TPA[]->NXM_NX_REG2[]',
  'move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[]',
  'move:NXM_NX_REG2[]->NXM_OF_ARP_SPA[]',
  'IN_PORT',
].join(',');

/** Flows that depend only on node settings (gateway, node IP, Service CIDRs). */
export function baseFlows(input: Omit<PipelineInput, 'pods'>): Flow[] {
  const gw = input.gatewayOfport;
  const toGateway = `set_field:${input.gatewayMac}->eth_dst,set_field:${gw}->reg1,${setReg0(REG0.dstGateway, REG0.dstMask)}`;
  const reentrance = `ip,reg0=${masked(REG0.srcGateway | REG0.dstGateway, REG0.srcMask | REG0.dstMask)}`;
  const specs: Omit<FlowSpec, 'category'>[] = [
    // Classifier
    { table: 'Classifier', priority: 200, match: 'arp', actions: goto('ARPSpoofGuard') },
    ...(input.nodeIP
      ? [{
          table: 'Classifier' as const,
          priority: 210,
          match: `ip,in_port=${gw},nw_src=${input.nodeIP}`,
          actions: `${setReg0(REG0.srcGateway | REG0.fromHost, REG0.srcMask | REG0.fromHost)},${goto('SpoofGuard')}`,
        }]
      : []),
    { table: 'Classifier', priority: 200, match: `ip,in_port=${gw}`, actions: `${setReg0(REG0.srcGateway, REG0.srcMask)},${goto('SpoofGuard')}` },
    { table: 'Classifier', priority: 0, match: '', actions: 'drop' },
    // ARP: the host may ARP for anything; Pods are checked per port.
    { table: 'ARPSpoofGuard', priority: 200, match: `arp,in_port=${gw}`, actions: goto('ARPResponder') },
    { table: 'ARPSpoofGuard', priority: 0, match: '', actions: 'drop' },
    { table: 'ARPResponder', priority: 200, match: 'arp,arp_op=1', actions: ARP_RESPONDER_ACTIONS },
    { table: 'ARPResponder', priority: 0, match: '', actions: 'drop' },
    // The gateway is not spoof-checked: it carries everyone's traffic.
    { table: 'SpoofGuard', priority: 200, match: `ip,in_port=${gw}`, actions: goto('ConntrackZone') },
    // A router forwards only frames addressed to it: the host's ip_forward, which this pipeline
    // replaces, drops a Pod's frames sent to a group address (broadcast, multicast) or to a MAC that
    // is not its own. L3Forwarding rewrites both MACs, so without these such frames would be routed;
    // the re-entrance MAC above all means "from the host" to the host's raw table.
    ...[REENTRANCE_MAC, '01:00:00:00:00:00/01:00:00:00:00:00'].map((dst) => ({
      table: 'SpoofGuard' as const,
      priority: 210,
      match: `ip,reg0=${masked(REG0.srcPod, REG0.srcMask)},dl_dst=${dst}`,
      actions: 'drop',
    })),
    { table: 'SpoofGuard', priority: 0, match: '', actions: 'drop' },
    // Conntrack (no NAT in OVS: kube-proxy NATs in the host).
    ...input.serviceCIDRs.map((cidr) => ({
      table: 'ConntrackZone' as const,
      priority: 210,
      match: `ip,nw_dst=${cidr}`,
      actions: `${setReg0(REG0.toService, REG0.toService)},ct(table=ConntrackState,zone=${CT_ZONE})`,
    })),
    { table: 'ConntrackZone', priority: 200, match: 'ip', actions: `ct(table=ConntrackState,zone=${CT_ZONE})` },
    { table: 'ConntrackZone', priority: 0, match: '', actions: 'drop' },
    { table: 'ConntrackState', priority: 200, match: 'ct_state=+inv+trk,ip', actions: 'drop' },
    { table: 'ConntrackState', priority: 0, match: '', actions: goto(nextTable('ConntrackState')) },
    // Policy hooks: pass-through until enforcement fills them.
    ...POLICY_HOOK_TABLES.map((t) => ({ table: t, priority: 0, match: '', actions: goto(nextTable(t)) })),
    // A Drop/Reject rule's packet is dropped in the Metric table after its rule's counter flow; this
    // flow drops it even when no counter flow matches, so statistics can never let a packet through.
    ...(['EgressMetric', 'IngressMetric'] as const).map((t) => ({ table: t, priority: 100, match: `reg0=${masked(REG0.ruleDrop, REG0.ruleDrop)}`, actions: 'drop' })),
    // L3 forwarding
    {
      table: 'L3Forwarding',
      priority: 210,
      match: `ct_state=+rpl+trk,ct_mark=${masked(CT_MARK_FROM_GATEWAY, CT_MARK_FROM_GATEWAY)},ip,reg0=${masked(REG0.srcPod, REG0.srcMask)}`,
      actions: `${toGateway},${goto('L3DecTTL')}`,
    },
    ...input.serviceCIDRs.map((cidr) => ({
      table: 'L3Forwarding' as const,
      priority: 190,
      match: `ip,nw_dst=${cidr}`,
      actions: `${toGateway},${goto('L3DecTTL')}`,
    })),
    { table: 'L3Forwarding', priority: 100, match: 'ip', actions: `${toGateway},${goto('L3DecTTL')}` },
    { table: 'L3Forwarding', priority: 0, match: '', actions: 'drop' },
    {
      table: 'L3DecTTL',
      priority: 200,
      match: `ip,reg0=${masked(REG0.srcPod | REG0.dstPod, REG0.srcMask | REG0.dstMask)}`,
      actions: `dec_ttl,${goto('IngressSecurityClassifier')}`,
    },
    { table: 'L3DecTTL', priority: 0, match: '', actions: goto('IngressSecurityClassifier') },
    // Ingress rules only concern local Pod destinations; host-originated traffic is exempt.
    {
      table: 'IngressSecurityClassifier',
      priority: 210,
      match: `reg0=${masked(REG0.dstGateway, REG0.dstMask)}`,
      actions: goto('ConntrackCommit'),
    },
    {
      table: 'IngressSecurityClassifier',
      priority: 200,
      match: `reg0=${masked(REG0.fromHost, REG0.fromHost)}`,
      actions: goto('ConntrackCommit'),
    },
    { table: 'IngressSecurityClassifier', priority: 0, match: '', actions: goto(nextTable('IngressSecurityClassifier')) },
    // Commit: re-entrance is never committed; connections from the gateway are marked.
    { table: 'ConntrackCommit', priority: 210, match: reentrance, actions: goto('Output') },
    {
      table: 'ConntrackCommit',
      priority: 200,
      match: `ct_state=+new+trk,ip,reg0=${masked(REG0.srcGateway, REG0.srcMask)}`,
      actions: `ct(commit,zone=${CT_ZONE},exec(set_field:${masked(CT_MARK_FROM_GATEWAY, CT_MARK_FROM_GATEWAY)}->ct_mark,${ruleLabels})),${goto('Output')}`,
    },
    { table: 'ConntrackCommit', priority: 190, match: 'ct_state=+new+trk,ip', actions: `ct(commit,zone=${CT_ZONE},exec(${ruleLabels})),${goto('Output')}` },
    { table: 'ConntrackCommit', priority: 0, match: '', actions: goto('Output') },
    // Output
    { table: 'Output', priority: 210, match: reentrance, actions: `set_field:${REENTRANCE_MAC}->eth_src,IN_PORT` },
    { table: 'Output', priority: 200, match: 'ip', actions: 'output:NXM_NX_REG1[]' },
  ];
  return specs.map((s) => withCookie({ ...s, category: FlowCategory.base }));
}

/** Flows of one local Pod: classification, spoof guards and L3 delivery by destination IP. */
export function podFlows(pod: PodPort): Flow[] {
  const p = pod.ofport;
  const specs: Omit<FlowSpec, 'category' | 'owner'>[] = [
    { table: 'Classifier', priority: 200, match: `ip,in_port=${p}`, actions: `${setReg0(REG0.srcPod, REG0.srcMask)},${goto('SpoofGuard')}` },
  ];
  for (const ip of [...pod.ips].sort()) {
    specs.push(
      {
        table: 'ARPSpoofGuard',
        priority: 200,
        match: `arp,in_port=${p},dl_src=${pod.mac},arp_spa=${ip},arp_sha=${pod.mac}`,
        actions: goto('ARPResponder'),
      },
      { table: 'SpoofGuard', priority: 200, match: `ip,in_port=${p},dl_src=${pod.mac},nw_src=${ip}`, actions: goto('ConntrackZone') },
      {
        table: 'L3Forwarding',
        priority: 200,
        match: `ip,nw_dst=${ip}`,
        actions: `set_field:${VIRTUAL_MAC}->eth_src,set_field:${pod.mac}->eth_dst,set_field:${p}->reg1,${setReg0(REG0.dstPod, REG0.dstMask)},${goto('L3DecTTL')}`,
      },
    );
  }
  return specs.map((s) => withCookie({ ...s, category: FlowCategory.pod, owner: pod.containerId }));
}

/**
 * computeFlows remembered for the last input (compared by value): the agent asks for the desired
 * set at every apply, and the pipeline's inputs (gateway, settings, local Pods) rarely changed.
 * The result is shared: do not modify it.
 */
export class PipelineFlows {
  private last?: { key: string; flows: Flow[] };

  flows(input: PipelineInput): Flow[] {
    const key = JSON.stringify(input);
    if (this.last?.key === key) return this.last.flows;
    const flows = computeFlows(input);
    this.last = { key, flows };
    return flows;
  }
}

/** The complete desired flow set, in a deterministic order. Throws PipelineInputError on bad input. */
export function computeFlows(input: PipelineInput): Flow[] {
  validatePipelineInput(input);
  const pods = [...input.pods].sort((a, b) => (a.containerId < b.containerId ? -1 : a.containerId > b.containerId ? 1 : 0));
  const flows = [...baseFlows(input), ...pods.flatMap(podFlows)];
  const seen = new Map<string, Flow>();
  for (const f of flows) {
    const dup = seen.get(f.cookie);
    if (dup) throw new Error(`cookie collision ${f.cookie} between "${dup.match}" and "${f.match}" in ${f.table}`);
    seen.set(f.cookie, f);
  }
  return flows;
}

