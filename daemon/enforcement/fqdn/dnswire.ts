/**
 * DNS message reader (RFC 1035), just enough to learn name -> address mappings from responses:
 * header, first question, and the A / AAAA / CNAME records of the answer section. Authority and
 * additional sections (EDNS0 OPT included) are never read, so their content cannot break parsing.
 *
 * Pure and total: every outcome, malformed input included, is a returned value; nothing throws.
 * Compression pointers must point strictly backwards (to an earlier label sequence), which makes
 * pointer loops impossible; a name is limited to 255 octets on the wire (RFC 1035 §2.3.4).
 */
import { isIPv4 } from 'node:net';

export const RR_TYPE = { A: 1, CNAME: 5, AAAA: 28, OPT: 41 } as const;
export const CLASS_IN = 1;
export const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3 } as const;

export interface DnsQuestion {
  name: string;
  type: number;
  class: number;
}

export type DnsRecord =
  | { name: string; type: typeof RR_TYPE.A | typeof RR_TYPE.AAAA; ttl: number; address: string }
  | { name: string; type: typeof RR_TYPE.CNAME; ttl: number; target: string };

export interface DnsMessage {
  id: number;
  /** QR bit: true for a response. */
  response: boolean;
  opcode: number;
  rcode: number;
  /** TC bit: the server cut the message (the client retries over TCP). */
  truncated: boolean;
  questions: DnsQuestion[];
  /** Answer records of class IN and type A, AAAA or CNAME; other records are skipped. */
  answers: DnsRecord[];
}

export type DnsParseResult = { ok: true; message: DnsMessage } | { ok: false; error: string };

const MAX_NAME_WIRE = 255;
const HEADER_LEN = 12;

class ParseError extends Error {}

/**
 * Reads a (possibly compressed) domain name at `at`. Returns the presentation form (lower case,
 * no trailing dot; the root is "") and the offset after the name's in-place part.
 */
export function readName(buf: Buffer, at: number): { name: string; next: number } {
  const labels: string[] = [];
  let wire = 0;
  let pos = at;
  let next = -1;
  /** Pointers must go strictly below this: the start of the label sequence being read. */
  let floor = at;
  for (;;) {
    if (pos >= buf.length) throw new ParseError(`name at offset ${at} runs past the end of the message`);
    const len = buf[pos]!;
    const kind = len & 0xc0;
    if (kind === 0xc0) {
      if (pos + 1 >= buf.length) throw new ParseError(`compression pointer at offset ${pos} is cut off`);
      const target = ((len & 0x3f) << 8) | buf[pos + 1]!;
      if (target >= floor) throw new ParseError(`compression pointer at offset ${pos} points to ${target}, not backwards (loop or forward reference)`);
      if (next < 0) next = pos + 2;
      pos = target;
      floor = target;
      continue;
    }
    if (kind !== 0) throw new ParseError(`label type 0x${kind.toString(16)} at offset ${pos} is not supported`);
    wire += len + 1;
    if (wire > MAX_NAME_WIRE) throw new ParseError(`name at offset ${at} is longer than ${MAX_NAME_WIRE} octets`);
    if (len === 0) {
      if (next < 0) next = pos + 1;
      return { name: labels.join('.'), next };
    }
    if (pos + 1 + len > buf.length) throw new ParseError(`label at offset ${pos} runs past the end of the message`);
    labels.push(labelText(buf, pos + 1, pos + 1 + len));
    pos += 1 + len;
  }
}

/** Lower-case text of a label; bytes that are not plain printable ASCII (and '.') become \DDD. */
function labelText(buf: Buffer, start: number, end: number): string {
  let s = '';
  for (let i = start; i < end; i++) {
    let c = buf[i]!;
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    s += c > 0x20 && c < 0x7f && c !== 0x2e && c !== 0x5c ? String.fromCharCode(c) : `\\${c.toString().padStart(3, '0')}`;
  }
  return s;
}

function need(buf: Buffer, at: number, n: number, what: string): void {
  if (at + n > buf.length) throw new ParseError(`${what} at offset ${at} is cut off (needs ${n} bytes, ${Math.max(0, buf.length - at)} left)`);
}

/** RFC 5952 text of 16 bytes at `at`. */
export function ipv6Text(b: Buffer, at: number): string {
  const groups: string[] = [];
  for (let i = 0; i < 8; i++) groups.push(b.readUInt16BE(at + 2 * i).toString(16));
  // Longest run of zero groups (length >= 2) becomes "::".
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i >= 2) { best = i; bestLen = j - i; }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** RFC 2181 §8: a TTL with the top bit set is treated as zero. */
const ttlOf = (raw: number): number => (raw > 0x7fffffff ? 0 : raw);

