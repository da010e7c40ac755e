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
}

const CNI_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const REALIZATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Adds to `counter` what a source's running total gained since the last scrape. */
class TotalTracker {
  private readonly last = new Map<Counter<string>, Map<string, number>>();

  feed<L extends string>(counter: Counter<L>, labels: Partial<Record<L, string>>, total: number): void {
    let seen = this.last.get(counter as Counter<string>);
    if (!seen) this.last.set(counter as Counter<string>, (seen = new Map()));
    const key = JSON.stringify(labels);
    const prev = seen.get(key) ?? 0;
    // A smaller total means the source started again from 0: everything it has now is new.
    const delta = total >= prev ? total - prev : total;
    seen.set(key, total);
    if (delta > 0) counter.inc(labels, delta);
    else counter.inc(labels, 0); // the series exists from the first scrape on
  }
}

export class AgentMetrics {
  readonly registry = new Registry();
  private sources?: MetricSources;
  private readonly totals = new TotalTracker();
  private readonly cniRequests: Counter<'command' | 'result'>;
  private readonly cniDuration: Histogram<'command'>;
  private readonly realization: Histogram;

  constructor(opts: { node: string; defaultMetrics?: boolean }) {
    const r = this.registry;
    r.setDefaultLabels({ node: opts.node });
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: r });
    const self = this;
    const src = () => this.sources;
    const enf = () => this.sources?.enforcement?.();

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

    new Gauge({
      name: 'sluice_pods',
      help: 'Local Pods by state',
      labelNames: ['state'] as const,
      registers: [r],
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(src()?.pods() ?? {})) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'sluice_flows',
      help: "Flows the agent keeps on the bridge, by table",
      labelNames: ['table'] as const,
      registers: [r],
      collect() {
        this.reset();
        for (const [table, n] of Object.entries(src()?.flowsByTable() ?? {})) this.set({ table }, n);
      },
    });
    new Gauge({
      name: 'sluice_ovs_up',
      help: 'Whether the agent reaches Open vSwitch, by connection (ovsdb; openflow when enforcing)',
      labelNames: ['connection'] as const,
      registers: [r],
      collect() {
        this.reset();
        const s = src();
        if (s) this.set({ connection: 'ovsdb' }, s.ovsdbReachable() ? 1 : 0);
        const e = enf();
        if (e) this.set({ connection: 'openflow' }, e.openflowConnected ? 1 : 0);
      },
    });
    new Counter({
      name: 'sluice_resyncs_total',
      help: 'Full convergence runs of the datapath, by result',
      labelNames: ['result'] as const,
      registers: [r],
      collect() {
        const s = src()?.resyncs();
        if (!s) return;
        self.totals.feed(this, { result: 'ok' }, s.ok);
        self.totals.feed(this, { result: 'failed' }, s.failed);
      },
    });
    new Counter({
      name: 'sluice_resync_repairs_total',
      help: 'Things a convergence run found wrong and repaired (routes, rules, ports, flows, chains)',
      registers: [r],
      collect() {
        const s = src()?.resyncs();
        if (s) self.totals.feed(this, {}, s.repairs);
      },
    });
  }

  /**
   * Series that exist only on an enforcing agent (absent, not 0, otherwise: a label-less gauge or
   * counter would print 0 from registration on).
   */
  private registerEnforcementMetrics(): void {
    const r = this.registry;
    const self = this;
    const enf = () => this.sources?.enforcement?.();
    new Counter({
      name: 'sluice_openflow_connects_total',
      help: 'OpenFlow connections made to the bridge (more than one: ovs-vswitchd restarted or the socket was lost)',
      registers: [r],
      collect() {
        const e = enf();
        if (e) self.totals.feed(this, {}, e.openflowConnects);
      },
    });
    new Gauge({
      name: 'sluice_policy_rules',
      help: 'Policy rules enforced on this node',
      registers: [r],
      collect() {
        this.reset();
        const e = enf();
        if (e) this.set(e.rules);
      },
    });
    new Gauge({
      name: 'sluice_policy_invalid_objects',
      help: 'Policy objects ignored as invalid (sluicectl node policies names them)',
      registers: [r],
      collect() {
        this.reset();
        const e = enf();
        if (e) this.set(e.invalidObjects);
      },
    });
    new Gauge({
      name: 'sluice_watch_synced',
      help: 'Whether a watched API resource has been listed (1) or not yet (0); absent resources (CRD not installed) count as listed',
      labelNames: ['resource'] as const,
      registers: [r],
      collect() {
        this.reset();
        for (const w of enf()?.watch ?? []) this.set({ resource: w.resource }, w.synced ? 1 : 0);
      },
    });
    new Gauge({
      name: 'sluice_watch_objects',
      help: 'Objects held by the informer of a watched API resource',
      labelNames: ['resource'] as const,
      registers: [r],
      collect() {
        this.reset();
        for (const w of enf()?.watch ?? []) this.set({ resource: w.resource }, w.objects);
      },
    });
    new Counter({
      name: 'sluice_watch_relists_total',
      help: 'Full relists of a watched API resource after the first list (watch lost, 410 Gone)',
      labelNames: ['resource'] as const,
      registers: [r],
      collect() {
        for (const w of enf()?.watch ?? []) self.totals.feed(this, { resource: w.resource }, w.relists);
      },
    });
    new Counter({
      name: 'sluice_watch_restarts_total',
      help: 'Informer restarts after an error (API unreachable, stream cut)',
      labelNames: ['resource'] as const,
      registers: [r],
      collect() {
        for (const w of enf()?.watch ?? []) self.totals.feed(this, { resource: w.resource }, w.restarts);
      },
    });
    new Counter({
      name: 'sluice_packet_ins_total',
      help: 'Packets the bridge sent to the agent, by reason (reject, log, dns, unclaimed, failed)',
      labelNames: ['reason'] as const,
      registers: [r],
      collect() {
        for (const [reason, n] of Object.entries(enf()?.packetIns ?? {})) self.totals.feed(this, { reason }, n);
      },
    });
    new Counter({
      name: 'sluice_packet_ins_dropped_total',
      help: 'Packet-ins dropped by the agent because its queue was full (the bridge meters them first)',
      registers: [r],
      collect() {
        const e = enf();
        if (e) self.totals.feed(this, {}, e.packetInsDropped);
      },
    });
    new Counter({
      name: 'sluice_reject_replies_total',
      help: 'TCP RST / ICMP unreachable replies sent for Reject rules',
      registers: [r],
      collect() {
        const e = enf();
        if (e) self.totals.feed(this, {}, e.rejects);
      },
    });
    new Counter({
      name: 'sluice_audit_log_lines_total',
      help: 'Lines written to the policy audit log',
      registers: [r],
      collect() {
        const e = enf();
        if (e) self.totals.feed(this, {}, e.auditLines);
      },
    });
    new Counter({
      name: 'sluice_audit_log_suppressed_total',
      help: 'Audit events folded into an earlier identical line by the 1 s deduplication ("[N packets in …]")',
      registers: [r],
      collect() {
        const e = enf();
        if (e) self.totals.feed(this, {}, e.auditSuppressed);
      },
    });
    }

  setSources(sources: MetricSources): void {
    const first = this.sources === undefined;
    this.sources = sources;
    if (first && sources.enforcement) this.registerEnforcementMetrics();
  }

  observeCniRequest(command: string | undefined, result: 'ok' | number, seconds: number): void {
    const c = command ?? 'unparsed';
    this.cniRequests.inc({ command: c, result: String(result) });
    this.cniDuration.observe({ command: c }, seconds);
  }

  observeRealization(seconds: number): void {
    this.realization.observe(seconds);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
