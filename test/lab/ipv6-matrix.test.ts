/**
 * The transparent matrix on ptp labs with IPv6 (lab name "v6m"): with [ptp, sluice] every probe
 * gets the verdict it gets with [ptp] alone. Dual-stack: over IPv6 and over IPv4, the example
 * workload's Services made dual-stack (ipFamilyPolicy PreferDualStack), so they have an IPv6
 * ClusterIP that the lab's kube-proxy DNATs in ip6tables. IPv6-only: the example workload as is,
 * its Services single-stack IPv6 (the lab's only Service range). A hostNetwork Pod stands in for a
 * node that serves: Pod -> node and node -> node. All real packets, sent through
 * `sluice-lab probe`.
 */
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { inNs, missingPrereq, REPO, sh } from './datapath-env.js';

const LAB = 'v6m';
const CLI = join(REPO, 'dist', 'lab', 'cli.js');
const STATE = `/run/sluice-lab/${LAB}`;
const WORKLOAD = `/tmp/${LAB}-workload.yaml`;
const PROBES = `/tmp/${LAB}-probes.json`;
const NODE_IP6 = { 'node-1': 'fd00:77::b', 'node-2': 'fd00:77::c' } as const;
const NODE_IP = { 'node-1': '192.168.77.11', 'node-2': '192.168.77.12' } as const;
const EXT_IP6 = 'fd00:77::fa';
const HOST_POD = 'zz/host';

type Probe = { from: string; to: string; port?: number; protocol: string; family?: 4 | 6 };
type Verdict = { from: string; to: string; port: number; protocol: string; family?: number; verdict: string };
type PodList = { items: { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string; podIPs?: { ip: string }[] } }[] };
type SvcList = { items: { metadata: { namespace: string; name: string }; spec: { clusterIPs?: string[] } }[] };

const lab = (args: string[], allowFail = false) => sh(process.execPath, [CLI, ...args, '--name', LAB], { allowFail });

async function up(ipFamily: 'dual' | 'ipv6', sluice: boolean): Promise<void> {
  await lab(['down'], true);
  const r = await lab(['up', '--nodes', '2', '--primary', 'ptp', '--ip-family', ipFamily, sluice ? '--sluice' : '--no-sluice', '-f', WORKLOAD], true);
  if (r.code !== 0) throw new Error(`sluice-lab up failed:\n${r.stdout}\n${r.stderr}`);
}

async function podsByNode(): Promise<Record<string, string[]>> {
  const list = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as PodList;
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

async function probe(probes: Probe[]): Promise<Verdict[]> {
  writeFileSync(PROBES, JSON.stringify(probes));
  return JSON.parse((await lab(['probe', '--probes', PROBES, '-o', 'json'])).stdout) as Verdict[];
}

async function probeAll(): Promise<Verdict[]> {
  return JSON.parse((await lab(['probe', '--family', '6', '-o', 'json'])).stdout) as Verdict[];
}

const show = (vs: Verdict[]) => vs.map((v) => `${v.from} -> ${v.to} ${v.port}/${v.protocol} IPv${v.family}: ${v.verdict}`).join('\n');

/** Packets the nodes' ip6tables KUBE-SERVICES rules sent to a Service chain. */
async function ip6ServicePackets(): Promise<number> {
  let n = 0;
  for (const node of ['node-1', 'node-2']) {
    const out = (await inNs(`${LAB}-${node}`, ['ip6tables', '-t', 'nat', '-L', 'KUBE-SERVICES', '-v', '-n', '-x'])).stdout;
    n += [...out.matchAll(/^\s*(\d+)\s+\d+\s+KUBE-SVC-/gm)].reduce((s, m) => s + Number(m[1]), 0);
  }
  return n;
}

/** Packets node-1's br-int matched on IPv6 flows (ipv6/tcp6/udp6/icmp6 matches) in table 0 and after. */
async function bridgeIPv6Packets(): Promise<number> {
  const run = `${STATE}/node-1/ovs`;
  const env = { ...(process.env as Record<string, string>), OVS_RUNDIR: run };
  await sh('ovs-appctl', ['revalidator/wait'], { env });
  const out = (await sh('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', `unix:${run}/br-int.mgmt`], { env })).stdout;
  return out.split('\n').filter((l) => /\b(ipv6|tcp6|udp6|icmp6)\b/.test(l)).reduce((s, l) => s + Number(/n_packets=(\d+)/.exec(l)?.[1] ?? 0), 0);
}

