/**
 * When the agent's background work runs, on an injected Clock: the periodic resync followed by
 * adoption of unattached Pods, the flow watchdog, the invalid-policy Events, the look for a quiet
 * moment to collect garbage in, host-change repairs collapsed into one resync, and adoption after
 * a re-chain. What runs is given as narrow
 * functions (real: the node reconciler, the Pod adopter, the agent's Events).
 */
import { type Clock, type TimerHandle, every } from '../clock.js';
import { QUIET_CHECK_MS } from '../quiet-collector.js';

/** The work the schedules start. */
export interface ScheduledWork {
  /** A full resync (real: NodeReconciler.resync, which runs resyncs one at a time). */
  resync(reason: string): Promise<unknown>;
  /** The flow watchdog (real: NodeReconciler.checkFlows, which skips while one check runs). */
  checkFlows(): Promise<void>;
  /** Attaches running Pods that cross no bridge (real: PodAdopter.adoptUnattached, which folds overlapping calls). */
  adoptUnattached(reason: string): Promise<void>;
  /** Warning Events on objects the agent cannot honour: invalid policies, Services outside the Service ranges (real: NodeEvents, deduplicated). */
  reportInvalidPolicies(): void;
  /** One full garbage collection if the agent went quiet after a burst (real: QuietCollector.check). */
  collectIfQuiet(): void;
}

export interface ScheduleOptions {
  clock: Clock;
  work: ScheduledWork;
  resyncIntervalMs: number;
  flowCheckIntervalMs: number;
}

/** How often invalid policy objects are looked for (Events only for new problems). */
export const INVALID_POLICY_CHECK_MS = 10_000;
/** Host changes within this window (a Pod teardown, a flushed table) collapse into one resync. */
export const REPAIR_COLLAPSE_MS = 200;
/**
 * Adoption after a re-chain, this long after it: ADDs that started before it have finished by the
 * first, and a Pod's IP reaches the API only after its sandbox is up, hence the second.
 */
export const ADOPT_AFTER_RECHAIN_MS: readonly number[] = [2000, 10_000];

export class NodeSchedules {
  private readonly stops: (() => void)[] = [];
  private repairTimer?: TimerHandle | undefined;
  private readonly onceTimers = new Set<TimerHandle>();
  private started = false;
  private stopped = false;

  constructor(private readonly o: ScheduleOptions) {}

  /**
   * Arms the periodic work and looks for invalid policies at once. A periodic resync is asked for
   * at every tick even while the previous one still runs: the reconciler queues it behind that one
   * (never two at a time), and each resync's adoption follows it.
   */
  start(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    const { clock, work } = this.o;
    this.stops.push(
      every(clock, this.o.resyncIntervalMs, () => void work.resync('periodic').then(() => work.adoptUnattached('periodic resync'))),
      every(clock, this.o.flowCheckIntervalMs, () => void work.checkFlows()),
      every(clock, INVALID_POLICY_CHECK_MS, () => work.reportInvalidPolicies()),
      every(clock, QUIET_CHECK_MS, () => work.collectIfQuiet()),
    );
    work.reportInvalidPolicies();
  }

  /** A host change that may need repair: one resync REPAIR_COLLAPSE_MS after the last of a burst. */
  repairSoon(reason: string): void {
    if (this.stopped) return;
    const { clock, work } = this.o;
    clock.clearTimeout(this.repairTimer);
    this.repairTimer = clock.setTimeout(() => {
      this.repairTimer = undefined;
      void work.resync(reason);
    }, REPAIR_COLLAPSE_MS);
  }

  /** Pods created while the chain was broken are adopted: looked for at each of ADOPT_AFTER_RECHAIN_MS. */
  afterRechain(file: string): void {
    if (this.stopped) return;
    const { clock, work } = this.o;
    for (const ms of ADOPT_AFTER_RECHAIN_MS) {
      const h = clock.setTimeout(() => {
        this.onceTimers.delete(h);
        void work.adoptUnattached(`re-chained ${file}`);
      }, ms);
      this.onceTimers.add(h);
    }
  }

  /** Cancels every timer; later repair and re-chain requests are ignored. */
  stop(): void {
    this.stopped = true;
    for (const s of this.stops.splice(0)) s();
    this.o.clock.clearTimeout(this.repairTimer);
    this.repairTimer = undefined;
    for (const h of this.onceTimers) this.o.clock.clearTimeout(h);
    this.onceTimers.clear();
  }
}
