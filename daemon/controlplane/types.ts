/**
 * The objects of the `controlplane.sluice.io` API: what the controller computes once for the
 * whole cluster and serves to each agent, reduced to that agent's Node (its span). They follow the
 * seed's internal objects (Antrea's controlplane API):
 *
 * - NetworkPolicy: one source policy's computed rules and isolations, with the AppliedToGroups and
 *   AddressGroups they name. Sent to the Nodes where one of its AppliedToGroups has a member.
 * - AppliedToGroup: the targets of one appliedTo term. A Node receives only its own members, and
 *   only the groups with a member on it.
 * - AddressGroup: the members of one peer term (every member, cluster-wide: they are the addresses
 *   a rule matches), sent to the Nodes of the policies naming it; a membership change is sent as a
 *   patch of the members that came, changed or went, not as the whole group.
 *
 * Every object is plain JSON: it is what the watch stream carries.
 */
import type { ComputedIsolation, ComputedRule } from '../policy/internal.js';
import type { KeyedList } from '../policy/sorted-list.js';
import type { GroupMember } from '../policy/types.js';

/**
 * An AddressGroup's members: an array on the wire and in an agent; in the controller a KeyedList,
 * so a member that comes or goes costs one chunk of a group of every Pod, not a copy of it (it is
 * written as an array).
 */
export type MemberList = readonly GroupMember[] | KeyedList<GroupMember>;

export const CONTROLPLANE_GROUP = 'controlplane.sluice.io';
export const CONTROLPLANE_VERSION = 'v1beta1';
export const CONTROLPLANE_API_VERSION = `${CONTROLPLANE_GROUP}/${CONTROLPLANE_VERSION}`;

export type ControlPlaneKind = 'NetworkPolicy' | 'AppliedToGroup' | 'AddressGroup';

export const CONTROLPLANE_KINDS: readonly ControlPlaneKind[] = ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'];

/**
 * Response header of every list and watch: the serving store's identity. Each controller replica
 * (and each restart) numbers its own versions, so a version is meaningful only to the store that
 * issued it: a watch answered by another store is treated as Gone, and an agent whose lists come
 * from a new store forgets what it knew of the old one's versions.
 */
export const STORE_HEADER = 'x-controlplane-store';

/**
 * Stamped by the controller on every object it serves and every watch event: the versions the
 * receiving Node's whole view had, per kind, at the end of the controller change that produced it
 * ("NetworkPolicy=<rv>,AppliedToGroup=<rv>,AddressGroup=<rv>"; each the resourceVersion of that
 * kind's last change in the Node's view, 0 when none). One change reaches a Node on up to three
 * streams; an agent that has received at least these versions of every kind holds the whole change
 * and can enforce it without enforcing a policy apart from the groups it names.
 */
export const VIEW_VERSIONS_ANNOTATION = 'controlplane.sluice.io/view-versions';

/** A Node's view versions, per kind. */
export type ViewVersions = Record<ControlPlaneKind, bigint>;

export function formatViewVersions(v: Record<ControlPlaneKind, bigint | number>): string {
  // CONTROLPLANE_KINDS's order, written out: the controller formats one per watch of a change.
  return `NetworkPolicy=${v.NetworkPolicy},AppliedToGroup=${v.AppliedToGroup},AddressGroup=${v.AddressGroup}`;
}

/** Versions as decimal strings per kind (the realization answer's and a realized-views report's form); viewVersionsOf reads them back. */
export function viewVersionStrings(v: Record<ControlPlaneKind, bigint | number>): Record<ControlPlaneKind, string> {
  return { NetworkPolicy: String(v.NetworkPolicy), AppliedToGroup: String(v.AppliedToGroup), AddressGroup: String(v.AddressGroup) };
}

/** `have` is at least `need` in every kind: a view at `have` holds everything one at `need` does. */
export function viewCovers(have: ViewVersions, need: ViewVersions): boolean {
  return CONTROLPLANE_KINDS.every((k) => have[k] >= need[k]);
}

