/**
 * Incremental enforcement bench (prints figures, asserts nothing), offline and in-process: the
 * event-loop time of one API event through the whole synchronous path of the agent, i.e. the
 * enforcer's event handler (policy engine, ChangeSet), the flush's compile (node rule set, policy
 * flow compile), bringing the agent's desired flows up to date (its FlowStore owners; a union of
 * flow sources in older builds) and the delta to apply (the store's pending delta; a cookie diff
 * against the flows installed before the event in older builds). 10 000 Pods on 50 Nodes (200 on this node), 2 000 policies
 * (Kubernetes NetworkPolicies and Antrea ClusterNetworkPolicies). Events: a relabel of a Pod on
 * another node (into other groups, and with a label no policy reads), a relabel of a local Pod, a
 * new NetworkPolicy, and a Service endpoint change that no rule depends on. Then `sluicectl simulate`-style loading of N trivial NetworkPolicies (they
 * select no Pod) into a fresh engine. `--to-services` adds one Antrea policy whose egress rule
 * names a Service by toServices (ns-5/api, an EndpointSlice of two Pods) for this node's Pods, and
 * an event that changes that slice (one endpoint not ready, then ready again). `--multi-group` adds
 * one Antrea policy whose ingress rule, applied to this node's app-0 Pods, names three peer groups
 * (every Pod by its tier: fe, be, db), and an event that moves a remote Pod out of and into them.
 *
 * A/B in one run: `--baseline DIR` also loads the same modules from DIR (the dist/ of another
 * build, e.g. the unchanged tree) and runs both implementations interleaved on the same load.
 *
 * Cluster size: `--pods 10000,40000,80000` runs every event kind at each size in turn, the
 * cluster scaled with it (20 Pods per Namespace, about 200 Pods per Node so this node keeps about
 * 200 local Pods, and max(2 000, Pods/30) policies, 85 % of them NetworkPolicies), then prints a summary
 * per size: whether the cost of one event grows with the cluster. The default is 10 000 Pods.
 *
 * usage: node dist/bench/incremental.js [--baseline /path/to/dist] [--reps 15] [--pods 10000,40000] [--loads 5000,10000,20000,40000] [--only remote] [--to-services] [--multi-group]
 */
import { cpus, loadavg } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Flow } from '../daemon/flows/flow.js';
import type { KubeObject } from '../daemon/policy/types.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const REPS = Number(arg('reps') ?? 15);
const LOADS = (arg('loads') ?? '5000,10000,20000,40000').split(',').filter(Boolean).map(Number);
const NODE = 'node-0';
const PODS_PER_NS = 20;
const SIZES = (arg('pods') ?? '10000').split(',').filter(Boolean).map(Number);
/** The cluster being run (set per size by `scale`): Namespaces, Nodes and policies follow the Pods. */
let NAMESPACES = 500;
let NODES = 50;
let K8S_POLICIES = 1700;
let ANTREA_POLICIES = 300;

function scale(pods: number): void {
  NAMESPACES = Math.max(1, Math.round(pods / PODS_PER_NS));
  // Pod k runs on node k mod NODES: NODES = 10 mod 20 (as the default 50) gives this node Pods of
  // two of the 20 Pod-label sets, not one.
  NODES = Math.max(1, Math.round(pods / 200));
  if (NODES % 20 === 0) NODES += 10;
  const policies = Math.max(2000, Math.round(pods / 30));
  ANTREA_POLICIES = Math.round(policies * 0.15);
  K8S_POLICIES = policies - ANTREA_POLICIES;
}
const TO_SERVICES = process.argv.includes('--to-services');
const MULTI_GROUP = process.argv.includes('--multi-group');

