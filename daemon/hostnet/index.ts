/**
 * Host networking of Antrea's policy-only mode, with its names and numbers: Pod host routes moved onto
 * antrea-gw0, the `antrea_service` route table 300 with its default route and permanent
 * neighbour, the fwmark rule, and sluice's iptables chains. Everything here converges:
 * calling it again changes nothing unless something else removed or altered it.
 *
 * IPv6 has the same shapes (`ip -6 rule`, table 300's IPv6 default route and neighbour, the
 * ip6tables chains) whenever the kernel has IPv6, as the bridge always carries both families. The
 * gateway itself needs IPv6 on (a link-local address: the source of the host's solicitations for
 * Pods), no Duplicate Address Detection (the addresses sluice gives it are the node's own, and DAD
 * would hold them tentative) and no router advertisements taken from the bridge.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { IptablesRules, SERVICE_MARK } from './iptables.js';
import { ip6Commands, type IptablesCommands, DEFAULT_IPTABLES } from './iptables-backend.js';
import { canonicalIp } from '../policy/cidr.js';
import { type Family, familyOfText, Rtnl } from './netlink.js';
import { VethGuard } from './vethguard.js';

export { NetnsHelper } from './netns-helper.js';
export { findHostVethByNsenter, type HostVeth, PodLinks, podInterfaceIPv4, repointPodNeighbours } from './podlink.js';
export { GUARD_TABLE, VethGuard } from './vethguard.js';
export { resolveIptables, type IptablesCommands } from './iptables-backend.js';

export const SERVICE_ROUTE_TABLE = 300;
export const SERVICE_ROUTE_TABLE_NAME = 'antrea_service';
export const SERVICE_GATEWAY_IP = '169.254.253.1';
/** Table 300's IPv6 next hop: an address no host has (ULA fc01::/16), resolved by the permanent neighbour. */
export const SERVICE_GATEWAY_IPV6 = 'fc01::aabb:ccdd:eeff';
export const SERVICE_GATEWAY_MAC = '12:34:56:78:9a:bc';
const SERVICE_GATEWAY: Record<Family, string> = { 4: SERVICE_GATEWAY_IP, 6: SERVICE_GATEWAY_IPV6 };
/** The gateway's IPv6 settings (net.ipv6.conf.<gateway>.*) and why. */
export const GATEWAY_IPV6_SYSCTLS = { disable_ipv6: '0', accept_dad: '0', accept_ra: '0', forwarding: '1' } as const;
export const SERVICE_RULE_PRIORITY = 300;
export const DEFAULT_RT_TABLES_FILE = '/etc/iproute2/rt_tables.d/sluice.conf';

export interface HostNetworkOptions {
  gateway: string;
  serviceCIDRs: string[];
  /** Added to the gateway as /32 so host-originated traffic to Pods has a valid source. */
  nodeIP?: string | undefined;
  /** The same for IPv6 (/128). */
  nodeIPv6?: string | undefined;
  /** Where the kernel's IPv6 settings live; default /proc/sys/net/ipv6 (absent: no IPv6 here). */
  ipv6SysctlDir?: string;
  /** Where to register the table name; null skips it (e.g. the lab, which must not touch /etc). */
  rtTablesFile?: string | null;
  /** The iptables backend's binaries (resolveIptables); default: plain iptables. */
  iptables?: IptablesCommands;
  log: Logger;
}

export class HostNetwork {
  private readonly iptables: IptablesRules;
  private readonly ip6tables: IptablesRules;
  /** The netdev datapath's veth guard (its nf_tables socket opens on first use). */
  private readonly guard = new VethGuard();

  private constructor(
    private readonly opts: HostNetworkOptions,
    private readonly rtnl: Rtnl,
  ) {
    const commands = opts.iptables ?? DEFAULT_IPTABLES;
    this.iptables = new IptablesRules({ gateway: opts.gateway, serviceCIDRs: opts.serviceCIDRs, commands });
    this.ip6tables = new IptablesRules({ gateway: opts.gateway, serviceCIDRs: opts.serviceCIDRs, family: 6, commands: ip6Commands(commands) });
  }

