/**
 * The agent's Prometheus metrics (GET /metrics, text exposition format 0.0.4).
 *
 * Two kinds of figures:
 * - events the agent observes as they happen (CNI requests and their latency, API event → flows
 *   committed), recorded through the `observe*` methods;
 * - state the components already keep (attached Pods, desired flows per table, OVS and watch
 *   health, packet-in/reject/audit counters), read from `MetricSources` at scrape time, so no
 *   component has to know about Prometheus and a scrape always sees the current state.
 * Counters read from a component's own running total stay monotonic even if that total restarts
 * (a component re-created): only increases are added.
 *
 * prom-client does the exposition (escaping, histogram buckets, default process metrics): a
 * hand-written formatter would have to get all of that right again.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RuleStatistics } from './flows/policy/stats.js';

/** One watched API resource as the informers report it. */
export interface WatchMetric {
  resource: string;
  synced: boolean;
  /** The resource is not served (a CRD that is not installed). */
  absent: boolean;
  objects: number;
  relists: number;
  restarts: number;
}

/** What policy enforcement reports at scrape time (absent when enforcement is off). */
export interface EnforcementMetrics {
  rules: number;
  invalidObjects: number;
  openflowConnected: boolean;
  openflowConnects: number;
  packetIns: Record<string, number>;
  packetInsDropped: number;
  rejects: number;
  auditLines: number;
  auditSuppressed: number;
  watch: WatchMetric[];
  /** Controller mode: whether the controller's state is followed now, and received objects that could not be applied. */
  controlPlane?: { connected: boolean; rejected: number };
}

/** Read at every scrape. */
export interface MetricSources {
  /** Local Pods by state: attached (crossing the bridge), and any other state the agent tracks. */
  pods(): Record<string, number>;
  /** The agent's desired (and, once converged, installed) flows per table. */
  flowsByTable(): Record<string, number>;
  ovsdbReachable(): boolean;
  resyncs(): { ok: number; failed: number; repairs: number };
  enforcement?(): EnforcementMetrics | undefined;
  /** Keeping sluice chained in the node's CNI configuration (absent when not configured). */
  chain?(): { state: string; rechains: number } | undefined;
  /** Running Pods adopted so far, and those that cross no bridge and could not be (daemon/node/adoption.ts). */
  adoption?(): { adopted: number; unattached: number } | undefined;
  /** Per-rule statistics from the bridge's counters (one OVS read per scrape). */
  ruleStats?(): Promise<RuleStatistics[] | undefined>;
  /** Packets the bridge's packet-in meters dropped, by meter (absent when enforcement is off). */
  meterDrops?(): Promise<Record<string, number> | undefined>;
  /** Services whose ClusterIP is outside the Service ranges (absent when enforcement is off). */
  servicesOutside?(): number | undefined;
}

const CNI_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const REALIZATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Adds to `counter` what a source's running total gained since the last scrape. */
class TotalTracker {
  private readonly last = new Map<Counter<string>, Map<string, number>>();

  feed(counter: Counter<string>, labels: Record<string, string>, total: number): void {
    let seen = this.last.get(counter);
    if (!seen) this.last.set(counter, (seen = new Map()));
    const key = JSON.stringify(labels);
    const prev = seen.get(key) ?? 0;
    // A smaller total means the source started again from 0: everything it has now is new.
    const delta = total >= prev ? total - prev : total;
    seen.set(key, total);
    if (delta > 0) counter.inc(labels, delta);
    else counter.inc(labels, 0); // the series exists from the first scrape on
  }
}

/** `[labels, value]` pairs a scrape-time series reads from a component. */
type Samples = [Record<string, string>, number][];

export class AgentMetrics {
  readonly registry = new Registry();
  private sources?: MetricSources;
  private readonly totals = new TotalTracker();
  private readonly cniRequests: Counter<'command' | 'result'>;
  private readonly cniDuration: Histogram<'command'>;
  private readonly realization: Histogram;
  private readonly connectionsCut: Counter;

