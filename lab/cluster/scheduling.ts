/**
 * The lab scheduler's decision (pure): Pods without spec.nodeName are spread round-robin over the
 * lab nodes, in node order, honouring a Pod's spec.nodeSelector and, as the scheduler's NodePorts
 * filter does, the host ports of host-network Pods (a node where another Pod, even a terminating
 * one, holds one of its ports does not fit: two controller replicas never share a node's port).
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import { isTerminating, selectorMatches } from './endpointslices.js';

const isFinished = (pod: KubeObject): boolean => pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';

export const needsScheduling = (pod: KubeObject): boolean => !pod.spec?.nodeName && !isTerminating(pod) && !isFinished(pod);

/** The host ports a Pod holds on its node ("TCP/10351"): every container port of a host-network Pod, hostPorts otherwise. */
export function hostPorts(pod: KubeObject): string[] {
  const hostNetwork = pod.spec?.hostNetwork === true;
  const containers = (pod.spec?.containers ?? []) as { ports?: { containerPort?: number; hostPort?: number; protocol?: string }[] }[];
  return containers.flatMap((c) => c.ports ?? []).flatMap((p) => {
    const port = hostNetwork ? p.containerPort : p.hostPort;
    return typeof port === 'number' && port > 0 ? [`${p.protocol ?? 'TCP'}/${port}`] : [];
  });
}

/** "node-2" < "node-10": order nodes by their number, then by name. */
export function compareNodeNames(a: string, b: string): number {
  const num = (n: string): number => Number(/-(\d+)$/.exec(n)?.[1] ?? Number.MAX_SAFE_INTEGER);
  return num(a) - num(b) || a.localeCompare(b);
}

export class NoFitError extends Error {
  override name = 'NoFitError';
}

export class RoundRobin {
  private turn = 0;

  /** Picks the next node for the Pod (`pods`: those placed already); throws NoFitError when no node fits. */
  pick(pod: KubeObject, nodes: KubeObject[], pods: KubeObject[] = []): string {
    const selector: Record<string, string> = pod.spec?.nodeSelector ?? {};
    const selected = nodes.filter((n) => !n.spec?.unschedulable && selectorMatches(selector, n.metadata.labels)).map((n) => n.metadata.name);
    const wanted = hostPorts(pod);
    const taken = new Set(pods.filter((p) => p.spec?.nodeName && p.metadata.uid !== pod.metadata.uid && !isFinished(p))
      .flatMap((p) => hostPorts(p).filter((port) => wanted.includes(port)).map(() => String(p.spec.nodeName))));
    const fit = selected.filter((n) => !taken.has(n)).sort(compareNodeNames);
    if (fit.length === 0) {
      const why = Object.keys(selector).length ? ` matching nodeSelector ${JSON.stringify(selector)}` : '';
      const ports = selected.length && wanted.length ? ` with free host ports ${wanted.join(', ')}` : '';
      throw new NoFitError(`no schedulable node${why}${ports} for Pod ${pod.metadata.namespace ?? 'default'}/${pod.metadata.name}`);
    }
    const node = fit[this.turn % fit.length]!;
    this.turn++;
    return node;
  }
}
