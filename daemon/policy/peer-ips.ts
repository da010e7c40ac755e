/**
 * A group's member addresses kept sorted as members come and go (node rules read them as the
 * rule's peer addresses), each change a new version of a SortedList that records its list step,
 * which the flow compiler's peer classes diff through (liststeps.ts).
 */
import { SortedList } from './sorted-list.js';
import type { GroupMember } from './types.js';

/**
 * A group's member addresses as node rules list them: the addresses of every member but Services
 * (sorted, unique; each address counted per member holding it) and the Service members. A member
 * change replaces `sorted` by a new version (node rules already built keep theirs unchanged) that
 * shares all but the chunks it touched: O(change), whatever the group's size.
 */
export class PeerIps {
  private readonly counts = new Map<string, number>();
  sorted: SortedList;
  readonly services = new Map<string, GroupMember>();

  constructor(members: Map<string, GroupMember>) {
    const all: string[] = [];
    for (const [key, m] of members) {
      if (m.kind === 'service') {
        this.services.set(key, m);
        continue;
      }
      for (const ip of m.ips) {
        const n = this.counts.get(ip) ?? 0;
        this.counts.set(ip, n + 1);
        if (n === 0) all.push(ip);
      }
    }
    this.sorted = SortedList.from(all.sort());
  }

  /** Member `key` changes from `old` to `now` (either may be undefined). */
  update(key: string, old: GroupMember | undefined, now: GroupMember | undefined): void {
    // As in the members map: a member replaced in place keeps its position.
    if (now?.kind === 'service') this.services.set(key, now);
    else if (old?.kind === 'service') this.services.delete(key);
    const gone = old && old.kind !== 'service' ? old.ips : [];
    const come = now && now.kind !== 'service' ? now.ips : [];
    const added: string[] = [];
    const removed: string[] = [];
    for (const ip of come) {
      const n = this.counts.get(ip) ?? 0;
      this.counts.set(ip, n + 1);
      if (n === 0) added.push(ip);
    }
    for (const ip of gone) {
      const n = this.counts.get(ip) ?? 0;
      if (n > 1) {
        this.counts.set(ip, n - 1);
        continue;
      }
      if (n === 0) continue;
      this.counts.delete(ip);
      removed.push(ip);
    }
    if (added.length === 0 && removed.length === 0) return;
    this.sorted = this.sorted.with(removed.sort(), added.sort());
  }
}
