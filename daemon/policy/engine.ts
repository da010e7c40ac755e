/**
 * The policy engine: fed Kubernetes objects (any kind), it keeps the cluster view (cluster.ts)
 * and every policy normalized to the IR by its kind's registry (k8s/, antrea/, admin/), answers
 * "is this connection allowed and which rule decided?" (evaluator.ts), and maintains the
 * node-scoped internal objects the enforcement side programs (AddressGroups, AppliedToGroups,
 * internal rules and isolations; internal.ts) incrementally: every upsert/remove returns the
 * ChangeSet of what it changed.
 */
import { normalizers as adminNormalizers } from './admin/index.js';
import { ANTREA_GROUP, STATIC_TIERS, normalizers as antreaNormalizers, staticTierPriority } from './antrea/index.js';
import { canonicalIp } from './cidr.js';
import { canonicalDnsName, FqdnPatternSet } from './fqdn.js';
import { ClusterState, clusterObjectError, podKey } from './cluster.js';
import { ServiceEndpointTracker } from './endpoints.js';
import { Evaluator, UnknownEndpointError, type SideDecision } from './evaluator.js';
import { InternalModel, emptyChangeSet, type ComputedIsolation, type NodeIsolation, type ChangeSet, type NodeRule, type NodeTarget, type AddressGroup, type AppliedToGroup, type ComputedRule } from './internal.js';
import { normalizers as k8sNormalizers } from './k8s/index.js';
import { targetPodIps } from './noderules.js';
import { emptyResult } from './problems.js';
import { decodeNulls, objectSchema, unknownFields, wrongTypes } from './schema.js';
import type { MatchEnv } from './match.js';
import type {
  GroupDef, InternalRule, Isolation, KubeObject, NormalizeContext, NormalizeResult, Normalizer, PodInfo, PortRange, Probe, ProbeResult, TierDef, ValidationError,
} from './types.js';

export type { SideDecision, ChangeSet, NodeRule, NodeTarget, NodeIsolation, AddressGroup, AppliedToGroup, ComputedRule, ComputedIsolation };

export interface ObjectRef {
  apiVersion: string;
  kind: string;
  namespace?: string | undefined;
  name: string;
}

export interface NormalizerEntry {
  group: string;
  versions: string[];
  kind: string;
  normalize: Normalizer;
}

export { UnknownEndpointError };

const CORE_KINDS = new Set(['Pod', 'Namespace', 'Node', 'Service', 'ServiceAccount']);

interface PolicyEntry {
  key: string;
  obj: KubeObject;
  /** API group of obj.apiVersion (the kind is obj.kind). */
  group: string;
  normalize: Normalizer;
  /** What normalizing obj yields (its errors when it is invalid). */
  result: NormalizeResult;
  /**
   * What the engine enforces for the object: `result` when it is valid, else the last valid
   * version's, kept until the object is fixed or deleted (empty when it never was valid). An API
   * server refuses an invalid update (schema, admission), so the version in force stays; an
   * agent that dropped the rules instead would turn a typo in a Drop into an allow.
   */
  enforced: NormalizeResult;
  /** The object `enforced` was made from (obj itself while it is valid). */
  enforcedObj: KubeObject;
  /** Set while a Tier cannot be used (its priority is taken by an earlier Tier). */
  tierErrors?: ValidationError[];
  /** Fields the kind's schema does not have (the object is still used, as the API server would prune them). */
  warnings: ValidationError[];
}

/** One warning per field of `obj` its kind's schema does not have. */
function unknownFieldWarnings(obj: KubeObject, group: string): ValidationError[] {
  const schema = objectSchema(group, obj.kind);
  if (!schema) return [];
  const kind = kindName(group, obj.kind);
  return unknownFields(schema, obj).map((field) => ({ ...objectError(obj, field, 'unknown field'), kind }));
}

/** Policy groups of built-in kinds, decoded into Go types (the others are custom resources). */
const BUILTIN_POLICY_GROUPS = new Set(['networking.k8s.io']);

/**
 * A policy object as the API server stores it where null string-map values or list items differ
 * (schema.ts decodeNulls), with a warning per map key a custom resource loses that way.
 */
