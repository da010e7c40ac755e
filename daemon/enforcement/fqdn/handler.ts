/**
 * The agent's DNS packet-in step: parse the punted response, learn its names, update the engine,
 * and hand back what to apply and the packet-out that releases the held response. Pure apart from
 * the engine/learner it is given (no I/O); `processDnsPacketIn` adds the ordering the agent needs
 * (apply flows, then release) around injected I/O.
 */
import type { Clock, TimerHandle } from '../../clock.js';
import type { PacketIn, PacketOut } from '../../ovs/openflow/wire.js';
import { decodePuntUserdata, PuntCategory } from '../../flows/punt.js';
import type { ChangeSet } from '../../policy/engine.js';
import { emptyChangeSet } from '../../policy/internal.js';
import type { FqdnPolicy } from '../dns-learning.js';
import { parseDnsMessage, resolvedNames } from './dnswire.js';
import { DnsPuntOp } from './flows.js';
import { extractDnsPayload } from './frame.js';
import type { FqdnLearner, FqdnUpdate } from './learner.js';

/** What DNS learning needs of the policy side: its fqdn patterns, and to be told address sets. */
export type FqdnEngine = Pick<FqdnPolicy, 'setFqdnAddresses' | 'fqdnPatterns'>;

export interface FqdnContext {
  engine: FqdnEngine;
  learner: FqdnLearner;
}

export interface DnsPacketInResult {
  /** What changed in the engine (apply its flows before sending `release`). */
  changes: ChangeSet;
  /** The held response, to send once `changes` is on the bridge; absent for copies. */
  release?: PacketOut;
  /** The names whose address set changed (as told to the engine). */
  learned: FqdnUpdate[];
  /** Why nothing was learned (not a DNS response, malformed, NXDOMAIN, …); the packet is still released. */
  note?: string;
  /** When the agent should next call `expireFqdnsDue` (learner clock, ms). */
  nextExpiryAt?: number;
}

export const isEmptyChangeSet = (cs: ChangeSet): boolean =>
  [cs.addressGroups, cs.appliedToGroups, cs.rules, cs.isolations].every((d) => d.added.length + d.updated.length + d.removed.length === 0) && cs.serviceEndpoints.length === 0;

/** Tells the engine the address sets that changed (one engine change for all of them). */
function applyUpdates(engine: FqdnEngine, updates: FqdnUpdate[]): ChangeSet {
  return updates.length > 0 ? engine.setFqdnAddresses(updates) : emptyChangeSet();
}

/** The packet-out that lets a held response go on to its Pod (out of the port L3Forwarding chose). */
export function releaseOf(pin: PacketIn): PacketOut | undefined {
  const port = pin.registers[1] ?? 0;
  if (port === 0) return undefined;
  return { packet: pin.packet, actions: [{ type: 'output', port }] };
}

/**
 * Handles one DNS punt. Never throws for packet content: a packet that cannot be read is released
 * unchanged with a `note`. Engine errors (bugs) propagate — the caller must still release
 * (`processDnsPacketIn` does).
 */
