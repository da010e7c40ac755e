/**
 * The informers' trim (daemon/enforcement/watch/trim.ts) keeps every field the agent reads: each
 * full API object (as a real API server returns it) is fed to the enforcer (Pod view, policy
 * engine) behind a proxy that records every field read; each read field must be in the trimmed
 * object with the same value. Then the same cluster fed full and trimmed gives the same engine
 * state and the same flows, local Pods (CNI ADD) included.
 */
import t from 'tap';
import { pino } from 'pino';
import type { PodAttachment } from '../../daemon/node/attachment.js';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { trimObject } from '../../daemon/enforcement/watch/trim.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { POD_ADDRESSES_CONDITION, podAddresses } from '../../daemon/policy/cluster.js';

const log = pino({ level: 'silent' });
const NODE = 'node-1';
const time = '2026-11-20T09:41:07Z';

const managedFields = [{ apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} } } }, manager: 'kube-controller-manager', operation: 'Update', time }];

function pod(ns: string, name: string, ip: string | undefined, opts: { node?: string; labels?: Record<string, string>; hostNetwork?: boolean; phase?: string; sa?: string; published?: string } = {}): KubeObject {
  const port = (containerPort: number, pname?: string, protocol?: string) => ({ ...(pname ? { name: pname } : {}), containerPort, ...(protocol ? { protocol } : {}), hostPort: 0 });
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name, namespace: ns, uid: `uid-${ns}-${name}`, resourceVersion: '4711', generateName: `${name}-`, creationTimestamp: time,
      labels: opts.labels ?? { app: name, 'pod-template-hash': '7d4b9c' },
      annotations: { 'prometheus.io/scrape': 'true' },
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: `${name}-7d4b9c`, uid: 'rs', controller: true, blockOwnerDeletion: true }],
      managedFields,
    } as KubeObject['metadata'],
    spec: {
      nodeName: opts.node ?? 'node-2',
      ...(opts.hostNetwork ? { hostNetwork: true } : {}),
      serviceAccountName: opts.sa ?? 'runner', serviceAccount: opts.sa ?? 'runner',
      initContainers: [{ name: 'init', image: 'busybox', ports: [port(9000, 'init-admin')] }],
      containers: [
        { name: 'c', image: 'registry.example.com/app:v1', args: ['--x'], env: [{ name: 'A', value: 'b' }], resources: { requests: { cpu: '100m' } }, ports: [port(8080, 'http'), port(53, 'dns', 'UDP'), port(9999, undefined, 'SCTP')], volumeMounts: [{ name: 'v', mountPath: '/v' }] },
        { name: 'sidecar', image: 'proxy' },
      ],
      dnsPolicy: 'ClusterFirst', restartPolicy: 'Always', schedulerName: 'default-scheduler', tolerations: [{ key: 'k', operator: 'Exists' }],
      volumes: [{ name: 'v', projected: { sources: [{ serviceAccountToken: { path: 'token' } }] } }],
    },
    status: {
      phase: opts.phase ?? 'Running',
      ...(ip ? { podIP: ip, podIPs: [{ ip }] } : {}),
      hostIP: '172.20.0.2', hostIPs: [{ ip: '172.20.0.2' }], qosClass: 'Burstable', startTime: time,
      conditions: [
        { type: 'Ready', status: 'True', lastProbeTime: null, lastTransitionTime: time },
        ...(opts.published ? [{ type: POD_ADDRESSES_CONDITION, status: 'True', reason: 'Attached', message: opts.published, lastProbeTime: null, lastTransitionTime: time }] : []),
      ],
      containerStatuses: [{ name: 'c', ready: true, restartCount: 0, image: 'x', imageID: 'y', containerID: 'z', started: true, state: { running: { startedAt: time } } }],
    },
  };
}

const namespace = (name: string, labels: Record<string, string>, annotations: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1', kind: 'Namespace',
  metadata: { name, uid: `uid-ns-${name}`, resourceVersion: '7', labels: { ...labels, 'kubernetes.io/metadata.name': name }, annotations: { ...annotations, 'kubectl.kubernetes.io/last-applied-configuration': '{}' }, managedFields } as KubeObject['metadata'],
  spec: { finalizers: ['kubernetes'] },
  status: { phase: 'Active' },
});

