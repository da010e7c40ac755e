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
import { message, NX_EXPERIMENTER_ID, OFPP, pad8, WireError } from './wire.js';

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


// ---- match ----

const oxmHeader = (f: FieldDef, masked: boolean): number => ((f.oxmClass << 16) | (f.code << 9) | ((masked ? 1 : 0) << 8) | (masked ? 2 * f.bytes : f.bytes)) >>> 0;

function oxm(f: FieldDef, value: Buffer, mask?: Buffer): Buffer {
  const b = Buffer.alloc(4 + value.length + (mask ? mask.length : 0));
  b.writeUInt32BE(oxmHeader(f, mask !== undefined), 0);
  value.copy(b, 4);
  mask?.copy(b, 4 + value.length);
  return b;
}

/** ofp_match (type OXM) padded to 8 bytes. */
export function encodeMatch(entries: readonly MatchEntry[]): Buffer {
  const fields = Buffer.concat(entries.map((e) => oxm(e.field, e.value, e.mask)));
  const out = Buffer.alloc(pad8(4 + fields.length));
  out.writeUInt16BE(1, 0); // OFPMT_OXM
  out.writeUInt16BE(4 + fields.length, 2);
  fields.copy(out, 4);
  return out;
}

// ---- actions ----

function nxAction(subtype: number, body: Buffer): Buffer {
  const len = pad8(10 + body.length);
  const b = Buffer.alloc(len);
  b.writeUInt16BE(OFPAT_EXPERIMENTER, 0);
  b.writeUInt16BE(len, 2);
  b.writeUInt32BE(NX_EXPERIMENTER_ID, 4);
  b.writeUInt16BE(subtype, 8);
  body.copy(b, 10);
  return b;
}

/** NXM header of a field (move/output_reg operands), without mask. */
const nxmHeader = (f: FieldDef): number => oxmHeader(f, false);
const ofsNbits = (s: SubField): number => (s.ofs << 6) | (s.nbits - 1);

function prop(type: number, value: Buffer): Buffer {
  const b = Buffer.alloc(pad8(4 + value.length));
  b.writeUInt16BE(type, 0);
  b.writeUInt16BE(4 + value.length, 2);
  value.copy(b, 4);
  return b;
}

function encodeAction(a: Action): Buffer {
  switch (a.type) {
    case 'output': {
      const b = Buffer.alloc(16);
      b.writeUInt16BE(OFPAT_OUTPUT, 0);
      b.writeUInt16BE(16, 2);
      b.writeUInt32BE(a.port === OFPP_IN_PORT ? OFPP.IN_PORT : a.port, 4);
      b.writeUInt16BE(0, 8); // max_len: only meaningful for the controller port
      return b;
    }
    case 'output_reg': {
      const body = Buffer.alloc(14);
      body.writeUInt16BE(ofsNbits(a.src), 0);
      body.writeUInt32BE(nxmHeader(a.src.field), 2);
      body.writeUInt16BE(0, 6); // max_len
      return nxAction(NXAST.OUTPUT_REG, body);
    }
    case 'dec_ttl': {
      const b = Buffer.alloc(8);
      b.writeUInt16BE(OFPAT_DEC_NW_TTL, 0);
      b.writeUInt16BE(8, 2);
      return b;
    }
    case 'set_field': {
      const field = oxm(a.field, a.value, a.mask);
      const b = Buffer.alloc(pad8(4 + field.length));
      b.writeUInt16BE(OFPAT_SET_FIELD, 0);
      b.writeUInt16BE(b.length, 2);
      field.copy(b, 4);
      return b;
    }
    case 'move': {
      // OpenFlow 1.5's own copy_field (OVS refuses Nicira's reg_move in 1.5).
      const b = Buffer.alloc(24);
      b.writeUInt16BE(OFPAT_COPY_FIELD, 0);
      b.writeUInt16BE(24, 2);
      b.writeUInt16BE(a.src.nbits, 4);
      b.writeUInt16BE(a.src.ofs, 6);
      b.writeUInt16BE(a.dst.ofs, 8);
      b.writeUInt32BE(nxmHeader(a.src.field), 12);
      b.writeUInt32BE(nxmHeader(a.dst.field), 16);
      return b;
    }
    case 'ct': {
      const nested = Buffer.concat(a.exec.map(encodeAction));
      const body = Buffer.alloc(14);
      body.writeUInt16BE(a.commit ? NX_CT_F_COMMIT : 0, 0);
      body.writeUInt32BE(0, 2); // zone_src: none, the zone is immediate
      body.writeUInt16BE(a.zone ?? 0, 6);
      body[8] = a.table ?? NX_CT_RECIRC_NONE;
      body.writeUInt16BE(0, 12); // alg
      const head = nxAction(NXAST.CT, body); // 24 bytes
      const out = Buffer.concat([head, nested]);
      out.writeUInt16BE(out.length, 2);
      return out;
    }
    case 'conjunction': {
      const body = Buffer.alloc(6);
      body[0] = a.clause;
      body[1] = a.nClauses;
      body.writeUInt32BE(a.id >>> 0, 2);
      return nxAction(NXAST.CONJUNCTION, body);
    }
    case 'resubmit': {
      const body = Buffer.alloc(6);
      body.writeUInt16BE(a.inPort === undefined || a.inPort === OFPP_IN_PORT ? 0xfff8 : a.inPort, 0);
      body[2] = a.table;
      return nxAction(NXAST.RESUBMIT_TABLE, body);
    }
    case 'controller': {
      const props: Buffer[] = [];
      if (a.maxLen !== undefined && a.maxLen !== OFPCML_NO_BUFFER) {
        const v = Buffer.alloc(2);
        v.writeUInt16BE(a.maxLen, 0);
        props.push(prop(NXAC2PT.MAX_LEN, v));
      }
      if (a.userdata) props.push(prop(NXAC2PT.USERDATA, a.userdata));
      if (a.meterId !== undefined) {
        const v = Buffer.alloc(4);
        v.writeUInt32BE(a.meterId >>> 0, 0);
        props.push(prop(NXAC2PT.METER_ID, v));
      }
      const head = nxAction(NXAST.CONTROLLER2, Buffer.alloc(6)); // 16 bytes
      const out = Buffer.concat([head, ...props]);
      out.writeUInt16BE(out.length, 2);
      return out;
    }
  }
}

