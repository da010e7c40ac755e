/** Tier, ClusterGroup and Group normalization and validation. */
import t from 'tap';
import { clusterGroup, errorsOf, group, normalize, tier } from './policy-antrea-helpers.js';
import { STATIC_TIERS, appliedToMembers, expandGroupMembers } from '../../daemon/policy/antrea/index.js';
import type { GroupDef } from '../../daemon/policy/types.js';

t.test('static tiers', async (t) => {
  t.same(STATIC_TIERS, [
    { name: 'emergency', priority: 50 },
    { name: 'securityops', priority: 100 },
    { name: 'networkops', priority: 150 },
    { name: 'platform', priority: 200 },
    { name: 'application', priority: 250 },
    { name: 'baseline', priority: 253 },
  ]);
  t.ok(Object.isFrozen(STATIC_TIERS));
});

t.test('custom Tier -> TierDef', async (t) => {
  t.same(normalize(tier('mytier', 10)), { rules: [], isolations: [], groups: [], tiers: [{ name: 'mytier', priority: 10 }], errors: [] });
  t.same(normalize(tier('old', 0, 'v1alpha1')).tiers, [{ name: 'old', priority: 0 }], 'v1alpha1, priority 0');
  t.same(normalize(tier('edge', 249)).tiers, [{ name: 'edge', priority: 249 }]);
});

t.test('Tier validation', async (t) => {
  const bad = (name: string, priority: unknown, field: string, message: RegExp) => {
    const r = normalize(tier(name, priority));
    t.same(r.tiers, [], `${name}: no tier`);
    t.ok(r.errors.some((e) => e.kind === 'Tier' && e.name === name && e.field === field && message.test(e.message)), `${name}: ${JSON.stringify(errorsOf(r))}`);
  };
  bad('missing', undefined, 'spec.priority', /required/);
  bad('text', 'high', 'spec.priority', /integer/);
  bad('float', 10.5, 'spec.priority', /integer/);
  bad('negative', -1, 'spec.priority', /between 0 and 255/);
  bad('large', 256, 'spec.priority', /between 0 and 255/);
  for (const p of [251, 252, 254, 255]) bad(`reserved-${p}`, p, 'spec.priority', /reserved/);
  bad('at-250', 250, 'spec.priority', /static tier "application"/);
  bad('at-253', 253, 'spec.priority', /static tier "baseline"/);
  bad('at-50', 50, 'spec.priority', /static tier "emergency"/);
  bad('emergency', 60, 'spec.priority', /fixed priority 50/);
  bad('Emergency', 60, 'metadata.name', /reserved/);
  const noSpec = normalize({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'x' } });
  t.same(errorsOf(noSpec), ['spec: is required']);
});

t.test('a Tier object for a static tier with its own priority is a no-op', async (t) => {
  const r = normalize(tier('application', 250));
  t.same(r, { rules: [], isolations: [], groups: [], tiers: [], errors: [] });
});

