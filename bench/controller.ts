/**
 * Controller bench (prints figures, asserts nothing), offline and in-process: what one cluster
 * event costs when the policy computation runs once, in the controller, instead of in every agent.
 *
 * The cluster of bench/cluster-model.ts (every policy kind) at each size of `--pods`, 30 Pods per
 * Node (5 000 Nodes at 150 000 Pods) and max(2 000, Pods/30) policies. The controller's engine (no
 * Node of its own) and ClusterComputation load it into the controller's store (its views computed
 * once, at the end, as sluice-controller does); beside the store, a sink counts per Node the objects
 * sent and their JSON bytes (its time is not the controller's). Then, per event kind, REPS events:
 *
 * - remote Pod relabel: ns-7/pod-3 between tier=fe and tier=be (out of the cluster-wide
 *   AddressGroup of tier=fe Pods that AdminNetworkPolicies name, into others);
 * - Pod label no policy reads (a new pod-template-hash);
 * - new Pod (a Pod created, then deleted at the next rep);
 * - NetworkPolicy edit (one policy's podSelector changes back and forth).
 *
 * Printed per event: the controller's time (engine + computation, p50/p90), the Nodes that got an
 * update and the bytes sent to all of them; then one agent's cost of taking its share
 * (NodePolicyState: events, commit, node rule set) beside the same Node's standalone engine (fed
 * the whole cluster, as every agent is in standalone mode) taking the same event. The cluster's CPU
 * per event: standalone = Nodes x the standalone engine's time; controller mode = the controller's
 * time + Nodes updated x the agent's time (node-143's taken as typical). Neither includes the flow
 * compile, which is the same in both modes.
 *
 * Also printed for node-143: its view's size on the wire, and the policy state and flows it holds
 * (heap retained: the NodePolicyState and compiled flows in controller mode, the whole-cluster
 * engine and compiled flows in standalone mode), and the bytes it receives per event (0 for an
 * event outside its span).
 *
 * usage: node --expose-gc dist/bench/controller.js [--pods 10000,50000,150000] [--reps 30]
 */
import { loadavg } from 'node:os';
import { ClusterComputation, type NodeViewSink, type PerNodeViewSink, perNodeSink } from '../daemon/controller/computation.js';
import { ControlPlaneStore } from '../daemon/controller/store.js';
import { NodePolicyState } from '../daemon/controlplane/node-state.js';
import { PolicyFlows, policyFlowInput } from '../daemon/flows/policy/index.js';
import type { ControlPlaneAddressGroupPatch, ControlPlaneEvent, ControlPlaneKind, ControlPlaneObject } from '../daemon/controlplane/types.js';
import { PolicyEngine } from '../daemon/policy/engine.js';
import type { KubeObject } from '../daemon/policy/types.js';
import { clusterModel, podContainers, podLabels } from './cluster-model.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
};
const SIZES = (arg('pods') ?? '10000,50000,150000').split(',').filter(Boolean).map(Number);
const REPS = Number(arg('reps') ?? 30);
const PODS_PER_NS = 20;
const PODS_PER_NODE = 30;

/** Each Node's view as the store's watches deliver it (what each Node holds), counting what goes out. */
class CountingSink implements PerNodeViewSink {
  readonly views = new Map<string, Map<string, ControlPlaneObject>>();
  events = new Map<string, ControlPlaneEvent[]>();

  set(node: string, kind: ControlPlaneKind, name: string, object: ControlPlaneObject | undefined, patch?: ControlPlaneAddressGroupPatch): void {
    let view = this.views.get(node);
    if (!view) this.views.set(node, (view = new Map()));
    const key = `${kind}/${name}`;
    const had = view.get(key);
    let e: ControlPlaneEvent | undefined;
    if (object === undefined) {
      if (had) {
        view.delete(key);
        e = { type: 'DELETED', object: { apiVersion: had.apiVersion, kind, metadata: { name } } };
      }
    } else {
      view.set(key, object);
      if (had !== object) e = had ? ({ type: 'MODIFIED', object: patch ?? object } as ControlPlaneEvent) : { type: 'ADDED', object };
    }
    if (!e) return;
    let list = this.events.get(node);
    if (!list) this.events.set(node, (list = []));
    list.push(e);
  }

