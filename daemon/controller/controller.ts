/**
 * The policy side of sluice-controller: the cluster's objects, fed as an agent feeds its engine
 * (the same intake: Pods with their published addresses, rival claims of a reused address settled
 * the same way, Pods without an address kept out), into one engine for the whole cluster, whose
 * ChangeSets become every Node's view (computation.ts) in the sink (the store the API serves).
 *
 * Feeding is synchronous per event, so each Node's view changes in the order the cluster did.
 */
import type { Logger } from 'pino';
import { PolicyIntake } from '../enforcement/intake.js';
import type { WatchEvent } from '../enforcement/watch/clusterwatch.js';
import { PolicyEngine } from '../policy/engine.js';
import { ClusterComputation, type NodeViewSink } from './computation.js';

export interface PolicyControllerOptions {
  log: Pick<Logger, 'warn' | 'error'>;
  sink: NodeViewSink;
}

export class PolicyController {
  readonly engine: PolicyEngine;
  readonly computation: ClusterComputation;
  private readonly intake: PolicyIntake;
  private changeCount = 0;

  constructor(opts: PolicyControllerOptions) {
    const { log } = opts;
    this.engine = new PolicyEngine({
      trackMembers: true,
      log: (e) => log.warn({ kind: e.kind, namespace: e.namespace, name: e.name, field: e.field, err: e.message }, 'policy: invalid object ignored'),
    });
    this.computation = new ClusterComputation(this.engine, opts.sink);
    this.intake = new PolicyIntake({
      engine: this.engine,
      // The controller has no Pods of its own: no local attachment is ever merged in.
      nodeName: '',
      log,
      changed: (cs) => {
        this.changeCount++;
        this.computation.apply(cs);
      },
      changes: () => this.changeCount,
      podsChanged: () => {},
      serviceCidrsChanged: () => {},
    });
  }

  /** One object event of the cluster's informers. */
  onWatchEvent(ev: WatchEvent): void {
    this.intake.onWatchEvent(ev);
  }

  /** Engine changes taken in so far. */
  get changes(): number {
    return this.changeCount;
  }

  /** Figures for /status. */
  status(): { changes: number; invalid: number; objects: ReturnType<ClusterComputation['counts']> } {
    return { changes: this.changeCount, invalid: this.engine.errors().length, objects: this.computation.counts() };
  }
}
