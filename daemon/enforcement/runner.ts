/**
 * Runs an async job on request, coalescing requests, with the idea of kube-proxy's
 * bounded-frequency runner: on an idle system a request runs on the next turn of the event loop;
 * requests during a run become one more run after it; and while runs follow each other closely
 * (the next request within `burstDelayMs` of the last run's end: a burst of events, a relist) the
 * next run waits `burstDelayMs`, so a storm of requests becomes a few large runs rather than one per
 * request. An urgent request (something waits on the run) skips the burst delay. Runs never overlap.
 */
import type { Clock, TimerHandle } from '../clock.js';

export interface RunnerOptions {
  clock: Clock;
  /** The delay before a run that follows the previous one closely (see the header). */
  burstDelayMs: number;
  run: () => Promise<void>;
}

export class CoalescingRunner {
  private timer?: TimerHandle | undefined;
  private running = false;
  private again = false;
  private urgent = false;
  private lastEnd?: number;
  private closed = false;

  constructor(private readonly opts: RunnerOptions) {}

  /** Plans a run (see the header for when it starts). */
  request(opts: { urgent?: boolean } = {}): void {
    if (this.closed) return;
    if (opts.urgent) this.urgent = true;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer && opts.urgent) {
      // Already planned, maybe behind the burst delay: an urgent request brings it forward.
      this.opts.clock.clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.timer) return;
    const { clock, burstDelayMs } = this.opts;
    const inBurst = this.lastEnd !== undefined && clock.now() - this.lastEnd < burstDelayMs;
    this.timer = clock.setTimeout(() => void this.runOnce(), inBurst && !this.urgent ? burstDelayMs : 0);
  }

  /** A run is planned or going on. */
  get busy(): boolean {
    return this.running || this.timer !== undefined;
  }

  close(): void {
    this.closed = true;
    this.opts.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private async runOnce(): Promise<void> {
    this.timer = undefined;
    if (this.closed) return;
    this.running = true;
    this.again = false;
    this.urgent = false;
    try {
      await this.opts.run();
    } finally {
      this.running = false;
      this.lastEnd = this.opts.clock.now();
      if (this.again) this.request();
    }
  }
}
