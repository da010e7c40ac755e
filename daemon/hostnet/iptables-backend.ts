/**
 * Which iptables backend to use: the agent in its container must write its chains with the same
 * backend the host (kubelet, kube-proxy, the primary CNI) uses, or they land in tables no packet
 * passes through on that host. As kube-proxy's image decides it (kubernetes-sigs/iptables-wrappers):
 * a kubelet hint chain (KUBE-IPTABLES-HINT, or KUBE-KUBELET-CANARY, in the mangle table) names the
 * backend the kubelet uses; without one, the backend that already holds more rules wins, and nft on
 * a tie (an empty host, or a distribution whose default is nft).
 */
import { execa } from 'execa';

export type IptablesBackend = 'nft' | 'legacy';
export type IptablesBackendSetting = IptablesBackend | 'auto';

/** The binaries of one backend. `backend` undefined: the host's plain `iptables` (no -nft/-legacy variants installed). */
export interface IptablesCommands {
  backend?: IptablesBackend;
  iptables: string;
  save: string;
  restore: string;
}

export const DEFAULT_IPTABLES: IptablesCommands = { iptables: 'iptables', save: 'iptables-save', restore: 'iptables-restore' };

export const backendCommands = (backend: IptablesBackend): IptablesCommands => ({
  backend,
  iptables: `iptables-${backend}`,
  save: `iptables-${backend}-save`,
  restore: `iptables-${backend}-restore`,
});

/** The same backend's IPv6 binaries (ip6tables, ip6tables-save, ip6tables-restore, or their -nft/-legacy forms). */
export function ip6Commands(cmd: IptablesCommands): IptablesCommands {
  const six = (bin: string) => bin.replace(/(^|\/)iptables([^/]*)$/, '$1ip6tables$2');
  return { ...cmd, iptables: six(cmd.iptables), save: six(cmd.save), restore: six(cmd.restore) };
}

const HINT_CHAINS = ['KUBE-IPTABLES-HINT', 'KUBE-KUBELET-CANARY'];

/** What one backend's `iptables-save` + `ip6tables-save` printed (undefined: that backend is not installed). */
export interface BackendDump {
  legacy?: string;
  nft?: string;
}

/** Rules (`-A` lines) in save output. */
export const ruleCount = (save: string): number => save.split('\n').filter((l) => l.startsWith('-A ')).length;

const hasHint = (save: string): boolean => save.split('\n').some((l) => HINT_CHAINS.some((c) => l.startsWith(`:${c} `)));

/** The decision from what each backend holds (pure). */
export function chooseBackend(dump: BackendDump): { backend: IptablesBackend; why: string } | { backend: undefined; why: string } {
  const { legacy, nft } = dump;
  if (legacy === undefined && nft === undefined) return { backend: undefined, why: 'no iptables-nft or iptables-legacy binaries: using plain iptables' };
  if (legacy === undefined) return { backend: 'nft', why: 'only iptables-nft is installed' };
  if (nft === undefined) return { backend: 'legacy', why: 'only iptables-legacy is installed' };
  if (hasHint(nft)) return { backend: 'nft', why: 'the kubelet hint chain is in the nft tables' };
  if (hasHint(legacy)) return { backend: 'legacy', why: 'the kubelet hint chain is in the legacy tables' };
  const n = ruleCount(nft);
  const l = ruleCount(legacy);
  if (l > n) return { backend: 'legacy', why: `legacy tables hold more rules (${l} legacy, ${n} nft)` };
  return { backend: 'nft', why: l === n ? `no backend holds more rules (${l} each): nft` : `nft tables hold more rules (${n} nft, ${l} legacy)` };
}

async function dumpBackend(backend: IptablesBackend): Promise<string | undefined> {
  const v4 = await execa(`iptables-${backend}-save`, [], { reject: false });
  if (v4.failed && (v4 as { code?: string }).code === 'ENOENT') return undefined;
  const v6 = await execa(`ip6tables-${backend}-save`, [], { reject: false });
  return `${v4.stdout ?? ''}\n${v6.stdout ?? ''}`;
}

/** The commands for a setting: `auto` inspects the host (in this network namespace). */
export async function resolveIptables(setting: IptablesBackendSetting): Promise<{ commands: IptablesCommands; why: string }> {
  if (setting !== 'auto') return { commands: backendCommands(setting), why: `iptablesBackend: ${setting}` };
  const [legacy, nft] = await Promise.all([dumpBackend('legacy'), dumpBackend('nft')]);
  const choice = chooseBackend({ ...(legacy !== undefined ? { legacy } : {}), ...(nft !== undefined ? { nft } : {}) });
  return { commands: choice.backend ? backendCommands(choice.backend) : DEFAULT_IPTABLES, why: choice.why };
}
