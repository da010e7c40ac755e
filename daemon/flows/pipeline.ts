/**
 * The policy-only pipeline, computed from node settings and the local Pod ports (pure, no I/O).
 *
 * Packet walks (the README's "Packet walk" says why each one is needed):
 *  - Pod -> local Pod: L3Forwarding by destination IP (eth_src := virtual MAC, eth_dst := Pod MAC),
 *    TTL - 1 like the host's routing hop it replaces.
 *  - Pod -> anything else, and everything from the gateway that is not for a local Pod: eth_dst :=
 *    gateway MAC, out antrea-gw0.
 *  - Pod -> Service CIDR: to antrea-gw0 untouched (kube-proxy DNATs; the mark/table 300 sends it
 *    back post-DNAT). Back from the gateway and out to the gateway again = re-entrance: eth_src :=
 *    de:ad:be:ef:de:ad (the host's raw table skips conntrack for it), out IN_PORT, no OVS commit.
 *  - Replies of connections that entered from the gateway go back to the gateway (ct_mark), so the
 *    host undoes its DNAT even when the endpoint is a local Pod.
 *
 * Both families take the same walks (`ip` flows and their `ipv6` twins). IPv6 has no ARP: Neighbour
 * Discovery takes its place in the ARP tables (see ndResponderActions), and link-local and
 * multicast destinations never cross the bridge (each Pod's link is its own).
 */
import { canonicalIp, isIpv4Mapped, parseCidr, parseIp } from '../policy/cidr.js';
import { type Flow, FlowCategory, type FlowSpec, withCookie } from './flow.js';
import type { FlowStore } from './store.js';
import {
  CT_MARK_FROM_GATEWAY,
  CT_ZONE,
  hex,
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
  /** The Pod's addresses, IPv4 and/or IPv6 (no prefix length). */
  ips: string[];
  /** The Pod's second port for IPv4 egress (see EgressV4Port), when its primary gave it one. */
  egressV4?: EgressV4Port | undefined;
}

/**
 * The IPv4 egress path the AWS VPC CNI's `egress-cni` gives an IPv6-only Pod: a second veth
 * (`v4if0` in the Pod) with a link-local IPv4 address, whose packets leave SNATed to the node's
 * address. On the bridge it is a second port of the same Pod: spoof-guarded by port, MAC and that
 * address, its ARP for its gateway answered by the ARP responder, replies delivered by address.
 */
export interface EgressV4Port {
  ofport: number;
  /** MAC of the Pod's egress interface (inside its netns). */
  mac: string;
  /** Its IPv4 address (no prefix length). */
  ip: string;
}

