/**
 * IP address and CIDR arithmetic (IPv4 and IPv6) for ipBlock peers: parsing and validation the
 * way the API server does it, containment, and "cidr minus except" as non-overlapping CIDRs.
 * Addresses are handled as bigint so both families share one code path; the evaluator uses the
 * precomputed [start, end] ranges.
 */

export interface ParsedCidr {
  family: 4 | 6;
  /** Network address (host bits cleared). */
  start: bigint;
  /** Last address in the block. */
  end: bigint;
  prefix: number;
}

const IPV4_RE = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Parses an IPv4 or IPv6 address; undefined if it is not one. */
export function parseIp(text: string): { family: 4 | 6; value: bigint } | undefined {
  if (typeof text !== 'string') return undefined;
  if (IPV4_RE.test(text)) {
    let v = 0n;
    for (const part of text.split('.')) v = (v << 8n) | BigInt(Number(part));
    return { family: 4, value: v };
  }
  return parseIpv6(text);
}

function parseIpv6(text: string): { family: 6; value: bigint } | undefined {
  if (!/^[0-9a-fA-F:.]+$/.test(text) || !text.includes(':')) return undefined;
  let head = text;
  let tailV4: bigint | undefined;
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    const v4 = parseIp(text.slice(lastColon + 1));
    if (v4?.family !== 4) return undefined;
    tailV4 = v4.value;
    // replace the dotted quad with two placeholder groups, filled in below
    head = text.slice(0, lastColon + 1) + '0:0';
  }
  const doubleColon = head.split('::');
  if (doubleColon.length > 2) return undefined;
  const groupsOf = (s: string) => (s === '' ? [] : s.split(':'));
  const left = groupsOf(doubleColon[0]!);
  const right = doubleColon.length === 2 ? groupsOf(doubleColon[1]!) : [];
  const missing = 8 - left.length - right.length;
  if (doubleColon.length === 2 ? missing < 1 : missing !== 0) return undefined;
  const groups = [...left, ...Array(doubleColon.length === 2 ? missing : 0).fill('0'), ...right];
  let v = 0n;
  for (const g of groups) {
    if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
    v = (v << 16n) | BigInt(parseInt(g, 16));
  }
  if (tailV4 !== undefined) v = (v & ~0xffffffffn) | tailV4;
  return { family: 6, value: v };
}

/** Parses "addr/prefix" (host bits allowed, as net.ParseCIDR does); undefined if invalid. */
export function parseCidr(text: string): ParsedCidr | undefined {
  if (typeof text !== 'string') return undefined;
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const ip = parseIp(text.slice(0, slash));
  const prefixText = text.slice(slash + 1);
  if (!ip || !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = Number(prefixText);
  const bits = ip.family === 4 ? 32 : 128;
  if (prefix > bits) return undefined;
  const hostBits = BigInt(bits - prefix);
  const start = (ip.value >> hostBits) << hostBits;
  return { family: ip.family, start, end: start + (1n << hostBits) - 1n, prefix };
}

export function formatIp(family: 4 | 6, value: bigint): string {
  if (family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join('.');
  }
  // IPv4-mapped addresses print with their dotted quad, as Go's netip.Addr.String does.
  if (value >> 32n === 0xffffn) return `::ffff:${formatIp(4, value & 0xffffffffn)}`;
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((value >> BigInt(i * 16)) & 0xffffn).toString(16));
  // compress the longest run of zero groups
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i > 1) { best = i; bestLen = j - i; }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** An IPv6 address in ::ffff:0:0/96 (an IPv4 address written as IPv6). */
export function isIpv4Mapped(ip: { family: 4 | 6; value: bigint }): boolean {
  return ip.family === 6 && ip.value >> 32n === 0xffffn;
}

/**
 * The canonical text of an address (IPv6 compressed and lower case, RFC 5952, as Go prints it),
 * so that "fd00:0::1" and "FD00::1" name the same endpoint; undefined when `text` is no address.
 */
export function canonicalIp(text: string): string | undefined {
  // An IPv4 address the parser takes is already canonical (no leading zeros, no other form), and
  // nearly every Pod address is one: the controller's initial lists canonicalize 150 000 of them.
  if (typeof text === 'string' && IPV4_RE.test(text)) return text;
  const ip = parseIp(text);
  return ip ? formatIp(ip.family, ip.value) : undefined;
}

/** The address family of an address text, or undefined when it is none. */
export function ipFamily(text: string): 4 | 6 | undefined {
  return parseIp(text)?.family;
}

export function formatCidr(c: ParsedCidr): string {
  return `${formatIp(c.family, c.start)}/${c.prefix}`;
}

export function cidrContainsIp(c: ParsedCidr, ip: { family: 4 | 6; value: bigint }): boolean {
  return c.family === ip.family && ip.value >= c.start && ip.value <= c.end;
}

/** True when `inner` lies inside `outer` (equal counts as inside). */
export function cidrWithin(inner: ParsedCidr, outer: ParsedCidr): boolean {
  return inner.family === outer.family && inner.start >= outer.start && inner.end <= outer.end;
}

/**
 * `cidr` minus every `except` block, as a sorted list of non-overlapping CIDRs (the form the
 * datapath needs: OVS matches prefixes, not "A but not B").
 */
export function subtractCidrs(cidr: ParsedCidr, excepts: ParsedCidr[]): ParsedCidr[] {
  let pieces: ParsedCidr[] = [cidr];
  for (const ex of excepts) {
    if (ex.family !== cidr.family) continue;
    const next: ParsedCidr[] = [];
    for (const p of pieces) next.push(...subtractOne(p, ex));
    pieces = next;
  }
  return pieces.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
}

function subtractOne(block: ParsedCidr, ex: ParsedCidr): ParsedCidr[] {
  if (ex.end < block.start || ex.start > block.end) return [block];
  if (ex.start <= block.start && ex.end >= block.end) return [];
  // split the block in halves until the halves are either disjoint from or inside `ex`
  const bits = block.family === 4 ? 32 : 128;
  const halfSize = 1n << BigInt(bits - block.prefix - 1);
  const lower: ParsedCidr = { family: block.family, start: block.start, end: block.start + halfSize - 1n, prefix: block.prefix + 1 };
  const upper: ParsedCidr = { family: block.family, start: block.start + halfSize, end: block.end, prefix: block.prefix + 1 };
  return [...subtractOne(lower, ex), ...subtractOne(upper, ex)];
}

/** An IPv4 address as a uint32 number (fast path for the evaluator), or -1 when not IPv4. */
export function ipv4ToNumber(text: string): number {
  // hand-rolled (no regex): this runs for every Pod when groups are computed
  let value = 0;
  let octet = -1;
  let dots = 0;
  let digits = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 46) {
      if (octet < 0 || ++dots > 3) return -1;
      value = value * 256 + octet;
      octet = -1;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      if (digits > 0 && octet === 0) return -1; // no leading zeros
      octet = Math.max(0, octet) * 10 + (c - 48);
      if (++digits > 3 || octet > 255) return -1;
    } else {
      return -1;
    }
  }
  if (dots !== 3 || octet < 0) return -1;
  return value * 256 + octet;
}
