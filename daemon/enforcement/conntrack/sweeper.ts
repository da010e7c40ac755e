/**
 * Cuts the connections a policy change now denies: after each apply of policy flows, the bridge's
 * conntrack zone is listed, judged (judge.ts) and every denied entry removed by its tuple. The
 * connection's next packet then finds no entry: it is a new connection to the pipeline (a TCP
 * segment mid-stream included: both conntracks accept one as a new connection), decided by the
 * flows now in force, and dropped or rejected there. Entries are removed only after the flows that
 * deny them are on the bridge, so no packet in between is judged by the old policy.
 *
 * Sweeps do not overlap: a request during a sweep runs one more sweep after it (the engine may
 * have moved on meanwhile), however many requests came.
 *
 * ICMPv6 on the userspace datapath: ovs-vswitchd 3.1 aborts when `dpctl/flush-conntrack` names an
 * ICMPv6 entry, so those are not removed there (counted in `unflushable`): an echo exchange
 * already open keeps its entry until it idles out (30 s).
 */
import type { Logger } from 'pino';
import { describeEntry, flushTuple, parseConntrackDump, type CtEntry } from './entries.js';
import { type ConnectionPolicy, judgeConnections } from './judge.js';

/** The bridge's conntrack zone, as the sweeper reads and edits it. */
export interface ConntrackIo {
  /** `dpctl/dump-conntrack zone=65520`. */
  dump(): Promise<string>;
  /** `dpctl/flush-conntrack zone=65520 TUPLE`. */
  flush(tuple: string): Promise<void>;
}

export interface SweeperOptions {
  io: ConntrackIo;
  policy: ConnectionPolicy;
  datapath: 'system' | 'netdev';
  keepNetworkPolicy: boolean;
  log: Pick<Logger, 'info' | 'warn' | 'debug'>;
  /** Clock for the durations reported (ms). */
  now?: () => number;
  /** Each sweep's outcome (metrics). */
  onSwept?: (s: { cut: number; ms: number }) => void;
}

export interface SweeperStatus {
  sweeps: number;
  cut: number;
  unflushable: number;
  failures: number;
  lastSweepMs?: number;
  lastError?: string;
}

/** Flushes in flight at once (ovs-vswitchd's control socket serves a few requests at a time). */
const FLUSH_PARALLEL = 4;

export class ConnectionSweeper {
  private running?: Promise<void> | undefined;
  private again = false;
  private closed = false;
  private readonly st: SweeperStatus = { sweeps: 0, cut: 0, unflushable: 0, failures: 0 };
  private readonly now: () => number;

  constructor(private readonly opts: SweeperOptions) {
    this.now = opts.now ?? Date.now;
  }

  /** Asks for a sweep: now, or right after the one running. */
  request(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.loop().finally(() => {
      this.running = undefined;
    });
  }

  /** Resolves when no sweep runs or is due (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  status(): SweeperStatus {
    return { ...this.st };
  }

  close(): void {
    this.closed = true;
  }

  private async loop(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.sweep();
      } catch (err) {
        this.st.failures++;
        this.st.lastError = (err as Error).message;
        this.opts.log.warn({ err: (err as Error).message }, 'conntrack: sweep failed; the next policy change sweeps again');
      }
    } while (this.again && !this.closed);
  }

  private async sweep(): Promise<void> {
    const t0 = this.now();
    const { entries, skipped } = parseConntrackDump(await this.opts.io.dump());
    const judged = judgeConnections(entries, this.opts.policy, { keepNetworkPolicy: this.opts.keepNetworkPolicy });
    const flushable: CtEntry[] = [];
    let unflushable = 0;
    for (const { entry } of judged.cut) {
      if (this.opts.datapath === 'netdev' && entry.family === 6 && entry.protocol === 'ICMP') unflushable++;
      else flushable.push(entry);
    }
    let gone = 0;
    const failed: string[] = [];
    for (let i = 0; i < flushable.length; i += FLUSH_PARALLEL) {
      await Promise.all(
        flushable.slice(i, i + FLUSH_PARALLEL).map(async (e) => {
          try {
            await this.opts.io.flush(flushTuple(e));
            gone++;
          } catch (err) {
            // Gone meanwhile (it closed or idled out) is what was wanted.
            if (/No such file or directory|ENOENT/.test((err as Error).message)) gone++;
            else failed.push(`${describeEntry(e)}: ${(err as Error).message}`);
          }
        }),
      );
    }
    const ms = this.now() - t0;
    this.st.sweeps++;
    this.st.cut += gone;
    this.st.unflushable += unflushable;
    this.st.lastSweepMs = ms;
    if (failed.length) {
      this.st.failures++;
      this.st.lastError = failed[0]!;
      this.opts.log.warn({ failed: failed.length, first: failed[0] }, 'conntrack: some denied connections could not be removed; the next sweep tries again');
    }
    if (judged.errors.length) this.opts.log.warn({ count: judged.errors.length, first: judged.errors[0] }, 'conntrack: connections the evaluator could not judge were kept');
    if (gone || unflushable) {
      this.opts.log.info(
        { cut: gone, unflushable, kept: judged.kept, ms, first: judged.cut.slice(0, 3).map((c) => `${describeEntry(c.entry)} (${c.side.direction} of ${c.side.pod}: ${c.side.verdict})`) },
        'conntrack: connections the policy now denies were cut',
      );
    } else this.opts.log.debug({ entries: entries.length, skipped, ms }, 'conntrack: no open connection is denied');
    this.opts.onSwept?.({ cut: gone, ms });
  }
}
