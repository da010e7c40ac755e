/**
 * Removing a lab completely, also after a crash half-way: everything is discovered by name
 * prefix and command line, not only from state files.
 */
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { run } from './exec.js';
import { LAB_NAME, STATE_ROOT, checkLabName, parseLabNetns, stateDir } from './names.js';
import { killAndWait, pidsMentioning } from './ovs.js';
import { listNetns } from './topology.js';

/** Names of labs that have a state dir or at least one namespace. */
export async function listLabs(): Promise<string[]> {
  const names = new Set<string>();
  if (existsSync(STATE_ROOT)) for (const d of readdirSync(STATE_ROOT)) if (LAB_NAME.test(d)) names.add(d);
  for (const ns of await listNetns()) {
    const p = parseLabNetns(ns);
    if (p) names.add(p.lab);
  }
  return [...names].sort();
}

export const labNetns = async (lab: string): Promise<string[]> =>
  (await listNetns()).filter((ns) => parseLabNetns(ns)?.lab === checkLabName(lab));

/** Our own process and its ancestors: never killed, even if they run inside a lab namespace. */
function selfAndAncestors(): Set<number> {
  const out = new Set<number>([process.pid]);
  let pid = process.ppid;
  while (pid > 1 && !out.has(pid)) {
    out.add(pid);
    try {
      pid = Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      break;
    }
  }
  return out;
}

/** Every process the lab started: by namespace membership and by state dir on the command line. */
export async function labPids(lab: string): Promise<number[]> {
  const pids = new Set<number>(pidsMentioning(stateDir(lab) + '/'));
  for (const ns of await labNetns(lab)) {
    const { stdout } = await run('ip', ['netns', 'pids', ns], { allowFail: true });
    for (const p of stdout.split(/\s+/).filter(Boolean)) pids.add(Number(p));
  }
  const keep = selfAndAncestors();
  return [...pids].filter((p) => !keep.has(p));
}

export interface TeardownReport {
  killed: number[];
  netnsDeleted: string[];
  stateDirRemoved: boolean;
}

export async function destroyLab(lab: string): Promise<TeardownReport> {
  checkLabName(lab);
  // Twice: a process may fork (e.g. an OVS daemon detaching) while we look.
  const killed = await labPids(lab);
  await killAndWait(killed);
  const late = await labPids(lab);
  await killAndWait(late);
  const namespaces = await labNetns(lab);
  // Pods first, then nodes, the router and the external host (deleting a namespace takes its veths along).
  const order = (ns: string) => ({ pod: 0, node: 1, ext: 2, vpc: 3 })[parseLabNetns(ns)!.role];
  for (const ns of namespaces.sort((a, b) => order(a) - order(b))) {
    await run('ip', ['netns', 'del', ns], { allowFail: true });
  }
  const dir = stateDir(lab);
  const existed = existsSync(dir);
  rmSync(dir, { recursive: true, force: true });
  return { killed: [...killed, ...late], netnsDeleted: namespaces, stateDirRemoved: existed };
}
