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
 * A connection that is cut stays cut: its entry would otherwise be opened again by the first packet
 * from the side whose policy allows it (a server's ACK, a reply datagram), in the reverse direction,
 * and the denied side's packets would then pass as its replies. So before its entry goes, the
 * connection's 5-tuple is blocked both ways (`block`, flows/cut-connections.ts; not the pre-DNAT
 * leg of a Service connection, whose packets are judged post-DNAT one by one), and each sweep
 * judges the blocked tuples again: one that a change allows again is unblocked; one still denied
 * stays blocked for BLOCK_MS (longer than TCP's retransmissions go on), and at most MAX_BLOCKED
 * are kept (the oldest go first). The set is kept in `stateFile` as it changes, so a restarted
 * agent blocks the same connections from its first flow sync (a restart changes no flow).
 *
 * ICMPv6 on the userspace datapath: ovs-vswitchd 3.1 aborts when `dpctl/flush-conntrack` names an
 * ICMPv6 entry, so those are not removed there (counted in `unflushable`): an echo exchange
 * already open keeps its entry until it idles out (30 s).
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { describeEntry, flushTuple, parseConntrackDump, type CtEntry } from './entries.js';
import { type ConnectionPolicy, judgeConnections } from './judge.js';
import type { CutTuple } from '../../flows/cut-connections.js';

/** The blocked set a previous run kept (entries that are not well-formed are dropped). */
function loadBlocked(file: string | undefined, log: Pick<Logger, 'warn'>): BlockedConnection[] {
  if (!file || !existsSync(file)) return [];
  try {
    const list = JSON.parse(readFileSync(file, 'utf8')) as unknown;
    if (!Array.isArray(list)) throw new Error('not a list');
    return list.filter((b): b is BlockedConnection => {
      const x = b as Partial<BlockedConnection>;
      return (x.protocol === 'TCP' || x.protocol === 'UDP' || x.protocol === 'SCTP') && (x.family === 4 || x.family === 6) && typeof x.src === 'string' && typeof x.dst === 'string'
        && Number.isInteger(x.sport) && Number.isInteger(x.dport) && typeof x.since === 'number';
    });
  } catch (err) {
    log.warn({ file, err: (err as Error).message }, 'conntrack: the blocked connections of the last run could not be read; starting without them');
    return [];
  }
}

function saveBlocked(file: string | undefined, blocked: readonly BlockedConnection[], log: Pick<Logger, 'warn'>): void {
  if (!file) return;
  try {
    writeFileSync(`${file}.tmp`, JSON.stringify(blocked));
    renameSync(`${file}.tmp`, file);
  } catch (err) {
    log.warn({ file, err: (err as Error).message }, 'conntrack: the blocked connections could not be saved; a restart would forget them');
  }
}

const tupleKey = (c: CutTuple) => `${c.protocol} ${c.src} ${c.sport} ${c.dst} ${c.dport}`;

function cutTuple(e: CtEntry): CutTuple | undefined {
  if (e.protocol === 'ICMP' || e.sport === undefined || e.dport === undefined) return undefined;
  return { protocol: e.protocol, family: e.family, src: e.src, dst: e.dst, sport: e.sport, dport: e.dport };
}

/** The bridge's conntrack zone, as the sweeper reads and edits it. */
export interface ConntrackIo {
  /** `dpctl/dump-conntrack zone=65520`. */
  dump(): Promise<string>;
  /** `dpctl/flush-conntrack zone=65520 TUPLE`. */
  flush(tuple: string): Promise<void>;
  /**
   * From now on (once it resolves), the packets of exactly these connections are dropped both ways
   * before any policy table; replaces the previous set.
   */
  block?(connections: readonly BlockedConnection[]): Promise<void>;
}

/** A cut connection whose 5-tuple is blocked (TCP, UDP, SCTP). */
export interface BlockedConnection extends CutTuple {
  /** When it was cut (the sweeper's clock, ms). */
  since: number;
}

/** How long a cut connection stays blocked while it is still denied (TCP gives up retransmitting after ~15 min). */
export const BLOCK_MS = 20 * 60_000;
export const MAX_BLOCKED = 50_000;

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
  /** Where the blocked set survives a restart (written on each change, read at construction). */
  stateFile?: string | undefined;
}

export interface SweeperStatus {
  sweeps: number;
  cut: number;
  /** Cut connections whose packets are dropped both ways now. */
  blocked: number;
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
  private readonly st: SweeperStatus = { sweeps: 0, cut: 0, blocked: 0, unflushable: 0, failures: 0 };
  /** Blocked connections by tuple (insertion order = age). */
  private blockedSet = new Map<string, BlockedConnection>();
  private readonly now: () => number;

  constructor(private readonly opts: SweeperOptions) {
    this.now = opts.now ?? Date.now;
    for (const b of loadBlocked(opts.stateFile, opts.log)) this.blockedSet.set(tupleKey(b), b);
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
    return { ...this.st, blocked: this.blockedSet.size };
  }

  /** The connections blocked now (their flows are the agent's `cut-connections` owner). */
  blocked(): BlockedConnection[] {
    return [...this.blockedSet.values()];
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

  /**
   * Blocks the connections about to be cut, and judges those already blocked again: a change may
   * have allowed them (unblocked), or they may be old enough to go (BLOCK_MS). Resolves once the
   * new set is on the bridge.
   */
  private async updateBlocked(cutting: readonly CtEntry[]): Promise<void> {
    if (!this.opts.io.block) return;
    const now = this.now();
    const next = new Map<string, BlockedConnection>();
    const old = [...this.blockedSet.values()].filter((b) => now - b.since < BLOCK_MS);
    const stillDenied = judgeConnections(
      old.map((b) => ({ ...b, zone: 0, mark: 0 })),
      this.opts.policy,
      { keepNetworkPolicy: this.opts.keepNetworkPolicy },
    );
    for (const { entry } of stillDenied.cut) {
      const t = cutTuple(entry)!;
      next.set(tupleKey(t), this.blockedSet.get(tupleKey(t))!);
    }
    for (const e of cutting) {
      // A Service's pre-DNAT leg needs no blocking: its packets are judged post-DNAT one by one.
      if (this.opts.policy.isServiceIp?.(e.dst)) continue;
      const t = cutTuple(e);
      if (t && !next.has(tupleKey(t))) next.set(tupleKey(t), { ...t, since: now });
    }
    while (next.size > MAX_BLOCKED) next.delete(next.keys().next().value!);
    const same = next.size === this.blockedSet.size && [...next.keys()].every((k) => this.blockedSet.has(k));
    this.blockedSet = next;
    if (same) return;
    saveBlocked(this.opts.stateFile, this.blocked(), this.opts.log);
    await this.opts.io.block(this.blocked());
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
    try {
      await this.updateBlocked(flushable);
    } catch (err) {
      // Cut anyway: the blocking flows are in the desired set and the next flow sync brings them.
      this.opts.log.warn({ err: (err as Error).message }, 'conntrack: blocking cut connections failed; cutting them anyway');
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
