/**
 * What the controller spends on each cluster event: the engine, every Node's view and the watch
 * events sent, timed around one event's batch. The last `window` events are kept, so /status says
 * what an event costs now (after the initial lists, those are the events that count), not on
 * average since start-up.
 */
export interface EventCostFigures {
  /** Events timed since start, and their time in all (ms): the difference of two readings is what the events between cost. */
  events: number;
  totalMs: number;
  /** Over the last `window` events (0 when there were none): milliseconds. */
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

export class EventCost {
  private readonly recent: Float64Array;
  private count = 0;
  private total = 0;

  constructor(private readonly window = 1000) {
    if (!(window >= 1)) throw new Error(`event cost window ${window} must be at least 1`);
    this.recent = new Float64Array(window);
  }

  record(ms: number): void {
    this.recent[this.count % this.window] = ms;
    this.count++;
    this.total += ms;
  }

  figures(): EventCostFigures {
    const n = Math.min(this.count, this.window);
    if (n === 0) return { events: 0, totalMs: 0, p50Ms: 0, p90Ms: 0, p99Ms: 0, maxMs: 0 };
    const sorted = this.recent.slice(0, n).sort();
    const at = (p: number) => round(sorted[Math.min(n - 1, Math.floor(n * p))]!);
    return { events: this.count, totalMs: round(this.total), p50Ms: at(0.5), p90Ms: at(0.9), p99Ms: at(0.99), maxMs: round(sorted[n - 1]!) };
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
