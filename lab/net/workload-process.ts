/** Starts and stops workload.js processes (detached, so they outlive the caller). */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { sleep } from './exec.js';
import { distScript, probeSocketPath } from './names.js';
import { isAlive, killAndWait } from './ovs.js';

export interface WorkloadPorts {
  tcp: number[];
  udp: number[];
}

/** Splits container ports by protocol; SCTP cannot be served (no kernel module) and is skipped. */
export function workloadPorts(ports: { port: number; protocol?: string }[]): WorkloadPorts {
  const tcp = new Set<number>();
  const udp = new Set<number>();
  for (const p of ports) {
    const proto = (p.protocol ?? 'TCP').toUpperCase();
    if (proto === 'TCP') tcp.add(p.port);
    else if (proto === 'UDP') udp.add(p.port);
  }
  return { tcp: [...tcp].sort((a, b) => a - b), udp: [...udp].sort((a, b) => a - b) };
}

export function readPid(pidfile: string): number | null {
  try {
    const pid = Number(readFileSync(pidfile, 'utf8').trim());
    return Number.isInteger(pid) && pid > 1 ? pid : null;
  } catch {
    return null;
  }
}

/** The pid in `pidfile` if that process is alive and really is the workload that wrote it. */
export function workloadPid(pidfile: string): number | null {
  const pid = readPid(pidfile);
  if (pid === null || !isAlive(pid)) return null;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(pidfile) ? pid : null;
  } catch {
    return null;
  }
}

/**
 * Runs workload.js in `netns`; resolves with its pid once every port listens, throws with its log
 * otherwise. `talk`: workload.js --talk (a client from its first moment).
 */
export async function startWorkload(netns: string, ports: WorkloadPorts, pidfile: string, logfile: string, talk?: string): Promise<number> {
  const running = workloadPid(pidfile);
  if (running !== null) return running;
  mkdirSync(dirname(pidfile), { recursive: true });
  rmSync(pidfile, { force: true });
  const log = openSync(logfile, 'a');
  const args = ['netns', 'exec', netns, process.execPath, distScript('workload'), '--tcp', ports.tcp.join(','), '--udp', ports.udp.join(','), '--pidfile', pidfile, '--probe-socket', probeSocketPath(netns), ...(talk ? ['--talk', talk] : [])];
  const child = spawn('ip', args, { detached: true, stdio: ['ignore', log, log] });
  closeSync(log);
  let exited: number | null | undefined;
  child.on('exit', (code) => (exited = code));
  child.unref();
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const pid = readPid(pidfile);
    if (pid !== null) return pid;
    if (exited !== undefined) break;
    await sleep(20);
  }
  if (exited === undefined && child.pid) await killAndWait([child.pid]);
  const tail = existsSync(logfile) ? readFileSync(logfile, 'utf8').trim().split('\n').slice(-3).join(' | ') : '';
  throw new Error(`workload in ${netns} did not start (${exited === undefined ? 'not ready after 10 s' : `exit ${exited}`}): ${tail}`);
}

export async function stopWorkload(pidfile: string): Promise<void> {
  const pid = workloadPid(pidfile);
  if (pid !== null) await killAndWait([pid]);
  rmSync(pidfile, { force: true });
}
