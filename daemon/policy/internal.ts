/**
 * The internal objects of Antrea's NetworkPolicy computation, kept incrementally:
 *
 * - AddressGroup: the members (Pods, Nodes, Service ClusterIPs, learned FQDN addresses) of one
 *   peer term, with their IPs and named-port maps. One group per distinct peer term, shared by
 *   every rule (of any policy) that uses the same term.
 * - AppliedToGroup: the target Pods of one appliedTo term, with the subset on this node.
 * - Named-port AddressGroup (egress rules with named ports): the Pods of one peer term (ipBlock
 *   and fqdn included: the Pods at addresses inside) that have one of the rule's port names, the
 *   only destinations a named port resolves on. So every input of the node rule set is a group
 *   or a rule the ChangeSet names, and Pods without the names never touch such a rule.
 * - Internal rule (ComputedRule): an IR rule with its peers replaced by AddressGroup ids and its
 *   ipBlocks turned into non-overlapping CIDRs. A rule with `self`/`sameLabels` peers is
 *   expanded into one rule per target namespace (the peer is relative to the target).
 *
 * Every mutation runs between begin() and end(); end() returns the exact set of ids whose
 * content changed (compared as canonical JSON, so "touched but equal" is not reported).
 * Work is proportional to the change: a Pod change re-checks only that Pod against the groups
 * that could contain it (namespace-scoped groups of its namespace plus the cluster-wide ones).
 */
import { formatCidr, parseCidr, subtractCidrs } from './cidr.js';
import { podKey } from './cluster.js';
import { canonicalDnsName, fqdnMember, FqdnPatternSet } from './fqdn.js';
import { compilePeer, ipv4ToNumber, podEndpoints, realizableMembers, type Endpoint, type MatchEnv, type PeerMatcher } from './match.js';
import { nodeRulesOf, type NodeRule, type NodeRuleGroups, type NodeTarget } from './noderules.js';
import { labelValue } from './labels.js';
import { PeerIps } from './peer-ips.js';
import { lowerBoundBy } from './sorted-list.js';
import { canonicalJson, compareRules, stableHash } from './order.js';
import type { ServiceEndpointTracker } from './endpoints.js';
import type { ComputedRule, Direction, GroupMember, InternalRule, Isolation, NamespaceMatch, NodeInfo, Peer, PodInfo, PortMatch, RuleRef } from './types.js';

export type { NodeRule, NodeTarget, GroupMember, ComputedRule };
export { resolveNamedPorts } from './noderules.js';

export interface AddressGroup {
  id: string;
  peer: Peer;
  members: GroupMember[];
  /** Non-overlapping CIDRs a Group/ClusterGroup contributes through ipBlock members. */
  ipBlocks: string[];
  /**
   * Set on the groups of egress rules with named ports: the members are only the Pods matching
   * the peer (ipBlock and fqdn peers included: Pods whose address is inside) that have one of
   * these container ports, the destinations a named port can resolve on. Pod changes that do
   * not concern these ports leave such a group (and its rules) untouched.
   */
  namedPorts?: { protocol: string; name: string }[];
}

export interface AppliedToGroup {
  id: string;
  peer: Peer;
  members: GroupMember[];
  /** The members on this engine's node (all members when the engine has no nodeName). */
  localMembers: GroupMember[];
}

export interface IdDelta {
  added: string[];
  updated: string[];
  removed: string[];
}

export interface ChangeSet {
  addressGroups: IdDelta;
  appliedToGroups: IdDelta;
  rules: IdDelta;
  /** Kubernetes NetworkPolicy isolations (default drop per direction for their targets). */
  isolations: IdDelta;
  /**
   * AddressGroups of toServices peers (there before and after the change) whose Service now sends
   * its traffic to other endpoints or target ports (serviceBackends): the group's members (the
   * ClusterIPs) may be unchanged, but the post-DNAT flows of the rules naming it are not. Sorted.
   */
  serviceEndpoints: string[];
  /**
   * Set only by an engine asked to track members (the controller's): per group added or updated,
   * its members that came, changed or went, with their values before and after. The controller
   * sends these as patches without comparing whole groups.
   */
  memberChanges?: Map<string, MemberChange[]>;
}

/** A ChangeSet naming nothing. */
export function emptyChangeSet(): ChangeSet {
  const none = (): IdDelta => ({ added: [], updated: [], removed: [] });
  return { addressGroups: none(), appliedToGroups: none(), rules: none(), isolations: none(), serviceEndpoints: [] };
}

/** One member of a group that came (no `before`), went (no `after`) or changed. */
export interface MemberChange {
  key: string;
  before?: GroupMember | undefined;
  after?: GroupMember | undefined;
}

/** A Kubernetes NetworkPolicy isolation, with its targets as AppliedToGroups. */
export interface ComputedIsolation {
  /** "<kind>/<ns>/<name>/<Direction>" */
  id: string;
  ref: RuleRef;
  direction: Direction;
  appliedToGroups: string[];
  logging?: { enabled: boolean; label?: string };
}

/** An isolation as this node enforces it: the local targets to default-drop in that direction. */
export interface NodeIsolation {
  id: string;
  ref: RuleRef;
  direction: Direction;
  targets: NodeTarget[];
  logging?: { enabled: boolean; label?: string };
}


type GroupKind = 'address' | 'appliedTo';

interface GroupRecord {
  id: string;
  kind: GroupKind;
  peer: Peer;
  matcher: PeerMatcher;
  /** Namespaces the peer is confined to (names match), else undefined. */
  namespaces?: Set<string>;
  members: Map<string, GroupMember>;
  ipBlocks: string[];
  refs: number;
  peerJson: string;
  /** A label every member must carry (from the Pod selector's matchLabels), to skip Pods quickly. */
  requiredLabel?: [string, string];
  /**
   * Without a required Pod label: a label every member's namespace must carry (from the namespace
   * selector's matchLabels), so a Pod of another namespace never looks at the group.
   */
  requiredNamespaceLabel?: [string, string];
  /** Named-port filter ("TCP/http" keys; see AddressGroup.namedPorts). */
  namedPorts?: string[];
  portFilter?: ReadonlySet<string>;
  /** The members' addresses for node rules, built when first read and then kept as members come and go. */
  peerIps?: PeerIps | undefined;
  /**
   * AppliedToGroups: the members on this node (isLocal), kept with `members`. Node rules and
   * isolations read only these: a group of every Pod of some label has members all over the cluster.
   */
  local?: Map<string, GroupMember>;
  /** Order of acquisition: the order a Pod event visits the groups it may concern. */
  seq: number;
}

/** The first index of a list sorted by order whose order is not below `x`. */
function lowerBoundOrder(list: readonly { order: number }[], x: number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid]!.order < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Where a Pod-holding group requiring label `key`=`value` is filed (podGroupsByLabel). */
function labelIndexKey(key: string, value: string): string {
  return `${key}\0${value}`;
}

/** Where a Pod-holding group requiring namespace label `key`=`value` is filed (no label key holds \u0001). */
function namespaceLabelIndexKey(key: string, value: string): string {
  return `\u0001${key}\0${value}`;
}

/** A Pod-holding unscoped group's key in podGroupsByLabel: what a Pod must have for the group to look at it. */
function podIndexKey(g: GroupRecord): string {
  if (g.requiredLabel) return labelIndexKey(...g.requiredLabel);
  if (g.requiredNamespaceLabel) return namespaceLabelIndexKey(...g.requiredNamespaceLabel);
  return '';
}

