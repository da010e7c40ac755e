/**
 * Kubernetes networking.k8s.io/v1 NetworkPolicy → IR (stage 1).
 *
 * Semantics (upstream API documentation):
 * - The policy selects Pods of its own namespace by spec.podSelector (`{}` = all of them).
 * - policyTypes defaults to ["Ingress"] plus "Egress" when spec.egress has at least one rule.
 *   A selected Pod is isolated for each listed direction; the rules of the listed directions are
 *   additive allow-lists (rules of a direction not listed are ignored).
 * - A rule whose from/to is absent or empty allows every peer; whose ports are absent or empty
 *   allows every port. Peers are ORed; ports are ORed.
 * - Peer: podSelector alone = Pods in the policy's namespace; namespaceSelector alone = every Pod
 *   in the selected namespaces; both = the selected Pods in the selected namespaces; ipBlock =
 *   cidr minus except (any address, Pod or not).
 * - Port: protocol defaults to TCP; port absent = every port of that protocol; a named port is
 *   resolved on the destination Pod; endPort makes a range.
 * Validation follows the API server (ValidateNetworkPolicy): an invalid policy yields no rules.
 */
import { cidrWithin, parseCidr } from '../cidr.js';
import { labelValue, objectMetaErrors, strictSelectorError, subField } from '../labels.js';
import { emptyResult, typeName } from '../problems.js';
import type {
  Direction, InternalRule, Isolation, KubeObject, LabelSelector, NormalizeContext, NormalizeResult, Peer, PortMatch, RuleRef, ValidationError,
} from '../types.js';

export const ENABLE_LOGGING_ANNOTATION = 'networkpolicy.antrea.io/enable-logging';
const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;

/** IANA_SVC_NAME: 1-15 chars, lowercase alphanumerics and '-', at least one letter, no leading/trailing/double '-'. */
export function portNameError(name: string): string | undefined {
  if (name.length === 0 || name.length > 15) return 'must be no more than 15 characters';
  if (!/^[a-z0-9-]+$/.test(name)) return "must contain only lowercase alphanumeric characters or '-'";
  if (!/[a-z]/.test(name)) return 'must contain at least one letter';
  if (name.startsWith('-') || name.endsWith('-')) return "must not begin or end with '-'";
  if (name.includes('--')) return "must not contain consecutive '-'";
  return undefined;
}

