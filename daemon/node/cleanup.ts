/**
 * `sluice-agent --cleanup`: takes the node back to "primary CNI alone" while Pods keep running.
 * Every Pod sluice attached gets its host route back on its own veth without a moment of loss
 * (restorePod: the CNI DEL's steps, in the order a running Pod needs), then the node-wide state
 * goes (iptables chains, rule/table 300, bridge + gateway, veth-guard table, CNI socket, state dir). Every step is idempotent and a Pod's OVS port is removed last, so OVSDB lists
 * every Pod not yet fully restored: a re-run after a crash finishes the job. Needs Open vSwitch
 * running and no agent serving.
 */
import { existsSync, lstatSync } from 'node:fs';
import { readdir, rm, rmdir } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import { socketAnswers } from '../cni/server.js';
import type { AgentConfig } from '../config.js';
import { OvsBridge } from '../ovs/bridge.js';
import { VIRTUAL_MAC } from '../flows/tables.js';
import { HostNetwork, repointPodNeighbours, resolveIptables, VethGuard } from '../hostnet/index.js';
import { attachmentFromPort, type PodAttachment } from './attachment.js';
import { realClock } from '../clock.js';
import { waitForOvsdb } from './startup.js';

export interface CleanupReport {
  /** One line per thing restored or removed, in order. */
  done: string[];
  failed: string[];
}

/** Why the cleanup must not run now (an agent serves on this node), or undefined. */
export async function runningAgent(config: AgentConfig): Promise<string | undefined> {
  const h = config.healthAddress;
  if (await socketAnswers(h, 1000)) {
    return `something answers on the agent's health address ${h.host}:${h.port} (a running sluice-agent, or one idling after its cleanup): stop it first`;
  }
  if (existsSync(config.socketPath) && (await socketAnswers(config.socketPath, 1000))) {
    return `the CNI socket ${config.socketPath} is live (another sluice-agent is running): stop it first`;
  }
  return undefined;
}

