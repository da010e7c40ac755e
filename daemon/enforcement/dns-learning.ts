/**
 * What FQDN learning (enforcement/fqdn) plugs into the enforcer: a hook for DNS punts, a wrapper
 * around flow applies (held responses wait for the apply that carries what they taught), the expiry
 * of learned addresses, and the DNS interception flows; and what it needs of the policy side (the
 * standalone agent's engine, or the state a controller-mode agent follows). Types only, so the
 * enforcers' parts depend on this contract rather than on fqdn/.
 */
import type { Flow } from '../flows/flow.js';
import type { DecodedPunt } from '../flows/punt.js';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import type { ChangeSet } from '../policy/engine.js';
import type { FqdnPatternSet } from '../policy/fqdn.js';

/** What learning reads and changes on the policy side (PolicyEngine; NodePolicyState through the follower). */
export interface FqdnPolicy {
  /** Sets learned names' current addresses (`ips: []` forgets a name); the fqdn groups that changed are in the ChangeSet. */
  setFqdnAddresses(updates: readonly { name: string; ips: readonly string[] }[]): ChangeSet;
  /** The fqdn patterns of egress rules: which names are worth learning. */
  fqdnPatterns(): FqdnPatternSet;
  /** The local Pod addresses an egress rule with an fqdn peer targets: whose DNS responses are intercepted. */
  fqdnTargetPodIps(): string[];
}

/** Called for every DNS punt; returns the policy side's ChangeSet if it learned something. */
export type DnsPuntHook = (pin: PacketIn, punt: DecodedPunt, policy: FqdnPolicy) => ChangeSet | undefined | Promise<ChangeSet | undefined>;

/** FQDN learning as the enforcer drives it (fqdn/ FqdnLearning has this shape). */
export interface DnsLearning {
  hook: DnsPuntHook;
  /** Wraps each flow apply (held DNS responses are released after the apply that carries what they taught). */
  wrapApply<T>(apply: () => Promise<T>): () => Promise<T>;
  setPacketOut(fn: (po: PacketOut) => boolean): void;
  /** Learned addresses leave `policy` as they expire (on the learning's own clock); each change goes to `changed`. */
  startExpiry(policy: FqdnPolicy, changed: (cs: ChangeSet) => void): void;
  /** DNS interception flows for the local Pods that need them. */
  interceptFlows(policy: FqdnPolicy): Flow[];
  stats(): unknown;
  close(): void;
}
