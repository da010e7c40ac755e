/**
 * The transparent matrix on labs with IPv6, one primary per test file (ipv6-matrix: ptp,
 * ipv6-matrix-eks: the EKS-style flavour): with [primary, sluice] every probe gets the verdict it
 * gets with the primary alone. Dual-stack: over IPv6 and over IPv4, the example workload's
 * Services made dual-stack (ipFamilyPolicy PreferDualStack), so they have an IPv6 ClusterIP that
 * the lab's kube-proxy DNATs in ip6tables. IPv6-only: the example workload as is, its Services
 * single-stack IPv6 (the lab's only Service range). A hostNetwork Pod stands in for a node that
 * serves: Pod -> node and node -> node. All real packets, sent through `sluice-lab probe`.
 * EKS-style Pods are checked to be wired as the VPC CNI wires them (a /128, the default route via
 * fe80::1 with a permanent neighbour, with and without sluice); with sluice, a Pod that lost that
 * neighbour gets fe80::1 answered by the bridge; on the IPv6-only lab their IPv4 egress path
 * (v4if0, SNAT to the node) is probed with and without sluice too, and a few NetworkPolicy steps
 * give real verdicts equal to `sluicectl simulate` over IPv6.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import type { Test } from 'tap';
import { type NetProbe, runProbes } from '../../lab/net/index.js';
import { extNetns, podNetns } from '../../lab/net/names.js';
import { simpleQuery } from '../unit/fqdn-helpers.js';
import { dnsServerProgram, nodeIn, queryProgram } from './fqdn-programs.js';
import { inNs, missingPrereq, REPO, sh } from './datapath-env.js';
import { compareWithSimulate, fullProbeSet, POLICIES, restartAgent, simulate, SLUICECTL, snapshot, tempDir } from './enforce-helpers.js';
import { agentConfigPath } from '../../lab/agent.js';
import type { TraceReport } from '../../daemon/enforcement/traceflow.js';

type Primary = 'ptp' | 'eks';
const CLI = join(REPO, 'dist', 'lab', 'cli.js');
const EXT_IP = '192.168.77.250';
const NODE_IP6 = { 'node-1': 'fd00:77::b', 'node-2': 'fd00:77::c' } as const;
const NODE_IP = { 'node-1': '192.168.77.11', 'node-2': '192.168.77.12' } as const;
const EXT_IP6 = 'fd00:77::fa';
const HOST_POD = 'zz/host';

type Probe = { from: string; to: string; port?: number; protocol: string; family?: 4 | 6 };
type Verdict = { from: string; to: string; port: number; protocol: string; family?: number; verdict: string };
type PodList = { items: { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string; podIPs?: { ip: string }[] } }[] };
type SvcList = { items: { metadata: { namespace: string; name: string }; spec: { clusterIPs?: string[] } }[] };

/** One lab of the file: its name, the primary it runs, its scratch files. */
class Lab {
  readonly workload: string;
  readonly probes: string;
  constructor(readonly name: string, readonly primary: Primary) {
    this.workload = `/tmp/${name}-workload.yaml`;
    this.probes = `/tmp/${name}-probes.json`;
  }

  cli(args: string[], allowFail = false) {
    return sh(process.execPath, [CLI, ...args, '--name', this.name], { allowFail });
  }

  async up(ipFamily: 'dual' | 'ipv6', sluice: boolean): Promise<void> {
    await this.cli(['down'], true);
    const r = await this.cli(['up', '--nodes', '2', '--primary', this.primary, '--ip-family', ipFamily, ...(sluice ? ['--sluice', '--policy-source', 'standalone'] : ['--no-sluice']), '-f', this.workload], true);
    if (r.code !== 0) throw new Error(`sluice-lab up failed:\n${r.stdout}\n${r.stderr}`);
  }

  async pods(): Promise<PodList> {
    return JSON.parse((await this.cli(['get', 'pods', '-o', 'json'])).stdout) as PodList;
  }
}

async function podsByNode(lab: Lab): Promise<Record<string, string[]>> {
  const list = await lab.pods();
  const out: Record<string, string[]> = {};
  for (const p of list.items) (out[p.spec.nodeName] ??= []).push(`${p.metadata.namespace}/${p.metadata.name}`);
  for (const k of Object.keys(out)) out[k]!.sort();
  return out;
}

/**
 * Pod <-> Pod on one node and across nodes, node -> own and remote Pod, Pod <-> the external host,
 * Pod -> Service with a local and with a remote endpoint, node -> Service; TCP and UDP on the
 * served ports, ICMP(v6) echo to a node, a local and a remote Pod. `family` 6: IPv6 addresses and
 * ClusterIPs; 4: the IPv4 ones of the same Pods and Services.
 */
