/**
 * The lab's naming and addressing contract (pure, no I/O). Every other module — and the lab
 * control plane written by others — derives names and addresses from here, so they never drift.
 * See lab/net/README.md for the same contract in prose.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const DEFAULT_LAB = 'sl';
export const LAB_NAME = /^[a-z][a-z0-9]{0,5}$/;
export const STATE_ROOT = '/run/sluice-lab';
export const NETNS_DIR = '/var/run/netns';

export const VPC_SUBNET = '192.168.77.0/24';
export const VPC_ROUTER_IP = '192.168.77.1';
export const EXT_IP = '192.168.77.250';
/** An "Internet" address living on the external host's lo, reached only by routing. */
export const EXT_PUBLIC_IP = '198.51.100.10';
export const MAX_NODES = 200;
/** The VPC router silently discards this range (a `blackhole` route): probes to it time out. */
export const BLACKHOLE_CIDR = '203.0.113.0/25';
/** The VPC router answers this range with ICMP admin-prohibited (a `prohibit` route). */
export const PROHIBIT_CIDR = '203.0.113.128/25';

/** Lab nodes are named like a kubelet would register them. */
export const nodeName = (i: number): string => `node-${i}`;

export class LabConfigError extends Error {}

export function checkLabName(lab: string): string {
  if (typeof lab !== 'string' || !LAB_NAME.test(lab)) {
    throw new LabConfigError(`lab name ${JSON.stringify(lab)} must match ${LAB_NAME} (1-6 chars, lowercase, starts with a letter)`);
  }
  return lab;
}

/** "node-3" -> 3; throws for anything else. */
export function nodeIndex(node: string): number {
  const m = /^node-([1-9]\d{0,2})$/.exec(node);
  const i = m ? Number(m[1]) : NaN;
  if (!m || i > MAX_NODES) throw new LabConfigError(`node ${JSON.stringify(node)} is not a lab node name (node-1 … node-${MAX_NODES})`);
  return i;
}

export const stateDir = (lab: string): string => join(STATE_ROOT, checkLabName(lab));
/**
 * Where the workload running in `netns` answers probe requests (lab/net/workload.ts). A dot
 * directory: every other name under STATE_ROOT that fits LAB_NAME is taken for a lab.
 */
export const probeSocketPath = (netns: string): string => join(STATE_ROOT, '.probe', `${netns}.sock`);
/** Checks the node name first (nodeIndex throws on a malformed one). */
export const nodeStateDir = (lab: string, node: string): string => {
  nodeIndex(node);
  return join(stateDir(lab), node);
};
export const ovsDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'ovs');
export const ipamDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'ipam');
/** host-local store of the eks flavour's IPv4 egress addresses (IPv6-only labs). */
export const egressIpamDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'ipam-egress-v4');
export const cniConfDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'cni');
export const conflistPath = (lab: string, node: string): string => join(cniConfDir(lab, node), '10-lab.conflist');
export const cniCacheDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'cni-cache');
export const sluiceSocketPath = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'cni.sock');
export const cniBinDir = (lab: string): string => join(stateDir(lab), 'cni-bin');
export const podsStateDir = (lab: string): string => join(stateDir(lab), 'pods');
export const extStateDir = (lab: string): string => join(stateDir(lab), 'ext');

export const vpcNetns = (lab: string): string => `${checkLabName(lab)}-vpc`;
export const extNetns = (lab: string): string => `${checkLabName(lab)}-ext`;
export const nodeNetns = (lab: string, node: string): string => {
  nodeIndex(node);
  return `${checkLabName(lab)}-${node}`;
};
export const netnsPath = (netns: string): string => join(NETNS_DIR, netns);

/** Node i's uplink address, which is also its Kubernetes InternalIP. */
export const nodeIP = (node: string): string => `192.168.77.${10 + nodeIndex(node)}`;
export const podCidr = (node: string): string => `10.10.${nodeIndex(node)}.0/24`;
export const podRange = (node: string): { subnet: string; rangeStart: string; rangeEnd: string } => {
  const i = nodeIndex(node);
  return { subnet: `10.10.${i}.0/24`, rangeStart: `10.10.${i}.2`, rangeEnd: `10.10.${i}.254` };
};

