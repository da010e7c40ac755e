/**
 * sluice's own subset of ovs-ofctl flow syntax, parsed into a typed flow (pure). The flow emitters
 * (pipeline, policy compiler, FQDN intercept, traceflow) keep writing ovs-ofctl text: that text is
 * what the content-hash cookies are computed from (so an agent restart changes no flow), what
 * sluicectl prints and what the lab suites replay with ovs-ofctl. This parser is the one place that
 * turns it into OpenFlow fields and actions for ./flowmod.ts; anything outside the subset throws a
 * FlowSyntaxError naming the token, never a guess.
 *
 * The subset: `table=`, `priority=`, `cookie=`; protocol keywords ip, ipv6, arp, tcp, udp, sctp,
 * icmp, tcp6, udp6, sctp6, icmp6; fields in FIELDS (values decimal or 0x hex, `/mask`, CIDR
 * prefixes, MACs, IPv6, ct_state flags); actions drop, goto_table, output (port or register),
 * IN_PORT, dec_ttl, set_field, load, move, ct(commit,zone,table,exec(...)), conjunction,
 * resubmit(,table), controller(max_len,userdata,meter_id).
 */
import { isIPv6 } from 'node:net';

export class FlowSyntaxError extends Error {}

/** An OXM/NXM field: its class, field code and value width. */
export interface FieldDef {
  /** The name OVS prints (ovs-fields(7)). */
  name: string;
  oxmClass: number;
  code: number;
  bytes: number;
  kind: 'int' | 'mac' | 'ipv4' | 'ipv6' | 'ct_state';
}

const OFB = 0x8000;
const NXM1 = 0x0001;
/** OVS's class for its ND extension fields (nd_reserved, nd_options_type), as ovs-ofctl encodes them. */
const ERICSSON_OXM = 0x1000;

