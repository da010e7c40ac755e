/**
 * PolicyEngine.holdChanges / releaseChanges (the controller's bulk intake of its initial lists):
 * while held every call returns an empty ChangeSet, and the release names exactly what differs
 * between the engine's state at the hold and at the release, as one change. Checked on random
 * walks against a snapshot oracle, and against an engine that took the same objects one change at
 * a time (the same groups, rules and node rules afterwards).
 */
import t from 'tap';
import { type ChangeSet, PolicyEngine } from '../../daemon/policy/engine.js';
import type { GroupMember } from '../../daemon/policy/internal.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, rng } from './policy-core-helpers.js';
import { keyOf, NAMES, NAMESPACES, podObject, randomLabels, randomNetpol, randomRelative } from './policy-random-cluster.js';

/** Every internal object by kind and id, as JSON: what a ChangeSet is about. */
function snapshot(e: PolicyEngine): Record<'addressGroups' | 'appliedToGroups' | 'rules' | 'isolations', Map<string, string>> {
  const byId = <T extends { id: string }>(xs: T[]) => new Map(xs.map((x) => [x.id, canonicalJson(x)]));
  return { addressGroups: byId(e.addressGroups()), appliedToGroups: byId(e.appliedToGroups()), rules: byId(e.internalRules()), isolations: byId(e.internalIsolations()) };
}

/** Members of every group by id, keyed as the engine keys them. */
function members(e: PolicyEngine): Map<string, Map<string, string>> {
  const out = new Map<string, Map<string, string>>();
  const key = (m: GroupMember) => `${m.kind}:${m.ref}`;
  for (const g of e.addressGroups()) out.set(g.id, new Map(g.members.map((m) => [key(m), canonicalJson(m)])));
  for (const g of e.appliedToGroups()) out.set(g.id, new Map(g.members.map((m) => [key(m), canonicalJson(m)])));
  return out;
}

const empty = (cs: ChangeSet) =>
  [cs.addressGroups, cs.appliedToGroups, cs.rules, cs.isolations].every((d) => d.added.length + d.updated.length + d.removed.length === 0) && cs.serviceEndpoints.length === 0;

for (let seed = 1; seed <= 12; seed++) {
  t.test(`seed ${seed}: a released hold is the difference of the state before and after`, async (t) => {
    const r = rng(seed);
    const trackMembers = seed % 2 === 0;
    const held = new PolicyEngine({ normalizers: k8s, nodeName: 'node-1', trackMembers });
    const stepwise = new PolicyEngine({ normalizers: k8s, nodeName: 'node-1', trackMembers });
    const objects = new Map<string, KubeObject>();
    const ipIndex = new Map<string, number>();
    NAMESPACES.forEach((ns, i) => NAMES.forEach((n, j) => ipIndex.set(`${ns}/${n}`, i * NAMES.length + j)));
    let holding = false;
    let before = snapshot(held);
    let membersBefore = members(held);
    let holds = 0;
    const feed = (o: KubeObject, remove: boolean) => {
      const ref = { apiVersion: o.apiVersion, kind: o.kind, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}), name: o.metadata.name };
      if (remove) objects.delete(keyOf(o));
      else objects.set(keyOf(o), o);
      const cs = remove ? held.remove(ref) : held.upsert(o);
      if (holding && !empty(cs)) t.fail('a held change returned a non-empty ChangeSet');
      if (remove) stepwise.remove(ref);
      else stepwise.upsert(o);
    };
    const release = () => {
      const cs = held.releaseChanges();
      holding = false;
      const after = snapshot(held);
      for (const kind of ['addressGroups', 'appliedToGroups', 'rules', 'isolations'] as const) {
        const was = before[kind];
        const now = after[kind];
        const want = {
          added: [...now.keys()].filter((id) => !was.has(id)).sort(),
          updated: [...now.keys()].filter((id) => was.has(id) && was.get(id) !== now.get(id)).sort(),
          removed: [...was.keys()].filter((id) => !now.has(id)).sort(),
        };
        t.same({ added: cs[kind].added, updated: cs[kind].updated, removed: cs[kind].removed }, want, `${kind} of the released change`);
      }
      if (trackMembers) {
        const now = members(held);
        for (const id of [...cs.addressGroups.added, ...cs.addressGroups.updated, ...cs.appliedToGroups.added, ...cs.appliedToGroups.updated]) {
          const was = membersBefore.get(id) ?? new Map<string, string>();
          const is = now.get(id)!;
          const want = [...new Set([...was.keys(), ...is.keys()])].filter((k) => was.get(k) !== is.get(k)).sort();
          t.same((cs.memberChanges?.get(id) ?? []).map((c) => c.key).sort(), want, `member changes of ${id}`);
        }
      } else {
        t.equal(cs.memberChanges, undefined, 'no member changes without trackMembers');
      }
    };

    for (const ns of NAMESPACES) feed(namespace(ns, { team: r.pick(['red', 'blue']) }), false);
    for (let step = 0; step < 80; step++) {
      if (!holding && r.next() < 0.3) {
        before = snapshot(held);
        membersBefore = members(held);
        held.holdChanges();
        holding = true;
        holds++;
        t.throws(() => held.nodeRuleSet(), /not computed while changes are held/, 'no node rules while held');
      }
      const op = r.int(6);
      const pods = [...objects.values()].filter((o) => o.kind === 'Pod');
      const policies = [...objects.values()].filter((o) => o.kind === 'NetworkPolicy');
      if (op <= 1 || pods.length === 0) {
        const ns = r.pick(NAMESPACES), n = r.pick(NAMES);
        feed(podObject(r, ns, n, ipIndex.get(`${ns}/${n}`)!), false);
      } else if (op === 2) {
        feed(r.pick(pods), true);
      } else if (op === 3) {
        const p = r.pick(pods);
        feed({ ...p, metadata: { ...p.metadata, labels: randomLabels(r) } }, false);
      } else if (op === 4 && policies.length > 0 && r.next() < 0.4) {
        feed(r.pick(policies), true);
      } else if (op === 4) {
        feed(r.next() < 0.2 ? randomRelative(r, `rel-${r.int(2)}`) : randomNetpol(r, r.pick(NAMESPACES), `np-${r.int(4)}`), false);
      } else {
        feed(namespace(r.pick(NAMESPACES), { team: r.pick(['red', 'blue']) }), false);
      }
      if (holding && r.next() < 0.15) release();
      if (!holding) {
        t.equal(canonicalJson(held.nodeRuleSet()), canonicalJson(stepwise.nodeRuleSet()), `step ${step}: node rules as if taken one change at a time`);
        t.equal(canonicalJson(held.nodeIsolations()), canonicalJson(stepwise.nodeIsolations()), `step ${step}: node isolations`);
      }
    }
    if (holding) release();
    t.ok(holds > 0, 'the walk held changes');
    t.same(snapshot(held), snapshot(stepwise), 'the same state as an engine that never held');
    t.ok(empty(held.releaseChanges()), 'a release without a hold is empty');
  });
}
