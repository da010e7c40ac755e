/** Cluster state: Pod addresses (status, hostNetwork, deterministic), Services and endpoints. */
import t from 'tap';
import { ClusterState, deterministicPodIp } from '../../daemon/policy/cluster.js';
import { node, pod } from './policy-core-helpers.js';

t.test('status.podIPs / podIP are honoured', async (t) => {
  const c = new ClusterState();
  const p = pod('a', 'p', { ip: null });
  p.status = { podIPs: [{ ip: '10.0.0.1' }, { ip: 'fd00::1' }], podIP: '10.0.0.9' };
  c.upsertPod(p);
  t.same(c.pods.get('a/p')!.ips, ['10.0.0.1', 'fd00::1']);
  t.equal(c.podByIp.get('fd00::1')!.name, 'p');
});

t.test('Pods without an IP get a deterministic one, independent of arrival order', async (t) => {
  const a = new ClusterState();
  const b = new ClusterState();
  const pods = ['p1', 'p2', 'p3'].map((n) => pod('ns', n, { ip: null, node: 'n1' }));
  for (const p of pods) a.upsertPod(p);
  for (const p of [...pods].reverse()) b.upsertPod(p);
  for (const p of pods) {
    const ip = a.pods.get(`ns/${p.metadata.name}`)!.ips[0]!;
    t.equal(ip, b.pods.get(`ns/${p.metadata.name}`)!.ips[0]);
    t.equal(ip, deterministicPodIp('n1', 'ns', p.metadata.name));
    t.match(ip, /^10\.(1[3-9]\d|2[0-5]\d)\.\d+\.\d+$/, 'inside 10.128.0.0/9');
  }
  t.not(deterministicPodIp('n1', 'ns', 'p1'), deterministicPodIp('n2', 'ns', 'p1'), 'depends on the node');
});

t.test('a collision re-draws the address', async (t) => {
  const c = new ClusterState();
  const taken = deterministicPodIp(undefined, 'ns', 'second');
  c.upsertPod(pod('ns', 'first', { ip: taken }));
  c.upsertPod(pod('ns', 'second', { ip: null }));
  const ip = c.pods.get('ns/second')!.ips[0];
  t.not(ip, taken);
  t.equal(ip, deterministicPodIp(undefined, 'ns', 'second', 1));
});

t.test('hostNetwork Pods have their Node addresses and follow Node changes', async (t) => {
  const c = new ClusterState();
  c.upsertPod(pod('ns', 'h', { hostNetwork: true, node: 'n1', ip: null }));
  t.same(c.pods.get('ns/h')!.ips, [], 'Node unknown yet');
  const r = c.upsertNode(node('n1', '172.18.0.5'));
  t.same(c.pods.get('ns/h')!.ips, ['172.18.0.5']);
  t.equal(r.pods.length, 1, 'reported as changed');
  t.notOk(c.podByIp.has('172.18.0.5'), 'a hostNetwork Pod is not indexed as a Pod address');
  t.equal(c.nodeByIp.get('172.18.0.5')!.name, 'n1');
});

t.test('terminated Pods are not endpoints', async (t) => {
  const c = new ClusterState();
  const p = pod('ns', 'done', { ip: '10.0.0.3' });
  c.upsertPod(p);
  c.upsertPod({ ...p, status: { ...p.status, phase: 'Succeeded' } });
  t.notOk(c.pods.has('ns/done'));
  t.notOk(c.podByIp.has('10.0.0.3'));
});

t.test('Service endpoints: EndpointSlices when present, else the selector', async (t) => {
  const c = new ClusterState();
  c.upsertPod(pod('ns', 'a', { ip: '10.0.0.1', labels: { app: 'x' } }));
  c.upsertPod(pod('ns', 'b', { ip: '10.0.0.2', labels: { app: 'y' } }));
  c.upsertService({ apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'ns' }, spec: { clusterIP: '10.96.0.1', selector: { app: 'x' }, ports: [{ port: 80, targetPort: 'http' }] } });
  t.same(c.serviceEndpoints('ns', 's').map((p) => p.name), ['a']);
  t.same(c.services.get('ns/s')!.ports, [{ protocol: 'TCP', port: 80, targetPort: 'http' }]);
  c.upsertEndpointSlice({ apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 's-1', namespace: 'ns', labels: { 'kubernetes.io/service-name': 's' } }, endpoints: [{ addresses: ['10.0.0.2'] }, { addresses: ['10.0.0.1'], conditions: { ready: false } }] } as never);
  t.same(c.serviceEndpoints('ns', 's').map((p) => p.name), ['b'], 'by address; not-ready endpoints excluded');
  t.equal(c.serviceByIp.get('10.96.0.1')!.name, 's');
});
