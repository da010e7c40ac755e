/**
 * Enforcement over time, with real packets (lab en3, ptp, 2 nodes): node -> own Pod never blocked;
 * established connections survive policy edits that still allow them while new connections obey
 * the new policy; audit log lines (Antrea rule, K8s default drop, K8s allow of an annotated
 * Namespace) with exact dedup counts; a new local Pod's policy flows arrive with its forwarding
 * flows; agent kill -9 and ovs-vswitchd restart converge to the same flows with no window of allow;
 * a quarantine cuts the open connections it denies (UDP and TCP, mid-stream, the server writing
 * too) and keeps them cut, and leaves the others flowing without a lost datagram.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { agentAuditLogPath } from '../../lab/agent.js';
import { nodeIP, ovsDir, podNetns, repoRoot } from '../../lab/net/names.js';
import { startNodeOvs } from '../../lab/net/ovs.js';
import { tableId } from '../../daemon/flows/tables.js';
import { cli, cliJson, skipReason, type ListJson } from './labcli-helpers.js';
import { agentStatus, compareWithSimulate, labCli, POLICIES, probe, readText, restartAgent, tempDir, WORKLOAD, writeTempFile } from './enforce-helpers.js';
import { Traffic } from './enforce-traffic.js';
import { ConnProcess, lostBetween } from './conn-traffic.js';

const LAB = 'en3';
const FIX = join(repoRoot(), 'test', 'lab', 'fixtures', 'enforce');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface PodJson { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string } }

/** Policy/Pod flows of a node: cookie -> duration seconds (ovs-ofctl). */
function flowAges(node: string): Map<string, number> {
  const r = spawnSync('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', 'br-int', 'cookie=0x51ce000000000000/0xffff000000000000'], { env: { ...process.env, OVS_RUNDIR: ovsDir(LAB, node) }, encoding: 'utf8' });
  const out = new Map<string, number>();
  for (const line of r.stdout.split('\n')) {
    const m = /cookie=(0x[0-9a-f]+), duration=([0-9.]+)s/.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

function dumpFlows(node: string, filter: string): string[] {
  const r = spawnSync('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', 'br-int', filter], { env: { ...process.env, OVS_RUNDIR: ovsDir(LAB, node) }, encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.includes('cookie='));
}

const reason = skipReason();
if (reason) {
  t.plan(0, reason);
} else {
  const dir = tempDir('enforce-en3-');
  const pods = new Map<string, PodJson>();
  const refresh = async () => {
    pods.clear();
    for (const p of (await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', '--name', LAB])).items) pods.set(`${p.metadata.namespace}/${p.metadata.name}`, p);
  };
  const pod = (ref: string): PodJson => {
    const p = pods.get(ref);
    if (!p) throw new Error(`no Pod ${ref}`);
    return p;
  };
  const netnsOf = (ref: string) => podNetns(LAB, ref.split('/')[0]!, ref.split('/')[1]!);

  t.before(async () => {
    await cli(['down', '--name', LAB]);
    await labCli(LAB, ['up', '--sluice', '--policy-source', 'standalone', '--nodes', '2', '--primary', 'ptp', '-f', WORKLOAD]);
    await labCli(LAB, ['apply', '-f', join(POLICIES, '01-default-deny-x.yaml'), '-f', join(POLICIES, '02-allow-from-y.yaml')]);
    await refresh();
  });
  t.teardown(async () => {
    await cli(['down', '--name', LAB]);
  });

  t.test('node -> its own Pods is never blocked (kubelet probes); other nodes obey policy', async (t) => {
    const probes = ['x/a', 'x/b', 'x/c'].flatMap((to) => ['node-1', 'node-2'].map((n) => ({ from: `ip:${nodeIP(n)}`, to, port: 80, protocol: 'TCP' as const })));
    const c = await compareWithSimulate(LAB, dir, probes);
    t.same(c.mismatches, [], 'lab = simulate for node -> Pod');
    const real = await probe(LAB, dir, probes);
    for (const [i, p] of probes.entries()) {
      const own = pod(p.to).spec.nodeName === ['node-1', 'node-2'].find((n) => p.from === `ip:${nodeIP(n)}`);
      if (own) t.equal(real[i]!.verdict, 'allow', `${p.from} (own node) -> ${p.to} allowed under default deny`);
      else t.equal(real[i]!.verdict, 'drop', `${p.from} (other node) -> ${p.to} dropped`);
    }
  });

  t.test('established connections survive policy changes that still allow them; new ones obey', async (t) => {
    const stream = new Traffic(netnsOf('y/b'), 'stream', pod('x/a').status.podIP, 80);
    t.teardown(() => stream.stop());
    t.ok(await stream.started(), 'y/b -> x/a:80 stream established (allowed from y)');
    const before = await probe(LAB, dir, [{ from: 'z/a', to: 'x/a', port: 81, protocol: 'TCP' }]);
    t.equal(before[0]!.verdict, 'drop', 'z/a -> x/a:81 dropped before the edit');
    await labCli(LAB, ['apply', '-f', join(FIX, '21-allow-from-y-and-z81.yaml')]);
    t.ok(await stream.progresses(), 'the stream still flows after the NetworkPolicy edit (its rule flows were recompiled)');
    const after = await probe(LAB, dir, [{ from: 'z/a', to: 'x/a', port: 81, protocol: 'TCP' }, { from: 'z/a', to: 'x/a', port: 80, protocol: 'TCP' }]);
    t.same(after.map((v) => v.verdict), ['allow', 'drop'], 'a new connection obeys the edited policy (z on 81 only)');
    await labCli(LAB, ['apply', '-f', join(FIX, '20-logged-drop.yaml')]);
    t.ok(await stream.progresses(), 'the stream still flows after an Antrea policy on the same Pod was added');
    const s = await stream.stop();
    t.same(s.errors, [], 'the stream never failed');
    const c = await compareWithSimulate(LAB, dir, [
      { from: 'z/a', to: 'x/a', port: 81, protocol: 'TCP' }, { from: 'z/a', to: 'x/a', port: 80, protocol: 'UDP' }, { from: 'y/b', to: 'x/a', port: 80, protocol: 'TCP' },
      { from: 'z/b', to: 'x/b', port: 81, protocol: 'TCP' }, { from: 'z/b', to: 'x/b', port: 80, protocol: 'TCP' },
    ]);
    t.same(c.mismatches, [], 'lab = simulate after the edits');
  });

  t.test('audit log: Antrea rule, K8s default drop and K8s allow of an annotated Namespace; dedup counts', async (t) => {
    await labCli(LAB, ['apply', '-f', join(FIX, '22-ns-x-logging.yaml')]);
    await sleep(300);
    const xa = pod('x/a');
    const za = pod('z/a');
    // Five datagrams from one source port inside the 1 s dedup window: one line, "[5 packets in ...]".
    const send = spawnSync('ip', ['netns', 'exec', netnsOf('z/a'), process.execPath, '-e', `
      const s = require('node:dgram').createSocket('udp4');
      s.bind(40123, () => { let n = 0; const i = setInterval(() => { s.send('hello', 80, '${xa.status.podIP}'); if (++n === 5) { clearInterval(i); setTimeout(() => s.close(), 50); } }, 40); });
    `], { encoding: 'utf8' });
    t.equal(send.status, 0, `sent 5 datagrams ${send.stderr}`);
    const k8sDrop = await probe(LAB, dir, [{ from: 'z/b', to: 'x/b', port: 80, protocol: 'TCP' }, { from: 'y/a', to: 'x/b', port: 80, protocol: 'TCP' }]);
    t.same(k8sDrop.map((v) => v.verdict), ['drop', 'allow']);
    await sleep(1500);
    const logOf = (ref: string) => readText(agentAuditLogPath(LAB, pod(ref).spec.nodeName)).split('\n').filter(Boolean);
    const antrea = logOf('x/a').filter((l) => l.includes('AntreaClusterNetworkPolicy:en-log-drop-z-to-xa') && l.includes(` ${za.status.podIP} 40123 `));
    t.equal(antrea.length, 1, `one deduplicated line for the 5 datagrams:\n${antrea.join('\n')}`);
    t.match(antrea[0] ?? '', new RegExp(`^\\d{4}/\\d{2}/\\d{2} \\d{2}:\\d{2}:\\d{2}\\.\\d{6} AntreaPolicyIngressRule AntreaClusterNetworkPolicy:en-log-drop-z-to-xa Drop \\d+ ${za.status.podIP.replace(/\./g, '\\.')} 40123 ${xa.status.podIP.replace(/\./g, '\\.')} 80 UDP 33 \\[5 packets in [0-9.]+m?s\\]$`), 'fields and dedup count');
    const xb = pod('x/b');
    const drops = logOf('x/b').filter((l) => / IngressDefaultRule K8sNetworkPolicy Drop -1 /.test(l) && l.includes(` ${pod('z/b').status.podIP} `) && l.includes(` ${xb.status.podIP} 80 TCP `));
    t.ok(drops.length >= 1, `K8s default drop logged with reference K8sNetworkPolicy:\n${drops.join('\n')}`);
    const allows = logOf('x/b').filter((l) => / IngressRule K8sNetworkPolicy:x\/allow-from-y Allow \d+ /.test(l) && l.includes(` ${pod('y/a').status.podIP} `));
    t.ok(allows.length >= 1, `K8s allow of the annotated Namespace logged (first packet only):\n${allows.join('\n')}`);
  });

  t.test('a new local Pod: its policy flows are installed no later than its forwarding flows', async (t) => {
    const file = writeTempFile(dir, 'xd.yaml', `apiVersion: v1
kind: Pod
metadata: {name: d, namespace: x, labels: {pod: d}}
spec:
  containers: [{name: s, ports: [{name: serve-80-tcp, containerPort: 80, protocol: TCP}]}]
`);
    await labCli(LAB, ['apply', '-f', file]);
    await refresh();
    const xd = pod('x/d');
    const fwd = dumpFlows(xd.spec.nodeName, `table=${tableId('L3Forwarding')}`).find((l) => l.includes(`nw_dst=${xd.status.podIP} `));
    const iso = dumpFlows(xd.spec.nodeName, `table=${tableId('IngressDefaultRule')}`).find((l) => l.includes(`nw_dst=${xd.status.podIP} `));
    t.ok(fwd && iso, 'forwarding flow and isolation drop of x/d are installed');
    const age = (l: string) => Number(/duration=([0-9.]+)s/.exec(l)![1]);
    t.ok(age(iso!) >= age(fwd!), `isolation (${age(iso!)} s old) installed no later than forwarding (${age(fwd!)} s old)`);
    const r = await probe(LAB, dir, [{ from: 'z/a', to: 'x/d', port: 80, protocol: 'TCP' }, { from: 'y/a', to: 'x/d', port: 80, protocol: 'TCP' }]);
    t.same(r.map((v) => v.verdict), ['drop', 'allow'], 'x/d obeys the namespace policies at once');
  });

  t.test('agent kill -9 and restart: same flows, none re-added, no window of allow', async (t) => {
    const denied = new Traffic(netnsOf('z/b'), 'attempts', pod('x/c').status.podIP, 80);
    const stream = new Traffic(netnsOf('y/c'), 'stream', pod('x/c').status.podIP, 80);
    t.teardown(async () => {
      await denied.stop();
      await stream.stop();
    });
    t.ok(await stream.started(), 'stream y/c -> x/c running');
    t.ok(await denied.started(), 'denied attempts z/b -> x/c running');
    const ages = new Map((['node-1', 'node-2'] as const).map((n) => [n, flowAges(n)]));
    for (const node of ['node-1', 'node-2']) await restartAgent(LAB, node);
    for (const node of ['node-1', 'node-2'] as const) {
      const after = flowAges(node);
      const beforeAges = ages.get(node)!;
      t.same([...after.keys()].sort(), [...beforeAges.keys()].sort(), `${node}: same ${after.size} flows after the restart`);
      t.same([...beforeAges].filter(([c, a]) => !(after.get(c)! >= a)).map(([c]) => c), [], `${node}: no flow was deleted and re-added`);
    }
    t.ok(await stream.progresses(), 'the established stream kept flowing');
    const s = await denied.stop();
    t.ok(s.attempts > 5, `${s.attempts} denied connection attempts during the restarts`);
    t.equal(s.connected, 0, 'none of them got through');
  });

  t.test('ovs-vswitchd restart: flows replayed, same set, no window of allow', async (t) => {
    const xc = pod('x/c');
    const node = xc.spec.nodeName;
    const denied = new Traffic(netnsOf('z/b'), 'attempts', xc.status.podIP, 80);
    t.teardown(() => denied.stop());
    t.ok(await denied.started(), 'denied attempts z/b -> x/c running');
    const before = flowAges(node);
    const pid = Number(readFileSync(join(ovsDir(LAB, node), 'ovs-vswitchd.pid'), 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    const t0 = Date.now();
    while (spawnSync('kill', ['-0', String(pid)]).status === 0) await sleep(20);
    await startNodeOvs(LAB, node);
    const t1 = Date.now();
    let after = flowAges(node);
    const deadline = Date.now() + 30_000;
    while ([...before.keys()].some((c) => !after.has(c)) && Date.now() < deadline) {
      await sleep(50);
      after = flowAges(node);
    }
    t.comment(`flows back ${Date.now() - t1} ms after ovs-vswitchd was started again (${Date.now() - t0} ms after the kill)`);
    t.same([...after.keys()].sort(), [...before.keys()].sort(), `the same ${before.size} flows are back`);
    await sleep(500);
    const s = await denied.stop();
    t.ok(s.attempts > 3, `${s.attempts} denied connection attempts around the restart`);
    t.equal(s.connected, 0, 'none got through');
    const c = await compareWithSimulate(LAB, dir, [
      { from: 'y/c', to: 'x/c', port: 80, protocol: 'TCP' }, { from: 'z/b', to: 'x/c', port: 80, protocol: 'TCP' }, { from: 'x/a', to: 'x/c', port: 80, protocol: 'UDP' },
      { from: `ip:${nodeIP(node)}`, to: 'x/c', port: 80, protocol: 'TCP' },
    ]);
    t.same(c.mismatches, [], 'lab = simulate after the replay');
  });

  t.test('a quarantine cuts the open connections it denies; allowed ones keep flowing, nothing lost', async (t) => {
    const ya = pod('y/a');
    const node = ya.spec.nodeName;
    const PORT = 7070;
    // The server writes too: after the cut its segments race the client's, and one that arrived
    // first would open the connection again in the reverse direction (its egress allows it) if the
    // cut connection were not blocked both ways.
    const recv = ConnProcess.receiver(netnsOf('y/a'), PORT, 4, true);
    t.ok(await recv.ready(), 'receiver on y/a');
    const senders = {
      deniedUdp: ConnProcess.udp(netnsOf('z/a'), ya.status.podIP, PORT, 40500, 5),
      deniedTcp: ConnProcess.tcp(netnsOf('z/c'), ya.status.podIP, PORT, 5),
      allowedUdp: ConnProcess.udp(netnsOf('x/b'), ya.status.podIP, PORT, 40501, 5),
      allowedTcp: ConnProcess.tcp(netnsOf('x/c'), ya.status.podIP, PORT, 5),
    };
    t.teardown(async () => {
      for (const s of Object.values(senders)) await s.stop();
      await recv.stop();
      await labCli(LAB, ['delete', '-f', join(FIX, '23-quarantine-ya-from-z.yaml')]).catch(() => undefined);
    });
    const flowsOf = [['udp', 'z/a'], ['tcp', 'z/c'], ['udp', 'x/b'], ['tcp', 'x/c']] as const;
    const arrived = () => flowsOf.every(([proto, ref]) => (recv.from(proto, pod(ref).status.podIP)?.packets ?? 0) > 5);
    const deadline = Date.now() + 20_000;
    while (!arrived() && Date.now() < deadline) await sleep(50);
    t.ok(arrived(), `all four flows reach y/a before the change: ${JSON.stringify(Object.keys(recv.status().flows))}`);
    if (!arrived()) return; // nothing below would mean anything
    const cutOf = async () => ((await agentStatus(LAB, node)).enforcement as { connections?: { cut: number } } | undefined)?.connections?.cut ?? 0;
    const cutBefore = await cutOf();
    // The object is stored somewhere between the start and the end of the apply command.
    const applying = Date.now();
    await labCli(LAB, ['apply', '-f', join(FIX, '23-quarantine-ya-from-z.yaml')]);
    const applied = Date.now();
    const cutDeadline = Date.now() + 20_000;
    while ((await cutOf()) < cutBefore + 2 && Date.now() < cutDeadline) await sleep(20);
    const swept = Date.now();
    t.ok((await cutOf()) >= cutBefore + 2, `${node} cut the two denied connections`);
    await sleep(1500);
    const end = Date.now();
    const za = recv.from('udp', pod('z/a').status.podIP)!;
    const zc = recv.from('tcp', pod('z/c').status.podIP)!;
    const xb = recv.from('udp', pod('x/b').status.podIP)!;
    const xc = recv.from('tcp', pod('x/c').status.podIP)!;
    t.comment(`last denied packet at most ${Math.max(za.last, zc.last) - applying} ms after the change (from the start of the apply command, which took ${applied - applying} ms; UDP ${za.last - applying} ms, TCP ${zc.last - applying} ms)`);
    // Packets still queued in the datapath when the entry went may land just after it.
    t.ok(za.last < swept + 250, `the denied UDP flow stopped (last datagram ${za.last - swept} ms after the sweep was seen)`);
    t.ok(zc.last < swept + 250, `the denied TCP connection stopped mid-stream, although its server kept writing (last segment ${zc.last - swept} ms after the sweep was seen)`);
    const blocked = ((await agentStatus(LAB, node)).enforcement as { connections?: { blocked: number } } | undefined)?.connections?.blocked ?? 0;
    t.ok(blocked >= 2, `the cut connections stay blocked both ways (${blocked})`);
    t.ok(xb.last > end - 500 && xc.last > end - 500, 'the allowed UDP flow and TCP connection still flow');
    t.equal(lostBetween(xb.seqs), 0, `no datagram of the allowed UDP flow lost (${xb.seqs.length} arrived)`);
    t.same(senders.allowedTcp.status().errors, [], 'the allowed TCP connection saw no reset');
    t.same(recv.status().errors.filter((e) => e.includes(pod('x/c').status.podIP)), [], 'nor did its server side');
  });
}
