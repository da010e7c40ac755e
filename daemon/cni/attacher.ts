/**
 * The CNI handler: attaches a Pod's host veth to br-int behind the primary CNI (ADD), detaches it
 * (DEL), verifies it (CHECK), collects leftovers (GC). Every ADD step is undone in reverse order
 * if a later one fails, so a failed ADD leaves nothing behind; a repeated ADD finds everything in
 * place and changes nothing.
 */
import { existsSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { CniErrorCode } from '../../cni/protocol.js';
import { CniError, type CniHandler, type GcAttachment, type PodRequest } from './server.js';
import { extraPodInterfaces, interfaceIPs } from './result.js';
import { familyOf, podAddressProblem, podFlows } from '../flows/pipeline.js';
import type { EgressPortIds, PodPortIds, PodPortRecord } from '../ovs/bridge.js';
import { GATEWAY_OFPORT } from '../flows/tables.js';
import {
  attachmentFromPort,
  type EgressV4Attachment,
  egressPortIds,
  type PodAttachment,
  podPortOf,
  portIds,
  routedIPs,
  sameAttachment,
  vethsOf,
} from '../node/attachment.js';
import type { PodRegistry } from '../node/pod-registry.js';

export const ATTACH_STEPS = ['find-veth', 'isolate-veth', 'attach-port', 'move-routes', 'install-flows'] as const;
export type AttachStep = (typeof ATTACH_STEPS)[number];

/** The parts of the agent PodAttacher drives (real: OvsBridge, FlowProgrammer, HostNetwork, podlink; tests may wrap them). */
export interface AttachDeps {
  datapath: 'system' | 'netdev';
  bridge: string;
  ovs: {
    /** `ofportRequest`: the OpenFlow port number to ask OVS for (flows for it may already be installed). */
    addPodPort(name: string, ids: PodPortIds, ofportRequest?: number): Promise<number>;
    /** An OpenFlow port number no interface has or has requested. */
    freeOfport(): Promise<number>;
    addEgressPort(name: string, ids: EgressPortIds, ofportRequest?: number): Promise<number>;
    removePort(name: string): Promise<void>;
    listPodPorts(): Promise<PodPortRecord[]>;
    /** Ports attached as a Pod's IPv4 egress port, by name: their OpenFlow port numbers. */
    egressPortOfports(): Promise<Map<string, number>>;
  };
  flowProgrammer: {
    installedCookies(): Promise<string[]>;
  };
  hostnet: {
    movePodRoutes(ips: string[], hostVeth: string): Promise<void>;
    restorePodRoutes(ips: string[], hostVeth: string): Promise<void>;
    checkPodRoutes(ips: string[]): Promise<string[]>;
    isolateHostVeth(ifName: string): Promise<void>;
    releaseHostVeth(ifName: string): Promise<void>;
    /** Host veths that currently have the netdev ingress drop. */
    isolatedVeths(): Promise<string[]>;
  };
  findHostVeth(netnsPath: string, ifName: string): Promise<{ hostIfName: string; podMac: string }>;
  /** The IPv4 addresses (no prefix length) of an interface inside the Pod's namespace. */
  podInterfaceIPv4(netnsPath: string, ifName: string): Promise<string[]>;
  disablePodTxOffload(netnsPath: string, ifName: string): Promise<void>;
  /** The node's attached Pods; the desired flows are computed from them. */
  pods: PodRegistry;
  /** Converges the bridge's flows to the current `pods` (verify: dump the bridge instead of trusting memory). */
  syncFlows(opts?: { verify?: boolean }): Promise<unknown>;
  isReady(): boolean;
  /** Tells the policy side a local Pod appeared / went away. */
  onPodAttached?(pod: PodAttachment): void;
  onPodDetached?(pod: PodAttachment): void;
  /** Policy side: learn the Pod before its flows go in (its policy flows join the same bundle). */
  beforePodFlows?(pod: PodAttachment): Promise<void>;
  /** Policy side: a Pod whose ADD was rolled back after beforePodFlows. */
  podFlowsUndone?(pod: PodAttachment): void;
  /** Test hook (SLUICE_FAILPOINT): throw after this step completed, to exercise the rollback. */
  failAfter?: AttachStep;
  log: Logger;
}

/** The Pod's addresses (IPv4 and IPv6) from prevResult: those on CNI_IFNAME (or unassigned ones). */
export function podIPs(req: PodRequest): string[] {
  return interfaceIPs(req.prevResult, req.ifName);
}

/**
 * The Pod's addresses, or a CNI error naming what is wrong: none at all, or one the bridge cannot
 * route (link-local, multicast...). Every address is attached with its family's flows, or the Pod
 * is not attached at all.
 */
function usablePodIPs(req: PodRequest, where: string): string[] {
  const ips = podIPs(req);
  if (ips.length === 0) {
    throw new CniError(
      CniErrorCode.InvalidNetworkConfig,
      `${where} has no IP address for interface ${req.ifName}: sluice needs the primary CNI's Pod IPs to route them through the bridge`,
    );
  }
  for (const ip of ips) {
    const problem = podAddressProblem(ip);
    if (problem) throw new CniError(CniErrorCode.InvalidNetworkConfig, `${where}, interface ${req.ifName}: ${problem}`);
  }
  return ips;
}

const describe = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * The Pod's IPv4 egress interface, when a chained plugin added one (see extraPodInterfaces), found
 * in the Pod: host veth, MAC and its one IPv4 address. An extra interface sluice cannot put behind
 * the bridge is an error, never a path that bypasses enforcement.
 */
async function findEgressV4(d: AttachDeps, req: PodRequest, ips: string[], where: string): Promise<EgressV4Attachment | undefined> {
  const extra = extraPodInterfaces(req.prevResult, req.ifName, req.netns);
  if (extra.length === 0) return undefined;
  const bypass = 'its traffic would not cross the bridge, so no policy would apply to it';
  const ifName = extra[0]!;
  if (extra.length > 1) {
    throw new CniError(CniErrorCode.InvalidNetworkConfig, `${where} puts interfaces ${extra.join(', ')} in the Pod besides ${req.ifName}: sluice attaches one IPv4 egress interface at most (${bypass})`);
  }
  const own4 = ips.filter((ip) => familyOf(ip) === 4);
  if (own4.length > 0) {
    throw new CniError(CniErrorCode.InvalidNetworkConfig, `${where} puts interface ${ifName} in the Pod besides ${req.ifName}, which has IPv4 address ${own4.join(', ')}: sluice attaches an IPv4 egress interface only for Pods without IPv4 (${bypass})`);
  }
  let veth: { hostIfName: string; podMac: string };
  let v4: string[];
  try {
    veth = await d.findHostVeth(req.netns, ifName);
    v4 = await d.podInterfaceIPv4(req.netns, ifName);
  } catch (err) {
    throw new CniError(CniErrorCode.InvalidEnvironment, `IPv4 egress interface ${ifName} (from ${where}): ${describe(err)}`);
  }
  if (v4.length !== 1) {
    throw new CniError(CniErrorCode.InvalidEnvironment, `IPv4 egress interface ${ifName} (from ${where}) has ${v4.length ? `${v4.length} IPv4 addresses (${v4.join(', ')})` : 'no IPv4 address'}: sluice attaches it with exactly one`);
  }
  const problem = podAddressProblem(v4[0]!);
  if (problem) throw new CniError(CniErrorCode.InvalidEnvironment, `IPv4 egress interface ${ifName} (from ${where}): ${problem}`);
  return { ifName, hostVeth: veth.hostIfName, ofport: -1, mac: veth.podMac.toLowerCase(), ip: v4[0]! };
}

/** What attaching the request's interface (found on the host as `veth`) records. */
function attachmentFor(req: PodRequest, veth: { hostIfName: string; podMac: string }, ips: string[], ofport: number, egressV4?: EgressV4Attachment): PodAttachment {
  return {
    ...(egressV4 ? { egressV4 } : {}),
    containerId: req.containerId,
    podNamespace: req.podNamespace ?? '',
    podName: req.podName ?? '',
    netns: req.netns,
    ifName: req.ifName,
    hostVeth: veth.hostIfName,
    ofport,
    mac: veth.podMac.toLowerCase(),
    ips,
  };
}

/** One entry of the undo ledger: what a step left behind, and how to take it back. */
interface Undo {
  step: AttachStep;
  run: () => Promise<unknown>;
}

/**
 * The steps of one attach (ADD or adoption) and their undo ledger: each step registers how to
 * take back what it is about to leave behind before it acts; on a failure every entry is undone in
 * reverse order, each one even after another failed. A failure is named after the step it happened
 * in; the failpoint (a test hook) fails the attach right after the step it names.
 */
class StepLedger {
  /** The step a failure is reported at. */
  step: AttachStep;
  /** Each step's duration in ms, timed from its own start (steps may overlap). */
  readonly timings: Partial<Record<AttachStep, number>> = {};
  private readonly undo: Undo[] = [];

  constructor(first: AttachStep, private readonly failAfter?: AttachStep) {
    this.step = first;
  }

  /** Records a step that ran before the ledger began (it left nothing to undo). */
  done(s: AttachStep, ms: number): void {
    this.timings[s] = ms;
    this.failpoint(s);
  }

  /** Registers how to take back what `step` is about to do. */
  register(step: AttachStep, run: () => Promise<unknown>): void {
    this.undo.push({ step, run });
  }

  /** Runs one step; a failure, or the failpoint after it, names it. */
  async run(s: AttachStep, work: () => Promise<unknown>): Promise<void> {
    const start = performance.now();
    try {
      await work();
    } catch (err) {
      this.step = s;
      throw err;
    }
    this.timings[s] = Math.round(performance.now() - start);
    this.failpoint(s);
  }

  /** Undoes every registered entry, last first; returns what could not be undone. */
  async rollBack(): Promise<string[]> {
    const failures: string[] = [];
    for (const u of [...this.undo].reverse()) {
      try {
        await u.run();
      } catch (e) {
        failures.push(`undo ${u.step}: ${describe(e)}`);
      }
    }
    return failures;
  }

  /** The steps of the registered entries, last first. */
  undone(): AttachStep[] {
    return [...this.undo].reverse().map((u) => u.step);
  }

  private failpoint(s: AttachStep): void {
    if (this.failAfter !== s) return;
    this.step = s;
    throw new Error(`failpoint after step ${s}`);
  }
}

export class PodAttacher implements CniHandler {
  /** Where requestOfport looks for the next free OpenFlow port number. */
  private ofportCursor = 1;

  constructor(private readonly d: AttachDeps) {}

  async status(): Promise<void> {
    if (!this.d.isReady()) throw new CniError(CniErrorCode.PluginNotAvailable, 'sluice-agent is starting (bridge, flows and host networking not yet converged)');
  }

  async add(req: PodRequest): Promise<void> {
    const { log } = this.d;
    if (!this.d.isReady()) throw new CniError(CniErrorCode.TryAgainLater, 'sluice-agent is not ready yet; retry shortly');
    // Step 1: the host side of the Pod's interface.
    if (!existsSync(req.netns)) throw new CniError(CniErrorCode.InvalidEnvironment, `CNI_NETNS ${req.netns} does not exist`);
    let veth: { hostIfName: string; podMac: string };
    const findStart = performance.now();
    try {
      veth = await this.d.findHostVeth(req.netns, req.ifName);
    } catch (err) {
      throw new CniError(CniErrorCode.InvalidEnvironment, `CNI_IFNAME ${req.ifName}: ${describe(err)}`);
    }
    const ips = usablePodIPs(req, 'prevResult');
    const want = attachmentFor(req, veth, ips, -1, await findEgressV4(this.d, req, ips, 'prevResult'));
    const existing = this.d.pods.get(req.containerId);
    if (existing && sameAttachment(existing, want)) {
      const repaired = await this.repair(existing);
      if (repaired.length) log.warn({ containerId: req.containerId, repaired }, 'add: repeated ADD repaired a partial attachment');
      else log.info({ containerId: req.containerId }, 'add: already attached, nothing to do');
      return;
    }
    if (existing) {
      log.warn({ containerId: req.containerId, old: existing.hostVeth, new: want.hostVeth }, 'add: attachment changed, detaching the old one first');
      await this.detach(existing);
    }
    let clash = this.d.pods.holderOf(want);
    if (clash && !existsSync(clash.netns)) {
      // Its Pod is gone and its DEL never reached us (e.g. the agent was down): the IP was reused.
      log.warn({ containerId: clash.containerId, veth: clash.hostVeth }, 'add: removing a stale attachment whose netns is gone');
      await this.detach(clash);
      clash = undefined;
    }
    if (clash) {
      throw new CniError(
        CniErrorCode.AttachFailed,
        `cannot attach container ${req.containerId}: ${clashText(clash, want)} is still attached for container ${clash.containerId} (DEL it first)`,
      );
    }
    await this.attach(want, Math.round(performance.now() - findStart));
  }

  private async attach(pod: PodAttachment, findMs = 0): Promise<void> {
    const { d } = this;
    const ledger = new StepLedger('find-veth', d.failAfter);
    await this.attempt('add', pod, ledger, async () => {
      ledger.done('find-veth', findMs);
      // The Pod's flows go in while its veth is isolated and attached: they are built for the
      // OpenFlow port numbers requested for its ports (and follow the ports if OVS assigns others),
      // so they match no packet of the Pod before its port exists; until its host routes move
      // (last), nothing is routed to the Pod through the bridge. The veth becomes a port only once
      // it is isolated (netdev: the kernel must not route what OVS also reads from it).
      const e = pod.egressV4;
      pod.ofport = this.requestOfport();
      if (e) e.ofport = this.requestOfport();
      let moved = false;
      const outcomes = await Promise.allSettled([
        this.installFlowsStep(ledger, pod),
        (async () => {
          await this.isolateStep(ledger, pod, 'new');
          moved = await this.attachPortsStep(ledger, pod);
        })(),
      ]);
      const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected');
      if (failed) throw failed.reason;
      // Another interface holds a requested number (one the agent does not know of).
      if (moved) await this.flowsFollowPorts(ledger, pod, 'add');
      await this.moveRoutesStep(ledger, pod);
    });
    d.log.info({ containerId: pod.containerId, pod: `${pod.podNamespace}/${pod.podName}`, veth: pod.hostVeth, ofport: pod.ofport, ips: pod.ips, ...(pod.egressV4 ? { egressV4: pod.egressV4 } : {}), ms: ledger.timings }, 'add: attached');
    d.onPodAttached?.(pod);
  }

  /**
   * Attaches a Pod that already runs on the primary CNI alone (`req` is what the runtime's CNI
   * cache holds for it), without losing its packets: its flows and policy flows go in first, for
   * the OpenFlow port it will be given (requested from OVS), then the port, then the veth isolation
   * (netdev; until then the kernel still forwards the Pod's packets, and OVS sees copies), and its
   * host route moves last. On the kernel datapath the port takes the Pod's packets the moment it is
   * added, so its flows must already be there. Every step is undone if a later one fails.
   */
  async adopt(req: PodRequest): Promise<PodAttachment> {
    const { d } = this;
    if (!d.isReady()) throw new CniError(CniErrorCode.TryAgainLater, 'sluice-agent is not ready yet');
    if (!existsSync(req.netns)) throw new CniError(CniErrorCode.InvalidEnvironment, `network namespace ${req.netns} does not exist`);
    const known = d.pods.get(req.containerId);
    if (known) return known;
    let veth: { hostIfName: string; podMac: string };
    try {
      veth = await d.findHostVeth(req.netns, req.ifName);
    } catch (err) {
      throw new CniError(CniErrorCode.InvalidEnvironment, `interface ${req.ifName} in ${req.netns}: ${describe(err)}`);
    }
    const ips = usablePodIPs(req, 'the cached CNI result');
    const egressV4 = await findEgressV4(d, req, ips, 'the cached CNI result');
    const pod = attachmentFor(req, veth, ips, await d.ovs.freeOfport(), egressV4);
    // The egress port's number is requested too, so its flows can go in before it.
    if (pod.egressV4) pod.egressV4.ofport = pod.ofport + 1;
    const clash = d.pods.holderOf(pod);
    if (clash) throw new CniError(CniErrorCode.AttachFailed, `${clashText(clash, pod)} is already attached for container ${clash.containerId}`);
    const ledger = new StepLedger('install-flows');
    await this.attempt('adopt', pod, ledger, async () => {
      await this.installFlowsStep(ledger, pod);
      if (await this.attachPortsStep(ledger, pod)) await this.flowsFollowPorts(ledger, pod, 'adopt');
      await this.isolateStep(ledger, pod, 'running');
      await this.moveRoutesStep(ledger, pod);
    });
    d.log.info({ containerId: pod.containerId, pod: `${pod.podNamespace}/${pod.podName}`, veth: pod.hostVeth, ofport: pod.ofport, ips: pod.ips }, 'adopt: attached a running Pod');
    d.onPodAttached?.(pod);
    return pod;
  }

  /**
   * Runs the steps of an ADD or an adoption on `ledger`; when one fails, undoes what they
   * registered, last first, and throws the CNI error naming the step and what the rollback left.
   */
  private async attempt(op: 'add' | 'adopt', pod: PodAttachment, ledger: StepLedger, steps: () => Promise<void>): Promise<void> {
    const { d } = this;
    try {
      await steps();
    } catch (err) {
      const failures = await ledger.rollBack();
      d.log.error({ containerId: pod.containerId, step: ledger.step, err: describe(err), rollbackFailures: failures }, `${op}: failed, rolled back`);
      const what = op === 'add' ? `attaching container ${pod.containerId} (${pod.hostVeth}) to ${d.bridge}` : `adopting container ${pod.containerId} (${pod.hostVeth})`;
      throw new CniError(
        CniErrorCode.AttachFailed,
        `${what} failed at step ${ledger.step}: ${describe(err)}`,
        failures.length ? `rollback incomplete: ${failures.join('; ')}` : `rolled back: ${ledger.undone().join(', ') || 'nothing to undo'}`,
      );
    }
  }

  /** install-flows: the Pod's flows and its policy flows, for the port numbers it asks OVS for. */
  private installFlowsStep(ledger: StepLedger, pod: PodAttachment): Promise<void> {
    return ledger.run('install-flows', () => {
      ledger.register('install-flows', () => this.forgetFlows(pod));
      return this.installFlows(pod);
    });
  }

  /**
   * isolate-veth (netdev only): the kernel must not route what OVS also reads from the Pod's host
   * veths, and the Pod's interfaces send without TX checksum offload. A running Pod's offload goes
   * off before the isolation hands its packets to OVS alone; a new Pod sends nothing yet, so for
   * it both happen at once.
   */
  private isolateStep(ledger: StepLedger, pod: PodAttachment, pods: 'new' | 'running'): Promise<void> {
    const { d } = this;
    return ledger.run('isolate-veth', async () => {
      if (d.datapath !== 'netdev') return;
      const e = pod.egressV4;
      for (const [veth, ifName] of [[pod.hostVeth, pod.ifName], ...(e ? [[e.hostVeth, e.ifName]] : [])] as [string, string][]) {
        ledger.register('isolate-veth', () => d.hostnet.releaseHostVeth(veth));
        if (pods === 'new') await Promise.all([d.hostnet.isolateHostVeth(veth), d.disablePodTxOffload(pod.netns, ifName)]);
        else {
          await d.disablePodTxOffload(pod.netns, ifName);
          await d.hostnet.isolateHostVeth(veth);
        }
      }
    });
  }

  /**
   * attach-port: the Pod's port and its IPv4 egress port, each asking for the OpenFlow port number
   * its flows were built for; true when OVS assigned another one (the flows must follow it).
   */
  private async attachPortsStep(ledger: StepLedger, pod: PodAttachment): Promise<boolean> {
    const { d } = this;
    const e = pod.egressV4;
    ledger.register('attach-port', () => d.ovs.removePort(pod.hostVeth));
    if (e) ledger.register('attach-port', () => d.ovs.removePort(e.hostVeth));
    let moved = false;
    await ledger.run('attach-port', async () => {
      const want = pod.ofport;
      const got = await d.ovs.addPodPort(pod.hostVeth, portIds(pod), want);
      if (e) {
        const wantEgress = e.ofport;
        e.ofport = await d.ovs.addEgressPort(e.hostVeth, egressPortIds({ ...pod, egressV4: e }), wantEgress);
        moved ||= e.ofport !== wantEgress;
      }
      moved ||= got !== want;
      pod.ofport = got;
    });
    return moved;
  }

  /** The flows follow ports OVS numbered otherwise than requested (part of installing them). */
  private async flowsFollowPorts(ledger: StepLedger, pod: PodAttachment, op: 'add' | 'adopt'): Promise<void> {
    ledger.step = 'install-flows';
    this.d.log.warn({ containerId: pod.containerId, ofport: pod.ofport, egressOfport: pod.egressV4?.ofport }, `${op}: OVS assigned another OpenFlow port; the flows follow it`);
    await this.d.syncFlows();
  }

  /** move-routes, last: the host routes the Pod's addresses to the gateway, so through the bridge. */
  private moveRoutesStep(ledger: StepLedger, pod: PodAttachment): Promise<void> {
    const { d } = this;
    const e = pod.egressV4;
    return ledger.run('move-routes', async () => {
      ledger.register('move-routes', () => d.hostnet.restorePodRoutes(pod.ips, pod.hostVeth));
      await d.hostnet.movePodRoutes(pod.ips, pod.hostVeth);
      if (e) {
        ledger.register('move-routes', () => d.hostnet.restorePodRoutes([e.ip], e.hostVeth));
        await d.hostnet.movePodRoutes([e.ip], e.hostVeth);
      }
    });
  }

  /**
   * An OpenFlow port number for a new port: the next one after the last handed out that no
   * attached Pod uses, wrapping below the gateway's. ADDs running at once so get different numbers,
   * and a freed number is reused only after every other one (as OVS itself prefers). A number
   * another interface holds (not a Pod's) makes OVS assign another; the ADD's flows then follow.
   */
  private requestOfport(): number {
    const used = this.d.pods.ofports();
    for (let i = 0; i < GATEWAY_OFPORT; i++) {
      const n = this.ofportCursor;
      this.ofportCursor = n + 1 >= GATEWAY_OFPORT ? 1 : n + 1;
      if (!used.has(n)) return n;
    }
    throw new CniError(CniErrorCode.AttachFailed, `no free OpenFlow port number below the gateway's (${GATEWAY_OFPORT})`);
  }

  /** The Pod's flows and its policy flows, in one bundle (the policy side learns it first). */
  private async installFlows(pod: PodAttachment): Promise<void> {
    await this.d.beforePodFlows?.(pod);
    this.d.pods.add(pod);
    await this.d.syncFlows();
  }

  /** Undoes installFlows. */
  private async forgetFlows(pod: PodAttachment): Promise<void> {
    this.d.pods.remove(pod.containerId);
    this.d.podFlowsUndone?.(pod);
    await this.d.syncFlows();
  }

  /** Re-applies whatever is missing of an existing attachment; returns what it fixed. */
  private async repair(pod: PodAttachment): Promise<string[]> {
    const problems = await this.problems(pod);
    if (problems.length === 0) return [];
    const e = pod.egressV4;
    if (this.d.datapath === 'netdev') for (const v of vethsOf(pod)) await this.d.hostnet.isolateHostVeth(v);
    pod.ofport = await this.d.ovs.addPodPort(pod.hostVeth, portIds(pod));
    if (e) e.ofport = await this.d.ovs.addEgressPort(e.hostVeth, egressPortIds({ ...pod, egressV4: e }));
    await this.d.hostnet.movePodRoutes(routedIPs(pod), pod.hostVeth);
    await this.d.syncFlows({ verify: true });
    return problems;
  }

  /** What is missing of an attachment: port, routes, flows. Empty = complete. */
  async problems(pod: PodAttachment): Promise<string[]> {
    const out: string[] = [];
    const port = (await this.d.ovs.listPodPorts()).find((p) => p.name === pod.hostVeth);
    if (!port) out.push(`port ${pod.hostVeth} is not on ${this.d.bridge}`);
    else {
      if (port.ids['container-id'] !== pod.containerId) out.push(`port ${pod.hostVeth} belongs to container ${port.ids['container-id']}`);
      if (port.ofport < 1) out.push(`port ${pod.hostVeth} has no OpenFlow port (${port.error ?? 'interface missing'})`);
      else if (port.ofport !== pod.ofport) out.push(`port ${pod.hostVeth} has OpenFlow port ${port.ofport}, flows use ${pod.ofport}`);
    }
    const e = pod.egressV4;
    if (e) {
      const egressOfport = (await this.d.ovs.egressPortOfports()).get(e.hostVeth);
      if (egressOfport === undefined) out.push(`IPv4 egress port ${e.hostVeth} (${e.ifName}) is not on ${this.d.bridge}`);
      else if (egressOfport < 1) out.push(`IPv4 egress port ${e.hostVeth} (${e.ifName}) has no OpenFlow port (interface missing)`);
      else if (egressOfport !== e.ofport) out.push(`IPv4 egress port ${e.hostVeth} has OpenFlow port ${egressOfport}, flows use ${e.ofport}`);
    }
    out.push(...(await this.d.hostnet.checkPodRoutes(routedIPs(pod))));
    if (this.d.datapath === 'netdev') {
      const isolated = await this.d.hostnet.isolatedVeths();
      for (const v of vethsOf(pod)) {
        if (!isolated.includes(v)) out.push(`host veth ${v} is not isolated (netdev ingress drop missing: packets would be duplicated)`);
      }
    }
    const installed = new Set(await this.d.flowProgrammer.installedCookies());
    const expected = pod.ofport > 0 && (!e || e.ofport > 0) ? podFlows(podPortOf(pod)) : [];
    const missing = expected.filter((f) => !installed.has(f.cookie));
    if (missing.length) {
      const tables = [...new Set(missing.map((f) => f.table))].join(', ');
      out.push(`${missing.length} of ${expected.length} flows missing (tables ${tables})`);
    }
    return out;
  }

  async check(req: PodRequest): Promise<void> {
    const pod = this.d.pods.get(req.containerId);
    if (!pod) throw new CniError(CniErrorCode.CheckFailed, `container ${req.containerId} is not attached to ${this.d.bridge}`);
    const problems = await this.problems(pod);
    const ips = podIPs(req);
    if (req.prevResult && ips.join(',') !== pod.ips.join(',')) problems.push(`prevResult IPs ${ips.join(',') || '(none)'} differ from the attached IPs ${pod.ips.join(',')}`);
    if (req.ifName !== pod.ifName) problems.push(`attached interface is ${pod.ifName}, not ${req.ifName}`);
    if (problems.length) throw new CniError(CniErrorCode.CheckFailed, `container ${req.containerId}: ${problems.join('; ')}`);
  }

  async del(req: PodRequest): Promise<void> {
    const pod = this.d.pods.get(req.containerId) ?? (await this.fromOvsdb(req.containerId));
    if (!pod) {
      this.d.log.info({ containerId: req.containerId }, 'del: container not attached, nothing to do');
      return;
    }
    const failures = await this.detach(pod);
    if (failures.length) throw new CniError(CniErrorCode.DetachFailed, `detaching container ${req.containerId}: ${failures.join('; ')}`);
  }

  /** A port the registry lost track of (e.g. an earlier failed start) is still found by its external_ids. */
  private async fromOvsdb(containerId: string): Promise<PodAttachment | undefined> {
    const rec = (await this.d.ovs.listPodPorts()).find((p) => p.ids['container-id'] === containerId);
    return rec ? attachmentFromPort(rec) : undefined;
  }

  /** Flows, port, veth isolation, routes back onto the veth. Tries every step; returns failures. */
  async detach(pod: PodAttachment): Promise<string[]> {
    const { d } = this;
    const failures: string[] = [];
    const attempt = async (what: string, fn: () => Promise<unknown>) => {
      try {
        await fn();
      } catch (err) {
        failures.push(`${what}: ${describe(err)}`);
      }
    };
    const wasRegistered = d.pods.remove(pod.containerId);
    await attempt('remove flows', () => d.syncFlows());
    await attempt('remove port', () => d.ovs.removePort(pod.hostVeth));
    const e = pod.egressV4;
    if (e) await attempt(`remove IPv4 egress port ${e.hostVeth}`, () => d.ovs.removePort(e.hostVeth));
    if (d.datapath === 'netdev') {
      await attempt('release veth', () => d.hostnet.releaseHostVeth(pod.hostVeth));
      if (e) await attempt(`release IPv4 egress veth ${e.hostVeth}`, () => d.hostnet.releaseHostVeth(e.hostVeth));
    }
    await attempt('restore routes', () => d.hostnet.restorePodRoutes(pod.ips, pod.hostVeth));
    if (e) await attempt('restore the IPv4 egress route', () => d.hostnet.restorePodRoutes([e.ip], e.hostVeth));
    if (failures.length) d.log.error({ containerId: pod.containerId, failures }, 'del: incomplete');
    else d.log.info({ containerId: pod.containerId, veth: pod.hostVeth }, 'del: detached');
    if (wasRegistered) d.onPodDetached?.(pod);
    return failures;
  }

  async gc(valid: GcAttachment[], _req: { networkName: string }): Promise<void> {
    const keep = new Set(valid.map((v) => `${v.containerId}\u0000${v.ifName}`));
    const known = new Map(this.d.pods.list().map((p) => [p.containerId, p]));
    for (const rec of await this.d.ovs.listPodPorts()) {
      const a = attachmentFromPort(rec);
      if (a && !known.has(a.containerId)) known.set(a.containerId, a);
    }
    const failures: string[] = [];
    for (const pod of known.values()) {
      if (keep.has(`${pod.containerId}\u0000${pod.ifName}`)) continue;
      this.d.log.info({ containerId: pod.containerId, veth: pod.hostVeth }, 'gc: removing an attachment not in cni.dev/valid-attachments');
      failures.push(...(await this.detach(pod)).map((f) => `${pod.containerId}: ${f}`));
    }
    if (failures.length) throw new CniError(CniErrorCode.GcFailed, `GC could not remove everything: ${failures.join('; ')}`);
  }
}

/** What of `want` is still held by `clash`: a veth or an address. */
function clashText(clash: PodAttachment, want: PodAttachment): string {
  const veth = vethsOf(want).find((v) => vethsOf(clash).includes(v));
  return veth ? `veth ${veth}` : `IP ${routedIPs(want).find((ip) => routedIPs(clash).includes(ip))}`;
}
