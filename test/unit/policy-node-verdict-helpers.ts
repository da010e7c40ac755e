/**
 * Random clusters for the nodeVerdict tests (not a test file itself): Pods on two Nodes with named
 * ports, a Service with an EndpointSlice, and policies of every kind through the real normalizers
 * (Kubernetes NetworkPolicy; Antrea ClusterNetworkPolicy/NetworkPolicy in static and custom tiers
 * with Allow/Drop/Reject/Pass, ipBlocks, nodeSelector, named and source ports, toServices;
 * AdminNetworkPolicy/BaselineAdminNetworkPolicy; relative peers), and one engine per Node.
 */
import { normalizers as admin } from '../../daemon/policy/admin/index.js';
import { normalizers as antrea } from '../../daemon/policy/antrea/index.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import type { NodeConnection } from '../../daemon/policy/node-verdict.js';
import type { KubeObject } from '../../daemon/policy/types.js';
import { namespace, node, type Rng, rng, testKind } from './policy-core-helpers.js';
import { APPS, NAMES, NAMESPACES, podObject, randomNetpol, randomRelative, randomSelector, randomService, randomSlice } from './policy-random-cluster.js';

export const NODES = [
  { name: 'node-1', ip: '172.18.0.1' },
  { name: 'node-2', ip: '172.18.0.2' },
];
export const EXTERNAL = ['192.168.7.7', '10.1.3.200'];
export const CLUSTER_IPS = ['10.96.0.1', '10.96.0.2'];
export const PORTS: [NodeConnection['protocol'], number][] = [['TCP', 80], ['TCP', 8080], ['TCP', 8000], ['UDP', 53], ['TCP', 443], ['SCTP', 80], ['ICMP', 0]];

const acnp = (name: string, spec: unknown): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name }, spec });
const annp = (ns: string, name: string, spec: unknown): KubeObject => ({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'NetworkPolicy', metadata: { name, namespace: ns }, spec });

function antreaPeer(r: Rng, namespaced: boolean): Record<string, unknown> {
  switch (r.int(namespaced ? 4 : 7)) {
    case 0: return { podSelector: randomSelector(r) };
    case 1: return { ipBlock: { cidr: '10.1.0.0/16', except: [`10.1.${r.int(4)}.0/24`] } };
    case 2: return { ipBlock: { cidr: `10.1.${r.int(4)}.0/24` } };
    case 3: return { podSelector: { matchLabels: { app: r.pick(APPS) } } };
    case 4: return { namespaceSelector: { matchLabels: { team: r.pick(['red', 'blue']) } } };
    case 5: return { nodeSelector: r.next() < 0.5 ? {} : { matchLabels: { zone: r.pick(['a', 'b']) } } };
    default: return { namespaceSelector: randomSelector(r), podSelector: randomSelector(r) };
  }
}

function antreaPort(r: Rng): Record<string, unknown> {
  return r.pick([
    { protocol: 'TCP', port: 80 }, { port: 'http' }, { protocol: 'UDP', port: 53 }, { protocol: 'UDP', port: 'dns' },
    { protocol: 'TCP', port: 8000, endPort: 8080 }, { protocol: 'TCP', sourcePort: 30000, sourceEndPort: 45000 }, { protocol: 'SCTP', port: 80 },
  ]);
}

/** An Antrea policy (ACNP, or ANNP in a Namespace) with 1-3 rules per direction. */
function randomAntrea(r: Rng, name: string): KubeObject {
  const ns = r.next() < 0.25 ? r.pick(NAMESPACES) : undefined;
  const tier = r.pick(['emergency', 'securityops', 'application', 'application', 'baseline', 'nv-tier']);
  const actions = tier === 'baseline' ? ['Allow', 'Drop', 'Reject'] : ['Allow', 'Drop', 'Reject', 'Pass', 'Pass'];
  const rules = (egress: boolean) => Array.from({ length: r.int(3) }, (_, i) => {
    const action = r.pick(actions);
    const name = `${egress ? 'out' : 'in'}-${i}`;
    if (egress && r.next() < 0.2) return { name, action, toServices: [{ name: 'svc', namespace: 'x' }] };
    const peers = r.next() < 0.8 ? Array.from({ length: 1 + r.int(2) }, () => antreaPeer(r, ns !== undefined)) : undefined;
    const ports = r.next() < 0.6 ? Array.from({ length: 1 + r.int(2), }, () => antreaPort(r)) : undefined;
    return { name, action, ...(peers ? { [egress ? 'to' : 'from']: peers } : {}), ...(ports ? { ports } : {}) };
  });
  const appliedTo = [!ns && r.next() < 0.3 ? { namespaceSelector: { matchLabels: { ns: r.pick(NAMESPACES) } } } : { podSelector: randomSelector(r) }];
  const spec = { priority: r.pick([1, 2, 3, 1.5]), tier, appliedTo, ingress: rules(false), egress: rules(true) };
  return ns ? annp(ns, name, spec) : acnp(name, spec);
}

