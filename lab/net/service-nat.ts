/**
 * kube-proxy emulation: ClusterIP Services as iptables DNAT rules in a node's `nat` table, in
 * the shape kube-proxy's iptables mode writes them (KUBE-SERVICES jumped from PREROUTING and
 * OUTPUT -> KUBE-SVC-<hash> per Service port -> KUBE-SEP-<hash> per endpoint, random
 * probabilities to spread over endpoints). No masquerade: the lab never needs it.
 * Services without endpoints get no rules (kube-proxy would REJECT them in the filter table).
 * IPv6 ClusterIPs get the same shape in ip6tables' nat table (kube-proxy runs one proxier per family).
 */
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { runIn } from './exec.js';

export interface ServiceEndpoint {
  ip: string;
  port: number;
}

export interface ServicePortRule {
  namespace: string;
  name: string;
  /** The Service port's name; the port number stands in for it in comments and hashes when absent. */
  portName?: string;
  clusterIP: string;
  port: number;
  protocol: 'TCP' | 'UDP' | 'SCTP';
  endpoints: ServiceEndpoint[];
}

export const KUBE_SERVICES = 'KUBE-SERVICES';
const JUMP_COMMENT = 'kubernetes service portals';
/** 4 or 6 for an address (no zone), 0 otherwise. */
const family = (ip: unknown): number => (typeof ip === 'string' && !ip.includes('%') ? isIP(ip) : 0);
export const isIPv6Rule = (s: ServicePortRule): boolean => family(s.clusterIP) === 6;
/** How iptables-save prints a DNAT target: IPv6 addresses in brackets. */
export const dnatTarget = (e: ServiceEndpoint): string => (family(e.ip) === 6 ? `[${e.ip}]:${e.port}` : `${e.ip}:${e.port}`);
/** How iptables-save prints a ClusterIP match. */
export const clusterIPMatch = (s: ServicePortRule): string => `-d ${s.clusterIP}/${isIPv6Rule(s) ? 128 : 32}`;
const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

/** RFC 4648 base32 (no padding) of sha256(text), first 16 chars: a chain-name-safe stable hash. */
export function chainHash(text: string): string {
  const bytes = createHash('sha256').update(text).digest();
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
    if (out.length >= 16) break;
  }
  return out.slice(0, 16);
}

const portId = (s: ServicePortRule): string => `${s.namespace}/${s.name}:${s.portName ?? String(s.port)}`;
export const svcChain = (s: ServicePortRule): string => `KUBE-SVC-${chainHash(portId(s) + s.protocol)}`;
export const sepChain = (s: ServicePortRule, e: ServiceEndpoint): string => `KUBE-SEP-${chainHash(`${portId(s)}${s.protocol}${e.ip}:${e.port}`)}`;

export function validateServices(services: ServicePortRule[]): void {
  if (!Array.isArray(services)) throw new Error('services must be an array');
  const seen = new Map<string, string>();
  services.forEach((s, i) => {
    const where = `service ${i} (${s?.namespace}/${s?.name})`;
    if (!s || typeof s.namespace !== 'string' || !s.namespace || typeof s.name !== 'string' || !s.name) throw new Error(`service ${i}: namespace and name are required`);
    if (!/^[-a-z0-9.]+$/.test(s.namespace) || !/^[-a-z0-9.]+$/.test(s.name)) throw new Error(`${where}: namespace/name must be DNS names`);
    if (s.portName !== undefined && !/^[-a-z0-9]+$/.test(s.portName)) throw new Error(`${where}: portName ${JSON.stringify(s.portName)} is not a valid port name`);
    const fam = family(s.clusterIP);
    if (fam === 0) throw new Error(`${where}: clusterIP ${JSON.stringify(s.clusterIP)} is not IPv4 or IPv6`);
    if (!Number.isInteger(s.port) || s.port < 1 || s.port > 65535) throw new Error(`${where}: port ${JSON.stringify(s.port)} is not 1-65535`);
    if (!['TCP', 'UDP', 'SCTP'].includes(s.protocol)) throw new Error(`${where}: protocol ${JSON.stringify(s.protocol)} must be TCP, UDP or SCTP`);
    if (!Array.isArray(s.endpoints)) throw new Error(`${where}: endpoints must be an array`);
    s.endpoints.forEach((e, k) => {
      if (!e || family(e.ip) !== fam) throw new Error(`${where}: endpoint ${k} ip ${JSON.stringify(e?.ip)} is not IPv${fam} like the clusterIP`);
      if (!Number.isInteger(e.port) || e.port < 1 || e.port > 65535) throw new Error(`${where}: endpoint ${k} port ${JSON.stringify(e.port)} is not 1-65535`);
    });
    const key = `${s.clusterIP}:${s.port}/${s.protocol}`;
    if (seen.has(key)) throw new Error(`${where}: ${key} is also used by ${seen.get(key)}`);
    seen.set(key, `${s.namespace}/${s.name}`);
  });
}

/** kube-proxy prints probabilities with 10 decimals. */
const probability = (n: number): string => (1 / n).toFixed(10);

/**
 * The KUBE-* chains and their rules (no table header, no COMMIT), in a stable order, for Services
 * of one family (iptables' or ip6tables' nat table).
 */