/** Two node forms of one isolation (the same isolation object) with the same targets. */
function sameNodeIsolation(a: NodeIsolation | null, b: NodeIsolation | null): boolean {
  if (a === b) return true;
  if (!a || !b || a.id !== b.id || a.ref !== b.ref || a.direction !== b.direction || a.logging !== b.logging || a.targets.length !== b.targets.length) return false;
  for (let i = 0; i < a.targets.length; i++) {
    const x = a.targets[i]!;
    const y = b.targets[i]!;
    if (x.kind !== y.kind || x.ref !== y.ref || x.ips.length !== y.ips.length || x.ips.some((ip, j) => ip !== y.ips[j])) return false;
  }
  return true;
}

/**
 * A group as it was when a change first touched it. Its members are not copied: `members` is the
 * map the group had then, and `changed` keeps the earlier value of every key changed in that map
 * since (undefined: absent). A group's members map is replaced, never mutated, when it is
 * recomputed as a whole, so the old map stays as it was. Taking a snapshot is O(1) and comparing
 * it O(changed keys), not O(members): a Pod event touches every group the Pod is in.
 */
interface GroupBefore {
  peer: string;
  ipBlocks: string;
  members: Map<string, GroupMember>;
  changed: Map<string, GroupMember | undefined>;
}

function membersBefore(b: GroupBefore): Map<string, GroupMember> {
  if (b.changed.size === 0) return b.members;
  const m = new Map(b.members);
  for (const [k, v] of b.changed) {
    if (v) m.set(k, v);
    else m.delete(k);
  }
  return m;
}

function sameMembers(a: Map<string, GroupMember>, b: Map<string, GroupMember>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, m] of a) {
    const o = b.get(k);
    if (o !== m && !sameMember(m, o)) return false;
  }
  return true;
}

function unchangedGroup(was: GroupBefore, now: GroupRecord): boolean {
  if (was.peer !== now.peerJson || was.ipBlocks !== now.ipBlocks.join(',')) return false;
  if (now.members !== was.members) return sameMembers(membersBefore(was), now.members);
  for (const [k, m] of was.changed) {
    const o = now.members.get(k);
    if (o !== m && !sameMember(m, o)) return false;
  }
  return true;
}

const EMPTY: ReadonlySet<string> = new Set();
const EMPTY_GROUPS: ReadonlySet<GroupRecord> = new Set();
const NO_NODE_RULES: NodeRule[] = [];
const ALL_PODS: Peer = { kind: 'pods', namespaces: { kind: 'all' }, pods: {} };
const PODS_CAPABLE = new Set(['pods', 'group', 'serviceRef']);
const NODES_CAPABLE = new Set(['nodes', 'group']);
/** Peers whose destinations can carry a named port: Pods, and Pods inside address ranges. */
const NAMED_PORT_PEERS = new Set(['pods', 'group', 'serviceRef', 'ipBlock', 'fqdn']);

/** Whether a group's members include Pods (a filtered ipBlock/fqdn group holds the Pods inside it). */
function holdsPods(g: GroupRecord): boolean {
  return PODS_CAPABLE.has(g.peer.kind) || (g.portFilter !== undefined && NAMED_PORT_PEERS.has(g.peer.kind));
}

function hasNamedPort(pod: PodInfo | undefined, filter: ReadonlySet<string>): boolean {
  if (!pod) return false;
  for (const p of pod.ports) if (p.name !== undefined && filter.has(`${p.protocol}/${p.name}`)) return true;
  return false;
}

/** The named destination ports of an egress rule as sorted "PROTOCOL/name" keys, or undefined. */
export function egressNamedPorts(direction: Direction, ports: PortMatch[]): string[] | undefined {
  if (direction !== 'Egress') return undefined;
  const keys = new Set<string>();
  for (const p of ports) if (typeof p.port === 'string') keys.add(`${p.protocol}/${p.port}`);
  return keys.size > 0 ? [...keys].sort() : undefined;
}

function isRelative(m: NamespaceMatch): boolean {
  return m.kind === 'self' || m.kind === 'sameLabels';
}

/** Equal content (every field of a GroupMember and its ports; no JSON built: this runs per member per event). */
function sameMember(a: GroupMember | undefined, b: GroupMember | undefined): boolean {
  if (a === b) return true;
  if (!a || !b || a.kind !== b.kind || a.ref !== b.ref || a.nodeName !== b.nodeName) return false;
  if (a.ips.length !== b.ips.length || a.ports.length !== b.ports.length) return false;
  for (let i = 0; i < a.ips.length; i++) if (a.ips[i] !== b.ips[i]) return false;
  for (let i = 0; i < a.ports.length; i++) {
    const x = a.ports[i]!;
    const y = b.ports[i]!;
    if (x.name !== y.name || x.containerPort !== y.containerPort || x.protocol !== y.protocol) return false;
  }
  return true;
}

/** Adds `id` under each of `keys` in a key -> ids index, or removes it (an emptied key goes). */
export function fileUnder(index: Map<string, Set<string>>, keys: readonly string[], id: string, add: boolean): void {
  for (const k of new Set(keys)) {
    let ids = index.get(k);
    if (add) {
      if (!ids) index.set(k, (ids = new Set()));
      ids.add(id);
    } else if (ids?.delete(id) && ids.size === 0) {
      index.delete(k);
    }
  }
}

export class InternalModel {
  private readonly groups = { address: new Map<string, GroupRecord>(), appliedTo: new Map<string, GroupRecord>() };
  /** Namespace → ids of groups confined to it; other groups are in `unscoped`. */
  private readonly scoped = new Map<string, Set<GroupRecord>>();
  private readonly unscoped = new Set<GroupRecord>();
  /**
   * The unscoped groups holding Pods by their required label (labelIndexKey), else by their
   * required namespace label (namespaceLabelIndexKey), those without either under '': a Pod event
   * looks only at the groups its labels, before and after, and its namespace's labels can concern,
   * whatever the number of groups.
   */
  private readonly podGroupsByLabel = new Map<string, Set<GroupRecord>>();
  private groupSeq = 0;
  private readonly policyRules = new Map<string, InternalRule[]>();
  private readonly sourceRules = new Map<string, InternalRule>();
  /** Source rules that are egress rules with an fqdn peer: rule id → its fqdn patterns. */
  private readonly fqdnEgress = new Map<string, readonly string[]>();
  /** The patterns of `fqdnEgress` as one set, kept until a pattern comes or goes. */
  private fqdnPatternCache?: FqdnPatternSet | undefined;
  /** IR rule id → computed rule ids. */
  private readonly expansions = new Map<string, string[]>();
  private readonly computed = new Map<string, ComputedRule>();
  private readonly relativeRules = new Set<string>();
  /** While set (holdChanges), one change spans every begin/end until releaseChanges. */
  private holdingChanges = false;
  private touched?: {
    address: Map<string, GroupBefore | null>;
    appliedTo: Map<string, GroupBefore | null>;
    rules: Map<string, string | null>;
    isolations: Map<string, string | null>;
  } | undefined;
  private readonly policyIsolations = new Map<string, ComputedIsolation[]>();
  private readonly isolationById = new Map<string, ComputedIsolation>();
  private nodeIsolationCache?: NodeIsolation[] | undefined;
  /** isolations(), kept until an isolation is added, changed or removed. */
  private sortedIsolations?: ComputedIsolation[] | undefined;
  /** Each isolation's node form (null: no local target), kept until it or one of its AppliedToGroups changes. */
  private readonly nodeIsolationParts = new Map<string, NodeIsolation | null>();
  /** AppliedToGroup id → ids of the isolations naming it. */
  private readonly isolationsByGroup = new Map<string, Set<string>>();
  /**
   * The last node isolations and the isolation list they were built from: while that list stands,
   * a group change rebuilds only the isolations naming the group, and the list stays the same
   * array when their local targets did not change (a Pod elsewhere came or went).
   */
  private lastNodeIsolations?: { from: readonly ComputedIsolation[]; list: NodeIsolation[] } | undefined;
  /** AppliedToGroups changed since the node isolations were last read. */
  private readonly staleIsolationGroups = new Set<string>();
  private nodeRuleCache?: NodeRule[] | undefined;
  /** Group id (AddressGroup or AppliedToGroup) → ids of the computed rules naming it. */
  private readonly rulesByGroup = new Map<string, Set<string>>();
  /**
   * The same for the rules with a local target (an AppliedToGroup with members on this node), the
   * only rules with node rules: a change of a group named by thousands of rules of other nodes
   * rebuilds the node rules of the few local ones.
   */
  private readonly localRulesByGroup = new Map<string, Set<string>>();
  private readonly localRules = new Set<string>();
  /** Rules that gained or lost their last local target since the node rules were last read. */
  private readonly localityChanged = new Set<string>();
  /** rules(), kept until a computed rule is added, changed or removed. */
  private sortedRules?: ComputedRule[] | undefined;
  /**
   * Each computed rule's node rules, kept until the rule or a group it names changes (they depend
   * on nothing else; see nodeRulesOf), so a change rebuilds only the node rules it can affect.
   */
  private readonly nodeRuleParts = new Map<string, NodeRule[]>();
  /**
   * The node rules of the last nodeRuleSet() per rule that has some, in evaluation order, and the
   * sorted rule list they were built from. While that list stands (no rule came, went or changed),
   * every rule keeps its order, so a group change replaces only the node rules of the rules naming
   * it instead of walking every rule of the cluster.
   */
  private lastNodeRules?: { from: readonly ComputedRule[]; order: Map<string, number>; parts: { order: number; rules: NodeRule[] }[] } | undefined;
  /**
   * Groups changed since the node rules were last read: the rules naming them are found when the
   * node rules are next read (once per read, not once per change: loading N policies without
   * reading node rules in between, as simulate does, stays linear).
   */
  private readonly staleGroups = new Set<string>();
  /** Member key ("pod:ns/name") → ids of the AppliedToGroups containing it. */
  private readonly targetIndex = new Map<string, Set<string>>();
  private readonly changedTargets = new Set<string>();
  private readonly podMembers = new WeakMap<PodInfo, GroupMember>();
  /** The AddressGroup of each Service a toServices peer names ("ns/name" -> group id). */
  private readonly serviceGroups = new Map<string, string>();

