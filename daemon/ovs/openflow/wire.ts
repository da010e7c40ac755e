/**
 * OpenFlow 1.5 wire format of the messages the agent exchanges with its bridge (the handshake,
 * echo, errors, packet-in and packet-out, meters and their statistics; flow-mods and bundles are
 * in flowmod.ts), plus the two Open vSwitch (Nicira) extensions it relies on. Pure: Buffers in,
 * Buffers out.
 *
 * Choices:
 * - Version 1.5 only (0x06): the bridge is configured `protocols=OpenFlow15` by the agent.
 * - Packet-ins arrive as NXT_PACKET_IN2 (selected with NXT_SET_PACKET_IN_FORMAT): a property list
 *   carrying table id, cookie, reason, the full packet, the pipeline metadata (in_port, registers,
 *   conntrack state/zone/mark/label, pkt_mark) as OXM/NXM entries, and the `userdata` of a
 *   `controller(userdata=…)` action, which the standard OFPT_PACKET_IN cannot carry. The standard
 *   OFPT_PACKET_IN is decoded too, as a fallback.
 * - In OpenFlow 1.5, Open vSwitch reports registers as 64-bit OXM_OF_PKT_REG<n> (xreg n =
 *   reg 2n << 32 | reg 2n+1); NXM_NX_REG<n> (32-bit) is decoded as well.
 * - PACKET_OUT uses the 1.5 layout (in_port and other pipeline fields in an OXM match).
 */

import type { MeterSpec } from '../../flows/punt.js';

export const OFP15_VERSION = 0x06;
export const OFP_HEADER_LEN = 8;
/** Largest message a switch may send (the length field is 16 bits). */
export const OFP_MAX_MSG_LEN = 0xffff;

export const OFPT = {
  HELLO: 0,
  ERROR: 1,
  ECHO_REQUEST: 2,
  ECHO_REPLY: 3,
  EXPERIMENTER: 4,
  FEATURES_REQUEST: 5,
  FEATURES_REPLY: 6,
  SET_CONFIG: 9,
  PACKET_IN: 10,
  FLOW_REMOVED: 11,
  PORT_STATUS: 12,
  PACKET_OUT: 13,
  MULTIPART_REQUEST: 18,
  MULTIPART_REPLY: 19,
  BARRIER_REQUEST: 20,
  BARRIER_REPLY: 21,
  ROLE_STATUS: 30,
  METER_MOD: 29,
} as const;

/** Reserved port numbers (32-bit, OpenFlow 1.1+). */
export const OFPP = {
  MAX: 0xffffff00,
  IN_PORT: 0xfffffff8,
  TABLE: 0xfffffff9,
  NORMAL: 0xfffffffa,
  FLOOD: 0xfffffffb,
  ALL: 0xfffffffc,
  CONTROLLER: 0xfffffffd,
  LOCAL: 0xfffffffe,
  ANY: 0xffffffff,
} as const;

/** Packet-in reasons (1.4+ names; OVS reports the `controller` action as APPLY_ACTION). */
export const OFPR = { TABLE_MISS: 0, APPLY_ACTION: 1, INVALID_TTL: 2, ACTION_SET: 3, GROUP: 4, PACKET_OUT: 5 } as const;

export const OFP_NO_BUFFER = 0xffffffff;
/** miss_send_len meaning "send whole packets, never buffer". */
export const OFPCML_NO_BUFFER = 0xffff;

export const NX_EXPERIMENTER_ID = 0x00002320;
export const NXT = { SET_PACKET_IN_FORMAT: 16, PACKET_IN2: 30 } as const;
export const NXPIF_NXT_PACKET_IN2 = 2;
const NXPINT = { PACKET: 0, FULL_LEN: 1, BUFFER_ID: 2, TABLE_ID: 3, COOKIE: 4, REASON: 5, METADATA: 6, USERDATA: 7, CONTINUATION: 8 } as const;

/** OXM classes: OpenFlow basic, packet registers (1.5), Nicira NXM_1 (extensions). */
export const OXM_CLASS = { NXM_0: 0x0000, NXM_1: 0x0001, OPENFLOW_BASIC: 0x8000, PACKET_REGS: 0x8001, EXPERIMENTER: 0xffff } as const;
const OFB_IN_PORT = 0;
const OFB_METADATA = 2;
const NXM1 = { PKT_MARK: 33, CT_STATE: 105, CT_ZONE: 106, CT_MARK: 107, CT_LABEL: 108 } as const;