const isObject = (v: unknown): v is Record<string, any> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function normalizeNetworkPolicy(obj: KubeObject, ctx: NormalizeContext): NormalizeResult {
  const name = obj.metadata.name;
  const namespace = obj.metadata.namespace ?? 'default';
  const errors: ValidationError[] = [];
  const fail = (field: string, message: string) => errors.push({ kind: 'NetworkPolicy', namespace, name, field, message });
  const empty = emptyResult(errors);

  for (const e of objectMetaErrors(obj.metadata, true)) fail(e.field, e.message);
  const spec = obj.spec ?? {};
  if (!isObject(spec)) {
    fail('spec', `must be a map, not ${typeName(spec)}`);
    return empty;
  }
  const podSelector: LabelSelector = spec.podSelector ?? {};
  const selErr = strictSelectorError(podSelector);
  if (selErr) fail(subField('spec.podSelector', selErr.field), selErr.message);

  // policyTypes: explicit, else the implied defaults.
  let types: Direction[];
  if (spec.policyTypes !== undefined && spec.policyTypes !== null) {
    if (!Array.isArray(spec.policyTypes)) {
      fail('spec.policyTypes', `must be a list, not ${typeName(spec.policyTypes)}`);
      types = [];
    } else {
      if (spec.policyTypes.length > 2) fail('spec.policyTypes', 'may not specify more than two policyTypes');
      spec.policyTypes.forEach((t: unknown, i: number) => {
        if (t !== 'Ingress' && t !== 'Egress') fail(`spec.policyTypes[${i}]`, `Unsupported value: ${JSON.stringify(t)}: supported values: "Ingress", "Egress"`);
      });
      types = (['Ingress', 'Egress'] as const).filter((d) => spec.policyTypes.includes(d));
      if (spec.policyTypes.length === 0) types = defaultTypes(spec);
    }
  } else {
    types = defaultTypes(spec);
  }

  const appliedTo: Peer[] = [{ kind: 'pods', namespaces: { kind: 'names', names: [namespace] }, pods: podSelector }];
  const annotations = ctx.namespaceAnnotations(namespace);
  const logging = annotations && labelValue(annotations, ENABLE_LOGGING_ANNOTATION) === 'true' ? { enabled: true } : undefined;
  const tieBreak = `NetworkPolicy/${namespace}/${name}`;
  const rules: InternalRule[] = [];
  const isolations: Isolation[] = [];

  for (const direction of ['Ingress', 'Egress'] as const) {
    const field = direction === 'Ingress' ? 'ingress' : 'egress';
    const peerField = direction === 'Ingress' ? 'from' : 'to';
    const list = spec[field];
    if (list !== undefined && list !== null && !Array.isArray(list)) {
      fail(`spec.${field}`, `must be a list of rules, not ${typeName(list)}`);
      continue;
    }
    // Validate every rule, even of a direction not in policyTypes (the API server does).
    const parsed = (list ?? []).map((rule: unknown, i: number) => {
      const where = `spec.${field}[${i}]`;
      if (rule === null || rule === undefined) rule = {};
      if (!isObject(rule)) {
        fail(where, `must be a map, not ${typeName(rule)}`);
        return undefined;
      }
      const peers = parsePeers(rule[peerField], `${where}.${peerField}`, namespace, fail);
      const ports = parsePorts(rule.ports, `${where}.ports`, fail);
      return { peers, ports };
    });
    if (!types.includes(direction)) continue;
    const ref: RuleRef = { kind: 'NetworkPolicy', namespace, name, rule: `${field}-all` };
    isolations.push({ ref: { ...ref, rule: `${field}-isolation` }, direction, appliedTo, ...(logging ? { logging } : {}) });
    parsed.forEach((p: { peers: Peer[] | undefined; ports: PortMatch[] } | undefined, i: number) => {
      if (!p) return;
      const ruleName = `${field}-${i}`;
      rules.push({
        id: `${tieBreak}/${ruleName}`,
        ref: { kind: 'NetworkPolicy', namespace, name, rule: ruleName },
        direction,
        action: 'Allow',
        priority: { stage: 1, tier: 0, policy: 0, rule: i, tieBreak },
        appliedTo,
        ...(p.peers ? { peers: p.peers } : {}),
        ports: p.ports,
        ...(logging ? { logging } : {}),
      });
    });
  }

  if (errors.length > 0) return empty;
  return { rules, isolations, groups: [], tiers: [], errors: [] };
}

function defaultTypes(spec: Record<string, any>): Direction[] {
  return Array.isArray(spec.egress) && spec.egress.length > 0 ? ['Ingress', 'Egress'] : ['Ingress'];
}

