/** Building a whole lab network: topology, per-node OVS, CNI plugins and conflists, the external host's servers. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PRIMARY_FLAVOURS, type PrimaryFlavour } from './cni-config.js';
import { installCniPlugins, sluiceCniBinary, writeNodeConflist } from './cni-install.js';
import {
  DEFAULT_LAB, EXT_IP, EXT_PUBLIC_IP, IP_FAMILIES, type IpFamily, LabConfigError, checkLabName, conflistPath, extNetns, extStateDir, hasIPv6, nodeIP,
  nodeIPv6, nodeName, nodeNetns, podCidr, podCidr6, stateDir, vpcNetns,
} from './names.js';
import { startNodeOvs } from './ovs.js';
import { destroyLab } from './teardown.js';
import { createTopology } from './topology.js';
import { startWorkload } from './workload-process.js';

/** Ports the external host serves, TCP and UDP each. */
export const EXT_PORTS = [80, 81];

export interface LabOptions {
  name?: string;
  nodes?: number;
  primary?: PrimaryFlavour;
  /** Chain sluice-cni after the primary plugin. */
  chainSluice?: boolean;
  /** Start each node's private OVS (default true). */
  ovs?: boolean;
  /** The Pods' (and wires') address families (default ipv4). */
  ipFamily?: IpFamily;
}

export interface LabNode {
  name: string;
  netns: string;
  ip: string;
  podCidr: string;
  /** With IPv6: the node's IPv6 address and IPv6 Pod CIDR. */
  ipv6?: string;
  podCidr6?: string;
  conflist: string;
}

export interface LabInfo {
  name: string;
  primary: PrimaryFlavour;
  chainSluice: boolean;
  /** Absent in labs made before families existed: ipv4. */
  ipFamily?: IpFamily;
  stateDir: string;
  vpcNetns: string;
  ext: { netns: string; ip: string; publicIp: string };
  nodes: LabNode[];
}

const infoFile = (lab: string) => join(stateDir(lab), 'lab.json');

export function readLabInfo(lab: string): LabInfo | null {
  try {
    return JSON.parse(readFileSync(infoFile(lab), 'utf8')) as LabInfo;
  } catch {
    return null;
  }
}

/** Creates (or converges) a lab. A lab that did not exist before is removed again if this fails. */
export async function createLab(opts: LabOptions = {}): Promise<LabInfo> {
  const name = checkLabName(opts.name ?? DEFAULT_LAB);
  const primary = opts.primary ?? 'ptp';
  const nodes = opts.nodes ?? 2;
  const chainSluice = opts.chainSluice ?? false;
  const ipFamily = opts.ipFamily ?? 'ipv4';
  if (!IP_FAMILIES.includes(ipFamily)) throw new LabConfigError(`ipFamily must be one of ${IP_FAMILIES.join(', ')}, got ${JSON.stringify(ipFamily)}`);
  if (!PRIMARY_FLAVOURS.includes(primary)) throw new LabConfigError(`primary must be one of ${PRIMARY_FLAVOURS.join(', ')}, got ${JSON.stringify(primary)}`);
  const previous = readLabInfo(name);
  if (previous && previous.primary !== primary) {
    throw new LabConfigError(`lab ${name} already runs with primary ${previous.primary}; destroy it first to switch to ${primary}`);
  }
  if (previous && (previous.ipFamily ?? 'ipv4') !== ipFamily) {
    throw new LabConfigError(`lab ${name} already runs with ip family ${previous.ipFamily ?? 'ipv4'}; destroy it first to switch to ${ipFamily}`);
  }
  const fresh = !existsSync(stateDir(name));
  if (chainSluice && !existsSync(sluiceCniBinary())) {
    throw new LabConfigError(`chainSluice needs the sluice-cni plugin at ${sluiceCniBinary()}: build it first`);
  }
  try {
    await createTopology({ lab: name, nodes, ipFamily });
    installCniPlugins(name);
    const nodeList = Array.from({ length: nodes }, (_, k) => nodeName(k + 1));
    await Promise.all(
      nodeList.map(async (node) => {
        writeNodeConflist(name, node, primary, chainSluice, ipFamily);
        if (opts.ovs ?? true) await startNodeOvs(name, node);
      }),
    );
    mkdirSync(extStateDir(name), { recursive: true });
    await startWorkload(extNetns(name), { tcp: EXT_PORTS, udp: EXT_PORTS }, join(extStateDir(name), 'workload.pid'), join(extStateDir(name), 'workload.log'));
    const info: LabInfo = {
      name, primary, chainSluice, ipFamily, stateDir: stateDir(name), vpcNetns: vpcNetns(name),
      ext: { netns: extNetns(name), ip: EXT_IP, publicIp: EXT_PUBLIC_IP },
      nodes: nodeList.map((node) => ({
        name: node, netns: nodeNetns(name, node), ip: nodeIP(node), podCidr: podCidr(node),
        ...(hasIPv6(ipFamily) ? { ipv6: nodeIPv6(node), podCidr6: podCidr6(node) } : {}),
        conflist: conflistPath(name, node),
      })),
    };
    writeFileSync(infoFile(name), JSON.stringify(info, null, 2) + '\n');
    return info;
  } catch (err) {
    if (fresh) await destroyLab(name).catch(() => undefined);
    throw err;
  }
}