function storedForm(obj: KubeObject, group: string): { obj: KubeObject; warnings: ValidationError[] } {
  const schema = objectSchema(group, obj.kind);
  if (!schema) return { obj, warnings: [] };
  const { value, pruned } = decodeNulls(schema, obj, BUILTIN_POLICY_GROUPS.has(group));
  const kind = kindName(group, obj.kind);
  const message = 'is null: the API server drops a null map value of a custom resource, so this label is not required';
  return { obj: value as KubeObject, warnings: pruned.map((field) => ({ ...objectError(obj, field, message), kind })) };
}

/** A kind as its normalizer names it in errors (Antrea's policy kinds share names with others). */
function kindName(group: string, kind: string): string {
  return group === ANTREA_GROUP && (kind === 'ClusterNetworkPolicy' || kind === 'NetworkPolicy') ? `Antrea${kind}` : kind;
}

/** Said of an invalid object whose last valid version is still enforced (PolicyEntry.enforced). */
export const KEPT_NOTE = 'its last valid version stays enforced until it is fixed or deleted';

/** An object of a kind/version the engine refused; each apiVersion is judged on its own. */
function rejectedKey(ref: ObjectRef): string {
  return `${ref.apiVersion}/${ref.kind}/${ref.namespace ?? ''}/${ref.name}`;
}

/** A policy-side object: one entry per group, kind, namespace and name, whatever its version. */
function policyKey(group: string, ref: ObjectRef): string {
  return `${group}/${ref.kind}/${ref.namespace ?? ''}/${ref.name}`;
}

/** An error about `obj` as a whole (not found by its kind's normalizer). */
function objectError(obj: KubeObject, field: string, message: string): ValidationError {
  return { kind: obj.kind, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}), name: obj.metadata.name, field, message };
}

/** A ClusterGroup (no namespace) or Group, as policies refer to it. */
function groupDefKey(namespace: string | undefined, name: string): string {
  return `${namespace ?? ''}/${name}`;
}

/** Why an object lacks what every Kubernetes object has (apiVersion, kind, metadata.name as strings). */
function envelopeError(obj: unknown): { field: string; message: string } | undefined {
  const o = obj as Record<string, any> | null;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) return { field: '', message: 'must be an object' };
  if (typeof o.apiVersion !== 'string' || o.apiVersion === '') return { field: 'apiVersion', message: 'must be a non-empty string' };
  if (typeof o.kind !== 'string' || o.kind === '') return { field: 'kind', message: 'must be a non-empty string' };
  const m = o.metadata;
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return { field: 'metadata', message: 'must be an object' };
  if (typeof m.name !== 'string' || m.name === '') return { field: 'metadata.name', message: 'must be a non-empty string' };
  if (m.namespace !== undefined && m.namespace !== null && typeof m.namespace !== 'string') return { field: 'metadata.namespace', message: 'must be a string' };
  return undefined;
}

function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.indexOf('/');
  return slash < 0 ? { group: '', version: apiVersion } : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

export class PolicyEngine {
  readonly nodeName?: string;
  readonly cluster = new ClusterState();
  /** Endpoints of the Services toServices peers name, followed for the ChangeSet (see endpoints.ts). */
  private readonly endpoints = new ServiceEndpointTracker(this.cluster);
  private readonly log?: (e: ValidationError) => void;
  private readonly registry = new Map<string, NormalizerEntry>();
  private readonly policies = new Map<string, PolicyEntry>();
  /** Objects of kinds/versions the engine does not handle, with the reason. */
  private readonly rejected = new Map<string, ValidationError>();
  private readonly tiers = new Map<string, TierDef & { owner: string }>();
  private readonly groupDefs = new Map<string, GroupDef>();
  /**
   * Learned DNS names → their current addresses (canonical, sorted). No expiry here: DNS learning
   * (enforcement/fqdn/learner.ts) owns TTLs and tells the engine each name's address set as it changes.
   */
  private readonly fqdnNames = new Map<string, readonly string[]>();
  private readonly model: InternalModel;
  private readonly env: MatchEnv;

  private readonly evaluator: Evaluator;
  // Lookup caches for the matchers.
  private serviceEndpointCache = new Map<string, Set<string>>();
  private fqdnCache = new Map<string, Set<string>>();

