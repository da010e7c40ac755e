/**
 * What FQDN learning (enforcement/fqdn) plugs into the enforcer: a hook for DNS punts, a wrapper
 * around flow applies (held responses wait for the apply that carries what they taught), the expiry
 * of learned addresses, and the DNS interception flows. Types only, so the enforcer's parts depend
 * on this contract rather than on fqdn/.
 */
import type { Flow } from '../flows/flow.js';
import type { DecodedPunt } from '../flows/punt.js';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import type { ChangeSet, PolicyEngine } from '../policy/engine.js';

/** Called for every DNS punt; returns the engine's ChangeSet if it learned something. */
export type DnsPuntHook = (pin: PacketIn, punt: DecodedPunt, engine: PolicyEngine) => ChangeSet | undefined | Promise<ChangeSet | undefined>;

/** FQDN learning as the enforcer drives it (fqdn/ FqdnLearning has this shape). */
export interface DnsLearning {
  hook: DnsPuntHook;
  /** Wraps each flow apply (held DNS responses are released after the apply that carries what they taught). */
  wrapApply<T>(apply: () => Promise<T>): () => Promise<T>;
  setPacketOut(fn: (po: PacketOut) => boolean): void;
  /** Learned addresses leave `engine` as they expire (on the learning's own clock); each change goes to `changed`. */
  startExpiry(engine: PolicyEngine, changed: (cs: ChangeSet) => void): void;
  /** DNS interception flows for the local Pods that need them. */
  interceptFlows(engine: PolicyEngine): Flow[];
  stats(): unknown;
  close(): void;
}
