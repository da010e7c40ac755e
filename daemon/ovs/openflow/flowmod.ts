/**
 * OpenFlow 1.5 flow programming on the wire (pure): OFPT_FLOW_MOD from a parsed flow
 * (./flowtext.ts), bundles (OFPT_BUNDLE_CONTROL, OFPT_BUNDLE_ADD_MESSAGE), and the flow
 * statistics the agent reads back (OFPMP_FLOW_DESC, OFPMP_AGGREGATE_STATS).
 *
 * Encoding choices, each the one OVS decodes into the same flow as ovs-ofctl's own text parse:
 * - Match: OXM in an ofp_match; standard fields in the OpenFlow-basic class, registers and
 *   conntrack fields in Nicira NXM_1. Prerequisites (eth_type, ip_proto) precede the fields that
 *   need them, as OVS checks them entry by entry.
 * - Instructions: apply_actions, then goto_table.
 * - set_field (and `load`, which is a masked set_field): OFPAT_SET_FIELD with a masked OXM when
 *   partial (OpenFlow 1.5 allows masks there).
 * - move: OFPAT_COPY_FIELD (OpenFlow 1.5's own; OVS refuses Nicira's NXAST_REG_MOVE in 1.5).
 * - Nicira actions: NXAST_OUTPUT_REG, NXAST_CT (nested actions inside),
 *   NXAST_CONJUNCTION, NXAST_RESUBMIT_TABLE, NXAST_CONTROLLER2 (userdata, meter_id, max_len as
 *   properties, each only when given so OVS's defaults apply otherwise).
 */
import { type Action, type FieldDef, type MatchEntry, OFPP_IN_PORT, type ParsedFlow, type SubField } from './flowtext.js';
import { message, messageBuffer, NX_EXPERIMENTER_ID, OFP_HEADER_LEN, OFPP, pad8, WireError } from './wire.js';

export const OFPT_FLOW_MOD = 14;
export const OFPT_BUNDLE_CONTROL = 33;
export const OFPT_BUNDLE_ADD_MESSAGE = 34;
export const OFPT_MULTIPART_REQUEST = 18;

export const OFPFC = { ADD: 0, MODIFY: 1, MODIFY_STRICT: 2, DELETE: 3, DELETE_STRICT: 4 } as const;
export const OFPTT_ALL = 0xff;
const OFPG_ANY = 0xffffffff;
const OFP_NO_BUFFER = 0xffffffff;

export const OFPBCT = {
  OPEN_REQUEST: 0,
  OPEN_REPLY: 1,
  CLOSE_REQUEST: 2,
  CLOSE_REPLY: 3,
  COMMIT_REQUEST: 4,
  COMMIT_REPLY: 5,
  DISCARD_REQUEST: 6,
  DISCARD_REPLY: 7,
} as const;
export const OFPBF_ATOMIC = 1;
export const OFPBF_ORDERED = 2;

export const OFPMP_FLOW_DESC = 1;
export const OFPMP_AGGREGATE_STATS = 2;

const OFPIT_GOTO_TABLE = 1;
const OFPIT_APPLY_ACTIONS = 4;
const OFPAT_OUTPUT = 0;
const OFPAT_DEC_NW_TTL = 24;
const OFPAT_SET_FIELD = 25;
const OFPAT_COPY_FIELD = 28;
const OFPAT_EXPERIMENTER = 0xffff;
const NXAST = { RESUBMIT_TABLE: 14, OUTPUT_REG: 15, CONJUNCTION: 34, CT: 35, CONTROLLER2: 37 } as const;
const NXAC2PT = { MAX_LEN: 0, USERDATA: 3, METER_ID: 5 } as const;
const NX_CT_F_COMMIT = 1;
const NX_CT_RECIRC_NONE = 0xff;
const OFPCML_NO_BUFFER = 0xffff;


