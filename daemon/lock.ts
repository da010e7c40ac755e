/**
 * Many CNI operations at once, or one resync alone (so a resync never races a DEL's route
 * restore). An exclusive run waits for the shared ones in progress to finish; shared runs that
 * arrive meanwhile wait for it, so a resync is not starved by a stream of CNI calls.
 */
export class SharedExclusiveLock {
  private shared = 0;
  private exclusive: Promise<void> | undefined;
  private drained: (() => void) | undefined;

  async runShared<T>(fn: () => Promise<T>): Promise<T> {
    while (this.exclusive) await this.exclusive;
    this.shared++;
    try {
      return await fn();
    } finally {
      if (--this.shared === 0) this.drained?.();
    }
  }

  async runExclusive<T>(fn: () => Promise<T>): Promise<T> {
    while (this.exclusive) await this.exclusive;
    let release!: () => void;
    this.exclusive = new Promise((r) => (release = r));
    try {
      if (this.shared > 0) await new Promise<void>((r) => (this.drained = r));
      this.drained = undefined;
      return await fn();
    } finally {
      this.exclusive = undefined;
      release();
    }
  }
}
