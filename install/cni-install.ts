/**
 * Node-side install/uninstall of the CNI part (run by the DaemonSet's init container, or by an
 * operator through `sluicectl cni install|uninstall`): copy the plugin's executables into the CNI bin
 * directory and chain sluice into the primary's configuration. Files are replaced atomically
 * (write + rename), so the container runtime never reads a half-written configuration.
 */
import { access, copyFile, chmod, readdir, readFile, rename, writeFile, unlink } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { CONF_EXTENSIONS, type ChainPlan, type ConfFile, confListText, planChain, runtimeConfig } from './chainstate.js';
import { ConfListError, isChained, SLUICE_PLUGIN_TYPE, sluiceEntry, unchainSluice } from './conflist.js';

/**
 * The whole plugin, which the front end (the executable named by the plugin type) execs from its
 * own directory for what it does not forward to the agent (cni/native/sluice-cni.c).
 */
export const STANDALONE_PLUGIN_FILE = 'sluice-cni-standalone';

export interface CniInstallOptions {
  confDir: string;            // /etc/cni/net.d
  binDir: string;             // /opt/cni/bin
  pluginBinary?: string | undefined;      // the built sluice-cni front end to copy, with sluice-cni-standalone beside it (omit to only chain)
  socketPath?: string | undefined;        // written into sluice's entry when not the default
}

/**
 * Puts a file at `path` atomically: `write` fills a temporary file beside it, renamed over `path`.
 * The temporary name is this writer's own (two installers may share a directory: on a node during
 * a rollout, or nodes sharing one bin directory), hidden, and not a configuration file name the
 * runtime would read; it is removed when anything fails, and the error names the file.
 */
async function replaceAtomically(path: string, write: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = join(dirname(path), `.${basename(path)}.sluice-tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  try {
    await write(tmp);
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => undefined);
    throw new Error(`cannot replace ${path}: ${(err as Error).message}; nothing was changed there, run the install again`);
  }
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
    // The standalone plugin first: the front end execs it from its own directory, so it must be
    // in place (and of the same build) before a new front end can be run.
    const standalone = join(dirname(opts.pluginBinary), STANDALONE_PLUGIN_FILE);
    await access(standalone).catch(() => {
      throw new Error(`${standalone} not found: the front end ${opts.pluginBinary} needs the standalone plugin beside it (both are built into dist/bin by npm run build)`);
    });
    for (const [from, name] of [
      [standalone, STANDALONE_PLUGIN_FILE],
      [opts.pluginBinary, SLUICE_PLUGIN_TYPE],
    ] as const) {
      await replaceAtomically(join(opts.binDir, name), async (tmp) => {
        await copyFile(from, tmp);
        await chmod(tmp, 0o755);
      });
    }
  }
  const plan = planChain(await readConfDir(opts.confDir), sluiceEntry(opts.socketPath));
  if (plan.action === 'none' || plan.action === 'refuse') throw new ConfListError(`${opts.confDir}: ${plan.why}`);
  if (plan.action === 'keep') return { config: join(opts.confDir, plan.file), changed: false };
  return { config: await applyChainPlan(opts.confDir, plan), changed: true };
}

/**
 * Takes sluice out of the runtime's configuration. The plugin binary goes first: an agent that keeps
 * the chain (daemon/node/chainkeeper.ts) chains only while the binary is there, so it cannot put sluice
 * back between the two steps; a Pod created in between fails its ADD and is retried.
 */
export async function uninstallCni(opts: Pick<CniInstallOptions, 'confDir' | 'binDir'>): Promise<{ config?: string; changed: boolean }> {
  let changed = false;
  for (const name of [SLUICE_PLUGIN_TYPE, STANDALONE_PLUGIN_FILE]) {
    await unlink(join(opts.binDir, name)).then(() => { changed = true; }, () => undefined);
  }
  const { file, list } = runtimeConfig(await readConfDir(opts.confDir));
  if (!file || !list) return { changed };
  const path = join(opts.confDir, file.name);
  if (isChained(list)) {
    await replaceAtomically(path, (tmp) => writeFile(tmp, confListText(unchainSluice(list)), { mode: 0o644 }));
    changed = true;
  }
  return { config: path, changed };
}