export function handleDnsPacketIn(pin: PacketIn, ctx: FqdnContext): DnsPacketInResult {
  const punt = decodePuntUserdata(pin.userdata);
  const hold = !punt || punt.ops === DnsPuntOp.hold;
  const release = hold ? releaseOf(pin) : undefined;
  const base = { ...(release ? { release } : {}) };
  const done = (note: string | undefined, changes = emptyChangeSet(), learned: FqdnUpdate[] = []): DnsPacketInResult => {
    const next = ctx.learner.nextExpiryAt();
    const releaseNote = hold && !release ? 'held response has no output port in reg1 and cannot be released' : undefined;
    const n = [note, releaseNote].filter(Boolean).join('; ');
    return { ...base, changes, learned, ...(n ? { note: n } : {}), ...(next !== undefined ? { nextExpiryAt: next } : {}) };
  };
  if (punt && punt.category !== PuntCategory.dns) return done(`punt category ${punt.category} is not DNS`);
  if (pin.totalLength > pin.packet.length) return done(`packet truncated to ${pin.packet.length} of ${pin.totalLength} bytes`);
  const payload = extractDnsPayload(pin.packet);
  if (!payload.ok) return done(payload.empty ? undefined : payload.error);
  const parsed = parseDnsMessage(payload.payload.message);
  if (!parsed.ok) return done(`DNS message from ${payload.payload.serverIp}: ${parsed.error}`);
  const names = resolvedNames(parsed.message);
  if (!names.ok) return done(`DNS response from ${payload.payload.serverIp}: ${names.error}`);
  if (names.names.size === 0) return done(undefined);
  const patterns = ctx.engine.fqdnPatterns();
  if (patterns.size === 0) return done(undefined);
  const learned = ctx.learner.observe(names.names, patterns);
  return done(undefined, applyUpdates(ctx.engine, learned), learned);
}

/**
 * Expires what is due: addresses past their TTL leave the learner, and the engine is told the
 * address sets that changed. Call at `nextExpiryAt` (FqdnExpiryTimer does).
 */
export function expireFqdnsDue(ctx: FqdnContext): { changes: ChangeSet; expired: FqdnUpdate[]; nextExpiryAt?: number } {
  const expired = ctx.learner.expire();
  const changes = applyUpdates(ctx.engine, expired);
  const next = ctx.learner.nextExpiryAt();
  return { changes, expired, ...(next !== undefined ? { nextExpiryAt: next } : {}) };
}

export interface DnsReleaseIO {
  /** Puts the engine change on the bridge (policy flow delta as one bundle). */
  applyChanges(changes: ChangeSet): Promise<void>;
  packetOut(po: PacketOut): boolean;
  onNote?(note: string, pin: PacketIn): void;
}

/**
 * The whole step in the order that avoids the race: learn, commit flows, then release the response.
 * The response is released even if learning or applying fails (DNS is never blocked by this).
 */
export async function processDnsPacketIn(pin: PacketIn, ctx: FqdnContext, io: DnsReleaseIO): Promise<DnsPacketInResult> {
  let result: DnsPacketInResult | undefined;
  try {
    result = handleDnsPacketIn(pin, ctx);
    if (result.note) io.onNote?.(result.note, pin);
    if (!isEmptyChangeSet(result.changes)) await io.applyChanges(result.changes);
    return result;
  } finally {
    const punt = decodePuntUserdata(pin.userdata);
    const release = result ? result.release : !punt || punt.ops === DnsPuntOp.hold ? releaseOf(pin) : undefined;
    if (release) io.packetOut(release);
  }
}

/**
 * Runs `expire` at the learner's next expiry: one timer on the injected clock, armed for the
 * earliest time asked (`schedule` after every learn and every expiry). The only timer that
 * expires learned names. A delay beyond the real clock's longest timer (MAX_TIMER_MS) fires early,
 * finds nothing due and is re-armed.
 */
export class FqdnExpiryTimer {
  private timer: TimerHandle | undefined;
  private at: number | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly expire: () => void | Promise<void>,
    private readonly onError: (e: unknown) => void = () => undefined,
  ) {}

  /** Arms the timer for `at` (ms, clock time) unless it is already armed as early (undefined: nothing due). */
  schedule(at: number | undefined): void {
    if (at === undefined || (this.at !== undefined && this.at <= at)) return;
    this.cancel();
    this.at = at;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.at = undefined;
      Promise.resolve().then(this.expire).catch(this.onError);
    }, Math.max(0, at - this.clock.now()));
    // A real timer must not keep the process alive on its own (an expiry can be a day away).
    (this.timer.timer as { unref?: () => void } | undefined)?.unref?.();
  }

  /** When it fires next (undefined: not armed). */
  get armedAt(): number | undefined {
    return this.at;
  }

  cancel(): void {
    this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.at = undefined;
  }
}
