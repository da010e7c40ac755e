/**
 * The OVS adapter and the pipeline against a real private OVS (netdev) in a "dpo" namespace:
 * bridge/gateway creation (over OVSDB alone), adoption and removal, desired-state flow sync (unchanged flows never re-added),
 * ovs-vswitchd restart, and ofproto/trace walks of the computed pipeline.
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { diffFlows } from '../../daemon/flows/diff.js';
import { OvsBridge, OvsError } from '../../daemon/ovs/bridge.js';
import { FlowProgrammer } from '../../daemon/ovs/flow-programmer.js';
import { FlowSync } from '../../daemon/flows/sync.js';
import { OvsdbClient } from '../../daemon/ovs/ovsdb.js';
import { computeFlows, type PipelineInput } from '../../daemon/flows/pipeline.js';
import { flowAges, inNs, missingPrereq, Node, sh, sleep } from './datapath-env.js';

const why = await missingPrereq();
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  const node = new Node('dpo-n1');
  t.teardown(() => node.destroy());
  await node.create();
  const log = pino({ level: 'silent' });
  const ovs = new OvsBridge({ ovsRunDir: node.runDir, bridge: 'br-int', datapath: 'netdev', log });
  const flowProgrammer = new FlowProgrammer({ ovsRunDir: node.runDir, bridge: 'br-int', datapath: 'netdev', log });
  const sync = new FlowSync(flowProgrammer, log);
  const get = async (table: string, rec: string, col: string) => (await node.vsctl(['get', table, rec, col])).stdout.trim();

  // Two real ports for the traces.
  const ports: Record<string, { ofport: number; mac: string }> = {};
  for (const name of ['dpop1', 'dpop3']) {
    await inNs(node.ns, ['ip', 'link', 'add', name, 'type', 'veth', 'peer', 'name', `${name}x`]);
    await inNs(node.ns, ['ip', 'link', 'set', name, 'up']);
  }

  await t.test('adopts a pre-existing bridge and gateway, then is idempotent', async (t) => {
    await node.vsctl(['add-br', 'br-int', '--', 'set', 'Bridge', 'br-int', 'datapath_type=netdev']);
    await node.vsctl(['add-port', 'br-int', 'antrea-gw0', '--', 'set', 'Interface', 'antrea-gw0', 'type=internal']);
    const macBefore = JSON.parse(await get('Interface', 'antrea-gw0', 'mac_in_use')) as string;
    const changes = await ovs.ensureBridge();
    t.match(changes.join('\n'), /fail_mode \(standalone\) -> secure/);
    t.match(changes.join('\n'), /protocols \[\] -> OpenFlow15/);
    t.match(changes.join('\n'), /named the pipeline tables/);
    t.equal(await get('Bridge', 'br-int', 'fail_mode'), 'secure');
    t.equal(await get('Bridge', 'br-int', 'protocols'), '[OpenFlow15]');
    const gw = await ovs.ensureGateway('antrea-gw0');
    t.equal(gw.gateway.mac, macBefore, 'an adopted gateway keeps its MAC');
    t.equal(JSON.parse(await get('Interface', 'antrea-gw0', 'mac')), macBefore, 'and the MAC is persisted in OVSDB');
    t.equal(await get('Interface', 'antrea-gw0', 'external_ids:sluice-type'), 'gateway');
    t.same(await ovs.ensureBridge(), [], 'second ensureBridge changes nothing');
    const again = await ovs.ensureGateway('antrea-gw0');
    t.same(again.changes, [], 'second ensureGateway changes nothing');
    t.same(again.gateway, gw.gateway);
    for (const name of ['dpop1', 'dpop3']) {
      const ofport = await ovs.addPodPort(name, {
        'sluice-type': 'container', 'container-id': `c-${name}`, 'pod-namespace': 'default', 'pod-name': name,
        'ip-address': name === 'dpop1' ? '10.1.0.11' : '10.1.0.13', 'attached-mac': name === 'dpop1' ? '2a:00:00:00:00:11' : '2a:00:00:00:00:13',
        'net-ns': '/var/run/netns/none', 'if-name': 'eth0',
      });
      ports[name] = { ofport, mac: name === 'dpop1' ? '2a:00:00:00:00:11' : '2a:00:00:00:00:13' };
    }
    const listed = await ovs.listPodPorts();
    t.same(listed.map((p) => [p.name, p.ofport, p.ids['ip-address']]), [['dpop1', ports.dpop1!.ofport, '10.1.0.11'], ['dpop3', ports.dpop3!.ofport, '10.1.0.13']]);
    t.equal(await ovs.addPodPort('dpop1', listed[0]!.ids), ports.dpop1!.ofport, 'a repeated attach keeps the port number');
  });

  const input = async (pods: string[]): Promise<PipelineInput> => {
    const gw = (await ovs.ensureGateway('antrea-gw0')).gateway;
    return {
      gatewayOfport: gw.ofport,
      gatewayMac: gw.mac,
      nodeIP: '192.168.100.1',
      serviceCIDRs: ['10.96.0.0/16'],
      pods: pods.map((n) => ({ containerId: `c-${n}`, ofport: ports[n]!.ofport, mac: ports[n]!.mac, ips: [n === 'dpop1' ? '10.1.0.11' : '10.1.0.13'] })),
    };
  };

  await t.test('flow sync installs the pipeline once and never re-adds unchanged flows', async (t) => {
    await node.ofctl(['add-flow', node.mgmt, 'table=0,priority=1,cookie=0x1,actions=drop']);
    const one = computeFlows(await input(['dpop1']));
    const first = await sync.sync((s) => s.replace('pipeline', one));
    t.equal(first.add.length, one.length, 'everything added the first time (ovs-ofctl parsed every flow)');
    t.same((await flowProgrammer.installedCookies()).sort(), one.map((f) => f.cookie).sort());
    await sleep(1100);
    const second = await sync.sync((s) => s.replace('pipeline', one));
    t.same([second.add.length, second.remove.length, second.unchanged], [0, 0, one.length], 'second sync: empty diff');
    const both = computeFlows(await input(['dpop1', 'dpop3']));
    const third = await sync.sync((s) => s.replace('pipeline', both));
    t.equal(third.add.length, both.length - one.length, 'adding a Pod adds only its flows');
    t.equal(third.remove.length, 0);
    const ages = await flowAges(node);
    for (const f of one) t.ok((ages.get(f.cookie) ?? 0) >= 1, `unchanged flow ${f.table} ${f.match} kept its age`);
    const fourth = await sync.sync((s) => s.replace('pipeline', one));
    t.equal(fourth.remove.length, both.length - one.length, 'removing a Pod deletes only its flows');
    t.equal((await node.ofctl(['dump-flows', node.mgmt, 'cookie=0x1/-1'])).stdout.split('\n').filter((l) => l.includes('cookie=0x1')).length, 1, 'a foreign flow is left alone');
    await sync.sync((s) => s.replace('pipeline', both));
    const names = (await node.ofctl(['dump-flows', '--names', node.mgmt])).stdout;
    t.match(names, /table=ARPResponder/, 'tables carry their names');
    t.match(names, /goto_table:SpoofGuard/);
  });

  await t.test('an ovs-vswitchd restart loses the flows; a sync replays them', async (t) => {
    const desired = computeFlows(await input(['dpop1', 'dpop3']));
    await node.killVswitchd();
    await node.startVswitchd();
    let cookies: string[] = [];
    for (let i = 0; i < 50; i++) {
      cookies = await flowProgrammer.installedCookies().catch(() => ['unreachable']);
      if (!cookies.includes('unreachable')) break;
      await sleep(100);
    }
    t.equal(diffFlows(desired, cookies).add.length, desired.length, 'all sluice flows are gone after the restart');
    const replay = await sync.sync((s) => s.replace('pipeline', desired), { verify: true }); // what the agent's watchdog/resync does
    t.equal(replay.add.length, desired.length);
    t.same((await flowProgrammer.installedCookies()).sort(), desired.map((f) => f.cookie).sort());
    t.equal(await get('Interface', 'dpop1', 'ofport'), String(ports.dpop1!.ofport), 'Pod ports keep their numbers');
  });

  await t.test('OVSDB session and control socket: errors with their text, a new session after ovsdb-server restarts', async (t) => {
    const db = new OvsdbClient(join(node.runDir, 'db.sock'));
    await t.rejects(
      db.transact([{ op: 'insert', table: 'Interface', row: { name: 'dpox', no_such_column: 1 } }]),
      /OVSDB transact: operation 0 \(insert Interface\): .*no_such_column/,
      "ovsdb-server's own error text, naming the operation",
    );
    db.close();
    const other = new OvsBridge({ ovsRunDir: node.runDir, bridge: 'br-none', datapath: 'netdev', log });
    await t.rejects(other.addPodPort('dpop1', (await ovs.listPodPorts())[0]!.ids), /attach dpop1 to br-none: bridge br-none does not exist/);
    await t.rejects(ovs.appctl(['no/such']), /ovs-appctl no\/such: "no\/such" is not a valid command/, "ovs-vswitchd's error text");
    t.match(await ovs.appctl(['dpif/show']), /br-int/, 'a command answered over the control socket');

    const before = (await ovs.listPodPorts()).map((p) => [p.name, p.ofport]);
    const pid = Number(readFileSync(join(node.runDir, 'ovsdb-server.pid'), 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    const down = await ovs.listPodPorts().then(() => undefined, (err: unknown) => err);
    t.ok(down instanceof OvsError, `while ovsdb-server is down: an OvsError naming what failed (${(down as Error)?.message})`);
    t.match((down as Error)?.message, /^list Pod ports: .*db\.sock/);
    await sh('ip', ['netns', 'exec', node.ns, 'ovsdb-server', `--remote=punix:${node.runDir}/db.sock`, `--pidfile=${node.runDir}/ovsdb-server.pid`, '--detach', `--log-file=${node.runDir}/ovsdb-server.log`, `${node.runDir}/conf.db`], { env: node.ovsEnv() });
    t.same((await ovs.listPodPorts()).map((p) => [p.name, p.ofport]), before, 'the same OvsBridge answers again once ovsdb-server is back (a new session)');
    t.equal(await ovs.addPodPort('dpop1', (await ovs.listPodPorts())[0]!.ids), ports.dpop1!.ofport, 'and changes go through it');
  });

  await t.test('ofproto/trace walks of the pipeline', async (t) => {
    const inp = await input(['dpop1', 'dpop3']);
    const gw = inp.gatewayOfport;
    const p1 = ports.dpop1!;
    const p3 = ports.dpop3!;
    const trace = async (flow: string, ct = 'trk,new') => {
      const r = await sh('ovs-appctl', ['ofproto/trace', 'br-int', flow, '--ct-next', ct], { env: node.ovsEnv() });
      const out = r.stdout;
      // With ct() the trace has one section per recirculation: the last one is what leaves.
      const last = (re: RegExp) => [...out.matchAll(re)].pop()?.[1] ?? '';
      return { out, final: last(/Final flow: (.*)/g), actions: last(/Datapath actions: (.*)/g) };
    };
    const dp = async (name: string) => {
      // Datapath port numbers differ from OpenFlow ones; map through dpif/show.
      const show = (await sh('ovs-appctl', ['dpif/show'], { env: node.ovsEnv() })).stdout;
      return new RegExp(`\\b${name} \\d+/(\\d+)`).exec(show)?.[1];
    };
    const [dp1, dp3, dpgw] = [await dp('dpop1'), await dp('dpop3'), await dp('antrea-gw0')];
    t.ok(dp1 && dp3 && dpgw, 'datapath port numbers known');

    const arp = await trace(`in_port=${p1.ofport},arp,arp_op=1,dl_src=${p1.mac},arp_sha=${p1.mac},arp_spa=10.1.0.11,arp_tpa=10.1.0.1`);
    t.match(arp.final, /arp_op=2/);
    t.match(arp.final, /dl_src=aa:bb:cc:dd:ee:ff/);
    t.match(arp.final, /arp_spa=10.1.0.1,arp_tpa=10.1.0.11/);
    t.equal(arp.actions.split(',').pop(), dp1, 'ARP reply goes back out the asking port');
    const arpSpoof = await trace(`in_port=${p1.ofport},arp,arp_op=1,dl_src=${p1.mac},arp_sha=${p1.mac},arp_spa=10.1.0.99,arp_tpa=10.1.0.1`);
    t.equal(arpSpoof.actions, 'drop', 'ARP for a foreign IP is dropped');

    const local = await trace(`in_port=${p1.ofport},tcp,dl_src=${p1.mac},dl_dst=aa:bb:cc:dd:ee:ff,nw_src=10.1.0.11,nw_dst=10.1.0.13,nw_ttl=64,tp_dst=80`);
    t.match(local.final, `dl_src=aa:bb:cc:dd:ee:ff,dl_dst=${p3.mac}`);
    t.match(local.final, /nw_ttl=63/, 'Pod -> local Pod loses one hop');
    t.match(local.actions, new RegExp(`${dp3}$`));

    const spoof = await trace(`in_port=${p1.ofport},tcp,dl_src=${p1.mac},nw_src=10.1.0.99,nw_dst=10.1.0.13`);
    t.equal(spoof.actions, 'drop', 'a foreign source IP is dropped');
    const spoofMac = await trace(`in_port=${p1.ofport},tcp,dl_src=02:00:00:00:00:99,nw_src=10.1.0.11,nw_dst=10.1.0.13`);
    t.equal(spoofMac.actions, 'drop', 'a foreign source MAC is dropped');

    const out = await trace(`in_port=${p1.ofport},tcp,dl_src=${p1.mac},nw_src=10.1.0.11,nw_dst=8.8.8.8,nw_ttl=64`);
    t.match(out.final, `dl_dst=${inp.gatewayMac}`);
    t.match(out.final, /nw_ttl=64/);
    t.match(out.actions, new RegExp(`${dpgw}$`));

    const svc = await trace(`in_port=${p1.ofport},tcp,dl_src=${p1.mac},nw_src=10.1.0.11,nw_dst=10.96.0.10,tp_dst=80`);
    t.match(svc.final, `dl_src=${p1.mac},dl_dst=${inp.gatewayMac}`, 'Service traffic keeps its source MAC');
    t.match(svc.actions, new RegExp(`${dpgw}$`));

    const fromHost = await trace(`in_port=${gw},tcp,dl_dst=aa:bb:cc:dd:ee:ff,nw_src=192.168.100.1,nw_dst=10.1.0.11,tp_dst=8080`);
    t.match(fromHost.out, /set_field:0x11\/0x1f->reg0/, 'host-originated packets are marked');
    t.match(fromHost.actions, new RegExp(`${dp1}$`));

    const reentry = await trace(`in_port=${gw},tcp,dl_dst=12:34:56:78:9a:bc,nw_src=10.1.0.11,nw_dst=10.2.0.21,tp_dst=8080`);
    t.match(reentry.final, `dl_src=de:ad:be:ef:de:ad,dl_dst=${inp.gatewayMac}`, 're-entrance: special source MAC, gateway MAC as destination');
    t.match(reentry.actions, new RegExp(`${dpgw}$`), 'sent back out the gateway (IN_PORT)');
    t.notMatch(reentry.out, /ct\(commit/, 're-entrance is not committed');

    const reply = await trace(`in_port=${p3.ofport},tcp,dl_src=${p3.mac},nw_src=10.1.0.13,nw_dst=10.1.0.11,nw_ttl=64,tp_src=8080`, "trk,est,rpl");
    t.match(reply.actions, new RegExp(`${dp1}$`), 'without the gateway ct_mark a reply goes straight to the Pod');
    await gw;
  });

  await t.test('over OVSDB alone: remove the bridge, create it and its gateway from nothing, end flow-restore-wait', async (t) => {
    t.equal(await ovs.deleteBridge('br-int'), true, 'the bridge was there');
    t.equal((await node.vsctl(['list-br'])).stdout.trim(), '', 'no bridge left');
    t.equal((await node.vsctl(['--bare', '--columns=name', 'list', 'Interface'])).stdout.trim(), '', 'its ports and interfaces went with it');
    t.equal(await ovs.deleteBridge('br-int'), false, 'a second removal finds nothing');

    const changes = await ovs.ensureBridge();
    t.match(changes.join('\n'), /created bridge br-int \(datapath netdev\)/);
    t.equal(await get('Bridge', 'br-int', 'datapath_type'), 'netdev');
    t.equal(await get('Bridge', 'br-int', 'fail_mode'), 'secure');
    t.equal(await get('Bridge', 'br-int', 'protocols'), '[OpenFlow15]');
    t.equal(await get('Bridge', 'br-int', 'external_ids:sluice-managed'), '"true"');
    t.equal(await get('Interface', 'br-int', 'type'), 'internal', 'the bridge has its local port, as add-br makes it');
    const tables = (await node.ofctl(['dump-table-features', node.mgmt])).stdout;
    t.match(tables, /table 4 \("ConntrackZone"\)/, 'the pipeline tables carry their names');
    t.same(await ovs.ensureBridge(), [], 'a second ensureBridge changes nothing');

    const created = await ovs.ensureGateway('antrea-gw0');
    t.match(created.changes.join('\n'), /created gateway antrea-gw0/);
    t.ok(created.gateway.ofport > 0, `the gateway has OpenFlow port ${created.gateway.ofport}`);
    t.equal(await get('Interface', 'antrea-gw0', 'type'), 'internal');
    t.equal(JSON.parse(await get('Interface', 'antrea-gw0', 'mac')), created.gateway.mac, 'its MAC is persisted');
    t.equal(await get('Interface', 'antrea-gw0', 'external_ids:sluice-type'), 'gateway');
    t.same((await ovs.ensureGateway('antrea-gw0')).changes, [], 'a second ensureGateway changes nothing');
    await t.rejects(new OvsBridge({ ovsRunDir: node.runDir, bridge: 'br-none', datapath: 'netdev', log }).ensureGateway('gw-x'), /set up gateway gw-x on br-none: bridge br-none does not exist/, 'a missing bridge is named');

    await node.vsctl(['set', 'Open_vSwitch', '.', 'other_config:flow-restore-wait=true', 'other_config:keep=1']);
    t.equal(await ovs.endFlowRestoreWait(), true, 'it was set');
    t.equal((await node.vsctl(['--if-exists', 'get', 'Open_vSwitch', '.', 'other_config:flow-restore-wait'])).stdout.trim(), '', 'and is gone');
    t.equal(await get('Open_vSwitch', '.', 'other_config:keep'), '"1"', 'other keys stay');
    t.equal(await ovs.endFlowRestoreWait(), false, 'a second call finds nothing to end');
  });
}