function matrix(byNode: Record<string, string[]>, family: 4 | 6): Probe[] {
  const [a, c] = byNode['node-1']!;
  const [b] = byNode['node-2']!.filter((p) => p !== HOST_POD);
  const node = family === 6 ? NODE_IP6 : NODE_IP;
  const ext = family === 6 ? EXT_IP6 : '192.168.77.250';
  const svc = (ref: string) => `service:${ref}`;
  const probes: Probe[] = [];
  for (const protocol of ['TCP', 'UDP']) {
    probes.push(
      { from: a!, to: c!, port: 80, protocol }, // same node
      { from: c!, to: a!, port: 81, protocol },
      { from: a!, to: b!, port: 80, protocol }, // cross node
      { from: b!, to: a!, port: 81, protocol },
      { from: `ip:${node['node-1']}`, to: a!, port: 80, protocol }, // node -> own Pod
      { from: `ip:${node['node-2']}`, to: a!, port: 80, protocol }, // remote node -> Pod
      { from: a!, to: `ip:${ext}`, port: 80, protocol }, // Pod -> external
      { from: `ip:${ext}`, to: a!, port: 81, protocol }, // external -> Pod
      { from: a!, to: svc(c!), port: 80, protocol }, // Service, local endpoint
      { from: a!, to: svc(b!), port: 80, protocol }, // Service, remote endpoint (re-entrance)
      { from: b!, to: svc(a!), port: 81, protocol },
      { from: `ip:${node['node-1']}`, to: svc(b!), port: 80, protocol }, // node -> Service
      { from: `ip:${node['node-1']}`, to: svc(c!), port: 81, protocol },
      { from: a!, to: HOST_POD, port: 8080, protocol }, // Pod -> remote node (a hostNetwork Pod's server)
      { from: `ip:${node['node-1']}`, to: HOST_POD, port: 8080, protocol }, // node -> node
      { from: HOST_POD, to: a!, port: 80, protocol }, // hostNetwork Pod -> Pod
    );
  }
  probes.push({ from: a!, to: `ip:${node['node-1']}`, protocol: 'ICMP' }, { from: a!, to: c!, protocol: 'ICMP' }, { from: a!, to: b!, protocol: 'ICMP' });
  // Pods and Services get the family from the probe; ip: endpoints carry their own.
  return probes.map((p) => ({ ...p, family }));
}

async function probe(lab: Lab, probes: Probe[]): Promise<Verdict[]> {
  writeFileSync(lab.probes, JSON.stringify(probes));
  return JSON.parse((await lab.cli(['probe', '--probes', lab.probes, '-o', 'json'])).stdout) as Verdict[];
}

async function probeAll(lab: Lab): Promise<Verdict[]> {
  return JSON.parse((await lab.cli(['probe', '--family', '6', '-o', 'json'])).stdout) as Verdict[];
}

/**
 * IPv6-only EKS-style Pods reach IPv4 through their egress interface (no IPv4 Pod address, so no
 * `sluice-lab probe`): TCP, UDP and ICMP from two Pods' namespaces to the external host.
 */
async function probeEgressV4(lab: Lab, pods: string[]): Promise<string[]> {
  const targets: NetProbe[] = pods.flatMap((ref) => {
    const [ns, name] = ref.split('/') as [string, string];
    const sourceNetns = podNetns(lab.name, ns, name);
    return [
      { sourceNetns, ip: EXT_IP, port: 80, protocol: 'TCP' },
      { sourceNetns, ip: EXT_IP, port: 81, protocol: 'UDP' },
      { sourceNetns, ip: EXT_IP, port: 0, protocol: 'ICMP' },
    ] satisfies NetProbe[];
  });
  const results = await runProbes(targets);
  return results.map((r, i) => `${pods[Math.floor(i / 3)]} -> ${EXT_IP} ${targets[i]!.port}/${targets[i]!.protocol}: ${r.verdict}`);
}

/** The IPv4 address of a Pod's egress interface (v4if0). */
async function egressAddress(lab: Lab, ref: string): Promise<string> {
  const [ns, name] = ref.split('/') as [string, string];
  const [link] = await ipJson<{ addr_info?: { local: string }[] }[]>(podNetns(lab.name, ns, name), ['-4', 'addr', 'show', 'dev', 'v4if0']);
  const ip = link?.addr_info?.[0]?.local;
  if (!ip) throw new Error(`${ref} has no IPv4 address on v4if0`);
  return ip;
}

/** Packets node-1's POSTROUTING sent to the egress SNAT chain of source `ip`. */
async function snatPacketsOf(lab: Lab, ip: string): Promise<number> {
  const out = (await inNs(`${lab.name}-node-1`, ['iptables-save', '-t', 'nat', '-c'])).stdout;
  const line = out.split('\n').find((l) => l.includes(`-A POSTROUTING -s ${ip}/32 `) && l.includes('-j CNI-E4-'));
  if (!line) throw new Error(`no egress SNAT rule for ${ip} on node-1`);
  return Number(/^\[(\d+):/.exec(line)?.[1] ?? NaN);
}

/** node-1's br-int flows without their counters and ages (what the agent installed), sorted. */
async function bridgeFlows(lab: Lab): Promise<string[]> {
  const run = `/run/sluice-lab/${lab.name}/node-1/ovs`;
  const env = { ...(process.env as Record<string, string>), OVS_RUNDIR: run };
  const out = (await sh('ovs-ofctl', ['-O', 'OpenFlow15', '--no-stats', 'dump-flows', `unix:${run}/br-int.mgmt`], { env })).stdout;
  return out.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('cookie=')).sort();
}

