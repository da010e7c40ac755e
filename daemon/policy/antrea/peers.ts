/**
 * Antrea rule peers (`from` / `to` entries, `toServices`) and `appliedTo` entries: validation as
 * the CRD schema and the Antrea webhook do it, and conversion to IR Peers.
 *
 * Scoping: in a ClusterNetworkPolicy a podSelector without namespaceSelector selects Pods in every
 * Namespace; in an Antrea NetworkPolicy it selects Pods in the policy's own Namespace, and `group`
 * names a Group in that Namespace (a ClusterNetworkPolicy's `group` names a ClusterGroup).
 *
 * A selector that can only match ExternalEntities (`externalEntitySelector`) selects nothing in a
 * sluice cluster (there are no ExternalEntities): such an entry converts to `null`.
 */
import { cidrWithin, parseCidr, parseIp } from '../cidr.js';
import type { Direction, LabelSelector, Peer } from '../types.js';
import { type Problems, isObject, qualifiedNameError, selectorField, setKeys, stringField } from './common.js';

export type Flavor = 'cluster' | 'namespaced';

export interface Scope {
  flavor: Flavor;
  /** The policy's Namespace (namespaced flavor only). */
  namespace?: string | undefined;
}

const PEER_FIELDS = ['ipBlock', 'podSelector', 'namespaceSelector', 'namespaces', 'externalEntitySelector', 'group', 'fqdn', 'serviceAccount', 'nodeSelector'] as const;
/** Fields of an Antrea NetworkPolicy peer that only ClusterNetworkPolicy has. */
const CLUSTER_ONLY_PEER_FIELDS = ['namespaces', 'serviceAccount'] as const;
const ALLOWED_FQDN = /^[-0-9a-zA-Z.*]+$/;

/** Validates an ipBlock as the Antrea webhook does (cidr required; except strictly inside it). */
export function ipBlockPeer(p: Problems, raw: unknown, field: string): Extract<Peer, { kind: 'ipBlock' }> | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  if (raw.cidr === undefined || raw.cidr === null || raw.cidr === '') {
    p.add(`${field}.cidr`, "field 'cidr' is required in an ipBlock");
    return undefined;
  }
  if (typeof raw.cidr !== 'string') {
    p.add(`${field}.cidr`, 'must be a string');
    return undefined;
  }
  const cidr = parseCidr(raw.cidr);
  if (!cidr) {
    p.add(`${field}.cidr`, `invalid CIDR address: ${raw.cidr}`);
    return undefined;
  }
  const except: string[] = [];
  let ok = true;
  const excepts = raw.except === undefined || raw.except === null ? [] : raw.except;
  if (!Array.isArray(excepts)) {
    p.add(`${field}.except`, 'must be a list of CIDRs');
    return undefined;
  }
  excepts.forEach((e: unknown, i: number) => {
    const ex = typeof e === 'string' ? parseCidr(e) : undefined;
    if (!ex) {
      p.add(`${field}.except[${i}]`, `invalid except CIDR value: ${JSON.stringify(e)}`);
      ok = false;
    } else if (ex.family !== cidr.family || !cidrWithin(ex, cidr) || ex.prefix <= cidr.prefix) {
      p.add(`${field}.except[${i}]`, `except CIDR ${String(e)} is not a strict subset of CIDR ${raw.cidr}`);
      ok = false;
    } else {
      except.push(e as string);
    }
  });
  return ok ? { kind: 'ipBlock', cidr: raw.cidr, except } : undefined;
}

/** True when the CIDR's address is multicast (224.0.0.0/4 or ff00::/8). */
export function isMulticastCidr(text: string): boolean {
  const c = parseCidr(text);
  if (!c) return false;
  const slash = text.indexOf('/');
  const ip = parseIp(text.slice(0, slash))!;
  if (c.family === 4) return ip.value >> 28n === 0xen;
  return ip.value >> 120n === 0xffn;
}