/** The modules of one build the path runs through (resolved under its dist/). */
interface Impl {
  name: string;
  Enforcer: typeof import('../daemon/enforcement/enforcer.js').Enforcer;
  PolicyEngine: typeof import('../daemon/policy/engine.js').PolicyEngine;
  diffFlows: typeof import('../daemon/flows/diff.js').diffFlows;
  computeFlows: typeof import('../daemon/flows/pipeline.js').computeFlows;
  /** The agent's FlowStore and pipeline owners when the build has them (desired flows by owner, pending delta). */
  FlowStore?: typeof import('../daemon/flows/store.js').FlowStore;
  PipelineOwners?: typeof import('../daemon/flows/pipeline.js').PipelineOwners;
  /** Older builds' helpers (pipeline flows remembered, union kept while its inputs are). */
  FlowUnion?: new () => { union(lists: readonly (readonly Flow[])[]): Flow[] };
  PipelineFlows?: new () => { flows(input: unknown): Flow[] };
}

async function loadImpl(name: string, dist: string): Promise<Impl> {
  const m = (p: string) => import(pathToFileURL(join(dist, p)).href);
  const [enf, eng, diff, pipe] = await Promise.all([m('daemon/enforcement/enforcer.js'), m('daemon/policy/engine.js'), m('daemon/flows/diff.js'), m('daemon/flows/pipeline.js')]);
  const store = await m('daemon/flows/store.js').catch(() => ({}));
  return {
    name, Enforcer: enf.Enforcer, PolicyEngine: eng.PolicyEngine, diffFlows: diff.diffFlows, computeFlows: pipe.computeFlows,
    ...(store.FlowStore && pipe.PipelineOwners ? { FlowStore: store.FlowStore, PipelineOwners: pipe.PipelineOwners } : {}),
    ...(diff.FlowUnion ? { FlowUnion: diff.FlowUnion } : {}), ...(pipe.PipelineFlows ? { PipelineFlows: pipe.PipelineFlows } : {}),
  };
}

const podIp = (k: number) => `10.${16 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`;

function pod(ns: number, j: number, labels: Record<string, string>): KubeObject {
  const k = ns * PODS_PER_NS + j;
  return {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: `pod-${j}`, namespace: `ns-${ns}`, labels },
    spec: { nodeName: `node-${k % NODES}`, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 8080 + (j % 3) }, { name: 'dns', containerPort: 53, protocol: 'UDP' }] }] },
    status: { phase: 'Running', podIP: podIp(k), podIPs: [{ ip: podIp(k) }] },
  };
}

const podLabels = (j: number) => ({ app: `app-${j % 10}`, tier: ['fe', 'be', 'db'][j % 3]! });

function objects(): KubeObject[] {
  const out: KubeObject[] = [];
  for (let n = 0; n < NODES; n++) out.push({ apiVersion: 'v1', kind: 'Node', metadata: { name: `node-${n}` }, status: { addresses: [{ type: 'InternalIP', address: `172.20.0.${n + 1}` }] } });
  for (let i = 0; i < NAMESPACES; i++) {
    out.push({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `ns-${i}`, labels: { team: `t${i % 20}`, env: i % 2 ? 'prod' : 'dev' } } });
    for (let j = 0; j < PODS_PER_NS; j++) out.push(pod(i, j, podLabels(j)));
  }
  // A Service whose endpoints no rule refers to (toServices is not used by these policies).
  out.push({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'ns-3' }, spec: { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], selector: { app: 'app-1' }, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] } });
  if (TO_SERVICES) {
    out.push({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'api', namespace: 'ns-5' }, spec: { clusterIP: '10.96.0.20', clusterIPs: ['10.96.0.20'], selector: { app: 'app-2' }, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'http' }] } });
    out.push(apiSlice(true));
    out.push({
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'to-api' },
      spec: { priority: 1, tier: 'securityops', appliedTo: [{ podSelector: { matchLabels: { app: 'app-0' } } }], egress: [{ action: 'Allow', toServices: [{ name: 'api', namespace: 'ns-5' }] }, { action: 'Drop', to: [{ namespaceSelector: { matchLabels: { team: 't5' } } }] }] },
    });
  }
  if (MULTI_GROUP) {
    out.push({
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'from-every-tier' },
      spec: {
        priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'app-0' } } }],
        ingress: [{ action: 'Allow', from: ['fe', 'be', 'db'].map((tier) => ({ podSelector: { matchLabels: { tier } } })), ports: [{ protocol: 'TCP', port: 7000 }] }],
      },
    });
  }
  for (let p = 0; p < K8S_POLICIES; p++) out.push(netpol(p));
  for (let p = 0; p < ANTREA_POLICIES; p++) {
    out.push({
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: `acnp-${p}` },
      spec: {
        priority: 1 + (p % 50), tier: ['securityops', 'application', 'baseline'][p % 3],
        appliedTo: [{ namespaceSelector: { matchLabels: { team: `t${p % 20}` } }, podSelector: { matchLabels: { app: `app-${p % 10}` } } }],
        ingress: [{ action: p % 3 === 1 ? 'Drop' : 'Allow', from: [{ namespaceSelector: { matchLabels: { team: `t${(p + 1) % 20}` } }, podSelector: { matchLabels: { tier: 'fe' } } }], ports: [{ protocol: 'TCP', port: 8080 }] }],
        egress: [{ action: 'Drop', to: [{ ipBlock: { cidr: `203.0.${p % 256}.0/24` } }] }],
      },
    });
  }
  return out;
}

