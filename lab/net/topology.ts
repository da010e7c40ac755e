/**
 * The lab's wires: a "VPC router" namespace with a bridge, N node namespaces hanging off it by
 * their `uplink`, and an external host. Pod CIDRs are routed per node by the VPC router (like a
 * VPC route table), so cross-node Pod traffic is routed, never bridged. Converges: running it
 * again on a (partly) existing lab only adds what is missing.
 */
import { mkdirSync } from 'node:fs';
import { ipBatch, run, runIn } from './exec.js';
import {
  BLACKHOLE_CIDR, EXT_IP, EXT_IPV6, EXT_PUBLIC_IP, PROHIBIT_CIDR, LabConfigError, MAX_NODES, VPC_ROUTER_IP, VPC_ROUTER_IPV6, checkLabName, extNetns,
  hasIPv6, type IpFamily, nodeIP, nodeIPv6, nodeName, nodeNetns, podCidr, podCidr6, stateDir, vpcNetns,
} from './names.js';

export const VPC_BRIDGE = 'br-vpc';

export async function listNetns(): Promise<string[]> {
  const { stdout } = await run('ip', ['-j', 'netns', 'list'], { allowFail: true });
  if (!stdout.trim()) return [];
  return (JSON.parse(stdout) as { name: string }[]).map((n) => n.name);
}

const sysctl = (netns: string, settings: string[]) => runIn(netns, 'sysctl', ['-qw', ...settings]);

/**
 * Creates a namespace with lo up. ICMP error rate limiting is switched off in every lab namespace
 * (icmp_ratemask=0, a per-namespace sysctl): the lab's probes judge "reject" by ICMP errors and
 * must get one for every probe, not a burst of 6 and then one per second.
 */
export async function ensureNetns(netns: string): Promise<void> {
  if ((await listNetns()).includes(netns)) return;
  await run('ip', ['netns', 'add', netns]);
  await ipBatch(netns, ['link set lo up']);
  await sysctl(netns, ['net.ipv4.icmp_ratemask=0']);
}

export async function linkNames(netns: string): Promise<Set<string>> {
  const { stdout } = await run('ip', ['-n', netns, '-j', 'link', 'show']);
  return new Set((JSON.parse(stdout || '[]') as { ifname: string }[]).map((l) => l.ifname));
}

/** A veth from the VPC bridge to `ifname` inside `netns`; recreated when either end is missing. */
async function ensureUplink(lab: string, bridgePort: string, netns: string, ifname: string): Promise<void> {
  const [vpcLinks, peerLinks] = await Promise.all([linkNames(vpcNetns(lab)), linkNames(netns)]);
  if (vpcLinks.has(bridgePort) && peerLinks.has(ifname)) return;
  const fix: string[] = [];
  if (vpcLinks.has(bridgePort)) fix.push(`link del ${bridgePort}`);
  await ipBatch(vpcNetns(lab), [...fix, `link add ${bridgePort} type veth peer name ${ifname} netns ${netns}`]);
}

export interface TopologyOptions {
  lab: string;
  nodes: number;
  /**
   * With IPv6 (ipv6, dual) every wire also carries IPv6: the VPC subnet fd00:77::/64, each node's
   * IPv6 Pod CIDR routed to it by the VPC router, the external host's IPv6 address. IPv4 stays on
   * the wires in every form: the lab's control plane (API server, agents' health) speaks it.
   */
  ipFamily?: IpFamily;
}

/** Addresses on lab wires skip Duplicate Address Detection (it would hold them tentative for a second). */
const addr6 = (cidr: string, dev: string) => `addr replace ${cidr} dev ${dev} nodad`;

export async function createTopology({ lab, nodes, ipFamily = 'ipv4' }: TopologyOptions): Promise<void> {
  const v6 = hasIPv6(ipFamily);
  checkLabName(lab);
  if (!Number.isInteger(nodes) || nodes < 1 || nodes > MAX_NODES) {
    throw new LabConfigError(`nodes must be an integer 1-${MAX_NODES}, got ${JSON.stringify(nodes)}`);
  }
  mkdirSync(stateDir(lab), { recursive: true });
  const vpc = vpcNetns(lab);
  const ext = extNetns(lab);
  const nodeList = Array.from({ length: nodes }, (_, k) => nodeName(k + 1));
  await Promise.all([vpc, ext, ...nodeList.map((n) => nodeNetns(lab, n))].map(ensureNetns));

  // Redirects off: the router must keep routing node-to-node traffic instead of telling hosts to bridge it.
  await sysctl(vpc, ['net.ipv4.ip_forward=1', 'net.ipv4.conf.all.send_redirects=0', 'net.ipv4.conf.default.send_redirects=0']);
  if (!(await linkNames(vpc)).has(VPC_BRIDGE)) await ipBatch(vpc, [`link add ${VPC_BRIDGE} type bridge`]);
  await ipBatch(vpc, [
    `addr replace ${VPC_ROUTER_IP}/24 dev ${VPC_BRIDGE}`,
    `link set ${VPC_BRIDGE} up`,
    `route replace blackhole ${BLACKHOLE_CIDR}`,
    `route replace prohibit ${PROHIBIT_CIDR}`,
  ]);
  if (v6) {
    await sysctl(vpc, ['net.ipv6.conf.all.forwarding=1']);
    await ipBatch(vpc, [addr6(`${VPC_ROUTER_IPV6}/64`, VPC_BRIDGE)]);
  }

  await Promise.all(
    nodeList.map(async (node) => {
      const ns = nodeNetns(lab, node);
      const port = `v-${node}`;
      await sysctl(ns, ['net.ipv4.ip_forward=1']);
      await ensureUplink(lab, port, ns, 'uplink');
      await ipBatch(ns, [
        'link set lo up',
        `addr replace ${nodeIP(node)}/24 dev uplink`,
        'link set uplink up',
        `route replace default via ${VPC_ROUTER_IP} dev uplink`,
      ]);
      await ipBatch(vpc, [`link set ${port} master ${VPC_BRIDGE} up`, `route replace ${podCidr(node)} via ${nodeIP(node)}`]);
      if (v6) {
        await sysctl(ns, ['net.ipv6.conf.all.forwarding=1']);
        await ipBatch(ns, [addr6(`${nodeIPv6(node)}/64`, 'uplink'), `route replace ::/0 via ${VPC_ROUTER_IPV6} dev uplink`]);
        await ipBatch(vpc, [`route replace ${podCidr6(node)} via ${nodeIPv6(node)}`]);
      }
    }),
  );

  await ensureUplink(lab, 'v-ext', ext, 'eth0');
  await ipBatch(ext, [
    'link set lo up',
    `addr replace ${EXT_IP}/24 dev eth0`,
    `addr replace ${EXT_PUBLIC_IP}/32 dev lo`,
    'link set eth0 up',
    `route replace default via ${VPC_ROUTER_IP} dev eth0`,
  ]);
  await ipBatch(vpc, [`link set v-ext master ${VPC_BRIDGE} up`, `route replace ${EXT_PUBLIC_IP}/32 via ${EXT_IP}`]);
  if (v6) await ipBatch(ext, [addr6(`${EXT_IPV6}/64`, 'eth0'), `route replace ::/0 via ${VPC_ROUTER_IPV6} dev eth0`]);
}