export function parseDnsMessage(buf: Buffer): DnsParseResult {
  try {
    need(buf, 0, HEADER_LEN, 'header');
    const id = buf.readUInt16BE(0);
    const flags = buf.readUInt16BE(2);
    const qdcount = buf.readUInt16BE(4);
    const ancount = buf.readUInt16BE(6);
    let at = HEADER_LEN;
    const questions: DnsQuestion[] = [];
    for (let i = 0; i < qdcount; i++) {
      const { name, next } = readName(buf, at);
      need(buf, next, 4, `question ${i}`);
      questions.push({ name, type: buf.readUInt16BE(next), class: buf.readUInt16BE(next + 2) });
      at = next + 4;
    }
    const answers: DnsRecord[] = [];
    for (let i = 0; i < ancount; i++) {
      const { name, next } = readName(buf, at);
      need(buf, next, 10, `answer ${i}`);
      const type = buf.readUInt16BE(next);
      const klass = buf.readUInt16BE(next + 2);
      const ttl = ttlOf(buf.readUInt32BE(next + 4));
      const rdlen = buf.readUInt16BE(next + 8);
      const rdata = next + 10;
      need(buf, rdata, rdlen, `answer ${i} data`);
      at = rdata + rdlen;
      if (klass !== CLASS_IN) continue;
      if (type === RR_TYPE.A) {
        if (rdlen !== 4) throw new ParseError(`answer ${i}: A record data is ${rdlen} bytes, not 4`);
        answers.push({ name, type: RR_TYPE.A, ttl, address: `${buf[rdata]}.${buf[rdata + 1]}.${buf[rdata + 2]}.${buf[rdata + 3]}` });
      } else if (type === RR_TYPE.AAAA) {
        if (rdlen !== 16) throw new ParseError(`answer ${i}: AAAA record data is ${rdlen} bytes, not 16`);
        answers.push({ name, type: RR_TYPE.AAAA, ttl, address: ipv6Text(buf, rdata) });
      } else if (type === RR_TYPE.CNAME) {
        // The target may be compressed against anything earlier, but must end inside its rdata.
        const target = readName(buf.subarray(0, rdata + rdlen), rdata);
        if (target.next !== rdata + rdlen) throw new ParseError(`answer ${i}: CNAME data has ${rdata + rdlen - target.next} stray bytes`);
        answers.push({ name, type: RR_TYPE.CNAME, ttl, target: target.name });
      }
    }
    return {
      ok: true,
      message: { id, response: (flags & 0x8000) !== 0, opcode: (flags >> 11) & 0xf, truncated: (flags & 0x0200) !== 0, rcode: flags & 0xf, questions, answers },
    };
  } catch (e) {
    if (e instanceof ParseError) return { ok: false, error: e.message };
    return { ok: false, error: `unreadable DNS message: ${(e as Error).message}` };
  }
}

/** One learned address of a name, valid for `ttl` seconds (the smallest TTL along its CNAME chain). */
export interface NameAddress {
  address: string;
  ttl: number;
}

export type ResolvedNames = { ok: true; question: string; names: Map<string, NameAddress[]> } | { ok: false; error: string };

/**
 * What a response says about names: the question name and every alias of its CNAME chain (in the
 * answer section) map to the addresses of the chain's end. Addresses of names outside the chain
 * are ignored (a server must not vouch for unrelated names). Refuses anything that is not a
 * successful standard-query response with exactly one IN question.
 */
export function resolvedNames(msg: DnsMessage): ResolvedNames {
  if (!msg.response) return { ok: false, error: 'not a response (QR bit clear)' };
  if (msg.opcode !== 0) return { ok: false, error: `opcode ${msg.opcode} is not a standard query` };
  if (msg.rcode !== RCODE.NOERROR) return { ok: false, error: `response code ${msg.rcode}${msg.rcode === RCODE.NXDOMAIN ? ' (NXDOMAIN)' : ''}` };
  if (msg.questions.length !== 1) return { ok: false, error: `${msg.questions.length} questions (expected 1)` };
  const q = msg.questions[0]!;
  if (q.class !== CLASS_IN) return { ok: false, error: `question class ${q.class} is not IN` };
  // Walk the chain: name -> (alias, ttl so far). A CNAME seen twice ends the walk (loop).
  const chain: { name: string; ttl: number }[] = [{ name: q.name, ttl: Infinity }];
  const inChain = new Map<string, number>([[q.name, Infinity]]);
  for (;;) {
    const last = chain[chain.length - 1]!;
    const cname = msg.answers.find((r) => r.type === RR_TYPE.CNAME && r.name === last.name);
    if (!cname || cname.type !== RR_TYPE.CNAME || inChain.has(cname.target)) break;
    const ttl = Math.min(last.ttl, cname.ttl);
    chain.push({ name: cname.target, ttl });
    inChain.set(cname.target, ttl);
  }
  const addresses = new Map<string, NameAddress>();
  for (const r of msg.answers) {
    if (r.type === RR_TYPE.CNAME) continue;
    const chainTtl = inChain.get(r.name);
    if (chainTtl === undefined) continue;
    const ttl = Math.min(chainTtl, r.ttl);
    const seen = addresses.get(r.address);
    if (!seen || seen.ttl < ttl) addresses.set(r.address, { address: r.address, ttl });
  }
  const list = [...addresses.values()].sort((a, b) => cmpAddr(a.address, b.address));
  const names = new Map<string, NameAddress[]>();
  if (list.length > 0) for (const { name } of chain) names.set(name, list);
  return { ok: true, question: q.name, names };
}

function cmpAddr(a: string, b: string): number {
  if (isIPv4(a) !== isIPv4(b)) return isIPv4(a) ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}
