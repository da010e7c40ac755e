/**
 * The contract between flows that punt packets to the agent and the agent's packet-in consumer:
 * which meter a punt goes through and what its `controller(userdata=…)` bytes mean. Pure.
 *
 * userdata byte 0 = category (what the packet is for), byte 1 = operations bitmask (for policy
 * punts), further bytes free for the category. Flows use `puntActions()` so every punt is metered.
 */
/** A packet-in meter: what the OpenFlow adapter installs on the bridge. */
export interface MeterSpec {
  meterId: number;
  /** Packets per second allowed through; the rest are dropped. */
  rate: number;
  /** Burst size in packets. */
  burst: number;
}

export const PuntCategory = { policy: 0x01, dns: 0x02, serviceReject: 0x04, trace: 0x08 } as const;
export type PuntCategory = (typeof PuntCategory)[keyof typeof PuntCategory];

/** Operations of a policy punt (combinable). */
export const PuntOp = { log: 0x01, reject: 0x02 } as const;

/** One meter per category so a flood of one kind cannot starve the other. */
export const PUNT_METER_ID: Record<PuntCategory, number> = { 0x01: 256, 0x02: 258, 0x04: 256, 0x08: 260 };

/** What each meter limits, as /metrics names it. */
export const PUNT_METER_NAME: Record<number, string> = { 256: 'policy', 258: 'dns', 260: 'traceflow' };

export const DEFAULT_PACKET_IN_RATE = 5000;

/** The meters the controller installs: `rate` packets/s each, bursts of twice that. */
export function packetInMeters(rate = DEFAULT_PACKET_IN_RATE): MeterSpec[] {
  if (!Number.isInteger(rate) || rate < 1) throw new Error(`packet-in rate ${rate} is not a positive integer`);
  return [...new Set(Object.values(PUNT_METER_ID))].sort((a, b) => a - b).map((meterId) => ({ meterId, rate, burst: 2 * rate }));
}

/** `ovs-ofctl add-meter` text for a meter (for documentation and manual repair). */
export const meterText = (m: MeterSpec): string => `meter=${m.meterId},pktps,burst,stats,bands=type=drop,rate=${m.rate},burst_size=${m.burst}`;

export interface Punt {
  category: PuntCategory;
  ops?: number;
  /** Extra userdata bytes after category and ops. */
  extra?: Buffer;
  /** Bytes of the packet to send (default all). */
  maxLen?: number;
}

const hexBytes = (b: Buffer): string => [...b].map((x) => x.toString(16).padStart(2, '0')).join('.');

export function puntUserdata(p: Punt): Buffer {
  const ops = p.ops ?? 0;
  if (!Number.isInteger(ops) || ops < 0 || ops > 0xff) throw new Error(`punt ops ${ops} is not a byte`);
  return Buffer.concat([Buffer.from([p.category, ops]), p.extra ?? Buffer.alloc(0)]);
}

/**
 * ovs-ofctl actions that send the packet to the agent through the category's meter. The meter is
 * the controller action's own `meter_id` (as the policy compiler's punts, ../policy/punt.ts): OVS
 * 3.1 refuses a `meter:N` action while meter N does not exist, which would fail a whole flow
 * bundle replayed before the controller connection re-created the meters.
 */
export function puntActions(p: Punt): string {
  const maxLen = p.maxLen === undefined ? '' : `max_len=${p.maxLen},`;
  return `controller(${maxLen}userdata=${hexBytes(puntUserdata(p))},meter_id=${PUNT_METER_ID[p.category]})`;
}

export interface DecodedPunt {
  category: number;
  ops: number;
  extra: Buffer;
}

export function decodePuntUserdata(userdata: Buffer | undefined): DecodedPunt | undefined {
  if (!userdata || userdata.length < 2) return undefined;
  return { category: userdata[0]!, ops: userdata[1]!, extra: userdata.subarray(2) };
}
