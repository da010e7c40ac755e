/**
 * Incremental computation of the internal objects (AddressGroups, AppliedToGroups, internal
 * rules): random sequences of Pod add/remove/relabel, Namespace relabel and policy
 * add/edit/remove. After every operation:
 *  - the ChangeSet is exact: it names precisely the ids whose content differs from before, and the
 *    toServices AddressGroups whose Service resolves to other endpoints (EndpointSlices by Pod
 *    and by address, not-ready endpoints, selectors, named target ports);
 *  - the state equals a fresh engine fed the final objects (groups, rules, node rule set and
 *    verdicts).
 */
import t from 'tap';
import { dirtyRuleIds, PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { serviceBackends } from '../../daemon/policy/endpoints.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import type { ChangeSet } from '../../daemon/policy/internal.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, netpol, pod, podsIn, rng, rule, rulesObject, testKind } from './policy-core-helpers.js';

type Snap = { ag: Map<string, string>; atg: Map<string, string>; rules: Map<string, string>; isolations: Map<string, string>; endpoints: Map<string, string> };

/** Where each toServices group's Service sends every ClusterIP port, resolved from scratch. */
function endpointsOf(e: PolicyEngine): Map<string, string> {
  const out = new Map<string, string>();
  for (const g of e.addressGroups()) {
    if (g.peer.kind !== 'service') continue;
    const svc = e.cluster.services.get(`${g.peer.namespace}/${g.peer.name}`);
    const parts = (svc?.clusterIPs ?? []).flatMap((ip) => svc!.ports.map((p) => `${ip}/${p.protocol}/${p.port}=${canonicalJson(serviceBackends(e.cluster, ip, p.protocol, p.port))}`));
    out.set(g.id, parts.join(';'));
  }
  return out;
}

function snapshot(e: PolicyEngine): Snap {
  return {
    ag: new Map(e.addressGroups().map((g) => [g.id, canonicalJson(g)])),
    atg: new Map(e.appliedToGroups().map((g) => [g.id, canonicalJson(g)])),
    rules: new Map(e.internalRules().map((r) => [r.id, canonicalJson(r)])),
    isolations: new Map(e.internalIsolations().map((i) => [i.id, canonicalJson(i)])),
    endpoints: endpointsOf(e),
  };
}

function diff(before: Map<string, string>, after: Map<string, string>) {
  const d = { added: [] as string[], updated: [] as string[], removed: [] as string[] };
  for (const [id, v] of after) if (!before.has(id)) d.added.push(id); else if (before.get(id) !== v) d.updated.push(id);
  for (const id of before.keys()) if (!after.has(id)) d.removed.push(id);
  for (const l of [d.added, d.updated, d.removed]) l.sort();
  return d;
}

const NAMESPACES = ['x', 'y', 'z'];
const NAMES = ['a', 'b', 'c', 'd'];
const APPS = ['web', 'db', 'cache'];

function randomLabels(r: ReturnType<typeof rng>): Record<string, string> {
  const l: Record<string, string> = { app: r.pick(APPS) };
  if (r.next() < 0.5) l.tier = r.pick(['front', 'back']);
  return l;
}

function randomSelector(r: ReturnType<typeof rng>) {
  const k = r.int(4);
  if (k === 0) return {};
  if (k === 1) return { matchLabels: { app: r.pick(APPS) } };
  if (k === 2) return { matchExpressions: [{ key: 'tier', operator: r.pick(['Exists', 'DoesNotExist'] as const) }] };
  return { matchExpressions: [{ key: 'app', operator: r.pick(['In', 'NotIn'] as const), values: [r.pick(APPS), r.pick(APPS)] }] };
}

function randomPeer(r: ReturnType<typeof rng>) {
  switch (r.int(5)) {
    case 0: return { podSelector: randomSelector(r) };
    case 1: return { namespaceSelector: { matchLabels: { team: r.pick(['red', 'blue']) } } };
    case 2: return { namespaceSelector: randomSelector(r), podSelector: randomSelector(r) };
    case 3: return { ipBlock: { cidr: '10.1.0.0/16', except: [`10.1.${r.int(4)}.0/24`] } };
    default: return { namespaceSelector: {} };
  }
}

