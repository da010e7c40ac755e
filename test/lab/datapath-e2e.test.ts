/**
 * End to end in the 2-node lab (lab name "dpe", both primary flavours): the reachability matrix
 * with [primary, sluice] is identical to [primary] alone and the Pod traffic really crossed br-int;
 * the raw NOTRACK rule is what makes Pod -> Service with a remote endpoint work; an agent kill -9
 * during a Pod-to-Pod TCP stream neither breaks it nor re-adds any flow.
 */
import { spawn } from 'node:child_process';
import { existsSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { inNs, missingPrereq, REPO, sh, sleep } from './datapath-env.js';

const LAB = 'dpe';
const CLI = join(REPO, 'dist', 'lab', 'cli.js');
const STATE = `/run/sluice-lab/${LAB}`;
const NODE_IP = { 'node-1': '192.168.77.11', 'node-2': '192.168.77.12' } as const;

type Verdict = { from: string; to: string; port: number; protocol: string; verdict: string };

const lab = (args: string[], allowFail = false) => sh(process.execPath, [CLI, ...args, '--name', LAB], { allowFail });
const ovsOn = (node: string, tool: string, args: string[]) => {
  const run = `${STATE}/${node}/ovs`;
  return sh(tool, tool === 'ovs-appctl' ? args : [...(tool === 'ovs-vsctl' ? [`--db=unix:${run}/db.sock`] : ['-O', 'OpenFlow15']), ...args], {
    env: { ...(process.env as Record<string, string>), OVS_RUNDIR: run },
  });
};
const mgmt = (node: string) => `unix:${STATE}/${node}/ovs/br-int.mgmt`;
const nodeNs = (node: string) => `${LAB}-${node}`;

async function up(primary: string, sluice: boolean): Promise<void> {
  await lab(['down'], true);
  const r = await lab(['up', '--nodes', '2', '--primary', primary, ...(sluice ? ['--sluice', '--policy-source', 'standalone'] : []), '-f', join(REPO, 'examples', 'workload.yaml')], true);
  if (r.code !== 0) throw new Error(`sluice-lab up failed:\n${r.stdout}\n${r.stderr}`);
}

async function podsByNode(): Promise<Record<string, string[]>> {
  const list = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as { items: { metadata: { namespace: string; name: string }; spec: { nodeName: string } }[] };
  const out: Record<string, string[]> = {};
  for (const p of list.items) (out[p.spec.nodeName] ??= []).push(`${p.metadata.namespace}/${p.metadata.name}`);
  for (const k of Object.keys(out)) out[k]!.sort();
  return out;
}

/** The issue's matrix: same/cross node, Pod <-> node, node -> Pod, Pod <-> external, Services local/remote, node -> Service. */
function matrix(byNode: Record<string, string[]>): { from: string; to: string; port?: number; protocol: string }[] {
  const [a, c] = byNode['node-1']!;
  const [b] = byNode['node-2']!;
  const svc = (ref: string) => `service:${ref}`;
  const probes: { from: string; to: string; port?: number; protocol: string }[] = [];
  for (const protocol of ['TCP', 'UDP']) {
    probes.push(
      { from: a!, to: c!, port: 80, protocol }, // same node
      { from: c!, to: a!, port: 81, protocol },
      { from: a!, to: b!, port: 80, protocol }, // cross node
      { from: b!, to: a!, port: 81, protocol },
      { from: `ip:${NODE_IP['node-1']}`, to: a!, port: 80, protocol }, // node -> own Pod
      { from: `ip:${NODE_IP['node-2']}`, to: a!, port: 80, protocol }, // remote node -> Pod
      { from: a!, to: 'ip:192.168.77.250', port: 80, protocol }, // Pod -> external
      { from: a!, to: 'ip:198.51.100.10', port: 81, protocol },
      { from: 'ip:192.168.77.250', to: a!, port: 80, protocol }, // external -> Pod
      { from: a!, to: svc(c!), port: 80, protocol }, // Service, local endpoint
      { from: a!, to: svc(b!), port: 80, protocol }, // Service, remote endpoint (re-entrance)
      { from: b!, to: svc(a!), port: 81, protocol },
      { from: `ip:${NODE_IP['node-1']}`, to: svc(b!), port: 80, protocol }, // node -> Service
      { from: `ip:${NODE_IP['node-1']}`, to: svc(c!), port: 81, protocol },
    );
  }
  probes.push({ from: a!, to: `ip:${NODE_IP['node-1']}`, protocol: 'ICMP' }, { from: a!, to: c!, protocol: 'ICMP' }, { from: a!, to: b!, protocol: 'ICMP' });
  return probes;
}

async function probe(probes: unknown[]): Promise<Verdict[]> {
  const file = `/tmp/${LAB}-probes.json`; // removed in teardown
  writeFileSync(file, JSON.stringify(probes));
  const r = await lab(['probe', '--probes', file, '-o', 'json']);
  return JSON.parse(r.stdout) as Verdict[];
}

const show = (vs: Verdict[]) => vs.map((v) => `${v.from} -> ${v.to} ${v.port}/${v.protocol}: ${v.verdict}`).join('\n');

async function bridgePackets(node: string): Promise<number> {
  await ovsOn(node, 'ovs-appctl', ['revalidator/wait']);
  const out = (await ovsOn(node, 'ovs-ofctl', ['dump-flows', mgmt(node), 'table=0'])).stdout;
  return [...out.matchAll(/n_packets=(\d+)/g)].reduce((s, m) => s + Number(m[1]), 0);
}

async function flowAges(node: string): Promise<Map<string, number>> {
  const out = (await ovsOn(node, 'ovs-ofctl', ['dump-flows', mgmt(node), 'cookie=0x51ce000000000000/0xffff000000000000'])).stdout;
  return new Map([...out.matchAll(/cookie=(0x[0-9a-f]+), duration=([\d.]+)s/g)].map((m) => [m[1]!, Number(m[2])]));
}

const why = (await missingPrereq()) ?? (existsSync(CLI) ? undefined : `${CLI} is missing (build first)`) ?? (existsSync(join(REPO, 'dist', 'bin', 'sluice-cni')) ? undefined : 'dist/bin/sluice-cni is missing (build the CNI plugin first)');
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  t.teardown(async () => {
    await lab(['down'], true);
    rmSync(`/tmp/${LAB}-probes.json`, { force: true });
  });

  for (const primary of ['ptp', 'eks']) {
    await t.test(`${primary}: [${primary}, sluice] reaches exactly what [${primary}] reaches, through the bridge`, async (t) => {
      await up(primary, false);
      const byNode = await podsByNode();
      const probes = matrix(byNode);
      const alone = await probe(probes);
      t.ok(alone.filter((v) => v.verdict === 'allow').length > probes.length / 2, `most probes pass with the primary alone:\n${show(alone)}`);
      await up(primary, true);
      t.same(await podsByNode(), byNode, 'same Pod placement');
      const before = await bridgePackets('node-1');
      const chained = await probe(probes);
      t.same(chained, alone, `identical matrix with sluice chained:\n${show(chained)}`);
      const after = await bridgePackets('node-1');
      t.ok(after - before >= probes.length, `node-1's br-int classified ${after - before} packets during the probes`);
      const pods = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as { items: { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string } }[] };
      for (const pod of pods.items.filter((p) => p.spec.nodeName === 'node-1')) {
        const route = (await inNs(nodeNs('node-1'), ['ip', 'route', 'get', pod.status.podIP])).stdout;
        t.match(route, /dev antrea-gw0/, `${pod.metadata.namespace}/${pod.metadata.name} (${pod.status.podIP}) is routed via the gateway`);
      }
    });
  }

  await t.test('eks + sluice: host networking shapes on a lab node', async (t) => {
    const ns = nodeNs('node-1');
    t.match((await inNs(ns, ['ip', 'rule'])).stdout, /300:\s+from all fwmark 0x800\/0x800 iif antrea-gw0 lookup (300|antrea_service)/);
    t.match((await inNs(ns, ['ip', 'route', 'show', 'table', '300'])).stdout, /default via 169\.254\.253\.1 dev antrea-gw0 onlink/);
    t.match((await inNs(ns, ['ip', 'neigh', 'show', 'dev', 'antrea-gw0'])).stdout, /169\.254\.253\.1 lladdr 12:34:56:78:9a:bc PERMANENT/);
    const mangle = (await inNs(ns, ['iptables', '-t', 'mangle', '-S', 'ANTREA-MANGLE'])).stdout;
    t.match(mangle, /-d 10\.96\.0\.0\/16 -i antrea-gw0 .*Antrea: mark service traffic.*--set-xmark 0x800\/0x800/);
    t.match(mangle, /! -d 10\.96\.0\.0\/16 .*Antrea: unmark post LB service traffic.*0x0\/0x800/);
    t.match((await inNs(ns, ['iptables', '-t', 'raw', '-S', 'ANTREA-RAW'])).stdout, /-i antrea-gw0 .*--mac-source de:ad:be:ef:de:ad .*(CT --notrack|NOTRACK)/i);
  });

  await t.test('eks + sluice: without the raw NOTRACK rule Pod -> Service with a remote endpoint breaks', async (t) => {
    const byNode = await podsByNode();
    const [a, c] = byNode['node-1']!;
    const [b] = byNode['node-2']!;
    const probes = [
      { from: a, to: `service:${b}`, port: 80, protocol: 'TCP' },
      { from: a, to: `service:${c}`, port: 80, protocol: 'TCP' },
      { from: a, to: b, port: 80, protocol: 'TCP' },
    ];
    const ns = nodeNs('node-1');
    const rules = (await inNs(ns, ['iptables', '-t', 'raw', '-S', 'ANTREA-RAW'])).stdout.split('\n').filter((l) => /de:ad:be:ef:de:ad/i.test(l));
    t.equal(rules.length, 1, 'one NOTRACK rule');
    const ruleArgs = rules[0]!.replace(/^-A /, '');
    // The agent puts a deleted rule of its own back within a moment (it follows nft monitor): it is
    // paused while the rule is missing, and its repair is then what restores the rule.
    const agentPid = Number(readFileSync(`${STATE}/node-1/agent.pid`, 'utf8').trim());
    process.kill(agentPid, 'SIGSTOP');
    let broken: Verdict[] = [];
    try {
      await inNs(ns, ['sh', '-c', `iptables -t raw -D ${ruleArgs} && conntrack -F`]);
      broken = await probe(probes);
    } finally {
      process.kill(agentPid, 'SIGCONT');
    }
    t.not(broken[0]!.verdict, 'allow', `remote-endpoint Service fails without NOTRACK:\n${show(broken)}`);
    t.equal(broken[1]!.verdict, 'allow', 'local-endpoint Service still works');
    t.equal(broken[2]!.verdict, 'allow', 'direct Pod -> Pod still works');
    let repaired = false;
    for (let i = 0; i < 50 && !repaired; i++) {
      await new Promise((r) => setTimeout(r, 100));
      repaired = /de:ad:be:ef:de:ad/i.test((await inNs(ns, ['iptables', '-t', 'raw', '-S', 'ANTREA-RAW'])).stdout);
    }
    t.ok(repaired, 'the resumed agent put the NOTRACK rule back by itself');
    const fixed = await probe(probes);
    t.same(fixed.map((v) => v.verdict), ['allow', 'allow', 'allow'], `restored NOTRACK fixes it:\n${show(fixed)}`);
  });

  await t.test('eks + sluice: agent kill -9 during a Pod-to-Pod TCP stream', async (t) => {
    const byNode = await podsByNode();
    const [a] = byNode['node-1']!;
    const [b] = byNode['node-2']!;
    const podNs = async (ref: string) => {
      const [namespace, name] = ref.split('/');
      const { createHash } = await import('node:crypto');
      return `${LAB}-p-${createHash('sha256').update(`${namespace}/${name}`).digest('hex').slice(0, 8)}`;
    };
    const pods = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as { items: { metadata: { namespace: string; name: string }; status: { podIP: string } }[] };
    const bIP = pods.items.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === b)!.status.podIP;
    const sink = spawn('ip', ['netns', 'exec', await podNs(b!), 'nc', '-l', '9000'], { stdio: ['ignore', 'pipe', 'ignore'], detached: true });
    let received = 0;
    sink.stdout!.on('data', (d: Buffer) => (received += d.length));
    await sleep(300);
    const source = spawn('ip', ['netns', 'exec', await podNs(a!), 'sh', '-c', `while true; do head -c 20000 /dev/zero; sleep 0.1; done | nc ${bIP} 9000`], { stdio: 'ignore', detached: true });
    const killGroup = (pid?: number) => {
      try {
        if (pid) process.kill(-pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    };
    t.teardown(() => {
      killGroup(source.pid);
      killGroup(sink.pid);
    });
    await sleep(1500);
    t.ok(received > 0, 'streaming');
    const ages = await flowAges('node-1');
    const pidFile = `${STATE}/node-1/agent.pid`;
    const pid = Number(readFileSync(pidFile, 'utf8').trim());
    process.kill(pid, 'SIGKILL');
    const atKill = received;
    await sleep(1000);
    t.ok(received > atKill, 'data flows while the agent is down');
    // Restart it the way the lab does (same config, same namespace).
    const log = openSync(`${STATE}/node-1/agent.log`, 'a');
    const agent = spawn('ip', ['netns', 'exec', nodeNs('node-1'), process.execPath, join(REPO, 'dist', 'daemon', 'main.js'), '--config', `${STATE}/node-1/agent.yaml`], { detached: true, stdio: ['ignore', log, log] });
    agent.unref();
    writeFileSync(pidFile, `${agent.pid}\n`);
    const sock = `${STATE}/node-1/cni.sock`;
    for (let i = 0; i < 100 && !readFileSync(`${STATE}/node-1/agent.log`, 'utf8').split('\n').slice(-20).some((l) => l.includes('startup: ready')); i++) await sleep(200);
    t.ok(existsSync(sock), 'the agent is back');
    const after = await flowAges('node-1');
    t.same([...after.keys()].sort(), [...ages.keys()].sort(), 'same flows after the restart');
    t.ok([...ages].every(([c, age]) => (after.get(c) ?? 0) > age), 'no flow was removed and re-added');
    const mid = received;
    await sleep(1000);
    t.ok(received > mid, 'the same TCP connection still streams');
    t.equal(source.exitCode, null, 'the sender never failed');
  });
}
