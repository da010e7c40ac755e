/**
 * Pod-side look-ups. The Pod's veth is found with rtnetlink from the host namespace, without
 * entering the Pod's namespace: the namespace gets an id in the host's (RTM_GETNSID on an fd of its
 * path), the Pod's interface is read through that id (IFLA_TARGET_NETNSID, Linux 4.20+), and its
 * peer is the host link whose own link-netnsid points back at the Pod. Kernels without target
 * namespace ids fall back to `nsenter ip link`. What needs the Pod's namespace itself (TX offload)
 * is netns-helper.ts's.
 */
import { closeSync, openSync } from 'node:fs';
import { execa } from 'execa';
import { createNetlink, type NetlinkSocket } from 'netlink';
import { Rtnl } from './netlink.js';
import { attr, cstr, cstring, macText, parseAttrs } from './netlink-wire.js';

export interface HostVeth {
  hostIfName: string;
  hostIfIndex: number;
  /** MAC of the Pod's own interface (CNI_IFNAME inside the netns). */
  podMac: string;
}

const NETLINK_ROUTE = 0;
const RTM = { GETLINK: 18, NEWNSID: 88, GETNSID: 90 } as const;
const IFLA = { ADDRESS: 1, IFNAME: 3, LINK: 5, LINK_NETNSID: 37, TARGET_NETNSID: 46 } as const;
const NETNSA = { NSID: 1, FD: 3 } as const;
const NSID_NOT_ASSIGNED = -1;

const s32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32LE(n, 0);
  return b;
};

/** struct ifinfomsg: family, type, index, flags, change (16 bytes). */
function ifinfomsg(index = 0): Buffer {
  const b = Buffer.alloc(16);
  b.writeInt32LE(index, 4);
  return b;
}

interface LinkInfo {
  index: number;
  name?: string | undefined;
  mac?: string | undefined;
  link?: number | undefined;
  linkNetnsid?: number | undefined;
}

function parseLink(data: Buffer): LinkInfo {
  const a = parseAttrs(data, 16);
  const mac = a.get(IFLA.ADDRESS);
  const name = a.get(IFLA.IFNAME);
  return {
    index: data.readInt32LE(4),
    name: cstring(name),
    mac: macText(mac),
    link: a.get(IFLA.LINK)?.readUInt32LE(0),
    linkNetnsid: a.get(IFLA.LINK_NETNSID)?.readInt32LE(0),
  };
}

/** The kernel's errno name of a rejected request ("Request rejected: ENODEV" from the netlink package). */
const errnoOf = (err: unknown): string | undefined => {
  const e = err as { code?: unknown; message?: unknown };
  if (typeof e.code === 'string' && /^E[A-Z]+$/.test(e.code)) return e.code;
  return typeof e.message === 'string' ? /\b(E[A-Z]{3,})\b/.exec(e.message)?.[1] : undefined;
};

/** Finds Pods' veths over one rtnetlink socket, one request at a time. */
export class PodLinks {
  private sock?: NetlinkSocket | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** False once the kernel refused target namespace ids: nsenter from then on. */
  private targetNsid = true;

