/**
 * What a policy flow tells the agent when it sends a packet up (Reject, audit logging): the
 * `controller(userdata=…)` bytes after the punt category and ops byte (see ../punt.ts).
 *
 *   extra[0]    pipeline table id of the deciding flow
 *   extra[1]    disposition: 0 allow, 1 drop, 2 reject, 3 pass
 *   extra[2..3] OpenFlow priority of the deciding rule (big-endian)
 *   extra[4..7] conjunction id of the rule (big-endian); 0 = Kubernetes default (isolation) drop
 *
 * The agent turns the conjunction id back into the rule with PolicyFlows.describe().
 */
import { PUNT_METER_ID, PuntCategory, PuntOp, puntUserdata } from '../punt.js';
import { tableId, type TableName } from '../tables.js';

export const Disposition = { allow: 0, drop: 1, reject: 2, pass: 3 } as const;
export type Disposition = (typeof Disposition)[keyof typeof Disposition];

export interface PolicyPunt {
  table: TableName;
  disposition: Disposition;
  priority: number;
  conjId: number;
  log: boolean;
  reject: boolean;
}

export function policyPuntExtra(p: Pick<PolicyPunt, 'table' | 'disposition' | 'priority' | 'conjId'>): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt8(tableId(p.table), 0);
  b.writeUInt8(p.disposition, 1);
  b.writeUInt16BE(p.priority, 2);
  b.writeUInt32BE(p.conjId >>> 0, 4);
  return b;
}

/**
 * `controller(userdata=…,meter_id=256)`: the packet (Drop/Reject: the packet ends there) or a copy
 * of it (Allow/Pass + log: the actions go on) to the agent, rate-limited by the policy punt meter.
 *
 * The meter is the controller action's own `meter_id`, not a `meter:N` action: (1) a `meter:N`
 * action would drop the packet itself when over rate, and OVS refuses it inside clone(); (2) OVS
 * refuses a flow with `meter:N` while meter N does not exist (OFPMMFC_INVALID_METER), which would
 * fail the whole bundle whenever flows are replayed before the controller connection re-creates
 * the meters (agent start, ovs-vswitchd restart); `meter_id` is accepted either way (unmetered
 * until the meter exists).
 */
export function policyPuntActions(p: PolicyPunt): string {
  const ops = (p.log ? PuntOp.log : 0) | (p.reject ? PuntOp.reject : 0);
  const ud = puntUserdata({ category: PuntCategory.policy, ops, extra: policyPuntExtra(p) });
  const hex = [...ud].map((x) => x.toString(16).padStart(2, '0')).join('.');
  const regs = `set_field:0x${policyPuntReg2({ ...p, ops }).toString(16)}->${PUNT_REGS.info},set_field:${p.conjId >>> 0}->${PUNT_REGS.conjId}`;
  return `${regs},controller(userdata=${hex},meter_id=${PUNT_METER_ID[PuntCategory.policy]})`;
}

/**
 * The same facts in registers, for a packet-in without userdata (standard OFPT_PACKET_IN, which
 * carries the registers but not the controller action's userdata):
 *   reg2 = ops << 28 | disposition << 24 | table id << 16 | OpenFlow priority;  reg3 = conjunction id.
 * reg2/reg3 are free in the policy and later tables (the pipeline uses reg2 only for ARP replies).
 */
export const PUNT_REGS = { info: 'reg2', conjId: 'reg3' } as const;

export function policyPuntReg2(p: Pick<PolicyPunt, 'table' | 'disposition' | 'priority'> & { ops: number }): number {
  return ((p.ops & 0xf) * 2 ** 28 + (p.disposition & 0xf) * 2 ** 24 + tableId(p.table) * 2 ** 16 + (p.priority & 0xffff)) >>> 0;
}

export function decodePolicyPuntRegs(reg2: number, reg3: number): DecodedPolicyPunt & { ops: number } {
  return { ops: reg2 >>> 28, disposition: (reg2 >>> 24) & 0xf, tableId: (reg2 >>> 16) & 0xff, priority: reg2 & 0xffff, conjId: reg3 >>> 0 };
}

/** A metered copy for the audit log of a packet that goes on (Allow/Pass + log); append `,goto_table:…`. */
export function policyCopyActions(p: Omit<PolicyPunt, 'reject' | 'log'>): string {
  return policyPuntActions({ ...p, log: true, reject: false });
}

export interface DecodedPolicyPunt {
  tableId: number;
  disposition: number;
  priority: number;
  conjId: number;
}

/** Decodes the `extra` bytes of a policy punt (undefined when too short). */
export function decodePolicyPuntExtra(extra: Buffer): DecodedPolicyPunt | undefined {
  if (extra.length < 8) return undefined;
  return { tableId: extra.readUInt8(0), disposition: extra.readUInt8(1), priority: extra.readUInt16BE(2), conjId: extra.readUInt32BE(4) };
}
