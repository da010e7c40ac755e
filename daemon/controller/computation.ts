/**
 * The controller's policy computation: one policy engine for the whole cluster (no Node of its
 * own), and, from each ChangeSet it returns, the objects every Node's view gains, changes or
 * loses (types in controlplane/types.ts):
 *
 * - each AppliedToGroup is split by Node: a Node receives the group with its own members only,
 *   and only while it has one;
 * - a NetworkPolicy's span is the Nodes of its AppliedToGroups' members; the policy goes to them;
 * - an AddressGroup's span is the union of the spans of the policies naming it; a change of its
 *   members goes to them as a patch.
 *
 * The work per ChangeSet is proportional to what it names (the changed groups and policies and
 * the Nodes whose view changes), not to the cluster: the indices below map groups to policies and
 * count, per AddressGroup and Node, the policies that need it there.
 */
import { applyMemberChanges } from '../controlplane/members.js';
import { CONTROLPLANE_API_VERSION, memberKey } from '../controlplane/types.js';
import type {
  ControlPlaneAddressGroup, ControlPlaneAddressGroupPatch, ControlPlaneAppliedToGroup, ControlPlaneKind, ControlPlaneNetworkPolicy, ControlPlaneObject, ServiceBackendEntry,
} from '../controlplane/types.js';
import { serviceBackends } from '../policy/endpoints.js';
import type { ChangeSet, ComputedIsolation, ComputedRule, PolicyEngine } from '../policy/engine.js';
import { fileUnder, type MemberChange } from '../policy/internal.js';
import { canonicalJson } from '../policy/order.js';
import { KeyedList } from '../policy/sorted-list.js';
import type { GroupMember, RuleRef } from '../policy/types.js';

/**
 * Where the per-Node views go (the controller's store, or a test's recorder through `perNodeSink`).
 * AppliedToGroups are each Node's own (`set`); NetworkPolicies and AddressGroups are one object for
 * every Node of their span (`share` their content, `hold` per Node joining or leaving the span),
 * so a change of a group every Node needs costs the sink one change, not one per Node.
 */
export interface NodeViewSink {
  /** The object as `node` now sees it (undefined: gone from its view). */
  set(node: string, kind: ControlPlaneKind, name: string, object: ControlPlaneObject | undefined): void;
  /**
   * The shared object as every Node holding it now sees it (undefined: gone). `patch` is given for
   * an AddressGroup whose members changed: what those Nodes receive instead of the whole group.
   */
  share(kind: ControlPlaneKind, name: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void;
  /** Whether `node` holds the shared object (shared before): it gets it whole, or loses it. */
  hold(node: string, kind: ControlPlaneKind, name: string, holds: boolean): void;
}

/** A sink that takes every change per Node, as `set` with the patch a shared change carries. */
export interface PerNodeViewSink {
  set(node: string, kind: ControlPlaneKind, name: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void;
}

/**
 * A NodeViewSink over a per-Node one (tests and benches that look at each Node's view): each
 * shared change is handed to every Node holding the object, as the store's watches deliver it.
 */
export function perNodeSink(target: PerNodeViewSink): NodeViewSink {
  const shared = new Map<string, { object: ControlPlaneObject; holders: Set<string> }>();
  return {
    set: (node, kind, name, object) => target.set(node, kind, name, object),
    share(kind, name, object, patch) {
      const key = `${kind}/${name}`;
      const s = shared.get(key);
      if (object === undefined) {
        shared.delete(key);
        for (const node of s?.holders ?? []) target.set(node, kind, name, undefined);
      } else if (!s) shared.set(key, { object, holders: new Set() });
      else {
        s.object = object;
        for (const node of s.holders) target.set(node, kind, name, object, patch);
      }
    },
    hold(node, kind, name, holds) {
      const s = shared.get(`${kind}/${name}`);
      if (holds) {
        if (!s) throw new Error(`hold: ${kind} "${name}" is not shared (share it first)`);
        if (s.holders.has(node)) return;
        s.holders.add(node);
        target.set(node, kind, name, s.object);
      } else if (s?.holders.delete(node)) target.set(node, kind, name, undefined);
    },
  };
}

/** The Nodes a group member is on, as an agent's engine tells its local members (InternalModel.isLocal). */
export function memberNodes(m: GroupMember): string[] {
  const out: string[] = [];
  if (m.nodeName !== undefined) out.push(m.nodeName);
  if (m.kind === 'node' && m.ref !== m.nodeName) out.push(m.ref);
  return out;
}

/** The key of the source policy a computed rule or isolation came from. */
export function policyKeyOf(ref: RuleRef): string {
  return `${ref.kind}/${ref.namespace ?? ''}/${ref.name}`;
}

interface PolicyState {
  key: string;
  object: ControlPlaneNetworkPolicy;
  ruleIds: Set<string>;
  isolationIds: Set<string>;
  appliedToGroups: Set<string>;
  addressGroups: Set<string>;
  span: Set<string>;
}

const EMPTY: ReadonlySet<string> = new Set();

/** Moves `key` in a group -> keys index from the groups in `was` to those in `now`. */
function refile(index: Map<string, Set<string>>, was: ReadonlySet<string>, now: ReadonlySet<string>, key: string): void {
  fileUnder(index, [...was].filter((id) => !now.has(id)), key, false);
  fileUnder(index, [...now].filter((id) => !was.has(id)), key, true);
}

export class ClusterComputation {
  private readonly policies = new Map<string, PolicyState>();
  /** Computed rule / isolation id → the key of the policy holding it. */
  private readonly ruleOwner = new Map<string, string>();
  private readonly isolationOwner = new Map<string, string>();
  /** AppliedToGroup id → Node → the group as that Node receives it. */
  private readonly appliedTo = new Map<string, Map<string, ControlPlaneAppliedToGroup>>();
  private readonly policiesByAppliedTo = new Map<string, Set<string>>();
  private readonly policiesByAddress = new Map<string, Set<string>>();
  private readonly addressGroups = new Map<string, HeldAddressGroup>();
  /** AddressGroup id → Node → how many policies spanning that Node name the group. */
  private readonly addressSpan = new Map<string, Map<string, number>>();
  /** While held (hold): the ids every ChangeSet since named, computed once at release. */
  private held?: { addressGroups: Set<string>; appliedToGroups: Set<string>; rules: Set<string>; isolations: Set<string>; serviceEndpoints: Set<string> } | undefined;