export const OFPAT_OUTPUT = 0;
export const OFPAT_EXPERIMENTER = 0xffff;
const NXAST_RESUBMIT_TABLE = 14;
/** 16-bit OFPP_IN_PORT used by resubmit: "keep the packet's in_port". */
const OFPP10_IN_PORT = 0xfff8;

export const OFPMC = { ADD: 0, MODIFY: 1, DELETE: 2 } as const;
const OFPMF_PKTPS = 0x2;
const OFPMF_BURST = 0x4;
const OFPMF_STATS = 0x8;
const OFPMBT_DROP = 1;

export const OFPET = { HELLO_FAILED: 0, BAD_REQUEST: 1, BAD_ACTION: 2, BAD_MATCH: 4, METER_MOD_FAILED: 12 } as const;
export const OFPMMFC_METER_EXISTS = 1;

export class WireError extends Error {}

export interface Header {
  version: number;
  type: number;
  length: number;
  xid: number;
}

export function decodeHeader(buf: Buffer): Header {
  if (buf.length < OFP_HEADER_LEN) throw new WireError(`OpenFlow message of ${buf.length} bytes is shorter than its header`);
  return { version: buf[0]!, type: buf[1]!, length: buf.readUInt16BE(2), xid: buf.readUInt32BE(4) };
}

/**
 * A buffer for an OpenFlow 1.5 message of `len` bytes with its header (version, type, length, xid)
 * written; the caller writes every byte of the body (the buffer is not zeroed).
 */
export function messageBuffer(type: number, xid: number, len: number): Buffer {
  if (len > OFP_MAX_MSG_LEN) throw new WireError(`OpenFlow message of ${len} bytes exceeds ${OFP_MAX_MSG_LEN}`);
  const out = Buffer.allocUnsafe(len);
  out[0] = OFP15_VERSION;
  out[1] = type;
  out.writeUInt16BE(len, 2);
  out.writeUInt32BE(xid >>> 0, 4);
  return out;
}

/** An OpenFlow 1.5 message: header (version, type, length, xid) and body. */
export function message(type: number, xid: number, body: Buffer = Buffer.alloc(0)): Buffer {
  const out = messageBuffer(type, xid, OFP_HEADER_LEN + body.length);
  body.copy(out, OFP_HEADER_LEN);
  return out;
}

export const pad8 = (n: number): number => (n + 7) & ~7;

/**
 * Splits a byte stream into whole OpenFlow messages. Feed it chunks as they arrive; each call
 * returns the messages completed so far (possibly none).
 */
export class MessageFramer {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): Buffer[] {
    let buf = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    while (buf.length >= OFP_HEADER_LEN) {
      const len = buf.readUInt16BE(2);
      if (len < OFP_HEADER_LEN) throw new WireError(`OpenFlow header announces length ${len}, below ${OFP_HEADER_LEN}`);
      if (buf.length < len) break;
      out.push(buf.subarray(0, len));
      buf = buf.subarray(len);
    }
    // Copy the remainder so a large chunk is not kept alive by a small tail.
    this.pending = buf.length ? Buffer.from(buf) : Buffer.alloc(0);
    return out;
  }

  get buffered(): number {
    return this.pending.length;
  }
}

// ---- handshake and keepalive ----

/** HELLO with a version-bitmap element listing `versions`. */
export function encodeHello(xid: number, versions: number[] = [OFP15_VERSION]): Buffer {
  const words = Math.floor(Math.max(...versions) / 32) + 1;
  const bitmaps = Buffer.alloc(words * 4);
  for (const v of versions) {
    const w = Math.floor(v / 32);
    bitmaps.writeUInt32BE((bitmaps.readUInt32BE(w * 4) | (1 << (v % 32))) >>> 0, w * 4);
  }
  const elemLen = 4 + bitmaps.length;
  const elem = Buffer.alloc(pad8(elemLen));
  elem.writeUInt16BE(1, 0); // OFPHET_VERSIONBITMAP
  elem.writeUInt16BE(elemLen, 2);
  bitmaps.copy(elem, 4);
  return message(OFPT.HELLO, xid, elem);
}

