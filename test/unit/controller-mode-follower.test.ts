/**
 * The controller-mode follower (daemon/enforcement/controller-mode/follower.ts), on a manual clock
 * with a fake watcher: commits only at consistent cuts (connected, every kind listed, every kind
 * delivered up to the versions the events require), never a policy without the groups one change
 * sent with it; nothing committed while disconnected; realized(v) only once a commit took v in and
 * its flush is on the bridge; an event that cannot be applied is counted and rethrown (the watcher
 * lists that kind again).
 */
import t from 'tap';
import { pino } from 'pino';
import { ControlPlaneFollower } from '../../daemon/enforcement/controller-mode/follower.js';
import {
  CONTROLPLANE_API_VERSION, type ControlPlaneKind, type ControlPlaneObject, VIEW_VERSIONS_ANNOTATION, type ViewVersions,
} from '../../daemon/controlplane/types.js';
import type { ChangeSet } from '../../daemon/policy/internal.js';
import type { ComputedRule } from '../../daemon/policy/types.js';
import { ManualClock } from './manual-clock.js';

const log = pino({ level: 'silent' });
const annotations = (np: number, atg: number, ag: number) => ({ [VIEW_VERSIONS_ANNOTATION]: `NetworkPolicy=${np},AppliedToGroup=${atg},AddressGroup=${ag}` });

function setup() {
  const clock = new ManualClock();
  const rvs: Partial<Record<ControlPlaneKind, string>> = {};
  const commits: ChangeSet[] = [];
  let changes = 0;
  let committed = 0;
  const f = new ControlPlaneFollower({
    nodeName: 'n1', clock, log,
    changed: (cs) => {
      commits.push(cs);
      if (cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length > 0) changes++;
    },
    changes: () => changes,
    committedChanges: () => committed,
  });
  f.bind({ resourceVersions: () => rvs, storeId: () => 'store-1' });
  return { clock, rvs, commits, f, flushed: () => (committed = changes) };
}

const rule = (id: string, atg: string, ag: string): ComputedRule => ({
  id, ruleId: id, direction: 'Ingress', action: 'Allow', appliedToGroups: [atg], addressGroups: [ag], anyPeer: false, ipBlocks: [], ports: [],
  ref: { kind: 'NetworkPolicy', namespace: 'x', name: 'p', rule: 'r' }, priority: { stage: 1, tierPriority: 0, policyPriority: 0, rulePriority: 0 },
} as unknown as ComputedRule);

