/**
 * sluice-agent end to end on one node ("dpa" namespaces, private OVS, netdev datapath), driven over
 * its CNI socket with hand-made EKS-style Pods: ADD/DEL/CHECK/GC, idempotency, real traffic
 * through the bridge, restart without flow churn, ovs-vswitchd restart, bad input.
 */
import { spawn } from 'node:child_process';
import t from 'tap';
import {
  AgentProcess,
  REPO,
  sh,
  cni,
  createPod,
  flowAges,
  inNs,
  missingPrereq,
  netConf,
  Node,
  packets,
  type Pod,
  podRequest,
  sleep,
} from './datapath-env.js';

const why = await missingPrereq();
if (why) {
  t.plan(0, `skipped: ${why}`);
} else {
  const node = new Node('dpa-n1');
  const agent = new AgentProcess(node);
  t.teardown(async () => {
    await agent.stop('SIGKILL');
    await node.destroy();
  });
  let p1!: Pod;
  let p3!: Pod;
  try {
    await node.create();
    p1 = await createPod(node, 'p1', '10.1.0.11');
    p3 = await createPod(node, 'p3', '10.1.0.13');
    await agent.start();
  } catch (err) {
    await agent.stop('SIGKILL');
    await node.destroy();
    throw err;
  }
  const sock = agent.socketPath;

  const routeDev = async (ip: string) => /dev (\S+)/.exec((await inNs(node.ns, ['ip', 'route', 'get', ip])).stdout)?.[1];
  const podCookies = async (pod: Pod) => {
    const ports = (await node.vsctl(['--format=json', '--columns=ofport', 'find', 'Interface', `name=${pod.hostVeth}`])).stdout;
    const out = (await node.ofctl(['dump-flows', '--no-stats', node.mgmt, 'cookie=0x51ce010000000000/0xffffff0000000000'])).stdout;
    const ofport = (JSON.parse(ports) as { data: unknown[][] }).data[0]?.[0];
    return out.split('\n').filter((l) => l.includes(`nw_dst=${pod.ip}`) || l.includes(`nw_src=${pod.ip}`) || l.includes(`arp_spa=${pod.ip}`) || (ofport !== undefined && new RegExp(`in_port=${ofport}\\b`).test(l))).length;
  };
  const guarded = async () => (await inNs(node.ns, ['nft', 'list', 'table', 'netdev', 'sluice_veth_guard'], { allowFail: true })).stdout;
  const inNode = (cmd: string[]) => inNs(node.ns, cmd, { allowFail: true });
  const ping = async (from: string, to: string) => {
    const r = await inNs(from, ['ping', '-c', '3', '-i', '0.2', '-W', '2', to], { allowFail: true });
    return { ok: r.code === 0, dup: /DUP!/.test(r.stdout), out: r.stdout };
  };
  /** Waits (up to 10 s) until the agent's log shows `re`: its lines arrive through a pipe, after the effects they report. */
  const logShows = async (re: RegExp) => {
    for (let i = 0; i < 100 && !re.test(agent.log); i++) await sleep(100);
  };
  const tcp = async (from: string, to: string, port: number) =>
    (await inNs(from, ['nc', '-z', '-w', '3', to, String(port)], { allowFail: true })).code === 0;

  await t.test('start-up: bridge, gateway, base flows, host networking', async (t) => {
    t.equal((await node.vsctl(['get', 'Bridge', 'br-int', 'fail_mode'])).stdout.trim(), 'secure');
    t.equal((await node.vsctl(['get', 'Bridge', 'br-int', 'datapath_type'])).stdout.trim(), 'netdev');
    t.equal((await node.vsctl(['get', 'Interface', 'antrea-gw0', 'external_ids:sluice-type'])).stdout.trim(), 'gateway');
    t.match((await inNode(['ip', 'addr', 'show', 'antrea-gw0'])).stdout, /inet 192\.168\.100\.1\/32/, 'gateway up with the node IP /32');
    t.match((await inNode(['ip', 'rule'])).stdout, /300:\s+from all fwmark 0x800\/0x800 iif antrea-gw0 lookup (300|antrea_service)/);
    t.match((await inNode(['ip', 'route', 'show', 'table', '300'])).stdout, /default via 169\.254\.253\.1 dev antrea-gw0 onlink/);
    t.match((await inNode(['iptables', '-t', 'raw', '-S', 'ANTREA-RAW'])).stdout, /de:ad:be:ef:de:ad/);
    const status = await cni(sock, { command: 'STATUS', config: netConf() });
    t.same(status, { ok: true });
  });

  await t.test('something deleting table 300\'s route or the fwmark rule is repaired without waiting for the periodic resync', async (t) => {
    await inNode(['ip', 'route', 'del', 'default', 'table', '300']);
    await inNode(['ip', 'rule', 'del', 'pref', '300']);
    let repaired = false;
    for (let i = 0; i < 50 && !repaired; i++) {
      await sleep(200);
      repaired = /default via 169\.254\.253\.1/.test((await inNode(['ip', 'route', 'show', 'table', '300'])).stdout) && /^300:/m.test((await inNode(['ip', 'rule'])).stdout);
    }
    t.ok(repaired, 'route and rule are back (resyncIntervalSeconds is 60 here, so the netlink watch did it)');
    // The repair is visible before the resync that made it has finished and logged.
    await logShows(/"reason":"netlink: Deleted[\s\S]*resync: repaired/);
    t.match(agent.log, /"reason":"netlink: Deleted/);
    t.match(agent.log, /resync: repaired/);
  });

  await t.test('flushed iptables tables (nft backend) are repaired without waiting for the periodic resync', async (t) => {
    const kept = async () =>
      /Antrea: mark service traffic/.test((await inNode(['iptables', '-t', 'mangle', '-S', 'ANTREA-MANGLE'])).stdout) &&
      /-j ANTREA-MANGLE/.test((await inNode(['iptables', '-t', 'mangle', '-S', 'PREROUTING'])).stdout) &&
      /-j ANTREA-RAW/.test((await inNode(['iptables', '-t', 'raw', '-S', 'PREROUTING'])).stdout) &&
      /de:ad:be:ef:de:ad/.test((await inNode(['iptables', '-t', 'raw', '-S', 'ANTREA-RAW'])).stdout);
    t.ok(await kept(), 'chains and jumps in place before');
    const started = Date.now();
    await inNode(['iptables', '-t', 'mangle', '-F']);
    await inNode(['iptables', '-t', 'raw', '-F']);
    let repaired = false;
    for (let i = 0; i < 50 && !repaired; i++) {
      await sleep(200);
      repaired = await kept();
    }
    t.ok(repaired, 'ANTREA-MANGLE / ANTREA-RAW rules and their jumps are back (the periodic resync is 60 s here: the nft monitor did it)');
    t.comment(`iptables -t mangle -F + -t raw -F repaired within ${Date.now() - started} ms (polled every 200 ms)`);
    await logShows(/"reason":"nftables: delete rule ip (mangle|raw) /);
    t.match(agent.log, /"reason":"nftables: delete rule ip (mangle|raw) /);
  });

  await t.test('ADD attaches the Pod: port, isolation, route, flows; traffic crosses the bridge', async (t) => {
    for (const pod of [p1, p3]) {
      const r = await cni(sock, podRequest('ADD', pod));
      t.equal(r.ok, true, `ADD ${pod.ns}: ${JSON.stringify(r)}`);
      if (r.ok) t.match(r.result, { ips: [{ address: `${pod.ip}/32` }] }, 'ADD returns prevResult');
      t.equal(await routeDev(pod.ip), 'antrea-gw0', 'host route moved to the gateway');
      t.equal((await node.vsctl(['get', 'Interface', pod.hostVeth, 'external_ids:container-id'])).stdout.trim(), pod.containerId);
      t.equal((await node.vsctl(['get', 'Interface', pod.hostVeth, 'external_ids:attached-mac'])).stdout.trim(), `"${pod.mac}"`);
      t.match(await guarded(), new RegExp(`device "?${pod.hostVeth}"?`), 'host veth isolated (netdev)');
      t.equal(await podCookies(pod), 4, 'classifier, ARP guard, spoof guard, L3 flow');
      t.match((await inNs(pod.ns, ['ethtool', '-k', 'eth0'])).stdout, /tx-checksumming: off/, 'TX checksum offload off in the Pod');
    }
    const before = await packets(node, `nw_dst=${p3.ip}`);
    const pp = await ping(p1.ns, p3.ip);
    t.ok(pp.ok, `p1 -> p3 ping\n${pp.out}`);
    t.notOk(pp.dup, 'no duplicates');
    t.ok((await packets(node, `nw_dst=${p3.ip}`)) >= before + 3, 'the pings hit the L3 flow of p3');
    const hp = await ping(node.ns, p1.ip);
    t.ok(hp.ok && !hp.dup, `node -> p1 ping\n${hp.out}`);
    const srv = startServer(p3.ns, 8080);
    await sleep(300);
    t.ok(await tcp(p1.ns, p3.ip, 8080), 'p1 -> p3 TCP');
    srv.kill();
  });

  await t.test('repeated ADD changes nothing; CHECK reports precisely what is missing', async (t) => {
    const ages = await flowAges(node);
    const uuid = (await node.vsctl(['get', 'Port', p1.hostVeth, '_uuid'])).stdout;
    await sleep(1100);
    const r = await cni(sock, podRequest('ADD', p1));
    t.equal(r.ok, true);
    t.equal((await node.vsctl(['get', 'Port', p1.hostVeth, '_uuid'])).stdout, uuid, 'same port');
    const after = await flowAges(node);
    t.same([...after.keys()].sort(), [...ages.keys()].sort(), 'same flows');
    t.ok([...ages].every(([c, age]) => (after.get(c) ?? 0) >= age + 1), 'no flow was re-added (ages kept growing)');
    t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true }, 'CHECK passes');

    // The agent repairs breakage by itself (the route monitor at once, the flow watchdog every 5 s,
    // the periodic resync): a repair can land between breaking something and asking CHECK. A round
    // where any of the breakage was gone by the time CHECK answered proves nothing about CHECK, so it
    // is retried. On a loaded machine a round can take a good part of the watchdog's 1 s period,
    // so a few lost races in a row happen; ten in a row would be a real fault.
    const breakAndCheck = async (breakIt: () => Promise<void>, stillBroken: () => Promise<boolean> = async () => true) => {
      for (let attempt = 1; ; attempt++) {
        await breakIt();
        const res = await cni(sock, podRequest('CHECK', p1));
        if ((!res.ok && (await stillBroken())) || attempt === 10) return res;
        t.comment(`the agent repaired (some of) the breakage before CHECK answered (attempt ${attempt}); breaking it again`);
      }
    };
    const waitRepaired = async () => {
      for (let i = 0; i < 60; i++) {
        if ((await cni(sock, podRequest('CHECK', p1))).ok) return true;
        await sleep(500);
      }
      return false;
    };
    const podL3Flow = `cookie=0x51ce010000000000/0xffffff0000000000,ip,nw_dst=${p1.ip}`;
    const bad = await breakAndCheck(
      async () => {
        const cookie = (await node.ofctl(['dump-flows', '--no-stats', node.mgmt, podL3Flow])).stdout.match(/cookie=(0x[0-9a-f]+)/)![1]!;
        await node.ofctl(['del-flows', node.mgmt, `cookie=${cookie}/-1`]);
        await inNode(['ip', 'route', 'replace', `${p1.ip}/32`, 'dev', p1.hostVeth, 'scope', 'link']);
      },
      async () => {
        const route = (await inNode(['ip', 'route', 'show', `${p1.ip}/32`])).stdout;
        const flow = (await node.ofctl(['dump-flows', '--no-stats', node.mgmt, podL3Flow])).stdout;
        return route.includes(`dev ${p1.hostVeth}`) && !/cookie=0x/.test(flow);
      },
    );
    t.equal(bad.ok, false);
    if (!bad.ok) {
      t.equal(bad.code, 102);
      t.match(bad.msg, `host route for ${p1.ip} does not point at antrea-gw0`);
      t.match(bad.msg, /1 of 4 flows missing \(tables L3Forwarding\)/);
    }
    t.ok(await waitRepaired(), 'the flow watchdog and resync repair the route and the flow by themselves');
    t.match(agent.log, /"repairs":\[[^\]]*"flows: \+1 -0"/, 'the resync re-installed the one missing flow');
    const unguarded = await breakAndCheck(async () => {
      await inNode(['nft', 'delete', 'chain', 'netdev', 'sluice_veth_guard', `in_${p1.hostVeth}`]);
    });
    t.match(unguarded, { ok: false, code: 102, msg: new RegExp(`host veth ${p1.hostVeth} is not isolated`) });
    const repair = await cni(sock, podRequest('ADD', p1));
    t.equal(repair.ok, true, 'a repeated ADD repairs');
    t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true }, 'CHECK passes again');
    t.match(agent.log, /repeated ADD repaired a partial attachment/);
  });

  await t.test('agent kill -9 and restart: TCP stream survives, no flow re-added', async (t) => {
    const sink = startSink(p3.ns, 9000);
    await sleep(300);
    const source = inNsSpawn(p1.ns, ['sh', '-c', `while true; do head -c 20000 /dev/zero; sleep 0.1; done | nc ${p3.ip} 9000`]);
    await sleep(1500);
    const ages = await flowAges(node);
    await agent.stop('SIGKILL');
    const receivedAtKill = sink.bytes();
    await sleep(1000);
    t.ok(sink.bytes() > receivedAtKill, 'data keeps flowing while the agent is down');
    agent.log = '';
    await agent.start();
    await sleep(1500);
    const after = await flowAges(node);
    t.same([...after.keys()].sort(), [...ages.keys()].sort(), 'same flow set after restart');
    t.ok([...ages].every(([c, age]) => (after.get(c) ?? 0) > age), 'no flow removed and re-added');
    t.match(agent.log, /"added":0,"removed":0/, 'start-up flow sync was empty');
    const mid = sink.bytes();
    await sleep(800);
    t.ok(sink.bytes() > mid, 'the same TCP connection still streams after the restart');
    t.equal(source.exitCode, null, 'the client never saw an error');
    source.kill();
    sink.kill();
    t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true }, 'attachments reloaded from OVSDB');
  });

  await t.test('ovs-vswitchd restart: the agent replays flows and host networking', async (t) => {
    await node.killVswitchd();
    await node.startVswitchd();
    const replayed = /"repairs":\[[^\]]*"flows: \+\d+ -0"/;
    let ok = false;
    // CNI calls wait for a resync's flow part only, not for its host part: the resync's report may
    // come after CHECK passes again.
    for (let i = 0; i < 60 && !(ok && replayed.test(agent.log)); i++) {
      await sleep(500);
      ok = (await cni(sock, podRequest('CHECK', p1))).ok && (await cni(sock, podRequest('CHECK', p3))).ok;
    }
    t.ok(ok, 'CHECK passes again after the replay');
    t.match(agent.log, replayed, 'a resync (netlink event or flow watchdog) re-installed the flows');
    const pp = await ping(p1.ns, p3.ip);
    t.ok(pp.ok && !pp.dup, `p1 -> p3 after the replay\n${pp.out}`);
    const hp = await ping(node.ns, p3.ip);
    t.ok(hp.ok, `node -> p3 after the replay (gateway routes restored)\n${hp.out}`);
  });

  await t.test('sluicectl node status|pods|flows|trace', async (t) => {
    const loader = process.execArgv.filter((a) => a.includes('@tapjs/typescript'));
    const ctl = (args: string[]) =>
      inNs(node.ns, [process.execPath, ...loader, `${REPO}/test/lab/datapath-ctl-driver.ts`, 'node', ...args, '--config', agent.configPath], { allowFail: true });
    const status = await ctl(['status']);
    t.equal(status.code, 0, status.stderr);
    t.match(status.stdout, /node dp-node: ready/);
    t.match(status.stdout, /2 Pod\(s\) attached/);
    const mem = /memory: RSS ([\d.]+) MiB, JS heap ([\d.]+) of ([\d.]+) MiB/.exec(status.stdout);
    t.ok(mem && Number(mem[1]) > Number(mem[2]) && Number(mem[2]) > 0 && Number(mem[2]) <= Number(mem[3]), `memory line: ${mem?.[0]}`);
    const pods = await ctl(['pods']);
    t.match(pods.stdout, new RegExp(`${p1.hostVeth}\\s+\\d+\\s+default/${p1.ns}\\s+${p1.ip.replace(/\./g, '\\.')}`));
    const check = await ctl(['flows', '--check']);
    t.equal(check.code, 0, 'flows --check passes');
    t.match(check.stdout, /(\d+) of \1 desired flows installed/);
    const flows = await ctl(['flows', '--table', 'L3Forwarding', '--pod', p1.containerId]);
    t.match(flows.stdout, `nw_dst=${p1.ip}`);
    t.notMatch(flows.stdout, `nw_dst=${p3.ip}`, 'only the Pod asked for');
    const trace = await ctl(['trace', '--from', p1.containerId, '--dst', p3.ip, '--dport', '8080']);
    t.match(trace.stdout, /L3Forwarding/, 'trace names the tables');
    t.match(trace.stdout, /Datapath actions: .*\d+$/m);
    const bad = await ctl(['flows', '--table', 'Nope']);
    t.not(bad.code, 0);
    t.match(bad.stderr, /--table: unknown table "Nope"/);
  });

  await t.test('DEL restores the primary CNI topology; DEL twice and unknown succeed', async (t) => {
    t.same(await cni(sock, podRequest('DEL', p3)), { ok: true });
    t.equal(await routeDev(p3.ip), p3.hostVeth, 'route back on the veth');
    t.equal((await node.vsctl(['--if-exists', 'get', 'Port', p3.hostVeth, 'name'])).stdout.trim(), '', 'port removed');
    t.equal(await podCookies(p3), 0, 'flows removed');
    t.notMatch(await guarded(), new RegExp(`device "?${p3.hostVeth}"?`), 'veth isolation removed');
    const hp = await ping(node.ns, p3.ip);
    t.ok(hp.ok && !hp.dup, `p3 reachable the primary CNI way\n${hp.out}`);
    t.same(await cni(sock, podRequest('DEL', p3)), { ok: true }, 'DEL twice');
    t.same(await cni(sock, podRequest('DEL', p3, { containerId: 'never-seen' })), { ok: true }, 'DEL of an unknown container');
    const chk = await cni(sock, podRequest('CHECK', p3));
    t.match(chk, { ok: false, code: 102, msg: /is not attached/ });
  });

  await t.test('bad input gets the right code and leaves nothing', async (t) => {
    const noNetns = await cni(sock, podRequest('ADD', p3, { netns: '/var/run/netns/dpa-none' }));
    t.match(noNetns, { ok: false, code: 4, msg: /CNI_NETNS \/var\/run\/netns\/dpa-none does not exist/ });
    const noIf = await cni(sock, podRequest('ADD', p3, { ifName: 'eth9' }));
    t.match(noIf, { ok: false, code: 4, msg: /CNI_IFNAME eth9/ });
    const noIp = await cni(sock, podRequest('ADD', p3, { config: netConf({ prevResult: { cniVersion: '1.0.0', ips: [] } }) }));
    t.match(noIp, { ok: false, code: 7, msg: /no IP address/ });
    const linkLocal = await cni(sock, podRequest('ADD', p3, { config: netConf({ prevResult: { cniVersion: '1.0.0', ips: [{ address: `${p3.ip}/32` }, { address: 'fe80::5/64' }] } }) }));
    t.match(linkLocal, { ok: false, code: 7, msg: /"fe80::5" is a link-local address/ });
    t.equal(await routeDev(p3.ip), p3.hostVeth, 'route untouched');
    t.equal((await node.vsctl(['--if-exists', 'get', 'Port', p3.hostVeth, 'name'])).stdout.trim(), '', 'no port');
  });

  await t.test('GC removes attachments not in cni.dev/valid-attachments', async (t) => {
    t.equal((await cni(sock, podRequest('ADD', p3))).ok, true);
    const gc = await cni(sock, {
      command: 'GC',
      config: netConf({ 'cni.dev/valid-attachments': [{ containerID: p1.containerId, ifname: 'eth0' }] }),
    });
    t.same(gc, { ok: true });
    t.equal(await routeDev(p3.ip), p3.hostVeth, 'p3 detached');
    t.equal(await routeDev(p1.ip), 'antrea-gw0', 'p1 kept');
    t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true });
  });

  await t.test('a failure at each ADD step rolls everything back', async (t) => {
    const steps = ['find-veth', 'isolate-veth', 'attach-port', 'move-routes', 'install-flows'];
    for (const step of steps) {
      await agent.stop();
      agent.log = '';
      await agent.start({ SLUICE_FAILPOINT: step });
      const r = await cni(sock, podRequest('ADD', p3));
      t.match(r, { ok: false, code: 100, msg: new RegExp(`failed at step ${step}: failpoint after step ${step}`) }, step);
      t.equal(await routeDev(p3.ip), p3.hostVeth, `${step}: route still on the veth`);
      t.equal((await node.vsctl(['--if-exists', 'get', 'Port', p3.hostVeth, 'name'])).stdout.trim(), '', `${step}: no port`);
      t.equal(await podCookies(p3), 0, `${step}: no flows`);
      t.notMatch(await guarded(), new RegExp(`device "?${p3.hostVeth}"?`), `${step}: no veth isolation`);
      const hp = await ping(node.ns, p3.ip);
      t.ok(hp.ok && !hp.dup, `${step}: p3 still reachable the primary CNI way`);
      t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true }, `${step}: p1 untouched`);
    }
    await agent.stop();
    await agent.start();
    t.equal((await cni(sock, podRequest('ADD', p3))).ok, true, 'without the failpoint ADD works');
  });

  await t.test('start-up removes the leftovers of a Pod whose netns is gone', async (t) => {
    await agent.stop('SIGKILL');
    await sh('ip', ['netns', 'del', p3.ns]); // the Pod died while the agent was down (its veth goes with it)
    agent.log = '';
    await agent.start();
    t.match(agent.log, /netns \/var\/run\/netns\/dpa-n1-p3 gone/);
    t.equal((await node.vsctl(['--if-exists', 'get', 'Port', p3.hostVeth, 'name'])).stdout.trim(), '', 'port removed');
    t.notMatch((await inNs(node.ns, ['ip', 'route'])).stdout, new RegExp(`${p3.ip.replace(/\./g, '\\.')} `), 'route removed');
    t.equal(await podCookies(p3), 0, 'flows removed');
    t.same(await cni(sock, podRequest('CHECK', p1)), { ok: true }, 'the live Pod is untouched');
  });
}

function inNsSpawn(ns: string, cmd: string[]) {
  return execaSpawn('ip', ['netns', 'exec', ns, ...cmd]);
}

function execaSpawn(cmd: string, args: string[]) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  return {
    get exitCode() {
      return child.exitCode;
    },
    kill: () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* gone */
      }
    },
    child,
  };
}

function startServer(ns: string, port: number) {
  const s = execaSpawn('ip', ['netns', 'exec', ns, 'nc', '-lk', String(port)]);
  return s;
}

function startSink(ns: string, port: number) {
  const s = execaSpawn('ip', ['netns', 'exec', ns, 'nc', '-l', String(port)]);
  let n = 0;
  s.child.stdout!.on('data', (d: Buffer) => (n += d.length));
  return { bytes: () => n, kill: s.kill };
}
