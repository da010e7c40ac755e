/**
 * Full garbage collections the agent asks for, so its RSS follows what it holds rather than what
 * it once did: one when start-up is done (collectNow), and one whenever it has gone quiet after a
 * burst of work (check).
 *
 * Start-up leaves tens of MiB of dead objects in the old generation (the initial list bodies and
 * their parsed objects, the first flow bundle), and the same holds after any burst.
 *
 * Why V8 alone does not: it collects the old generation when that generation reaches a limit set
 * after the last full collection, and a burst (a cold start whose new Pods wait on thousands of
 * Nodes, a relist, a large policy change) raises that limit with it. An agent that then idles
 * allocates too little to reach the limit again. Measured at 150 000 Pods (bench/scale-lab):
 * after its Pods' admissions and the churn, an agent's heap held 86 MiB of which 58 MiB were
 * live, and nothing collected it for minutes.
 *
 * At that size an agent's periodic work (resyncs, sweeps, flow checks) leaves tens of MiB of
 * garbage a minute, so a quiet agent there collects about once a minute (QUIET_MIN_INTERVAL_MS):
 * one full collection of ~60 MiB of live heap a minute.
 *
 * The decision is pure (decideQuietCollection) over injected readings; the agent's schedules call
 * check() every QUIET_CHECK_MS.
 */
import { performance } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import type { Clock } from './clock.js';

/** How often the agent looks (daemon/node/schedules.ts). */
export const QUIET_CHECK_MS = 10_000;
/** Busy share of the event loop over the last check's window below which the agent is quiet. */
export const QUIET_UTILIZATION = 0.05;
/** Heap growth since the last full collection that is worth one: this many bytes, or … */
export const QUIET_GROWTH_MIN_BYTES = 16 * 2 ** 20;
/** … this share of the heap the last full collection left, whichever is larger. */
export const QUIET_GROWTH_SHARE = 0.25;
/** At most one quiet collection this often: a full collection pauses the loop (tens of ms at 60 MiB). */
export const QUIET_MIN_INTERVAL_MS = 60_000;

export interface QuietReadings {
  /** The JS heap in use now (bytes). */
  heapUsed: number;
  /** The event loop's busy share (0–1) since the previous check. */
  utilization: number;
  now: number;
}

export interface QuietState {
  /** The heap in use right after the last full collection (or the lowest seen since). */
  floor: number;
  /** When the last quiet collection ran. */
  lastAt: number;
}

/** Whether to collect now: the loop is quiet, the heap grew well past its floor, and none ran recently. */
export function decideQuietCollection(s: QuietState, r: QuietReadings): boolean {
  if (r.utilization >= QUIET_UTILIZATION) return false;
  if (r.now - s.lastAt < QUIET_MIN_INTERVAL_MS) return false;
  return r.heapUsed - s.floor >= Math.max(QUIET_GROWTH_MIN_BYTES, s.floor * QUIET_GROWTH_SHARE);
}

export interface QuietCollectorDeps {
  now(): number;
  heapUsed(): number;
  /** The loop's busy share since the previous call (real: performance.eventLoopUtilization). */
  utilization(): number;
  /** A full collection (real: gc(), exposed by --expose-gc); false when it cannot run. */
  collect(): boolean;
}

export interface QuietCollectorStatus {
  /** Quiet collections run since the agent started. */
  collections: number;
  /** Heap freed by the last one (MiB). */
  lastFreedMiB?: number;
}

export class QuietCollector {
  private readonly state: QuietState;
  private collections = 0;
  private lastFreed?: number;

  constructor(private readonly deps: QuietCollectorDeps) {
    this.state = { floor: deps.heapUsed(), lastAt: Number.NEGATIVE_INFINITY };
  }

  /** One full collection now (start-up is done); what it leaves is the floor. Returns whether it ran. */
  collectNow(): boolean {
    if (!this.deps.collect()) return false;
    this.state.floor = this.deps.heapUsed();
    return true;
  }

  /** One look; collects when decideQuietCollection says so. Returns whether it collected. */
  check(): boolean {
    const r: QuietReadings = { heapUsed: this.deps.heapUsed(), utilization: this.deps.utilization(), now: this.deps.now() };
    // V8 collected by itself: what it left is the floor.
    if (r.heapUsed < this.state.floor) this.state.floor = r.heapUsed;
    if (!decideQuietCollection(this.state, r)) return false;
    if (!this.deps.collect()) return false;
    const after = this.deps.heapUsed();
    this.state.floor = after;
    this.state.lastAt = r.now;
    this.collections++;
    this.lastFreed = r.heapUsed - after;
    return true;
  }

  status(): QuietCollectorStatus {
    return { collections: this.collections, ...(this.lastFreed !== undefined ? { lastFreedMiB: Math.round((this.lastFreed / 2 ** 20) * 10) / 10 } : {}) };
  }
}

/** The agent's collector: V8's heap, the event loop's utilization, gc() (only with --expose-gc). */
export function realQuietCollector(clock: Clock): QuietCollector {
  let last = performance.eventLoopUtilization();
  return new QuietCollector({
    now: () => clock.now(),
    heapUsed: () => getHeapStatistics().used_heap_size,
    utilization: () => {
      const now = performance.eventLoopUtilization();
      const u = performance.eventLoopUtilization(now, last).utilization;
      last = now;
      return u;
    },
    collect: fullCollection,
  });
}

/** gc() when node runs with --expose-gc (daemon/node-flags.ts); false without it. */
export function fullCollection(): boolean {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc !== 'function') return false;
  gc();
  return true;
}