t.test('a change sent on three streams is committed once all of it is here', async (t) => {
  const { clock, rvs, commits, f, flushed } = setup();
  f.onSync('NetworkPolicy', []);
  f.onSync('AppliedToGroup', []);
  f.onSync('AddressGroup', []);
  Object.assign(rvs, { NetworkPolicy: '10', AppliedToGroup: '10', AddressGroup: '10' });
  f.onState('connected', 'listed');
  await clock.advance(0);
  t.equal(commits.length, 1, 'the initial lists commit');
  t.ok(f.synced, 'synced');

  // Change 11..13: the AddressGroup, the AppliedToGroup, then the policy naming both.
  const meta = (name: string, rv: number) => ({ name, resourceVersion: String(rv), annotations: annotations(13, 12, 11) });
  const np: ControlPlaneObject = { apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: meta('networkpolicy.x.p', 13), sourceKey: 'NetworkPolicy/x/p', rules: [rule('r1', 'atg-1', 'ag-1')], isolations: [] };
  f.onEvent('NetworkPolicy', { type: 'ADDED', object: np });
  rvs.NetworkPolicy = '13';
  await clock.advance(0);
  t.equal(commits.length, 1, 'the policy alone is held: its groups are on their way');
  t.match(f.status('s').held, /waiting for AppliedToGroup 12, AddressGroup 11/);
  f.onEvent('AddressGroup', { type: 'ADDED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: meta('ag-1', 11), members: [], ipBlocks: [] } });
  rvs.AddressGroup = '11';
  await clock.advance(0);
  t.equal(commits.length, 1, 'still held without the AppliedToGroup');
  f.onEvent('AppliedToGroup', { type: 'ADDED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AppliedToGroup', metadata: meta('atg-1', 12), members: [{ kind: 'pod', ref: 'x/a', nodeName: 'n1', ips: ['10.0.0.1'], ports: [] }] } });
  rvs.AppliedToGroup = '12';
  await clock.advance(0);
  t.equal(commits.length, 2, 'committed once the three streams delivered the change');
  t.same(commits[1]!.rules.added, ['r1'], 'the rule, with its groups');
  t.equal(f.state.nodeRuleSet().length, 1, 'a node rule for the local member');

  const v: ViewVersions = { NetworkPolicy: 13n, AppliedToGroup: 12n, AddressGroup: 11n };
  t.notOk(f.realized(v), 'not realized before its flush is on the bridge');
  flushed();
  t.ok(f.realized(v), 'realized once flushed');
  t.notOk(f.realized({ ...v, AddressGroup: 14n }), 'not a later version');
});

t.test('nothing is committed while disconnected or while a kind is listed again', async (t) => {
  const { clock, rvs, commits, f } = setup();
  for (const k of ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'] as const) f.onSync(k, []);
  Object.assign(rvs, { NetworkPolicy: '5', AppliedToGroup: '5', AddressGroup: '5' });
  await clock.advance(0);
  t.equal(commits.length, 0, 'not connected yet: nothing');
  f.onState('connected', 'ok');
  await clock.advance(0);
  t.equal(commits.length, 1);
  f.onState('disconnected', 'connection refused');
  f.onSync('NetworkPolicy', [{ apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: 'networkpolicy.x.q', resourceVersion: '9' }, sourceKey: 'NetworkPolicy/x/q', rules: [], isolations: [] }]);
  rvs.NetworkPolicy = '9';
  await clock.advance(0);
  t.equal(commits.length, 1, 'a relist of one kind while another is not followed: held');
  t.match(f.status('s'), { connected: false, reason: 'connection refused', held: /not connected/ });
  f.onState('connected', 'ok');
  await clock.advance(0);
  t.equal(commits.length, 2, 'committed as one change once every kind is followed');
});

t.test('an event that cannot be applied is counted and rethrown', async (t) => {
  const { f } = setup();
  t.throws(() => f.onEvent('AddressGroup', { type: 'MODIFIED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroupPatch', metadata: { name: 'ag-x', resourceVersion: '3' }, upserted: [], removed: [] } }), /does not hold/);
  t.equal(f.status('s').rejected, 1);
});

