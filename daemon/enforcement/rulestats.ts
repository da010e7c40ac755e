/**
 * Per-rule statistics of the enforced policy: each rule's counter flows (the Metric tables) read
 * from the bridge, plus what the counts of flows that went away (a recompile, a flow that changed
 * hands) had reached, carried to their rule and kept in the state directory across agent
 * restarts (flows/policy/stats.ts holds the pure parts).
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import {
  type CarrierState,
  CounterBaseline,
  type FlowCounter,
  type MetricFlow,
  parseFlowCounters,
  type PolicyFlows,
  RuleCountCarrier,
  ruleKey,
  type RuleOfConj,
  ruleStatistics,
  type RuleStatistics,
} from '../flows/policy/index.js';

export class RuleStatsKeeper {
  private readonly counterBaseline = new CounterBaseline();
  private readonly carrier: RuleCountCarrier;
  private saved?: string;

  constructor(
    private readonly policyFlows: PolicyFlows,
    private readonly opts: { stateDir?: string | undefined; log: Pick<Logger, 'warn'> },
  ) {
    this.carrier = new RuleCountCarrier(this.load());
  }

  /** Every enforced rule's statistics, from `dump` (the Metric tables' flows with their counters). */
  async ruleStats(dump: () => Promise<string>): Promise<RuleStatistics[]> {
    const counters = await this.readCounters(dump);
    return ruleStatistics(this.policyFlows.metricFlows(), this.carrier.adjusted(counters), (id) => this.ruleOfConj(id), this.carrier.carried());
  }

  private get path(): string | undefined {
    return this.opts.stateDir && join(this.opts.stateDir, 'rule-counts.json');
  }

  private load(): CarrierState | undefined {
    const path = this.path;
    if (!path || !existsSync(path)) return undefined;
    try {
      return JSON.parse(readFileSync(path, 'utf8')) as CarrierState;
    } catch (err) {
      this.opts.log.warn({ path, err: (err as Error).message }, 'policy: unreadable rule counts file; per-rule statistics start from the bridge counters alone');
      return undefined;
    }
  }

  /** Writes the carried counts when they changed (atomic replace). */
  private save(): void {
    const path = this.path;
    if (!path) return;
    const text = JSON.stringify(this.carrier.state());
    if (text === this.saved) return;
    try {
      writeFileSync(`${path}.tmp`, text);
      renameSync(`${path}.tmp`, path);
      this.saved = text;
    } catch (err) {
      this.opts.log.warn({ path, err: (err as Error).message }, 'policy: could not save rule counts');
    }
  }

  private ruleOfConj(conjId: number): RuleOfConj | undefined {
    const r = this.policyFlows.describe(conjId);
    return r && { ref: r.ref, direction: r.direction, action: r.action };
  }

  /** The current counter flows with their rule keys (for the carrier). */
  private keyedMetricFlows(): (MetricFlow & { key: string })[] {
    return this.policyFlows.metricFlows().flatMap((m) => {
      const r = this.ruleOfConj(m.conjId);
      return r ? [{ ...m, key: ruleKey(r) }] : [];
    });
  }

  /** Reads the counters, records them, and carries those of flows that are gone or changed hands to their rules. */
  private async readCounters(dump: () => Promise<string>): Promise<Map<string, FlowCounter>> {
    const counters = this.counterBaseline.apply(parseFlowCounters(await dump()));
    const now = this.keyedMetricFlows();
    this.carrier.observe(now, counters);
    this.carrier.retire(new Set(now.map((f) => f.cookie)), new Set(now.map((f) => f.key)));
    this.save();
    return counters;
  }
}
