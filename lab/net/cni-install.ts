/**
 * Fills the lab's CNI plugin directory and writes each node's conflist. The directory holds
 * symlinks to Debian's ptp/host-local (and tuning, the do-nothing chained plugin bench/cni-add
 * measures against), wrappers running the lab's eks-sim plugins, and sluice-cni
 * when it has been built.
 */
import { existsSync, lstatSync, mkdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type PrimaryFlavour, nodeConflist } from './cni-config.js';
import { cniBinDir, cniConfDir, conflistPath, distScript, type IpFamily, repoRoot } from './names.js';

export const SYSTEM_CNI_DIR = '/usr/lib/cni';

function ensureSymlink(target: string, link: string): void {
  try {
    if (lstatSync(link).isSymbolicLink() && readlinkSync(link) === target) return;
    rmSync(link, { force: true });
  } catch {
    // absent
  }
  symlinkSync(target, link);
}

export const sluiceCniBinary = (): string => join(repoRoot(), 'dist', 'bin', 'sluice-cni');

export function installCniPlugins(lab: string): string {
  const dir = cniBinDir(lab);
  mkdirSync(dir, { recursive: true });
  for (const p of ['ptp', 'host-local', 'tuning']) {
    const target = join(SYSTEM_CNI_DIR, p);
    if (!existsSync(target)) throw new Error(`${target} is missing: install containernetworking-plugins`);
    ensureSymlink(target, join(dir, p));
  }
  // A wrapper instead of a symlink: dist files are not executable and node may not be on root's PATH.
  // eks-sim.js is both plugins; it tells them apart by the configuration's type.
  for (const type of ['eks-sim', 'egress-cni']) {
    writeFileSync(join(dir, type), `#!/bin/sh\nexec '${process.execPath}' '${distScript('eks-sim')}' "$@"\n`, { mode: 0o755 });
  }
  if (existsSync(sluiceCniBinary())) ensureSymlink(sluiceCniBinary(), join(dir, 'sluice-cni'));
  return dir;
}

export function writeNodeConflist(lab: string, node: string, flavour: PrimaryFlavour, chainSluice: boolean, family: IpFamily = 'ipv4'): string {
  mkdirSync(cniConfDir(lab, node), { recursive: true });
  const file = conflistPath(lab, node);
  writeFileSync(file, JSON.stringify(nodeConflist(lab, node, flavour, chainSluice, family), null, 2) + '\n');
  return file;
}
