/**
 * sluice's iptables rules (Antrea's policy-only mode, its chain names and mark), rendered as iptables-restore
 * input that rewrites ONLY sluice's own chains (`--noflush`), plus the idempotent jump rules
 * into them. Other components' rules (kube-proxy, the primary CNI) are never touched.
 */
import { execa } from 'execa';
import { REENTRANCE_MAC } from '../flows/tables.js';
import { DEFAULT_IPTABLES, type IptablesCommands } from './iptables-backend.js';

export const SERVICE_MARK = 0x800;

export interface IptablesOptions {
  gateway: string;
  /** Service CIDRs of either family: each family's rules take their own. */
  serviceCIDRs: string[];
  /** Which family's tables (iptables or ip6tables): 4 by default. `commands` must be that family's. */
  family?: 4 | 6;
  /** The backend's binaries (iptables-backend.ts); default: the host's plain iptables. */
  commands?: IptablesCommands;
}

interface ChainSpec {
  table: 'mangle' | 'raw' | 'filter';
  chain: string;
  /** Built-in chain that jumps to `chain`. */
  from: string;
  rules: string[];
}

/** Desired chains, pure. */
export function desiredChains(opts: IptablesOptions): ChainSpec[] {
  const gw = opts.gateway;
  const mark = `0x${SERVICE_MARK.toString(16)}`;
  const family = opts.family ?? 4;
  const serviceCIDRs = opts.serviceCIDRs.filter((c) => (c.includes(':') ? 6 : 4) === family);
  const mangle: string[] = serviceCIDRs.map(
    (cidr) => `-i ${gw} -d ${cidr} -m comment --comment "Antrea: mark service traffic" -j MARK --or-mark ${mark}`,
  );
  // Clear only bit 0x800 on traffic not bound to a Service CIDR (other components' mark bits stay).
  const clearBit = `-m comment --comment "Antrea: unmark post LB service traffic" -j MARK --and-mark 0x${(~SERVICE_MARK >>> 0).toString(16)}`;
  if (serviceCIDRs.length === 1) {
    mangle.push(`! -d ${serviceCIDRs[0]} ${clearBit}`);
  } else {
    for (const cidr of serviceCIDRs) mangle.push(`-d ${cidr} -j RETURN`);
    mangle.push(clearBit);
  }
  return [
    { table: 'mangle', chain: 'ANTREA-MANGLE', from: 'PREROUTING', rules: mangle },
    {
      table: 'raw',
      chain: 'ANTREA-RAW',
      from: 'PREROUTING',
      rules: [
        `-i ${gw} -m mac --mac-source ${REENTRANCE_MAC} -m comment --comment "Antrea: reentry service traffic" -j CT --notrack`,
      ],
    },
    {
      table: 'filter',
      chain: 'ANTREA-FORWARD',
      from: 'FORWARD',
      rules: [
        `-i ${gw} -m comment --comment "Antrea: accept packets from local pods" -j ACCEPT`,
        `-o ${gw} -m comment --comment "Antrea: accept packets to local pods" -j ACCEPT`,
      ],
    },
  ];
}

/** iptables-restore --noflush input: declaring a chain flushes just that chain, then its rules. */
export function renderRestore(chains: ChainSpec[]): string {
  const byTable = new Map<string, ChainSpec[]>();
  for (const c of chains) byTable.set(c.table, [...(byTable.get(c.table) ?? []), c]);
  const out: string[] = [];
  for (const [table, cs] of byTable) {
    out.push(`*${table}`);
    for (const c of cs) out.push(`:${c.chain} - [0:0]`);
    for (const c of cs) for (const r of c.rules) out.push(`-A ${c.chain} ${r}`);
    out.push('COMMIT');
  }
  return out.join('\n') + '\n';
}

function jumpRule(c: ChainSpec): string[] {
  return [c.from, '-m', 'comment', '--comment', `Antrea: jump to ${c.chain}`, '-j', c.chain];
}

/** The lines iptables-save prints for sluice's chains (its own normalized form). */
async function savedChains(chains: ChainSpec[], cmd: IptablesCommands): Promise<string> {
  const lines: string[] = [];
  for (const table of new Set(chains.map((c) => c.table))) {
    const { stdout } = await execa(cmd.save, ['-t', table]);
    const names = chains.filter((c) => c.table === table).map((c) => c.chain);
    for (const line of stdout.split('\n')) {
      if (names.some((n) => line.startsWith(`-A ${n} `) || line.includes(`-j ${n}`))) lines.push(`${table}: ${line}`);
    }
  }
  return lines.join('\n');
}

export class IptablesRules {
  /** iptables-save's rendering of our chains right after we last wrote them. */
  private lastSaved: string | undefined;

  private readonly cmd: IptablesCommands;

  constructor(private opts: IptablesOptions) {
    this.cmd = opts.commands ?? DEFAULT_IPTABLES;
  }

  /** New Service ranges: the next ensure() writes the chains for them. */
  setServiceCIDRs(cidrs: string[]): void {
    this.opts = { ...this.opts, serviceCIDRs: [...cidrs] };
    this.lastSaved = undefined;
  }

  /**
   * Converges sluice's chains and jumps. Returns what had to be repaired (empty when the
   * rules were already as last written). The first call after start always rewrites the
   * chains (an atomic per-chain restore: no traffic impact).
   */
  async ensure(): Promise<string[]> {
    const chains = desiredChains(this.opts);
    const repairs: string[] = [];
    if (this.lastSaved !== undefined) {
      const now = await savedChains(chains, this.cmd);
      if (now === this.lastSaved) return [];
      repairs.push('iptables: sluice chains or jump rules differed from what was written; rewrote them');
    }
    await execa(this.cmd.restore, ['--noflush'], { input: renderRestore(chains) });
    for (const c of chains) {
      const jump = jumpRule(c);
      const present = await execa(this.cmd.iptables, ['-t', c.table, '-C', ...jump], { reject: false });
      if (present.exitCode !== 0) {
        await execa(this.cmd.iptables, ['-t', c.table, '-I', c.from, '1', ...jump.slice(1)]);
        if (this.lastSaved !== undefined) repairs.push(`iptables: restored jump ${c.table}/${c.from} -> ${c.chain}`);
      }
    }
    this.lastSaved = await savedChains(chains, this.cmd);
    return repairs;
  }

  /** Removes sluice's jumps and chains (uninstall); returns whether any was there. */
  async remove(): Promise<boolean> {
    let found = false;
    for (const c of desiredChains(this.opts)) {
      while ((await execa(this.cmd.iptables, ['-t', c.table, '-D', ...jumpRule(c)], { reject: false })).exitCode === 0) found = true;
      await execa(this.cmd.iptables, ['-t', c.table, '-F', c.chain], { reject: false });
      if ((await execa(this.cmd.iptables, ['-t', c.table, '-X', c.chain], { reject: false })).exitCode === 0) found = true;
    }
    this.lastSaved = undefined;
    return found;
  }
}
