/**
 * Antrea ClusterNetworkPolicy (ACNP) and Antrea NetworkPolicy (ANNP), crd.antrea.io v1alpha1 and
 * v1beta1 -> InternalRules.
 *
 * Semantics:
 * - tier: absent = "application"; the static tiers always exist; "baseline" rules go to stage 2
 *   (after Kubernetes NetworkPolicy), every other tier to stage 0 with the tier's priority.
 * - priority (float, 1..10000) orders policies inside a tier; rules keep their order, ingress and
 *   egress indexed separately (RulePriority.rule).
 * - An empty `from` (ingress) or an empty `to` + `toServices` (egress) matches any peer.
 * - appliedTo is either at policy level or on every rule, never both.
 * - A rule without `name` gets the name Antrea's webhook would give it (see rulename.ts).
 * - No isolation: Antrea-native policies only act through their rules.
 */
import type { Action, Direction, InternalRule, KubeObject, NormalizeContext, NormalizeResult, Peer, PolicyKind, PortMatch } from '../types.js';
import { Problems, arrayField, checkObjectMeta, emptyResult, errorResult, isObject, objectNamespace, stringField } from './common.js';
import { integerInRange } from '../problems.js';
import { type AppliedToPlace, type Scope, convertAppliedTo, convertPeer, convertToService, isMulticastCidr } from './peers.js';
import { generatedRuleName } from './rulename.js';
import { BASELINE_TIER, canonicalTierName, resolveTierPriority, tierStage } from './tiers.js';

const ACTIONS: readonly Action[] = ['Allow', 'Drop', 'Reject', 'Pass'];
const PORT_PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;
const IGMP_QUERY = 0x11;
const IGMP_REPORTS = [0x12, 0x16, 0x22];
/** IANA_SVC_NAME, what a container port name must be (so only these can ever match). */
const PORT_NAME = /^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*$/;
/** The CRD's pattern for logLabel (at most 63 characters, label-value syntax). */
const LOG_LABEL = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;

interface RuleDraft {
  direction: Direction;
  index: number;
  field: string;
  action: Action;
  name: string;
  appliedTo?: Peer[];
  appliesToService: boolean;
  /** undefined = any peer */
  peers?: Peer[];
  /** Peers that are ipBlocks only (a rule applied to a NodePort Service may use nothing else). */
  peersAllIpBlocks: boolean;
  ports: PortMatch[];
  logging?: { enabled: boolean; label?: string };
}

