/**
 * The agent's Prometheus metrics: what a scrape shows for observed events and for the state read
 * from the components, counters that stay monotonic when a component's total starts again, the
 * exposition served over HTTP, and the metricsAddress setting.
 */
import t from 'tap';
import { request } from 'node:http';
import { pino } from 'pino';
import { parseConfig } from '../../daemon/config.js';
import { startHealthServer } from '../../daemon/health.js';
import { AgentMetrics, type EnforcementMetrics, type MetricSources } from '../../daemon/metrics.js';
import { sampleValue } from './prometheus-text.js';

/** A sample of this agent's exposition (the node label added). */
const value = (text: string, name: string, labels: Record<string, string> = {}) => sampleValue(text, name, { ...labels, node: 'node-1' });

function enforcement(over: Partial<EnforcementMetrics> = {}): EnforcementMetrics {
  return {
    rules: 7,
    invalidObjects: 1,
    openflowConnected: true,
    openflowConnects: 1,
    packetIns: { reject: 3, log: 2, dns: 0, unclaimed: 0, failed: 0 },
    packetInsDropped: 0,
    rejects: 3,
    auditLines: 4,
    auditSuppressed: 9,
    watch: [{ resource: '/api/v1/pods', synced: true, absent: false, objects: 12, relists: 0, restarts: 2 }],
    ...over,
  };
}

function fixture(): { metrics: AgentMetrics; state: { enf: EnforcementMetrics; ovsdb: boolean; resyncs: { ok: number; failed: number; repairs: number } } } {
  const metrics = new AgentMetrics({ node: 'node-1', defaultMetrics: false });
  const state = { enf: enforcement(), ovsdb: true, resyncs: { ok: 2, failed: 0, repairs: 1 } };
  const sources: MetricSources = {
    pods: () => ({ attached: 5 }),
    flowsByTable: () => ({ L3Forwarding: 8, SpoofGuard: 10 }),
    ovsdbReachable: () => state.ovsdb,
    resyncs: () => state.resyncs,
    enforcement: () => state.enf,
  };
  metrics.setSources(sources);
  return { metrics, state };
}

t.test('a scrape shows observed events and the state read from the components', async (t) => {
  const { metrics } = fixture();
  metrics.observeCniRequest('ADD', 'ok', 0.004);
  metrics.observeCniRequest('ADD', 'ok', 0.02);
  metrics.observeCniRequest('ADD', 11, 0.001);
  metrics.observeCniRequest(undefined, 4, 0.0001);
  metrics.observeRealization(0.003);
  const text = await metrics.text();
  t.equal(value(text, 'sluice_cni_requests_total', { command: 'ADD', result: 'ok' }), 2, 'successful ADDs');
  t.equal(value(text, 'sluice_cni_requests_total', { command: 'ADD', result: '11' }), 1, 'failed ADD with its CNI code');
  t.equal(value(text, 'sluice_cni_requests_total', { command: 'unparsed', result: '4' }), 1, 'an unparseable request');
  t.equal(value(text, 'sluice_cni_request_duration_seconds_count', { command: 'ADD' }), 3, 'ADD latency observations');
  t.equal(value(text, 'sluice_cni_request_duration_seconds_bucket', { le: '0.005', command: 'ADD' }), 2, 'two ADDs within 5 ms');
  t.equal(value(text, 'sluice_policy_realization_seconds_count'), 1, 'one realization');
  t.equal(value(text, 'sluice_pods', { state: 'attached' }), 5);
  t.equal(value(text, 'sluice_flows', { table: 'SpoofGuard' }), 10, 'flows by table');
  t.equal(value(text, 'sluice_ovs_up', { connection: 'ovsdb' }), 1);
  t.equal(value(text, 'sluice_ovs_up', { connection: 'openflow' }), 1);
  t.equal(value(text, 'sluice_policy_rules'), 7);
  t.equal(value(text, 'sluice_policy_invalid_objects'), 1);
  t.equal(value(text, 'sluice_packet_ins_total', { reason: 'reject' }), 3);
  t.equal(value(text, 'sluice_reject_replies_total'), 3);
  t.equal(value(text, 'sluice_audit_log_lines_total'), 4);
  t.equal(value(text, 'sluice_audit_log_suppressed_total'), 9);
  t.equal(value(text, 'sluice_watch_synced', { resource: '/api/v1/pods' }), 1);
  t.equal(value(text, 'sluice_watch_objects', { resource: '/api/v1/pods' }), 12);
  t.equal(value(text, 'sluice_watch_restarts_total', { resource: '/api/v1/pods' }), 2);
  t.equal(value(text, 'sluice_resyncs_total', { result: 'ok' }), 2);
  t.equal(value(text, 'sluice_resync_repairs_total'), 1);
});

t.test('counters follow the components and never go down', async (t) => {
  const { metrics, state } = fixture();
  await metrics.text();
  state.enf = enforcement({ rejects: 10, openflowConnects: 2 });
  let text = await metrics.text();
  t.equal(value(text, 'sluice_reject_replies_total'), 10, 'increase added');
  t.equal(value(text, 'sluice_openflow_connects_total'), 2);
  // The component started again from 0 (re-created): what it counts now is added on top.
  state.enf = enforcement({ rejects: 4, openflowConnected: false });
  text = await metrics.text();
  t.equal(value(text, 'sluice_reject_replies_total'), 14, 'a restarted total does not make the counter go down');
  t.equal(value(text, 'sluice_ovs_up', { connection: 'openflow' }), 0, 'OpenFlow down is shown');
  state.ovsdb = false;
  text = await metrics.text();
  t.equal(value(text, 'sluice_ovs_up', { connection: 'ovsdb' }), 0, 'OVSDB down is shown');
});