  /**
   * `endpoints` follows the Services of toServices peers (given, the ChangeSet reports their
   * endpoint changes); `trackMembers` adds each changed group's member changes to the ChangeSet.
   */
  constructor(
    private readonly env: MatchEnv,
    private readonly nodeName: string | undefined,
    private readonly fqdnMembers: (pattern: string) => { name: string; ips: string[] }[] = () => [],
    private readonly endpoints?: ServiceEndpointTracker,
    private readonly trackMembers = false,
  ) {}

  // ---------------------------------------------------------------------------------------
  // change tracking

  begin(): void {
    if (this.holdingChanges && this.touched) return;
    this.touched = { address: new Map(), appliedTo: new Map(), rules: new Map(), isolations: new Map() };
  }

  /** See PolicyEngine.holdChanges. */
  holdChanges(): void {
    this.holdingChanges = true;
  }

  /** Ends a hold: the next end() returns every change since holdChanges. */
  releaseChanges(): void {
    this.holdingChanges = false;
  }

  get holding(): boolean {
    return this.holdingChanges;
  }

  /** Ends a change; `members: false` leaves its member changes out (a caller that reads the groups whole). */
  end(members = true): ChangeSet {
    if (this.holdingChanges) return emptyChangeSet();
    const t = this.touched ?? { address: new Map(), appliedTo: new Map(), rules: new Map(), isolations: new Map() };
    this.touched = undefined;
    const delta = <S>(before: Map<string, S | null>, now: (id: string) => S | null, equal: (a: S, b: S) => boolean): IdDelta => {
      const d: IdDelta = { added: [], updated: [], removed: [] };
      for (const [id, was] of before) {
        const is = now(id);
        if (was === null && is !== null) d.added.push(id);
        else if (was !== null && is === null) d.removed.push(id);
        else if (was !== null && is !== null && !equal(was, is)) d.updated.push(id);
      }
      for (const list of [d.added, d.updated, d.removed]) list.sort();
      return d;
    };
    const groupDelta = (kind: GroupKind): IdDelta => {
      const d: IdDelta = { added: [], updated: [], removed: [] };
      for (const [id, was] of t[kind]) {
        const now = this.groups[kind].get(id);
        if (!was && now) d.added.push(id);
        else if (was && !now) d.removed.push(id);
        else if (was && now && !unchangedGroup(was, now)) d.updated.push(id);
      }
      for (const list of [d.added, d.updated, d.removed]) list.sort();
      return d;
    };
    // Endpoints of a group that came in this change are its first: the group is reported added.
    const serviceEndpoints: string[] = [];
    for (const key of this.endpoints?.takeChanged() ?? []) {
      const id = this.serviceGroups.get(key);
      if (id !== undefined && t.address.get(id) !== null) serviceEndpoints.push(id);
    }
    const cs: ChangeSet = {
      addressGroups: groupDelta('address'),
      appliedToGroups: groupDelta('appliedTo'),
      rules: delta(t.rules, (id) => this.ruleJson(id), (a, b) => a === b),
      isolations: delta(t.isolations, (id) => this.isolationJson(id), (a, b) => a === b),
      serviceEndpoints: serviceEndpoints.sort(),
    };
    if (this.trackMembers && members) cs.memberChanges = this.memberChangesOf(t, cs);
    if (cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length + cs.addressGroups.updated.length +
        cs.addressGroups.added.length + cs.addressGroups.removed.length + cs.appliedToGroups.added.length +
        cs.appliedToGroups.updated.length + cs.appliedToGroups.removed.length + cs.isolations.added.length +
        cs.isolations.updated.length + cs.isolations.removed.length > 0) {
      this.nodeRuleCache = undefined;
      this.nodeIsolationCache = undefined;
      this.forgetNodeRules(cs);
    }
    return cs;
  }

  /** The member changes of the groups a ChangeSet names as added or updated: O(changed members) when the members map was kept. */
  private memberChangesOf(t: NonNullable<InternalModel['touched']>, cs: ChangeSet): Map<string, MemberChange[]> {
    const out = new Map<string, MemberChange[]>();
    for (const kind of ['address', 'appliedTo'] as const) {
      const d = kind === 'address' ? cs.addressGroups : cs.appliedToGroups;
      for (const id of [...d.added, ...d.updated]) {
        const now = this.groups[kind].get(id)!;
        const was = t[kind].get(id);
        const changes: MemberChange[] = [];
        if (!was) {
          for (const [key, m] of now.members) changes.push({ key, after: m });
        } else if (was.members === now.members) {
          for (const [key, before] of was.changed) {
            const after = now.members.get(key);
            if (!sameMember(before, after)) changes.push({ key, before, after });
          }
        } else {
          const old = membersBefore(was);
          for (const [key, after] of now.members) {
            const before = old.get(key);
            if (!sameMember(before, after)) changes.push({ key, before, after });
          }
          for (const [key, before] of old) if (!now.members.has(key)) changes.push({ key, before });
        }
        out.set(id, changes);
      }
    }
    return out;
  }

  /** Drops the kept node rules a ChangeSet may have changed (and rules() when the rule set changed). */
  private forgetNodeRules(cs: ChangeSet): void {
    const ruleIds = [...cs.rules.added, ...cs.rules.updated, ...cs.rules.removed];
    if (ruleIds.length > 0) this.sortedRules = undefined;
    for (const id of ruleIds) this.nodeRuleParts.delete(id);
    for (const list of [cs.isolations.added, cs.isolations.updated, cs.isolations.removed]) for (const id of list) this.nodeIsolationParts.delete(id);
    for (const list of [cs.appliedToGroups.added, cs.appliedToGroups.updated, cs.appliedToGroups.removed]) for (const id of list) this.staleIsolationGroups.add(id);
    for (const d of [cs.addressGroups, cs.appliedToGroups]) for (const list of [d.added, d.updated, d.removed]) for (const id of list) this.staleGroups.add(id);
  }

