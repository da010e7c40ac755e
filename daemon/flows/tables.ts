/**
 * The OVS pipeline's vocabulary: table names and numbers, register bits, conntrack marks and the
 * fixed MACs of policy-only mode. Pure constants; every other module refers to tables by name
 * through this map, and the OVS adapter registers the names in OVSDB (Bridge.flow_tables) so that
 * `ovs-ofctl --names dump-flows` and `ofproto/trace` show them.
 */

/** Tables in pipeline order (OpenFlow goto_table only jumps forward, so order = numbering). */
export const TABLES = [
  'Classifier', // 0: where did the packet come from (gateway / local Pod), ARP/ND vs IP
  'ARPSpoofGuard', // Pod ARP / IPv6 Neighbour Solicitation only for its own IP+MAC
  'ARPResponder', // every ARP request / Neighbour Solicitation -> aa:bb:cc:dd:ee:ff (DAD excepted)
  'SpoofGuard', // Pod IP/IPv6 only from its own IP+MAC
  'ConntrackZone', // ct(zone=65520)
  'ConntrackState', // +inv drop
  // Address classes of policy peers (policy/addrclass.ts): bits of the classes holding the
  // source (ingress peers) / destination (egress peers) address, in CLASS_REGS; misses go on.
  'SrcAddressClass',
  'DstAddressClass',
  // Egress policy tables (policy/compile.ts; without policies they pass everything).
  'AntreaPolicyEgressRule',
  'EgressRule',
  'EgressDefaultRule',
  'EgressMetric',
  'L3Forwarding', // local Pod by destination IP, Service CIDR and everything else -> gateway
  'L3DecTTL', // Pod -> local Pod: the hop the host kernel used to make
  'IngressSecurityClassifier', // ingress rules apply only to local Pod destinations
  // Ingress policy tables (policy/compile.ts; without policies they pass everything).
  'AntreaPolicyIngressRule',
  'IngressRule',
  'IngressDefaultRule',
  'IngressMetric',
  'ConntrackCommit', // commit new connections; re-entrance skips it
  'Output', // output:reg1, or IN_PORT with the re-entrance MAC
] as const;

export type TableName = (typeof TABLES)[number];

export const tableId = (name: TableName): number => TABLES.indexOf(name);

/** The table after `name` (hook tables miss to it). */
export function nextTable(name: TableName): TableName {
  const i = TABLES.indexOf(name);
  const next = TABLES[i + 1];
  if (next === undefined) throw new Error(`table ${name} is the last table`);
  return next;
}

/** Policy hook tables: the policy compiler's flows over a pass-through miss flow. */
export const POLICY_HOOK_TABLES: readonly TableName[] = [
  'SrcAddressClass',
  'DstAddressClass',
  'AntreaPolicyEgressRule',
  'EgressRule',
  'EgressDefaultRule',
  'EgressMetric',
  'AntreaPolicyIngressRule',
  'IngressRule',
  'IngressDefaultRule',
  'IngressMetric',
];

export const VIRTUAL_MAC = 'aa:bb:cc:dd:ee:ff';
export const REENTRANCE_MAC = 'de:ad:be:ef:de:ad';
export const CT_ZONE = 65520;
/** Fixed OpenFlow port number requested for antrea-gw0 (Pod ports get OVS-assigned numbers below it). */
export const GATEWAY_OFPORT = 32769;

/**
 * reg0 layout (value/mask pairs used in matches and set_field):
 *  [0..3]  packet source: 1 = gateway, 2 = local Pod
 *  [4]     host-originated: from the gateway with the node IP as source (policy exempts it)
 *  [5]     destination in a Service CIDR (goes to the host untouched; policy decides post-DNAT)
 *  [8..11] packet destination: 1 = gateway, 2 = local Pod
 *  [12]    a Drop/Reject rule decided: the packet is counted in the Metric table, then dropped there
 * reg1 = output ofport. reg7, reg8, reg10, reg11 / reg12..reg15 = address class bits of the source /
 * destination (policy/addrclass.ts). reg9 = traceflow (one bit per table). reg5 / reg6 = conjunction id of the egress / ingress rule that decided the
 * packet (0: no rule), committed into the connection's ct_label (egress bits 0..31, ingress 32..63)
 * so the Metric tables count a connection's later packets under the rule that allowed it.
 */
export const REG0 = {
  srcMask: 0xf,
  srcGateway: 0x1,
  srcPod: 0x2,
  fromHost: 0x10,
  toService: 0x20,
  dstMask: 0xf00,
  dstGateway: 0x100,
  dstPod: 0x200,
  ruleDrop: 0x1000,
} as const;

/** Register holding the deciding rule's conjunction id, and its ct_label bits, per direction. */
export const RULE_REG = { Egress: { reg: 'reg5', field: 'NXM_NX_REG5[]', label: '0..31' }, Ingress: { reg: 'reg6', field: 'NXM_NX_REG6[]', label: '32..63' } } as const;

/** ct_mark bit: the connection entered the bridge from the gateway (its replies go back there). */
export const CT_MARK_FROM_GATEWAY = 0x20;

export const hex = (n: number): string => `0x${n.toString(16)}`;
/** `reg0=0x1/0xf` style match or set_field operand. */
export const masked = (value: number, mask: number): string => `${hex(value)}/${hex(mask)}`;