/** AdminNetworkPolicy (Allow/Deny/Pass) or BaselineAdminNetworkPolicy (Allow/Deny), v1alpha1. */
function randomAdmin(r: Rng, name: string, baseline: boolean): KubeObject {
  const nsSel = () => (r.next() < 0.2 ? {} : { matchLabels: { ns: r.pick(NAMESPACES) } });
  const podSel = () => (r.next() < 0.3 ? {} : { matchLabels: { app: r.pick(APPS) } });
  const subject = r.next() < 0.5 ? { namespaces: nsSel() } : { pods: { namespaceSelector: nsSel(), podSelector: podSel() } };
  const peer = (egress: boolean) => {
    const roll = r.next();
    if (egress && roll < 0.15) return { networks: [`10.1.${r.int(4)}.0/${r.pick([24, 28])}`] };
    if (roll < 0.5) return { namespaces: nsSel() };
    return { pods: { namespaceSelector: nsSel(), podSelector: podSel() } };
  };
  const port = () => r.pick([{ portNumber: { protocol: 'TCP', port: 80 } }, { portRange: { protocol: 'TCP', start: 8000, end: 8080 } }, { namedPort: 'http' }, { portNumber: { protocol: 'UDP', port: 53 } }]);
  const rules = (egress: boolean) => Array.from({ length: r.int(3) }, (_, i) => {
    const peers = Array.from({ length: 1 + r.int(2) }, () => peer(egress));
    let ports: any[] | undefined = r.next() < 0.5 ? [port()] : undefined;
    if (ports && peers.some((p) => 'networks' in p)) ports = ports.map((p) => ('namedPort' in p ? { portNumber: { protocol: 'TCP', port: 80 } } : p));
    return { name: `r${i}`, action: r.pick(baseline ? ['Allow', 'Deny'] : ['Allow', 'Deny', 'Pass']), [egress ? 'to' : 'from']: peers, ...(ports ? { ports } : {}) };
  });
  const spec = { ...(baseline ? {} : { priority: r.int(4) }), subject, ingress: rules(false), egress: rules(true) };
  return { apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: baseline ? 'BaselineAdminNetworkPolicy' : 'AdminNetworkPolicy', metadata: { name: baseline ? 'default' : name }, spec };
}

export interface Cluster {
  objects: KubeObject[];
  clusterIP: string;
  pods: { key: string; ip: string; node: string }[];
}

export function randomCluster(seed: number): Cluster {
  const r = rng(seed);
  const objects: KubeObject[] = [];
  for (const ns of NAMESPACES) objects.push(namespace(ns, { team: r.pick(['red', 'blue']) }));
  for (const n of NODES) objects.push(node(n.name, n.ip, { zone: r.pick(['a', 'b']) }));
  objects.push({ apiVersion: 'crd.antrea.io/v1beta1', kind: 'Tier', metadata: { name: 'nv-tier' }, spec: { priority: 120 } });
  const pods: Cluster['pods'] = [];
  const ipIndex = new Map<string, number>();
  let i = 0;
  for (const ns of NAMESPACES) {
    for (const name of NAMES) {
      const o = podObject(r, ns, name, i, NODES.map((n) => n.name));
      ipIndex.set(`${ns}/${name}`, i);
      pods.push({ key: `${ns}/${name}`, ip: o.status.podIP, node: o.spec.nodeName });
      objects.push(o);
      i++;
    }
  }
  const service = randomService(r);
  objects.push(service, randomSlice(r, ipIndex));
  const n = (k: number) => Array.from({ length: k }, (_, j) => j);
  for (const j of n(r.int(3))) objects.push(randomNetpol(r, r.pick(NAMESPACES), `np${j}`));
  for (const j of n(2 + r.int(4))) objects.push(randomAntrea(r, `ap${j}`));
  for (const j of n(r.int(3))) objects.push(randomAdmin(r, `anp${j}`, false));
  if (r.next() < 0.6) objects.push(randomAdmin(r, 'default', true));
  if (r.next() < 0.3) objects.push(randomRelative(r, 'rel'));
  return { objects, clusterIP: service.spec.clusterIP, pods };
}

export function engineFor(nodeName: string, objects: KubeObject[]): PolicyEngine {
  const engine = new PolicyEngine({ nodeName, normalizers: [...k8s, ...antrea, ...admin, testKind] });
  for (const o of objects) engine.upsert(o);
  return engine;
}
