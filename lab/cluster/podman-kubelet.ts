/**
 * The lab kubelet for image Pods (those of a DaemonSet or a Deployment): on one lab node it runs
 * every such Pod placed there with podman, as a kubelet runs it with a container runtime.
 * lab/cluster/podspec.ts turns the Pod into podman runs (or refuses it, naming the field); this
 * module carries them out: init containers one
 * after the other until each exits 0, then the containers; restartPolicy Always with CrashLoopBackOff
 * (lab/cluster/podstatus.ts); httpGet readiness and liveness probes sent inside the node's network
 * namespace (HTTPS ones unverified, as the kubelet sends them); the Pod's status written through the status subresource. A deleted Pod's containers
 * are stopped (SIGTERM, then SIGKILL after the grace period) before the node's next Pod starts, so
 * a rolling update never runs two agents on one node.
 *
 * The workload kubelet (lab/cluster/kubelet.ts) leaves these Pods alone.
 */
import { spawn } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type * as k8s from '@kubernetes/client-node';
import type { KubeObject } from '../../daemon/policy/types.js';
import { serviceAccountToken } from '../apiserver/satoken.js';
import type { Controller } from './controllers.js';
import { isImagePod } from './owners.js';
import { isTerminating } from './endpointslices.js';
import { startInformer } from './informers.js';
import { resolveKind } from '../kinds.js';
import { run, sleep } from '../net/exec.js';
import { cniBinDir, cniCacheDir, cniConfDir, netnsPath, nodeIP, nodeNetns, nodeStateDir, ovsDir, repoRoot } from '../net/names.js';
import { planPodRun, PodInputMissing, PodSpecError, type ContainerRun, type NodeDirs, type PodRunPlan } from './podspec.js';
import {
  BACKOFF_RESET_MS, httpProbe, ProbeCounter, podStatus, restartDelayMs, type ContainerView, type HttpProbe, type PodView,
} from './podstatus.js';
import { ApiError, type RestClient } from '../restclient.js';
import { Coalescer, type Log } from './workqueue.js';

const POD = resolveKind('pods');
const CONFIGMAP = resolveKind('configmaps');
const EVENT = resolveKind('events');

/** HTTPS port of the lab API inside every node (lab/supervisor.ts's forwarder). */
const API_TLS_PORT = 6444;

/** podman as the image tests and `npm run image` run it here (runc; no default ulimits). */
export const podmanEnv = (): NodeJS.ProcessEnv => ({ ...process.env, CONTAINERS_CONF: join(repoRoot(), 'install', 'image', 'containers.conf') });
export const PODMAN_GLOBAL = ['--runtime', 'runc'];

/** The node-private root standing for a lab node's own /run/sluice, /var/lib, /var/log, /etc/... */
export const nodeRootDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'root');
export const nodePodsDir = (lab: string, node: string): string => join(nodeStateDir(lab, node), 'pods');

export function nodeDirs(lab: string, node: string, podUid: string): NodeDirs {
  return {
    lab, node, netnsPath: netnsPath(nodeNetns(lab, node)), hostIP: nodeIP(node),
    cniConfDir: cniConfDir(lab, node), cniBinDir: cniBinDir(lab), ovsRunDir: ovsDir(lab, node), cniCacheDir: cniCacheDir(lab, node),
    nodeRoot: nodeRootDir(lab, node), podDir: join(nodePodsDir(lab, node), podUid),
    apiHost: '127.0.0.1', apiPort: API_TLS_PORT,
  };
}

export interface PodmanKubeletOptions {
  caCert: string;
  serviceAccountKey: string;
}

interface Box {
  run: ContainerRun;
  view: ContainerView;
  spec: Record<string, unknown>;
  readiness?: { probe: HttpProbe; counter: ProbeCounter };
  liveness?: { probe: HttpProbe; counter: ProbeCounter };
  exited?: Promise<number>;
  startedAtMs?: number;
  timers: NodeJS.Timeout[];
}

