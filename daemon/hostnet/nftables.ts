/**
 * A small nf_tables client over one NETLINK_NETFILTER socket: what `nft` does for the few objects
 * sluice keeps (a table and netdev base chains), without a process per call. Changes go in one
 * batch (atomic: all or nothing), each message acknowledged; listings are dumps of the kernel's
 * chains. Messages and attributes follow linux/netfilter/nf_tables.h; nf_tables reads numbers in
 * network byte order.
 */
import { RawNetlinkSocket } from 'netlink';
import { type Clock, realClock } from '../clock.js';
import { attr, cstr, cstring, nlmsg, parseAttrs, parseMessages } from './netlink-wire.js';

const NETLINK_NETFILTER = 12;
const NLMSG = { ERROR: 2, DONE: 3 } as const;
const NLM_F = { REQUEST: 0x1, MULTI: 0x2, ACK: 0x4, DUMP: 0x300, CREATE: 0x400 } as const;
const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH = { BEGIN: 0x10, END: 0x11 } as const;
const NFT_MSG = { NEWTABLE: 0, GETTABLE: 1, DELTABLE: 2, NEWCHAIN: 3, GETCHAIN: 4, DELCHAIN: 5 } as const;
const NFTA_TABLE_NAME = 1;
const NFTA_CHAIN = { TABLE: 1, NAME: 3, HOOK: 4, POLICY: 5, TYPE: 7 } as const;
const NFTA_HOOK = { HOOKNUM: 1, PRIORITY: 2, DEV: 3, DEVS: 4 } as const;
const NLA_F_NESTED = 0x8000;
export const NFPROTO_NETDEV = 5;
const NF_NETDEV_INGRESS = 0;
export const NF_DROP = 0;
export const NF_ACCEPT = 1;

/** What the client needs of a netlink socket (real: RawNetlinkSocket; tests: a fake kernel). */
export interface NetlinkTransport {
  send(msg: Buffer): void;
  onMessage(fn: (datagram: Buffer) => void): void;
  close(): void;
}

function rawTransport(): NetlinkTransport {
  const sock = new RawNetlinkSocket(NETLINK_NETFILTER, { recvBufferSize: 1 << 20 } as never);
  sock.unref();
  return {
    send: (msg) => sock.send(msg),
    onMessage: (fn) => sock.on('message', (m: Buffer) => fn(m)),
    close: () => sock.close(),
  };
}

const nested = (type: number, ...attrs: Buffer[]) => attr(type | NLA_F_NESTED, Buffer.concat(attrs));
const str = (type: number, s: string) => attr(type, cstr(s));
const be32 = (type: number, n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n, 0);
  return attr(type, b);
};

/** struct nfgenmsg: family, version 0, resource id (big-endian). */
function nfgenmsg(family: number, resId = 0): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt8(family, 0);
  b.writeUInt16BE(resId, 2);
  return b;
}

/** Every attribute of `data` in order (for lists of same-typed attributes). */
function attrList(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off + 4 <= data.length; ) {
    const len = data.readUInt16LE(off);
    if (len < 4 || off + len > data.length) break;
    out.push(data.subarray(off + 4, off + len));
    off += (len + 3) & ~3;
  }
  return out;
}


/** A change to nf_tables: one message of a batch. */
export type NftChange =
  | { op: 'add-table'; family: number; table: string }
  | { op: 'delete-table'; family: number; table: string }
  | { op: 'add-netdev-chain'; table: string; chain: string; device: string; priority: number; policy: typeof NF_DROP | typeof NF_ACCEPT }
  | { op: 'delete-chain'; family: number; table: string; chain: string };

export interface NftChain {
  table: string;
  name: string;
  /** The devices a netdev base chain hooks. */
  devices: string[];
}

/** The error a rejected message got: errno name and number, with the change it was for. */
export class NftError extends Error {
  constructor(
    readonly errno: number,
    readonly code: string,
    readonly change: string,
  ) {
    super(`nf_tables refused ${change}: ${code} (errno ${errno})`);
  }
}

const ERRNO_NAMES: Record<number, string> = { 1: 'EPERM', 2: 'ENOENT', 12: 'ENOMEM', 16: 'EBUSY', 17: 'EEXIST', 19: 'ENODEV', 22: 'EINVAL', 95: 'EOPNOTSUPP' };

