/** The per-node CNI network configuration list (pure). */
import { chainSluice } from '../../install/conflist.js';
import { cniBinDir, EGRESS_V4_RANGE, egressIpamDir, hasIPv4, hasIPv6, type IpFamily, ipamDir, nodeIP, podRange, podRange6, sluiceSocketPath } from './names.js';

export type PrimaryFlavour = 'ptp' | 'eks';
export const PRIMARY_FLAVOURS: readonly PrimaryFlavour[] = ['ptp', 'eks'];
export const NETWORK_NAME = 'lab';
export const CNI_VERSION = '1.0.0';

export type PluginConf = { type: string } & Record<string, unknown>;
export interface Conflist {
  cniVersion: string;
  name: string;
  plugins: PluginConf[];
}

/** host-local with one range (and default route) per family of the lab. */
function hostLocalIpam(lab: string, node: string, family: IpFamily): Record<string, unknown> {
  return {
    type: 'host-local',
    ranges: [...(hasIPv4(family) ? [[podRange(node)]] : []), ...(hasIPv6(family) ? [[podRange6(node)]] : [])],
    routes: [...(hasIPv4(family) ? [{ dst: '0.0.0.0/0' }] : []), ...(hasIPv6(family) ? [{ dst: '::/0' }] : [])],
    dataDir: ipamDir(lab, node),
  };
}

export function primaryPlugin(lab: string, node: string, flavour: PrimaryFlavour, family: IpFamily = 'ipv4'): PluginConf {
  switch (flavour) {
    case 'ptp':
      return { type: 'ptp', ipMasq: false, mtu: 1500, ipam: hostLocalIpam(lab, node, family) };
    case 'eks':
      return { type: 'eks-sim', mtu: 1500, ipam: hostLocalIpam(lab, node, family) };
    default:
      throw new Error(`primary flavour ${JSON.stringify(flavour)} is not one of ${PRIMARY_FLAVOURS.join(', ')}`);
  }
}

export const sluicePlugin = (lab: string, node: string): PluginConf => ({ type: 'sluice-cni', socketPath: sluiceSocketPath(lab, node) });

/**
 * The VPC CNI's `egress-cni` as IPv6 clusters chain it: an IPv4 path out for IPv6-only Pods,
 * addresses from 169.254.172.0/22 (its own host-local store), SNAT to the node's IPv4 address.
 */
export function egressV4Plugin(lab: string, node: string): PluginConf {
  return {
    type: 'egress-cni',
    mtu: 1500,
    nodeIP: nodeIP(node),
    ipam: { type: 'host-local', ranges: [[{ subnet: EGRESS_V4_RANGE }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: egressIpamDir(lab, node) },
  };
}

/** The primary's plugins: the eks flavour on IPv6-only labs chains its IPv4 egress plugin. */
export function primaryPlugins(lab: string, node: string, flavour: PrimaryFlavour, family: IpFamily = 'ipv4'): PluginConf[] {
  const primary = primaryPlugin(lab, node, flavour, family);
  return flavour === 'eks' && family === 'ipv6' ? [primary, egressV4Plugin(lab, node)] : [primary];
}

/** `[primary…]`, or with sluice chained where the installer chains it (after the primary's egress plugin). */
export function nodeConflist(lab: string, node: string, flavour: PrimaryFlavour, withSluice: boolean, family: IpFamily = 'ipv4'): Conflist {
  const list = { cniVersion: CNI_VERSION, name: NETWORK_NAME, plugins: primaryPlugins(lab, node, flavour, family) };
  if (!withSluice) return list;
  const { type: _type, ...entry } = sluicePlugin(lab, node);
  return chainSluice(list, entry) as Conflist;
}

/** Where a plugin type is looked up (CNI_PATH has a single directory in the lab). */
export const pluginPath = (lab: string, type: string): string => `${cniBinDir(lab)}/${type}`;
