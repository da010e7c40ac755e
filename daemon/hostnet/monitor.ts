/**
 * Which kernel change events mean that something removed what sluice keeps on the host, so the
 * agent repairs at once instead of at the next periodic resync (pure; the agent runs the monitors).
 * Only removals count, and only of sluice's own objects or of what holds its jumps: other components
 * (kube-proxy's iptables-restore, the primary CNI, Pod teardown) change their own objects constantly,
 * and a resync takes the exclusive lock that CNI operations wait for.
 */
import { desiredChains } from './iptables.js';
import { GUARD_TABLE } from './vethguard.js';

/**
 * Whether an `ip -o monitor route rule neigh` line reports the removal of something sluice keeps:
 * a route via the gateway (Pod routes, table 300's default), the fwmark rule, or the permanent
 * 169.254.253.1 neighbour; or an attached Pod's host route replaced by one on another device (a
 * replace is reported as the new route alone, with no deletion). Ordinary neighbour garbage
 * collection on the gateway is not.
 */
export function isRepairEvent(line: string, gateway: string, podIps: ReadonlySet<string> = new Set()): boolean {
  const gw = new RegExp(`\\bdev ${gateway.replace(/[.]/g, '\\.')}\\b`);
  if (!line.startsWith('Deleted')) {
    const m = /^(\d+\.\d+\.\d+\.\d+)(?:\/32)? (?:via \S+ )?dev \S+/.exec(line);
    const neighbour = /\b(lladdr|REACHABLE|STALE|DELAY|PROBE|FAILED|INCOMPLETE|PERMANENT|NOARP)\b/.test(line);
    return m !== null && podIps.has(m[1]!) && !gw.test(line) && !neighbour && !/\btable\b/.test(line);
  }
  if (/fwmark/.test(line)) return /\blookup (300|antrea_service)\b/.test(line);
  if (!gw.test(line)) return false;
  if (/\blladdr\b/.test(line)) return line.includes('169.254.253.1 ');
  return true;
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
