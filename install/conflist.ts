/**
 * Chaining sluice into a node's CNI configuration (pure): sluice goes right after the primary
 * (the first plugin, which creates the interface) and the chained plugins right behind it that
 * give the Pod more interfaces (POD_INTERFACE_PLUGINS), so that sluice sees every path out of the
 * Pod in its prevResult, and later chained plugins (portmap, bandwidth) still see the primary's
 * result. Idempotent, and reversible by `unchainSluice`.
 */
import { DEFAULT_SOCKET_PATH } from '../cni/protocol.js';

export const SLUICE_PLUGIN_TYPE = 'sluice-cni';

/**
 * Plugin types that add an interface to the Pod after the primary: the AWS VPC CNI's `egress-cni`
 * (called `egress-v4-cni` before v1.13) gives IPv6-only Pods `v4if0`, an IPv4 path out SNATed to
 * the node. sluice must come after them, or that path would bypass the bridge.
 */
export const POD_INTERFACE_PLUGINS: ReadonlySet<string> = new Set(['egress-cni', 'egress-v4-cni']);

/** sluice's entry settings: the socket path only when it is not the plugin's default (one form for the installer and the agent). */
export function sluiceEntry(socketPath?: string): Record<string, unknown> {
  return socketPath && socketPath !== DEFAULT_SOCKET_PATH ? { socketPath } : {};
}

export interface PluginConf {
  type: string;
  [key: string]: unknown;
}

export interface ConfList {
  cniVersion: string;
  name: string;
  plugins: PluginConf[];
  [key: string]: unknown;
}

export class ConfListError extends Error {
  override name = 'ConfListError';
}

/** Accepts a .conflist or a single-plugin .conf document and returns a conflist. */
export function toConfList(doc: unknown, source = 'CNI config'): ConfList {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new ConfListError(`${source}: not a JSON object`);
  const d = doc as Record<string, unknown>;
  if (typeof d.name !== 'string' || !d.name) throw new ConfListError(`${source}: missing "name"`);
  if (typeof d.cniVersion !== 'string' || !d.cniVersion) throw new ConfListError(`${source}: missing "cniVersion"`);
  if (Array.isArray(d.plugins)) {
    if (d.plugins.length === 0) throw new ConfListError(`${source}: "plugins" is empty: no primary CNI to chain after`);
    d.plugins.forEach((p, i) => {
      if (typeof p !== 'object' || p === null || typeof (p as PluginConf).type !== 'string') {
        throw new ConfListError(`${source}: plugins[${i}] has no "type"`);
      }
    });
    return d as ConfList;
  }
  if (typeof d.type !== 'string') throw new ConfListError(`${source}: neither "plugins" nor "type": not a CNI network configuration`);
  const { name, cniVersion, ...plugin } = d;
  return { cniVersion: cniVersion as string, name: name as string, plugins: [plugin as PluginConf] };
}

/**
 * The conflist with sluice chained after the primary and the interface plugins behind it; an
 * existing sluice entry is replaced in place when no interface plugin comes after it, else moved.
 */
export function chainSluice(list: ConfList, sluice: Record<string, unknown> = {}): ConfList {
  const entry: PluginConf = { ...sluice, type: SLUICE_PLUGIN_TYPE };
  const without = list.plugins.filter((p) => p.type !== SLUICE_PLUGIN_TYPE);
  if (without.length === 0) throw new ConfListError('the conflist has only sluice in it: no primary CNI to chain after');
  const at = list.plugins.findIndex((p) => p.type === SLUICE_PLUGIN_TYPE);
  const lastInterfacePlugin = list.plugins.reduce((last, p, i) => (POD_INTERFACE_PLUGINS.has(p.type) ? i : last), 0);
  if (at > lastInterfacePlugin) return { ...list, plugins: list.plugins.map((p, i) => (i === at ? entry : p)) };
  let pos = 1;
  while (pos < without.length && POD_INTERFACE_PLUGINS.has(without[pos]!.type)) pos++;
  return { ...list, plugins: [...without.slice(0, pos), entry, ...without.slice(pos)] };
}

export function unchainSluice(list: ConfList): ConfList {
  return { ...list, plugins: list.plugins.filter((p) => p.type !== SLUICE_PLUGIN_TYPE) };
}

export function isChained(list: ConfList): boolean {
  return list.plugins.some((p) => p.type === SLUICE_PLUGIN_TYPE);
}
