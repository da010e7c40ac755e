/**
 * An agent's policy state as the controller sends it: the NetworkPolicies, AppliedToGroups (this
 * Node's members only) and AddressGroups of its span, turned into the same node rule set,
 * isolations and ChangeSets the agent's own engine gives in standalone mode, so the flow compiler
 * cannot tell the two apart.
 *
 * The three kinds arrive on separate watch streams, in any order. A policy is enforced only once
 * every AddressGroup its rules name is here: until then the version enforced before stays (none
 * for a new policy), so a Drop rule never runs with an empty peer set for want of its group. An
 * AddressGroup the controller removed is kept while an enforced policy still names it. An
 * AppliedToGroup that is absent has no member on this Node (the controller sends none then).
 *
 * FQDN groups: the controller learns no DNS name (answers are seen on the Node whose Pod asked), so
 * it sends an fqdn AddressGroup with its patterns and no member. The names this Node's agent learns
 * (`setFqdnAddresses`, enforcement/fqdn) become the group's members here, as the standalone engine
 * makes them ({kind: fqdn, ref: name}), on top of what the controller sends.
 */
import type { MemberChange } from './members.js';
import { memberKey } from './types.js';
import type { ControlPlaneAddressGroup, ControlPlaneAddressGroupPatch, ControlPlaneEvent, ControlPlaneKind, ControlPlaneNetworkPolicy, ControlPlaneObject } from './types.js';
import { type ChangeSet, type ComputedIsolation, emptyChangeSet, fileUnder, type IdDelta, type NodeIsolation } from '../policy/internal.js';
import { nodeRulesOf, type NodeRule, type NodeRuleGroups, type NodeTarget, targetPodIps } from '../policy/noderules.js';
import { canonicalJson, compareRules } from '../policy/order.js';
import { isWholeMember, memberAddresses, PeerIps, type PeerMember } from '../policy/peer-ips.js';
import { canonicalDnsName, fqdnMember, FqdnPatternSet } from '../policy/fqdn.js';
import { canonicalIp } from '../policy/cidr.js';
import { flat } from '../policy/flat-string.js';
import type { ComputedRule, GroupMember, InternalRule } from '../policy/types.js';

interface AddressEntry {
  /** The group as received, but its members (`members` below holds them). */
  object: Omit<ControlPlaneAddressGroup, 'members'>;
  /**
   * The members by key (what a patch names). A Pod or Node member of a group without named ports
   * is held as its addresses alone (see heldMember): the rules read nothing else of it, and a view
   * at 150 000 Pods holds some 80 000 of them.
   */
  members: Map<string, PeerMember>;
  /** Removed by the controller, kept while an enforced policy names it. */
  removed: boolean;
  /** The members' addresses as node rules read them, built when first read and then kept through patches. */
  peerIps?: PeerIps | undefined;
  /** The members as a list, built when a named-port rule reads them. */
  list?: GroupMember[] | undefined;
  /** An fqdn group's patterns: learned names matching them are members. */
  fqdn?: FqdnPatternSet | undefined;
}

const EMPTY_MEMBERS: GroupMember[] = [];

/**
 * A member's key as an AddressGroup entry holds it: flat, as a view at 150 000 Pods holds some
 * 130 000 of them (memberKey's concatenation alone kept a 32-byte node per key beside its text).
 */
const heldKey = (m: Pick<GroupMember, 'kind' | 'ref'>): string => flat(memberKey(m));

/** A member as an AddressGroup entry holds it: a Pod or Node of a group without named ports as its address or addresses, any other whole. */
function heldMember(m: GroupMember, namedPorts: boolean): PeerMember {
  if (namedPorts || (m.kind !== 'pod' && m.kind !== 'node')) return m;
  return m.ips.length === 1 ? m.ips[0]! : m.ips;
}

