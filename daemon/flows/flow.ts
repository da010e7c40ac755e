/**
 * One OpenFlow flow as sluice computes it, its deterministic cookie, and its ovs-ofctl text.
 *
 * The cookie identifies the flow's whole content: prefix 0x51ce (sluice) in bits 63..48, the
 * category in bits 47..40 and 40 bits of sha256(table, priority, match, actions). Syncing then
 * needs only the installed cookies: a desired cookie that is installed is the identical flow, so
 * it is left alone; an installed sluice cookie that is not desired is deleted by `cookie=X/-1`.
 * No dump output has to be parsed beyond the cookie, whatever format ovs-ofctl prints.
 */
import { hash } from 'node:crypto';
import { flat } from '../policy/flat-string.js';
import { tableId, type TableName } from './tables.js';

export const COOKIE_PREFIX = '51ce';
/** `ovs-ofctl dump-flows` filter selecting sluice's flows. */
export const SLUICE_COOKIE_FILTER = `cookie=0x${COOKIE_PREFIX}000000000000/0xffff000000000000`;

export const FlowCategory = {
  /** Pipeline skeleton that depends only on node settings. */
  base: 0x00,
  /** Flows of one local Pod (owner = container id). */
  pod: 0x01,
  /** Reserved for policy enforcement. */
  policy: 0x02,
} as const;
export type FlowCategory = (typeof FlowCategory)[keyof typeof FlowCategory];

export interface FlowSpec {
  table: TableName;
  priority: number;
  /** Match fields without table/priority/cookie, e.g. `ip,in_port=3`; '' matches everything. */
  match: string;
  actions: string;
  category: FlowCategory;
  /** Container id for Pod flows (for display and CHECK). */
  owner?: string;
}

export interface Flow extends FlowSpec {
  /** `0x51ce…`, 16 lower-case hex digits. */
  cookie: string;
}

const contentKey = (f: FlowSpec): string => `table=${f.table},priority=${f.priority},${f.match} actions=${f.actions}`;

export function withCookie(spec: FlowSpec): Flow {
  if (!Number.isInteger(spec.category) || spec.category < 0 || spec.category > 0xff) {
    throw new Error(`flow category ${spec.category} is not a byte`);
  }
  // One-shot: no Hash object per flow (a compile signs thousands).
  const digest = hash('sha256', contentKey(spec), 'hex').slice(0, 10);
  const cookie = `0x${COOKIE_PREFIX}${spec.category.toString(16).padStart(2, '0')}${digest}`;
  // Field by field, not `{ ...spec, cookie }`: V8 gives every object built by that spread its own
  // hidden class (~230 bytes each, as much as the flow itself), and the agent holds tens of
  // thousands of flows. A literal of fixed shape shares one.
  const flow: Flow = { table: spec.table, priority: spec.priority, match: flat(spec.match), actions: flat(spec.actions), category: spec.category, cookie: flat(cookie) };
  if (spec.owner !== undefined) flow.owner = spec.owner;
  return flow;
}

/** The flow as `ovs-ofctl add-flow(s)` text (numbered tables, so no table-features round trip). */
export function flowText(f: Flow): string {
  const match = f.match ? `,${f.match}` : '';
  return `table=${tableId(f.table)},priority=${f.priority},cookie=${f.cookie}${match} actions=${resolveTableNames(f.actions)}`;
}

/** `goto_table:Name` / `ct(table=Name` / `resubmit(,Name)` -> numbers. Names are only ever written through here. */
export function resolveTableNames(actions: string): string {
  return actions.replace(/(goto_table:|table=|resubmit\(,)([A-Za-z][A-Za-z0-9]*)/g, (_m, kw: string, name: string) => {
    const id = tableId(name as TableName);
    if (id < 0) throw new Error(`unknown table ${name} in actions "${actions}"`);
    return `${kw}${id}`;
  });
}

const NORMAL_COOKIE = /^0x[1-9a-f][0-9a-f]*$/;

/**
 * Normalizes a cookie as printed by ovs-ofctl (`0x51ce01…`) for comparison. Cookies sluice writes
 * are already in normal form (lower case, no leading zero), which is checked without a BigInt.
 */
export const normalizeCookie = (c: string): string => (NORMAL_COOKIE.test(c) ? c : `0x${BigInt(c).toString(16)}`);