/** node-1's OVSDB Interface rows marked as a Pod's IPv4 egress port: name -> external_ids text. */
async function egressPorts(lab: Lab): Promise<Map<string, string>> {
  const run = `/run/sluice-lab/${lab.name}/node-1/ovs`;
  const env = { ...(process.env as Record<string, string>), OVS_RUNDIR: run };
  const out = (await sh('ovs-vsctl', [`--db=unix:${run}/db.sock`, '--format=csv', '--data=bare', '--no-headings', '--columns=name,external_ids', 'find', 'Interface', 'external_ids:sluice-type=container-egress-v4'], { env })).stdout;
  return new Map(out.split('\n').filter(Boolean).map((l) => [l.split(',')[0]!, l]));
}

/**
 * With sluice, the Pods' IPv4 egress crosses the bridge: each egress veth is a port of br-int
 * with its Pod's external_ids, the egress address is routed via antrea-gw0 and spoof-guarded; a
 * Pod sending from another Pod's egress address reaches no SNAT; a NetworkPolicy isolating one
 * Pod's egress (then allowing one IPv4 destination on one port) drops and allows its real IPv4
 * packets exactly as `sluicectl simulate` says, and leaves the other Pod's alone.
 */
async function egressV4Enforced(t: Test, lab: Lab, pods: [string, string]): Promise<void> {
  const [a, b] = pods;
  const [aIp, bIp] = [await egressAddress(lab, a), await egressAddress(lab, b)];
  const ports = await egressPorts(lab);
  const flows = await bridgeFlows(lab);
  for (const [ref, ip] of [[a, aIp], [b, bIp]] as const) {
    const [ns, name] = ref.split('/') as [string, string];
    t.ok([...ports.values()].some((l) => l.includes(`pod-name=${name}`) && l.includes(`pod-namespace=${ns}`) && l.includes(`ip-address=${ip}`)), `${ref}: its egress veth is a port of br-int (external_ids name the Pod and ${ip})`);
    t.match((await inNs(`${lab.name}-node-1`, ['ip', 'route', 'get', ip])).stdout, /dev antrea-gw0/, `${ref}: its egress address ${ip} is routed via the gateway`);
    t.ok(flows.some((f) => f.includes(`nw_src=${ip}`) && f.includes('in_port=') && f.includes('dl_src=')), `${ref}: ${ip} is spoof-guarded on its port`);
  }

  // A's netns sends from B's egress address: the spoof guard drops it before the host's SNAT.
  const [ans, aname] = a.split('/') as [string, string];
  const aNetns = podNetns(lab.name, ans, aname);
  const own = await inNs(aNetns, ['ping', '-c', '1', '-W', '2', EXT_IP], { allowFail: true });
  t.equal(own.code, 0, `${a} pings ${EXT_IP} from its own egress address`);
  const snatB = await snatPacketsOf(lab, bIp);
  await inNs(aNetns, ['ip', 'addr', 'add', `${bIp}/32`, 'dev', 'v4if0', 'noprefixroute']);
  const forged = await inNs(aNetns, ['ping', '-c', '2', '-i', '0.2', '-W', '1', '-I', bIp, EXT_IP], { allowFail: true });
  await inNs(aNetns, ['ip', 'addr', 'del', `${bIp}/32`, 'dev', 'v4if0']);
  t.not(forged.code, 0, `${a} sending from ${b}'s egress address ${bIp} gets no answer`);
  t.equal(await snatPacketsOf(lab, bIp), snatB, `no packet with the forged source ${bIp} reached the host's SNAT`);

  const dir = tempDir(`${lab.name}-egress-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const policy = (name: string, spec: string) => {
    const file = join(dir, `${name}.yaml`);
    writeFileSync(file, `apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {namespace: ${ans}, name: ${name}}\nspec: ${spec}\n`);
    return file;
  };
  const isolate = policy('egress-v4-isolate', '{podSelector: {matchLabels: {egress-v4: isolated}}, policyTypes: [Egress]}');
  const allowOne = policy('egress-v4-allow-one', `{podSelector: {matchLabels: {egress-v4: isolated}}, policyTypes: [Egress], egress: [{to: [{ipBlock: {cidr: ${EXT_IP}/32}}], ports: [{protocol: TCP, port: 80}]}]}`);
  await lab.cli(['label', 'pod', a, 'egress-v4=isolated']);
  const steps: [string, string[], string[]][] = [
    [`${a}'s egress isolated`, [isolate], [`${a}: drop`, `${b}: allow`]],
    [`and ${EXT_IP}:80/TCP allowed`, [allowOne], [`${a} -> ${EXT_IP} 80/TCP: allow`, `${a} -> ${EXT_IP} 81/UDP: drop`]],
  ];
  for (const [step, files, expect] of steps) {
    await lab.cli(['apply', ...files.flatMap((f) => ['-f', f])]);
    const scen = await snapshot(lab.name, join(dir, 'snapshot'));
    const probes = [a, b].flatMap((from) => [
      { from, to: `ip:${EXT_IP}`, port: 80, protocol: 'TCP' as const },
      { from, to: `ip:${EXT_IP}`, port: 81, protocol: 'UDP' as const },
      { from, to: `ip:${EXT_IP}`, port: 0, protocol: 'ICMP' as const },
    ]);
    const sim = await simulate(scen, probes as never);
    const want = sim.map((v) => `${v.from} -> ${EXT_IP} ${v.port}/${v.protocol}: ${v.verdict}`);
    let real = await probeEgressV4(lab, pods);
    // The policy reaches the bridge within a moment of the API: probe once more on a difference.
    for (let i = 0; i < 5 && real.join() !== want.join(); i++) {
      await new Promise((r) => setTimeout(r, 500));
      real = await probeEgressV4(lab, pods);
    }
    t.same(real, want, `${step}: real IPv4 egress = sluicectl simulate:\n${real.join('\n')}`);
    for (const e of expect) {
      const [who, verdict] = e.split(': ') as [string, string];
      t.ok(real.filter((r) => r.startsWith(who)).every((r) => r.endsWith(`: ${verdict}`)), `${step}: ${e}`);
    }
    // sluicectl node traceflow injects at the egress port of the IPv6-only Pod: same verdicts.
    for (const [port, protocol] of [[80, 'TCP'], [81, 'UDP']] as const) {
      const r = await inNs(`${lab.name}-node-1`, [process.execPath, SLUICECTL, 'node', 'traceflow', '--config', agentConfigPath(lab.name, 'node-1'), '--from', a, '--to', `ip:${EXT_IP}`, '--port', String(port), '--protocol', protocol, '-o', 'json'], { allowFail: true });
      const report = r.code === 0 ? (JSON.parse(r.stdout) as TraceReport) : undefined;
      const expected = sim.find((v) => v.from === a && v.port === port && v.protocol === protocol)?.verdict;
      t.equal(report?.verdict, expected, `${step}: traceflow ${a} -> ${EXT_IP} ${port}/${protocol} from its egress port: ${report?.verdict ?? r.stderr.trim()}, simulate ${expected}`);
      t.equal(report?.legs[0]?.tables[0], 'Classifier', 'the trace starts in the bridge\'s first table');
    }
  }
  const refused = await inNs(`${lab.name}-node-1`, [process.execPath, SLUICECTL, 'node', 'traceflow', '--config', agentConfigPath(lab.name, 'node-1'), '--from', a, '--to', b, '--port', '80', '--family', '4'], { allowFail: true });
  t.match(refused.stderr, /no IPv4 address; its IPv4 egress interface v4if0 reaches only addresses outside the cluster/, 'an IPv4 trace from an IPv6-only Pod to a Pod is refused with why');
  await lab.cli(['delete', '-f', isolate, '-f', allowOne]);
  await lab.cli(['label', 'pod', a, 'egress-v4-']);
  const back = await probeEgressV4(lab, pods);
  t.same(back.filter((v) => !v.endsWith(': allow')), [], 'policies deleted: the IPv4 egress passes again');
}

