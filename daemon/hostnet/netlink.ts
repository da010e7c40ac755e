/**
 * A small rtnetlink wrapper for the host-side state sluice manages (links, addresses, routes,
 * rules, neighbours), with the `netlink` package's sharp edges handled in one place
 * (netlink 0.3.0, measured on Node 20):
 * - a large receive buffer and ONE request in flight at a time (more than ~256 in flight aborts the process);
 * - request flags set explicitly (the package defaults to 0);
 * - table ids above 255 passed as attrs.table with data.table = 252 (RT_TABLE_COMPAT);
 * - `onlink` as the raw RTNH_F_ONLINK flag; scope-link routes deleted with scope NOWHERE;
 * - dumps filtered here (the kernel does not filter them).
 * It works in the calling process's network namespace. Both address families: an address's text
 * decides which (IPv4 dotted quad or IPv6); dumps take the family they list.
 */
import { createRtNetlink, FlagsNew, type RtNetlinkSocket } from 'netlink';
import { canonicalIp, formatIp, parseIp } from '../policy/cidr.js';

const AF_INET = 2;
const AF_INET6 = 10;
export type Family = 4 | 6;
const af = (family: Family): number => (family === 4 ? AF_INET : AF_INET6);
const RTNH_F_ONLINK = 4;
const RT_TABLE_MAIN = 254;
const RT_TABLE_COMPAT = 252;

export interface RouteSpec {
  /** "10.1.0.11/32" or "default" */
  dst: string;
  dev: string;
  via?: string | undefined;
  onlink?: boolean;
  table?: number;
  scope?: 'link' | 'universe';
  /** For "default": which family's default route (other destinations say it themselves). */
  family?: Family;
}

export interface RouteEntry {
  dst: string;
  ifindex?: number | undefined;
  via?: string | undefined;
  table: number;
  scope: string;
}

export interface RuleEntry {
  priority?: number;
  fwmark?: number | undefined;
  fwmask?: number | undefined;
  iifname?: string | undefined;
  table: number;
}

export interface NeighborEntry {
  ip: string;
  ifindex: number;
  mac?: string | undefined;
  permanent: boolean;
}

export function ipToBuffer(ip: string): Buffer {
  const parsed = parseIp(ip);
  if (!parsed) throw new Error(`not an IPv4 or IPv6 address: ${ip}`);
  const bytes = parsed.family === 4 ? 4 : 16;
  const out = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) out[i] = Number((parsed.value >> BigInt(8 * (bytes - 1 - i))) & 0xffn);
  return out;
}

/** The address in a 4- or 16-byte buffer, IPv6 in canonical text. */
export function bufferToIp(b: Buffer): string {
  if (b.length === 4) return [...b].join('.');
  let v = 0n;
  for (const x of b) v = (v << 8n) | BigInt(x);
  return formatIp(6, v);
}

/** 4 or 6 for an address or CIDR text ("default" is IPv4's unless `family` says otherwise). */
export function familyOfText(text: string, family: Family = 4): Family {
  if (text === 'default') return family;
  const ip = text.split('/')[0]!;
  const parsed = parseIp(ip);
  if (!parsed) throw new Error(`not an IPv4 or IPv6 address: ${text}`);
  return parsed.family;
}

export function macToBuffer(mac: string): Buffer {
  return Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
}