  constructor(opts: { node: string; defaultMetrics?: boolean; datapath?: { datapath: string; setting: 'auto' | 'explicit' } }) {
    const r = this.registry;
    r.setDefaultLabels({ node: opts.node });
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: r });

    this.cniRequests = new Counter({
      name: 'sluice_cni_requests_total',
      help: 'CNI requests the agent answered, by command and result ("ok", or the CNI error code)',
      labelNames: ['command', 'result'] as const,
      registers: [r],
    });
    this.cniDuration = new Histogram({
      name: 'sluice_cni_request_duration_seconds',
      help: 'Time from reading a CNI request to its answer, by command',
      labelNames: ['command'] as const,
      buckets: CNI_BUCKETS,
      registers: [r],
    });
    this.realization = new Histogram({
      name: 'sluice_policy_realization_seconds',
      help: 'Time from the first API change of a batch to its flows committed on the bridge',
      buckets: REALIZATION_BUCKETS,
      registers: [r],
    });
    this.connectionsCut = new Counter({
      name: 'sluice_connections_cut_total',
      help: 'Open connections removed from the bridge\'s conntrack zone because a change made the policy deny them',
      registers: [r],
    });

    const datapath = opts.datapath;
    if (datapath) {
      // Which datapath the agent runs, and whether it chose it (datapath: auto) or was told.
      new Gauge({ name: 'sluice_datapath_info', help: 'The OVS datapath the agent runs (1), and whether datapath: auto chose it or the configuration named it', labelNames: ['datapath', 'setting'] as const, registers: [r] }).set({ datapath: datapath.datapath, setting: datapath.setting }, 1);
    }
    const src = () => this.sources;
    const entries = (o: Record<string, number> | undefined, label: string): Samples => Object.entries(o ?? {}).map(([k, n]) => [{ [label]: k }, n]);
    this.gauge('sluice_pods', 'Local Pods by state', ['state'], () => entries(src()?.pods(), 'state'));
    this.gauge('sluice_flows', 'Flows the agent keeps on the bridge, by table', ['table'], () => entries(src()?.flowsByTable(), 'table'));
    this.gauge('sluice_ovs_up', 'Whether the agent reaches Open vSwitch, by connection (ovsdb; openflow when enforcing)', ['connection'], () => {
      const s = src();
      const e = s?.enforcement?.();
      return [
        ...(s ? [[{ connection: 'ovsdb' }, s.ovsdbReachable() ? 1 : 0] as Samples[number]] : []),
        ...(e ? [[{ connection: 'openflow' }, e.openflowConnected ? 1 : 0] as Samples[number]] : []),
      ];
    });
    this.gauge('sluice_services_outside_service_cidrs', 'Services with a ClusterIP outside the Service ranges the agent uses (their Pod traffic skips egress enforcement of the endpoints)', [], () => {
      const n = src()?.servicesOutside?.();
      return n === undefined ? [] : [[{}, n]];
    });
    const resyncs = () => src()?.resyncs();
    this.counter('sluice_resyncs_total', 'Full convergence runs of the datapath, by result', ['result'], () => {
      const x = resyncs();
      return x ? [[{ result: 'ok' }, x.ok], [{ result: 'failed' }, x.failed]] : [];
    });
    const chain = () => src()?.chain?.();
    this.gauge('sluice_cni_chain_ok', "1 while the runtime's CNI configuration chains sluice (absent when the agent does not keep the chain)", [], () => {
      const c = chain();
      return c ? [[{}, c.state === 'chained' ? 1 : 0]] : [];
    });
    this.counter('sluice_cni_rechains_total', 'Times the agent chained sluice again after the CNI configuration lost it (a primary rewrote it, or a new file sorts first)', [], () => {
      const c = chain();
      return c ? [[{}, c.rechains]] : [];
    });
    const adoption = () => src()?.adoption?.();
    this.counter('sluice_pods_adopted_total', 'Running Pods attached after the fact: already running when the agent started, or created while sluice was not chained', [], () => {
      const a = adoption();
      return a ? [[{}, a.adopted]] : [];
    });
    this.gauge('sluice_pods_unattached', 'Running local Pods that cross no bridge and could not be adopted, so no policy applies to them (sluicectl node status names them and why)', [], () => {
      const a = adoption();
      return a ? [[{}, a.unattached]] : [];
    });
    this.counter('sluice_resync_repairs_total', 'Things a convergence run found wrong and repaired (routes, rules, ports, flows, chains)', [], () => {
      const x = resyncs();
      return x ? [[{}, x.repairs]] : [];
    });
  }

  /**
   * Series that exist only on an enforcing agent (absent, not 0, otherwise: a label-less gauge or
   * counter would print 0 from registration on).
   */
  private registerEnforcementMetrics(): void {
    const enf = () => this.sources?.enforcement?.();
    const one = (read: (e: EnforcementMetrics) => number) => (): Samples => {
      const e = enf();
      return e ? [[{}, read(e)]] : [];
    };
    const perResource = (read: (w: WatchMetric) => number) => (): Samples => (enf()?.watch ?? []).map((w) => [{ resource: w.resource }, read(w)]);
    this.counter('sluice_openflow_connects_total', 'OpenFlow connections made to the bridge (more than one: ovs-vswitchd restarted or the socket was lost)', [], one((e) => e.openflowConnects));
    this.gauge('sluice_policy_rules', 'Policy rules enforced on this node', [], one((e) => e.rules));
    this.gauge('sluice_policy_invalid_objects', 'Policy objects ignored as invalid (sluicectl node policies names them)', [], one((e) => e.invalidObjects));
    this.gauge('sluice_watch_synced', 'Whether a watched API resource has been listed (1) or not yet (0); absent resources (CRD not installed) count as listed', ['resource'], perResource((w) => (w.synced ? 1 : 0)));
    this.gauge('sluice_watch_objects', 'Objects held by the informer of a watched API resource', ['resource'], perResource((w) => w.objects));
    this.counter('sluice_watch_relists_total', 'Full relists of a watched API resource after the first list (watch lost, 410 Gone)', ['resource'], perResource((w) => w.relists));
    const cp = (read: (c: NonNullable<EnforcementMetrics['controlPlane']>) => number) => (): Samples => {
      const c = enf()?.controlPlane;
      return c ? [[{}, read(c)]] : [];
    };
    this.gauge('sluice_controlplane_connected', 'Controller mode: 1 while the controller\'s state is followed, 0 while it is unreachable (the last state received stays enforced)', [], cp((c) => (c.connected ? 1 : 0)));
    this.counter('sluice_controlplane_rejected_objects_total', 'Controller mode: received objects that could not be applied (a relist repairs)', [], cp((c) => c.rejected));
    this.counter('sluice_watch_restarts_total', 'Informer restarts after an error (API unreachable, stream cut)', ['resource'], perResource((w) => w.restarts));
    this.counter('sluice_packet_ins_total', 'Packets the bridge sent to the agent, by reason (reject, log, dns, unclaimed, failed)', ['reason'], () =>
      Object.entries(enf()?.packetIns ?? {}).map(([reason, n]) => [{ reason }, n]),
    );
    this.counter('sluice_packet_ins_dropped_total', 'Packet-ins dropped by the agent because its queue was full (the bridge meters them first)', [], one((e) => e.packetInsDropped));
    this.counter('sluice_reject_replies_total', 'TCP RST / ICMP unreachable replies sent for Reject rules', [], one((e) => e.rejects));
    this.counter('sluice_audit_log_lines_total', 'Lines written to the policy audit log', [], one((e) => e.auditLines));
    this.counter('sluice_audit_log_suppressed_total', 'Audit events folded into an earlier identical line by the 1 s deduplication ("[N packets in …]")', [], one((e) => e.auditSuppressed));
  }

  /**
   * Per-rule statistics (sluicectl node stats has the same figures). One OVS read serves the three
   * series of a scrape; the values are the bridge's own totals, so an agent restart continues them.
   */
  private registerRuleStatistics(read: () => Promise<RuleStatistics[] | undefined>): void {
    let cached: { at: number; stats: Promise<RuleStatistics[] | undefined> } | undefined;
    const stats = () => {
      if (!cached || Date.now() - cached.at > 1000) cached = { at: Date.now(), stats: read().catch(() => undefined) };
      return cached.stats;
    };
    const labels = (s: RuleStatistics) => ({ kind: s.ref.kind, namespace: s.ref.namespace ?? '', name: s.ref.name, rule: s.ref.rule, direction: s.direction, action: s.action });
    const ruleLabels = ['kind', 'namespace', 'name', 'rule', 'direction', 'action'];
    const series = (name: string, help: string, value: (s: RuleStatistics) => number | undefined) => {
      const totals = this.totals;
      new Counter({
        name,
        help,
        labelNames: ruleLabels,
        registers: [this.registry],
        async collect() {
          for (const s of (await stats()) ?? []) {
            const v = value(s);
            if (v !== undefined) totals.feed(this, labels(s), v);
          }
        },
      });
    };
    series('sluice_policy_rule_sessions_total', 'Connections an Allow rule allowed on this node (first packets, from the bridge\'s counters)', (s) => (s.action === 'Allow' ? s.sessions : undefined));
    series('sluice_policy_rule_packets_total', 'Packets per rule on this node: of the connections an Allow rule allowed (both directions), or dropped by a Drop/Reject rule', (s) => s.packets);
    series('sluice_policy_rule_bytes_total', 'Bytes per rule on this node, counted as sluice_policy_rule_packets_total', (s) => s.bytes);
  }

  /** A gauge set from `read` at each scrape (series `read` no longer returns disappear). */
  private gauge(name: string, help: string, labelNames: string[], read: () => Samples): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [labels, v] of read()) this.set(labels, v);
      },
    });
  }

  /** A counter following the running totals `read` returns at each scrape (see TotalTracker). */
  private counter(name: string, help: string, labelNames: string[], read: () => Samples | Promise<Samples>): void {
    const totals = this.totals;
    new Counter({
      name,
      help,
      labelNames,
      registers: [this.registry],
      async collect() {
        for (const [labels, total] of await read()) totals.feed(this, labels, total);
      },
    });
  }

  setSources(sources: MetricSources): void {
    const first = this.sources === undefined;
    this.sources = sources;
    if (first && sources.enforcement) this.registerEnforcementMetrics();
    if (first && sources.ruleStats) this.registerRuleStatistics(async () => this.sources?.ruleStats?.());
    if (first && sources.meterDrops) {
      // The switch's totals restart with ovs-vswitchd (and a re-installed meter); the counter only adds what they gained.
      this.counter(
        'sluice_packet_in_meter_drops_total',
        'Packets the bridge dropped at a packet-in meter instead of sending them to the agent, by meter (policy: reject and logging; dns; traceflow)',
        ['meter'],
        async () => Object.entries((await this.sources?.meterDrops?.().catch(() => undefined)) ?? {}).map(([meter, total]): Samples[number] => [{ meter }, total]),
      );
    }
  }

  observeCniRequest(command: string | undefined, result: 'ok' | number, seconds: number): void {
    const c = command ?? 'unparsed';
    this.cniRequests.inc({ command: c, result: String(result) });
    this.cniDuration.observe({ command: c }, seconds);
  }

  observeRealization(seconds: number): void {
    this.realization.observe(seconds);
  }

  observeConnectionsCut(count: number): void {
    this.connectionsCut.inc(count);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
