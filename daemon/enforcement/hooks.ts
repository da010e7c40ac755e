/**
 * The contract between the agent and policy enforcement, in both directions: what the agent calls
 * on the policy side (EnforcementHooks), and the little of the node the policy side uses
 * (EnforcementNode). Neither side imports the other's classes.
 */
import type { PodAttachment } from '../node/attachment.js';
import type { OpenFlowController } from '../ovs/openflow/controller.js';
import type { RuleStatistics } from '../flows/policy/stats.js';
import type { FlowStore } from '../flows/store.js';
import type { EventSubject } from '../kube/node-api.js';
import type { EnforcementMetrics } from '../metrics.js';
import type { TraceBridge, TraceReport, TraceRequest } from './traceflow.js';
import type { ObserveRoute } from './trace-observers.js';
import type { ConntrackIo } from './conntrack/index.js';

/** What enforcement uses of the node: its OpenFlow connection, a flow sync, port MACs and conntrack. */
export interface EnforcementNode {
  /** The agent's OpenFlow connection to the bridge (packet-ins, packet-outs, meters). */
  readonly openflow: OpenFlowController;
  /** Applies what changed in the desired flows. */
  syncFlows(): Promise<unknown>;
  /** MAC of the interface behind an OpenFlow port of the bridge: the gateway or a local Pod. */
  portMac(ofport: number): string | undefined;
  /** The bridge's conntrack zone (connections a policy change denies are cut there). */
  conntrack?: ConntrackIo;
  /** The node's own addresses (configured or the Node's InternalIPs): its connections are host traffic, exempt from ingress rules. */
  nodeIPs?: readonly string[];
}

/**
 * What the agent calls on the policy side. Ordering guarantees: `prepare` runs after the bridge
 * exists and before the first flow sync (so the first bundle already has every policy flow and a
 * restart deletes nothing); `podAttaching` runs before a new Pod's flows are installed (the same
 * bundle makes the Pod reachable and installs its policy flows).
 */
export interface EnforcementHooks {
  /** Brings the policy side's owners in the agent's FlowStore up to date (policy flows, DNS interception). */
  writeFlows(store: FlowStore): void;
  prepare(node: EnforcementNode, localPods: PodAttachment[]): Promise<void>;
  podAttaching(pod: PodAttachment): Promise<void>;
  /**
   * After the Pod's flows are on the bridge, before the ADD answers: resolves once the nodes where
   * its address matters know it, or it is guarded from those that do not (newpods/gate.ts). A
   * rejection fails the ADD (the guard could not be installed).
   */
  podStarting?(pod: PodAttachment): Promise<void>;
  /** Services whose ClusterIP lies outside `cidrs` (their Pod -> Service traffic escapes egress enforcement). */
  servicesOutside?(cidrs: string[]): { service: string; ip: string }[];
  /** GET /realized of the realization endpoint: whether a Pod is enforced here (newpods/peers.ts). */
  realized?(query: URLSearchParams): Promise<{ code: number; body: unknown }>;
  /** Start-up's first flow sync is on the bridge (connections opened under an older policy are judged again). */
  flowsConverged?(): void;
  podDetached(pod: PodAttachment): void;
  close(): Promise<void>;
  /** Shown under `enforcement` in the agent status (/status, sluicectl node status). */
  status?(): unknown;
  /** The body of GET /policies: what this node enforces and which objects were ignored (sluicectl node policies). */
  policyReport?(): unknown;
  /**
   * A real packet traced through the bridge (GET /traceflow) and through the bridge of the Node it
   * leaves for; the destination is resolved from the cluster view (the controller's in controller mode).
   */
  traceflow?(req: Omit<TraceRequest, 'destination'>, bridge: TraceBridge): Promise<TraceReport>;
  /** Controller mode: runs the traces the controller hands this Node (kubectl sluice traceflow) with `run`, the agent's GET /traceflow. */
  serveTraceTasks?(run: (q: URLSearchParams) => Promise<{ code: number; body: unknown }>): void;
  /** The routes (on the realization endpoint) another Node's trace asks this Node to observe its packet with. */
  traceObserveRoutes?(bridge: () => TraceBridge | undefined): Record<string, ObserveRoute>;
  /** The API object (apiVersion, kind, uid) behind an invalid-object entry of the report. */
  policyObject?(e: { kind: string; namespace?: string | undefined; name: string }): EventSubject | undefined;
  /** Figures for /metrics. */
  metrics?(): EnforcementMetrics;
  /** Per-rule statistics from the bridge's counter flows; `dump` returns the Metric tables' flows with their counters (dump-flows line form). */
  ruleStats?(dump: () => Promise<string>): Promise<RuleStatistics[]>;
  /** Packets each packet-in meter dropped, by what it limits (the bridge's meter statistics). */
  meterDrops?(): Promise<Record<string, number>>;
  /** Controller mode: `listener` hears each change of the connection to the controller (the agent's Events). */
  watchControlPlane?(listener: (state: 'connected' | 'disconnected', reason: string) => void): void;
}
