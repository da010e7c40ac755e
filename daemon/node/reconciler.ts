/**
 * The node's convergence loop: start-up (OVSDB, API server, bridge and gateway, the attachments a
 * previous run left, the first flow sync, host networking), the resync and the flow watchdog. All
 * I/O goes through the narrow interfaces below (real: OvsBridge, FlowProgrammer, FlowSync, HostNetwork, NodeApi, the
 * system clock), so each of these paths runs in unit tests against fakes.
 *
 * Restart safety: all Pod state lives in OVSDB external_ids, flows are diffed by cookie, host
 * networking converges; so a restarted agent recomputes the same desired state and touches
 * nothing that is already right.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { AgentConfig } from '../config.js';
import type { SharedExclusiveLock } from '../lock.js';
import { attachmentFromPort, egressPortIds, type PodAttachment, podPortOf, portIds, routedIPs } from './attachment.js';
import type { PodRegistry } from './pod-registry.js';
import { diffFlows, type FlowDiff } from '../flows/diff.js';
import type { Flow } from '../flows/flow.js';
import type { EgressPortIds, GatewayInfo, PodPortIds, PodPortRecord } from '../ovs/bridge.js';
import { PipelineOwners } from '../flows/pipeline.js';
import type { FlowSource, FlowStore } from '../flows/store.js';
import { TRACE_COOKIE_PREFIX } from '../flows/traceflow.js';
import { connectApi, type NodeAddresses, type StartupApi, waitForOvsdb } from './startup.js';

/** What the reconciler asks of OVSDB (real: OvsBridge, daemon/ovs/bridge.ts). */
export interface NodeOvs {
  /** Where OVSDB is, for the log. */
  readonly db: string;
  ping(): Promise<void>;
  /** Creates or repairs the bridge; returns what it changed. */
  ensureBridge(): Promise<string[]>;
  ensureGateway(name: string): Promise<{ gateway: GatewayInfo; changes: string[] }>;
  listPodPorts(): Promise<PodPortRecord[]>;
  addPodPort(name: string, ids: PodPortIds): Promise<number>;
  /** Attaches a Pod's IPv4 egress veth (its second port); returns its OpenFlow port number. */
  addEgressPort(name: string, ids: EgressPortIds): Promise<number>;
  /** The Pods' IPv4 egress ports: name -> OpenFlow port. */
  egressPortOfports(): Promise<Map<string, number>>;
  removePort(name: string): Promise<void>;
  /** Ends other_config:flow-restore-wait; true when it was set. */
  endFlowRestoreWait(): Promise<boolean>;
}

/** The bridge's flows as the reconciler reads and clears them itself (real: FlowProgrammer, daemon/ovs/flow-programmer.ts). */
export interface NodeFlowProgrammer {
  deleteFlows(cookie: bigint, mask: bigint): Promise<void>;
  /** How many sluice flows the bridge holds (one aggregate-statistics request). */
  installedCount(): Promise<number>;
  installedCookies(): Promise<string[]>;
}

/** The desired flows and their programming (real: FlowSync over the FlowStore). */
export interface FlowBackend {
  readonly store: FlowStore;
  /** `update` brings the store's owners up to date right before the delta is taken and applied. */
  sync(update: (store: FlowStore) => void, opts?: { verify?: boolean }): Promise<FlowDiff>;
}

/** The host side the reconciler converges (real: HostNetwork, daemon/hostnet/). */
export interface NodeHostNetwork {
  /** Node-wide state (table 300, rules, neighbours, iptables chains); returns what it repaired. */
  ensureBase(): Promise<string[]>;
  /** For each Pod (its IPs), what is wrong with its host routes. */
  podRouteProblems(pods: string[][]): Promise<string[][]>;
  repairPodRoutes(pod: { ips: string[]; hostVeth?: string }, problems: string[]): Promise<string[]>;
  /** Host veths that carry the netdev ingress drop. */
  isolatedVeths(): Promise<string[]>;
  isolateHostVeth(ifName: string): Promise<void>;
  /** ensureBase plus every given Pod's routes. */
  resync(pods: { ips: string[]; hostVeth?: string }[]): Promise<string[]>;
}