export function renderServiceRules(services: ServicePortRule[]): { chains: string[]; rules: string[] } {
  validateServices(services);
  if (new Set(services.map(isIPv6Rule)).size > 1) throw new Error('IPv4 and IPv6 Services go to different tables: render them apart');
  const sorted = [...services].sort((a, b) => portId(a).localeCompare(portId(b)) || a.protocol.localeCompare(b.protocol));
  const chains = [KUBE_SERVICES];
  const serviceRules: string[] = [];
  const rules: string[] = [];
  for (const s of sorted) {
    if (s.endpoints.length === 0) continue;
    const proto = s.protocol.toLowerCase();
    const id = portId(s);
    const svc = svcChain(s);
    chains.push(svc);
    serviceRules.push(`-A ${KUBE_SERVICES} ${clusterIPMatch(s)} -p ${proto} -m comment --comment "${id} cluster IP" -m ${proto} --dport ${s.port} -j ${svc}`);
    const eps = [...s.endpoints].sort((a, b) => `${a.ip}:${a.port}`.localeCompare(`${b.ip}:${b.port}`, 'en', { numeric: true }));
    eps.forEach((e, i) => {
      const sep = sepChain(s, e);
      const left = eps.length - i;
      const stat = left > 1 ? ` -m statistic --mode random --probability ${probability(left)}` : '';
      rules.push(`-A ${svc} -m comment --comment "${id} -> ${e.ip}:${e.port}"${stat} -j ${sep}`);
    });
    eps.forEach((e) => {
      const sep = sepChain(s, e);
      chains.push(sep);
      rules.push(`-A ${sep} -p ${proto} -m comment --comment "${id}" -m ${proto} -j DNAT --to-destination ${dnatTarget(e)}`);
    });
  }
  return { chains: [...new Set(chains)], rules: [...serviceRules, ...rules] };
}

/** What the nat table holds now, as far as the KUBE-* rewrite cares. */
export interface NatState {
  kubeChains: string[];
  preroutingJump: boolean;
  outputJump: boolean;
}

export function parseNatState(iptablesSave: string): NatState {
  return {
    kubeChains: [...iptablesSave.matchAll(/^:(KUBE-[A-Z0-9-]+) /gm)].map((m) => m[1]!),
    preroutingJump: /^-A PREROUTING .*-j KUBE-SERVICES\s*$/m.test(iptablesSave),
    outputJump: /^-A OUTPUT .*-j KUBE-SERVICES\s*$/m.test(iptablesSave),
  };
}

/**
 * The full `iptables-restore --noflush` input: declaring a chain flushes it, so every KUBE-*
 * chain (new and stale) is declared, rewritten or deleted; jump rules are added only when missing.
 */
export function renderNatRestore(services: ServicePortRule[], current: NatState = { kubeChains: [], preroutingJump: false, outputJump: false }): string {
  const { chains, rules } = renderServiceRules(services);
  const stale = current.kubeChains.filter((c) => !chains.includes(c));
  const lines = ['*nat', ...[...chains, ...stale].map((c) => `:${c} - [0:0]`)];
  if (!current.preroutingJump) lines.push(`-A PREROUTING -m comment --comment "${JUMP_COMMENT}" -j ${KUBE_SERVICES}`);
  if (!current.outputJump) lines.push(`-A OUTPUT -m comment --comment "${JUMP_COMMENT}" -j ${KUBE_SERVICES}`);
  lines.push(...rules, ...stale.map((c) => `-X ${c}`), 'COMMIT', '');
  return lines.join('\n');
}

/**
 * Converges a node namespace's nat tables to `services` (only KUBE-* chains and the two jumps are
 * touched): IPv4 Services in iptables, IPv6 ones in ip6tables. ip6tables is left alone while it
 * has neither IPv6 Services to carry nor KUBE-* leftovers to remove.
 */
export async function applyServiceRules(netns: string, services: ServicePortRule[]): Promise<void> {
  validateServices(services);
  const v6 = services.filter(isIPv6Rule);
  const v4 = services.filter((s) => !isIPv6Rule(s));
  const { stdout } = await runIn(netns, 'iptables-save', ['-t', 'nat']);
  await runIn(netns, 'iptables-restore', ['--noflush'], { input: renderNatRestore(v4, parseNatState(stdout)) });
  const six = parseNatState((await runIn(netns, 'ip6tables-save', ['-t', 'nat'])).stdout);
  if (v6.length || six.kubeChains.length || six.preroutingJump || six.outputJump) {
    await runIn(netns, 'ip6tables-restore', ['--noflush'], { input: renderNatRestore(v6, six) });
  }
}

/** Removes every KUBE-* chain and the jumps from a node namespace's nat tables (both families). */
export async function removeServiceRules(netns: string): Promise<void> {
  for (const [save, restore, cmd] of [['iptables-save', 'iptables-restore', 'iptables'], ['ip6tables-save', 'ip6tables-restore', 'ip6tables']] as const) {
    const { stdout } = await runIn(netns, save, ['-t', 'nat']);
    const state = parseNatState(stdout);
    for (const hook of ['PREROUTING', 'OUTPUT'] as const) {
      if (hook === 'PREROUTING' ? state.preroutingJump : state.outputJump) {
        await runIn(netns, cmd, ['-t', 'nat', '-D', hook, '-m', 'comment', '--comment', JUMP_COMMENT, '-j', KUBE_SERVICES], { allowFail: true });
      }
    }
    if (state.kubeChains.length === 0) continue;
    const input = ['*nat', ...state.kubeChains.map((c) => `:${c} - [0:0]`), ...state.kubeChains.map((c) => `-X ${c}`), 'COMMIT', ''].join('\n');
    await runIn(netns, restore, ['--noflush'], { input });
  }
}
