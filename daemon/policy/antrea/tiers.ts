/**
 * Antrea Tiers: the six static tiers that always exist, custom Tier objects, and how a policy's
 * `tier` field resolves to a tier name, priority and evaluation stage.
 */
import type { KubeObject, NormalizeContext, NormalizeResult, Stage, TierDef } from '../types.js';
import { Problems, checkObjectMeta, emptyResult, errorResult, isObject } from './common.js';

export const BASELINE_TIER = 'baseline';
export const DEFAULT_TIER = 'application';

/** Created by antrea-controller at startup; read-only. The engine seeds these. */
export const STATIC_TIERS: readonly TierDef[] = Object.freeze([
  { name: 'emergency', priority: 50 },
  { name: 'securityops', priority: 100 },
  { name: 'networkops', priority: 150 },
  { name: 'platform', priority: 200 },
  { name: 'application', priority: 250 },
  { name: 'baseline', priority: 253 },
]);

const STATIC_BY_NAME = new Map(STATIC_TIERS.map((t) => [t.name, t.priority]));

/**
 * Priorities a custom Tier may not take: 250 (application) and above are reserved for the
 * default tier, AdminNetworkPolicy (251), the baseline tiers (253, 254) and internal use. 220,
 * where v1alpha2 ClusterNetworkPolicy tier Admin sits, stays open to custom Tiers (refusing an
 * existing Tier would drop its policies); such a Tier shares the place (README, "Policy precedence").
 */
const MAX_CUSTOM_TIER_PRIORITY = 249;

/** Antrea 0.9 static tier names ("Emergency", ...) still resolve to the lower-case Tier. */
const LEGACY_NAMES = new Map(['Emergency', 'SecurityOps', 'NetworkOps', 'Platform', 'Application', 'Baseline'].map((n) => [n, n.toLowerCase()]));

/** The Tier name a policy's `spec.tier` refers to ("" / absent = application). */
export function canonicalTierName(tier: string | undefined): string {
  if (tier === undefined || tier === '') return DEFAULT_TIER;
  return LEGACY_NAMES.get(tier) ?? tier;
}

export function staticTierPriority(name: string): number | undefined {
  return STATIC_BY_NAME.get(name);
}

/** Tier priority for a tier name: static tiers first, then the engine's view of custom Tiers. */
export function resolveTierPriority(name: string, ctx: NormalizeContext): number | undefined {
  return staticTierPriority(name) ?? ctx.tierPriority(name);
}

/** Baseline rules are evaluated after Kubernetes NetworkPolicy; every other tier before it. */
export function tierStage(name: string): Stage {
  return name === BASELINE_TIER ? 2 : 0;
}

/**
 * Tier (v1alpha1, v1beta1). A custom tier yields one TierDef. A Tier object named like a static
 * tier is accepted only with that tier's fixed priority and yields nothing (the engine already
 * has it; removing the object must not remove the static tier).
 *
 * Not checked here (they need the other Tiers): two Tiers with the same priority, more than 20
 * Tiers, and priority changes on update (Antrea rejects all three).
 */
export function normalizeTier(obj: KubeObject): NormalizeResult {
  const name = obj.metadata.name;
  const p = new Problems('Tier', undefined, name);
  // Antrea 0.9 names are not DNS subdomains either; say why they cannot be Tier names.
  if (LEGACY_NAMES.has(name)) p.add('metadata.name', `"${name}" is reserved: policies naming it refer to the static tier "${name.toLowerCase()}"`);
  else checkObjectMeta(p, obj, false);
  const spec = obj.spec;
  if (!isObject(spec)) {
    p.add('spec', 'is required');
    return errorResult(p);
  }
  const priority = spec.priority;
  if (priority === undefined || priority === null) {
    p.add('spec.priority', 'is required');
  } else if (typeof priority !== 'number' || !Number.isInteger(priority)) {
    p.add('spec.priority', `must be an integer, got ${JSON.stringify(priority)}`);
  } else if (priority < 0 || priority > 255) {
    p.add('spec.priority', `must be between 0 and 255, got ${priority}`);
  }
  if (spec.description !== undefined && typeof spec.description !== 'string') p.add('spec.description', 'must be a string');
  if (p.any) return errorResult(p);

  const fixed = staticTierPriority(name);
  if (fixed !== undefined) {
    if (priority !== fixed) {
      p.add('spec.priority', `"${name}" is a static tier with the fixed priority ${fixed}; it cannot be ${priority}`);
      return errorResult(p);
    }
    return emptyResult();
  }
  const clash = STATIC_TIERS.find((t) => t.priority === priority);
  if (clash) {
    p.add('spec.priority', `priority ${priority} is taken by the static tier "${clash.name}"; no two Tiers can have the same priority`);
  } else if (priority > MAX_CUSTOM_TIER_PRIORITY) {
    p.add('spec.priority', `priority ${priority} is reserved: custom Tiers must have a priority below 250`);
  }
  if (p.any) return errorResult(p);
  return { ...emptyResult(), tiers: [{ name, priority }] };
}