// ---- match, actions, instructions: sized first, then written in place ----
//
// A flow-mod is written into one buffer: each part's length is known from the parsed flow, so
// nothing is built piecewise and concatenated (the start-up bundle encodes tens of thousands).

const oxmHeader = (f: FieldDef, masked: boolean): number => ((f.oxmClass << 16) | (f.code << 9) | ((masked ? 1 : 0) << 8) | (masked ? 2 * f.bytes : f.bytes)) >>> 0;
const oxmLen = (value: Buffer, mask: Buffer | undefined): number => 4 + value.length + (mask ? mask.length : 0);

function putOxm(b: Buffer, at: number, f: FieldDef, value: Buffer, mask: Buffer | undefined): number {
  b.writeUInt32BE(oxmHeader(f, mask !== undefined), at);
  value.copy(b, at + 4);
  if (mask) mask.copy(b, at + 4 + value.length);
  return at + oxmLen(value, mask);
}

/** ofp_match (type OXM) padded to 8 bytes. */
function matchLen(entries: readonly MatchEntry[]): number {
  let n = 4;
  for (const e of entries) n += oxmLen(e.value, e.mask);
  return pad8(n);
}

function putMatch(b: Buffer, at: number, entries: readonly MatchEntry[]): number {
  let p = at + 4;
  for (const e of entries) p = putOxm(b, p, e.field, e.value, e.mask);
  b.writeUInt16BE(1, at); // OFPMT_OXM
  b.writeUInt16BE(p - at, at + 2);
  const end = at + pad8(p - at);
  b.fill(0, p, end);
  return end;
}

/** ofp_match (type OXM) padded to 8 bytes. */
export function encodeMatch(entries: readonly MatchEntry[]): Buffer {
  const b = Buffer.allocUnsafe(matchLen(entries));
  putMatch(b, 0, entries);
  return b;
}

/** NXM header of a field (move/output_reg operands), without mask. */
const nxmHeader = (f: FieldDef): number => oxmHeader(f, false);
const ofsNbits = (s: SubField): number => (s.ofs << 6) | (s.nbits - 1);

/** Nicira action header: 10 bytes, then the subtype's body; `len` already padded to 8. */
function putNxHeader(b: Buffer, at: number, subtype: number, len: number): void {
  b.writeUInt16BE(OFPAT_EXPERIMENTER, at);
  b.writeUInt16BE(len, at + 2);
  b.writeUInt32BE(NX_EXPERIMENTER_ID, at + 4);
  b.writeUInt16BE(subtype, at + 8);
}

const propLen = (valueLen: number): number => pad8(4 + valueLen);

function putProp(b: Buffer, at: number, type: number, value: Buffer): number {
  b.writeUInt16BE(type, at);
  b.writeUInt16BE(4 + value.length, at + 2);
  value.copy(b, at + 4);
  return at + propLen(value.length);
}

const hasMaxLen = (a: Extract<Action, { type: 'controller' }>): boolean => a.maxLen !== undefined && a.maxLen !== OFPCML_NO_BUFFER;

function actionLen(a: Action): number {
  switch (a.type) {
    case 'output':
      return 16;
    case 'output_reg':
      return 24; // 10-byte Nicira header + ofs_nbits, src, max_len (14), padded
    case 'dec_ttl':
      return 8;
    case 'set_field':
      return pad8(4 + oxmLen(a.value, a.mask));
    case 'move':
      return 24;
    case 'ct': {
      let n = 24; // 10-byte Nicira header + flags, zone_src, zone, recirc_table, pad, alg (14)
      for (const x of a.exec) n += actionLen(x);
      return n;
    }
    case 'conjunction':
    case 'resubmit':
      return 16; // 10-byte Nicira header + a 6-byte body
    case 'controller':
      return 16 + (hasMaxLen(a) ? propLen(2) : 0) + (a.userdata ? propLen(a.userdata.length) : 0) + (a.meterId !== undefined ? propLen(4) : 0);
  }
}