/** The OpenFlow connection as the reconciler sees it (real: OpenFlowController). */
export interface BridgeConnection {
  on(event: 'connected', listener: () => void): unknown;
  on(event: 'disconnected', listener: (reason: string) => void): unknown;
  start(): void;
}

export interface ReconcilerDeps<Api extends StartupApi, Net extends NodeHostNetwork> {
  config: Pick<AgentConfig, 'nodeName' | 'bridge' | 'nodeIP' | 'nodeIPv6' | 'kubeconfig' | 'gateway' | 'serviceCIDRs' | 'datapath'>;
  log: Logger;
  ovs: NodeOvs;
  flowProgrammer: NodeFlowProgrammer;
  flows: FlowBackend;
  /** Connects to the API server (called again on each retry). */
  connectApi(): Promise<Api>;
  /** Sets up host networking once the node's addresses are known. */
  createHostNetwork(addresses: NodeAddresses): Promise<Net>;
  clock: Clock;
  /** Shared by CNI operations, exclusive for the repairs of a resync. */
  lock: SharedExclusiveLock;
  /** The node's attached Pods (the CNI side adds and removes them; start-up rebuilds them from OVSDB). */
  pods: PodRegistry;
  /** Whether a network namespace path still exists. */
  pathExists(path: string): boolean;
  /** Removes what a Pod that is gone left behind; returns what could not be removed. */
  detach(pod: PodAttachment): Promise<string[]>;
  /**
   * The agent's OpenFlow connection to the bridge, started once the bridge exists. Every connection
   * after the first means ovs-vswitchd restarted or the socket was lost: everything is resynced.
   */
  openflow?: BridgeConnection;
  /** Runs after the attachments are known and before the first flow sync (policy enforcement). */
  prepare?(pods: PodAttachment[]): Promise<void>;
  /** Runs once start-up's first flow sync is on the bridge. */
  flowsConverged?(): void;
  ovsdbWaitMs?: number;
  apiDeadlineMs?: number;
}

export interface ResyncRecord {
  at: string;
  repairs: string[];
  error?: string;
}

const TRACE_COOKIE = BigInt(TRACE_COOKIE_PREFIX) << 48n;
const TRACE_COOKIE_MASK = 0xffffn << 48n;

export class NodeReconciler<Api extends StartupApi = StartupApi, Net extends NodeHostNetwork = NodeHostNetwork> {
  readonly pods: PodRegistry;
  /** Set once start-up has served its first CNI request: the watchdog runs from then on. */
  ready = false;
  ovsReachable = true;
  gateway?: GatewayInfo;
  nodeIP?: string | undefined;
  nodeIPv6?: string | undefined;
  /** The API client when the API server answered at start-up. */
  api?: Api;
  lastResync?: ResyncRecord;
  readonly resyncCounts = { ok: 0, failed: 0, repairs: 0 };
  private hostnet?: Net;
  private closed = false;
  private checkingFlows = false;
  /** Resyncs one after another (their host part runs outside the lock). */
  private resyncQueue: Promise<unknown> = Promise.resolve();
  private readonly flowSources: FlowSource[] = [];
  private readonly pipeline = new PipelineOwners();

  constructor(private readonly d: ReconcilerDeps<Api, Net>) {
    this.pods = d.pods;
  }

  /** Host networking (exists once start-up set it up). */
  get net(): Net {
    if (!this.hostnet) throw new Error('host networking is not initialised yet');
    return this.hostnet;
  }

  /** Started up and not closed: host networking is there to close. */
  get hostNetwork(): Net | undefined {
    return this.hostnet;
  }

  close(): void {
    this.closed = true;
    this.ready = false;
  }

