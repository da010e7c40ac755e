/**
 * policy.networking.k8s.io/v1alpha2 ClusterNetworkPolicy (CNP): the upstream API that merges
 * ANP and BANP into one kind with a `tier` field.
 *
 *  tier Admin    → stage 0, tier 220 (before the Antrea application tier 250 and ANP's 251)
 *  tier Baseline → stage 2, tier 254 (same place as BANP)
 *  Accept → Allow, Deny → Drop, Pass → Pass in both tiers. Pass "skips the remaining CNP rules
 *  of the current tier and continues at the next tier": from Admin that is K8s NetworkPolicy
 *  (IR stage 0 Pass), from Baseline it is the cluster default, allow (IR stage 2 Pass).
 *
 *  protocols: each item exactly one of
 *    tcp|udp|sctp: { destinationPort: { number } | { range: { start, end } } }
 *    destinationNamedPort: "<container port name>"
 */
import type { KubeObject, NormalizeContext, NormalizeResult, PortMatch } from '../types.js';
import {
  type Json,
  type Problems,
  exactlyOne,
  isObject,
  namedPortError,
  namedPortMatches,
  policyPriority,
  type PortProtocol,
  requiredPort,
} from './common.js';
import { type KindRules, type ParsedPorts, normalizeAdminPolicy } from './rules.js';
import { BASELINE_TIER_PRIORITY, CNP_ADMIN_TIER_PRIORITY } from './v1alpha1.js';

const CNP_MAX_RULES = 25;
const CNP_MAX_PEERS = 25;
const CNP_MAX_PROTOCOLS = 25;

const PROTOCOL_FIELDS: Record<string, PortProtocol> = { tcp: 'TCP', udp: 'UDP', sctp: 'SCTP' };

/** `destinationPort`: exactly one of `number` or `range {start, end}` (start < end). */
function destinationPort(v: unknown, field: string, protocol: PortProtocol, p: Problems): PortMatch | undefined {
  const which = exactlyOne(v, field, ['number', 'range'], p);
  if (!which) return undefined;
  const value = (v as Json)[which];
  if (which === 'number') {
    const port = requiredPort(value, `${field}.number`, p);
    return port === undefined ? undefined : { protocol, port };
  }
  if (!isObject(value)) {
    p.add(`${field}.range`, 'must be an object with start and end');
    return undefined;
  }
  const start = requiredPort(value.start, `${field}.range.start`, p);
  const end = requiredPort(value.end, `${field}.range.end`, p);
  if (start === undefined || end === undefined) return undefined;
  if (start >= end) {
    p.add(`${field}.range`, `start port (${start}) must be less than end port (${end})`);
    return undefined;
  }
  return { protocol, port: start, endPort: end };
}

function parseProtocols(list: unknown[], field: string, p: Problems): ParsedPorts | undefined {
  const matches: PortMatch[] = [];
  let usesNamedPort = false;
  const before = p.count;
  for (const [i, item] of list.entries()) {
    const at = `${field}[${i}]`;
    const which = exactlyOne(item, at, ['tcp', 'udp', 'sctp', 'destinationNamedPort'], p);
    if (!which) continue;
    const value = (item as Json)[which];
    if (which === 'destinationNamedPort') {
      usesNamedPort = true;
      const why = namedPortError(value);
      if (why) p.add(`${at}.destinationNamedPort`, why);
      else matches.push(...namedPortMatches(value as string));
      continue;
    }
    // tcp/udp/sctp has minProperties 1 and destinationPort is its only field.
    if (!isObject(value) || value.destinationPort === undefined || value.destinationPort === null) {
      p.add(`${at}.${which}`, 'must set destinationPort ({number} or {range: {start, end}})');
      continue;
    }
    const m = destinationPort(value.destinationPort, `${at}.${which}.destinationPort`, PROTOCOL_FIELDS[which]!, p);
    if (m) matches.push(m);
  }
  return p.count > before ? undefined : { matches, usesNamedPort };
}

export function normalizeClusterNetworkPolicy(obj: KubeObject, _ctx?: NormalizeContext): NormalizeResult {
  return normalizeAdminPolicy(obj, 'ClusterNetworkPolicy', (spec, p): KindRules => {
    let baseline = false;
    if (spec.tier === undefined || spec.tier === null || spec.tier === '') {
      p.add('spec.tier', 'is required (Admin or Baseline)');
    } else if (spec.tier === 'Baseline') {
      baseline = true;
    } else if (spec.tier !== 'Admin') {
      p.add('spec.tier', `${JSON.stringify(spec.tier)} is not a tier; use Admin or Baseline`);
    }
    const priority = policyPriority(spec, p);
    return {
      kind: 'ClusterNetworkPolicy',
      tierName: baseline ? 'Baseline' : 'Admin',
      stage: baseline ? 2 : 0,
      tier: baseline ? BASELINE_TIER_PRIORITY : CNP_ADMIN_TIER_PRIORITY,
      priority,
      actions: { Accept: 'Allow', Deny: 'Drop', Pass: 'Pass' },
      domainNamesAction: 'Accept',
      maxRules: CNP_MAX_RULES,
      maxPeers: CNP_MAX_PEERS,
      portsField: 'protocols',
      maxPorts: CNP_MAX_PROTOCOLS,
      parsePorts: parseProtocols,
      egressPeerFields: ['namespaces', 'pods', 'nodes', 'networks', 'domainNames'],
      namespaceSelectorRequired: false,
    };
  });
}
