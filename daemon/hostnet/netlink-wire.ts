/**
 * Netlink's wire format, for the requests and notifications sluice encodes itself (rtnetlink
 * link and namespace-id look-ups, rtnetlink notifications, nf_tables batches): message headers,
 * attributes (type-length-value, padded to 4 bytes), and the string and MAC payloads they carry.
 * Pure: buffers in, buffers out.
 */

/** One netlink attribute: length, type, payload padded to 4 bytes. */
export function attr(type: number, payload: Buffer): Buffer {
  const out = Buffer.alloc((4 + payload.length + 3) & ~3);
  out.writeUInt16LE(4 + payload.length, 0);
  out.writeUInt16LE(type, 2);
  payload.copy(out, 4);
  return out;
}

/** A NUL-terminated string payload. */
export const cstr = (s: string): Buffer => Buffer.concat([Buffer.from(s), Buffer.alloc(1)]);

/** A string payload read back, up to its NUL. */
export const cstring = (b: Buffer | undefined): string | undefined => (b ? b.toString('utf8').replace(/\0.*$/s, '') : undefined);

/** A 6-byte link-layer address as text. */
export const macText = (b: Buffer | undefined): string | undefined => (b && b.length === 6 ? [...b].map((x) => x.toString(16).padStart(2, '0')).join(':') : undefined);

/**
 * Attributes after a fixed header of `headerLen` bytes (aligned to 4), by type with the nested and
 * byte-order flag bits cleared; the first of each type.
 */
export function parseAttrs(data: Buffer, headerLen = 0): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  for (let off = (headerLen + 3) & ~3; off + 4 <= data.length; ) {
    const len = data.readUInt16LE(off);
    if (len < 4 || off + len > data.length) break;
    const type = data.readUInt16LE(off + 2) & 0x3fff;
    if (!out.has(type)) out.set(type, data.subarray(off + 4, off + len));
    off += (len + 3) & ~3;
  }
  return out;
}

/** One netlink message (struct nlmsghdr + payload). */
export function nlmsg(type: number, flags: number, seq: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(16);
  head.writeUInt32LE(16 + payload.length, 0);
  head.writeUInt16LE(type, 4);
  head.writeUInt16LE(flags, 6);
  head.writeUInt32LE(seq, 8);
  return Buffer.concat([head, payload]);
}

export interface NlMessage {
  type: number;
  flags: number;
  seq: number;
  payload: Buffer;
}

/** The messages of one datagram. */
export function parseMessages(datagram: Buffer): NlMessage[] {
  const out: NlMessage[] = [];
  for (let off = 0; off + 16 <= datagram.length; ) {
    const len = datagram.readUInt32LE(off);
    if (len < 16 || off + len > datagram.length) break;
    out.push({ type: datagram.readUInt16LE(off + 4), flags: datagram.readUInt16LE(off + 6), seq: datagram.readUInt32LE(off + 8), payload: datagram.subarray(off + 16, off + len) });
    off += (len + 3) & ~3;
  }
  return out;
}
