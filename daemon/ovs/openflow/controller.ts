/**
 * The agent's OpenFlow connection to br-int: flow programming (atomic bundles of flow-mods, see
 * ./flowmod.ts) and flow read-back (flow descriptions, aggregate counts), the packet-in path
 * (Reject replies, audit logging, DNS learning), the meters that rate-limit it and their statistics.
 *
 * Topology: the agent is the *client* of the bridge's management socket
 * `<ovs rundir>/<bridge>.mgmt`, which ovs-vswitchd always listens on. Nothing is written to OVSDB
 * (no set-controller), so the bridge's fail-mode and flows are unaffected by the agent being up or
 * down, and either side can restart: the agent reconnects with backoff when the socket closes or
 * stops answering echoes, and replays its setup (packet-in format, meters) on every connection.
 * OVS sends asynchronous messages (packet-ins) to such a "service" connection only after it sets a
 * non-zero miss_send_len, which the handshake does.
 *
 * Back-pressure: the socket is always read promptly (echoes and errors must not wait behind
 * packet-ins); packet-ins go into a bounded queue that drops and counts when the consumer falls
 * behind. Packet-outs are dropped and counted when the socket's write buffer is over a limit.
 */
import { EventEmitter } from 'node:events';
import { createConnection, type Socket } from 'node:net';
import {
  type AggregateStats,
  decodeAggregateStatsReply,
  decodeFlowDescReply,
  encodeAggregateStatsRequest,
  encodeBundleAdd,
  encodeBundleControl,
  encodeFlowDescRequest,
  errorName,
  type FlowDescEntry,
  type FlowStatsFilter,
  OFPBCT,
  OFPT_BUNDLE_CONTROL,
} from './flowmod.js';
import { replyDeadline } from '../../clock.js';
import type { MeterSpec } from '../../flows/punt.js';
import { BoundedQueue } from './queue.js';
import {
  decodeError,
  decodeExperimenter,
  decodeFeaturesReply,
  decodeHeader,
  decodeHelloVersions,
  decodePacketIn2,
  decodeStandardPacketIn,
  encodeBarrierRequest,
  encodeEchoReply,
  encodeEchoRequest,
  encodeFeaturesRequest,
  encodeHello,
  decodeMeterStatsReply,
  encodeMeterMod,
  encodeMeterStatsRequest,
  encodePacketOut,
  encodeSetConfig,
  encodeSetPacketInFormat,
  MessageFramer,
  type MeterStats,
  NX_EXPERIMENTER_ID,
  NXT,
  OFP15_VERSION,
  OFPET,
  OFPMC,
  OFPMMFC_METER_EXISTS,
  OFPMPF_REPLY_MORE,
  type OfpErrorInfo,
  OFPT,
  type PacketIn,
  type PacketOut,
  type SwitchFeatures,
} from './wire.js';

