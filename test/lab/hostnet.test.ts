/**
 * Host networking against the real kernel: netlink routes/rules/neighbours, iptables (nft backend)
 * and nftables, inside throw-away network namespaces. A veth named antrea-gw0 stands in for the
 * OVS internal port (hostnet only needs a link of that name). `ip rule` prints table 300 by name
 * when antrea_service is registered in rt_tables.d on this machine, so both forms are accepted.
 */
import t from 'tap';
import { execFileSync, execSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const NS = 'hn-node';
const POD = 'hn-pod';
const POD2 = 'hn-pod2';
const THIRD = 'hn-third';
const DRIVER = 'dist/test/lab/fixtures/hostnet-driver.js';

function sh(cmd: string): string {
  return execSync(cmd, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}
function driver(op: string, ...args: string[]): unknown {
  const out = execFileSync('ip', ['netns', 'exec', NS, process.execPath, DRIVER, op, ...args], {
    encoding: 'utf8',
    env: { ...process.env, NODE_IP: '192.168.5.1', NODE_IPV6: 'fd00:5::1', SERVICE_CIDRS: '10.96.0.0/16,fd00:96::/112' },
  });
  return JSON.parse(out);
}
function cleanup(): void {
  for (const ns of [NS, POD, POD2, THIRD]) execSync(`ip netns del ${ns} 2>/dev/null || true`);
}

const missing = ['ip', 'iptables', 'nft', 'nsenter'].filter((c) => {
  try { execSync(`command -v ${c}`); return false; } catch { return true; }
});
if (process.getuid?.() !== 0) t.plan(0, 'skipped: needs root (network namespaces, iptables)');
else if (missing.length) t.plan(0, `skipped: missing tools ${missing.join(', ')}`);
else if (!existsSync(DRIVER)) t.plan(0, `skipped: ${DRIVER} not built (run npm run build)`);
else {
  cleanup();
  t.teardown(cleanup);
  sh(`ip netns add ${NS} && ip -n ${NS} link set lo up`);
  sh(`ip -n ${NS} link add antrea-gw0 type veth peer name gwpeer`);
  sh(`ip netns add ${POD} && ip -n ${NS} link add vethpod type veth peer name eth0 netns ${POD}`);
  sh(`ip -n ${NS} link set vethpod up && ip -n ${POD} link set eth0 up && ip -n ${POD} addr add 10.1.0.5/32 dev eth0`);
  sh(`ip -n ${NS} route add 10.1.0.5/32 dev vethpod scope link`);
  sh(`ip -n ${POD} addr add fd00:1::5/128 dev eth0 nodad && ip -n ${NS} -6 route add fd00:1::5/128 dev vethpod`);

  t.test('ensureBase creates the policy-only mode shapes, and a second run changes nothing', async (t) => {
    const first = driver('ensure') as string[];
    t.ok(first.length >= 4, `first run reports what it created: ${first.join('; ')}`);
    t.match(sh(`ip -n ${NS} rule`), /^300:\s+from all fwmark 0x800\/0x800 iif antrea-gw0 lookup (300|antrea_service)\s*$/m);
    t.match(sh(`ip -n ${NS} route show table 300`), /^default via 169\.254\.253\.1 dev antrea-gw0 onlink/m);
    t.match(sh(`ip -n ${NS} neigh show dev antrea-gw0`), /^169\.254\.253\.1 lladdr 12:34:56:78:9a:bc PERMANENT/m);
    t.match(sh(`ip -n ${NS} addr show dev antrea-gw0`), /inet 192\.168\.5\.1\/32/);
    const mangle = sh(`ip netns exec ${NS} iptables -t mangle -S ANTREA-MANGLE`);
    t.match(mangle, /-A ANTREA-MANGLE -d 10\.96\.0\.0\/16 -i antrea-gw0 -m comment --comment "Antrea: mark service traffic" -j MARK --set-xmark 0x800\/0x800/);
    t.match(mangle, /-A ANTREA-MANGLE ! -d 10\.96\.0\.0\/16 -m comment --comment "Antrea: unmark post LB service traffic" -j MARK --set-xmark 0x0\/0x800/);
    t.match(sh(`ip netns exec ${NS} iptables -t raw -S ANTREA-RAW`),
      /-A ANTREA-RAW -i antrea-gw0 -m mac --mac-source de:ad:be:ef:de:ad .*-j CT --notrack/);
    t.match(sh(`ip netns exec ${NS} iptables -t mangle -S PREROUTING`), /-j ANTREA-MANGLE/);
    t.match(sh(`ip netns exec ${NS} iptables -t raw -S PREROUTING`), /-j ANTREA-RAW/);
    t.match(sh(`ip netns exec ${NS} iptables -S ANTREA-FORWARD`), /-i antrea-gw0 .*-j ACCEPT[\s\S]*-o antrea-gw0 .*-j ACCEPT/);
    t.same(driver('ensure'), [], 'second run: nothing to do');
    t.equal(sh(`ip netns exec ${NS} iptables -t mangle -S PREROUTING`).match(/-j ANTREA-MANGLE/g)?.length, 1, 'one jump rule, not two');
  });

  t.test('IPv6: the same shapes with ip -6 and ip6tables, and a gateway ready for IPv6', async (t) => {
    t.match(sh(`ip -n ${NS} -6 rule`), /^300:\s+from all fwmark 0x800\/0x800 iif antrea-gw0 lookup (300|antrea_service)\s*$/m);
    t.match(sh(`ip -n ${NS} -6 route show table 300`), /^default via fc01::aabb:ccdd:eeff dev antrea-gw0 .*onlink/m);
    t.match(sh(`ip -n ${NS} -6 neigh show dev antrea-gw0`), /^fc01::aabb:ccdd:eeff lladdr 12:34:56:78:9a:bc PERMANENT/m);
    const addrs = sh(`ip -n ${NS} -6 addr show dev antrea-gw0`);
    t.match(addrs, /inet6 fd00:5::1\/128 scope global/, 'the node\'s IPv6 address');
    t.match(addrs, /inet6 fe80::[0-9a-f:]+\/64 scope link/, 'a link-local address (the source of the host\'s solicitations)');
    t.notMatch(addrs, /tentative|dadfailed/, 'no address held by DAD');
    for (const [key, want] of [['disable_ipv6', '0'], ['accept_dad', '0'], ['accept_ra', '0'], ['forwarding', '1']]) {
      t.equal(sh(`ip netns exec ${NS} sysctl -n net.ipv6.conf.antrea-gw0.${key}`).trim(), want, `net.ipv6.conf.antrea-gw0.${key} = ${want}`);
    }
    const mangle = sh(`ip netns exec ${NS} ip6tables -t mangle -S ANTREA-MANGLE`);
    t.match(mangle, /-A ANTREA-MANGLE -d fd00:96::\/112 -i antrea-gw0 -m comment --comment "Antrea: mark service traffic" -j MARK --set-xmark 0x800\/0x800/);
    t.match(mangle, /-A ANTREA-MANGLE ! -d fd00:96::\/112 -m comment --comment "Antrea: unmark post LB service traffic" -j MARK --set-xmark 0x0\/0x800/);
    t.notMatch(mangle, /10\.96/, 'no IPv4 CIDR in ip6tables');
    t.notMatch(sh(`ip netns exec ${NS} iptables -t mangle -S ANTREA-MANGLE`), /fd00/, 'no IPv6 CIDR in iptables');
    t.match(sh(`ip netns exec ${NS} ip6tables -t raw -S ANTREA-RAW`), /-A ANTREA-RAW -i antrea-gw0 -m mac --mac-source de:ad:be:ef:de:ad .*-j CT --notrack/);
    t.match(sh(`ip netns exec ${NS} ip6tables -t raw -S PREROUTING`), /-j ANTREA-RAW/);
    t.match(sh(`ip netns exec ${NS} ip6tables -S ANTREA-FORWARD`), /-i antrea-gw0 .*-j ACCEPT[\s\S]*-o antrea-gw0 .*-j ACCEPT/);
    sh(`ip -n ${NS} -6 rule del pref 300; ip -n ${NS} -6 neigh del fc01::aabb:ccdd:eeff dev antrea-gw0; ip netns exec ${NS} sysctl -qw net.ipv6.conf.antrea-gw0.accept_dad=1`);
    const repaired = driver('ensure') as string[];
    t.ok(repaired.some((r) => r.startsWith('IPv6 rule 300')), `IPv6 rule repaired: ${repaired.join('; ')}`);
    t.ok(repaired.some((r) => r.startsWith('neighbour fc01::aabb:ccdd:eeff')), 'IPv6 neighbour repaired');
    t.ok(repaired.includes('net.ipv6.conf.antrea-gw0.accept_dad = 0'), 'accept_dad repaired');
    t.same(driver('ensure'), [], 'then nothing to do');
  });

  t.test('other components\' rules are left alone', async (t) => {
    sh(`ip netns exec ${NS} iptables -t mangle -A PREROUTING -j MARK --set-xmark 0x4000/0x4000`);
    driver('ensure');
    t.match(sh(`ip netns exec ${NS} iptables -t mangle -S PREROUTING`), /--set-xmark 0x4000\/0x4000/);
  });

  t.test('what something else removed is repaired and reported', async (t) => {
    sh(`ip -n ${NS} rule del pref 300; ip -n ${NS} route flush table 300; ip -n ${NS} neigh del 169.254.253.1 dev antrea-gw0`);
    const repaired = driver('ensure') as string[];
    t.ok(repaired.some((r) => r.startsWith('rule 300')), 'rule repaired');
    t.ok(repaired.some((r) => r.startsWith('route default')), 'table 300 route repaired');
    t.ok(repaired.some((r) => r.startsWith('neighbour')), 'neighbour repaired');
    t.match(sh(`ip -n ${NS} rule`), /fwmark 0x800\/0x800 iif antrea-gw0 lookup (300|antrea_service)/);
    const iptRepairs = driver('ensure-tamper-ensure', `ip netns exec ${NS} iptables -t raw -F ANTREA-RAW`) as string[];
    t.ok(iptRepairs.some((r) => r.startsWith('iptables')), `iptables tampering detected: ${iptRepairs.join('; ')}`);
    t.match(sh(`ip netns exec ${NS} iptables -t raw -S ANTREA-RAW`), /CT --notrack/);
    const jumpRepairs = driver('ensure-tamper-ensure',
      `ip netns exec ${NS} iptables -t mangle -D PREROUTING -m comment --comment "Antrea: jump to ANTREA-MANGLE" -j ANTREA-MANGLE`) as string[];
    t.ok(jumpRepairs.length > 0, 'removed jump detected');
    t.match(sh(`ip netns exec ${NS} iptables -t mangle -S PREROUTING`), /-j ANTREA-MANGLE/);
  });

  t.test('Pod routes move to the gateway and back', async (t) => {
    t.same(driver('check', '10.1.0.5'), ['host route for 10.1.0.5 does not point at antrea-gw0']);
    driver('move', '10.1.0.5', 'vethpod');
    t.match(sh(`ip -n ${NS} route show 10.1.0.5`), /10\.1\.0\.5 dev antrea-gw0 scope link/);
    t.same(driver('check', '10.1.0.5'), []);
    sh(`ip -n ${NS} route del 10.1.0.5/32`);
    t.same(driver('resync', '10.1.0.5'), ['no host route for 10.1.0.5: restored'], 'resync restores a deleted Pod route');
    driver('restore', '10.1.0.5', 'vethpod');
    t.match(sh(`ip -n ${NS} route show 10.1.0.5`), /10\.1\.0\.5 dev vethpod scope link/);
  });

  t.test('IPv6 Pod routes (/128) move to the gateway and back, beside the IPv4 one', async (t) => {
    const both = '10.1.0.5,fd00:1::5';
    t.same(driver('check', both), ['host route for 10.1.0.5 does not point at antrea-gw0', 'host route for fd00:1::5 does not point at antrea-gw0']);
    driver('move', both, 'vethpod');
    t.match(sh(`ip -n ${NS} -6 route show fd00:1::5`), /^fd00:1::5 dev antrea-gw0/m);
    t.equal(sh(`ip -n ${NS} -6 route show fd00:1::5`).trim().split('\n').length, 1, 'replaced, not added beside the veth route');
    t.same(driver('check', both), []);
    sh(`ip -n ${NS} -6 route del fd00:1::5/128`);
    t.same(driver('resync', both), ['no host route for fd00:1::5: restored']);
    driver('restore', both, 'vethpod');
    t.match(sh(`ip -n ${NS} -6 route show fd00:1::5`), /^fd00:1::5 dev vethpod/m);
  });

  t.test('the host side of a Pod interface is found through its netns (rtnetlink, and nsenter for old kernels)', async (t) => {
    const mac = sh(`ip -n ${POD} -j link show eth0`).match(/"address":"([^"]+)"/)![1];
    const hostIndex = Number(sh(`ip -n ${NS} -j link show vethpod`).match(/"ifindex":(\d+)/)![1]);
    for (const op of ['findveth', 'findveth-nsenter']) {
      const found = driver(op, `/var/run/netns/${POD}`, 'eth0') as { hostIfName: string; hostIfIndex: number; podMac: string };
      t.same(found, { hostIfName: 'vethpod', hostIfIndex: hostIndex, podMac: mac }, `${op}: the peer in the node namespace and the Pod's MAC`);
      t.throws(() => driver(op, `/var/run/netns/${POD}`, 'eth9'), /interface eth9 not found in netns/, `${op}: an unknown interface is an error`);
    }
    t.throws(() => driver('findveth', `/var/run/netns/${POD}`, 'lo'), /is not a veth with a peer in the host namespace/, 'lo has no peer');
    t.throws(() => driver('findveth', '/var/run/netns/hn-no-such-ns', 'eth0'), /not found in netns/, 'a netns that does not exist');
    // A veth whose peer is in a third namespace: whatever host link has the peer's index, it is not the Pod's.
    sh(`ip netns add ${THIRD} && ip netns add ${POD2} && ip -n ${THIRD} link add vthird type veth peer name eth0 netns ${POD2}`);
    t.throws(() => driver('findveth', `/var/run/netns/${POD2}`, 'eth0'), /does not exist in the host namespace/, 'a peer in another namespace is refused');
  });

  t.test('veth guard: netdev ingress drop chain per attached veth', async (t) => {
    driver('guard', 'vethpod');
    t.match(sh(`ip netns exec ${NS} nft list table netdev sluice_veth_guard`),
      /hook ingress device "vethpod" priority filter; policy drop;/);
    t.same(driver('guarded'), ['vethpod'], 'the guarded veths are listed');
    driver('unguard', 'vethpod');
    t.notMatch(sh(`ip netns exec ${NS} nft list table netdev sluice_veth_guard`), /vethpod/);
    t.same(driver('guarded'), []);
  });

  t.test('removeBase uninstalls everything it created', async (t) => {
    driver('remove');
    t.notMatch(sh(`ip -n ${NS} rule`), /lookup (300|antrea_service)/);
    t.equal(sh(`ip -n ${NS} route show table 300`).trim(), '');
    t.notMatch(sh(`ip netns exec ${NS} iptables-save`), /ANTREA/);
    t.notMatch(sh(`ip -n ${NS} -6 rule`), /lookup (300|antrea_service)/);
    t.equal(sh(`ip -n ${NS} -6 route show table 300`).trim(), '');
    t.notMatch(sh(`ip -n ${NS} -6 neigh show dev antrea-gw0`), /fc01::aabb:ccdd:eeff/);
    t.notMatch(sh(`ip netns exec ${NS} ip6tables-save`), /ANTREA/);
  });
}