/** Writes the action at `at` (its actionLen(a) bytes, zeroed first); returns the offset after it. */
function putAction(b: Buffer, at: number, a: Action): number {
  const len = actionLen(a);
  b.fill(0, at, at + len);
  switch (a.type) {
    case 'output':
      b.writeUInt16BE(OFPAT_OUTPUT, at);
      b.writeUInt16BE(16, at + 2);
      b.writeUInt32BE(a.port === OFPP_IN_PORT ? OFPP.IN_PORT : a.port, at + 4);
      // max_len (at + 8) stays 0: only meaningful for the controller port.
      break;
    case 'output_reg':
      putNxHeader(b, at, NXAST.OUTPUT_REG, len);
      b.writeUInt16BE(ofsNbits(a.src), at + 10);
      b.writeUInt32BE(nxmHeader(a.src.field), at + 12);
      break;
    case 'dec_ttl':
      b.writeUInt16BE(OFPAT_DEC_NW_TTL, at);
      b.writeUInt16BE(8, at + 2);
      break;
    case 'set_field':
      b.writeUInt16BE(OFPAT_SET_FIELD, at);
      b.writeUInt16BE(len, at + 2);
      putOxm(b, at + 4, a.field, a.value, a.mask);
      break;
    case 'move':
      // OpenFlow 1.5's own copy_field (OVS refuses Nicira's reg_move in 1.5).
      b.writeUInt16BE(OFPAT_COPY_FIELD, at);
      b.writeUInt16BE(24, at + 2);
      b.writeUInt16BE(a.src.nbits, at + 4);
      b.writeUInt16BE(a.src.ofs, at + 6);
      b.writeUInt16BE(a.dst.ofs, at + 8);
      b.writeUInt32BE(nxmHeader(a.src.field), at + 12);
      b.writeUInt32BE(nxmHeader(a.dst.field), at + 16);
      break;
    case 'ct': {
      // The length covers the nested actions, which follow the 24-byte head.
      putNxHeader(b, at, NXAST.CT, len);
      b.writeUInt16BE(a.commit ? NX_CT_F_COMMIT : 0, at + 10);
      // zone_src (at + 12) stays 0: the zone is immediate.
      b.writeUInt16BE(a.zone ?? 0, at + 16);
      b[at + 18] = a.table ?? NX_CT_RECIRC_NONE;
      // alg (at + 22) stays 0.
      let p = at + 24;
      for (const x of a.exec) p = putAction(b, p, x);
      break;
    }
    case 'conjunction':
      putNxHeader(b, at, NXAST.CONJUNCTION, len);
      b[at + 10] = a.clause;
      b[at + 11] = a.nClauses;
      b.writeUInt32BE(a.id >>> 0, at + 12);
      break;
    case 'resubmit':
      putNxHeader(b, at, NXAST.RESUBMIT_TABLE, len);
      b.writeUInt16BE(a.inPort === undefined || a.inPort === OFPP_IN_PORT ? 0xfff8 : a.inPort, at + 10);
      b[at + 12] = a.table;
      break;
    case 'controller': {
      // Properties only for what is given, so OVS's defaults apply otherwise.
      putNxHeader(b, at, NXAST.CONTROLLER2, len);
      let p = at + 16;
      if (hasMaxLen(a)) {
        b.writeUInt16BE(NXAC2PT.MAX_LEN, p);
        b.writeUInt16BE(6, p + 2);
        b.writeUInt16BE(a.maxLen!, p + 4);
        p += propLen(2);
      }
      if (a.userdata) p = putProp(b, p, NXAC2PT.USERDATA, a.userdata);
      if (a.meterId !== undefined) {
        b.writeUInt16BE(NXAC2PT.METER_ID, p);
        b.writeUInt16BE(8, p + 2);
        b.writeUInt32BE(a.meterId >>> 0, p + 4);
      }
      break;
    }
  }
  return at + len;
}