function describeChange(c: NftChange): string {
  switch (c.op) {
    case 'add-table':
    case 'delete-table':
      return `${c.op} ${c.table}`;
    case 'add-netdev-chain':
      return `add-netdev-chain ${c.table} ${c.chain} (device ${c.device})`;
    case 'delete-chain':
      return `delete-chain ${c.table} ${c.chain}`;
  }
}

/** The message body of one change. */
export function encodeChange(c: NftChange, seq: number): Buffer {
  const type = (t: number) => (NFNL_SUBSYS_NFTABLES << 8) | t;
  switch (c.op) {
    case 'add-table':
      return nlmsg(type(NFT_MSG.NEWTABLE), NLM_F.REQUEST | NLM_F.CREATE | NLM_F.ACK, seq, Buffer.concat([nfgenmsg(c.family), str(NFTA_TABLE_NAME, c.table)]));
    case 'delete-table':
      return nlmsg(type(NFT_MSG.DELTABLE), NLM_F.REQUEST | NLM_F.ACK, seq, Buffer.concat([nfgenmsg(c.family), str(NFTA_TABLE_NAME, c.table)]));
    case 'add-netdev-chain':
      return nlmsg(
        type(NFT_MSG.NEWCHAIN),
        NLM_F.REQUEST | NLM_F.CREATE | NLM_F.ACK,
        seq,
        Buffer.concat([
          nfgenmsg(NFPROTO_NETDEV),
          str(NFTA_CHAIN.TABLE, c.table),
          str(NFTA_CHAIN.NAME, c.chain),
          nested(NFTA_CHAIN.HOOK, be32(NFTA_HOOK.HOOKNUM, NF_NETDEV_INGRESS), be32(NFTA_HOOK.PRIORITY, c.priority), str(NFTA_HOOK.DEV, c.device)),
          be32(NFTA_CHAIN.POLICY, c.policy),
          str(NFTA_CHAIN.TYPE, 'filter'),
        ]),
      );
    case 'delete-chain':
      return nlmsg(type(NFT_MSG.DELCHAIN), NLM_F.REQUEST | NLM_F.ACK, seq, Buffer.concat([nfgenmsg(c.family), str(NFTA_CHAIN.TABLE, c.table), str(NFTA_CHAIN.NAME, c.chain)]));
  }
}

/** A chain from a NEWCHAIN message of a dump. */
export function decodeChain(payload: Buffer): NftChain {
  const a = parseAttrs(payload, 4);
  const hook = a.get(NFTA_CHAIN.HOOK);
  const devices: string[] = [];
  if (hook) {
    // Kernels list a single device as NFTA_HOOK_DEV, newer ones (also) as a one-entry NFTA_HOOK_DEVS.
    const h = parseAttrs(hook);
    const devs = h.get(NFTA_HOOK.DEVS);
    const dev = cstring(h.get(NFTA_HOOK.DEV));
    if (devs) for (const d of attrList(devs)) devices.push(cstring(d)!);
    else if (dev) devices.push(dev);
  }
  return { table: cstring(a.get(NFTA_CHAIN.TABLE)) ?? '', name: cstring(a.get(NFTA_CHAIN.NAME)) ?? '', devices };
}

interface Pending {
  /** Sequence numbers still owed an acknowledgement (a transaction) or the dump's one. */
  seqs: Set<number>;
  changes: Map<number, string>;
  error?: NftError | undefined;
  rows: Buffer[];
  dump: boolean;
  done: (err: Error | undefined, rows: Buffer[]) => void;
}