/** Which address families the lab gives its nodes and Pods (`sluice-lab up --ip-family`). */
export type IpFamily = 'ipv4' | 'ipv6' | 'dual';
export const IP_FAMILIES: readonly IpFamily[] = ['ipv4', 'ipv6', 'dual'];
export const hasIPv4 = (f: IpFamily): boolean => f !== 'ipv6';
export const hasIPv6 = (f: IpFamily): boolean => f !== 'ipv4';

/** The VPC's IPv6 subnet: the router, the nodes and the external host, as in IPv4 (::1, ::<10+i>, ::fa). */
export const VPC_SUBNET6 = 'fd00:77::/64';
export const VPC_ROUTER_IPV6 = 'fd00:77::1';
export const EXT_IPV6 = 'fd00:77::fa';
/** Node i's IPv6 uplink address, also its IPv6 InternalIP. */
export const nodeIPv6 = (node: string): string => `fd00:77::${(10 + nodeIndex(node)).toString(16)}`;
export const podCidr6 = (node: string): string => `fd00:10:${nodeIndex(node).toString(16)}::/64`;
export const podRange6 = (node: string): { subnet: string; rangeStart: string; rangeEnd: string } => {
  const p = `fd00:10:${nodeIndex(node).toString(16)}::`;
  return { subnet: `${p}/64`, rangeStart: `${p}2`, rangeEnd: `${p}fe` };
};

/** Where the eks flavour's IPv4 egress path for IPv6-only Pods takes its addresses (as the VPC CNI). */
export const EGRESS_V4_RANGE = '169.254.172.0/22';

/** The Service ClusterIP ranges: IPv4 as before, the IPv6 one for labs whose Pods have IPv6. */
export const SERVICE_CIDR = '10.96.0.0/16';
export const SERVICE_CIDR6 = 'fd00:96::/112';
/** What the lab's API server allocates from, primary family first: IPv6-only Pods get IPv6 Services. */
export const serviceCIDRs = (f: IpFamily): string[] => (f === 'ipv4' ? [SERVICE_CIDR] : f === 'dual' ? [SERVICE_CIDR, SERVICE_CIDR6] : [SERVICE_CIDR6]);

/** 8 hex chars of sha256("<podNamespace>/<podName>"): keeps netns names short. */
export const podHash = (namespace: string, name: string): string =>
  createHash('sha256').update(`${namespace}/${name}`).digest('hex').slice(0, 8);
export const podNetns = (lab: string, namespace: string, name: string): string =>
  `${checkLabName(lab)}-p-${podHash(namespace, name)}`;

/** Host-side veth name the AWS VPC CNI style uses: "eni" + 11 hex of sha1(containerId). */
export const eniName = (containerId: string): string =>
  `eni${createHash('sha1').update(containerId).digest('hex').slice(0, 11)}`;

/** Parses a lab-owned netns name; null when the name is not one the lab would create. */
export function parseLabNetns(netns: string): { lab: string; role: 'vpc' | 'ext' | 'node' | 'pod'; rest: string } | null {
  const m = /^([a-z][a-z0-9]{0,5})-(vpc|ext|node-[1-9]\d{0,2}|p-[0-9a-f]{8})$/.exec(netns);
  if (!m) return null;
  const rest = m[2]!;
  const role = rest === 'vpc' ? 'vpc' : rest === 'ext' ? 'ext' : rest.startsWith('node-') ? 'node' : 'pod';
  return { lab: m[1]!, role, rest };
}

/** Repository root (works from lab/net/*.ts under ts-node and from dist/lab/net/*.js). */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'lab'))) return dir;
    dir = dirname(dir);
  }
  throw new Error(`cannot find the repository root above ${fileURLToPath(import.meta.url)}`);
}

/** Compiled entry points of the lab's helper processes (workload, prober, eks-sim). */
export function distScript(name: 'workload' | 'prober' | 'eks-sim'): string {
  const file = join(repoRoot(), 'dist', 'lab', 'net', `${name}.js`);
  if (!existsSync(file)) throw new Error(`${file} is missing: build first (npx tsc -p tsconfig.json)`);
  return file;
}
