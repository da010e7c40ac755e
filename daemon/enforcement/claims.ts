/**
 * Which Pod an address belongs to when two Pods claim it. An address is reused as soon as its
 * Pod's sandbox is torn down, while the old Pod's object (terminating, its status still listing
 * the address) can stay in the API for its grace period: a node holding both would match the
 * address as both Pods, the old one's allow rules included. The rule: a Pod that is not terminating
 * wins over one that is (the API shows a Pod terminating long before its sandbox is torn down, and
 * a node's Pod watch delivers that before the new Pod's address), then the newer Pod (it was given
 * the address more recently), then the name, so every node decides alike. A Pod keeps the
 * addresses it claims and wins; one that loses all of them has no address (it cannot send). Pure.
 */
export interface Claim {
  terminating: boolean;
  /** metadata.creationTimestamp ('' when unknown). */
  created: string;
}

const stronger = (a: [string, Claim], b: [string, Claim]): boolean => {
  if (a[1].terminating !== b[1].terminating) return !a[1].terminating;
  if (a[1].created !== b[1].created) return a[1].created > b[1].created;
  return a[0] < b[0];
};

export class AddressClaims {
  /** Address → the Pods ("ns/name") claiming it. */
  private readonly byIp = new Map<string, Map<string, Claim>>();
  /** Pod → the addresses it claims. */
  private readonly byPod = new Map<string, string[]>();

  /**
   * Records Pod `key`'s claim (replacing its previous one); returns the other Pods whose addresses
   * may have changed (they shared an address with the old or the new claim).
   */
  set(key: string, ips: readonly string[], claim: Claim): string[] {
    const affected = this.drop(key);
    this.byPod.set(key, [...ips]);
    for (const ip of ips) {
      let m = this.byIp.get(ip);
      if (!m) this.byIp.set(ip, (m = new Map()));
      for (const other of m.keys()) affected.add(other);
      m.set(key, claim);
    }
    affected.delete(key);
    return [...affected];
  }

  /** Forgets Pod `key`'s claim; returns the other Pods that shared one of its addresses. */
  remove(key: string): string[] {
    const affected = this.drop(key);
    affected.delete(key);
    return [...affected];
  }

  /** The Pod an address belongs to, or undefined when nobody claims it. */
  owner(ip: string): string | undefined {
    const m = this.byIp.get(ip);
    if (!m) return undefined;
    let best: [string, Claim] | undefined;
    for (const e of m) if (!best || stronger(e, best)) best = e;
    return best?.[0];
  }

  /** Of `ips` (the Pod's claim), those it holds. */
  held(key: string, ips: readonly string[]): string[] {
    return ips.filter((ip) => this.owner(ip) === key);
  }

  /** The other Pods claiming any of `ips`. */
  rivals(key: string, ips: readonly string[]): string[] {
    const out = new Set<string>();
    for (const ip of ips) for (const k of this.byIp.get(ip)?.keys() ?? []) if (k !== key) out.add(k);
    return [...out];
  }

  private drop(key: string): Set<string> {
    const affected = new Set<string>();
    for (const ip of this.byPod.get(key) ?? []) {
      const m = this.byIp.get(ip);
      if (!m) continue;
      m.delete(key);
      for (const other of m.keys()) affected.add(other);
      if (m.size === 0) this.byIp.delete(ip);
    }
    this.byPod.delete(key);
    return affected;
  }
}