const defs: (FieldDef & { aliases?: string[] })[] = [
  { name: 'in_port', oxmClass: OFB, code: 0, bytes: 4, kind: 'int' },
  { name: 'eth_dst', aliases: ['dl_dst', 'NXM_OF_ETH_DST'], oxmClass: OFB, code: 3, bytes: 6, kind: 'mac' },
  { name: 'eth_src', aliases: ['dl_src', 'NXM_OF_ETH_SRC'], oxmClass: OFB, code: 4, bytes: 6, kind: 'mac' },
  { name: 'eth_type', aliases: ['dl_type'], oxmClass: OFB, code: 5, bytes: 2, kind: 'int' },
  { name: 'ip_dscp', oxmClass: OFB, code: 8, bytes: 1, kind: 'int' },
  { name: 'ip_proto', aliases: ['nw_proto'], oxmClass: OFB, code: 10, bytes: 1, kind: 'int' },
  { name: 'ipv4_src', aliases: ['nw_src', 'NXM_OF_IP_SRC'], oxmClass: OFB, code: 11, bytes: 4, kind: 'ipv4' },
  { name: 'ipv4_dst', aliases: ['nw_dst', 'NXM_OF_IP_DST'], oxmClass: OFB, code: 12, bytes: 4, kind: 'ipv4' },
  { name: 'tcp_src', oxmClass: OFB, code: 13, bytes: 2, kind: 'int' },
  { name: 'tcp_dst', oxmClass: OFB, code: 14, bytes: 2, kind: 'int' },
  { name: 'udp_src', oxmClass: OFB, code: 15, bytes: 2, kind: 'int' },
  { name: 'udp_dst', oxmClass: OFB, code: 16, bytes: 2, kind: 'int' },
  { name: 'sctp_src', oxmClass: OFB, code: 17, bytes: 2, kind: 'int' },
  { name: 'sctp_dst', oxmClass: OFB, code: 18, bytes: 2, kind: 'int' },
  { name: 'icmpv4_type', oxmClass: OFB, code: 19, bytes: 1, kind: 'int' },
  { name: 'icmpv4_code', oxmClass: OFB, code: 20, bytes: 1, kind: 'int' },
  { name: 'arp_op', aliases: ['NXM_OF_ARP_OP'], oxmClass: OFB, code: 21, bytes: 2, kind: 'int' },
  { name: 'arp_spa', aliases: ['NXM_OF_ARP_SPA'], oxmClass: OFB, code: 22, bytes: 4, kind: 'ipv4' },
  { name: 'arp_tpa', aliases: ['NXM_OF_ARP_TPA'], oxmClass: OFB, code: 23, bytes: 4, kind: 'ipv4' },
  { name: 'arp_sha', aliases: ['NXM_NX_ARP_SHA'], oxmClass: OFB, code: 24, bytes: 6, kind: 'mac' },
  { name: 'arp_tha', aliases: ['NXM_NX_ARP_THA'], oxmClass: OFB, code: 25, bytes: 6, kind: 'mac' },
  { name: 'ipv6_src', aliases: ['NXM_NX_IPV6_SRC'], oxmClass: OFB, code: 26, bytes: 16, kind: 'ipv6' },
  { name: 'ipv6_dst', aliases: ['NXM_NX_IPV6_DST'], oxmClass: OFB, code: 27, bytes: 16, kind: 'ipv6' },
  { name: 'icmpv6_type', oxmClass: OFB, code: 29, bytes: 1, kind: 'int' },
  { name: 'icmpv6_code', oxmClass: OFB, code: 30, bytes: 1, kind: 'int' },
  { name: 'nd_target', aliases: ['NXM_NX_ND_TARGET'], oxmClass: OFB, code: 31, bytes: 16, kind: 'ipv6' },
  { name: 'nd_sll', aliases: ['NXM_NX_ND_SLL'], oxmClass: OFB, code: 32, bytes: 6, kind: 'mac' },
  { name: 'nd_tll', aliases: ['NXM_NX_ND_TLL'], oxmClass: OFB, code: 33, bytes: 6, kind: 'mac' },
  { name: 'nd_reserved', oxmClass: ERICSSON_OXM, code: 1, bytes: 4, kind: 'int' },
  { name: 'nd_options_type', oxmClass: ERICSSON_OXM, code: 2, bytes: 1, kind: 'int' },
  ...Array.from({ length: 16 }, (_, n) => ({ name: `reg${n}`, aliases: [`NXM_NX_REG${n}`], oxmClass: NXM1, code: n, bytes: 4, kind: 'int' as const })),
  { name: 'pkt_mark', aliases: ['NXM_NX_PKT_MARK'], oxmClass: NXM1, code: 33, bytes: 4, kind: 'int' },
  { name: 'conj_id', oxmClass: NXM1, code: 37, bytes: 4, kind: 'int' },
  { name: 'ct_state', aliases: ['NXM_NX_CT_STATE'], oxmClass: NXM1, code: 105, bytes: 4, kind: 'ct_state' },
  { name: 'ct_zone', aliases: ['NXM_NX_CT_ZONE'], oxmClass: NXM1, code: 106, bytes: 2, kind: 'int' },
  { name: 'ct_mark', aliases: ['NXM_NX_CT_MARK'], oxmClass: NXM1, code: 107, bytes: 4, kind: 'int' },
  { name: 'ct_label', aliases: ['NXM_NX_CT_LABEL'], oxmClass: NXM1, code: 108, bytes: 16, kind: 'int' },
];

const FIELDS = new Map<string, FieldDef>();
for (const { aliases, ...d } of defs) for (const n of [d.name, ...(aliases ?? [])]) FIELDS.set(n, d);

export function fieldByName(name: string): FieldDef {
  const f = FIELDS.get(name);
  if (!f) throw new FlowSyntaxError(`unsupported field "${name}"`);
  return f;
}

export interface MatchEntry {
  field: FieldDef;
  value: Buffer;
  /** Absent: exact match. */
  mask?: Buffer;
}

/** `NAME[]`, `NAME[bit]` or `NAME[lo..hi]`. */
export interface SubField {
  field: FieldDef;
  ofs: number;
  nbits: number;
}

export type Action =
  | { type: 'output'; port: number }
  | { type: 'output_reg'; src: SubField }
  | { type: 'dec_ttl' }
  | { type: 'set_field'; field: FieldDef; value: Buffer; mask?: Buffer }
  | { type: 'move'; src: SubField; dst: SubField }
  | { type: 'ct'; commit: boolean; zone?: number; table?: number; exec: Action[] }
  | { type: 'conjunction'; id: number; clause: number; nClauses: number }
  | { type: 'resubmit'; inPort?: number; table: number }
  | { type: 'controller'; maxLen?: number; userdata?: Buffer; meterId?: number };

