/**
 * The audit log's file I/O: appends to `np.log`, rotating by size into `np.log.1` … `np.log.N`
 * (oldest dropped), and the AuditLogger that feeds it through the deduplicator with real timers.
 */
import { closeSync, existsSync, fstatSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { AuditDeduplicator } from './dedup.js';
import type { AuditEvent, TimeZone } from './format.js';

export const DEFAULT_AUDIT_LOG_PATH = '/var/log/antrea/networkpolicy/np.log';

export interface RotationOptions {
  path: string;
  /** Rotate before a write would take the file over this size. */
  maxBytes: number;
  /** Rotated files kept (np.log.1 newest). 0 = truncate in place. */
  maxBackups: number;
}

export class RotatingFileWriter {
  private fd: number;
  private size: number;
  rotations = 0;

  constructor(private readonly opts: RotationOptions) {
    if (!opts.path) throw new Error('audit log: path is empty');
    if (!Number.isInteger(opts.maxBytes) || opts.maxBytes < 1) throw new Error(`audit log: maxBytes ${opts.maxBytes} is not a positive integer`);
    if (!Number.isInteger(opts.maxBackups) || opts.maxBackups < 0) throw new Error(`audit log: maxBackups ${opts.maxBackups} is not a non-negative integer`);
    try {
      mkdirSync(dirname(opts.path), { recursive: true });
    } catch (e) {
      throw new Error(`audit log: cannot create directory ${dirname(opts.path)}: ${(e as Error).message}`);
    }
    [this.fd, this.size] = this.open();
  }

  private open(): [number, number] {
    try {
      const fd = openSync(this.opts.path, 'a', 0o640);
      return [fd, fstatSync(fd).size];
    } catch (e) {
      throw new Error(`audit log: cannot open ${this.opts.path}: ${(e as Error).message}`);
    }
  }

  /** Appends `text` (whole lines), rotating first if it would not fit. */
  write(text: string): void {
    const data = Buffer.from(text);
    if (this.size > 0 && this.size + data.length > this.opts.maxBytes) this.rotate();
    let off = 0;
    while (off < data.length) off += writeSync(this.fd, data, off);
    this.size += data.length;
  }

  private rotate(): void {
    closeSync(this.fd);
    const p = this.opts.path;
    if (this.opts.maxBackups === 0) {
      rmSync(p, { force: true });
    } else {
      rmSync(`${p}.${this.opts.maxBackups}`, { force: true });
      for (let i = this.opts.maxBackups - 1; i >= 1; i--) if (existsSync(`${p}.${i}`)) renameSync(`${p}.${i}`, `${p}.${i + 1}`);
      renameSync(p, `${p}.1`);
    }
    this.rotations++;
    [this.fd, this.size] = this.open();
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** Nanoseconds since the epoch, with sub-millisecond resolution from the monotonic clock. */
export const wallClockNs: () => bigint = (() => {
  const epoch0 = BigInt(Date.now()) * 1_000_000n;
  const mono0 = process.hrtime.bigint();
  return () => epoch0 + (process.hrtime.bigint() - mono0);
})();

export interface AuditLoggerOptions {
  path?: string;
  maxBytes?: number;
  maxBackups?: number;
  /** Deduplication window for Drop/Reject lines. */
  windowMs?: number;
  timeZone?: TimeZone;
  clock?: () => bigint;
}

/** Writes audit events: dedup window timers, line batching (one write per event-loop turn), rotation. */
export class AuditLogger {
  private readonly writer: RotatingFileWriter;
  private readonly dedup: AuditDeduplicator;
  private readonly clock: () => bigint;
  private lines: string[] = [];
  private flushScheduled = false;
  private timer?: NodeJS.Timeout | undefined;
  private closed = false;
  linesWritten = 0;

  /** Events folded into an earlier identical line by the deduplication window. */
  get suppressed(): number {
    return this.dedup.suppressed;
  }

  constructor(opts: AuditLoggerOptions = {}) {
    this.writer = new RotatingFileWriter({ path: opts.path ?? DEFAULT_AUDIT_LOG_PATH, maxBytes: opts.maxBytes ?? 100 << 20, maxBackups: opts.maxBackups ?? 3 });
    this.clock = opts.clock ?? wallClockNs;
    const windowMs = opts.windowMs ?? 1000;
    if (!Number.isInteger(windowMs) || windowMs < 1) throw new Error(`audit log: windowMs ${windowMs} is not a positive integer`);
    this.dedup = new AuditDeduplicator((l) => this.queueLine(l), BigInt(windowMs) * 1_000_000n, opts.timeZone ?? 'utc');
  }

  /** Logs one event; its time defaults to now. */
  log(e: Omit<AuditEvent, 'timeNs'> & { timeNs?: bigint }): void {
    if (this.closed) return;
    this.dedup.record({ ...e, timeNs: e.timeNs ?? this.clock() });
    this.armTimer();
  }

  private armTimer(): void {
    if (this.timer) return;
    const due = this.dedup.nextDeadlineNs();
    if (due === undefined) return;
    const delayMs = Math.max(0, Number((due - this.clock()) / 1_000_000n) + 1);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.dedup.flushDue(this.clock());
      this.armTimer();
    }, delayMs);
    this.timer.unref();
  }

  private queueLine(line: string): void {
    this.lines.push(`${line}\n`);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => this.flushLines());
  }

  private flushLines(): void {
    this.flushScheduled = false;
    if (this.lines.length === 0) return;
    const batch = this.lines;
    this.lines = [];
    this.writer.write(batch.join(''));
    this.linesWritten += batch.length;
  }

  get rotations(): number {
    return this.writer.rotations;
  }

  /** Writes everything held or queued, then closes the file. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    this.dedup.flushAll();
    this.flushLines();
    this.writer.close();
  }
}
