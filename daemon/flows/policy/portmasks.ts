/**
 * Port ranges as OpenFlow value/mask matches. A range [lo, hi] of 16-bit ports becomes the
 * smallest list of aligned power-of-two blocks that covers it exactly (at most 30 for 0..65535),
 * each written `value/mask`; a block of one port is written as the bare number.
 */

export class PortRangeError extends Error {
  override name = 'PortRangeError';
}

export interface MaskedPort {
  value: number;
  /** 0xffff for a single port. */
  mask: number;
}

function checkPort(p: number, what: string): void {
  if (!Number.isInteger(p) || p < 0 || p > 0xffff) throw new PortRangeError(`${what} ${p} is not a port number (0..65535)`);
}

/** Exact cover of [lo, hi] by aligned blocks, lowest first. */
export function rangeToMasks(lo: number, hi: number): MaskedPort[] {
  checkPort(lo, 'range start');
  checkPort(hi, 'range end');
  if (lo > hi) throw new PortRangeError(`port range ${lo}-${hi} is empty (start after end)`);
  const out: MaskedPort[] = [];
  let cur = lo;
  while (cur <= hi) {
    // Largest block aligned at `cur` (its size divides cur) that does not pass `hi`.
    let size = cur === 0 ? 0x10000 : cur & -cur;
    while (cur + size - 1 > hi) size >>= 1;
    out.push({ value: cur, mask: (0xffff & ~(size - 1)) >>> 0 });
    cur += size;
  }
  return out;
}

/** `80`, or `0x50/0xfff0`. A full wildcard (mask 0) is never needed: callers omit the field. */
export function maskedPortText(m: MaskedPort): string {
  return m.mask === 0xffff ? String(m.value) : `0x${m.value.toString(16)}/0x${m.mask.toString(16)}`;
}

/** Whether `port` falls in the block. */
export const maskedPortContains = (m: MaskedPort, port: number): boolean => (port & m.mask) === m.value;