/** One Pod's containers on the node, from its first init container to its last container's stop. */
class PodWorker {
  private stopping = false;
  private readonly boxes: Box[] = [];
  private readonly init: Box[] = [];
  private readonly view: PodView;
  private readonly since = new Map<string, string>();
  private readonly status: Coalescer;
  private wake?: () => void;

  constructor(
    readonly pod: KubeObject,
    private readonly lab: string,
    private readonly node: string,
    private readonly rest: RestClient,
    private readonly log: Log,
    private readonly plan: PodRunPlan | undefined,
    refused: string | undefined,
  ) {
    const specOf = (list: string, name: string) => ((pod.spec?.[list] ?? []) as Record<string, unknown>[]).find((c) => c.name === name) ?? {};
    const box = (r: ContainerRun, list: string): Box => {
      const spec = specOf(list, r.container);
      const b: Box = { run: r, spec, timers: [], view: { name: r.container, image: r.image, current: { state: 'waiting', reason: r.init ? 'PodInitializing' : 'ContainerCreating' }, restartCount: 0, ready: false } };
      if (!r.init) {
        const rp = httpProbe(spec.readinessProbe as Record<string, unknown> | undefined, spec, nodeIP(node));
        const lp = httpProbe(spec.livenessProbe as Record<string, unknown> | undefined, spec, nodeIP(node));
        if (rp) b.readiness = { probe: rp, counter: new ProbeCounter(rp, false) };
        if (lp) b.liveness = { probe: lp, counter: new ProbeCounter(lp, true) };
      }
      return b;
    };
    for (const r of plan?.initContainers ?? []) this.init.push(box(r, 'initContainers'));
    for (const r of plan?.containers ?? []) this.boxes.push(box(r, 'containers'));
    this.view = {
      hostIP: nodeIP(node), startTime: new Date().toISOString(), init: this.init.map((b) => b.view), containers: this.boxes.map((b) => b.view),
      ...(refused ? { failed: { reason: 'LabRefused', message: refused } } : {}),
    };
    this.status = new Coalescer(() => this.writeStatus(), (err) => this.log('warn', `status of ${this.key}: ${(err as Error).message}`), 50, 2000);
  }

  get key(): string {
    return `${this.pod.metadata.namespace}/${this.pod.metadata.name}`;
  }

  private async writeStatus(): Promise<void> {
    if (this.stopping) return;
    const now = new Date().toISOString();
    const since = (type: string, status: string) => {
      const k = `${type}=${status}`;
      if (!this.since.has(k)) {
        for (const s of ['True', 'False']) this.since.delete(`${type}=${s}`);
        this.since.set(k, now);
      }
      return this.since.get(k)!;
    };
    try {
      await this.rest.patch(POD, this.pod.metadata.name, this.pod.metadata.namespace, { status: podStatus(this.view, since) }, 'status');
    } catch (err) {
      if (!(err instanceof ApiError && err.code === 404)) throw err;
    }
  }

  private changed(): void {
    this.status.trigger();
  }

  /** Runs the Pod until stop(): never throws. */
  async start(): Promise<void> {
    this.changed();
    if (!this.plan) return;
    try {
      prepareHost(this.plan);
    } catch (err) {
      this.view.failed = { reason: 'HostPathFailed', message: (err as Error).message };
      this.log('error', `pod ${this.key}: ${(err as Error).message}`);
      this.changed();
      return;
    }
    for (const b of this.init) {
      while (!this.stopping) {
        const code = await this.runOnce(b);
        if (this.stopping) return;
        if (code === 0) break;
        b.view.restartCount++;
        const delay = restartDelayMs(b.view.restartCount);
        b.view.last = b.view.current;
        b.view.current = { state: 'waiting', reason: 'CrashLoopBackOff', message: `back-off ${delay / 1000}s restarting failed container ${b.run.container}` };
        this.log('warn', `pod ${this.key}: init container ${b.run.container} exited ${code}; restarting in ${delay / 1000} s`);
        this.changed();
        await this.pause(delay);
      }
      if (this.stopping) return;
    }
    for (const b of this.boxes) void this.keepRunning(b);
  }

