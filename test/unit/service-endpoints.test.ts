/**
 * Service endpoints in the change set: the engine names the toServices AddressGroups whose Service
 * now resolves to other endpoints (EndpointSlice, Service or Pod changes), dirtyRuleIds turns them
 * into exactly the rules naming those Services, and the compiler recompiles only those, to the
 * flows a from-scratch engine and compiler give. Events no followed Service reads compile nothing.
 */
import t, { type Test } from 'tap';
import { pino } from 'pino';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { dirtyRuleIds, PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { ManualClock } from './manual-clock.js';

const log = pino({ level: 'silent' });

const ns = (name: string): KubeObject => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name } } });
const pod = (namespace: string, name: string, ip: string, node: string, labels: Record<string, string>, httpPort = 8080): KubeObject => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { namespace, name, labels },
  spec: { nodeName: node, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: httpPort }] }] },
  status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
});
const service = (name: string, clusterIP: string, targetPort: number | string): KubeObject => ({
  apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name },
  spec: { clusterIP, clusterIPs: [clusterIP], selector: { app: name }, ports: [{ port: 80, protocol: 'TCP', targetPort }] },
});
/** An EndpointSlice of Service x/<svc>: [pod, ip, ready] per endpoint, by Pod reference. */
const slice = (svc: string, endpoints: [string, string, boolean][]): KubeObject => ({
  apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { namespace: 'x', name: `${svc}-abc`, labels: { 'kubernetes.io/service-name': svc } },
  addressType: 'IPv4',
  endpoints: endpoints.map(([p, ip, ready]) => ({ addresses: [ip], conditions: { ready }, targetRef: { kind: 'Pod', namespace: 'x', name: p } })),
} as KubeObject);
const toServices = (name: string, app: string, services: string[]): KubeObject => ({
  apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name },
  spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app } } }], egress: [{ action: 'Allow', toServices: services.map((s) => ({ name: s, namespace: 'x' })) }, { action: 'Drop', to: [{ ipBlock: { cidr: '192.0.2.0/24' } }] }] },
});

/**
 * Local clients c1 (app=c1), c2 (app=c2); remote servers s1, s2 (Service s, named target port
 * `http`) and u1 (Service u, target port 8080); Pod y/other in no slice. Rules: to-s (c1 -> s),
 * to-u (c2 -> u), to-both (c1 -> s and u), each followed by a drop rule to an address block no
 * Pod is in (a rule whose peers no Pod event changes).
 */
function cluster(): KubeObject[] {
  return [
    ns('x'), ns('y'),
    pod('x', 'c1', '10.1.0.11', 'node-1', { app: 'c1' }), pod('x', 'c2', '10.1.0.12', 'node-1', { app: 'c2' }),
    pod('x', 's1', '10.2.0.21', 'node-2', { app: 's' }), pod('x', 's2', '10.2.0.22', 'node-2', { app: 's' }),
    pod('x', 'u1', '10.2.0.31', 'node-2', { app: 'u' }), pod('y', 'other', '10.2.0.41', 'node-2', { app: 'o' }),
    service('s', '10.96.0.10', 'http'), service('u', '10.96.0.11', 8080),
    slice('s', [['s1', '10.2.0.21', true]]), slice('u', [['u1', '10.2.0.31', true]]),
    toServices('to-s', 'c1', ['s']), toServices('to-u', 'c2', ['u']), toServices('to-both', 'c1', ['s', 'u']),
  ];
}

