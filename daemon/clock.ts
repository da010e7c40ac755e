/**
 * Time as the agent's schedulers see it. Components that wait (coalescing windows, retry delays)
 * take a Clock instead of calling the global timers, so their tests step time by hand instead of
 * sleeping on real timers and hoping the machine kept up.
 */
export interface Clock {
  /** Milliseconds, monotonic enough for durations (wall clock in production). */
  now(): number;
  /** Runs `fn` once after `ms`; the handle cancels it. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle | undefined): void;
}

/** Opaque to callers: a Node timer for the real clock, a number for a manual one. */
export type TimerHandle = { readonly timer: unknown };

/** Node's longest timer: a longer delay would run at once (with a warning), so it is capped to this. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Node's timers. A delay of 0 runs as an immediate: Node gives a 0 ms timer at least 1 ms and
 * runs it only in the loop's next timers phase, which an idle agent's policy commit would wait
 * for on every change; an immediate runs right after the I/O callbacks of this loop turn (so the
 * events read together are still handled together).
 */
export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => (ms <= 0 ? { timer: setImmediate(fn), immediate: true } : { timer: setTimeout(fn, Math.min(ms, MAX_TIMER_MS)) }),
  clearTimeout: (h) => {
    if (!h) return;
    if ('immediate' in h) clearImmediate(h.timer as NodeJS.Immediate);
    else clearTimeout(h.timer as NodeJS.Timeout);
  },
};

/**
 * Runs `fn` every `ms` on `clock` until the returned function is called, as setInterval does: the
 * next run is armed before this one starts, so a slow or failing run does not shift the cadence.
 */
export function every(clock: Clock, ms: number, fn: () => void): () => void {
  let handle: TimerHandle | undefined;
  let stopped = false;
  const arm = () => {
    handle = clock.setTimeout(() => {
      if (stopped) return;
      arm();
      fn();
    }, ms);
  };
  arm();
  return () => {
    stopped = true;
    clock.clearTimeout(handle);
  };
}

/**
 * Pauses on a clock that all end at once when their owner closes (a background loop stops
 * waiting instead of sleeping out its backoff).
 */
export class Pauses {
  private readonly timers = new Map<TimerHandle, () => void>();
  private closed = false;

  constructor(private readonly clock: Clock) {}

  /** Resolves after `ms`, or at once when closed. */
  sleep(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const t = this.clock.setTimeout(() => {
        this.timers.delete(t);
        resolve();
      }, ms);
      this.timers.set(t, resolve);
    });
  }

  /** Ends every pause now and every later one at once. */
  close(): void {
    this.closed = true;
    for (const [t, end] of this.timers) {
      this.clock.clearTimeout(t);
      end();
    }
    this.timers.clear();
  }
}

/**
 * A reply deadline that a busy event loop cannot fake. After a long synchronous stretch (a cold
 * policy compile, a GC pause), expired timers run before the poll phase reads the sockets, so a
 * reply that arrived in time would be reported missing and a healthy OVS or API server blamed.
 * `expire` therefore runs only if the reply has still not cancelled the deadline after one more
 * pass through the poll phase. Returns the cancel function.
 */
export function replyDeadline(ms: number, expire: () => void): () => void {
  let cancelled = false;
  const timer = setTimeout(() => setImmediate(() => cancelled || expire()), ms);
  return () => {
    cancelled = true;
    clearTimeout(timer);
  };
}
