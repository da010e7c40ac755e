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
import { namespace, podsIn, rng, rule, rulesObject, testKind } from './policy-core-helpers.js';
import { keyOf, NAMES, NAMESPACES, podObject, randomGroupPolicy, randomGroups, randomLabels, randomNetpol, randomRelative, randomService, randomSlice } from './policy-random-cluster.js';

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

function freshEngine(objects: Map<string, KubeObject>): PolicyEngine {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind], nodeName: 'node-1' });
  const rank = (o: KubeObject) => (o.kind === 'Namespace' ? 0 : o.kind === 'Pod' ? 1 : o.kind === 'Service' ? 2 : 3);
  for (const o of [...objects.values()].sort((a, b) => rank(a) - rank(b) || keyOf(a).localeCompare(keyOf(b)))) e.upsert(o);
  return e;
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
