/**
 * AppliedToGroup member lists as the controlplane objects hold them: one Node's members, sorted by
 * member key, never mutated, changed by building a new list with the changes. (AddressGroups,
 * which can hold every Pod of the cluster, hold a KeyedList instead: see MemberList.)
 */
import type { MemberChange } from '../policy/internal.js';
import type { GroupMember } from '../policy/types.js';
import { memberKey } from './types.js';

export type { MemberChange };

/** A member list sorted by key with these changes applied (a new array; `list` is shared and stays as it is). */
export function applyMemberChanges(list: readonly GroupMember[], changes: readonly MemberChange[]): GroupMember[] {
  const out = [...list];
  for (const c of changes) {
    let lo = 0;
    let hi = out.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (memberKey(out[mid]!) < c.key) lo = mid + 1;
      else hi = mid;
    }
    const present = out[lo] !== undefined && memberKey(out[lo]!) === c.key;
    if (c.after) out.splice(lo, present ? 1 : 0, c.after);
    else if (present) out.splice(lo, 1);
  }
  return out;
}