export interface PipelineInput {
  gatewayOfport: number;
  gatewayMac: string;
  /** Packets from the gateway with this source are host-originated (kubelet probes etc.). */
  nodeIP?: string | undefined;
  /** The node's IPv6 address, the same for IPv6 packets. */
  nodeIPv6?: string | undefined;
  /** Service CIDRs of either family. */
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
function checkIP(ip: string, field: string, family?: 4 | 6): void {
  const fam = familyOf(ip);
  if (fam === undefined || (family !== undefined && fam !== family)) {
    throw new PipelineInputError(`${field}: "${ip}" is not an ${family === 6 ? 'IPv6' : family === 4 ? 'IPv4' : 'IPv4 or IPv6'} address`);
  }
}
/** A Service CIDR (or any CIDR setting) of either family, without host bits. */
export function checkCIDR(cidr: string, field: string): void {
  const slash = typeof cidr === 'string' ? cidr.indexOf('/') : -1;
  const ip = slash > 0 ? parseIp(cidr.slice(0, slash)) : undefined;
  const parsed = parseCidr(cidr);
  if (!ip || !parsed || isIpv4Mapped(ip)) throw new PipelineInputError(`${field}: "${cidr}" is not an IPv4 or IPv6 CIDR`);
  if (ip.value !== parsed.start) throw new PipelineInputError(`${field}: "${cidr}" has host bits set`);
}

/** 4 or 6 for an address text (IPv4-mapped IPv6 counts as neither: the bridge never sees one). */
export function familyOf(ip: string): 4 | 6 | undefined {
  const parsed = parseIp(ip);
  return parsed && !isIpv4Mapped(parsed) ? parsed.family : undefined;
}

/** The canonical text of an address, so one address always gives the same flows (and cookies). */
const canon = (ip: string): string => canonicalIp(ip) ?? ip;
/** A CIDR with its address in canonical text. */
const canonCidr = (cidr: string): string => {
  const [ip, len] = cidr.split('/');
  return `${canon(ip!)}/${len}`;
};
const cidrFamily = (cidr: string): 4 | 6 => (cidr.includes(':') ? 6 : 4);

/** Why `ip` cannot be a Pod address the bridge routes (link-local, multicast...), or undefined. */
export function podAddressProblem(ip: string): string | undefined {
  const addr = parseIp(ip);
  if (!addr || isIpv4Mapped(addr)) return `"${ip}" is not an IPv4 or IPv6 address`;
  const bad = [['fe80::/10', 'link-local'], ['ff00::/8', 'multicast'], ['::/128', 'unspecified'], ['::1/128', 'loopback'], ['224.0.0.0/4', 'multicast'], ['127.0.0.0/8', 'loopback'], ['0.0.0.0/32', 'unspecified']] as const;
  for (const [cidr, what] of bad) {
    const c = parseCidr(cidr)!;
    if (c.family === addr.family && addr.value >= c.start && addr.value <= c.end) return `"${ip}" is a ${what} address, not a Pod address`;
  }
  return undefined;
}

function checkPodIP(ip: string, field: string): void {
  const problem = podAddressProblem(ip);
  if (problem) throw new PipelineInputError(`${field}: ${problem}`);
}

export function validatePipelineInput(input: PipelineInput): void {
  checkOfport(input.gatewayOfport, 'gatewayOfport');
  checkMac(input.gatewayMac, 'gatewayMac');
  if (input.nodeIP !== undefined) checkIP(input.nodeIP, 'nodeIP', 4);
  if (input.nodeIPv6 !== undefined) checkIP(input.nodeIPv6, 'nodeIPv6', 6);
  input.serviceCIDRs.forEach((c, i) => checkCIDR(c, `serviceCIDRs[${i}]`));
  const ofports = new Map<number, string>([[input.gatewayOfport, 'the gateway']]);
  const ips = new Map<string, string>();
  for (const [i, pod] of input.pods.entries()) {
    const where = checkPodPort(pod, `pods[${i}]`);
    const other = ofports.get(pod.ofport);
    if (other) throw new PipelineInputError(`${where}.ofport ${pod.ofport} is already used by ${other}`);
    ofports.set(pod.ofport, `container ${pod.containerId}`);
    if (pod.egressV4) {
      const used = ofports.get(pod.egressV4.ofport);
      if (used) throw new PipelineInputError(`${where}.egressV4.ofport ${pod.egressV4.ofport} is already used by ${used}`);
      ofports.set(pod.egressV4.ofport, `container ${pod.containerId} (IPv4 egress port)`);
    }
    for (const ip of podAddresses(pod)) {
      const owner = ips.get(canon(ip));
      if (owner) throw new PipelineInputError(`${where}: IP ${ip} is already used by container ${owner}`);
      ips.set(canon(ip), pod.containerId);
    }
  }
}

/** One Pod port's own fields (not its clashes with other ports); returns how errors name it. */
function checkPodPort(pod: PodPort, field: string): string {
  if (!pod.containerId) throw new PipelineInputError(`${field}.containerId is empty`);
  const where = `${field} (container ${pod.containerId})`;
  checkOfport(pod.ofport, `${where}.ofport`);
  checkMac(pod.mac, `${where}.mac`);
  if (pod.ips.length === 0) throw new PipelineInputError(`${where}.ips is empty`);
  for (const ip of pod.ips) checkPodIP(ip, `${where}.ips`);
  if (pod.egressV4) {
    checkOfport(pod.egressV4.ofport, `${where}.egressV4.ofport`);
    if (pod.egressV4.ofport === pod.ofport) throw new PipelineInputError(`${where}.egressV4.ofport ${pod.ofport} is the Pod's own port`);
    checkMac(pod.egressV4.mac, `${where}.egressV4.mac`);
    checkIP(pod.egressV4.ip, `${where}.egressV4.ip`, 4);
    checkPodIP(pod.egressV4.ip, `${where}.egressV4.ip`);
    if (pod.ips.some((ip) => familyOf(ip) === 4)) throw new PipelineInputError(`${where}.egressV4: the Pod has an IPv4 address of its own`);
  }
  return where;
}

/** Every address the bridge delivers to a Pod: its own and its IPv4 egress port's. */
export const podAddresses = (pod: PodPort): string[] => (pod.egressV4 ? [...pod.ips, pod.egressV4.ip] : pod.ips);

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

/** ICMPv6 types of Neighbour Discovery. */
export const ND = { routerSolicit: 133, routerAdvert: 134, solicit: 135, advert: 136, redirect: 137 } as const;
/** NA flags (RFC 4861 4.4): Router, Solicited, Override. */
const NA_FLAGS = { router: 0x80000000, solicited: 0x40000000, override: 0x20000000 } as const;

/**
 * The Neighbour Advertisement built in place from a Solicitation (the ARP responder's IPv6 twin):
 * Ethernet and IPv6 addresses swapped with the solicited target as the source, type 135 -> 136,
 * the flags, and the Source Link-Layer option turned into a Target Link-Layer option. The target
 * link-layer address can only be written to a packet that already is an advertisement (OVS checks
 * the field's prerequisites against the current flow), hence the resubmit into this same table,
 * where the advertisement flow finishes it. OVS fixes the ICMPv6 checksum.
 */
const ndResponderActions = (flags: number): string => [
  'move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]',
  `set_field:${VIRTUAL_MAC}->eth_src`,
  'move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[]',
  'move:NXM_NX_ND_TARGET[]->NXM_NX_IPV6_SRC[]',
  `set_field:${ND.advert}->icmpv6_type`,
  `set_field:${hex(flags >>> 0)}->nd_reserved`,
  'set_field:2->nd_options_type',
  'resubmit(,ARPResponder)',
].join(',');

type Spec = Omit<FlowSpec, 'category'>;
const FAMILIES = [4, 6] as const;
/** The per-family vocabulary of OpenFlow matches. */
const F = {
  4: { ip: 'ip', src: 'nw_src', dst: 'nw_dst' },
  6: { ip: 'ipv6', src: 'ipv6_src', dst: 'ipv6_dst' },
} as const;

/** Flows that depend only on node settings (gateway, node IPs, Service CIDRs). */
export function baseFlows(input: Omit<PipelineInput, 'pods'>): Flow[] {
  const gw = input.gatewayOfport;
  const toGateway = `set_field:${input.gatewayMac}->eth_dst,set_field:${gw}->reg1,${setReg0(REG0.dstGateway, REG0.dstMask)}`;
  const nodeIPs = { 4: input.nodeIP, 6: input.nodeIPv6 };
  const specs: Spec[] = [
    // Classifier
    { table: 'Classifier', priority: 200, match: 'arp', actions: goto('ARPSpoofGuard') },
    // Neighbour Discovery is IPv6's ARP: solicitations and advertisements to the ARP tables.
    ...[ND.solicit, ND.advert].map((type) => ({ table: 'Classifier' as const, priority: 220, match: `icmp6,icmp_type=${type},icmp_code=0`, actions: goto('ARPSpoofGuard') })),
    { table: 'Classifier', priority: 0, match: '', actions: 'drop' },
    // ARP: the host may ARP for anything; Pods are checked per port.
    { table: 'ARPSpoofGuard', priority: 200, match: `arp,in_port=${gw}`, actions: goto('ARPResponder') },
    // ND likewise: the host may solicit anything. Nothing on the bridge solicits anyone (the
    // responder answers every solicitation), so advertisements from the host or from a Pod have no
    // receiver and fall to the miss flow: a Pod cannot advertise another's address or the gateway's.
    { table: 'ARPSpoofGuard', priority: 200, match: `icmp6,icmp_type=${ND.solicit},icmp_code=0,in_port=${gw}`, actions: goto('ARPResponder') },
    { table: 'ARPSpoofGuard', priority: 0, match: '', actions: 'drop' },
    { table: 'ARPResponder', priority: 200, match: 'arp,arp_op=1', actions: ARP_RESPONDER_ACTIONS },
    // Duplicate Address Detection (source ::) asks whether anyone else holds the asker's own
    // tentative address: an answer would make its address unusable, so none is given.
    { table: 'ARPResponder', priority: 210, match: `icmp6,icmp_type=${ND.solicit},ipv6_src=::`, actions: 'drop' },
    // To a Pod the bridge is its router; to the host, it answers for Pods, which are not routers.
    { table: 'ARPResponder', priority: 200, match: `icmp6,icmp_type=${ND.solicit},icmp_code=0`, actions: ndResponderActions(NA_FLAGS.router | NA_FLAGS.solicited | NA_FLAGS.override) },
    { table: 'ARPResponder', priority: 205, match: `icmp6,icmp_type=${ND.solicit},icmp_code=0,in_port=${gw}`, actions: ndResponderActions(NA_FLAGS.solicited | NA_FLAGS.override) },
    { table: 'ARPResponder', priority: 200, match: `icmp6,icmp_type=${ND.advert}`, actions: `set_field:${VIRTUAL_MAC}->nd_tll,IN_PORT` },
    { table: 'ARPResponder', priority: 0, match: '', actions: 'drop' },
    { table: 'SpoofGuard', priority: 0, match: '', actions: 'drop' },
    { table: 'ConntrackZone', priority: 0, match: '', actions: 'drop' },
    { table: 'ConntrackState', priority: 0, match: '', actions: goto(nextTable('ConntrackState')) },
    // Policy hooks: pass-through until enforcement fills them.
    ...POLICY_HOOK_TABLES.map((t) => ({ table: t, priority: 0, match: '', actions: goto(nextTable(t)) })),
    // A Drop/Reject rule's packet is dropped in the Metric table after its rule's counter flow; this
    // flow drops it even when no counter flow matches, so statistics can never let a packet through.
    ...(['EgressMetric', 'IngressMetric'] as const).map((t) => ({ table: t, priority: 100, match: `reg0=${masked(REG0.ruleDrop, REG0.ruleDrop)}`, actions: 'drop' })),
    { table: 'L3Forwarding', priority: 0, match: '', actions: 'drop' },
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
    { table: 'ConntrackCommit', priority: 0, match: '', actions: goto('Output') },
  ];
  for (const family of FAMILIES) {
    const { ip, dst } = F[family];
    const nodeIP = nodeIPs[family];
    const cidrs = input.serviceCIDRs.filter((c) => cidrFamily(c) === family).map(canonCidr);
    const reentrance = `${ip},reg0=${masked(REG0.srcGateway | REG0.dstGateway, REG0.srcMask | REG0.dstMask)}`;
    specs.push(
      ...(nodeIP
        ? [{
            table: 'Classifier' as const,
            priority: 210,
            match: `${ip},in_port=${gw},${F[family].src}=${canon(nodeIP)}`,
            actions: `${setReg0(REG0.srcGateway | REG0.fromHost, REG0.srcMask | REG0.fromHost)},${goto('SpoofGuard')}`,
          }]
        : []),
      { table: 'Classifier', priority: 200, match: `${ip},in_port=${gw}`, actions: `${setReg0(REG0.srcGateway, REG0.srcMask)},${goto('SpoofGuard')}` },
      // The gateway is not spoof-checked: it carries everyone's traffic.
      { table: 'SpoofGuard', priority: 200, match: `${ip},in_port=${gw}`, actions: goto('ConntrackZone') },
      // A router forwards only frames addressed to it: the host's ip_forward, which this pipeline
      // replaces, drops a Pod's frames sent to a group address (broadcast, multicast) or to a MAC
      // that is not its own. L3Forwarding rewrites both MACs, so without these such frames would be
      // routed; the re-entrance MAC above all means "from the host" to the host's raw table.
      ...[REENTRANCE_MAC, '01:00:00:00:00:00/01:00:00:00:00:00'].map((d) => ({
        table: 'SpoofGuard' as const,
        priority: 210,
        match: `${ip},reg0=${masked(REG0.srcPod, REG0.srcMask)},dl_dst=${d}`,
        actions: 'drop',
      })),
      // IPv6 scopes a router never forwards, whoever sends them: link-local sources and
      // destinations (each Pod's link ends at its port; the host's at the gateway) and multicast
      // (the host's MLD reports and router solicitations, a Pod's router advertisements).
      ...(family === 6
        ? ['ipv6_src=fe80::/10', 'ipv6_dst=fe80::/10', 'ipv6_dst=ff00::/8'].map((m) => ({ table: 'SpoofGuard' as const, priority: 220, match: `ipv6,${m}`, actions: 'drop' }))
        : []),
      // Conntrack (no NAT in OVS: kube-proxy NATs in the host).
      ...cidrs.map((cidr) => ({
        table: 'ConntrackZone' as const,
        priority: 210,
        match: `${ip},${dst}=${cidr}`,
        actions: `${setReg0(REG0.toService, REG0.toService)},ct(table=ConntrackState,zone=${CT_ZONE})`,
      })),
      { table: 'ConntrackZone', priority: 200, match: ip, actions: `ct(table=ConntrackState,zone=${CT_ZONE})` },
      { table: 'ConntrackState', priority: 200, match: `ct_state=+inv+trk,${ip}`, actions: 'drop' },
      // L3 forwarding
      {
        table: 'L3Forwarding',
        priority: 210,
        match: `ct_state=+rpl+trk,ct_mark=${masked(CT_MARK_FROM_GATEWAY, CT_MARK_FROM_GATEWAY)},${ip},reg0=${masked(REG0.srcPod, REG0.srcMask)}`,
        actions: `${toGateway},${goto('L3DecTTL')}`,
      },
      ...cidrs.map((cidr) => ({
        table: 'L3Forwarding' as const,
        priority: 190,
        match: `${ip},${dst}=${cidr}`,
        actions: `${toGateway},${goto('L3DecTTL')}`,
      })),
      { table: 'L3Forwarding', priority: 100, match: ip, actions: `${toGateway},${goto('L3DecTTL')}` },
      // dec_ttl decrements IPv6's hop limit too.
      {
        table: 'L3DecTTL',
        priority: 200,
        match: `${ip},reg0=${masked(REG0.srcPod | REG0.dstPod, REG0.srcMask | REG0.dstMask)}`,
        actions: `dec_ttl,${goto('IngressSecurityClassifier')}`,
      },
      // Commit: re-entrance is never committed; connections from the gateway are marked.
      { table: 'ConntrackCommit', priority: 210, match: reentrance, actions: goto('Output') },
      {
        table: 'ConntrackCommit',
        priority: 200,
        match: `ct_state=+new+trk,${ip},reg0=${masked(REG0.srcGateway, REG0.srcMask)}`,
        actions: `ct(commit,zone=${CT_ZONE},exec(set_field:${masked(CT_MARK_FROM_GATEWAY, CT_MARK_FROM_GATEWAY)}->ct_mark,${ruleLabels})),${goto('Output')}`,
      },
      { table: 'ConntrackCommit', priority: 190, match: `ct_state=+new+trk,${ip}`, actions: `ct(commit,zone=${CT_ZONE},exec(${ruleLabels})),${goto('Output')}` },
      // Output
      { table: 'Output', priority: 210, match: reentrance, actions: `set_field:${REENTRANCE_MAC}->eth_src,IN_PORT` },
      { table: 'Output', priority: 200, match: ip, actions: 'output:NXM_NX_REG1[]' },
    );
  }
  return specs.map((s) => withCookie({ ...s, category: FlowCategory.base }));
}

/** Flows of one local Pod: classification, spoof guards and L3 delivery by destination IP. */
export function podFlows(pod: PodPort): Flow[] {
  const p = pod.ofport;
  const ips = [...new Set(pod.ips.map(canon))].sort();
  const families = FAMILIES.filter((f) => ips.some((ip) => familyOf(ip) === f));
  const specs: Omit<FlowSpec, 'category' | 'owner'>[] = families.map((f) => ({
    table: 'Classifier' as const,
    priority: 200,
    match: `${F[f].ip},in_port=${p}`,
    actions: `${setReg0(REG0.srcPod, REG0.srcMask)},${goto('SpoofGuard')}`,
  }));
  const v6 = ips.filter((ip) => familyOf(ip) === 6);
  // A Pod solicits from one of its own addresses or its link-local one, with its own MAC in the
  // Source Link-Layer option (the address the answer goes to and the neighbour entry it creates).
  for (const src of v6.length ? [...v6, 'fe80::/10'] : []) {
    specs.push({
      table: 'ARPSpoofGuard',
      priority: 200,
      match: `icmp6,icmp_type=${ND.solicit},icmp_code=0,in_port=${p},dl_src=${pod.mac},ipv6_src=${src},nd_sll=${pod.mac}`,
      actions: goto('ARPResponder'),
    });
  }
  for (const ip of ips) {
    const family = familyOf(ip)!;
    const { ip: proto, src, dst } = F[family];
    if (family === 4) {
      specs.push({
        table: 'ARPSpoofGuard',
        priority: 200,
        match: `arp,in_port=${p},dl_src=${pod.mac},arp_spa=${ip},arp_sha=${pod.mac}`,
        actions: goto('ARPResponder'),
      });
    }
    specs.push(
      { table: 'SpoofGuard', priority: 200, match: `${proto},in_port=${p},dl_src=${pod.mac},${src}=${ip}`, actions: goto('ConntrackZone') },
      {
        table: 'L3Forwarding',
        priority: 200,
        match: `${proto},${dst}=${ip}`,
        actions: `set_field:${VIRTUAL_MAC}->eth_src,set_field:${pod.mac}->eth_dst,set_field:${p}->reg1,${setReg0(REG0.dstPod, REG0.dstMask)},${goto('L3DecTTL')}`,
      },
    );
  }
  if (pod.egressV4) specs.push(...egressV4Specs(pod.egressV4));
  return specs.map((s) => withCookie({ ...s, category: FlowCategory.pod, owner: pod.containerId }));
}

/**
 * The flows of a Pod's IPv4 egress port: its IPv4 packets are the Pod's (srcPod, judged by the
 * Pod's egress rules, which count this address as the Pod's own), sent only with its MAC and
 * address; it may ARP for anything from that address (the responder answers its gateway,
 * 169.254.172.1, like any other); replies to the address are delivered to this port. Nothing else
 * from it crosses the bridge (no IPv6: the Pod's IPv6 has its own port).
 */
function egressV4Specs(e: EgressV4Port): Omit<FlowSpec, 'category' | 'owner'>[] {
  const p = e.ofport;
  const ip = canon(e.ip);
  return [
    { table: 'Classifier', priority: 200, match: `ip,in_port=${p}`, actions: `${setReg0(REG0.srcPod, REG0.srcMask)},${goto('SpoofGuard')}` },
    { table: 'ARPSpoofGuard', priority: 200, match: `arp,in_port=${p},dl_src=${e.mac},arp_spa=${ip},arp_sha=${e.mac}`, actions: goto('ARPResponder') },
    { table: 'SpoofGuard', priority: 200, match: `ip,in_port=${p},dl_src=${e.mac},nw_src=${ip}`, actions: goto('ConntrackZone') },
    {
      table: 'L3Forwarding',
      priority: 200,
      match: `ip,nw_dst=${ip}`,
      actions: `set_field:${VIRTUAL_MAC}->eth_src,set_field:${e.mac}->eth_dst,set_field:${p}->reg1,${setReg0(REG0.dstPod, REG0.dstMask)},${goto('L3DecTTL')}`,
    },
  ];
}

/** The FlowStore owner of a local Pod's flows. */
export const podOwner = (containerId: string): string => `pod/${containerId}`;
/** The FlowStore owner of the flows that depend only on node settings. */
export const BASE_OWNER = 'base';

const podPortKey = (p: PodPort): string => `${p.ofport}|${p.mac}|${p.ips.join(',')}|${p.egressV4 ? `${p.egressV4.ofport}|${p.egressV4.mac}|${p.egressV4.ip}` : ''}`;

/**
 * The pipeline's owners in a FlowStore: the base flows, and one owner per local Pod. update()
 * recomputes only what changed since the last call: the base flows when a node setting changed,
 * a Pod's flows when that Pod came, went or changed its port, MAC or addresses; so a CNI ADD or DEL
 * computes the flows of that one Pod. The input is checked as computeFlows checks it (the changed
 * Pods against all others: one OpenFlow port and one address per Pod); on bad input nothing changes.
 */
export class PipelineOwners {
  private baseKey?: string;
  private readonly pods = new Map<string, { key: string; port: PodPort }>();
  /** OpenFlow port / canonical address -> container id, over the Pods in the store. */
  private readonly ofports = new Map<number, string>();
  private readonly ips = new Map<string, string>();