/** Versions given as decimal strings per kind (the realization answer's form); undefined when one is missing or not a number. */
export function viewVersionsOf(r: Partial<Record<string, string>>): ViewVersions | undefined {
  const out: Partial<ViewVersions> = {};
  for (const k of CONTROLPLANE_KINDS) {
    const v = r[k];
    if (v === undefined || !/^[0-9]{1,30}$/.test(v)) return undefined;
    out[k] = BigInt(v);
  }
  return out as ViewVersions;
}

/** The versions of an annotation's text; undefined when it is not one. */
export function parseViewVersions(text: string): ViewVersions | undefined {
  const out: Partial<ViewVersions> = {};
  for (const part of text.split(',')) {
    const m = /^(NetworkPolicy|AppliedToGroup|AddressGroup)=([0-9]{1,30})$/.exec(part.trim());
    if (!m) return undefined;
    out[m[1] as ControlPlaneKind] = BigInt(m[2]!);
  }
  return CONTROLPLANE_KINDS.every((k) => out[k] !== undefined) ? (out as ViewVersions) : undefined;
}

/** The resource (plural) of each kind, as in the API's paths. */
export const CONTROLPLANE_RESOURCES: Record<ControlPlaneKind, string> = {
  NetworkPolicy: 'networkpolicies',
  AppliedToGroup: 'appliedtogroups',
  AddressGroup: 'addressgroups',
};

export interface ControlPlaneMeta {
  name: string;
  /** Set on objects the API returns (the store's version when the object last changed). */
  resourceVersion?: string;
  /** Set on objects the API returns: VIEW_VERSIONS_ANNOTATION. */
  annotations?: Record<string, string>;
}

/** Where a toServices peer's traffic goes after DNAT: the endpoints of one ClusterIP/protocol/port. */
export interface ServiceBackendEntry {
  clusterIP: string;
  protocol: string;
  port: number;
  backends: { ip: string; port: number }[];
}

export interface ControlPlaneNetworkPolicy {
  apiVersion: typeof CONTROLPLANE_API_VERSION;
  kind: 'NetworkPolicy';
  /** The name is the source policy's key ("<kind>/<namespace>/<name>"), made URL-safe by the store. */
  metadata: ControlPlaneMeta;
  /** The source policy's key, "<kind>/<namespace>/<name>" (namespace empty for cluster-scoped kinds). */
  sourceKey: string;
  /** Its computed rules, sorted by id. */
  rules: ComputedRule[];
  /** Its Kubernetes NetworkPolicy isolations, sorted by id. */
  isolations: ComputedIsolation[];
}

export interface ControlPlaneAppliedToGroup {
  apiVersion: typeof CONTROLPLANE_API_VERSION;
  kind: 'AppliedToGroup';
  metadata: ControlPlaneMeta;
  /** The members on the receiving Node, sorted by ref. */
  members: GroupMember[];
}

export interface ControlPlaneAddressGroup {
  apiVersion: typeof CONTROLPLANE_API_VERSION;
  kind: 'AddressGroup';
  metadata: ControlPlaneMeta;
  /** Every member, sorted by memberKey (see MemberList). */
  members: MemberList;
  /** Non-overlapping CIDRs a Group/ClusterGroup contributes through ipBlock members. */
  ipBlocks: string[];
  /** Set on the groups of egress rules with named ports (see policy/internal.ts AddressGroup.namedPorts). */
  namedPorts?: { protocol: string; name: string }[];
  /** For groups with Service members (toServices peers): where each ClusterIP/port sends its traffic. */
  serviceBackends?: ServiceBackendEntry[];
  /**
   * The DNS name patterns of an FQDN peer's group. The controller sees no DNS answers and sends
   * the group without members; each agent adds the addresses its own Pods' DNS answers gave
   * (NodePolicyState.setFqdnAddresses).
   */
  fqdn?: string[];
}

