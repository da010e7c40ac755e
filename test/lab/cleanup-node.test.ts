/**
 * `sluice-agent --cleanup` on a live lab node (lab uc, ptp, 2 nodes, the example workload, default
 * deny into namespace x): refused while the agent runs; after node-1 is unchained and its agent
 * stopped, the cleanup restores every node-1 Pod to the primary CNI alone with real packets (TCP
 * and UDP both ways, Pod -> Service), enforcement is gone on node-1 only, nothing of sluice is left
 * in node-1's namespace or OVS, and a second run is a no-op.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SLUICE_PLUGIN_TYPE } from '../../install/conflist.js';
import { agentConfigPath, agentPidPath } from '../../lab/agent.js';
import { cniConfDir, conflistPath, nodeNetns, ovsDir, podNetns, repoRoot } from '../../lab/net/names.js';
import { cli, cliJson, skipReason, type ListJson } from './labcli-helpers.js';
import { labCli, POLICIES, probe, type ProbeSpec, readText, run, SLUICECTL, tempDir, WORKLOAD } from './enforce-helpers.js';
import { Traffic } from './enforce-traffic.js';
import { alive } from './datapath-env.js';

const LAB = 'uc';
const NODE = 'node-1';
const AGENT = join(repoRoot(), 'dist', 'daemon', 'main.js');
const NS = nodeNetns(LAB, NODE);

interface PodJson { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string } }

const inNode = (cmd: string, args: string[]) => run('ip', ['netns', 'exec', NS, cmd, ...args]);
const cleanup = () => inNode(process.execPath, [AGENT, '--config', agentConfigPath(LAB, NODE), '--cleanup']);
const vsctl = (args: string[]) => run('ovs-vsctl', [`--db=unix:${ovsDir(LAB, NODE)}/db.sock`, ...args]);

/** What of sluice node-1 still has; empty when nothing. */
async function sluiceRemains(): Promise<string[]> {
  const out: string[] = [];
  for (const dev of ['br-int', 'antrea-gw0']) if ((await inNode('ip', ['link', 'show', 'dev', dev])).code === 0) out.push(`link ${dev}`);
  const rules = (await inNode('ip', ['rule', 'show'])).stdout.split('\n').filter((l) => /^300:/.test(l));
  out.push(...rules.map((l) => `rule ${l.trim()}`));
  const t300 = (await inNode('ip', ['route', 'show', 'table', '300'])).stdout.trim();
  if (t300) out.push(`table 300: ${t300}`);
  const ipt = (await inNode('iptables-save', [])).stdout.split('\n').filter((l) => l.includes('ANTREA'));
  out.push(...ipt.map((l) => `iptables ${l}`));
  const nft = (await inNode('nft', ['list', 'tables'])).stdout.split('\n').filter((l) => l.includes('sluice'));
  out.push(...nft.map((l) => `nft ${l}`));
  const brs = (await vsctl(['list-br'])).stdout.trim();
  if (brs) out.push(`OVS bridges: ${brs}`);
  const ports = (await vsctl(['--bare', '--columns=name', 'find', 'Interface', 'external_ids:sluice-type=container'])).stdout.trim();
  if (ports) out.push(`OVS Pod ports: ${ports.split(/\s+/).join(' ')}`);
  return out;
}