function randomNetpol(r: ReturnType<typeof rng>, ns: string, name: string): KubeObject {
  // egress to any peer on a named port: resolved on every Pod of the cluster
  if (r.next() < 0.15) return netpol(ns, name, { podSelector: randomSelector(r), policyTypes: ['Egress'], egress: [{ ports: [{ port: 'http' }, { protocol: 'UDP', port: 53 }] }] });
  const rules = () => Array.from({ length: r.int(3) }, () => ({
    ...(r.next() < 0.8 ? { from: Array.from({ length: 1 + r.int(2) }, () => randomPeer(r)) } : {}),
    ...(r.next() < 0.6 ? { ports: [r.pick([{ port: 80 }, { port: 'http' }, { protocol: 'UDP', port: 53 }, { port: 8000, endPort: 8080 }])] } : {}),
  }));
  const ingress = rules();
  const egress = rules().map(({ from, ...rest }) => ({ ...rest, ...(from ? { to: from } : {}) }));
  return netpol(ns, name, { podSelector: randomSelector(r), ingress, egress, policyTypes: r.pick([['Ingress'], ['Egress'], ['Ingress', 'Egress']]) });
}

/** A stage-0 policy with a relative (self / sameLabels) peer, exercising per-namespace expansion. */
function randomRelative(r: ReturnType<typeof rng>, name: string): KubeObject {
  const peer = r.next() < 0.5
    ? { kind: 'pods' as const, namespaces: { kind: 'self' as const }, pods: { matchLabels: { app: r.pick(APPS) } } }
    : { kind: 'pods' as const, namespaces: { kind: 'sameLabels' as const, keys: ['team'] }, pods: {} };
  return rulesObject(name, { rules: [rule({ direction: 'Ingress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [r.next() < 0.5 ? podsIn(r.pick(NAMESPACES)) : { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: r.pick(APPS) } } }], peers: [peer] }, {}, name)] });
}

/** Group definitions (test kind) with a child group and an ipBlock member. */
function randomGroups(r: ReturnType<typeof rng>): KubeObject {
  return rulesObject('groups', { groups: [
    { name: 'g1', members: [{ kind: 'pods', namespaces: r.next() < 0.5 ? { kind: 'all' } : { kind: 'selector', selector: { matchLabels: { team: r.pick(['red', 'blue']) } } }, pods: { matchLabels: { app: r.pick(APPS) } } }] },
    { name: 'g2', members: [{ kind: 'group', name: 'g1' }, { kind: 'ipBlock', cidr: `10.1.${r.int(4)}.0/24`, except: [] }] },
  ] });
}

function randomService(r: ReturnType<typeof rng>): KubeObject {
  const targetPort = r.pick(['http', 'http', 8080, 'dns']);
  const ports = [{ port: 80, targetPort }, ...(r.next() < 0.4 ? [{ name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns' }] : [])].map((p, i) => ({ name: `p${i}`, ...p }));
  return { apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: r.pick(['10.96.0.1', '10.96.0.1', '10.96.0.2']), selector: { app: r.pick(APPS) }, ports } };
}

/** An EndpointSlice of x/svc: endpoints by Pod reference or by bare address, some not ready. */
function randomSlice(r: ReturnType<typeof rng>, ipIndex: Map<string, number>): KubeObject {
  const endpoints = Array.from({ length: r.int(4) }, () => {
    const key = `${r.pick(NAMESPACES)}/${r.pick(NAMES)}`;
    const i = ipIndex.get(key)!;
    const ip = `10.1.${i % 4}.${10 + i}`;
    const [ns, name] = key.split('/');
    return {
      addresses: [ip],
      ...(r.next() < 0.2 ? { conditions: { ready: false } } : {}),
      ...(r.next() < 0.6 ? { targetRef: { kind: 'Pod', namespace: ns, name } } : {}),
    };
  });
  return { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: `svc-${r.int(2)}`, namespace: 'x', labels: { 'kubernetes.io/service-name': 'svc' } }, addressType: 'IPv4', endpoints } as KubeObject;
}

/** A stage-0 policy using group, serviceRef and toServices peers and a group appliedTo. */
function randomGroupPolicy(r: ReturnType<typeof rng>, name: string): KubeObject {
  const peer = r.pick([{ kind: 'group' as const, name: 'g2' }, { kind: 'group' as const, name: 'g1' }, { kind: 'serviceRef' as const, namespace: 'x', name: 'svc' }, { kind: 'service' as const, namespace: 'x', name: 'svc' }]);
  return rulesObject(name, { rules: [rule({
    direction: peer.kind === 'service' ? 'Egress' : r.pick(['Ingress', 'Egress'] as const), action: r.pick(['Allow', 'Drop', 'Pass'] as const),
    appliedTo: [r.next() < 0.5 ? { kind: 'group', name: 'g1' } : podsIn(r.pick(NAMESPACES))], peers: [peer],
  }, {}, name)] });
}

const keyOf = (o: KubeObject) => `${o.apiVersion}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

function freshEngine(objects: Map<string, KubeObject>): PolicyEngine {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
  const rank = (o: KubeObject) => (o.kind === 'Namespace' ? 0 : o.kind === 'Pod' ? 1 : o.kind === 'Service' ? 2 : 3);
  for (const o of [...objects.values()].sort((a, b) => rank(a) - rank(b) || keyOf(a).localeCompare(keyOf(b)))) e.upsert(o);
  return e;
}

function podObject(r: ReturnType<typeof rng>, ns: string, name: string, ipIndex: number): KubeObject {
  const o = pod(ns, name, {
    labels: randomLabels(r),
    ip: `10.1.${ipIndex % 4}.${10 + ipIndex}`,
    node: r.pick(['node-1', 'node-2']),
    ports: [{ name: 'http', containerPort: r.pick([80, 8080]) }, { name: 'dns', containerPort: 53, protocol: 'UDP' }],
  });
  return o;
}

let totalEndpointSteps = 0;
for (let seed = 1; seed <= 12; seed++) {
  t.test(`random operations, seed ${seed}`, async (t) => {
    const r = rng(seed);
    const objects = new Map<string, KubeObject>();
    const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
    const apply = (o: KubeObject): ChangeSet => { objects.set(keyOf(o), o); return e.upsert(o); };
    const drop = (o: KubeObject): ChangeSet => { objects.delete(keyOf(o)); return e.remove({ apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name }); };
    for (const ns of NAMESPACES) apply(namespace(ns, { team: r.pick(['red', 'blue']) }));
    const ipIndex = new Map<string, number>();
    NAMESPACES.forEach((ns, i) => NAMES.forEach((n, j) => ipIndex.set(`${ns}/${n}`, i * NAMES.length + j)));
    for (const ns of NAMESPACES) for (const n of NAMES.slice(0, 2)) apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!));

    let mismatches = 0;
    let nonEmpty = 0;
    let endpointSteps = 0;
    for (let step = 0; step < 60; step++) {
      const before = snapshot(e);
      const op = r.int(11);
      let label: string;
      let cs: ChangeSet;
      const pods = [...objects.values()].filter((o) => o.kind === 'Pod');
      const policies = [...objects.values()].filter((o) => o.kind === 'NetworkPolicy' || (o.kind === 'Rules' && o.metadata.name !== 'groups'));
      if (op === 0 || pods.length === 0) {
        const ns = r.pick(NAMESPACES), n = r.pick(NAMES);
        label = `pod add/replace ${ns}/${n}`;
        cs = apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!));
      } else if (op === 1) {
        const p = r.pick(pods);
        label = `pod remove ${p.metadata.namespace}/${p.metadata.name}`;
        cs = drop(p);
      } else if (op === 2) {
        const p = r.pick(pods);
        label = `pod relabel ${p.metadata.namespace}/${p.metadata.name}`;
        cs = apply({ ...p, metadata: { ...p.metadata, labels: randomLabels(r) } });
      } else if (op === 3) {
        const ns = r.pick(NAMESPACES);
        label = `namespace relabel ${ns}`;
        cs = apply(namespace(ns, r.next() < 0.8 ? { team: r.pick(['red', 'blue']) } : {}));
      } else if (op === 4 && policies.length > 0) {
        const p = r.pick(policies);
        label = `policy remove ${p.metadata.name}`;
        cs = drop(p);
      } else if (op === 5) {
        const name = `rel-${r.int(3)}`;
        label = `relative policy add/edit ${name}`;
        cs = apply(randomRelative(r, name));
      } else if (op === 6 && r.next() < 0.5) {
        const name = `svcpol-${r.int(2)}`;
        label = `toServices policy add/edit ${name}`;
        cs = apply(rulesObject(name, { rules: [rule({ direction: 'Egress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [podsIn(r.pick(NAMESPACES))], peers: [{ kind: 'service', namespace: 'x', name: 'svc' }] }, {}, name)] }));
      } else if (op === 8) {
        label = 'group definitions edit';
        cs = apply(randomGroups(r));
      } else if (op === 9 && r.next() < 0.5) {
        label = 'service edit';
        cs = r.next() < 0.2 && objects.has('v1/Service/x/svc') ? drop(randomService(r)) : apply(randomService(r));
      } else if (op === 9) {
        const slice = randomSlice(r, ipIndex);
        label = `endpointslice edit ${slice.metadata.name}`;
        cs = r.next() < 0.25 ? drop(slice) : apply(slice);
      } else if (op === 10) {
        const name = `grp-${r.int(3)}`;
        label = `group policy add/edit ${name}`;
        cs = apply(randomGroupPolicy(r, name));
      } else {
        const ns = r.pick(NAMESPACES), name = `np-${r.int(4)}`;
        label = `netpol add/edit ${ns}/${name}`;
        cs = apply(randomNetpol(r, ns, name));
      }
      const after = snapshot(e);
      const serviceEndpoints = [...after.endpoints].filter(([id, v]) => before.endpoints.has(id) && before.endpoints.get(id) !== v).map(([id]) => id).sort();
      if (serviceEndpoints.length > 0) endpointSteps++;
      const expected = { addressGroups: diff(before.ag, after.ag), appliedToGroups: diff(before.atg, after.atg), rules: diff(before.rules, after.rules), isolations: diff(before.isolations, after.isolations), serviceEndpoints };
      if (canonicalJson(cs) !== canonicalJson(expected)) {
        mismatches++;
        t.same(cs, expected, `step ${step} (${label}): ChangeSet names exactly what changed`);
      }
      if (cs.rules.added.length + cs.rules.updated.length + cs.rules.removed.length + cs.addressGroups.updated.length + cs.appliedToGroups.updated.length > 0) nonEmpty++;
      const fresh = freshEngine(objects);
      const freshSnap = snapshot(fresh);
      for (const k of ['ag', 'atg', 'rules', 'isolations', 'endpoints'] as const) {
        if (canonicalJson([...after[k]].sort()) !== canonicalJson([...freshSnap[k]].sort())) {
          mismatches++;
          t.same([...after[k]].sort(), [...freshSnap[k]].sort(), `step ${step} (${label}): ${k} equal to a fresh computation`);
        }
      }
      if (canonicalJson(e.nodeIsolations()) !== canonicalJson(fresh.nodeIsolations())) {
        mismatches++;
        t.same(e.nodeIsolations(), fresh.nodeIsolations(), `step ${step} (${label}): node isolations equal to a fresh computation`);
      }
      if (canonicalJson(e.nodeRuleSet()) !== canonicalJson(fresh.nodeRuleSet())) {
        mismatches++;
        t.same(e.nodeRuleSet(), fresh.nodeRuleSet(), `step ${step} (${label}): node rule set equal to a fresh computation`);
      }
      const podNames = [...objects.values()].filter((o) => o.kind === 'Pod').map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
      for (let i = 0; i < 10 && podNames.length > 1; i++) {
        const probe = { from: r.pick(podNames), to: r.pick(podNames), port: r.pick([80, 8080, 53]), protocol: r.pick(['TCP', 'UDP'] as const) };
        const a = e.evaluate(probe), b = fresh.evaluate(probe);
        if (a.verdict !== b.verdict || canonicalJson(a.decidedBy) !== canonicalJson(b.decidedBy)) {
          mismatches++;
          t.same(a, b, `step ${step} (${label}): verdict equal to a fresh engine`);
        }
      }
    }
    t.equal(mismatches, 0, 'incremental state matched a fresh computation and the ChangeSet at every step');
    t.ok(nonEmpty > 5, `the sequence exercised real changes (${nonEmpty} non-empty ChangeSets)`);
    totalEndpointSteps += endpointSteps;
  });
}

// Pod events between reads of the node rule set: the node rules and isolations are patched where
// groups changed (rules with local targets only), and the compiler diffs peer addresses through the
// steps the engine recorded, several per read. Both must equal a fresh engine and a fresh compile.
for (let seed = 1; seed <= 8; seed++) {
  t.test(`Pod events between reads: node rules and flows as from scratch, seed ${seed}`, async (t) => {
    const r = rng(100 + seed);
    const objects = new Map<string, KubeObject>();
    const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
    const flows = new PolicyFlows();
    const apply = (o: KubeObject): ChangeSet => { objects.set(keyOf(o), o); return e.upsert(o); };
    const drop = (o: KubeObject): ChangeSet => { objects.delete(keyOf(o)); return e.remove({ apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name }); };
    for (const ns of NAMESPACES) apply(namespace(ns, { team: r.pick(['red', 'blue']) }));
    const ipIndex = new Map<string, number>();
    NAMESPACES.forEach((ns, i) => NAMES.forEach((n, j) => ipIndex.set(`${ns}/${n}`, i * NAMES.length + j)));
    for (const ns of NAMESPACES) for (const n of NAMES) apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!));
    for (let i = 0; i < 6; i++) apply(randomNetpol(r, r.pick(NAMESPACES), `np-${i}`));
    flows.sync(policyFlowInput(e));
    let dirty = new Set<string>();
    let mismatches = 0;
    let reads = 0;
    for (let step = 0; step < 80; step++) {
      const op = r.int(10);
      const pods = [...objects.values()].filter((o) => o.kind === 'Pod');
      let cs: ChangeSet;
      if (op < 5 && pods.length > 0) {
        const p = r.pick(pods);
        cs = apply({ ...p, metadata: { ...p.metadata, labels: randomLabels(r) } });
      } else if (op < 7) {
        const ns = r.pick(NAMESPACES), n = r.pick(NAMES);
        cs = apply(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!));
      } else if (op < 8 && pods.length > 0) {
        cs = drop(r.pick(pods));
      } else if (op < 9) {
        cs = apply(namespace(r.pick(NAMESPACES), { team: r.pick(['red', 'blue']) }));
      } else {
        cs = apply(randomNetpol(r, r.pick(NAMESPACES), `np-${r.int(8)}`));
      }
      for (const id of dirtyRuleIds(cs, e)) dirty.add(id);
      // Reads come after one to four events, as flushes after a burst.
      if (r.next() < 0.6 && step < 79) continue;
      reads++;
      const fresh = freshEngine(objects);
      if (canonicalJson(e.nodeRuleSet()) !== canonicalJson(fresh.nodeRuleSet())) {
        mismatches++;
        t.same(e.nodeRuleSet(), fresh.nodeRuleSet(), `step ${step}: node rule set equal to a fresh computation`);
      }
      if (canonicalJson(e.nodeIsolations()) !== canonicalJson(fresh.nodeIsolations())) {
        mismatches++;
        t.same(e.nodeIsolations(), fresh.nodeIsolations(), `step ${step}: node isolations equal to a fresh computation`);
      }
      flows.sync(policyFlowInput(e), dirty);
      dirty = new Set();
      const scratch = new PolicyFlows();
      scratch.sync(policyFlowInput(fresh));
      const text = (list: readonly { cookie: string }[]) => list.map((f) => f.cookie).join('\n');
      if (text(flows.flows()) !== text(scratch.flows())) {
        mismatches++;
        t.same(flows.flows(), scratch.flows(), `step ${step}: compiled flows equal to a fresh compile`);
      }
    }
    t.equal(mismatches, 0, `incremental node rules, isolations and flows matched a fresh computation at all ${reads} reads`);
  });
}

t.test('the sequences moved the endpoints of followed Services', async (t) => {
  t.ok(totalEndpointSteps > 10, `${totalEndpointSteps} steps reported toServices endpoint changes`);
});
