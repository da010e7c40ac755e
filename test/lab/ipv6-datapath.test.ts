/**
 * The IPv6 datapath with real packets, on a dual-stack lab (v6a) and an IPv6-only one (v6b): 2
 * nodes, ptp + host-local with an IPv6 range, sluice-cni chained, a sluice-agent per node on the
 * netdev datapath, Pods attached by the real CNI chain. IPv6 Pod to Pod on one node and across nodes, node to Pod, Pod to an IPv6
 * Service (a DNAT in the node's ip6tables, as kube-proxy writes it) with a local and a remote
 * endpoint, spoofed sources dropped, forged frames from a Pod (another Pod's source, link-local
 * sources, Neighbour Advertisements for the gateway and for another Pod) reaching nobody, and the
 * IPv4 path of the same Pods unchanged beside it.
 * The agents run without an API server (nodeIP/nodeIPv6 configured), so no policy is enforced here.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { agentPidPath, startAgent } from '../../lab/agent.js';
import {
  createLab, createPodSandbox, destroyLab, missingLabPrerequisites, nodeIP, nodeIPv6, nodeNetns, type PodSandbox, runIn, runOvs, sluiceSocketPath,
} from '../../lab/net/index.js';
import { repoRoot } from '../../lab/net/names.js';

const SERVICE6 = 'fd00:96::10';
const missing = missingLabPrerequisites();
const built = ['dist/daemon/main.js', 'dist/bin/sluice-cni'].map((f) => join(repoRoot(), f));

/** STATUS over the agent's CNI socket until it says ready. */
async function agentReady(LAB: string, node: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = createConnection(sluiceSocketPath(LAB, node));
      let buf = '';
      s.setEncoding('utf8');
      s.on('connect', () => s.write(`${JSON.stringify({ command: 'STATUS', containerId: '', netns: '', ifName: '', args: {}, cniPath: '', config: { cniVersion: '1.1.0', name: 'lab', type: 'sluice-cni' } })}\n`));
      s.on('data', (d: string) => (buf += d));
      s.on('end', () => resolve(/"ok":true/.test(buf)));
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`sluice-agent on ${node} not ready within ${timeoutMs / 1000} s`);
}

if (missing.length) {
  t.plan(0, `skipped: lab tests need ${missing.join(', ')}`);
} else if (built.some((f) => !existsSync(f))) {
  t.plan(0, `skipped: build first (npm run build): ${built.join(', ')}`);
} else {
  await t.test('dual-stack Pods', (t) => suite(t, 'v6a', 'dual'));
  await t.test('IPv6-only Pods', (t) => suite(t, 'v6b', 'ipv6'));
}

