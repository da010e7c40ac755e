/**
 * The pure parts of a new Pod's admission (enforcement/newpods): where a Pod's addresses are read
 * from (the kubelet's report, else its node agent's publication), the publication patch, the span
 * the engine computes (which nodes' rules name the Pod as a peer), the guard's flows, and the
 * realizationPort setting.
 */
import t from 'tap';
import { ConfigError, parseConfig } from '../../daemon/config.js';
import { newPodGuardFlows } from '../../daemon/flows/newpod-guard.js';
import { publicationPatch, publicationPath } from '../../daemon/enforcement/newpods/index.js';
import { parsePublishedAddresses, POD_ADDRESSES_CONDITION, podAddresses } from '../../daemon/policy/cluster.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const published = (message: string, status = 'True') => ({ type: POD_ADDRESSES_CONDITION, status, reason: 'Attached', message });
const podWith = (status: Record<string, unknown>): KubeObject => ({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'z', name: 'p' }, status });

t.test('a Pod\'s addresses: the kubelet\'s report, else the publication', async (t) => {
  t.same(podAddresses(podWith({ conditions: [published('10.1.0.9,FD00::0009')] })), ['10.1.0.9', 'fd00::9'], 'published, canonical');
  t.same(podAddresses(podWith({ podIPs: [{ ip: '10.1.0.7' }], conditions: [published('10.1.0.9')] })), ['10.1.0.7'], 'the kubelet\'s report wins');
  t.same(podAddresses(podWith({ podIP: '10.1.0.7', conditions: [published('10.1.0.9')] })), ['10.1.0.7'], 'podIP alone too');
  t.same(podAddresses(podWith({ conditions: [published('10.1.0.9', 'False')] })), [], 'a condition that is not True publishes nothing');
  t.same(podAddresses(podWith({ conditions: [published('10.1.0.9,not-an-ip')] })), [], 'a message that is not a list of addresses publishes nothing');
  t.same(podAddresses(podWith({ conditions: [{ type: 'Ready', status: 'True', message: '10.1.0.9' }] })), [], 'another condition\'s message is not read');
  t.equal(parsePublishedAddresses(''), undefined);
  t.same(parsePublishedAddresses(' 10.0.0.1 , 10.0.0.1'), ['10.0.0.1'], 'spaces and repeats');
});

t.test('the publication: a strategic merge patch of the status condition', async (t) => {
  t.equal(publicationPath({ namespace: 'z', name: 'p' }), '/api/v1/namespaces/z/pods/p/status');
  const patch = publicationPatch({ namespace: 'z', name: 'p', ips: ['10.1.0.9', 'fd00::9'] }, new Date('2026-11-28T08:00:00.123Z'));
  t.same(patch, { status: { conditions: [{ type: POD_ADDRESSES_CONDITION, status: 'True', reason: 'Attached', message: '10.1.0.9,fd00::9', lastTransitionTime: '2026-11-28T08:00:00Z' }] } });
  t.same(podAddresses(podWith((patch as { status: Record<string, unknown> }).status)), ['10.1.0.9', 'fd00::9'], 'what it writes reads back');
});

t.test('the span: nodes whose Pods have rules naming the Pod as a peer', async (t) => {
  const e = new PolicyEngine();
  const ns = (name: string) => e.upsert({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name } } });
  const pod = (namespace: string, name: string, node: string, ip: string, labels: Record<string, string> = {}) =>
    e.upsert({ apiVersion: 'v1', kind: 'Pod', metadata: { namespace, name, labels: { app: name, ...labels } }, spec: { nodeName: node }, status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] } });
  for (const n of ['x', 'y', 'z']) ns(n);
  pod('z', 'new', 'node-1', '10.1.0.9');
  pod('z', 'peer', 'node-1', '10.1.0.8');
  pod('y', 'a', 'node-2', '10.2.0.5');
  pod('y', 'b', 'node-3', '10.3.0.5');
  pod('x', 'c', 'node-4', '10.4.0.5');
  pod('x', 'd', 'node-5', '10.5.0.5');
  t.same(e.podSpan('z', 'new'), new Map(), 'no policy: no span');
  // y/a admits only namespace z (a K8s allow), y/b isolates with no peer at all, x/c denies egress to z (ANP), x/d allows everything from anywhere.
  e.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'y', name: 'a-from-z' }, spec: { podSelector: { matchLabels: { app: 'a' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }] } });
  e.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'y', name: 'b-deny' }, spec: { podSelector: { matchLabels: { app: 'b' } }, policyTypes: ['Ingress'] } });
  e.upsert({
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: 'c-no-egress-to-z' },
    spec: { priority: 5, subject: { pods: { namespaceSelector: { matchLabels: { ns: 'x' } }, podSelector: { matchLabels: { app: 'c' } } } }, egress: [{ name: 'deny', action: 'Deny', to: [{ namespaces: { matchLabels: { ns: 'z' } } }] }] },
  });
  e.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'd-any' }, spec: { podSelector: { matchLabels: { app: 'd' } }, ingress: [{}] } });
  t.same(
    e.podSpan('z', 'new'),
    new Map([['node-2', ['10.2.0.5']], ['node-4', ['10.4.0.5']]]),
    'y/a (ingress peer) and x/c (egress peer); not y/b (no peer: an unknown address is dropped as the Pod is) nor x/d (any peer)',
  );
  // A rule naming the Pod's own labels on its own node: the caller leaves its own node out; the Pod itself is never its own span.
  e.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'z', name: 'self' }, spec: { podSelector: {}, ingress: [{ from: [{ podSelector: {} }] }] } });
  t.same(e.podSpan('z', 'new').get('node-1'), ['10.1.0.8'], 'z/peer on the same node (the Pod itself is not listed)');
});

t.test('the guard\'s flows: both directions, per family, new connections only', async (t) => {
  const flows = newPodGuardFlows([{ podIps: ['10.1.0.9', 'fd00::9'], peerIps: ['10.2.0.5', 'fd00:2::5'] }, { podIps: ['10.1.0.9'], peerIps: ['10.2.0.5'] }]);
  t.same(
    flows.map((f) => `${f.table} priority=${f.priority} ${f.match} ${f.actions}`).sort(),
    [
      'AntreaPolicyEgressRule priority=64800 ct_state=+new+trk,ip,nw_src=10.1.0.9,nw_dst=10.2.0.5 drop',
      'AntreaPolicyEgressRule priority=64800 ct_state=+new+trk,ipv6,ipv6_src=fd00::9,ipv6_dst=fd00:2::5 drop',
      'AntreaPolicyIngressRule priority=64800 ct_state=+new+trk,ip,nw_src=10.2.0.5,nw_dst=10.1.0.9 drop',
      'AntreaPolicyIngressRule priority=64800 ct_state=+new+trk,ipv6,ipv6_src=fd00:2::5,ipv6_dst=fd00::9 drop',
    ],
    'no cross-family pairs; a pair guarded twice is one flow',
  );
  t.same(newPodGuardFlows([]), []);
});

t.test('realizationPort: a port, not another endpoint\'s', async (t) => {
  const env = { NODE_NAME: 'n' };
  t.equal(parseConfig('realizationPort: 10350', 'a', env).realizationPort, 10350);
  t.throws(() => parseConfig('realizationPort: 0', 'a', env), new ConfigError('a: realizationPort: must be a port 1-65535 (every node\'s agent answers other agents there), got 0'));
  t.throws(() => parseConfig('realizationPort: "x"', 'a', env), ConfigError);
  t.throws(() => parseConfig('realizationPort: 9376', 'a', env), /port 9376 is healthAddress's port/);
});