const reason = skipReason();
if (reason) {
  t.plan(0, reason);
} else {
  const dir = tempDir('cleanup-uc-');
  let pods: PodJson[] = [];
  const ref = (p: PodJson) => `${p.metadata.namespace}/${p.metadata.name}`;
  const onNode1 = () => pods.filter((p) => p.spec.nodeName === NODE).map(ref);
  const nodeOf = (r: string) => pods.find((p) => ref(p) === r)!.spec.nodeName;

  t.before(async () => {
    await cli(['down', '--name', LAB]);
    await labCli(LAB, ['up', '--sluice', '--policy-source', 'standalone', '--nodes', '2', '--primary', 'ptp', '-f', WORKLOAD]);
    await labCli(LAB, ['apply', '-f', join(POLICIES, '01-default-deny-x.yaml')]);
    pods = (await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', '--name', LAB])).items;
  });
  t.teardown(async () => {
    await cli(['down', '--name', LAB]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** Every node-1 Pod with every other Pod, both ways, TCP and UDP; node-1 Pods to other Pods' Services. */
  const probeSet = (): ProbeSpec[] => {
    const all = pods.map(ref);
    const out: ProbeSpec[] = [];
    for (const p of onNode1()) {
      for (const q of all) {
        if (q === p) continue;
        for (const protocol of ['TCP', 'UDP'] as const) {
          out.push({ from: q, to: p, port: 80, protocol });
          if (nodeOf(q) !== NODE) out.push({ from: p, to: q, port: 81, protocol });
        }
        out.push({ from: p, to: `service:${q}`, port: 80, protocol: 'TCP' });
        if (nodeOf(q) !== NODE) out.push({ from: q, to: `service:${p}`, port: 80, protocol: 'TCP' });
      }
    }
    return out;
  };
  const target = (p: ProbeSpec) => (p.to.startsWith('service:') ? p.to.slice(8) : p.to);
  /** With node-1 unenforced: only traffic into x Pods on node-2 is dropped (node-2 still enforces). */
  const expectedAfter = (p: ProbeSpec) => (target(p).startsWith('x/') && nodeOf(target(p)) !== NODE ? 'drop' : 'allow');
  const expectedBefore = (p: ProbeSpec) => (target(p).startsWith('x/') ? 'drop' : 'allow');

  t.test('the lab enforces before the cleanup (the policy drops into x on both nodes)', async (t) => {
    t.ok(onNode1().length >= 3, `node-1 runs Pods: ${onNode1().join(', ')}`);
    t.ok(onNode1().some((p) => p.startsWith('x/')), 'an x Pod runs on node-1 (so its enforcement can be seen going away)');
    const probes = probeSet();
    const real = await probe(LAB, dir, probes);
    const wrong = probes.flatMap((p, i) => (real[i]!.verdict !== expectedBefore(p) ? [`${p.from} -> ${p.to} ${p.port}/${p.protocol}: ${real[i]!.verdict}`] : []));
    t.same(wrong, [], `${probes.length} probes as the policy says`);
  });

  t.test('--cleanup is refused while the agent runs, and changes nothing', async (t) => {
    const r = await cleanup();
    t.equal(r.code, 1, 'exit 1');
    t.match(r.stderr, /--cleanup refused: something answers on the agent's health address 127\.0\.0\.1:10349/, 'says another agent is running');
    t.equal((await inNode('ip', ['link', 'show', 'dev', 'antrea-gw0'])).code, 0, 'antrea-gw0 still there');
    t.ok((await vsctl(['--bare', '--columns=name', 'find', 'Interface', 'external_ids:sluice-type=container'])).stdout.trim(), 'Pod ports still there');
  });

  // The agent goes first: its chain keeper still finds the plugin binary in the lab's bin directory
  // (shared with node-2, so this test cannot remove it as the documented uninstall does) and would
  // chain sluice again behind the test's back. A stopped keeper cannot race the read below.
  t.test('stop the agent, then unchain the CNI (the rollout to cleanup mode, the uninstall DaemonSet)', async (t) => {
    const pid = Number(readText(agentPidPath(LAB, NODE)).trim());
    t.ok(pid > 0 && alive(pid), `agent pid ${pid} running`);
    process.kill(pid, 'SIGTERM');
    const deadline = Date.now() + 15_000;
    while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    t.notOk(alive(pid), 'agent stopped (the lab does not restart it)');
    const emptyBin = mkdtempSync(join(tmpdir(), 'uc-bin-'));
    const u = await run(process.execPath, [SLUICECTL, 'cni', 'uninstall', '--conf-dir', cniConfDir(LAB, NODE), '--bin-dir', emptyBin]);
    rmSync(emptyBin, { recursive: true, force: true });
    t.equal(u.code, 0, `sluicectl cni uninstall: ${u.stdout.trim()} ${u.stderr.trim()}`);
    t.match(u.stdout, /removed sluice from/, 'it unchained sluice');
    const types = (JSON.parse(readFileSync(conflistPath(LAB, NODE), 'utf8')) as { plugins: { type: string }[] }).plugins.map((p) => p.type);
    t.ok(types.length > 0 && !types.includes(SLUICE_PLUGIN_TYPE), `node-1 conflist no longer chains sluice: ${types.join(', ')}`);
  });

  let crashed: { veth: string; ip: string } | undefined;
  t.test('a cleanup killed mid-way (first Pod: guard released, routes back, port still on br-int)', async (t) => {
    const ports = async () => (await vsctl(['--bare', '--columns=name', 'find', 'Interface', 'external_ids:sluice-type=container'])).stdout.trim().split(/\s+/).filter(Boolean).sort();
    const before = await ports();
    const ipOf = new Map<string, string>();
    for (const v of before) ipOf.set(v, (await vsctl(['get', 'Interface', v, 'external_ids:ip-address'])).stdout.trim().replace(/"/g, ''));
    const r = await run('ip', ['netns', 'exec', NS, 'env', 'SLUICE_CLEANUP_CRASH=before-port-removal', process.execPath, AGENT, '--config', agentConfigPath(LAB, NODE), '--cleanup']);
    t.not(r.code, 0, 'the cleanup process died');
    t.same(await ports(), before, 'every Pod port still on br-int (the port goes last)');
    const onVeth = [];
    for (const v of before) if (new RegExp(`dev ${v}\\b`).test((await inNode('ip', ['route', 'get', ipOf.get(v)!])).stdout)) onVeth.push(v);
    t.equal(onVeth.length, 1, `exactly one Pod routed via its own veth again: ${onVeth.join(', ')}`);
    crashed = { veth: onVeth[0]!, ip: ipOf.get(onVeth[0]!)! };
    t.notMatch((await inNode('nft', ['list', 'table', 'netdev', 'sluice_veth_guard'])).stdout, new RegExp(`"${crashed.veth}"`), `${crashed.veth} no longer guarded`);
    const probes: ProbeSpec[] = pods.map(ref).filter((q) => nodeOf(q) !== NODE && !q.startsWith('x/')).flatMap((q) => [
      { from: q, to: pods.find((p) => p.status.podIP === crashed!.ip)!.metadata.namespace + '/' + pods.find((p) => p.status.podIP === crashed!.ip)!.metadata.name, port: 80, protocol: 'TCP' as const },
    ]);
    const target = probes[0]!.to;
    const real = await probe(LAB, dir, probes.map((p) => ({ ...p, from: target, to: p.from })));
    t.same(real.map((v) => v.verdict), probes.map(() => 'allow'), `the half-restored Pod ${target} still reaches node-2 Pods (both kernel and bridge carry it)`);
  });

  t.test('--cleanup restores every node-1 Pod and removes sluice from node-1', async (t) => {
    // Established TCP streams both ways (not into x: the policy drops those) and a fast ping to
    // every node-1 Pod, across the cleanup (the crashed run's Pod too).
    const netnsOf = (r: string) => podNetns(LAB, r.split('/')[0]!, r.split('/')[1]!);
    const ipOf = (r: string) => pods.find((p) => ref(p) === r)!.status.podIP;
    const remote = pods.map(ref).find((r) => nodeOf(r) !== NODE && !r.startsWith('x/'))!;
    const local = onNode1();
    const streams = [
      ...local.filter((r) => !r.startsWith('x/')).map((r) => ({ name: `${remote} -> ${r}`, traffic: new Traffic(netnsOf(remote), 'stream', ipOf(r), 80) })),
      ...local.map((r) => ({ name: `${r} -> ${remote}`, traffic: new Traffic(netnsOf(r), 'stream', ipOf(remote), 80) })),
    ];
    t.teardown(() => Promise.all(streams.map((s) => s.traffic.stop())));
    for (const s of streams) t.ok(await s.traffic.started(), `stream ${s.name} established before the cleanup`);
    const pings = local.map((r) => ({ to: r, ping: spawn('ip', ['netns', 'exec', netnsOf(remote), 'ping', '-n', '-i', '0.01', ipOf(r)], { stdio: ['ignore', 'pipe', 'ignore'] }) }));
    const pingOut = pings.map((p) => {
      let out = '';
      p.ping.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      return { to: p.to, done: new Promise<string>((resolve) => p.ping.on('close', () => resolve(out))) };
    });
    // A guard sluice left on an interface it no longer knows about (it would black-hole it).
    t.equal((await inNode('ip', ['link', 'add', 'ucd0', 'type', 'veth', 'peer', 'name', 'ucd1'])).code, 0, 'interface ucd0 added');
    t.equal((await inNode('nft', ['add chain netdev sluice_veth_guard in_ucd0 { type filter hook ingress device "ucd0" priority 0; policy drop; }'])).code, 0, 'leftover guard on ucd0');
    await new Promise((r) => setTimeout(r, 300));

    const r = await cleanup();
    t.comment(`sluice-agent --cleanup printed:\n${r.stdout}`);

    await new Promise((r) => setTimeout(r, 300));
    for (const p of pings) p.ping.kill('SIGINT');
    for (const p of pingOut) {
      const m = /(\d+) packets transmitted, (\d+) received/.exec(await p.done);
      const note = p.to.startsWith('x/') ? ' (the policy drops into x until node-1 is cleaned up)' : '';
      t.comment(`ping ${remote} -> ${p.to} every 10 ms across the cleanup: ${m ? `${Number(m[1]) - Number(m[2])} of ${m[1]} lost` : 'no summary'}${note}`);
    }
    for (const s of streams) {
      t.ok(await s.traffic.progresses(), `stream ${s.name} still flows after the cleanup`);
      const st = s.traffic.status();
      t.same({ closed: st.closed, errors: st.errors }, { closed: false, errors: [] }, `stream ${s.name}: never reset`);
    }
    // Each node-1 Pod streamed through the bridge, so its gateway entry held the bridge's virtual
    // MAC; off the bridge the host drops frames to that MAC until the entry would expire.
    for (const r of local) {
      const neigh = (await run('ip', ['-n', netnsOf(r), 'neigh', 'show'])).stdout;
      t.notMatch(neigh, /aa:bb:cc:dd:ee:ff/, `${r}: no neighbour entry left on the bridge's virtual MAC (${neigh.trim().replace(/\n/g, '; ')})`);
    }
    if (crashed) t.match((await inNode('ip', ['route', 'get', crashed.ip])).stdout, new RegExp(`dev ${crashed.veth}\\b`), `the crashed run's Pod ${crashed.ip} routed via ${crashed.veth} again`);
    t.equal(r.code, 0, `exit 0 ${r.stderr}`);
    const restored = r.stdout.split('\n').filter((l) => l.startsWith('restored Pod ')).map((l) => /^restored Pod (\S+):/.exec(l)![1]).sort();
    t.same(restored, onNode1().sort(), 'one "restored Pod" line per node-1 Pod');
    t.match(r.stdout, /bridge br-int and its gateway antrea-gw0/, 'reports the bridge');
    t.match(r.stdout, /ip rule 300/, 'reports the rule');
    t.match(r.stdout, /iptables: ANTREA-MANGLE/, 'reports the chains');
    t.match(r.stdout, /nft table netdev sluice_veth_guard \(also released leftover guards on ucd0\)/, 'reports the veth guard table and the leftover guard it released');
    t.match(r.stdout, /cleanup of node-1 complete/);
    t.same(await sluiceRemains(), [], 'no br-int, antrea-gw0, rule 300, table 300 route, ANTREA chain, sluice nft table or OVS port');

    const probes = probeSet();
    const real = await probe(LAB, dir, probes);
    const wrong = probes.flatMap((p, i) => (real[i]!.verdict !== expectedAfter(p) ? [`${p.from} -> ${p.to} ${p.port}/${p.protocol}: ${real[i]!.verdict} ${real[i]!.detail ?? ''}`] : []));
    t.same(wrong, [], `${probes.length} probes: node-1 Pods reach and are reached by every Pod (TCP, UDP, Services); only node-2's x Pods still drop`);
    const nowAllowed = probes.filter((p, i) => expectedBefore(p) === 'drop' && real[i]!.verdict === 'allow').length;
    t.ok(nowAllowed > 0, `${nowAllowed} probes into node-1's x Pods, dropped before, are allowed now (no enforcement left on node-1)`);
  });

  t.test('a second --cleanup is a no-op that exits 0', async (t) => {
    const r = await cleanup();
    t.equal(r.code, 0, `exit 0 ${r.stderr}`);
    t.notMatch(r.stdout, /restored Pod/, 'no Pod to restore');
    t.match(r.stdout, /no Pod attached, and antrea-gw0 is gone/, 'says the gateway (and its routes) are gone');
    t.match(r.stdout, /bridge br-int already gone/);
    t.same(await sluiceRemains(), []);
  });

  t.test('SLUICE_CLEANUP=1 (the DaemonSet mode): clean, then Ready and idle until SIGTERM', async (t) => {
    const child = spawn('ip', ['netns', 'exec', NS, process.execPath, AGENT, '--config', agentConfigPath(LAB, NODE)], {
      env: { ...process.env, SLUICE_CLEANUP: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const readyz = async () => (await inNode('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', 'http://127.0.0.1:10349/readyz'])).stdout;
      const deadline = Date.now() + 20_000;
      let code = await readyz();
      while (code !== '200' && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        code = await readyz();
      }
      t.equal(code, '200', '/readyz answers 200 once the node is clean');
      t.match(stdout, /cleanup of node-1 complete/, 'it cleaned up first');
      const again = await cleanup();
      t.equal(again.code, 1, 'a --cleanup meanwhile is refused (the health address answers)');
      t.match(again.stderr, /--cleanup refused/);
      child.kill('SIGTERM');
      t.equal(await exited, 0, 'SIGTERM: exits 0');
    } finally {
      child.kill('SIGKILL');
    }
  });
}
