/**
 * One private Open vSwitch per lab node: ovsdb-server + ovs-vswitchd run inside the node
 * namespace with OVS_RUNDIR = OVS_DBDIR = OVS_LOGDIR = /run/sluice-lab/<L>/<node>/ovs, so every
 * OVS tool pointed at that directory (see ovsEnv) talks to this node's switch and never to the
 * machine's default one. The kernel has no openvswitch module: bridges must use datapath_type=netdev.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { run, runIn, sleep } from './exec.js';
import { nodeNetns, ovsDir, stateDir } from './names.js';

export const OVS_SCHEMA = '/usr/share/openvswitch/vswitch.ovsschema';
const DAEMONS = ['ovsdb-server', 'ovs-vswitchd'] as const;

/** Environment that points ovs-vsctl/ovs-ofctl/ovs-appctl (and the daemons) at a node's private OVS. */
export function ovsEnv(lab: string, node: string): Record<string, string> {
  const dir = ovsDir(lab, node);
  return { OVS_RUNDIR: dir, OVS_DBDIR: dir, OVS_LOGDIR: dir, OVS_SYSCONFDIR: dir };
}

export const ovsDbSocket = (lab: string, node: string): string => join(ovsDir(lab, node), 'db.sock');

/**
 * How to run an OVS tool against a node's switch: `ip netns exec <node ns> env OVS_…=… <tool> …`.
 * ovs-vsctl also gets an explicit --db so it works even if the env is lost.
 */
export function ovsCommand(lab: string, node: string, tool: 'ovs-vsctl' | 'ovs-ofctl' | 'ovs-appctl', args: string[]): { file: string; args: string[]; env: Record<string, string> } {
  const env = ovsEnv(lab, node);
  const dbArg = tool === 'ovs-vsctl' ? [`--db=unix:${ovsDbSocket(lab, node)}`] : [];
  const envArgs = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  return { file: 'ip', args: ['netns', 'exec', nodeNetns(lab, node), 'env', ...envArgs, tool, ...dbArg, ...args], env };
}

export function runOvs(lab: string, node: string, tool: 'ovs-vsctl' | 'ovs-ofctl' | 'ovs-appctl', args: string[]) {
  const c = ovsCommand(lab, node, tool, args);
  return run(c.file, c.args);
}

function pidFromFile(file: string): number | null {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 1 ? pid : null;
  } catch {
    return null;
  }
}

/** Whether a process exists and is not a zombie (a killed child we have not reaped yet counts as gone). */
export const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
};

function daemonRunning(lab: string, node: string, daemon: string): boolean {
  const pid = pidFromFile(join(ovsDir(lab, node), `${daemon}.pid`));
  return pid !== null && isAlive(pid);
}

export async function startNodeOvs(lab: string, node: string): Promise<void> {
  const dir = ovsDir(lab, node);
  mkdirSync(dir, { recursive: true });
  const ns = nodeNetns(lab, node);
  const envArgs = Object.entries(ovsEnv(lab, node)).map(([k, v]) => `${k}=${v}`);
  const db = join(dir, 'conf.db');
  if (!existsSync(db)) await run('ovsdb-tool', ['create', db, OVS_SCHEMA]);
  if (!daemonRunning(lab, node, 'ovsdb-server')) {
    await runIn(ns, 'env', [
      ...envArgs, 'ovsdb-server', db, `--remote=punix:${ovsDbSocket(lab, node)}`, '--remote=db:Open_vSwitch,Open_vSwitch,manager_options',
      '--pidfile', '--detach', '--log-file',
    ]);
  }
  await runOvs(lab, node, 'ovs-vsctl', ['--no-wait', 'init']);
  if (!daemonRunning(lab, node, 'ovs-vswitchd')) {
    await runIn(ns, 'env', [...envArgs, 'ovs-vswitchd', `unix:${ovsDbSocket(lab, node)}`, '--pidfile', '--detach', '--log-file']);
  }
}

/** Every running process whose command line mentions `needle` (used to find strays by state dir). */
export function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(needle)) out.push(pid);
    } catch {
      // the process exited while we looked
    }
  }
  return out;
}

/** SIGTERM, wait up to `graceMs`, then SIGKILL whatever is left. */
export async function killAndWait(pids: number[], graceMs = 2000): Promise<void> {
  const live = pids.filter((p) => p !== process.pid && isAlive(p));
  for (const p of live) {
    try {
      process.kill(p, 'SIGTERM');
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + graceMs;
  while (live.some(isAlive) && Date.now() < deadline) await sleep(25);
  for (const p of live.filter(isAlive)) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  const hard = Date.now() + 2000;
  while (live.some(isAlive) && Date.now() < hard) await sleep(25);
}

function isOvsProcess(pid: number): boolean {
  try {
    const argv0 = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return argv0.some((a) => DAEMONS.some((d) => a.endsWith(d)));
  } catch {
    return false;
  }
}

/** Stops a node's OVS via its pid files, then any leftover OVS process that mentions the lab's state dir. */
export async function stopNodeOvs(lab: string, node: string): Promise<void> {
  const dir = ovsDir(lab, node);
  const pids = DAEMONS.map((d) => pidFromFile(join(dir, `${d}.pid`))).filter((p): p is number => p !== null);
  await killAndWait([...pids, ...pidsMentioning(dir).filter(isOvsProcess)]);
}

/** Stops every OVS process of the lab, including ones whose pid files are gone. */
export async function stopLabOvs(lab: string): Promise<void> {
  await killAndWait(pidsMentioning(stateDir(lab) + '/').filter(isOvsProcess));
}
