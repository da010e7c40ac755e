/**
 * Conntrack entries of the bridge's zone as ovs-vswitchd lists them (`dpctl/dump-conntrack
 * zone=65520`), and the tuple that removes one (`dpctl/flush-conntrack zone=65520 TUPLE`). Pure
 * text in and out; both datapaths (userspace and kernel) print the same form:
 *
 *   tcp,orig=(src=10.1.1.2,dst=10.1.2.3,sport=40000,dport=80),reply=(...),zone=65520,mark=32,protoinfo=(...)
 *   icmpv6,orig=(src=fd00::1,dst=fd00::2,id=7,type=128,code=0),reply=(...),zone=65520
 */
export type CtProtocol = 'TCP' | 'UDP' | 'SCTP' | 'ICMP';

/** One connection, by its original-direction tuple (who opened it, to what). */
export interface CtEntry {
  protocol: CtProtocol;
  family: 4 | 6;
  src: string;
  dst: string;
  /** TCP/UDP/SCTP ports. */
  sport?: number;
  dport?: number;
  /** ICMP/ICMPv6 echo: identifier, type and code of the original direction. */
  icmp?: { id: number; type: number; code: number };
  zone: number;
  mark: number;
}

const PROTOCOLS: Record<string, { protocol: CtProtocol; number: number }> = {
  tcp: { protocol: 'TCP', number: 6 },
  udp: { protocol: 'UDP', number: 17 },
  sctp: { protocol: 'SCTP', number: 132 },
  icmp: { protocol: 'ICMP', number: 1 },
  icmpv6: { protocol: 'ICMP', number: 58 },
};

/** `key=value` pairs of one parenthesised tuple. */
function fields(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of text.split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) out.set(part.slice(0, eq), part.slice(eq + 1));
  }
  return out;
}

const int = (v: string | undefined): number | undefined => (v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined);

/**
 * The entries of a dump; lines of other protocols (GRE, IGMP…) and lines that do not parse are
 * counted in `skipped`, never guessed at.
 */
export function parseConntrackDump(text: string): { entries: CtEntry[]; skipped: number } {
  const entries: CtEntry[] = [];
  let skipped = 0;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line) continue;
    const e = parseLine(line);
    if (e) entries.push(e);
    else skipped++;
  }
  return { entries, skipped };
}

function parseLine(line: string): CtEntry | undefined {
  const m = /^([a-z0-9]+),orig=\(([^)]*)\),reply=\(([^)]*)\)(.*)$/.exec(line);
  if (!m) return undefined;
  const proto = PROTOCOLS[m[1]!];
  if (!proto) return undefined;
  const orig = fields(m[2]!);
  const rest = fields(m[4]!.replace(/,protoinfo=\(.*\)$/, ''));
  const src = orig.get('src');
  const dst = orig.get('dst');
  if (!src || !dst) return undefined;
  const family = src.includes(':') ? 6 : 4;
  if (dst.includes(':') !== (family === 6)) return undefined;
  const zone = int(rest.get('zone')) ?? 0;
  const mark = int(rest.get('mark')) ?? 0;
  if (proto.protocol === 'ICMP') {
    const id = int(orig.get('id'));
    const type = int(orig.get('type'));
    const code = int(orig.get('code'));
    if (id === undefined || type === undefined || code === undefined) return undefined;
    if ((proto.number === 58) !== (family === 6)) return undefined;
    return { protocol: 'ICMP', family, src, dst, icmp: { id, type, code }, zone, mark };
  }
  const sport = int(orig.get('sport'));
  const dport = int(orig.get('dport'));
  if (sport === undefined || dport === undefined) return undefined;
  return { protocol: proto.protocol, family, src, dst, sport, dport, zone, mark };
}

/** The IP protocol number of an entry. */
export function protocolNumber(e: CtEntry): number {
  const name = e.protocol === 'ICMP' ? (e.family === 6 ? 'icmpv6' : 'icmp') : e.protocol.toLowerCase();
  return PROTOCOLS[name]!.number;
}

/** The original-direction tuple `dpctl/flush-conntrack` takes to remove exactly this entry. */
export function flushTuple(e: CtEntry): string {
  const addr = e.family === 6 ? `ct_ipv6_src=${e.src},ct_ipv6_dst=${e.dst}` : `ct_nw_src=${e.src},ct_nw_dst=${e.dst}`;
  const l4 = e.icmp ? `icmp_type=${e.icmp.type},icmp_code=${e.icmp.code},icmp_id=${e.icmp.id}` : `ct_tp_src=${e.sport},ct_tp_dst=${e.dport}`;
  return `${addr},ct_nw_proto=${protocolNumber(e)},${l4}`;
}

/** A short text naming the connection (logs). */
export function describeEntry(e: CtEntry): string {
  const host = (ip: string) => (e.family === 6 ? `[${ip}]` : ip);
  if (e.icmp) return `${e.family === 6 ? 'icmpv6' : 'icmp'} ${e.src} -> ${e.dst} id ${e.icmp.id}`;
  return `${e.protocol.toLowerCase()} ${host(e.src)}:${e.sport} -> ${host(e.dst)}:${e.dport}`;
}