export interface ControllerLog {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

export interface ControllerOptions {
  /** The bridge's management socket, e.g. /var/run/openvswitch/br-int.mgmt. */
  socketPath: string;
  /** Packet-ins held for the consumer before new ones are dropped. */
  queueSize?: number;
  /** Meters (re)installed on every connection, before the controller reports itself connected. */
  meters?: MeterSpec[];
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** Echo request interval; a switch that misses two is considered gone. */
  echoIntervalMs?: number;
  /** Time allowed for the handshake and for request/reply round trips. */
  requestTimeoutMs?: number;
  /** Packet-outs are dropped while this many bytes are waiting to be written. */
  maxWriteBufferBytes?: number;
  log?: ControllerLog;
}

export interface ControllerStats {
  connected: boolean;
  connects: number;
  packetIns: number;
  packetInsDropped: number;
  packetInsMalformed: number;
  queued: number;
  packetOuts: number;
  packetOutsDropped: number;
  switchErrors: number;
}

export class OpenFlowError extends Error {
  constructor(
    message: string,
    readonly info?: OfpErrorInfo,
  ) {
    super(message);
  }
}

/** A flow-mod of a bundle: its text (for errors) and its encoding under a given xid. */
export interface BundleEntry {
  text: string;
  encode: (xid: number) => Buffer;
}

/** The switch refused a flow of a bundle; the bundle was discarded, so nothing of it was applied. */
export class FlowBundleError extends OpenFlowError {
  constructor(
    message: string,
    readonly flow: string,
    info: OfpErrorInfo,
  ) {
    super(message, info);
  }
}

interface Pending {
  resolve: (msg: Buffer) => void;
  reject: (e: Error) => void;
  /** Cancels the reply deadline. */
  cancel: () => void;
}

const noopLog: ControllerLog = { debug() {}, info() {}, warn() {} };

/**
 * Events: 'connected' (SwitchFeatures), 'disconnected' (reason: string), 'switchError'
 * (OfpErrorInfo, xid) for errors not tied to a request of this class.
 */
export class OpenFlowController extends EventEmitter {
  private readonly opts: Required<Omit<ControllerOptions, 'log' | 'meters'>> & { meters: MeterSpec[] };
  private readonly log: ControllerLog;
  private readonly queue: BoundedQueue<PacketIn>;
  private socket?: Socket | undefined;
  private ready = false;
  private stopped = true;
  private xid = 0;
  private bundleId = 0;
  private pending = new Map<number, Pending>();
  private helloWaiter?: ((msg: Buffer) => void) | undefined;
  /** xids of fire-and-forget requests whose errors are collected until the next barrier. */
  private watched = new Map<number, OfpErrorInfo | undefined>();
  /** Parts of multipart replies received so far, by xid, until the last part resolves the request. */
  private multipartParts = new Map<number, Buffer[]>();
  private reconnectTimer?: NodeJS.Timeout;
  private echoTimer?: NodeJS.Timeout | undefined;
  private attempt = 0;
  private connectedWaiters: { resolve: (f: SwitchFeatures) => void; reject: (e: Error) => void }[] = [];
  private features?: SwitchFeatures;
  private s = { connects: 0, packetIns: 0, packetInsMalformed: 0, packetOuts: 0, packetOutsDropped: 0, switchErrors: 0 };

  constructor(options: ControllerOptions) {
    super();
    if (!options.socketPath) throw new Error('OpenFlowController: socketPath is required');
    this.opts = {
      socketPath: options.socketPath,
      queueSize: options.queueSize ?? 1024,
      meters: options.meters ?? [],
      reconnectMinMs: options.reconnectMinMs ?? 100,
      reconnectMaxMs: options.reconnectMaxMs ?? 5000,
      echoIntervalMs: options.echoIntervalMs ?? 5000,
      requestTimeoutMs: options.requestTimeoutMs ?? 5000,
      maxWriteBufferBytes: options.maxWriteBufferBytes ?? 4 << 20,
    };
    this.log = options.log ?? noopLog;
    this.queue = new BoundedQueue<PacketIn>(this.opts.queueSize);
  }

  /** Starts connecting (and reconnecting until close()). */
  start(): this {
    if (!this.stopped) return this;
    this.stopped = false;
    this.connect();
    return this;
  }

  get isConnected(): boolean {
    return this.ready;
  }

  /** Resolves with the switch's features once a connection has completed its setup. */
  waitConnected(timeoutMs = 10_000): Promise<SwitchFeatures> {
    if (this.ready && this.features) return Promise.resolve(this.features);
    return new Promise((resolve, reject) => {
      const cancel = replyDeadline(timeoutMs, () => {
        this.connectedWaiters = this.connectedWaiters.filter((w) => w.resolve !== done);
        reject(new OpenFlowError(`no OpenFlow connection to ${this.opts.socketPath} within ${timeoutMs} ms`));
      });
      const done = (f: SwitchFeatures) => {
        cancel();
        resolve(f);
      };
      this.connectedWaiters.push({ resolve: done, reject: (e) => {
          cancel();
          reject(e);
        } });
    });
  }

  /** The packet-in stream (shared: each packet-in goes to one consumer). Ends after close(). */
  packetIns(): AsyncIterableIterator<PacketIn> {
    return this.queue[Symbol.asyncIterator]();
  }

  /** Takes one queued packet-in without waiting (for batch consumers). */
  takePacketIn(): PacketIn | undefined {
    return this.queue.shift();
  }

