/**
 * Test-side frame helpers shared by the IPv4 and IPv6 reject tests: an independent, straightforward
 * implementation (not the one under test) of MAC text and the RFC 1071 Internet checksum.
 */
export const CLIENT_MAC = '0a:00:00:00:00:0a';
export const SERVER_MAC = '0a:00:00:00:00:0b';

export const mac = (s: string) => Buffer.from(s.split(':').map((h) => parseInt(h, 16)));
export const macStr = (b: Buffer) => [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');

/** The Internet checksum over the concatenated parts (0 when the parts hold a valid checksum). */
export function csum(...parts: Buffer[]): number {
  const data = Buffer.concat(parts);
  let sum = 0;
  for (let i = 0; i < data.length; i += 2) sum += (data[i]! << 8) + (i + 1 < data.length ? data[i + 1]! : 0);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}
