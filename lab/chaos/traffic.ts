/**
 * The traffic the chaos suite's two invariants are judged on while a fault runs: the probers
 * (new connections to denied and allowed targets every 250 ms), the long-lived allowed stream, and
 * the policy churn that recompiles the flows deciding them without changing their verdicts.
 */
import { spawn } from 'node:child_process';
import { resolveKind } from '../kinds.js';
import { sleep } from '../net/exec.js';
import { runProbes } from '../net/probe-runner.js';
import type { RestClient } from '../restclient.js';

/**
 * A prober process per round, not the workloads' probe sockets: the probers run while scenarios
 * restart agents, Open vSwitch and the API server, and a round that fails there must not depend on
 * a Pod's workload staying healthy through a flood of its own namespace's connections.
 */
export const CHAOS_PROBES = { viaWorkload: false };

/**
 * A probed target whose verdict a scenario flips: `settled` is the verdict the agent has committed
 * for the current API state, undefined from the API change until the commit; `epoch` counts the
 * API changes.
 */
export interface FlippedTarget {
  ip: string;
  port: number;
  epoch: number;
  settled: 'allow' | 'deny' | undefined;
  /** Settled connections that behaved as committed, per verdict (to show the flip is seen at all). */
  seen: { allow: number; deny: number };
}

/** What a probed connection must do; a flipped target is 'unsettled' (not judged) while its verdict changes. */
type Expectation = 'allow' | 'deny' | 'unsettled';

/** The prober: new connections every 250 ms while running, to every denied and every allowed target at once. */
export class Prober {
  tried = 0;
  gaps = 0;
  allowedFailed = 0;
  gapDetails: string[] = [];
  private running = true;
  private loop: Promise<void>;
  constructor(sources: string[], denied: string[], allowed: string[], readonly flipped?: FlippedTarget) {
    const targets = sources.flatMap((src) => [...denied.map((ip) => ({ ip, deny: true })), ...allowed.map((ip) => ({ ip, deny: false }))].flatMap((x) => [80, 81].map((port) => ({ ...x, src, port }))));
    this.loop = (async () => {
      while (this.running) {
        // A flipped target's expectation holds for a connection only when the same committed
        // verdict stood from before the connection was opened until it was decided.
        const before = this.flipped && { epoch: this.flipped.epoch, settled: this.flipped.settled };
        const results = await runProbes(targets.map((x) => ({ sourceNetns: x.src, ip: x.ip, port: x.port, protocol: 'TCP' as const })), 1000, CHAOS_PROBES);
        const flipExpect: Expectation = before && before.epoch === this.flipped!.epoch && before.settled ? before.settled : 'unsettled';
        results.forEach((r, i) => {
          const x = targets[i]!;
          const isFlipped = this.flipped !== undefined && x.ip === this.flipped.ip && x.port === this.flipped.port;
          const expect: Expectation = isFlipped ? flipExpect : x.deny ? 'deny' : 'allow';
          this.tried++;
          if (expect === 'deny' && r.verdict === 'allow') {
            this.gaps++;
            this.gapDetails.push(`${new Date().toISOString()} denied connection ${x.src} -> ${x.ip}:${x.port} succeeded`);
          }
          if (expect === 'allow' && r.verdict !== 'allow') this.allowedFailed++;
          if (isFlipped && expect !== 'unsettled' && (r.verdict === 'allow') === (expect === 'allow')) this.flipped!.seen[expect]++;
        });
        await sleep(250);
      }
    })();
  }
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}

/**
 * Policy churn while the faults run: every 300 ms an allow-from-y policy in x appears or goes away
 * and y/c's labels change. Both recompile the flows that decide the probed connections (x's
 * isolation, the peers' address sets) without changing their verdicts: z's connections into x stay
 * denied, those into y allowed.
 */
export class Churner {
  changes = 0;
  failures = 0;
  private running = true;
  private loop: Promise<void>;
  constructor(rest: RestClient) {
    const np = resolveKind('networkpolicies');
    const pods = resolveKind('pods');
    const allowY = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'churn-allow-y', namespace: 'x' }, spec: { podSelector: {}, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'y' } } }], ports: [{ protocol: 'TCP', port: 80 }] }] } };
    this.loop = (async () => {
      for (let i = 0; this.running; i++) {
        try {
          if (i % 2 === 0) await rest.apply(np, allowY as never);
          else await rest.delete(np, 'churn-allow-y', 'x');
          const yc = (await rest.tryGet(pods, 'c', 'y'))!;
          await rest.apply(pods, { ...yc, metadata: { ...yc.metadata, labels: { ...(yc.metadata.labels ?? {}), churn: String(i % 3) } } } as never);
          this.changes += 2;
        } catch {
          this.failures++; // the API server is unreachable in one scenario
        }
        await sleep(300);
      }
    })();
  }
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}

/** A long-lived allowed TCP connection writing every 20 ms; reports whether it was ever reset. */
const STREAM = `
const s = require('net').connect({ host: process.argv[1], port: 80 });
let sent = 0, echoed = 0, error = null;
s.on('data', (d) => { echoed += d.length; });
s.on('error', (e) => { error = e.code || e.message; });
s.on('close', () => { if (!error) error = 'closed'; });
const t = setInterval(() => { if (!s.destroyed) { s.write('x'); sent++; } }, 20);
process.on('SIGTERM', () => { clearInterval(t); console.log(JSON.stringify({ sent, echoed, error })); process.exit(0); });
`;
export function stream(netns: string, ip: string): () => Promise<{ sent: number; echoed: number; error: string | null }> {
  const c = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', STREAM, ip], { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  c.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const done = new Promise<void>((r) => c.on('close', () => r()));
  return async () => {
    c.kill('SIGTERM');
    await done;
    return JSON.parse(out.trim().split('\n').pop() || '{"sent":0,"echoed":0,"error":"no output"}') as { sent: number; echoed: number; error: string | null };
  };
}
