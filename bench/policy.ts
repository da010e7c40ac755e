/**
 * Policy engine bench (prints figures, asserts nothing): 10 000 Pods in 500 namespaces on 50
 * Nodes, 2 000 policies of every kind (bench/cluster-model.ts). Measures cold compute time and
 * RSS, one Pod relabel and one policy edit (incremental time and changed rules/groups), and
 * evaluator queries per second.
 *
 * Run: npx tsc -p tsconfig.json && node dist/bench/policy.js
 */
import { PolicyEngine, type ChangeSet } from '../daemon/policy/engine.js';
import type { Probe } from '../daemon/policy/types.js';
import { clusterModel } from './cluster-model.js';

const NAMESPACES = 500;
const PODS_PER_NS = 20;
const NODES = 50;
const POLICIES = 2000;

function ms(start: bigint): string {
  return `${(Number(process.hrtime.bigint() - start) / 1e6).toFixed(1)} ms`;
}

function summary(cs: ChangeSet): string {
  const n = (d: { added: string[]; updated: string[]; removed: string[] }) => `+${d.added.length} ~${d.updated.length} -${d.removed.length}`;
  return `rules ${n(cs.rules)}, addressGroups ${n(cs.addressGroups)}, appliedToGroups ${n(cs.appliedToGroups)}`;
}

const { cluster, policies } = clusterModel({ namespaces: NAMESPACES, podsPerNamespace: PODS_PER_NS, nodes: NODES, policies: POLICIES });
const kinds = new Map<string, number>();
for (const p of policies) {
  const k = `${p.kind} (${p.apiVersion.split('/')[0]})`;
  kinds.set(k, (kinds.get(k) ?? 0) + 1);
}
console.log(`policy bench: ${NAMESPACES * PODS_PER_NS} Pods, ${NAMESPACES} namespaces, ${NODES} Nodes, ${policies.length} policies: ${[...kinds].map(([k, n]) => `${n} ${k}`).join(', ')}; ${cluster.filter((o) => o.kind === 'ClusterGroup').length} ClusterGroups`);

const rssBefore = process.memoryUsage().rss;
const coldCpu = process.cpuUsage();
let t0 = process.hrtime.bigint();
const engine = new PolicyEngine({ nodeName: 'node-0' });
for (const o of cluster) engine.upsert(o);
const tCluster = ms(t0);
t0 = process.hrtime.bigint();
for (const o of policies) engine.upsert(o);
const tPolicies = ms(t0);
t0 = process.hrtime.bigint();
const ruleSet = engine.nodeRuleSet();
const tRuleSet = ms(t0);
const errors = engine.errors();
const coldCpuUsed = process.cpuUsage(coldCpu);
console.log(`cold: cluster objects ${tCluster}; policies ${tPolicies}; node-0 rule set ${tRuleSet} (${ruleSet.length} node rules, ${engine.nodeIsolations().length} node isolations); ${((coldCpuUsed.user + coldCpuUsed.system) / 1e6).toFixed(2)} s CPU in all`);
console.log(`state: ${engine.rules().length} IR rules, ${engine.internalRules().length} internal rules, ${engine.addressGroups().length} AddressGroups, ${engine.appliedToGroups().length} AppliedToGroups, ${errors.length} invalid objects${errors.length ? ` (first: ${errors[0]!.kind} ${errors[0]!.name} ${errors[0]!.field}: ${errors[0]!.message})` : ''}`);
global.gc?.();
console.log(`RSS: ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB (${((process.memoryUsage().rss - rssBefore) / 2 ** 20).toFixed(0)} MiB above start)`);

// One Pod relabel.
const podObj = cluster.find((o) => o.kind === 'Pod' && o.metadata.namespace === 'ns-7' && o.metadata.name === 'pod-3')!;
t0 = process.hrtime.bigint();
const relabel = engine.upsert({ ...podObj, metadata: { ...podObj.metadata, labels: { app: 'app-1', tier: 'db' } } });
console.log(`Pod relabel (ns-7/pod-3): ${ms(t0)}; ${summary(relabel)}`);

// One policy edit.
const np = policies.find((o) => o.metadata.name === 'np-1007')!;
t0 = process.hrtime.bigint();
const edit = engine.upsert({ ...np, spec: { ...np.spec, ingress: [{ from: [{ podSelector: { matchLabels: { app: 'app-9' } } }], ports: [{ port: 9090 }] }] } });
console.log(`policy edit (${np.metadata.namespace}/np-1007): ${ms(t0)}; ${summary(edit)}`);

