/**
 * Controller mode and standalone mode give a Node the same rules and the same flows.
 *
 * Random clusters and random event walks (Pods coming, going, relabelled and moving; Namespaces
 * and Nodes relabelled; NetworkPolicies, relative, group, serviceRef and toServices policies,
 * rules applied to Nodes or naming them as peers; Services and EndpointSlices) are fed to one controller engine, whose ClusterComputation sends each Node the
 * events of its view; each Node's NodePolicyState receives them with the three kinds' streams
 * interleaved at random (each in its order), as separate watches deliver them. After every step,
 * for every Node: the node rule set, the isolations and the compiled flows (compiled incrementally
 * from the NodePolicyState's ChangeSets) equal those of a standalone engine of that Node fed the
 * same objects. A relist (the controller restarted, a watch expired) and a fresh agent must land
 * on the same state too. FQDN peers: each Node learns DNS names of its own (its agent's DNS
 * learning), told to its standalone engine and its NodePolicyState alike; the controller learns none.
 */
import t from 'tap';
import { memberNodes, type PerNodeViewSink, perNodeSink } from '../../daemon/controller/computation.js';
import { ClusterComputation } from '../../daemon/controller/computation.js';
import { NodePolicyState } from '../../daemon/controlplane/node-state.js';
import type { ControlPlaneAddressGroupPatch, ControlPlaneEvent, ControlPlaneKind, ControlPlaneObject } from '../../daemon/controlplane/types.js';
import { dirtyRuleIds, PolicyFlows, type PolicyFlowInput, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, podsIn, rng, rule, rulesObject, testKind } from './policy-core-helpers.js';
import { keyOf, NAMES, NAMESPACES, podObject, randomGroupPolicy, randomGroups, randomLabels, randomNetpol, randomRelative, randomService, randomSlice } from './policy-random-cluster.js';

const NODES = ['node-1', 'node-2', 'node-3'];
const KINDS: ControlPlaneKind[] = ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'];

/** The store's per-Node event semantics, kept in memory: what each Node holds and the events it is owed. */
class Recorder implements PerNodeViewSink {
  readonly views = new Map<string, Map<string, ControlPlaneObject>>();
  readonly queues = new Map<string, Map<ControlPlaneKind, ControlPlaneEvent[]>>();
  patches = 0;