export class NodePolicyState {
  private readonly received = new Map<string, ControlPlaneNetworkPolicy>();
  /** Per policy, the version enforced (the last received one whose AddressGroups were all here). */
  private readonly enforced = new Map<string, ControlPlaneNetworkPolicy>();
  private readonly appliedTo = new Map<string, GroupMember[]>();
  private readonly address = new Map<string, AddressEntry>();
  /** Groups whose content changed, and policies received, since the last commit(). */
  private readonly changedGroups = { address: new Set<string>(), appliedTo: new Set<string>() };
  private readonly changedPolicies = new Set<string>();
  /** Policies received but not enforced as received: an AddressGroup they name has not come yet. */
  private readonly waiting = new Set<string>();
  /** Enforced rules and isolations by id, and the rules naming each group. */
  private readonly rules = new Map<string, ComputedRule>();
  private readonly isolations = new Map<string, ComputedIsolation>();
  private readonly rulesByGroup = new Map<string, Set<string>>();
  private readonly isolationsByGroup = new Map<string, Set<string>>();
  private sortedRules?: ComputedRule[] | undefined;
  /** Each enforced rule's node rules (order 0), kept until the rule or one of its groups changes. */
  private readonly nodeRuleParts = new Map<string, NodeRule[]>();
  private nodeRules?: NodeRule[] | undefined;
  private nodeIsolationList?: NodeIsolation[] | undefined;
  /** Names learned from DNS on this Node: canonical name → its current addresses (canonical, sorted). */
  private readonly fqdnNames = new Map<string, string[]>();
  private fqdnPatternSet?: FqdnPatternSet | undefined;

  constructor(readonly nodeName: string) {}

  /** A (re)list of one kind: the whole set the controller now sends. What is not in it is gone. */
  sync(kind: ControlPlaneKind, items: readonly ControlPlaneObject[]): void {
    const names = new Set(items.map((o) => o.metadata.name));
    const held = kind === 'NetworkPolicy' ? this.received : kind === 'AppliedToGroup' ? this.appliedTo : this.address;
    for (const name of [...held.keys()]) {
      if (kind === 'AddressGroup' && this.address.get(name)?.removed) continue;
      if (!names.has(name)) this.remove(kind, name);
    }
    for (const o of items) this.upsert(o);
  }

  /** One watch event. */
  event(e: ControlPlaneEvent): void {
    if (e.type === 'BOOKMARK') return;
    const obj = e.object;
    if (e.type === 'DELETED') {
      this.remove(obj.kind as ControlPlaneKind, obj.metadata.name);
      return;
    }
    if (obj.kind === 'AddressGroupPatch') this.patch(obj as ControlPlaneAddressGroupPatch);
    else this.upsert(obj as ControlPlaneObject);
  }

  private upsert(o: ControlPlaneObject): void {
    const name = o.metadata.name;
    if (o.kind === 'NetworkPolicy') {
      this.received.set(name, o);
      this.changedPolicies.add(name);
    } else if (o.kind === 'AppliedToGroup') {
      this.appliedTo.set(name, o.members);
      this.changedGroups.appliedTo.add(name);
    } else {
      const { members, ...object } = o;
      const namedPorts = o.namedPorts !== undefined;
      const entry: AddressEntry = { object, members: new Map(Array.from(members, (m) => [heldKey(m), heldMember(m, namedPorts)])), removed: false };
      if (o.fqdn && o.fqdn.length > 0) {
        entry.fqdn = new FqdnPatternSet(o.fqdn);
        for (const [n, ips] of this.fqdnNames) if (entry.fqdn.matches(n)) entry.members.set(heldKey({ kind: 'fqdn', ref: n }), fqdnMember(n, ips));
      }
      if (entry.fqdn || this.address.get(name)?.fqdn) this.fqdnPatternSet = undefined;
      this.address.set(name, entry);
      this.changedGroups.address.add(name);
    }
  }

