/**
 * A Clock for tests: time moves only when the test calls advance(), which runs every timer due by
 * then in time order (timers a callback sets are run too if they fall inside the step), letting
 * promise continuations settle between timers.
 */
import type { Clock, TimerHandle } from '../../daemon/clock.js';

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
}

export class ManualClock implements Clock {
  private t = 0;
  private seq = 0;
  private readonly pending = new Map<number, Pending>();

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const seq = ++this.seq;
    this.pending.set(seq, { at: this.t + Math.max(0, ms), seq, fn });
    return { timer: seq };
  }

  clearTimeout(h: TimerHandle | undefined): void {
    if (h) this.pending.delete(h.timer as number);
  }

  /** Timers waiting to run. */
  get waiting(): number {
    return this.pending.size;
  }

  /** Moves time forward by `ms`, running what falls due; awaits settled promises between timers. */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      await settle();
      const next = [...this.pending.values()].filter((p) => p.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!next) break;
      this.pending.delete(next.seq);
      this.t = next.at;
      next.fn();
    }
    this.t = end;
    await settle();
  }
}

/** Lets queued promise continuations (and the I/O-free async work they start) run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await new Promise<void>((r) => setImmediate(r));
}