export function normalizeAntreaPolicy(obj: KubeObject, ctx: NormalizeContext, kind: Extract<PolicyKind, 'AntreaClusterNetworkPolicy' | 'AntreaNetworkPolicy'>): NormalizeResult {
  const scope: Scope = kind === 'AntreaNetworkPolicy' ? { flavor: 'namespaced', namespace: objectNamespace(obj) } : { flavor: 'cluster' };
  const name = obj.metadata.name;
  const p = new Problems(kind, scope.namespace, name);
  checkObjectMeta(p, obj, scope.flavor === 'namespaced');
  const spec = obj.spec;
  if (!isObject(spec)) {
    p.add('spec', 'is required');
    return errorResult(p);
  }

  // priority: required float in [1, 10000]
  let priority = NaN;
  if (spec.priority === undefined || spec.priority === null) p.add('spec.priority', 'is required');
  else if (typeof spec.priority !== 'number' || !Number.isFinite(spec.priority)) p.add('spec.priority', `must be a number, got ${JSON.stringify(spec.priority)}`);
  else if (spec.priority < 1 || spec.priority > 10000) p.add('spec.priority', `must be between 1.0 and 10000.0, got ${spec.priority}`);
  else priority = spec.priority;

  // tier: must exist
  const tierField = stringField(p, spec.tier, 'spec.tier');
  const tier = canonicalTierName(tierField);
  const tierPriority = resolveTierPriority(tier, ctx);
  if (tierPriority === undefined) p.add('spec.tier', `tier ${tier} does not exist`);

  const ingress = arrayField(p, spec.ingress, 'spec.ingress');
  const egress = arrayField(p, spec.egress, 'spec.egress');

  // appliedTo placement: policy level xor every rule.
  const specAppliedTo = arrayField(p, spec.appliedTo, 'spec.appliedTo');
  const rulesWithAppliedTo = [...ingress, ...egress].filter((r) => isObject(r) && Array.isArray(r.appliedTo) && r.appliedTo.length > 0).length;
  const perRule = specAppliedTo.length === 0;
  if (specAppliedTo.length > 0 && rulesWithAppliedTo > 0) {
    p.add('spec.appliedTo', 'appliedTo should not be set in both spec and rules');
  } else if (specAppliedTo.length === 0 && rulesWithAppliedTo === 0) {
    p.add('spec.appliedTo', 'appliedTo needs to be set in either spec or rules');
  } else if (perRule && rulesWithAppliedTo !== ingress.length + egress.length) {
    const missing = [...ingress.map((r, i) => [r, `spec.ingress[${i}]`] as const), ...egress.map((r, i) => [r, `spec.egress[${i}]`] as const)]
      .filter(([r]) => !(isObject(r) && Array.isArray(r.appliedTo) && r.appliedTo.length > 0))
      .map(([, f]) => f);
    for (const f of missing) p.add(`${f}.appliedTo`, 'appliedTo field should either be set in all rules or in none of them');
  }
  const policyAppliedTo = specAppliedTo.length > 0 ? convertAppliedTo(p, specAppliedTo, 'spec.appliedTo', 'policy', scope, egress.length > 0) : undefined;

  const drafts: RuleDraft[] = [];
  const convertRules = (rules: unknown[], direction: Direction) => {
    rules.forEach((raw, index) => {
      const d = convertRule(p, raw, direction, index, scope, tier, perRule);
      if (d) drafts.push(d);
    });
  };
  convertRules(ingress, 'Ingress');
  convertRules(egress, 'Egress');

  // Rule names (given or generated) are unique across ingress and egress.
  const seen = new Map<string, string>();
  for (const d of drafts) {
    const other = seen.get(d.name);
    if (other !== undefined) p.add(`${d.field}.name`, `rules names must be unique within the policy: "${d.name}" is also the name of ${other}`);
    else seen.set(d.name, d.field);
  }

  // NodePort Service targets: ingress rules may only use ipBlock peers; and sluice cannot enforce it.
  for (const d of drafts) {
    const onService = policyAppliedTo?.appliesToService || d.appliesToService;
    if (onService && d.direction === 'Ingress' && !d.peersAllIpBlocks) {
      p.add(`${d.field}.from`, 'a rule/policy that is applied to Services can only use ipBlock to select workloads');
    }
  }
  const nodePortFields = policyAppliedTo?.appliesToService ? ['spec.appliedTo'] : drafts.filter((d) => d.appliesToService).map((d) => `${d.field}.appliedTo`);
  for (const f of nodePortFields) {
    p.add(f, 'applying a policy to a NodePort Service needs AntreaProxy proxyAll without kube-proxy; sluice (policy-only mode next to kube-proxy) cannot enforce it');
  }

  if (p.any) return errorResult(p);

  const tieBreak = `${kind}/${scope.namespace ?? ''}/${name}`;
  const stage = tierStage(tier);
  const rules: InternalRule[] = drafts.map((d) => {
    const rule: InternalRule = {
      id: `${tieBreak}/${d.direction.toLowerCase()}/${d.index}`,
      ref: { kind, name, rule: d.name, tier, ...(scope.namespace !== undefined ? { namespace: scope.namespace } : {}) },
      direction: d.direction,
      action: d.action,
      priority: { stage, tier: tierPriority!, policy: priority, rule: d.index, tieBreak },
      appliedTo: perRule ? d.appliedTo! : policyAppliedTo!.targets,
      ports: d.ports,
    };
    if (d.peers !== undefined) rule.peers = d.peers;
    if (d.logging) rule.logging = d.logging;
    return rule;
  });
  return { ...emptyResult(), rules };
}

