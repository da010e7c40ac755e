// test-schedule: exclusive: asserts packet-in meter figures, which depend on how much CPU the agent gets.
/**
 * The agent's /metrics on a real lab (mt, ptp, 1 node, enforcing agent): the figures move with real
 * events — CNI ADD/DEL of Pods created and deleted through the node's chain, a policy committed to
 * the bridge, a connection rejected by it (packet-in, reject reply, audit line), flows per table.
 */
import t from 'tap';
import { nodeNetns, podNetns } from '../../lab/net/names.js';
import { labCli, probe, restartAgent, run, upEnforcingLab, withEnforcingLab, writeTempFile } from './enforce-helpers.js';
import { sampleValue } from '../unit/prometheus-text.js';

const LAB = 'mt';
const NODE = 'node-1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const pod = (name: string) => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: m, labels: {app: ${name}}}
spec:
  containers:
    - name: s
      ports: [{containerPort: 80}]
`;
const WORKLOAD = `apiVersion: v1
kind: Namespace
metadata: {name: m, labels: {ns: m}}
---
${pod('a')}---
${pod('b')}`;
const REJECT = `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: mt-reject-b-to-a}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{podSelector: {matchLabels: {app: a}}}]
  ingress:
    - action: Reject
      enableLogging: true
      from: [{podSelector: {matchLabels: {app: b}}}]
      ports: [{protocol: TCP, port: 80}]