t.test('another store (a takeover, a restart): nothing committed until every kind is listed from it; old versions answer no', async (t) => {
  const { clock, rvs, commits, f, flushed } = setup();
  for (const k of ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'] as const) f.onSync(k, []);
  Object.assign(rvs, { NetworkPolicy: '900', AppliedToGroup: '900', AddressGroup: '900' });
  f.onState('connected', 'ok');
  await clock.advance(0);
  flushed();
  t.ok(f.realized({ NetworkPolicy: 900n, AppliedToGroup: 900n, AddressGroup: 900n }));
  // The new store numbers from lower versions than the old one.
  f.onStoreChange('store-b');
  t.notOk(f.realized({ NetworkPolicy: 5n, AppliedToGroup: 5n, AddressGroup: 5n }), 'the old store\'s versions answer nothing of the new one\'s');
  f.onSync('NetworkPolicy', []);
  rvs.NetworkPolicy = '7';
  await clock.advance(0);
  t.equal(commits.length, 1, 'one kind relisted from the new store: held');
  t.match(f.status('s'), { synced: true, storeChanges: 1, held: /not listed yet: AppliedToGroup, AddressGroup/ });
  f.onSync('AppliedToGroup', []);
  f.onSync('AddressGroup', []);
  Object.assign(rvs, { AppliedToGroup: '7', AddressGroup: '7' });
  await clock.advance(0);
  t.equal(commits.length, 2, 'committed once every kind came from the new store');
  flushed();
  t.ok(f.realized({ NetworkPolicy: 5n, AppliedToGroup: 5n, AddressGroup: 5n }), 'and the new store\'s versions are answered');
});

t.test('a learned DNS name is enforced at once, unless something received is held back: then with the next commit', async (t) => {
  const { clock, rvs, commits, f } = setup();
  const group = (rv: number, ann = annotations(rv, rv, rv)): ControlPlaneObject => ({
    apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: 'ag-fqdn', resourceVersion: String(rv), annotations: ann }, members: [], ipBlocks: [], fqdn: ['*.example.com'],
  });
  t.equal(f.localChange(), undefined, 'before the first commit: nothing to change yet');
  f.onSync('NetworkPolicy', [{ apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: 'np', resourceVersion: '10' }, sourceKey: 'k', rules: [{ ...rule('r1', 'atg-1', 'ag-fqdn'), direction: 'Egress' } as ComputedRule], isolations: [] }]);
  f.onSync('AppliedToGroup', [{ apiVersion: CONTROLPLANE_API_VERSION, kind: 'AppliedToGroup', metadata: { name: 'atg-1', resourceVersion: '10' }, members: [{ kind: 'pod', ref: 'x/a', nodeName: 'n1', ips: ['10.0.0.1'], ports: [] }] }]);
  f.onSync('AddressGroup', [group(10)]);
  Object.assign(rvs, { NetworkPolicy: '10', AppliedToGroup: '10', AddressGroup: '10' });
  f.onState('connected', 'listed');
  await clock.advance(0);
  t.equal(commits.length, 1, 'committed');
  t.same(f.state.fqdnTargetPodIps(), ['10.0.0.1'], 'the egress rule\'s local target is intercepted');

  f.state.setFqdnAddresses([{ name: 'www.example.com', ips: ['192.0.2.1'] }]);
  const now = f.localChange();
  t.same(now?.addressGroups.updated, ['ag-fqdn'], 'nothing held back: the learned change is committed at once');
  t.match(JSON.stringify(f.state.nodeRuleSet()[0]!.peers), /192\.0\.2\.1/, 'the rule\'s peers hold the learned address');

  // A change arriving on one stream, its other part still on the way: the learned change waits for the cut.
  f.onEvent('NetworkPolicy', { type: 'MODIFIED', object: { apiVersion: CONTROLPLANE_API_VERSION, kind: 'NetworkPolicy', metadata: { name: 'np', resourceVersion: '12', annotations: annotations(12, 10, 11) }, sourceKey: 'k', rules: [{ ...rule('r1', 'atg-1', 'ag-fqdn'), direction: 'Egress', action: 'Drop' } as ComputedRule], isolations: [] } });
  rvs.NetworkPolicy = '12';
  f.state.setFqdnAddresses([{ name: 'www.example.com', ips: ['192.0.2.1', '192.0.2.2'] }]);
  t.equal(f.localChange(), undefined, 'held back: not committed now (that would enforce half of the controller\'s change)');
  await clock.advance(0);
  t.equal(commits.length, 1, 'still held');
  t.notMatch(JSON.stringify(f.state.nodeRuleSet()[0]!.peers), /192\.0\.2\.2/, 'the rule still holds what was committed');
  f.onEvent('AddressGroup', { type: 'MODIFIED', object: group(11, annotations(12, 10, 11)) });
  rvs.AddressGroup = '11';
  await clock.advance(0);
  t.equal(commits.length, 2, 'the cut is complete: one commit');
  t.same(commits[1]!.rules.updated, ['r1'], 'with the controller\'s change');
  t.ok(commits[1]!.addressGroups.updated.includes('ag-fqdn'), 'and the learned one');
  t.match(JSON.stringify(f.state.nodeRuleSet()[0]!.peers), /192\.0\.2\.1.*192\.0\.2\.2/, 'the re-sent group keeps what this Node learned');
});