  /** The events since the last take, and their JSON size (each object serialized once, as a watch cache would). */
  take(): { nodes: number; bytes: number; events: Map<string, ControlPlaneEvent[]> } {
    const size = new WeakMap<object, number>();
    let bytes = 0;
    for (const list of this.events.values()) {
      for (const e of list) {
        let n = size.get(e.object);
        if (n === undefined) size.set(e.object, (n = JSON.stringify(e.object).length));
        bytes += n + 24;
      }
    }
    const out = { nodes: this.events.size, bytes, events: this.events };
    this.events = new Map();
    return out;
  }
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;
const ms = (x: number) => `${x.toFixed(x < 1 ? 3 : 2)} ms`;
const mib = () => `${Math.round(process.memoryUsage().rss / 2 ** 20)} MiB`;
/** The JS heap in use, after a full collection when the bench runs with --expose-gc. */
const heapMiB = () => {
  globalThis.gc?.();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

function podObject(ns: number, j: number, nodes: number, labels: Record<string, string>, name = `pod-${j}`, k = ns * PODS_PER_NS + j): KubeObject {
  const ip = `10.${16 + (k >> 16)}.${(k >> 8) & 255}.${k & 255}`;
  return {
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: `ns-${ns}`, labels },
    spec: { nodeName: `node-${k % nodes}`, containers: podContainers(j) },
    status: { phase: 'Running', podIP: ip, podIPs: [{ ip }] },
  };
}

/**
 * The controller's real store, and beside it the counting sink (per Node, to see what each Node
 * receives): the time spent counting is kept apart, so the controller's figure is the engine, the
 * computation and the store, as in sluice-controller.
 */
class TimedTee implements NodeViewSink {
  readonly store = new ControlPlaneStore({ initialResourceVersion: 1 });
  readonly counting = new CountingSink();
  private readonly perNode = perNodeSink(this.counting);
  countingMs = 0;

  set(...a: Parameters<NodeViewSink['set']>): void {
    this.store.set(...a);
    this.count(() => this.perNode.set(...a));
  }

  share(...a: Parameters<NodeViewSink['share']>): void {
    this.store.share(...a);
    this.count(() => this.perNode.share(...a));
  }

  hold(...a: Parameters<NodeViewSink['hold']>): void {
    this.store.hold(...a);
    this.count(() => this.perNode.hold(...a));
  }

