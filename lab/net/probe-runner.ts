/**
 * Fans probes out: one prober process per source namespace, probing all of that source's
 * targets concurrently, every source in parallel — so a whole matrix takes about one timeout.
 */
import { isIP } from 'node:net';
import { distScript } from './names.js';
import { run } from './exec.js';

export type ProbeProtocol = 'TCP' | 'UDP' | 'ICMP';
export type ProbeVerdict = 'allow' | 'drop' | 'reject';

export interface NetProbe {
  /** Network namespace the probe is sent from (a Pod's, or a node's for hostNetwork Pods). */
  sourceNetns: string;
  ip: string;
  port: number;
  protocol: ProbeProtocol;
}

export interface NetProbeResult extends NetProbe {
  verdict: ProbeVerdict;
  /** Why: "echo", "ECONNREFUSED", "connect timeout", ... */
  detail: string;
  ms: number;
}

export const DEFAULT_PROBE_TIMEOUT_MS = 1500;

function checkProbe(p: NetProbe, i: number): void {
  if (!p || typeof p.sourceNetns !== 'string' || !p.sourceNetns) throw new Error(`probe ${i}: sourceNetns is required`);
  if (typeof p.ip !== 'string' || isIP(p.ip) === 0 || p.ip.includes('%')) throw new Error(`probe ${i}: ip ${JSON.stringify(p.ip)} is not an IPv4 or IPv6 address`);
  if (!['TCP', 'UDP', 'ICMP'].includes(p.protocol)) throw new Error(`probe ${i}: protocol ${JSON.stringify(p.protocol)} must be TCP, UDP or ICMP`);
  if (p.protocol !== 'ICMP' && (!Number.isInteger(p.port) || p.port < 1 || p.port > 65535)) throw new Error(`probe ${i}: port ${JSON.stringify(p.port)} is not 1-65535`);
}

/** Runs every probe; results come back in input order. */
export async function runProbes(probes: NetProbe[], timeoutMs = DEFAULT_PROBE_TIMEOUT_MS): Promise<NetProbeResult[]> {
  probes.forEach(checkProbe);
  const bySource = new Map<string, number[]>();
  probes.forEach((p, i) => {
    if (!bySource.has(p.sourceNetns)) bySource.set(p.sourceNetns, []);
    bySource.get(p.sourceNetns)!.push(i);
  });
  const prober = distScript('prober');
  const results: NetProbeResult[] = new Array(probes.length);
  await Promise.all(
    [...bySource].map(async ([netns, idx]) => {
      const targets = idx.map((i) => ({ ip: probes[i]!.ip, port: probes[i]!.port, protocol: probes[i]!.protocol }));
      const { stdout } = await run('ip', ['netns', 'exec', netns, process.execPath, prober], {
        input: JSON.stringify({ timeoutMs, targets }),
        timeoutMs: timeoutMs + 30_000,
      });
      const out = JSON.parse(stdout) as { verdict: ProbeVerdict; detail: string; ms: number }[];
      if (out.length !== idx.length) throw new Error(`prober in ${netns} returned ${out.length} results for ${idx.length} targets`);
      idx.forEach((i, k) => (results[i] = { ...probes[i]!, ...out[k]! }));
    }),
  );
  return results;
}
