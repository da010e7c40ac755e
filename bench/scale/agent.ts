/**
 * One simulated agent of bench/scale.ts, run as its own process (forked, IPC) so that its memory
 * and CPU are its own. It is the agent's policy side with no bridge: what it receives, the state it
 * keeps, the policy flows it compiles and the FlowStore they are written to (each delta taken as a
 * flow sync takes it for the bridge), the same modules the agent runs.
 *
 * - `controller`: ControlPlaneWatcher (its Node's span from the controller, with a Node-bound
 *   token) -> ControlPlaneFollower (commits at consistent cuts) -> FlushScheduler -> PolicyFlows;
 * - `standalone`: ClusterWatch of the whole cluster (the API server) -> Enforcer (its engine and
 *   policy flows), compiled after each event.
 *
 * Before it starts, it loads every module a whole agent loads (daemon/agent-program.ts: the bridge's
 * connections, netlink, the CNI server, metrics...) without running them, so that its RSS counts a
 * whole agent's code; what that added is reported apart (`codeRssMiB`).
 *
 * Bytes received are counted as the JSON of the objects received (lists and watch events), the
 * same measure in both modes. Messages to the parent: `ready` once the first state is compiled,
 * `commit` after each compile that took a change in, `figures` when asked.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { pino } from 'pino';
import { type Clock, realClock } from '../../daemon/clock.js';
import { ControlPlaneWatcher } from '../../daemon/controlplane/client.js';
import { ControlPlaneFollower } from '../../daemon/enforcement/controller-mode/follower.js';
import { Enforcer } from '../../daemon/enforcement/enforcer.js';
import { FlushScheduler } from '../../daemon/enforcement/flush-scheduler.js';
import { ClusterWatch } from '../../daemon/enforcement/watch/clusterwatch.js';
import { PolicyFlows } from '../../daemon/flows/policy/index.js';
import { FlowStore } from '../../daemon/flows/store.js';
import { PolicyFlowWriter } from '../../daemon/enforcement/policy-flow-writer.js';
import { KubeAccess } from '../../daemon/kube/access.js';

export interface ScaleAgentConfig {
  mode: 'controller' | 'standalone';
  nodeName: string;
  /** controller mode: the controller's URL, its CA file and a token bound to this Node. */
  server?: string;
  caFile?: string;
  token?: string;
  /** standalone mode: the API server. */
  kubeconfig?: string;
}

/** What the agent has received and holds now. */
export interface ScaleAgentFigures {
  rssMiB: number;
  heapMiB: number;
  cpuMs: number;
  /** Of cpuMs, in sluice's handlers (see handler()). */
  handlerCpuMs: number;
  bytes: number;
  events: number;
  flows: number;
  rules: number;
  commits: number;
  /** RSS the whole agent's modules added when they were loaded, before anything else. */
  codeRssMiB: number;
}

export type ScaleAgentMessage =
  | { type: 'ready'; at: number; figures: ScaleAgentFigures }
  | { type: 'commit'; at: number }
  | { type: 'figures'; figures: ScaleAgentFigures }
  | { type: 'profiled'; file: string };

