/**
 * The runtime's CNI result cache, as libcni (containerd, CRI-O) writes it: one JSON file per
 * attachment, `<cacheDir>/results/<network>-<containerID>-<ifName>`, holding the container id, the
 * interface, the network namespace (libcni >= 1.1), CNI_ARGS (K8S_POD_NAMESPACE/NAME) and the
 * result of the ADD. The runtime's later DEL and CHECK use the same container id and interface.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type CniResult, interfaceIPs } from './result.js';

/** One attachment as the runtime's CNI library cached it. */
export interface CachedAttachment {
  file: string;
  containerId: string;
  ifName: string;
  networkName: string;
  /** The network namespace path (libcni ≥ 1.1 records it; older ones only in the result's sandbox). */
  netns?: string;
  podNamespace?: string;
  podName?: string;
  /** The addresses (both families, canonical) the primary gave the interface. */
  ips: string[];
  result: CniResult;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** Parses one libcni cache file; a string says why it is not usable. */
export function parseCacheEntry(file: string, text: string): CachedAttachment | string {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return `${file}: not JSON (${(err as Error).message})`;
  }
  const o = raw as Record<string, unknown> | null;
  if (!o || typeof o !== 'object' || Array.isArray(o)) return `${file}: not a JSON object`;
  if (o.kind !== 'cniCacheV1') return `${file}: kind ${JSON.stringify(o.kind)} is not cniCacheV1`;
  const containerId = str(o.containerId);
  const ifName = str(o.ifName);
  const networkName = str(o.networkName);
  if (!containerId || !ifName || !networkName) return `${file}: containerId, ifName and networkName are required`;
  const result = o.result as CniResult | undefined;
  if (!result || typeof result !== 'object' || !Array.isArray(result.ips)) return `${file}: no result with ips`;
  const args = new Map<string, string>();
  if (Array.isArray(o.cniArgs)) {
    for (const kv of o.cniArgs) if (Array.isArray(kv) && typeof kv[0] === 'string' && typeof kv[1] === 'string') args.set(kv[0], kv[1]);
  }
  const ifaces = Array.isArray(result.interfaces) ? result.interfaces : [];
  const sandbox = ifaces.find((i) => i && i.name === ifName && typeof i.sandbox === 'string' && i.sandbox)?.sandbox;
  const ips = interfaceIPs(result, ifName);
  const netns = str(o.netns) ?? sandbox;
  const podNamespace = args.get('K8S_POD_NAMESPACE');
  const podName = args.get('K8S_POD_NAME');
  return {
    file, containerId, ifName, networkName, ips, result,
    ...(netns ? { netns } : {}), ...(podNamespace ? { podNamespace } : {}), ...(podName ? { podName } : {}),
  };
}

/** Reads every cache entry under `<cacheDir>/results`; unreadable or foreign files are listed in `problems`. */
export async function readCniCache(cacheDir: string): Promise<{ entries: CachedAttachment[]; problems: string[] }> {
  const dir = join(cacheDir, 'results');
  let files: string[];
  try {
    files = (await readdir(dir)).sort();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return { entries: [], problems: code === 'ENOENT' ? [] : [`${dir}: ${(err as Error).message}`] };
  }
  const entries: CachedAttachment[] = [];
  const problems: string[] = [];
  for (const f of files) {
    try {
      const parsed = parseCacheEntry(join(dir, f), await readFile(join(dir, f), 'utf8'));
      if (typeof parsed === 'string') problems.push(parsed);
      else entries.push(parsed);
    } catch (err) {
      problems.push(`${join(dir, f)}: ${(err as Error).message}`);
    }
  }
  return { entries, problems };
}
