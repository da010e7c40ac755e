/**
 * What each Node's bridge enforces, as its agent reports it (POST /realized-views): the versions of
 * its view, issued by this store, whose flows are on its bridge. A new Pod's realization question
 * waits here for the Nodes of its span, so the new Pod's agent need not ask each of them: one
 * report per Node and commit answers for every Pod that commit holds, however many Pods start at
 * once and however wide their spans.
 *
 * A report replaces the Node's last one: an agent that restarted reports what its bridge holds now.
 * A report is trusted while the request that carried it lasts or was ended cleanly (the agent
 * opens the next): one whose request broke goes (`broken`), since the agent may be gone and its
 * bridge with it; the Node is then asked directly until it reports again. Every report goes when
 * this replica stops leading (clear): a later term may meet agents that followed another leader
 * meanwhile, and they report again.
 */
import type { Clock } from '../clock.js';
import { type ViewVersions, viewCovers } from '../controlplane/types.js';

interface Pending {
  /** Node → the versions it must report, for the Nodes that have not yet. */
  left: Map<string, ViewVersions>;
  finish(): void;
}

export class RealizedViews {
  private readonly reports = new Map<string, { versions: ViewVersions; source: object }>();
  /** Node → the questions waiting for its report. */
  private readonly waiting = new Map<string, Set<Pending>>();
  private readonly pending = new Set<Pending>();
  private reportCount = 0;

  constructor(private readonly clock: Clock) {}

  /** Node `node`'s bridge enforces its view at `v` (its agent says so, on the request `source`). */
  report(node: string, v: ViewVersions, source: object): void {
    this.reports.set(node, { versions: v, source });
    this.reportCount++;
    const waiting = this.waiting.get(node);
    if (!waiting) return;
    for (const p of [...waiting]) {
      const need = p.left.get(node);
      if (need === undefined || !viewCovers(v, need)) continue;
      p.left.delete(node);
      waiting.delete(p);
      if (p.left.size === 0) p.finish();
    }
    if (waiting.size === 0) this.waiting.delete(node);
  }

  /** The request `source` that carried Node `node`'s last report broke: that report goes (a later one, on another request, stays). */
  broken(node: string, source: object): void {
    if (this.reports.get(node)?.source === source) this.reports.delete(node);
  }

  /** Node `node` reported at least `need`. */
  confirmed(node: string, need: ViewVersions): boolean {
    const have = this.reports.get(node);
    return have !== undefined && viewCovers(have.versions, need);
  }

  /**
   * Resolves once every Node of `need` that reports has reported at least its versions, or after
   * `waitMs`. A Node with no report kept (its agent does not report, has not yet in this term, or
   * its request broke) is not waited for: the new Pod's agent asks it directly, and should not
   * lose its time here first.
   */
  whenConfirmed(need: ReadonlyMap<string, ViewVersions>, waitMs: number): Promise<void> {
    const left = new Map([...need].filter(([node, v]) => this.reports.has(node) && !this.confirmed(node, v)));
    if (left.size === 0 || waitMs <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const p: Pending = {
        left,
        finish: () => {
          if (!this.pending.delete(p)) return;
          this.clock.clearTimeout(timer);
          for (const node of p.left.keys()) {
            const waiting = this.waiting.get(node);
            waiting?.delete(p);
            if (waiting?.size === 0) this.waiting.delete(node);
          }
          resolve();
        },
      };
      const timer = this.clock.setTimeout(() => p.finish(), waitMs);
      this.pending.add(p);
      for (const node of left.keys()) {
        let waiting = this.waiting.get(node);
        if (!waiting) this.waiting.set(node, (waiting = new Set()));
        waiting.add(p);
      }
    });
  }

  /** Questions waiting now. */
  get waitingQuestions(): number {
    return this.pending.size;
  }

  /** Every report goes (this replica stopped leading); waiting questions are answered with what is confirmed: nothing. */
  clear(): void {
    this.reports.clear();
    for (const p of [...this.pending]) p.finish();
  }

  /** Figures for /status. */
  status(): { nodes: number; reports: number; waitingQuestions: number } {
    return { nodes: this.reports.size, reports: this.reportCount, waitingQuestions: this.pending.size };
  }
}
