/**
 * Host networking of Antrea's policy-only mode, with its names and numbers: Pod host routes moved onto
 * antrea-gw0, the `antrea_service` route table 300 with its default route and permanent
 * neighbour, the fwmark rule, and sluice's iptables chains. Everything here converges:
 * calling it again changes nothing unless something else removed or altered it.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { IptablesRules, SERVICE_MARK } from './iptables.js';
import type { IptablesCommands } from './iptables-backend.js';
import { Rtnl } from './netlink.js';
import { guardVeth, unguardVeth } from './vethguard.js';

export { disablePodTxOffload, findHostVethByNsenter, type HostVeth, PodLinks, repointPodNeighbours } from './podlink.js';
export { guardedVeths, removeGuardTable } from './vethguard.js';
export { resolveIptables, type IptablesCommands } from './iptables-backend.js';

export const SERVICE_ROUTE_TABLE = 300;
export const SERVICE_ROUTE_TABLE_NAME = 'antrea_service';
export const SERVICE_GATEWAY_IP = '169.254.253.1';
export const SERVICE_GATEWAY_MAC = '12:34:56:78:9a:bc';
export const SERVICE_RULE_PRIORITY = 300;
export const DEFAULT_RT_TABLES_FILE = '/etc/iproute2/rt_tables.d/sluice.conf';

export interface HostNetworkOptions {
  gateway: string;
  serviceCIDRs: string[];
  /** Added to the gateway as /32 so host-originated traffic to Pods has a valid source. */
  nodeIP?: string | undefined;
  /** Where to register the table name; null skips it (e.g. the lab, which must not touch /etc). */
  rtTablesFile?: string | null;
  /** The iptables backend's binaries (resolveIptables); default: plain iptables. */
  iptables?: IptablesCommands;
  log: Logger;
}

export class HostNetwork {
  private readonly iptables: IptablesRules;

  private constructor(
    private readonly opts: HostNetworkOptions,
    private readonly rtnl: Rtnl,
  ) {
    this.iptables = new IptablesRules({ gateway: opts.gateway, serviceCIDRs: opts.serviceCIDRs, ...(opts.iptables ? { commands: opts.iptables } : {}) });
  }

  static async create(opts: HostNetworkOptions): Promise<HostNetwork> {
    return new HostNetwork(opts, new Rtnl());
  }

  get netlink(): Rtnl {
    return this.rtnl;
  }

  async close(): Promise<void> {
    this.rtnl.close();
  }

  /** Converges the node-wide state; returns what it had to create or repair. */
  async ensureBase(): Promise<string[]> {
    const gw = this.opts.gateway;
    const done: string[] = [];
    await this.rtnl.requireLink(gw);
    if (!(await this.rtnl.linkIsUp(gw))) {
      await this.rtnl.setLinkUp(gw);
      done.push(`set ${gw} up`);
    }
    if (this.opts.nodeIP) {
      const cidr = `${this.opts.nodeIP}/32`;
      if (!(await this.rtnl.addresses(gw)).includes(cidr)) {
        await this.rtnl.addAddress(gw, cidr);
        done.push(`added ${cidr} to ${gw}`);
      }
    }
    const gwIndex = await this.rtnl.requireLink(gw);
    const neigh = (await this.rtnl.neighbors(gw)).find((n) => n.ip === SERVICE_GATEWAY_IP);
    if (!neigh?.permanent || neigh.mac !== SERVICE_GATEWAY_MAC) {
      await this.rtnl.replacePermanentNeighbor(gw, SERVICE_GATEWAY_IP, SERVICE_GATEWAY_MAC);
      done.push(`neighbour ${SERVICE_GATEWAY_IP} lladdr ${SERVICE_GATEWAY_MAC} dev ${gw} permanent`);
    }
    const route = (await this.rtnl.routes(SERVICE_ROUTE_TABLE)).find((r) => r.dst === 'default');
    if (!route || route.via !== SERVICE_GATEWAY_IP || route.ifindex !== gwIndex) {
      await this.rtnl.replaceRoute({
        dst: 'default', dev: gw, via: SERVICE_GATEWAY_IP, onlink: true, table: SERVICE_ROUTE_TABLE,
      });
      done.push(`route default via ${SERVICE_GATEWAY_IP} dev ${gw} onlink table ${SERVICE_ROUTE_TABLE}`);
    }
    const rules = await this.rtnl.rules();
    const hasRule = rules.some(
      (r) => r.priority === SERVICE_RULE_PRIORITY && r.fwmark === SERVICE_MARK && r.fwmask === SERVICE_MARK
        && r.iifname === gw && r.table === SERVICE_ROUTE_TABLE,
    );
    if (!hasRule) {
      await this.rtnl.addRule({
        priority: SERVICE_RULE_PRIORITY, fwmark: SERVICE_MARK, fwmask: SERVICE_MARK, iifname: gw, table: SERVICE_ROUTE_TABLE,
      });
      done.push(`rule ${SERVICE_RULE_PRIORITY}: fwmark 0x800/0x800 iif ${gw} lookup ${SERVICE_ROUTE_TABLE}`);
    }
    done.push(...(await this.iptables.ensure()));
    if (await this.registerTableName()) done.push(`registered table name ${SERVICE_ROUTE_TABLE_NAME}`);
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
    for (const ip of ips) await this.rtnl.replaceRoute({ dst: `${ip}/32`, dev: this.opts.gateway, scope: 'link' });
  }