`;

/** The value of one sample of the agent's /metrics (labels as given, plus node), 0 when absent. */
async function scrape(): Promise<(name: string, labels?: Record<string, string>) => number> {
  const r = await run('ip', ['netns', 'exec', nodeNetns(LAB, NODE), 'curl', '-s', '-f', 'http://127.0.0.1:10349/metrics']);
  if (r.code !== 0) throw new Error(`GET /metrics: curl exited ${r.code}: ${r.stderr}`);
  return (name, labels = {}) => sampleValue(r.stdout, name, { ...labels, node: NODE }) ?? 0;
}

/** Scrapes until `ok` holds (the agent applies changes asynchronously); the last scrape either way. */
async function scrapeUntil(ok: (m: Awaited<ReturnType<typeof scrape>>) => boolean, ms = 30_000): Promise<Awaited<ReturnType<typeof scrape>>> {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = await scrape();
    if (ok(m) || Date.now() > deadline) return m;
    await sleep(250);
  }
}

withEnforcingLab(LAB, 'agent-metrics-', (dir) => {

  t.test('metrics move with real events', async (t) => {
    await upEnforcingLab(LAB, 1, writeTempFile(dir, 'workload.yaml', WORKLOAD));

    const m0 = await scrapeUntil((m) => m('sluice_pods', { state: 'attached' }) === 2);
    t.equal(m0('sluice_pods', { state: 'attached' }), 2, 'both Pods attached');
    t.ok(m0('sluice_cni_requests_total', { command: 'ADD', result: 'ok' }) >= 2, 'their CNI ADDs counted');
    t.ok(m0('sluice_cni_request_duration_seconds_count', { command: 'ADD' }) >= 2, 'and timed');
    t.ok(m0('sluice_flows', { table: 'SpoofGuard' }) > 0 && m0('sluice_flows', { table: 'L3Forwarding' }) > 0, 'flows by table');
    t.equal(m0('sluice_ovs_up', { connection: 'ovsdb' }), 1, 'OVSDB up');
    t.equal(m0('sluice_ovs_up', { connection: 'openflow' }), 1, 'OpenFlow up');
    t.equal(m0('sluice_watch_synced', { resource: '/api/v1/pods' }), 1, 'the Pod watch is synced');
    t.ok(m0('process_resident_memory_bytes') > 0, 'process memory');

    // A policy reaches the bridge: one more realization, and its rule is enforced.
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'reject.yaml', REJECT)]);
    const m1 = await scrapeUntil((m) => m('sluice_policy_rules') >= 1 && m('sluice_policy_realization_seconds_count') > m0('sluice_policy_realization_seconds_count'));
    t.ok(m1('sluice_policy_realization_seconds_count') > m0('sluice_policy_realization_seconds_count'), 'the policy commit is a realization');
    t.ok(m1('sluice_policy_rules') >= 1, 'its rule is counted');

    // A rejected connection: a packet-in, a reject reply, an audit line (after the 1 s dedup window).
    const [v] = await probe(LAB, dir, [{ from: 'm/b', to: 'm/a', port: 80, protocol: 'TCP' }]);
    t.equal(v?.verdict, 'reject', 'b → a is rejected with real packets');
    const m2 = await scrapeUntil((m) => m('sluice_audit_log_lines_total') > m1('sluice_audit_log_lines_total'));
    t.ok(m2('sluice_packet_ins_total', { reason: 'reject' }) > m1('sluice_packet_ins_total', { reason: 'reject' }), 'a packet-in for the reject');
    t.ok(m2('sluice_reject_replies_total') > m1('sluice_reject_replies_total'), 'a reject reply sent');
    t.ok(m2('sluice_audit_log_lines_total') > m1('sluice_audit_log_lines_total'), 'an audit line written');

    // A Pod created and deleted through the node's chain: its ADD and DEL.
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'c.yaml', pod('c'))]);
    const m3 = await scrapeUntil((m) => m('sluice_pods', { state: 'attached' }) === 3);
    t.equal(m3('sluice_pods', { state: 'attached' }), 3, 'the new Pod is attached');
    t.ok(m3('sluice_cni_requests_total', { command: 'ADD', result: 'ok' }) > m2('sluice_cni_requests_total', { command: 'ADD', result: 'ok' }), 'its ADD counted');
    await labCli(LAB, ['delete', '-f', writeTempFile(dir, 'c.yaml', pod('c'))]);
    const m4 = await scrapeUntil((m) => m('sluice_pods', { state: 'attached' }) === 2);
    t.equal(m4('sluice_pods', { state: 'attached' }), 2, 'detached again');
    t.ok(m4('sluice_cni_requests_total', { command: 'DEL', result: 'ok' }) > m3('sluice_cni_requests_total', { command: 'DEL', result: 'ok' }), 'its DEL counted');

    // A flood of rejected SYNs against meters of 10 packets/s (bursts of 20): the bridge drops most
    // of them at the policy meter, before they reach the agent, and says so.
    await restartAgent(LAB, NODE, { packetInRate: 10 });
    const before = await scrapeUntil((m) => m('sluice_ovs_up', { connection: 'openflow' }) === 1);
    const text = (await run('ip', ['netns', 'exec', nodeNetns(LAB, NODE), 'curl', '-s', '-f', 'http://127.0.0.1:10349/metrics'])).stdout;
    t.match(text, /^sluice_packet_in_meter_drops_total\{meter="policy",node="node-1"\} \d+$/m, 'the policy meter series is there');
    const ip = JSON.parse(await labCli(LAB, ['get', 'pods', '-o', 'json'])) as { items: { metadata: { name: string; namespace: string }; status: { podIP: string } }[] };
    const target = ip.items.find((p) => p.metadata.namespace === 'm' && p.metadata.name === 'a')?.status.podIP;
    t.ok(target, 'm/a has an address');
    const flood = await run('ip', ['netns', 'exec', podNetns(LAB, 'm', 'b'), process.execPath, '-e',
      `const net=require('net');let n=0;(function go(){for(let i=0;i<50;i++){const s=net.connect({host:'${target}',port:80});s.on('error',()=>{});s.on('connect',()=>s.destroy());n++}if(n<1000)setTimeout(go,10);else setTimeout(()=>{console.log(n);process.exit(0)},1000)})()`]);
    t.equal(flood.stdout.trim(), '1000', '1000 connection attempts made');
    const m5 = await scrapeUntil((m) => m('sluice_packet_in_meter_drops_total', { meter: 'policy' }) > before('sluice_packet_in_meter_drops_total', { meter: 'policy' }));
    const dropped = m5('sluice_packet_in_meter_drops_total', { meter: 'policy' }) - before('sluice_packet_in_meter_drops_total', { meter: 'policy' });
    const received = m5('sluice_packet_ins_total', { reason: 'reject' }) - before('sluice_packet_ins_total', { reason: 'reject' });
    console.error(`meter of 10 packets/s: 1000 rejected connection attempts (SYNs the meter dropped are retransmitted), ${received} packet-ins reached the agent, ${dropped} dropped by the bridge's meter`);
    t.ok(dropped > 500, `the meter dropped most of the flood (${dropped})`);
    t.ok(received < 500, `the agent received the rest only (${received})`);
    t.equal(m5('sluice_packet_in_meter_drops_total', { meter: 'dns' }), before('sluice_packet_in_meter_drops_total', { meter: 'dns' }), 'the dns meter is not charged for policy punts');
  });
});
