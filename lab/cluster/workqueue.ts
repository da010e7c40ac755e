/** Small concurrency helpers for the lab's controllers. */

export type Log = (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;

/** One JSON line per message on stderr (the supervisor's stderr is its log file). */
export const jsonLog =
  (component: string): Log =>
  (level, msg, fields = {}) =>
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, component, msg, ...fields })}\n`);

/**
 * Runs `sync` after triggers, coalescing bursts: at most one run at a time and at most one queued
 * behind it. A failing run is retried after `retryMs`.
 */
export class Coalescer {
  private running = false;
  private pending = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly sync: () => Promise<void>,
    private readonly onError: (err: unknown) => void,
    private readonly delayMs = 30,
    private readonly retryMs = 1000,
  ) {}

  trigger(delay = this.delayMs): void {
    if (this.stopped) return;
    this.pending = true;
    if (this.running || this.timer) return;
    this.timer = setTimeout(() => void this.run(), delay);
  }

  private async run(): Promise<void> {
    this.timer = undefined;
    if (this.running || this.stopped) return;
    this.running = true;
    this.pending = false;
    try {
      await this.sync();
    } catch (err) {
      this.onError(err);
      this.pending = true;
      this.running = false;
      if (!this.timer && !this.stopped) this.timer = setTimeout(() => void this.run(), this.retryMs);
      return;
    }
    this.running = false;
    if (this.pending) this.trigger(0);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/**
 * Per-key serialized work with a global concurrency limit: work for one key never overlaps,
 * and a key enqueued while its work is queued runs once.
 */
export class KeyedQueue {
  private readonly queued = new Set<string>();
  private readonly active = new Set<string>();
  private readonly order: string[] = [];
  private readonly again = new Set<string>();
  private inFlight = 0;

  constructor(
    private readonly work: (key: string) => Promise<void>,
    private readonly onError: (key: string, err: unknown) => void,
    private readonly concurrency = 4,
  ) {}

  enqueue(key: string): void {
    if (this.active.has(key)) {
      this.again.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.order.push(key);
    this.pump();
  }

  private pump(): void {
    while (this.inFlight < this.concurrency) {
      const idx = this.order.findIndex((k) => !this.active.has(k));
      if (idx < 0) return;
      const key = this.order.splice(idx, 1)[0]!;
      this.queued.delete(key);
      this.active.add(key);
      this.inFlight++;
      void this.work(key)
        .catch((err) => this.onError(key, err))
        .finally(() => {
          this.active.delete(key);
          this.inFlight--;
          if (this.again.delete(key)) this.enqueue(key);
          this.pump();
        });
    }
  }
}
