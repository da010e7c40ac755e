/**
 * The synthetic cluster the policy benches load: Nodes, labelled Namespaces and Pods, and a mix of
 * every policy kind the engine reads (Kubernetes NetworkPolicy; Antrea ClusterNetworkPolicy,
 * NetworkPolicy, ClusterGroup; BaselineAdminNetworkPolicy, AdminNetworkPolicy v1alpha1,
 * ClusterNetworkPolicy v1alpha2). Pure: the same options give the same objects.
 *
 * Pod j of every Namespace has labels app=app-(j%10), tier=fe|be|db and named ports http
 * (8080–8082) and dns (53/UDP); Namespace i has team=t(i%20) and env=prod|dev. The policy shapes
 * select by those labels, so a Pod with the same labels placed anywhere is selected like these.
 */
import type { KubeObject } from '../daemon/policy/types.js';

export interface ClusterModelOptions {
  namespaces: number;
  podsPerNamespace: number;
  nodes: number;
  /** Total policies; every kind gets its share when `policies` leaves room (see below). */
  policies: number;
  /** Node n's name (default node-n). */
  nodeName?: (n: number) => string;
  /** The k-th Pod's IPv4 address (default 10.16.0.0/12 by k). */
  podIP?: (k: number) => string;
  /** Leave out the kinds beyond Kubernetes NetworkPolicy. */
  k8sOnly?: boolean;
}

export interface ClusterModel {
  /** Nodes, Namespaces, Pods and ClusterGroups: everything but policies. */
  cluster: KubeObject[];
  policies: KubeObject[];
}

export const podLabels = (j: number): Record<string, string> => ({ app: `app-${j % 10}`, tier: ['fe', 'be', 'db'][j % 3]! });
export const namespaceLabels = (i: number): Record<string, string> => ({ team: `t${i % 20}`, env: i % 2 ? 'prod' : 'dev' });
export const podContainers = (j: number) => [{ name: 'c', ports: [{ name: 'http', containerPort: 8080 + (j % 3) }, { name: 'dns', containerPort: 53, protocol: 'UDP' }] }];