  private dropStaleNodeRules(): void {
    const groups = this.staleGroups;
    if (groups.size === 0) return;
    for (const id of this.rulesNamingGroups(groups)) this.nodeRuleParts.delete(id);
    groups.clear();
  }

  /** The ids of the computed rules naming any of these groups (as applied-to or as peers). */
  rulesNamingGroups(groupIds: Iterable<string>): Set<string> {
    const out = new Set<string>();
    for (const g of groupIds) for (const id of this.rulesByGroup.get(g) ?? []) out.add(id);
    return out;
  }

  private indexRule(r: ComputedRule, add: boolean): void {
    fileUnder(this.rulesByGroup, [...r.appliedToGroups, ...r.addressGroups], r.id, add);
    if (add) this.checkLocality(r);
    else if (this.localRules.has(r.id)) this.setLocality(r, false);
  }

  /** Files rule `r` under its groups as local or not, as its AppliedToGroups now say. */
  private checkLocality(r: ComputedRule): void {
    const local = r.appliedToGroups.some((id) => (this.groups.appliedTo.get(id)?.local?.size ?? 0) > 0);
    if (local !== this.localRules.has(r.id)) this.setLocality(r, local);
  }

  private setLocality(r: ComputedRule, local: boolean): void {
    this.localityChanged.add(r.id);
    if (local) this.localRules.add(r.id);
    else this.localRules.delete(r.id);
    fileUnder(this.localRulesByGroup, [...r.appliedToGroups, ...r.addressGroups], r.id, local);
  }

  /** AppliedToGroup `g` got its first local member or lost its last: the rules naming it may change locality. */
  private localTargetsFlipped(g: GroupRecord): void {
    for (const id of this.rulesByGroup.get(g.id) ?? []) {
      const r = this.computed.get(id);
      if (r) this.checkLocality(r);
    }
  }


  private isolationJson(id: string): string | null {
    const i = this.isolationById.get(id);
    return i ? canonicalJson(i) : null;
  }

  private ruleJson(id: string): string | null {
    const r = this.computed.get(id);
    return r ? canonicalJson(r) : null;
  }

  /** Records the group with this id as it is now (null: none yet), once per change. */
  private touchGroup(g: Pick<GroupRecord, 'id' | 'kind'>): void {
    const map = this.touched?.[g.kind];
    if (!map || map.has(g.id)) return;
    const cur = this.groups[g.kind].get(g.id);
    map.set(g.id, cur ? { peer: cur.peerJson, ipBlocks: cur.ipBlocks.join(','), members: cur.members, changed: new Map() } : null);
  }

  private touchRule(id: string): void {
    const map = this.touched?.rules;
    if (map && !map.has(id)) map.set(id, this.ruleJson(id));
  }

  // ---------------------------------------------------------------------------------------
  // read side

  addressGroups(): AddressGroup[] {
    return [...this.groups.address.values()].sort(byId).map((g) => this.toAddressGroup(g));
  }

  /**
   * Where the rules that name Pod `ref` ("ns/name") as a peer are enforced: node → the addresses of
   * its Pods that such a rule applies to. These are the Pods whose verdicts on the Pod's traffic
   * depend on knowing its address: a node that has not learnt it yet judges the Pod as an unknown
   * address there (enforcement/newpods). Rules without a peer group, and isolation alone, judge an
   * unknown address as they judge the Pod, so their nodes are not in it.
   */
  podSpan(ref: string): Map<string, string[]> {
    const key = `pod:${ref}`;
    const groups = new Set<string>();
    for (const g of this.groups.address.values()) if (g.members.has(key)) groups.add(g.id);
    const out = new Map<string, Set<string>>();
    for (const id of this.rulesNamingGroups(groups)) {
      const rule = this.computed.get(id);
      if (!rule?.addressGroups.some((g) => groups.has(g))) continue;
      for (const atg of rule.appliedToGroups) {
        for (const m of this.groups.appliedTo.get(atg)?.members.values() ?? []) {
          if (m.kind !== 'pod' || !m.nodeName || m.ref === ref) continue;
          let ips = out.get(m.nodeName);
          if (!ips) out.set(m.nodeName, (ips = new Set()));
          for (const ip of m.ips) ips.add(ip);
        }
      }
    }
    return new Map([...out].map(([node, ips]) => [node, [...ips].sort()]));
  }

  appliedToGroups(): AppliedToGroup[] {
    return [...this.groups.appliedTo.values()].sort(byId).map((g) => this.toAppliedToGroup(g));
  }

  /** One AddressGroup by id (O(its members)), undefined when no rule names it any more. */
  addressGroup(id: string): AddressGroup | undefined {
    const g = this.groups.address.get(id);
    return g && this.toAddressGroup(g);
  }

  /** An AddressGroup's ipBlock CIDRs (they change with Group definitions, not with members). */
  addressGroupIpBlocks(id: string): string[] | undefined {
    return this.groups.address.get(id)?.ipBlocks;
  }

  /** One AppliedToGroup by id (O(its members)), undefined when nothing applies to it any more. */
  appliedToGroup(id: string): AppliedToGroup | undefined {
    const g = this.groups.appliedTo.get(id);
    return g && this.toAppliedToGroup(g);
  }

  /** One computed rule by id. */
  rule(id: string): ComputedRule | undefined {
    return this.computed.get(id);
  }

  /** One isolation by id. */
  isolation(id: string): ComputedIsolation | undefined {
    return this.isolationById.get(id);
  }

  rules(): ComputedRule[] {
    return [...this.sortedRuleList()];
  }

  private sortedRuleList(): readonly ComputedRule[] {
    if (!this.sortedRules) {
      this.sortedRules = [...this.computed.values()].sort((a, b) => compareRules(a as unknown as InternalRule, b as unknown as InternalRule));
      for (const id of this.nodeRuleParts.keys()) if (!this.computed.has(id)) this.nodeRuleParts.delete(id);
    }
    return this.sortedRules;
  }

  private toAddressGroup(g: GroupRecord): AddressGroup {
    return {
      id: g.id, peer: g.peer, members: sortedMembers(g), ipBlocks: g.ipBlocks,
      ...(g.namedPorts ? { namedPorts: g.namedPorts.map((k) => ({ protocol: k.slice(0, k.indexOf('/')), name: k.slice(k.indexOf('/') + 1) })) } : {}),
    };
  }

  private toAppliedToGroup(g: GroupRecord): AppliedToGroup {
    const members = sortedMembers(g);
    return { id: g.id, peer: g.peer, members, localMembers: members.filter((m) => this.isLocal(m)) };
  }

  private isLocal(m: GroupMember): boolean {
    return this.nodeName === undefined || m.nodeName === this.nodeName || (m.kind === 'node' && m.ref === this.nodeName);
  }

  // ---------------------------------------------------------------------------------------
  // policies

