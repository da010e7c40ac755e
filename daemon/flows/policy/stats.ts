/**
 * Per-rule statistics from the bridge's own counters (pure): every enforced rule has counter flows
 * in the Metric tables (see compile.ts metricContributions), keyed by its conjunction id only, so
 * they are not re-installed when the rule's priority moves, another rule changes or the agent
 * restarts, and their n_packets/n_bytes keep counting. The agent reads them with one dump per
 * table; nothing is counted per packet in the agent.
 *
 * What a rule's counters mean:
 * - Allow: `sessions` = connections it allowed (their first packet), `packets`/`bytes` = every
 *   packet of those connections through this node's bridge, both directions (the later ones are
 *   matched by the rule id committed to the connection's ct_label);
 * - Drop / Reject: `packets`/`bytes` dropped (a retransmitted SYN counts again; a dropped attempt is
 *   never a connection, so there are no sessions).
 */
import type { Direction, RuleRef } from '../../policy/types.js';

/** One counter flow of a rule unit. */
export interface MetricFlow {
  cookie: string;
  conjId: number;
  /** drop: packets a Drop/Reject rule dropped; new: first packets of allowed connections; est: their later packets. */
  counts: 'drop' | 'new' | 'est';
}

export interface RuleStatistics {
  ref: RuleRef;
  direction: Direction;
  action: 'Allow' | 'Drop' | 'Reject' | 'Pass';
  sessions: number;
  packets: number;
  bytes: number;
}

export interface FlowCounter {
  packets: number;
  bytes: number;
}

/**
 * n_packets / n_bytes by cookie from `ovs-ofctl dump-flows` output (any table, names on or off).
 * Lines without a cookie or counters (the reply header) are skipped.
 */
export function parseFlowCounters(dump: string): Map<string, FlowCounter> {
  const out = new Map<string, FlowCounter>();
  for (const line of dump.split('\n')) {
    const cookie = /\bcookie=(0x[0-9a-f]+)/.exec(line)?.[1];
    const packets = /\bn_packets=(\d+)/.exec(line)?.[1];
    const bytes = /\bn_bytes=(\d+)/.exec(line)?.[1];
    if (!cookie || packets === undefined || bytes === undefined) continue;
    // Cookies are printed without leading zeros; sluice's always have its 0x51ce prefix, so none.
    out.set(cookie, { packets: Number(packets), bytes: Number(bytes) });
  }
  return out;
}

/**
 * Keeps per-cookie totals monotonic across counter resets (ovs-vswitchd restarted and the flows
 * were replayed with zero counters): a smaller reading adds the last one to the flow's baseline.
 */
export class CounterBaseline {
  private readonly last = new Map<string, FlowCounter>();
  private readonly base = new Map<string, FlowCounter>();

  apply(read: Map<string, FlowCounter>): Map<string, FlowCounter> {
    const out = new Map<string, FlowCounter>();
    for (const [cookie, now] of read) {
      const prev = this.last.get(cookie);
      let base = this.base.get(cookie) ?? { packets: 0, bytes: 0 };
      if (prev && now.packets < prev.packets) {
        base = { packets: base.packets + prev.packets, bytes: base.bytes + prev.bytes };
        this.base.set(cookie, base);
      }
      this.last.set(cookie, now);
      out.set(cookie, { packets: base.packets + now.packets, bytes: base.bytes + now.bytes });
    }
    // Flows that are gone (their rule was deleted) take their history with them.
    for (const cookie of [...this.last.keys()]) {
      if (read.has(cookie)) continue;
      this.last.delete(cookie);
      this.base.delete(cookie);
    }
    return out;
  }
}

/** What the statistics need to know about a conjunction id. */
export interface RuleOfConj {
  ref: RuleRef;
  direction: Direction;
  action: RuleStatistics['action'];
}

/**
 * A rule as the user names it: several conjunction ids (a toServices rule's units, the parts of a
 * rule split by named ports) and successive ids (the rule moved to another index) are one rule.
 */
export const ruleKey = (r: Pick<RuleOfConj, 'ref' | 'direction'>): string =>
  [r.ref.kind, r.ref.namespace ?? '', r.ref.name, r.direction, r.ref.rule].join('\u0000');

export interface CarriedTotals {
  sessions: number;
  packets: number;
  bytes: number;
}

/**
 * Statistics per rule: the counters of each rule's metric flows summed over its units, plus what its
 * earlier counter flows had counted before they were replaced (`carried`, by ruleKey). Rules with no
 * counter flow installed yet are reported with zeros; conjunction ids without a rule are skipped.
 */