  /** Sends a packet out; false (and counted) when disconnected or the write buffer is full. */
  packetOut(po: PacketOut): boolean {
    const sock = this.socket;
    if (!this.ready || !sock || sock.writableLength > this.opts.maxWriteBufferBytes) {
      this.s.packetOutsDropped++;
      return false;
    }
    sock.write(encodePacketOut(this.nextXid(), po));
    this.s.packetOuts++;
    return true;
  }

  /** Round trip through the switch: every message sent before has been processed when it resolves. */
  async barrier(): Promise<void> {
    await this.request(encodeBarrierRequest(this.nextXid()));
  }

  /** Adds or replaces a meter now and on every future connection. */
  async setMeter(m: MeterSpec): Promise<void> {
    encodeMeterMod(0, OFPMC.ADD, m); // validates before anything is recorded
    this.opts.meters = [...this.opts.meters.filter((x) => x.meterId !== m.meterId), m];
    if (this.ready) await this.installMeters([m]);
  }

  /** The switch's statistics of every meter (one multipart request, its parts joined). */
  async meterStats(): Promise<MeterStats[]> {
    return (await this.multipart(encodeMeterStatsRequest)).flatMap((part) => decodeMeterStatsReply(part).meters);
  }

  /**
   * Applies flow-mods as one atomic, ordered bundle: OPEN, one BUNDLE_ADD per flow-mod (each far
   * below the 64 KiB message limit) and a barrier in one write, then COMMIT. The switch checks each flow-mod when it
   * is added and again when the bundle commits; if it refuses one, the bundle is discarded (the
   * commit never happens or fails as a whole) and the error names that flow's text and the
   * switch's error type/code. `timeoutMs` bounds the barrier and the commit (large bundles).
   */
  async flowBundle(entries: readonly BundleEntry[], timeoutMs = 60_000): Promise<void> {
    if (entries.length === 0) return;
    if (!this.ready || !this.socket) throw new OpenFlowError('not connected');
    this.bundleId = (this.bundleId + 1) >>> 0 || 1;
    const id = this.bundleId;
    const adds = entries.map((e) => {
      const xid = this.nextXid();
      return { xid, text: e.text, msg: encodeBundleAdd(id, e.encode(xid)) };
    });
    for (const a of adds) this.watched.set(a.xid, undefined);
    const refused = (): FlowBundleError | undefined => {
      for (const a of adds) {
        const info = this.watched.get(a.xid);
        if (info) return new FlowBundleError(`the switch refused flow "${a.text}": ${errorName(info.type, info.code)}; the bundle was discarded, no flow of it applied`, a.text, info);
      }
      return undefined;
    };
    try {
      // OPEN, the adds and a barrier go out together (the switch handles them in order); the
      // barrier's reply says every add has been checked, so COMMIT only follows a clean bundle.
      // Corked: one writev for the lot instead of a syscall per message.
      const sock = this.socket;
      sock.cork();
      const opened = this.request(encodeBundleControl(this.nextXid(), id, OFPBCT.OPEN_REQUEST));
      for (const a of adds) sock.write(a.msg);
      const checked = this.request(encodeBarrierRequest(this.nextXid()), timeoutMs);
      sock.uncork();
      const [open, barrier] = await Promise.allSettled([opened, checked]);
      if (open.status === 'rejected') throw open.reason;
      if (barrier.status === 'rejected') throw barrier.reason;
      const early = refused();
      if (early) {
        await this.request(encodeBundleControl(this.nextXid(), id, OFPBCT.DISCARD_REQUEST)).catch(() => undefined);
        throw early;
      }
      try {
        await this.request(encodeBundleControl(this.nextXid(), id, OFPBCT.COMMIT_REQUEST), timeoutMs);
      } catch (err) {
        const late = refused();
        if (late) throw late;
        const info = (err as OpenFlowError).info;
        if (info) throw new OpenFlowError(`the switch refused to commit a bundle of ${adds.length} flow-mods: ${errorName(info.type, info.code)}`, info);
        throw err;
      }
    } finally {
      for (const a of adds) this.watched.delete(a.xid);
    }
  }