  /** `engine` has no Node of its own and tracks members (`new PolicyEngine({ trackMembers: true })`). */
  constructor(
    private readonly engine: PolicyEngine,
    private readonly sink: NodeViewSink,
  ) {}

  /**
   * From now on ChangeSets only note what they name, and the views are computed at `release`.
   * For the cluster's initial lists: computed event by event, each Pod joining a group every Node
   * needs would change every Node's view, once per Pod (Nodes × Pods); computed at the end, each
   * Node's view is made once.
   */
  hold(): void {
    this.held ??= { addressGroups: new Set(), appliedToGroups: new Set(), rules: new Set(), isolations: new Set(), serviceEndpoints: new Set() };
    // The engine's per-change ChangeSets would only be noted here: it keeps them as one.
    this.engine.holdChanges();
  }

  get holding(): boolean {
    return this.held !== undefined;
  }

  /** Computes the views for everything named while held, as one change from what was computed before. */
  release(): void {
    if (!this.held) return;
    const { engine } = this;
    // Noted like any other while held: the groups are read whole below.
    this.apply(engine.releaseChanges({ members: false }));
    const held = this.held;
    this.held = undefined;
    // Groups are read whole (no member changes): one that exists now is updated (read whole
    // whether the views had it or not), one that does not is removed. Rules and isolations are
    // looked up by id in any case.
    const split = (ids: Set<string>, exists: (id: string) => boolean) => {
      const d = { added: [] as string[], updated: [] as string[], removed: [] as string[] };
      for (const id of ids) (exists(id) ? d.updated : d.removed).push(id);
      return d;
    };
    this.apply({
      addressGroups: split(held.addressGroups, (id) => engine.addressGroupIpBlocks(id) !== undefined),
      appliedToGroups: split(held.appliedToGroups, (id) => engine.appliedToGroup(id) !== undefined),
      rules: { added: [], updated: [...held.rules], removed: [] },
      isolations: { added: [], updated: [...held.isolations], removed: [] },
      serviceEndpoints: [...held.serviceEndpoints].sort(),
    });
  }

