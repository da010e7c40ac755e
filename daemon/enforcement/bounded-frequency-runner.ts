/**
 * Runs an async job on request, with the idea of kube-proxy's bounded-frequency runner: requests
 * coalesce; a run starts at least `minIntervalMs` after the previous one ended (so a storm of
 * requests becomes a few large runs, while a request on an idle system runs on the next turn of the
 * event loop); when `maxIntervalMs` is set a run also happens that long after the previous one
 * ended (or after construction) even if nobody asked; runs never overlap, and requests during a run
 * become exactly one more run after it. An urgent request (something waits on the run) skips the
 * minimum interval. Time is the injected Clock's, so tests step it by hand.
 */
import type { Clock, TimerHandle } from '../clock.js';

export interface BoundedFrequencyOptions {
  clock: Clock;
  /** Least time from the end of a run to the start of the next one (urgent requests excepted). */
  minIntervalMs: number;
  /** When set, the longest time from the end of a run (or construction) to the start of the next. */
  maxIntervalMs?: number;
  /** The job; it should not reject (a rejection is not caught here). */
  run: () => Promise<void>;
}

export class BoundedFrequencyRunner {
  private timer?: TimerHandle | undefined;
  /** When the planned timer fires. */
  private due?: number | undefined;
  private running = false;
  /** A request is waiting for its run. */
  private wanted = false;
  private urgent = false;
  /** When the last run ended (construction time before the first). */
  private lastEnd: number;
  private ran = false;
  private closed = false;

  constructor(private readonly opts: BoundedFrequencyOptions) {
    if (opts.maxIntervalMs !== undefined && opts.maxIntervalMs < opts.minIntervalMs) throw new Error('BoundedFrequencyRunner: maxIntervalMs below minIntervalMs');
    this.lastEnd = opts.clock.now();
    this.plan();
  }

  /** Asks for a run (see the header for when it starts). */
  request(opts: { urgent?: boolean } = {}): void {
    if (this.closed) return;
    this.wanted = true;
    if (opts.urgent) this.urgent = true;
    // The end of the current run plans the next one.
    if (!this.running) this.plan();
  }

  /** A requested run is waiting or a run is going on (a periodic run not yet due does not count). */
  get busy(): boolean {
    return this.running || this.wanted;
  }

  close(): void {
    this.closed = true;
    this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.due = undefined;
  }

  /** Arms the timer for the earliest run due: a requested one, else the periodic one. */
  private plan(): void {
    const { clock, minIntervalMs, maxIntervalMs } = this.opts;
    const now = clock.now();
    let at: number;
    if (this.wanted) at = this.urgent || !this.ran ? now : Math.max(now, this.lastEnd + minIntervalMs);
    else if (maxIntervalMs !== undefined) at = this.lastEnd + maxIntervalMs;
    else return;
    if (this.timer && this.due !== undefined && this.due <= at) return;
    clock.clearTimeout(this.timer);
    this.due = at;
    this.timer = clock.setTimeout(() => void this.runOnce(), at - now);
  }

  private async runOnce(): Promise<void> {
    this.timer = undefined;
    this.due = undefined;
    if (this.closed) return;
    this.running = true;
    this.wanted = false;
    this.urgent = false;
    try {
      await this.opts.run();
    } finally {
      this.running = false;
      this.ran = true;
      this.lastEnd = this.opts.clock.now();
      if (!this.closed) this.plan();
    }
  }
}
