/**
 * Userspace (netdev) datapath only: OVS reads the host veth with AF_PACKET, so the kernel would
 * ALSO route every packet arriving on it (duplicates). A netdev-family nftables ingress chain with
 * policy drop on each attached veth stops the kernel's copy. One table, one chain per device.
 */
import { execa } from 'execa';

export const GUARD_TABLE = 'sluice_veth_guard';
const TABLE = GUARD_TABLE;

function chainName(ifName: string): string {
  return `in_${ifName.replace(/[^A-Za-z0-9_]/g, '_')}`;
}

export async function guardVeth(ifName: string): Promise<void> {
  const chain = chainName(ifName);
  const script = [
    `add table netdev ${TABLE}`,
    `add chain netdev ${TABLE} ${chain} { type filter hook ingress device "${ifName}" priority 0; policy drop; }`,
  ].join('\n');
  await execa('nft', ['-f', '-'], { input: script });
}

export async function unguardVeth(ifName: string): Promise<void> {
  // The kernel drops the chain's hook when the device goes away; deleting a missing chain is fine.
  await execa('nft', ['delete', 'chain', 'netdev', TABLE, chainName(ifName)], { reject: false });
}

/** Host veths carrying the guard. Parsed from the text listing: nft 1.0.6's JSON omits netdev chains' device. */
export async function guardedVeths(): Promise<string[]> {
  const r = await execa('nft', ['list', 'table', 'netdev', TABLE], { reject: false });
  if (r.exitCode !== 0) return [];
  return [...r.stdout.matchAll(/hook ingress device "?([A-Za-z0-9_.@-]+)"?/g)].map((m) => m[1]!);
}

/**
 * Uninstall, once no veth is on the bridge any more: deletes the guard table with whatever chains
 * are left (a guard without the bridge only drops that veth's traffic). Returns whether the table
 * existed and the veths it still guarded.
 */
export async function removeGuardTable(): Promise<{ existed: boolean; released: string[] }> {
  const r = await execa('nft', ['list', 'table', 'netdev', TABLE], { reject: false });
  if (r.exitCode !== 0) return { existed: false, released: [] };
  const released = await guardedVeths();
  await execa('nft', ['delete', 'table', 'netdev', TABLE]);
  return { existed: true, released };
}