  /** Brings every Node's view up to date with one ChangeSet of the engine (or notes it, while held). */
  apply(cs: ChangeSet): void {
    const { held } = this;
    if (held) {
      const note = (set: Set<string>, d: { added: string[]; updated: string[]; removed: string[] }) => {
        for (const list of [d.added, d.updated, d.removed]) for (const id of list) set.add(id);
      };
      note(held.addressGroups, cs.addressGroups);
      note(held.appliedToGroups, cs.appliedToGroups);
      note(held.rules, cs.rules);
      note(held.isolations, cs.isolations);
      for (const id of cs.serviceEndpoints) held.serviceEndpoints.add(id);
      return;
    }
    const respan = new Set<string>();
    // AddressGroup changes first, to the Nodes that hold them already (one change each, as a patch
    // when only members changed); a Node that gains a policy below gets the groups' current content.
    for (const id of new Set([...cs.addressGroups.added, ...cs.addressGroups.updated, ...cs.addressGroups.removed, ...cs.serviceEndpoints])) {
      const patch = this.recomputeAddressGroup(id, cs);
      this.sink.share('AddressGroup', id, this.addressGroups.get(id), patch);
    }
    for (const id of [...cs.appliedToGroups.added, ...cs.appliedToGroups.updated, ...cs.appliedToGroups.removed]) {
      if (this.splitAppliedToGroup(id, cs)) for (const key of this.policiesByAppliedTo.get(id) ?? EMPTY) respan.add(key);
    }
    const changedPolicies = new Set<string>();
    const own = (owners: Map<string, string>, id: string, item: ComputedRule | ComputedIsolation | undefined, field: 'ruleIds' | 'isolationIds') => {
      const was = owners.get(id);
      const now = item ? policyKeyOf(item.ref) : undefined;
      if (was !== undefined) {
        changedPolicies.add(was);
        if (was !== now) this.policies.get(was)?.[field].delete(id);
      }
      if (now !== undefined) {
        changedPolicies.add(now);
        owners.set(id, now);
        this.policyState(now)[field].add(id);
      } else owners.delete(id);
    };
    for (const id of [...cs.rules.added, ...cs.rules.updated, ...cs.rules.removed]) own(this.ruleOwner, id, this.engine.internalRule(id), 'ruleIds');
    for (const id of [...cs.isolations.added, ...cs.isolations.updated, ...cs.isolations.removed]) {
      own(this.isolationOwner, id, this.engine.internalIsolation(id), 'isolationIds');
    }
    for (const key of changedPolicies) this.rebuildPolicy(key);
    for (const key of new Set([...respan, ...changedPolicies])) this.respanPolicy(key, changedPolicies.has(key));
  }

  /** Sizes for /status and benches. */
  counts(): { policies: number; appliedToGroups: number; addressGroups: number } {
    return { policies: this.policies.size, appliedToGroups: this.appliedTo.size, addressGroups: this.addressGroups.size };
  }

  private policyState(key: string): PolicyState {
    let p = this.policies.get(key);
    if (!p) {
      p = {
        key, ruleIds: new Set(), isolationIds: new Set(), appliedToGroups: new Set(), addressGroups: new Set(), span: new Set(),
        object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: key }, sourceKey: key, rules: [], isolations: [] },
      };
      this.policies.set(key, p);
    }
    return p;
  }