function namespacedName(p: Problems, raw: unknown, field: string, defaultNamespace?: string): { namespace: string; name: string } | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object with name and namespace');
    return undefined;
  }
  const name = stringField(p, raw.name, `${field}.name`);
  const namespace = stringField(p, raw.namespace, `${field}.namespace`) || defaultNamespace;
  if (!name) p.add(`${field}.name`, 'is required');
  if (!namespace) p.add(`${field}.namespace`, 'is required');
  return name && namespace ? { namespace, name } : undefined;
}

function podsPeer(scope: Scope, pods: LabelSelector | undefined, namespaces: LabelSelector | undefined): Peer {
  return {
    kind: 'pods',
    namespaces: namespaces
      ? { kind: 'selector', selector: namespaces }
      : scope.flavor === 'namespaced'
        ? { kind: 'names', names: [scope.namespace!] }
        : { kind: 'all' },
    pods: pods ?? {},
  };
}

function groupPeer(scope: Scope, name: string): Peer {
  return scope.flavor === 'namespaced' ? { kind: 'group', namespace: scope.namespace!, name } : { kind: 'group', name };
}

function checkScope(p: Problems, raw: Record<string, any>, field: string): boolean {
  if (raw.scope === undefined || raw.scope === null || raw.scope === '' || raw.scope === 'Cluster') return true;
  if (raw.scope === 'ClusterSet') {
    p.add(`${field}.scope`, 'scope ClusterSet needs Antrea Multi-cluster, which sluice does not implement');
  } else {
    p.add(`${field}.scope`, `must be Cluster or ClusterSet, got ${JSON.stringify(raw.scope)}`);
  }
  return false;
}

/**
 * One `from`/`to` entry. Returns the Peer, `null` when the entry validly selects nothing,
 * 'ignored' for a `namespaces: {}` peer (Antrea leaves it out of the rule: a rule whose peers are
 * all ignored matches every address), or undefined when it is invalid (errors recorded).
 */
export function convertPeer(p: Problems, raw: unknown, field: string, direction: Direction, scope: Scope): Peer | null | 'ignored' | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const before = p.list.length;
  if (scope.flavor === 'namespaced') {
    for (const k of CLUSTER_ONLY_PEER_FIELDS) {
      if (raw[k] !== undefined && raw[k] !== null) {
        p.add(`${field}.${k}`, `${k} is not supported in an Antrea NetworkPolicy peer (it is scoped to its own Namespace); use a ClusterNetworkPolicy`);
      }
    }
  }
  checkScope(p, raw, field);
  // A peer with no field is valid (Antrea's webhook has no "must set one of" rule for peers): the
  // controller gives it an address group of the policy's namespace (all Namespaces for a
  // ClusterNetworkPolicy) with no Pod selector, i.e. every Pod there (the podsPeer below).
  const set = setKeys(raw, PEER_FIELDS);
  const alone = (key: string, what: string) => {
    if (set.includes(key) && set.length > 1) p.add(`${field}.${key}`, `${what} cannot be set with other fields in a peer (got ${set.join(', ')})`);
  };
  alone('group', 'group');
  alone('serviceAccount', 'serviceAccount');
  alone('nodeSelector', 'nodeSelector');
  alone('ipBlock', 'ipBlock');
  alone('fqdn', 'fqdn');
  if (raw.namespaces != null && raw.namespaceSelector != null) {
    p.add(`${field}.namespaces`, 'namespaces and namespaceSelector cannot be set at the same time for a single peer');
  }
  if (raw.externalEntitySelector != null && raw.podSelector != null) {
    p.add(`${field}.externalEntitySelector`, 'externalEntitySelector cannot be set with podSelector');
  }
  if (p.list.length > before) return undefined;

  if (raw.ipBlock != null) return ipBlockPeer(p, raw.ipBlock, `${field}.ipBlock`);
  if (raw.group != null && raw.group !== '') {
    const g = stringField(p, raw.group, `${field}.group`);
    return g === undefined ? undefined : groupPeer(scope, g);
  }
  if (raw.fqdn != null && raw.fqdn !== '') {
    const fqdn = stringField(p, raw.fqdn, `${field}.fqdn`);
    if (fqdn === undefined) return undefined;
    if (direction !== 'Egress') {
      p.add(`${field}.fqdn`, 'fqdn can only be used in the `to` peers of egress rules');
      return undefined;
    }
    if (!ALLOWED_FQDN.test(fqdn)) {
      p.add(`${field}.fqdn`, `invalid characters in egress rule fqdn field: ${fqdn}`);
      return undefined;
    }
    // DNS names are case-insensitive.
    return { kind: 'fqdn', pattern: fqdn.toLowerCase() };
  }
  if (raw.serviceAccount != null) {
    const sa = namespacedName(p, raw.serviceAccount, `${field}.serviceAccount`);
    return sa ? { kind: 'pods', namespaces: { kind: 'names', names: [sa.namespace] }, pods: {}, serviceAccount: sa } : undefined;
  }
  if (raw.nodeSelector != null) {
    const sel = selectorField(p, raw.nodeSelector, `${field}.nodeSelector`);
    return sel ? { kind: 'nodes', selector: sel } : undefined;
  }
  const pods = selectorField(p, raw.podSelector, `${field}.podSelector`);
  const nsSel = selectorField(p, raw.namespaceSelector, `${field}.namespaceSelector`);
  selectorField(p, raw.externalEntitySelector, `${field}.externalEntitySelector`);
  if (raw.namespaces != null) {
    const match = peerNamespaces(p, raw.namespaces, `${field}.namespaces`);
    if (p.list.length > before || !match) return undefined;
    if (match === 'ignored') return 'ignored';
    return { kind: 'pods', namespaces: match, pods: pods ?? {} };
  }
  if (p.list.length > before) return undefined;
  if (raw.externalEntitySelector != null) return null;
  return podsPeer(scope, pods, nsSel);
}

