/**
 * Offline memory bench of the agent's cluster state: the cold-start model (bench/cold-start.ts:
 * 10 000 Pods on other nodes, 1 000 policies of every kind, `--local N` Pods on this node) goes
 * through what the agent keeps: the informers (fed from JSON text, as the API server's list is),
 * the enforcer (Pod view, policy engine, compiled policy flows) and a FlowStore holding the policy
 * flows. Prints RSS and live heap after each stage (after a full GC when run with --expose-gc);
 * no OVS, no API server. Asserts nothing. Each line also gives the stage's time (without the GC),
 * e.g. to weigh V8 flags: node $(flags) dist/bench/agent-memory.js.
 *
 * `--realistic` gives every Pod the fields a real API server returns (managedFields, owner
 * references, container details, conditions, container statuses: cluster-model's realisticPod),
 * which the synthetic model lacks. `--snapshot FILE` writes a heap snapshot at the end.
 *
 * usage (after a build): node --expose-gc dist/bench/agent-memory.js [--local 110] [--realistic] [--snapshot FILE]
 */
import { performance } from 'node:perf_hooks';
import { writeHeapSnapshot } from 'node:v8';
import { pino } from 'pino';
import { Enforcer } from '../daemon/enforcement/enforcer.js';
import { ClusterWatch } from '../daemon/enforcement/watch/clusterwatch.js';
import { WATCHED_RESOURCES } from '../daemon/enforcement/watch/resources.js';
import { FlowStore } from '../daemon/flows/store.js';
import type { KubeObject } from '../daemon/policy/types.js';
import { clusterModel, podContainers, podLabels, realisticPod } from './cluster-model.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const LOCAL = Number(arg('local') ?? 110);
const REALISTIC = process.argv.includes('--realistic');
const SNAPSHOT = arg('snapshot');
const NODE = 'node-1';
const NAMESPACES = 500;
const gc = (globalThis as { gc?: () => void }).gc;
const mib = (n: number) => (n / 2 ** 20).toFixed(1);

let last = performance.now();
function report(stage: string): void {
  const ms = performance.now() - last;
  gc?.();
  const m = process.memoryUsage();
  console.log(`${stage.padEnd(22)} ${ms.toFixed(0).padStart(5)} ms  rss ${mib(m.rss).padStart(6)} MiB  heap used ${mib(m.heapUsed).padStart(6)} MiB  heap total ${mib(m.heapTotal).padStart(6)} MiB  external ${mib(m.external)} MiB`);
  last = performance.now();
}

report('modules loaded');
let model: ReturnType<typeof clusterModel> | undefined = clusterModel({ namespaces: NAMESPACES, podsPerNamespace: 20, nodes: 50, policies: 1000, nodeName: (n) => `far-${n}` });
const objects: KubeObject[] = [...model.cluster, ...model.policies];
for (let i = 0; i < LOCAL; i++) {
  const j = i % 20;
  const ip = `10.250.${i >> 8}.${(i & 255) + 1}`;
  objects.push({
    apiVersion: 'v1', kind: 'Pod',
    metadata: { namespace: `ns-${i % NAMESPACES}`, name: `local-${i}`, labels: podLabels(j) },
    spec: { nodeName: NODE, containers: podContainers(j) },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
  });
}
// Each resource's list as the API server's response body (the agent parses it from text).
const lists = new Map<string, string>();
for (const r of WATCHED_RESOURCES) {
  const items = objects.filter((o) => o.apiVersion === r.apiVersion && o.kind === r.kind).map((o) => {
    const { apiVersion: _a, kind: _k, ...item } = REALISTIC && o.kind === 'Pod' ? realisticPod(o) : o;
    return item;
  });
  lists.set(r.path, JSON.stringify({ kind: `${r.kind}List`, metadata: { resourceVersion: '1' }, items }));
}
objects.length = 0;
model = undefined;
console.log(`${REALISTIC ? 'realistic' : 'synthetic'} Pods: list bodies ${mib([...lists.values()].reduce((n, s) => n + s.length, 0))} MiB of JSON (Pods ${mib(lists.get('/api/v1/pods')!.length)} MiB)`);
report('list bodies built');

const log = pino({ level: 'silent' });
const enforcer = new Enforcer({ nodeName: NODE, ovsRunDir: '/nonexistent', bridge: 'br-bench', log });
const access = {
  getJson: async (path: string) => JSON.parse(lists.get(path.split('?')[0]!) ?? '{"items":[]}') as unknown,
  watch: () => ({ close: () => undefined }),
};
const watch = await ClusterWatch.start({ log, onEvent: (ev) => enforcer.onWatchEvent(ev), access: access as never });
await watch.waitSynced();
lists.clear();
report('informers synced');
enforcer.compileNow();
report('policy flows compiled');
const store = new FlowStore();
enforcer.writeFlows(store);
report('flow store filled');
console.log(`${watch.status().reduce((n, s) => n + s.objects, 0)} objects cached, ${enforcer.engine.nodeRuleSet().length} node rules, ${enforcer.policyFlows.size} policy flows`);
if (SNAPSHOT) console.log(`heap snapshot: ${writeHeapSnapshot(SNAPSHOT)}`);
await watch.stop();