  update(store: FlowStore, input: PipelineInput): void {
    const { pods, ...settings } = input;
    const baseKey = JSON.stringify(settings);
    if (baseKey !== this.baseKey) {
      validatePipelineInput({ ...settings, pods: [] });
    }
    const seen = new Set<string>();
    const changed: PodPort[] = [];
    for (const pod of pods) {
      if (seen.has(pod.containerId)) throw new PipelineInputError(`container ${pod.containerId} appears twice among the Pod ports`);
      seen.add(pod.containerId);
      if (this.pods.get(pod.containerId)?.key !== podPortKey(pod)) changed.push(pod);
    }
    const gone = [...this.pods.keys()].filter((id) => !seen.has(id));
    // Every check before any change: a Pod may take a port or address that a changed or departed one frees.
    const moving = new Set([...gone, ...changed.map((p) => p.containerId)]);
    const newPorts = new Map<number, string>();
    const newIps = new Map<string, string>();
    const staying = (id: string | undefined): string | undefined => (id !== undefined && !moving.has(id) ? id : undefined);
    for (const pod of changed) {
      const where = checkPodPort(pod, 'Pod port');
      const portUser = pod.ofport === settings.gatewayOfport ? 'the gateway' : (newPorts.get(pod.ofport) ?? staying(this.ofports.get(pod.ofport)));
      if (portUser) throw new PipelineInputError(`${where}.ofport ${pod.ofport} is already used by ${portUser === 'the gateway' ? portUser : `container ${portUser}`}`);
      newPorts.set(pod.ofport, pod.containerId);
      if (pod.egressV4) {
        const p = pod.egressV4.ofport;
        const user = p === settings.gatewayOfport ? 'the gateway' : (newPorts.get(p) ?? staying(this.ofports.get(p)));
        if (user) throw new PipelineInputError(`${where}.egressV4.ofport ${p} is already used by ${user === 'the gateway' ? user : `container ${user}`}`);
        newPorts.set(p, pod.containerId);
      }
      for (const ip of podAddresses(pod)) {
        const user = newIps.get(canon(ip)) ?? staying(this.ips.get(canon(ip)));
        if (user && user !== pod.containerId) throw new PipelineInputError(`${where}: IP ${ip} is already used by container ${user}`);
        newIps.set(canon(ip), pod.containerId);
      }
    }
    if (baseKey !== this.baseKey) {
      const id = staying(this.ofports.get(settings.gatewayOfport));
      if (id) throw new PipelineInputError(`gatewayOfport ${settings.gatewayOfport} is already used by container ${id}`);
      store.replace(BASE_OWNER, baseFlows(settings));
      this.baseKey = baseKey;
    }
    for (const id of moving) {
      const cur = this.pods.get(id);
      if (!cur) continue;
      for (const ip of podAddresses(cur.port)) if (this.ips.get(canon(ip)) === id) this.ips.delete(canon(ip));
      for (const p of [cur.port.ofport, ...(cur.port.egressV4 ? [cur.port.egressV4.ofport] : [])]) if (this.ofports.get(p) === id) this.ofports.delete(p);
      this.pods.delete(id);
    }
    for (const id of gone) store.drop(podOwner(id));
    for (const pod of changed) {
      const port: PodPort = { containerId: pod.containerId, ofport: pod.ofport, mac: pod.mac, ips: [...pod.ips], ...(pod.egressV4 ? { egressV4: { ...pod.egressV4 } } : {}) };
      store.replace(podOwner(pod.containerId), podFlows(port));
      this.pods.set(pod.containerId, { key: podPortKey(port), port });
      this.ofports.set(port.ofport, port.containerId);
      if (port.egressV4) this.ofports.set(port.egressV4.ofport, port.containerId);
      for (const ip of podAddresses(port)) this.ips.set(canon(ip), port.containerId);
    }
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