/** The EndpointSlice of ns-5/api (Pods ns-5/pod-2 and pod-12, app-2), pod-2 ready or not. */
function apiSlice(ready: boolean): KubeObject {
  const endpoints = [2, 12].map((j) => ({ addresses: [podIp(5 * PODS_PER_NS + j)], conditions: { ready: j !== 2 || ready }, targetRef: { kind: 'Pod', namespace: 'ns-5', name: `pod-${j}` } }));
  return { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'api-1', namespace: 'ns-5', labels: { 'kubernetes.io/service-name': 'api' } }, addressType: 'IPv4', endpoints } as KubeObject;
}

function netpol(p: number): KubeObject {
  const shape = [
    { podSelector: { matchLabels: { tier: 'db' } }, ingress: [{ from: [{ podSelector: { matchLabels: { tier: 'be' } } }], ports: [{ port: 'http' }] }] },
    { podSelector: { matchLabels: { tier: 'fe' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `t${p % 20}` } } }, { ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.1.0/24'] } }], ports: [{ port: 8080, endPort: 8082 }] }], egress: [{ to: [{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'app-1' } } }] }] },
    { podSelector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['app-2', 'app-3'] }] }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { env: 'prod' } }, podSelector: { matchLabels: { tier: 'fe' } } }] }] },
    { podSelector: { matchLabels: { app: `app-${p % 10}` } }, policyTypes: ['Ingress'], ingress: [{ from: [{ podSelector: { matchLabels: { tier: 'be' } } }], ports: [{ protocol: 'TCP', port: 9000 + (p % 7) }] }] },
  ][Math.floor(p / Math.min(NAMESPACES, 500)) % 4];
  return { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np-${p}`, namespace: `ns-${p % NAMESPACES}` }, spec: shape };
}

/** How one build's agent turns the enforcer's state into the bundle: bring the desired set up to date, then find the delta. */
interface FlowPath {
  /** The desired set brought up to date (the agent's flow sources): returns its size. */
  update(): number;
  /** The flows to change on the bridge since the last call. */
  delta(): number;
}

/** The agent's state around one enforcer: base pipeline flows of the local Pods and the installed cookies. */
class Rig {
  readonly enforcer: InstanceType<Impl['Enforcer']>;
  private readonly pipeline: Parameters<Impl['computeFlows']>[0];
  private readonly path: FlowPath;
  flows = 0;

  constructor(readonly impl: Impl, objs: KubeObject[]) {
    const silent = { warn() {}, info() {}, error() {}, debug() {} } as unknown as ConstructorParameters<Impl['Enforcer']>[0]['log'];
    this.enforcer = new impl.Enforcer({ nodeName: NODE, ovsRunDir: '/nonexistent', bridge: 'br-int', log: silent });
    for (const o of objs) this.enforcer.onWatchEvent({ type: 'upsert', object: o } as never);
    const local = objs.filter((o) => o.kind === 'Pod' && o.spec?.nodeName === NODE);
    this.pipeline = {
      gatewayOfport: 2, gatewayMac: '02:00:00:00:00:01', nodeIP: '172.20.0.1', serviceCIDRs: ['10.96.0.0/12'],
      pods: local.map((o, i) => ({ containerId: `c${i}`, ofport: 10 + i, mac: `02:00:00:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`, ips: [o.status!.podIP as string] })),
    };
    this.path = this.flowPath();
    this.flows = this.path.update();
    this.path.delta();
  }

  /** The build's agent path: owners in a FlowStore and its pending delta, else a union of flow lists and a cookie diff. */
  private flowPath(): FlowPath {
    const { impl } = this;
    if (impl.FlowStore && impl.PipelineOwners) {
      const store = new impl.FlowStore();
      const owners = new impl.PipelineOwners();
      const enforcer = this.enforcer as unknown as { writeFlows(s: typeof store): void };
      return {
        update: () => {
          owners.update(store, this.pipeline);
          enforcer.writeFlows(store);
          return store.size;
        },
        delta: () => {
          const d = store.take();
          return d.add.length + d.remove.length;
        },
      };
    }
    let union: (base: () => Flow[], policy: () => Flow[]) => Flow[];
    if (impl.FlowUnion && impl.PipelineFlows) {
      const u = new impl.FlowUnion();
      const pipeline = new impl.PipelineFlows();
      union = (_base, policy) => u.union([pipeline.flows(this.pipeline), policy()]);
    } else {
      union = (base, policy) => {
        const byCookie = new Map(base().map((f) => [f.cookie, f]));
        for (const f of policy()) if (!byCookie.has(f.cookie)) byCookie.set(f.cookie, f);
        return [...byCookie.values()];
      };
    }
    let desired: Flow[] = [];
    let installed = new Set<string>();
    return {
      update: () => {
        desired = union(() => impl.computeFlows(this.pipeline), () => this.enforcer.flows());
        return desired.length;
      },
      delta: () => {
        const d = impl.diffFlows(desired, installed);
        installed = new Set(desired.map((f) => f.cookie));
        return d.add.length + d.remove.length;
      },
    };
  }

  /** One event and the flush it schedules, timed per phase (ms). */
  event(obj: KubeObject, type: 'upsert' | 'remove' = 'upsert'): { total: number; engine: number; compile: number; union: number; diff: number; changed: number } {
    const t0 = performance.now();
    this.enforcer.onWatchEvent({ type, object: obj } as never);
    const t1 = performance.now();
    // The enforcer's debounced flush, run here synchronously: an event that scheduled none costs
    // no compile and no apply. A compile is due when the flush scheduler's `pending` is set (the
    // enforcer's own `pending`, or a debounce `timer`, in older builds); the flush the runner plans
    // finds nothing left to do.
    const e = this.enforcer as unknown as { timer?: NodeJS.Timeout | undefined; pending?: boolean; flusher?: { pending?: boolean } };
    if (!e.timer && !e.pending && !e.flusher?.pending) return { total: t1 - t0, engine: t1 - t0, compile: 0, union: 0, diff: 0, changed: 0 };
    if (e.timer) {
      clearTimeout(e.timer);
      e.timer = undefined;
    }
    this.enforcer.compileNow();
    const t2 = performance.now();
    this.flows = this.path.update();
    const t3 = performance.now();
    const changed = this.path.delta();
    const t4 = performance.now();
    return { total: t4 - t0, engine: t1 - t0, compile: t2 - t1, union: t3 - t2, diff: t4 - t3, changed };
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(xs.length * 0.9) - 1)]!;
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);
/** A full garbage collection, so the heap figures count only what is retained. */
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const load = () => loadavg().map((x) => x.toFixed(2)).join(' ');

/** One event kind's timings of one build at one size: p50 and p90 of the total, p50 of each phase (ms). */
interface Row { size: number; scenario: string; impl: string; p50: number; p90: number; engine: number; compile: number; union: number; diff: number }

async function main(): Promise<void> {
  const here = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  const impls = [await loadImpl('this tree', here)];
  const baseline = arg('baseline');
  if (baseline) impls.unshift(await loadImpl(`baseline (${baseline})`, resolve(baseline)));
  const rows: Row[] = [];
  for (const size of SIZES) {
    scale(size);
    rows.push(...runSize(impls, size));
  }
  if (SIZES.length > 1 || impls.length > 1) summary(rows, impls);
  await loads(impls);
}

/** Loads one cluster size into a rig per build and times every event kind on it. */
function runSize(impls: Impl[], size: number): Row[] {
  const rows: Row[] = [];
  console.log(`incremental bench: ${NAMESPACES * PODS_PER_NS} Pods on ${NODES} Nodes (${(NAMESPACES * PODS_PER_NS) / NODES} local), ${K8S_POLICIES} NetworkPolicies + ${ANTREA_POLICIES} Antrea ClusterNetworkPolicies${TO_SERVICES ? ' + one toServices policy' : ''}; ${REPS} events per kind; ${cpus().length} CPUs, load average ${load()}`);
  const objs = objects();
  let rigs: Rig[] = impls.map((impl) => {
    gc();
    const heap0 = process.memoryUsage().heapUsed;
    const t = performance.now();
    const rig = new Rig(impl, objs);
    const ms = performance.now() - t;
    gc();
    const retained = (process.memoryUsage().heapUsed - heap0) / 2 ** 20;
    console.log(`  ${impl.name}: cold start ${f1(ms)} ms, ${rig.enforcer.engine.nodeRuleSet().length} node rules, ${rig.flows} desired flows; JS heap it retains ${f1(retained)} MiB (engine, compiled flows, desired set; the API objects are shared)`);
    return rig;
  });

  // Each event kind alternates between two states, so every event changes something.
  const remote = (i: number) => pod(7, 3, i % 2 ? podLabels(3) : { app: 'app-1', tier: 'fe' }); // ns-7/pod-3 (Pod 143) is on node-143 mod NODES, never this node
  const localPod = (() => {
    for (let k = 0; k < NAMESPACES * PODS_PER_NS; k++) if (k % NODES === 0 && k % PODS_PER_NS === 10) return { ns: Math.floor(k / PODS_PER_NS), j: k % PODS_PER_NS };
    throw new Error('no local Pod');
  })();
  const localRelabel = (i: number) => pod(localPod.ns, localPod.j, i % 2 ? podLabels(localPod.j) : { app: 'app-2', tier: 'db' });
  const scenarios: { name: string; run: (rig: Rig, i: number) => ReturnType<Rig['event']> }[] = [
    { name: 'remote Pod relabel (ns-7/pod-3)', run: (rig, i) => rig.event(remote(i)) },
    // A label no selector reads (as a rollout's pod-template-hash): no group, no rule changes.
    { name: 'remote Pod label no policy reads (ns-7/pod-3)', run: (rig, i) => rig.event(pod(7, 3, { ...podLabels(3), 'pod-template-hash': `h${i}` })) },
    { name: `local Pod relabel (ns-${localPod.ns}/pod-${localPod.j})`, run: (rig, i) => rig.event(localRelabel(i)) },
    {
      name: 'new NetworkPolicy in a namespace with a local Pod (then its removal; 1 in 10 selects that Pod)',
      run: (rig, i) => {
        const obj = netpol(K8S_POLICIES + (i >> 1));
        obj.metadata.namespace = `ns-${localPod.ns}`;
        return rig.event(obj, i % 2 ? 'remove' : 'upsert');
      },
    },
    // Out of every tier and back: the Pod leaves and joins the union of the rule's three peer groups.
    ...(MULTI_GROUP ? [{ name: 'remote Pod out of and into a rule with three peer groups (ns-7/pod-3)', run: (rig: Rig, i: number) => rig.event(pod(7, 3, i % 2 ? podLabels(3) : { app: 'app-3', tier: 'none' })) }] : []),
    ...(TO_SERVICES ? [{ name: 'EndpointSlice change of the Service the toServices rule names (ns-5/api)', run: (rig: Rig, i: number) => rig.event(apiSlice(i % 2 === 1)) }] : []),
    {
      name: 'Service endpoints change no rule uses',
      run: (rig, i) => rig.event({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'ns-3' }, spec: { clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], selector: { app: i % 2 ? 'app-1' : 'app-2' }, ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 8080 }] } }),
    },
  ];
  const only = arg('only');
  for (const s of scenarios.filter((x) => !only || x.name.includes(only))) {
    const times = rigs.map(() => [] as ReturnType<Rig['event']>[]);
    for (let i = 0; i < REPS * 2; i++) {
      // Interleaved, alternating which implementation goes first.
      const order = i % 2 ? [...rigs.keys()].reverse() : [...rigs.keys()];
      for (const r of order) times[r]!.push(s.run(rigs[r]!, i));
    }
    console.log(`${s.name}:`);
    rigs.forEach((rig, r) => {
      const ts = times[r]!;
      const mid = (k: keyof ReturnType<Rig['event']>) => median(ts.map((t) => t[k]));
      const col = (k: keyof ReturnType<Rig['event']>) => f2(mid(k));
      console.log(`  ${rig.impl.name}: total p50 ${col('total')} ms, p90 ${f2(p90(ts.map((t) => t.total)))} ms (engine ${col('engine')}, compile ${col('compile')}, union ${col('union')}, diff ${col('diff')}; flows changed p50 ${f1(mid('changed'))})`);
      rows.push({ size, scenario: s.name.replace(/ \(ns-\d+\/pod-\d+\)/, ''), impl: rig.impl.name, p50: mid('total'), p90: p90(ts.map((t) => t.total)), engine: mid('engine'), compile: mid('compile'), union: mid('union'), diff: mid('diff') });
    });
  }
  console.log(`load average after the event runs: ${load()}`);
  // The rigs go before the next size loads (a 150 000-Pod cluster per build is a few GiB).
  rigs = [];
  gc();
  return rows;
}

/** Per event kind, one line per size and build: the p50/p90 and the phases, with each build's ratio to the first. */
function summary(rows: Row[], impls: Impl[]): void {
  console.log('summary (ms; p50 total, p90 total, p50 engine/compile/union/diff):');
  const kinds = [...new Set(rows.map((r) => r.scenario))];
  for (const kind of kinds) {
    console.log(`  ${kind}:`);
    for (const size of SIZES) {
      const cells = impls.map((impl) => rows.find((r) => r.scenario === kind && r.size === size && r.impl === impl.name)).filter((r): r is Row => !!r);
      if (cells.length === 0) continue;
      const base = cells[0];
      const text = cells.map((r) => `${r.impl === impls[0]!.name && impls.length > 1 ? 'baseline' : 'this'} ${f2(r.p50)}/${f2(r.p90)} (${f2(r.engine)}/${f2(r.compile)}/${f2(r.union)}/${f2(r.diff)})${base && r !== base ? ` x${(base.p50 / Math.max(r.p50, 1e-3)).toFixed(1)} faster` : ''}`);
      console.log(`    ${String(size).padStart(7)} Pods: ${text.join('; ')}`);
    }
  }
}

async function loads(impls: Impl[]): Promise<void> {
  console.log('simulate-style loading of trivial NetworkPolicies (select no Pod):');
  for (const n of LOADS) {
    const line: string[] = [];
    for (const impl of impls) {
      const engine = new impl.PolicyEngine({});
      engine.upsert({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'ns' } });
      const t = performance.now();
      for (let p = 0; p < n; p++) {
        engine.upsert({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np-${p}`, namespace: 'ns' }, spec: { podSelector: { matchLabels: { none: `x${p}` } }, ingress: [{ from: [{ podSelector: { matchLabels: { role: 'client' } } }] }] } });
      }
      engine.errors();
      line.push(`${impl.name} ${f1((performance.now() - t) / 1000)} s`);
    }
    console.log(`  ${n}: ${line.join('; ')} (load average ${load()})`);
  }
}

main().catch((err) => {
  console.error(`bench failed: ${(err as Error).stack ?? err}`);
  process.exit(1);
});
