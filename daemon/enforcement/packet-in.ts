/**
 * The packet-in side of enforcement on the agent's OpenFlow connection: punts are dispatched by
 * category — policy punts become Reject replies and audit lines (punthandler.ts), DNS punts go to
 * FQDN learning, trace punts to the live trace — and counted; packet-outs and the punt meters'
 * drop counts go over the same connection.
 */
import type { Logger } from 'pino';
import { type DecodedPunt, PUNT_METER_NAME, PuntCategory, PuntOp } from '../flows/punt.js';
import type { RuleIdentity } from '../flows/policy/index.js';
import { type OpenFlowController, runPacketInLoop, type PacketInHandler } from '../ovs/openflow/index.js';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import type { ChangeSet } from '../policy/engine.js';
import { AuditLogger, DEFAULT_AUDIT_LOG_PATH } from './auditlog/index.js';
import type { DnsLearning, FqdnPolicy } from './dns-learning.js';
import { decidePolicyPunt, rejectReplyMacs } from './punthandler.js';
import { sendRejectReply } from './reject/index.js';
import type { Tracer } from './traceflow.js';

export interface PacketInOptions {
  /** What DNS learning reads and changes (the engine, or controller mode's followed state; absent: no learning). */
  fqdnPolicy?: FqdnPolicy | undefined;
  tracer: Tracer;
  /** The rule behind a conjunction id (audit lines, reject decisions). */
  describe(conjId: number): RuleIdentity | undefined;
  dns?: DnsLearning | undefined;
  /** What DNS learning changed in the engine (applied at once: a held response waits for it). */
  learned(cs: ChangeSet): void;
  auditLogPath?: string | undefined;
  log: Pick<Logger, 'info' | 'warn' | 'debug'>;
}

export class PacketInDispatch {
  private controller?: OpenFlowController;
  private audit?: AuditLogger;
  private portMac: (ofport: number) => string | undefined = () => undefined;
  /** Packet-ins by how the dispatch ended. */
  readonly dispatched = { handled: 0, unclaimed: 0, failed: 0 };
  /** Handled packet-ins by what the agent did with them. */
  readonly punts = { reject: 0, log: 0, dns: 0 };
  private rejectsSent = 0;

  constructor(private readonly opts: PacketInOptions) {}

  /**
   * Takes the packet-in path on the agent's OpenFlow connection. Waits for the connection up to
   * `connectTimeoutMs` (punt flows use `controller(meter_id=)`, which OVS accepts before the meter
   * exists, so a slow connection only delays metering).
   */
  async start(controller: OpenFlowController, portMac: (ofport: number) => string | undefined, opts: { connectTimeoutMs?: number | undefined; socket: string }): Promise<void> {
    const { log } = this.opts;
    this.portMac = portMac;
    this.audit = new AuditLogger({ path: this.opts.auditLogPath ?? DEFAULT_AUDIT_LOG_PATH });
    this.controller = controller;
    const timeout = opts.connectTimeoutMs ?? 10_000;
    const ok = await Promise.race([controller.waitConnected().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), timeout).unref())]);
    if (ok) log.info({ socket: opts.socket }, 'openflow: connected, punt meters installed');
    else log.warn({ timeoutMs: timeout }, 'openflow: not connected yet; continuing (Reject and audit logging start once it connects)');
    const handlers: Record<number, PacketInHandler> = {
      [PuntCategory.policy]: (pin, punt) => this.onPolicyPunt(pin, punt),
      [PuntCategory.dns]: (pin, punt) => this.onDnsPunt(pin, punt),
      [PuntCategory.trace]: (pin, punt) => this.opts.tracer.onTracePunt(pin, punt),
    };
    void runPacketInLoop(controller, handlers, (err) => log.warn({ err: (err as Error).message }, 'packet-in: handler failed'), this.dispatched);
  }

  /** The agent's OpenFlow connection, once start() took it. */
  get openflow(): OpenFlowController | undefined {
    return this.controller;
  }

  /** A packet-out on the bridge's controller connection (false: not connected or backlogged). */
  packetOut(po: PacketOut): boolean {
    return this.controller?.packetOut(po) ?? false;
  }

  get rejects(): number {
    return this.rejectsSent;
  }

  get auditLines(): number {
    return this.audit?.linesWritten ?? 0;
  }

  get auditSuppressed(): number {
    return this.audit?.suppressed ?? 0;
  }

  /**
   * Packets each packet-in meter dropped on the bridge, before they reached the agent (the meters'
   * drop bands), by what the meter limits. Asked over the OpenFlow connection at each call.
   */
  async meterDrops(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    if (!this.controller?.isConnected) return out;
    for (const m of await this.controller.meterStats()) {
      const name = PUNT_METER_NAME[m.meterId];
      if (name) out[name] = Number(m.bands.reduce((sum, b) => sum + b.packets, 0n));
    }
    return out;
  }

  close(): void {
    this.audit?.close();
  }

  private onPolicyPunt(pin: PacketIn, punt: DecodedPunt): void {
    const { tracer } = this.opts;
    // A traced packet is not traffic: its reject is the trace's verdict, and it is not audit-logged.
    if (tracer.busy && (punt.ops & PuntOp.reject) !== 0 && tracer.claimsReject(pin)) return;
    const d = decidePolicyPunt(pin, punt, (id) => this.opts.describe(id));
    if (d.reject) this.punts.reject++;
    else if (d.audit) this.punts.log++;
    if (d.reject && this.controller) this.reject(pin);
    if (d.audit) this.audit?.log(d.audit);
  }

  /** TCP RST / ICMP admin-prohibited back out of the port the packet came in on. */
  private reject(pin: PacketIn): void {
    const macs = rejectReplyMacs(this.portMac(pin.inPort));
    if (!macs) {
      this.opts.log.warn({ inPort: pin.inPort }, 'packet-in: reject for a packet from an unknown port; not answered');
      return;
    }
    const sent = sendRejectReply(this.controller!, pin, macs);
    if (sent.ok) this.rejectsSent++;
    else this.opts.log.debug({ reason: sent.reason }, 'packet-in: no reject reply');
  }

  private async onDnsPunt(pin: PacketIn, punt: DecodedPunt): Promise<void> {
    this.punts.dns++;
    // FQDN learning (enforcement/fqdn): without it DNS punts are only counted.
    const { dns, fqdnPolicy } = this.opts;
    if (!dns || !fqdnPolicy) return;
    const cs = await dns.hook(pin, punt, fqdnPolicy);
    if (cs) this.opts.learned(cs);
  }
}