  /**
   * Everything before the CNI socket serves: waits for OVSDB and the API server, converges bridge,
   * gateway, the attachments a previous run left, flows (one delta against what the bridge holds)
   * and host networking, and removes the attachments whose Pod is gone.
   */
  async startUp(): Promise<void> {
    const { config: cfg, log, ovs, clock } = this.d;
    const t0 = clock.now();
    await waitForOvsdb(() => ovs.ping(), {
      ms: this.d.ovsdbWaitMs ?? 30_000,
      clock,
      cancelled: () => this.closed,
      onRetry: (err) => log.warn({ err: err.message }, 'startup: OVSDB not reachable yet, retrying'),
    });
    log.info({ db: ovs.db }, 'startup: OVSDB reachable');

    const { nodeIP, nodeIPv6, api, livePods } = await connectApi({
      nodeName: cfg.nodeName,
      nodeIP: cfg.nodeIP,
      nodeIPv6: cfg.nodeIPv6,
      kubeconfig: cfg.kubeconfig,
      connect: () => this.d.connectApi(),
      clock,
      log,
      deadlineMs: this.d.apiDeadlineMs ?? 30_000,
    });
    this.nodeIP = nodeIP;
    this.nodeIPv6 = nodeIPv6;
    if (api) this.api = api;

    const bridgeChanges = await ovs.ensureBridge();
    const gw = await ovs.ensureGateway(cfg.gateway);
    this.gateway = gw.gateway;
    log.info({ bridge: cfg.bridge, gateway: gw.gateway, changes: [...bridgeChanges, ...gw.changes] }, 'startup: bridge and gateway');
    if (this.d.openflow) this.startOpenFlow(this.d.openflow);

    const stale = await this.loadAttachments(livePods);
    if (this.d.prepare) {
      await this.d.prepare(this.pods.list());
      log.info({ ms: clock.now() - t0 }, 'startup: policy enforcement prepared');
    }
    const diff = await this.syncFlows({ verify: true });
    log.info({ added: diff.add.length, removed: diff.remove.length, unchanged: diff.unchanged, pods: this.pods.size }, 'startup: flows converged');
    if (await ovs.endFlowRestoreWait()) log.info('startup: flow-restore-wait ended (ovs-vswitchd forwards by the new flows)');
    this.d.flowsConverged?.();
    // Observation flows of a trace the previous agent did not finish.
    await this.d.flowProgrammer.deleteFlows(TRACE_COOKIE, TRACE_COOKIE_MASK);

    this.hostnet = await this.d.createHostNetwork({ ...(nodeIP ? { nodeIP } : {}), ...(nodeIPv6 ? { nodeIPv6 } : {}) });
    const repairs = await this.hostnet.resync(this.podRoutes());
    log.info({ repairs }, 'startup: host networking converged');

    for (const { pod, reason } of stale) {
      log.warn({ containerId: pod.containerId, veth: pod.hostVeth, reason }, 'startup: removing leftover attachment');
      const failures = await this.d.detach(pod);
      if (failures.length) log.error({ containerId: pod.containerId, failures }, 'startup: leftover not fully removed');
    }
  }

  /**
   * Connects to the bridge's management socket (it exists once the bridge does) and keeps
   * reconnecting. The first flow sync waits for the connection (bounded, see FlowProgrammer.useOpenFlow); every
   * later connection means ovs-vswitchd restarted or the socket was lost: the meters are back (the
   * handshake installs them) and every flow is replayed.
   */
  private startOpenFlow(openflow: BridgeConnection): void {
    let first = true;
    openflow.on('connected', () => {
      if (first) {
        first = false;
        return;
      }
      this.d.log.warn('openflow: reconnected to the bridge; replaying flows');
      void this.resync('openflow reconnected');
    });
    openflow.on('disconnected', (reason: string) => this.d.log.warn({ reason }, 'openflow: disconnected from the bridge'));
    openflow.start();
  }

  /** Rebuilds the registry from OVSDB; returns attachments whose Pod is gone. */
  private async loadAttachments(livePods?: Set<string>): Promise<{ pod: PodAttachment; reason: string }[]> {
    const stale: { pod: PodAttachment; reason: string }[] = [];
    const egressOfports = await this.d.ovs.egressPortOfports();
    for (const rec of await this.d.ovs.listPodPorts()) {
      const pod = attachmentFromPort(rec, egressOfports);
      if (!pod) {
        this.d.log.warn({ port: rec.name }, 'startup: removing a sluice port with incomplete external_ids');
        await this.d.ovs.removePort(rec.name);
        continue;
      }
      const reason =
        rec.ofport < 1 ? `interface gone (${rec.error ?? 'no OpenFlow port'})`
        : !pod.netns || !this.d.pathExists(pod.netns) ? `netns ${pod.netns} gone`
        : livePods && pod.podName && !livePods.has(`${pod.podNamespace}/${pod.podName}`) ? `Pod ${pod.podNamespace}/${pod.podName} is not on this node in the API`
        : undefined;
      if (reason) stale.push({ pod, reason });
      else this.pods.add(pod);
    }
    return stale;
  }