  constructor(opts: {
    nodeName?: string; log?: (e: ValidationError) => void; normalizers?: NormalizerEntry[];
    /** Source ports of probes that name none (default: Linux's 32768-60999). */
    ephemeralPorts?: PortRange;
    /** ChangeSets carry each changed group's member changes (the controller's patches). */
    trackMembers?: boolean;
  } = {}) {
    if (opts.nodeName !== undefined) this.nodeName = opts.nodeName;
    if (opts.log) this.log = opts.log;
    for (const n of opts.normalizers ?? [...k8sNormalizers, ...antreaNormalizers, ...adminNormalizers]) {
      this.registry.set(`${n.group}/${n.kind}`, n);
    }
    this.env = {
      cluster: this.cluster,
      group: (namespace, name) => this.groupDefs.get(groupDefKey(namespace, name)),
      serviceEndpointKeys: (namespace, name) => this.serviceEndpointKeys(namespace, name),
      fqdnMatches: (pattern, ip) => this.fqdnIps(pattern).has(ip),
    };
    this.model = new InternalModel(this.env, this.nodeName, (pattern) => this.fqdnMembers(pattern), this.endpoints, opts.trackMembers ?? false);
    this.evaluator = new Evaluator(this.cluster, this.env, (key) => this.model.appliedToGroupIdsOf(key), () => {
      const rules: InternalRule[] = [];
      const isolations: Isolation[] = [];
      for (const entry of this.policies.values()) {
        rules.push(...entry.enforced.rules);
        isolations.push(...entry.enforced.isolations);
      }
      return { rules, isolations };
    }, opts.ephemeralPorts);
  }

  // ---------------------------------------------------------------------------------------
  // Input

  upsert(obj: KubeObject): ChangeSet {
    const envelope = envelopeError(obj);
    if (envelope) {
      // Without a usable kind and name the object cannot be stored, replaced or removed: it is
      // reported (under what it shows of itself) and otherwise ignored.
      const o = obj as Partial<KubeObject> | null;
      const err: ValidationError = { kind: typeof o?.kind === 'string' ? o.kind : '(no kind)', name: typeof o?.metadata?.name === 'string' ? o.metadata.name : '(no name)', field: envelope.field, message: envelope.message };
      this.log?.(err);
      this.model.begin();
      return this.finish();
    }
    const { group, version } = splitApiVersion(obj.apiVersion);
    const ns = obj.metadata.namespace;
    const ref: ObjectRef = { apiVersion: obj.apiVersion, kind: obj.kind, namespace: ns, name: obj.metadata.name };
    const rejectKey = rejectedKey(ref);
    this.rejected.delete(rejectKey);
    this.model.begin();
    const clusterKind = (group === '' && CORE_KINDS.has(obj.kind)) || (group === 'discovery.k8s.io' && obj.kind === 'EndpointSlice');
    const clusterError = clusterKind ? clusterObjectError(obj) : undefined;
    if (clusterError) {
      // The API server cannot decode it, so it never exists there: any earlier version stays.
      this.reject(rejectKey, obj, clusterError.field, `${clusterError.message}; the object is refused (as the API server would) and ignored`);
    } else if (group === '' && CORE_KINDS.has(obj.kind)) {
      this.upsertCore(obj);
    } else if (group === 'discovery.k8s.io' && obj.kind === 'EndpointSlice') {
      const [old, slice] = this.cluster.upsertEndpointSlice(obj);
      this.endpoints.sliceChanged(old, slice);
      this.servicesChanged();
    } else {
      const entry = this.registry.get(`${group}/${obj.kind}`);
      if (!entry) {
        this.reject(rejectKey, obj, 'apiVersion', `unsupported kind ${obj.kind} in ${obj.apiVersion}; it is ignored`);
      } else if (!entry.versions.includes(version)) {
        this.reject(rejectKey, obj, 'apiVersion', `${obj.kind} is not served in ${obj.apiVersion} (served: ${entry.versions.map((v) => `${group}/${v}`).join(', ')})`);
      } else {
        const key = policyKey(group, ref);
        const stored = storedForm(obj, group);
        this.setPolicy(key, { key, obj: stored.obj, group, normalize: entry.normalize, result: emptyResult(), enforced: emptyResult(), enforcedObj: stored.obj, warnings: [...unknownFieldWarnings(obj, group), ...stored.warnings] });
      }
    }
    return this.finish();
  }