/** The CPU profile of a window (the churn), when the parent asks for one. */
let profiler: Session | undefined;
async function startProfile(): Promise<void> {
  profiler = new Session();
  profiler.connect();
  await profiler.post('Profiler.enable');
  // A sample every 100 µs: an event costs about a millisecond.
  await profiler.post('Profiler.setSamplingInterval', { interval: 100 });
  await profiler.post('Profiler.start');
  // Where the garbage comes from: a sample every 32 KiB allocated, kept even once collected.
  await profiler.post('HeapProfiler.enable');
  await profiler.post('HeapProfiler.startSampling', { samplingInterval: 32 * 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
}
async function stopProfile(file: string): Promise<void> {
  const { profile } = await profiler!.post('Profiler.stop');
  writeFileSync(file, JSON.stringify(profile));
  const { profile: heap } = await profiler!.post('HeapProfiler.stopSampling');
  writeFileSync(file.replace(/\.cpuprofile$/, '.heapprofile'), JSON.stringify(heap));
  profiler!.disconnect();
  send({ type: 'profiled', file });
}

const log = pino({ level: process.env.SCALE_AGENT_LOG ?? 'silent' });
/**
 * CPU this process spent on the bench's own instrumentation (figures, messages to the parent,
 * counting bytes), not on the agent's work: taken out of `cpuMs`, since at the size of one event
 * (a fraction of a millisecond) reading the process's memory alone would count as much.
 */
let benchCpuMs = 0;
function bench<T>(fn: () => T): T {
  const c0 = process.cpuUsage();
  try {
    return fn();
  } finally {
    const d = process.cpuUsage(c0);
    benchCpuMs += (d.user + d.system) / 1000;
  }
}
const send = (m: ScaleAgentMessage) => bench(() => process.send?.(m));

/**
 * CPU spent in sluice's own handlers: what the agent does with what it received (the watch
 * callbacks, the timers of the follower and the flush scheduler: state, commit, compile). The rest
 * of `cpuMs` is the runtime receiving it (TLS, HTTP, timers, garbage collection).
 */
let handlerCpuMs = 0;
let handlerDepth = 0;
function handler<T>(fn: () => T): T {
  if (handlerDepth++ > 0) {
    try {
      return fn();
    } finally {
      handlerDepth--;
    }
  }
  const c0 = process.cpuUsage();
  const bench0 = benchCpuMs;
  try {
    return fn();
  } finally {
    handlerDepth--;
    const d = process.cpuUsage(c0);
    // Less the bench's instrumentation the handler ran (a commit's message to the parent).
    handlerCpuMs += (d.user + d.system) / 1000 - (benchCpuMs - bench0);
  }
}
/** The real clock, its timers' callbacks counted as handlers. */
const handlerClock: Clock = { ...realClock, setTimeout: (fn, ms) => realClock.setTimeout(() => handler(fn), ms) };
const now = () => performance.timeOrigin + performance.now();
const jsonBytes = (o: unknown) => bench(() => JSON.stringify(o).length);

let bytes = 0;
let events = 0;
let commits = 0;
let flowCount = () => 0;
let ruleCount = () => 0;
let codeRssMiB = 0;

/** Loads a whole agent's modules (importing the program runs nothing), measuring the RSS they add. */
async function loadAgentCode(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const before = process.memoryUsage().rss;
  await import('../../daemon/agent-program.js');
  gc?.();
  codeRssMiB = Math.round((process.memoryUsage().rss - before) / 2 ** 20);
}

/**
 * The figures now (see collectedFigures for memory). `cpuMs` is the agent's: the process's CPU less
 * the bench's instrumentation.
 */
function figures(): ScaleAgentFigures {
  const cpu = process.cpuUsage();
  const cpuMs = (cpu.user + cpu.system) / 1000 - benchCpuMs;
  return bench(() => {
    const m = process.memoryUsage();
    return {
      rssMiB: Math.round(m.rss / 2 ** 20), heapMiB: Math.round(m.heapUsed / 2 ** 20), cpuMs, handlerCpuMs,
      bytes, events, flows: flowCount(), rules: ruleCount(), commits, codeRssMiB,
    };
  });
}

/**
 * Memory figures: after full collections, with turns of the loop between them so that the sweeping
 * a collection leaves to background threads is done (one collection alone leaves garbage counted).
 */
async function collectedFigures(): Promise<ScaleAgentFigures> {
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let i = 0; i < 3; i++) {
    bench(() => gc?.());
    await new Promise((r) => setTimeout(r, 20));
  }
  bench(() => gc?.());
  return figures();
}

function committed(ready: () => boolean): void {
  commits++;
  if (ready()) send({ type: 'commit', at: now() });
}

async function controllerMode(c: ScaleAgentConfig): Promise<void> {
  let synced = false;
  const flows = new PolicyFlows();
  // As the agent's controller-mode enforcer writes its compiled flows; no DNS, guards or cuts here.
  const writer = new PolicyFlowWriter({ policy: () => flows.flows(), policyCountByTable: () => flows.countByTable(), dnsIntercept: () => undefined, newPodGuards: () => undefined, cutConnections: () => undefined });
  const store = new FlowStore();
  // The follower and the flush scheduler call each other: the scheduler is made just below.
  let flusher: FlushScheduler;
  const follower = new ControlPlaneFollower({
    nodeName: c.nodeName, clock: handlerClock, log,
    changed: (cs) => flusher.changed(cs),
    changes: () => flusher.changes,
    committedChanges: () => flusher.committedChanges,
  });
  const state = follower.state;
  flusher = new FlushScheduler({
    rules: state, clock: handlerClock, minIntervalMs: 20, log,
    compile: (dirty) => writer.compiled(flows.sync({ rules: state.nodeRuleSet(), isolations: state.nodeIsolations(), serviceEndpoints: (ip, p, port) => state.serviceBackends(ip, p, port) }, dirty)),
    flowCount: () => flows.size,
    deliveredResourceVersion: () => undefined,
    committed: () => committed(() => synced),
  });
  flowCount = () => flows.size;
  ruleCount = () => state.nodeRuleSet().length;
  const watcher = new ControlPlaneWatcher({
    server: c.server!, nodeName: c.nodeName, token: c.token!, ca: readFileSync(c.caFile!),
    onSync: (kind, items) => {
      for (const o of items) bytes += jsonBytes(o);
      handler(() => follower.onSync(kind, items));
    },
    onEvent: (kind, e) => {
      events++;
      bytes += jsonBytes(e.object);
      handler(() => follower.onEvent(kind, e));
    },
    onState: (s, reason) => follower.onState(s, reason),
    onStoreChange: (store) => follower.onStoreChange(store),
    log,
  });
  follower.bind(watcher);
  // No bridge: the flows are "on the bridge" once written to the store and its delta taken.
  flusher.bind(async () => handler(() => {
    writer.write(store);
    store.take();
  }));
  watcher.start();
  await follower.whenSynced();
  flusher.compileNow();
  await flusher.applyNow();
  synced = true;
  send({ type: 'ready', at: now(), figures: await collectedFigures() });
}

async function standaloneMode(c: ScaleAgentConfig): Promise<void> {
  const access = KubeAccess.load(c.kubeconfig!);
  let synced = false;
  const enforcer = new Enforcer({ nodeName: c.nodeName, ovsRunDir: '/nonexistent', bridge: 'br-scale', log });
  const store = new FlowStore();
  flowCount = () => enforcer.policyFlows.size;
  ruleCount = () => enforcer.engine.nodeRuleSet().length;
  let planned = false;
  const compileSoon = () => {
    if (planned || !synced) return;
    planned = true;
    setImmediate(() => handler(() => {
      planned = false;
      enforcer.writeFlows(store);
      store.take();
      committed(() => true);
    }));
  };
  const counting: Pick<KubeAccess, 'getJson' | 'watch'> = {
    getJson: async (path, timeoutMs) => {
      const list = await access.getJson(path, timeoutMs);
      bytes += jsonBytes(list);
      return list;
    },
    watch: (path, onEvent, onEnd) => access.watch(path, (ev) => {
      events++;
      bytes += jsonBytes(ev.object);
      onEvent(ev);
    }, onEnd),
  };
  const watch = await ClusterWatch.start({ log, access: counting, onEvent: (ev) => handler(() => {
    enforcer.onWatchEvent(ev);
    compileSoon();
  }) });
  await watch.waitSynced();
  enforcer.writeFlows(store);
  store.take();
  synced = true;
  send({ type: 'ready', at: now(), figures: await collectedFigures() });
}

process.on('message', (m: { type: string; config?: ScaleAgentConfig; collect?: boolean; file?: string }) => {
  if (m.type === 'start') {
    const c = m.config!;
    loadAgentCode().then(() => (c.mode === 'controller' ? controllerMode(c) : standaloneMode(c))).catch((err) => {
      console.error(`scale agent ${c.nodeName} (${c.mode}): ${(err as Error).stack ?? err}`);
      process.exit(1);
    });
  } else if (m.type === 'figures') {
    if (m.collect ?? true) void collectedFigures().then((f) => send({ type: 'figures', figures: f }));
    else send({ type: 'figures', figures: figures() });
  }
  else if (m.type === 'profile') void startProfile();
  else if (m.type === 'profile-stop') void stopProfile(m.file!);
  else if (m.type === 'stop') process.exit(0);
});
// The parent gone (killed, crashed): nothing to report to.
process.on('disconnect', () => process.exit(0));