  /** New Service ranges (the cluster's ServiceCIDRs changed): the next ensure writes their rules. */
  setServiceCIDRs(cidrs: string[]): void {
    this.iptables.setServiceCIDRs(cidrs);
    this.ip6tables.setServiceCIDRs(cidrs);
  }

  private get sysctlDir(): string {
    return this.opts.ipv6SysctlDir ?? '/proc/sys/net/ipv6';
  }

  /** The families this host has: IPv4, and IPv6 unless the kernel runs without it. */
  families(): Family[] {
    return existsSync(this.sysctlDir) ? [4, 6] : [4];
  }

  static async create(opts: HostNetworkOptions): Promise<HostNetwork> {
    return new HostNetwork(opts, new Rtnl());
  }

  get netlink(): Rtnl {
    return this.rtnl;
  }

  async close(): Promise<void> {
    this.rtnl.close();
    this.guard.close();
  }

  /** Converges the node-wide state; returns what it had to create or repair. */
  async ensureBase(): Promise<string[]> {
    const gw = this.opts.gateway;
    const done: string[] = [];
    await this.rtnl.requireLink(gw);
    const families = this.families();
    if (families.includes(6)) done.push(...(await this.ensureGatewayIPv6()));
    if (!(await this.rtnl.linkIsUp(gw))) {
      await this.rtnl.setLinkUp(gw);
      done.push(`set ${gw} up`);
    }
    const nodeIPs = { 4: this.opts.nodeIP ? `${this.opts.nodeIP}/32` : undefined, 6: this.opts.nodeIPv6 ? `${this.opts.nodeIPv6}/128` : undefined };
    const gwIndex = await this.rtnl.requireLink(gw);
    for (const family of families) {
      const cidr = nodeIPs[family];
      if (cidr && !(await this.rtnl.addresses(gw, family)).includes(canonCidr(cidr))) {
        await this.rtnl.addAddress(gw, cidr);
        done.push(`added ${cidr} to ${gw}`);
      }
      const via = SERVICE_GATEWAY[family];
      const neigh = (await this.rtnl.neighbors(gw, family)).find((n) => n.ip === via);
      if (!neigh?.permanent || neigh.mac !== SERVICE_GATEWAY_MAC) {
        await this.rtnl.replacePermanentNeighbor(gw, via, SERVICE_GATEWAY_MAC);
        done.push(`neighbour ${via} lladdr ${SERVICE_GATEWAY_MAC} dev ${gw} permanent`);
      }
      const route = (await this.rtnl.routes(SERVICE_ROUTE_TABLE, family)).find((r) => r.dst === 'default');
      if (!route || route.via !== via || route.ifindex !== gwIndex) {
        await this.rtnl.replaceRoute({
          dst: 'default', family, dev: gw, via, onlink: true, table: SERVICE_ROUTE_TABLE,
        });
        done.push(`route default via ${via} dev ${gw} onlink table ${SERVICE_ROUTE_TABLE}`);
      }
      const rules = await this.rtnl.rules(family);
      const hasRule = rules.some(
        (r) => r.priority === SERVICE_RULE_PRIORITY && r.fwmark === SERVICE_MARK && r.fwmask === SERVICE_MARK
          && r.iifname === gw && r.table === SERVICE_ROUTE_TABLE,
      );
      if (!hasRule) {
        await this.rtnl.addRule({
          priority: SERVICE_RULE_PRIORITY, fwmark: SERVICE_MARK, fwmask: SERVICE_MARK, iifname: gw, table: SERVICE_ROUTE_TABLE,
        }, family);
        done.push(`${family === 6 ? 'IPv6 ' : ''}rule ${SERVICE_RULE_PRIORITY}: fwmark 0x800/0x800 iif ${gw} lookup ${SERVICE_ROUTE_TABLE}`);
      }
    }
    done.push(...(await this.iptables.ensure()));
    if (families.includes(6)) done.push(...(await this.ip6tables.ensure()).map((r) => r.replace(/^iptables/, 'ip6tables')));
    if (await this.registerTableName()) done.push(`registered table name ${SERVICE_ROUTE_TABLE_NAME}`);
    return done;
  }

