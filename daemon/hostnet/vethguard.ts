/**
 * Userspace (netdev) datapath only: OVS reads the host veth with AF_PACKET, so the kernel would
 * ALSO route every packet arriving on it (duplicates). A netdev-family nftables ingress chain with
 * policy drop on each attached veth stops the kernel's copy. One table, one chain per device,
 * written over the agent's nf_tables socket (no process per Pod); `nft list table netdev
 * sluice_veth_guard` shows them.
 */
import { NF_DROP, NFPROTO_NETDEV, NfTables, NftError } from './nftables.js';

export const GUARD_TABLE = 'sluice_veth_guard';
const TABLE = GUARD_TABLE;

function chainName(ifName: string): string {
  return `in_${ifName.replace(/[^A-Za-z0-9_]/g, '_')}`;
}

const isMissing = (err: unknown) => err instanceof NftError && (err.code === 'ENOENT' || err.code === 'ENODEV');

export class VethGuard {
  constructor(private readonly nft: NfTables = new NfTables()) {}

  /** Adds the veth's drop chain (and the table, the first time); repeating it changes nothing. */
  async guard(ifName: string): Promise<void> {
    try {
      await this.nft.apply([
        { op: 'add-table', family: NFPROTO_NETDEV, table: TABLE },
        { op: 'add-netdev-chain', table: TABLE, chain: chainName(ifName), device: ifName, priority: 0, policy: NF_DROP },
      ]);
    } catch (err) {
      if (isMissing(err)) throw new Error(`cannot guard host veth ${ifName}: no such device (${(err as Error).message})`);
      throw err;
    }
  }

  /** Removes the veth's chain. The kernel drops it itself when the device goes away: a missing one is fine. */
  async unguard(ifName: string): Promise<void> {
    try {
      await this.nft.apply([{ op: 'delete-chain', family: NFPROTO_NETDEV, table: TABLE, chain: chainName(ifName) }]);
    } catch (err) {
      if (!isMissing(err)) throw err;
    }
  }

  /** Host veths carrying the guard. */
  async guarded(): Promise<string[]> {
    return (await this.nft.chains(NFPROTO_NETDEV, TABLE)).flatMap((c) => c.devices);
  }

  /**
   * Uninstall, once no veth is on the bridge any more: deletes the guard table with whatever chains
   * are left (a guard without the bridge only drops that veth's traffic). Returns whether the table
   * existed and the veths it still guarded.
   */
  async removeTable(): Promise<{ existed: boolean; released: string[] }> {
    if (!(await this.nft.hasTable(NFPROTO_NETDEV, TABLE))) return { existed: false, released: [] };
    const released = await this.guarded();
    await this.nft.apply([{ op: 'delete-table', family: NFPROTO_NETDEV, table: TABLE }]);
    return { existed: true, released };
  }

  close(): void {
    this.nft.close();
  }
}