/**
 * FQDN egress over the IPv4 egress path: an IPv6-only Pod asks for an A record over IPv6 DNS (the
 * reply is held by the agent's IPv6 interception flows), and the IPv4 answer, learned for the
 * Pod's fqdn rule, is allowed through its egress port at once, on the rule's port only; before the
 * query it was dropped.
 */
async function fqdnOverEgressV4(t: Test, lab: Lab, ref: string): Promise<void> {
  const [ns, name] = ref.split('/') as [string, string];
  const dir = tempDir(`${lab.name}-fqdn-`);
  const policy = join(dir, 'fqdn-v4.yaml');
  writeFileSync(policy, `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: fqdn-egress-v4}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {fqdn-v4: client}}}]
  egress:
    - {action: Allow, name: dns, to: [{ipBlock: {cidr: "${EXT_IP6}/128"}}], ports: [{protocol: UDP, port: 53}]}
    - {action: Allow, name: web, to: [{fqdn: "www.example.com"}], ports: [{protocol: TCP, port: 80}]}
    - {action: Drop, name: rest}
`);
  const dns = execa('ip', ['netns', 'exec', extNetns(lab.name), process.execPath, '--input-type=module', '-e', dnsServerProgram(EXT_IP6, { 'www.example.com': [EXT_IP, 30] }, false)], { reject: false });
  t.teardown(() => {
    dns.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  await new Promise<void>((resolve, reject) => {
    dns.stdout?.on('data', (d: Buffer) => { if (d.toString().includes('ready')) resolve(); });
    void dns.then((r) => reject(new Error(`DNS server on ${EXT_IP6} exited: ${String(r.stderr)}`)));
  });
  await lab.cli(['label', 'pod', ref, 'fqdn-v4=client']);
  await lab.cli(['apply', '-f', policy]);
  let before = await probeEgressV4(lab, [ref]);
  for (let i = 0; i < 10 && !before.every((v) => v.endsWith(': drop')); i++) {
    await new Promise((r) => setTimeout(r, 500));
    before = await probeEgressV4(lab, [ref]);
  }
  t.same(before.filter((v) => !v.endsWith(': drop')), [], `before DNS, ${ref}'s IPv4 egress is dropped:\n${before.join('\n')}`);
  const q = await nodeIn(podNetns(lab.name, ns, name), queryProgram(EXT_IP6, simpleQuery('www.example.com', 0x4a4a, 1), 'udp', true));
  t.equal(q.code, 'ANSWER', `${ref}'s A query over IPv6 DNS is answered through the agent's hold`);
  t.equal(q.ip, EXT_IP, 'with the external host\'s IPv4 address');
  t.equal(q.connect, 'CONNECTED', 'a connection to it through the egress port, opened right after the answer, is allowed');
  const after = await probeEgressV4(lab, [ref]);
  t.same(after, [`${ref} -> ${EXT_IP} 80/TCP: allow`, `${ref} -> ${EXT_IP} 81/UDP: drop`, `${ref} -> ${EXT_IP} 0/ICMP: drop`], 'the learned IPv4 address is allowed on the rule\'s port only');
  await lab.cli(['delete', '-f', policy]);
  await lab.cli(['label', 'pod', ref, 'fqdn-v4-']);
}

/**
 * An agent restart changes no flow of br-int (the egress ports' included), and DEL of a Pod with
 * an egress port leaves nothing of it: no port, no route on the gateway, no flow, no SNAT rule.
 */
async function egressV4RestartAndDel(t: Test, lab: Lab, ref: string): Promise<void> {
  const ip = await egressAddress(lab, ref);
  const before = await bridgeFlows(lab);
  t.ok(before.some((f) => f.includes(`nw_src=${ip}`)), `the bridge has flows for ${ref}'s egress address ${ip}`);
  await restartAgent(lab.name, 'node-1');
  t.same(await bridgeFlows(lab), before, 'an agent restart changes no flow');
  const { agentLogPath } = await import('../../lab/agent.js');
  const converged = readFileSync(agentLogPath(lab.name, 'node-1'), 'utf8').split('\n').filter((l) => l.includes('"startup: flows converged"')).at(-1);
  t.match(converged, /"added":0,"removed":0/, 'the restarted agent added and removed no flow (its egress ports rebuilt from OVSDB)');
  const dir = tempDir(`${lab.name}-del-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const [ns, name] = ref.split('/') as [string, string];
  const file = join(dir, 'pod.yaml');
  writeFileSync(file, `apiVersion: v1\nkind: Pod\nmetadata: {namespace: ${ns}, name: ${name}}\n`);
  const portsBefore = [...(await egressPorts(lab)).values()].filter((l) => l.includes(`ip-address=${ip}`));
  t.equal(portsBefore.length, 1, `${ref} has one egress port`);
  await lab.cli(['delete', '-f', file]);
  const gone = async () => [...(await egressPorts(lab)).values()].every((l) => !l.includes(`ip-address=${ip}`)) && !(await bridgeFlows(lab)).some((f) => f.includes(ip));
  for (let i = 0; i < 100 && !(await gone()); i++) await new Promise((r) => setTimeout(r, 200));
  t.ok(await gone(), `DEL of ${ref}: no egress port and no flow for ${ip} left`);
  t.equal((await inNs(`${lab.name}-node-1`, ['ip', 'route', 'show', `${ip}/32`])).stdout.trim(), '', `no host route for ${ip} left`);
  const nat = (await inNs(`${lab.name}-node-1`, ['iptables-save', '-t', 'nat'])).stdout;
  t.notOk(nat.includes(`-s ${ip}/32`), `no SNAT rule for ${ip} left`);
}

/** Packets node-1's egress SNAT chains (CNI-E4-*) sent to SNAT. */
async function egressSnatPackets(lab: Lab): Promise<number> {
  const out = (await inNs(`${lab.name}-node-1`, ['iptables-save', '-t', 'nat', '-c'])).stdout;
  return [...out.matchAll(/^\[(\d+):\d+\] -A CNI-E4-\S+ .*-j SNAT/gm)].reduce((n, m) => n + Number(m[1]), 0);
}

const show = (vs: Verdict[]) => vs.map((v) => `${v.from} -> ${v.to} ${v.port}/${v.protocol} IPv${v.family}: ${v.verdict}`).join('\n');

/** Packets the nodes' ip6tables KUBE-SERVICES rules sent to a Service chain. */
async function ip6ServicePackets(lab: Lab): Promise<number> {
  let n = 0;
  for (const node of ['node-1', 'node-2']) {
    const out = (await inNs(`${lab.name}-${node}`, ['ip6tables', '-t', 'nat', '-L', 'KUBE-SERVICES', '-v', '-n', '-x'])).stdout;
    n += [...out.matchAll(/^\s*(\d+)\s+\d+\s+KUBE-SVC-/gm)].reduce((s, m) => s + Number(m[1]), 0);
  }
  return n;
}

/** Packets node-1's br-int matched on IPv6 flows (ipv6/tcp6/udp6/icmp6 matches) in table 0 and after. */
async function bridgeIPv6Packets(lab: Lab): Promise<number> {
  const run = `/run/sluice-lab/${lab.name}/node-1/ovs`;
  const env = { ...(process.env as Record<string, string>), OVS_RUNDIR: run };
  await sh('ovs-appctl', ['revalidator/wait'], { env });
  const out = (await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', `unix:${run}/br-int.mgmt`], { env })).stdout;
  return out.split('\n').filter((l) => /\b(ipv6|tcp6|udp6|icmp6)\b/.test(l)).reduce((s, l) => s + Number(/n_packets=(\d+)/.exec(l)?.[1] ?? 0), 0);
}

/** Runs `ip` in a namespace and returns its JSON output. */
async function ipJson<T>(ns: string, args: string[]): Promise<T> {
  return JSON.parse((await inNs(ns, ['ip', '-j', ...args])).stdout || '[]') as T;
}

/**
 * EKS-style Pods on node-1 are wired as the VPC CNI wires them, with and without sluice: each
 * address alone (/32, /128) on eth0, the default route of each family via its link-local gateway
 * (169.254.1.1, fe80::1) with a PERMANENT neighbour entry holding the host veth's MAC.
 */
async function eksWiring(t: Test, lab: Lab, pods: PodList): Promise<void> {
  const links = await ipJson<{ ifindex: number; address: string }[]>(`${lab.name}-node-1`, ['link', 'show']);
  for (const pod of pods.items.filter((p) => p.spec.nodeName === 'node-1' && p.metadata.name !== 'host')) {
    const ref = `${pod.metadata.namespace}/${pod.metadata.name}`;
    const ns = podNetns(lab.name, pod.metadata.namespace, pod.metadata.name);
    const [eth0] = await ipJson<{ link_index: number; addr_info: { family: string; local: string; prefixlen: number; scope: string }[] }[]>(ns, ['addr', 'show', 'dev', 'eth0']);
    const hostMac = links.find((l) => l.ifindex === eth0?.link_index)?.address;
    const global = (eth0?.addr_info ?? []).filter((a) => a.scope === 'global').map((a) => `${a.local}/${a.prefixlen}`).sort();
    t.same(global, pod.status.podIPs!.map((p) => `${p.ip}/${p.ip.includes(':') ? 128 : 32}`).sort(), `${ref}: eth0 holds its Pod IPs alone`);
    for (const [fam, gw] of pod.status.podIPs!.map((p): [string, string] => (p.ip.includes(':') ? ['-6', 'fe80::1'] : ['-4', '169.254.1.1']))) {
      const [route] = await ipJson<{ gateway?: string; dev?: string }[]>(ns, [fam, 'route', 'show', 'default']);
      t.same([route?.gateway, route?.dev], [gw, 'eth0'], `${ref}: default route via ${gw}`);
      const [neigh] = await ipJson<{ lladdr?: string; state?: string[] }[]>(ns, [fam, 'neigh', 'show', gw, 'dev', 'eth0']);
      t.same([neigh?.lladdr, neigh?.state], [hostMac, ['PERMANENT']], `${ref}: ${gw} is a permanent neighbour at the host veth's MAC`);
    }
  }
}

/**
 * A Pod whose permanent fe80::1 entry is gone solicits its gateway: the bridge's ND responder
 * answers (router flag, the gateway MAC) and the Pod's IPv6 traffic flows again.
 */
async function gatewayByND(t: Test, lab: Lab, byNode: Record<string, string[]>): Promise<void> {
  const [ref] = byNode['node-1']!;
  const [ns, name] = ref!.split('/') as [string, string];
  const netns = podNetns(lab.name, ns, name);
  await inNs(netns, ['ip', '-6', 'neigh', 'del', 'fe80::1', 'dev', 'eth0']);
  const ping = await inNs(netns, ['ping', '-6', '-c', '1', '-W', '2', EXT_IP6], { allowFail: true });
  t.equal(ping.code, 0, `${ref} reaches ${EXT_IP6} after soliciting fe80::1`);
  const [neigh] = await ipJson<{ lladdr?: string; router?: null }[]>(netns, ['-6', 'neigh', 'show', 'fe80::1', 'dev', 'eth0']);
  t.same([neigh?.lladdr, neigh !== undefined && 'router' in neigh], ['aa:bb:cc:dd:ee:ff', true], 'fe80::1 resolved by the bridge to the gateway MAC, as a router');
}

/**
 * NetworkPolicy on the IPv6-only EKS-style lab with sluice: after each step every probe (Pod -> Pod
 * and Pod -> Service on 80/TCP and 80/UDP, node -> Pod; all over IPv6) gets with real packets the
 * verdict `sluicectl simulate` gives on a snapshot of the same objects. One port of the full
 * enforcement probe set, to keep this short (the full set runs on IPv4 in enforce-eks).
 */
async function policyEqualsSimulate(t: Test, lab: Lab): Promise<void> {
  const dir = tempDir(`${lab.name}-policy-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const probes = fullProbeSet([NODE_IP6['node-1'], NODE_IP6['node-2']]).filter((p) => p.port === 80);
  const fixture = (f: string) => join(REPO, 'test', 'lab', 'fixtures', 'enforce', f);
  const steps: [string, string[]][] = [
    ['K8s default deny of x, allow from y', [join(POLICIES, '01-default-deny-x.yaml'), join(POLICIES, '02-allow-from-y.yaml')]],
    ['Antrea ACNP drop', [join(POLICIES, '04-antrea-acnp.yaml')]],
    ['Antrea Reject', [fixture('10-reject.yaml')]],
  ];
  for (const [step, files] of steps) {
    await lab.cli(['apply', ...files.flatMap((f) => ['-f', f])]);
    const c = await compareWithSimulate(lab.name, dir, probes);
    t.same(c.mismatches, [], `${step}: ${c.probes} IPv6 probes, lab verdicts = simulate verdicts (${JSON.stringify(c.counts)}${c.retried ? `; ${c.retried} probed again` : ''})`);
    t.ok((c.counts.drop ?? 0) + (c.counts.reject ?? 0) > 0, `${step}: the policies block something`);
  }
}

/**
 * The matrix on one primary's lab `labName`: dual-stack, then IPv6-only. Skips (with the reason)
 * on a machine that cannot run labs or without a build.
 */
export async function runIpv6Matrix(t: Test, primary: Primary, labName: string): Promise<void> {
  const why = (await missingPrereq()) ?? (existsSync(CLI) ? undefined : `${CLI} is missing (build first)`) ?? (existsSync(join(REPO, 'dist', 'bin', 'sluice-cni')) ? undefined : 'dist/bin/sluice-cni is missing (build the CNI plugin first)');
  if (why) {
    t.plan(0, `skipped: ${why}`);
    return;
  }
  const lab = new Lab(labName, primary);
  t.teardown(async () => {
    await lab.cli(['down'], true);
    rmSync(lab.probes, { force: true });
    rmSync(lab.workload, { force: true });
  });
  // The example workload and a hostNetwork Pod on node-2 (last in the file and in its namespace's
  // order, so the scheduler places the example Pods as usual and the matrix picks the same ones).
  const hostPod = [
    '---', 'apiVersion: v1', 'kind: Namespace', 'metadata:', '  name: zz', '---', 'apiVersion: v1', 'kind: Pod', 'metadata:', '  name: host', '  namespace: zz', 'spec:',
    '  hostNetwork: true', '  nodeSelector:', '    kubernetes.io/hostname: node-2', '  containers:', '    - name: server', '      image: sluice-lab/workload', '      ports:',
    '        - {containerPort: 8080, protocol: TCP}', '        - {containerPort: 8080, protocol: UDP}', '',
  ].join('\n');
  const workload = `${readFileSync(join(REPO, 'examples', 'workload.yaml'), 'utf8').trimEnd()}\n${hostPod}`;

  const matrixOn = (ipFamily: 'dual' | 'ipv6') => {
    const families: (4 | 6)[] = ipFamily === 'dual' ? [6, 4] : [6];
    const { primary } = lab;
    return t.test(`${ipFamily} ${primary}: [${primary}, sluice] reaches exactly what [${primary}] reaches, over ${families.map((f) => `IPv${f}`).join(' and ')}`, async (t) => {
      // Dual-stack: every Service made dual-stack (only Services have spec.selector).
      const text = ipFamily === 'dual' ? workload.replaceAll('spec:\n  selector:', 'spec:\n  ipFamilyPolicy: PreferDualStack\n  selector:') : workload;
      if (ipFamily === 'dual') t.equal(text.split('ipFamilyPolicy: PreferDualStack').length - 1, 9, 'the 9 example Services are dual-stack');
      writeFileSync(lab.workload, text);
      await lab.up(ipFamily, false);
      const byNode = await podsByNode(lab);
      const services = JSON.parse((await lab.cli(['get', 'services', '-o', 'json'])).stdout) as SvcList;
      const wantIPs = ipFamily === 'dual' ? 2 : 1;
      t.ok(services.items.every((s) => s.spec.clusterIPs?.length === wantIPs && /^fd00:96::/.test(s.spec.clusterIPs.at(-1)!)), `every Service has ${ipFamily === 'dual' ? 'an IPv4 and an IPv6 ClusterIP' : 'an IPv6 ClusterIP'}`);
      const pods = await lab.pods();
      t.ok(pods.items.every((p) => p.status.podIPs?.some((ip) => /^fd00:(10|77):/.test(ip.ip))), 'every Pod has an IPv6 address');
      t.same(pods.items.find((p) => p.metadata.name === 'host')?.status.podIPs, [{ ip: NODE_IP['node-2'] }, { ip: NODE_IP6['node-2'] }], 'the hostNetwork Pod has the node\'s addresses, IPv6 too');

      if (primary === 'eks') await eksWiring(t, lab, pods);

      const matrices = families.map((f) => matrix(byNode, f));
      const svcBefore = await ip6ServicePackets(lab);
      const alone: Verdict[][] = [];
      for (const [i, m] of matrices.entries()) {
        alone.push(await probe(lab, m));
        // With the primary alone everything in this matrix is reachable: a verdict other than allow
        // here would be the lab's fault, and "identical" would prove nothing about it.
        t.same(alone[i]!.filter((v) => v.verdict !== 'allow'), [], `every IPv${families[i]} probe passes with ${primary} alone:\n${show(alone[i]!)}`);
      }
      t.ok((await ip6ServicePackets(lab)) - svcBefore >= 10, 'the IPv6 Service probes went through ip6tables\' DNAT');
      // Every Pod to every Pod on every served port over IPv6 (sluice-lab probe --family 6, no probe file).
      const everyAlone = await probeAll(lab);
      t.same(everyAlone.filter((v) => v.verdict !== 'allow' || v.family !== 6), [], `all ${everyAlone.length} default probes over IPv6 pass with ${primary} alone`);
      // IPv6-only EKS-style Pods: IPv4 out through the egress interface, SNATed to the node.
      const egressFrom = byNode['node-1']!.slice(0, 2);
      const egressV4 = primary === 'eks' && ipFamily === 'ipv6';
      const egressAlone = egressV4 ? await probeEgressV4(lab, egressFrom) : [];
      if (egressV4) t.same(egressAlone.filter((v) => !v.endsWith(': allow')), [], `IPv4 egress from IPv6-only Pods passes with ${primary} alone:\n${egressAlone.join('\n')}`);

      await lab.up(ipFamily, true);
      t.same(await podsByNode(lab), byNode, 'same Pod placement');
      const bridgeBefore = await bridgeIPv6Packets(lab);
      for (const [i, m] of matrices.entries()) {
        const chained = await probe(lab, m);
        t.same(chained, alone[i], `identical IPv${families[i]} matrix with sluice chained (${m.length} probes):\n${show(chained)}`);
      }
      const every = await probeAll(lab);
      t.same(every, everyAlone, `identical default IPv6 matrix with sluice chained (${every.length} probes)`);
      if (egressV4) {
        const snatBefore = await egressSnatPackets(lab);
        const egress = await probeEgressV4(lab, egressFrom);
        t.same(egress, egressAlone, `identical IPv4 egress with sluice chained:\n${egress.join('\n')}`);
        t.ok((await egressSnatPackets(lab)) > snatBefore, 'the IPv4 egress went through the egress plugin\'s SNAT');
        await egressV4Enforced(t, lab, egressFrom as [string, string]);
        await fqdnOverEgressV4(t, lab, egressFrom[0]!);
      }
      const crossed = (await bridgeIPv6Packets(lab)) - bridgeBefore;
      t.ok(crossed >= matrices[0]!.length, `node-1's br-int matched ${crossed} packets on its IPv6 flows during the probes`);
      const chainedPods = await lab.pods();
      for (const pod of chainedPods.items.filter((p) => p.spec.nodeName === 'node-1' && p.metadata.name !== 'host')) {
        for (const ip of pod.status.podIPs!.map((p) => p.ip)) {
          const route = (await inNs(`${lab.name}-node-1`, ['ip', ...(ip.includes(':') ? ['-6'] : []), 'route', 'get', ip])).stdout;
          t.match(route, /dev antrea-gw0/, `${pod.metadata.namespace}/${pod.metadata.name} (${ip}) is routed via the gateway`);
        }
      }
      if (primary === 'eks') {
        await eksWiring(t, lab, chainedPods);
        await gatewayByND(t, lab, byNode);
        if (ipFamily === 'ipv6') await policyEqualsSimulate(t, lab);
        if (egressV4) await egressV4RestartAndDel(t, lab, egressFrom[0]!);
      }
    });
  };

  await matrixOn('dual');
  await matrixOn('ipv6');
}
