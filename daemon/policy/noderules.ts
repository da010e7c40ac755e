/**
 * The rule set one node enforces, from the internal objects: each internal rule with its local
 * targets, its peers' addresses (Pod/Node/FQDN member IPs, ipBlock CIDRs, Service ClusterIP and
 * port for toServices) and numeric ports. Named ports resolve on the destination Pod (the target
 * for ingress, the peer for egress), so one rule may become several, one per resolution.
 */
import type { ComputedRule, GroupMember } from './internal.js';
import { canonicalJson, stableHash } from './order.js';
import type { ContainerPort, Direction, InternalRule, PortMatch, RulePriority, RuleRef } from './types.js';

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
  targets: { ref: string; ips: string[] }[];
  /** 'any', or the addresses of the other side. */
  peers: 'any' | { ips: string[]; cidrs: string[]; services: { ip: string; protocol: string; port: number }[] };
  /** Named ports replaced by numbers. `[]` = any traffic. */
  ports: PortMatch[];
  logging?: { enabled: boolean; label?: string };
}

/** What building the node rule set reads from the internal model. */
export interface NodeRuleGroups {
  appliedToMembers(id: string): GroupMember[];
  addressGroup(id: string): { members: GroupMember[]; ipBlocks: string[] };
  isLocal(member: GroupMember): boolean;
}

export function buildNodeRules(rules: ComputedRule[], groups: NodeRuleGroups): NodeRule[] {
const out: NodeRule[] = [];
rules.forEach((r, order) => {
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
    if (targets.length === 0) return;
    targets.sort((a, b) => (a.ref < b.ref ? -1 : 1));
    const peerMembers: GroupMember[] = [];
    const cidrs = new Set(r.ipBlocks);
    for (const id of r.addressGroups) {
      const g = groups.addressGroup(id);
      peerMembers.push(...g.members);
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
    const targetList = (ms: GroupMember[]) => ms.map((m) => ({ ref: m.ref, ips: m.ips }));
    if (!named) {
      out.push({ id: r.id, ...base, targets: targetList(targets), peers: peersOf(peerMembers, true), ports: r.ports });
      return;
    }
    // Named ports resolve on the destination Pod: the target for ingress, the peer for egress.
    const partitions = new Map<string, { ports: PortMatch[]; members: GroupMember[] }>();
    // Egress to any peer holds the all-Pods AddressGroup for this (see internal.ts).
    const side = r.direction === 'Ingress' ? targets : peerMembers.filter((m) => m.kind === 'pod');
    for (const m of side) {
      const ports = resolveNamedPorts(r.ports, m.ports);
      if (ports.length === 0) continue;
      const key = canonicalJson(ports);
      let p = partitions.get(key);
      if (!p) partitions.set(key, (p = { ports, members: [] }));
      p.members.push(m);
    }
    const numericOnly = r.ports.filter((p) => typeof p.port !== 'string');
    for (const [key, p] of [...partitions].sort(([a], [b]) => (a < b ? -1 : 1))) {
      const id = `${r.id}#${stableHash(key)}`;
      if (r.direction === 'Ingress') out.push({ id, ...base, targets: targetList(p.members), peers: peersOf(peerMembers, true), ports: p.ports });
      else out.push({ id, ...base, targets: targetList(targets), peers: peersOf(p.members, false, true), ports: p.ports });
    }
    // Egress to non-Pod peers (ipBlocks, Nodes) or any peer: only the numeric ports apply.
    if (r.direction === 'Egress' && numericOnly.length > 0 && (r.anyPeer || cidrs.size > 0 || peerMembers.some((m) => m.kind !== 'pod'))) {
      out.push({
        id: `${r.id}#numeric`, ...base, targets: targetList(targets),
        peers: r.anyPeer ? 'any' : peersOf(peerMembers.filter((m) => m.kind !== 'pod'), true), ports: numericOnly,
      });
    }
  });
  return out;
}

/** Replaces named ports by the Pod's numbers; drops names the Pod does not have. */
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
