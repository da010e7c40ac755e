/** Pod-side look-ups done through the Pod's network namespace path (netlink has no setns). */
import { execa } from 'execa';
import { Rtnl } from './netlink.js';

export interface HostVeth {
  hostIfName: string;
  hostIfIndex: number;
  /** MAC of the Pod's own interface (CNI_IFNAME inside the netns). */
  podMac: string;
}

async function inNetns(netnsPath: string, cmd: string[]): Promise<string> {
  const r = await execa('nsenter', [`--net=${netnsPath}`, ...cmd], { reject: false });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(' ')} in ${netnsPath}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  return r.stdout;
}

/** The host side of the Pod's veth: the peer of `ifName` inside `netnsPath`. */
export async function findHostVeth(netnsPath: string, ifName: string, rtnl?: Rtnl): Promise<HostVeth> {
  let out: string;
  try {
    out = await inNetns(netnsPath, ['ip', '-j', 'link', 'show', 'dev', ifName]);
  } catch (err) {
    throw new Error(`interface ${ifName} not found in netns ${netnsPath}: ${(err as Error).message}`);
  }
  const [link] = JSON.parse(out) as { link_index?: number; address?: string; link_type?: string }[];
  if (!link || link.link_index === undefined) {
    throw new Error(`${ifName} in ${netnsPath} is not a veth with a peer in the host namespace`);
  }
  const own = rtnl ?? new Rtnl();
  try {
    const hostIfName = await own.linkName(link.link_index);
    if (!hostIfName) throw new Error(`the host side (ifindex ${link.link_index}) of ${ifName} in ${netnsPath} does not exist`);
    return { hostIfName, hostIfIndex: link.link_index, podMac: link.address ?? '' };
  } finally {
    if (!rtnl) own.close();
  }
}

/** Userspace datapath: partial TX checksums from the Pod break OVS userspace conntrack. */
export async function disablePodTxOffload(netnsPath: string, ifName: string): Promise<void> {
  await inNetns(netnsPath, ['ethtool', '-K', ifName, 'tx', 'off']);
}