/** Versions a peer's HELLO offers: its bitmap if present, else every version up to its header's. */
export function decodeHelloVersions(msg: Buffer): number[] {
  const h = decodeHeader(msg);
  let at = OFP_HEADER_LEN;
  while (at + 4 <= msg.length) {
    const type = msg.readUInt16BE(at);
    const len = msg.readUInt16BE(at + 2);
    if (len < 4 || at + len > msg.length) break;
    if (type === 1) {
      const versions: number[] = [];
      for (let w = 0; (w + 1) * 4 <= len - 4; w++) {
        const bits = msg.readUInt32BE(at + 4 + w * 4);
        for (let b = 0; b < 32; b++) if (bits & (1 << b)) versions.push(w * 32 + b);
      }
      return versions;
    }
    at += pad8(len);
  }
  return Array.from({ length: h.version }, (_, i) => i + 1);
}

export const encodeFeaturesRequest = (xid: number): Buffer => message(OFPT.FEATURES_REQUEST, xid);
export const encodeBarrierRequest = (xid: number): Buffer => message(OFPT.BARRIER_REQUEST, xid);
export const encodeEchoRequest = (xid: number, payload: Buffer = Buffer.alloc(0)): Buffer => message(OFPT.ECHO_REQUEST, xid, payload);
export const encodeEchoReply = (xid: number, payload: Buffer): Buffer => message(OFPT.ECHO_REPLY, xid, payload);

export interface SwitchFeatures {
  datapathId: bigint;
  nBuffers: number;
  nTables: number;
  capabilities: number;
}

export function decodeFeaturesReply(msg: Buffer): SwitchFeatures {
  if (msg.length < 32) throw new WireError(`FEATURES_REPLY of ${msg.length} bytes is shorter than 32`);
  return { datapathId: msg.readBigUInt64BE(8), nBuffers: msg.readUInt32BE(16), nTables: msg[20]!, capabilities: msg.readUInt32BE(24) };
}

/** SET_CONFIG; a non-zero miss_send_len is also what makes OVS send async messages to a management-socket client. */
export function encodeSetConfig(xid: number, missSendLen = OFPCML_NO_BUFFER, flags = 0): Buffer {
  const body = Buffer.alloc(4);
  body.writeUInt16BE(flags, 0);
  body.writeUInt16BE(missSendLen, 2);
  return message(OFPT.SET_CONFIG, xid, body);
}

function nicira(xid: number, subtype: number, body: Buffer): Buffer {
  const b = Buffer.alloc(8 + body.length);
  b.writeUInt32BE(NX_EXPERIMENTER_ID, 0);
  b.writeUInt32BE(subtype, 4);
  body.copy(b, 8);
  return message(OFPT.EXPERIMENTER, xid, b);
}

export function encodeSetPacketInFormat(xid: number, format = NXPIF_NXT_PACKET_IN2): Buffer {
  const body = Buffer.alloc(4);
  body.writeUInt32BE(format, 0);
  return nicira(xid, NXT.SET_PACKET_IN_FORMAT, body);
}

export interface OfpErrorInfo {
  type: number;
  code: number;
  /** The start of the offending message, as the switch echoes it. */
  data: Buffer;
}

export function decodeError(msg: Buffer): OfpErrorInfo {
  if (msg.length < 12) throw new WireError(`ERROR message of ${msg.length} bytes is shorter than 12`);
  return { type: msg.readUInt16BE(8), code: msg.readUInt16BE(10), data: msg.subarray(12) };
}

/** Experimenter id and subtype of an EXPERIMENTER message. */
export function decodeExperimenter(msg: Buffer): { experimenter: number; subtype: number } {
  if (msg.length < 16) throw new WireError(`EXPERIMENTER message of ${msg.length} bytes is shorter than 16`);
  return { experimenter: msg.readUInt32BE(8), subtype: msg.readUInt32BE(12) };
}

// ---- OXM ----

export interface OxmEntry {
  oxmClass: number;
  field: number;
  hasMask: boolean;
  value: Buffer;
  mask?: Buffer;
  /** Experimenter id for class 0xffff entries. */
  experimenter?: number;
}