  /** Replaces one policy's isolations (acquiring the new AppliedToGroups before releasing the old). */
  setPolicyIsolations(policyKey: string, isolations: Isolation[]): void {
    const old = this.policyIsolations.get(policyKey) ?? [];
    const fresh: ComputedIsolation[] = isolations.map((iso) => {
      const groups: string[] = [];
      for (const p of uniquePeers(iso.appliedTo)) groups.push(this.acquire('appliedTo', p).id);
      return {
        id: `${iso.ref.kind}/${iso.ref.namespace ?? ''}/${iso.ref.name}/${iso.direction}`,
        ref: iso.ref, direction: iso.direction, appliedToGroups: [...new Set(groups)].sort(), ...(iso.logging ? { logging: iso.logging } : {}),
      };
    });
    for (const i of [...old, ...fresh]) {
      const map = this.touched?.isolations;
      if (map && !map.has(i.id)) map.set(i.id, this.isolationJson(i.id));
    }
    for (const i of old) {
      this.isolationById.delete(i.id);
      fileUnder(this.isolationsByGroup, i.appliedToGroups, i.id, false);
    }
    for (const i of fresh) {
      this.isolationById.set(i.id, i);
      fileUnder(this.isolationsByGroup, i.appliedToGroups, i.id, true);
    }
    if (old.length + fresh.length > 0) this.sortedIsolations = undefined;
    if (fresh.length > 0) this.policyIsolations.set(policyKey, fresh);
    else this.policyIsolations.delete(policyKey);
    for (const i of old) for (const id of i.appliedToGroups) this.release(this.groups.appliedTo.get(id)!);
  }

  isolations(): ComputedIsolation[] {
    return [...this.sortedIsolationList()];
  }

  private sortedIsolationList(): readonly ComputedIsolation[] {
    this.sortedIsolations ??= [...this.isolationById.values()].sort(byId);
    return this.sortedIsolations;
  }

  /** Isolations with local targets: what the node default-drops per direction. */
  nodeIsolations(): NodeIsolation[] {
    this.notHolding('node isolations');
    if (this.nodeIsolationCache) return this.nodeIsolationCache;
    const staleIds = new Set<string>();
    for (const g of this.staleIsolationGroups) for (const id of this.isolationsByGroup.get(g) ?? []) staleIds.add(id);
    this.staleIsolationGroups.clear();
    const last = this.lastNodeIsolations;
    if (last && last.from === this.sortedIsolations) {
      // The same isolations: only those naming a changed group can differ, each in its targets.
      let list = last.list;
      for (const id of staleIds) {
        const was = this.nodeIsolationParts.get(id) ?? null;
        const now = this.nodeIsolationOf(this.isolationById.get(id)!);
        if (sameNodeIsolation(was, now)) continue;
        this.nodeIsolationParts.set(id, now);
        if (list === last.list) list = [...list];
        const i = lowerBoundBy(list, id, (x) => x.id);
        const present = list[i]?.id === id;
        if (now) list.splice(i, present ? 1 : 0, now);
        else if (present) list.splice(i, 1);
      }
      last.list = list;
      this.nodeIsolationCache = list;
      return list;
    }
    for (const id of staleIds) this.nodeIsolationParts.delete(id);
    const out: NodeIsolation[] = [];
    const from = this.sortedIsolationList();
    for (const iso of from) {
      let part = this.nodeIsolationParts.get(iso.id);
      if (part === undefined) this.nodeIsolationParts.set(iso.id, (part = this.nodeIsolationOf(iso)));
      if (part) out.push(part);
    }
    this.lastNodeIsolations = { from, list: out };
    this.nodeIsolationCache = out;
    return out;
  }

  /** One isolation's local targets (null: none on this node): a function of the isolation and its AppliedToGroups. */
  private nodeIsolationOf(iso: ComputedIsolation): NodeIsolation | null {
    const targets = new Map<string, GroupMember>();
    for (const id of iso.appliedToGroups) for (const m of this.localMembers(this.groups.appliedTo.get(id)!)) if (this.isLocal(m)) targets.set(m.ref, m);
    if (targets.size === 0) return null;
    return {
      id: iso.id, ref: iso.ref, direction: iso.direction,
      targets: [...targets.values()].sort((a, b) => (a.ref < b.ref ? -1 : 1)).map((m): NodeTarget => ({ kind: m.kind === 'node' ? 'node' : 'pod', ref: m.ref, ips: m.ips })),
      ...(iso.logging ? { logging: iso.logging } : {}),
    };
  }

  setPolicyRules(policyKey: string, rules: InternalRule[]): void {
    const old = this.policyRules.get(policyKey) ?? [];
    if (rules.length > 0) this.policyRules.set(policyKey, rules);
    else this.policyRules.delete(policyKey);
    const fresh = new Map(rules.map((r) => [r.id, r]));
    for (const r of old) {
      const next = fresh.get(r.id);
      if (next && canonicalJson(next) === canonicalJson(r)) fresh.delete(r.id);
      else if (!next) this.setSourceRule(r.id, undefined);
    }
    for (const r of fresh.values()) this.setSourceRule(r.id, r);
  }

  private setSourceRule(id: string, rule: InternalRule | undefined): void {
    const old = this.sourceRules.get(id);
    const wasRelative = this.relativeRules.has(id);
    if (rule) this.sourceRules.set(id, rule);
    else this.sourceRules.delete(id);
    this.setFqdnEgress(id, rule);
    const relative = !!rule?.peers?.some((p) => p.kind === 'pods' && isRelative(p.namespaces));
    // A relative rule keeps its appliedTo groups alive even while it has no target namespace,
    // so it notices the first target appearing.
    if (relative) for (const p of uniquePeers(rule!.appliedTo)) this.acquire('appliedTo', p);
    if (relative) this.relativeRules.add(id);
    else this.relativeRules.delete(id);
    this.expand(id);
    if (wasRelative && old) for (const p of uniquePeers(old.appliedTo)) this.release(this.groups.appliedTo.get(groupId('appliedTo', p))!);
  }

  /** (Re)computes the internal rules of one IR rule, acquiring groups before releasing old ones. */
  private expand(ruleId: string): void {
    const rule = this.sourceRules.get(ruleId);
    const next = rule ? this.computeRules(rule) : [];
    const oldIds = this.expansions.get(ruleId) ?? [];
    const oldRules = oldIds.map((id) => this.computed.get(id)!);
    const nextIds = new Set(next.map((r) => r.id));
    for (const r of next) {
      const prev = this.computed.get(r.id);
      if (prev && canonicalJson(prev) === canonicalJson(r)) {
        // the groups acquired by computeRules for an unchanged rule are released again below
        this.releaseRuleGroups(r);
        continue;
      }
      this.touchRule(r.id);
      if (prev) this.indexRule(prev, false);
      this.computed.set(r.id, r);
      this.indexRule(r, true);
      if (prev) this.releaseRuleGroups(prev);
    }
    for (const prev of oldRules) {
      if (nextIds.has(prev.id)) continue;
      this.touchRule(prev.id);
      this.computed.delete(prev.id);
      this.indexRule(prev, false);
      this.releaseRuleGroups(prev);
    }
    if (next.length > 0) this.expansions.set(ruleId, next.map((r) => r.id));
    else this.expansions.delete(ruleId);
  }