t0 = process.hrtime.bigint();
const nsEdit = engine.upsert({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns-42', labels: { team: 't3', env: 'prod' } } });
console.log(`Namespace relabel (ns-42): ${ms(t0)}; ${summary(nsEdit)}`);

// Evaluator throughput.
const podNames = cluster.filter((o) => o.kind === 'Pod').map((o) => `${o.metadata.namespace}/${o.metadata.name}`);
let seed = 7;
const rand = (n: number) => {
  // mulberry32: the low bits of a plain LCG are far from random
  seed = (seed + 0x6d2b79f5) >>> 0;
  let x = Math.imul(seed ^ (seed >>> 15), seed | 1);
  x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
  return ((x ^ (x >>> 14)) >>> 0) % n;
};
const probes: Probe[] = Array.from({ length: 200_000 }, () => ({ from: podNames[rand(podNames.length)]!, to: podNames[rand(podNames.length)]!, port: [8080, 8081, 53, 443][rand(4)]!, protocol: rand(4) === 2 ? 'UDP' : 'TCP' }));
t0 = process.hrtime.bigint();
let allowed = 0;
const outcomes = new Map<string, number>();
for (const p of probes) {
  const r = engine.evaluate(p);
  if (r.verdict === 'allow') allowed++;
  const k = `${r.verdict} by ${r.decidedBy ? `${r.decidedBy.kind} ${r.decidedBy.direction}` : 'default'}`;
  outcomes.set(k, (outcomes.get(k) ?? 0) + 1);
}
const warmNs = Number(process.hrtime.bigint() - t0);
console.log(`evaluator warm-up (first ${probes.length} queries, fills per-Pod rule caches): ${(warmNs / 1e6).toFixed(0)} ms`);
console.log(`  outcomes: ${[...outcomes].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`).join('; ')}`);
let queries = 0;
const cpu0 = process.cpuUsage();
t0 = process.hrtime.bigint();
const deadline = t0 + 3_000_000_000n;
while (process.hrtime.bigint() < deadline) {
  for (let i = 0; i < 20_000; i++) if (engine.evaluate(probes[(queries + i) % probes.length]!).verdict === 'allow') allowed++;
  queries += 20_000;
}
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
const cpu = process.cpuUsage(cpu0);
const cpuSecs = (cpu.user + cpu.system) / 1e6;
console.log(`evaluator: ${Math.round(queries / secs).toLocaleString('en-US')} queries/second wall-clock, ${Math.round(queries / cpuSecs).toLocaleString('en-US')} per CPU-second (${queries} random Pod-to-Pod queries in ${secs.toFixed(2)} s, ${cpuSecs.toFixed(2)} s CPU; ${((allowed / (queries + probes.length)) * 100).toFixed(0)}% allowed)`);
// The same, over a working set of 100 Pods (hot caches): what a per-node oracle mostly sees.
const hot = podNames.slice(0, 100);
const hotProbes: Probe[] = Array.from({ length: 10_000 }, () => ({ from: hot[rand(hot.length)]!, to: hot[rand(hot.length)]!, port: [8080, 8081, 53, 443][rand(4)]!, protocol: 'TCP' }));
for (const p of hotProbes) engine.evaluate(p);
let hotQueries = 0;
const hcpu0 = process.cpuUsage();
const h0 = process.hrtime.bigint();
while (process.hrtime.bigint() < h0 + 2_000_000_000n) {
  for (const p of hotProbes) engine.evaluate(p);
  hotQueries += hotProbes.length;
}
const hsecs = Number(process.hrtime.bigint() - h0) / 1e9;
const hcpu = process.cpuUsage(hcpu0);
console.log(`evaluator, 100-Pod working set: ${Math.round(hotQueries / hsecs).toLocaleString('en-US')} queries/second wall-clock, ${Math.round(hotQueries / ((hcpu.user + hcpu.system) / 1e6)).toLocaleString('en-US')} per CPU-second`);
console.log(`load average during the run: ${(await import('node:os')).loadavg().map((x) => x.toFixed(1)).join(' ')} on ${(await import('node:os')).cpus().length} CPUs`);
