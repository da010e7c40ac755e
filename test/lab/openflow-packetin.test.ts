/**
 * The packet-in path against a real OVS (netdev datapath) in a private namespace (prefix "of"):
 * br-int with two veth ports into namespaces of-a and of-b. Flows punt A's TCP SYNs and UDP
 * datagrams to B (after conntrack, with registers and a cookie set) to the agent's controller,
 * which answers with daemon/enforcement/reject replies sent back out of A's port by PACKET_OUT. A's sockets
 * must then fail with ECONNREFUSED (TCP) / EHOSTUNREACH (UDP, ICMP 3/10) / EACCES (UDP over IPv6,
 * ICMPv6 1/1) — while B is listening on those ports, so the refusal can only come from the
 * controller. The same packet-ins feed the audit log. Also: the meter bounds a flood
 * (every punted packet is either received by the controller or counted as dropped by the meter),
 * the controller survives an ovs-vswitchd restart, and the packet-in rate is printed.
 */
import t from 'tap';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { AuditLogger } from '../../daemon/enforcement/auditlog/writer.js';
import { packetFields, policyReference } from '../../daemon/enforcement/auditlog/format.js';
import { OpenFlowController } from '../../daemon/ovs/openflow/controller.js';
import { runPacketInLoop } from '../../daemon/ovs/openflow/dispatch.js';
import { sendRejectReply } from '../../daemon/enforcement/reject/index.js';
import { packetInMeters, PuntCategory, PuntOp, puntActions } from '../../daemon/flows/punt.js';
import { CT_STATE, type PacketIn } from '../../daemon/ovs/openflow/wire.js';
import { decodePacket, TCP_FLAGS } from '../../daemon/packet.js';
import { alive, startPrivateOvs, startPrivateVswitchd } from './datapath-env.js';

const NODE = 'of-node';
const NS_A = 'of-a';
const NS_B = 'of-b';
const DIR = '/tmp/of-lab';
const RUN = join(DIR, 'ovs');
const MGMT = join(RUN, 'br-int.mgmt');
const IP_A = '10.77.0.1';
const IP_B = '10.77.0.2';
const IP6_A = 'fd00:77::1';
const IP6_B = 'fd00:77::2';
const PORT_A = 1;
const PORT_B = 2;
const COOKIE = 0x51ce02000000abcdn;
const FLOOD_METER = 300;
const FLOOD_RATE = 200;
const FAST_METER = 301;
const AUDIT_LOG = join(DIR, 'log', 'np.log');

const env = { ...process.env, OVS_RUNDIR: RUN, OVS_DBDIR: RUN, OVS_LOGDIR: RUN } as Record<string, string>;

