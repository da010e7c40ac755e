/**
 * Fans probes out per source namespace, probing all of that source's targets concurrently, every
 * source in parallel — so a whole matrix takes about one timeout. A namespace whose workload
 * serves a probe socket (workload.ts) is asked there; any other (a node, the external host, a
 * workload that is gone) gets a one-shot prober process.
 */
import { existsSync } from 'node:fs';
import { connect, isIP } from 'node:net';
import { distScript, probeSocketPath } from './names.js';
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

/**
 * Runs every probe; results come back in input order. `viaWorkload: false` always starts a
 * prober (the chaos suite, which floods and disrupts the Pods it probes from).
 */
export async function runProbes(probes: NetProbe[], timeoutMs = DEFAULT_PROBE_TIMEOUT_MS, opts: { viaWorkload?: boolean } = {}): Promise<NetProbeResult[]> {
  const viaWorkload = opts.viaWorkload ?? true;
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
      const request = JSON.stringify({ timeoutMs, targets });
      const stdout =
        (viaWorkload ? await askProbeSocket(probeSocketPath(netns), request, timeoutMs + 30_000) : undefined) ??
        (await run('ip', ['netns', 'exec', netns, process.execPath, prober], { input: request, timeoutMs: timeoutMs + 30_000 })).stdout;
      const out = JSON.parse(stdout) as { verdict: ProbeVerdict; detail: string; ms: number }[];
      if (out.length !== idx.length) throw new Error(`prober in ${netns} returned ${out.length} results for ${idx.length} targets`);
      idx.forEach((i, k) => (results[i] = { ...probes[i]!, ...out[k]! }));
    }),
  );
  return results;
}

/**
 * The answer of the workload's probe socket at `path`, or undefined when no workload serves one
 * there (no socket, or a stale one: the caller then starts a prober).
 */
function askProbeSocket(path: string, request: string, timeoutMs: number): Promise<string | undefined> {
  if (!existsSync(path)) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    let answer = '';
    let connected = false;
    const conn = connect(path);
    const timer = setTimeout(() => {
      conn.destroy();
      reject(new Error(`probe socket ${path}: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    conn.setEncoding('utf8');
    conn.on('connect', () => {
      connected = true;
      conn.write(`${request}\n`);
    });
    conn.on('data', (d: string) => (answer += d));
    conn.on('end', () => {
      clearTimeout(timer);
      // No answer: the workload went away mid-request (a Pod being deleted); a prober asks again.
      if (!answer.trim()) return resolve(undefined);
      let parsed: unknown;
      try {
        parsed = JSON.parse(answer);
      } catch (err) {
        return reject(new Error(`probe socket ${path}: unreadable answer: ${(err as Error).message}`));
      }
      if (parsed && typeof parsed === 'object' && 'error' in parsed) reject(new Error(`probe socket ${path}: ${String((parsed as { error: unknown }).error)}`));
      else resolve(answer);
    });
    conn.on('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      // A stale socket (nothing listens), or the workload going away mid-request: a prober asks.
      if ((!connected && (err.code === 'ECONNREFUSED' || err.code === 'ENOENT')) || err.code === 'ECONNRESET' || err.code === 'EPIPE') resolve(undefined);
      else reject(new Error(`probe socket ${path}: ${err.message}`));
    });
  });
}