  /**
   * Sets learned DNS names' current addresses (`ips: []` forgets a name), as the standalone engine's
   * setFqdnAddresses: the fqdn groups whose patterns match a changed name change with it. They are
   * enforced at the next commit().
   */
  setFqdnAddresses(updates: readonly { name: string; ips: readonly string[] }[]): void {
    for (const u of updates) {
      const name = canonicalDnsName(u.name);
      const ips = [...new Set(u.ips.map((ip) => canonicalIp(ip) ?? ip))].sort();
      if (ips.length === 0) this.fqdnNames.delete(name);
      else this.fqdnNames.set(name, ips);
      const key = heldKey({ kind: 'fqdn', ref: name });
      for (const [id, entry] of this.address) {
        if (!entry.fqdn?.matches(name)) continue;
        const before = entry.members.get(key);
        const after = ips.length > 0 ? fqdnMember(name, ips) : undefined;
        if (canonicalJson(before) === canonicalJson(after)) continue;
        entry.peerIps?.update(key, before, after);
        if (after) entry.members.set(key, after);
        else entry.members.delete(key);
        entry.list = undefined;
        this.changedGroups.address.add(id);
      }
    }
  }

  /** The patterns of the fqdn groups held: which DNS names are worth learning on this Node. */
  fqdnPatterns(): FqdnPatternSet {
    if (!this.fqdnPatternSet) {
      const patterns: string[] = [];
      for (const entry of this.address.values()) if (entry.fqdn && !entry.removed) patterns.push(...entry.fqdn.patterns);
      this.fqdnPatternSet = new FqdnPatternSet(patterns);
    }
    return this.fqdnPatternSet;
  }

  /** The local Pod addresses an enforced egress rule with an fqdn peer targets (whose DNS responses are intercepted). */
  fqdnTargetPodIps(): string[] {
    const ids = new Set<string>();
    for (const r of this.rules.values()) if (r.direction === 'Egress' && r.addressGroups.some((g) => this.address.get(g)?.fqdn)) ids.add(r.id);
    return ids.size === 0 ? [] : targetPodIps(this.nodeRuleSet(), ids);
  }

  private patch(p: ControlPlaneAddressGroupPatch): void {
    const entry = this.address.get(p.metadata.name);
    // A patch for a group not held cannot be applied: the stream is out of step, which a relist repairs.
    if (!entry || entry.removed) throw new Error(`controlplane: a patch of AddressGroup ${p.metadata.name}, which this Node does not hold`);
    const namedPorts = entry.object.namedPorts !== undefined;
    const changes: MemberChange[] = [...p.removed.map((key) => ({ key })), ...p.upserted.map((m) => ({ key: heldKey(m), after: m }))];
    for (const c of changes) {
      const after = c.after && heldMember(c.after, namedPorts);
      entry.peerIps?.update(c.key, entry.members.get(c.key), after);
      if (after) entry.members.set(c.key, after);
      else entry.members.delete(c.key);
    }
    entry.list = undefined;
    this.changedGroups.address.add(p.metadata.name);
  }

  private remove(kind: ControlPlaneKind, name: string): void {
    if (kind === 'NetworkPolicy') {
      if (this.received.delete(name)) this.changedPolicies.add(name);
    } else if (kind === 'AppliedToGroup') {
      if (this.appliedTo.delete(name)) this.changedGroups.appliedTo.add(name);
    } else {
      const entry = this.address.get(name);
      if (!entry || entry.removed) return;
      entry.removed = true;
      if (entry.fqdn) this.fqdnPatternSet = undefined;
      this.changedGroups.address.add(name);
    }
  }