  /** One run of a container, to its exit; its state and probes follow it. */
  private async runOnce(b: Box): Promise<number> {
    // plan.dirs[0] is the Pod's own directory.
    const logDir = join(this.plan!.dirs[0]!, 'logs');
    mkdirSync(logDir, { recursive: true });
    const fd = openSync(join(logDir, `${b.run.container}.log`), 'a');
    const child = spawn('podman', [...PODMAN_GLOBAL, 'run', '--rm', '--replace', ...b.run.args], { env: podmanEnv(), stdio: ['ignore', fd, fd] });
    closeSync(fd);
    const startedAt = new Date().toISOString();
    b.startedAtMs = Date.now();
    b.view.current = { state: 'running', startedAt };
    this.changed();
    b.exited = new Promise<number>((resolve) => {
      child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
      child.on('error', () => resolve(127));
    });
    if (!b.run.init) this.startProbes(b);
    const code = await b.exited;
    for (const t of b.timers.splice(0)) clearTimeout(t);
    b.view.ready = false;
    if (b.readiness) b.readiness.counter = new ProbeCounter(b.readiness.probe, false);
    if (b.liveness) b.liveness.counter = new ProbeCounter(b.liveness.probe, true);
    b.view.current = { state: 'terminated', exitCode: code, reason: code === 0 ? 'Completed' : 'Error', startedAt, finishedAt: new Date().toISOString() };
    this.changed();
    return code;
  }

  private async keepRunning(b: Box): Promise<void> {
    while (!this.stopping) {
      const code = await this.runOnce(b);
      if (this.stopping) return;
      const ranMs = Date.now() - (b.startedAtMs ?? Date.now());
      b.view.restartCount++;
      const delay = ranMs > BACKOFF_RESET_MS ? 0 : restartDelayMs(b.view.restartCount);
      b.view.last = b.view.current;
      b.view.current = { state: 'waiting', reason: 'CrashLoopBackOff', message: `back-off ${delay / 1000}s restarting failed container ${b.run.container}` };
      this.log('warn', `pod ${this.key}: container ${b.run.container} exited ${code}; restarting in ${delay / 1000} s`);
      await this.event('Warning', 'BackOff', `container ${b.run.container} exited ${code}; restarting in ${delay / 1000} s`);
      this.changed();
      await this.pause(delay);
    }
  }

  private startProbes(b: Box): void {
    // A container without a readiness probe is ready once it runs.
    if (!b.readiness) b.view.ready = true;
    const schedule = (p: { probe: HttpProbe; counter: ProbeCounter }, onResult: (flipped: boolean) => void, first: number) => {
      const tick = async () => {
        if (this.stopping || b.view.current.state !== 'running') return;
        const ok = await httpGetInNode(this.lab, this.node, p.probe);
        onResult(p.counter.record(ok));
        if (!this.stopping && b.view.current.state === 'running') b.timers.push(setTimeout(() => void tick(), p.probe.periodMs));
      };
      b.timers.push(setTimeout(() => void tick(), first));
    };
    if (b.readiness) {
      const r = b.readiness;
      schedule(r, (flipped) => {
        if (!flipped) return;
        b.view.ready = r.counter.passing;
        this.log('info', `pod ${this.key}: container ${b.run.container} ${r.counter.passing ? 'ready' : 'not ready'}`);
        this.changed();
      }, r.probe.initialDelayMs || 500);
    }
    if (b.liveness) {
      const l = b.liveness;
      schedule(l, (flipped) => {
        if (!flipped || l.counter.passing) return;
        this.log('warn', `pod ${this.key}: container ${b.run.container} failed its liveness probe; restarting it`);
        void this.event('Warning', 'Unhealthy', `Liveness probe failed ${l.probe.failureThreshold} times: container ${b.run.container} will be restarted`);
        void stopContainer(b.run.name, this.grace());
      }, l.probe.initialDelayMs || l.probe.periodMs);
    }
  }

