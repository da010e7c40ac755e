/** NfTables and VethGuard against a fake nf_tables kernel: the bytes of each batch, acknowledgements, errors, dumps. */
import t from 'tap';
import { decodeChain, NF_DROP, NfTables, NftError, NFPROTO_NETDEV, type NetlinkTransport } from '../../daemon/hostnet/nftables.js';
import { attr, cstr, cstring, nlmsg, parseAttrs, parseMessages } from '../../daemon/hostnet/netlink-wire.js';
import { VethGuard } from '../../daemon/hostnet/vethguard.js';
import { ManualClock } from './manual-clock.js';

const NFT = 10 << 8;
const MSG = { NEWTABLE: NFT | 0, GETTABLE: NFT | 1, DELTABLE: NFT | 2, NEWCHAIN: NFT | 3, GETCHAIN: NFT | 4, DELCHAIN: NFT | 5 };
const str = (type: number, s: string) => attr(type, cstr(s));

function ack(seq: number, errno = 0): Buffer {
  const body = Buffer.alloc(20);
  body.writeInt32LE(-errno, 0);
  return nlmsg(2, 0, seq, body);
}

/** A kernel holding netdev tables and per-device chains; applies a batch only if every message succeeds. */
class FakeKernel {
  tables = new Set<string>();
  chains = new Map<string, { table: string; name: string; device: string; policy: number; hooknum: number; priority: number }>();
  batches: { type: number; flags: number }[][] = [];
  /** Devices the kernel refuses to hook (ENOENT). */
  missingDevices = new Set<string>();
  silent = false;
  private deliver?: (d: Buffer) => void;
  closed = 0;

  transport(): NetlinkTransport {
    return {
      send: (msg) => this.receive(msg),
      onMessage: (fn) => (this.deliver = fn),
      close: () => this.closed++,
    };
  }

  private reply(...msgs: Buffer[]): void {
    const d = Buffer.concat(msgs);
    queueMicrotask(() => this.deliver?.(d));
  }

  private receive(datagram: Buffer): void {
    if (this.silent) return;
    const msgs = parseMessages(datagram);
    const first = msgs[0]!;
    if (first.type === MSG.GETCHAIN) {
      t.equal(first.payload[0], NFPROTO_NETDEV, 'the chain dump asks for the netdev family');
      const rows = [...this.chains.values()].map((c) =>
        nlmsg(MSG.NEWCHAIN, 2, first.seq, Buffer.concat([Buffer.from([NFPROTO_NETDEV, 0, 0, 0]), str(1, c.table), str(3, c.name), attr(4 | 0x8000, str(3, c.device))])),
      );
      this.reply(...rows, nlmsg(3, 2, first.seq, Buffer.alloc(4)));
      return;
    }
    if (first.type === MSG.GETTABLE) {
      const name = cstring(parseAttrs(first.payload, 4).get(1))!;
      this.reply(this.tables.has(name) ? nlmsg(MSG.NEWTABLE, 0, first.seq, Buffer.concat([Buffer.alloc(4), str(1, name)])) : ack(first.seq, 2));
      return;
    }
    this.batches.push(msgs.map((m) => ({ type: m.type, flags: m.flags })));
    t.equal(first.type, 0x10, 'a batch begins with NFNL_MSG_BATCH_BEGIN');
    t.equal(first.payload.readUInt16BE(2), 10, 'for the nf_tables subsystem');
    t.equal(msgs.at(-1)!.type, 0x11, 'and ends with NFNL_MSG_BATCH_END');
    const tables = new Set(this.tables);
    const chains = new Map(this.chains);
    const replies: Buffer[] = [];
    let failed = false;
    for (const m of msgs.slice(1, -1)) {
      const a = parseAttrs(m.payload, 4);
      let errno = 0;
      if (m.type === MSG.NEWTABLE) tables.add(cstring(a.get(1))!);
      else if (m.type === MSG.DELTABLE) {
        const name = cstring(a.get(1))!;
        if (!tables.delete(name)) errno = 2;
        for (const [k, c] of chains) if (c.table === name) chains.delete(k);
      } else if (m.type === MSG.NEWCHAIN) {
        const table = cstring(a.get(1))!;
        const hook = parseAttrs(a.get(4)!);
        const device = cstring(hook.get(3))!;
        if (!tables.has(table) || this.missingDevices.has(device)) errno = 2;
        else chains.set(`${table}/${cstring(a.get(3))}`, { table, name: cstring(a.get(3))!, device, policy: a.get(5)!.readInt32BE(0), hooknum: hook.get(1)!.readInt32BE(0), priority: hook.get(2)!.readInt32BE(0) });
        t.equal(cstring(a.get(7)), 'filter', 'a filter chain');
      } else if (m.type === MSG.DELCHAIN) {
        if (!chains.delete(`${cstring(a.get(1))}/${cstring(a.get(3))}`)) errno = 2;
      }
      if (errno) failed = true;
      replies.push(ack(m.seq, errno));
    }
    if (!failed) {
      this.tables = tables;
      this.chains = chains;
    }
    this.reply(...replies);
  }
}

