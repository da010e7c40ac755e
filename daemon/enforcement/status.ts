/**
 * The figures enforcement shows: the agent status's `enforcement` section (/status, sluicectl node
 * status) and the /metrics figures, gathered from the enforcer's parts.
 */
import type { RealizedReporterStatus } from '../controlplane/realized-reporter.js';
import type { OpenFlowController } from '../ovs/openflow/controller.js';
import type { EnforcementMetrics } from '../metrics.js';
import type { ConnectionSweeper, SweeperStatus } from './conntrack/index.js';
import type { DnsLearning } from './dns-learning.js';
import type { FlushScheduler } from './flush-scheduler.js';
import type { NewPodGate } from './newpods/index.js';
import type { PacketInDispatch } from './packet-in.js';
import type { ClusterWatch } from './watch/clusterwatch.js';

export interface EnforcerStatus {
  synced: boolean;
  rules: number;
  /** Local Pods isolated by Kubernetes NetworkPolicies, per direction (isolation-only policies have no rules). */
  isolations: number;
  policyFlows: number;
  errors: number;
  applies: number;
  /**
   * Policy-relevant changes the engine has taken in, and how many of the first of them are on the
   * bridge: a client that sees its change in GET /policies and then reads `changes` here knows its
   * change is enforced once `committedChanges` reaches that figure.
   */
  changes: number;
  committedChanges: number;
  /**
   * The API resourceVersion whose every change is enforced on the bridge (watches delivered all up
   * to it and the resulting flows are committed); absent before the first flows are on the bridge.
   * A lower bound: it moves as watch events and bookmarks arrive.
   */
  resourceVersion?: string;
  lastApplyMs?: number;
  packetIns: { handled: number; unclaimed: number; failed: number };
  rejects: number;
  auditLines: number;
  relists: number;
  openflow?: ReturnType<OpenFlowController['stats']>;
  fqdn?: unknown;
  /** Connections cut because a change denied them (absent without a conntrack adapter). */
  connections?: SweeperStatus;
  /** New Pods admitted at CNI ADD, and those still guarded from nodes that have not confirmed them. */
  newPods?: ReturnType<NewPodGate['status']> | undefined;
  /** Controller mode: where the policy state comes from and whether it is followed now. */
  controlPlane?: ControlPlaneStatus | undefined;
}

/** Controller mode's part of the status: the controller, the connection, and what the Node holds. */
export interface ControlPlaneStatus {
  server: string;
  connected: boolean;
  /** Why not connected (absent when connected). */
  reason?: string | undefined;
  /** Since when the connection is in its current state (ISO time). */
  since: string;
  /** Every kind listed once: the first flows carry the controller's state. */
  synced: boolean;
  /** Why what was received is not enforced yet (absent when nothing waits). */
  held?: string | undefined;
  /** The last resourceVersion received per kind, and the versions of the last state enforced. */
  received: Record<string, string>;
  enforced: Record<string, string>;
  policies: number;
  enforcedPolicies: number;
  /** Policies received whose AddressGroups have not all come yet (their previous version stays). */
  waiting: string[];
  appliedToGroups: number;
  addressGroups: number;
  /** Received objects that could not be applied (each costs only itself; a relist repairs). */
  rejected: number;
  /** Lists of one kind taken in: one per kind at start, then one per kind whose watch could not resume (410 Gone, an event that could not be applied, another store). */
  lists: number;
  /** Times the lists came from another controller store (a takeover, a restart). */
  storeChanges: number;
  /** The reports to the controller of what the bridge enforces (what spares new Pods' agents asking this one). */
  realizedReports?: RealizedReporterStatus | undefined;
}

/** What the status reads of the policy side's state, in either mode. */
export interface PolicySummary {
  synced: boolean;
  rules: number;
  isolations: number;
  errors: number;
}

/** The parts whose figures are shown (those a configuration lacks are undefined). */
export interface EnforcementParts {
  policy: PolicySummary;
  policyFlowCount: number;
  watch?: ClusterWatch | undefined;
  flusher: FlushScheduler;
  packetIn: PacketInDispatch;
  dns?: DnsLearning | undefined;
  sweeper?: ConnectionSweeper | undefined;
  newPods?: { status(): ReturnType<NewPodGate['status']> } | undefined;
  controlPlane?: ControlPlaneStatus | undefined;
}

export function enforcerStatus(p: EnforcementParts, resourceVersion: bigint | undefined): EnforcerStatus {
  const { policy, flusher, packetIn } = p;
  const lastApplyMs = flusher.lastApply;
  const openflow = packetIn.openflow;
  return {
    synced: policy.synced,
    rules: policy.rules,
    isolations: policy.isolations,
    policyFlows: p.policyFlowCount,
    errors: policy.errors,
    applies: flusher.applyCount,
    changes: flusher.changes,
    committedChanges: flusher.committedChanges,
    ...(resourceVersion !== undefined ? { resourceVersion: String(resourceVersion) } : {}),
    ...(lastApplyMs !== undefined ? { lastApplyMs } : {}),
    packetIns: { ...packetIn.dispatched },
    rejects: packetIn.rejects,
    auditLines: packetIn.auditLines,
    relists: p.watch?.relists ?? 0,
    ...(openflow ? { openflow: openflow.stats() } : {}),
    ...(p.dns ? { fqdn: p.dns.stats() } : {}),
    ...(p.sweeper ? { connections: p.sweeper.status() } : {}),
    ...(p.newPods ? { newPods: p.newPods.status() } : {}),
    ...(p.controlPlane ? { controlPlane: p.controlPlane } : {}),
  };
}

export function enforcementMetrics(p: EnforcementParts): EnforcementMetrics {
  const { policy, packetIn } = p;
  const of = packetIn.openflow?.stats();
  return {
    rules: policy.rules,
    invalidObjects: policy.errors,
    openflowConnected: of?.connected ?? false,
    openflowConnects: of?.connects ?? 0,
    packetIns: { ...packetIn.punts, unclaimed: packetIn.dispatched.unclaimed, failed: packetIn.dispatched.failed },
    packetInsDropped: of?.packetInsDropped ?? 0,
    rejects: packetIn.rejects,
    auditLines: packetIn.auditLines,
    auditSuppressed: packetIn.auditSuppressed,
    watch: p.watch?.status().map(({ resource, synced, absent, objects, relists, restarts }) => ({ resource, synced, absent, objects, relists, restarts })) ?? [],
    ...(p.controlPlane ? { controlPlane: { connected: p.controlPlane.connected, rejected: p.controlPlane.rejected } } : {}),
  };
}
