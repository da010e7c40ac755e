/**
 * Fields a kind's schema does not have are reported, naming the object and the field path, for
 * every policy kind (a typo silently changes a policy's meaning); the same schema is what the
 * CRDs in install/crds.yaml carry.
 */
import t from 'tap';
import { runSimulate } from '../../daemon/ctl/simulate.js';
import { renderPolicyReport } from '../../daemon/ctl/node-policies.js';
import { buildPolicyReport } from '../../daemon/enforcement/policy-report.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { objectSchema, openApiSchema, specSchema, unknownFields } from '../../daemon/policy/schema.js';
import { parseManifests } from '../../daemon/manifests.js';
import { sluiceCrds } from '../../install/crds.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const TYPOS = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np, namespace: x}
spec:
  podSelecter: {matchLabels: {app: db}}
  ingres: [{}]
  egress: [{to: [{frm: {}, podSelector: {matchLabel: {a: b}}}], ports: [{port: 80, protcol: UDP}]}]
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: acnp}
spec:
  priority: 1
  appliedTo: [{podSelector: {}}]
  ingress: [{action: Drop, form: [{podSelector: {}}], ports: [{port: 80, sourcePrt: 5}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: anp}
spec:
  priority: 1
  subject: {namespaces: {}}
  ingress: [{action: Deny, from: [{namespaces: {}}], prots: [{portNumber: {protocol: TCP, port: 80}}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: cnp}
spec:
  tier: Admin
  priority: 1
  subject: {namespaces: {}}
  egress: [{action: Deny, to: [{networks: [10.0.0.0/8]}], protocols: [{tcp: {destinationPort: {number: 80}, port: 1}}]}]
---
apiVersion: crd.antrea.io/v1beta1
kind: Tier
metadata: {name: t1}
spec: {priority: 10, descripton: x}
`;

const EXPECTED = [
  'AdminNetworkPolicy anp spec.ingress[0].prots',
  'AntreaClusterNetworkPolicy acnp spec.ingress[0].form',
  'AntreaClusterNetworkPolicy acnp spec.ingress[0].ports[0].sourcePrt',
  'ClusterNetworkPolicy cnp spec.egress[0].protocols[0].tcp.port',
  'NetworkPolicy x/np spec.egress[0].ports[0].protcol',
  'NetworkPolicy x/np spec.egress[0].to[0].frm',
  'NetworkPolicy x/np spec.egress[0].to[0].podSelector.matchLabel',
  'NetworkPolicy x/np spec.ingres',
  'NetworkPolicy x/np spec.podSelecter',
  'Tier t1 spec.descripton',
];

t.test('every field a kind does not have is reported with object and path', async (t) => {
  const engine = new PolicyEngine();
  for (const o of parseManifests(TYPOS)) engine.upsert(o);
  const got = engine.warnings().map((w) => `${w.kind} ${w.namespace ? `${w.namespace}/` : ''}${w.name} ${w.field}`).sort();
  t.same(got, [...EXPECTED].sort());
  t.ok(engine.warnings().every((w) => w.message === 'unknown field'));
});

t.test('sluicectl simulate and node policies show them', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unknown-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'p.yaml'), TYPOS);
  const err: string[] = [];
  const code = await runSimulate({ files: [join(dir, 'p.yaml')] }, { stdout: () => {}, stderr: (s) => err.push(s) });
  t.equal(code, 0);
  t.match(err.join('\n'), /warning: NetworkPolicy x\/np: unknown field "spec\.podSelecter"/);
  t.match(err.join('\n'), /warning: AdminNetworkPolicy anp: unknown field "spec\.ingress\[0\]\.prots"/);
  const engine = new PolicyEngine();
  for (const o of parseManifests(TYPOS)) engine.upsert(o);
  const report = buildPolicyReport({ node: 'n1', synced: true, rules: [], isolations: [], errors: [], warnings: engine.warnings(), localPods: [] });
  t.equal(report.warnings.length, EXPECTED.length);
  t.match(renderPolicyReport(report), /10 unknown field\(s\)[^\n]*\n(.*\n)*\s+NetworkPolicy x\/np: unknown field "spec\.podSelecter"/);
});

t.test('unknownFields walks lists and maps; matchLabels keys are free', async (t) => {
  const schema = objectSchema('networking.k8s.io', 'NetworkPolicy')!;
  t.same(unknownFields(schema, { apiVersion: 'v1', kind: 'NetworkPolicy', metadata: { name: 'x', anything: 1 }, spec: { podSelector: { matchLabels: { constructor: 'a', podSelecter: 'b' } } }, status: { x: 1 } }), []);
  t.same(unknownFields(schema, { spec: { ingress: [{ from: [{}, { ipBlock: { cidr: 'a', exept: [] } }] }] } }), ['spec.ingress[0].from[1].ipBlock.exept']);
  t.same(unknownFields(schema, { spec: { constructor: 1, __proto__x: 1 } }), ['spec.constructor', 'spec.__proto__x'], 'prototype member names are not fields');
});

t.test('the CRDs carry the same schema, structural (every node typed)', async (t) => {
  for (const c of sluiceCrds()) {
    const spec = specSchema(c.spec.group, c.spec.names.kind);
    t.ok(spec, `${c.metadata.name} has a field schema`);
    for (const v of c.spec.versions) {
      t.same((v.schema.openAPIV3Schema as { properties: { spec: unknown } }).properties.spec, openApiSchema(spec!), `${c.metadata.name} ${v.name}`);
    }
    const untyped: string[] = [];
    const walk = (s: Record<string, any>, at: string): void => {
      if (!s.type && !s['x-kubernetes-int-or-string']) untyped.push(at);
      for (const [k, x] of Object.entries(s.properties ?? {})) walk(x as Record<string, any>, `${at}.${k}`);
      if (s.items) walk(s.items, `${at}[]`);
      if (s.additionalProperties) walk(s.additionalProperties, `${at}{}`);
    };
    walk(c.spec.versions[0]!.schema.openAPIV3Schema, c.metadata.name);
    t.same(untyped, [], `${c.metadata.name}: structural`);
  }
});
