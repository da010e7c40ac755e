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
import { interfaceIPs } from './result.js';
import { podAddressProblem, podFlows } from '../flows/pipeline.js';
import type { PodPortIds, PodPortRecord } from '../flows/ovs.js';

/** What the agent knows about one attached Pod (rebuilt from OVSDB external_ids after a restart). */
export interface PodAttachment {
  containerId: string;
  podNamespace: string;
  podName: string;
  netns: string;
  ifName: string;
  hostVeth: string;
  ofport: number;
  /** MAC of the Pod's own interface. */
  mac: string;
  ips: string[];
}

export const ATTACH_STEPS = ['find-veth', 'isolate-veth', 'attach-port', 'move-routes', 'install-flows'] as const;
export type AttachStep = (typeof ATTACH_STEPS)[number];

/** The parts of the agent PodAttacher drives (real: Ovs, HostNetwork, podlink; tests may wrap them). */
export interface AttachDeps {
  datapath: 'system' | 'netdev';
  bridge: string;
  ovs: {
    /** `ofportRequest`: the OpenFlow port number to ask OVS for (flows for it may already be installed). */
    addPodPort(name: string, ids: PodPortIds, ofportRequest?: number): Promise<number>;
    /** An OpenFlow port number no interface has or has requested. */
    freeOfport(): Promise<number>;
    removePort(name: string): Promise<void>;
    listPodPorts(): Promise<PodPortRecord[]>;
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
  disablePodTxOffload(netnsPath: string, ifName: string): Promise<void>;
  /** The attached Pods; the desired flows are computed from it. */
  pods: Map<string, PodAttachment>;
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

export function portIds(p: PodAttachment): PodPortIds {
  return {
    'sluice-type': 'container',
    'container-id': p.containerId,
    'pod-namespace': p.podNamespace,
    'pod-name': p.podName,
    'ip-address': p.ips.join(','),
    'attached-mac': p.mac,
    'net-ns': p.netns,
    'if-name': p.ifName,
  };
}

/** Rebuilds an attachment from its OVSDB port; undefined when the record is not usable. */
export function attachmentFromPort(r: PodPortRecord): PodAttachment | undefined {
  const ids = r.ids;
  if (!ids['container-id'] || !ids['attached-mac'] || !ids['ip-address']) return undefined;
  return {
    containerId: ids['container-id'],
    podNamespace: ids['pod-namespace'] ?? '',
    podName: ids['pod-name'] ?? '',
    netns: ids['net-ns'] ?? '',
    ifName: ids['if-name'] ?? 'eth0',
    hostVeth: r.name,
    ofport: r.ofport,
    mac: ids['attached-mac'],
    ips: ids['ip-address'].split(',').filter(Boolean),
  };
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

/** What attaching the request's interface (found on the host as `veth`) records. */
function attachmentFor(req: PodRequest, veth: { hostIfName: string; podMac: string }, ips: string[], ofport: number): PodAttachment {
  return {
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

/** One entry of the undo ledger: what a completed step left behind, and how to take it back. */
interface Undo {
  step: string;
  run: () => Promise<unknown>;
}

/** Runs the ledger in reverse order, every entry even after one fails; returns what could not be undone. */
async function rollBack(undo: Undo[]): Promise<string[]> {
  const failures: string[] = [];
  for (const u of [...undo].reverse()) {
    try {
      await u.run();
    } catch (e) {
      failures.push(`undo ${u.step}: ${describe(e)}`);
    }
  }
  return failures;
}

export class PodAttacher implements CniHandler {
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
    const want = attachmentFor(req, veth, ips, -1);
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
    let clash = [...this.d.pods.values()].find((p) => p.ips.some((ip) => ips.includes(ip)) || p.hostVeth === want.hostVeth);
    if (clash && !existsSync(clash.netns)) {
      // Its Pod is gone and its DEL never reached us (e.g. the agent was down): the IP was reused.
      log.warn({ containerId: clash.containerId, veth: clash.hostVeth }, 'add: removing a stale attachment whose netns is gone');
      await this.detach(clash);
      clash = undefined;
    }
    if (clash) {
      throw new CniError(
        CniErrorCode.AttachFailed,
        `cannot attach container ${req.containerId}: ${clash.hostVeth === want.hostVeth ? `veth ${want.hostVeth}` : `IP ${ips.find((ip) => clash.ips.includes(ip))}`} is still attached for container ${clash.containerId} (DEL it first)`,
      );
    }
    await this.attach(want, Math.round(performance.now() - findStart));
  }

  private async attach(pod: PodAttachment, findMs = 0): Promise<void> {
    const { d } = this;
    const undo: Undo[] = [];
    let step: AttachStep = 'find-veth';
    const timings: Partial<Record<AttachStep, number>> = { 'find-veth': findMs };
    let mark = performance.now();
    const done = (s: AttachStep) => {
      const now = performance.now();
      timings[s] = (timings[s] ?? 0) + Math.round(now - mark);
      mark = now;
      if (d.failAfter === s) throw new Error(`failpoint after step ${s}`);
    };
    try {
      done('find-veth');
      step = 'isolate-veth';
      if (d.datapath === 'netdev') {
        undo.push({ step, run: () => d.hostnet.releaseHostVeth(pod.hostVeth) });
        await Promise.all([d.hostnet.isolateHostVeth(pod.hostVeth), d.disablePodTxOffload(pod.netns, pod.ifName)]);
      }
      done(step);
      step = 'attach-port';
      undo.push({ step, run: () => d.ovs.removePort(pod.hostVeth) });
      pod.ofport = await d.ovs.addPodPort(pod.hostVeth, portIds(pod));
      done(step);
      step = 'move-routes';
      undo.push({ step, run: () => d.hostnet.restorePodRoutes(pod.ips, pod.hostVeth) });
      await d.hostnet.movePodRoutes(pod.ips, pod.hostVeth);
      done(step);
      step = 'install-flows';
      undo.push({ step, run: () => this.forgetFlows(pod) });
      await this.installFlows(pod);
      done(step);
    } catch (err) {
      const failures = await rollBack(undo);
      d.log.error({ containerId: pod.containerId, step, err: describe(err), rollbackFailures: failures }, 'add: failed, rolled back');
      throw new CniError(
        CniErrorCode.AttachFailed,
        `attaching container ${pod.containerId} (${pod.hostVeth}) to ${d.bridge} failed at step ${step}: ${describe(err)}`,
        failures.length ? `rollback incomplete: ${failures.join('; ')}` : `rolled back: ${[...undo].reverse().map((u) => u.step).join(', ') || 'nothing to undo'}`,
      );
    }
    d.log.info({ containerId: pod.containerId, pod: `${pod.podNamespace}/${pod.podName}`, veth: pod.hostVeth, ofport: pod.ofport, ips: pod.ips, ms: timings }, 'add: attached');
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
    const clash = [...d.pods.values()].find((p) => p.ips.some((ip) => ips.includes(ip)) || p.hostVeth === veth.hostIfName);
    if (clash) throw new CniError(CniErrorCode.AttachFailed, `${clash.hostVeth === veth.hostIfName ? `veth ${veth.hostIfName}` : `an address of ${ips.join(',')}`} is already attached for container ${clash.containerId}`);
    const pod = attachmentFor(req, veth, ips, await d.ovs.freeOfport());
    const undo: Undo[] = [];
    let step = 'install-flows';
    try {
      undo.push({ step, run: () => this.forgetFlows(pod) });
      await this.installFlows(pod);
      step = 'attach-port';
      undo.push({ step, run: () => d.ovs.removePort(pod.hostVeth) });
      const ofport = await d.ovs.addPodPort(pod.hostVeth, portIds(pod), pod.ofport);
      if (ofport !== pod.ofport) {
        // OVS gave another number (the requested one was taken meanwhile): flows follow the port.
        d.log.warn({ containerId: pod.containerId, requested: pod.ofport, got: ofport }, 'adopt: OVS assigned another OpenFlow port');
        pod.ofport = ofport;
        await d.syncFlows();
      }
      if (d.datapath === 'netdev') {
        step = 'isolate-veth';
        undo.push({ step, run: () => d.hostnet.releaseHostVeth(pod.hostVeth) });
        await d.disablePodTxOffload(pod.netns, pod.ifName);
        await d.hostnet.isolateHostVeth(pod.hostVeth);
      }
      step = 'move-routes';
      undo.push({ step, run: () => d.hostnet.restorePodRoutes(pod.ips, pod.hostVeth) });
      await d.hostnet.movePodRoutes(pod.ips, pod.hostVeth);
    } catch (err) {
      const failures = await rollBack(undo);
      d.log.error({ containerId: pod.containerId, step, err: describe(err), rollbackFailures: failures }, 'adopt: failed, rolled back');
      throw new CniError(
        CniErrorCode.AttachFailed,
        `adopting container ${pod.containerId} (${pod.hostVeth}) failed at step ${step}: ${describe(err)}`,
        failures.length ? `rollback incomplete: ${failures.join('; ')}` : 'rolled back',
      );
    }
    d.log.info({ containerId: pod.containerId, pod: `${pod.podNamespace}/${pod.podName}`, veth: pod.hostVeth, ofport: pod.ofport, ips: pod.ips }, 'adopt: attached a running Pod');
    d.onPodAttached?.(pod);
    return pod;
  }

  /** The Pod's flows and its policy flows, in one bundle (the policy side learns it first). */
  private async installFlows(pod: PodAttachment): Promise<void> {
    await this.d.beforePodFlows?.(pod);
    this.d.pods.set(pod.containerId, pod);
    await this.d.syncFlows();
  }

  /** Undoes installFlows. */
  private async forgetFlows(pod: PodAttachment): Promise<void> {
    this.d.pods.delete(pod.containerId);
    this.d.podFlowsUndone?.(pod);
    await this.d.syncFlows();
  }

  /** Re-applies whatever is missing of an existing attachment; returns what it fixed. */
  private async repair(pod: PodAttachment): Promise<string[]> {
    const problems = await this.problems(pod);
    if (problems.length === 0) return [];
    if (this.d.datapath === 'netdev') await this.d.hostnet.isolateHostVeth(pod.hostVeth);
    pod.ofport = await this.d.ovs.addPodPort(pod.hostVeth, portIds(pod));
    await this.d.hostnet.movePodRoutes(pod.ips, pod.hostVeth);
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
    out.push(...(await this.d.hostnet.checkPodRoutes(pod.ips)));
    if (this.d.datapath === 'netdev' && !(await this.d.hostnet.isolatedVeths()).includes(pod.hostVeth)) {
      out.push(`host veth ${pod.hostVeth} is not isolated (netdev ingress drop missing: packets would be duplicated)`);
    }
    const installed = new Set(await this.d.ovs.installedCookies());
    const expected = pod.ofport > 0 ? podFlows(pod) : [];
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
    const wasRegistered = d.pods.delete(pod.containerId);
    await attempt('remove flows', () => d.syncFlows());
    await attempt('remove port', () => d.ovs.removePort(pod.hostVeth));
    if (d.datapath === 'netdev') await attempt('release veth', () => d.hostnet.releaseHostVeth(pod.hostVeth));
    await attempt('restore routes', () => d.hostnet.restorePodRoutes(pod.ips, pod.hostVeth));
    if (failures.length) d.log.error({ containerId: pod.containerId, failures }, 'del: incomplete');
    else d.log.info({ containerId: pod.containerId, veth: pod.hostVeth }, 'del: detached');
    if (wasRegistered) d.onPodDetached?.(pod);
    return failures;
  }

  async gc(valid: GcAttachment[], _req: { networkName: string }): Promise<void> {
    const keep = new Set(valid.map((v) => `${v.containerId}\u0000${v.ifName}`));
    const known = new Map(this.d.pods);
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

function sameAttachment(a: PodAttachment, b: PodAttachment): boolean {
  return a.hostVeth === b.hostVeth && a.mac === b.mac && a.ips.join(',') === b.ips.join(',') && a.ifName === b.ifName && a.netns === b.netns;
}