export interface ParsedFlow {
  table: number;
  priority: number;
  cookie: bigint;
  match: MatchEntry[];
  /** Apply-actions, in order; empty = drop (unless gotoTable). */
  actions: Action[];
  gotoTable?: number;
}

export const OFPP_IN_PORT = 0xfffffff8;
const OFP_DEFAULT_PRIORITY = 0x8000;

const PROTOCOLS: Record<string, { ethType: number; proto?: number }> = {
  ip: { ethType: 0x0800 },
  ipv6: { ethType: 0x86dd },
  arp: { ethType: 0x0806 },
  tcp: { ethType: 0x0800, proto: 6 },
  udp: { ethType: 0x0800, proto: 17 },
  sctp: { ethType: 0x0800, proto: 132 },
  icmp: { ethType: 0x0800, proto: 1 },
  tcp6: { ethType: 0x86dd, proto: 6 },
  udp6: { ethType: 0x86dd, proto: 17 },
  sctp6: { ethType: 0x86dd, proto: 132 },
  icmp6: { ethType: 0x86dd, proto: 58 },
};

const CT_FLAGS: Record<string, number> = { new: 0x01, est: 0x02, rel: 0x04, rpl: 0x08, inv: 0x10, trk: 0x20, snat: 0x40, dnat: 0x80 };

// ---- value parsing ----

const UINT_TEXT = /^(0x[0-9a-fA-F]+|\d+)$/;
/**
 * Up to 15 characters, a number's text is below 2^53 (decimal: below 10^15; hex: 13 digits after
 * `0x`, 52 bits) and exact as a JavaScript number: most values (ports, registers, priorities,
 * conjunction ids) are read without a BigInt.
 */
const EXACT_AS_NUMBER = 15;

function checkUint(text: string, what: string): void {
  if (!UINT_TEXT.test(text)) throw new FlowSyntaxError(`${what}: "${text}" is not a number`);
}

function parseUint(text: string, what: string): bigint {
  checkUint(text, what);
  return BigInt(text);
}

function smallUint(text: string, max: number, what: string): number {
  checkUint(text, what);
  const v = text.length <= EXACT_AS_NUMBER ? Number(text) : BigInt(text);
  if (v > max) throw new FlowSyntaxError(`${what}: ${text} is above ${max}`);
  return Number(v);
}

/** A number's text as `bytes` big-endian bytes. */
function uintBytes(text: string, bytes: number, what: string): Buffer {
  checkUint(text, what);
  return text.length <= EXACT_AS_NUMBER && bytes <= 6 ? numberToBytes(Number(text), bytes, what) : bigToBytes(BigInt(text), bytes, what);
}

/** A non-negative integer below 2^53 as `bytes` (at most 6) big-endian bytes. */
function numberToBytes(v: number, bytes: number, what: string): Buffer {
  if (v >= 2 ** (bytes * 8)) throw new FlowSyntaxError(`${what}: ${v} does not fit in ${bytes * 8} bits`);
  const b = Buffer.allocUnsafe(bytes);
  b.writeUIntBE(v, 0, bytes);
  return b;
}