export function decodeOxmEntries(buf: Buffer): OxmEntry[] {
  const out: OxmEntry[] = [];
  let at = 0;
  while (at + 4 <= buf.length) {
    const header = buf.readUInt32BE(at);
    const oxmClass = header >>> 16;
    const field = (header >>> 9) & 0x7f;
    const hasMask = ((header >>> 8) & 1) === 1;
    const len = header & 0xff;
    if (at + 4 + len > buf.length) throw new WireError(`OXM field ${oxmClass.toString(16)}:${field} of ${len} bytes overruns its match`);
    let payload = buf.subarray(at + 4, at + 4 + len);
    let experimenter: number | undefined;
    if (oxmClass === OXM_CLASS.EXPERIMENTER) {
      if (payload.length < 4) throw new WireError('experimenter OXM field has no experimenter id');
      experimenter = payload.readUInt32BE(0);
      payload = payload.subarray(4);
    }
    const half = hasMask ? payload.length / 2 : payload.length;
    out.push({
      oxmClass,
      field,
      hasMask,
      value: payload.subarray(0, half),
      ...(hasMask ? { mask: payload.subarray(half) } : {}),
      ...(experimenter === undefined ? {} : { experimenter }),
    });
    at += 4 + len;
  }
  return out;
}

function oxmHeader(oxmClass: number, field: number, len: number): number {
  return ((oxmClass << 16) | (field << 9) | len) >>> 0;
}

/** Pipeline metadata carried by a packet-in, decoded from its OXM/NXM entries (absent = 0). */
export interface PacketMetadata {
  inPort: number;
  /** reg0..reg15 (and beyond if the switch reports more). */
  registers: number[];
  ctState: number;
  ctZone: number;
  ctMark: number;
  ctLabel: bigint;
  pktMark: number;
  metadata: bigint;
}

export const N_REGISTERS = 16;

export function emptyMetadata(): PacketMetadata {
  return { inPort: 0, registers: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], ctState: 0, ctZone: 0, ctMark: 0, ctLabel: 0n, pktMark: 0, metadata: 0n };
}

function setRegister(md: PacketMetadata, i: number, v: number): void {
  while (md.registers.length <= i) md.registers.push(0);
  md.registers[i] = v >>> 0;
}

/** Applies one metadata field (value bytes at buf[at..at+len)) to `md`; unknown fields are ignored. */
function applyMetadataField(md: PacketMetadata, oxmClass: number, field: number, buf: Buffer, at: number, len: number): void {
  if (oxmClass === OXM_CLASS.PACKET_REGS) {
    if (len === 8) {
      setRegister(md, field * 2, buf.readUInt32BE(at));
      setRegister(md, field * 2 + 1, buf.readUInt32BE(at + 4));
    }
  } else if (oxmClass === OXM_CLASS.NXM_1) {
    if (field < 32 && len === 4) setRegister(md, field, buf.readUInt32BE(at));
    else if (field === NXM1.PKT_MARK && len === 4) md.pktMark = buf.readUInt32BE(at);
    else if (field === NXM1.CT_STATE && len === 4) md.ctState = buf.readUInt32BE(at);
    else if (field === NXM1.CT_ZONE && len === 2) md.ctZone = buf.readUInt16BE(at);
    else if (field === NXM1.CT_MARK && len === 4) md.ctMark = buf.readUInt32BE(at);
    else if (field === NXM1.CT_LABEL && len === 16) md.ctLabel = (buf.readBigUInt64BE(at) << 64n) | buf.readBigUInt64BE(at + 8);
  } else if (oxmClass === OXM_CLASS.OPENFLOW_BASIC) {
    if (field === OFB_IN_PORT && len === 4) md.inPort = buf.readUInt32BE(at);
    else if (field === OFB_METADATA && len === 8) md.metadata = buf.readBigUInt64BE(at);
  } else if (oxmClass === OXM_CLASS.NXM_0 && field === 0 && len === 2) {
    md.inPort = buf.readUInt16BE(at); // NXM_OF_IN_PORT (16-bit), used by NXM-format switches
  }
}

export function metadataFromOxm(entries: OxmEntry[]): PacketMetadata {
  const md = emptyMetadata();
  for (const e of entries) applyMetadataField(md, e.oxmClass, e.field, e.value, 0, e.value.length);
  return md;
}

/**
 * Decodes packet-in metadata in place (the hot path: no intermediate objects or views). Masked
 * entries contribute their value half; experimenter entries are skipped.
 */
