/**
 * OpenFlow priorities of policy flows, and the rule-priority allocator of the ordered tables.
 *
 * Table layout (per direction; E = Egress, I = Ingress):
 *   AntreaPolicy{E,I}Rule  65000       ct_state=-new+est / -new+rel -> {E,I}Metric (decided on the first packet)
 *                          64800       new-Pod guard: a new local Pod <-> Pods of a node that has not
 *                                      confirmed it knows the Pod's address yet (flows/newpod-guard.ts)
 *                          1000..64000 stage 0 (Antrea tiers, ANP, CNP Admin): one priority per rule
 *   {E,I}Rule              65000       (egress) Pod->ClusterIP packets before DNAT skip the K8s rules
 *                          200         every Kubernetes NetworkPolicy rule (all allow: order is irrelevant)
 *   {E,I}DefaultRule       64500       Kubernetes isolation drop of a local Pod (egress: pre-DNAT packets
 *                                      of an isolated Pod go on to EgressMetric instead)
 *                          1000..64000 stage 2 (Antrea baseline tier, BANP, CNP Baseline): one priority per rule
 *   misses (pipeline, 0)   -> next table: no stage-0 match -> K8s; no K8s match -> default; no default match -> allow
 *
 * Allocation in an ordered table (pure function of the table's rules, so restarts and incremental
 * updates agree): the range is split into equal bands, one per tier present in the table (tier
 * order); a rule's ideal priority is its band top minus (policy priority x 10 + rule index), so a
 * policy leaves room for 10 rules before the next integer policy priority; then, walking rules in
 * evaluation order, each rule gets min(ideal, previous - 1), which keeps the order strict whatever
 * the ideals are. A tier with more rules than its band (or policy priorities that do not fit) thus
 * pushes its tail below its band, shifting the following rules only as far as needed. If the table
 * runs out of priorities altogether, the table is re-spaced evenly (every rule of that table shifts
 * once); more rules than priorities is an error naming the table.
 */
import { comparePriority } from '../../policy/order.js';
import type { RulePriority } from '../../policy/types.js';

export const PRIORITY = {
  bypass: 65000,
  newPodGuard: 64800,
  /** ConntrackState: a cut connection's 5-tuple, both ways (flows/cut-connections.ts); above +inv (200). */
  cutConnection: 250,
  preDnatSkip: 65000,
  isolation: 64500,
  rangeTop: 64000,
  rangeBottom: 1000,
  k8s: 200,
  /** Ideal distance between consecutive integer policy priorities of one tier. */
  policyStep: 10,
  /** Metric tables: a rule's dropped packets, its connections' first packets, their later packets. */
  metricDrop: 200,
  metricNew: 190,
  metricEst: 180,
} as const;

export class PriorityError extends Error {
  override name = 'PriorityError';
}

export interface OrderedRule {
  id: string;
  priority: RulePriority;
}

const byOrder = (a: OrderedRule, b: OrderedRule): number => comparePriority(a.priority, b.priority) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** Priorities for the rules of one ordered table (all rules given must belong to that table). */
export function allocatePriorities(table: string, rules: readonly OrderedRule[]): Map<string, number> {
  const sorted = [...rules].sort(byOrder);
  const out = new Map<string, number>();
  if (sorted.length === 0) return out;
  const { rangeTop: top, rangeBottom: bottom, policyStep } = PRIORITY;
  const span = top - bottom + 1;
  if (sorted.length > span) throw new PriorityError(`${table}: ${sorted.length} rules do not fit in the ${span} priorities ${bottom}..${top}`);
  const tiers = [...new Set(sorted.map((r) => r.priority.tier))].sort((a, b) => a - b);
  const band = Math.floor(span / tiers.length);
  const bandTop = new Map(tiers.map((t, i) => [t, top - i * band]));
  let prev = top + 1;
  const assigned: number[] = [];
  for (const r of sorted) {
    const offset = Math.min(band - 1, Math.max(0, Math.floor(r.priority.policy * policyStep) + Math.max(0, r.priority.rule)));
    const ideal = bandTop.get(r.priority.tier)! - offset;
    prev = Math.min(ideal, prev - 1);
    assigned.push(prev);
  }
  if (assigned[assigned.length - 1]! < bottom) {
    const gap = Math.floor(span / sorted.length);
    sorted.forEach((_r, i) => (assigned[i] = top - i * gap));
  }
  sorted.forEach((r, i) => out.set(r.id, assigned[i]!));
  return out;
}
