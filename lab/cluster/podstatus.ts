/**
 * What the lab's podman kubelet decides without touching anything (pure): restart back-off, probe
 * bookkeeping (periods, thresholds) and the Pod status it reports from its containers' states.
 */

type Obj = Record<string, unknown>;

/** CrashLoopBackOff as a kubelet does it: 10 s, doubled per restart, at most 5 min. */
export function restartDelayMs(restarts: number): number {
  return Math.min(300_000, 10_000 * 2 ** Math.max(0, restarts - 1));
}
/** A container that ran this long before exiting restarts without back-off history (kubelet: 10 min). */
export const BACKOFF_RESET_MS = 600_000;

export interface HttpProbe {
  scheme: 'HTTP' | 'HTTPS';
  host: string;
  port: number;
  path: string;
  initialDelayMs: number;
  periodMs: number;
  timeoutMs: number;
  failureThreshold: number;
  successThreshold: number;
}

/** A container's httpGet probe with Kubernetes' defaults; named ports resolve through the container's ports. */
export function httpProbe(probe: Obj | undefined, container: Obj, hostIP: string): HttpProbe | undefined {
  if (!probe) return undefined;
  const get = probe.httpGet as Obj;
  let port = get.port;
  if (typeof port === 'string' && !/^\d+$/.test(port)) {
    const named = ((container.ports ?? []) as Obj[]).find((p) => p.name === port);
    if (!named) throw new Error(`container ${String(container.name)}: probe port "${port}" is not one of its named ports`);
    port = named.containerPort;
  }
  const num = (v: unknown, d: number) => (typeof v === 'number' ? v : d);
  return {
    // A host-network Pod's probe without a host goes to the Pod IP, which is the node's.
    host: typeof get.host === 'string' ? get.host : hostIP,
    scheme: get.scheme === 'HTTPS' ? 'HTTPS' : 'HTTP',
    port: Number(port),
    path: typeof get.path === 'string' ? get.path : '/',
    initialDelayMs: num(probe.initialDelaySeconds, 0) * 1000,
    periodMs: num(probe.periodSeconds, 10) * 1000,
    timeoutMs: num(probe.timeoutSeconds, 1) * 1000,
    failureThreshold: num(probe.failureThreshold, 3),
    successThreshold: num(probe.successThreshold, 1),
  };
}

/** Consecutive results of one probe: when it flips (readiness) or trips (liveness). */
export class ProbeCounter {
  private successes = 0;
  private failures = 0;
  constructor(
    private readonly probe: Pick<HttpProbe, 'failureThreshold' | 'successThreshold'>,
    /** Readiness starts false, liveness true (a container is alive until proven otherwise). */
    public passing: boolean,
  ) {}

  /** Records one result; returns true when `passing` changed. */
  record(ok: boolean): boolean {
    if (ok) {
      this.failures = 0;
      this.successes++;
      if (!this.passing && this.successes >= this.probe.successThreshold) return (this.passing = true);
    } else {
      this.successes = 0;
      this.failures++;
      if (this.passing && this.failures >= this.probe.failureThreshold) return !(this.passing = false);
    }
    return false;
  }
}

export type ContainerState =
  | { state: 'waiting'; reason: string; message?: string }
  | { state: 'running'; startedAt: string }
  | { state: 'terminated'; exitCode: number; reason: string; startedAt?: string; finishedAt: string };

export interface ContainerView {
  name: string;
  image: string;
  current: ContainerState;
  last?: ContainerState;
  restartCount: number;
  ready: boolean;
}

export interface PodView {
  hostIP: string;
  startTime: string;
  /** Set when the Pod cannot run at all (its spec was refused): phase Failed. */
  failed?: { reason: string; message: string };
  init: ContainerView[];
  containers: ContainerView[];
}

function stateObject(s: ContainerState): Obj {
  switch (s.state) {
    case 'waiting': return { waiting: { reason: s.reason, ...(s.message ? { message: s.message } : {}) } };
    case 'running': return { running: { startedAt: s.startedAt } };
    case 'terminated': return { terminated: { exitCode: s.exitCode, reason: s.reason, ...(s.startedAt ? { startedAt: s.startedAt } : {}), finishedAt: s.finishedAt } };
  }
}

const containerStatus = (c: ContainerView): Obj => ({
  name: c.name,
  image: c.image,
  imageID: '',
  ready: c.ready,
  started: c.current.state === 'running',
  restartCount: c.restartCount,
  state: stateObject(c.current),
  ...(c.last ? { lastState: stateObject(c.last) } : {}),
});

/**
 * The Pod status from its containers' states, as a kubelet reports it. Transition times are left
 * to the caller (`since`, by condition type), so an unchanged condition keeps its time.
 */
export function podStatus(view: PodView, since: (type: string, status: string) => string): Obj {
  const initialized = view.init.every((c) => c.current.state === 'terminated' && c.current.exitCode === 0);
  const containersReady = initialized && view.containers.every((c) => c.ready);
  const cond = (type: string, ok: boolean, reason?: string) => ({
    type, status: ok ? 'True' : 'False', lastProbeTime: null, lastTransitionTime: since(type, ok ? 'True' : 'False'),
    ...(ok || !reason ? {} : { reason }),
  });
  const phase = view.failed ? 'Failed' : initialized && view.containers.some((c) => c.current.state === 'running' || c.restartCount > 0) ? 'Running' : 'Pending';
  return {
    phase,
    ...(view.failed ? { reason: view.failed.reason, message: view.failed.message } : {}),
    hostIP: view.hostIP,
    hostIPs: [{ ip: view.hostIP }],
    // hostNetwork: the Pod's IP is its node's.
    podIP: view.hostIP,
    podIPs: [{ ip: view.hostIP }],
    startTime: view.startTime,
    conditions: [
      cond('PodScheduled', true),
      cond('Initialized', initialized, 'ContainersNotInitialized'),
      cond('ContainersReady', containersReady, 'ContainersNotReady'),
      cond('Ready', containersReady, 'ContainersNotReady'),
    ],
    initContainerStatuses: view.init.map(containerStatus),
    containerStatuses: view.containers.map(containerStatus),
  };
}

/** READY column text, "1/2". */
export const readyText = (status: Obj | undefined): string => {
  const cs = (status?.containerStatuses ?? []) as { ready?: boolean }[];
  return `${cs.filter((c) => c.ready).length}/${cs.length}`;
};