const keyOf = (o: KubeObject) => `${o.apiVersion}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const cookies = (flows: readonly { cookie: string }[]) => flows.map((f) => f.cookie).sort();

/** The live engine and compiler, the objects as they stand, and each event's dirty rules and delta. */
function rig() {
  const engine = new PolicyEngine({ nodeName: 'node-1' });
  const pf = new PolicyFlows();
  const objects = new Map<string, KubeObject>();
  for (const o of cluster()) {
    objects.set(keyOf(o), o);
    engine.upsert(o);
  }
  pf.sync(policyFlowInput(engine));
  /** The computed rules (ids) of the allow rule of one policy. */
  const rulesOf = (policy: string) => engine.internalRules().filter((r) => r.ref.name === policy && r.action === 'Allow').map((r) => r.id);
  const event = (o: KubeObject) => {
    objects.set(keyOf(o), o);
    const cs = engine.upsert(o);
    const dirty = dirtyRuleIds(cs, engine);
    const delta = pf.sync(policyFlowInput(engine), dirty);
    return { cs, dirty: [...dirty].sort(), delta };
  };
  /** Flows of a new engine and compiler fed the objects as they stand. */
  const scratch = () => {
    const e = new PolicyEngine({ nodeName: 'node-1' });
    const rank = (o: KubeObject) => ['Namespace', 'Pod', 'Service', 'EndpointSlice'].indexOf(o.kind) + 1 || 9;
    for (const o of [...objects.values()].sort((a, b) => rank(a) - rank(b))) e.upsert(o);
    const fresh = new PolicyFlows();
    fresh.sync(policyFlowInput(e));
    return fresh.flows();
  };
  const postDnat = (ip: string, port: number) => pf.flows().some((f) => f.table === 'AntreaPolicyEgressRule' && f.match === `tcp,nw_dst=${ip},tp_dst=${port}`);
  return { engine, pf, rulesOf, event, scratch, postDnat };
}

t.test('an EndpointSlice change of Service s recompiles exactly the rules naming s, to the from-scratch flows', async (t) => {
  const { rulesOf, event, scratch, pf, postDnat } = rig();
  const namingS = [...rulesOf('to-s'), ...rulesOf('to-both')].sort();
  t.equal(namingS.length, 2);
  t.ok(postDnat('10.2.0.21', 8080) && !postDnat('10.2.0.22', 8080));

  const { cs, dirty, delta } = event(slice('s', [['s1', '10.2.0.21', true], ['s2', '10.2.0.22', true]]));
  t.equal(cs.serviceEndpoints.length, 1, 'the ChangeSet names the AddressGroup of s');
  t.same([cs.addressGroups, cs.rules], [{ added: [], updated: [], removed: [] }, { added: [], updated: [], removed: [] }], 'no group or rule content changed: only where s sends');
  t.same(dirty, namingS, 'dirty = the rules naming s (to-s, to-both), not to-u');
  t.same([delta.add.map((f) => f.match), delta.remove], [['tcp,nw_dst=10.2.0.22,tp_dst=8080', 'tcp,nw_dst=10.2.0.22,tp_dst=8080'], []], 'the new endpoint\'s post-DNAT peer flow, once per rule (each at its own priority)');
  t.same(cookies(pf.flows()), cookies(scratch()), 'flows and cookies equal a from-scratch engine and compiler');
  t.ok(postDnat('10.2.0.22', 8080));
});

t.test('a Pod no followed Service reads changes nothing; a Pod of a followed slice does', async (t) => {
  const { rulesOf, event, scratch, pf, postDnat } = rig();
  const namingS = [...rulesOf('to-s'), ...rulesOf('to-both')].sort();
  const namingU = [...rulesOf('to-u'), ...rulesOf('to-both')].sort();

  const unrelated = event(pod('y', 'other', '10.2.0.41', 'node-2', { app: 'o', v: '2' }));
  t.same([unrelated.cs.serviceEndpoints, unrelated.dirty, unrelated.delta], [[], [], { add: [], remove: [] }], 'relabel of a Pod in no slice: no endpoint change, no dirty rule');
  const moved = event(pod('y', 'other', '10.2.0.42', 'node-2', { app: 'o', v: '2' }));
  t.same([moved.cs.serviceEndpoints, moved.dirty], [[], []], 'its new address either');
  const relabel = event(pod('x', 's2', '10.2.0.22', 'node-2', { app: 's', v: '2' }));
  t.same([relabel.cs.serviceEndpoints, relabel.dirty], [[], []], 'a Pod of Service s that no slice lists (the selector is not read while slices exist)');

  // Readiness: s1 not ready -> s has no endpoint left.
  const notReady = event(slice('s', [['s1', '10.2.0.21', false]]));
  t.same(notReady.dirty, namingS, 'readiness change in the slice of s: the rules naming s');
  t.notOk(postDnat('10.2.0.21', 8080), 'the not-ready endpoint is no longer matched');
  t.same(cookies(pf.flows()), cookies(scratch()));
  event(slice('s', [['s1', '10.2.0.21', true]]));
  t.ok(postDnat('10.2.0.21', 8080));

  // An endpoint Pod's address changes (the slice names it by reference).
  const readdress = event(pod('x', 's1', '10.2.0.23', 'node-2', { app: 's' }));
  t.same(readdress.dirty, namingS, 'address change of a Pod in the slice of s: the rules naming s');
  t.ok(postDnat('10.2.0.23', 8080) && !postDnat('10.2.0.21', 8080), 'the post-DNAT flow follows the address');
  t.same(cookies(pf.flows()), cookies(scratch()));

  // The named target port resolves on the Pod: its container port moves the endpoint's port.
  const port = event(pod('x', 's1', '10.2.0.23', 'node-2', { app: 's' }, 9090));
  t.same(port.dirty, namingS, 'the named port `http` of an endpoint Pod changed');
  t.ok(postDnat('10.2.0.23', 9090));
  t.same(cookies(pf.flows()), cookies(scratch()));

  // The Service's target port (not in its AddressGroup's members) moves every endpoint of u.
  const target = event(service('u', '10.96.0.11', 8081));
  t.same(target.dirty, namingU, 'target port of u: the rules naming u');
  t.same(target.cs.addressGroups.updated, [], 'its group (ClusterIP and port) is unchanged');
  t.ok(postDnat('10.2.0.31', 8081) && !postDnat('10.2.0.31', 8080));
  t.same(cookies(pf.flows()), cookies(scratch()));

  // Another Service at u's ClusterIP (as the engine indexes addresses, the later one holds it):
  // the address now resolves to that Service's endpoints.
  const claim = event({ ...service('s', '10.96.0.11', 8080), metadata: { namespace: 'x', name: 'dup' } });
  t.same(claim.dirty, namingU, 'a Service taking the ClusterIP of u: the rules naming u');
  t.ok(postDnat('10.2.0.23', 8080) && postDnat('10.2.0.22', 8080) && !postDnat('10.2.0.31', 8081), 'the selector of dup (app=s, no slices of its own): s1 and s2');
  t.same(cookies(pf.flows()), cookies(scratch()));
});

/** An enforcer over cluster() whose compiles and flow applies are counted (manual clock). */
async function countingEnforcer(t: Test) {
  const clock = new ManualClock();
  const e = new Enforcer({ nodeName: 'node-1', ovsRunDir: '/nonexistent', bridge: 'br-int', log, debounceMs: 5, clock });
  t.teardown(() => e.close());
  let applies = 0;
  e.bindFlows(async () => {
    applies++;
  });
  let compiles = 0;
  const sync = e.policyFlows.sync.bind(e.policyFlows);
  e.policyFlows.sync = (input, dirty) => {
    compiles++;
    return sync(input, dirty);
  };
  const up = (o: KubeObject) => e.onWatchEvent({ type: 'upsert', object: o });
  for (const o of cluster()) up(o);
  await clock.advance(30);
  return { e, up, clock, counts: () => ({ compiles, applies, changes: e.status().changes }) };
}

t.test('enforcer: with toServices rules, unrelated Pod events compile nothing; an endpoint change compiles and applies', async (t) => {
  const { e, up, clock, counts } = await countingEnforcer(t);
  const postDnat = (ip: string) => e.flows().some((f) => f.table === 'AntreaPolicyEgressRule' && f.match === `tcp,nw_dst=${ip},tp_dst=8080`);
  t.ok(postDnat('10.2.0.21'));
  const before = counts();
  for (let i = 0; i < 5; i++) {
    up(pod('y', 'other', `10.2.0.4${i}`, 'node-2', { app: 'o', v: `${i}` }));
    up(pod('y', `new-${i}`, `10.2.1.${i + 1}`, 'node-2', { app: 'o' }));
    await clock.advance(30);
  }
  t.same(counts(), before, 'ten Pod events none of the followed Services reads: no compile, no apply');

  up(slice('s', [['s1', '10.2.0.21', false], ['s2', '10.2.0.22', true]]));
  await clock.advance(30);
  const after = counts();
  t.ok(after.compiles > before.compiles && after.applies > before.applies && after.changes > before.changes, 'the readiness change is compiled and applied');
  t.ok(postDnat('10.2.0.22') && !postDnat('10.2.0.21'), 'the flows follow the ready endpoint');
});
