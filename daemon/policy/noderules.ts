/**
 * The rule set one node enforces, from the internal objects: each internal rule with its local
 * targets, its peers' addresses (Pod/Node/FQDN member IPs, ipBlock CIDRs, Service ClusterIP and
 * port for toServices) and numeric ports. Named ports resolve on the destination Pod (the target
 * for ingress, the peer for egress), so one rule may become several, one per resolution.
 *
 * Egress named ports: the destinations are the Pods of the rule's named-port AddressGroups (per
 * peer, the Pods matching it that have one of the names, whatever the peer kind: selectors,
 * groups, Service endpoints, Pods inside ipBlocks, Pods at learned fqdn addresses; any peer = all
 * Pods). A named port never resolves on a Node, an external address or a hostNetwork Pod (the
 * model has no destination Pod there), so those get only the rule's other ports ("#numeric").
 * (toServices peers cannot carry ports in any kind: Antrea rejects `toServices` with `ports`.)
 */
import { unionOf } from './list-union.js';
import { canonicalJson, stableHash } from './order.js';
import type { AddressList } from './sorted-list.js';
import type { ComputedRule, ContainerPort, Direction, GroupMember, InternalRule, PortMatch, RulePriority, RuleRef } from './types.js';

/** A rule as this node enforces it: local targets, resolved peer addresses, numeric ports. */
export interface NodeRule {
  /** Computed rule id, suffixed when named-port resolution split it. */
  id: string;
  ruleId: string;
  ref: RuleRef;
  direction: Direction;
  action: InternalRule['action'];
  priority: RulePriority;
  /** Position in the global evaluation order (0 = evaluated first). */
  order: number;
  targets: NodeTarget[];
  /** 'any', or the addresses of the other side. */
  peers: 'any' | { ips: AddressList; cidrs: string[]; services: { ip: string; protocol: string; port: number }[] };
  /**
   * The identity of the peer address set (`ips` + `cidrs`): the same for every rule whose peers
   * are the same address groups and ipBlocks, and kept while their members change. Absent when
   * the peers are not such a set (named ports resolved on the peers). The flow compiler gives a set
   * shared by several rules one classification bit (flows/policy/addrclass.ts).
   */
  peerSet?: string;
  /** Named ports replaced by numbers. `[]` = any traffic. */
  ports: PortMatch[];
  logging?: { enabled: boolean; label?: string };
}

/**
 * A local endpoint a node rule or isolation applies to. `kind` says what `ref` names: a Pod
 * ("ns/name") or a Node (Antrea nodeSelector appliedTo: host traffic). The engine always sets it;
 * it is optional in the type only so rule sets built by hand (tests of consumers) stay valid.
 */
export interface NodeTarget {
  kind?: 'pod' | 'node';
  ref: string;
  ips: string[];
}

/** What building the node rule set reads from the internal model. */
export interface NodeRuleGroups {
  appliedToMembers(id: string): GroupMember[];
  /**
   * `namedPorts`: the group holds only the Pods having the rule's egress named ports. `ips`: the
   * addresses of its members other than Services, sorted and unique (never modified: a change
   * gives a new version); `services`: its Service members.
   */
  addressGroup(id: string): { members(): GroupMember[]; ips: AddressList; services: readonly GroupMember[]; ipBlocks: string[]; namedPorts: boolean };
  isLocal(member: GroupMember): boolean;
}

export function buildNodeRules(rules: ComputedRule[], groups: NodeRuleGroups): NodeRule[] {
  const out: NodeRule[] = [];
  rules.forEach((r, order) => {
    for (const n of nodeRulesOf(r, order, groups)) out.push(n);
  });
  return out;
}

/**
 * The node rules of one computed rule at position `order` of the evaluation order: a function of
 * the rule and of the groups it names alone, so they can be kept per rule and rebuilt only when
 * the rule or one of its groups changes.
 */