  /** Flow descriptions (table, priority, cookie, counters) of the flows `filter` selects. */
  async flowDesc(filter: FlowStatsFilter): Promise<FlowDescEntry[]> {
    return (await this.multipart((xid) => encodeFlowDescRequest(xid, filter))).flatMap(decodeFlowDescReply);
  }

  /** How many flows `filter` selects, and their packet and byte totals. */
  async aggregateStats(filter: FlowStatsFilter): Promise<AggregateStats> {
    const parts = await this.multipart((xid) => encodeAggregateStatsRequest(xid, filter));
    return decodeAggregateStatsReply(parts[parts.length - 1]!);
  }

  /** One multipart request; every part of its reply (OFPMPF_REPLY_MORE), in order. */
  private async multipart(encode: (xid: number) => Buffer): Promise<Buffer[]> {
    if (!this.ready) throw new OpenFlowError('not connected');
    const xid = this.nextXid();
    this.multipartParts.set(xid, []);
    try {
      const last = await this.request(encode(xid));
      return [...(this.multipartParts.get(xid) ?? []), last];
    } finally {
      this.multipartParts.delete(xid);
    }
  }

  stats(): ControllerStats {
    return {
      connected: this.ready,
      connects: this.s.connects,
      packetIns: this.s.packetIns,
      packetInsDropped: this.queue.dropped,
      packetInsMalformed: this.s.packetInsMalformed,
      queued: this.queue.length,
      packetOuts: this.s.packetOuts,
      packetOutsDropped: this.s.packetOutsDropped,
      switchErrors: this.s.switchErrors,
    };
  }

  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    this.teardown('controller closed');
    this.queue.end();
    for (const w of this.connectedWaiters.splice(0)) w.reject(new OpenFlowError('controller closed'));
  }

  // ---- connection lifecycle ----

  private nextXid(): number {
    this.xid = (this.xid + 1) >>> 0 || 1;
    return this.xid;
  }

  private connect(): void {
    if (this.stopped) return;
    const sock = createConnection(this.opts.socketPath);
    this.socket = sock;
    const framer = new MessageFramer();
    let closedReason = 'connection closed by the switch';
    sock.on('connect', () => {
      this.handshake(sock).catch((e: Error) => {
        if (this.socket !== sock) return; // this connection is already gone
        closedReason = `handshake failed: ${e.message}`;
        this.log.warn({ socket: this.opts.socketPath, err: e.message }, 'OpenFlow handshake failed');
        sock.destroy();
      });
    });
    sock.on('data', (chunk: Buffer) => {
      let msgs: Buffer[];
      try {
        msgs = framer.push(chunk);
      } catch (e) {
        closedReason = `bad framing: ${(e as Error).message}`;
        sock.destroy();
        return;
      }
      for (const m of msgs) this.handle(m, sock);
    });
    sock.on('error', (e: NodeJS.ErrnoException) => {
      closedReason = `${e.code ?? 'error'}: ${e.message}`;
    });
    sock.on('close', () => {
      if (this.socket !== sock) return;
      const wasReady = this.ready;
      this.teardown(closedReason);
      if (wasReady) {
        this.log.warn({ socket: this.opts.socketPath, reason: closedReason }, 'OpenFlow connection lost');
        this.emit('disconnected', closedReason);
      }
      this.scheduleReconnect(closedReason);
    });
  }

  private scheduleReconnect(reason: string): void {
    if (this.stopped) return;
    const delay = Math.min(this.opts.reconnectMaxMs, this.opts.reconnectMinMs * 2 ** Math.min(this.attempt, 16));
    this.attempt++;
    if (this.attempt === 1 || this.attempt % 20 === 0) this.log.debug({ socket: this.opts.socketPath, reason, delay }, 'OpenFlow reconnect scheduled');
    this.reconnectTimer = setTimeout(() => this.connect(), delay);
  }

