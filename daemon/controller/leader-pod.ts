/**
 * Which replica the Service sends agents to: the leader's Pod carries a label the Service selects
 * on. Both replicas stay Ready (each computes every view, so a rollout never waits on a standby),
 * and the label moves with the Lease: the new leader sets it on its own Pod and removes it from
 * any other (a leader that died keeps its Pod, and the label, until it is replaced).
 *
 * The label is kept converged, not set once: a leader whose label write failed (the API server
 * busy during the takeover) would otherwise lead with no Pod behind the Service, and the agents
 * would wait until the next change of leadership.
 */
import { BoundedFrequencyRunner } from '../enforcement/bounded-frequency-runner.js';
import { type Clock, realClock } from '../clock.js';
import { KubeApiError, type KubeAccess } from '../kube/access.js';

export const LEADER_LABEL = 'sluice.dev/controller-leader';

type Io = Pick<KubeAccess, 'getJson' | 'patchJson'>;

const podPath = (ns: string, pod: string) => `/api/v1/namespaces/${encodeURIComponent(ns)}/pods/${encodeURIComponent(pod)}`;

async function setLabel(io: Io, ns: string, pod: string, on: boolean): Promise<void> {
  try {
    // A merge patch with null removes the label.
    await io.patchJson(podPath(ns, pod), { metadata: { labels: { [LEADER_LABEL]: on ? 'true' : null } } }, 'application/merge-patch+json');
  } catch (err) {
    // A Pod already gone carries no label.
    if (!(on === false && err instanceof KubeApiError && err.statusCode === 404)) throw err;
  }
}

/**
 * Labels Pod `pod` as the leader's (and only it) when `leading`, else removes its label; writes
 * only what differs from the Pods as read. Resolves whether it wrote anything. The leader labels
 * its own Pod before it unlabels the others, so the Service never selects no Pod on its account.
 */
export async function labelLeaderPod(io: Io, ns: string, pod: string, leading: boolean): Promise<boolean> {
  const list = (await io.getJson(`/api/v1/namespaces/${encodeURIComponent(ns)}/pods?labelSelector=${encodeURIComponent(`${LEADER_LABEL}=true`)}`)) as { items?: { metadata: { name: string } }[] };
  const labelled = (list.items ?? []).map((p) => p.metadata.name);
  let wrote = false;
  if (leading !== labelled.includes(pod)) {
    await setLabel(io, ns, pod, leading);
    wrote = true;
  }
  if (leading) {
    for (const other of labelled) {
      if (other === pod) continue;
      await setLabel(io, ns, other, false);
      wrote = true;
    }
  }
  return wrote;
}

export interface LeaderPodLabelOptions {
  io: Io;
  namespace: string;
  /** This replica's Pod. */
  pod: string;
  clock?: Clock;
  /** After a failed write (default 2 000). */
  retryMs?: number;
  /** A converged label is read again this often, which also corrects a label someone else changed (default 30 000). */
  recheckMs?: number;
  log: (level: 'info' | 'warn', message: string) => void;
}

/** Keeps this replica's Pod labelled as the leader's exactly while it leads (see the header). */
export class LeaderPodLabel {
  private leading = false;
  private readonly runner: BoundedFrequencyRunner;

  constructor(private readonly opts: LeaderPodLabelOptions) {
    // The first run removes the label a restarted container of a former leader left on its Pod.
    this.runner = new BoundedFrequencyRunner({
      clock: opts.clock ?? realClock,
      minIntervalMs: opts.retryMs ?? 2_000,
      maxIntervalMs: opts.recheckMs ?? 30_000,
      run: () => this.converge(),
    });
    this.runner.request();
  }

  /** This replica now leads (or no longer does): its label follows at once. */
  set(leading: boolean): void {
    if (leading === this.leading) return;
    this.leading = leading;
    this.runner.request({ urgent: true });
  }

  close(): void {
    this.runner.close();
  }

  private async converge(): Promise<void> {
    const { io, namespace, pod, log } = this.opts;
    const leading = this.leading;
    try {
      if (await labelLeaderPod(io, namespace, pod, leading)) {
        log('info', leading ? `leader: Pod ${pod} labelled ${LEADER_LABEL}: it receives the agents` : `leader: Pod ${pod} unlabelled: it no longer receives the agents`);
      }
    } catch (err) {
      log('warn', `leader: could not ${leading ? 'label' : 'unlabel'} Pod ${namespace}/${pod} (${LEADER_LABEL}): ${(err as Error).message}; retrying`);
      this.runner.request();
    }
  }
}