/** A bench's numeric `--name N` argument, `dflt` when absent. */
export function numberArg(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

/** The scale benches' cluster (`--pods`, `--nodes`, `--policies`): by default 150 000 Pods on 5 000 Nodes, 10 000 policies. */
export function scaleClusterArgs(): { pods: number; nodes: number; policies: number } {
  return { pods: numberArg('pods', 150_000), nodes: numberArg('nodes', 5000), policies: numberArg('policies', 10_000) };
}

/**
 * Kinds split: Antrea 300 (200 ClusterNetworkPolicies with 20 ClusterGroups, 100 NetworkPolicies),
 * admin 200 (1 BaselineAdminNetworkPolicy, 49 v1alpha2 ClusterNetworkPolicies, the rest
 * AdminNetworkPolicies), and Kubernetes NetworkPolicies for the remainder.
 */
export function clusterModel(o: ClusterModelOptions): ClusterModel {
  const nodeName = o.nodeName ?? ((n: number) => `node-${n}`);
  const podIP = o.podIP ?? ((k: number) => `10.${16 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`);
  const cluster: KubeObject[] = [];
  for (let n = 0; n < o.nodes; n++) {
    cluster.push({ apiVersion: 'v1', kind: 'Node', metadata: { name: nodeName(n), labels: { zone: `z${n % 3}` } }, status: { addresses: [{ type: 'InternalIP', address: `172.20.${n >> 8}.${n & 255}` }] } });
  }
  for (let i = 0; i < o.namespaces; i++) {
    cluster.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `ns-${i}`, labels: namespaceLabels(i) } });
    for (let j = 0; j < o.podsPerNamespace; j++) {
      const k = i * o.podsPerNamespace + j;
      cluster.push({
        apiVersion: 'v1', kind: 'Pod',
        metadata: { name: `pod-${j}`, namespace: `ns-${i}`, labels: podLabels(j) },
        spec: { nodeName: nodeName(k % o.nodes), containers: podContainers(j) },
        status: { phase: 'Running', podIP: podIP(k), podIPs: [{ ip: podIP(k) }] },
      });
    }
  }
  const policies: KubeObject[] = [];
  const others = o.k8sOnly ? 0 : 500;
  const k8sShare = Math.max(0, o.policies - others);
  for (let p = 0; p < k8sShare; p++) {
    const shape = Math.floor(p / o.namespaces);
    const spec = [
      { podSelector: { matchLabels: { tier: 'db' } }, policyTypes: ['Ingress'] },
      { podSelector: { matchLabels: { tier: 'db' } }, ingress: [{ from: [{ podSelector: { matchLabels: { tier: 'be' } } }], ports: [{ port: 'http' }] }] },
      { podSelector: { matchLabels: { tier: 'fe' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `t${p % 20}` } } }, { ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.1.0/24'] } }], ports: [{ port: 8080, endPort: 8082 }] }], egress: [{ to: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'app-1' } } }] }] },
      { podSelector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['app-2', 'app-3'] }] }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { env: 'prod' } }, podSelector: { matchLabels: { tier: 'fe' } } }] }] },
    ][shape % 4];
    policies.push({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np-${p}`, namespace: `ns-${p % o.namespaces}` }, spec });
  }
  if (o.k8sOnly) return { cluster, policies };
  for (let g = 0; g < 20; g++) {
    cluster.push({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterGroup', metadata: { name: `cg-${g}` }, spec: { namespaceSelector: { matchLabels: { team: `t${g}` } }, podSelector: { matchLabels: { tier: 'fe' } } } });
  }
  for (let p = 0; p < 200; p++) {
    policies.push({
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: `acnp-${p}` },
      spec: {
        priority: 1 + (p % 50), tier: ['securityops', 'application', 'baseline'][p % 3],
        appliedTo: [{ namespaceSelector: { matchLabels: { team: `t${p % 20}` } }, podSelector: { matchLabels: { app: `app-${p % 10}` } } }],
        ingress: [{ action: p % 3 === 2 ? 'Drop' : ['Allow', 'Drop', 'Pass'][p % 3], from: [p % 5 === 0 ? { group: `cg-${p % 20}` } : { namespaceSelector: { matchLabels: { env: 'dev' } } }], ports: [{ protocol: 'TCP', port: 8080 }] }],
        egress: [{ action: 'Drop', to: [{ ipBlock: { cidr: `203.0.${p % 256}.0/24` } }] }],
      },
    });
  }
  for (let p = 0; p < 100; p++) {
    policies.push({
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy', metadata: { name: `annp-${p}`, namespace: `ns-${(p * 5) % o.namespaces}` },
      spec: {
        priority: 5, tier: 'application',
        appliedTo: [{ podSelector: { matchLabels: { tier: 'db' } } }],
        ingress: [{ action: 'Allow', from: [{ podSelector: { matchLabels: { tier: 'be' } } }], ports: [{ protocol: 'TCP', port: 8081 }] }, { action: 'Drop' }],
      },
    });
  }
  policies.push({
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' },
    spec: { subject: { namespaces: {} }, ingress: [{ name: 'deny-other-teams', action: 'Deny', from: [{ namespaces: { matchLabels: { team: 't0' } } }] }] },
  });
  for (let p = 0; p < 49; p++) {
    policies.push({
      apiVersion: 'policy.networking.k8s.io/v1alpha2', kind: 'ClusterNetworkPolicy', metadata: { name: `cnp-${p}` },
      spec: {
        tier: p % 2 ? 'Admin' : 'Baseline', priority: p,
        subject: { namespaces: { matchLabels: { team: `t${p % 20}` } } },
        ingress: [{ name: 'r', action: ['Accept', 'Deny', 'Pass'][p % 3], from: [{ namespaces: { matchLabels: { env: 'prod' } } }], protocols: [{ tcp: { destinationPort: { number: 443 } } }] }],
      },
    });
  }
  for (let p = 0; policies.length < k8sShare + others; p++) {
    policies.push({
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: `anp-${p}` },
      spec: {
        priority: p % 1000,
        subject: { pods: { namespaceSelector: { matchLabels: { team: `t${p % 20}` } }, podSelector: { matchLabels: { tier: 'db' } } } },
        ingress: [{ name: 'from-fe', action: ['Allow', 'Deny', 'Pass'][p % 3], from: [{ pods: { namespaceSelector: {}, podSelector: { matchLabels: { tier: 'fe' } } } }], ports: [{ portNumber: { protocol: 'TCP', port: 8080 } }] }],
      },
    });
  }
  return { cluster, policies };
}

/**
 * `pod` as a real API server returns a Deployment's running Pod: the synthetic model's fields plus
 * what the benches otherwise lack (uid, resourceVersion, owner references, managedFields of the
 * controller and the kubelet, a full container spec with its service-account volume, tolerations,
 * conditions and container statuses). Sizes follow a typical kubectl get -o json of such a Pod
 * (~6 KB of JSON). Pure.
 */
export function realisticPod(pod: KubeObject): KubeObject {
  const { name, namespace = 'default', labels = {} } = pod.metadata;
  const h = [...`${namespace}/${name}`].reduce((a, c) => (a * 31 + c.charCodeAt(0)) >>> 0, 7).toString(16).padStart(8, '0');
  const uid = `${h}-${h.slice(0, 4)}-4${h.slice(1, 4)}-9${h.slice(2, 5)}-${h}${h.slice(0, 4)}`;
  const app = labels.app ?? name;
  const hash = `7d4b9c${h.slice(0, 4)}`;
  const spec = (pod.spec ?? {}) as Record<string, unknown>;
  const status = (pod.status ?? {}) as Record<string, unknown>;
  const containers = ((spec.containers as Record<string, unknown>[] | undefined) ?? [{ name: 'c' }]).map((c) => ({
    ...c,
    image: `registry.example.com/team/${app}:v1.24.3`,
    imagePullPolicy: 'IfNotPresent',
    args: ['--listen=:8080', '--log-level=info'],
    env: [{ name: 'POD_NAME', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.name' } } }, { name: 'LOG_FORMAT', value: 'json' }],
    resources: { limits: { memory: '256Mi' }, requests: { cpu: '100m', memory: '128Mi' } },
    readinessProbe: { failureThreshold: 3, httpGet: { path: '/healthz', port: 8080, scheme: 'HTTP' }, periodSeconds: 10, successThreshold: 1, timeoutSeconds: 1 },
    securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] }, readOnlyRootFilesystem: true, runAsNonRoot: true },
    terminationMessagePath: '/dev/termination-log',
    terminationMessagePolicy: 'File',
    volumeMounts: [{ mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', name: `kube-api-access-${h.slice(0, 5)}`, readOnly: true }],
  }));
  const time = '2026-11-20T09:41:07Z';
  const fieldsSpec = { 'f:containers': { 'k:{"name":"c"}': { '.': {}, 'f:args': {}, 'f:env': { '.': {}, 'k:{"name":"LOG_FORMAT"}': { '.': {}, 'f:name': {}, 'f:value': {} }, 'k:{"name":"POD_NAME"}': { '.': {}, 'f:name': {}, 'f:valueFrom': { '.': {}, 'f:fieldRef': {} } } }, 'f:image': {}, 'f:imagePullPolicy': {}, 'f:name': {}, 'f:ports': { '.': {}, 'k:{"containerPort":8080,"protocol":"TCP"}': { '.': {}, 'f:containerPort': {}, 'f:name': {}, 'f:protocol': {} }, 'k:{"containerPort":53,"protocol":"UDP"}': { '.': {}, 'f:containerPort': {}, 'f:name': {}, 'f:protocol': {} } }, 'f:readinessProbe': { '.': {}, 'f:failureThreshold': {}, 'f:httpGet': { '.': {}, 'f:path': {}, 'f:port': {}, 'f:scheme': {} }, 'f:periodSeconds': {}, 'f:successThreshold': {}, 'f:timeoutSeconds': {} }, 'f:resources': { '.': {}, 'f:limits': { '.': {}, 'f:memory': {} }, 'f:requests': { '.': {}, 'f:cpu': {}, 'f:memory': {} } }, 'f:securityContext': { '.': {}, 'f:allowPrivilegeEscalation': {}, 'f:capabilities': { '.': {}, 'f:drop': {} }, 'f:readOnlyRootFilesystem': {}, 'f:runAsNonRoot': {} }, 'f:terminationMessagePath': {}, 'f:terminationMessagePolicy': {} } }, 'f:dnsPolicy': {}, 'f:enableServiceLinks': {}, 'f:restartPolicy': {}, 'f:schedulerName': {}, 'f:securityContext': {}, 'f:serviceAccount': {}, 'f:serviceAccountName': {}, 'f:terminationGracePeriodSeconds': {} };
  const fieldsStatus = { 'f:conditions': { 'k:{"type":"ContainersReady"}': { '.': {}, 'f:lastProbeTime': {}, 'f:lastTransitionTime': {}, 'f:status': {}, 'f:type': {} }, 'k:{"type":"Initialized"}': { '.': {}, 'f:lastProbeTime': {}, 'f:lastTransitionTime': {}, 'f:status': {}, 'f:type': {} }, 'k:{"type":"PodReadyToStartContainers"}': { '.': {}, 'f:lastProbeTime': {}, 'f:lastTransitionTime': {}, 'f:status': {}, 'f:type': {} }, 'k:{"type":"Ready"}': { '.': {}, 'f:lastProbeTime': {}, 'f:lastTransitionTime': {}, 'f:status': {}, 'f:type': {} } }, 'f:containerStatuses': {}, 'f:hostIP': {}, 'f:hostIPs': {}, 'f:phase': {}, 'f:podIP': {}, 'f:podIPs': { '.': {}, [`k:{"ip":"${String(status.podIP ?? '')}"}`]: { '.': {}, 'f:ip': {} } }, 'f:startTime': {} };
  const condition = (type: string) => ({ lastProbeTime: null, lastTransitionTime: time, status: 'True', type });
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      generateName: `${app}-${hash}-`,
      uid,
      resourceVersion: String(parseInt(h.slice(0, 6), 16)),
      creationTimestamp: time,
      labels: { ...labels, 'pod-template-hash': hash },
      annotations: { 'kubectl.kubernetes.io/restartedAt': time, 'prometheus.io/scrape': 'true', 'prometheus.io/port': '8080' },
      ownerReferences: [{ apiVersion: 'apps/v1', blockOwnerDeletion: true, controller: true, kind: 'ReplicaSet', name: `${app}-${hash}`, uid }],
      managedFields: [
        { apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:annotations': { '.': {}, 'f:kubectl.kubernetes.io/restartedAt': {}, 'f:prometheus.io/port': {}, 'f:prometheus.io/scrape': {} }, 'f:generateName': {}, 'f:labels': { '.': {}, 'f:app': {}, 'f:pod-template-hash': {}, 'f:tier': {} }, 'f:ownerReferences': { '.': {}, [`k:{"uid":"${uid}"}`]: {} } }, 'f:spec': fieldsSpec }, manager: 'kube-controller-manager', operation: 'Update', time },
        { apiVersion: 'v1', fieldsType: 'FieldsV1', fieldsV1: { 'f:status': fieldsStatus }, manager: 'kubelet', operation: 'Update', subresource: 'status', time },
      ],
    },
    spec: {
      ...spec,
      containers,
      dnsPolicy: 'ClusterFirst',
      enableServiceLinks: true,
      preemptionPolicy: 'PreemptLowerPriority',
      priority: 0,
      restartPolicy: 'Always',
      schedulerName: 'default-scheduler',
      securityContext: { fsGroup: 2000, runAsUser: 1000 },
      serviceAccount: 'default',
      serviceAccountName: 'default',
      terminationGracePeriodSeconds: 30,
      tolerations: [
        { effect: 'NoExecute', key: 'node.kubernetes.io/not-ready', operator: 'Exists', tolerationSeconds: 300 },
        { effect: 'NoExecute', key: 'node.kubernetes.io/unreachable', operator: 'Exists', tolerationSeconds: 300 },
      ],
      volumes: [{ name: `kube-api-access-${h.slice(0, 5)}`, projected: { defaultMode: 420, sources: [{ serviceAccountToken: { expirationSeconds: 3607, path: 'token' } }, { configMap: { items: [{ key: 'ca.crt', path: 'ca.crt' }], name: 'kube-root-ca.crt' } }, { downwardAPI: { items: [{ fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' }, path: 'namespace' }] } }] } }],
    },
    status: {
      ...status,
      conditions: ['PodReadyToStartContainers', 'Initialized', 'Ready', 'ContainersReady', 'PodScheduled'].map(condition),
      containerStatuses: containers.map((c) => ({ containerID: `containerd://${h}${h}${h}${h}${h}${h}${h}${h}`, image: c.image, imageID: `registry.example.com/team/${app}@sha256:${h}${h}${h}${h}${h}${h}${h}${h}`, lastState: {}, name: (c as { name?: unknown }).name, ready: true, restartCount: 0, started: true, state: { running: { startedAt: time } }, volumeMounts: c.volumeMounts.map((m) => ({ ...m, recursiveReadOnly: 'Disabled' })) })),
      hostIP: '172.20.0.1',
      hostIPs: [{ ip: '172.20.0.1' }],
      qosClass: 'Burstable',
      startTime: time,
    },
  } as KubeObject;
}