  /** Puts the Pod routes back on the veth, as the primary CNI left them (rollback and DEL). */
  async restorePodRoutes(ips: string[], hostVeth: string): Promise<void> {
    const vethExists = (await this.rtnl.linkIndex(hostVeth)) !== undefined;
    for (const ip of ips) {
      if (vethExists) {
        await this.rtnl.replaceRoute({ dst: `${ip}/32`, dev: hostVeth, scope: 'link' });
      } else {
        await this.rtnl.deleteRoute({ dst: `${ip}/32`, dev: this.opts.gateway }).catch(() => undefined);
      }
    }
  }

  /** Problems with the Pod's routes, empty when each IP routes via the gateway. */
  async checkPodRoutes(ips: string[]): Promise<string[]> {
    const gwIndex = await this.rtnl.requireLink(this.opts.gateway);
    const routes = await this.rtnl.routes();
    const problems: string[] = [];
    for (const ip of ips) {
      const r = routes.find((x) => x.dst === `${ip}/32`);
      if (!r) problems.push(`no host route for ${ip}`);
      else if (r.ifindex !== gwIndex) problems.push(`host route for ${ip} does not point at ${this.opts.gateway}`);
    }
    return problems;
  }

  async isolateHostVeth(ifName: string): Promise<void> {
    await guardVeth(ifName);
  }

  async releaseHostVeth(ifName: string): Promise<void> {
    await unguardVeth(ifName);
  }

  /** Periodic convergence: node-wide state plus every attached Pod's routes. */
  async resync(pods: { ips: string[]; hostVeth?: string }[]): Promise<string[]> {
    const repairs = await this.ensureBase();
    for (const pod of pods) {
      const problems = await this.checkPodRoutes(pod.ips);
      if (problems.length) {
        await this.movePodRoutes(pod.ips, pod.hostVeth ?? '');
        repairs.push(...problems.map((p) => `${p}: restored`));
      }
    }
    return repairs;
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
    while ((await this.rtnl.rules()).some((r) => r.priority === SERVICE_RULE_PRIORITY && r.table === SERVICE_ROUTE_TABLE)) {
      await this.rtnl.deleteRule({ priority: SERVICE_RULE_PRIORITY, table: SERVICE_ROUTE_TABLE });
      done.push(`ip rule ${SERVICE_RULE_PRIORITY} (lookup ${SERVICE_ROUTE_TABLE})`);
    }
    const gwIndex = await this.rtnl.linkIndex(gw);
    if (gwIndex !== undefined) {
      for (const r of await this.rtnl.routes(SERVICE_ROUTE_TABLE)) {
        if (r.dst !== 'default' || r.via !== SERVICE_GATEWAY_IP || r.ifindex !== gwIndex) continue;
        await this.rtnl.deleteRoute({ dst: 'default', dev: gw, via: SERVICE_GATEWAY_IP, table: SERVICE_ROUTE_TABLE });
        done.push(`route default via ${SERVICE_GATEWAY_IP} dev ${gw} table ${SERVICE_ROUTE_TABLE}`);
      }
      if ((await this.rtnl.neighbors(gw)).some((n) => n.ip === SERVICE_GATEWAY_IP)) {
        await this.rtnl.deleteNeighbor(gw, SERVICE_GATEWAY_IP);
        done.push(`neighbour ${SERVICE_GATEWAY_IP} dev ${gw}`);
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