  remove(ref: ObjectRef): ChangeSet {
    const { group } = splitApiVersion(ref.apiVersion);
    this.model.begin();
    this.rejected.delete(rejectedKey(ref));
    if (group === '' && CORE_KINDS.has(ref.kind)) {
      this.removeCore(ref);
    } else if (group === 'discovery.k8s.io' && ref.kind === 'EndpointSlice') {
      this.endpoints.sliceChanged(this.cluster.removeEndpointSlice(ref.namespace ?? 'default', ref.name), undefined);
      this.servicesChanged();
    } else {
      const key = policyKey(group, ref);
      if (this.policies.has(key)) this.setPolicy(key, undefined);
    }
    return this.finish();
  }

  /**
   * Sets the current addresses of learned DNS names (the members of fqdn peers); `ips: []` forgets
   * a name. The addresses hold until the next call for that name: the caller (DNS learning, with
   * its TTLs) decides when they go. fqdn AddressGroups that change are in the ChangeSet.
   */
  setFqdnAddresses(updates: readonly { name: string; ips: readonly string[] }[]): ChangeSet {
    this.model.begin();
    for (const { name, ips } of updates) {
      const canonical = canonicalDnsName(name);
      if (ips.length === 0) this.fqdnNames.delete(canonical);
      else this.fqdnNames.set(canonical, [...new Set(ips.map((ip) => canonicalIp(ip) ?? ip))].sort());
    }
    if (updates.length > 0) {
      this.fqdnCache.clear();
      this.model.fqdnChanged();
    }
    return this.finish();
  }

