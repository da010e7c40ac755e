/**
 * Test helpers for the OpenFlow controller: message encoders written from the specs independently
 * of daemon/ovs/openflow/wire.ts, and a scriptable fake switch listening on a unix socket.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Test-side encoders, written from the specs independently of the module under test.
export function header(type: number, len: number, xid: number): Buffer {
  const b = Buffer.alloc(8);
  b[0] = 6;
  b[1] = type;
  b.writeUInt16BE(len, 2);
  b.writeUInt32BE(xid, 4);
  return b;
}
export function prop(type: number, value: Buffer, alignPad = 0): Buffer {
  const len = 4 + alignPad + value.length;
  const b = Buffer.alloc((len + 7) & ~7);
  b.writeUInt16BE(type, 0);
  b.writeUInt16BE(len, 2);
  value.copy(b, 4 + alignPad);
  return b;
}
export function oxm(cls: number, field: number, value: Buffer): Buffer {
  const b = Buffer.alloc(4 + value.length);
  b.writeUInt32BE(((cls << 16) | (field << 9) | value.length) >>> 0, 0);
  value.copy(b, 4);
  return b;
}
export const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
export const u64 = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(n);
  return b;
};
export function packetIn2(xid: number, parts: { packet: Buffer; table: number; cookie: bigint; reason: number; metadata: Buffer; userdata?: Buffer; extra?: Buffer[] }): Buffer {
  const props = [
    prop(0, parts.packet),
    prop(3, Buffer.from([parts.table])),
    prop(4, u64(parts.cookie), 4),
    prop(5, Buffer.from([parts.reason])),
    prop(6, parts.metadata),
    ...(parts.userdata ? [prop(7, parts.userdata)] : []),
    ...(parts.extra ?? []),
  ];
  const body = Buffer.concat([u32(0x2320), u32(30), ...props]);
  return Buffer.concat([header(4, 8 + body.length, xid), body]);
}

export function errorMsg(xid: number, type: number, code: number, data: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from([type >> 8, type & 0xff, code >> 8, code & 0xff]), data.subarray(0, 64)]);
  return Buffer.concat([header(1, 8 + body.length, xid), body]);
}

export interface Received {
  type: number;
  xid: number;
  msg: Buffer;
}

/** A fake OVS: answers the handshake, records everything, and lets the test push messages. */
export class FakeSwitch {
  readonly dir = mkdtempSync(join(tmpdir(), 'of-fake-'));
  readonly path = join(this.dir, 'br-int.mgmt');
  server?: Server | undefined;
  conns: Socket[] = [];
  received: Received[] = [];
  /** Versions offered in our HELLO bitmap. */
  versions = [1, 4, 6];
  /** Meter ids that already exist: ADD gets OFPMMFC_METER_EXISTS. */
  existingMeters = new Set<number>();
  /** What meter-statistics requests are answered with: per meter, packets in and dropped by its band. */
  meterStats: { meterId: number; packetsIn: bigint; dropped: bigint }[] = [];
  /** Meters per part of a meter-statistics reply (more than one part sets OFPMPF_REPLY_MORE on all but the last). */
  meterStatsPerPart = 8;
  /** Answer echo requests (false simulates a hung switch). */
  answerEcho = true;
  /** A bundled flow-mod's error when it is added ([type, code]), or undefined to accept it. */
  bundleAddError: (flowMod: Buffer) => [number, number] | undefined = () => undefined;
  /** At COMMIT: the error of the n-th added message (as OVS reports it, under its xid), then OFPBFC_MSG_FAILED for the commit. */
  commitError?: { index: number; type: number; code: number } | undefined;
  /** At COMMIT: an error for the commit alone. */
  commitOnlyError?: [number, number] | undefined;
  /** Flow descriptions answered to OFPMP_FLOW_DESC, `flowDescPerPart` per reply part. */
  flowDescs: { table: number; priority: number; cookie: bigint; packets: bigint; bytes: bigint }[] = [];
  flowDescPerPart = 2;
  private bundleXids: number[] = [];
  private listeners: ((r: Received) => void)[] = [];