  private teardown(reason: string): void {
    this.ready = false;
    clearInterval(this.echoTimer);
    this.echoTimer = undefined;
    this.helloWaiter = undefined;
    this.watched.clear();
    for (const [xid, p] of this.pending) {
      p.cancel();
      p.reject(new OpenFlowError(`request ${xid} aborted: ${reason}`));
    }
    this.pending.clear();
    const sock = this.socket;
    this.socket = undefined;
    sock?.destroy();
  }

  private async handshake(sock: Socket): Promise<void> {
    const hello = new Promise<Buffer>((resolve, reject) => {
      const cancel = replyDeadline(this.opts.requestTimeoutMs, () => reject(new OpenFlowError(`no HELLO within ${this.opts.requestTimeoutMs} ms`)));
      this.helloWaiter = (m) => {
        cancel();
        resolve(m);
      };
    });
    sock.write(encodeHello(this.nextXid()));
    const versions = decodeHelloVersions(await hello);
    if (!versions.includes(OFP15_VERSION)) {
      throw new OpenFlowError(`the bridge offers OpenFlow versions [${versions.map((v) => `0x0${v.toString(16)}`).join(', ')}], not 1.5 (0x06): set Bridge protocols=OpenFlow15`);
    }
    const features = decodeFeaturesReply(await this.request(encodeFeaturesRequest(this.nextXid())));
    const errors = await this.sendChecked([encodeSetConfig(this.nextXid()), encodeSetPacketInFormat(this.nextXid())]);
    if (errors[0]) throw new OpenFlowError(`SET_CONFIG rejected (type ${errors[0].type} code ${errors[0].code})`, errors[0]);
    if (errors[1]) this.log.warn({ type: errors[1].type, code: errors[1].code }, 'NXT_PACKET_IN2 unsupported; using standard packet-ins (no userdata)');
    // Meters are installed before the connection is announced, so flows that use them can follow.
    await this.installMeters(this.opts.meters);
    if (this.socket !== sock) throw new OpenFlowError('connection lost during the handshake');
    this.ready = true;
    this.features = features;
    this.attempt = 0;
    this.s.connects++;
    this.startEcho(sock);
    this.log.info({ socket: this.opts.socketPath, datapathId: features.datapathId.toString(16) }, 'OpenFlow connection ready');
    for (const w of this.connectedWaiters.splice(0)) w.resolve(features);
    this.emit('connected', features);
  }

  private async installMeters(meters: MeterSpec[]): Promise<void> {
    if (meters.length === 0) return;
    const adds = meters.map((m) => encodeMeterMod(this.nextXid(), OFPMC.ADD, m));
    const errors = await this.sendChecked(adds);
    const existing = meters.filter((_, i) => errors[i]?.type === OFPET.METER_MOD_FAILED && errors[i]?.code === OFPMMFC_METER_EXISTS);
    meters.forEach((m, i) => {
      const e = errors[i];
      if (e && !existing.includes(m)) throw new OpenFlowError(`meter ${m.meterId} rejected by the switch (type ${e.type} code ${e.code})`, e);
    });
    if (existing.length === 0) return;
    const mods = await this.sendChecked(existing.map((m) => encodeMeterMod(this.nextXid(), OFPMC.MODIFY, m)));
    const bad = mods.findIndex((e) => e !== undefined);
    if (bad >= 0) throw new OpenFlowError(`meter ${existing[bad]!.meterId} could not be modified (type ${mods[bad]!.type} code ${mods[bad]!.code})`, mods[bad]);
  }

  private startEcho(sock: Socket): void {
    let outstanding = 0;
    this.echoTimer = setInterval(() => {
      if (outstanding >= 2) {
        this.log.warn({ socket: this.opts.socketPath }, 'OpenFlow switch stopped answering echo requests');
        sock.destroy();
        return;
      }
      outstanding++;
      this.request(encodeEchoRequest(this.nextXid()), this.opts.echoIntervalMs * 2)
        .then(() => {
          outstanding = 0;
        })
        .catch(() => undefined);
    }, this.opts.echoIntervalMs);
    this.echoTimer.unref();
  }