  private computeRules(rule: InternalRule): ComputedRule[] {
    const appliedToGroups: string[] = [];
    for (const p of rule.appliedTo) {
      const id = groupId('appliedTo', p);
      if (!appliedToGroups.includes(id)) appliedToGroups.push(this.acquire('appliedTo', p).id);
    }
    const base = {
      ruleId: rule.id, ref: rule.ref, direction: rule.direction, action: rule.action, priority: rule.priority,
      appliedToGroups: [...new Set(appliedToGroups)].sort(), ports: rule.ports, ...(rule.logging ? { logging: rule.logging } : {}),
    };
    // Egress named ports resolve on the destination Pod: the rule holds, per peer, the group of
    // the Pods matching it that have one of the names (for any peer: all such Pods). Other
    // ports (numeric, or none) need the peers' full groups; a named-only rule needs nothing else,
    // so Pods without the names never concern it.
    const named = egressNamedPorts(rule.direction, rule.ports);
    const unnamed = !named || rule.ports.some((p) => typeof p.port !== 'string');
    const build = (id: string, peers: Peer[] | undefined, targetNamespace?: string): ComputedRule => {
      const addressGroups = new Set<string>();
      const blocks: string[] = [];
      const hold = (p: Peer, ports?: string[]) => {
        if (!addressGroups.has(groupId('address', p, ports))) addressGroups.add(this.acquire('address', p, ports).id);
      };
      for (const p of peers ?? []) {
        if (p.kind === 'ipBlock') blocks.push(...ipBlockCidrs(p.cidr, p.except));
        else if (unnamed) hold(p);
        if (named && NAMED_PORT_PEERS.has(p.kind)) hold(p, named);
      }
      if (named && peers === undefined) hold(ALL_PODS, named);
      return {
        id, ...base, ...(targetNamespace !== undefined ? { targetNamespace } : {}), anyPeer: peers === undefined,
        addressGroups: [...addressGroups].sort(), ipBlocks: [...new Set(blocks)].sort(),
      };
    };
    if (!this.relativeRules.has(rule.id)) {
      // each computed rule holds one reference per appliedTo group (released with the rule)
      return [build(rule.id, rule.peers)];
    }
    const namespaces = new Set<string>();
    for (const id of base.appliedToGroups) for (const m of this.groups.appliedTo.get(id)!.members.values()) if (m.kind === 'pod') namespaces.add(m.ref.split('/')[0]!);
    const out: ComputedRule[] = [];
    // every expansion holds its own reference to the appliedTo groups
    for (const ns of [...namespaces].sort()) {
      for (const id of base.appliedToGroups) this.groups.appliedTo.get(id)!.refs++;
      out.push(build(`${rule.id}@${ns}`, rule.peers!.flatMap((p) => this.concretize(p, ns)), ns));
    }
    for (const id of base.appliedToGroups) this.release(this.groups.appliedTo.get(id)!);
    return out;
  }

  /** A `self`/`sameLabels` peer as seen from targets in namespace `ns`. */
  private concretize(p: Peer, ns: string): Peer[] {
    if (p.kind !== 'pods') return [p];
    if (p.namespaces.kind === 'self') return [{ ...p, namespaces: { kind: 'names', names: [ns] } }];
    if (p.namespaces.kind === 'sameLabels') {
      const labels = this.env.cluster.namespaceLabels(ns);
      const matchLabels: Record<string, string> = Object.create(null);
      for (const k of p.namespaces.keys) {
        const value = labelValue(labels, k);
        if (value === undefined) return [];
        matchLabels[k] = value;
      }
      return [{ ...p, namespaces: { kind: 'selector', selector: { matchLabels } } }];
    }
    return [p];
  }

  private releaseRuleGroups(r: ComputedRule): void {
    for (const id of r.appliedToGroups) this.release(this.groups.appliedTo.get(id)!);
    for (const id of r.addressGroups) this.release(this.groups.address.get(id)!);
  }

  // ---------------------------------------------------------------------------------------
  // groups

  private acquire(kind: GroupKind, peer: Peer, namedPorts?: string[]): GroupRecord {
    const id = groupId(kind, peer, namedPorts);
    let g = this.groups[kind].get(id);
    if (g) {
      g.refs++;
      return g;
    }
    this.touchGroup({ id, kind });
    const namespaces = peer.kind === 'pods' && peer.namespaces.kind === 'names' ? new Set(peer.namespaces.names) : undefined;
    g = {
      id, kind, peer, matcher: compilePeer(peer, this.env, 0, kind === 'appliedTo'), ...(namespaces ? { namespaces } : {}), members: new Map(), ipBlocks: [], refs: 1,
      peerJson: canonicalJson(namedPorts ? { peer, namedPorts } : peer), ...(namedPorts ? { namedPorts, portFilter: new Set(namedPorts) } : {}),
      ...(kind === 'appliedTo' ? { local: new Map() } : {}), seq: this.groupSeq++,
    };
    const first = peer.kind === 'pods' ? Object.entries(peer.pods.matchLabels ?? {})[0] : undefined;
    if (first) g.requiredLabel = first;
    else if (peer.kind === 'pods' && peer.namespaces.kind === 'selector') {
      const ns = Object.entries(peer.namespaces.selector.matchLabels ?? {})[0];
      if (ns) g.requiredNamespaceLabel = ns;
    }
    this.groups[kind].set(id, g);
    if (namespaces) for (const ns of namespaces) { let s = this.scoped.get(ns); if (!s) this.scoped.set(ns, (s = new Set())); s.add(g); }
    else {
      this.unscoped.add(g);
      if (holdsPods(g)) {
        const k = podIndexKey(g);
        let s = this.podGroupsByLabel.get(k);
        if (!s) this.podGroupsByLabel.set(k, (s = new Set()));
        s.add(g);
      }
    }
    if (peer.kind === 'service' && kind === 'address') {
      const key = `${peer.namespace}/${peer.name}`;
      this.serviceGroups.set(key, id);
      this.endpoints?.watch(key);
    }
    this.recomputeGroup(g);
    return g;
  }

  private release(g: GroupRecord): void {
    if (--g.refs > 0) return;
    this.touchGroup(g);
    this.groups[g.kind].delete(g.id);
    if (g.peer.kind === 'service' && g.kind === 'address') {
      const key = `${g.peer.namespace}/${g.peer.name}`;
      if (this.serviceGroups.get(key) === g.id) this.serviceGroups.delete(key);
      this.endpoints?.unwatch(key);
    }
    if (g.kind === 'appliedTo') for (const key of g.members.keys()) this.unindexTarget(g, key);
    if (g.namespaces) for (const ns of g.namespaces) this.scoped.get(ns)?.delete(g);
    else {
      this.unscoped.delete(g);
      const k = podIndexKey(g);
      const s = this.podGroupsByLabel.get(k);
      if (s?.delete(g) && s.size === 0) this.podGroupsByLabel.delete(k);
    }
  }

  /** Full membership computation (new group, or a dependency it cannot track finely changed). */
  private recomputeGroup(g: GroupRecord): boolean {
    const members = new Map<string, GroupMember>();
    const cluster = this.env.cluster;
    if (holdsPods(g)) {
      const pods = g.namespaces ? [...g.namespaces].flatMap((ns) => [...(cluster.podsByNamespace.get(ns)?.values() ?? [])]) : [...cluster.pods.values()];
      for (const pod of pods) {
        const m = this.podMember(g, pod);
        if (m) members.set(`pod:${m.ref}`, m);
      }
    }
    if (NODES_CAPABLE.has(g.peer.kind) && !g.portFilter) {
      for (const node of cluster.nodes.values()) {
        const m = this.nodeMember(g, node);
        if (m) members.set(`node:${m.ref}`, m);
      }
    }
    if (g.peer.kind === 'service' && !g.portFilter) {
      const svc = cluster.services.get(`${g.peer.namespace}/${g.peer.name}`);
      if (svc) members.set(`service:${svc.namespace}/${svc.name}`, {
        kind: 'service', ref: `${svc.namespace}/${svc.name}`, ips: [...svc.clusterIPs],
        ports: svc.ports.map((p) => ({ ...(p.name ? { name: p.name } : {}), containerPort: p.port, protocol: p.protocol })),
      });
    }
    if (g.peer.kind === 'fqdn' && !g.portFilter) {
      for (const { name, ips } of this.fqdnMembers(g.peer.pattern)) members.set(`fqdn:${name}`, fqdnMember(name, ips));
    }
    const ipBlocks = g.peer.kind === 'group' && g.kind === 'address' && !g.portFilter ? this.groupIpBlocks(g.peer.namespace, g.peer.name) : [];
    const changed = !sameMembers(members, g.members) || ipBlocks.join(',') !== g.ipBlocks.join(',');
    if (!changed) return false;
    this.touchGroup(g);
    if (g.kind === 'appliedTo') {
      for (const key of g.members.keys()) if (!members.has(key)) this.unindexTarget(g, key);
      for (const key of members.keys()) this.indexTarget(g, key);
    }
    g.members = members;
    if (g.local) {
      const had = g.local.size > 0;
      g.local = new Map();
      for (const [key, m] of members) if (this.isLocal(m)) g.local.set(key, m);
      if (had !== g.local.size > 0) this.localTargetsFlipped(g);
    }
    g.peerIps = undefined;
    g.ipBlocks = ipBlocks;
    return true;
  }

