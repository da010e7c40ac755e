/**
 * Desired-state flow sync, the pure half: which cookies to delete and which flows to add (applied
 * as one OpenFlow bundle, FlowProgrammer.applyDiff). Unchanged flows are not touched.
 */
import { COOKIE_PREFIX, type Flow, flowText, normalizeCookie } from './flow.js';

export interface FlowDiff {
  add: Flow[];
  /** Installed sluice cookies that are no longer desired. */
  remove: string[];
  unchanged: number;
}

/** Where an applied diff's time went (ms): the committed bundle, then the datapath cache purge. */
export interface ApplyTimings {
  bundleMs: number;
  purgeMs: number;
}

export function diffFlows(desired: readonly Flow[], installedCookies: Iterable<string>): FlowDiff {
  const installed = new Set([...installedCookies].map(normalizeCookie));
  const wanted = new Set(desired.map((f) => normalizeCookie(f.cookie)));
  const add = desired.filter((f) => !installed.has(normalizeCookie(f.cookie)));
  const remove = [...installed].filter((c) => !wanted.has(c)).sort();
  return { add, remove, unchanged: desired.length - add.length };
}

export const isEmptyDiff = (d: FlowDiff): boolean => d.add.length === 0 && d.remove.length === 0;

/**
 * The diff as an `ovs-ofctl --bundle add-flows` file, for the tools that fork ovs-ofctl: deletions
 * first (a replaced flow may keep its table/priority/match under a new cookie), then additions.
 * Deleting by exact cookie (mask -1) never depends on match syntax.
 */
export function bundleText(d: FlowDiff): string {
  const lines = [...d.remove.map((c) => `delete cookie=${c}/-1`), ...d.add.map((f) => `add ${flowText(f)}`)];
  return lines.length ? `${lines.join('\n')}\n` : '';
}

/** Cookies of sluice's flows in `ovs-ofctl dump-flows` output (any stats/name options). */
export function parseSluiceCookies(dump: string): string[] {
  const out: string[] = [];
  for (const m of dump.matchAll(/\bcookie=(0x[0-9a-f]+)/gi)) {
    const c = normalizeCookie(m[1]!);
    if (c.startsWith(`0x${COOKIE_PREFIX}`) && c.length === 18) out.push(c);
  }
  return out;
}
