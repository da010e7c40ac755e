/**
 * Executes a CNI network configuration list the way a container runtime does (CNI spec 1.x,
 * like libcni): ADD runs the plugins in order, each getting the previous plugin's result as
 * `prevResult`; DEL runs them in reverse and CHECK in order, both with the cached ADD result as
 * `prevResult`. Plugins run inside the node namespace. The final ADD result is cached under the
 * node's state dir, in libcni's format and layout (results/<network>-<id>-<ifname>), so DEL/CHECK
 * work from a fresh process and sluice-agent reads it as it reads a real runtime's cache.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Conflist, PluginConf } from './cni-config.js';
import { run } from './exec.js';
import { cniBinDir, cniCacheDir, netnsPath, nodeNetns, nodeStateDir } from './names.js';

export type CniCommand = 'ADD' | 'DEL' | 'CHECK';

export interface CniInvocation {
  lab: string;
  node: string;
  containerId: string;
  /** The Pod's network namespace name (under /var/run/netns). */
  netns: string;
  podNamespace: string;
  podName: string;
  ifName?: string;
}

export interface CniIp { address: string; gateway?: string; interface?: number; version?: string }
export interface CniResult {
  cniVersion: string;
  interfaces?: { name: string; mac?: string; sandbox?: string }[];
  ips?: CniIp[];
  routes?: { dst: string; gw?: string }[];
  dns?: unknown;
  [k: string]: unknown;
}

/** A plugin answered with a CNI error object (or died without one). */
export class CniPluginError extends Error {
  constructor(
    readonly plugin: string,
    readonly command: CniCommand,
    readonly code: number,
    readonly msg: string,
    readonly details: string | undefined,
    readonly stderr: string,
  ) {
    super(`CNI ${command} failed in plugin ${plugin}: [${code}] ${msg}${details ? ` (${details})` : ''}`);
  }
}

/** One cached ADD, in libcni's format (cachedInfo, kind cniCacheV1): what sluice-agent adopts running Pods from. */
interface CacheEntry {
  kind: 'cniCacheV1';
  containerId: string;
  /** The network configuration list's bytes, base64 (libcni marshals a []byte). */
  config: string;
  ifName: string;
  networkName: string;
  netns: string;
  cniArgs: [string, string][];
  result: CniResult;
}

/** libcni's layout: `<cacheDir>/results/<network>-<containerID>-<ifName>`. */
export const cacheFile = (inv: CniInvocation, network: string): string =>
  join(cniCacheDir(inv.lab, inv.node), 'results', `${network}-${inv.containerId}-${inv.ifName ?? 'eth0'}`);

export function readCache(inv: CniInvocation, network: string): { config: Conflist; result: CniResult } | null {
  try {
    const entry = JSON.parse(readFileSync(cacheFile(inv, network), 'utf8')) as CacheEntry;
    return { config: JSON.parse(Buffer.from(entry.config, 'base64').toString('utf8')) as Conflist, result: entry.result };
  } catch {
    return null;
  }
}

/** The networks this container has a cached ADD for. */
export function cachedNetworks(inv: CniInvocation): string[] {
  const dir = join(cniCacheDir(inv.lab, inv.node), 'results');
  if (!existsSync(dir)) return [];
  const suffix = `-${inv.containerId}-${inv.ifName ?? 'eth0'}`;
  return readdirSync(dir).filter((f) => f.endsWith(suffix)).map((f) => f.slice(0, -suffix.length));
}

/** The cached ADD for this container: by network name when known, else any network's entry. */
function findCache(inv: CniInvocation, network: string | undefined): { config: Conflist; result: CniResult } | null {
  if (network) return readCache(inv, network);
  const dir = join(cniCacheDir(inv.lab, inv.node), 'results');
  if (!existsSync(dir)) return null;
  const suffix = `-${inv.containerId}-${inv.ifName ?? 'eth0'}`;
  const file = readdirSync(dir).find((f) => f.endsWith(suffix));
  return file ? readCache(inv, file.slice(0, -suffix.length)) : null;
}

const cniArgPairs = (inv: CniInvocation): [string, string][] => [
  ['IgnoreUnknown', '1'], ['K8S_POD_NAMESPACE', inv.podNamespace], ['K8S_POD_NAME', inv.podName], ['K8S_POD_INFRA_CONTAINER_ID', inv.containerId],
];

export function cniArgs(inv: CniInvocation): string {
  return cniArgPairs(inv).map(([k, v]) => `${k}=${v}`).join(';');
}

/** stdin for one plugin: its own config plus the list's name/cniVersion and, when given, prevResult. */
export function pluginStdin(list: Conflist, plugin: PluginConf, prevResult: CniResult | undefined): Record<string, unknown> {
  const conf: Record<string, unknown> = { ...plugin, name: list.name, cniVersion: list.cniVersion };
  if (prevResult !== undefined) conf.prevResult = prevResult;
  return conf;
}

function validateConflist(list: Conflist): void {
  if (!list || typeof list.name !== 'string' || !list.name) throw new Error('conflist: "name" must be a non-empty string');
  if (typeof list.cniVersion !== 'string') throw new Error(`conflist ${list.name}: "cniVersion" must be a string`);
  if (!Array.isArray(list.plugins) || list.plugins.length === 0) throw new Error(`conflist ${list.name}: "plugins" must be a non-empty array`);
  list.plugins.forEach((p, i) => {
    if (!p || typeof p.type !== 'string' || !/^[A-Za-z0-9._-]+$/.test(p.type)) {
      throw new Error(`conflist ${list.name}: plugins[${i}].type must be a plugin file name`);
    }
  });
}