const why = (await missingPrereq()) ?? (existsSync(CLI) ? undefined : `${CLI} is missing (build first)`) ?? (existsSync(join(REPO, 'dist', 'bin', 'sluice-cni')) ? undefined : 'dist/bin/sluice-cni is missing (build the CNI plugin first)');
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  t.teardown(async () => {
    await lab(['down'], true);
    rmSync(PROBES, { force: true });
    rmSync(WORKLOAD, { force: true });
  });
  // The example workload and a hostNetwork Pod on node-2 (last in the file and in its namespace's
  // order, so the scheduler places the example Pods as usual and the matrix picks the same ones).
  const hostPod = [
    '---', 'apiVersion: v1', 'kind: Namespace', 'metadata:', '  name: zz', '---', 'apiVersion: v1', 'kind: Pod', 'metadata:', '  name: host', '  namespace: zz', 'spec:',
    '  hostNetwork: true', '  nodeSelector:', '    kubernetes.io/hostname: node-2', '  containers:', '    - name: server', '      image: sluice-lab/workload', '      ports:',
    '        - {containerPort: 8080, protocol: TCP}', '        - {containerPort: 8080, protocol: UDP}', '',
  ].join('\n');
  const workload = `${readFileSync(join(REPO, 'examples', 'workload.yaml'), 'utf8').trimEnd()}\n${hostPod}`;

  for (const ipFamily of ['dual', 'ipv6'] as const) {
    const families: (4 | 6)[] = ipFamily === 'dual' ? [6, 4] : [6];
    await t.test(`${ipFamily} ptp: [ptp, sluice] reaches exactly what [ptp] reaches, over ${families.map((f) => `IPv${f}`).join(' and ')}`, async (t) => {
      // Dual-stack: every Service made dual-stack (only Services have spec.selector).
      const text = ipFamily === 'dual' ? workload.replaceAll('spec:\n  selector:', 'spec:\n  ipFamilyPolicy: PreferDualStack\n  selector:') : workload;
      if (ipFamily === 'dual') t.equal(text.split('ipFamilyPolicy: PreferDualStack').length - 1, 9, 'the 9 example Services are dual-stack');
      writeFileSync(WORKLOAD, text);
      await up(ipFamily, false);
      const byNode = await podsByNode();
      const services = JSON.parse((await lab(['get', 'services', '-o', 'json'])).stdout) as SvcList;
      const wantIPs = ipFamily === 'dual' ? 2 : 1;
      t.ok(services.items.every((s) => s.spec.clusterIPs?.length === wantIPs && /^fd00:96::/.test(s.spec.clusterIPs.at(-1)!)), `every Service has ${ipFamily === 'dual' ? 'an IPv4 and an IPv6 ClusterIP' : 'an IPv6 ClusterIP'}`);
      const pods = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as PodList;
      t.ok(pods.items.every((p) => p.status.podIPs?.some((ip) => /^fd00:(10|77):/.test(ip.ip))), 'every Pod has an IPv6 address');
      t.same(pods.items.find((p) => p.metadata.name === 'host')?.status.podIPs, [{ ip: NODE_IP['node-2'] }, { ip: NODE_IP6['node-2'] }], 'the hostNetwork Pod has the node\'s addresses, IPv6 too');

      const matrices = families.map((f) => matrix(byNode, f));
      const svcBefore = await ip6ServicePackets();
      const alone: Verdict[][] = [];
      for (const [i, m] of matrices.entries()) {
        alone.push(await probe(m));
        // With the primary alone everything in this matrix is reachable: a verdict other than allow
        // here would be the lab's fault, and "identical" would prove nothing about it.
        t.same(alone[i]!.filter((v) => v.verdict !== 'allow'), [], `every IPv${families[i]} probe passes with ptp alone:\n${show(alone[i]!)}`);
      }
      t.ok((await ip6ServicePackets()) - svcBefore >= 10, 'the IPv6 Service probes went through ip6tables\' DNAT');
      // Every Pod to every Pod on every served port over IPv6 (sluice-lab probe --family 6, no probe file).
      const everyAlone = await probeAll();
      t.same(everyAlone.filter((v) => v.verdict !== 'allow' || v.family !== 6), [], `all ${everyAlone.length} default probes over IPv6 pass with ptp alone`);

      await up(ipFamily, true);
      t.same(await podsByNode(), byNode, 'same Pod placement');
      const bridgeBefore = await bridgeIPv6Packets();
      for (const [i, m] of matrices.entries()) {
        const chained = await probe(m);
        t.same(chained, alone[i], `identical IPv${families[i]} matrix with sluice chained (${m.length} probes):\n${show(chained)}`);
      }
      const every = await probeAll();
      t.same(every, everyAlone, `identical default IPv6 matrix with sluice chained (${every.length} probes)`);
      const crossed = (await bridgeIPv6Packets()) - bridgeBefore;
      t.ok(crossed >= matrices[0]!.length, `node-1's br-int matched ${crossed} packets on its IPv6 flows during the probes`);
      const chainedPods = JSON.parse((await lab(['get', 'pods', '-o', 'json'])).stdout) as PodList;
      for (const pod of chainedPods.items.filter((p) => p.spec.nodeName === 'node-1' && p.metadata.name !== 'host')) {
        const ip6 = pod.status.podIPs!.map((p) => p.ip).find((ip) => ip.includes(':'))!;
        const route = (await inNs(`${LAB}-node-1`, ['ip', '-6', 'route', 'get', ip6])).stdout;
        t.match(route, /dev antrea-gw0/, `${pod.metadata.namespace}/${pod.metadata.name} (${ip6}) is routed via the gateway`);
      }
    });
  }
}