  private groupIpBlocks(namespace: string | undefined, name: string): string[] {
    const def = this.env.group(namespace, name);
    const members = def ? realizableMembers(def, this.env, false) : undefined;
    const out = new Set<string>();
    for (const m of members ?? []) if (m.kind === 'ipBlock') for (const c of ipBlockCidrs(m.cidr, m.except)) out.add(c);
    return [...out].sort();
  }

  private podMember(g: GroupRecord, pod: PodInfo): GroupMember | undefined {
    // hostNetwork Pods have their Node's address: they are Node traffic, not Pod group members.
    if (pod.hostNetwork || !holdsPods(g)) return undefined;
    if (g.portFilter && !hasNamedPort(pod, g.portFilter)) return undefined;
    // a dual-stack Pod is a member when any of its addresses is (an ipBlock of either family)
    const ctx = { target: pod };
    if (!podEndpoints(pod).some((ep) => g.matcher(ep, ctx))) return undefined;
    // one member object per Pod version, so unchanged members compare by identity
    return this.memberFor(pod);
  }

  private nodeMember(g: GroupRecord, node: NodeInfo): GroupMember | undefined {
    if (!NODES_CAPABLE.has(g.peer.kind) || g.portFilter) return undefined;
    const target: PodInfo = { namespace: '', name: '', labels: {}, ips: [], hostNetwork: true, serviceAccount: '', ports: [] };
    const endpoints = (node.ips.length > 0 ? node.ips : ['']).map((ip): Endpoint => ({ kind: 'host', ip, ipNum: ipv4ToNumber(ip), node, nodeName: node.name }));
    if (!endpoints.some((ep) => g.matcher(ep, { target }))) return undefined;
    return { kind: 'node', ref: node.name, ips: [...node.ips], ports: [] };
  }

  /** Puts `member` (undefined: none) under `key`, recording the change; false when it was already so. */
  private updateMember(g: GroupRecord, key: string, member: GroupMember | undefined): boolean {
    if (sameMember(g.members.get(key), member)) return false;
    this.touchGroup(g);
    this.setMember(g, key, member);
    return true;
  }

  private setMember(g: GroupRecord, key: string, member: GroupMember | undefined): void {
    const before = this.touched?.[g.kind].get(g.id);
    if (before && before.members === g.members && !before.changed.has(key)) before.changed.set(key, g.members.get(key));
    g.peerIps?.update(key, g.members.get(key), member);
    if (member) {
      g.members.set(key, member);
      if (g.kind === 'appliedTo') this.indexTarget(g, key);
    } else {
      g.members.delete(key);
      if (g.kind === 'appliedTo') this.unindexTarget(g, key);
    }
    if (g.local) {
      const had = g.local.size > 0;
      if (member && this.isLocal(member)) g.local.set(key, member);
      else g.local.delete(key);
      if (had !== g.local.size > 0) this.localTargetsFlipped(g);
    }
  }

  private indexTarget(g: GroupRecord, key: string): void {
    let set = this.targetIndex.get(key);
    if (!set) this.targetIndex.set(key, (set = new Set()));
    if (!set.has(g.id)) {
      set.add(g.id);
      this.changedTargets.add(key);
    }
  }

  private unindexTarget(g: GroupRecord, key: string): void {
    const set = this.targetIndex.get(key);
    if (!set?.delete(g.id)) return;
    if (set.size === 0) this.targetIndex.delete(key);
    this.changedTargets.add(key);
  }

  /** Ids of the AppliedToGroups holding a Pod ("ns/name"): the evaluator's index of rules by target. */
  appliedToGroupIdsOf(podKey: string): ReadonlySet<string> {
    return this.targetIndex.get(`pod:${podKey}`) ?? EMPTY;
  }

  /** Pods ("ns/name") whose AppliedToGroup memberships changed since the last call. */
  takeChangedTargets(): string[] {
    const out = [...this.changedTargets].filter((k) => k.startsWith('pod:')).map((k) => k.slice(4));
    this.changedTargets.clear();
    return out;
  }

  /**
   * The groups a change of Pod `old` → `pod` in `namespace` may concern: the unscoped groups holding
   * Pods that require none of its labels or one it has (before or after), or a label its namespace
   * has, in creation order, then the groups confined to its namespace. (A Pod never changes
   * namespace, and a namespace's relabel updates every group at once: namespaceChanged.)
   */
  private candidateGroups(namespace: string, old: PodInfo | undefined, pod: PodInfo | undefined): GroupRecord[] {
    const found = new Set<GroupRecord>(this.podGroupsByLabel.get('') ?? EMPTY_GROUPS);
    for (const p of [old, pod]) {
      if (!p) continue;
      for (const [k, v] of Object.entries(p.labels)) for (const g of this.podGroupsByLabel.get(labelIndexKey(k, v)) ?? EMPTY_GROUPS) found.add(g);
    }
    for (const [k, v] of Object.entries(this.env.cluster.namespaceLabels(namespace))) {
      for (const g of this.podGroupsByLabel.get(namespaceLabelIndexKey(k, v)) ?? EMPTY_GROUPS) found.add(g);
    }
    const out = [...found].sort((a, b) => a.seq - b.seq);
    for (const g of this.scoped.get(namespace) ?? EMPTY_GROUPS) out.push(g);
    return out;
  }

  /** The members of an AppliedToGroup on this node. */
  private localMembers(g: GroupRecord): Iterable<GroupMember> {
    return (g.local ?? g.members).values();
  }

  // ---------------------------------------------------------------------------------------
  // cluster events

  podChanged(old: PodInfo | undefined, pod: PodInfo | undefined): void {
    const ns = (pod ?? old)!.namespace;
    const key = `pod:${podKey((pod ?? old)!)}`;
    const changedAppliedTo = new Set<string>();
    for (const g of this.candidateGroups(ns, old, pod)) {
      if (!holdsPods(g)) continue;
      // A selector requiring label k=v cannot match a Pod that has it neither before nor after.
      const req = g.requiredLabel;
      if (req && (!old || labelValue(old.labels, req[0]) !== req[1]) && (!pod || labelValue(pod.labels, req[0]) !== req[1])) continue;
      // Nor can a named-port group hold a Pod without the ports before and after.
      if (g.portFilter && !hasNamedPort(old, g.portFilter) && !hasNamedPort(pod, g.portFilter)) continue;
      if (g.peer.kind === 'serviceRef' || (g.peer.kind === 'group' && this.groupUsesServices(g))) {
        // endpoints may change for Pods other than this one (EndpointSlice by IP): recompute
        if (this.recomputeGroup(g) && g.kind === 'appliedTo') changedAppliedTo.add(g.id);
        continue;
      }
      const member = pod ? this.podMember(g, pod) : undefined;
      // A Pod new to the cluster is in no group yet: only those it joins change. Most candidates of
      // a new Pod are not, and looking it up in each (maps of up to the whole cluster's Pods) was
      // an eighth of the controller's intake of its initial Pods.
      if (!old && !member) continue;
      if (this.updateMember(g, key, member) && g.kind === 'appliedTo') changedAppliedTo.add(g.id);
    }
    this.reexpandRelative((r) => r.appliedTo.some((p) => changedAppliedTo.has(groupId('appliedTo', p))));
  }