export function decodeMetadata(buf: Buffer, start: number, end: number): PacketMetadata {
  const md = emptyMetadata();
  let at = start;
  while (at + 4 <= end) {
    const header = buf.readUInt32BE(at);
    const len = header & 0xff;
    if (at + 4 + len > end) throw new WireError(`OXM field ${(header >>> 16).toString(16)}:${(header >>> 9) & 0x7f} of ${len} bytes overruns its match`);
    const oxmClass = header >>> 16;
    if (oxmClass !== OXM_CLASS.EXPERIMENTER) {
      const valueLen = (header >>> 8) & 1 ? len >> 1 : len;
      applyMetadataField(md, oxmClass, (header >>> 9) & 0x7f, buf, at + 4, valueLen);
    }
    at += 4 + len;
  }
  return md;
}

/** ct_state bits (ovs-fields(7)). */
export const CT_STATE = { NEW: 0x01, EST: 0x02, REL: 0x04, RPL: 0x08, INV: 0x10, TRK: 0x20, SNAT: 0x40, DNAT: 0x80 } as const;

// ---- packet-in ----

export interface PacketIn extends PacketMetadata {
  tableId: number;
  cookie: bigint;
  /** OFPR_* reason. */
  reason: number;
  /** The frame (whole, unless the flow's controller action truncated it: then see totalLength). */
  packet: Buffer;
  totalLength: number;
  bufferId: number;
  /** `controller(userdata=…)` bytes; undefined when the action had none. */
  userdata?: Buffer;
  /** True when the action paused the pipeline (controller(pause)); resuming is not supported here. */
  hasContinuation: boolean;
}

export function decodePacketIn2(msg: Buffer): PacketIn {
  const { experimenter, subtype } = decodeExperimenter(msg);
  if (experimenter !== NX_EXPERIMENTER_ID || subtype !== NXT.PACKET_IN2) throw new WireError('not an NXT_PACKET_IN2 message');
  let packet: Buffer | undefined;
  let fullLen: number | undefined;
  let tableId = 0;
  let cookie = 0xffffffffffffffffn;
  let reason = 0;
  let bufferId = OFP_NO_BUFFER;
  let userdata: Buffer | undefined;
  let md: PacketMetadata | undefined;
  let hasContinuation = false;
  let at = 16;
  while (at + 4 <= msg.length) {
    const type = msg.readUInt16BE(at);
    const len = msg.readUInt16BE(at + 2);
    if (len < 4 || at + len > msg.length) throw new WireError(`NXT_PACKET_IN2 property ${type} of length ${len} overruns the message`);
    const v = at + 4; // value offset
    const vlen = len - 4;
    switch (type) {
      case NXPINT.PACKET:
        packet = msg.subarray(v, at + len);
        break;
      case NXPINT.FULL_LEN:
        if (vlen >= 4) fullLen = msg.readUInt32BE(v);
        break;
      case NXPINT.BUFFER_ID:
        if (vlen >= 4) bufferId = msg.readUInt32BE(v);
        break;
      case NXPINT.TABLE_ID:
        if (vlen >= 1) tableId = msg[v]!;
        break;
      case NXPINT.COOKIE:
        // 64-bit properties are 8-byte aligned: 4 pad bytes follow the property header.
        if (vlen >= 8) cookie = msg.readBigUInt64BE(vlen >= 12 ? v + 4 : v);
        break;
      case NXPINT.REASON:
        if (vlen >= 1) reason = msg[v]!;
        break;
      case NXPINT.METADATA:
        md = decodeMetadata(msg, at + 4, at + len);
        break;
      case NXPINT.USERDATA:
        userdata = msg.subarray(v, at + len);
        break;
      case NXPINT.CONTINUATION:
        hasContinuation = true;
        break;
      default:
        break; // unknown properties are ignored, as the extension allows
    }
    at += pad8(len);
  }
  if (!packet) throw new WireError('NXT_PACKET_IN2 without a packet property');
  const pin = (md ?? emptyMetadata()) as PacketIn;
  pin.tableId = tableId;
  pin.cookie = cookie;
  pin.reason = reason;
  pin.packet = packet;
  pin.totalLength = fullLen ?? packet.length;
  pin.bufferId = bufferId;
  pin.hasContinuation = hasContinuation;
  if (userdata) pin.userdata = userdata;
  return pin;
}