/**
 * A plugin sees the node's filesystem, as on a real node: when a DaemonSet Pod on the node has a
 * hostPath /var/run/sluice (the agent's socket dir, lab/cluster/podspec.ts maps it to the node's private
 * root), that directory is bind-mounted on /run/sluice in the mount namespace `ip netns exec`
 * makes for the plugin alone, so sluice-cni finds its node's agent at the default socket path.
 * Returns the command prefix that does it (none when the node has no such directory).
 */
export function nodeFilesystemView(lab: string, node: string): string[] {
  const src = join(nodeStateDir(lab, node), 'root', 'run', 'sluice');
  if (!existsSync(src)) return [];
  // The mount point must exist in the machine's /run; it stays an empty directory there.
  mkdirSync('/run/sluice', { recursive: true });
  return ['sh', '-c', 'mount --bind "$1" /run/sluice && shift && exec "$@"', 'sh', src];
}

/** The environment a runtime gives a plugin for `command` on `inv` (the CNI_* variables and a PATH). */
export function pluginEnv(inv: CniInvocation, command: CniCommand): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: command,
    CNI_CONTAINERID: inv.containerId,
    CNI_NETNS: netnsPath(inv.netns),
    CNI_IFNAME: inv.ifName ?? 'eth0',
    CNI_ARGS: cniArgs(inv),
    CNI_PATH: cniBinDir(inv.lab),
  };
}

async function execPlugin(inv: CniInvocation, command: CniCommand, list: Conflist, plugin: PluginConf, prevResult: CniResult | undefined): Promise<string> {
  const env = pluginEnv(inv, command);
  const file = join(cniBinDir(inv.lab), plugin.type);
  if (!existsSync(file)) {
    throw new CniPluginError(plugin.type, command, 999, `failed to find plugin "${plugin.type}" in path [${cniBinDir(inv.lab)}]`, undefined, '');
  }
  const input = JSON.stringify(pluginStdin(list, plugin, prevResult));
  const res = await run('ip', ['netns', 'exec', nodeNetns(inv.lab, inv.node), ...nodeFilesystemView(inv.lab, inv.node), file], { env, input, allowFail: true, timeoutMs: 60_000 });
  if (res.exitCode === 0) return res.stdout;
  let err: { code?: unknown; msg?: unknown; details?: unknown } = {};
  try {
    err = JSON.parse(res.stdout) as typeof err;
  } catch {
    // not a CNI error object: report what we have
  }
  throw new CniPluginError(
    plugin.type,
    command,
    typeof err.code === 'number' ? err.code : 999,
    typeof err.msg === 'string' ? err.msg : `exit ${res.exitCode}: ${res.stderr.trim() || res.stdout.trim() || 'no output'}`,
    typeof err.details === 'string' ? err.details : undefined,
    res.stderr,
  );
}

export async function cniAdd(inv: CniInvocation, list: Conflist): Promise<CniResult> {
  validateConflist(list);
  let prev: CniResult | undefined;
  for (const plugin of list.plugins) {
    const out = await execPlugin(inv, 'ADD', list, plugin, prev);
    try {
      prev = JSON.parse(out) as CniResult;
    } catch {
      throw new CniPluginError(plugin.type, 'ADD', 999, 'ADD printed no valid result on stdout', out.slice(0, 200), '');
    }
  }
  const entry: CacheEntry = {
    kind: 'cniCacheV1', containerId: inv.containerId, config: Buffer.from(JSON.stringify(list)).toString('base64'), ifName: inv.ifName ?? 'eth0',
    networkName: list.name, netns: netnsPath(inv.netns), cniArgs: cniArgPairs(inv), result: prev!,
  };
  mkdirSync(dirname(cacheFile(inv, list.name)), { recursive: true });
  writeFileSync(cacheFile(inv, list.name), JSON.stringify(entry), { mode: 0o600 });
  return prev!;
}

/** DEL in reverse order with the cached ADD result; uses the cached config when none is given. Removes the cache. */
export async function cniDel(inv: CniInvocation, list?: Conflist): Promise<void> {
  const cached = findCache(inv, list?.name);
  const config = list ?? cached?.config;
  if (!config) return; // never added (or already deleted) and nothing to run
  validateConflist(config);
  for (const plugin of [...config.plugins].reverse()) {
    await execPlugin(inv, 'DEL', config, plugin, cached?.result);
  }
  rmSync(cacheFile(inv, config.name), { force: true });
}

/** CHECK in order with the cached ADD result; throws CniPluginError from the first plugin that objects. */
export async function cniCheck(inv: CniInvocation, list?: Conflist): Promise<void> {
  const cached = findCache(inv, list?.name);
  if (!cached) throw new Error(`CNI CHECK: no cached ADD result for container ${inv.containerId} on ${inv.node}`);
  const config = list ?? cached.config;
  for (const plugin of config.plugins) await execPlugin(inv, 'CHECK', config, plugin, cached.result);
}
