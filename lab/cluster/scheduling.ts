/**
 * The lab scheduler's decision (pure): Pods without spec.nodeName are spread round-robin over the
 * lab nodes, in node order, honouring a Pod's spec.nodeSelector.
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import { isTerminating, selectorMatches } from './endpointslices.js';

export const needsScheduling = (pod: KubeObject): boolean =>
  !pod.spec?.nodeName && !isTerminating(pod) && pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed';

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

  /** Picks the next node for the Pod; throws NoFitError when no node fits its nodeSelector. */
  pick(pod: KubeObject, nodes: KubeObject[]): string {
    const selector: Record<string, string> = pod.spec?.nodeSelector ?? {};
    const fit = nodes
      .filter((n) => !n.spec?.unschedulable && selectorMatches(selector, n.metadata.labels))
      .map((n) => n.metadata.name)
      .sort(compareNodeNames);
    if (fit.length === 0) {
      const why = Object.keys(selector).length ? ` matching nodeSelector ${JSON.stringify(selector)}` : '';
      throw new NoFitError(`no schedulable node${why} for Pod ${pod.metadata.namespace ?? 'default'}/${pod.metadata.name}`);
    }
    const node = fit[this.turn % fit.length]!;
    this.turn++;
    return node;
  }
}