const node = (name: string, ip: string): KubeObject => ({
  apiVersion: 'v1', kind: 'Node',
  metadata: { name, uid: `uid-${name}`, resourceVersion: '9', labels: { 'kubernetes.io/hostname': name, zone: 'z1' }, annotations: { 'node.alpha.kubernetes.io/ttl': '0' }, managedFields } as KubeObject['metadata'],
  spec: { podCIDR: '10.1.0.0/24', podCIDRs: ['10.1.0.0/24'] },
  status: {
    addresses: [{ type: 'Hostname', address: name }, { type: 'ExternalIP', address: '203.0.113.9' }, { type: 'InternalIP', address: ip }],
    capacity: { cpu: '2' }, conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1.31.0' }, images: [{ names: ['x'], sizeBytes: 1 }],
  },
});

const service = (ns: string, name: string, clusterIP: string, selector?: Record<string, string>): KubeObject => ({
  apiVersion: 'v1', kind: 'Service',
  metadata: { name, namespace: ns, uid: `uid-svc-${name}`, resourceVersion: '11', labels: { app: name }, annotations: { a: 'b' }, managedFields } as KubeObject['metadata'],
  spec: {
    clusterIP, clusterIPs: [clusterIP], ipFamilies: ['IPv4'], ipFamilyPolicy: 'SingleStack', type: 'ClusterIP', sessionAffinity: 'None', internalTrafficPolicy: 'Cluster',
    ...(selector ? { selector } : {}),
    ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'http', appProtocol: 'http' }, { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 }, { port: 81, protocol: 'SCTP' }],
  },
  status: { loadBalancer: {} },
});

const slice = (ns: string, name: string, svc: string, endpoints: unknown[]): KubeObject => ({
  apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice',
  metadata: { name, namespace: ns, uid: `uid-eps-${name}`, resourceVersion: '12', generateName: `${svc}-`, labels: { 'kubernetes.io/service-name': svc, 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' }, ownerReferences: [{ kind: 'Service', name: svc }], managedFields } as KubeObject['metadata'],
  addressType: 'IPv4',
  endpoints,
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
});

const endpoint = (ip: string, ns: string, podName: string | undefined, ready: boolean) => ({
  addresses: [ip], conditions: { ready, serving: ready, terminating: false }, nodeName: 'node-2', zone: 'z1',
  ...(podName ? { targetRef: { kind: 'Pod', namespace: ns, name: podName, uid: `uid-${ns}-${podName}` } } : {}),
});

const policies: KubeObject[] = [
  {
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy',
    metadata: { name: 'db', namespace: 'x', uid: 'uid-np', resourceVersion: '20', generation: 1, annotations: { note: 'n' }, managedFields } as KubeObject['metadata'],
    spec: { podSelector: { matchLabels: { app: 'db' } }, policyTypes: ['Ingress', 'Egress'], ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: 't1' } }, podSelector: { matchLabels: { app: 'web' } } }], ports: [{ port: 'http' }, { port: 53, protocol: 'UDP' }] }], egress: [{ to: [{ ipBlock: { cidr: '10.96.0.0/12' } }], ports: [{ port: 80 }] }] },
  },
  {
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy',
    metadata: { name: 'acnp', uid: 'uid-acnp', resourceVersion: '21', generation: 2, managedFields } as KubeObject['metadata'],
    spec: { priority: 5, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'web' } } }], egress: [{ action: 'Drop', toServices: [{ name: 'api', namespace: 'y' }] }, { action: 'Allow', to: [{ podSelector: { matchLabels: { app: 'db' } }, namespaceSelector: {} }], ports: [{ protocol: 'TCP', port: 8080 }] }] },
    status: { phase: 'Realized', observedGeneration: 2 },
  },
  {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy',
    metadata: { name: 'anp', uid: 'uid-anp', resourceVersion: '22', managedFields } as KubeObject['metadata'],
    spec: { priority: 10, subject: { namespaces: { matchLabels: { team: 't2' } } }, ingress: [{ name: 'deny-web', action: 'Deny', from: [{ pods: { namespaceSelector: {}, podSelector: { matchLabels: { app: 'web' } } } }] }] },
  },
];

