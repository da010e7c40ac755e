/**
 * Pure parts of enforcement: the Pod view that completes local Pods with CNI's IPs, the policy
 * punt decision (reject/log, audit fields, K8s default drop reference) on flows the compiler made,
 * reject reply addressing, and the watched-resource table.
 */
import t from 'tap';
import { decidePolicyPunt, rejectReplyMacs, macBytes } from '../../daemon/enforcement/punthandler.js';
import { PodView } from '../../daemon/enforcement/podview.js';
import { PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { decodePuntUserdata } from '../../daemon/flows/punt.js';
import type { PacketIn } from '../../daemon/ovs/openflow/wire.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { isNotFound, WATCHED_RESOURCES } from '../../daemon/enforcement/watch/resources.js';
import { buildRejectReply } from '../../daemon/enforcement/reject/index.js';

const ns = (name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name, ...labels }, annotations },
});
const pod = (namespace: string, name: string, ip: string | undefined, nodeName: string, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { namespace, name, labels },
  spec: { nodeName, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 80 }] }] },
  status: { phase: 'Running', ...(ip ? { podIP: ip, podIPs: [{ ip }] } : {}) },
});

t.test('PodView: CNI IPs complete the API Pod; the API alone or CNI alone also work', async (t) => {
  const v = new PodView('node-1');
  const api = pod('x', 'a', undefined, 'node-1', { app: 'a' });
  t.same(v.setApi(api), api, 'API Pod without a local attachment is passed through');
  const merged = v.setLocal({ namespace: 'x', name: 'a', ips: ['10.0.0.5'] });
  t.equal(merged.status.podIP, '10.0.0.5', 'local IP filled in');
  t.same(merged.status.podIPs, [{ ip: '10.0.0.5' }]);
  t.same(merged.metadata.labels, { app: 'a' }, 'labels kept from the API');
  t.equal(api.status.podIP, undefined, 'the API object itself is not modified');
  const stale = v.setApi(pod('x', 'a', '10.9.9.9', 'node-1', { app: 'a' }));
  t.equal(stale.status.podIP, '10.0.0.5', 'the local attachment wins over an API IP of an older sandbox');
  t.same(v.removeLocal('x', 'a')!.status.podIP, '10.9.9.9', 'after DEL the API object is what remains');
  t.equal(v.removeApi('x', 'a'), undefined, 'gone from both: remove');

  const early = v.setLocal({ namespace: 'y', name: 'b', ips: ['10.0.0.6'] });
  t.match(early, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'y', name: 'b' }, spec: { nodeName: 'node-1' }, status: { podIP: '10.0.0.6' } }, 'a Pod the API has not shown yet');
  t.notOk(v.hasApi('y', 'b'));
});

/** A TCP SYN frame 10.0.1.1:40000 -> 10.0.2.2:80. */
function synFrame(): Buffer {
  const eth = Buffer.from('aabbccddeeff' + '0a0000000001' + '0800', 'hex');
  const ip = Buffer.alloc(20);
  ip[0] = 0x45; ip.writeUInt16BE(40, 2); ip[8] = 64; ip[9] = 6;
  Buffer.from([10, 0, 1, 1]).copy(ip, 12); Buffer.from([10, 0, 2, 2]).copy(ip, 16);
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(40000, 0); tcp.writeUInt16BE(80, 2); tcp.writeUInt32BE(1000, 4); tcp[12] = 0x50; tcp[13] = 0x02; tcp.writeUInt16BE(64240, 14);
  return Buffer.concat([eth, ip, tcp]);
}

function userdataOf(actions: string): Buffer {
  const m = /userdata=([0-9a-f.]+)/.exec(actions);
  if (!m) throw new Error(`no userdata in ${actions}`);
  return Buffer.from(m[1]!.split('.').map((h) => parseInt(h, 16)));
}

const pinWith = (userdata: Buffer): PacketIn => ({
  tableId: 13, cookie: 0n, reason: 1, packet: synFrame(), totalLength: 54, bufferId: 0xffffffff, userdata, hasContinuation: false,
  inPort: 3, registers: new Array(16).fill(0), ctState: 0, ctZone: 0, ctMark: 0, ctLabel: 0n, pktMark: 0, metadata: 0n,
} as unknown as PacketIn);

t.test('policy punts of compiled flows: reject + audit event naming the rule; K8s default drop', async (t) => {
  const e = new PolicyEngine({ nodeName: 'node-1' });
  e.upsert(ns('x', {}, { 'networkpolicy.antrea.io/enable-logging': 'true' }));
  e.upsert(ns('y'));
  e.upsert(pod('x', 'server', '10.0.2.2', 'node-1', { app: 'server' }));
  e.upsert(pod('y', 'client', '10.0.1.1', 'node-2', { app: 'client' }));
  e.upsert({
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'reject-y' },
    spec: {
      priority: 5, tier: 'application',
      appliedTo: [{ podSelector: { matchLabels: { app: 'server' } } }],
      ingress: [{ name: 'no-y', action: 'Reject', enableLogging: true, from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'TCP', port: 80 }] }],
    },
  });
  e.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { namespace: 'x', name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } });
  const pf = new PolicyFlows();
  pf.sync(policyFlowInput(e));
  const flows = pf.flows();
  const rejectFlow = flows.find((f) => f.match.startsWith('conj_id=') && f.actions.includes('controller('));
  t.ok(rejectFlow, 'the compiler punts the Reject rule');
  const punt = decodePuntUserdata(userdataOf(rejectFlow!.actions))!;
  const d = decidePolicyPunt(pinWith(userdataOf(rejectFlow!.actions)), punt, (id) => pf.describe(id));
  t.equal(d.reject, true, 'reject requested');
  t.match(d.audit, {
    tableName: 'AntreaPolicyIngressRule', policyRef: 'AntreaClusterNetworkPolicy:reject-y', action: 'Reject', priority: rejectFlow!.priority,
    srcIp: '10.0.1.1', srcPort: 40000, dstIp: '10.0.2.2', dstPort: 80, protocol: 'TCP', length: 40,
  }, 'audit event fields');

  const isolation = flows.find((f) => f.table === 'IngressDefaultRule' && f.actions.includes('controller('));
  t.ok(isolation, 'the logged namespace default drop punts');
  const ud = userdataOf(isolation!.actions);
  const d2 = decidePolicyPunt(pinWith(ud), decodePuntUserdata(ud)!, (id) => pf.describe(id));
  t.equal(d2.reject, false);
  t.match(d2.audit, { tableName: 'IngressDefaultRule', policyRef: 'K8sNetworkPolicy', action: 'Drop', priority: -1 }, 'K8s default drop reference');

  const removed = decidePolicyPunt(pinWith(userdataOf(rejectFlow!.actions)), punt, () => undefined);
  t.match(removed.audit!.policyRef, /^Unknown:conjunction-\d+$/, 'a rule removed meanwhile is not guessed');
  t.throws(() => decidePolicyPunt(pinWith(Buffer.from([1, 1])), { category: 1, ops: 1, extra: Buffer.alloc(0) }, () => undefined), /without rule information/);
});

