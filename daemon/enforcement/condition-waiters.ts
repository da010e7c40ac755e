/**
 * Long-poll questions on local state: "resolve true as soon as this holds, false at the deadline".
 * Whoever changes what the conditions read calls poke(); each waiting condition is checked again
 * then. close() answers every waiting question no.
 */
import type { Clock } from '../clock.js';

export class ConditionWaiters {
  private readonly waiters = new Set<(closing?: boolean) => void>();
  private closed = false;

  constructor(private readonly clock: Clock) {}

  /** Resolves true as soon as `holds()` (checked now and at each poke), false after `waitMs` without it. */
  when(holds: () => boolean, waitMs: number): Promise<boolean> {
    if (holds()) return Promise.resolve(true);
    if (waitMs <= 0 || this.closed) return Promise.resolve(false);
    const { clock } = this;
    return new Promise((resolve) => {
      const done = (v: boolean) => {
        this.waiters.delete(check);
        clock.clearTimeout(timer);
        resolve(v);
      };
      const check = (closing?: boolean) => {
        if (closing) done(false);
        else if (holds()) done(true);
      };
      const timer = clock.setTimeout(() => done(false), waitMs);
      this.waiters.add(check);
    });
  }

  /** Something a waiting condition reads changed: each is checked again. */
  poke(): void {
    for (const check of [...this.waiters]) check();
  }

  get size(): number {
    return this.waiters.size;
  }

  /** Waiting questions are answered no; later ones at once. */
  close(): void {
    this.closed = true;
    for (const check of [...this.waiters]) check(true);
  }
}
