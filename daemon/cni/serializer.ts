/**
 * Orders CNI operations the way the spec's lifecycle rules expect a plugin to cope with them:
 * operations on one container run one at a time in arrival order, different containers run
 * concurrently, and an exclusive operation (GC) waits for everything in flight and holds back
 * everything that arrives after it until it is done.
 */
export class OperationSerializer {
  /** The completion of the last queued operation per key. */
  private readonly tails = new Map<string, Promise<void>>();
  /** Completion of the last exclusive operation; keyed operations start after it. */
  private barrier: Promise<void> = Promise.resolve();

  /** Runs `fn` after every earlier operation on `key` and after any earlier exclusive operation. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const before = Promise.all([this.tails.get(key), this.barrier]);
    const result = before.then(fn);
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Runs `fn` once every operation queued so far has finished; later ones wait for it. */
  runExclusive<T>(fn: () => Promise<T>): Promise<T> {
    const before = Promise.all([...this.tails.values(), this.barrier]);
    const result = before.then(fn);
    this.barrier = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }

  /** Number of keys with queued or running operations (for logs and tests). */
  get busyKeys(): number {
    return this.tails.size;
  }
}