  /**
   * Enforces what arrived since the last commit and returns what changed, as the engine's
   * ChangeSet would name it (the flow compiler's dirtyRuleIds reads it).
   */
  commit(): ChangeSet {
    const cs = emptyChangeSet();
    // Policies waiting for a group may be enforceable now that it came.
    const candidates = new Set(this.changedPolicies);
    if (this.changedGroups.address.size > 0) for (const name of this.waiting) candidates.add(name);
    const ruleBefore = new Map<string, string | null>();
    const isolationBefore = new Map<string, string | null>();
    for (const name of candidates) {
      const next = this.received.get(name);
      if (next && !next.rules.every((r) => r.addressGroups.every((g) => this.address.has(g) && !this.address.get(g)!.removed))) {
        this.waiting.add(name);
        continue;
      }
      this.waiting.delete(name);
      const prev = this.enforced.get(name);
      if (prev === next) continue;
      for (const r of prev?.rules ?? []) this.forget(ruleBefore, this.rules, this.rulesByGroup, r, [...r.appliedToGroups, ...r.addressGroups]);
      for (const i of prev?.isolations ?? []) this.forget(isolationBefore, this.isolations, this.isolationsByGroup, i, i.appliedToGroups);
      for (const r of next?.rules ?? []) this.learn(ruleBefore, this.rules, this.rulesByGroup, r, [...r.appliedToGroups, ...r.addressGroups]);
      for (const i of next?.isolations ?? []) this.learn(isolationBefore, this.isolations, this.isolationsByGroup, i, i.appliedToGroups);
      if (next) this.enforced.set(name, next);
      else this.enforced.delete(name);
    }
    this.changedPolicies.clear();
    const delta = (before: Map<string, string | null>, now: Map<string, unknown>, out: IdDelta) => {
      for (const [id, was] of before) {
        const is = now.get(id);
        if (was === null && is !== undefined) out.added.push(id);
        else if (was !== null && is === undefined) out.removed.push(id);
        else if (was !== null && canonicalJson(is) !== was) out.updated.push(id);
      }
    };
    delta(ruleBefore, this.rules, cs.rules);
    delta(isolationBefore, this.isolations, cs.isolations);
    if (cs.rules.added.length + cs.rules.removed.length + cs.rules.updated.length > 0) this.sortedRules = undefined;
    // Groups the controller removed are dropped once no enforced rule names them.
    for (const [id, entry] of this.address) {
      if (entry.removed && !this.rulesByGroup.has(id)) {
        this.address.delete(id);
        this.changedGroups.address.add(id);
      }
    }
    cs.addressGroups.updated.push(...this.changedGroups.address);
    cs.appliedToGroups.updated.push(...this.changedGroups.appliedTo);
    for (const id of [...cs.rules.added, ...cs.rules.updated, ...cs.rules.removed]) this.nodeRuleParts.delete(id);
    for (const id of this.rulesNamingGroups([...this.changedGroups.address, ...this.changedGroups.appliedTo])) this.nodeRuleParts.delete(id);
    const anything = cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length + cs.isolations.added.length + cs.isolations.updated.length +
      cs.isolations.removed.length + cs.addressGroups.updated.length + cs.appliedToGroups.updated.length > 0;
    if (anything) {
      this.nodeRules = undefined;
      this.nodeIsolationList = undefined;
    }
    this.changedGroups.address.clear();
    this.changedGroups.appliedTo.clear();
    for (const list of [cs.rules, cs.isolations, cs.addressGroups, cs.appliedToGroups]) for (const l of [list.added, list.updated, list.removed]) l.sort();
    return cs;
  }

  private forget<T extends { id: string }>(before: Map<string, string | null>, byId: Map<string, T>, index: Map<string, Set<string>>, item: T, groups: string[]): void {
    if (!before.has(item.id)) before.set(item.id, byId.has(item.id) ? canonicalJson(byId.get(item.id)) : null);
    byId.delete(item.id);
    fileUnder(index, groups, item.id, false);
  }

  private learn<T extends { id: string }>(before: Map<string, string | null>, byId: Map<string, T>, index: Map<string, Set<string>>, item: T, groups: string[]): void {
    if (!before.has(item.id)) before.set(item.id, byId.has(item.id) ? canonicalJson(byId.get(item.id)) : null);
    byId.set(item.id, item);
    fileUnder(index, groups, item.id, true);
  }

  /** The ids of the enforced rules naming any of these groups (the compiler's RulesByGroup). */
  rulesNamingGroups(groupIds: Iterable<string>): Set<string> {
    const out = new Set<string>();
    for (const g of groupIds) for (const id of this.rulesByGroup.get(g) ?? []) out.add(id);
    return out;
  }