/** Standard OpenFlow 1.3+ OFPT_PACKET_IN (no userdata). */
export function decodeStandardPacketIn(msg: Buffer): PacketIn {
  if (msg.length < 32) throw new WireError(`PACKET_IN of ${msg.length} bytes is too short`);
  const bufferId = msg.readUInt32BE(8);
  const totalLength = msg.readUInt16BE(12);
  const reason = msg[14]!;
  const tableId = msg[15]!;
  const cookie = msg.readBigUInt64BE(16);
  const matchLen = msg.readUInt16BE(26);
  if (matchLen < 4 || 24 + pad8(matchLen) + 2 > msg.length) throw new WireError(`PACKET_IN match length ${matchLen} overruns the message`);
  const md = decodeMetadata(msg, 28, 24 + matchLen);
  const packet = msg.subarray(24 + pad8(matchLen) + 2);
  return { ...md, tableId, cookie, reason, packet, totalLength, bufferId, hasContinuation: false };
}

// ---- packet-out ----

export type PacketOutAction =
  /** Output to an OpenFlow port (or a reserved one: OFPP.IN_PORT, OFPP.TABLE, OFPP.NORMAL…). */
  | { type: 'output'; port: number }
  /** Nicira resubmit(,table): run the packet through `table` (in_port unchanged). */
  | { type: 'resubmit'; table: number };

export interface PacketOut {
  packet: Buffer;
  /** in_port the pipeline sees; OFPP.CONTROLLER when the packet is simply sent out of a port. */
  inPort?: number;
  actions: PacketOutAction[];
  /** Registers to preset (index -> value), e.g. a "generated by the agent" bit in reg0. */
  registers?: Record<number, number>;
}

function encodeAction(a: PacketOutAction): Buffer {
  if (a.type === 'output') {
    const b = Buffer.alloc(16);
    b.writeUInt16BE(OFPAT_OUTPUT, 0);
    b.writeUInt16BE(16, 2);
    b.writeUInt32BE(a.port >>> 0, 4);
    b.writeUInt16BE(OFPCML_NO_BUFFER, 8);
    return b;
  }
  if (!Number.isInteger(a.table) || a.table < 0 || a.table > 254) throw new WireError(`resubmit table ${a.table} is not 0..254`);
  const b = Buffer.alloc(16);
  b.writeUInt16BE(OFPAT_EXPERIMENTER, 0);
  b.writeUInt16BE(16, 2);
  b.writeUInt32BE(NX_EXPERIMENTER_ID, 4);
  b.writeUInt16BE(NXAST_RESUBMIT_TABLE, 8);
  b.writeUInt16BE(OFPP10_IN_PORT, 10);
  b[12] = a.table;
  return b;
}

export function encodePacketOut(xid: number, po: PacketOut): Buffer {
  const inPort = po.inPort ?? OFPP.CONTROLLER;
  const fields: Buffer[] = [];
  const inPortField = Buffer.alloc(8);
  inPortField.writeUInt32BE(oxmHeader(OXM_CLASS.OPENFLOW_BASIC, OFB_IN_PORT, 4), 0);
  inPortField.writeUInt32BE(inPort >>> 0, 4);
  fields.push(inPortField);
  const regs = po.registers ?? {};
  const pairs = new Set(Object.keys(regs).map((k) => {
    const i = Number(k);
    if (!Number.isInteger(i) || i < 0 || i >= N_REGISTERS) throw new WireError(`register index ${k} is not 0..${N_REGISTERS - 1}`);
    return i >> 1;
  }));
  for (const pair of [...pairs].sort((a, b) => a - b)) {
    const f = Buffer.alloc(12);
    f.writeUInt32BE(oxmHeader(OXM_CLASS.PACKET_REGS, pair, 8), 0);
    f.writeUInt32BE((regs[pair * 2] ?? 0) >>> 0, 4);
    f.writeUInt32BE((regs[pair * 2 + 1] ?? 0) >>> 0, 8);
    fields.push(f);
  }
  const oxm = Buffer.concat(fields);
  const match = Buffer.alloc(pad8(4 + oxm.length));
  match.writeUInt16BE(1, 0); // OFPMT_OXM
  match.writeUInt16BE(4 + oxm.length, 2);
  oxm.copy(match, 4);
  const actions = Buffer.concat(po.actions.map(encodeAction));
  const fixed = Buffer.alloc(8);
  fixed.writeUInt32BE(OFP_NO_BUFFER, 0);
  fixed.writeUInt16BE(actions.length, 4);
  return message(OFPT.PACKET_OUT, xid, Buffer.concat([fixed, match, actions, po.packet]));
}

