/**
 * What the lab benches read from a node's running agent: its JSON log followed from a point on,
 * the bridge's flow count, the agent's memory, percentiles; and the CPU load of a loaded round.
 * Measures only; asserts nothing.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { agentPidPath } from '../lab/agent.js';
import { nodeNetns, ovsDir } from '../lab/net/names.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** Follows the agent's JSON log from its current end. */
export class LogTail {
  private offset: number;
  private buf = '';
  constructor(private readonly file: string) {
    this.offset = statSync(file).size;
  }
  /**
   * Resolves with the first new line containing every needle, and the time it was seen; the lines
   * before it are pushed onto `passed` when given.
   */
  async waitFor(needles: string[], timeoutMs = 60_000, passed?: string[]): Promise<{ line: string; at: number }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const size = statSync(this.file).size;
      if (size > this.offset) {
        const fd = openSync(this.file, 'r');
        const chunk = Buffer.alloc(size - this.offset);
        readSync(fd, chunk, 0, chunk.length, this.offset);
        closeSync(fd);
        this.offset = size;
        this.buf += chunk.toString('utf8');
      }
      const lines = this.buf.split('\n');
      this.buf = lines.pop() ?? '';
      const at = performance.now();
      for (const [i, l] of lines.entries()) {
        if (needles.every((n) => l.includes(n))) {
          this.buf = lines.slice(i + 1).join('\n') + (lines.length > i + 1 ? '\n' : '') + this.buf;
          return { line: l, at };
        }
        passed?.push(l);
      }
      if (Date.now() > deadline) throw new Error(`no log line with ${needles.join(' + ')} within ${timeoutMs} ms`);
      await sleep(2);
    }
  }

  /** Returns once no policy commit has followed for 2 s. */
  async settle(): Promise<void> {
    for (;;) {
      try {
        await this.waitFor(['policy: flows committed'], 2000);
      } catch {
        return;
      }
    }
  }
}

/** Flows on the node's br-int (aggregate statistics). */
export function flowCount(lab: string, node: string): number {
  const r = spawnSync('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-aggregate', 'br-int'], { env: { ...process.env, OVS_RUNDIR: ovsDir(lab, node) }, encoding: 'utf8' });
  return Number(/flow_count=(\d+)/.exec(r.stdout)?.[1] ?? Number.NaN);
}

/**
 * ovs-vswitchd's userspace datapath counters over a measurement: `start()` clears them, `read()`
 * reports megaflows installed, upcalls, datapath passes per packet and the dpcls subtables searched
 * per megaflow hit (each distinct mask is a subtable: the figure that grows when policy tables
 * unwildcard fields). Only for `datapath_type=netdev`, which is what the lab runs.
 */
export const datapathCounters = (lab: string, node: string) => {
  const appctl = (...args: string[]) => spawnSync('ovs-appctl', args, { env: { ...process.env, OVS_RUNDIR: ovsDir(lab, node) }, encoding: 'utf8' }).stdout ?? '';
  return {
    start: (): void => {
      appctl('revalidator/purge');
      appctl('dpif-netdev/pmd-stats-clear');
    },
    read: (): string => {
      const stats = appctl('dpif-netdev/pmd-stats-show');
      const num = (label: string) => /([\d.]+)\s*$/.exec(stats.split('\n').find((l) => l.includes(label)) ?? '')?.[1] ?? '?';
      // One line per megaflow, under a "flow-dump from …" heading per datapath thread.
      const megaflows = appctl('dpctl/dump-flows').split('\n').filter((l) => l && !l.startsWith('flow-dump')).length;
      return `${megaflows} megaflows, ${num('miss with success upcall')} upcalls, ${num('passes per packet')} passes per packet, ${num('subtable lookups per megaflow hit')} subtables searched per megaflow hit`;
    },
  };
};

/** A process's resident memory now and at its peak (MiB), from /proc. */
export function processMemoryMiB(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const mib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN) / 1024;
  return { rss: mib('VmRSS'), peak: mib('VmHWM') };
}

/** A process's CPU time so far in ms, every thread's: the scheduler's own count (ns), not 10 ms ticks. */
export function processCpuMs(pid: number): number {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // a thread that ended meanwhile
    }
  }
  return ns / 1e6;
}

/** The pid of the node's agent (its pid file). */
export const agentPid = (lab: string, node: string): number => Number(readFileSync(agentPidPath(lab, node), 'utf8').trim());

/** The agent's RSS in MiB, from /proc. */
export function agentRssMiB(lab: string, node: string): number {
  return processMemoryMiB(agentPid(lab, node)).rss;
}

/** The agent's /status (JSON), undefined when it does not answer. */
export function agentStatus(lab: string, node: string): Record<string, unknown> | undefined {
  const r = spawnSync('ip', ['netns', 'exec', nodeNetns(lab, node), 'curl', '-s', '--max-time', '5', 'http://127.0.0.1:10349/status'], { encoding: 'utf8' });
  try {
    return JSON.parse(r.stdout) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** The JS heap the agent reports in /status (live and reserved, MiB), if it answers. */
export function agentHeapMiB(lab: string, node: string): { used: number; total: number } | undefined {
  const m = agentStatus(lab, node)?.memory as { heapUsedMiB: number; heapTotalMiB: number } | undefined;
  return m && { used: m.heapUsedMiB, total: m.heapTotalMiB };
}

/** Agent memory: RSS from /proc, and the JS heap split the agent reports in /status (live vs reserved). */
export function agentMemory(lab: string, node: string): string {
  const rss = agentRssMiB(lab, node);
  const m = agentHeapMiB(lab, node);
  const heap = m ? ` (JS heap ${m.used.toFixed(0)} of ${m.total.toFixed(0)} MiB)` : ' (JS heap: /status unavailable)';
  return `agent RSS ${rss.toFixed(0)} MiB${heap}`;
}

/** One busy-looping process per core, as a loaded node has (the caller kills them). */
export function startLoad(): ChildProcess[] {
  return cpus().map(() => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
}
