/**
 * Deduplication of audit log lines (pure; time comes in as arguments).
 *
 * Allow and Pass lines are emitted at once. Drop and Reject lines are held: the first occurrence of
 * a line (everything but the timestamp) opens a window (1 s); identical lines inside it only count;
 * when the window closes one line is emitted, stamped with the first packet's time, with
 * ` [N packets in <first-to-last duration>]` appended when N > 1.
 */
import { type AuditEvent, eventBody, formatAuditLine, type TimeZone } from './format.js';

const HELD: ReadonlySet<AuditEvent['action']> = new Set(['Drop', 'Reject']);

interface Held {
  first: AuditEvent;
  lastNs: bigint;
  count: number;
  deadlineNs: bigint;
}

export class AuditDeduplicator {
  /** Insertion order = order of first occurrence = order of deadlines. */
  private held = new Map<string, Held>();
  /** Events folded into a held line instead of a line of their own. */
  suppressed = 0;

  constructor(
    private readonly emit: (line: string) => void,
    private readonly windowNs = 1_000_000_000n,
    private readonly zone: TimeZone = 'utc',
  ) {}

  record(e: AuditEvent): void {
    if (!HELD.has(e.action)) {
      this.emit(formatAuditLine(e, this.zone));
      return;
    }
    const key = eventBody(e);
    const h = this.held.get(key);
    if (h) {
      h.count++;
      this.suppressed++;
      if (e.timeNs > h.lastNs) h.lastNs = e.timeNs;
      return;
    }
    this.held.set(key, { first: e, lastNs: e.timeNs, count: 1, deadlineNs: e.timeNs + this.windowNs });
  }

  /** Emits every held line whose window has closed by `nowNs`. */
  flushDue(nowNs: bigint): void {
    for (const [key, h] of this.held) {
      if (h.deadlineNs > nowNs) break;
      this.held.delete(key);
      this.emit(formatAuditLine(h.first, this.zone, { count: h.count, durationNs: h.lastNs - h.first.timeNs }));
    }
  }

  /** Emits everything held (shutdown). */
  flushAll(): void {
    for (const h of this.held.values()) this.emit(formatAuditLine(h.first, this.zone, { count: h.count, durationNs: h.lastNs - h.first.timeNs }));
    this.held.clear();
  }

  /** When the next held line is due, or undefined when nothing is held. */
  nextDeadlineNs(): bigint | undefined {
    for (const h of this.held.values()) return h.deadlineNs;
    return undefined;
  }

  get heldCount(): number {
    return this.held.size;
  }
}
