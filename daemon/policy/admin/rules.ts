/**
 * The rule walk shared by AdminNetworkPolicy, BaselineAdminNetworkPolicy and v1alpha2
 * ClusterNetworkPolicy. The kinds differ only in the table passed in (`KindRules`): which
 * actions exist and what they mean, list limits, which peer fields exist, and how the
 * port/protocol list is written. The structure (subject, ordered ingress/egress rules with
 * an action, peers and optional ports) is the same.
 */
import type { Action, Direction, InternalRule, KubeObject, NormalizeResult, Peer, PolicyKind, PortMatch, Stage } from '../types.js';
import {
  type Json,
  Problems,
  checkObjectBasics,
  emptyResult,
  exactlyOne,
  isObject,
  labelSelector,
  listField,
  namespacedPods,
  objectName,
  podsInNamespaces,
  ruleId,
  ruleLabel,
  ruleName,
  subject,
  tieBreak,
} from './common.js';
import { domainNames, networks } from './addresses.js';

/** What a kind's port list parser returns: the matches, and whether a named port is among them. */
export interface ParsedPorts {
  matches: PortMatch[];
  usesNamedPort: boolean;
}

export interface KindRules {
  kind: PolicyKind;
  /** RuleRef.tier: "Admin" or "Baseline". */
  tierName: 'Admin' | 'Baseline';
  stage: Stage;
  tier: number;
  /** Policy priority within the tier (0 for BANP, which has none). */
  priority: number;
  /** Action as written in the API → IR action. Anything else is rejected. */
  actions: Record<string, Action>;
  /** The action name that may be used with domainNames peers ("Allow"/"Accept"). */
  domainNamesAction: string;
  maxRules: number;
  maxPeers: number;
  /** The field holding the port matches: "ports" (v1alpha1) or "protocols" (v1alpha2). */
  portsField: string;
  maxPorts: number;
  parsePorts(list: unknown[], field: string, p: Problems): ParsedPorts | undefined;
  egressPeerFields: readonly string[];
  /** v1alpha1 requires pods.namespaceSelector; v1alpha2 defaults it to {}. */
  namespaceSelectorRequired: boolean;
}

const INGRESS_PEER_FIELDS = ['namespaces', 'pods'] as const;

/**
 * Runs the common checks and the rule walk. `resolve` checks the kind's own spec fields
 * (priority, tier, object name) and returns the kind's table for this object; when those
 * fields are invalid it still returns a table, so every other error is reported too.
 */
export function normalizeAdminPolicy(
  obj: KubeObject,
  kind: PolicyKind,
  resolve: (spec: Json, p: Problems) => KindRules,
): NormalizeResult {
  const name = objectName(obj);
  const p = new Problems(kind, undefined, name);
  const spec = checkObjectBasics(obj, p);
  if (!spec) return emptyResult(p.list);
  const rules = resolve(spec, p);

  const appliedTo = subject(spec.subject, 'spec.subject', { namespaceSelectorRequired: rules.namespaceSelectorRequired }, p);
  const out: InternalRule[] = [];
  for (const direction of ['Ingress', 'Egress'] as const) {
    const field = direction === 'Ingress' ? 'spec.ingress' : 'spec.egress';
    const list = listField(spec[direction === 'Ingress' ? 'ingress' : 'egress'], field, { max: rules.maxRules }, p);
    for (const [i, raw] of (list ?? []).entries()) {
      const rule = normalizeRule(raw, `${field}[${i}]`, direction, i, name, rules, p);
      if (rule && appliedTo) out.push({ ...rule, appliedTo });
    }
  }
  // An object with any error yields no rules at all.
  if (p.count > 0) return emptyResult(p.list);
  return { ...emptyResult(), rules: out };
}

function normalizeRule(
  raw: unknown,
  field: string,
  direction: Direction,
  index: number,
  policyName: string,
  k: KindRules,
  p: Problems,
): Omit<InternalRule, 'appliedTo'> | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const before = p.count;
  const name = ruleName(raw.name, `${field}.name`, p);

  let action: Action | undefined;
  if (raw.action === undefined || raw.action === null || raw.action === '') {
    p.add(`${field}.action`, `is required (one of ${Object.keys(k.actions).join(', ')})`);
  } else if (typeof raw.action !== 'string' || !Object.hasOwn(k.actions, raw.action)) {
    p.add(`${field}.action`, `${JSON.stringify(raw.action)} is not a ${k.kind} action; use one of ${Object.keys(k.actions).join(', ')}`);
  } else {
    action = k.actions[raw.action];
  }

  const peersKey = direction === 'Ingress' ? 'from' : 'to';
  const peerFields = direction === 'Ingress' ? INGRESS_PEER_FIELDS : k.egressPeerFields;
  const peerList = listField(raw[peersKey], `${field}.${peersKey}`, { min: 1, max: k.maxPeers, required: true }, p);
  const peers: Peer[] = [];
  let hasAddressPeer = false; // networks / nodes / domainNames: no named ports there
  let hasDomainNames = false;
  for (const [j, rawPeer] of (peerList ?? []).entries()) {
    const pf = `${field}.${peersKey}[${j}]`;
    const which = exactlyOne(rawPeer, pf, peerFields, p);
    if (!which) continue;
    const value = (rawPeer as Json)[which];
    const at = `${pf}.${which}`;
    switch (which) {
      case 'namespaces': {
        const sel = labelSelector(value, at, p);
        if (sel) peers.push(podsInNamespaces(sel));
        break;
      }
      case 'pods': {
        const pods = namespacedPods(value, at, { namespaceSelectorRequired: k.namespaceSelectorRequired }, p);
        if (pods) peers.push(pods);
        break;
      }
      case 'nodes': {
        hasAddressPeer = true;
        const sel = labelSelector(value, at, p);
        if (sel) peers.push({ kind: 'nodes', selector: sel });
        break;
      }
      case 'networks': {
        hasAddressPeer = true;
        peers.push(...(networks(value, at, p) ?? []));
        break;
      }
      case 'domainNames': {
        hasAddressPeer = true;
        hasDomainNames = true;
        peers.push(...(domainNames(value, at, p) ?? []));
        break;
      }
    }
  }

  let ports: PortMatch[] = [];
  const rawPorts = raw[k.portsField];
  if (rawPorts !== undefined && rawPorts !== null) {
    const list = listField(rawPorts, `${field}.${k.portsField}`, { min: 1, max: k.maxPorts }, p);
    const parsed = list ? k.parsePorts(list, `${field}.${k.portsField}`, p) : undefined;
    if (parsed) {
      ports = parsed.matches;
      if (parsed.usesNamedPort && hasAddressPeer) {
        p.add(
          field,
          `named ports cannot be combined with networks/nodes${k.egressPeerFields.includes('domainNames') ? '/domainNames' : ''} peers (those peers have no named ports)`,
        );
      }
    }
  }

  if (hasDomainNames && typeof raw.action === 'string' && raw.action !== k.domainNamesAction) {
    p.add(`${field}.action`, `domainNames peers are only supported in ${k.domainNamesAction} rules, not ${raw.action}`);
  }

  if (p.count > before || action === undefined) return undefined;
  const label = ruleLabel(name, direction, index);
  return {
    id: ruleId(k.kind, policyName, direction, index),
    ref: { kind: k.kind, name: policyName, rule: label, tier: k.tierName },
    direction,
    action,
    priority: { stage: k.stage, tier: k.tier, policy: k.priority, rule: index, tieBreak: tieBreak(k.kind, policyName) },
    peers,
    ports,
  };
}
