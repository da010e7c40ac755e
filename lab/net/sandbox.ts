/**
 * Pod sandboxes, as a container runtime makes them: a network namespace with lo up, the node's
 * conflist run through the CNI runner (ADD/DEL), then the Pod's workload. hostNetwork Pods get no
 * namespace: their workload runs in the node namespace and their IP is the node's.
 *
 * TX checksum offload: with OVS's userspace datapath a Pod's eth0 must not offload TX checksums.
 * When sluice-cni is chained that is the agent's job (as on a real EKS node, where nobody else
 * would do it), so the lab leaves it alone and a missing agent step shows up as broken traffic.
 * With the primary alone the lab turns it off itself, so Pods look the same to an agent that
 * attaches them later. `txChecksumOff` overrides this.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { Conflist } from './cni-config.js';
import { cachedNetworks, cniAdd, cniDel, type CniInvocation, type CniResult } from './cni-runner.js';
import { run, runIn } from './exec.js';
import { readLabInfo } from './lab.js';
import { conflistPath, cniCacheDir, hasIPv6, nodeIP, nodeIPv6, nodeIndex, nodeNetns, podHash, podNetns, podsStateDir, stateDir } from './names.js';
import { ensureNetns, listNetns } from './topology.js';
import { startWorkload, stopWorkload, workloadPorts } from './workload-process.js';

export interface PodPort {
  port: number;
  protocol?: 'TCP' | 'UDP' | 'SCTP' | string;
}

export interface PodSandboxSpec {
  lab: string;
  node: string;
  namespace: string;
  name: string;
  /** Defaults to a stable id derived from the Pod's namespace/name. */
  containerId?: string;
  hostNetwork?: boolean;
  ports?: PodPort[];
  /** Defaults to the node's conflist file. */
  conflist?: Conflist;
  txChecksumOff?: 'auto' | 'always' | 'never';
  /** The workload talks from its start (workload.js --talk): "udp,IP,PORT,EVERY_MS,FOR_MS" (when the sandbox's creation began and when its CNI ADD answered are added). */
  talk?: string;
}

export interface PodSandbox {
  namespace: string;
  name: string;
  node: string;
  containerId: string;
  hostNetwork: boolean;
  /** Network namespace name the Pod's processes run in (the node's for hostNetwork). */
  netns: string;
  ips: string[];
  /** The final CNI ADD result; null for hostNetwork Pods. */
  result: CniResult | null;
  txChecksumOffByLab: boolean;
}

const metaFile = (lab: string, ns: string, name: string) => join(podsStateDir(lab), `${podHash(ns, name)}.json`);
const pidFile = (lab: string, ns: string, name: string) => join(podsStateDir(lab), `${podHash(ns, name)}.workload.pid`);
const logFile = (lab: string, ns: string, name: string) => join(podsStateDir(lab), `${podHash(ns, name)}.workload.log`);
/** What a talking workload recorded (workload.ts TalkRecord). */
export const talkFile = (lab: string, ns: string, name: string) => `${pidFile(lab, ns, name)}.talk.json`;

export const defaultContainerId = (namespace: string, name: string): string => `lab${podHash(namespace, name)}${'0'.repeat(53)}`;

export function readPodSandbox(lab: string, namespace: string, name: string): PodSandbox | null {
  try {
    return JSON.parse(readFileSync(metaFile(lab, namespace, name), 'utf8')) as PodSandbox;
  } catch {
    return null;
  }
}

export function listPodSandboxes(lab: string): PodSandbox[] {
  if (!existsSync(podsStateDir(lab))) return [];
  return readdirSync(podsStateDir(lab))
    .filter((f) => /^[0-9a-f]{8}\.json$/.test(f))
    .map((f) => JSON.parse(readFileSync(join(podsStateDir(lab), f), 'utf8')) as PodSandbox);
}

function readConflist(lab: string, node: string): Conflist {
  const file = conflistPath(lab, node);
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Conflist;
  } catch (err) {
    throw new Error(`cannot read node ${node}'s conflist ${file}: ${(err as Error).message}`);
  }
}

/** The node's configuration as the runtime would load it now, if it is the network the Pod was ADDed to. */
function currentConflist(lab: string, inv: CniInvocation): Conflist | undefined {
  try {
    const list = readConflist(lab, inv.node);
    return cachedNetworks(inv).includes(list.name) ? list : undefined;
  } catch {
    return undefined;
  }
}

function checkSpec(spec: PodSandboxSpec): void {
  if (!existsSync(stateDir(spec.lab))) throw new Error(`lab ${spec.lab} does not exist (no ${stateDir(spec.lab)})`);
  nodeIndex(spec.node);
  const dns = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
  if (!dns.test(spec.namespace ?? '')) throw new Error(`Pod namespace ${JSON.stringify(spec.namespace)} is not a DNS name`);
  if (!dns.test(spec.name ?? '')) throw new Error(`Pod name ${JSON.stringify(spec.name)} is not a DNS name`);
  for (const p of spec.ports ?? []) {
    if (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535) throw new Error(`Pod ${spec.namespace}/${spec.name}: port ${JSON.stringify(p.port)} is not 1-65535`);
  }
}

const ipsOf = (result: CniResult): string[] => (result.ips ?? []).map((i) => i.address.split('/')[0]!);