/** Every object kind the informers watch, full, with fields that no reader needs. */
function cluster(): KubeObject[] {
  return [
    node(NODE, '172.20.0.1'), node('node-2', '172.20.0.2'),
    namespace('x', { team: 't1' }, { 'policy.antrea.io/enable-np-logging': 'true' }), namespace('y', { team: 't2' }),
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'runner', namespace: 'x', uid: 'uid-sa', resourceVersion: '3', managedFields } as KubeObject['metadata'], secrets: [{ name: 's' }] },
    pod('x', 'web', '10.1.0.5', { node: NODE, labels: { app: 'web' } }),
    pod('x', 'db', '10.1.0.6', { node: NODE, labels: { app: 'db' } }),
    pod('y', 'api', '10.2.0.7', { labels: { app: 'api' } }),
    pod('y', 'api-2', '10.2.0.8', { labels: { app: 'api' }, sa: 'other' }),
    pod('y', 'host', undefined, { hostNetwork: true, labels: { app: 'web' } }),
    pod('y', 'done', '10.2.0.9', { phase: 'Succeeded', labels: { app: 'web' } }),
    pod('y', 'pending', undefined, { labels: { app: 'web' } }),
    // Its node's agent published its address at CNI ADD; the kubelet has not reported it yet.
    pod('y', 'published', undefined, { labels: { app: 'web' }, published: '10.2.0.11' }),
    service('y', 'api', '10.96.0.10', { app: 'api' }),
    service('x', 'headless', 'None', { app: 'db' }),
    slice('y', 'api-abc', 'api', [endpoint('10.2.0.7', 'y', 'api', true), endpoint('10.2.0.8', 'y', 'api-2', false), endpoint('10.3.0.1', 'y', undefined, true)]),
    ...policies,
  ];
}

const enforcer = () => new Enforcer({ nodeName: NODE, ovsRunDir: '/nonexistent', bridge: 'br-test', log });

/** `obj` behind a proxy that records the path of every field read ("spec.containers.0.ports"). */
function recording(obj: object, reads: Set<string>, path: string[] = []): object {
  return new Proxy(obj, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver);
      if (typeof key !== 'string' || !Object.hasOwn(target, key)) return value;
      const p = [...path, key];
      reads.add(p.join('.'));
      return typeof value === 'object' && value !== null ? recording(value, reads, p) : value;
    },
    ownKeys(target) {
      reads.add([...path, '*'].join('.'));
      return Reflect.ownKeys(target);
    },
  });
}

const at = (o: unknown, path: string[]): unknown => path.reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), o);

t.test('every field the enforcer and the engine read of an object survives the trim', async (t) => {
  const e = enforcer();
  let checked = 0;
  const allReads = new Set<string>();
  for (const full of cluster()) {
    const reads = new Set<string>();
    const trimmed = trimObject(structuredClone(full));
    e.onWatchEvent({ type: 'upsert', object: recording(structuredClone(full), reads) as KubeObject });
    e.compileNow();
    for (const r of reads) {
      // Of a Pod's conditions the trim keeps sluice's address publication alone (positions move):
      // what the reader makes of them is compared below instead.
      if (full.kind === 'Pod' && r.startsWith('status.conditions')) continue;
      const path = r.split('.');
      const whole = path.at(-1) === '*';
      const p = whole ? path.slice(0, -1) : path;
      const want = at(full, p);
      const got = at(trimmed, p);
      // A field read: the same value; an object whose keys are listed: the same keys (the values
      // read are recorded one by one). An object only stepped through is checked by the reads below it.
      const keys = (o: unknown) => (o && typeof o === 'object' ? Object.keys(o).sort() : o);
      if (whole) t.same(keys(got), keys(want), `${full.kind} ${full.metadata.name}: ${r}`);
      else if (typeof want !== 'object' || want === null) t.same(got, want, `${full.kind} ${full.metadata.name}: ${r}`);
      else t.equal(typeof got, 'object', `${full.kind} ${full.metadata.name}: ${r} present`);
      checked++;
      allReads.add(`${full.kind}:${r}`);
    }
    if (full.kind === 'Pod') t.same(podAddresses(trimmed), podAddresses(full), `${full.kind} ${full.metadata.name}: the addresses read from status`);
  }
  // The recorder saw the readers (a proxy that records nothing would pass vacuously).
  t.same(podAddresses(trimObject(cluster().find((o) => o.metadata.name === 'published')!)), ['10.2.0.11'], 'a published address survives the trim');
  for (const r of ['Pod:status.podIPs', 'Pod:spec.containers', 'Pod:metadata.labels.*', 'Pod:spec.serviceAccountName', 'Namespace:metadata.annotations.*', 'Node:status.addresses', 'Service:spec.ports', 'EndpointSlice:endpoints', 'NetworkPolicy:spec']) {
    t.ok(allReads.has(r), `reads include ${r}`);
  }
  t.ok(checked > 50, `${checked} reads checked`);
});