function instructionsLen(flow: ParsedFlow): number {
  let n = flow.gotoTable !== undefined ? 8 : 0;
  if (flow.actions.length) {
    n += 8;
    for (const a of flow.actions) n += actionLen(a);
  }
  return n;
}

/** apply_actions, then goto_table. */
function putInstructions(b: Buffer, at: number, flow: ParsedFlow): number {
  let p = at;
  if (flow.actions.length) {
    const head = p;
    b.fill(0, head, head + 8);
    p += 8;
    for (const a of flow.actions) p = putAction(b, p, a);
    b.writeUInt16BE(OFPIT_APPLY_ACTIONS, head);
    b.writeUInt16BE(p - head, head + 2);
  }
  if (flow.gotoTable !== undefined) {
    b.fill(0, p, p + 8);
    b.writeUInt16BE(OFPIT_GOTO_TABLE, p);
    b.writeUInt16BE(8, p + 2);
    b[p + 4] = flow.gotoTable;
    p += 8;
  }
  return p;
}

// ---- flow mod ----

interface FlowModHead {
  command: number;
  table: number;
  priority: number;
  cookie: bigint;
  cookieMask: bigint;
}

const FLOW_MOD_HEAD_LEN = 40;

/** A whole OFPT_FLOW_MOD message: header, ofp_flow_mod, match, instructions (`flow` absent: none). */
function flowMod(xid: number, h: FlowModHead, match: readonly MatchEntry[], flow?: ParsedFlow): Buffer {
  const b = messageBuffer(OFPT_FLOW_MOD, xid, OFP_HEADER_LEN + FLOW_MOD_HEAD_LEN + matchLen(match) + (flow ? instructionsLen(flow) : 0));
  const at = OFP_HEADER_LEN;
  b.writeBigUInt64BE(h.cookie, at);
  b.writeBigUInt64BE(h.cookieMask, at + 8);
  b[at + 16] = h.table;
  b[at + 17] = h.command;
  b.writeUInt16BE(0, at + 18); // idle_timeout
  b.writeUInt16BE(0, at + 20); // hard_timeout
  b.writeUInt16BE(h.priority, at + 22);
  b.writeUInt32BE(OFP_NO_BUFFER, at + 24);
  b.writeUInt32BE(OFPP.ANY, at + 28); // out_port
  b.writeUInt32BE(OFPG_ANY, at + 32); // out_group
  b.writeUInt16BE(0, at + 36); // flags
  b.writeUInt16BE(0, at + 38); // importance
  const p = putMatch(b, at + FLOW_MOD_HEAD_LEN, match);
  if (flow) putInstructions(b, p, flow);
  return b;
}

/** OFPFC_ADD of one flow. */
export function encodeFlowAdd(xid: number, flow: ParsedFlow): Buffer {
  return flowMod(xid, { command: OFPFC.ADD, table: flow.table, priority: flow.priority, cookie: flow.cookie, cookieMask: 0n }, flow.match, flow);
}

/** OFPFC_DELETE of every flow, in every table, whose cookie is `cookie` under `mask` (default: exactly). */
export function encodeFlowDeleteByCookie(xid: number, cookie: bigint, mask = 0xffffffffffffffffn): Buffer {
  return flowMod(xid, { command: OFPFC.DELETE, table: OFPTT_ALL, priority: 0, cookie, cookieMask: mask }, []);
}

// ---- bundles ----

export function encodeBundleControl(xid: number, bundleId: number, type: number, flags = OFPBF_ATOMIC | OFPBF_ORDERED): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32BE(bundleId >>> 0, 0);
  b.writeUInt16BE(type, 4);
  b.writeUInt16BE(flags, 6);
  return message(OFPT_BUNDLE_CONTROL, xid, b);
}