async function suite(t: Test, LAB: string, ipFamily: 'dual' | 'ipv6'): Promise<void> {
  await destroyLab(LAB);
  t.teardown(() => destroyLab(LAB).then(() => undefined));
  const info = await createLab({ name: LAB, nodes: 2, primary: 'ptp', chainSluice: true, ipFamily });
  for (const node of ['node-1', 'node-2']) {
    await startAgent(LAB, node, 60_000, { KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '' }, {
      kubeconfig: null, nodeIP: nodeIP(node), nodeIPv6: nodeIPv6(node), serviceCIDRs: ['10.96.0.0/16', 'fd00:96::/112'], enforcePolicies: false,
      healthAddress: '127.0.0.1:10349',
    });
    await agentReady(LAB, node);
  }
  const pods: Record<string, PodSandbox> = {};
  for (const [name, node] of [['a', 'node-1'], ['b', 'node-1'], ['c', 'node-2']] as const) {
    pods[name] = await createPodSandbox({ lab: LAB, node, namespace: 'v6', name, ports: [] });
  }
  const v6 = (p: string) => pods[p]!.ips.find((ip) => ip.includes(':'))!;
  const v4 = (p: string) => pods[p]!.ips.find((ip) => !ip.includes(':'))!;
  const ns = (p: string) => pods[p]!.netns;
  /** Echo replies received of `count` pings (ping -6 from `from`'s namespace). */
  const ping = async (netns: string, dst: string, count = 5, extra: string[] = []): Promise<number> => {
    const r = await runIn(netns, 'ping', ['-n', '-c', String(count), '-i', '0.2', '-W', '1', ...extra, dst], { allowFail: true });
    return Number(/(\d+) received/.exec(r.stdout)?.[1] ?? 0);
  };
  /** A TCP listener on [::]:port in a Pod (OpenBSD nc, one connection at a time, kept open). */
  const listen = async (p: string, port: number) => {
    await runIn(ns(p), 'sh', ['-c', `nohup nc -6 -k -l ${port} >/dev/null 2>&1 &`]);
    await new Promise((r) => setTimeout(r, 300));
  };
  const connect = async (netns: string, dst: string, port: number): Promise<boolean> =>
    (await runIn(netns, 'nc', ['-6', '-z', '-w', '2', dst, String(port)], { allowFail: true })).exitCode === 0;
  const flowPackets = async (node: string, needle: string): Promise<number> => {
    await runOvs(LAB, node, 'ovs-appctl', ['revalidator/wait']).catch(() => undefined);
    const out = (await runOvs(LAB, node, 'ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', 'br-int'])).stdout;
    return out.split('\n').filter((l) => l.includes(needle)).reduce((n, l) => n + Number(/n_packets=(\d+)/.exec(l)?.[1] ?? 0), 0);
  };

  t.test('Pods get an IPv4 and an IPv6 address from ptp + host-local, attached by the chain', async (t) => {
    for (const [name, p] of Object.entries(pods)) {
      if (ipFamily === 'dual') t.match(v4(name), new RegExp(`^10\\.10\\.${p.node.slice(5)}\\.\\d+$`), `${name}: IPv4 ${v4(name)}`);
      t.match(v6(name), new RegExp(`^fd00:10:${p.node.slice(5)}::[0-9a-f]+$`), `${name}: IPv6 ${v6(name)}`);
      const route = (await runIn(nodeNetns(LAB, p.node), 'ip', ['-6', 'route', 'show', `${v6(name)}/128`])).stdout;
      t.match(route, /dev antrea-gw0/, `${name}: the IPv6 host route is on antrea-gw0`);
      const tx = (await runIn(ns(name), 'ethtool', ['-k', 'eth0'])).stdout;
      t.match(tx, /tx-checksumming: off/, `${name}: TX checksum offload off (netdev datapath), set by the agent`);
    }
    t.equal(info.ipFamily, ipFamily);
    t.same(Object.values(pods).map((p) => p.ips.length), Object.values(pods).map(() => (ipFamily === 'dual' ? 2 : 1)), `${ipFamily}: ${ipFamily === 'dual' ? 'both families' : 'IPv6 alone'}`);
  });

  t.test('IPv6 Pod to Pod on one node and across nodes, and node to Pod', async (t) => {
    const before = await flowPackets('node-1', `ipv6_dst=${v6('b')}`);
    for (const [from, to] of [['a', 'b'], ['b', 'a'], ['a', 'c'], ['c', 'a'], ['c', 'b']] as const) {
      t.equal(await ping(ns(from), v6(to)), 5, `ping -6 ${from} -> ${to} (${v6(to)}): 5 of 5`);
    }
    t.ok((await flowPackets('node-1', `ipv6_dst=${v6('b')}`)) - before >= 10, 'the packets to b crossed br-int\'s IPv6 delivery flow');
    const neigh = (await runIn(ns('a'), 'ip', ['-6', 'neigh', 'show', 'dev', 'eth0'])).stdout;
    t.match(neigh, /lladdr aa:bb:cc:dd:ee:ff router/, `the Pod resolved its IPv6 gateway to the virtual MAC, as a router (${neigh.trim()})`);
    t.equal(await ping(nodeNetns(LAB, 'node-1'), v6('a')), 5, 'node-1 -> a over IPv6 (the host solicits through the gateway)');
    t.equal(await ping(nodeNetns(LAB, 'node-2'), v6('a')), 5, 'node-2 -> a over IPv6 (routed by the VPC)');
    await listen('b', 8080);
    await listen('c', 8080);
    t.ok(await connect(ns('a'), v6('b'), 8080), 'TCP over IPv6 a -> b:8080 (same node)');
    t.ok(await connect(ns('a'), v6('c'), 8080), 'TCP over IPv6 a -> c:8080 (across nodes)');
    if (ipFamily === 'dual') t.equal(await ping(ns('a'), v4('c'), 3), 3, 'the same Pods\' IPv4 path beside it');
  });

  t.test('Pod to an IPv6 Service: out to the host, DNAT, back through table 300 and re-entrance', async (t) => {
    const node1 = nodeNetns(LAB, 'node-1');
    // kube-proxy's part, as it writes it: DNAT of the Service address in PREROUTING.
    for (const [port, to] of [[80, 'b'], [81, 'c']] as const) {
      await runIn(node1, 'ip6tables', ['-t', 'nat', '-A', 'PREROUTING', '-d', `${SERVICE6}/128`, '-p', 'tcp', '--dport', String(port), '-j', 'DNAT', '--to-destination', `[${v6(to)}]:8080`]);
    }
    const reentered = await flowPackets('node-1', 'actions=set_field:de:ad:be:ef:de:ad->eth_src,IN_PORT');
    t.ok(await connect(ns('a'), SERVICE6, 80), `a -> [${SERVICE6}]:80 -> b (local endpoint)`);
    t.ok(await connect(ns('a'), SERVICE6, 81), `a -> [${SERVICE6}]:81 -> c (remote endpoint)`);
    t.ok((await flowPackets('node-1', 'actions=set_field:de:ad:be:ef:de:ad->eth_src,IN_PORT')) > reentered, 'the remote endpoint\'s packets took the re-entrance flow');
    const marked = (await runIn(node1, 'ip6tables', ['-t', 'mangle', '-L', 'ANTREA-MANGLE', '-v', '-n', '-x'])).stdout;
    t.match(marked, /^\s*[1-9]\d*\s+\d+\s+MARK.*fd00:96::\/112/m, 'ANTREA-MANGLE marked the Service packets');
    // Without the raw NOTRACK rule only the remote endpoint breaks (the re-entered packet meets the
    // host's conntrack a second time). The agent puts its rule back as soon as it sees it go (it
    // follows nft monitor): it is paused meanwhile, and its repair is then what restores the rule.
    const agentPid = Number(readFileSync(agentPidPath(LAB, 'node-1'), 'utf8').trim());
    process.kill(agentPid, 'SIGSTOP');
    let local = false;
    let remote = true;
    try {
      await runIn(node1, 'sh', ['-c', 'ip6tables -t raw -F ANTREA-RAW && conntrack -F -f ipv6']);
      local = await connect(ns('a'), SERVICE6, 80);
      remote = await connect(ns('a'), SERVICE6, 81);
    } finally {
      process.kill(agentPid, 'SIGCONT');
    }
    t.ok(local, 'without NOTRACK: the local endpoint still answers');
    t.notOk(remote, 'without NOTRACK: the remote endpoint does not');
    let repaired = false;
    for (let i = 0; i < 50 && !repaired; i++) {
      await new Promise((r) => setTimeout(r, 100));
      repaired = /de:ad:be:ef:de:ad/i.test((await runIn(node1, 'ip6tables', ['-t', 'raw', '-S', 'ANTREA-RAW'])).stdout);
    }
    t.ok(repaired, 'the resumed agent put the ip6tables NOTRACK rule back by itself');
    t.ok(await connect(ns('a'), SERVICE6, 81), 'and the remote endpoint answers again');
  });

  t.test('spoofed IPv6 sources from a Pod are dropped', async (t) => {
    await runIn(ns('a'), 'ip', ['-6', 'addr', 'add', `${v6('b')}/128`, 'dev', 'eth0', 'nodad']);
    await runIn(ns('a'), 'ip', ['-6', 'addr', 'add', 'fd00:10:1::99/128', 'dev', 'eth0', 'nodad']);
    t.equal(await ping(ns('a'), v6('c'), 3, ['-I', v6('b')]), 0, 'with b\'s address: nothing gets through');
    t.equal(await ping(ns('a'), v6('c'), 3, ['-I', 'fd00:10:1::99']), 0, 'with an unassigned address: nothing');
    t.equal(await ping(ns('a'), v6('c'), 3, ['-I', v6('a')]), 3, 'with its own: all of them');
    t.equal(await ping(ns('b'), v6('c'), 3), 3, 'b itself is unaffected');
  });

  t.test('forged frames from a Pod: another\'s source, link-local sources, Neighbour Advertisements for the gateway and for another Pod — none arrives, nothing is poisoned', async (t) => {
    if (spawnSync('python3', ['--version']).status !== 0) {
      t.plan(0, 'skipped: no python3 on this machine to send raw frames (lab/forged-frames.py)');
      return;
    }
    const frames = join(repoRoot(), 'lab', 'forged-frames.py');
    const node1 = nodeNetns(LAB, 'node-1');
    const macOf = async (netns: string, dev = 'eth0') => (await runIn(netns, 'cat', [`/sys/class/net/${dev}/address`])).stdout.trim();
    const linkLocal = async (netns: string, dev = 'eth0') => /inet6 (fe80::[0-9a-f:]+)\/64/.exec((await runIn(netns, 'ip', ['-6', 'addr', 'show', 'dev', dev, 'scope', 'link'])).stdout)?.[1] ?? '';
    const [aMac, bMac, aLL, bLL, hostLL] = [await macOf(ns('a')), await macOf(ns('b')), await linkLocal(ns('a')), await linkLocal(ns('b')), await linkLocal(node1, 'antrea-gw0')];
    const gw6 = /default via (\S+)/.exec((await runIn(ns('b'), 'ip', ['-6', 'route', 'show', 'default'])).stdout)?.[1] ?? '';
    t.ok(aLL && bLL && hostLL && gw6, `a ${aLL}, b ${bLL}, node-1's gateway ${hostLL}; the Pods' IPv6 gateway ${gw6}`);
    // The victims' neighbour entries exist before the attack (b -> its gateway, node-1 -> b).
    t.equal(await ping(ns('b'), v6('c'), 2), 2, 'b reaches c before');
    t.equal(await ping(node1, v6('b'), 2), 2, 'node-1 reaches b before');
    const V = 'aa:bb:cc:dd:ee:ff';
    const ALL_NODES = '33:33:00:00:00:01';
    const udp6 = (tag: string, ipSrc: string, ipDst: string, dst = V) => ({ kind: 'udp6', src: aMac, dst, ip_src: ipSrc, ip_dst: ipDst, tag });
    const na = (dst: string, ipSrc: string, ipDst: string, target: string, flags: string) => ({ kind: 'na', src: aMac, dst, ip_src: ipSrc, ip_dst: ipDst, target, tll: aMac, flags });
    const controls = [udp6('own-local', v6('a'), v6('b')), udp6('own-remote', v6('a'), v6('c'))];
    const forged = [
      udp6('pod-source-local', v6('b'), v6('b')),
      udp6('pod-source-remote', v6('b'), v6('c')),
      udp6('own-link-local-to-global', aLL, v6('c')),
      udp6('other-link-local-to-global', bLL, v6('b')),
      udp6('link-local-to-link-local', aLL, bLL, bMac),
      udp6('spoofed-link-local-to-link-local', bLL, bLL, bMac),
      // "The gateway is at my MAC", to everyone and to b, Override set.
      na(ALL_NODES, aLL, 'ff02::1', gw6, 'RO'),
      na(bMac, aLL, bLL, gw6, 'RSO'),
      na(bMac, gw6, bLL, gw6, 'RSO'),
      // "b is at my MAC", to everyone and to the host, Override set.
      na(ALL_NODES, aLL, 'ff02::1', v6('b'), 'O'),
      na(V, v6('b'), hostLL, v6('b'), 'SO'),
      na(V, aLL, hostLL, v6('b'), 'SO'),
    ];
    const sniff = (netns: string, dev: string) => runIn(netns, 'python3', [frames, 'sniff', dev, '2.5'], { timeoutMs: 10_000 });
    const heard = Promise.all([sniff(ns('b'), 'eth0'), sniff(ns('c'), 'eth0'), sniff(node1, 'antrea-gw0')]);
    await new Promise((r) => setTimeout(r, 500));
    const sent = await runIn(ns('a'), 'python3', [frames, 'send', 'eth0', JSON.stringify([...controls, ...forged])]);
    t.equal(Number(sent.stdout.trim()), (controls.length + forged.length) * 3, `${forged.length} forged frames sent 3 times each, with ${controls.length} controls`);
    type Heard = { kind: string; src: string; tag?: string; tll?: string | null; target?: string };
    const [atB, atC, atHost] = (await heard).map((r) => r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Heard));
    t.ok(atB!.some((f) => f.tag === 'own-local') && atC!.some((f) => f.tag === 'own-remote'), 'the controls (a\'s own address) arrive at b and c: the sniffers see what crosses');
    for (const [where, got] of [['b', atB!], ['c', atC!], ['node-1\'s antrea-gw0', atHost!]] as const) {
      // An advertisement for the virtual MAC is the bridge answering a solicitation; any other is forged.
      const through = got.filter((f) => (f.kind === 'udp6' && !f.tag?.startsWith('own-')) || (f.kind === 'na' && f.tll !== V));
      t.same(through, [], `nothing forged reaches ${where}`);
    }
    const bGw = (await runIn(ns('b'), 'ip', ['-6', 'neigh', 'show', gw6, 'dev', 'eth0'])).stdout.trim();
    t.match(bGw, new RegExp(`lladdr ${V}`), `b's gateway entry still names the virtual MAC (${bGw})`);
    const hostB = (await runIn(node1, 'ip', ['-6', 'neigh', 'show', v6('b'), 'dev', 'antrea-gw0'])).stdout.trim();
    t.notMatch(hostB, aMac, `node-1's entry for b does not name a's MAC (${hostB || 'none'})`);
    t.equal(await ping(ns('b'), v6('c'), 3), 3, 'b still reaches c');
    t.equal(await ping(ns('c'), v6('b'), 3), 3, 'c still reaches b');
    t.equal(await ping(node1, v6('b'), 3), 3, 'node-1 still reaches b');
  });
}
