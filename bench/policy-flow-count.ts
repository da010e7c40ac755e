/**
 * Offline policy flow count for the cold-start model (bench/cold-start.ts: 10 000 Pods on other
 * nodes, 1 000 policies of every kind) with `--local N` Pods on this node (default 110): node
 * rules, distinct peer sets and addresses, and the compiled policy flows with address classes and
 * without them (every set keeps per-address flows, as before classes), with the time of the full
 * compile and the heap it keeps. Prints figures, asserts nothing.
 *
 * usage (after a build): node dist/bench/policy-flow-count.js [--local 110]
 */
import { performance } from 'node:perf_hooks';
import { PolicyFlows, policyFlowInput } from '../daemon/flows/policy/index.js';
import { PolicyEngine } from '../daemon/policy/engine.js';
import { clusterModel, podContainers, podLabels } from './cluster-model.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const LOCAL = Number(arg('local') ?? 110);
const NODE = 'node-1';
const NAMESPACES = 500;

const engine = new PolicyEngine({ nodeName: NODE });
const model = clusterModel({ namespaces: NAMESPACES, podsPerNamespace: 20, nodes: 50, policies: 1000, nodeName: (n) => `far-${n}` });
for (const o of model.cluster) engine.upsert(o);
for (let i = 0; i < LOCAL; i++) {
  const j = i % 20;
  engine.upsert({
    apiVersion: 'v1', kind: 'Pod',
    metadata: { namespace: `ns-${i % NAMESPACES}`, name: `local-${i}`, labels: podLabels(j) },
    spec: { nodeName: NODE, containers: podContainers(j) },
    status: { podIP: `10.250.${i >> 8}.${(i & 255) + 1}` },
  });
}
for (const p of model.policies) engine.upsert(p);
const input = policyFlowInput(engine);

const rules = input.rules;
const sets = new Map<string, number>();
const addresses = new Set<string>();
let peerAddresses = 0;
for (const r of rules) {
  if (r.peers === 'any') continue;
  sets.set(`${r.direction}|${r.peerSet ?? r.id}`, r.peers.ips.length + r.peers.cidrs.length);
  for (const a of r.peers.ips) addresses.add(a);
  for (const a of r.peers.cidrs) addresses.add(a);
  peerAddresses += r.peers.ips.length + r.peers.cidrs.length;
}
console.log(`${LOCAL} local Pods: ${rules.length} node rules, ${rules.filter((r) => r.peerSet !== undefined).length} with a named peer set, ${sets.size} distinct (direction, peer set), ${addresses.size} distinct peer addresses, ${peerAddresses} (rule, peer address) pairs`);

function compile(label: string, opts: ConstructorParameters<typeof PolicyFlows>[0]): number {
  (globalThis as { gc?: () => void }).gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  const pf = new PolicyFlows(opts);
  pf.sync(input);
  const ms = performance.now() - t0;
  (globalThis as { gc?: () => void }).gc?.();
  const heap = (process.memoryUsage().heapUsed - heap0) / 2 ** 20;
  const flows = pf.flows();
  const byTable = new Map<string, number>();
  for (const f of flows) byTable.set(f.table, (byTable.get(f.table) ?? 0) + 1);
  const classClauses = flows.filter((f) => /^reg(7|8|1[0-5])=/.test(f.match)).length;
  console.log(
    `${label}: ${flows.length} policy flows (${[...byTable].map(([t, n]) => `${t} ${n}`).join(', ')}); ${classClauses} peer clauses on a class bit; ` +
      `full compile ${ms.toFixed(0)} ms, heap kept ${heap.toFixed(0)} MiB${(globalThis as { gc?: unknown }).gc ? '' : ' (run with --expose-gc for a steady figure)'}`,
  );
  return flows.length;
}

const before = compile('per-address peers (no class bits)', { classBits: 0 });
const after = compile('address classes', {});
console.log(`flows: ${before} -> ${after} (${(before / after).toFixed(1)}x fewer)`);
