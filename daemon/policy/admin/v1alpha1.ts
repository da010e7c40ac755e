/**
 * policy.networking.k8s.io/v1alpha1 AdminNetworkPolicy (ANP) and BaselineAdminNetworkPolicy
 * (BANP), as the upstream CRDs (experimental channel, a superset of standard) define them.
 *
 *  ANP  → stage 0, tier 251, policy priority = spec.priority (0–1000, lower first);
 *         Allow → Allow, Deny → Drop, Pass → Pass (continue at K8s NetworkPolicy).
 *  BANP → stage 2, tier 254; one per cluster, named "default"; Allow / Deny only.
 */
import type { KubeObject, NormalizeContext, NormalizeResult, PortMatch } from '../types.js';
import {
  type Json,
  PORT_PROTOCOLS,
  type PortProtocol,
  type Problems,
  exactlyOne,
  isObject,
  namedPortError,
  namedPortMatches,
  policyPriority,
  requiredPort,
} from './common.js';
import { type KindRules, type ParsedPorts, normalizeAdminPolicy } from './rules.js';

/** Tier priorities the precedence order gives these kinds (see daemon/policy/types.ts). */
export const ADMIN_TIER_PRIORITY = 251;
export const BASELINE_TIER_PRIORITY = 254;
/**
 * v1alpha2 ClusterNetworkPolicy tier Admin: before the Antrea application tier (250), where
 * namespace admins' Antrea NetworkPolicies go by default, so they cannot override it (as Antrea).
 */
export const CNP_ADMIN_TIER_PRIORITY = 220;

const ANP_MAX_RULES = 100;
const ANP_MAX_PEERS = 100;
const ANP_MAX_PORTS = 100;

/** `protocol`: TCP (the default), UDP or SCTP. */
function portProtocol(v: unknown, field: string, p: Problems): PortProtocol | undefined {
  if (v === undefined || v === null || v === '') return 'TCP';
  if (typeof v !== 'string' || !(PORT_PROTOCOLS as readonly string[]).includes(v)) {
    p.add(field, `${JSON.stringify(v)} is not a supported protocol (TCP, UDP or SCTP)`);
    return undefined;
  }
  return v as PortProtocol;
}

/** `ports`: each item exactly one of portNumber {protocol, port}, namedPort, portRange {protocol, start, end}. */
function parseV1alpha1Ports(list: unknown[], field: string, p: Problems): ParsedPorts | undefined {
  const matches: PortMatch[] = [];
  let usesNamedPort = false;
  const before = p.count;
  for (const [i, item] of list.entries()) {
    const at = `${field}[${i}]`;
    const which = exactlyOne(item, at, ['portNumber', 'namedPort', 'portRange'], p);
    if (!which) continue;
    const value = (item as Json)[which];
    if (which === 'namedPort') {
      const why = namedPortError(value);
      if (why) p.add(`${at}.namedPort`, why);
      else matches.push(...namedPortMatches(value as string));
      usesNamedPort = true;
      continue;
    }
    if (!isObject(value)) {
      p.add(`${at}.${which}`, 'must be an object');
      continue;
    }
    const protocol = portProtocol(value.protocol, `${at}.${which}.protocol`, p);
    if (which === 'portNumber') {
      const port = requiredPort(value.port, `${at}.portNumber.port`, p);
      if (protocol && port !== undefined) matches.push({ protocol, port });
      continue;
    }
    const start = requiredPort(value.start, `${at}.portRange.start`, p);
    const end = requiredPort(value.end, `${at}.portRange.end`, p);
    if (start !== undefined && end !== undefined && start >= end) {
      p.add(`${at}.portRange`, `start (${start}) must be less than end (${end})`);
      continue;
    }
    if (protocol && start !== undefined && end !== undefined) matches.push({ protocol, port: start, endPort: end });
  }
  return p.count > before ? undefined : { matches, usesNamedPort };
}

const SHARED = {
  maxRules: ANP_MAX_RULES,
  maxPeers: ANP_MAX_PEERS,
  portsField: 'ports',
  maxPorts: ANP_MAX_PORTS,
  parsePorts: parseV1alpha1Ports,
  namespaceSelectorRequired: true,
  domainNamesAction: 'Allow',
} as const;

export function normalizeAdminNetworkPolicy(obj: KubeObject, _ctx?: NormalizeContext): NormalizeResult {
  return normalizeAdminPolicy(obj, 'AdminNetworkPolicy', (spec, p): KindRules => {
    const priority = policyPriority(spec, p);
    return {
      ...SHARED,
      kind: 'AdminNetworkPolicy',
      tierName: 'Admin',
      stage: 0,
      tier: ADMIN_TIER_PRIORITY,
      priority,
      actions: { Allow: 'Allow', Deny: 'Drop', Pass: 'Pass' },
      egressPeerFields: ['namespaces', 'pods', 'nodes', 'networks', 'domainNames'],
    };
  });
}

export function normalizeBaselineAdminNetworkPolicy(obj: KubeObject, _ctx?: NormalizeContext): NormalizeResult {
  return normalizeAdminPolicy(obj, 'BaselineAdminNetworkPolicy', (_spec, p): KindRules => {
    const name = obj.metadata?.name;
    if (typeof name === 'string' && name !== '' && name !== 'default') {
      p.add('metadata.name', `must be "default": only one BaselineAdminNetworkPolicy, named "default", can exist in a cluster (got "${name}")`);
    }
    return {
      ...SHARED,
      kind: 'BaselineAdminNetworkPolicy',
      tierName: 'Baseline',
      stage: 2,
      tier: BASELINE_TIER_PRIORITY,
      priority: 0,
      actions: { Allow: 'Allow', Deny: 'Drop' },
      egressPeerFields: ['namespaces', 'pods', 'nodes', 'networks'],
    };
  });
}