export const encodeActions = (actions: readonly Action[]): Buffer => Buffer.concat(actions.map(encodeAction));

function encodeInstructions(flow: ParsedFlow): Buffer {
  const parts: Buffer[] = [];
  if (flow.actions.length) {
    const acts = encodeActions(flow.actions);
    const head = Buffer.alloc(8);
    head.writeUInt16BE(OFPIT_APPLY_ACTIONS, 0);
    head.writeUInt16BE(8 + acts.length, 2);
    parts.push(head, acts);
  }
  if (flow.gotoTable !== undefined) {
    const g = Buffer.alloc(8);
    g.writeUInt16BE(OFPIT_GOTO_TABLE, 0);
    g.writeUInt16BE(8, 2);
    g[4] = flow.gotoTable;
    parts.push(g);
  }
  return Buffer.concat(parts);
}

// ---- flow mod ----

interface FlowModHead {
  command: number;
  table: number;
  priority: number;
  cookie: bigint;
  cookieMask: bigint;
}

function flowModBody(h: FlowModHead, match: Buffer, instructions: Buffer): Buffer {
  const b = Buffer.alloc(40 + match.length + instructions.length);
  b.writeBigUInt64BE(h.cookie, 0);
  b.writeBigUInt64BE(h.cookieMask, 8);
  b[16] = h.table;
  b[17] = h.command;
  b.writeUInt16BE(0, 18); // idle_timeout
  b.writeUInt16BE(0, 20); // hard_timeout
  b.writeUInt16BE(h.priority, 22);
  b.writeUInt32BE(OFP_NO_BUFFER, 24);
  b.writeUInt32BE(OFPP.ANY, 28); // out_port
  b.writeUInt32BE(OFPG_ANY, 32); // out_group
  b.writeUInt16BE(0, 36); // flags
  b.writeUInt16BE(0, 38); // importance
  match.copy(b, 40);
  instructions.copy(b, 40 + match.length);
  return b;
}

/** OFPFC_ADD of one flow. */
export function encodeFlowAdd(xid: number, flow: ParsedFlow): Buffer {
  const head = { command: OFPFC.ADD, table: flow.table, priority: flow.priority, cookie: flow.cookie, cookieMask: 0n };
  return message(OFPT_FLOW_MOD, xid, flowModBody(head, encodeMatch(flow.match), encodeInstructions(flow)));
}

/** OFPFC_DELETE of every flow, in every table, whose cookie is `cookie` under `mask` (default: exactly). */
export function encodeFlowDeleteByCookie(xid: number, cookie: bigint, mask = 0xffffffffffffffffn): Buffer {
  const head = { command: OFPFC.DELETE, table: OFPTT_ALL, priority: 0, cookie, cookieMask: mask };
  return message(OFPT_FLOW_MOD, xid, flowModBody(head, encodeMatch([]), Buffer.alloc(0)));
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
  const b = Buffer.alloc(8 + inner.length);
  b.writeUInt32BE(bundleId >>> 0, 0);
  b.writeUInt16BE(0, 4);
  b.writeUInt16BE(flags, 6);
  inner.copy(b, 8);
  return message(OFPT_BUNDLE_ADD_MESSAGE, inner.readUInt32BE(4), b);
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