t.test('guarding a veth adds the table and a drop chain hooked on its ingress, in one acknowledged batch', async (t) => {
  const k = new FakeKernel();
  const guard = new VethGuard(new NfTables(() => k.transport()));
  await guard.guard('veth1a2b');
  t.same([...k.tables], ['sluice_veth_guard']);
  t.same(k.chains.get('sluice_veth_guard/in_veth1a2b'), { table: 'sluice_veth_guard', name: 'in_veth1a2b', device: 'veth1a2b', policy: NF_DROP, hooknum: 0, priority: 0 });
  t.same(k.batches[0]!.map((m) => m.type), [0x10, MSG.NEWTABLE, MSG.NEWCHAIN, 0x11]);
  t.ok(k.batches[0]!.slice(1, -1).every((m) => m.flags & 0x4), 'every change asks for an acknowledgement');
  t.ok(k.batches[0]!.slice(1, -1).every((m) => m.flags & 0x400 && !(m.flags & 0x200)), 'created if missing, never refused when present');
  await guard.guard('veth1a2b');
  await guard.guard('veth.9@x');
  t.same((await guard.guarded()).sort(), ['veth.9@x', 'veth1a2b'], 'listed from a chain dump');
  t.ok(k.chains.has('sluice_veth_guard/in_veth_9_x'), 'chain names keep to nft identifier characters');
  await guard.unguard('veth1a2b');
  await guard.unguard('veth1a2b');
  t.same(await guard.guarded(), ['veth.9@x'], 'unguard removes the chain; a missing chain is fine');
  t.same(await guard.removeTable(), { existed: true, released: ['veth.9@x'] });
  t.same(await guard.removeTable(), { existed: false, released: [] });
  guard.close();
  t.equal(k.closed, 1);
});

t.test('a refused change fails the whole batch with the errno and the change named', async (t) => {
  const k = new FakeKernel();
  const nft = new NfTables(() => k.transport());
  k.missingDevices.add('gone0');
  const err = await nft.apply([
    { op: 'add-table', family: NFPROTO_NETDEV, table: 'x' },
    { op: 'add-netdev-chain', table: 'x', chain: 'c', device: 'gone0', priority: 0, policy: NF_DROP },
  ]).catch((e: unknown) => e);
  t.ok(err instanceof NftError);
  t.equal((err as NftError).code, 'ENOENT');
  t.match((err as Error).message, /add-netdev-chain x c \(device gone0\): ENOENT/);
  t.same([...k.tables], [], 'nothing of the batch applied');
  const guard = new VethGuard(nft);
  await t.rejects(guard.guard('gone0'), /cannot guard host veth gone0: no such device/);
  await guard.guard('veth0');
  t.same(await guard.guarded(), ['veth0'], 'the socket keeps working after an error');
});

t.test('no answer from the kernel: the request fails after the timeout, the next one still runs', async (t) => {
  const k = new FakeKernel();
  const clock = new ManualClock();
  const nft = new NfTables(() => k.transport(), 5000, clock);
  k.silent = true;
  const pending = nft.apply([{ op: 'add-table', family: NFPROTO_NETDEV, table: 'x' }]);
  await new Promise((r) => setImmediate(r));
  const failed = t.rejects(pending, /did not answer within 5000 ms/);
  await clock.advance(5000);
  await failed;
  k.silent = false;
  await nft.apply([{ op: 'add-table', family: NFPROTO_NETDEV, table: 'x' }]);
  t.same([...k.tables], ['x']);
});

t.test('a chain listing reads a single device from NFTA_HOOK_DEV or NFTA_HOOK_DEVS, never both', async (t) => {
  const body = (hook: Buffer) => Buffer.concat([Buffer.from([NFPROTO_NETDEV, 0, 0, 0]), str(1, 'tb'), str(3, 'ch'), attr(4 | 0x8000, hook)]);
  t.same(decodeChain(body(str(3, 'eth9'))).devices, ['eth9']);
  t.same(decodeChain(body(Buffer.concat([str(3, 'eth9'), attr(4 | 0x8000, str(1, 'eth9'))]))).devices, ['eth9']);
  t.same(decodeChain(body(attr(4 | 0x8000, Buffer.concat([str(1, 'a'), str(1, 'b')])))).devices, ['a', 'b']);
  t.same(decodeChain(Buffer.concat([Buffer.from([NFPROTO_NETDEV, 0, 0, 0]), str(1, 'tb'), str(3, 'plain')])), { table: 'tb', name: 'plain', devices: [] });
});