/** Wraps `inner` (whose xid must be this message's, as OVS requires) into the bundle. */
export function encodeBundleAdd(bundleId: number, inner: Buffer, flags = OFPBF_ATOMIC | OFPBF_ORDERED): Buffer {
  // Under the inner message's xid, as OVS requires.
  const b = messageBuffer(OFPT_BUNDLE_ADD_MESSAGE, inner.readUInt32BE(4), OFP_HEADER_LEN + 8 + inner.length);
  b.writeUInt32BE(bundleId >>> 0, 8);
  b.writeUInt16BE(0, 12);
  b.writeUInt16BE(flags, 14);
  inner.copy(b, 16);
  return b;
}

export function decodeBundleControl(msg: Buffer): { bundleId: number; type: number; flags: number } {
  if (msg.length < 16 || msg[1] !== OFPT_BUNDLE_CONTROL) throw new WireError('not an OFPT_BUNDLE_CONTROL message');
  return { bundleId: msg.readUInt32BE(8), type: msg.readUInt16BE(12), flags: msg.readUInt16BE(14) };
}

// ---- flow statistics ----

export interface FlowStatsFilter {
  /** OFPTT_ALL (default) or one table. */
  table?: number;
  cookie: bigint;
  cookieMask: bigint;
}

function flowStatsRequest(xid: number, type: number, f: FlowStatsFilter): Buffer {
  const match = encodeMatch([]);
  const b = Buffer.alloc(8 + 32 + match.length);
  b.writeUInt16BE(type, 0);
  b.writeUInt16BE(0, 2); // flags
  b[8] = f.table ?? OFPTT_ALL;
  b.writeUInt32BE(OFPP.ANY, 12); // out_port
  b.writeUInt32BE(OFPG_ANY, 16); // out_group
  b.writeBigUInt64BE(f.cookie, 24);
  b.writeBigUInt64BE(f.cookieMask, 32);
  match.copy(b, 40);
  return message(OFPT_MULTIPART_REQUEST, xid, b);
}

export const encodeFlowDescRequest = (xid: number, f: FlowStatsFilter): Buffer => flowStatsRequest(xid, OFPMP_FLOW_DESC, f);
export const encodeAggregateStatsRequest = (xid: number, f: FlowStatsFilter): Buffer => flowStatsRequest(xid, OFPMP_AGGREGATE_STATS, f);

/** OXS (OpenFlow 1.5 statistics) fields OVS reports. */
const OXS_CLASS = 0x8002;
const OXS = { DURATION: 0, IDLE_TIME: 1, FLOW_COUNT: 3, PACKET_COUNT: 4, BYTE_COUNT: 5 } as const;

interface OxsStats {
  flowCount?: number;
  packets?: bigint;
  bytes?: bigint;
}

/** An ofp_stats (reserved, length, OXS entries) at `at`; returns the stats and its padded length. */
function decodeOxs(buf: Buffer, at: number): { stats: OxsStats; size: number } {
  if (at + 4 > buf.length) throw new WireError('ofp_stats overruns its message');
  const length = buf.readUInt16BE(at + 2);
  if (length < 4 || at + length > buf.length) throw new WireError(`ofp_stats of length ${length} overruns its message`);
  const stats: OxsStats = {};
  let p = at + 4;
  while (p + 4 <= at + length) {
    const cls = buf.readUInt16BE(p);
    const field = buf[p + 2]! >> 1;
    const len = buf[p + 3]!;
    if (p + 4 + len > at + length) throw new WireError('OXS entry overruns its ofp_stats');
    if (cls === OXS_CLASS) {
      if (field === OXS.FLOW_COUNT && len === 4) stats.flowCount = buf.readUInt32BE(p + 4);
      else if (field === OXS.PACKET_COUNT && len === 8) stats.packets = buf.readBigUInt64BE(p + 4);
      else if (field === OXS.BYTE_COUNT && len === 8) stats.bytes = buf.readBigUInt64BE(p + 4);
    }
    p += 4 + len;
  }
  return { stats, size: pad8(length) };
}