  /** The learned names and their addresses, sorted by name (inspection and tests). */
  fqdnAddresses(): { name: string; ips: string[] }[] {
    return [...this.fqdnNames].sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, ips]) => ({ name, ips: [...ips] }));
  }

  /**
   * A bulk intake: from now on every change goes into one ChangeSet, which releaseChanges()
   * returns; each call meanwhile returns an empty ChangeSet. For the controller's initial lists,
   * whose views are computed once at the end: 150 000 Pods would otherwise each build a ChangeSet
   * (every group it joins recorded before and after) that nothing reads. A Node's rules and
   * isolations cannot be read during a hold (they follow each change's end).
   */
  holdChanges(): void {
    this.model.holdChanges();
  }

  /**
   * Ends a hold (holdChanges) with every change since, as one ChangeSet; empty when none is held.
   * `members: false` leaves out its member changes, for a caller that reads the groups whole.
   */
  releaseChanges(opts: { members?: boolean } = {}): ChangeSet {
    if (!this.model.holding) return emptyChangeSet();
    this.model.releaseChanges();
    return this.finish(opts.members ?? true);
  }

  /** Ends a change: collects the ChangeSet and drops the evaluation caches it made stale. */
  private finish(members = true): ChangeSet {
    const cs = this.model.end(members);
    for (const key of this.model.takeChangedTargets()) {
      const pod = this.cluster.pods.get(key);
      if (pod) this.evaluator.podChanged(pod);
    }
    this.evaluator.changed();
    return cs;
  }

  /**
   * The API object an invalid-object report is about, as the API server names it (apiVersion,
   * kind, uid): what an Event must carry for `kubectl describe` to show it. The report's kind is
   * the engine's (AntreaClusterNetworkPolicy for crd.antrea.io's ClusterNetworkPolicy).
   */
  involvedObject(e: Pick<ValidationError, 'kind' | 'namespace' | 'name'>): { apiVersion: string; kind: string; namespace?: string; name: string; uid?: string } | undefined {
    const same = (x: ValidationError) => x.kind === e.kind && x.name === e.name && (x.namespace ?? '') === (e.namespace ?? '');
    for (const p of this.policies.values()) {
      if (!p.result.errors.some(same) && !(p.tierErrors ?? []).some(same)) continue;
      const { apiVersion, kind, metadata } = p.obj;
      return { apiVersion, kind, ...(metadata.namespace ? { namespace: metadata.namespace } : {}), name: metadata.name, ...(metadata.uid ? { uid: metadata.uid } : {}) };
    }
    return undefined;
  }

  /** Counts changes of the kept versions; keptVersions() marks them seen. */
  private keptGeneration = 0;
  private keptSeen = 0;

  /** Whether the kept versions changed since keptVersions() was last read. */
  get keptVersionsChanged(): boolean {
    return this.keptGeneration !== this.keptSeen;
  }

  /**
   * The last valid versions kept in force for objects that are invalid now (PolicyEntry.enforced),
   * as they were received: what an agent persists so that a restart keeps them too.
   */
  keptVersions(): KubeObject[] {
    this.keptSeen = this.keptGeneration;
    return [...this.policies.values()].filter((e) => e.enforced !== e.result).map((e) => e.enforcedObj);
  }

  /** How many errors errors() lists, without listing them (read at every /status). */
  errorCount(): number {
    let n = this.rejected.size;
    for (const e of this.policies.values()) n += e.result.errors.length + (e.tierErrors?.length ?? 0);
    return n;
  }

  /** Current invalid objects and why, sorted by object. */
  errors(): ValidationError[] {
    const out: ValidationError[] = [...this.rejected.values()];
    for (const e of this.policies.values()) {
      const kept = e.enforced !== e.result;
      out.push(...e.result.errors.map((x) => (kept ? { ...x, message: `${x.message}; ${KEPT_NOTE}` } : x)), ...(e.tierErrors ?? []));
    }
    const key = (e: ValidationError) => `${e.kind}/${e.namespace ?? ''}/${e.name}/${e.field}`;
    return out.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  }

  /**
   * Fields of policy objects that their kind's schema does not have (a typo such as
   * spec.podSelecter changes what a policy means): what the API server warns about and kubectl's
   * strict field validation refuses. The rest of each object is used as it stands.
   */
  warnings(): ValidationError[] {
    const out: ValidationError[] = [];
    for (const e of this.policies.values()) out.push(...e.warnings);
    const key = (e: ValidationError) => `${e.kind}/${e.namespace ?? ''}/${e.name}/${e.field}`;
    return out.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  }

  /** Every valid rule (all policies, all nodes), in evaluation order. */
  rules(): InternalRule[] {
    return this.evaluator.rules();
  }

  isolations(): Isolation[] {
    return this.evaluator.isolations();
  }

  /** Verdict and deciding rule for one probe (see evaluator.ts). Throws UnknownEndpointError. */
  evaluate(probe: Probe): ProbeResult {
    return this.evaluator.evaluate(probe);
  }

  /** The verdict plus each side's own decision (see Evaluator.explain). */
  explain(probe: Probe): { result: ProbeResult; sides: SideDecision[] } {
    return this.evaluator.explain(probe);
  }

  tierPriority(name: string): number | undefined {
    return this.tiers.get(name)?.priority ?? staticTierPriority(name);
  }

  // ---------------------------------------------------------------------------------------
  // Internal objects for the enforcement side

  addressGroups(): AddressGroup[] { return this.model.addressGroups(); }
  /** See InternalModel.podSpan: node → addresses of its Pods whose rules name Pod `namespace/name` as a peer. */
  podSpan(namespace: string, name: string): Map<string, string[]> { return this.model.podSpan(`${namespace}/${name}`); }
  appliedToGroups(): AppliedToGroup[] { return this.model.appliedToGroups(); }
  /** One internal object by id (what a ChangeSet names), undefined when it is gone. */
  addressGroup(id: string): AddressGroup | undefined { return this.model.addressGroup(id); }
  appliedToGroup(id: string): AppliedToGroup | undefined { return this.model.appliedToGroup(id); }
  addressGroupIpBlocks(id: string): string[] | undefined { return this.model.addressGroupIpBlocks(id); }
  internalRule(id: string): ComputedRule | undefined { return this.model.rule(id); }
  internalIsolation(id: string): ComputedIsolation | undefined { return this.model.isolation(id); }
  internalRules(): ComputedRule[] { return this.model.rules(); }
  /** The ids of the computed rules naming any of these groups, from an index kept with the rules. */
  rulesNamingGroups(groupIds: Iterable<string>): Set<string> { return this.model.rulesNamingGroups(groupIds); }
  /** The (IR) egress rules with an fqdn peer, id → patterns, kept as rules change (no compile). */
  fqdnEgressRules(): ReadonlyMap<string, readonly string[]> { return this.model.fqdnEgressRules(); }
  /** Every pattern of those rules as one matcher: which DNS names are worth learning. */
  fqdnPatterns(): FqdnPatternSet { return this.model.fqdnPatterns(); }

  /**
   * The local Pod addresses (both families) targeted by an egress rule with an fqdn peer: whose DNS
   * responses are worth intercepting. [] when no such rule applies on this node. One pass over the
   * rules and the node rule set, no policy compile.
   */
  fqdnTargetPodIps(): string[] {
    const irIds = this.fqdnEgressRules();
    if (irIds.size === 0) return [];
    const computed = new Set(this.internalRules().filter((c) => irIds.has(c.ruleId)).map((c) => c.id));
    return targetPodIps(this.nodeRuleSet(), computed);
  }
  /** The rules this node enforces: local targets, resolved peer addresses and ports. */
  nodeRuleSet(): NodeRule[] { return this.model.nodeRuleSet(); }
  /** K8s NetworkPolicy isolations as internal objects (targets as AppliedToGroups). */
  internalIsolations(): ComputedIsolation[] { return this.model.isolations(); }
  /** The isolations this node enforces: local targets default-dropped per direction. */
  nodeIsolations(): NodeIsolation[] { return this.model.nodeIsolations(); }

  // ---------------------------------------------------------------------------------------
  // Cluster objects

  private upsertCore(obj: KubeObject): void {
    switch (obj.kind) {
      case 'Pod': {
        const [old, pod] = this.cluster.upsertPod(obj);
        this.podChanged(old, pod);
        break;
      }
      case 'Namespace': {
        const [old, info] = this.cluster.upsertNamespace(obj);
        this.namespaceChanged(info.name, old?.labels, info.labels, old?.annotations, info.annotations);
        break;
      }
      case 'Node': {
        const { old, node, pods } = this.cluster.upsertNode(obj);
        for (const [a, b] of pods) this.podChanged(a, b);
        this.evaluator.targetsChanged();
        this.model.nodeChanged(old, node);
        break;
      }
      case 'Service': {
        const [old, svc] = this.cluster.upsertService(obj);
        this.endpoints.serviceChanged(old, svc);
        this.servicesChanged();
        break;
      }
      case 'ServiceAccount':
        this.cluster.serviceAccounts.add(`${obj.metadata.namespace ?? 'default'}/${obj.metadata.name}`);
        break;
    }
  }

  private removeCore(ref: ObjectRef): void {
    const ns = ref.namespace ?? 'default';
    switch (ref.kind) {
      case 'Pod': {
        const old = this.cluster.removePod(ns, ref.name);
        if (old) this.podChanged(old, undefined);
        break;
      }
      case 'Namespace': {
        const old = this.cluster.removeNamespace(ref.name);
        if (old) this.namespaceChanged(ref.name, old.labels, undefined, old.annotations, undefined);
        break;
      }
      case 'Node': {
        const { old, pods } = this.cluster.removeNode(ref.name);
        for (const [a, b] of pods) this.podChanged(a, b);
        this.evaluator.targetsChanged();
        if (old) this.model.nodeChanged(old, undefined);
        break;
      }
      case 'Service':
        this.endpoints.serviceChanged(this.cluster.removeService(ns, ref.name), undefined);
        this.servicesChanged();
        break;
      case 'ServiceAccount':
        this.cluster.serviceAccounts.delete(`${ns}/${ref.name}`);
        break;
    }
  }

  private podChanged(old: PodInfo | undefined, pod: PodInfo | undefined): void {
    if (old) this.evaluator.podChanged(old);
    // Service endpoints may follow Pod labels; appliedTo by serviceRef then changes for that Pod only.
    this.serviceEndpointCache.clear();
    this.endpoints.podChanged(old, pod);
    this.model.podChanged(old, pod);
  }

  private namespaceChanged(
    name: string,
    oldLabels: Record<string, string> | undefined,
    labels: Record<string, string> | undefined,
    oldAnnotations: Record<string, string> | undefined,
    annotations: Record<string, string> | undefined,
  ): void {
    if (JSON.stringify(oldLabels ?? null) !== JSON.stringify(labels ?? null)) {
      this.evaluator.targetsChanged();
      this.model.namespaceChanged(name);
    }
    if (JSON.stringify(oldAnnotations ?? {}) !== JSON.stringify(annotations ?? {})) {
      // Namespaced policies read their Namespace's annotations (audit logging).
      for (const entry of [...this.policies.values()]) {
        if (entry.obj.metadata.namespace === name) this.setPolicy(entry.key, entry);
      }
    }
  }

  private servicesChanged(): void {
    this.serviceEndpointCache.clear();
    this.evaluator.targetsChanged();
    this.model.servicesChanged();
  }

  private reject(key: string, obj: KubeObject, field: string, message: string): void {
    const err = objectError(obj, field, message);
    this.rejected.set(key, err);
    this.log?.(err);
  }

  // ---------------------------------------------------------------------------------------
  // Policies

  private normalizeContext(): NormalizeContext {
    return {
      tierPriority: (name) => this.tierPriority(name),
      namespaceAnnotations: (ns) => this.cluster.namespaces.get(ns)?.annotations,
    };
  }

  /** Sets (or, with undefined, removes) one policy-kind object, then follows dependencies (tiers, groups). */
  private setPolicy(key: string, entry: PolicyEntry | undefined): void {
    const before = this.policies.get(key);
    const oldResult = before?.enforced;
    const tiersBefore = this.tierSignature();
    if (entry) {
      this.judge(entry, before);
      this.policies.set(key, entry);
    } else {
      this.policies.delete(key);
      if (before && before.enforced !== before.result) this.keptGeneration++;
    }
    this.applyPolicyResult(key, oldResult, entry?.enforced);
    // The Tier table is a function of the objects that define Tiers alone: an object that defines
    // none, before or after, leaves it as it is (rebuilding it per object makes loading quadratic).
    if ((oldResult?.tiers.length ?? 0) === 0 && (entry?.enforced.tiers.length ?? 0) === 0) return;
    // Antrea policies depend on which Tiers exist: re-normalize them when Tiers change.
    this.rebuildTiers();
    if (this.tierSignature() !== tiersBefore) {
      for (const other of [...this.policies.values()]) {
        if (other.group !== ANTREA_GROUP || other.obj.kind === 'Tier' || other.key === key) continue;
        const old = other.enforced;
        this.judge(other, other);
        this.applyPolicyResult(other.key, old, other.enforced);
      }
    }
  }

  /** Normalizes `entry` and sets what it enforces: its own result, else `before`'s (its previous version). */
  private judge(entry: PolicyEntry, before: PolicyEntry | undefined): void {
    const previous = before?.enforced;
    const wasKept = before !== undefined && before.enforced !== before.result;
    entry.result = this.runNormalizer(entry);
    const keep = entry.result.errors.length > 0 && previous !== undefined && previous.errors.length === 0;
    entry.enforced = keep ? previous : entry.result;
    entry.enforcedObj = keep ? before!.enforcedObj : entry.obj;
    const kept = entry.enforced !== entry.result;
    if (kept || wasKept) this.keptGeneration++;
    for (const e of entry.result.errors) this.log?.(kept ? { ...e, message: `${e.message}; ${KEPT_NOTE}` } : e);
  }

  private runNormalizer(entry: PolicyEntry): NormalizeResult {
    let result: NormalizeResult;
    // Values of the wrong JSON type make the object invalid before its kind's own checks, as the
    // API server refuses to decode them: one message per field, with the type expected.
    const schema = objectSchema(entry.group, entry.obj.kind);
    const typeErrors = schema ? wrongTypes(schema, entry.obj) : [];
    try {
      if (typeErrors.length > 0) {
        const kind = kindName(entry.group, entry.obj.kind);
        result = emptyResult(typeErrors.map((e) => ({ ...objectError(entry.obj, e.field, e.message), kind })));
      } else {
        result = entry.normalize(entry.obj, this.normalizeContext());
      }
    } catch (err) {
      result = emptyResult([objectError(entry.obj, 'spec', `could not be read: ${(err as Error).message}`)]);
    }
    return result.errors.length > 0 ? emptyResult(result.errors) : result;
  }

  private applyPolicyResult(key: string, old: NormalizeResult | undefined, fresh: NormalizeResult | undefined): void {
    const groupsChanged = canonical(old?.groups ?? []) !== canonical(fresh?.groups ?? []);
    if (groupsChanged) {
      for (const g of old?.groups ?? []) this.groupDefs.delete(groupDefKey(g.namespace, g.name));
      for (const g of fresh?.groups ?? []) this.groupDefs.set(groupDefKey(g.namespace, g.name), g);
    }
    const rulesChanged = canonical(old?.rules ?? []) !== canonical(fresh?.rules ?? []);
    const isolationsChanged = canonical(old?.isolations ?? []) !== canonical(fresh?.isolations ?? []);
    if (rulesChanged || isolationsChanged || groupsChanged) {
      this.evaluator.rulesChanged();
    }
    if (rulesChanged) this.model.setPolicyRules(key, fresh?.rules ?? []);
    if (isolationsChanged) this.model.setPolicyIsolations(key, fresh?.isolations ?? []);
    if (groupsChanged) this.model.groupDefsChanged();
  }

  private rebuildTiers(): void {
    this.tiers.clear();
    const byPriority = new Map<number, string>(STATIC_TIERS.map((t) => [t.priority, t.name]));
    // Creation order (insertion order) decides which of two same-priority Tiers is refused, as admission would.
    for (const entry of this.policies.values()) {
      const before = entry.tierErrors;
      delete entry.tierErrors;
      for (const t of entry.enforced.tiers) {
        const clash = byPriority.get(t.priority);
        if (clash !== undefined && clash !== t.name) {
          entry.tierErrors = [{ kind: entry.obj.kind, name: entry.obj.metadata.name, field: 'spec.priority', message: `priority ${t.priority} is already used by Tier "${clash}"` }];
          if (!before) this.log?.(entry.tierErrors[0]!);
          continue;
        }
        byPriority.set(t.priority, t.name);
        this.tiers.set(t.name, { ...t, owner: entry.key });
      }
    }
  }

  private tierSignature(): string {
    return [...this.tiers.values()].map((t) => `${t.name}=${t.priority}`).sort().join(',');
  }

  // ---------------------------------------------------------------------------------------
  // Lookups used by matchers

  private serviceEndpointKeys(namespace: string, name: string): Set<string> {
    const key = `${namespace}/${name}`;
    let set = this.serviceEndpointCache.get(key);
    if (!set) {
      set = new Set(this.cluster.serviceEndpoints(namespace, name).map(podKey));
      this.serviceEndpointCache.set(key, set);
    }
    return set;
  }

  /** Addresses learned for names matching an fqdn pattern ("*" matches any characters). */
  fqdnIps(pattern: string): Set<string> {
    const p = canonicalDnsName(pattern);
    let set = this.fqdnCache.get(p);
    if (!set) {
      set = new Set(this.fqdnMembers(p).flatMap((m) => m.ips));
      this.fqdnCache.set(p, set);
    }
    return set;
  }

  /** Learned names matching an fqdn pattern, with their addresses (the members of an fqdn group). */
  private fqdnMembers(pattern: string): { name: string; ips: string[] }[] {
    const p = canonicalDnsName(pattern);
    const out: { name: string; ips: string[] }[] = [];
    if (!p.includes('*')) {
      const ips = this.fqdnNames.get(p);
      return ips ? [{ name: p, ips: [...ips] }] : [];
    }
    const set = new FqdnPatternSet([p]);
    for (const [name, ips] of [...this.fqdnNames].sort(([a], [b]) => (a < b ? -1 : 1))) if (set.matches(name)) out.push({ name, ips: [...ips] });
    return out;
  }

}

// -----------------------------------------------------------------------------------------
// helpers


function canonical(value: unknown): string {
  return JSON.stringify(value);
}
