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

export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => ({ timer: setTimeout(fn, ms) }),
  clearTimeout: (h) => {
    if (h) clearTimeout(h.timer as NodeJS.Timeout);
  },
};