t.test('ClusterGroup selections (seed examples)', async (t) => {
  t.same(normalize(clusterGroup('test-cg-sel', { podSelector: { matchLabels: { role: 'db' } }, namespaceSelector: { matchLabels: { env: 'prod' } } }, 'v1alpha3')).groups, [
    { name: 'test-cg-sel', members: [{ kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { env: 'prod' } } }, pods: { matchLabels: { role: 'db' } } }] },
  ]);
  t.same(normalize(clusterGroup('pods-everywhere', { podSelector: { matchLabels: { role: 'db' } } })).groups[0]!.members, [
    { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { role: 'db' } } },
  ], 'a ClusterGroup podSelector alone selects in every Namespace');
  t.same(normalize(clusterGroup('ns-only', { namespaceSelector: { matchLabels: { env: 'prod' } } })).groups[0]!.members, [
    { kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { env: 'prod' } } }, pods: {} },
  ]);
  t.same(normalize(clusterGroup('test-cg-ip-block', { ipBlocks: [{ cidr: '10.0.10.0/24' }, { cidr: '10.0.0.0/16', except: ['10.0.1.0/24'] }] })).groups[0]!.members, [
    { kind: 'ipBlock', cidr: '10.0.10.0/24', except: [] },
    { kind: 'ipBlock', cidr: '10.0.0.0/16', except: ['10.0.1.0/24'] },
  ]);
  t.same(normalize(clusterGroup('single', { ipBlock: { cidr: '10.0.10.0/24' } }, 'v1alpha2')).groups[0]!.members, [{ kind: 'ipBlock', cidr: '10.0.10.0/24', except: [] }], 'ipBlock in v1alpha2/3');
  t.same(normalize(clusterGroup('test-cg-svc-ref', { serviceReference: { name: 'test-service', namespace: 'default' } }, 'v1alpha3')).groups[0]!.members, [
    { kind: 'serviceRef', namespace: 'default', name: 'test-service' },
  ]);
  t.same(normalize(clusterGroup('test-cg-nested', { childGroups: ['test-cg-sel', 'test-cg-ip-blocks', 'test-cg-svc-ref'] }, 'v1alpha3')).groups[0]!.members, [
    { kind: 'group', name: 'test-cg-sel' },
    { kind: 'group', name: 'test-cg-ip-blocks' },
    { kind: 'group', name: 'test-cg-svc-ref' },
  ]);
  t.same(normalize(clusterGroup('cp-nodes', { nodeSelector: { matchLabels: { role: 'cp' } } })).groups[0]!.members, [{ kind: 'nodes', selector: { matchLabels: { role: 'cp' } } }]);
  t.same(normalize(clusterGroup('ee', { externalEntitySelector: {} })).groups[0]!.members, [], 'ExternalEntities: none in a sluice cluster');
  t.same(normalize(clusterGroup('empty', {})).groups[0]!.members, [], 'an empty spec selects nothing');
});

t.test('Group: own namespace scoping', async (t) => {
  t.same(normalize(group('ns1', 'g', { podSelector: { matchLabels: { app: 'a' } } })).groups, [
    { namespace: 'ns1', name: 'g', members: [{ kind: 'pods', namespaces: { kind: 'names', names: ['ns1'] }, pods: { matchLabels: { app: 'a' } } }] },
  ]);
  t.same(normalize(group('ns1', 'with-ns', { podSelector: {}, namespaceSelector: { matchLabels: { x: 'y' } } })).groups[0]!.members, [
    { kind: 'pods', namespaces: { kind: 'selector', selector: { matchLabels: { x: 'y' } } }, pods: {} },
  ]);
  t.same(normalize(group('ns1', 'parent', { childGroups: ['c1', 'c2'] }, 'v1alpha3')).groups[0]!.members, [
    { kind: 'group', namespace: 'ns1', name: 'c1' },
    { kind: 'group', namespace: 'ns1', name: 'c2' },
  ], 'child Groups are looked up in the parent\'s Namespace');
  t.same(normalize(group('ns1', 'svc', { serviceReference: { name: 'api' } })).groups[0]!.members, [{ kind: 'serviceRef', namespace: 'ns1', name: 'api' }]);
});