function bigToBytes(v: bigint, bytes: number, what: string): Buffer {
  if (v < 0n || v >> BigInt(bytes * 8) !== 0n) throw new FlowSyntaxError(`${what}: ${v} does not fit in ${bytes * 8} bits`);
  const b = Buffer.alloc(bytes);
  for (let i = bytes - 1; i >= 0; i--) {
    b[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return b;
}

function macBytes(text: string, what: string): Buffer {
  if (!/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(text)) throw new FlowSyntaxError(`${what}: "${text}" is not a MAC address`);
  return Buffer.from(text.split(':').map((h) => Number.parseInt(h, 16)));
}

/** Dotted quad, each part 0-255 without leading zeros (as node:net's isIPv4 accepts it). */
const OCTET = '(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]\\d|\\d)';
const IPV4_TEXT = new RegExp(`^${OCTET}\\.${OCTET}\\.${OCTET}\\.${OCTET}$`);

function ipv4Bytes(text: string, what: string): Buffer {
  const m = IPV4_TEXT.exec(text);
  if (!m) throw new FlowSyntaxError(`${what}: "${text}" is not an IPv4 address`);
  const b = Buffer.allocUnsafe(4);
  for (let i = 0; i < 4; i++) b[i] = Number(m[i + 1]);
  return b;
}

function ipv6Bytes(text: string, what: string): Buffer {
  if (!isIPv6(text) || text.includes('.')) throw new FlowSyntaxError(`${what}: "${text}" is not an IPv6 address`);
  const [head, tail] = text.includes('::') ? text.split('::') : [text, undefined];
  const h = head ? head.split(':') : [];
  const t = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const b = Buffer.alloc(16);
  groups.forEach((g, i) => b.writeUInt16BE(Number.parseInt(g, 16), i * 2));
  return b;
}

const prefixMask = (bits: number, bytes: number): Buffer => {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bits; i++) b[i >> 3]! |= 0x80 >> (i & 7);
  return b;
};

/** A field value with optional `/mask` (or `/prefix` for addresses), value already masked. */
export function parseFieldValue(field: FieldDef, text: string): { value: Buffer; mask?: Buffer } {
  const what = field.name;
  const slash = text.indexOf('/');
  const v = slash < 0 ? text : text.slice(0, slash);
  const m = slash < 0 ? undefined : text.slice(slash + 1);
  let value: Buffer;
  let mask: Buffer | undefined;
  switch (field.kind) {
    case 'int':
      value = uintBytes(v, field.bytes, what);
      if (m !== undefined) mask = uintBytes(m, field.bytes, `${what} mask`);
      break;
    case 'mac':
      value = macBytes(v, what);
      if (m !== undefined) mask = macBytes(m, `${what} mask`);
      break;
    case 'ipv4':
    case 'ipv6': {
      const bytes = field.kind === 'ipv4' ? ipv4Bytes : ipv6Bytes;
      value = bytes(v, what);
      if (m !== undefined) {
        if (/^\d+$/.test(m)) {
          const bits = Number(m);
          if (bits > field.bytes * 8) throw new FlowSyntaxError(`${what}: prefix /${m} is longer than the address`);
          mask = prefixMask(bits, field.bytes);
        } else mask = bytes(m, `${what} mask`);
      }
      break;
    }
    case 'ct_state':
      throw new FlowSyntaxError(`${what}: not settable`);
  }
  if (!mask) return { value };
  for (let i = 0; i < value.length; i++) value[i]! &= mask[i]!;
  return { value, mask };
}

function parseCtState(text: string): { value: Buffer; mask: Buffer } {
  let value = 0;
  let mask = 0;
  const re = /([+-])([a-z]+)/gy;
  let at = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const bit = CT_FLAGS[m[2]!];
    if (bit === undefined) throw new FlowSyntaxError(`ct_state: unknown flag "${m[2]}"`);
    mask |= bit;
    if (m[1] === '+') value |= bit;
    at = re.lastIndex;
  }
  if (at !== text.length || text.length === 0) throw new FlowSyntaxError(`ct_state: "${text}" is not a list of +flag/-flag`);
  return { value: numberToBytes(value, 4, 'ct_state'), mask: numberToBytes(mask, 4, 'ct_state') };
}

export function parseSubField(text: string): SubField {
  const m = /^([A-Za-z0-9_]+)\[(?:(\d+)(?:\.\.(\d+))?)?\]$/.exec(text);
  if (!m) throw new FlowSyntaxError(`"${text}" is not a field[bits] reference`);
  const field = fieldByName(m[1]!);
  const width = field.bytes * 8;
  const lo = m[2] === undefined ? 0 : Number(m[2]);
  const hi = m[2] === undefined ? width - 1 : m[3] === undefined ? lo : Number(m[3]);
  if (hi < lo || hi >= width) throw new FlowSyntaxError(`"${text}": bits ${lo}..${hi} are outside ${field.name} (${width} bits)`);
  return { field, ofs: lo, nbits: hi - lo + 1 };
}

// ---- tokenizing ----

