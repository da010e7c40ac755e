/**
 * The agent's DNS packet-in step: parse the punted response, learn its names, update the engine,
 * and hand back what to apply and the packet-out that releases the held response. Pure apart from
 * the engine/learner it is given (no I/O); `processDnsPacketIn` adds the ordering the agent needs
 * (apply flows, then release) around injected I/O.
 */
import type { PacketIn, PacketOut } from '../../flows/openflow/wire.js';
import { decodePuntUserdata, PuntCategory } from '../../flows/openflow/punt.js';
import type { ChangeSet, PolicyEngine } from '../../policy/engine.js';
import { parseDnsMessage, resolvedNames } from './dnswire.js';
import { DnsPuntOp } from './flows.js';
import { extractDnsPayload } from './frame.js';
import type { FqdnLearner, LearnUpdate } from './learner.js';
import { type FqdnPatternSet, fqdnPatternsOf } from './patterns.js';

export type FqdnEngine = Pick<PolicyEngine, 'learnFqdn' | 'expireFqdns' | 'rules'>;

export interface FqdnContext {
  engine: FqdnEngine;
  learner: FqdnLearner;
}

export interface DnsPacketInResult {
  /** What changed in the engine (apply its flows before sending `release`). */
  changes: ChangeSet;
  /** The held response, to send once `changes` is on the bridge; absent for copies. */
  release?: PacketOut;
  learned: LearnUpdate[];
  /** Why nothing was learned (not a DNS response, malformed, NXDOMAIN, …); the packet is still released. */
  note?: string;
  /** When the agent should next call `expireFqdnsDue` (learner clock, ms). */
  nextExpiryAt?: number;
}

export const emptyChangeSet = (): ChangeSet => ({
  addressGroups: { added: [], updated: [], removed: [] },
  appliedToGroups: { added: [], updated: [], removed: [] },
  rules: { added: [], updated: [], removed: [] },
  isolations: { added: [], updated: [], removed: [] },
});

export const isEmptyChangeSet = (cs: ChangeSet): boolean =>
  [cs.addressGroups, cs.appliedToGroups, cs.rules, cs.isolations].every((d) => d.added.length + d.updated.length + d.removed.length === 0);

type IdState = 'added' | 'updated' | 'removed';
const KINDS = ['addressGroups', 'appliedToGroups', 'rules', 'isolations'] as const;

/** The net effect of applying `a` then `b` (added+removed is reported removed: consumers clean up). */
export function mergeChangeSets(a: ChangeSet, b: ChangeSet): ChangeSet {
  const out = emptyChangeSet();
  for (const k of KINDS) {
    const state = new Map<string, IdState>();
    for (const d of [a[k], b[k]]) {
      for (const id of d.added) state.set(id, state.get(id) === 'removed' ? 'updated' : 'added');
      for (const id of d.updated) state.set(id, state.get(id) === 'added' ? 'added' : 'updated');
      for (const id of d.removed) state.set(id, 'removed');
    }
    for (const [id, s] of [...state].sort(([x], [y]) => (x < y ? -1 : 1))) out[k][s].push(id);
  }
  return out;
}

/** Patterns of the engine's current rules; rebuilt (regex and all) only when they change. */
const patternCache = new WeakMap<object, FqdnPatternSet>();
function currentPatterns(engine: FqdnEngine): FqdnPatternSet {
  const fresh = fqdnPatternsOf(engine.rules());
  const cached = patternCache.get(engine);
  if (cached?.equals(fresh)) return cached;
  patternCache.set(engine, fresh);
  return fresh;
}

function applyUpdates(engine: FqdnEngine, updates: LearnUpdate[]): ChangeSet {
  let cs = emptyChangeSet();
  for (const u of updates) cs = mergeChangeSets(cs, engine.learnFqdn(u.name, u.ips, u.ips.length > 0 ? u.ttlSeconds : undefined));
  return cs;
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
  const done = (note: string | undefined, changes = emptyChangeSet(), learned: LearnUpdate[] = []): DnsPacketInResult => {
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
  const patterns = currentPatterns(ctx.engine);
  if (patterns.size === 0) return done(undefined);
  const learned = ctx.learner.observe(names.names, patterns);
  return done(undefined, applyUpdates(ctx.engine, learned), learned);
}

/**
 * Expires what is due: addresses past their TTL leave the learner and the engine (plus the
 * engine's own expiry of names the learner no longer tracks). Call at `nextExpiryAt`.
 */
export function expireFqdnsDue(ctx: FqdnContext): { changes: ChangeSet; expired: LearnUpdate[]; nextExpiryAt?: number } {
  const expired = ctx.learner.expire();
  const changes = mergeChangeSets(applyUpdates(ctx.engine, expired), ctx.engine.expireFqdns());
  const next = ctx.learner.nextExpiryAt();
  return { changes, expired, ...(next !== undefined ? { nextExpiryAt: next } : {}) };
}

/**
 * After a policy change: forget learned names no pattern matches any more, and push the names the
 * learner already holds into the engine (a fresh engine after a restart of the agent's policy state).
 */
export function resyncFqdns(ctx: FqdnContext): ChangeSet {
  ctx.learner.retain(currentPatterns(ctx.engine));
  return applyUpdates(ctx.engine, ctx.learner.snapshot());
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
 * Runs `expire` at the learner's next expiry (one timer; re-armed after every learn/expire).
 * The only timer in the fqdn module; the clock and timer functions are injectable for tests.
 */
export class FqdnExpiryTimer {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private at: number | undefined;

  constructor(
    private readonly expire: () => void | Promise<void>,
    private readonly now: () => number = () => Date.now(),
    private readonly onError: (e: unknown) => void = () => undefined,
  ) {}

  /** Arms the timer for `at` (ms) if that is earlier than what is armed (undefined: nothing due). */
  schedule(at: number | undefined): void {
    if (at === undefined || (this.at !== undefined && this.at <= at)) return;
    this.cancel();
    this.at = at;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.at = undefined;
      Promise.resolve().then(this.expire).catch(this.onError);
    }, Math.max(0, at - this.now()));
    this.timer.unref?.();
  }

  cancel(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.at = undefined;
  }
}
