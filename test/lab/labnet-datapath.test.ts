/**
 * The lab network end to end, on both primary flavours: real namespaces, real CNI plugins, real
 * packets. One lab per flavour (2 nodes, 9 Pods + a hostNetwork Pod), shared by every check.
 */
import t from 'tap';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import {
  type LabInfo, type NetProbe, type PodSandbox, type ProbeProtocol, type ProbeVerdict, type ServicePortRule,
  applyServiceRules, cniCheck, createLab, createPodSandbox, deletePodSandbox, destroyLab, eniName, isAlive, labPids,
  listLabs, missingLabPrerequisites, nodeNetns, ovsDir, pidsMentioning, removeServiceRules, run, runIn, runOvs, runProbes, startNodeOvs, stateDir, stopNodeOvs,
} from '../../lab/net/index.js';

const missing = missingLabPrerequisites();
const PORTS = [80, 81];
const PROTOS: ProbeProtocol[] = ['TCP', 'UDP'];
const POD_NAMES = ['x', 'y', 'z'].flatMap((ns) => ['a', 'b', 'c'].map((n) => `${ns}/${n}`));

/** Link names in the test process's own (root) namespace. */
async function rootLinks(): Promise<string[]> {
  const { stdout } = await run('ip', ['-j', 'link', 'show']);
  return (JSON.parse(stdout) as { ifname: string }[]).map((l) => l.ifname);
}


async function labFor(t: { teardown: (fn: () => Promise<void>) => void; comment: (msg: string) => void }, lab: string, primary: 'ptp' | 'eks') {
  await destroyLab(lab); // leftovers of an earlier aborted run
  const linksBefore = await rootLinks();
  let started = Date.now();
  const info: LabInfo = await createLab({ name: lab, nodes: 2, primary });
  const labMs = Date.now() - started;
  t.teardown(() => destroyLab(lab).then(() => undefined));
  started = Date.now();
  const ports = PORTS.flatMap((port) => PROTOS.map((protocol) => ({ port, protocol })));
  const list = await Promise.all(
    POD_NAMES.map((ref, i) => {
      const [namespace, name] = ref.split('/') as [string, string];
      return createPodSandbox({ lab, node: `node-${(i % 2) + 1}`, namespace, name, ports });
    }),
  );
  const hostPod = await createPodSandbox({ lab, node: 'node-2', namespace: 'kube-system', name: 'hostnet', hostNetwork: true, ports: [{ port: 8080, protocol: 'TCP' }] });
  t.comment(`${primary}: lab up (2 nodes, OVS, ext) in ${labMs} ms; 9 Pods + 1 hostNetwork Pod created in parallel in ${Date.now() - started} ms`);
  const pods = new Map<string, PodSandbox>(POD_NAMES.map((ref, i) => [ref, list[i]!]));
  return { info, pods, hostPod, linksBefore };
}