  private grace(): number {
    return Number(this.pod.spec?.terminationGracePeriodSeconds ?? 30);
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async event(type: string, reason: string, message: string): Promise<void> {
    const ns = this.pod.metadata.namespace ?? 'default';
    const now = new Date().toISOString();
    await this.rest.create(EVENT, {
      apiVersion: 'v1', kind: 'Event',
      metadata: { name: `${this.pod.metadata.name}.${Date.now().toString(16)}${Math.random().toString(16).slice(2, 6)}`, namespace: ns },
      involvedObject: { apiVersion: 'v1', kind: 'Pod', name: this.pod.metadata.name, namespace: ns, uid: this.pod.metadata.uid },
      type, reason, message, source: { component: 'sluice-lab-kubelet', host: this.node }, firstTimestamp: now, lastTimestamp: now, count: 1,
    }).catch(() => undefined);
  }

  /** Stops every container (SIGTERM, SIGKILL after the grace period) and waits until they exited. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.status.stop();
    this.wake?.();
    const all = [...this.init, ...this.boxes];
    for (const b of all) for (const t of b.timers.splice(0)) clearTimeout(t);
    await Promise.all(all.map(async (b) => {
      if (b.view.current.state !== 'running') return;
      // Again while it runs: a container podman was still creating is not there to stop the first time.
      for (const end = Date.now() + (this.grace() + 30) * 1000; Date.now() < end;) {
        await stopContainer(b.run.name, this.grace());
        const exited = await Promise.race([b.exited!.then(() => true), sleep(2000).then(() => false)]);
        if (exited) return;
      }
      this.log('error', `pod ${this.key}: container ${b.run.container} did not stop`);
    }));
  }
}

/** Directories, files and checks a plan needs on the host before any container starts. */
function prepareHost(plan: PodRunPlan): void {
  for (const d of plan.dirs) mkdirSync(d, { recursive: true });
  for (const f of plan.touch) if (!existsSync(f)) {
    mkdirSync(dirname(f), { recursive: true });
    writeFileSync(f, '');
  }
  for (const p of plan.mustExist) if (!existsSync(p)) throw new Error(`hostPath ${p} does not exist on the node`);
  for (const d of plan.dirsIfMissing) if (!existsSync(d)) mkdirSync(d, { recursive: true });
  for (const f of plan.files) {
    mkdirSync(dirname(f.path), { recursive: true });
    writeFileSync(f.path, f.content);
    chmodSync(f.path, f.mode);
  }
}

async function stopContainer(name: string, graceSeconds: number): Promise<void> {
  await run('podman', [...PODMAN_GLOBAL, 'stop', '--ignore', '-t', String(graceSeconds), name], { env: podmanEnv(), allowFail: true, timeoutMs: (graceSeconds + 20) * 1000 });
}

/** An httpGet probe sent from inside the node's network namespace: 200-399 passes (HTTPS: the certificate is not checked, as the kubelet does). */
async function httpGetInNode(lab: string, node: string, p: HttpProbe): Promise<boolean> {
  const url = `${p.scheme === 'HTTPS' ? 'https' : 'http'}://${p.host.includes(':') ? `[${p.host}]` : p.host}:${p.port}${p.path.startsWith('/') ? '' : '/'}${p.path}`;
  const r = await run('ip', ['netns', 'exec', nodeNetns(lab, node), 'curl', '-s', '-k', '-o', '/dev/null', '-w', '%{http_code}', '--max-time', String(p.timeoutMs / 1000), url], { allowFail: true, timeoutMs: p.timeoutMs + 5000 });
  const code = Number(r.stdout.trim());
  return code >= 200 && code < 400;
}

/** Removes every container the lab's podman kubelets started (by label), e.g. at `down`. */
export async function removeLabContainers(lab: string): Promise<string[]> {
  const ps = await run('podman', [...PODMAN_GLOBAL, 'ps', '-a', '-q', '--filter', `label=io.sluice.lab=${lab}`], { env: podmanEnv(), allowFail: true });
  const ids = ps.exitCode === 0 ? ps.stdout.split('\n').map((s) => s.trim()).filter(Boolean) : [];
  if (ids.length) await run('podman', [...PODMAN_GLOBAL, 'rm', '-f', '-t', '5', ...ids], { env: podmanEnv(), allowFail: true, timeoutMs: 60_000 });
  return ids;
}

export function startPodmanKubelet(lab: string, node: string, kc: k8s.KubeConfig, rest: RestClient, log: Log, opts: PodmanKubeletOptions): Controller {
  const workers = new Map<string, PodWorker>();
  const configMaps = startInformer(kc, rest, CONFIGMAP, () => coalescer.trigger());
  const sync = async (): Promise<void> => {
    const want = new Map<string, KubeObject>();
    for (const p of pods.list()) {
      if (p.spec?.nodeName === node && isImagePod(p) && !isTerminating(p)) want.set(String(p.metadata.uid), p);
    }
    // Stop first: a node runs the next Pod of a DaemonSet only once the previous one is gone (and a
    // host-network Pod's ports are free again).
    for (const [uid, w] of workers) {
      if (want.has(uid)) continue;
      log('info', 'stopping pod', { pod: w.key, node });
      await w.stop();
      workers.delete(uid);
      log('info', 'pod stopped', { pod: w.key, node });
    }
    let waiting = false;
    for (const [uid, pod] of want) {
      if (workers.has(uid)) continue;
      let plan: PodRunPlan | undefined;
      let refused: string | undefined;
      try {
        plan = planPodRun(pod, nodeDirs(lab, node, uid), {
          configMaps: (ns, name) => configMaps.get(name, ns)?.data as Record<string, string> | undefined,
          // Bound to this Pod and Node, as a kubelet's projected token is: the API server reports both
          // in a TokenReview (how the sluice-controller knows which Node an agent serves).
          serviceAccountToken: (ns, name) => serviceAccountToken(opts.serviceAccountKey, ns, name, { podName: String(pod.metadata.name), podUid: uid, nodeName: node }),
          caCert: opts.caCert,
        });
      } catch (err) {
        if (err instanceof PodInputMissing) {
          // Like a kubelet: the Pod waits (ContainerCreating) until the object appears.
          log('warn', `pod ${pod.metadata.namespace}/${pod.metadata.name} waits: ${err.message}`, { node });
          waiting = true;
          continue;
        }
        if (!(err instanceof PodSpecError)) throw err;
        refused = err.message;
        log('error', `refused: ${err.message}`, { node });
      }
      const w = new PodWorker(pod, lab, node, rest, log, plan, refused);
      workers.set(uid, w);
      log('info', 'starting pod', { pod: w.key, node });
      void w.start();
    }
    if (waiting) setTimeout(() => coalescer.trigger(), 2000).unref();
  };
  const coalescer = new Coalescer(sync, (err) => log('error', `podman kubelet on ${node}: ${(err as Error).message}`), 30, 2000);
  const pods = startInformer(kc, rest, POD, (_ev, pod) => {
    if (isImagePod(pod)) coalescer.trigger();
  }, { fieldSelector: `spec.nodeName=${node}` });
  const synced = Promise.all([pods.synced, configMaps.synced]).then(() => coalescer.trigger());
  return {
    synced,
    // A kubelet that stops leaves its containers running (`down` removes them).
    stop: async () => {
      coalescer.stop();
      await Promise.all([pods.stop(), configMaps.stop()]);
    },
  };
}

/** For tests and `sluice-lab` diagnostics: the log of an image Pod's container on a node. */
export function podContainerLog(lab: string, node: string, podUid: string, container: string): string {
  const file = join(nodePodsDir(lab, node), podUid, 'logs', `${container}.log`);
  return existsSync(file) ? readFileSync(file, 'utf8') : '';
}
