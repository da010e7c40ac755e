/**
 * A bounded FIFO with an async-iterator face. Producers never wait: when the queue is full the new
 * item is dropped and counted, so a packet-in flood costs the agent a counter increment, not memory.
 */
export class BoundedQueue<T> {
  private items: (T | undefined)[];
  private head = 0;
  private size = 0;
  private waiters: ((r: IteratorResult<T>) => void)[] = [];
  private ended = false;
  dropped = 0;
  accepted = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`queue capacity ${capacity} is not a positive integer`);
    this.items = new Array(capacity);
  }

  get length(): number {
    return this.size;
  }

  /** Adds an item; false (and counted as dropped) when the queue is full or ended. */
  push(item: T): boolean {
    if (this.ended) {
      this.dropped++;
      return false;
    }
    const waiter = this.waiters.shift();
    if (waiter) {
      this.accepted++;
      waiter({ value: item, done: false });
      return true;
    }
    if (this.size === this.capacity) {
      this.dropped++;
      return false;
    }
    this.items[(this.head + this.size) % this.capacity] = item;
    this.size++;
    this.accepted++;
    return true;
  }

  /** Takes the oldest item without waiting. */
  shift(): T | undefined {
    if (this.size === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.capacity;
    this.size--;
    return item;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.size > 0) return Promise.resolve({ value: this.shift() as T, done: false });
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Ends iteration: waiting consumers finish; queued items can still be drained. */
  end(): void {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return {
      next: () => this.next(),
      return: async () => ({ value: undefined, done: true }),
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }
}
