/**
 * Traceflows asked of the controller (`kubectl sluice traceflow`, POST …/traceflows through the
 * aggregation layer): the controller knows where the source Pod runs, and that Node's agent runs the
 * trace (and has the Node it leaves for observe it). The request waits here until that agent takes
 * it over its own authenticated connection to the controller (a long poll, GET /traceflow-tasks)
 * and posts the report back (POST /traceflow-results): the controller never connects to a Node, so
 * no credential crosses the node network and only agents that follow the controller take traces.
 */
import { randomUUID } from 'node:crypto';
import { type Clock, realClock, type TimerHandle } from '../clock.js';
import type { TraceTask } from '../controlplane/types.js';


/** How a trace ended: the agent's report, or why there is none with the HTTP code that says so. */
export type TraceTaskOutcome = { report: unknown } | { error: string; code: number };

/** Traces waiting for one Node's agent at most; more are refused (the agent runs one at a time). */
const MAX_QUEUED_PER_NODE = 4;

interface Pending {
  node: string;
  task: TraceTask;
  done(outcome: TraceTaskOutcome): void;
  timer: TimerHandle;
}

export class TraceflowBroker {
  private readonly clock: Clock;
  /** Per Node, the traces not taken yet, oldest first. */
  private readonly queued = new Map<string, Pending[]>();
  /** Traces by id, queued or taken. */
  private readonly byId = new Map<string, Pending>();
  /** Per Node, its agent's waiting long polls. */
  private readonly takers = new Map<string, Set<(p: Pending) => void>>();

  constructor(opts: { clock?: Clock } = {}) {
    this.clock = opts.clock ?? realClock;
  }

  /**
   * Asks `node`'s agent to run `task`; resolves with its outcome, or with a 504 when the agent did
   * not take and finish it within `waitMs`.
   */
  run(node: string, task: Omit<TraceTask, 'id'>, waitMs: number): Promise<TraceTaskOutcome> {
    const queue = this.queued.get(node) ?? [];
    if (queue.length >= MAX_QUEUED_PER_NODE) {
      return Promise.resolve({ code: 429, error: `${queue.length} traces already wait for Node ${node}'s agent; try again in a few seconds` });
    }
    return new Promise((resolve) => {
      const p: Pending = {
        node,
        task: { id: randomUUID(), ...task },
        done: (outcome) => {
          if (this.byId.get(p.task.id) !== p) return;
          this.byId.delete(p.task.id);
          this.clock.clearTimeout(p.timer);
          this.unqueue(p);
          resolve(outcome);
        },
        timer: this.clock.setTimeout(() => p.done({
          code: 504,
          error: `Node ${node}'s agent did not take and finish the trace within ${Math.round(waitMs / 1000)} s (only an agent with policySource: controller takes traces from the controller; sluicectl node traceflow runs one on the Node itself)`,
        }), waitMs),
      };
      this.byId.set(p.task.id, p);
      const takers = this.takers.get(node);
      const taker = takers && [...takers][0];
      if (taker) {
        takers.delete(taker);
        taker(p);
      } else {
        this.queued.set(node, [...queue, p]);
      }
    });
  }

  /**
   * The next trace for `node`'s agent: at once when one waits, else the first to come within
   * `waitMs` (undefined after that, or when `signal` aborts: the agent went away).
   */
  take(node: string, waitMs: number, signal?: AbortSignal): Promise<TraceTask | undefined> {
    const queue = this.queued.get(node);
    const first = queue?.shift();
    if (first) {
      if (queue!.length === 0) this.queued.delete(node);
      return Promise.resolve(first.task);
    }
    return new Promise((resolve) => {
      let takers = this.takers.get(node);
      if (!takers) this.takers.set(node, (takers = new Set()));
      const end = (task: TraceTask | undefined) => {
        this.clock.clearTimeout(timer);
        signal?.removeEventListener('abort', abort);
        takers!.delete(taker);
        if (takers!.size === 0 && this.takers.get(node) === takers) this.takers.delete(node);
        resolve(task);
      };
      const taker = (p: Pending) => end(p.task);
      const abort = () => end(undefined);
      const timer = this.clock.setTimeout(() => end(undefined), waitMs);
      signal?.addEventListener('abort', abort);
      takers.add(taker);
    });
  }

  /** The outcome of trace `id` from `node`'s agent; false when no such trace waits for that Node (gone, or another Node's). */
  complete(node: string, id: string, outcome: TraceTaskOutcome): boolean {
    const p = this.byId.get(id);
    if (!p || p.node !== node) return false;
    p.done(outcome);
    return true;
  }

  /** Ends every waiting trace (shutdown, or no longer the leader). */
  close(reason: string): void {
    for (const p of [...this.byId.values()]) p.done({ code: 503, error: reason });
  }

  private unqueue(p: Pending): void {
    const queue = this.queued.get(p.node);
    if (!queue) return;
    const rest = queue.filter((x) => x !== p);
    if (rest.length > 0) this.queued.set(p.node, rest);
    else this.queued.delete(p.node);
  }
}