export function ruleStatistics(
  metricFlows: readonly MetricFlow[],
  counters: ReadonlyMap<string, FlowCounter>,
  describe: (conjId: number) => RuleOfConj | undefined,
  carried: ReadonlyMap<string, CarriedTotals> = new Map(),
): RuleStatistics[] {
  const byRule = new Map<string, RuleStatistics>();
  for (const f of metricFlows) {
    const rule = describe(f.conjId);
    if (!rule) continue;
    const key = ruleKey(rule);
    let s = byRule.get(key);
    if (!s) {
      const c = carried.get(key) ?? { sessions: 0, packets: 0, bytes: 0 };
      byRule.set(key, (s = { ref: rule.ref, direction: rule.direction, action: rule.action, ...c }));
    }
    const c = counters.get(f.cookie);
    if (!c) continue;
    s.packets += c.packets;
    s.bytes += c.bytes;
    if (f.counts === 'new') s.sessions += c.packets;
  }
  return [...byRule.values()].sort(compareStats);
}

const ZERO: FlowCounter = { packets: 0, bytes: 0 };
const minus = (a: FlowCounter, b: FlowCounter): FlowCounter => ({ packets: Math.max(0, a.packets - b.packets), bytes: Math.max(0, a.bytes - b.bytes) });

interface KnownFlow {
  key: string;
  counts: MetricFlow['counts'];
  last: FlowCounter;
  /** What the flow had counted for earlier rules when this rule took it over. */
  offset: FlowCounter;
}

/** The carrier's state, kept in the agent's state directory so an agent restart keeps it. */
export interface CarrierState {
  totals: [string, CarriedTotals][];
  known: [string, KnownFlow][];
}

/**
 * Keeps each rule's counts when its counter flows change hands. Rule ids follow a rule's index in
 * its policy, so inserting a rule moves the rules after it to other conjunction ids: a rule's old
 * counter flow is removed, or is taken over by the rule now at its index (same id, same flow, its
 * counter running on). Either way the counts read last for the old rule go to that rule's carried
 * totals, and a taken-over flow counts for its new rule from the value it had at the handover.
 * What was counted between the last read and the change goes to the rule that holds the flow at the
 * next read: reading right before each change would put an await into the enforcer's flush, between
 * compiling and committing, where another flush must not start.
 */
export class RuleCountCarrier {
  private readonly known = new Map<string, KnownFlow>();
  private readonly totals = new Map<string, CarriedTotals>();

  constructor(state?: CarrierState) {
    for (const [k, v] of state?.totals ?? []) this.totals.set(k, v);
    for (const [k, v] of state?.known ?? []) this.known.set(k, v);
  }

  private carry(k: KnownFlow): void {
    const c = minus(k.last, k.offset);
    const t = this.totals.get(k.key) ?? { sessions: 0, packets: 0, bytes: 0 };
    t.packets += c.packets;
    t.bytes += c.bytes;
    if (k.counts === 'new') t.sessions += c.packets;
    this.totals.set(k.key, t);
  }

  /** Records a read of `flows` (metric flows with the rule keys they stand for) and their counters. */
  observe(flows: readonly (MetricFlow & { key: string })[], counters: ReadonlyMap<string, FlowCounter>): void {
    for (const f of flows) {
      const counter = counters.get(f.cookie);
      if (!counter) continue;
      const k = this.known.get(f.cookie);
      if (!k) {
        this.known.set(f.cookie, { key: f.key, counts: f.counts, last: counter, offset: ZERO });
      } else if (k.key !== f.key || k.counts !== f.counts) {
        this.carry(k);
        this.known.set(f.cookie, { key: f.key, counts: f.counts, last: counter, offset: k.last });
      } else {
        k.last = counter;
      }
    }
  }

  /** Flows no longer installed: their last counts go to their rule. Rules that are gone lose their totals. */
  retire(currentCookies: ReadonlySet<string>, currentKeys: ReadonlySet<string>): void {
    for (const [cookie, k] of this.known) {
      if (currentCookies.has(cookie)) continue;
      this.carry(k);
      this.known.delete(cookie);
    }
    for (const key of [...this.totals.keys()]) if (!currentKeys.has(key)) this.totals.delete(key);
  }

  /** The counters as they count for each flow's current rule (without what it counted for earlier ones). */
  adjusted(counters: ReadonlyMap<string, FlowCounter>): Map<string, FlowCounter> {
    const out = new Map<string, FlowCounter>();
    for (const [cookie, c] of counters) out.set(cookie, minus(c, this.known.get(cookie)?.offset ?? ZERO));
    return out;
  }

  carried(): ReadonlyMap<string, CarriedTotals> {
    return this.totals;
  }

  state(): CarrierState {
    return { totals: [...this.totals], known: [...this.known] };
  }
}

function compareStats(a: RuleStatistics, b: RuleStatistics): number {
  const key = (s: RuleStatistics) => [s.ref.kind, s.ref.namespace ?? '', s.ref.name, s.direction, s.ref.rule].join('\u0000');
  const ka = key(a);
  const kb = key(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