  /** The policy's object and group references, from the engine's current rules and isolations. */
  private rebuildPolicy(key: string): void {
    const p = this.policies.get(key);
    if (!p) return;
    const rules = [...p.ruleIds].sort().map((id) => this.engine.internalRule(id)).filter((r): r is ComputedRule => r !== undefined);
    const isolations = [...p.isolationIds].sort().map((id) => this.engine.internalIsolation(id)).filter((i): i is ComputedIsolation => i !== undefined);
    p.object = { apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: key }, sourceKey: key, rules, isolations };
    const appliedTo = new Set([...rules.flatMap((r) => r.appliedToGroups), ...isolations.flatMap((i) => i.appliedToGroups)]);
    const address = new Set(rules.flatMap((r) => r.addressGroups));
    refile(this.policiesByAppliedTo, p.appliedToGroups, appliedTo, key);
    // The AddressGroup counts follow the references here and the span in respanPolicy.
    for (const id of p.addressGroups) if (!address.has(id)) this.countAddressSpan(id, p.span, -1);
    for (const id of address) if (!p.addressGroups.has(id)) this.countAddressSpan(id, p.span, +1);
    refile(this.policiesByAddress, p.addressGroups, address, key);
    p.appliedToGroups = appliedTo;
    p.addressGroups = address;
  }

  /**
   * Sends the policy to the Nodes that joined its span (to every Node of it when `changed`) and
   * its end to the Nodes that left it.
   */
  private respanPolicy(key: string, changed: boolean): void {
    const p = this.policies.get(key);
    if (!p) return;
    const span = new Set<string>();
    if (p.ruleIds.size + p.isolationIds.size > 0) for (const id of p.appliedToGroups) for (const node of this.appliedTo.get(id)?.keys() ?? []) span.add(node);
    const gone = [...p.span].filter((n) => !span.has(n));
    const came = [...span].filter((n) => !p.span.has(n));
    for (const id of p.addressGroups) {
      this.countAddressSpan(id, came, +1);
    }
    p.span = span;
    // The Nodes that left it let go, the new content goes to those that keep it (one change), and
    // the Nodes that joined get it whole.
    for (const node of gone) this.sink.hold(node, 'NetworkPolicy', key, false);
    if (changed) this.sink.share('NetworkPolicy', key, p.object);
    for (const node of came) this.sink.hold(node, 'NetworkPolicy', key, true);
    for (const id of p.addressGroups) this.countAddressSpan(id, gone, -1);
    // Without rules or isolations it names no group any more (rebuildPolicy): nothing left to keep.
    if (p.ruleIds.size + p.isolationIds.size === 0) {
      this.policies.delete(key);
      this.sink.share('NetworkPolicy', key, undefined);
    }
  }

  /** Adds `delta` to the count of (group, node) for each node; a count going 0↔1 adds or removes the group from that Node's view. */
  private countAddressSpan(id: string, nodes: Iterable<string>, delta: 1 | -1): void {
    let counts = this.addressSpan.get(id);
    for (const node of nodes) {
      if (!counts) this.addressSpan.set(id, (counts = new Map()));
      const n = (counts.get(node) ?? 0) + delta;
      if (n > 0) counts.set(node, n);
      else counts.delete(node);
      if (delta > 0 && n === 1) {
        // A group the engine has not computed yet is held empty until it is.
        if (!this.addressGroups.has(id)) this.sink.share('AddressGroup', id, this.emptyAddressGroup(id));
        this.sink.hold(node, 'AddressGroup', id, true);
      }
      if (delta < 0 && n === 0) this.sink.hold(node, 'AddressGroup', id, false);
    }
    if (counts && counts.size === 0) this.addressSpan.delete(id);
  }

  private emptyAddressGroup(id: string): ControlPlaneAddressGroup {
    return { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: id }, members: [], ipBlocks: [] };
  }

  /**
   * The group's object after the change; returns the patch from the previous one when only
   * members changed. With the engine's member changes this costs O(changed members) plus one copy
   * of the member list, not a comparison of the whole group.
   */
  private recomputeAddressGroup(id: string, cs: ChangeSet): ControlPlaneAddressGroupPatch | undefined {
    const old = this.addressGroups.get(id);
    const ipBlocks = this.engine.addressGroupIpBlocks(id);
    if (!ipBlocks) {
      this.addressGroups.delete(id);
      return undefined;
    }
    // A group new to the controller is read whole once (its members and named ports).
    const whole = old ? undefined : this.engine.addressGroup(id);
    const namedPorts = old ? old.namedPorts : whole?.namedPorts;
    const fqdn = old ? old.fqdn : whole?.peer.kind === 'fqdn' ? [whole.peer.pattern] : undefined;
    const wire = (m: GroupMember) => wireMember(m, namedPorts !== undefined);
    const changes = cs.memberChanges?.get(id)?.map((c) => ({ key: c.key, before: c.before && wire(c.before), after: c.after && wire(c.after) }))
      .filter((c) => !c.before || !c.after || canonicalJson(c.before) !== canonicalJson(c.after));
    let members: KeyedList<GroupMember>;
    let patch: ControlPlaneAddressGroupPatch | undefined;
    if (old && changes) {
      const upserted = changes.filter((c) => c.after).map((c) => c.after!);
      const removed = changes.filter((c) => !c.after).map((c) => c.key).sort();
      members = old.members.with(removed, upserted);
      patch = { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroupPatch', metadata: { name: id }, upserted, removed };
    } else if (old && !cs.addressGroups.added.includes(id) && !cs.addressGroups.updated.includes(id)) {
      members = old.members; // only its Service's endpoints moved
    } else {
      members = KeyedList.from<GroupMember>((whole ?? this.engine.addressGroup(id)!).members.map(wire), memberKey);
    }
    const backends = this.backendsOf(members);
    const obj: HeldAddressGroup = {
      apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: id }, members, ipBlocks,
      ...(namedPorts ? { namedPorts } : {}), ...(backends.length > 0 ? { serviceBackends: backends } : {}), ...(fqdn ? { fqdn } : {}),
    };
    this.addressGroups.set(id, obj);
    // Other than members changed (ipBlocks, Service backends): the group goes whole.
    if (!old || canonicalJson([old.ipBlocks, old.serviceBackends]) !== canonicalJson([obj.ipBlocks, obj.serviceBackends])) return undefined;
    return patch;
  }

  /** Where a toServices group's ClusterIPs and ports send their traffic (the compiler's post-DNAT flows). */
  private backendsOf(members: KeyedList<GroupMember>): ServiceBackendEntry[] {
    const out: ServiceBackendEntry[] = [];
    // Service members' keys start with "service:": found without a look at the others.
    for (const m of members.withKeyPrefix(memberKey({ kind: 'service', ref: '' }))) {
      if (m.kind !== 'service') continue;
      for (const ip of m.ips) {
        for (const p of m.ports) out.push({ clusterIP: ip, protocol: p.protocol, port: p.containerPort, backends: serviceBackends(this.engine.cluster, ip, p.protocol, p.containerPort) });
      }
    }
    return out;
  }

  /**
   * Sends each Node whose part of the group changed its new part; returns whether the group's set
   * of Nodes changed. With the engine's member changes only the Nodes of those members are looked at.
   */
  private splitAppliedToGroup(id: string, cs: ChangeSet): boolean {
    const prev = this.appliedTo.get(id) ?? new Map<string, ControlPlaneAppliedToGroup>();
    const changes = cs.memberChanges?.get(id);
    const removed = cs.appliedToGroups.removed.includes(id);
    /** Node → the member changes of its part. */
    const byNode = new Map<string, MemberChange[]>();
    const file = (node: string, c: MemberChange) => {
      let list = byNode.get(node);
      if (!list) byNode.set(node, (list = []));
      list.push(c);
    };
    if (changes && !removed) {
      for (const c of changes) {
        const before = c.before ? memberNodes(c.before) : [];
        const after = c.after ? memberNodes(c.after) : [];
        for (const node of before) if (!after.includes(node)) file(node, { key: c.key, before: c.before });
        for (const node of after) file(node, c);
      }
    } else {
      // Without member changes (or for a removed group): every Node's part from scratch.
      const members = removed ? [] : (this.engine.appliedToGroup(id)?.members ?? []);
      const fresh = new Map<string, GroupMember[]>();
      for (const m of members) {
        for (const node of memberNodes(m)) {
          let list = fresh.get(node);
          if (!list) fresh.set(node, (list = []));
          list.push(m);
        }
      }
      for (const node of new Set([...prev.keys(), ...fresh.keys()])) {
        const was = new Map((prev.get(node)?.members ?? []).map((m) => [memberKey(m), m]));
        const list: MemberChange[] = [];
        for (const m of fresh.get(node) ?? []) {
          const key = memberKey(m);
          const before = was.get(key);
          was.delete(key);
          if (!before || canonicalJson(before) !== canonicalJson(m)) list.push({ key, before, after: m });
        }
        for (const [key, before] of was) list.push({ key, before });
        if (list.length > 0) byNode.set(node, list);
      }
    }
    let nodesChanged = false;
    for (const [node, list] of byNode) {
      const was = prev.get(node);
      const members = applyMemberChanges(was?.members ?? [], list);
      if (members.length === 0) {
        if (!was) continue;
        prev.delete(node);
        nodesChanged = true;
        this.sink.set(node, 'AppliedToGroup', id, undefined);
        continue;
      }
      if (!was) nodesChanged = true;
      const obj: ControlPlaneAppliedToGroup = { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AppliedToGroup', metadata: { name: id }, members };
      prev.set(node, obj);
      this.sink.set(node, 'AppliedToGroup', id, obj);
    }
    if (prev.size > 0) this.appliedTo.set(id, prev);
    else this.appliedTo.delete(id);
    return nodesChanged;
  }

}

/**
 * A peer group's member as Nodes need it: its addresses. The Node a Pod runs on and its container
 * ports matter only where named ports resolve on the peers (named-port groups) and for Services
 * (their ports), so other members go without them: a group of every Pod of a label is sent to
 * many Nodes.
 */
export function wireMember(m: GroupMember, namedPorts: boolean): GroupMember {
  if (namedPorts || m.kind === 'service') return m;
  return { kind: m.kind, ref: m.ref, ips: m.ips, ports: [] };
}

/** An AddressGroup as the controller makes and holds it: its members a KeyedList (see MemberList). */
type HeldAddressGroup = ControlPlaneAddressGroup & { members: KeyedList<GroupMember> };
