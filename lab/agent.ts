/**
 * Starting sluice-agent in a lab node (`sluice-lab up --sluice`): the agent config file, the
 * detached process in the node namespace, and the wait for its CNI socket. Kept apart from the
 * rest of the control plane because the agent is developed separately.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { dumpYaml } from '../daemon/kube-yaml.js';
import { sleep } from './net/exec.js';
import { readLabInfo } from './net/lab.js';
import { cniBinDir, cniCacheDir, cniConfDir, type IpFamily, nodeNetns, nodeStateDir, ovsDir, repoRoot, SERVICE_CIDR, SERVICE_CIDR6, sluiceSocketPath } from './net/names.js';
import { AGENT_NODE_FLAGS, agentEnv } from '../daemon/node-flags.js';
import { savedControllerModeSettings } from './controller.js';

export const agentConfigPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'agent.yaml');
export const agentLogPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'agent.log');

/** A new Pod's CNI ADD as its node's agent logged it: how long it asked the Pod's span, the nodes it guarded the Pod from, and when the last guard was lifted. */
/** In controller mode, `span`: the Nodes the controller named (the Pod's own included); `confirmed`: those it confirmed from their agents' reports (not asked). */
export interface NewPodAdmission { ms: number; guarded: string[]; span?: number; confirmed?: number; liftedAt?: number }

/** Every new Pod's ADD in the log of `node`'s agent, by namespace/name (the last ADD of each). */
export function newPodAdmissions(lab: string, node: string): Map<string, NewPodAdmission> {
  const out = new Map<string, NewPodAdmission>();
  let text = '';
  try {
    text = readFileSync(agentLogPath(lab, node), 'utf8');
  } catch {
    return out;
  }
  for (const l of text.split('\n')) {
    if (!l.includes('"new Pod: ')) continue;
    try {
      const o = JSON.parse(l) as { msg?: string; pod?: string; ms?: number; guarded?: string[]; span?: unknown; confirmed?: number; time?: number };
      if (o.msg === 'new Pod: span asked' && o.pod && typeof o.ms === 'number') {
        out.set(o.pod, {
          ms: o.ms,
          guarded: o.guarded ?? [],
          // Standalone agents log the span's Nodes, controller-mode agents their number.
          ...(Array.isArray(o.span) ? { span: o.span.length } : typeof o.span === 'number' ? { span: o.span } : {}),
          ...(typeof o.confirmed === 'number' ? { confirmed: o.confirmed } : {}),
        });
      }
      const added = o.pod ? out.get(o.pod) : undefined;
      if (o.msg === 'new Pod: guard lifted for a node' && added && typeof o.time === 'number') added.liftedAt = o.time;
    } catch {
      // not a log record
    }
  }
  return out;
}
export const agentPidPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'agent.pid');
export const agentAuditLogPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'np.log');
export const nodeKubeconfigPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'kubeconfig');

/** The agent's config (the contract with daemon/): pure. */
export function agentConfig(lab: string, node: string, family: IpFamily = 'ipv4'): Record<string, unknown> {
  return {
    nodeName: node,
    kubeconfig: nodeKubeconfigPath(lab, node),
    bridge: 'br-int',
    datapath: 'netdev',
    gateway: 'antrea-gw0',
    // Both ranges once Pods have IPv6: the pipeline must treat IPv6 ClusterIPs as Services too.
    serviceCIDRs: family === 'ipv4' ? [SERVICE_CIDR] : [SERVICE_CIDR, SERVICE_CIDR6],
    socketPath: sluiceSocketPath(lab, node),
    ovsRunDir: ovsDir(lab, node),
    stateDir: join(nodeStateDir(lab, node), 'agent'),
    healthAddress: '127.0.0.1:10349',
    logLevel: 'info',
    // The lab shares the machine's /etc: registering the table name there would outlive `down`.
    rtTablesFile: '',
    // The audit log stays with the node's state (removed by `down`), not in the machine's /var/log.
    auditLogPath: agentAuditLogPath(lab, node),
    // The node's own CNI configuration (as the DaemonSet's /host/etc/cni/net.d): the agent keeps sluice chained there.
    cniConfDir: cniConfDir(lab, node),
    cniBinDir: cniBinDir(lab),
    // The node's runtime CNI cache (libcni's layout): running Pods are adopted from it.
    cniCacheDir: cniCacheDir(lab, node),
  };
}

/**
 * Writes agent.yaml (the lab's settings, the node's controller-mode settings when it has them, with
 * `overrides` on top), starts the agent detached in the
 * node namespace, waits for its socket.
 */
export async function startAgent(lab: string, node: string, timeoutMs = 30_000, env: Record<string, string> = {}, overrides: Record<string, unknown> = {}): Promise<number> {
  const main = join(repoRoot(), 'dist', 'daemon', 'main.js');
  if (!existsSync(main)) throw new Error(`--sluice: ${main} is missing (the agent is not built)`);
  const config = agentConfigPath(lab, node);
  mkdirSync(join(nodeStateDir(lab, node), 'agent'), { recursive: true });
  writeFileSync(config, dumpYaml({ ...agentConfig(lab, node, readLabInfo(lab)?.ipFamily ?? 'ipv4'), ...savedControllerModeSettings(lab, node), ...overrides }));
  const log = openSync(agentLogPath(lab, node), 'a');
  const child = spawn('ip', ['netns', 'exec', nodeNetns(lab, node), process.execPath, ...AGENT_NODE_FLAGS, main, '--config', config], {
    detached: true,
    env: { ...agentEnv(), ...process.env, ...env },
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  let exited: number | null | undefined;
  child.on('exit', (code) => (exited = code));
  child.unref();
  writeFileSync(agentPidPath(lab, node), `${child.pid}\n`);
  const socket = sluiceSocketPath(lab, node);
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (existsSync(socket)) return child.pid!;
    if (exited !== undefined) break;
    await sleep(100);
  }
  const tail = readFileSync(agentLogPath(lab, node), 'utf8').trim().split('\n').slice(-5).join('\n  ');
  throw new Error(
    `sluice-agent on ${node} ${exited !== undefined ? `exited (${exited})` : `did not create ${socket} within ${timeoutMs / 1000} s`}; log ${agentLogPath(lab, node)}:\n  ${tail}`,
  );
}