function convertRule(p: Problems, raw: unknown, direction: Direction, index: number, scope: Scope, tier: string, perRule: boolean): RuleDraft | undefined {
  const field = `spec.${direction === 'Ingress' ? 'ingress' : 'egress'}[${index}]`;
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const before = p.list.length;

  let action: Action | undefined;
  if (raw.action === undefined || raw.action === null) p.add(`${field}.action`, 'is required');
  else if (!ACTIONS.includes(raw.action)) p.add(`${field}.action`, `must be one of ${ACTIONS.join(', ')}, got ${JSON.stringify(raw.action)}`);
  else action = raw.action as Action;
  if (action === 'Pass' && tier === BASELINE_TIER) {
    p.add(`${field}.action`, '`Pass` action should not be set for Baseline Tier policy rules');
  }

  const given = stringField(p, raw.name, `${field}.name`);
  if (raw.enableLogging !== undefined && raw.enableLogging !== null && typeof raw.enableLogging !== 'boolean') {
    p.add(`${field}.enableLogging`, 'must be true or false');
  }
  const logLabel = stringField(p, raw.logLabel, `${field}.logLabel`);
  if (logLabel !== undefined && !LOG_LABEL.test(logLabel)) {
    p.add(`${field}.logLabel`, `"${logLabel}" must be at most 63 characters: alphanumerics, "-", "_" or ".", starting and ending with an alphanumeric`);
  }
  if (Array.isArray(raw.l7Protocols) && raw.l7Protocols.length > 0) {
    p.add(`${field}.l7Protocols`, 'layer 7 protocols can only be used when the L7NetworkPolicy feature is enabled; sluice does not implement it');
  }

  // ports and protocols
  const rawPorts = arrayField(p, raw.ports, `${field}.ports`);
  const rawProtocols = arrayField(p, raw.protocols, `${field}.protocols`);
  const ports: PortMatch[] = [];
  rawPorts.forEach((rp, i) => {
    const m = convertPort(p, rp, `${field}.ports[${i}]`);
    if (m) ports.push(m);
  });
  let hasIgmp = false;
  let hasIcmp = false;
  rawProtocols.forEach((rp, i) => {
    const m = convertProtocol(p, rp, `${field}.protocols[${i}]`, direction);
    if (!m) return;
    if (m.protocol === 'IGMP') hasIgmp = true;
    else hasIcmp = true;
    ports.push(m);
  });

  // peers
  const peerKey = direction === 'Ingress' ? 'from' : 'to';
  const rawPeers = arrayField(p, raw[peerKey], `${field}.${peerKey}`);
  const otherKey = direction === 'Ingress' ? 'to' : 'from';
  if (Array.isArray(raw[otherKey]) && raw[otherKey].length > 0) {
    p.add(`${field}.${otherKey}`, `${direction.toLowerCase()} rules take their peers from \`${peerKey}\`, not \`${otherKey}\``);
  }
  const rawServices = arrayField(p, raw.toServices, `${field}.toServices`);
  if (direction === 'Ingress' && rawServices.length > 0) p.add(`${field}.toServices`, 'toServices can only be used in egress rules');
  if (rawServices.length > 0 && (rawPeers.length > 0 || raw.ports != null || raw.protocols != null)) {
    p.add(`${field}.toServices`, '`toServices` cannot be used with `to`, `ports` or `protocols`');
  }
  let peers: Peer[] | undefined;
  let peersAllIpBlocks = true;
  if (rawPeers.length > 0) {
    peers = [];
    let multicast = false;
    let unicast = false;
    let ignored = 0;
    rawPeers.forEach((rp, i) => {
      const peer = convertPeer(p, rp, `${field}.${peerKey}[${i}]`, direction, scope);
      if (peer === undefined) return;
      if (peer === 'ignored') {
        ignored++;
        peersAllIpBlocks = false;
        return;
      }
      if (peer === null || peer.kind !== 'ipBlock') peersAllIpBlocks = false;
      if (peer === null) return;
      if (peer.kind === 'ipBlock' && direction === 'Egress') {
        if (isMulticastCidr(peer.cidr)) multicast = true;
        else unicast = true;
      }
      peers!.push(peer);
    });
    if (multicast && (action === 'Pass' || action === 'Reject')) {
      p.add(`${field}.action`, 'multicast does not support action Pass or Reject');
    }
    if (multicast && unicast) p.add(`${field}.${peerKey}`, 'can not set multicast groupAddress and unicast ip address at the same time');
    if (multicast && peers.some((x) => x.kind !== 'ipBlock')) p.add(`${field}.${peerKey}`, 'can not set multicast groupAddress and selectors at the same time');
    // As in Antrea's controller: with every peer ignored the rule is left with no peer, which matches every address.
    if (ignored === rawPeers.length) peers = undefined;
  } else if (rawServices.length > 0 && direction === 'Egress') {
    peers = [];
    peersAllIpBlocks = false;
    rawServices.forEach((rs, i) => {
      const svc = convertToService(p, rs, `${field}.toServices[${i}]`, scope);
      if (svc) peers!.push(svc);
    });
  }

  if (hasIgmp) {
    if (action === 'Pass' || action === 'Reject') p.add(`${field}.action`, 'protocol IGMP does not support Pass or Reject');
    if (rawPorts.length > 0 || rawServices.length > 0 || rawPeers.length > 0 || hasIcmp) {
      p.add(`${field}.protocols`, 'protocol IGMP can not be used with other protocols or other properties like from, to, ports and toServices');
    }
  }

  // per-rule appliedTo
  let appliedTo: Peer[] | undefined;
  let appliesToService = false;
  const rawAppliedTo = arrayField(p, raw.appliedTo, `${field}.appliedTo`);
  if (perRule && rawAppliedTo.length > 0) {
    const place: AppliedToPlace = direction;
    const converted = convertAppliedTo(p, rawAppliedTo, `${field}.appliedTo`, place, scope, false);
    if (converted) {
      appliedTo = converted.targets;
      appliesToService = converted.appliesToService;
    }
  }

  if (p.list.length > before || action === undefined) return undefined;
  const name = given || generatedRuleName(direction === 'Ingress' ? 'ingress' : 'egress', raw);
  const draft: RuleDraft = { direction, index, field, action, name, appliesToService, peersAllIpBlocks, ports };
  if (appliedTo) draft.appliedTo = appliedTo;
  if (peers) draft.peers = peers;
  if (raw.enableLogging === true) draft.logging = logLabel ? { enabled: true, label: logLabel } : { enabled: true };
  return draft;
}