  private socket(): NetlinkSocket {
    if (!this.sock) {
      this.sock = createNetlink(NETLINK_ROUTE);
      this.sock.unref();
    }
    return this.sock;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async request(type: number, body: Buffer): Promise<Buffer | undefined> {
    const [msgs] = await this.socket().request(type, [body], { timeout: 5000 });
    return msgs[0]?.data;
  }

  /** The id the host namespace has for the namespace at `netnsPath`, assigned if it has none. */
  private async nsid(netnsPath: string): Promise<number> {
    const fd = openSync(netnsPath, 'r');
    try {
      const ask = () => this.request(RTM.GETNSID, Buffer.concat([Buffer.alloc(4), attr(NETNSA.FD, s32(fd))]));
      let reply = await ask();
      let id = reply ? parseAttrs(reply, 4).get(NETNSA.NSID)?.readInt32LE(0) : undefined;
      if (id === undefined || id === NSID_NOT_ASSIGNED) {
        await this.request(RTM.NEWNSID, Buffer.concat([Buffer.alloc(4), attr(NETNSA.FD, s32(fd)), attr(NETNSA.NSID, s32(NSID_NOT_ASSIGNED))])).catch(() => undefined);
        reply = await ask();
        id = reply ? parseAttrs(reply, 4).get(NETNSA.NSID)?.readInt32LE(0) : undefined;
      }
      if (id === undefined || id === NSID_NOT_ASSIGNED) throw new Error(`the kernel gave netns ${netnsPath} no id in the host namespace`);
      return id;
    } finally {
      closeSync(fd);
    }
  }

  private async getLink(body: Buffer): Promise<LinkInfo | undefined> {
    const data = await this.request(RTM.GETLINK, body);
    return data ? parseLink(data) : undefined;
  }

  /** The host side of the Pod's veth: the peer of `ifName` inside `netnsPath`. */
  findHostVeth(netnsPath: string, ifName: string): Promise<HostVeth> {
    if (!this.targetNsid) return findHostVethByNsenter(netnsPath, ifName);
    return this.serial(async () => {
      let id: number;
      try {
        id = await this.nsid(netnsPath);
      } catch (err) {
        throw new Error(`interface ${ifName} not found in netns ${netnsPath}: ${(err as Error).message}`);
      }
      let pod: LinkInfo | undefined;
      try {
        pod = await this.getLink(Buffer.concat([ifinfomsg(), attr(IFLA.IFNAME, cstr(ifName)), attr(IFLA.TARGET_NETNSID, s32(id))]));
      } catch (err) {
        const errno = errnoOf(err);
        if (errno === 'ENODEV') throw new Error(`interface ${ifName} not found in netns ${netnsPath}`);
        if (errno === 'EINVAL' || errno === 'EOPNOTSUPP') {
          this.targetNsid = false;
          return findHostVethByNsenter(netnsPath, ifName);
        }
        throw new Error(`interface ${ifName} in netns ${netnsPath}: ${(err as Error).message}`);
      }
      // The kernel reports IFLA_LINK only for a link with a peer (a veth's); its index may equal the
      // Pod interface's own, since each namespace numbers its links from 1.
      if (!pod || pod.link === undefined || pod.link === 0) {
        throw new Error(`${ifName} in ${netnsPath} is not a veth with a peer in the host namespace`);
      }
      let host: LinkInfo | undefined;
      try {
        host = await this.getLink(ifinfomsg(pod.link));
      } catch (err) {
        if (errnoOf(err) !== 'ENODEV') throw err;
      }
      // The host link with that index must be the veth whose peer is in the Pod's namespace: an
      // index alone could name an unrelated host link when the peer lives in a third namespace.
      if (!host?.name || host.linkNetnsid !== id || host.link !== pod.index) {
        throw new Error(`the host side (ifindex ${pod.link}) of ${ifName} in ${netnsPath} does not exist in the host namespace`);
      }
      return { hostIfName: host.name, hostIfIndex: host.index, podMac: pod.mac ?? '' };
    });
  }

  close(): void {
    this.sock?.close();
    this.sock = undefined;
  }
}

async function inNetns(netnsPath: string, cmd: string[]): Promise<string> {
  const r = await execa('nsenter', [`--net=${netnsPath}`, ...cmd], { reject: false });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(' ')} in ${netnsPath}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  return r.stdout;
}

/** The same look-up by running `ip link` in the Pod's namespace (kernels before 4.20). */
export async function findHostVethByNsenter(netnsPath: string, ifName: string, rtnl?: Rtnl): Promise<HostVeth> {
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

/**
 * Points the Pod's neighbour entries that hold `fromMac` (the bridge's virtual MAC, which answered
 * the Pod's ARP for its gateway) at `toMac` (its host veth's own MAC), as STALE: used at once and
 * then confirmed by the Pod's kernel. Once the veth leaves the bridge, frames to the virtual MAC
 * are not for the host veth and are dropped, and a Pod whose entry is REACHABLE would keep sending
 * to it for up to a minute. Returns the addresses re-pointed.
 */
export async function repointPodNeighbours(netnsPath: string, ifName: string, fromMac: string, toMac: string): Promise<string[]> {
  const entries = JSON.parse((await inNetns(netnsPath, ['ip', '-j', 'neigh', 'show', 'dev', ifName])) || '[]') as { dst?: string; lladdr?: string }[];
  const stale = entries.filter((e) => e.dst && e.lladdr?.toLowerCase() === fromMac.toLowerCase()).map((e) => e.dst!);
  for (const dst of stale) await inNetns(netnsPath, ['ip', 'neigh', 'replace', dst, 'lladdr', toMac, 'dev', ifName, 'nud', 'stale']);
  return stale;
}

/** The IPv4 addresses (no prefix length) of interface `ifName` inside the Pod's namespace. */
export async function podInterfaceIPv4(netnsPath: string, ifName: string): Promise<string[]> {
  let out: string;
  try {
    out = await inNetns(netnsPath, ['ip', '-j', '-4', 'addr', 'show', 'dev', ifName]);
  } catch (err) {
    throw new Error(`interface ${ifName} not found in netns ${netnsPath}: ${(err as Error).message}`);
  }
  const links = JSON.parse(out || '[]') as { addr_info?: { family?: string; local?: string }[] }[];
  return links.flatMap((l) => (l.addr_info ?? []).filter((a) => a.family === 'inet' && a.local).map((a) => a.local!));
}