  /** The gateway's IPv6 settings, then its link-local address (the kernel makes it once IPv6 is on). */
  private async ensureGatewayIPv6(): Promise<string[]> {
    const gw = this.opts.gateway;
    const done: string[] = [];
    for (const [key, want] of Object.entries(GATEWAY_IPV6_SYSCTLS)) {
      const file = `${this.sysctlDir}/conf/${gw}/${key}`;
      const now = (await readFile(file, 'utf8').catch(() => undefined))?.trim();
      if (now === undefined) throw new Error(`${file} is missing: ${gw} has no IPv6 settings`);
      if (now !== want) {
        await writeFile(file, want);
        done.push(`net.ipv6.conf.${gw}.${key} = ${want}`);
      }
    }
    if (!(await this.rtnl.addresses(gw, 6)).some((a) => a.startsWith('fe80:'))) {
      const mac = await this.rtnl.linkMac(gw);
      if (mac) {
        const ll = `${eui64LinkLocal(mac)}/64`;
        await this.rtnl.addAddress(gw, ll);
        done.push(`added ${ll} to ${gw}`);
      }
    }
    return done;
  }

  private async registerTableName(): Promise<boolean> {
    const file = this.opts.rtTablesFile === undefined ? DEFAULT_RT_TABLES_FILE : this.opts.rtTablesFile;
    if (!file) return false;
    const line = `${SERVICE_ROUTE_TABLE} ${SERVICE_ROUTE_TABLE_NAME}\n`;
    const current = await readFile(file, 'utf8').catch(() => undefined);
    if (current === line) return false;
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, line);
    return true;
  }

  /** Routes each Pod IP via the gateway instead of the veth (replace: never a moment without a route). */
  async movePodRoutes(ips: string[], _hostVeth: string): Promise<void> {
    for (const ip of ips) await this.rtnl.replaceRoute({ dst: hostRoute(ip), dev: this.opts.gateway, scope: 'link' });
  }

  /** Puts the Pod routes back on the veth, as the primary CNI left them (rollback and DEL). */
  async restorePodRoutes(ips: string[], hostVeth: string): Promise<void> {
    const vethExists = (await this.rtnl.linkIndex(hostVeth)) !== undefined;
    for (const ip of ips) {
      if (vethExists) {
        await this.rtnl.replaceRoute({ dst: hostRoute(ip), dev: hostVeth, scope: 'link' });
      } else {
        await this.rtnl.deleteRoute({ dst: hostRoute(ip), dev: this.opts.gateway }).catch(() => undefined);
      }
    }
  }

  /** Problems with the Pod's routes, empty when each IP routes via the gateway. */
  async checkPodRoutes(ips: string[]): Promise<string[]> {
    return (await this.podRouteProblems([ips]))[0]!;
  }

  /** checkPodRoutes for many Pods at once (one route dump per family): the problems of each, in order. */
  async podRouteProblems(pods: string[][]): Promise<string[][]> {
    const gwIndex = await this.rtnl.requireLink(this.opts.gateway);
    const routes = new Map<Family, Map<string, Awaited<ReturnType<Rtnl['routes']>>[number]>>();
    const out: string[][] = [];
    for (const ips of pods) {
      const problems: string[] = [];
      for (const ip of ips) {
        const family = familyOfText(ip);
        if (!routes.has(family)) routes.set(family, new Map((await this.rtnl.routes(undefined, family)).map((r) => [r.dst, r])));
        const r = routes.get(family)!.get(canonCidr(hostRoute(ip)));
        if (!r) problems.push(`no host route for ${ip}`);
        else if (r.ifindex !== gwIndex) problems.push(`host route for ${ip} does not point at ${this.opts.gateway}`);
      }
      out.push(problems);
    }
    return out;
  }

  async isolateHostVeth(ifName: string): Promise<void> {
    await this.guard.guard(ifName);
  }

  async releaseHostVeth(ifName: string): Promise<void> {
    await this.guard.unguard(ifName);
  }

  /** Host veths that carry the netdev ingress drop. */
  async isolatedVeths(): Promise<string[]> {
    return this.guard.guarded();
  }

  /** Periodic convergence: node-wide state plus every attached Pod's routes. */
  async resync(pods: { ips: string[]; hostVeth?: string }[]): Promise<string[]> {
    const repairs = await this.ensureBase();
    const problems = await this.podRouteProblems(pods.map((p) => p.ips));
    for (const [i, pod] of pods.entries()) repairs.push(...(await this.repairPodRoutes(pod, problems[i]!)));
    return repairs;
  }

  /** Moves a Pod's routes back onto the gateway when `problems` (from podRouteProblems) says they are not. */
  async repairPodRoutes(pod: { ips: string[]; hostVeth?: string }, problems: string[]): Promise<string[]> {
    if (problems.length === 0) return [];
    await this.movePodRoutes(pod.ips, pod.hostVeth ?? '');
    return problems.map((p) => `${p}: restored`);
  }

  /**
   * Uninstall: removes the iptables chains and jumps, the fwmark rule, table 300's default route,
   * the permanent neighbour and the table-name file this agent wrote. Idempotent; returns what it
   * removed (empty when nothing was left).
   */
  async removeBase(): Promise<string[]> {
    const gw = this.opts.gateway;
    const done: string[] = [];
    if (await this.iptables.remove()) done.push('iptables: ANTREA-MANGLE, ANTREA-RAW, ANTREA-FORWARD chains and their jumps');
    const families = this.families();
    if (families.includes(6) && (await this.ip6tables.remove())) done.push('ip6tables: ANTREA-MANGLE, ANTREA-RAW, ANTREA-FORWARD chains and their jumps');
    const gwIndex = await this.rtnl.linkIndex(gw);
    for (const family of families) {
      const v = family === 6 ? 'IPv6 ' : '';
      while ((await this.rtnl.rules(family)).some((r) => r.priority === SERVICE_RULE_PRIORITY && r.table === SERVICE_ROUTE_TABLE)) {
        await this.rtnl.deleteRule({ priority: SERVICE_RULE_PRIORITY, table: SERVICE_ROUTE_TABLE }, family);
        done.push(`${v}ip rule ${SERVICE_RULE_PRIORITY} (lookup ${SERVICE_ROUTE_TABLE})`);
      }
      if (gwIndex === undefined) continue;
      const via = SERVICE_GATEWAY[family];
      for (const r of await this.rtnl.routes(SERVICE_ROUTE_TABLE, family)) {
        if (r.dst !== 'default' || r.via !== via || r.ifindex !== gwIndex) continue;
        await this.rtnl.deleteRoute({ dst: 'default', family, dev: gw, via, table: SERVICE_ROUTE_TABLE });
        done.push(`route default via ${via} dev ${gw} table ${SERVICE_ROUTE_TABLE}`);
      }
      if ((await this.rtnl.neighbors(gw, family)).some((n) => n.ip === via)) {
        await this.rtnl.deleteNeighbor(gw, via);
        done.push(`neighbour ${via} dev ${gw}`);
      }
    }
    const file = this.opts.rtTablesFile === undefined ? DEFAULT_RT_TABLES_FILE : this.opts.rtTablesFile;
    // Only the file exactly as registerTableName() writes it: never someone else's table names.
    if (file && (await readFile(file, 'utf8').catch(() => undefined)) === `${SERVICE_ROUTE_TABLE} ${SERVICE_ROUTE_TABLE_NAME}\n`) {
      await rm(file, { force: true });
      done.push(`table name file ${file}`);
    }
    return done;
  }
}

/** A Pod address's host route: /32 or /128. */
const hostRoute = (ip: string): string => `${ip}/${familyOfText(ip) === 6 ? 128 : 32}`;

/** A CIDR with its address in canonical text (how the kernel's dumps print it back). */
function canonCidr(cidr: string): string {
  const [ip, len] = cidr.split('/');
  return `${canonicalIp(ip!) ?? ip}/${len}`;
}

/** The modified EUI-64 link-local address of a MAC (RFC 4291 appendix A), as the kernel derives it. */
export function eui64LinkLocal(mac: string): string {
  const b = mac.split(':').map((h) => parseInt(h, 16));
  const eui = [b[0]! ^ 0x02, b[1]!, b[2]!, 0xff, 0xfe, b[3]!, b[4]!, b[5]!];
  const groups = [0, 2, 4, 6].map((i) => ((eui[i]! << 8) | eui[i + 1]!).toString(16));
  return canonicalIp(`fe80::${groups.join(':')}`)!;
}