async function sh(cmd: string, args: string[], opts: { allowFail?: boolean; input?: string } = {}) {
  const r = await execa(cmd, args, { reject: false, env, input: opts.input ?? '' });
  if (r.exitCode !== 0 && !opts.allowFail) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.exitCode}: ${r.stderr}`);
  return { code: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
}
const inNs = (ns: string, cmd: string[], opts: { allowFail?: boolean; input?: string } = {}) => sh('ip', ['netns', 'exec', ns, ...cmd], opts);
const ofctl = (args: string[], input?: string) => sh('ovs-ofctl', ['-O', 'OpenFlow15', ...args], input === undefined ? {} : { input });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function missingPrereq(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, OVS)';
  for (const tool of ['ovs-vswitchd', 'ovsdb-server', 'ovsdb-tool', 'ovs-vsctl', 'ovs-ofctl', 'ovs-appctl', 'ip', 'nft', 'ethtool', 'ss']) {
    if ((await sh('sh', ['-c', `command -v ${tool}`], { allowFail: true })).code !== 0) return `missing tool ${tool}`;
  }
  if (!existsSync('/usr/share/openvswitch/vswitch.ovsschema')) return 'missing /usr/share/openvswitch/vswitch.ovsschema';
  return undefined;
}

function pidOf(daemon: string): number | undefined {
  const f = join(RUN, `${daemon}.pid`);
  return existsSync(f) ? Number(readFileSync(f, 'utf8').trim()) : undefined;
}
async function stopDaemon(daemon: string, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  const pid = pidOf(daemon);
  if (pid === undefined) return;
  try {
    process.kill(pid, signal);
  } catch {
    /* gone */
  }
  for (let i = 0; i < 50 && alive(pid); i++) await sleep(100);
  if (alive(pid)) process.kill(pid, 'SIGKILL');
  rmSync(join(RUN, `${daemon}.pid`), { force: true });
}

async function teardown(): Promise<void> {
  await stopDaemon('ovs-vswitchd');
  await stopDaemon('ovsdb-server');
  for (const ns of [NS_A, NS_B, NODE]) await sh('ip', ['netns', 'del', ns], { allowFail: true });
  rmSync(DIR, { recursive: true, force: true });
}

const startVswitchd = () => startPrivateVswitchd(NODE, RUN);

async function setupLab(): Promise<void> {
  await teardown();
  mkdirSync(RUN, { recursive: true });
  for (const ns of [NODE, NS_A, NS_B]) {
    await sh('ip', ['netns', 'add', ns]);
    await inNs(ns, ['ip', 'link', 'set', 'lo', 'up']);
  }
  await startPrivateOvs(NODE, RUN);
  const vsctl = (args: string[]) => sh('ovs-vsctl', [`--db=unix:${RUN}/db.sock`, '--timeout=10', ...args]);
  await vsctl(['add-br', 'br-int', '--', 'set', 'Bridge', 'br-int', 'datapath_type=netdev', 'fail_mode=secure', 'protocols=OpenFlow15']);
  const nft: string[] = ['add table netdev of_guard'];
  for (const [ns, ip, ip6, host, ofport] of [
    [NS_A, IP_A, IP6_A, 'ofa-h', PORT_A],
    [NS_B, IP_B, IP6_B, 'ofb-h', PORT_B],
  ] as const) {
    await inNs(NODE, ['ip', 'link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
    await inNs(NODE, ['ip', 'link', 'set', host, 'up']);
    await sh('ip', ['-n', ns, '-batch', '-'], { input: `addr add ${ip}/24 dev eth0\naddr add ${ip6}/64 dev eth0 nodad\nlink set eth0 up\n` });
    await inNs(ns, ['ethtool', '-K', 'eth0', 'tx', 'off']); // netdev datapath: no checksum offload
    // netdev datapath: the kernel must not also process what OVS receives on the veth.
    nft.push(`add chain netdev of_guard in_${host.replace('-', '_')} { type filter hook ingress device ${host} priority 0; policy drop; }`);
    await vsctl(['add-port', 'br-int', host, '--', 'set', 'Interface', host, `ofport_request=${ofport}`]);
  }
  await inNs(NODE, ['nft', '-f', '-'], { input: nft.join('\n') + '\n' });
}

/** The test's flows: punt new TCP/8080 and UDP/5353 connections from A to B, a metered flood port, NORMAL otherwise. */
function labFlows(): string {
  const punt = puntActions({ category: PuntCategory.policy, ops: PuntOp.reject | PuntOp.log });
  return [
    'table=0,priority=0 actions=NORMAL',
    `table=0,priority=100,tcp,in_port=${PORT_A},nw_dst=${IP_B},tp_dst=8080 actions=set_field:0x2a->reg0,set_field:0x7->reg3,ct(zone=65520,table=1)`,
    `table=0,priority=100,udp,in_port=${PORT_A},nw_dst=${IP_B},tp_dst=5353 actions=set_field:0x2a->reg0,set_field:0x7->reg3,ct(zone=65520,table=1)`,
    `table=0,priority=100,tcp6,in_port=${PORT_A},ipv6_dst=${IP6_B},tp_dst=8080 actions=set_field:0x2a->reg0,set_field:0x7->reg3,ct(zone=65520,table=1)`,
    `table=0,priority=100,udp6,in_port=${PORT_A},ipv6_dst=${IP6_B},tp_dst=5353 actions=set_field:0x2a->reg0,set_field:0x7->reg3,ct(zone=65520,table=1)`,
    `table=0,priority=100,udp,in_port=${PORT_A},tp_dst=9999 actions=meter:${FLOOD_METER},controller(userdata=05.00)`,
    `table=0,priority=100,udp,in_port=${PORT_A},tp_dst=9998 actions=meter:${FAST_METER},controller(userdata=05.01)`,
    `table=0,priority=100,udp,in_port=${PORT_A},tp_dst=9997 actions=meter:${FAST_METER},controller(userdata=06.00)`,
    `table=1,priority=100,cookie=0x${COOKIE.toString(16)},ip,ct_state=+new+trk actions=${punt}`,
    `table=1,priority=100,cookie=0x${COOKIE.toString(16)},ipv6,ct_state=+new+trk actions=${punt}`,
    'table=1,priority=0 actions=NORMAL',
  ].join('\n') + '\n';
}
const installFlows = () => ofctl(['--bundle', 'replace-flows', `unix:${MGMT}`, '-'], labFlows());

/** Runs a small Node program inside a namespace and returns its JSON output. */
async function nodeIn(ns: string, program: string): Promise<Record<string, unknown>> {
  const r = await inNs(ns, [process.execPath, '--input-type=module', '-e', program]);
  return JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
}

const tcpConnect = (port: number, host = IP_B) => `
import { connect } from 'node:net';
const s = connect({ host: '${host}', port: ${port} });
const started = Date.now();
s.setTimeout(8000, () => { console.log(JSON.stringify({ code: 'TIMEOUT' })); process.exit(0); });
s.on('connect', () => { console.log(JSON.stringify({ code: 'CONNECTED' })); process.exit(0); });
s.on('error', (e) => { console.log(JSON.stringify({ code: e.code, ms: Date.now() - started })); process.exit(0); });`;

const udpSend = (port: number, host = IP_B) => `
import { createSocket } from 'node:dgram';
const s = createSocket('${host.includes(':') ? 'udp6' : 'udp4'}');
const started = Date.now();
setTimeout(() => { console.log(JSON.stringify({ code: 'NO_ERROR' })); process.exit(0); }, 5000);
s.on('error', (e) => { console.log(JSON.stringify({ code: e.code, ms: Date.now() - started })); process.exit(0); });
s.connect(${port}, '${host}', () => { s.send('query'); s.on('message', () => {}); });`;

const udpRepeat = (port: number, count: number, srcPort: number) => `
import { createSocket } from 'node:dgram';
const s = createSocket('udp4');
s.on('error', () => {});
s.bind(${srcPort}, '${IP_A}', async () => {
  for (let i = 0; i < ${count}; i++) { s.send('query', ${port}, '${IP_B}'); await new Promise((r) => setTimeout(r, 20)); }
  console.log(JSON.stringify({ sent: ${count} })); process.exit(0);
});`;

const flood = (port: number, count: number) => `
import { createSocket } from 'node:dgram';
const s = createSocket('udp4');
const payload = Buffer.alloc(32);
let sent = 0;
const started = process.hrtime.bigint();
s.connect(${port}, '${IP_B}', () => {
  const burst = () => {
    for (let i = 0; i < 200 && sent < ${count}; i++, sent++) s.send(payload);
    if (sent < ${count}) setImmediate(burst);
    else setTimeout(() => { console.log(JSON.stringify({ sent, ms: Number(process.hrtime.bigint() - started) / 1e6 })); process.exit(0); }, 200);
  };
  burst();
});
s.on('error', () => {});`;

/** Packets that entered a meter and packets its drop band discarded (updated per packet by the datapath). */
async function meterStats(meterId: number): Promise<{ entered: number; dropped: number }> {
  const out = (await ofctl(['meter-stats', `unix:${MGMT}`, `meter=${meterId}`])).stdout;
  const entered = out.match(/packet_in_count:(\d+)/);
  const dropped = out.match(/0: packet_count:(\d+)/);
  if (!entered || !dropped) throw new Error(`no stats for meter ${meterId}: ${out}`);
  return { entered: Number(entered[1]), dropped: Number(dropped[1]) };
}
/**
 * Packet-ins OVS discarded before they reached the socket: its 1024-entry async-message list
 * (packet_in_overflow) or the connection's 100-message send queue (rconn_overflow).
 */
async function ovsPacketInOverflow(): Promise<number> {
  const ctl = join(RUN, `ovs-vswitchd.${pidOf('ovs-vswitchd')}.ctl`);
  let total = 0;
  for (const counter of ['packet_in_overflow', 'rconn_overflow']) total += Number((await sh('ovs-appctl', ['-t', ctl, 'coverage/read-counter', counter])).stdout.trim());
  return total;
}
/** Polls `read` until two reads 1.2 s apart agree (OVS folds per-thread coverage counters about once a second). */
async function settled<T>(read: () => Promise<T>): Promise<T> {
  let last = JSON.stringify(await read());
  for (let i = 0; i < 10; i++) {
    await sleep(1200);
    const v = await read();
    if (JSON.stringify(v) === last) return v;
    last = JSON.stringify(v);
  }
  throw new Error('counters did not settle');
}

const why = await missingPrereq();
if (why) {
  t.plan(0, why);
} else {
  if (!process.env.OF_KEEP) t.teardown(teardown);
  await setupLab();
  const meters = [...packetInMeters(), { meterId: FLOOD_METER, rate: FLOOD_RATE, burst: FLOOD_RATE }, { meterId: FAST_METER, rate: 10_000_000, burst: 10_000_000 }];
  const newController = () => new OpenFlowController({ socketPath: MGMT, meters, queueSize: 65536, reconnectMinMs: 50, reconnectMaxMs: 500 });
  let controller = newController();
  t.teardown(() => controller.close());
  controller.start();
  await controller.waitConnected(15_000); // meters exist before flows that use them are added
  await installFlows();

  // The agent's consumer: reject and log what the policy flows punt, count the flood.
  const audit = new AuditLogger({ path: AUDIT_LOG, windowMs: 300 });
  t.teardown(() => audit.close());
  const TABLE_NAMES: Record<number, string> = { 1: 'AntreaPolicyIngressRule' };
  const RULES = new Map([[COOKIE, { policyRef: policyReference({ kind: 'AntreaClusterNetworkPolicy', name: 'acnp-reject' }), priority: 100 }]]);
  const rejected: PacketIn[] = [];
  const replyKinds: string[] = [];
  const floodCount = new Map<number, number>();
  const floodTimes: bigint[] = [];
  const handlerErrors: unknown[] = [];
  const injected: PacketIn[] = [];
  const runLoop = () => runPacketInLoop(
    controller,
    {
      [PuntCategory.policy]: (pin, punt) => {
        const rule = RULES.get(pin.cookie);
        if (punt.ops & PuntOp.reject) {
          rejected.push(pin);
          const r = sendRejectReply(controller, pin);
          if (r.ok) replyKinds.push(r.kind);
        }
        if (punt.ops & PuntOp.log && rule) {
          audit.log({ ...packetFields(pin.packet), tableName: TABLE_NAMES[pin.tableId] ?? String(pin.tableId), ...rule, action: punt.ops & PuntOp.reject ? 'Reject' : 'Drop' });
        }
      },
      6: (pin) => {
        injected.push(pin);
      },
      5: (_pin, punt) => {
        floodCount.set(punt.ops, (floodCount.get(punt.ops) ?? 0) + 1);
        if (punt.ops === 1) floodTimes.push(process.hrtime.bigint());
      },
    },
    (e) => handlerErrors.push(e),
  );
  void runLoop();

  /** Every packet-in OVS sent so far has been read (barrier) and handled (queue empty, loop idle). */
  const drained = async () => {
    await controller.barrier();
    for (let i = 0; i < 200 && controller.stats().queued > 0; i++) await sleep(10);
    await sleep(20);
  };

  // B listens on both ports: a refusal can only come from the controller, never from B's kernel.
  const listener = execa('ip', ['netns', 'exec', NS_B, process.execPath, '--input-type=module', '-e', `
    import { createServer } from 'node:net'; import { createSocket } from 'node:dgram';
    createServer((c) => c.end()).listen(8080, '${IP_B}');
    createServer((c) => c.end()).listen(8081, '${IP_B}');
    createServer((c) => c.end()).listen(8080, '${IP6_B}');
    createSocket('udp4').bind(5353, '${IP_B}');
    createSocket('udp6').bind(5353, '${IP6_B}');
    setInterval(() => {}, 1000);`], { reject: false });
  t.teardown(() => {
    listener.kill('SIGKILL');
  });
  for (let i = 0; i < 100; i++) {
    const ss = (await inNs(NS_B, ['ss', '-Hltun'])).stdout;
    if ([':8080', ':8081', ':5353'].every((p) => ss.includes(`${IP_B}${p}`)) && ss.includes(`[${IP6_B}]:8080`)) break;
    await sleep(50);
  }

  t.test('control: an unpunted port on B is reachable through the bridge', async (t) => {
    const r = await nodeIn(NS_A, tcpConnect(8081));
    t.equal(r.code, 'CONNECTED');
  });

  t.test('TCP SYN punted with its metadata; the controller RST refuses the connection', async (t) => {
    const before = rejected.length;
    const r = await nodeIn(NS_A, tcpConnect(8080));
    t.equal(r.code, 'ECONNREFUSED', `connect() fails with ECONNREFUSED, not a timeout (${String(r.ms)} ms)`);
    const pin = rejected[before];
    if (!pin) return t.fail('no packet-in received');
    t.equal(pin.tableId, 1, 'table id of the punting flow');
    t.equal(pin.cookie, COOKIE, 'cookie of the punting flow');
    t.equal(pin.inPort, PORT_A, 'in_port');
    t.equal(pin.registers[0], 0x2a, 'reg0');
    t.equal(pin.registers[3], 7, 'reg3');
    t.equal(pin.ctState & (CT_STATE.NEW | CT_STATE.TRK), CT_STATE.NEW | CT_STATE.TRK, 'ct_state +new+trk');
    t.equal(pin.ctZone, 65520, 'ct_zone');
    t.same(pin.userdata, Buffer.from([PuntCategory.policy, PuntOp.reject | PuntOp.log]), 'userdata');
    const p = decodePacket(pin.packet);
    t.equal(p.ip.src, IP_A);
    t.equal(p.ip.dst, IP_B);
    t.equal(p.tcp?.flags, TCP_FLAGS.SYN, 'the full SYN');
    t.equal(replyKinds[before], 'tcp-rst');
  });

  t.test('UDP punted; the controller ICMP 3/10 makes the client socket fail', async (t) => {
    const before = rejected.length;
    const r = await nodeIn(NS_A, udpSend(5353));
    t.equal(r.code, 'EHOSTUNREACH', `connected UDP socket reports EHOSTUNREACH (ICMP host administratively prohibited) after ${String(r.ms)} ms`);
    const pin = rejected[before];
    t.equal(pin && decodePacket(pin.packet).ports?.dstPort, 5353);
    t.equal(replyKinds[before], 'icmp-admin-prohibited');
  });

  t.test('IPv6: TCP refused by an RST, UDP by ICMPv6 administratively prohibited', async (t) => {
    const before = replyKinds.length;
    const tcp = await nodeIn(NS_A, tcpConnect(8080, IP6_B));
    t.equal(tcp.code, 'ECONNREFUSED', 'connect() to the IPv6 address is refused');
    const udp = await nodeIn(NS_A, udpSend(5353, IP6_B));
    t.equal(udp.code, 'EACCES', 'connected UDP socket reports EACCES (ICMPv6 1/1)');
    t.same(replyKinds.slice(before), ['tcp-rst', 'icmpv6-admin-prohibited']);
  });

  t.test('PACKET_OUT into the pipeline: in_port and registers preset, resubmit to table 0', async (t) => {
    const udp = Buffer.from(
      '0a00000000020a00000000010800' + '4500002100004000401100000a4d00010a4d0002' + '9c40270d000d0000' + '68656c6c6f',
      'hex',
    ); // 10.77.0.1:40000 -> 10.77.0.2:9997 "hello"
    const before = injected.length;
    t.ok(controller.packetOut({ packet: udp, inPort: PORT_A, registers: { 0: 0x2000, 5: 0x55 }, actions: [{ type: 'resubmit', table: 0 }] }));
    await controller.barrier();
    for (let i = 0; i < 50 && injected.length === before; i++) await sleep(20);
    const pin = injected[before];
    if (!pin) return t.fail('the injected packet did not come back as a packet-in');
    t.equal(pin.inPort, PORT_A, 'the pipeline saw the preset in_port');
    t.equal(pin.registers[0], 0x2000, 'reg0 preset by the packet-out');
    t.equal(pin.registers[5], 0x55, 'reg5 preset by the packet-out');
    t.same(pin.packet, udp, 'same bytes');
  });

  t.test('audit log: one line per punted connection, repeated packets of a connection deduplicated', async (t) => {
    await nodeIn(NS_A, udpRepeat(5353, 3, 40404));
    const lines = async () => (existsSync(AUDIT_LOG) ? readFileSync(AUDIT_LOG, 'utf8').split('\n').filter(Boolean) : []);
    for (let i = 0; i < 50 && !(await lines()).some((l) => l.includes(' 40404 ')); i++) await sleep(100);
    const all = await lines();
    const ts = '\\d{4}/\\d\\d/\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{6}';
    const ref = 'AntreaPolicyIngressRule AntreaClusterNetworkPolicy:acnp-reject Reject 100';
    t.ok(all.some((l) => new RegExp(`^${ts} ${ref} ${IP_A} \\d+ ${IP_B} 8080 TCP 60$`).test(l)), 'the refused TCP connection (SYN: IP length 60)');
    t.ok(all.some((l) => new RegExp(`^${ts} ${ref} ${IP_A} \\d+ ${IP_B} 5353 UDP 33$`).test(l)), 'the refused UDP datagram (IP length 20 + 8 + 5)');
    const repeated = all.filter((l) => l.includes(` ${IP_A} 40404 `));
    t.equal(repeated.length, 1, 'one line for the three datagrams of one flow');
    t.match(repeated[0] ?? '', new RegExp(` ${IP_B} 5353 UDP 33 \\[3 packets in \\d+(\\.\\d+)?(ms|µs|s)\\]$`));
    t.same(handlerErrors, []);
  });

  t.test('the meter bounds a flood; every punted packet is accounted for', async (t) => {
    const [meter0, overflow0] = await settled(() => Promise.all([meterStats(FLOOD_METER), ovsPacketInOverflow()]));
    const sent = await nodeIn(NS_A, flood(9999, 10000));
    const [meter1, overflow] = await settled(() => Promise.all([meterStats(FLOOD_METER), ovsPacketInOverflow()]));
    const meter = { entered: meter1.entered - meter0.entered, dropped: meter1.dropped - meter0.dropped };
    await drained();
    const received = floodCount.get(0) ?? 0;
    const ovsDropped = overflow - overflow0;
    t.comment(`flood: sent ${String(sent.sent)} in ${Math.round(Number(sent.ms))} ms; meter ${FLOOD_METER} (${FLOOD_RATE} pkt/s, burst ${FLOOD_RATE}): entered ${meter.entered}, dropped ${meter.dropped}; controller received ${received}; OVS queue overflow ${ovsDropped}`);
    t.ok(meter.entered > FLOOD_RATE, 'the flood reached the punting flow');
    t.equal(received + ovsDropped, meter.entered - meter.dropped, 'received (+ OVS overflow) = packets the meter let through');
    t.ok(meter.dropped > 0, 'the meter dropped part of the flood');
    t.ok(received < meter.entered, 'the controller saw fewer packets than were punted');
    t.equal(controller.stats().packetInsDropped, 0, 'the in-process queue did not overflow');
  });

  t.test('packet-in throughput (printed, not asserted)', async (t) => {
    floodTimes.length = 0;
    const [meter0, overflow0] = await settled(() => Promise.all([meterStats(FAST_METER), ovsPacketInOverflow()]));
    const sent = await nodeIn(NS_A, flood(9998, 20000));
    const [meter1, overflow] = await settled(() => Promise.all([meterStats(FAST_METER), ovsPacketInOverflow()]));
    const meter = { entered: meter1.entered - meter0.entered, dropped: meter1.dropped - meter0.dropped };
    await drained();
    const n = floodTimes.length;
    const spanMs = n > 1 ? Number(floodTimes[n - 1]! - floodTimes[0]!) / 1e6 : 0;
    const rate = spanMs > 0 ? Math.round((n - 1) / (spanMs / 1000)) : 0;
    t.comment(
      `throughput: sent ${String(sent.sent)} in ${Math.round(Number(sent.ms))} ms; OVS punted ${meter.entered}; controller received ${n} in ${spanMs.toFixed(0)} ms = ${rate} packet-ins/s; ` +
        `OVS discarded ${overflow - overflow0} (its packet-in queues were full); in-process queue drops ${controller.stats().packetInsDropped}`,
    );
    t.equal(meter.dropped, 0, 'the unlimited meter dropped nothing');
    t.equal(n + (overflow - overflow0), meter.entered, 'every punted packet was received or counted by OVS as discarded');
  });

  t.test('ovs-vswitchd restart: the controller reconnects, replays meters, rejects again', async (t) => {
    const connects = controller.stats().connects;
    await stopDaemon('ovs-vswitchd', 'SIGKILL');
    await startVswitchd();
    await controller.waitConnected(15_000);
    for (let i = 0; i < 100 && controller.stats().connects === connects; i++) await sleep(50);
    t.equal(controller.stats().connects, connects + 1, 'reconnected once');
    const meterList = (await ofctl(['dump-meters', `unix:${MGMT}`])).stdout;
    t.match(meterList, /meter=256 /, 'meters replayed into the fresh vswitchd');
    await installFlows(); // the pipeline's own replay, done by the agent's flow sync
    const r = await nodeIn(NS_A, tcpConnect(8080));
    t.equal(r.code, 'ECONNREFUSED');
  });

  t.test('agent restart: a new controller takes over the existing meters (ADD -> MODIFY) and rejects', async (t) => {
    await controller.close();
    controller = newController();
    controller.start();
    await controller.waitConnected(15_000);
    void runLoop();
    t.equal(controller.stats().switchErrors, 0, 'meters already present were modified, not reported as errors');
    const r = await nodeIn(NS_A, tcpConnect(8080));
    t.equal(r.code, 'ECONNREFUSED');
    const m = await meterStats(256);
    t.ok(m.entered > 0, 'the punt went through the replayed meter 256');
  });
}