  private isLocal(m: GroupMember): boolean {
    return m.nodeName === this.nodeName || (m.kind === 'node' && m.ref === this.nodeName);
  }

  /** The rules this Node enforces, as the engine's nodeRuleSet() gives them. */
  nodeRuleSet(): NodeRule[] {
    if (this.nodeRules) return this.nodeRules;
    this.sortedRules ??= [...this.rules.values()].sort((a, b) => compareRules(a as unknown as InternalRule, b as unknown as InternalRule));
    const groups: NodeRuleGroups = {
      appliedToMembers: (id) => this.appliedTo.get(id) ?? EMPTY_MEMBERS,
      addressGroup: (id) => {
        const entry = this.address.get(id);
        if (!entry) return { members: () => [], ips: [], services: [], ipBlocks: [], namedPorts: false };
        entry.peerIps ??= new PeerIps(entry.members);
        return {
          // Read only for a group with named ports, whose members are all held whole.
          members: () => (entry.list ??= [...entry.members.values()].filter(isWholeMember)), ips: entry.peerIps.sorted, services: [...entry.peerIps.services.values()],
          ipBlocks: entry.object.ipBlocks, namedPorts: entry.object.namedPorts !== undefined,
        };
      },
      isLocal: (m) => this.isLocal(m),
    };
    const out: NodeRule[] = [];
    this.sortedRules.forEach((r, order) => {
      let parts = this.nodeRuleParts.get(r.id);
      if (!parts) this.nodeRuleParts.set(r.id, (parts = nodeRulesOf(r, order, groups)));
      for (const n of parts) out.push(n.order === order ? n : { ...n, order });
    });
    this.nodeRules = out;
    return out;
  }

  /** The isolations with targets on this Node, as the engine's nodeIsolations() gives them. */
  nodeIsolations(): NodeIsolation[] {
    if (this.nodeIsolationList) return this.nodeIsolationList;
    const out: NodeIsolation[] = [];
    for (const iso of [...this.isolations.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
      const targets = new Map<string, GroupMember>();
      for (const id of iso.appliedToGroups) for (const m of this.appliedTo.get(id) ?? []) if (this.isLocal(m)) targets.set(m.ref, m);
      if (targets.size === 0) continue;
      out.push({
        id: iso.id, ref: iso.ref, direction: iso.direction,
        targets: [...targets.values()].sort((a, b) => (a.ref < b.ref ? -1 : 1)).map((m): NodeTarget => ({ kind: m.kind === 'node' ? 'node' : 'pod', ref: m.ref, ips: m.ips })),
        ...(iso.logging ? { logging: iso.logging } : {}),
      });
    }
    this.nodeIsolationList = out;
    return out;
  }

  /** Where a Service address and port sends its traffic, from the toServices groups' backends. */
  serviceBackends(clusterIP: string, protocol: string, port: number): { ip: string; port: number }[] {
    for (const entry of this.address.values()) {
      for (const b of entry.object.serviceBackends ?? []) if (b.clusterIP === clusterIP && b.protocol === protocol && b.port === port) return b.backends;
    }
    return [];
  }

  /**
   * Whether some AddressGroup held names Pod `ref` at every address of `ips`: what this Node can
   * say of a Pod without the controller's versions (a standalone agent asking during a switch of
   * modes asks only the nodes whose rules name the Pod, whose groups then hold it).
   */
  holdsPeer(ref: string, ips: readonly string[]): boolean {
    for (const entry of this.address.values()) {
      if (entry.removed) continue;
      const m = entry.members.get(memberKey({ kind: 'pod', ref }));
      if (m !== undefined && ips.every((ip) => memberAddresses(m).includes(ip))) return true;
    }
    return false;
  }

  /** Sizes and waiting policies, for /status. */
  counts(): { policies: number; enforced: number; waiting: string[]; appliedToGroups: number; addressGroups: number } {
    return { policies: this.received.size, enforced: this.enforced.size, waiting: [...this.waiting].sort(), appliedToGroups: this.appliedTo.size, addressGroups: this.address.size };
  }
}
