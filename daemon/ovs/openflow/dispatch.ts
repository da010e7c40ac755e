/**
 * The agent's packet-in loop: takes packet-ins from the controller and hands each to the handler of
 * its punt category (policy: reject/log, DNS learning, …). A failing handler costs one packet, never
 * the loop.
 */
import type { OpenFlowController } from './controller.js';
import { decodePuntUserdata, type DecodedPunt } from '../../flows/punt.js';
import type { PacketIn } from './wire.js';

export type PacketInHandler = (pin: PacketIn, punt: DecodedPunt) => void | Promise<void>;

export interface DispatchStats {
  handled: number;
  unclaimed: number;
  failed: number;
}

/**
 * Consumes the controller's packet-ins until it is closed. `handlers` is keyed by userdata category;
 * packet-ins without userdata or with an unknown category are counted as unclaimed.
 */
export async function runPacketInLoop(
  controller: OpenFlowController,
  handlers: Partial<Record<number, PacketInHandler>>,
  onError: (e: unknown, pin: PacketIn) => void = () => undefined,
  stats: DispatchStats = { handled: 0, unclaimed: 0, failed: 0 },
): Promise<DispatchStats> {
  for await (const pin of controller.packetIns()) {
    const punt = decodePuntUserdata(pin.userdata);
    const handler = punt ? handlers[punt.category] : undefined;
    if (!punt || !handler) {
      stats.unclaimed++;
      continue;
    }
    try {
      await handler(pin, punt);
      stats.handled++;
    } catch (e) {
      stats.failed++;
      onError(e, pin);
    }
  }
  return stats;
}
