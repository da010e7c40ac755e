/**
 * Node-side install/uninstall of the CNI part (run by the DaemonSet's init container, or by an
 * operator through `sluicectl cni install|uninstall`): copy the plugin binary into the CNI bin
 * directory and chain sluice into the primary's configuration. Files are replaced atomically
 * (write + rename), so the container runtime never reads a half-written configuration.
 */
import { copyFile, chmod, readdir, readFile, rename, writeFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { CONF_EXTENSIONS, type ChainPlan, type ConfFile, confListText, planChain, runtimeConfig } from './chainstate.js';
import { ConfListError, isChained, sluiceEntry, unchainSluice } from './conflist.js';

export interface CniInstallOptions {
  confDir: string;            // /etc/cni/net.d
  binDir: string;             // /opt/cni/bin
  pluginBinary?: string | undefined;      // the built sluice-cni executable to copy (omit to only chain)
  socketPath?: string | undefined;        // written into sluice's entry when not the default
}

/** Puts a file at `path` atomically: `write` fills a temporary file beside it, renamed over `path`. */
async function replaceAtomically(path: string, write: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${path}.sluice-tmp`;
  await write(tmp);
  await rename(tmp, path);
}

/** The directory's configuration files (names and contents) as the runtime would list them. */
export async function readConfDir(confDir: string): Promise<ConfFile[]> {
  const names = (await readdir(confDir).catch(() => [] as string[])).filter((f) => CONF_EXTENSIONS.test(f)).sort();
  const files: ConfFile[] = [];
  for (const name of names) {
    const text = await readFile(join(confDir, name), 'utf8').catch(() => undefined);
    if (text !== undefined) files.push({ name, text });
  }
  return files;
}

/** Carries out a chain plan: an atomic write, then the single-plugin file it replaces is removed. */
export async function applyChainPlan(confDir: string, plan: Extract<ChainPlan, { action: 'write' }>): Promise<string> {
  const target = join(confDir, plan.target);
  await replaceAtomically(target, (tmp) => writeFile(tmp, plan.text, { mode: 0o644 }));
  if (plan.remove) await unlink(join(confDir, plan.remove)).catch(() => undefined);
  return target;
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
  const plan = planChain(await readConfDir(opts.confDir), sluiceEntry(opts.socketPath));
  if (plan.action === 'none' || plan.action === 'refuse') throw new ConfListError(`${opts.confDir}: ${plan.why}`);
  if (plan.action === 'keep') return { config: join(opts.confDir, plan.file), changed: false };
  return { config: await applyChainPlan(opts.confDir, plan), changed: true };
}

/**
 * Takes sluice out of the runtime's configuration. The plugin binary goes first: an agent that keeps
 * the chain (daemon/chainkeeper.ts) chains only while the binary is there, so it cannot put sluice
 * back between the two steps; a Pod created in between fails its ADD and is retried.
 */
export async function uninstallCni(opts: Pick<CniInstallOptions, 'confDir' | 'binDir'>): Promise<{ config?: string; changed: boolean }> {
  let changed = false;
  await unlink(join(opts.binDir, 'sluice-cni')).then(() => { changed = true; }, () => undefined);
  const { file, list } = runtimeConfig(await readConfDir(opts.confDir));
  if (!file || !list) return { changed };
  const path = join(opts.confDir, file.name);
  if (isChained(list)) {
    await replaceAtomically(path, (tmp) => writeFile(tmp, confListText(unchainSluice(list)), { mode: 0o644 }));
    changed = true;
  }
  return { config: path, changed };
}