const describe = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * One Pod back to the primary CNI alone, in an order that never leaves it unreachable (a CNI DEL
 * removes the port first, which is fine for a Pod going away, not for a running one):
 *  1. netdev: the veth guard released, so the kernel handles the Pod's packets itself (while the
 *     port is still on the bridge OVS forwards copies too: duplicates for a moment, never a loss).
 *     Released first because the route move below makes the host ARP for the Pod on its veth,
 *     and the guard would drop the Pod's ARP reply (measured: ~0.5 s of loss per Pod otherwise);
 *  2. its host routes back onto its veth (route replace: there is always a route);
 *  3. its OVS port removed, last, so OVSDB lists every Pod not yet fully restored;
 *  4. the Pod's neighbour entries that still hold the bridge's virtual MAC (its gateway, answered
 *     by the bridge's ARP responder) re-pointed at its host veth's MAC: off the bridge, frames to
 *     the virtual MAC are dropped by the host, for as long as the Pod's entry stays REACHABLE.
 * A failed step stops this Pod there (it keeps working through the bridge); returns the problem.
 */
async function restorePod(pod: PodAttachment, config: AgentConfig, hostnet: HostNetwork, ovs: OvsBridge): Promise<string | undefined> {
  // Test hook only: SLUICE_CLEANUP_CRASH=before-port-removal kills this process once the first
  // Pod's guard is released and its routes are back, its port still on the bridge.
  const crash = process.env.SLUICE_CLEANUP_CRASH === 'before-port-removal';
  // The Pod's interfaces: its own and its IPv4 egress one (whose port goes first: the Pod's own
  // port keeps the record of both until the Pod is fully restored).
  const links = [
    ...(pod.egressV4 ? [{ veth: pod.egressV4.hostVeth, ips: [pod.egressV4.ip], ifName: pod.egressV4.ifName, what: 'its IPv4 egress ' }] : []),
    { veth: pod.hostVeth, ips: pod.ips, ifName: pod.ifName, what: 'its ' },
  ];
  for (const [i, l] of links.entries()) {
    if (config.datapath === 'netdev') {
      try {
        await hostnet.releaseHostVeth(l.veth);
      } catch (err) {
        return `releasing the veth guard of ${l.veth}: ${describe(err)}`;
      }
    }
    try {
      await hostnet.restorePodRoutes(l.ips, l.veth);
    } catch (err) {
      return `restoring ${l.what}routes onto ${l.veth}: ${describe(err)}`;
    }
    if (crash && i === links.length - 1) process.kill(process.pid, 'SIGKILL');
    try {
      await ovs.removePort(l.veth);
    } catch (err) {
      return `removing ${l.what}port from ${config.bridge}: ${describe(err)}`;
    }
    // A Pod whose namespace is already gone has no neighbour table left to fix.
    if (!existsSync(pod.netns)) continue;
    try {
      const mac = await hostnet.netlink.linkMac(l.veth);
      if (!mac) return `re-pointing ${l.what}gateway neighbour: ${l.veth} has no MAC address`;
      await repointPodNeighbours(pod.netns, l.ifName, VIRTUAL_MAC, mac);
    } catch (err) {
      return `re-pointing ${l.what}gateway neighbour at ${l.veth}: ${describe(err)}`;
    }
  }
  return undefined;
}

/** `opts.onDone` sees each line of `done` as it happens (the CLI prints them at once). */
export async function cleanupNode(
  config: AgentConfig,
  log: Logger,
  opts: { ovsWaitMs?: number; onDone?: (line: string) => void } = {},
): Promise<CleanupReport> {
  const done = {
    lines: [] as string[],
    push(line: string) {
      this.lines.push(line);
      opts.onDone?.(line);
    },
  };
  const failed: string[] = [];
  const step = async (what: string, fn: () => Promise<string[] | string | void>): Promise<void> => {
    try {
      const r = await fn();
      for (const line of typeof r === 'string' ? [r] : r ?? []) {
        done.push(line);
      }
    } catch (err) {
      failed.push(`${what}: ${describe(err)}`);
      log.error({ what, err: describe(err) }, 'cleanup: step failed');
    }
  };

  const ovs = new OvsBridge({ ovsRunDir: config.ovsRunDir, bridge: config.bridge, datapath: config.datapath, log });
  try {
    // OVS may still be starting (the ovs container of the same Pod).
    await waitForOvsdb(() => ovs.ping(), { ms: opts.ovsWaitMs ?? 30_000, clock: realClock });
  } catch (err) {
    // Without OVSDB the Pods to restore are unknown, and the gateway must not go before them.
    failed.push(`${describe(err)}: Open vSwitch must run during the cleanup; nothing was changed`);
    return { done: done.lines, failed };
  }
  const iptables = await resolveIptables(config.iptablesBackend);
  const hostnet = await HostNetwork.create({ gateway: config.gateway, serviceCIDRs: config.serviceCIDRs, rtTablesFile: config.rtTablesFile, iptables: iptables.commands, log });
  try {
    // 1. Pods: every port sluice attached (OVSDB keeps each until its Pod is fully restored).
    const pods: PodAttachment[] = [];
    await step('list Pod ports', async () => {
      const out: string[] = [];
      const egressOfports = await ovs.egressPortOfports();
      for (const rec of await ovs.listPodPorts()) {
        const pod = attachmentFromPort(rec, egressOfports);
        if (pod) pods.push(pod);
        else {
          await ovs.removePort(rec.name);
          out.push(`removed port ${rec.name} (incomplete external_ids, no Pod to restore)`);
        }
      }
      return out;
    });
    // Not knowing the Pods, removing the gateway could cut them off.
    if (failed.length) return { done: done.lines, failed };
    const gatewayExists = (await hostnet.netlink.linkIndex(config.gateway)) !== undefined;
    const stillOnBridge: string[] = [];
    for (const pod of pods.sort((a, b) => a.hostVeth.localeCompare(b.hostVeth))) {
      const name = `${pod.podNamespace}/${pod.podName}`;
      const vethExists = (await hostnet.netlink.linkIndex(pod.hostVeth)) !== undefined;
      const problem = await restorePod(pod, config, hostnet, ovs);
      if (problem) {
        failed.push(`Pod ${name} (${pod.hostVeth}): ${problem}`);
        stillOnBridge.push(name);
      } else if (vethExists) done.push(`restored Pod ${name}: ${pod.ips.join(',')} routed via ${pod.hostVeth} again, off ${config.bridge}`);
      else done.push(`Pod ${name}: veth ${pod.hostVeth} is gone (Pod deleted); removed its port and any route of ${pod.ips.join(',')} via ${config.gateway}`);
    }
    if (pods.length === 0) {
      done.push(gatewayExists ? `no Pod attached to ${config.bridge}` : `no Pod attached, and ${config.gateway} is gone (so are any routes that used it)`);
    }
    if (stillOnBridge.length) {
      // Removing the gateway or the bridge now would cut these Pods off: a re-run finishes.
      failed.push(`kept ${config.bridge}, ${config.gateway} and the host networking: ${stillOnBridge.join(', ')} still use them`);
      return { done: done.lines, failed };
    }

    // 2. Node-wide state. The Pods no longer use any of it.
    await step('remove host networking', () => hostnet.removeBase());
    await step(`remove bridge ${config.bridge}`, async () => {
      if (!(await ovs.deleteBridge(config.bridge))) return `bridge ${config.bridge} already gone`;
      return `bridge ${config.bridge} and its gateway ${config.gateway} (with their flows)`;
    });
    await step('end flow-restore-wait', async () => ((await ovs.endFlowRestoreWait()) ? 'other_config:flow-restore-wait (set by the ovs container restart; no agent will end it)' : []));
    await step(`check ${config.gateway}`, async () => {
      if ((await hostnet.netlink.linkIndex(config.gateway)) !== undefined) {
        throw new Error(`${config.gateway} still exists after ${config.bridge} was removed (not an OVS port of it?)`);
      }
    });
    await step('remove the veth guard table', async () => {
      // After the bridge: a guard left on a veth sluice no longer knew about only black-holes it now.
      const guard = new VethGuard();
      const { existed, released } = await guard.removeTable().finally(() => guard.close());
      if (!existed) return [];
      return [`nft table netdev sluice_veth_guard${released.length ? ` (also released leftover guards on ${released.join(', ')})` : ''}`];
    });
    await step('remove the CNI socket', async () => {
      if (!existsSync(config.socketPath)) return [];
      if (!lstatSync(config.socketPath).isSocket()) throw new Error(`${config.socketPath} is not a socket; left in place`);
      await rm(config.socketPath, { force: true });
      const out = [`CNI socket ${config.socketPath}`];
      // The default directory (/var/run/sluice) is sluice's own; another directory is left alone.
      const dir = dirname(config.socketPath);
      if (basename(dir) === 'sluice' && (await readdir(dir).catch(() => ['?'])).length === 0 && (await rmdir(dir).then(() => true, () => false))) out.push(`directory ${dir}`);
      return out;
    });
    if (failed.length === 0) {
      await step('remove the state dir', async () => {
        if (!existsSync(config.stateDir)) return [];
        const left = await readdir(config.stateDir);
        // E.g. the DaemonSet's OVS database (ovsdb/) lives below it and is in use until the end.
        if (left.length) return `state dir ${config.stateDir} kept: it holds ${left.join(', ')}, which the agent did not write`;
        // A mount point (the DaemonSet's hostPath) cannot be removed: it is empty, which is enough.
        if (await rmdir(config.stateDir).then(() => true, () => false)) return `state dir ${config.stateDir}`;
        return `state dir ${config.stateDir} is empty (a mount point: the directory itself stays)`;
      });
    }
  } finally {
    await hostnet.close();
  }
  return { done: done.lines, failed };
}