// ---- meters ----


export function encodeMeterMod(xid: number, command: number, m: MeterSpec): Buffer {
  if (!Number.isInteger(m.meterId) || m.meterId < 1 || m.meterId > 0xffff0000) throw new WireError(`meter id ${m.meterId} is not 1..0xffff0000`);
  if (!Number.isInteger(m.rate) || m.rate < 1) throw new WireError(`meter ${m.meterId}: rate ${m.rate} is not a positive integer`);
  if (!Number.isInteger(m.burst) || m.burst < 0) throw new WireError(`meter ${m.meterId}: burst ${m.burst} is not a non-negative integer`);
  const body = Buffer.alloc(command === OFPMC.DELETE ? 8 : 24);
  body.writeUInt16BE(command, 0);
  body.writeUInt16BE(OFPMF_PKTPS | OFPMF_BURST | OFPMF_STATS, 2);
  body.writeUInt32BE(m.meterId, 4);
  if (command !== OFPMC.DELETE) {
    body.writeUInt16BE(OFPMBT_DROP, 8);
    body.writeUInt16BE(16, 10);
    body.writeUInt32BE(m.rate, 12);
    body.writeUInt32BE(m.burst, 16);
  }
  return message(OFPT.METER_MOD, xid, body);
}

// ---- meter statistics ----

/** Multipart type of meter statistics, and the meter id that asks for all of them. */
export const OFPMP_METER_STATS = 9;
export const OFPM_ALL = 0xffffffff;
/** Multipart reply flag: more parts of this reply follow. */
export const OFPMPF_REPLY_MORE = 1;

export interface MeterStats {
  meterId: number;
  /** Flows that use the meter. */
  flowCount: number;
  /** Packets and bytes that reached the meter. */
  packetsIn: bigint;
  bytesIn: bigint;
  /** Per band, the packets and bytes the band acted on: for a drop band, those it dropped. */
  bands: { packets: bigint; bytes: bigint }[];
}

export function encodeMeterStatsRequest(xid: number, meterId: number = OFPM_ALL): Buffer {
  const body = Buffer.alloc(16);
  body.writeUInt16BE(OFPMP_METER_STATS, 0);
  body.writeUInt32BE(meterId >>> 0, 8);
  return message(OFPT.MULTIPART_REQUEST, xid, body);
}

/** One part of a meter-statistics reply; `more` says whether further parts follow. */
export function decodeMeterStatsReply(msg: Buffer): { more: boolean; meters: MeterStats[] } {
  const h = decodeHeader(msg);
  if (h.type !== OFPT.MULTIPART_REPLY) throw new WireError(`message type ${h.type} is not a multipart reply`);
  if (msg.length < 16) throw new WireError(`multipart reply of ${msg.length} bytes is shorter than its 16-byte header`);
  const type = msg.readUInt16BE(8);
  if (type !== OFPMP_METER_STATS) throw new WireError(`multipart reply of type ${type}, not meter statistics (${OFPMP_METER_STATS})`);
  const more = (msg.readUInt16BE(10) & OFPMPF_REPLY_MORE) !== 0;
  const meters: MeterStats[] = [];
  for (let off = 16; off < msg.length; ) {
    if (off + 40 > msg.length) throw new WireError(`meter statistics entry at byte ${off} is truncated`);
    const len = msg.readUInt16BE(off + 4);
    if (len < 40 || (len - 40) % 16 !== 0 || off + len > msg.length) throw new WireError(`meter statistics entry at byte ${off} has a bad length ${len}`);
    const bands: MeterStats['bands'] = [];
    for (let b = off + 40; b < off + len; b += 16) bands.push({ packets: msg.readBigUInt64BE(b), bytes: msg.readBigUInt64BE(b + 8) });
    meters.push({ meterId: msg.readUInt32BE(off), flowCount: msg.readUInt32BE(off + 12), packetsIn: msg.readBigUInt64BE(off + 16), bytesIn: msg.readBigUInt64BE(off + 24), bands });
    off += len;
  }
  return { more, meters };
}