  private count(fn: () => void): void {
    const s = performance.now();
    fn();
    this.countingMs += performance.now() - s;
  }
}

async function runSize(pods: number): Promise<void> {
  const namespaces = Math.round(pods / PODS_PER_NS);
  const nodes = Math.max(1, Math.round(pods / PODS_PER_NODE));
  const policies = Math.max(2000, Math.round(pods / 30));
  const model = clusterModel({ namespaces, podsPerNamespace: PODS_PER_NS, nodes, policies });
  const engine = new PolicyEngine({ trackMembers: true });
  const tee = new TimedTee();
  const sink = tee.counting;
  const computation = new ClusterComputation(engine, tee);
  const t0 = performance.now();
  // As sluice-controller takes in its initial lists: the views computed once, at the end.
  computation.hold();
  for (const o of [...model.cluster, ...model.policies]) computation.apply(engine.upsert(o));
  tee.store.batch(() => computation.release());
  const load = performance.now() - t0;
  const initial = sink.take();
  const perNode = [...sink.views.values()].map((v) => v.size);
  console.log(`\n== ${pods} Pods, ${nodes} Nodes, ${policies} policies (load ${loadavg()[0]!.toFixed(1)})`);
  console.log(`controller: loaded in ${(load / 1000).toFixed(1)} s, RSS ${mib()}; ${JSON.stringify(computation.counts())}`);
  console.log(`initial views: ${initial.nodes} Nodes, ${(initial.bytes / 2 ** 20).toFixed(1)} MiB sent in all, objects per Node p50 ${pct(perNode, 0.5)} max ${Math.max(...perNode)}`);

  // The same Node in standalone mode: its own engine fed the whole cluster, as every agent is today.
  const heap0 = heapMiB();
  const standalone = new PolicyEngine({ nodeName: 'node-143' });
  for (const o of [...model.cluster, ...model.policies]) standalone.upsert(o);
  standalone.nodeRuleSet();
  standalone.nodeIsolations();
  const standaloneFlows = new PolicyFlows();
  standaloneFlows.sync(policyFlowInput(standalone));
  const standaloneHeap = heapMiB() - heap0;

  // One agent rebuilt from its initial view, to time taking its share of each event.
  const agentNode = 'node-143';
  const heap1 = heapMiB();
  const agent = new NodePolicyState(agentNode);
  const view = [...(sink.views.get(agentNode) ?? new Map<string, ControlPlaneObject>()).entries()];
  for (const kind of ['NetworkPolicy', 'AppliedToGroup', 'AddressGroup'] as ControlPlaneKind[]) {
    agent.sync(kind, view.filter(([k]) => k.startsWith(`${kind}/`)).map(([, o]) => o));
  }
  agent.commit();
  agent.nodeRuleSet();
  const agentFlows = new PolicyFlows();
  agentFlows.sync({ rules: agent.nodeRuleSet(), isolations: agent.nodeIsolations(), serviceEndpoints: (ip, protocol, port) => agent.serviceBackends(ip, protocol, port) });
  const agentHeap = heapMiB() - heap1;
  const viewBytes = view.reduce((sum, [, o]) => sum + JSON.stringify(o).length, 0);
  console.log(`${agentNode}: its view ${view.length} objects, ${(viewBytes / 2 ** 20).toFixed(1)} MiB on the wire; policy state and flows held (heap${globalThis.gc ? '' : ', approximate: run with --expose-gc'}): ` +
    `controller mode ${agentHeap.toFixed(0)} MiB, standalone ${standaloneHeap.toFixed(0)} MiB; policy flows ${agentFlows.size} (standalone ${standaloneFlows.size})`);

  const np = model.policies.find((p) => p.kind === 'NetworkPolicy')!;
  const npSpec = np.spec as Record<string, unknown>;
  /** Feeds an object to the controller (and, as the same event, to the standalone engine when `alone` is given). */
  const both = (o: KubeObject, alone: number[]) => {
    tee.store.batch(() => computation.apply(engine.upsert(o)));
    const s = performance.now();
    standalone.upsert(o);
    standalone.nodeRuleSet();
    standalone.nodeIsolations();
    alone.push(performance.now() - s);
  };
  const drop = (ref: { apiVersion: string; kind: string; namespace: string; name: string }, alone: number[]) => {
    tee.store.batch(() => computation.apply(engine.remove(ref)));
    const s = performance.now();
    standalone.remove(ref);
    standalone.nodeRuleSet();
    alone.push(performance.now() - s);
  };
  const events: { name: string; run: (i: number, alone: number[]) => void }[] = [
    { name: 'remote Pod relabel (ns-7/pod-3, tier fe <-> be)', run: (i, alone) => both(podObject(7, 3, nodes, i % 2 ? podLabels(3) : { app: 'app-3', tier: 'be' }), alone) },
    { name: 'Pod label no policy reads', run: (i, alone) => both(podObject(7, 3, nodes, { ...podLabels(3), 'pod-template-hash': `h${i}` }), alone) },
    {
      name: 'new Pod / its deletion', run: (i, alone) => {
        if (i % 2) drop({ apiVersion: 'v1', kind: 'Pod', namespace: 'ns-9', name: 'new-pod' }, alone);
        else both(podObject(9, 4, nodes, podLabels(4), 'new-pod', pods + 7), alone);
      },
    },
    {
      name: `NetworkPolicy edit (${np.metadata.namespace}/${np.metadata.name}: its podSelector)`, run: (i, alone) => {
        both({ ...np, spec: i % 2 ? npSpec : { ...npSpec, podSelector: { matchLabels: { tier: 'fe' } } } }, alone);
      },
    },
  ];
  for (const e of events) {
    const times: number[] = [];
    const fanout: number[] = [];
    const bytes: number[] = [];
    const agentTimes: number[] = [];
    const alone: number[] = [];
    let agentEvents = 0;
    let agentBytes = 0;
    for (let i = 0; i < REPS; i++) {
      const s = performance.now();
      tee.countingMs = 0;
      e.run(i, alone);
      times.push(performance.now() - s - (alone.at(-1) ?? 0) - tee.countingMs);
      const out = sink.take();
      fanout.push(out.nodes);
      bytes.push(out.bytes);
      const mine = out.events.get(agentNode) ?? [];
      agentEvents += mine.length;
      agentBytes += mine.reduce((sum, ev) => sum + JSON.stringify(ev.object).length + 24, 0);
      const a = performance.now();
      for (const ev of mine) agent.event(ev);
      agent.commit();
      agent.nodeRuleSet();
      agentTimes.push(performance.now() - a);
    }
    const clusterStandalone = pct(alone, 0.5) * nodes;
    // node-143's time stands for every Node updated only when it was one of them.
    const sampled = agentEvents > 0 || pct(fanout, 0.5) === 0;
    const clusterController = pct(times, 0.5) + (sampled ? pct(fanout, 0.5) * pct(agentTimes, 0.5) : 0);
    console.log(`${e.name}: controller p50 ${ms(pct(times, 0.5))} p90 ${ms(pct(times, 0.9))}; Nodes updated p50 ${pct(fanout, 0.5)} max ${Math.max(...fanout)}; bytes sent p50 ${pct(bytes, 0.5)}; ` +
      `${agentNode}: ${agentEvents} events, ${agentBytes} bytes in ${REPS} reps, p50 ${ms(pct(agentTimes, 0.5))} (standalone engine p50 ${ms(pct(alone, 0.5))}); ` +
      (sampled
        ? `cluster CPU per event: standalone ${ms(clusterStandalone)}, controller mode ~${ms(clusterController)} (${(clusterStandalone / Math.max(clusterController, 1e-6)).toFixed(1)}x)`
        : `cluster CPU per event: standalone ${ms(clusterStandalone)}, controller mode ${ms(clusterController)} + ${pct(fanout, 0.5)} agents' shares (not sampled: ${agentNode} was not updated)`));
  }
  console.log(`RSS after events ${mib()}`);
}

for (const size of SIZES) await runSize(size);