t.test('reject replies are addressed to what is behind the in_port, from the virtual MAC', async (t) => {
  const reply = buildRejectReply(synFrame());
  t.ok(reply.ok);
  const macs = rejectReplyMacs('8e:2e:cc:90:79:92')!;
  t.same([...macs.dst], [0x8e, 0x2e, 0xcc, 0x90, 0x79, 0x92]);
  t.same([...macs.src], [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
  t.equal(rejectReplyMacs(undefined), undefined, 'unknown port: no reply');
  t.throws(() => macBytes('zz:00'), /not a MAC address/);
});

t.test('watched resources: every policy kind and the cluster view; CRDs optional; 404 detection', async (t) => {
  const kinds = WATCHED_RESOURCES.map((r) => `${r.apiVersion}/${r.kind}`);
  for (const k of ['v1/Pod', 'v1/Namespace', 'v1/Node', 'v1/Service', 'v1/ServiceAccount', 'discovery.k8s.io/v1/EndpointSlice', 'networking.k8s.io/v1/NetworkPolicy',
    'crd.antrea.io/v1beta1/Tier', 'crd.antrea.io/v1beta1/ClusterNetworkPolicy', 'crd.antrea.io/v1beta1/NetworkPolicy', 'crd.antrea.io/v1beta1/ClusterGroup', 'crd.antrea.io/v1beta1/Group',
    'policy.networking.k8s.io/v1alpha1/AdminNetworkPolicy', 'policy.networking.k8s.io/v1alpha1/BaselineAdminNetworkPolicy', 'policy.networking.k8s.io/v1alpha2/ClusterNetworkPolicy']) {
    t.ok(kinds.includes(k), `watches ${k}`);
  }
  t.equal(WATCHED_RESOURCES.find((r) => r.kind === 'Pod')!.path, '/api/v1/pods');
  t.equal(WATCHED_RESOURCES.find((r) => r.kind === 'Tier')!.path, '/apis/crd.antrea.io/v1beta1/tiers');
  t.ok(WATCHED_RESOURCES.filter((r) => r.group.endsWith('crd.antrea.io') || r.group === 'policy.networking.k8s.io').every((r) => r.optional), 'CRD kinds are optional');
  t.ok(WATCHED_RESOURCES.filter((r) => r.apiVersion === 'v1').every((r) => !r.optional), 'core kinds are required');
  t.ok(isNotFound({ statusCode: 404 }));
  t.ok(isNotFound({ code: 404 }));
  t.notOk(isNotFound({ statusCode: 500 }));
  t.notOk(isNotFound(new Error('socket hang up')));
});

t.test('config: auditLogPath and enforcePolicies; when enforcement runs', async (t) => {
  const { parseConfig } = await import('../../daemon/config.js');
  const { enforcementWanted } = await import('../../daemon/enforcement/index.js');
  const base = parseConfig('', 'a.yaml', { NODE_NAME: 'n' });
  t.equal(base.auditLogPath, '/var/log/antrea/networkpolicy/np.log', 'default audit log path (Antrea\'s)');
  t.notOk('enforcePolicies' in base, 'enforcePolicies unset by default');
  t.equal(parseConfig('auditLogPath: /run/x/np.log', 'a.yaml', {}).auditLogPath, '/run/x/np.log');
  t.throws(() => parseConfig('auditLogPath: np.log', 'a.yaml', {}), /auditLogPath: must be an absolute path/);
  t.throws(() => parseConfig('enforcePolicies: yes please', 'a.yaml', {}), /enforcePolicies: must be true or false/);
  t.same(enforcementWanted(base, {}), { on: false, why: 'no API server configured (no kubeconfig, not in a cluster)' }, 'no API: datapath only');
  t.equal(enforcementWanted(base, { KUBERNETES_SERVICE_HOST: '10.96.0.1' }).on, true, 'in a cluster: on');
  t.equal(enforcementWanted(parseConfig('kubeconfig: /k', 'a.yaml', {}), {}).on, true, 'kubeconfig: on');
  t.equal(enforcementWanted(parseConfig('kubeconfig: /k\nenforcePolicies: false', 'a.yaml', {}), {}).on, false, 'explicitly off');
  t.equal(enforcementWanted(parseConfig('enforcePolicies: true', 'a.yaml', {}), {}).on, true, 'explicitly on (start-up then needs the API)');
});