function convertPort(p: Problems, raw: unknown, field: string): PortMatch | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const before = p.list.length;
  let protocol: PortMatch['protocol'] = 'TCP';
  if (raw.protocol !== undefined && raw.protocol !== null) {
    if (!(PORT_PROTOCOLS as readonly unknown[]).includes(raw.protocol)) p.add(`${field}.protocol`, `must be TCP, UDP or SCTP, got ${JSON.stringify(raw.protocol)}`);
    else protocol = raw.protocol;
  }
  let port: number | string | undefined;
  if (typeof raw.port === 'string') {
    if (raw.port.length > 15 || !PORT_NAME.test(raw.port)) {
      p.add(`${field}.port`, `"${raw.port}" is neither a port number nor a valid port name (at most 15 lower-case letters, digits and '-', with at least one letter)`);
    } else port = raw.port;
  } else {
    port = integerInRange(p, raw.port, `${field}.port`, 1, 65535);
  }
  const endPort = integerInRange(p, raw.endPort, `${field}.endPort`, 1, 65535);
  const sourcePort = integerInRange(p, raw.sourcePort, `${field}.sourcePort`, 1, 65535);
  const sourceEndPort = integerInRange(p, raw.sourceEndPort, `${field}.sourceEndPort`, 1, 65535);
  if (raw.endPort != null) {
    if (raw.port === undefined || raw.port === null) p.add(`${field}.endPort`, 'if `endPort` is specified `port` must be specified');
    else if (typeof raw.port === 'string') p.add(`${field}.endPort`, 'if `port` is a string `endPort` cannot be specified');
    else if (typeof port === 'number' && endPort !== undefined && endPort < port) p.add(`${field}.endPort`, `\`endPort\` (${endPort}) should be greater than or equal to \`port\` (${port})`);
  }
  if (raw.sourceEndPort != null) {
    if (raw.sourcePort === undefined || raw.sourcePort === null) p.add(`${field}.sourceEndPort`, 'if `sourceEndPort` is specified `sourcePort` must be specified');
    else if (sourcePort !== undefined && sourceEndPort !== undefined && sourceEndPort < sourcePort) {
      p.add(`${field}.sourceEndPort`, `\`sourceEndPort\` (${sourceEndPort}) should be greater than or equal to \`sourcePort\` (${sourcePort})`);
    }
  }
  if (p.list.length > before) return undefined;
  const m: PortMatch = { protocol };
  if (port !== undefined) m.port = port;
  if (endPort !== undefined) m.endPort = endPort;
  if (sourcePort !== undefined) m.sourcePort = sourcePort;
  if (sourceEndPort !== undefined) m.sourceEndPort = sourceEndPort;
  return m;
}