function peerNamespaces(p: Problems, raw: unknown, field: string): { kind: 'self' } | { kind: 'sameLabels'; keys: string[] } | 'ignored' | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object');
    return undefined;
  }
  const set = setKeys(raw, ['match', 'sameLabels']);
  if (set.length > 1) {
    p.add(field, 'only one matching criterion (match or sameLabels) can be set in a peer namespaces field');
    return undefined;
  }
  // Antrea's webhook accepts no criterion; its controller then puts the peer in none of its
  // lists (cluster, per-namespace, same-labels), so the peer is ignored.
  if (set.length === 0) return 'ignored';
  if (set[0] === 'match') {
    if (raw.match !== 'Self') {
      p.add(`${field}.match`, `must be Self, got ${JSON.stringify(raw.match)}`);
      return undefined;
    }
    return { kind: 'self' };
  }
  if (!Array.isArray(raw.sameLabels)) {
    p.add(`${field}.sameLabels`, 'must be a list of label keys');
    return undefined;
  }
  const keys: string[] = [];
  raw.sameLabels.forEach((k: unknown, i: number) => {
    const err = typeof k === 'string' ? qualifiedNameError(k) : 'must be a string';
    if (err) p.add(`${field}.sameLabels[${i}]`, `invalid label key in sameLabels rule: ${err}`);
    else keys.push(k as string);
  });
  return keys.length === raw.sameLabels.length ? { kind: 'sameLabels', keys } : undefined;
}

/** A `toServices` entry (egress only) -> a Service peer. */
export function convertToService(p: Problems, raw: unknown, field: string, scope: Scope): Peer | undefined {
  if (!isObject(raw)) {
    p.add(field, 'must be an object with name and namespace');
    return undefined;
  }
  if (!checkScope(p, raw, field)) return undefined;
  const ref = namespacedName(p, raw, field, scope.flavor === 'namespaced' ? scope.namespace : undefined);
  return ref ? { kind: 'service', namespace: ref.namespace, name: ref.name } : undefined;
}

const APPLIED_TO_FIELDS = ['podSelector', 'namespaceSelector', 'externalEntitySelector', 'group', 'serviceAccount', 'service', 'nodeSelector'] as const;

/** Where an appliedTo list sits: the policy spec, an ingress rule or an egress rule. */
export type AppliedToPlace = 'policy' | 'Ingress' | 'Egress';