export function bufferToMac(b: Buffer): string {
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

export class Rtnl {
  private readonly sock: RtNetlinkSocket;
  private queue: Promise<unknown> = Promise.resolve();

  constructor() {
    this.sock = createRtNetlink({ recvBufferSize: 4 << 20 } as never);
  }

  close(): void {
    this.sock.socket.close();
  }

  /** Runs netlink requests one at a time (see the module comment). */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * One link, asked for by name or index (RTM_GETLINK for that link alone, not a dump of every
   * link: a node with hundreds of Pod veths answers in the same time); undefined when there is none.
   */
  private async link(which: { name: string } | { index: number }) {
    try {
      const [l] = await this.serial(() => ('name' in which ? this.sock.getLink({}, { ifname: which.name }) : this.sock.getLink({ index: which.index })));
      return l;
    } catch (err) {
      if (/\bENODEV\b/.test((err as Error).message)) return undefined;
      throw err;
    }
  }

  async linkIndex(name: string): Promise<number | undefined> {
    return (await this.link({ name }))?.data.index;
  }

  async linkName(index: number): Promise<string | undefined> {
    return (await this.link({ index }))?.attrs.ifname;
  }

  async requireLink(name: string): Promise<number> {
    const index = await this.linkIndex(name);
    if (index === undefined) throw new Error(`network interface ${name} not found`);
    return index;
  }

  async linkMac(name: string): Promise<string | undefined> {
    const mac = (await this.link({ name }))?.attrs.address;
    return mac ? bufferToMac(Buffer.from(mac)) : undefined;
  }

  async linkIsUp(name: string): Promise<boolean> {
    return Boolean((await this.link({ name }))?.data.flags?.up);
  }

  async setLinkUp(name: string): Promise<void> {
    const index = await this.requireLink(name);
    await this.serial(() => this.sock.setLink({ index, flags: { up: true }, change: { up: true } }));
  }

  /** The interface's addresses as CIDRs (IPv6 in canonical text), of one family or both. */
  async addresses(name: string, family?: Family): Promise<string[]> {
    const index = await this.requireLink(name);
    const addrs = await this.serial(() => this.sock.getAddresses());
    return addrs
      .filter((a) => a.data.index === index && (family === undefined ? a.data.family === AF_INET || a.data.family === AF_INET6 : a.data.family === af(family)))
      .filter((a) => a.attrs.address)
      .map((a) => `${bufferToIp(a.attrs.address!)}/${a.data.prefixlen}`);
  }

  /** Adds (or replaces) an address; IPv6 addresses skip Duplicate Address Detection (`nodad`). */
  async addAddress(name: string, cidr: string): Promise<void> {
    const index = await this.requireLink(name);
    const [ip, len] = cidr.split('/');
    const family = familyOfText(ip!);
    const scope = family === 6 && canonicalIp(ip!)!.startsWith('fe80:') ? 'LINK' : 'UNIVERSE';
    await this.serial(() =>
      this.sock.newAddress(
        { family: af(family), prefixlen: Number(len), index, scope: scope as never, ...(family === 6 ? { flags: { nodad: true, permanent: true } } : {}) },
        family === 4 ? { address: ipToBuffer(ip!), local: ipToBuffer(ip!) } : { address: ipToBuffer(ip!) },
        { flags: FlagsNew.CREATE | FlagsNew.REPLACE },
      ),
    );
  }

  /** Routes of one table (default: main) and family (default: IPv4). */
  async routes(table = RT_TABLE_MAIN, family: Family = 4): Promise<RouteEntry[]> {
    const all = await this.serial(() => this.sock.getRoutes({ family: af(family) }));
    return all
      .filter((r) => (r.attrs.table ?? r.data.table) === table && r.data.family === af(family))
      .map((r) => ({
        dst: r.attrs.dst ? `${bufferToIp(r.attrs.dst)}/${r.data.dstLen}` : 'default',
        ifindex: r.attrs.oif,
        via: r.attrs.gateway ? bufferToIp(r.attrs.gateway) : undefined,
        table,
        scope: String(r.data.scope),
      }));
  }

  async replaceRoute(spec: RouteSpec): Promise<void> {
    await this.routeRequest(spec, 'replace');
  }

  async deleteRoute(spec: RouteSpec): Promise<void> {
    await this.routeRequest(spec, 'delete');
  }

  private async routeRequest(spec: RouteSpec, op: 'replace' | 'delete'): Promise<void> {
    const oif = await this.requireLink(spec.dev);
    const table = spec.table ?? RT_TABLE_MAIN;
    const isDefault = spec.dst === 'default';
    const family = familyOfText(spec.dst, spec.family ?? (spec.via ? familyOfText(spec.via) : 4));
    const [ip, len] = isDefault ? [family === 4 ? '0.0.0.0' : '::', '0'] : spec.dst.split('/');
    // IPv6 routes are all of universe scope (the kernel ignores any other).
    const scope = op === 'delete' ? 'NOWHERE' : spec.scope === 'link' && family === 4 ? 'LINK' : 'UNIVERSE';
    const data = {
      family: af(family),
      dstLen: Number(len ?? (family === 4 ? 32 : 128)),
      table: table > 255 ? RT_TABLE_COMPAT : table,
      protocol: 'BOOT' as const,
      scope: scope as never,
      type: 'UNICAST' as const,
      ...(spec.onlink ? { flags: { __unknown: RTNH_F_ONLINK } as never } : {}),
    };
    const attrs = {
      ...(isDefault ? {} : { dst: ipToBuffer(ip!) }),
      oif,
      ...(spec.via ? { gateway: ipToBuffer(spec.via) } : {}),
      table,
    };
    if (op === 'replace') {
      await this.serial(() => this.sock.newRoute(data, attrs, { flags: FlagsNew.CREATE | FlagsNew.REPLACE }));
    } else {
      await this.serial(() => this.sock.delRoute(data, attrs));
    }
  }

  async rules(family: Family = 4): Promise<RuleEntry[]> {
    const all = await this.serial(() => this.sock.getRules({ family: af(family) }));
    return all.map((r) => ({
      ...(r.attrs.priority !== undefined ? { priority: r.attrs.priority } : {}),
      fwmark: r.attrs.fwmark,
      fwmask: r.attrs.fwmask,
      iifname: r.attrs.iifname,
      table: r.attrs.table ?? r.data.table ?? 0,
    }));
  }

  async addRule(rule: Required<Pick<RuleEntry, 'priority' | 'table'>> & RuleEntry, family: Family = 4): Promise<void> {
    await this.serial(() =>
      this.sock.newRule(
        { family: af(family), table: rule.table > 255 ? RT_TABLE_COMPAT : rule.table, action: 'toTbl' as never },
        {
          priority: rule.priority,
          table: rule.table,
          ...(rule.fwmark !== undefined ? { fwmark: rule.fwmark, fwmask: rule.fwmask ?? 0xffffffff } : {}),
          ...(rule.iifname ? { iifname: rule.iifname } : {}),
        },
        { flags: FlagsNew.CREATE | FlagsNew.EXCL },
      ),
    );
  }

  async deleteRule(rule: Required<Pick<RuleEntry, 'priority' | 'table'>>, family: Family = 4): Promise<void> {
    await this.serial(() =>
      this.sock.delRule(
        { family: af(family), table: rule.table > 255 ? RT_TABLE_COMPAT : rule.table, action: 'toTbl' as never },
        { priority: rule.priority, table: rule.table },
      ),
    );
  }

  async neighbors(dev: string, family: Family = 4): Promise<NeighborEntry[]> {
    const ifindex = await this.requireLink(dev);
    const all = await this.serial(() => this.sock.getNeighbors({ family: af(family) }));
    return all
      .filter((n) => n.data.ifindex === ifindex && n.data.family === af(family) && n.attrs.dst)
      .map((n) => ({
        ip: bufferToIp(n.attrs.dst!),
        ifindex,
        mac: n.attrs.lladdr ? bufferToMac(n.attrs.lladdr) : undefined,
        permanent: Boolean(n.data.state?.permanent),
      }));
  }

  async deleteNeighbor(dev: string, ip: string): Promise<void> {
    const ifindex = await this.requireLink(dev);
    await this.serial(() => this.sock.delNeighbor({ family: af(familyOfText(ip)), ifindex }, { dst: ipToBuffer(ip) }));
  }

  async replacePermanentNeighbor(dev: string, ip: string, mac: string): Promise<void> {
    const ifindex = await this.requireLink(dev);
    await this.serial(() =>
      this.sock.newNeighbor(
        { family: af(familyOfText(ip)), ifindex, state: { permanent: true } },
        { dst: ipToBuffer(ip), lladdr: macToBuffer(mac) },
        { flags: FlagsNew.CREATE | FlagsNew.REPLACE },
      ),
    );
  }
}