function convertProtocol(p: Problems, raw: unknown, field: string, direction: Direction): PortMatch | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const hasIcmp = raw.icmp !== undefined && raw.icmp !== null;
  const hasIgmp = raw.igmp !== undefined && raw.igmp !== null;
  if (hasIcmp === hasIgmp) {
    p.add(field, 'each protocols entry must set exactly one of icmp or igmp');
    return undefined;
  }
  const before = p.list.length;
  if (hasIcmp) {
    if (!isObject(raw.icmp)) {
      p.add(`${field}.icmp`, 'must be an object');
      return undefined;
    }
    const icmpType = integerInRange(p, raw.icmp.icmpType, `${field}.icmp.icmpType`, 0, 255);
    const icmpCode = integerInRange(p, raw.icmp.icmpCode, `${field}.icmp.icmpCode`, 0, 255);
    if (p.list.length > before) return undefined;
    const m: PortMatch = { protocol: 'ICMP' };
    if (icmpType !== undefined) m.icmpType = icmpType;
    if (icmpCode !== undefined) m.icmpCode = icmpCode;
    return m;
  }
  if (!isObject(raw.igmp)) {
    p.add(`${field}.igmp`, 'must be an object');
    return undefined;
  }
  const igmpType = integerInRange(p, raw.igmp.igmpType, `${field}.igmp.igmpType`, 0, 255);
  if (igmpType !== undefined) {
    if (direction === 'Ingress' && igmpType !== IGMP_QUERY) p.add(`${field}.igmp.igmpType`, `only IGMP query (0x11 = 17) is supported in ingress rules, got ${igmpType}`);
    if (direction === 'Egress' && !IGMP_REPORTS.includes(igmpType)) p.add(`${field}.igmp.igmpType`, `only IGMP reports (0x12, 0x16, 0x22 = 18, 22, 34) are supported in egress rules, got ${igmpType}`);
  }
  const groupAddress = stringField(p, raw.igmp.groupAddress, `${field}.igmp.groupAddress`);
  if (groupAddress) {
    const cidr = groupAddress.includes(':') ? `${groupAddress}/128` : `${groupAddress}/32`;
    if (!isMulticastCidr(cidr)) p.add(`${field}.igmp.groupAddress`, `groupAddress ${groupAddress} is not a multicast address`);
  }
  if (p.list.length > before) return undefined;
  const m: PortMatch = { protocol: 'IGMP' };
  if (igmpType !== undefined) m.igmpType = igmpType;
  if (groupAddress) m.groupAddress = groupAddress;
  return m;
}
