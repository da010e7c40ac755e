/**
 * What the agent does with a policy punt (pure apart from the two callbacks): decode the deciding
 * rule from the userdata (or registers), answer Rejects, and turn logged packets into audit events
 * (policy reference from the compiler's conjunction id; conj id 0 = Kubernetes default drop).
 */
import { K8S_DEFAULT_DROP_REFERENCE, packetFields, policyReference, type AuditAction, type AuditEvent } from './auditlog/index.js';
import { decodePolicyPuntExtra, decodePolicyPuntRegs, Disposition, type DecodedPolicyPunt } from '../flows/policy/punt.js';
import type { RuleIdentity } from '../flows/policy/compile.js';
import { PuntOp, type DecodedPunt } from '../flows/punt.js';
import type { PacketIn } from '../ovs/openflow/wire.js';
import { TABLES, VIRTUAL_MAC } from '../flows/tables.js';

const ACTIONS: Record<number, AuditAction> = { [Disposition.allow]: 'Allow', [Disposition.drop]: 'Drop', [Disposition.reject]: 'Reject', [Disposition.pass]: 'Pass' };

export interface PuntDecision {
  punt: DecodedPolicyPunt;
  reject: boolean;
  /** The audit event to log, when the punt asks for logging. */
  audit?: Omit<AuditEvent, 'timeNs'>;
}

/** reg2/reg3 of a packet-in (OF1.5 reports xreg1 = reg2 << 32 | reg3). */
function puntFromRegisters(pin: PacketIn): (DecodedPolicyPunt & { ops: number }) | undefined {
  const regs = pin.registers;
  if (!regs || regs.length < 4) return undefined;
  const reg2 = regs[2]!;
  const reg3 = regs[3]!;
  if (reg2 === 0) return undefined;
  return decodePolicyPuntRegs(reg2, reg3);
}

/**
 * Decides what to do with one policy punt. `describe` maps a conjunction id back to its rule.
 * Throws when the punt cannot be decoded (the loop counts it as failed).
 */
export function decidePolicyPunt(pin: PacketIn, punt: DecodedPunt, describe: (conjId: number) => RuleIdentity | undefined): PuntDecision {
  const fromRegs = puntFromRegisters(pin);
  const decoded = decodePolicyPuntExtra(punt.extra) ?? fromRegs;
  if (!decoded) throw new Error(`policy punt without rule information (userdata ${punt.extra.length} bytes, no reg2)`);
  const ops = punt.ops || (fromRegs?.ops ?? 0);
  const decision: PuntDecision = { punt: decoded, reject: (ops & PuntOp.reject) !== 0 };
  if ((ops & PuntOp.log) === 0) return decision;
  let policyRef: string;
  let priority = decoded.priority;
  if (decoded.conjId === 0) {
    policyRef = K8S_DEFAULT_DROP_REFERENCE;
    priority = -1;
  } else {
    const id = describe(decoded.conjId);
    // The rule may have been removed between the packet and now: say so rather than guess.
    policyRef = id ? policyReference(id.ref) : `Unknown:conjunction-${decoded.conjId}`;
  }
  const action = ACTIONS[decoded.disposition];
  if (!action) throw new Error(`policy punt with unknown disposition ${decoded.disposition}`);
  decision.audit = {
    tableName: TABLES[decoded.tableId] ?? `table${decoded.tableId}`,
    policyRef,
    action,
    priority,
    ...packetFields(pin.packet),
  };
  return decision;
}

/**
 * The Ethernet addresses of a reject reply. Ingress rule tables run after L3Forwarding rewrote the
 * packet (eth_src = virtual MAC, eth_dst = the destination Pod), so swapping the punted frame's
 * addresses would address the reply to the wrong host. The reply leaves through the port the
 * client's packet came in on: to the gateway (the host routes it on, un-DNATing a Service reply)
 * or to the client Pod, in both cases from the virtual router MAC the other side already uses.
 */
export function rejectReplyMacs(inPortMac: string | undefined): { dst: Buffer; src: Buffer } | undefined {
  if (!inPortMac) return undefined;
  return { dst: macBytes(inPortMac), src: macBytes(VIRTUAL_MAC) };
}

export function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  if (parts.length !== 6 || parts.some((p) => !/^[0-9a-fA-F]{2}$/.test(p))) throw new Error(`"${mac}" is not a MAC address`);
  return Buffer.from(parts.map((p) => parseInt(p, 16)));
}