  async listen(): Promise<void> {
    const server = createServer((sock) => this.accept(sock));
    this.server = server;
    await new Promise<void>((resolve) => server.listen(this.path, resolve));
  }

  private accept(sock: Socket): void {
    this.conns.push(sock);
    let pending = Buffer.alloc(0);
    let bitmap = 0;
    for (const v of this.versions) bitmap |= 1 << v;
    const hello = Buffer.concat([header(0, 16, 1), Buffer.from([0, 1, 0, 8]), u32(bitmap)]);
    hello[0] = Math.max(...this.versions);
    sock.write(hello);
    sock.on('error', () => undefined);
    sock.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 8 && pending.length >= pending.readUInt16BE(2)) {
        const len = pending.readUInt16BE(2);
        const msg = pending.subarray(0, len);
        pending = pending.subarray(len);
        this.onMessage(sock, msg);
      }
    });
  }

  private onMessage(sock: Socket, msg: Buffer): void {
    const r = { type: msg[1]!, xid: msg.readUInt32BE(4), msg: Buffer.from(msg) };
    this.received.push(r);
    if (r.type === 5) {
      const body = Buffer.alloc(24);
      body.writeBigUInt64BE(0xabcn, 0);
      body[12] = 254;
      sock.write(Buffer.concat([header(6, 32, r.xid), body]));
    } else if (r.type === 20) sock.write(header(21, 8, r.xid));
    else if (r.type === 2 && this.answerEcho) sock.write(Buffer.concat([header(3, msg.length, r.xid), msg.subarray(8)]));
    else if (r.type === 29 && msg.readUInt16BE(8) === 0 && this.existingMeters.has(msg.readUInt32BE(12))) sock.write(errorMsg(r.xid, 12, 1, msg));
    else if (r.type === 29 && msg.readUInt16BE(8) === 0) this.existingMeters.add(msg.readUInt32BE(12));
    else if (r.type === 18 && msg.readUInt16BE(8) === 9) for (const part of this.meterStatsReply(r.xid)) sock.write(part);
    else if (r.type === 18 && msg.readUInt16BE(8) === 1) for (const part of this.flowDescReply(r.xid)) sock.write(part);
    else if (r.type === 18 && msg.readUInt16BE(8) === 2) sock.write(this.aggregateReply(r.xid));
    else if (r.type === 34) {
      this.bundleXids.push(r.xid);
      const err = this.bundleAddError(msg.subarray(16));
      if (err) sock.write(errorMsg(r.xid, err[0], err[1], msg));
    } else if (r.type === 33) this.bundleControl(sock, r.xid, msg);
    for (const l of this.listeners) l(r);
  }

  private bundleControl(sock: Socket, xid: number, msg: Buffer): void {
    const type = msg.readUInt16BE(12);
    if (type === 0) this.bundleXids = [];
    if (type === 4 && this.commitError) {
      sock.write(errorMsg(this.bundleXids[this.commitError.index]!, this.commitError.type, this.commitError.code, msg));
      sock.write(errorMsg(xid, 17, 13, msg)); // OFPBFC_MSG_FAILED
      return;
    }
    if (type === 4 && this.commitOnlyError) {
      sock.write(errorMsg(xid, this.commitOnlyError[0], this.commitOnlyError[1], msg));
      return;
    }
    const reply = Buffer.from(msg);
    reply.writeUInt16BE(type + 1, 12); // *_REPLY
    sock.write(reply);
  }

  /** OpenFlow 1.5 flow descriptions (empty match, OXS packet and byte counts, no instructions), in parts. */
  private flowDescReply(xid: number): Buffer[] {
    const entry = (f: FakeSwitch['flowDescs'][number]) => {
      const stats = Buffer.concat([Buffer.from([0, 0, 0, 28]), u32(0x80020808), u64(f.packets), u32(0x80020a08), u64(f.bytes), Buffer.alloc(4)]);
      const e = Buffer.concat([Buffer.alloc(24), Buffer.from('0001000400000000', 'hex'), stats]);
      e.writeUInt16BE(e.length, 0);
      e[4] = f.table;
      e.writeUInt16BE(f.priority, 6);
      e.writeBigUInt64BE(f.cookie, 16);
      return e;
    };
    const parts: Buffer[] = [];
    for (let i = 0; i === 0 || i < this.flowDescs.length; i += this.flowDescPerPart) {
      const body = Buffer.concat(this.flowDescs.slice(i, i + this.flowDescPerPart).map(entry));
      const head = Buffer.alloc(8);
      head.writeUInt16BE(1, 0);
      head.writeUInt16BE(i + this.flowDescPerPart < this.flowDescs.length ? 1 : 0, 2);
      parts.push(Buffer.concat([header(19, 16 + body.length, xid), head, body]));
    }
    return parts;
  }

  private aggregateReply(xid: number): Buffer {
    const stats = Buffer.concat([Buffer.from([0, 0, 0, 36]), u32(0x80020604), u32(this.flowDescs.length), u32(0x80020808), u64(7n), u32(0x80020a08), u64(700n), Buffer.alloc(4)]);
    const head = Buffer.alloc(8);
    head.writeUInt16BE(2, 0);
    return Buffer.concat([header(19, 16 + stats.length, xid), head, stats]);
  }

  /** The meter-statistics reply as OVS lays it out (ofp_meter_stats with one drop band each), in parts. */
  private meterStatsReply(xid: number): Buffer[] {
    const entry = (m: { meterId: number; packetsIn: bigint; dropped: bigint }) => {
      const e = Buffer.alloc(56);
      e.writeUInt32BE(m.meterId, 0);
      e.writeUInt16BE(56, 4);
      e.writeUInt32BE(1, 12); // flow count
      e.writeBigUInt64BE(m.packetsIn, 16);
      e.writeBigUInt64BE(m.packetsIn * 60n, 24);
      e.writeUInt32BE(7, 32); // duration
      e.writeBigUInt64BE(m.dropped, 40);
      e.writeBigUInt64BE(m.dropped * 60n, 48);
      return e;
    };
    const parts: Buffer[] = [];
    for (let i = 0; i === 0 || i < this.meterStats.length; i += this.meterStatsPerPart) {
      const body = Buffer.concat(this.meterStats.slice(i, i + this.meterStatsPerPart).map(entry));
      const more = i + this.meterStatsPerPart < this.meterStats.length;
      const head = Buffer.alloc(8);
      head.writeUInt16BE(9, 0);
      head.writeUInt16BE(more ? 1 : 0, 2);
      parts.push(Buffer.concat([header(19, 16 + body.length, xid), head, body]));
    }
    return parts;
  }

  /** Resolves with the next received message matching `pred` (or an already received one after `from`). */
  waitFor(pred: (r: Received) => boolean, from = 0, timeoutMs = 5000): Promise<Received> {
    const seen = this.received.slice(from).find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('fake switch: expected message not received')), timeoutMs);
      const l = (r: Received) => {
        if (!pred(r)) return;
        clearTimeout(timer);
        this.listeners = this.listeners.filter((x) => x !== l);
        resolve(r);
      };
      this.listeners.push(l);
    });
  }

  send(msg: Buffer): void {
    const sock = this.conns[this.conns.length - 1];
    if (!sock) throw new Error('fake switch: no connection');
    sock.write(msg);
  }

  /** Drops every connection and stops listening (a switch restart's first half). */
  async stop(): Promise<void> {
    for (const c of this.conns) c.destroy();
    this.conns = [];
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
