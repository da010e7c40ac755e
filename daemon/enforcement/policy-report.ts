/**
 * What policy this node enforces, per policy object, and which objects were ignored as invalid:
 * the body of the agent's GET /policies and of `sluicectl node policies`. Pure: built from the
 * engine's node rule set, node isolations, validation errors and the local Pods.
 */
import type { NodeIsolation, NodeRule } from '../policy/engine.js';
import type { Action, Direction, PolicyKind, Stage, ValidationError } from '../policy/types.js';

export interface EnforcedPolicy {
  kind: PolicyKind;
  namespace?: string | undefined;
  name: string;
  /** Antrea tier, or "Admin"/"Baseline" for the admin kinds; absent for Kubernetes NetworkPolicy. */
  tier?: { name: string; priority: number };
  /** Priority within the tier, for the kinds that have one. */
  priority?: number;
  /** Evaluation stage (0 before Kubernetes NetworkPolicy, 1 = NetworkPolicy, 2 = baseline). */
  stage: Stage;
  /** Rules of this policy with a target on this node (a rule split per namespace or named port counts once). */
  rules: number;
  ingressRules: number;
  egressRules: number;
  /** Distinct actions of those rules, sorted. */
  actions: Action[];
  /** Directions in which it isolates local targets (Kubernetes NetworkPolicy default drop), sorted. */
  isolates: Direction[];
  /** Local Pods ("ns/name") it applies to, sorted. */
  pods: string[];
  /** This node itself, when it applies to host traffic (Antrea nodeSelector appliedTo). */
  nodes?: string[];
}

export interface PolicyReport {
  node: string;
  /** Every watched resource listed at least once (before that the report may be incomplete). */
  synced: boolean;
  /** In evaluation order: stage, tier priority, policy priority, then kind/namespace/name. */
  policies: EnforcedPolicy[];
  /** Objects ignored because they are invalid, with the field and the reason (sorted by object). */
  invalid: ValidationError[];
  /** Fields of policy objects their kind's schema does not have (the objects are used without them; sorted). */
  warnings: ValidationError[];
  /** Local Pods (not hostNetwork) that the engine knows. */
  localPods: number;
  /** Local Pods no policy applies to (this node does not restrict their traffic; the peers' policies still can), sorted. */
  unselectedPods: string[];
}

export interface PolicyReportInput {
  node: string;
  synced: boolean;
  rules: readonly NodeRule[];
  isolations: readonly NodeIsolation[];
  errors: readonly ValidationError[];
  warnings?: readonly ValidationError[];
  /** The Pods on this node ("ns/name"). */
  localPods: readonly string[];
}

interface Acc {
  entry: EnforcedPolicy;
  ruleIds: Map<string, Direction>;
  actions: Set<Action>;
  isolates: Set<Direction>;
  pods: Set<string>;
  nodes: Set<string>;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

export function buildPolicyReport(input: PolicyReportInput): PolicyReport {
  const byPolicy = new Map<string, Acc>();
  const accFor = (ref: NodeRule['ref'], stage: Stage): Acc => {
    const key = `${ref.kind}/${ref.namespace ?? ''}/${ref.name}`;
    let acc = byPolicy.get(key);
    if (!acc) {
      const entry: EnforcedPolicy = {
        kind: ref.kind, ...(ref.namespace ? { namespace: ref.namespace } : {}), name: ref.name,
        stage, rules: 0, ingressRules: 0, egressRules: 0, actions: [], isolates: [], pods: [],
      };
      acc = { entry, ruleIds: new Map(), actions: new Set(), isolates: new Set(), pods: new Set(), nodes: new Set() };
      byPolicy.set(key, acc);
    }
    return acc;
  };
  const addTargets = (acc: Acc, targets: NodeRule['targets']) => {
    for (const t of targets) (t.kind === 'node' ? acc.nodes : acc.pods).add(t.ref);
  };

  for (const r of input.rules) {
    const acc = accFor(r.ref, r.priority.stage);
    // Every rule of one policy shares its tier and policy priority.
    if (r.ref.tier !== undefined) acc.entry.tier = { name: r.ref.tier, priority: r.priority.tier };
    if (r.ref.kind !== 'NetworkPolicy') acc.entry.priority = r.priority.policy;
    acc.ruleIds.set(r.ruleId, r.direction);
    acc.actions.add(r.action);
    addTargets(acc, r.targets);
  }
  for (const iso of input.isolations) {
    const acc = accFor(iso.ref, 1);
    acc.isolates.add(iso.direction);
    addTargets(acc, iso.targets);
  }

  const selected = new Set<string>();
  const policies = [...byPolicy.values()].map(({ entry, ruleIds, actions, isolates, pods, nodes }) => {
    const dirs = [...ruleIds.values()];
    for (const p of pods) selected.add(p);
    return {
      ...entry,
      rules: ruleIds.size,
      ingressRules: dirs.filter((d) => d === 'Ingress').length,
      egressRules: dirs.filter((d) => d === 'Egress').length,
      actions: [...actions].sort(cmp),
      isolates: [...isolates].sort(cmp),
      pods: [...pods].sort(cmp),
      ...(nodes.size ? { nodes: [...nodes].sort(cmp) } : {}),
    };
  });
  const sortKey = (p: EnforcedPolicy): (number | string)[] => [p.stage, p.tier?.priority ?? 0, p.priority ?? 0, p.kind, p.namespace ?? '', p.name];
  policies.sort((a, b) => {
    const ka = sortKey(a);
    const kb = sortKey(b);
    for (let i = 0; i < ka.length; i++) {
      const x = ka[i]!;
      const y = kb[i]!;
      if (x !== y) return typeof x === 'number' && typeof y === 'number' ? x - y : cmp(String(x), String(y));
    }
    return 0;
  });

  const local = [...new Set(input.localPods)].sort(cmp);
  return {
    node: input.node,
    synced: input.synced,
    policies,
    invalid: [...input.errors].map((e) => ({ ...e })).sort((a, b) => cmp(errorKey(a), errorKey(b))),
    warnings: [...(input.warnings ?? [])].map((e) => ({ ...e })).sort((a, b) => cmp(errorKey(a), errorKey(b))),
    localPods: local.length,
    unselectedPods: local.filter((p) => !selected.has(p)),
  };
}

const errorKey = (e: ValidationError) => `${e.kind}/${e.namespace ?? ''}/${e.name}/${e.field}/${e.message}`;

/** The GET /policies answer: the report, or 404 when the agent runs without policy enforcement. */
export function policiesAnswer(report: unknown): { code: number; body: unknown } {
  if (report === undefined) return { code: 404, body: { error: 'policy enforcement is off on this node (enforcePolicies: false, or no API server configured): no policies are enforced' } };
  return { code: 200, body: report };
}
