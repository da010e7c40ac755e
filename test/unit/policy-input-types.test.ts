/**
 * Wrong types in policy input are rejected with the field path and the type expected, for every
 * policy kind that takes label selectors; nothing leaks a JavaScript error, nothing is accepted
 * with a changed meaning (a list where a map belongs used to match nothing).
 */
import t from 'tap';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { parseManifests } from '../../daemon/manifests.js';

function errorsOf(yamlText: string): string[] {
  const engine = new PolicyEngine();
  for (const o of parseManifests(yamlText)) engine.upsert(o);
  return engine.errors().map((e) => `${e.field}: ${e.message}`);
}

const netpol = (podSelector: string, extra = '') => `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: ${podSelector}
${extra}`;

t.test('NetworkPolicy: each wrong type names its field and the expected type', async (t) => {
  const cases: [string, RegExp][] = [
    [netpol('{matchLabels: [app, client]}'), /^spec\.podSelector\.matchLabels: must be a map of strings, not a list$/],
    [netpol('{matchLabels: {debug: yes}}'), /^spec\.podSelector\.matchLabels\.debug: must be a string, not a boolean \(true\)$/],
    [netpol('{matchLabels: {tier: 5}}'), /^spec\.podSelector\.matchLabels\.tier: must be a string, not a number \(5\)$/],
    [netpol('{matchExpressions: {key: app, operator: Exists}}'), /^spec\.podSelector\.matchExpressions: must be a list of objects, not a map$/],
    [netpol('{matchExpressions: [{key: app, operator: In, values: p}]}'), /^spec\.podSelector\.matchExpressions\[0\]\.values: must be a list of strings, not a string \("p"\)$/],
    [netpol('{matchExpressions: [{key: app, operator: In, values: [1]}]}'), /^spec\.podSelector\.matchExpressions\[0\]\.values\[0\]: must be a string, not a number \(1\)$/],
    [netpol('{matchExpressions: [app]}'), /^spec\.podSelector\.matchExpressions\[0\]: must be an object, not a string/],
    [netpol('{matchExpressions: [{key: app}]}'), /^spec\.podSelector\.matchExpressions\[0\]\.operator: Required value$/],
    [netpol('[app]'), /^spec\.podSelector: must be an object.*, not a list$/],
    [netpol('{}', '  ingress: [{from: [{ipBlock: {cidr: 5}}]}]'), /^spec\.ingress\[0\]\.from\[0\]\.ipBlock\.cidr: must be a string, not a number \(5\)$/],
    [netpol('{}', '  ingress: {from: []}'), /^spec\.ingress: must be a list of objects, not a map$/],
    [netpol('{}', '  ingress: [{from: {podSelector: {}}}]'), /^spec\.ingress\[0\]\.from: must be a list of objects, not a map$/],
  ];
  for (const [text, want] of cases) {
    const errors = errorsOf(text);
    t.equal(errors.length, 1, `one error for ${text.split('\n').slice(5).join(' ').trim()}`);
    t.match(errors[0] ?? '', want);
    t.notMatch(errors.join('\n'), /is not a function|undefined|Cannot read/);
  }
});

t.test('Antrea and admin policies share the selector checks', async (t) => {
  const acnp = errorsOf(`
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: c}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: [app]}}]
  ingress: [{action: Allow, from: [{podSelector: {matchExpressions: {key: a}}}]}]
`);
  t.match(acnp.join('\n'), /spec\.appliedTo\[0\]\.podSelector\.matchLabels: must be a map of strings, not a list/);
  t.match(acnp.join('\n'), /spec\.ingress\[0\]\.from\[0\]\.podSelector\.matchExpressions: must be a list of objects, not a map/);
  const anp = errorsOf(`
apiVersion: policy.networking.k8s.io/v1alpha1
kind: AdminNetworkPolicy
metadata: {name: a}
spec:
  priority: 1
  subject: {namespaces: {matchLabels: {on: yes}}}
  ingress: [{action: Deny, from: [{namespaces: {}}]}]
`);
  t.match(anp.join('\n'), /spec\.subject\.namespaces\.matchLabels\.true: must be a string, not a boolean \(true\)/);
});

t.test('every kind: a value of the wrong JSON type names the field and the type expected (one schema for all)', async (t) => {
  const errors = errorsOf(`
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: c}
spec:
  priority: "5"
  tier: 7
  appliedTo: [{podSelector: {}}]
  ingress: [{action: Drop, enableLogging: "yes", ports: [{port: 80.5}]}]
---
apiVersion: policy.networking.k8s.io/v1alpha1
kind: BaselineAdminNetworkPolicy
metadata: {name: default}
spec:
  subject: {namespaces: {}}
  egress: [{action: Deny, to: [{networks: 10.0.0.0/8}]}]
`);
  t.same(errors.sort(), [
    'spec.egress[0].to[0].networks: must be a list of strings, not a string ("10.0.0.0/8")',
    'spec.ingress[0].enableLogging: must be a boolean (true or false), not a string ("yes")',
    'spec.ingress[0].ports[0].port: must be a port number or name, not a number (80.5)',
    'spec.priority: must be a number, not a string ("5")',
    'spec.tier: must be a string, not a number (7)',
  ]);
});