/** Splits on commas outside parentheses; parts trimmed, empty ones dropped. */
export function splitTopLevel(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  const take = (end: number) => {
    const part = text.slice(start, end).trim();
    if (part.length > 0) out.push(part);
  };
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x28) depth++; // (
    else if (c === 0x29) {
      // )
      depth--;
      if (depth < 0) throw new FlowSyntaxError(`unbalanced ")" in "${text}"`);
    } else if (c === 0x2c && depth === 0) {
      // ,
      take(i);
      start = i + 1;
    }
  }
  if (depth !== 0) throw new FlowSyntaxError(`unbalanced "(" in "${text}"`);
  take(text.length);
  return out;
}

// ---- match ----

function parseMatch(tokens: string[], flow: ParsedFlow): void {
  const byName = new Map<string, MatchEntry>();
  const put = (e: MatchEntry, token: string) => {
    const prev = byName.get(e.field.name);
    if (prev) {
      const same = prev.value.equals(e.value) && (prev.mask === undefined) === (e.mask === undefined) && (!prev.mask || prev.mask.equals(e.mask!));
      if (!same) throw new FlowSyntaxError(`"${token}": ${e.field.name} is already matched with another value`);
      return;
    }
    byName.set(e.field.name, e);
  };
  const num = (name: string, v: number, token: string) => {
    const f = fieldByName(name);
    put({ field: f, value: numberToBytes(v, f.bytes, name) }, token);
  };
  const transport: { key: string; text: string }[] = [];
  for (const token of tokens) {
    const eq = token.indexOf('=');
    if (eq < 0) {
      const p = PROTOCOLS[token];
      if (!p) throw new FlowSyntaxError(`unsupported match keyword "${token}"`);
      num('eth_type', p.ethType, token);
      if (p.proto !== undefined) num('ip_proto', p.proto, token);
      continue;
    }
    const key = token.slice(0, eq);
    const text = token.slice(eq + 1);
    if (key === 'table') flow.table = smallUint(text, 254, 'table');
    else if (key === 'priority') flow.priority = smallUint(text, 0xffff, 'priority');
    else if (key === 'cookie') {
      if (text.includes('/')) throw new FlowSyntaxError(`cookie "${text}": a flow to add has no cookie mask`);
      flow.cookie = parseUint(text, 'cookie');
      if (flow.cookie >> 64n) throw new FlowSyntaxError(`cookie ${text} is wider than 64 bits`);
    } else if (key === 'tp_src' || key === 'tp_dst' || key === 'icmp_type' || key === 'icmp_code') transport.push({ key, text });
    else if (key === 'nw_tos') {
      const tos = smallUint(text, 0xff, 'nw_tos');
      if (tos & 3) throw new FlowSyntaxError(`nw_tos=${text}: the two ECN bits must be 0`);
      num('ip_dscp', tos >> 2, token);
    } else if (key === 'ct_state') {
      const field = fieldByName('ct_state');
      put({ field, ...parseCtState(text) }, token);
    } else {
      const field = fieldByName(key);
      if (field.kind === 'ct_state') throw new FlowSyntaxError(`unsupported match field "${key}"`);
      put({ field, ...parseFieldValue(field, text) }, token);
    }
  }
  // tp_src/tp_dst name the transport's own fields, icmp_type/icmp_code ICMP's or ICMPv6's (as OVS
  // reads them): which one depends on the protocol the match names.
  for (const t of transport) {
    const proto = byName.get('ip_proto')?.value[0];
    let name: string | undefined;
    if (t.key.startsWith('icmp_')) {
      if (proto === 1) name = `icmpv4_${t.key.slice(5)}`;
      else if (proto === 58) name = `icmpv6_${t.key.slice(5)}`;
      else throw new FlowSyntaxError(`${t.key} needs icmp or icmp6 in the match`);
    } else {
      const l4 = proto === 6 ? 'tcp' : proto === 17 ? 'udp' : proto === 132 ? 'sctp' : undefined;
      if (!l4) throw new FlowSyntaxError(`${t.key} needs tcp, udp or sctp (tcp6, udp6, sctp6) in the match`);
      name = `${l4}_${t.key.slice(3)}`;
    }
    const field = fieldByName(name);
    put({ field, ...parseFieldValue(field, t.text) }, `${t.key}=${t.text}`);
  }
  const entries: MatchEntry[] = [];
  for (const e of byName.values()) {
    if (e.mask?.every((b) => b === 0)) continue; // wildcard: no entry
    if (e.mask?.every((b) => b === 0xff)) entries.push({ field: e.field, value: e.value });
    else entries.push(e);
  }
  // Prerequisites first: OVS checks each entry's prerequisites against the entries before it.
  const rank = (f: FieldDef) =>
    f.name === 'in_port' ? 0 : f.name === 'eth_type' ? 2 : f.name === 'ip_proto' ? 3 : f.name.startsWith('eth_') ? 1 : f.name.startsWith('icmpv6_') ? 4 : f.name.startsWith('nd_') ? 6 : 5;
  flow.match = entries.sort((a, b) => rank(a.field) - rank(b.field));
}