export interface FlowDescEntry {
  table: number;
  priority: number;
  cookie: bigint;
  packets?: bigint;
  bytes?: bigint;
}

const multipartType = (msg: Buffer): number => {
  if (msg.length < 16) throw new WireError(`multipart reply of ${msg.length} bytes is shorter than 16`);
  return msg.readUInt16BE(8);
};

/** The flows of one OFPMP_FLOW_DESC reply part: table, priority, cookie and counters. */
export function decodeFlowDescReply(msg: Buffer): FlowDescEntry[] {
  if (multipartType(msg) !== OFPMP_FLOW_DESC) throw new WireError('not an OFPMP_FLOW_DESC reply');
  const out: FlowDescEntry[] = [];
  let at = 16;
  while (at + 24 <= msg.length) {
    const length = msg.readUInt16BE(at);
    if (length < 24 || at + length > msg.length) throw new WireError(`flow description of length ${length} overruns its reply`);
    const entry: FlowDescEntry = { table: msg[at + 4]!, priority: msg.readUInt16BE(at + 6), cookie: msg.readBigUInt64BE(at + 16) };
    // ofp_match (padded), then ofp_stats, then instructions.
    const matchLen = msg.readUInt16BE(at + 26);
    const statsAt = at + 24 + pad8(matchLen);
    if (statsAt < at + length) {
      const { stats } = decodeOxs(msg, statsAt);
      if (stats.packets !== undefined) entry.packets = stats.packets;
      if (stats.bytes !== undefined) entry.bytes = stats.bytes;
    }
    out.push(entry);
    at += length;
  }
  return out;
}

export interface AggregateStats {
  flowCount: number;
  packets: bigint;
  bytes: bigint;
}

export function decodeAggregateStatsReply(msg: Buffer): AggregateStats {
  if (multipartType(msg) !== OFPMP_AGGREGATE_STATS) throw new WireError('not an OFPMP_AGGREGATE_STATS reply');
  const { stats } = decodeOxs(msg, 16);
  if (stats.flowCount === undefined) throw new WireError('aggregate statistics without a flow count');
  return { flowCount: stats.flowCount, packets: stats.packets ?? 0n, bytes: stats.bytes ?? 0n };
}

// ---- errors ----

const ERROR_TYPES: Record<number, string> = {
  0: 'OFPET_HELLO_FAILED',
  1: 'OFPET_BAD_REQUEST',
  2: 'OFPET_BAD_ACTION',
  3: 'OFPET_BAD_INSTRUCTION',
  4: 'OFPET_BAD_MATCH',
  5: 'OFPET_FLOW_MOD_FAILED',
  6: 'OFPET_GROUP_MOD_FAILED',
  7: 'OFPET_PORT_MOD_FAILED',
  8: 'OFPET_TABLE_MOD_FAILED',
  9: 'OFPET_QUEUE_OP_FAILED',
  10: 'OFPET_SWITCH_CONFIG_FAILED',
  11: 'OFPET_ROLE_REQUEST_FAILED',
  12: 'OFPET_METER_MOD_FAILED',
  13: 'OFPET_TABLE_FEATURES_FAILED',
  14: 'OFPET_BAD_PROPERTY',
  15: 'OFPET_ASYNC_CONFIG_FAILED',
  16: 'OFPET_FLOW_MONITOR_FAILED',
  17: 'OFPET_BUNDLE_FAILED',
  0xffff: 'OFPET_EXPERIMENTER',
};

