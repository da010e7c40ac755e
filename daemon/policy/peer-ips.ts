/**
 * A group's member addresses kept sorted as members come and go (node rules read them as the
 * rule's peer addresses), with each change recorded as a list step the flow compiler's peer
 * classes diff through (liststeps.ts).
 */
import { recordListStep } from './liststeps.js';
import type { GroupMember } from './types.js';

/**
 * A group's member addresses as node rules list them: the addresses of every member but Services
 * (sorted, unique; each address counted per member holding it) and the Service members. A member
 * change replaces `sorted` by a new array (node rules already built keep theirs unchanged), at the
 * cost of one copy instead of a rebuild and sort of the whole list.
 */
export class PeerIps {
  private readonly counts = new Map<string, number>();
  sorted: readonly string[] = [];
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
    this.sorted = all.sort();
  }

  /** Member `key` changes from `old` to `now` (either may be undefined). */
  update(key: string, old: GroupMember | undefined, now: GroupMember | undefined): void {
    // As in the members map: a member replaced in place keeps its position.
    if (now?.kind === 'service') this.services.set(key, now);
    else if (old?.kind === 'service') this.services.delete(key);
    const gone = old && old.kind !== 'service' ? old.ips : [];
    const come = now && now.kind !== 'service' ? now.ips : [];
    let next: string[] | undefined;
    const added: string[] = [];
    const removed: string[] = [];
    for (const ip of come) {
      const n = this.counts.get(ip) ?? 0;
      this.counts.set(ip, n + 1);
      if (n > 0) continue;
      next ??= [...this.sorted];
      next.splice(lowerBound(next, ip), 0, ip);
      added.push(ip);
    }
    for (const ip of gone) {
      const n = this.counts.get(ip) ?? 0;
      if (n > 1) {
        this.counts.set(ip, n - 1);
        continue;
      }
      this.counts.delete(ip);
      next ??= [...this.sorted];
      const i = lowerBound(next, ip);
      if (next[i] === ip) {
        next.splice(i, 1);
        removed.push(ip);
      }
    }
    if (!next) return;
    // The compiler's peer classes diff the version they hold against this one through the step.
    recordListStep(this.sorted, next, removed.sort(), added.sort());
    this.sorted = next;
  }
}

/** The first index of a sorted list whose item is not below `x`. */
function lowerBound(list: readonly string[], x: string): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