// ---- actions ----

function callArgs(token: string, name: string): string | undefined {
  if (!token.startsWith(`${name}(`)) return undefined;
  if (!token.endsWith(')')) throw new FlowSyntaxError(`"${token}": text after the closing parenthesis`);
  return token.slice(name.length + 1, -1);
}

function parsePort(text: string): number {
  if (text === 'IN_PORT' || text === 'in_port') return OFPP_IN_PORT;
  return smallUint(text, 0xfffffeff, 'output port');
}

function parseAction(token: string): Action {
  if (token === 'dec_ttl') return { type: 'dec_ttl' };
  if (token === 'IN_PORT' || token === 'in_port') return { type: 'output', port: OFPP_IN_PORT };
  if (token.startsWith('output:')) {
    const arg = token.slice('output:'.length);
    return arg.includes('[') ? { type: 'output_reg', src: parseSubField(arg) } : { type: 'output', port: parsePort(arg) };
  }
  if (/^\d+$/.test(token)) return { type: 'output', port: parsePort(token) };
  if (token.startsWith('set_field:')) {
    const arrow = token.lastIndexOf('->');
    if (arrow < 0) throw new FlowSyntaxError(`"${token}": set_field needs "->field"`);
    const field = fieldByName(token.slice(arrow + 2));
    if (field.kind === 'ct_state' || field.name === 'conj_id') throw new FlowSyntaxError(`"${token}": ${field.name} cannot be set`);
    return { type: 'set_field', field, ...parseFieldValue(field, token.slice('set_field:'.length, arrow)) };
  }
  if (token.startsWith('load:')) {
    const arrow = token.lastIndexOf('->');
    if (arrow < 0) throw new FlowSyntaxError(`"${token}": load needs "->field[bits]"`);
    const dst = parseSubField(token.slice(arrow + 2));
    const v = parseUint(token.slice('load:'.length, arrow), 'load');
    if (v >> BigInt(dst.nbits)) throw new FlowSyntaxError(`"${token}": ${v} does not fit in ${dst.nbits} bits`);
    // A load is a masked set_field (how OVS itself represents it, and prints it in OpenFlow 1.5).
    const ones = (1n << BigInt(dst.nbits)) - 1n;
    const shift = BigInt(dst.ofs);
    return {
      type: 'set_field',
      field: dst.field,
      value: bigToBytes(v << shift, dst.field.bytes, 'load'),
      mask: bigToBytes(ones << shift, dst.field.bytes, 'load'),
    };
  }
  if (token.startsWith('move:')) {
    const arrow = token.indexOf('->');
    if (arrow < 0) throw new FlowSyntaxError(`"${token}": move needs "->"`);
    const src = parseSubField(token.slice('move:'.length, arrow));
    const dst = parseSubField(token.slice(arrow + 2));
    if (src.nbits !== dst.nbits) throw new FlowSyntaxError(`"${token}": source has ${src.nbits} bits, destination ${dst.nbits}`);
    return { type: 'move', src, dst };
  }
  const ct = callArgs(token, 'ct');
  if (ct !== undefined) {
    const a: Extract<Action, { type: 'ct' }> = { type: 'ct', commit: false, exec: [] };
    for (const arg of splitTopLevel(ct)) {
      if (arg === 'commit') a.commit = true;
      else if (arg.startsWith('zone=')) a.zone = smallUint(arg.slice(5), 0xffff, 'ct zone');
      else if (arg.startsWith('table=')) a.table = smallUint(arg.slice(6), 254, 'ct table');
      else if (callArgs(arg, 'exec') !== undefined) a.exec = parseActionList(callArgs(arg, 'exec')!);
      else throw new FlowSyntaxError(`unsupported ct() argument "${arg}"`);
    }
    return a;
  }
  const conj = callArgs(token, 'conjunction');
  if (conj !== undefined) {
    const m = /^(\d+),(\d+)\/(\d+)$/.exec(conj);
    if (!m) throw new FlowSyntaxError(`"${token}" is not conjunction(id,k/n)`);
    const [id, k, n] = [Number(m[1]), Number(m[2]), Number(m[3])];
    if (id > 0xffffffff || n < 2 || n > 64 || k < 1 || k > n) throw new FlowSyntaxError(`"${token}": needs 1 <= k <= n, 2 <= n <= 64, a 32-bit id`);
    return { type: 'conjunction', id, clause: k - 1, nClauses: n };
  }
  const resubmit = callArgs(token, 'resubmit');
  if (resubmit !== undefined) {
    const m = /^([^,]*),(\d+)$/.exec(resubmit);
    if (!m) throw new FlowSyntaxError(`"${token}" is not resubmit([port],table)`);
    return { type: 'resubmit', table: smallUint(m[2]!, 254, 'resubmit table'), ...(m[1] ? { inPort: parsePort(m[1]) } : {}) };
  }
  const ctl = callArgs(token, 'controller');
  if (ctl !== undefined) {
    const a: Extract<Action, { type: 'controller' }> = { type: 'controller' };
    for (const arg of splitTopLevel(ctl)) {
      const eq = arg.indexOf('=');
      const [k, v] = eq < 0 ? [arg, ''] : [arg.slice(0, eq), arg.slice(eq + 1)];
      if (k === 'max_len') a.maxLen = smallUint(v, 0xffff, 'controller max_len');
      else if (k === 'meter_id') a.meterId = smallUint(v, 0xffffffff, 'controller meter_id');
      else if (k === 'userdata') {
        if (!/^[0-9a-fA-F]{2}(\.[0-9a-fA-F]{2})*$/.test(v)) throw new FlowSyntaxError(`controller userdata "${v}" is not hex bytes joined by "."`);
        a.userdata = Buffer.from(v.split('.').map((h) => Number.parseInt(h, 16)));
      } else throw new FlowSyntaxError(`unsupported controller() argument "${arg}"`);
    }
    return a;
  }
  throw new FlowSyntaxError(`unsupported action "${token}"`);
}