/** Absent or empty = every peer (undefined). */
function parsePeers(value: unknown, where: string, namespace: string, fail: (f: string, m: string) => void): Peer[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) {
    fail(where, `must be a list of peers, not ${typeName(value)}`);
    return undefined;
  }
  if (value.length === 0) return undefined;
  const peers: Peer[] = [];
  value.forEach((raw, j) => {
    const at = `${where}[${j}]`;
    if (!isObject(raw)) {
      fail(at, `must be a map, not ${typeName(raw)}`);
      return;
    }
    const hasSelectors = raw.podSelector != null || raw.namespaceSelector != null;
    const hasIpBlock = raw.ipBlock != null;
    if (!hasSelectors && !hasIpBlock) {
      fail(at, 'must specify a peer');
      return;
    }
    if (hasSelectors && hasIpBlock) {
      fail(at, 'may not specify more than 1 peer');
      return;
    }
    if (hasIpBlock) {
      const block = raw.ipBlock;
      if (!isObject(block)) return fail(`${at}.ipBlock`, `must be a map {cidr, except}, not ${typeName(block)}`);
      if (block.cidr === undefined || block.cidr === null || block.cidr === '') return fail(`${at}.ipBlock.cidr`, 'Required value');
      if (typeof block.cidr !== 'string') return fail(`${at}.ipBlock.cidr`, `must be a string (a CIDR such as 10.0.0.0/16), not ${typeName(block.cidr)}`);
      const cidr = parseCidr(block.cidr);
      if (!cidr) return fail(`${at}.ipBlock.cidr`, `${JSON.stringify(block.cidr)}: must be a valid CIDR (e.g. 10.0.0.0/16)`);
      const except: string[] = [];
      if (block.except != null && !Array.isArray(block.except)) return fail(`${at}.ipBlock.except`, `must be a list of CIDRs, not ${typeName(block.except)}`);
      for (const [k, e] of (block.except ?? []).entries()) {
        const ex = typeof e === 'string' ? parseCidr(e) : undefined;
        if (!ex) {
          fail(`${at}.ipBlock.except[${k}]`, `${JSON.stringify(e)}: must be a valid CIDR`);
          continue;
        }
        if (!cidrWithin(ex, cidr) || ex.prefix <= cidr.prefix) {
          fail(`${at}.ipBlock.except[${k}]`, `${JSON.stringify(e)}: must be a strict subset of \`cidr\` ${block.cidr}`);
          continue;
        }
        except.push(e);
      }
      peers.push({ kind: 'ipBlock', cidr: block.cidr, except });
      return;
    }
    for (const key of ['podSelector', 'namespaceSelector'] as const) {
      if (raw[key] == null) continue;
      const err = strictSelectorError(raw[key]);
      if (err) fail(subField(`${at}.${key}`, err.field), err.message);
    }
    const pods: LabelSelector = raw.podSelector ?? {};
    if (raw.namespaceSelector == null) {
      peers.push({ kind: 'pods', namespaces: { kind: 'names', names: [namespace] }, pods });
    } else {
      const nsSel: LabelSelector = raw.namespaceSelector;
      const everyNamespace = Object.keys(nsSel.matchLabels ?? {}).length === 0 && (nsSel.matchExpressions ?? []).length === 0;
      peers.push({ kind: 'pods', namespaces: everyNamespace ? { kind: 'all' } : { kind: 'selector', selector: nsSel }, pods });
    }
  });
  return peers;
}

function parsePorts(value: unknown, where: string, fail: (f: string, m: string) => void): PortMatch[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    fail(where, `must be a list of ports, not ${typeName(value)}`);
    return [];
  }
  const out: PortMatch[] = [];
  value.forEach((raw, j) => {
    const at = `${where}[${j}]`;
    if (raw === null) raw = {};
    if (!isObject(raw)) return fail(at, `must be a map, not ${typeName(raw)}`);
    const protocol = raw.protocol ?? 'TCP';
    if (!PROTOCOLS.includes(protocol)) {
      return fail(`${at}.protocol`, `Unsupported value: ${JSON.stringify(raw.protocol)}: supported values: "SCTP", "TCP", "UDP"`);
    }
    const pm: PortMatch = { protocol };
    const port = raw.port;
    if (port !== undefined && port !== null) {
      if (typeof port === 'number') {
        if (!Number.isInteger(port) || port < 1 || port > 65535) return fail(`${at}.port`, `${port}: must be between 1 and 65535, inclusive`);
        pm.port = port;
      } else if (typeof port === 'string') {
        const err = portNameError(port);
        if (err) return fail(`${at}.port`, `${JSON.stringify(port)}: ${err}`);
        pm.port = port;
      } else {
        return fail(`${at}.port`, `must be a port number or a port name, not ${typeName(port)}`);
      }
    }
    if (raw.endPort !== undefined && raw.endPort !== null) {
      const endPort = raw.endPort;
      if (pm.port === undefined) return fail(`${at}.endPort`, 'may not be specified when `port` is not specified');
      if (typeof pm.port === 'string') return fail(`${at}.endPort`, 'may not be specified when `port` is non-numeric');
      if (typeof endPort !== 'number' || !Number.isInteger(endPort) || endPort < 1 || endPort > 65535) {
        return fail(`${at}.endPort`, `${JSON.stringify(endPort)}: must be between 1 and 65535, inclusive`);
      }
      if (endPort < pm.port) return fail(`${at}.endPort`, `${endPort}: must be greater than or equal to \`port\` (${pm.port})`);
      pm.endPort = endPort;
    }
    out.push(pm);
  });
  return out;
}