  set(node: string, kind: ControlPlaneKind, name: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void {
    let view = this.views.get(node);
    if (!view) this.views.set(node, (view = new Map()));
    const key = `${kind}/${name}`;
    const had = view.get(key);
    if (object === undefined) {
      if (!had) return;
      view.delete(key);
      this.push(node, kind, { type: 'DELETED', object: { apiVersion: had.apiVersion, kind, metadata: { name } } });
      return;
    }
    view.set(key, object);
    if (had === object || (had && canonicalJson(had) === canonicalJson(object))) return;
    if (had && patch) this.patches++;
    this.push(node, kind, had ? { type: 'MODIFIED', object: patch && had ? patch : object } as ControlPlaneEvent : { type: 'ADDED', object });
  }

  private push(node: string, kind: ControlPlaneKind, e: ControlPlaneEvent): void {
    let q = this.queues.get(node);
    if (!q) this.queues.set(node, (q = new Map()));
    let list = q.get(kind);
    if (!list) q.set(kind, (list = []));
    list.push(e);
  }

  /** The Node's whole view of one kind, as a list would return it. */
  list(node: string, kind: ControlPlaneKind): ControlPlaneObject[] {
    return [...(this.views.get(node) ?? new Map<string, ControlPlaneObject>()).entries()].filter(([k]) => k.startsWith(`${kind}/`)).map(([, o]) => o);
  }

  take(node: string): Map<ControlPlaneKind, ControlPlaneEvent[]> {
    const q = this.queues.get(node) ?? new Map();
    this.queues.delete(node);
    return q;
  }
}

const withoutOrder = <T extends { order: number }>(rules: readonly T[]): Omit<T, 'order'>[] => rules.map(({ order: _order, ...rest }) => rest);

/** The flow compiler's input read from a NodePolicyState. */
function stateInput(s: NodePolicyState): PolicyFlowInput {
  return { rules: s.nodeRuleSet(), isolations: s.nodeIsolations(), serviceEndpoints: (ip, protocol, port) => s.serviceBackends(ip, protocol, port) };
}

const cookies = (flows: PolicyFlows) => flows.flows().map((f) => f.cookie).sort().join('\n');

let nodeTargetSteps = 0;
let learnedSteps = 0;
let fqdnRuleSteps = 0;
for (let seed = 1; seed <= 10; seed++) {
  t.test(`controller mode equals standalone on every Node, seed ${seed}`, async (t) => {
    const r = rng(500 + seed);
    const objects = new Map<string, KubeObject>();
    const normalizers = [...k8s, testKind];
    // Odd seeds: the controller's engine tracks members (patches from its member changes); even: it does not (groups compared whole).
    const controller = new PolicyEngine({ normalizers, trackMembers: seed % 2 === 1 });
    const recorder = new Recorder();
    const computation = new ClusterComputation(controller, perNodeSink(recorder));
    const standalone = new Map(NODES.map((n) => [n, new PolicyEngine({ normalizers, nodeName: n })]));
    const agents = new Map(NODES.map((n) => [n, { state: new NodePolicyState(n), flows: new PolicyFlows(), dirty: new Set<string>() }]));
    /** What each Node learned from DNS (name → addresses, [] forgotten), in order. */
    const learned = new Map(NODES.map((n) => [n, new Map<string, string[]>()]));
    const feed = (o: KubeObject, remove: boolean) => {
      const ref = { apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name };
      if (remove) objects.delete(keyOf(o));
      else objects.set(keyOf(o), o);
      computation.apply(remove ? controller.remove(ref) : controller.upsert(o));
      for (const e of standalone.values()) {
        if (remove) e.remove(ref);
        else e.upsert(o);
      }
    };
    const apply = (o: KubeObject) => feed(o, false);
    const drop = (o: KubeObject) => feed(o, true);
    /** Delivers each Node's events, the kinds' streams interleaved at random, committing now and then. */
    const deliver = () => {
      // A held computation (the controller's initial lists) makes the views of what it noted at once.
      computation.release();
      for (const [node, a] of agents) {
        const queues = [...recorder.take(node).values()].map((list) => [...list]);
        while (queues.some((q) => q.length > 0)) {
          const q = r.pick(queues.filter((x) => x.length > 0));
          a.state.event(q.shift()!);
          if (r.next() < 0.2) for (const id of dirtyRuleIds(a.state.commit(), a.state)) a.dirty.add(id);
        }
        for (const id of dirtyRuleIds(a.state.commit(), a.state)) a.dirty.add(id);
        a.flows.sync(stateInput(a.state), a.dirty);
        a.dirty = new Set();
      }
    };

    // Even seeds: the initial objects are computed at once after they are all in, as the
    // controller does with its initial lists; and now and then a step's change is too.
    const holds = rng(900 + seed);
    if (seed % 2 === 0) computation.hold();
    for (const ns of NAMESPACES) apply(namespace(ns, { team: r.pick(['red', 'blue']) }));
    const nodeObject = (name: string, i: number): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { zone: r.pick(['a', 'b']) } }, status: { addresses: [{ type: 'InternalIP', address: `172.18.0.${i + 1}` }] } });
    NODES.forEach((n, i) => apply(nodeObject(n, i)));
    const ipIndex = new Map<string, number>();
    NAMESPACES.forEach((ns, i) => NAMES.forEach((n, j) => ipIndex.set(`${ns}/${n}`, i * NAMES.length + j)));
    for (const ns of NAMESPACES) for (const n of NAMES.slice(0, 3)) apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!, NODES));
    for (let i = 0; i < 3; i++) apply(randomNetpol(r, r.pick(NAMESPACES), `np-${i}`));
    deliver();

    let mismatches = 0;
    let withRules = 0;
    for (let step = 0; step < 50; step++) {
      if (holds.next() < 0.3) computation.hold();
      const op = r.int(12);
      const pods = [...objects.values()].filter((o) => o.kind === 'Pod');
      const policies = [...objects.values()].filter((o) => o.kind === 'NetworkPolicy' || (o.kind === 'Rules' && o.metadata.name !== 'groups'));
      let label: string;
      if (op === 0 || pods.length === 0) {
        const ns = r.pick(NAMESPACES), n = r.pick(NAMES);
        label = `pod add/replace/move ${ns}/${n}`;
        apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!, NODES));
      } else if (op === 1) {
        const p = r.pick(pods);
        label = `pod remove ${p.metadata.namespace}/${p.metadata.name}`;
        drop(p);
      } else if (op === 2) {
        const p = r.pick(pods);
        label = `pod relabel ${p.metadata.namespace}/${p.metadata.name}`;
        apply({ ...p, metadata: { ...p.metadata, labels: randomLabels(r) } });
      } else if (op === 3) {
        const ns = r.pick(NAMESPACES);
        label = `namespace relabel ${ns}`;
        apply(namespace(ns, r.next() < 0.8 ? { team: r.pick(['red', 'blue']) } : {}));
      } else if (op === 4 && policies.length > 0) {
        const p = r.pick(policies);
        label = `policy remove ${p.metadata.name}`;
        drop(p);
      } else if (op === 5) {
        const name = `rel-${r.int(3)}`;
        label = `relative policy ${name}`;
        apply(randomRelative(r, name));
      } else if (op === 6) {
        const name = `svcpol-${r.int(2)}`;
        label = `toServices policy ${name}`;
        apply(rulesObject(name, { rules: [rule({ direction: 'Egress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [podsIn(r.pick(NAMESPACES))], peers: [{ kind: 'service', namespace: 'x', name: 'svc' }] }, {}, name)] }));
      } else if (op === 7) {
        label = 'group definitions edit';
        apply(randomGroups(r));
      } else if (op === 8 && r.next() < 0.5) {
        label = 'service edit';
        if (r.next() < 0.2 && objects.has('v1/Service/x/svc')) drop(randomService(r));
        else apply(randomService(r));
      } else if (op === 8) {
        const slice = randomSlice(r, ipIndex);
        label = `endpointslice edit ${slice.metadata.name}`;
        if (r.next() < 0.25) drop(slice);
        else apply(slice);
      } else if (op === 9 && r.next() < 0.4) {
        // Host traffic: rules applied to Nodes (Antrea nodeSelector appliedTo), or naming Nodes as peers.
        const name = `node-pol-${r.int(2)}`;
        label = `node policy ${name}`;
        const nodes = { kind: 'nodes' as const, selector: { matchLabels: { zone: r.pick(['a', 'b']) } } };
        apply(rulesObject(name, { rules: [rule(r.next() < 0.5
          ? { direction: r.pick(['Ingress', 'Egress'] as const), action: r.pick(['Allow', 'Drop'] as const), appliedTo: [nodes], peers: [podsIn(r.pick(NAMESPACES))] }
          : { direction: 'Egress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [podsIn(r.pick(NAMESPACES))], peers: [nodes] }, {}, name)] }));
      } else if (op === 9 && r.next() < 0.3) {
        const n = r.pick(NODES);
        label = `node relabel ${n}`;
        apply(nodeObject(n, NODES.indexOf(n)));
      } else if (op === 9) {
        const name = `grp-${r.int(3)}`;
        label = `group policy ${name}`;
        apply(randomGroupPolicy(r, name));
      } else if (op === 10 && r.next() < 0.5) {
        const name = `fqdn-pol-${r.int(2)}`;
        label = `fqdn policy ${name}`;
        const fqdn = { kind: 'fqdn' as const, pattern: r.pick(['*.a.com', 'www.a.com', '*.org', 'C.ORG.']) };
        apply(rulesObject(name, { rules: [rule({ direction: 'Egress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [podsIn(r.pick(NAMESPACES))], peers: r.next() < 0.5 ? [fqdn] : [fqdn, podsIn(r.pick(NAMESPACES))] }, {}, name)] }));
      } else if (op === 10) {
        const node = r.pick(NODES);
        const name = r.pick(['www.a.com', 'b.a.com', 'c.org', 'WWW.A.COM.']);
        const ips = r.next() < 0.25 ? [] : [...new Set([`203.0.113.${r.int(4)}`, `203.0.113.${r.int(4)}`, r.next() < 0.3 ? `2001:db8::${r.int(3)}` : '203.0.113.9'])];
        label = `dns learned on ${node}: ${name} ${ips.join(',') || '(forgotten)'}`;
        standalone.get(node)!.setFqdnAddresses([{ name, ips }]);
        agents.get(node)!.state.setFqdnAddresses([{ name, ips }]);
        learned.get(node)!.set(name, ips);
        learnedSteps++;
      } else {
        const ns = r.pick(NAMESPACES), name = `np-${r.int(4)}`;
        label = `netpol ${ns}/${name}`;
        apply(randomNetpol(r, ns, name));
      }
      deliver();
      // Now and then one Node relists (its watch expired, or the controller restarted).
      if (r.next() < 0.1) {
        const node = r.pick(NODES);
        const a = agents.get(node)!;
        for (const kind of KINDS) a.state.sync(kind, recorder.list(node, kind));
        a.flows.sync(stateInput(a.state), dirtyRuleIds(a.state.commit(), a.state));
      }
      for (const node of NODES) {
        const a = agents.get(node)!;
        const e = standalone.get(node)!;
        const want = withoutOrder(e.nodeRuleSet());
        if (want.length > 0) withRules++;
        if (want.some((n) => n.targets.some((x) => x.kind === 'node'))) nodeTargetSteps++;
        if (e.fqdnTargetPodIps().length > 0 && want.some((n) => JSON.stringify(n.peers).includes('203.0.113.'))) fqdnRuleSteps++;
        if (canonicalJson(a.state.fqdnTargetPodIps()) !== canonicalJson(e.fqdnTargetPodIps())) {
          mismatches++;
          t.same(a.state.fqdnTargetPodIps(), e.fqdnTargetPodIps(), `step ${step} (${label}) ${node}: DNS interception targets as standalone`);
        }
        if (canonicalJson(withoutOrder(a.state.nodeRuleSet())) !== canonicalJson(want)) {
          mismatches++;
          t.same(withoutOrder(a.state.nodeRuleSet()), want, `step ${step} (${label}) ${node}: node rules as standalone`);
        }
        if (canonicalJson(a.state.nodeIsolations()) !== canonicalJson(e.nodeIsolations())) {
          mismatches++;
          t.same(a.state.nodeIsolations(), e.nodeIsolations(), `step ${step} (${label}) ${node}: isolations as standalone`);
        }
        const scratch = new PolicyFlows();
        scratch.sync(policyFlowInput(e));
        if (cookies(a.flows) !== cookies(scratch)) {
          mismatches++;
          t.same(a.flows.flows(), scratch.flows(), `step ${step} (${label}) ${node}: compiled flows as standalone`);
        }
        if (a.state.counts().waiting.length > 0) {
          mismatches++;
          t.same(a.state.counts().waiting, [], `step ${step} (${label}) ${node}: no policy waits once every event arrived`);
        }
      }
    }
    // A fresh agent (started now) lands on the same state from the lists alone.
    for (const node of NODES) {
      const fresh = new NodePolicyState(node);
      for (const kind of KINDS) fresh.sync(kind, recorder.list(node, kind));
      fresh.setFqdnAddresses([...learned.get(node)!].map(([name, ips]) => ({ name, ips })));
      fresh.commit();
      t.same(withoutOrder(fresh.nodeRuleSet()), withoutOrder(standalone.get(node)!.nodeRuleSet()), `a fresh agent on ${node} lists the same rules`);
    }
    // Each Node received only its span: an AppliedToGroup only with its own members.
    for (const node of NODES) {
      const foreign = recorder.list(node, 'AppliedToGroup').flatMap((g) => (g.kind === 'AppliedToGroup' ? g.members : [])).filter((m) => !memberNodes(m).includes(node));
      t.same(foreign, [], `${node} holds no other Node's targets`);
    }
    t.equal(mismatches, 0, 'every Node matched standalone mode after every step');
    t.ok(withRules > 20, `the walk gave Nodes rules to enforce (${withRules} node-steps with rules)`);
    if (seed % 2 === 1) t.ok(recorder.patches > 0, `AddressGroup changes went as patches (${recorder.patches})`);
    else t.equal(recorder.patches, 0, 'without member changes, groups went whole');
  });
}

t.test('the walks applied rules to Nodes too', async (t) => {
  t.ok(nodeTargetSteps > 0, `${nodeTargetSteps} node-steps enforced a rule on the Node itself`);
});

t.test('the walks learned DNS names that fqdn rules enforced', async (t) => {
  t.ok(learnedSteps > 10, `${learnedSteps} steps learned or forgot a name on a Node`);
  t.ok(fqdnRuleSteps > 0, `${fqdnRuleSteps} node-steps enforced a rule whose peers held learned addresses`);
});