export async function createPodSandbox(spec: PodSandboxSpec): Promise<PodSandbox> {
  const since = Date.now();
  checkSpec(spec);
  const { lab, node, namespace, name } = spec;
  const existing = readPodSandbox(lab, namespace, name);
  if (existing) {
    if (existing.node !== node) throw new Error(`Pod ${namespace}/${name} already has a sandbox on ${existing.node}`);
    return existing;
  }
  mkdirSync(podsStateDir(lab), { recursive: true });
  const containerId = spec.containerId ?? defaultContainerId(namespace, name);
  const ports = workloadPorts(spec.ports ?? []);
  if (spec.hostNetwork) {
    const netns = nodeNetns(lab, node);
    await startWorkload(netns, ports, pidFile(lab, namespace, name), logFile(lab, namespace, name));
    // The node's addresses, as a kubelet reports them for a hostNetwork Pod: IPv6 beside IPv4 once the lab has it.
    const ips = [nodeIP(node), ...(hasIPv6(readLabInfo(lab)?.ipFamily ?? 'ipv4') ? [nodeIPv6(node)] : [])];
    const sandbox: PodSandbox = { namespace, name, node, containerId, hostNetwork: true, netns, ips, result: null, txChecksumOffByLab: false };
    writeFileSync(metaFile(lab, namespace, name), JSON.stringify(sandbox, null, 2));
    return sandbox;
  }

  const netns = podNetns(lab, namespace, name);
  const conflist = spec.conflist ?? readConflist(lab, node);
  const inv: CniInvocation = { lab, node, containerId, netns, podNamespace: namespace, podName: name };
  await ensureNetns(netns);
  try {
    const result = await cniAdd(inv, conflist);
    const added = Date.now();
    const mode = spec.txChecksumOff ?? 'auto';
    const txOff = mode === 'always' || (mode === 'auto' && conflist.plugins.length === 1);
    if (txOff) await runIn(netns, 'ethtool', ['-K', 'eth0', 'tx', 'off']);
    await startWorkload(netns, ports, pidFile(lab, namespace, name), logFile(lab, namespace, name), spec.talk && `${spec.talk},${since},${added}`);
    const sandbox: PodSandbox = { namespace, name, node, containerId, hostNetwork: false, netns, ips: ipsOf(result), result, txChecksumOffByLab: txOff };
    writeFileSync(metaFile(lab, namespace, name), JSON.stringify(sandbox, null, 2));
    return sandbox;
  } catch (err) {
    // Like a runtime after a failed sandbox: tear down whatever part exists, then report the first error.
    await stopWorkload(pidFile(lab, namespace, name)).catch(() => undefined);
    await cniDel(inv, conflist).catch(() => undefined);
    await run('ip', ['netns', 'del', netns], { allowFail: true });
    throw err;
  }
}

/** Finds a Pod's cached CNI invocation when its sandbox record is gone (e.g. a crash mid-create). */
function findCachedInvocation(lab: string, namespace: string, name: string): CniInvocation | null {
  if (!existsSync(stateDir(lab))) return null;
  for (const node of readdirSync(stateDir(lab)).filter((d) => /^node-\d+$/.test(d))) {
    const dir = join(cniCacheDir(lab, node), 'results');
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir)) {
      try {
        // libcni's cache entry: CNI_ARGS as pairs, the netns as a path.
        const c = JSON.parse(readFileSync(join(dir, f), 'utf8')) as { containerId: string; netns: string; cniArgs?: [string, string][] };
        const args = new Map(c.cniArgs ?? []);
        if (args.get('K8S_POD_NAMESPACE') === namespace && args.get('K8S_POD_NAME') === name) {
          return { lab, node, containerId: c.containerId, netns: basename(c.netns), podNamespace: namespace, podName: name };
        }
      } catch {
        // unreadable cache entry: not ours to judge here
      }
    }
  }
  return null;
}

/** Stops the workload, runs CNI DEL, deletes the namespace. Safe to repeat and after a partial create. */
export async function deletePodSandbox(spec: { lab: string; namespace: string; name: string }): Promise<void> {
  const { lab, namespace, name } = spec;
  const sandbox = readPodSandbox(lab, namespace, name);
  await stopWorkload(pidFile(lab, namespace, name));
  if (!sandbox?.hostNetwork) {
    const inv = sandbox
      ? { lab, node: sandbox.node, containerId: sandbox.containerId, netns: sandbox.netns, podNamespace: namespace, podName: name }
      : findCachedInvocation(lab, namespace, name);
    // As containerd and CRI-O do: DEL runs the node's current configuration of the Pod's network
    // (with the cached ADD result as prevResult), not the one the Pod was created with, so a Pod
    // created before sluice was chained is DELeted through sluice too. A Pod of another network
    // (created with an explicit configuration) is DELeted with the configuration it was created with.
    if (inv) await cniDel(inv, currentConflist(lab, inv));
    const netns = podNetns(lab, namespace, name);
    if ((await listNetns()).includes(netns)) await run('ip', ['netns', 'del', netns]);
  }
  rmSync(metaFile(lab, namespace, name), { force: true });
  rmSync(logFile(lab, namespace, name), { force: true });
}