/**
 * An appliedTo list. `policyHasEgress` matters for `service` at policy level (a policy applied to
 * a NodePort Service may only have ingress rules). Returns the targets (entries that select
 * nothing are dropped) or undefined when invalid.
 */
export function convertAppliedTo(
  p: Problems,
  list: unknown[],
  field: string,
  place: AppliedToPlace,
  scope: Scope,
  policyHasEgress: boolean,
): { targets: Peer[]; appliesToService: boolean } | undefined {
  const before = p.list.length;
  const targets: Peer[] = [];
  let services = 0;
  list.forEach((raw, i) => {
    const at = `${field}[${i}]`;
    if (!isObject(raw)) {
      p.add(at, 'must be an object');
      return;
    }
    if (raw.ipBlock != null) {
      p.add(`${at}.ipBlock`, 'ipBlock cannot be set in appliedTo: a policy applies to Pods (or Nodes), not to CIDRs');
      return;
    }
    // An entry with no field is valid (Antrea's webhook has no "must set one of" rule for
    // appliedTo): its group selector has no Pod selector, only the policy's namespace (all
    // Namespaces for a ClusterNetworkPolicy), so it selects every Pod there.
    const set = setKeys(raw, APPLIED_TO_FIELDS);
    if (scope.flavor === 'namespaced') {
      for (const k of ['namespaceSelector', 'serviceAccount', 'service', 'nodeSelector']) {
        if (raw[k] != null) {
          p.add(`${at}.${k}`, k === 'namespaceSelector'
            ? 'namespaceSelector is not allowed in the appliedTo of an Antrea NetworkPolicy (it applies only to its own Namespace)'
            : `${k} is not supported in the appliedTo of an Antrea NetworkPolicy`);
        }
      }
    } else if (place !== 'policy' && raw.nodeSelector != null) {
      p.add(`${at}.nodeSelector`, 'nodeSelector is only allowed in the policy-level appliedTo');
    }
    for (const key of ['group', 'nodeSelector', 'serviceAccount', 'service']) {
      if (set.includes(key) && set.length > 1) p.add(`${at}.${key}`, `${key} cannot be set with other peers in appliedTo (got ${set.join(', ')})`);
    }
    if (raw.externalEntitySelector != null && raw.podSelector != null) {
      p.add(`${at}.externalEntitySelector`, 'externalEntitySelector cannot be set with podSelector');
    }
    if (raw.service != null) {
      services++;
      if (place === 'Egress' || (place === 'policy' && policyHasEgress)) {
        p.add(`${at}.service`, 'egress rules cannot be applied to Services');
      }
    }
    const pods = selectorField(p, raw.podSelector, `${at}.podSelector`);
    const nsSel = selectorField(p, raw.namespaceSelector, `${at}.namespaceSelector`);
    selectorField(p, raw.externalEntitySelector, `${at}.externalEntitySelector`);
    if (p.list.length > before) return;
    if (raw.group != null && raw.group !== '') {
      const g = stringField(p, raw.group, `${at}.group`);
      if (g !== undefined) targets.push(groupPeer(scope, g));
    } else if (raw.serviceAccount != null) {
      const sa = namespacedName(p, raw.serviceAccount, `${at}.serviceAccount`);
      if (sa) targets.push({ kind: 'pods', namespaces: { kind: 'names', names: [sa.namespace] }, pods: {}, serviceAccount: sa });
    } else if (raw.nodeSelector != null) {
      const sel = selectorField(p, raw.nodeSelector, `${at}.nodeSelector`);
      if (sel) targets.push({ kind: 'nodes', selector: sel });
    } else if (raw.service != null) {
      const svc = namespacedName(p, raw.service, `${at}.service`);
      if (svc) targets.push({ kind: 'service', namespace: svc.namespace, name: svc.name });
    } else if (raw.externalEntitySelector == null) {
      targets.push(podsPeer(scope, pods, nsSel));
    }
  });
  if (services > 0 && services < list.length) {
    p.add(field, 'a rule/policy cannot be applied to Services and other peers at the same time');
  }
  if (p.list.length > before) return undefined;
  return { targets, appliesToService: services > 0 };
}
