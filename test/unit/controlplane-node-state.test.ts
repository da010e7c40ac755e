/**
 * An agent's state from the controller's streams, which arrive in any order across kinds: a policy
 * is enforced only with every AddressGroup it names (a Drop never runs with an empty peer set for
 * want of its group), the version enforced before stays meanwhile, a removed group stays while an
 * enforced rule names it, and a patch for a group not held is an error, not a silent loss.
 */
import t from 'tap';
import { NodePolicyState } from '../../daemon/controlplane/node-state.js';
import { CONTROLPLANE_API_VERSION, type ControlPlaneAddressGroup, type ControlPlaneAppliedToGroup, type ControlPlaneNetworkPolicy } from '../../daemon/controlplane/types.js';
import type { ComputedRule, GroupMember } from '../../daemon/policy/types.js';

const api = CONTROLPLANE_API_VERSION;
const pod = (ref: string, ip: string, nodeName = 'node-1'): GroupMember => ({ kind: 'pod', ref, nodeName, ips: [ip], ports: [] });

function dropRule(id: string, addressGroup: string): ComputedRule {
  return {
    id, ruleId: id, ref: { kind: 'AntreaClusterNetworkPolicy', name: 'quarantine', rule: id, tier: 'securityops' }, direction: 'Ingress', action: 'Drop',
    priority: { stage: 0, tier: 50, policy: 1, rule: 0, tieBreak: 'AntreaClusterNetworkPolicy//quarantine' },
    appliedToGroups: ['atg-web'], anyPeer: false, addressGroups: [addressGroup], ipBlocks: [], ports: [],
  };
}
const policy = (rules: ComputedRule[]): ControlPlaneNetworkPolicy => ({ apiVersion: api, kind: 'NetworkPolicy', metadata: { name: 'acnp.quarantine' }, sourceKey: 'AntreaClusterNetworkPolicy//quarantine', rules, isolations: [] });
const atg: ControlPlaneAppliedToGroup = { apiVersion: api, kind: 'AppliedToGroup', metadata: { name: 'atg-web' }, members: [pod('y/web', '10.0.1.5')] };
const ag = (name: string, members: GroupMember[]): ControlPlaneAddressGroup => ({ apiVersion: api, kind: 'AddressGroup', metadata: { name }, members, ipBlocks: [] });

t.test('a policy waits for its AddressGroups; the version before stays enforced meanwhile', async (t) => {
  const s = new NodePolicyState('node-1');
  s.event({ type: 'ADDED', object: atg });
  s.event({ type: 'ADDED', object: policy([dropRule('r1', 'ag-z')]) });
  s.commit();
  t.same(s.nodeRuleSet(), [], 'not enforced without its AddressGroup');
  t.same(s.counts().waiting, ['acnp.quarantine'], 'and reported as waiting');
  s.event({ type: 'ADDED', object: ag('ag-z', [pod('z/a', '10.0.2.7', 'node-2')]) });
  const cs = s.commit();
  t.same(cs.rules.added, ['r1'], 'enforced once the group came');
  t.match(s.nodeRuleSet(), [{ id: 'r1', action: 'Drop', peers: { ips: ['10.0.2.7'] }, targets: [{ ref: 'y/web' }] }]);

  // An update naming a group not yet here: the rule enforced before stays.
  s.event({ type: 'MODIFIED', object: policy([dropRule('r1', 'ag-z2')]) });
  s.event({ type: 'DELETED', object: { apiVersion: api, kind: 'AddressGroup', metadata: { name: 'ag-z' } } });
  s.commit();
  t.match(s.nodeRuleSet(), [{ id: 'r1', peers: { ips: ['10.0.2.7'] } }], 'the previous version, with its removed group kept, still drops');
  s.event({ type: 'ADDED', object: ag('ag-z2', [pod('z/b', '10.0.2.8', 'node-2')]) });
  s.commit();
  t.match(s.nodeRuleSet(), [{ id: 'r1', peers: { ips: ['10.0.2.8'] } }], 'the new version once its group came');
  t.equal(s.counts().addressGroups, 1, 'the removed group is dropped once nothing names it');
});

t.test('patches change members; a patch for a group not held is an error naming it', async (t) => {
  const s = new NodePolicyState('node-1');
  s.sync('AppliedToGroup', [atg]);
  s.sync('AddressGroup', [ag('ag-z', [pod('z/a', '10.0.2.7', 'node-2')])]);
  s.sync('NetworkPolicy', [policy([dropRule('r1', 'ag-z')])]);
  s.commit();
  s.event({ type: 'MODIFIED', object: { apiVersion: api, kind: 'AddressGroupPatch', metadata: { name: 'ag-z' }, upserted: [pod('z/c', '10.0.2.9', 'node-3')], removed: ['pod:z/a'] } });
  const cs = s.commit();
  t.same(cs.addressGroups.updated, ['ag-z']);
  t.match(s.nodeRuleSet(), [{ id: 'r1', peers: { ips: ['10.0.2.9'] } }]);
  t.throws(() => s.event({ type: 'MODIFIED', object: { apiVersion: api, kind: 'AddressGroupPatch', metadata: { name: 'ag-x' }, upserted: [], removed: [] } }), /AddressGroup ag-x/);
  // A relist that no longer has the policy removes it; one with it again restores it.
  s.sync('NetworkPolicy', []);
  t.same(s.commit().rules.removed, ['r1']);
  t.same(s.nodeRuleSet(), []);
});

t.test('only this Node\'s members are targets', async (t) => {
  const s = new NodePolicyState('node-2');
  s.sync('AppliedToGroup', [atg]);
  s.sync('AddressGroup', [ag('ag-z', [])]);
  s.sync('NetworkPolicy', [policy([dropRule('r1', 'ag-z')])]);
  s.commit();
  t.same(s.nodeRuleSet(), [], 'a member of another Node is no target here');
});