if (missing.length) {
  t.plan(0, `lab tests need ${missing.join(', ')}`);
} else {
  for (const [lab, primary] of [['la1', 'ptp'], ['la2', 'eks']] as const) {
    t.test(`${primary} flavour`, async (t) => {
      const { info, pods, hostPod, linksBefore } = await labFor(t, lab, primary);
      const pod = (ref: string) => pods.get(ref)!;
      const ip = (ref: string) => pod(ref).ips[0]!;
      const node1 = nodeNetns(lab, 'node-1');
      const node2 = nodeNetns(lab, 'node-2');

      t.test('Pods got addresses from their node\'s Pod CIDR', async (t) => {
        for (const [ref, p] of pods) {
          t.equal(p.ips.length, 1, `${ref} has one IP`);
          t.match(p.ips[0]!, new RegExp(`^10\\.10\\.${p.node.slice(5)}\\.(\\d+)$`), `${ref} on ${p.node}: ${p.ips[0]}`);
        }
        t.equal(new Set([...pods.values()].map((p) => p.ips[0])).size, 9, 'all distinct');
        t.same(hostPod.ips, ['192.168.77.12']);
        t.equal(hostPod.netns, node2);
      });

      t.test('each node\'s private OVS answers ovs-vsctl on its own db socket, and vswitchd serves bridges', async (t) => {
        for (const node of ['node-1', 'node-2']) {
          t.ok(existsSync(`${ovsDir(lab, node)}/db.sock`), `${node} db.sock exists`);
          const show = await runOvs(lab, node, 'ovs-vsctl', ['show']);
          t.match(show.stdout, /^[0-9a-f-]{36}$/m, `${node}: ovs-vsctl show prints the private db's uuid`);
          await runOvs(lab, node, 'ovs-vsctl', ['--timeout=10', 'add-br', 'br-la', '--', 'set', 'bridge', 'br-la', 'datapath_type=netdev']);
          const after = await runOvs(lab, node, 'ovs-vsctl', ['show']);
          t.match(after.stdout, /Bridge br-la/, `${node}: vswitchd configured a netdev bridge`);
          t.match((await runOvs(lab, node, 'ovs-appctl', ['version'])).stdout, /ovs-vswitchd/, `${node}: ovs-appctl reaches this node's vswitchd`);
          t.match((await runOvs(lab, node, 'ovs-ofctl', ['show', 'br-la'])).stdout, /OFPT_FEATURES_REPLY/, `${node}: ovs-ofctl reaches the bridge`);
          const links = await runIn(nodeNetns(lab, node), 'ip', ['link', 'show', 'br-la'], { allowFail: true });
          t.equal(links.exitCode, 0, `${node}: the bridge's port exists inside the node namespace`);
          await runOvs(lab, node, 'ovs-vsctl', ['--timeout=10', 'del-br', 'br-la']);
        }
        const show1 = (await runOvs(lab, 'node-1', 'ovs-vsctl', ['get', 'Open_vSwitch', '.', '_uuid'])).stdout;
        const show2 = (await runOvs(lab, 'node-2', 'ovs-vsctl', ['get', 'Open_vSwitch', '.', '_uuid'])).stdout;
        t.not(show1, show2, 'two separate databases');
        const pidsOf = (node: string) => ['ovsdb-server', 'ovs-vswitchd'].map((d) => Number(readFileSync(`${ovsDir(lab, node)}/${d}.pid`, 'utf8')));
        const old = pidsOf('node-2');
        await stopNodeOvs(lab, 'node-2');
        t.same(old.filter(isAlive), [], 'stopNodeOvs stops both daemons');
        await t.rejects(runOvs(lab, 'node-2', 'ovs-vsctl', ['--timeout=2', 'show']), 'nothing answers while stopped');
        await startNodeOvs(lab, 'node-2');
        t.equal((await runOvs(lab, 'node-2', 'ovs-vsctl', ['get', 'Open_vSwitch', '.', '_uuid'])).stdout, show2, 'restarted on the same database');
        t.match((await runOvs(lab, 'node-2', 'ovs-appctl', ['version'])).stdout, /ovs-vswitchd/, 'vswitchd back');
      });

      if (primary === 'eks') {
        t.test('EKS shapes: /32, 169.254.1.1 link route + default, permanent neighbour, eni veth without IP, host /32 route', async (t) => {
          const p = pod('x/a');
          const a = ip('x/a');
          const addr = await runIn(p.netns, 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0']);
          t.match(addr.stdout, new RegExp(`inet ${a.replace(/\./g, '\\.')}/32 `));
          const routes = (await runIn(p.netns, 'ip', ['route', 'show'])).stdout;
          t.match(routes, /^default via 169\.254\.1\.1 dev eth0/m);
          t.match(routes, /^169\.254\.1\.1 dev eth0 scope link/m);
          t.equal(routes.trim().split('\n').length, 2, `only those two routes:\n${routes}`);
          const hostIf = eniName(p.containerId);
          const hostLink = JSON.parse((await runIn(node1, 'ip', ['-j', 'link', 'show', 'dev', hostIf])).stdout) as { address: string }[];
          const neigh = (await runIn(p.netns, 'ip', ['neigh', 'show', '169.254.1.1', 'dev', 'eth0'])).stdout;
          t.match(neigh, new RegExp(`lladdr ${hostLink[0]!.address} PERMANENT`), `neighbour points at ${hostIf}'s MAC`);
          t.match(hostIf, /^eni[0-9a-f]{11}$/);
          t.equal((await runIn(node1, 'ip', ['-4', '-o', 'addr', 'show', 'dev', hostIf])).stdout.trim(), '', 'host veth has no IPv4 address');
          t.match((await runIn(node1, 'ip', ['route', 'show', `${a}/32`])).stdout, new RegExp(`^${a.replace(/\./g, '\\.')} dev ${hostIf} scope link`, 'm'));
          t.match(p.result?.ips?.[0]?.address, `${a}/32`);
          await t.resolves(cniCheck({ lab, node: 'node-1', containerId: p.containerId, netns: p.netns, podNamespace: 'x', podName: 'a' }), 'CNI CHECK passes');
        });
      } else {
        t.test('ptp shapes: host-local address with the subnet mask, default via the node-side gateway', async (t) => {
          const p = pod('x/a');
          t.match((await runIn(p.netns, 'ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout, /inet 10\.10\.1\.\d+\/24 /);
          t.match((await runIn(p.netns, 'ip', ['route', 'show', 'default'])).stdout, /default via 10\.10\.1\.1 dev eth0/);
          t.ok(readdirSync(`${stateDir(lab)}/node-1/ipam/lab`).includes(ip('x/a')), 'host-local recorded the address under the state dir');
        });
      }

      t.test('real packets: Pods, nodes, the external host, Services, reject and drop', async (t) => {
        const services: ServicePortRule[] = [
          { namespace: 'x', name: 'svc-local', clusterIP: '10.96.0.10', port: 80, protocol: 'TCP', endpoints: [{ ip: ip('x/c'), port: 80 }] },
          { namespace: 'x', name: 'svc-remote', clusterIP: '10.96.0.11', port: 80, protocol: 'TCP', endpoints: [{ ip: ip('x/b'), port: 81 }] },
          { namespace: 'x', name: 'svc-multi', clusterIP: '10.96.0.12', port: 80, protocol: 'TCP', endpoints: ['x/b', 'x/c', 'y/a'].map((r) => ({ ip: ip(r), port: 80 })) },
          { namespace: 'x', name: 'dns', portName: 'dns', clusterIP: '10.96.0.53', port: 53, protocol: 'UDP', endpoints: [{ ip: ip('y/a'), port: 81 }] },
        ];
        await Promise.all([applyServiceRules(node1, services), applyServiceRules(node2, services)]);

        const cases: { name: string; probe: NetProbe; want: ProbeVerdict; detail?: RegExp | undefined }[] = [];
        const add = (name: string, from: string, to: string, port: number, protocol: ProbeProtocol, want: ProbeVerdict, detail?: RegExp) =>
          cases.push({ name, probe: { sourceNetns: from, ip: to, port, protocol }, want, detail });
        const ns = (ref: string) => pod(ref).netns;
        for (const proto of ['TCP', 'UDP', 'ICMP'] as const) {
          add(`same node x/a -> x/c ${proto}`, ns('x/a'), ip('x/c'), 80, proto, 'allow');
          add(`same node x/c -> x/a ${proto}`, ns('x/c'), ip('x/a'), 81, proto, 'allow');
          add(`cross node x/a -> x/b ${proto}`, ns('x/a'), ip('x/b'), 81, proto, 'allow');
          add(`cross node x/b -> x/a ${proto}`, ns('x/b'), ip('x/a'), 80, proto, 'allow');
          add(`Pod -> ext 192.168.77.250 ${proto}`, ns('x/a'), '192.168.77.250', 80, proto, 'allow');
          add(`Pod -> ext 198.51.100.10 ${proto}`, ns('x/b'), '198.51.100.10', 81, proto, 'allow');
          add(`ext -> Pod ${proto}`, info.ext.netns, ip('y/a'), 80, proto, 'allow');
        }
        add('Pod -> own node IP (ICMP)', ns('x/a'), '192.168.77.11', 0, 'ICMP', 'allow');
        add('Pod -> own node IP, hostNetwork Pod port (TCP)', ns('x/b'), '192.168.77.12', 8080, 'TCP', 'allow');
        add('Pod -> other node IP, hostNetwork Pod port (TCP)', ns('x/a'), '192.168.77.12', 8080, 'TCP', 'allow');
        add('Pod -> own node IP, nothing listening: RST', ns('x/a'), '192.168.77.11', 8080, 'TCP', 'reject', /ECONNREFUSED/);
        add('node -> local Pod', node1, ip('x/a'), 80, 'TCP', 'allow');
        add('node -> remote Pod', node1, ip('x/b'), 80, 'UDP', 'allow');
        add('hostNetwork Pod (node-2) -> Pod', hostPod.netns, ip('z/c'), 81, 'TCP', 'allow');
        add('Service, local endpoint', ns('x/a'), '10.96.0.10', 80, 'TCP', 'allow');
        add('Service, remote endpoint', ns('x/a'), '10.96.0.11', 80, 'TCP', 'allow');
        add('Service, remote endpoint from node-2', ns('x/b'), '10.96.0.10', 80, 'TCP', 'allow');
        add('Service, 3 endpoints', ns('z/a'), '10.96.0.12', 80, 'TCP', 'allow');
        add('Service from the node itself (OUTPUT hook)', node2, '10.96.0.11', 80, 'TCP', 'allow');
        add('UDP Service (DNAT 53 -> 81, remote)', ns('x/a'), '10.96.0.53', 53, 'UDP', 'allow');
        add('TCP port nobody serves: RST', ns('x/a'), ip('x/b'), 82, 'TCP', 'reject', /ECONNREFUSED/);
        add('UDP port nobody serves: ICMP port unreachable', ns('x/a'), ip('x/c'), 82, 'UDP', 'reject', /ECONNREFUSED/);
        add('prohibit route: ICMP admin prohibited (TCP)', ns('x/a'), '203.0.113.200', 80, 'TCP', 'reject', /EHOSTUNREACH/);
        add('prohibit route (UDP)', ns('x/a'), '203.0.113.200', 80, 'UDP', 'reject', /EHOSTUNREACH/);
        add('prohibit route (ICMP)', ns('x/a'), '203.0.113.200', 0, 'ICMP', 'reject');
        for (const proto of ['TCP', 'UDP', 'ICMP'] as const) add(`blackholed address (${proto})`, ns('x/a'), '203.0.113.5', 80, proto, 'drop');

        const started = Date.now();
        const results = await runProbes(cases.map((c) => c.probe));
        t.comment(`${primary}: ${cases.length} mixed probes (incl. 3 drops at the 1.5 s timeout) in ${Date.now() - started} ms`);
        results.forEach((r, i) => {
          const c = cases[i]!;
          t.equal(r.verdict, c.want, `${c.name}: ${r.verdict} (${r.detail}, ${r.ms} ms)`);
          if (c.detail) t.match(r.detail, c.detail, `${c.name}: ${r.detail}`);
        });

        const udpCt = (await runIn(node1, 'conntrack', ['-L', '-p', 'udp', '--orig-dst', '10.96.0.53'], { allowFail: true })).stdout;
        t.match(udpCt, new RegExp(`src=${ip('y/a').replace(/\./g, '\\.')} dst=${ip('x/a').replace(/\./g, '\\.')} sport=81 dport=\\d+`), 'node-1 DNATed the UDP Service to y/a:81');
        const tcpCt = (await runIn(node1, 'conntrack', ['-L', '-p', 'tcp', '--orig-dst', '10.96.0.11'], { allowFail: true })).stdout;
        t.match(tcpCt, new RegExp(`src=${ip('x/b').replace(/\./g, '\\.')} dst=${ip('x/a').replace(/\./g, '\\.')} sport=81`), 'node-1 DNATed svc-remote to x/b:81');

        // Converging again changes nothing; a smaller set removes stale chains; remove takes all out.
        const save = async () => (await runIn(node1, 'iptables-save', ['-t', 'nat'])).stdout.split('\n').filter((l) => !l.startsWith('#')).join('\n');
        const first = await save();
        await applyServiceRules(node1, services);
        t.equal(await save(), first, 're-applying the same Services is a no-op');
        t.equal(first.match(/^-A PREROUTING .*-j KUBE-SERVICES$/gm)?.length, 1, 'one PREROUTING jump');
        t.equal(first.match(/^-A OUTPUT .*-j KUBE-SERVICES$/gm)?.length, 1, 'one OUTPUT jump');
        t.equal(first.match(/^:KUBE-SEP-/gm)?.length, 6, 'one KUBE-SEP chain per endpoint');
        await applyServiceRules(node1, services.slice(3));
        const smaller = await save();
        t.equal(smaller.match(/^:KUBE-SVC-/gm)?.length, 1, 'stale KUBE-SVC chains deleted');
        t.equal(smaller.match(/^:KUBE-SEP-/gm)?.length, 1, 'stale KUBE-SEP chains deleted');
        const [stillUdp, goneTcp] = await runProbes([
          { sourceNetns: ns('x/a'), ip: '10.96.0.53', port: 53, protocol: 'UDP' },
          { sourceNetns: ns('x/a'), ip: '10.96.0.10', port: 80, protocol: 'TCP' },
        ]);
        t.equal(stillUdp!.verdict, 'allow', 'the remaining Service still works');
        t.not(goneTcp!.verdict, 'allow', `a removed Service no longer answers (${goneTcp!.verdict}, ${goneTcp!.detail})`);
        await removeServiceRules(node1);
        t.notMatch(await save(), /KUBE-/, 'removeServiceRules leaves no KUBE-* chain or jump');
      });

      t.test('9 x 9 Pods x {80,81} x {TCP,UDP} matrix: all allowed, about one timeout', async (t) => {
        const probes: NetProbe[] = [];
        for (const from of POD_NAMES) for (const to of POD_NAMES) for (const port of PORTS) for (const protocol of PROTOS) {
          probes.push({ sourceNetns: pod(from).netns, ip: ip(to), port, protocol });
        }
        const started = Date.now();
        const results = await runProbes(probes);
        const ms = Date.now() - started;
        t.comment(`${primary}: 9x9x4 matrix = ${probes.length} probes in ${ms} ms (9 prober processes in parallel)`);
        const bad = results.filter((r) => r.verdict !== 'allow');
        t.same(bad, [], 'every Pod reaches every Pod on every port/protocol');
        t.equal(results.length, 324);
        const many = await runProbes(Array.from({ length: 300 }, (_, i) => ({ sourceNetns: pod('x/a').netns, ip: ip('x/b'), port: 80 + (i % 2), protocol: 'TCP' as const })));
        t.equal(many.filter((r) => r.verdict === 'allow').length, 300, 'one workload serves 300 concurrent TCP connections from one prober');
      });

      t.test('deleting a Pod is complete and idempotent', async (t) => {
        const p = pod('z/c');
        await deletePodSandbox({ lab, namespace: 'z', name: 'c' });
        await deletePodSandbox({ lab, namespace: 'z', name: 'c' });
        t.notOk(existsSync(`/var/run/netns/${p.netns}`), 'netns gone');
        t.notOk(readdirSync(`${stateDir(lab)}/node-1/ipam/lab`).includes(p.ips[0]!), 'IP released');
        t.equal(readdirSync(`${stateDir(lab)}/node-1/cni-cache/results`).filter((f) => f.includes(p.containerId)).length, 0, 'CNI cache entry removed');
        const hostSide = (await runIn(node1, 'ip', ['route', 'show', `${p.ips[0]}/32`])).stdout.trim();
        t.equal(hostSide, '', 'no host route left');
        if (primary === 'eks') t.equal((await runIn(node1, 'ip', ['link', 'show', eniName(p.containerId)], { allowFail: true })).exitCode, 1, 'eni veth gone');
        await deletePodSandbox({ lab, namespace: 'kube-system', name: 'hostnet' });
        await deletePodSandbox({ lab, namespace: 'kube-system', name: 'hostnet' });
        t.ok(existsSync(`/var/run/netns/${node2}`), 'deleting a hostNetwork Pod keeps the node namespace');
        const again = await createPodSandbox({ lab, node: 'node-1', namespace: 'z', name: 'c', ports: [{ port: 80 }] });
        const [r] = await runProbes([{ sourceNetns: pod('x/a').netns, ip: again.ips[0]!, port: 80, protocol: 'TCP' }]);
        t.equal(r!.verdict, 'allow', 're-created Pod serves again');
        const [h] = await runProbes([{ sourceNetns: pod('x/a').netns, ip: '192.168.77.12', port: 8080, protocol: 'TCP' }]);
        t.equal(h!.verdict, 'reject', 'the deleted hostNetwork Pod no longer serves on the node IP');
      });

      t.test('destroyLab leaves no namespace, process, veth, file or OVS process behind', async (t) => {
        const ovsPids = ['node-1', 'node-2'].flatMap((n) => ['ovs-vswitchd', 'ovsdb-server'].map((d) => Number(readFileSync(`${ovsDir(lab, n)}/${d}.pid`, 'utf8'))));
        t.equal(ovsPids.filter(isAlive).length, 4, 'both nodes run ovsdb-server and ovs-vswitchd');
        const before = await labPids(lab);
        t.ok(before.length >= 4 + 9 + 1, `the lab runs processes (${before.length})`);
        t.ok((await listLabs()).includes(lab));
        const report = await destroyLab(lab);
        t.equal(report.netnsDeleted.length, 4 + 9, 'vpc, ext, 2 nodes and 9 Pod namespaces deleted');
        const left = readdirSync('/var/run/netns').filter((n) => n.startsWith(`${lab}-`));
        t.same(left, [], 'no namespace left');
        t.same(await labPids(lab), [], 'no process in or mentioning the lab');
        t.same([...before, ...ovsPids].filter(isAlive), [], 'every process the lab ran (workloads, OVS) is gone');
        t.same(pidsMentioning(`/run/sluice-lab/${lab}/`), [], 'no OVS (or other) process mentions the state dir');
        t.notOk(existsSync(stateDir(lab)), 'state dir removed');
        const linksAfter = await rootLinks();
        t.same(linksAfter.filter((l) => !linksBefore.includes(l) && /^(eni|veth|v-|uplink|br-vpc|br-la)/.test(l)), [], 'no lab link in the root namespace');
        t.notOk((await listLabs()).includes(lab), 'listLabs no longer shows it');
      });
    });
  }
}
