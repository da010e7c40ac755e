/**
 * The control plane's files in a lab's state dir (/run/sluice-lab/<L>/) and how the CLI finds a
 * running lab. lab/net owns lab.json, the node dirs' network files and pods/; these are ours.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ovsDir, stateDir } from './net/names.js';

export const supervisorPidPath = (lab: string): string => join(stateDir(lab), 'supervisor.pid');
export const supervisorLogPath = (lab: string): string => join(stateDir(lab), 'supervisor.log');
export const controlPath = (lab: string): string => join(stateDir(lab), 'control.json');
export const apiSocketPath = (lab: string): string => join(stateDir(lab), 'apiserver.sock');
export const apiTlsSocketPath = (lab: string): string => join(stateDir(lab), 'apiserver-tls.sock');
export const pkiDir = (lab: string): string => join(stateDir(lab), 'pki');
/** The key ServiceAccount tokens are signed with (kept across supervisor restarts, like the data file). */
export const serviceAccountKeyPath = (lab: string): string => join(stateDir(lab), 'pki', 'sa.key');
export const apiDataPath = (lab: string): string => join(stateDir(lab), 'apiserver.json');
export const hostKubeconfigPath = (lab: string): string => join(stateDir(lab), 'kubeconfig');

/** Written by the supervisor once everything it runs is up. */
export interface ControlInfo {
  name: string;
  nodes: string[];
  primary: 'ptp' | 'eks';
  sluice: boolean;
  apiUrl: string;
  /** The same API over HTTPS, verified with caCertPath. */
  apiHttpsUrl: string;
  caCertPath: string;
  token: string;
  supervisorPid: number;
  startedAt: string;
}

export function readControl(lab: string): ControlInfo | null {
  try {
    return JSON.parse(readFileSync(controlPath(lab), 'utf8')) as ControlInfo;
  } catch {
    return null;
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The supervisor's pid when it runs (checked against its command line, not just the number). */
export function supervisorPid(lab: string): number | null {
  let pid: number;
  try {
    pid = Number(readFileSync(supervisorPidPath(lab), 'utf8').trim());
  } catch {
    return null;
  }
  if (!Number.isInteger(pid) || pid <= 1 || !isAlive(pid)) return null;
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return cmd.includes('supervisor.js') && cmd.includes(`${stateDir(lab)}/`) ? pid : null;
  } catch {
    return null;
  }
}

export class NoLabError extends Error {
  override name = 'NoLabError';
}

/** The running lab's control info; throws NoLabError saying what is wrong otherwise. */
export function requireRunningLab(lab: string): ControlInfo {
  const info = readControl(lab);
  const pid = supervisorPid(lab);
  if (info && pid !== null) return info;
  if (!existsSync(stateDir(lab))) throw new NoLabError(`no lab "${lab}" is running (start one with: sluice-lab up --name ${lab})`);
  throw new NoLabError(
    `lab "${lab}" is not running (its supervisor is gone${pid === null ? '' : ' or not ready'}); ` +
      `clean up with: sluice-lab down --name ${lab}`,
  );
}

/**
 * Whether sluice runs on the lab's nodes: the lab started its agents (`up --sluice`), or sluice was
 * installed afterwards (install/sluice.yaml's DaemonSet on an `up --no-sluice` lab), which every
 * node shows by its bridge's management socket in the node's OVS run directory.
 */
export function sluiceOnNodes(info: Pick<ControlInfo, 'name' | 'nodes' | 'sluice'>): boolean {
  return info.sluice || (info.nodes.length > 0 && info.nodes.every((n) => existsSync(join(ovsDir(info.name, n), 'br-int.mgmt'))));
}
