/**
 * Route, rule and neighbour change notifications from the kernel (rtnetlink multicast groups), as
 * structured events: what `ip monitor route rule neigh` prints, without a child process or a text
 * format to parse. IPv4 and IPv6. It works in the calling process's network namespace.
 */
import { readFileSync } from 'node:fs';
import { createNetlink, type NetlinkSocket } from 'netlink';
import { ipv6ToString } from '../packet.js';
import { cstring, macText, parseAttrs } from './netlink-wire.js';

const NETLINK_ROUTE = 0;
const AF_INET = 2;
const AF_INET6 = 10;
const RTM = { NEWROUTE: 24, DELROUTE: 25, NEWNEIGH: 28, DELNEIGH: 29, NEWRULE: 32, DELRULE: 33 } as const;
/** rtnetlink multicast groups (RTNLGRP_*). */
const GROUP = { NEIGH: 3, IPV4_ROUTE: 7, IPV4_RULE: 8, IPV6_ROUTE: 11, IPV6_RULE: 19 } as const;
const RTA = { DST: 1, OIF: 4, GATEWAY: 5, TABLE: 15 } as const;
const FRA = { IIFNAME: 3, PRIORITY: 6, FWMARK: 10, TABLE: 15, FWMASK: 16 } as const;
const NDA = { DST: 1, LLADDR: 2 } as const;
export const NUD_PERMANENT = 0x80;

export interface RouteEvent {
  kind: 'route';
  deleted: boolean;
  family: 4 | 6;
  dst: string;
  prefixLen: number;
  table: number;
  ifindex?: number | undefined;
  via?: string | undefined;
}

export type RtEvent =
  | RouteEvent
  | { kind: 'rule'; deleted: boolean; family: 4 | 6; priority?: number | undefined; table: number; fwmark?: number | undefined; fwmask?: number | undefined; iif?: string | undefined }
  | { kind: 'neigh'; deleted: boolean; family: 4 | 6; ip: string; ifindex: number; state: number; lladdr?: string | undefined };

function ipText(b: Buffer | undefined, family: 4 | 6): string | undefined {
  if (!b) return undefined;
  if (family === 4 && b.length >= 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  if (family === 6 && b.length >= 16) return ipv6ToString(b.subarray(0, 16));
  return undefined;
}

const familyOf = (af: number): 4 | 6 | undefined => (af === AF_INET ? 4 : af === AF_INET6 ? 6 : undefined);
const u32 = (b: Buffer | undefined) => (b && b.length >= 4 ? b.readUInt32LE(0) : undefined);

/** One rtnetlink notification as an event (undefined: not a route, rule or neighbour of IPv4/IPv6). */
export function decodeRtEvent(type: number, data: Buffer): RtEvent | undefined {
  if (data.length < 12) return undefined;
  const family = familyOf(data[0]!);
  if (!family) return undefined;
  switch (type) {
    case RTM.NEWROUTE:
    case RTM.DELROUTE: {
      // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags(4)
      const attrs = parseAttrs(data, 12);
      const dst = ipText(attrs.get(RTA.DST), family) ?? (family === 4 ? '0.0.0.0' : '::');
      return {
        kind: 'route', deleted: type === RTM.DELROUTE, family, dst, prefixLen: data[1]!,
        table: u32(attrs.get(RTA.TABLE)) ?? data[4]!, ifindex: u32(attrs.get(RTA.OIF)), via: ipText(attrs.get(RTA.GATEWAY), family),
      };
    }
    case RTM.NEWRULE:
    case RTM.DELRULE: {
      // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags(4)
      const attrs = parseAttrs(data, 12);
      const iif = attrs.get(FRA.IIFNAME);
      return {
        kind: 'rule', deleted: type === RTM.DELRULE, family, priority: u32(attrs.get(FRA.PRIORITY)), table: u32(attrs.get(FRA.TABLE)) ?? data[4]!,
        fwmark: u32(attrs.get(FRA.FWMARK)), fwmask: u32(attrs.get(FRA.FWMASK)), iif: cstring(iif),
      };
    }
    case RTM.NEWNEIGH:
    case RTM.DELNEIGH: {
      // struct ndmsg: family, pad1, pad2, ifindex(4), state(2), flags, type
      const attrs = parseAttrs(data, 12);
      const ip = ipText(attrs.get(NDA.DST), family);
      if (!ip) return undefined;
      return { kind: 'neigh', deleted: type === RTM.DELNEIGH, family, ip, ifindex: data.readInt32LE(4), state: data.readUInt16LE(8), lladdr: macText(attrs.get(NDA.LLADDR)) };
    }
    default:
      return undefined;
  }
}

/** `ip monitor`-like text of an event, for logs. `ifName` names interface indexes it can. */
export function describeRtEvent(ev: RtEvent, ifName: (ifindex: number) => string | undefined = () => undefined): string {
  const dev = (i: number | undefined) => (i === undefined ? '' : ` dev ${ifName(i) ?? `if${i}`}`);
  const what = ev.deleted ? 'Deleted ' : '';
  switch (ev.kind) {
    case 'route': {
      const dst = ev.prefixLen === 0 ? 'default' : `${ev.dst}/${ev.prefixLen}`;
      return `${what}route ${dst}${ev.via ? ` via ${ev.via}` : ''}${dev(ev.ifindex)} table ${ev.table}`;
    }
    case 'rule': {
      const mark = ev.fwmark !== undefined ? ` fwmark 0x${ev.fwmark.toString(16)}${ev.fwmask !== undefined ? `/0x${ev.fwmask.toString(16)}` : ''}` : '';
      return `${what}rule${ev.priority !== undefined ? ` ${ev.priority}:` : ''}${mark}${ev.iif ? ` iif ${ev.iif}` : ''} lookup ${ev.table}`;
    }
    case 'neigh':
      return `${what}neighbour ${ev.ip}${dev(ev.ifindex)}${ev.lladdr ? ` lladdr ${ev.lladdr}` : ''}${ev.state & NUD_PERMANENT ? ' PERMANENT' : ''}`;
  }
}

/** Subscribes to route, rule and neighbour changes of both families; `close()` ends it. */
export function watchRtEvents(onEvent: (ev: RtEvent) => void, onError: (err: Error) => void): { close(): void } {
  let sock: NetlinkSocket;
  try {
    // A large buffer: a Pod storm or a flushed table is a burst of notifications.
    sock = createNetlink(NETLINK_ROUTE, { ref: true, recvBufferSize: 4 << 20 } as never);
    for (const g of Object.values(GROUP)) sock.addMembership(g);
  } catch (err) {
    onError(err as Error);
    return { close: () => undefined };
  }
  sock.on('message', (msgs) => {
    for (const m of msgs) {
      const ev = decodeRtEvent(m.type, m.data);
      if (ev) onEvent(ev);
    }
  });
  // ENOBUFS: the kernel dropped notifications (a burst): the caller must assume anything changed.
  sock.on('error', (err) => onError(err));
  return { close: () => sock.close() };
}

/** The interface index of `name` in this namespace (undefined: no such interface). */
export function ifindexOf(name: string): number | undefined {
  try {
    const n = Number(readFileSync(`/sys/class/net/${name}/ifindex`, 'utf8'));
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}