export function nodeRulesOf(r: ComputedRule, order: number, groups: NodeRuleGroups): NodeRule[] {
  const out: NodeRule[] = [];
  const targets: GroupMember[] = [];
  const seen = new Set<string>();
  for (const id of r.appliedToGroups) {
    for (const m of groups.appliedToMembers(id)) {
      if (!groups.isLocal(m) || seen.has(m.ref)) continue;
      if (r.targetNamespace !== undefined && (m.kind !== 'pod' || !m.ref.startsWith(`${r.targetNamespace}/`))) continue;
      seen.add(m.ref);
      targets.push(m);
    }
  }
  if (targets.length === 0) return out;
  targets.sort((a, b) => (a.ref < b.ref ? -1 : 1));
  /** The peer groups' addresses (sorted lists to unite) by group id, and their Service members. */
  const peerIps: { id: string; ips: AddressList }[] = [];
  const peerServices: GroupMember[] = [];
  /** Pods an egress named port may resolve on (members of the rule's named-port groups). */
  const namedDestinations = new Map<string, GroupMember>();
  const cidrs = new Set(r.ipBlocks);
  /** The address groups behind `groupPeers` (the identity of the peer set). */
  const setGroups: string[] = [];
  for (const id of r.addressGroups) {
    const g = groups.addressGroup(id);
    if (g.namedPorts) {
      for (const m of g.members()) if (m.kind === 'pod') namedDestinations.set(m.ref, m);
      continue;
    }
    setGroups.push(id);
    peerIps.push({ id, ips: g.ips });
    peerServices.push(...g.services);
    for (const c of g.ipBlocks) cidrs.add(c);
  }
  const named = r.ports.some((p) => typeof p.port === 'string');
  const base = { ruleId: r.id, ref: r.ref, direction: r.direction, action: r.action, priority: r.priority, order, ...(r.logging ? { logging: r.logging } : {}) };
  const peersOf = (members: GroupMember[], withCidrs: boolean, explicit = false): NodeRule['peers'] => {
    if (r.anyPeer && !explicit) return 'any';
    const ips = new Set<string>();
    const services: { ip: string; protocol: string; port: number }[] = [];
    for (const m of members) {
      if (m.kind === 'service') for (const ip of m.ips) for (const p of m.ports) services.push({ ip, protocol: p.protocol, port: p.containerPort });
      else for (const ip of m.ips) ips.add(ip);
    }
    return { ips: [...ips].sort(), cidrs: withCidrs ? [...cidrs].sort() : [], services };
  };
  /** The peers of every address group (not the named-port ones), from their kept address lists. */
  const groupPeers = (): NodeRule['peers'] => {
    if (r.anyPeer) return 'any';
    const services: { ip: string; protocol: string; port: number }[] = [];
    for (const m of peerServices) for (const ip of m.ips) for (const p of m.ports) services.push({ ip, protocol: p.protocol, port: p.containerPort });
    // By group id: a peer set's union always takes the same groups in the same order.
    const lists = peerIps.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((p) => p.ips);
    return { ips: unionOf(peerSet!, lists), cidrs: [...cidrs].sort(), services };
  };
  const targetList = (ms: GroupMember[]): NodeTarget[] => ms.map((m) => ({ kind: m.kind === 'node' ? 'node' : 'pod', ref: m.ref, ips: m.ips }));
  const peerSet = r.anyPeer ? undefined : stableHash(`${setGroups.sort().join(',')}|${[...r.ipBlocks].sort().join(',')}`);
  const setId = peerSet !== undefined ? { peerSet } : {};
  if (!named) {
    out.push({ id: r.id, ...base, targets: targetList(targets), peers: groupPeers(), ...setId, ports: r.ports });
    return out;
  }
  // Named ports resolve on the destination Pod: the target for ingress, the peer for egress.
  const partitions = new Map<string, { ports: PortMatch[]; members: GroupMember[] }>();
  const partition = (m: GroupMember, ports: PortMatch[]) => {
    if (ports.length === 0) return;
    const key = canonicalJson(ports);
    let p = partitions.get(key);
    if (!p) partitions.set(key, (p = { ports, members: [] }));
    p.members.push(m);
  };
  if (r.direction === 'Ingress') {
    for (const m of targets) partition(m, resolveNamedPorts(r.ports, m.ports));
    for (const [key, p] of [...partitions].sort(([a], [b]) => (a < b ? -1 : 1))) {
      out.push({ id: `${r.id}#${stableHash(key)}`, ...base, targets: targetList(p.members), peers: groupPeers(), ...setId, ports: p.ports });
    }
    return out;
  }
  // Egress: the named ports, per destination Pod having them (inside any peer kind that can hold
  // Pods: selectors, groups, Services' endpoints, ipBlocks, fqdn addresses; any peer = all Pods) ...
  const namedOnly = r.ports.filter((p) => typeof p.port === 'string');
  for (const m of [...namedDestinations.values()].sort((a, b) => (a.ref < b.ref ? -1 : 1))) partition(m, resolveNamedPorts(namedOnly, m.ports));
  for (const [key, p] of [...partitions].sort(([a], [b]) => (a < b ? -1 : 1))) {
    out.push({ id: `${r.id}#${stableHash(key)}`, ...base, targets: targetList(targets), peers: peersOf(p.members, false, true), ports: p.ports });
  }
  // ... and the other ports, to every peer.
  const numericOnly = r.ports.filter((p) => typeof p.port !== 'string');
  if (numericOnly.length > 0) {
    out.push({ id: `${r.id}#numeric`, ...base, targets: targetList(targets), peers: groupPeers(), ...setId, ports: numericOnly });
  }
  return out;
}

/** Replaces named ports by the Pod's numbers; drops names the Pod does not have. */
/**
 * The addresses of the local Pods (not Nodes) the node rules of `ruleIds` target, sorted: whose DNS
 * responses an fqdn rule's learning intercepts.
 */
export function targetPodIps(rules: readonly NodeRule[], ruleIds: ReadonlySet<string>): string[] {
  const ips = new Set<string>();
  for (const nr of rules) {
    if (!ruleIds.has(nr.ruleId)) continue;
    for (const t of nr.targets) if (t.kind !== 'node') for (const ip of t.ips) ips.add(ip);
  }
  return [...ips].sort();
}

export function resolveNamedPorts(ports: PortMatch[], podPorts: ContainerPort[]): PortMatch[] {
  const out: PortMatch[] = [];
  for (const p of ports) {
    if (typeof p.port !== 'string') {
      out.push(p);
      continue;
    }
    const cp = podPorts.find((c) => c.name === p.port && c.protocol === p.protocol);
    if (cp) out.push({ ...p, port: cp.containerPort });
  }
  return out;
}
