/** Shared fixtures for the policy-antrea-* tests (not a test file itself). */
import { normalizers } from '../../daemon/policy/antrea/index.js';
import type { KubeObject, NormalizeContext, NormalizeResult } from '../../daemon/policy/types.js';

export function ctxWith(tiers: Record<string, number> = {}): NormalizeContext {
  return {
    tierPriority: (name) => tiers[name],
    namespaceAnnotations: () => ({}),
  };
}

/** Runs the registered normalizer for obj (found by group, version and kind, as the engine does). */
export function normalize(obj: KubeObject, ctx: NormalizeContext = ctxWith()): NormalizeResult {
  const [group, version] = obj.apiVersion.split('/');
  const entry = normalizers.find((n) => n.group === group && n.kind === obj.kind && n.versions.includes(version!));
  if (!entry) throw new Error(`no normalizer for ${obj.apiVersion} ${obj.kind}`);
  return entry.normalize(obj, ctx);
}

export function acnp(name: string, spec: any, version = 'v1beta1'): KubeObject {
  return { apiVersion: `crd.antrea.io/${version}`, kind: 'ClusterNetworkPolicy', metadata: { name }, spec };
}

export function annp(namespace: string, name: string, spec: any, version = 'v1beta1'): KubeObject {
  return { apiVersion: `crd.antrea.io/${version}`, kind: 'NetworkPolicy', metadata: { namespace, name }, spec };
}

export function tier(name: string, priority: unknown, version = 'v1beta1'): KubeObject {
  return { apiVersion: `crd.antrea.io/${version}`, kind: 'Tier', metadata: { name }, spec: { priority } };
}

export function clusterGroup(name: string, spec: any, version = 'v1beta1'): KubeObject {
  return { apiVersion: `crd.antrea.io/${version}`, kind: 'ClusterGroup', metadata: { name }, spec };
}

export function group(namespace: string, name: string, spec: any, version = 'v1beta1'): KubeObject {
  return { apiVersion: `crd.antrea.io/${version}`, kind: 'Group', metadata: { namespace, name }, spec };
}

/** The error fields and messages of a result, for compact assertions. */
export function errorsOf(r: NormalizeResult): string[] {
  return r.errors.map((e) => `${e.field}: ${e.message}`);
}
