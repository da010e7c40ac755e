/**
 * The figures enforcement shows: the agent status's `enforcement` section (/status, sluicectl node
 * status) and the /metrics figures, gathered from the enforcer's parts.
 */
import type { OpenFlowController } from '../ovs/openflow/controller.js';
import type { EnforcementMetrics } from '../metrics.js';
import type { PolicyEngine } from '../policy/engine.js';
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
  newPods?: ReturnType<NewPodGate['status']>;
}

/** The parts whose figures are shown (those a configuration lacks are undefined). */
export interface EnforcementParts {
  engine: PolicyEngine;
  policyFlowCount: number;
  watch?: ClusterWatch | undefined;
  flusher: FlushScheduler;
  packetIn: PacketInDispatch;
  dns?: DnsLearning | undefined;
  sweeper?: ConnectionSweeper | undefined;
  newPods?: NewPodGate | undefined;
}

export function enforcerStatus(p: EnforcementParts, resourceVersion: bigint | undefined): EnforcerStatus {
  const { engine, flusher, packetIn } = p;
  const lastApplyMs = flusher.lastApply;
  const openflow = packetIn.openflow;
  return {
    synced: p.watch?.isSynced() ?? false,
    rules: engine.nodeRuleSet().length,
    isolations: engine.nodeIsolations().length,
    policyFlows: p.policyFlowCount,
    errors: engine.errors().length,
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
  };
}

export function enforcementMetrics(p: EnforcementParts): EnforcementMetrics {
  const { engine, packetIn } = p;
  const of = packetIn.openflow?.stats();
  return {
    rules: engine.nodeRuleSet().length,
    invalidObjects: engine.errors().length,
    openflowConnected: of?.connected ?? false,
    openflowConnects: of?.connects ?? 0,
    packetIns: { ...packetIn.punts, unclaimed: packetIn.dispatched.unclaimed, failed: packetIn.dispatched.failed },
    packetInsDropped: of?.packetInsDropped ?? 0,
    rejects: packetIn.rejects,
    auditLines: packetIn.auditLines,
    auditSuppressed: packetIn.auditSuppressed,
    watch: p.watch?.status().map(({ resource, synced, absent, objects, relists, restarts }) => ({ resource, synced, absent, objects, relists, restarts })) ?? [],
  };
}
