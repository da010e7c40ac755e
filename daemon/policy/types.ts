/**
 * The policy engine's shared vocabulary: Kubernetes input objects (as plain JSON), the
 * kind-independent intermediate representation (IR) every policy kind is normalized into,
 * and the probe/verdict shapes shared by `sluicectl simulate` and `sluice-lab probe`.
 *
 * Pure types only: no I/O, no runtime code.
 */

// ---------------------------------------------------------------------------------------
// Kubernetes objects (only the fields sluice reads; everything else passes through).

export interface ObjectMeta {
  name: string;
  namespace?: string | undefined | undefined;
  uid?: string | undefined;
  resourceVersion?: string | undefined;
  generation?: number | undefined;
  labels?: Record<string, string> | undefined;
  annotations?: Record<string, string> | undefined;
  creationTimestamp?: string | undefined;
  /** Set when the object is being deleted (a Pod: terminating, its grace period running). */
  deletionTimestamp?: string | undefined;
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec?: any;
  status?: any;
  [extra: string]: unknown;
}

export type LabelSelectorOperator = 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
export interface LabelSelectorRequirement {
  key: string;
  operator: LabelSelectorOperator;
  values?: string[];
}
/** A Kubernetes LabelSelector. `{}` selects everything; `undefined` where a field is absent. */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: LabelSelectorRequirement[];
}

export type Protocol = 'TCP' | 'UDP' | 'SCTP' | 'ICMP' | 'IGMP';
export type Direction = 'Ingress' | 'Egress';

// ---------------------------------------------------------------------------------------
// Cluster view used for evaluation (derived from Pods/Namespaces/Nodes/Services/...).

export interface ContainerPort {
  name?: string;
  containerPort: number;
  protocol: 'TCP' | 'UDP' | 'SCTP';
}

export interface PodInfo {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  nodeName?: string;
  ips: string[];
  hostNetwork: boolean;
  serviceAccount: string;
  ports: ContainerPort[];
}