export class NfTables {
  private transport?: NetlinkTransport | undefined;
  private seq = Math.floor(Math.random() * 0x7fff_0000) + 1;
  private readonly pending = new Map<number, Pending>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly openTransport: () => NetlinkTransport = rawTransport,
    private readonly timeoutMs = 5000,
    private readonly clock: Clock = realClock,
  ) {}

  private socket(): NetlinkTransport {
    if (!this.transport) {
      this.transport = this.openTransport();
      this.transport.onMessage((d) => this.receive(d));
    }
    return this.transport;
  }

  private receive(datagram: Buffer): void {
    for (const m of parseMessages(datagram)) {
      const p = this.pending.get(m.seq);
      if (!p) continue;
      if (m.type === NLMSG.ERROR) {
        const errno = -m.payload.readInt32LE(0);
        if (errno !== 0 && !p.error) p.error = new NftError(errno, ERRNO_NAMES[errno] ?? `errno ${errno}`, p.changes.get(m.seq) ?? 'a dump');
        p.seqs.delete(m.seq);
        this.pending.delete(m.seq);
      } else if (p.dump && m.type === NLMSG.DONE) {
        p.seqs.delete(m.seq);
        this.pending.delete(m.seq);
      } else if (p.dump) {
        p.rows.push(m.payload);
        if (!(m.flags & NLM_F.MULTI)) {
          p.seqs.delete(m.seq);
          this.pending.delete(m.seq);
        }
      }
      if (p.seqs.size === 0) p.done(p.error, p.rows);
    }
  }

  /** Sends `messages` (built with the sequence numbers given) and waits for every reply. */
  private exchange(build: (nextSeq: () => number) => { datagram: Buffer; awaited: Map<number, string>; dump: boolean }): Promise<Buffer[]> {
    const run = () =>
      new Promise<Buffer[]>((resolve, reject) => {
        const sock = this.socket();
        const { datagram, awaited, dump } = build(() => (this.seq = (this.seq % 0x7fff_ffff) + 1));
        const timer = this.clock.setTimeout(() => {
          for (const s of awaited.keys()) this.pending.delete(s);
          reject(new Error(`nf_tables did not answer within ${this.timeoutMs} ms`));
        }, this.timeoutMs);
        const p: Pending = {
          seqs: new Set(awaited.keys()),
          changes: awaited,
          rows: [],
          dump,
          done: (err, rows) => {
            this.clock.clearTimeout(timer);
            if (err) reject(err);
            else resolve(rows);
          },
        };
        for (const s of awaited.keys()) this.pending.set(s, p);
        try {
          sock.send(datagram);
        } catch (err) {
          this.clock.clearTimeout(timer);
          for (const s of awaited.keys()) this.pending.delete(s);
          reject(err as Error);
        }
      });
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }

  /** Applies `changes` as one batch: all of them or none. */
  async apply(changes: NftChange[]): Promise<void> {
    if (changes.length === 0) return;
    await this.exchange((next) => {
      const awaited = new Map<number, string>();
      const parts = [nlmsg(NFNL_MSG_BATCH.BEGIN, NLM_F.REQUEST, next(), nfgenmsg(0, NFNL_SUBSYS_NFTABLES))];
      for (const c of changes) {
        const seq = next();
        awaited.set(seq, describeChange(c));
        parts.push(encodeChange(c, seq));
      }
      parts.push(nlmsg(NFNL_MSG_BATCH.END, NLM_F.REQUEST, next(), nfgenmsg(0, NFNL_SUBSYS_NFTABLES)));
      return { datagram: Buffer.concat(parts), awaited, dump: false };
    });
  }

  /** The chains of one family (every table's; filter by `table` here: the kernel's dump does not). */
  async chains(family: number, table?: string): Promise<NftChain[]> {
    const rows = await this.exchange((next) => {
      const seq = next();
      const datagram = nlmsg((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG.GETCHAIN, NLM_F.REQUEST | NLM_F.DUMP, seq, nfgenmsg(family));
      return { datagram, awaited: new Map([[seq, 'list chains']]), dump: true };
    });
    return rows.map(decodeChain).filter((c) => table === undefined || c.table === table);
  }

  /** Whether the table exists. */
  async hasTable(family: number, table: string): Promise<boolean> {
    try {
      await this.exchange((next) => {
        const seq = next();
        const datagram = nlmsg((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG.GETTABLE, NLM_F.REQUEST | NLM_F.ACK, seq, Buffer.concat([nfgenmsg(family), str(NFTA_TABLE_NAME, table)]));
        return { datagram, awaited: new Map([[seq, `get table ${table}`]]), dump: true };
      });
      return true;
    } catch (err) {
      if (err instanceof NftError && err.code === 'ENOENT') return false;
      throw err;
    }
  }

  close(): void {
    this.transport?.close();
    this.transport = undefined;
  }
}
