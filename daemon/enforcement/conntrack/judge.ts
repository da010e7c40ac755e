/**
 * Which open connections the policy in force now denies (pure). Each conntrack entry of the
 * bridge's zone is judged as a new connection with its original tuple would be, by the same
 * evaluator `sluicectl simulate` uses; a connection is cut when a side this node enforces (the
 * egress of a local source Pod, the ingress of a local destination Pod) no longer allows it. The
 * other node's side is that node's to cut.
 *
 * Kept on purpose:
 *  - connections every local side still allows (they are never touched: no reset, no loss);
 *  - with `keepNetworkPolicy`, connections whose only denial is Kubernetes NetworkPolicy
 *    isolation (connection-based semantics for that kind, when an operator asks for them);
 *  - a connection to a ClusterIP whose endpoints disagree (which endpoint it reached is not in
 *    the pre-DNAT entry; the endpoint's own entry, or its per-packet re-entrance, is judged).
 */
import type { Probe, ProbeResult } from '../../policy/types.js';
import type { SideDecision } from '../../policy/evaluator.js';
import type { CtEntry } from './entries.js';

/** What judging reads of the policy side. */
export interface ConnectionPolicy {
  /** The verdict plus each side's decision, for a connection that would open now. */
  explain(probe: Probe): { result: ProbeResult; sides: SideDecision[] };
  /** Whether the Pod ("ns/name") runs on this node. */
  isLocalPod(ref: string): boolean;
  /**
   * Whether the address is a Service's ClusterIP: such an entry is the pre-DNAT leg of a Service
   * connection, whose post-DNAT packets re-enter the bridge uncommitted and are judged one by one.
   */
  isServiceIp?(ip: string): boolean;
}

export interface JudgeOptions {
  /** Keep connections that only Kubernetes NetworkPolicy isolation now denies. */
  keepNetworkPolicy: boolean;
}

export interface Judged {
  cut: { entry: CtEntry; side: SideDecision }[];
  kept: number;
  /** Entries the evaluator could not judge (kept; the datapath still judges new connections). */
  errors: string[];
}

export function probeOf(e: CtEntry): Probe {
  const base = { from: `ip:${e.src}`, to: `ip:${e.dst}`, family: e.family } as const;
  if (e.protocol === 'ICMP') return { ...base, protocol: 'ICMP', port: 0 };
  return { ...base, protocol: e.protocol, port: e.dport!, sourcePort: e.sport! };
}

export function judgeConnections(entries: readonly CtEntry[], policy: ConnectionPolicy, opts: JudgeOptions): Judged {
  const out: Judged = { cut: [], kept: 0, errors: [] };
  for (const entry of entries) {
    let explained: ReturnType<ConnectionPolicy['explain']>;
    try {
      explained = policy.explain(probeOf(entry));
    } catch (err) {
      out.errors.push((err as Error).message);
      out.kept++;
      continue;
    }
    if (explained.result.note?.includes('endpoints disagree')) {
      out.kept++;
      continue;
    }
    const denying = explained.sides.find(
      (s) => s.verdict !== 'allow' && policy.isLocalPod(s.pod) && !(opts.keepNetworkPolicy && s.decidedBy?.kind === 'K8sNetworkPolicyIsolation'),
    );
    if (denying) out.cut.push({ entry, side: denying });
    else out.kept++;
  }
  return out;
}
