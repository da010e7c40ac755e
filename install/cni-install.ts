/**
 * Node-side install/uninstall of the CNI part (run by the DaemonSet's init container, or by an
 * operator through `sluicectl cni install|uninstall`): copy the plugin binary into the CNI bin
 * directory and chain sluice into the primary's configuration. Files are replaced atomically
 * (write + rename), so the container runtime never reads a half-written configuration.
 */
import { copyFile, chmod, readdir, readFile, rename, writeFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { chainSluice, ConfListError, isChained, toConfList, unchainSluice, type ConfList } from './conflist.js';

export interface CniInstallOptions {
  confDir: string;            // /etc/cni/net.d
  binDir: string;             // /opt/cni/bin
  pluginBinary?: string;      // the built sluice-cni executable to copy (omit to only chain)
  socketPath?: string;        // written into sluice's entry when not the default
}

/** Puts a file at `path` atomically: `write` fills a temporary file beside it, renamed over `path`. */
async function replaceAtomically(path: string, write: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${path}.sluice-tmp`;
  await write(tmp);
  await rename(tmp, path);
}

/** A configuration list as it is written to the configuration directory. */
const conflistText = (list: ConfList): string => JSON.stringify(list, null, 2) + '\n';

/** The primary's config: the lexically first .conflist/.conf/.json file, as the runtime picks it. */
export async function findPrimaryConfig(confDir: string): Promise<string> {
  const files = (await readdir(confDir).catch(() => [] as string[]))
    .filter((f) => /\.(conflist|conf|json)$/.test(f))
    .sort();
  if (files.length === 0) {
    throw new ConfListError(`no CNI configuration in ${confDir}: install the primary CNI first (sluice chains after it)`);
  }
  return join(confDir, files[0]!);
}

async function readConfList(path: string): Promise<ConfList> {
  let doc: unknown;
  try {
    doc = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new ConfListError(`${path}: not valid JSON (${(err as Error).message})`);
  }
  return toConfList(doc, path);
}

/** Returns the path of the configuration now in use and whether anything changed. */
export async function installCni(opts: CniInstallOptions): Promise<{ config: string; changed: boolean }> {
  if (opts.pluginBinary) {
    const binary = opts.pluginBinary;
    await replaceAtomically(join(opts.binDir, 'sluice-cni'), async (tmp) => {
      await copyFile(binary, tmp);
      await chmod(tmp, 0o755);
    });
  }
  const path = await findPrimaryConfig(opts.confDir);
  const list = await readConfList(path);
  const chained = chainSluice(list, opts.socketPath ? { socketPath: opts.socketPath } : {});
  const text = conflistText(chained);
  // A single-plugin .conf becomes a .conflist of the same base name (the runtime reads both).
  const target = path.endsWith('.conflist') ? path : path.replace(/\.(conf|json)$/, '.conflist');
  const before = await readFile(target, 'utf8').catch(() => undefined);
  if (before === text) return { config: target, changed: false };
  await replaceAtomically(target, (tmp) => writeFile(tmp, text, { mode: 0o644 }));
  if (target !== path) await unlink(path);
  return { config: target, changed: true };
}

export async function uninstallCni(opts: Pick<CniInstallOptions, 'confDir' | 'binDir'>): Promise<{ config?: string; changed: boolean }> {
  let path: string;
  try {
    path = await findPrimaryConfig(opts.confDir);
  } catch {
    return { changed: false };
  }
  const list = await readConfList(path);
  let changed = false;
  if (isChained(list)) {
    await replaceAtomically(path, (tmp) => writeFile(tmp, conflistText(unchainSluice(list)), { mode: 0o644 }));
    changed = true;
  }
  await unlink(join(opts.binDir, 'sluice-cni')).then(() => { changed = true; }, () => undefined);
  return { config: path, changed };
}
