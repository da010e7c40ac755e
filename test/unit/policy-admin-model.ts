// Test model and helpers for the admin-policy truth tables (not a test file itself).
//
// Model: namespaces x, y, z (label ns=<name>) each with Pods a, b, c (label pod=<name>), every Pod
// serving 80 and 81 over TCP, UDP and SCTP with container ports named serve-<port>-<proto>.
// Pod IPs are 10.244.<1|2|3>.<10|11|12>. Namespace x runs on node-1 (label node=one,
// 192.168.0.1), y and z on node-2 (node=two, 192.168.0.2).
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject, ProbeResult } from '../../daemon/policy/types.js';

export const NAMESPACES = ['x', 'y', 'z'] as const;
export const PODS = ['a', 'b', 'c'] as const;
export const ALL_PODS = NAMESPACES.flatMap((ns) => PODS.map((p) => `${ns}/${p}`));
export const NODE_IPS = { 'node-1': '192.168.0.1', 'node-2': '192.168.0.2' } as const;

export function podIp(ns: string, pod: string): string {
  return `10.244.${NAMESPACES.indexOf(ns as any) + 1}.${PODS.indexOf(pod as any) + 10}`;
}

export function xyzModel(): KubeObject[] {
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1', labels: { node: 'one' } }, status: { addresses: [{ type: 'InternalIP', address: NODE_IPS['node-1'] }] } },
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-2', labels: { node: 'two' } }, status: { addresses: [{ type: 'InternalIP', address: NODE_IPS['node-2'] }] } },
  ];
  for (const ns of NAMESPACES) {
    objs.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns, labels: { ns } } });
    for (const pod of PODS) {
      objs.push({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: ns, name: pod, labels: { pod } },
        spec: {
          nodeName: ns === 'x' ? 'node-1' : 'node-2',
          containers: [80, 81].flatMap((port) =>
            ['TCP', 'UDP', 'SCTP'].map((protocol) => ({
              name: `c-${port}-${protocol.toLowerCase()}`,
              ports: [{ name: `serve-${port}-${protocol.toLowerCase()}`, containerPort: port, protocol }],
            })),
          ),
        },
        status: { phase: 'Running', podIP: podIp(ns, pod) },
      });
    }
  }
  return objs;
}

export function engineWith(...objectLists: KubeObject[][]): PolicyEngine {
  const engine = new PolicyEngine();
  for (const list of objectLists) for (const o of list) engine.upsert(o);
  return engine;
}

const MARK = { allow: '.', drop: 'X', reject: 'R' } as const;

/**
 * The from × to matrix, one string per source Pod (rows and columns in ALL_PODS order),
 * "." allowed, "X" dropped, "R" rejected, "-" for a Pod to itself (not probed).
 */
export function matrix(engine: PolicyEngine, port: number, protocol: 'TCP' | 'UDP' | 'SCTP', pods: readonly string[] = ALL_PODS): string[] {
  return pods.map((from) =>
    pods.map((to) => (from === to ? '-' : MARK[engine.evaluate({ from, to, port, protocol }).verdict])).join(''),
  );
}

export const PORT_PROTOCOLS: [number, 'TCP' | 'UDP' | 'SCTP'][] = [80, 81].flatMap((p) => (['TCP', 'UDP', 'SCTP'] as const).map((proto) => [p, proto] as [number, 'TCP' | 'UDP' | 'SCTP']));

/** All six port/protocol matrices, keyed "80/TCP". */
export function allMatrices(engine: PolicyEngine): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [port, proto] of PORT_PROTOCOLS) out[`${port}/${proto}`] = matrix(engine, port, proto);
  return out;
}

/** A matrix where every pair is allowed. */
export const ALL_ALLOWED = ALL_PODS.map((from) => ALL_PODS.map((to) => (from === to ? '-' : '.')).join(''));

/** Builds an expected matrix: `allowed(from, to)` for each pair (self pairs are "-"). */
export function expectMatrix(allowed: (from: string, to: string) => boolean, pods: readonly string[] = ALL_PODS): string[] {
  return pods.map((from) => pods.map((to) => (from === to ? '-' : allowed(from, to) ? '.' : 'X')).join(''));
}

export const nsOf = (ep: string) => ep.split('/')[0]!;
export const podOf = (ep: string) => ep.split('/')[1]!;

export function decided(r: ProbeResult): string {
  const d = r.decidedBy;
  if (!d) return 'default';
  return [d.kind, d.name, d.rule ?? '', d.direction, d.tier ?? '', d.action].join(' ');
}

// ---------------------------------------------------------------------------------------
// ANP/BANP (v1alpha1) → ClusterNetworkPolicy (v1alpha2): the same policy in the newer API.

function convertPorts(ports: any[]): any[] {
  return ports.map((p) => {
    if (p.namedPort !== undefined) return { destinationNamedPort: p.namedPort };
    if (p.portNumber) return { [(p.portNumber.protocol ?? 'TCP').toLowerCase()]: { destinationPort: { number: p.portNumber.port } } };
    const r = p.portRange;
    return { [(r.protocol ?? 'TCP').toLowerCase()]: { destinationPort: { range: { start: r.start, end: r.end } } } };
  });
}

function convertRule(rule: any): any {
  const { ports, action, ...rest } = rule;
  return { ...rest, action: action === 'Allow' ? 'Accept' : action, ...(ports ? { protocols: convertPorts(ports) } : {}) };
}

/** Other objects (NetworkPolicies, core objects) pass through unchanged. */
export function toClusterNetworkPolicy(obj: KubeObject): KubeObject {
  if (obj.apiVersion !== 'policy.networking.k8s.io/v1alpha1') return obj;
  const baseline = obj.kind === 'BaselineAdminNetworkPolicy';
  const { priority, ingress, egress, subject } = obj.spec;
  return {
    apiVersion: 'policy.networking.k8s.io/v1alpha2',
    kind: 'ClusterNetworkPolicy',
    metadata: { name: obj.metadata.name },
    spec: {
      tier: baseline ? 'Baseline' : 'Admin',
      priority: baseline ? 0 : priority,
      subject,
      ...(ingress ? { ingress: ingress.map(convertRule) } : {}),
      ...(egress ? { egress: egress.map(convertRule) } : {}),
    },
  };
}
