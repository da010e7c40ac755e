/**
 * Which kernel change events mean that something removed what sluice keeps on the host, so the
 * agent repairs at once instead of at the next periodic resync (pure; the agent runs the monitors).
 * Only removals count, and only of sluice's own objects or of what holds its jumps: other components
 * (kube-proxy's iptables-restore, the primary CNI, Pod teardown) change their own objects constantly,
 * and a resync takes the exclusive lock that CNI operations wait for.
 */
import { SERVICE_ROUTE_TABLE } from './index.js';
import { desiredChains } from './iptables.js';
import type { RtEvent } from './rtevents.js';
import { GUARD_TABLE } from './vethguard.js';

const RT_TABLE_MAIN = 254;

/**
 * What sluice keeps on the host that kernel events can report removed. isRepairEvent reads each
 * field only for the events that need it (neighbour changes, the most frequent, mostly none), so a
 * caller may compute them on access.
 */
export interface KeptHostState {
  /** antrea-gw0's interface index (undefined: it does not exist, so nothing on it can be lost). */
  gatewayIfindex: number | undefined;
  /** Addresses of the attached Pods (their host routes must stay on the gateway). */
  podIps: ReadonlySet<string>;
  /** The gateway's permanent neighbours (the virtual next hop of table 300). */
  neighbours: ReadonlySet<string>;
}

/**
 * Whether a kernel event reports the removal of something sluice keeps: a route through the
 * gateway (Pod routes, table 300's default), the fwmark rule into table 300, or one of the
 * gateway's permanent neighbours; or an attached Pod's host route in the main table replaced by
 * one on another device (a replace is reported as the new route alone, with no deletion). Other
 * neighbours on the gateway come and go (garbage collection) and do not count; they are told apart
 * by address, because the kernel reports every deleted neighbour as FAILED without its lladdr.
 */
export function isRepairEvent(ev: RtEvent, kept: KeptHostState): boolean {
  const onGateway = (i: number | undefined) => {
    const gw = kept.gatewayIfindex;
    return gw !== undefined && i === gw;
  };
  switch (ev.kind) {
    case 'route':
      if (ev.deleted) return onGateway(ev.ifindex);
      return ev.table === RT_TABLE_MAIN && ev.prefixLen === (ev.family === 4 ? 32 : 128) && kept.podIps.has(ev.dst) && !onGateway(ev.ifindex);
    case 'rule':
      return ev.deleted && ev.table === SERVICE_ROUTE_TABLE && ev.fwmark !== undefined;
    case 'neigh':
      return ev.deleted && kept.neighbours.has(ev.ip) && onGateway(ev.ifindex);
  }
}

/** Tables and chains of sluice's iptables rules: its own chains and the built-in chains that jump to them. */
const KEPT_CHAINS: ReadonlyMap<string, ReadonlySet<string>> = (() => {
  const byTable = new Map<string, Set<string>>();
  for (const c of desiredChains({ gateway: 'antrea-gw0', serviceCIDRs: ['10.0.0.0/8'] })) {
    const set = byTable.get(c.table) ?? new Set<string>();
    set.add(c.chain).add(c.from);
    byTable.set(c.table, set);
  }
  return byTable;
})();

/**
 * Whether an `nft monitor` line reports the removal of part of sluice's iptables rules (iptables-nft
 * keeps them in the ip/ip6 tables nft shows) or of the veth guard table: a rule deleted from one of
 * sluice's chains or from the built-in chain that holds its jump (`iptables -t mangle -F`), such a
 * chain deleted, or the whole table (`nft flush ruleset`). The guard's per-veth chains are not: the
 * agent itself deletes one on every CNI DEL. Rules sluice rewrites itself (a repair) show up as a
 * burst of deletions too; the resync they trigger finds nothing to repair, so it settles.
 */
export function isRulesetTamperEvent(line: string): boolean {
  const m = /^delete (rule|chain|table) (ip6?|netdev) (\S+)(?: (\S+))?/.exec(line.trim());
  if (!m) return false;
  const [, what, family, table, chain] = m;
  if (family === 'netdev') return table === GUARD_TABLE && what === 'table';
  const chains = KEPT_CHAINS.get(table!);
  if (!chains) return false;
  return what === 'table' || chains.has(chain!);
}
