/**
 * Attaches this node's running Pods that cross no bridge (sluice installed on a busy node, or Pods
 * created while the chain was broken): lists the node's Pods, matches them to the runtime's CNI
 * cache (daemon/node/adoption.ts decides, pure) and attaches each one. Its I/O is injected; the agent's
 * schedules (daemon/node/schedules.ts) say when it runs.
 */
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { type AdoptionStatus, type NodePod, planAdoption } from './adoption.js';
import type { Clock } from '../clock.js';
import { readCniCache } from '../cni/runtime-cache.js';
import type { PodRequest } from '../cni/server.js';
import type { NodeApi } from '../kube/node-api.js';
import type { SharedExclusiveLock } from '../lock.js';
import type { PodAttachment } from './attachment.js';
import type { NodeEvents } from './events.js';
import type { PodRegistry } from './pod-registry.js';

export interface PodAdopterDeps {
  nodeName: string;
  cniCacheDir: string;
  log: Logger;
  clock: Clock;
  /** The API server once connected; without it nothing is adopted. */
  api(): Pick<NodeApi, 'nodePodNetworkPods'> | undefined;
  /** The node is set up (bridge, flows, host networking): attaching can start. */
  ready(): boolean;
  /** The node's attached Pods (the attacher registers them). */
  pods: Pick<PodRegistry, 'has' | 'list'>;
  /** Shared by CNI operations; each adoption holds it exclusively. */
  lock: Pick<SharedExclusiveLock, 'runExclusive'>;
  /** Attaches a running Pod from its cached CNI result (real: PodAttacher.adopt). */
  attach(req: PodRequest): Promise<PodAttachment>;
  events: Pick<NodeEvents, 'record'>;
  pathExists(path: string): boolean;
}

export class PodAdopter {
  private st: AdoptionStatus = { adopted: 0, unattached: [] };
  private adopting?: Promise<void> | undefined;
  private adoptAgain?: string | undefined;
  private closed = false;

  constructor(private readonly d: PodAdopterDeps) {}

  /** What /status says: how many were adopted, and those that are not attached, with why. */
  status(): AdoptionStatus {
    return this.st;
  }

  /**
   * Attaches this node's running Pods that are not attached: at start-up, after a re-chain and at
   * every periodic resync. Each one is adopted under the exclusive lock (no CNI operation runs
   * meanwhile, so no ADD takes the OpenFlow port number its flows were installed for). Adopted Pods
   * and those that cannot be are named in the log, /status and an Event on the Pod. Calls while one
   * runs are folded into one more run after it.
   */
  adoptUnattached(reason: string): Promise<void> {
    if (this.adopting) {
      this.adoptAgain = reason;
      return this.adopting;
    }
    this.adopting = this.adoptOnce(reason).finally(() => {
      this.adopting = undefined;
      const again = this.adoptAgain;
      this.adoptAgain = undefined;
      if (again && !this.closed) void this.adoptUnattached(again);
    });
    return this.adopting;
  }

  /** Resolves once no run goes on and none is folded to come after it. */
  async settled(): Promise<void> {
    while (this.adopting) await this.adopting;
  }

  /** No adoption starts from now on. */
  close(): void {
    this.closed = true;
  }

  private async adoptOnce(reason: string): Promise<void> {
    const { d } = this;
    const api = d.api();
    if (this.closed || !api || !d.ready()) return;
    const { log } = d;
    const node = d.nodeName;
    let pods: NodePod[];
    try {
      pods = await api.nodePodNetworkPods(node);
    } catch (err) {
      log.warn({ reason, err: (err as Error).message }, 'adopt: could not list this node\'s Pods; unattached Pods are looked for again at the next resync');
      return;
    }
    const { entries, problems } = await readCniCache(d.cniCacheDir);
    if (problems.length) log.debug({ problems }, 'adopt: unusable CNI cache files');
    const attachedIps = new Set(d.pods.list().flatMap((p) => p.ips));
    const plan = planAdoption(pods, attachedIps, entries, (p) => d.pathExists(p), d.cniCacheDir);
    const cannot = [...plan.cannot];
    for (const { pod, entry } of plan.adopt) {
      const req: PodRequest = {
        containerId: entry.containerId, netns: entry.netns!, ifName: entry.ifName, podNamespace: pod.namespace, podName: pod.name,
        cniVersion: String(entry.result.cniVersion ?? '1.0.0'), networkName: entry.networkName, prevResult: entry.result, config: {},
      };
      try {
        const t0 = performance.now();
        // Attached meanwhile (its ADD went through sluice after all): nothing to adopt.
        const a = await d.lock.runExclusive(async () => (d.pods.has(req.containerId) ? undefined : d.attach(req)));
        if (!a) continue;
        this.st.adopted++;
        const ms = Math.round(performance.now() - t0);
        log.warn({ reason, pod: `${pod.namespace}/${pod.name}`, containerId: a.containerId, veth: a.hostVeth, ips: a.ips, ms }, 'adopt: a running Pod that crossed no bridge is now attached; policies apply to it from now on');
        void d.events.record(pod, 'Normal', 'SluiceAdopted', `sluice-agent on ${node} attached this running Pod to its bridge (${reason}); network policies apply to it from now on`);
      } catch (err) {
        cannot.push({ pod, reason: (err as Error).message });
      }
    }
    const before = new Set(this.st.unattached.map((u) => u.pod));
    this.st = {
      adopted: this.st.adopted,
      unattached: cannot.map(({ pod, reason: why }) => ({ pod: `${pod.namespace}/${pod.name}`, reason: why })),
      lastRun: { at: new Date(d.clock.now()).toISOString(), reason },
    };
    for (const { pod, reason: why } of cannot) {
      if (before.has(`${pod.namespace}/${pod.name}`)) continue;
      log.error({ pod: `${pod.namespace}/${pod.name}`, why }, 'adopt: a running Pod crosses no bridge and cannot be attached: no policy applies to it (re-create it)');
      void d.events.record(pod, 'Warning', 'SluiceNotEnforced', `sluice-agent on ${node} cannot attach this Pod to its bridge, so no network policy applies to it: ${why}. Re-creating the Pod attaches it.`);
    }
  }
}
