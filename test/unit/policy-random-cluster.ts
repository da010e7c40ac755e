/**
 * Random cluster objects for property tests of the policy computation: Pods with labels, named
 * ports and Nodes; NetworkPolicies; stage-0 test-kind policies with relative peers, groups,
 * serviceRef and toServices peers; Services and EndpointSlices.
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import { netpol, pod, podsIn, type rng, rule, rulesObject } from './policy-core-helpers.js';

export const NAMESPACES = ['x', 'y', 'z'];
export const NAMES = ['a', 'b', 'c', 'd'];
export const APPS = ['web', 'db', 'cache'];

export function randomLabels(r: ReturnType<typeof rng>): Record<string, string> {
  const l: Record<string, string> = { app: r.pick(APPS) };
  if (r.next() < 0.5) l.tier = r.pick(['front', 'back']);
  return l;
}

export function randomSelector(r: ReturnType<typeof rng>) {
  const k = r.int(4);
  if (k === 0) return {};
  if (k === 1) return { matchLabels: { app: r.pick(APPS) } };
  if (k === 2) return { matchExpressions: [{ key: 'tier', operator: r.pick(['Exists', 'DoesNotExist'] as const) }] };
  return { matchExpressions: [{ key: 'app', operator: r.pick(['In', 'NotIn'] as const), values: [r.pick(APPS), r.pick(APPS)] }] };
}

export function randomPeer(r: ReturnType<typeof rng>) {
  switch (r.int(5)) {
    case 0: return { podSelector: randomSelector(r) };
    case 1: return { namespaceSelector: { matchLabels: { team: r.pick(['red', 'blue']) } } };
    case 2: return { namespaceSelector: randomSelector(r), podSelector: randomSelector(r) };
    case 3: return { ipBlock: { cidr: '10.1.0.0/16', except: [`10.1.${r.int(4)}.0/24`] } };
    default: return { namespaceSelector: {} };
  }
}

export function randomNetpol(r: ReturnType<typeof rng>, ns: string, name: string): KubeObject {
  // egress to any peer on a named port: resolved on every Pod of the cluster
  if (r.next() < 0.15) return netpol(ns, name, { podSelector: randomSelector(r), policyTypes: ['Egress'], egress: [{ ports: [{ port: 'http' }, { protocol: 'UDP', port: 53 }] }] });
  const rules = () => Array.from({ length: r.int(3) }, () => ({
    ...(r.next() < 0.8 ? { from: Array.from({ length: 1 + r.int(2) }, () => randomPeer(r)) } : {}),
    ...(r.next() < 0.6 ? { ports: [r.pick([{ port: 80 }, { port: 'http' }, { protocol: 'UDP', port: 53 }, { port: 8000, endPort: 8080 }])] } : {}),
  }));
  const ingress = rules();
  const egress = rules().map(({ from, ...rest }) => ({ ...rest, ...(from ? { to: from } : {}) }));
  return netpol(ns, name, { podSelector: randomSelector(r), ingress, egress, policyTypes: r.pick([['Ingress'], ['Egress'], ['Ingress', 'Egress']]) });
}

/** A stage-0 policy with a relative (self / sameLabels) peer, exercising per-namespace expansion. */
export function randomRelative(r: ReturnType<typeof rng>, name: string): KubeObject {
  const peer = r.next() < 0.5
    ? { kind: 'pods' as const, namespaces: { kind: 'self' as const }, pods: { matchLabels: { app: r.pick(APPS) } } }
    : { kind: 'pods' as const, namespaces: { kind: 'sameLabels' as const, keys: ['team'] }, pods: {} };
  return rulesObject(name, { rules: [rule({ direction: 'Ingress', action: r.pick(['Allow', 'Drop'] as const), appliedTo: [r.next() < 0.5 ? podsIn(r.pick(NAMESPACES)) : { kind: 'pods', namespaces: { kind: 'all' }, pods: { matchLabels: { app: r.pick(APPS) } } }], peers: [peer] }, {}, name)] });
}

/** Group definitions (test kind) with a child group and an ipBlock member. */
export function randomGroups(r: ReturnType<typeof rng>): KubeObject {
  return rulesObject('groups', { groups: [
    { name: 'g1', members: [{ kind: 'pods', namespaces: r.next() < 0.5 ? { kind: 'all' } : { kind: 'selector', selector: { matchLabels: { team: r.pick(['red', 'blue']) } } }, pods: { matchLabels: { app: r.pick(APPS) } } }] },
    { name: 'g2', members: [{ kind: 'group', name: 'g1' }, { kind: 'ipBlock', cidr: `10.1.${r.int(4)}.0/24`, except: [] }] },
  ] });
}

export function randomService(r: ReturnType<typeof rng>): KubeObject {
  const targetPort = r.pick(['http', 'http', 8080, 'dns']);
  const ports = [{ port: 80, targetPort }, ...(r.next() < 0.4 ? [{ name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns' }] : [])].map((p, i) => ({ name: `p${i}`, ...p }));
  return { apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: r.pick(['10.96.0.1', '10.96.0.1', '10.96.0.2']), selector: { app: r.pick(APPS) }, ports } };
}

/** An EndpointSlice of x/svc: endpoints by Pod reference or by bare address, some not ready. */
export function randomSlice(r: ReturnType<typeof rng>, ipIndex: Map<string, number>): KubeObject {
  const endpoints = Array.from({ length: r.int(4) }, () => {
    const key = `${r.pick(NAMESPACES)}/${r.pick(NAMES)}`;
    const i = ipIndex.get(key)!;
    const ip = `10.1.${i % 4}.${10 + i}`;
    const [ns, name] = key.split('/');
    return {
      addresses: [ip],
      ...(r.next() < 0.2 ? { conditions: { ready: false } } : {}),
      ...(r.next() < 0.6 ? { targetRef: { kind: 'Pod', namespace: ns, name } } : {}),
    };
  });
  return { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: `svc-${r.int(2)}`, namespace: 'x', labels: { 'kubernetes.io/service-name': 'svc' } }, addressType: 'IPv4', endpoints } as KubeObject;
}

/** A stage-0 policy using group, serviceRef and toServices peers and a group appliedTo. */
export function randomGroupPolicy(r: ReturnType<typeof rng>, name: string): KubeObject {
  const peer = r.pick([{ kind: 'group' as const, name: 'g2' }, { kind: 'group' as const, name: 'g1' }, { kind: 'serviceRef' as const, namespace: 'x', name: 'svc' }, { kind: 'service' as const, namespace: 'x', name: 'svc' }]);
  return rulesObject(name, { rules: [rule({
    direction: peer.kind === 'service' ? 'Egress' : r.pick(['Ingress', 'Egress'] as const), action: r.pick(['Allow', 'Drop', 'Pass'] as const),
    appliedTo: [r.next() < 0.5 ? { kind: 'group', name: 'g1' } : podsIn(r.pick(NAMESPACES))], peers: [peer],
  }, {}, name)] });
}

export const keyOf = (o: KubeObject) => `${o.apiVersion}/${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;

export function podObject(r: ReturnType<typeof rng>, ns: string, name: string, ipIndex: number, nodes: readonly string[] = ['node-1', 'node-2']): KubeObject {
  const o = pod(ns, name, {
    labels: randomLabels(r),
    ip: `10.1.${ipIndex % 4}.${10 + ipIndex}`,
    node: r.pick(nodes),
    ports: [{ name: 'http', containerPort: r.pick([80, 8080]) }, { name: 'dns', containerPort: 53, protocol: 'UDP' }],
  });
  return o;
}
