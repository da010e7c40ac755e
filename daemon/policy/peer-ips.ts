/**
 * A group's member addresses kept sorted as members come and go (node rules read them as the
 * rule's peer addresses), each change a new version of a SortedList that records its list step,
 * which the flow compiler's peer classes diff through (liststeps.ts).
 */
import { SortedList } from './sorted-list.js';
import type { GroupMember } from './types.js';

/**
 * A member as its group's peer addresses read it: whole, or, for a Pod or Node member of a group
 * whose rules read nothing else of it, its address (or addresses) alone. A holder of tens of
 * thousands of members keeps them this way at a third of a parsed member's size.
 */
export type PeerMember = GroupMember | string | readonly string[];

/** A member's addresses, for a Service member too. */
export function memberAddresses(m: PeerMember): readonly string[] {
  return typeof m === 'string' ? [m] : isWholeMember(m) ? m.ips : m;
}

/** The addresses a member contributes to its group's peer addresses (none for a Service member: see PeerIps.services). */
export function peerAddresses(m: PeerMember): readonly string[] {
  return isService(m) ? [] : memberAddresses(m);
}

/** A member held whole (not as its addresses alone). */
export function isWholeMember(m: PeerMember): m is GroupMember {
  return typeof m !== 'string' && !Array.isArray(m);
}

/** A Service member (always held whole: its ports are read). */
function isService(m: PeerMember | undefined): m is GroupMember {
  return m !== undefined && isWholeMember(m) && m.kind === 'service';
}

/**
 * A group's member addresses as node rules list them: the addresses of every member but Services
 * (sorted, unique; each address counted per member holding it) and the Service members. A member
 * change replaces `sorted` by a new version (node rules already built keep theirs unchanged) that
 * shares all but the chunks it touched: O(change), whatever the group's size.
 */
export class PeerIps {
  /**
   * How many members hold an address, for the addresses more than one member holds (a Node's
   * address in its host-network Pods): any other address in `sorted` has one, and a count for each
   * of tens of thousands would cost more than the list.
   */
  private readonly shared = new Map<string, number>();
  sorted: SortedList;
  readonly services = new Map<string, GroupMember>();

  constructor(members: ReadonlyMap<string, PeerMember>) {
    const all: string[] = [];
    for (const [key, m] of members) {
      if (isService(m)) {
        this.services.set(key, m);
        continue;
      }
      if (typeof m === 'string') all.push(m);
      else for (const ip of memberAddresses(m)) all.push(ip);
    }
    all.sort();
    const unique: string[] = [];
    for (const ip of all) {
      if (ip !== unique[unique.length - 1]) unique.push(ip);
      else this.shared.set(ip, (this.shared.get(ip) ?? 1) + 1);
    }
    this.sorted = SortedList.from(unique);
  }

  /** Members holding `ip` (for tests and diagnostics). */
  holders(ip: string): number {
    return this.shared.get(ip) ?? (this.sorted.has(ip) ? 1 : 0);
  }

  /** Member `key` changes from `old` to `now` (either may be undefined). */
  update(key: string, old: PeerMember | undefined, now: PeerMember | undefined): void {
    // As in the members map: a member replaced in place keeps its position.
    if (isService(now)) this.services.set(key, now);
    else if (isService(old)) this.services.delete(key);
    const gone = old === undefined ? [] : peerAddresses(old);
    const come = now === undefined ? [] : peerAddresses(now);
    const added = new Set<string>();
    const removed: string[] = [];
    for (const ip of come) {
      if (this.sorted.has(ip) || added.has(ip)) this.shared.set(ip, (this.shared.get(ip) ?? 1) + 1);
      else added.add(ip);
    }
    // An address `old` held is in `sorted` (and came in `come` only as one more holder of it).
    for (const ip of gone) {
      const n = this.shared.get(ip);
      if (n === undefined) removed.push(ip);
      else if (n > 2) this.shared.set(ip, n - 1);
      else this.shared.delete(ip);
    }
    if (added.size === 0 && removed.length === 0) return;
    this.sorted = this.sorted.with(removed.sort(), [...added].sort());
  }
}