const ERROR_CODES: Record<number, Record<number, string>> = {
  1: { 0: 'OFPBRC_BAD_VERSION', 1: 'OFPBRC_BAD_TYPE', 2: 'OFPBRC_BAD_MULTIPART', 3: 'OFPBRC_BAD_EXPERIMENTER', 4: 'OFPBRC_BAD_EXP_TYPE', 6: 'OFPBRC_BAD_LEN', 13: 'OFPBRC_MULTIPART_BUFFER_OVERFLOW' },
  2: { 0: 'OFPBAC_BAD_TYPE', 1: 'OFPBAC_BAD_LEN', 2: 'OFPBAC_BAD_EXPERIMENTER', 3: 'OFPBAC_BAD_EXP_TYPE', 4: 'OFPBAC_BAD_OUT_PORT', 5: 'OFPBAC_BAD_ARGUMENT', 9: 'OFPBAC_BAD_OUT_GROUP', 10: 'OFPBAC_MATCH_INCONSISTENT', 11: 'OFPBAC_UNSUPPORTED_ORDER', 13: 'OFPBAC_BAD_SET_TYPE', 14: 'OFPBAC_BAD_SET_LEN', 15: 'OFPBAC_BAD_SET_ARGUMENT' },
  3: { 0: 'OFPBIC_UNKNOWN_INST', 1: 'OFPBIC_UNSUP_INST', 2: 'OFPBIC_BAD_TABLE_ID', 6: 'OFPBIC_BAD_LEN' },
  4: { 0: 'OFPBMC_BAD_TYPE', 1: 'OFPBMC_BAD_LEN', 2: 'OFPBMC_BAD_TAG', 3: 'OFPBMC_BAD_DL_ADDR_MASK', 4: 'OFPBMC_BAD_NW_ADDR_MASK', 5: 'OFPBMC_BAD_WILDCARDS', 6: 'OFPBMC_BAD_FIELD', 7: 'OFPBMC_BAD_VALUE', 8: 'OFPBMC_BAD_MASK', 9: 'OFPBMC_BAD_PREREQ', 10: 'OFPBMC_DUP_FIELD' },
  5: { 0: 'OFPFMFC_UNKNOWN', 1: 'OFPFMFC_TABLE_FULL', 2: 'OFPFMFC_BAD_TABLE_ID', 3: 'OFPFMFC_OVERLAP', 4: 'OFPFMFC_EPERM', 5: 'OFPFMFC_BAD_TIMEOUT', 6: 'OFPFMFC_BAD_COMMAND', 7: 'OFPFMFC_BAD_FLAGS' },
  12: { 0: 'OFPMMFC_UNKNOWN', 1: 'OFPMMFC_METER_EXISTS', 2: 'OFPMMFC_INVALID_METER', 3: 'OFPMMFC_UNKNOWN_METER' },
  17: { 0: 'OFPBFC_UNKNOWN', 1: 'OFPBFC_EPERM', 2: 'OFPBFC_BAD_ID', 3: 'OFPBFC_BUNDLE_EXIST', 4: 'OFPBFC_BUNDLE_CLOSED', 5: 'OFPBFC_OUT_OF_BUNDLES', 6: 'OFPBFC_BAD_TYPE', 7: 'OFPBFC_BAD_FLAGS', 8: 'OFPBFC_MSG_BAD_LEN', 9: 'OFPBFC_MSG_BAD_XID', 10: 'OFPBFC_MSG_UNSUP', 11: 'OFPBFC_MSG_CONFLICT', 12: 'OFPBFC_MSG_TOO_MANY', 13: 'OFPBFC_MSG_FAILED', 14: 'OFPBFC_TIMEOUT', 15: 'OFPBFC_BUNDLE_IN_PROGRESS' },
};

/** "OFPET_BAD_ACTION/OFPBAC_MATCH_INCONSISTENT (type 2, code 10)"; Nicira errors by their numbers. */
export function errorName(type: number, code: number): string {
  const t = ERROR_TYPES[type];
  const c = ERROR_CODES[type]?.[code];
  return `${t ?? 'unknown error type'}${c ? `/${c}` : ''} (type ${type}, code ${code})`;
}