  namespaceChanged(name: string): void {
    const pods = [...(this.env.cluster.podsByNamespace.get(name)?.values() ?? [])];
    for (const g of this.unscoped) {
      if (!holdsPods(g)) continue;
      for (const pod of pods) this.updateMember(g, `pod:${podKey(pod)}`, this.podMember(g, pod));
    }
    // Every relative rule is re-expanded (not only those whose AppliedToGroups changed):
    // sameLabels peers depend on namespace labels; self peers on which namespaces hold targets.
    this.reexpandRelative(() => true);
  }

  nodeChanged(_old: NodeInfo | undefined, node: NodeInfo | undefined): void {
    const name = (node ?? _old)!.name;
    for (const g of this.unscoped) {
      if (!NODES_CAPABLE.has(g.peer.kind)) continue;
      this.updateMember(g, `node:${name}`, node ? this.nodeMember(g, node) : undefined);
    }
  }

  servicesChanged(): void {
    for (const g of this.unscoped) if (g.peer.kind === 'serviceRef' || g.peer.kind === 'service' || g.peer.kind === 'group') this.recomputeGroup(g);
    this.reexpandRelative(() => true);
  }

  groupDefsChanged(): void {
    for (const g of this.unscoped) if (g.peer.kind === 'group') {
      g.matcher = compilePeer(g.peer, this.env, 0, g.kind === 'appliedTo');
      this.recomputeGroup(g);
    }
    this.reexpandRelative(() => true);
  }

  private setFqdnEgress(id: string, rule: InternalRule | undefined): void {
    const patterns = rule?.direction === 'Egress' ? (rule.peers ?? []).flatMap((p) => (p.kind === 'fqdn' ? [canonicalDnsName(p.pattern)] : [])) : [];
    const old = this.fqdnEgress.get(id);
    if (patterns.length > 0) this.fqdnEgress.set(id, patterns);
    else this.fqdnEgress.delete(id);
    if ((old ?? []).join('\n') !== patterns.join('\n')) this.fqdnPatternCache = undefined;
  }

  /**
   * The source (IR) egress rules with an fqdn peer, rule id → its patterns: the one source of fqdn
   * rules for DNS interception (whose Pods) and DNS learning (which names).
   */
  fqdnEgressRules(): ReadonlyMap<string, readonly string[]> {
    return this.fqdnEgress;
  }

  /** Every pattern of `fqdnEgressRules()` as one matcher (rebuilt only when a pattern comes or goes). */
  fqdnPatterns(): FqdnPatternSet {
    this.fqdnPatternCache ??= new FqdnPatternSet([...this.fqdnEgress.values()].flat());
    return this.fqdnPatternCache;
  }

  fqdnChanged(): void {
    for (const g of this.unscoped) if (g.peer.kind === 'fqdn') this.recomputeGroup(g);
  }

  private groupUsesServices(g: GroupRecord): boolean {
    if (g.peer.kind !== 'group') return false;
    const def = this.env.group(g.peer.namespace, g.peer.name);
    return !!def && def.members.some((m) => m.kind === 'serviceRef' || m.kind === 'group');
  }

  private reexpandRelative(pred: (r: InternalRule) => boolean): void {
    for (const id of [...this.relativeRules].sort()) {
      const r = this.sourceRules.get(id);
      if (r && pred(r)) this.expand(id);
    }
  }

  // ---------------------------------------------------------------------------------------
  // node rule set

  nodeRuleSet(): NodeRule[] {
    this.notHolding('node rules');
    if (this.nodeRuleCache) return this.nodeRuleCache;
    const groups: NodeRuleGroups = {
      appliedToMembers: (id) => [...this.localMembers(this.groups.appliedTo.get(id)!)],
      addressGroup: (id) => {
        const g = this.groups.address.get(id)!;
        g.peerIps ??= new PeerIps(g.members);
        return { members: () => [...g.members.values()], ips: g.peerIps.sorted, services: [...g.peerIps.services.values()], ipBlocks: g.ipBlocks, namedPorts: g.portFilter !== undefined };
      },
      isLocal: (m) => this.isLocal(m),
    };
    const last = this.lastNodeRules;
    if (last && last.from === this.sortedRules) {
      // The same rules in the same order: only the rules naming a changed group can differ.
      const stale = new Set(this.localityChanged);
      for (const g of this.staleGroups) for (const id of this.localRulesByGroup.get(g) ?? []) stale.add(id);
      for (const id of stale) {
        const order = last.order.get(id);
        if (order === undefined) continue;
        const rule = last.from[order]!;
        // Without a local target a rule has no node rules (nodeRulesOf), whatever its peers: a
        // group named by many rules of other nodes costs a look at their targets only.
        const rules = rule.appliedToGroups.some((g) => this.groups.appliedTo.get(g)!.local?.size !== 0) ? nodeRulesOf(rule, order, groups) : NO_NODE_RULES;
        this.nodeRuleParts.set(id, rules);
        const i = lowerBoundOrder(last.parts, order);
        const present = last.parts[i]?.order === order;
        if (rules.length > 0) last.parts.splice(i, present ? 1 : 0, { order, rules });
        else if (present) last.parts.splice(i, 1);
      }
      this.staleGroups.clear();
      this.localityChanged.clear();
    } else {
      this.localityChanged.clear();
      this.dropStaleNodeRules();
      const from = this.sortedRuleList();
      const order = new Map<string, number>();
      const parts: { order: number; rules: NodeRule[] }[] = [];
      from.forEach((r, i) => {
        order.set(r.id, i);
        let rules = this.nodeRuleParts.get(r.id);
        if (!rules) this.nodeRuleParts.set(r.id, (rules = nodeRulesOf(r, i, groups)));
        else if (rules.length > 0 && rules[0]!.order !== i) this.nodeRuleParts.set(r.id, (rules = rules.map((n) => ({ ...n, order: i }))));
        if (rules.length > 0) parts.push({ order: i, rules });
      });
      this.lastNodeRules = { from, order, parts };
    }
    const out: NodeRule[] = [];
    for (const p of this.lastNodeRules!.parts) for (const n of p.rules) out.push(n);
    this.nodeRuleCache = out;
    return out;
  }

  /** The node's rules and isolations are kept up to date by each change's end: a hold has none yet. */
  private notHolding(what: string): void {
    if (this.holdingChanges) throw new Error(`${what} are not computed while changes are held (holdChanges)`);
  }

  private memberFor(pod: PodInfo): GroupMember {
    let m = this.podMembers.get(pod);
    if (!m) this.podMembers.set(pod, (m = { kind: 'pod', ref: podKey(pod), ...(pod.nodeName ? { nodeName: pod.nodeName } : {}), ips: [...pod.ips], ports: pod.ports }));
    return m;
  }

}

/** Same peer term → same group id, whichever policy uses it. */
export function groupId(kind: GroupKind, peer: Peer, namedPorts?: string[]): string {
  return `${kind === 'address' ? 'ag' : 'atg'}-${stableHash(canonicalJson(namedPorts ? { peer, namedPorts } : peer))}`;
}

function uniquePeers(peers: Peer[]): Peer[] {
  const seen = new Map<string, Peer>();
  for (const p of peers) seen.set(canonicalJson(p), p);
  return [...seen.values()];
}

function byId(a: { id: string }, b: { id: string }): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function sortedMembers(g: GroupRecord): GroupMember[] {
  return [...g.members.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, m]) => m);
}

/** ipBlock as non-overlapping CIDR text. */
export function ipBlockCidrs(cidr: string, except: string[]): string[] {
  const base = parseCidr(cidr);
  if (!base) return [];
  return subtractCidrs(base, except.map(parseCidr).filter((c): c is NonNullable<typeof c> => !!c)).map(formatCidr);
}