function parseActionList(text: string): Action[] {
  return splitTopLevel(text).map(parseAction);
}

/**
 * Parses one flow as sluice writes it for `ovs-ofctl add-flow(s)`: `[key=value,]… actions=…`
 * with numbered tables (flowText()).
 */
export function parseFlowText(text: string): ParsedFlow {
  const m = /(^|[ ,])actions=/.exec(text);
  if (!m) throw new FlowSyntaxError(`flow "${text}" has no actions=`);
  const matchText = text.slice(0, m.index);
  const actionsText = text.slice(m.index + m[0].length).trim();
  const flow: ParsedFlow = { table: 0, priority: OFP_DEFAULT_PRIORITY, cookie: 0n, match: [], actions: [] };
  try {
    parseMatch(splitTopLevel(matchText), flow);
    const tokens = splitTopLevel(actionsText);
    if (tokens.length === 1 && tokens[0] === 'drop') return flow;
    for (const [i, token] of tokens.entries()) {
      if (token === 'drop') throw new FlowSyntaxError('"drop" must be the only action');
      if (token.startsWith('goto_table:')) {
        if (i !== tokens.length - 1) throw new FlowSyntaxError(`"${token}" must be the last action`);
        const t = smallUint(token.slice('goto_table:'.length), 254, 'goto_table');
        if (t <= flow.table) throw new FlowSyntaxError(`"${token}" does not go forward from table ${flow.table}`);
        flow.gotoTable = t;
      } else flow.actions.push(parseAction(token));
    }
    if (tokens.length === 0) throw new FlowSyntaxError('no actions (write "drop")');
  } catch (err) {
    if (err instanceof FlowSyntaxError) throw new FlowSyntaxError(`${err.message} in flow "${text}"`);
    throw err;
  }
  return flow;
}