  private request(msg: Buffer, timeoutMs = this.opts.requestTimeoutMs): Promise<Buffer> {
    const sock = this.socket;
    if (!sock) return Promise.reject(new OpenFlowError('not connected'));
    const xid = msg.readUInt32BE(4);
    return new Promise((resolve, reject) => {
      const cancel = replyDeadline(timeoutMs, () => {
        this.pending.delete(xid);
        reject(new OpenFlowError(`no reply to message type ${msg[1]} (xid ${xid}) within ${timeoutMs} ms`));
      });
      this.pending.set(xid, { resolve, reject, cancel });
      sock.write(msg);
    });
  }

  /** Sends messages that have no reply, then a barrier; returns the error (if any) of each message. */
  private async sendChecked(msgs: Buffer[]): Promise<(OfpErrorInfo | undefined)[]> {
    const sock = this.socket;
    if (!sock) throw new OpenFlowError('not connected');
    const xids = msgs.map((m) => m.readUInt32BE(4));
    for (const x of xids) this.watched.set(x, undefined);
    try {
      for (const m of msgs) sock.write(m);
      await this.request(encodeBarrierRequest(this.nextXid()));
      return xids.map((x) => this.watched.get(x));
    } finally {
      for (const x of xids) this.watched.delete(x);
    }
  }

  private handle(msg: Buffer, sock: Socket): void {
    const h = decodeHeader(msg);
    switch (h.type) {
      case OFPT.HELLO:
        this.helloWaiter?.(msg);
        this.helloWaiter = undefined;
        return;
      case OFPT.ECHO_REQUEST:
        sock.write(encodeEchoReply(h.xid, msg.subarray(8)));
        return;
      case OFPT.MULTIPART_REPLY:
        if (msg.length >= 12 && (msg.readUInt16BE(10) & OFPMPF_REPLY_MORE) !== 0) {
          this.multipartParts.get(h.xid)?.push(msg);
          return;
        }
        this.resolvePending(h.xid, msg);
        return;
      case OFPT.ECHO_REPLY:
      case OFPT.FEATURES_REPLY:
      case OFPT.BARRIER_REPLY:
      case OFPT_BUNDLE_CONTROL:
        this.resolvePending(h.xid, msg);
        return;
      case OFPT.ERROR:
        this.handleError(h.xid, msg);
        return;
      case OFPT.EXPERIMENTER: {
        if (msg.length < 16) return;
        const { experimenter, subtype } = decodeExperimenter(msg);
        if (experimenter === NX_EXPERIMENTER_ID && subtype === NXT.PACKET_IN2) this.enqueue(msg, decodePacketIn2);
        return;
      }
      case OFPT.PACKET_IN:
        this.enqueue(msg, decodeStandardPacketIn);
        return;
      default:
        return; // port status, role status, flow removed…: not used here
    }
  }

  private resolvePending(xid: number, msg: Buffer): void {
    const p = this.pending.get(xid);
    if (!p) return;
    this.pending.delete(xid);
    p.cancel();
    p.resolve(msg);
  }

  private handleError(xid: number, msg: Buffer): void {
    let info: OfpErrorInfo;
    try {
      info = decodeError(msg);
    } catch {
      return;
    }
    if (this.watched.has(xid)) {
      this.watched.set(xid, info);
      return;
    }
    const p = this.pending.get(xid);
    if (p) {
      this.pending.delete(xid);
      p.cancel();
      this.s.switchErrors++;
      p.reject(new OpenFlowError(`switch error type ${info.type} code ${info.code} for xid ${xid}`, info));
      return;
    }
    this.s.switchErrors++;
    this.log.warn({ xid, type: info.type, code: info.code }, 'OpenFlow error from the switch');
    this.emit('switchError', info, xid);
  }

  private enqueue(msg: Buffer, decode: (m: Buffer) => PacketIn): void {
    let pin: PacketIn;
    try {
      // Copy the packet so the queued item does not pin the socket's read buffer.
      pin = decode(msg);
      pin.packet = Buffer.from(pin.packet);
      if (pin.userdata) pin.userdata = Buffer.from(pin.userdata);
    } catch (e) {
      this.s.packetInsMalformed++;
      this.log.debug({ err: (e as Error).message }, 'malformed packet-in ignored');
      return;
    }
    this.s.packetIns++;
    this.queue.push(pin);
  }
}