t.test('the trim drops what nobody reads and does not change its input', async (t) => {
  const full = pod('x', 'web', '10.1.0.5');
  const copy = structuredClone(full);
  const trimmed = trimObject(full);
  t.same(full, copy, 'input unchanged');
  t.same(trimmed, {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: 'web', namespace: 'x', uid: 'uid-x-web', resourceVersion: '4711', labels: { app: 'web', 'pod-template-hash': '7d4b9c' }, creationTimestamp: time },
    spec: {
      nodeName: 'node-2', serviceAccountName: 'runner', serviceAccount: 'runner',
      containers: [{ name: 'c', ports: full.spec.containers[0].ports }, { name: 'sidecar' }],
      initContainers: [{ name: 'init', ports: full.spec.initContainers[0].ports }],
    },
    status: { phase: 'Running', podIP: '10.1.0.5', podIPs: [{ ip: '10.1.0.5' }] },
  });
  t.ok(JSON.stringify(trimmed).length * 2 < JSON.stringify(full).length, 'less than half the size');
  const np = trimObject(policies[0]!);
  t.notOk('managedFields' in np.metadata, 'policies lose managedFields');
  t.same(np.spec, policies[0]!.spec, 'and keep their whole spec');
  t.same(np.metadata.annotations, policies[0]!.metadata.annotations);
  // Odd input passes without throwing: no metadata, fields of the wrong type.
  const odd = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'o' }, spec: { containers: 'x' }, status: 7 } as unknown as KubeObject;
  t.same(trimObject(odd), { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'o' }, spec: { containers: 'x' } });
  const bare = { apiVersion: 'v1', kind: 'Pod' } as unknown as KubeObject;
  t.equal(trimObject(bare), bare);
});

t.test('full and trimmed objects give the same engine state and flows, local Pods included', async (t) => {
  const a = enforcer();
  const b = enforcer();
  for (const o of cluster()) {
    a.onWatchEvent({ type: 'upsert', object: structuredClone(o) });
    b.onWatchEvent({ type: 'upsert', object: trimObject(structuredClone(o)) });
  }
  const attach = (name: string, ip: string): PodAttachment => ({ containerId: `c-${name}`, podNamespace: 'x', podName: name, netns: '/proc/1/ns/net', ifName: 'eth0', hostVeth: `veth-${name}`, ofport: 10, mac: '02:00:00:00:00:01', ips: [ip] });
  // CNI ADD of a local Pod the API already shows, and one it does not show yet.
  for (const e of [a, b]) {
    await e.podAttaching(attach('web', '10.1.0.50'));
    await e.podAttaching(attach('new', '10.1.0.51'));
  }
  const state = (e: Enforcer) => ({
    pods: [...e.engine.cluster.pods.values()],
    namespaces: [...e.engine.cluster.namespaces.values()],
    nodes: [...e.engine.cluster.nodes.values()],
    services: [...e.engine.cluster.services.values()],
    slices: [...e.engine.cluster.endpointSlices.values()],
    serviceAccounts: [...e.engine.cluster.serviceAccounts],
    rules: e.engine.nodeRuleSet(),
    errors: e.engine.errors(),
    flows: e.flows().map((f) => `${f.table} ${f.priority} ${f.match} ${f.actions}`).sort(),
  });
  const sa = state(a);
  t.ok(sa.pods.length >= 6 && sa.rules.length > 0 && sa.flows.length > 0, 'the cluster gives Pods, rules and flows');
  t.same(state(b), sa);
});