  /**
   * Adds owners of flows to the desired set (policy enforcement plugs in here) before start-up: a
   * source added later is missing from the start-up sync, whose flows it would then delete and
   * re-add. Call syncFlows() after the source's flows changed; resync and watchdog include it.
   */
  addFlowSource(source: FlowSource): void {
    this.flowSources.push(source);
  }

  /** The desired flow set (shared with later calls while nothing changed: do not modify it). */
  desiredFlows(): Flow[] {
    this.updateFlowStore(this.d.flows.store);
    return this.d.flows.store.flows();
  }

  /** The desired flows per table (for metrics: the policy flows are counted, not listed). */
  desiredFlowCounts(): Record<string, number> {
    this.updateFlowStore(this.d.flows.store);
    return this.d.flows.store.countByTable();
  }

  /** Every owner of the desired flows brought up to date: the pipeline's (base, each Pod) and the sources'. */
  private updateFlowStore(store: FlowStore): void {
    if (!this.gateway) throw new Error('gateway not initialised');
    this.pipeline.update(store, {
      gatewayOfport: this.gateway.ofport,
      gatewayMac: this.gateway.mac,
      ...(this.nodeIP ? { nodeIP: this.nodeIP } : {}),
      ...(this.nodeIPv6 ? { nodeIPv6: this.nodeIPv6 } : {}),
      serviceCIDRs: this.d.config.serviceCIDRs,
      pods: this.pods.list().map(podPortOf),
    });
    for (const source of this.flowSources) source(store);
  }

  /** Applies what changed in the desired set (verify: against what the bridge holds, read first). */
  syncFlows(opts: { verify?: boolean } = {}): Promise<FlowDiff> {
    return this.d.flows.sync((store) => this.updateFlowStore(store), opts);
  }

  private podRoutes(): { ips: string[]; hostVeth: string }[] {
    return this.pods.list().map((p) => ({ ips: routedIPs(p), hostVeth: p.hostVeth }));
  }

  /**
   * Full convergence: bridge, gateway, Pod ofports, flows, host networking. Logs what it repaired.
   * Resyncs run one at a time. CNI operations wait only while Pod state is compared and repaired:
   * the OVS part (OVSDB and OpenFlow round trips) and, after the host part was read without the
   * lock (node-wide state no CNI operation touches: table 300, rules, iptables chains; then the
   * Pods' routes and veth guards in one dump each), the repair of the Pods still attached as read.
   */
  resync(reason: string): Promise<string[]> {
    const run = () => this.resyncOnce(reason);
    const result = this.resyncQueue.then(run, run);
    this.resyncQueue = result.catch(() => undefined);
    return result;
  }

