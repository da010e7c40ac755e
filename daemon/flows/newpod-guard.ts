/**
 * The new-Pod guard's flows (enforcement/newpods decides what is guarded). A new local Pod's
 * connections with the Pods of a node that has not yet confirmed it knows the Pod's address are
 * dropped here, on the Pod's own node, in both directions: that node would judge the Pod as an
 * unknown address, which a rule naming the Pod's namespace or labels does not match (a Drop would
 * let it through). Only new connections are dropped (established ones skip the table at a higher
 * priority), and only between the guarded pairs; everything else takes the policy tables as usual.
 * Pure.
 */
import { withCookie, FlowCategory, type Flow } from './flow.js';
import { ipFamily } from '../policy/cidr.js';
import { PRIORITY } from './policy/priorities.js';

export interface GuardedPod {
  /** The new local Pod's addresses. */
  podIps: readonly string[];
  /** Addresses of the Pods it must not reach or be reached from yet. */
  peerIps: readonly string[];
  /**
   * Every new connection of the Pod, both ways, whatever the peer: its own policies are not known
   * here yet (controller mode, the controller unreachable at its ADD).
   */
  all?: boolean;
}

export function newPodGuardFlows(guards: readonly GuardedPod[]): Flow[] {
  const flows = new Map<string, Flow>();
  const add = (f: Flow) => flows.set(f.cookie, f);
  for (const g of guards) {
    for (const own of g.podIps) {
      const v6 = ipFamily(own) === 6;
      const [proto, src, dst] = v6 ? ['ipv6', 'ipv6_src', 'ipv6_dst'] : ['ip', 'nw_src', 'nw_dst'];
      if (g.all) {
        add(withCookie({ table: 'AntreaPolicyEgressRule', priority: PRIORITY.newPodGuard, match: `ct_state=+new+trk,${proto},${src}=${own}`, actions: 'drop', category: FlowCategory.policy }));
        add(withCookie({ table: 'AntreaPolicyIngressRule', priority: PRIORITY.newPodGuard, match: `ct_state=+new+trk,${proto},${dst}=${own}`, actions: 'drop', category: FlowCategory.policy }));
        continue;
      }
      for (const peer of g.peerIps) {
        if ((ipFamily(peer) === 6) !== v6) continue;
        const match = (from: string, to: string) => `ct_state=+new+trk,${proto},${src}=${from},${dst}=${to}`;
        add(withCookie({ table: 'AntreaPolicyEgressRule', priority: PRIORITY.newPodGuard, match: match(own, peer), actions: 'drop', category: FlowCategory.policy }));
        add(withCookie({ table: 'AntreaPolicyIngressRule', priority: PRIORITY.newPodGuard, match: match(peer, own), actions: 'drop', category: FlowCategory.policy }));
      }
    }
  }
  return [...flows.values()].sort((a, b) => (a.cookie < b.cookie ? -1 : a.cookie > b.cookie ? 1 : 0));
}