/** A membership change of one AddressGroup: the members that came or changed, the refs of those that went. */
export interface ControlPlaneAddressGroupPatch {
  apiVersion: typeof CONTROLPLANE_API_VERSION;
  kind: 'AddressGroupPatch';
  metadata: ControlPlaneMeta;
  /** Members added or changed (a member is keyed by `${kind}:${ref}`). */
  upserted: GroupMember[];
  /** Keys (`${kind}:${ref}`) of the members that went. */
  removed: string[];
}

export type ControlPlaneObject = ControlPlaneNetworkPolicy | ControlPlaneAppliedToGroup | ControlPlaneAddressGroup;

/**
 * One event of a Node's view, as the watch stream carries it. A `MODIFIED` event of an
 * AddressGroup carries either the whole group or an AddressGroupPatch; `BOOKMARK` carries only
 * a resourceVersion.
 */
export type ControlPlaneEvent =
  | { type: 'ADDED' | 'MODIFIED'; object: ControlPlaneObject }
  | { type: 'MODIFIED'; object: ControlPlaneAddressGroupPatch }
  | { type: 'DELETED'; object: { apiVersion: typeof CONTROLPLANE_API_VERSION; kind: ControlPlaneKind; metadata: ControlPlaneMeta } }
  | { type: 'BOOKMARK'; object: { apiVersion: typeof CONTROLPLANE_API_VERSION; kind: ControlPlaneKind; metadata: ControlPlaneMeta } };

/** The key a group member is filed under in a group (and named by in a patch's `removed`). */
export function memberKey(m: Pick<GroupMember, 'kind' | 'ref'>): string {
  return `${m.kind}:${m.ref}`;
}

/**
 * The controller's answer to a new Pod's realization question: the Nodes where the Pod matters —
 * its own (its rules through its AppliedToGroups) and those whose rules name it as a peer (with
 * the addresses of their Pods those rules select) — each with the versions of its view (as
 * `ControlPlaneStore.lastChanges`) at which it holds the Pod.
 */
export interface PodRealization {
  /** The Pod's own Node. */
  node: string;
  /**
   * `confirmed`: the Node's agent reported to the controller that its bridge enforces its view at
   * these versions or later (POST /realized-views), so nobody need ask it; its `podIps` are left
   * out then (nothing is guarded from it).
   */
  nodes: { name: string; address?: string; podIps: string[]; versions: Record<ControlPlaneKind, string>; confirmed?: boolean }[];
}

/**
 * The controller's path where an agent reports, on one long request, the view versions its bridge
 * enforces: a line of JSON (`RealizedViewReport`) each time they advance.
 */
export const REALIZED_VIEWS_PATH = '/realized-views';

/** One line of a realized-views report: the store that issued the versions, and the versions per kind as decimal strings. */
export interface RealizedViewReport {
  store: string;
  versions: Record<ControlPlaneKind, string>;
}

/**
 * Where a traceflow destination leads, as the controller sees the cluster (GET /trace-destination,
 * asked by an agent that follows it): its address, the other Nodes whose bridge the traced packet
 * may reach once it leaves the asking Node, or why no sluice bridge decides after that Node.
 */
export interface TraceDestination {
  ip: string;
  /** The destination Pod's Node; for a Service, its endpoints' Nodes (the asking Node left out), with an address of each. */
  nodes: TraceNode[];
  /** Set when no sluice bridge decides once the packet has left the Node (a Node's host address, an address outside the cluster), and why. */
  beyond?: string | undefined;
  /** Set when where the address leads is not known, and why. */
  unknown?: string | undefined;
}

/**
 * A trace the controller hands the agent of the source Pod's Node (`GET /traceflow-tasks`): what a
 * user asked with `kubectl sluice traceflow`, as the agent's GET /traceflow query.
 */
export interface TraceTask {
  id: string;
  from: string;
  to: string;
  protocol: string;
  port?: number | undefined;
  family?: number | undefined;
}

export interface TraceNode {
  name: string;
  /** Where its agent listens (an InternalIP); undefined when the Node has none. */
  address?: string | undefined;
}