  private async resyncOnce(reason: string): Promise<string[]> {
    if (this.closed) return [];
    const { ovs, lock, config, log } = this.d;
    const repairs: string[] = [];
    try {
      await lock.runExclusive(async () => {
        if (this.closed) return;
        repairs.push(...(await ovs.ensureBridge()));
        const gw = await ovs.ensureGateway(config.gateway);
        repairs.push(...gw.changes);
        this.gateway = gw.gateway;
        const [podPorts, egressPorts] = await Promise.all([ovs.listPodPorts(), ovs.egressPortOfports()]);
        const ports = new Map(podPorts.map((r) => [r.name, r]));
        for (const pod of this.pods.list()) {
          const rec = ports.get(pod.hostVeth);
          if (!rec) {
            repairs.push(`re-attached port ${pod.hostVeth} (container ${pod.containerId})`);
            pod.ofport = await ovs.addPodPort(pod.hostVeth, portIds(pod));
          } else if (rec.ofport > 0 && rec.ofport !== pod.ofport) {
            repairs.push(`port ${pod.hostVeth} moved from OpenFlow port ${pod.ofport} to ${rec.ofport}`);
            pod.ofport = rec.ofport;
          }
          const e = pod.egressV4;
          if (e) {
            const egressOfport = egressPorts.get(e.hostVeth);
            if (egressOfport === undefined || egressOfport < 1) {
              repairs.push(`re-attached IPv4 egress port ${e.hostVeth} (container ${pod.containerId})`);
              e.ofport = await ovs.addEgressPort(e.hostVeth, egressPortIds({ ...pod, egressV4: e }));
            } else if (egressOfport !== e.ofport) {
              repairs.push(`IPv4 egress port ${e.hostVeth} moved from OpenFlow port ${e.ofport} to ${egressOfport}`);
              e.ofport = egressOfport;
            }
          }
        }
        const diff = await this.syncFlows({ verify: true });
        if (diff.add.length || diff.remove.length) repairs.push(`flows: +${diff.add.length} -${diff.remove.length}`);
        if (await ovs.endFlowRestoreWait()) repairs.push('flow-restore-wait ended (ovs-vswitchd was restarted over the bridge)');
      });
      if (this.closed) return repairs;
      repairs.push(...(await this.net.ensureBase()));
      const seen = this.pods.list();
      const routeProblems = await this.net.podRouteProblems(seen.map(routedIPs));
      const isolated = config.datapath === 'netdev' ? new Set(await this.net.isolatedVeths()) : undefined;
      await lock.runExclusive(async () => {
        if (this.closed) return;
        for (const [i, pod] of seen.entries()) {
          // A Pod DELeted or re-ADDed since it was read: that operation set its routes and guard.
          if (this.pods.get(pod.containerId) !== pod) continue;
          repairs.push(...(await this.net.repairPodRoutes({ ips: routedIPs(pod), hostVeth: pod.hostVeth }, routeProblems[i]!)));
          for (const veth of [pod.hostVeth, ...(pod.egressV4 ? [pod.egressV4.hostVeth] : [])]) {
            if (isolated && !isolated.has(veth)) {
              await this.net.isolateHostVeth(veth);
              repairs.push(`re-isolated host veth ${veth} (container ${pod.containerId})`);
            }
          }
        }
      });
      this.ovsReachable = true;
      this.lastResync = { at: new Date(this.d.clock.now()).toISOString(), repairs };
      this.resyncCounts.ok++;
      this.resyncCounts.repairs += repairs.length;
      if (repairs.length) log.warn({ reason, repairs }, 'resync: repaired');
      else log.debug({ reason }, 'resync: nothing to repair');
    } catch (err) {
      this.lastResync = { at: new Date(this.d.clock.now()).toISOString(), repairs, error: (err as Error).message };
      this.resyncCounts.failed++;
      log.error({ reason, err: (err as Error).message }, 'resync: failed');
    }
    return repairs;
  }

  /**
   * Cheap watchdog: if OVS lost sluice's flows (ovs-vswitchd restarted), converge everything now.
   * It asks only for the number of sluice flows installed (one aggregate-statistics request); the
   * cookies are read, and compared with the desired set, only when that number differs. (A flow
   * lost while a stale one is left over keeps the count; the next sync removes the stale one, and
   * the periodic resync reads the cookies anyway.)
   */
  async checkFlows(): Promise<void> {
    // One check at a time: while ovs-vswitchd is down each one waits for the connection (bounded).
    if (this.closed || !this.ready || this.checkingFlows) return;
    this.checkingFlows = true;
    const { flowProgrammer, flows, log } = this.d;
    try {
      // Changes a read of the desired set (GET /flows, metrics) brought into the store but no sync
      // applied yet are applied first, so the count compares what the bridge should hold.
      const store = flows.store;
      if (store.dirty) await this.syncFlows();
      if ((await flowProgrammer.installedCount()) === store.size) {
        this.ovsReachable = true;
        return;
      }
      const diff = diffFlows(store.flows(), await flowProgrammer.installedCookies());
      this.ovsReachable = true;
      if (diff.add.length) {
        log.warn({ missing: diff.add.length }, 'flows missing from the bridge (ovs-vswitchd restarted?); converging');
        await this.resync('flows missing');
      }
    } catch (err) {
      if (this.ovsReachable) log.error({ err: (err as Error).message }, 'flow check: OVS unreachable');
      this.ovsReachable = false;
    } finally {
      this.checkingFlows = false;
    }
  }

  /** MAC of the interface behind an OpenFlow port of the bridge: the gateway or a local Pod. */
  portMac(ofport: number): string | undefined {
    if (this.gateway && this.gateway.ofport === ofport) return this.gateway.mac;
    return this.pods.atOfport(ofport)?.iface.mac;
  }
}