t.test('group validation', async (t) => {
  const bad = (obj: ReturnType<typeof clusterGroup>, field: string, message: RegExp) => {
    const r = normalize(obj);
    t.same(r.groups, [], `${obj.metadata.name}: no group`);
    t.ok(r.errors.some((e) => e.kind === obj.kind && e.name === obj.metadata.name && e.field === field && message.test(e.message)), `${obj.metadata.name}: ${JSON.stringify(errorsOf(r))}`);
  };
  bad(clusterGroup('two-kinds', { podSelector: {}, ipBlocks: [{ cidr: '10.0.0.0/8' }] }), 'spec', /at most one/);
  bad(clusterGroup('three', { podSelector: {}, namespaceSelector: {}, serviceReference: { name: 'a', namespace: 'b' } }), 'spec', /at most one/);
  bad(clusterGroup('ns-and-svc', { namespaceSelector: {}, serviceReference: { name: 'a', namespace: 'b' } }), 'spec', /at most one/);
  bad(clusterGroup('children-and-pods', { childGroups: ['a'], podSelector: {} }), 'spec', /at most one/);
  bad(clusterGroup('ipblock-and-ipblocks', { ipBlock: { cidr: '10.0.0.0/8' }, ipBlocks: [{ cidr: '11.0.0.0/8' }] }, 'v1alpha3'), 'spec', /at most one/);
  bad(clusterGroup('ipblock-v1beta1', { ipBlock: { cidr: '10.0.0.0/8' } }), 'spec.ipBlock', /removed in crd.antrea.io\/v1beta1/);
  bad(clusterGroup('bad-cidr', { ipBlocks: [{ cidr: '10.0.0.0/40' }] }), 'spec.ipBlocks[0].cidr', /invalid CIDR/);
  bad(clusterGroup('bad-except', { ipBlocks: [{ cidr: '10.0.0.0/16', except: ['10.1.0.0/24'] }] }), 'spec.ipBlocks[0].except[0]', /strict subset/);
  bad(clusterGroup('mixed-mc', { ipBlocks: [{ cidr: '225.0.0.0/24' }, { cidr: '10.0.0.0/8' }] }), 'spec.ipBlocks', /multicast/);
  bad(clusterGroup('self-child', { childGroups: ['self-child'] }), 'spec.childGroups[0]', /its own childGroup/);
  bad(clusterGroup('svc-no-ns', { serviceReference: { name: 'a' } }), 'spec.serviceReference.namespace', /required/);
  bad(clusterGroup('svc-no-name', { serviceReference: { namespace: 'a' } }), 'spec.serviceReference.name', /required/);
  bad(clusterGroup('label', { podSelector: { matchLabels: { 'a b': 'c' } } }), 'spec.podSelector.matchLabels', /invalid label/);
  bad(group('ns', 'node-group', { nodeSelector: {} }), 'spec.nodeSelector', /only supported in a ClusterGroup/);
  bad(group('ns', 'self', { childGroups: ['self'] }), 'spec.childGroups[0]', /cannot set Group ns\/self as its own childGroup/);
  bad({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterGroup', metadata: { name: 'nospec' } }, 'spec', /required/);
});

t.test('expandGroupMembers: one level of childGroups', async (t) => {
  const defs = new Map<string, GroupDef>();
  const add = (d: GroupDef) => defs.set(`${d.namespace ?? ''}/${d.name}`, d);
  const lookup = (ns: string | undefined, name: string) => defs.get(`${ns ?? ''}/${name}`);
  for (const obj of [
    clusterGroup('pods', { podSelector: { matchLabels: { app: 'a' } } }),
    clusterGroup('ips', { ipBlocks: [{ cidr: '10.0.0.0/8' }] }),
    clusterGroup('parent', { childGroups: ['pods', 'ips', 'missing'] }),
    clusterGroup('grandparent', { childGroups: ['parent'] }),
  ]) add(normalize(obj).groups[0]!);
  t.same(expandGroupMembers(lookup(undefined, 'pods')!, lookup), [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'a' } } }]);
  t.same(expandGroupMembers(lookup(undefined, 'parent')!, lookup), [
    { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'a' } } },
    { kind: 'ipBlock', cidr: '10.0.0.0/8', except: [] },
  ], 'union of the children; a missing child adds nothing');
  t.equal(expandGroupMembers(lookup(undefined, 'grandparent')!, lookup), undefined, 'a child with children of its own: not realizable');
  t.same(appliedToMembers(expandGroupMembers(lookup(undefined, 'parent')!, lookup)!), [{ kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: 'a' } } }], 'ipBlocks are not targets');
});