export interface NamespaceInfo {
  name: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export interface NodeInfo {
  name: string;
  labels: Record<string, string>;
  /** InternalIP addresses (and any other Node addresses a nodeSelector peer covers). */
  ips: string[];
}

export interface ServicePortInfo {
  name?: string;
  protocol: 'TCP' | 'UDP' | 'SCTP';
  port: number;
  /** number, or a named container port */
  targetPort: number | string;
}

export interface ServiceInfo {
  namespace: string;
  name: string;
  clusterIPs: string[];
  selector?: Record<string, string>;
  ports: ServicePortInfo[];
}

// ---------------------------------------------------------------------------------------
// Intermediate representation: every policy kind normalizes into these.

/** Which namespaces a pod peer or target term covers. */
export type NamespaceMatch =
  | { kind: 'all' }
  | { kind: 'names'; names: string[] }
  | { kind: 'selector'; selector: LabelSelector }
  /** Antrea `namespaces.match: Self` / ANP `namespaces` same-namespace semantics: the peer's
   *  namespace equals the namespace of the target the rule is evaluated for. */
  | { kind: 'self' }
  /** Antrea `namespaces.sameLabels`: the peer's namespace has the same values as the target's
   *  namespace for every listed key (and has all the keys). */
  | { kind: 'sameLabels'; keys: string[] };

/** A set of network endpoints. Used for rule peers and for rule targets (appliedTo). */
export type Peer =
  | {
      kind: 'pods';
      namespaces: NamespaceMatch;
      /** `{}` = every Pod in the matched namespaces. */
      pods: LabelSelector;
      /** Only Pods running with this ServiceAccount (Antrea `serviceAccount` peer). */
      serviceAccount?: { namespace: string; name: string };
    }
  /** CIDR minus the excepted CIDRs. Matches any IP, Pod or not (like Kubernetes ipBlock). */
  | { kind: 'ipBlock'; cidr: string; except: string[] }
  /** Node addresses of the Nodes matching the selector. */
  | { kind: 'nodes'; selector: LabelSelector }
  /** Egress-only: destinations resolved from DNS names (exact, or with `*` wildcard). */
  | { kind: 'fqdn'; pattern: string }
  /** An Antrea ClusterGroup (namespace undefined) or Group; resolved through GroupDef. */
  | { kind: 'group'; namespace?: string | undefined; name: string }
  /** The Pods behind a Service (Antrea group serviceReference), resolved against Services. */
  | { kind: 'serviceRef'; namespace: string; name: string }
  /** Egress-only Antrea `toServices`: matches the Service's ClusterIP(s) and ports. */
  | { kind: 'service'; namespace: string; name: string };

/** A protocol/port condition. An empty list of these on a rule means "any traffic". */
export interface PortMatch {
  protocol: Protocol;
  /** Destination port: number or a named container port of the destination Pod. */
  port?: number | string;
  endPort?: number;
  sourcePort?: number;
  sourceEndPort?: number;
  icmpType?: number;
  icmpCode?: number;
  igmpType?: number;
  groupAddress?: string;
}

export type Action = 'Allow' | 'Drop' | 'Reject' | 'Pass';

export type PolicyKind =
  | 'NetworkPolicy'                 // networking.k8s.io/v1
  | 'AntreaClusterNetworkPolicy'    // crd.antrea.io ClusterNetworkPolicy
  | 'AntreaNetworkPolicy'           // crd.antrea.io NetworkPolicy
  | 'AdminNetworkPolicy'            // policy.networking.k8s.io/v1alpha1
  | 'BaselineAdminNetworkPolicy'    // policy.networking.k8s.io/v1alpha1
  | 'ClusterNetworkPolicy';         // policy.networking.k8s.io/v1alpha2

/**
 * Evaluation stages, in order, for each direction:
 *  0 = Antrea tiers other than baseline (ordered by tier priority), with v1alpha2
 *      ClusterNetworkPolicy tier Admin placed at tier priority 220 and AdminNetworkPolicy at 251;
 *  1 = Kubernetes NetworkPolicy (allow-lists + isolation);
 *  2 = Antrea baseline tier (253), then BaselineAdminNetworkPolicy / ClusterNetworkPolicy tier
 *      Baseline (254);
 * then the default: allow.
 * `Pass` in stage 0 jumps to stage 1. (Pass in stage 2, where a kind allows it, falls to the default.)
 */
export type Stage = 0 | 1 | 2;

export interface RulePriority {
  stage: Stage;
  /** Tier priority (Antrea Tier.spec.priority; 220 for CNP-Admin, 251 for ANP, 253 baseline, 254 BANP/CNP-Baseline). */
  tier: number;
  /** Policy priority (Antrea float priority, ANP/CNP integer priority; 0 for kinds without one). Lower first. */
  policy: number;
  /** Rule index within the policy and direction. Lower first. */
  rule: number;
  /** Deterministic tie-break between distinct policies at equal (stage, tier, policy): "<kind>/<ns>/<name>". */
  tieBreak: string;
}

export interface RuleRef {
  kind: PolicyKind;
  namespace?: string | undefined;
  name: string;
  /** Rule name where the kind has one, else "<direction>-<index>" (e.g. "ingress-0"). */
  rule: string;
  /** Tier name for Antrea kinds ("application", ...); "Admin"/"Baseline" for ANP/BANP/CNP; undefined for K8s NP. */
  tier?: string;
}

export interface InternalRule {
  /** Stable id derived from ref + direction + index; identical inputs give identical ids. */
  id: string;
  ref: RuleRef;
  direction: Direction;
  action: Action;
  priority: RulePriority;
  /** Targets: the rule applies to traffic leaving (Egress) / entering (Ingress) these endpoints. */
  appliedTo: Peer[];
  /** The other side. `undefined` = any peer; `[]` = no peer (matches nothing). */
  peers?: Peer[];
  /** `[]` = any protocol and port. */
  ports: PortMatch[];
  logging?: { enabled: boolean; label?: string };
}

/** Kubernetes NetworkPolicy isolation: the selected targets are isolated in this direction. */
export interface Isolation {
  ref: RuleRef;
  direction: Direction;
  appliedTo: Peer[];
  /** For audit logging of default drops (Namespace annotated enable-logging). */
  logging?: { enabled: boolean; label?: string };
}

/** Antrea ClusterGroup/Group after normalization (childGroups expanded one level). */
export interface GroupDef {
  namespace?: string | undefined;
  name: string;
  members: Peer[];
}

export interface TierDef {
  name: string;
  priority: number;
}

export interface ValidationError {
  kind: string;
  namespace?: string | undefined;
  name: string;
  /** JSON-path-like field, e.g. "spec.ingress[0].ports[1].endPort". */
  field: string;
  message: string;
}

/** What normalizing one object yields. An object with any error yields no rules at all. */
export interface NormalizeResult {
  rules: InternalRule[];
  isolations: Isolation[];
  groups: GroupDef[];
  tiers: TierDef[];
  errors: ValidationError[];
}

/** What a kind's normalizer may look up (tiers are cluster objects; a policy naming an unknown tier is invalid). */
export interface NormalizeContext {
  tierPriority(name: string): number | undefined;
  namespaceAnnotations(namespace: string): Record<string, string> | undefined;
}

export type Normalizer = (obj: KubeObject, ctx: NormalizeContext) => NormalizeResult;

// ---------------------------------------------------------------------------------------
// Probes and verdicts (shared by `sluicectl simulate` and `sluice-lab probe`).

/** "ns/pod", "service:ns/name", or "ip:ADDRESS" (IPv4 or IPv6). */
export type EndpointRef = string;

export interface Probe {
  from: EndpointRef;
  to: EndpointRef;
  port: number;
  protocol: 'TCP' | 'UDP' | 'SCTP' | 'ICMP';
  /** The client's source port; absent = any port of the source's ephemeral range. */
  sourcePort?: number;
  /**
   * The address family the connection uses. Absent: every family both endpoints have (an `ip:`
   * endpoint has its own); when those judge differently the most restrictive verdict is reported
   * with a note giving each family's verdict.
   */
  family?: 4 | 6;
}

/** The source ports a client picks from (Linux net.ipv4.ip_local_port_range). */
export interface PortRange {
  first: number;
  last: number;
}

export type Verdict = 'allow' | 'drop' | 'reject';

export interface DecidedBy {
  kind: PolicyKind | 'K8sNetworkPolicyIsolation';
  namespace?: string | undefined;
  name: string;
  rule?: string;
  direction: Direction;
  tier?: string;
  action: Action | 'IsolationDrop';
}

export interface ProbeResult extends Probe {
  verdict: Verdict;
  /** null where the default decided (no rule matched and nothing isolated the endpoints). */
  decidedBy?: DecidedBy | null;
  /** Free-form note (e.g. "SCTP: verdict from ofproto/trace, not real packets"). */
  note?: string;
}

/** A member of an AddressGroup or AppliedToGroup of the internal model (internal.ts). */
export interface GroupMember {
  kind: 'pod' | 'node' | 'service' | 'fqdn';
  /** "ns/name" for Pods and Services, the Node name, or the DNS name. */
  ref: string;
  /** Node of a Pod member. */
  nodeName?: string;
  ips: string[];
  /** Named-port map of a Pod (its container ports), or a Service's ports (containerPort = Service port). */
  ports: ContainerPort[];
}

/** An IR rule as the internal model computed it: its groups by id (internal.ts; noderules.ts reads it). */
export interface ComputedRule {
  id: string;
  /** The IR rule this was computed from. */
  ruleId: string;
  ref: RuleRef;
  direction: Direction;
  action: InternalRule['action'];
  priority: RulePriority;
  appliedToGroups: string[];
  /** Set when the rule was expanded per target namespace: only targets in it. */
  targetNamespace?: string;
  /** No peer restriction at all. */
  anyPeer: boolean;
  addressGroups: string[];
  /** Non-overlapping CIDRs (ipBlock cidr minus except). */
  ipBlocks: string[];
  ports: PortMatch[];
  logging?: { enabled: boolean; label?: string };
}
