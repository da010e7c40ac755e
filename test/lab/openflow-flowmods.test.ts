/**
 * Native flow programming against a real ovs-vswitchd (private OVS, netdev, network namespace
 * "ofn-fm"): the agent's whole flow set (base pipeline with Pods, compiled policy rules in IPv4
 * and IPv6, DNS intercept, a traceflow's observation flows) installed over the OpenFlow connection
 * on br-int and with `ovs-ofctl --bundle add-flows` on br-ref must dump identically. Also: a flow
 * OVS refuses fails the whole bundle naming the flow and the error (nothing of it applied),
 * delete by cookie, cookie read-back, the aggregate count, the Metric tables' counters, and
 * reconnection after ovs-vswitchd restarts.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { bundleText, diffFlows } from '../../daemon/flows/diff.js';
import type { Flow } from '../../daemon/flows/flow.js';
import { OpenFlowController } from '../../daemon/ovs/openflow/controller.js';
import { packetInMeters } from '../../daemon/flows/punt.js';
import { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import { parseFlowCounters } from '../../daemon/flows/policy/stats.js';
import { tableId } from '../../daemon/flows/tables.js';
import { corpusFlows } from '../unit/flowmod-corpus.js';
import { missingPrereq, ovsShell, sleep, startPrivateVswitchd, startTraceBridge, stopTraceBridge } from './datapath-env.js';

const NS = 'ofn-fm';
const DIR = `/tmp/${NS}`;
const RUN = join(DIR, 'ovs');
const sh = ovsShell(RUN);
const mgmt = (br: string) => `unix:${RUN}/${br}.mgmt`;

const skip = await missingPrereq(['ovs-vswitchd', 'ovsdb-server', 'ovs-vsctl', 'ovs-ofctl', 'ip']);
if (skip) {
  t.plan(0, skip);
} else {
  t.teardown(() => stopTraceBridge(NS, DIR));
  await startTraceBridge(NS, DIR, 'ofnp', { a: '10.1.0.11', b: '10.1.0.12' });
  await sh('ovs-vsctl', [`--db=unix:${RUN}/db.sock`, '--', 'add-br', 'br-ref', '--', 'set', 'Bridge', 'br-ref', 'datapath_type=netdev', 'fail_mode=secure', 'protocols=OpenFlow15']);
  const controller = new OpenFlowController({ socketPath: `${RUN}/br-int.mgmt`, meters: packetInMeters(), reconnectMinMs: 50, reconnectMaxMs: 300 });
  controller.start();
  t.teardown(() => controller.close());
  const ovs = new FlowProgrammer({ ovsRunDir: RUN, bridge: 'br-int', datapath: 'netdev', log: pino({ level: 'silent' }), timeoutSec: 10 });
  ovs.useOpenFlow(controller);
  t.teardown(() => ovs.close());

  /** Both bridges' flows as ovs-ofctl prints them (no counters, numbered tables), sorted. */
  const dump = async (br: string) =>
    (await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', '--no-stats', '--no-names', mgmt(br)])).stdout
      .split('\n')
      .filter((l) => l.trim() && !l.startsWith('OFPST_FLOW'))
      .map((l) => l.trim())
      .sort();
  const { flows, trace } = corpusFlows();
  const cookies = (fs: Flow[]) => fs.map((f) => f.cookie).sort();

  await t.test('the whole flow set: native and ovs-ofctl bundles install identical flows', async (t) => {
    await ovs.applyDiff(diffFlows(flows, []));
    await ovs.addFlows(trace);
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--bundle', 'add-flows', mgmt('br-ref'), '-'], { input: `${bundleText(diffFlows(flows, []))}${trace.join('\n')}\n` });
    const [native, reference] = [await dump('br-int'), await dump('br-ref')];
    t.equal(native.length, flows.length + trace.length, `${flows.length} sluice flows and ${trace.length} trace flows on br-int`);
    t.equal(reference.length, native.length, 'as many on br-ref');
    t.same(native, reference, 'dump-flows of both bridges is identical');
    t.ok(native.some((l) => l.includes('ipv6_src=') && l.includes('conjunction(')), 'IPv6 policy flows among them');
  });

  await t.test('read-back: cookies, aggregate count, counters', async (t) => {
    t.same((await ovs.installedCookies()).sort(), cookies(flows), 'installed sluice cookies = the set (trace cookies are not sluice\'s)');
    t.equal(await ovs.installedCount(), flows.length, 'aggregate flow count of sluice flows');
    const metric = flows.filter((f) => f.table === 'EgressMetric' || f.table === 'IngressMetric');
    const counters = parseFlowCounters(await ovs.dumpCounters(['EgressMetric', 'IngressMetric']));
    t.same([...counters.keys()].sort(), cookies(metric), 'counter lines for exactly the Metric tables\' flows');
    t.ok([...counters.values()].every((c) => c.packets === 0 && c.bytes === 0), 'no traffic yet: zero counters');
    // An ARP request from the gateway through the pipeline: the Classifier's ARP flow counts it.
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'add-flow', mgmt('br-int'), `table=${tableId('Classifier')},priority=1,cookie=0x51ceff0000000001,arp actions=drop`]);
    const frame = 'ffffffffffff0a580a0100010806' + '0001080006040001' + '0a580a010001' + '0a010001' + '000000000000' + '0a01000b';
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'packet-out', mgmt('br-int'), 'in_port=32769 packet=' + frame + ' actions=resubmit(,0)']);
    const zero = await ovs.dumpCounters(['Classifier']);
    t.match(zero, /cookie=0x51ceff0000000001, table=0, n_packets=0/, 'an ARP frame does not hit the extra ARP flow at priority 1 (priority 200 wins)');
    const arp = flows.find((f) => f.table === 'Classifier' && f.match === 'arp')!;
    t.match(zero, new RegExp(`cookie=${arp.cookie}, table=0, n_packets=1, n_bytes=42`), 'the ARP classifier flow counted the frame (packets and bytes)');
    await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'del-flows', mgmt('br-int'), 'cookie=0x51ceff0000000001/-1']);
  });

  await t.test('a flow OVS refuses fails the bundle: its text and the error, nothing applied', async (t) => {
    const before = await dump('br-int');
    const good: Flow = { table: 'Output', priority: 7, match: 'ip,nw_dst=10.9.9.9', actions: 'drop', category: 0, cookie: '0x51ce00aaaaaaaaa1' };
    const bad: Flow = { table: 'Output', priority: 7, match: 'ip,nw_dst=10.9.9.8', actions: 'move:NXM_OF_ARP_TPA[]->NXM_NX_REG2[]', category: 0, cookie: '0x51ce00aaaaaaaaa2' };
    const victim = flows[3]!;
    const err = await ovs.applyDiff({ add: [good, bad], remove: [victim.cookie], unchanged: 0 }).then(() => undefined, (e: Error) => e);
    t.ok(err, 'the bundle failed');
    t.match(err?.message ?? '', new RegExp(`the switch refused flow "table=${tableId('Output')},priority=7,cookie=0x51ce00aaaaaaaaa2,ip,nw_dst=10\\.9\\.9\\.8 actions=move:NXM_OF_ARP_TPA\\[\\]->NXM_NX_REG2\\[\\]"`), 'names the refused flow');
    t.match(err?.message ?? '', /OFPET_BAD_ACTION\/OFPBAC_MATCH_INCONSISTENT \(type 2, code 10\)/, 'and OVS\'s error');
    t.match(err?.message ?? '', /bundle was discarded/);
    t.same(await dump('br-int'), before, 'no flow added, none deleted');
    t.ok(controller.isConnected, 'the connection stays up');
  });

  await t.test('delete by cookie, then the flows are back', async (t) => {
    const gone = [flows[0]!, flows[10]!, flows[flows.length - 1]!];
    const diff = diffFlows(flows.filter((f) => !gone.includes(f)), await ovs.installedCookies());
    t.same(diff.remove, cookies(gone), 'the diff removes exactly those');
    await ovs.applyDiff(diff);
    t.same((await ovs.installedCookies()).sort(), cookies(flows.filter((f) => !gone.includes(f))), 'read back without them');
    t.equal(await ovs.installedCount(), flows.length - 3);
    t.equal((await dump('br-int')).length, flows.length - 3 + trace.length, 'ovs-ofctl sees them gone too');
    await ovs.applyDiff(diffFlows(flows, await ovs.installedCookies()));
    t.same(await dump('br-int'), await dump('br-ref'), 'identical again');
    await ovs.deleteFlows(0x7acen << 48n, 0xffffn << 48n);
    t.equal((await dump('br-int')).length, flows.length, 'trace flows deleted by cookie mask');
  });

  await t.test('ovs-vswitchd restarts: the controller reconnects and flows apply again', async (t) => {
    const before = await dump('br-int');
    t.equal(before.length, flows.length, 'the sluice flows are installed');
    const pidFile = join(RUN, 'ovs-vswitchd.pid');
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    const down = new Promise<void>((r) => controller.once('disconnected', () => r()));
    process.kill(pid, 'SIGKILL');
    await down;
    for (let i = 0; i < 50 && existsSync(`/proc/${pid}`); i++) await sleep(100);
    t.notOk(controller.isConnected, 'disconnected');
    const restart = (async () => {
      await sleep(500);
      await startPrivateVswitchd(NS, RUN);
    })();
    // Called while down: waits (bounded) for the connection, then answers.
    const count = await ovs.installedCount();
    await restart;
    t.equal(count, 0, 'a restarted ovs-vswitchd has no flows');
    await ovs.applyDiff(diffFlows(flows, await ovs.installedCookies()));
    t.equal(await ovs.installedCount(), flows.length, 'all flows back');
    t.same(await dump('br-int'), before, 'the same flows as before the restart');
  });

  await t.test('no connection: a bounded wait, then a clear error', async (t) => {
    const lonely = new OpenFlowController({ socketPath: `${RUN}/br-none.mgmt`, reconnectMaxMs: 200 });
    lonely.start();
    const other = new FlowProgrammer({ ovsRunDir: RUN, bridge: 'br-none', datapath: 'netdev', log: pino({ level: 'silent' }), timeoutSec: 1 });
    other.useOpenFlow(lonely);
    const t0 = Date.now();
    await t.rejects(other.installedCookies(), /read the installed flows: no OpenFlow connection to .*br-none\.mgmt within 1000 ms \(is ovs-vswitchd running with bridge br-none\?\)/);
    t.ok(Date.now() - t0 < 3000, 'within the timeout');
    await t.rejects(other.applyDiff(diffFlows(flows.slice(0, 1), [])), /apply flows: no OpenFlow connection/);
    await lonely.close();
    other.close();
  });
}
