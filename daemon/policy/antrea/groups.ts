/**
 * Antrea ClusterGroup (cluster-scoped) and Group (namespaced) -> GroupDef.
 *
 * A group selects with exactly one of: podSelector and/or namespaceSelector, nodeSelector
 * (ClusterGroup only), externalEntitySelector, ipBlocks (ipBlock in v1alpha2/v1alpha3),
 * serviceReference, childGroups. A Group's podSelector without namespaceSelector selects Pods in
 * the Group's own Namespace, and its childGroups name Groups in that Namespace.
 *
 * childGroups become `{kind: 'group'}` members; `expandGroupMembers` resolves them one level deep
 * (a child that has children of its own makes the parent unrealizable, as in Antrea).
 */
import type { GroupDef, KubeObject, NormalizeResult, Peer } from '../types.js';
import { Problems, arrayField, checkObjectMeta, emptyResult, errorResult, isObject, objectNamespace, selectorField, setKeys, stringField } from './common.js';
import { ipBlockPeer, isMulticastCidr } from './peers.js';

const SELECTION_FIELDS = ['podSelector', 'namespaceSelector', 'nodeSelector', 'externalEntitySelector', 'ipBlock', 'ipBlocks', 'serviceReference', 'childGroups'] as const;

export function normalizeGroup(obj: KubeObject, kind: 'ClusterGroup' | 'Group'): NormalizeResult {
  const namespaced = kind === 'Group';
  const namespace = namespaced ? objectNamespace(obj) : undefined;
  const name = obj.metadata.name;
  const version = obj.apiVersion.split('/')[1] ?? '';
  const p = new Problems(kind, namespace, name);
  checkObjectMeta(p, obj, namespaced);
  const spec = obj.spec;
  if (!isObject(spec)) {
    p.add('spec', 'is required');
    return errorResult(p);
  }
  if (spec.ipBlock != null && version === 'v1beta1') {
    p.add('spec.ipBlock', 'ipBlock was removed in crd.antrea.io/v1beta1: use ipBlocks');
  }
  if (namespaced && spec.nodeSelector != null) {
    p.add('spec.nodeSelector', 'nodeSelector is only supported in a ClusterGroup');
  }
  const set = setKeys(spec, SELECTION_FIELDS);
  const combinable = set.length === 2 && set.includes('namespaceSelector') && (set.includes('podSelector') || set.includes('externalEntitySelector'));
  if (set.length > 2 || (set.length === 2 && !combinable)) {
    p.add('spec', `at most one of podSelector, ${namespaced ? '' : 'nodeSelector, '}externalEntitySelector, serviceReference, ipBlocks or childGroups can be set for a ${kind} (podSelector or externalEntitySelector may be combined with namespaceSelector); got ${set.join(', ')}`);
  }
  if (p.any) return errorResult(p);

  const members: Peer[] = [];
  const pods = selectorField(p, spec.podSelector, 'spec.podSelector');
  const nsSel = selectorField(p, spec.namespaceSelector, 'spec.namespaceSelector');
  const nodeSel = selectorField(p, spec.nodeSelector, 'spec.nodeSelector');
  selectorField(p, spec.externalEntitySelector, 'spec.externalEntitySelector');

  if (spec.childGroups != null) {
    arrayField(p, spec.childGroups, 'spec.childGroups').forEach((c, i) => {
      const child = stringField(p, c, `spec.childGroups[${i}]`);
      if (!child) {
        if (child === '') p.add(`spec.childGroups[${i}]`, 'must be a non-empty group name');
        return;
      }
      if (child === name) {
        p.add(`spec.childGroups[${i}]`, `cannot set ${kind} ${namespace ? `${namespace}/` : ''}${name} as its own childGroup`);
        return;
      }
      members.push(namespaced ? { kind: 'group', namespace: namespace!, name: child } : { kind: 'group', name: child });
    });
  } else if (spec.ipBlocks != null || spec.ipBlock != null) {
    const blocks = spec.ipBlock != null ? [[spec.ipBlock, 'spec.ipBlock'] as const] : arrayField(p, spec.ipBlocks, 'spec.ipBlocks').map((b, i) => [b, `spec.ipBlocks[${i}]`] as const);
    let multicast = false;
    let unicast = false;
    for (const [raw, field] of blocks) {
      const peer = ipBlockPeer(p, raw, field);
      if (!peer) continue;
      if (isMulticastCidr(peer.cidr)) multicast = true;
      else unicast = true;
      members.push(peer);
    }
    if (multicast && unicast) p.add('spec.ipBlocks', 'can not set multicast groupAddress together with unicast ip address');
  } else if (spec.serviceReference != null) {
    const ref = spec.serviceReference;
    if (!isObject(ref)) {
      p.add('spec.serviceReference', 'must be an object with name and namespace');
    } else {
      const svcName = stringField(p, ref.name, 'spec.serviceReference.name');
      const svcNs = stringField(p, ref.namespace, 'spec.serviceReference.namespace') || namespace;
      if (!svcName) p.add('spec.serviceReference.name', 'is required');
      if (!svcNs) p.add('spec.serviceReference.namespace', 'is required');
      if (svcName && svcNs) members.push({ kind: 'serviceRef', namespace: svcNs, name: svcName });
    }
  } else if (spec.nodeSelector != null) {
    if (nodeSel) members.push({ kind: 'nodes', selector: nodeSel });
  } else if (spec.externalEntitySelector != null) {
    // ExternalEntities do not exist in a sluice cluster: the group is empty.
  } else if (spec.podSelector != null || spec.namespaceSelector != null) {
    members.push({
      kind: 'pods',
      namespaces: nsSel ? { kind: 'selector', selector: nsSel } : namespaced ? { kind: 'names', names: [namespace!] } : { kind: 'all' },
      pods: pods ?? {},
    });
  }
  if (p.any) return errorResult(p);
  const def: GroupDef = { name, members };
  if (namespace !== undefined) def.namespace = namespace;
  return { ...emptyResult(), groups: [def] };
}

/** True when the group is a parent (its members name other groups). */
export function hasChildGroups(def: GroupDef): boolean {
  return def.members.some((m) => m.kind === 'group');
}

/**
 * A group's effective members: its own, or the union of its children's. Returns undefined when
 * the group cannot be realized because a child has children itself (one level of nesting only).
 * A child that does not exist (yet) contributes nothing.
 */
export function expandGroupMembers(def: GroupDef, lookup: (namespace: string | undefined, name: string) => GroupDef | undefined): Peer[] | undefined {
  if (!hasChildGroups(def)) return def.members;
  const out: Peer[] = [];
  for (const m of def.members) {
    if (m.kind !== 'group') {
      out.push(m);
      continue;
    }
    const child = lookup(m.namespace, m.name);
    if (!child) continue;
    if (hasChildGroups(child)) return undefined;
    out.push(...child.members);
  }
  return out;
}

/**
 * Members of a group used as appliedTo: ipBlock members cannot be targets and are ignored (Antrea
 * ignores an IPBlock group in appliedTo, so the policy has no effect there).
 */
export function appliedToMembers(members: Peer[]): Peer[] {
  return members.filter((m) => m.kind !== 'ipBlock');
}