t.test('packet-in meter drops: the totals of the switch, monotonic across an ovs-vswitchd restart, kept when unreadable', async (t) => {
  const metrics = new AgentMetrics({ node: 'node-1', defaultMetrics: false });
  let drops: Record<string, number> | undefined = { policy: 120, dns: 0 };
  let failing = false;
  metrics.setSources({
    pods: () => ({ attached: 0 }),
    flowsByTable: () => ({}),
    ovsdbReachable: () => true,
    resyncs: () => ({ ok: 0, failed: 0, repairs: 0 }),
    meterDrops: async () => {
      if (failing) throw new Error('not connected');
      return drops;
    },
  });
  let text = await metrics.text();
  t.equal(value(text, 'sluice_packet_in_meter_drops_total', { meter: 'policy' }), 120, 'the policy meter dropped 120');
  t.equal(value(text, 'sluice_packet_in_meter_drops_total', { meter: 'dns' }), 0, 'the dns meter none');
  drops = { policy: 30, dns: 5 };
  text = await metrics.text();
  t.equal(value(text, 'sluice_packet_in_meter_drops_total', { meter: 'policy' }), 150, 'the switch restarted its total: what it counts since is added');
  t.equal(value(text, 'sluice_packet_in_meter_drops_total', { meter: 'dns' }), 5);
  failing = true;
  text = await metrics.text();
  t.equal(value(text, 'sluice_packet_in_meter_drops_total', { meter: 'policy' }), 150, 'an unanswered read keeps the last value; the scrape still succeeds');
});

t.test('without enforcement, the policy series are absent rather than zero', async (t) => {
  const metrics = new AgentMetrics({ node: 'n', defaultMetrics: false });
  metrics.setSources({ pods: () => ({ attached: 0 }), flowsByTable: () => ({}), ovsdbReachable: () => true, resyncs: () => ({ ok: 0, failed: 0, repairs: 0 }) });
  const text = await metrics.text();
  t.notMatch(text, /^sluice_policy_rules\{/m);
  t.notMatch(text, /^sluice_ovs_up\{connection="openflow"/m);
  t.match(text, /^sluice_ovs_up\{connection="ovsdb",node="n"\} 1$/m);
});

t.test('the datapath the agent runs, and whether datapath: auto chose it', async (t) => {
  const metrics = new AgentMetrics({ node: 'n', defaultMetrics: false, datapath: { datapath: 'netdev', setting: 'auto' } });
  t.match(await metrics.text(), /^sluice_datapath_info\{datapath="netdev",setting="auto",node="n"\} 1$/m);
});

t.test('the process metrics are there by default', async (t) => {
  const metrics = new AgentMetrics({ node: 'n' });
  t.match(await metrics.text(), /^process_resident_memory_bytes\{node="n"\} \d+/m);
});

t.test('/metrics is served as Prometheus text next to the JSON paths', async (t) => {
  const { metrics } = fixture();
  metrics.observeCniRequest('DEL', 'ok', 0.001);
  const server = await startHealthServer({ host: '127.0.0.1', port: 0 }, () => ({ ready: true, ovsReachable: true }), pino({ level: 'silent' }), {
    '/metrics': async () => ({ code: 200, body: await metrics.text(), contentType: metrics.contentType }),
  });
  t.teardown(() => server.close());
  const get = (path: string) =>
    new Promise<{ code: number; type: string; body: string }>((resolve, reject) => {
      request({ host: '127.0.0.1', port: server.port, path }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (d: string) => (body += d)).on('end', () => resolve({ code: res.statusCode ?? 0, type: String(res.headers['content-type']), body }));
      }).on('error', reject).end();
    });
  const m = await get('/metrics');
  t.equal(m.code, 200);
  t.match(m.type, /^text\/plain; version=0\.0\.4/, 'the exposition content type');
  t.match(m.body, /^sluice_cni_requests_total\{command="DEL",result="ok",node="node-1"\} 1$/m);
  const r = await get('/readyz');
  t.same([r.code, JSON.parse(r.body)], [200, { status: 'ready' }], 'the JSON paths still answer');
  const n = await get('/nope');
  t.equal(n.code, 404);
  t.match(n.body, /\/metrics/, 'a 404 lists the paths, /metrics among them');
});

t.test('metricsAddress', async (t) => {
  const cfg = (text: string) => parseConfig(text, 'agent.yaml', { NODE_NAME: 'n' });
  t.equal(cfg('').metricsAddress, undefined, 'off by default: /metrics only on the health address');
  t.same(cfg('metricsAddress: 0.0.0.0:9377\n').metricsAddress, { host: '0.0.0.0', port: 9377 });
  t.throws(() => cfg('metricsAddress: "9377"\n'), /metricsAddress: must be host:port/);
  t.throws(() => cfg('metricsAddress: 9377\n'), /metricsAddress: must be a non-empty string/);
  t.throws(() => cfg('healthAddress: 127.0.0.1:9376\nmetricsAddress: 0.0.0.0:9376\n'), /metricsAddress: port 9376 is healthAddress's port/);
});
