/**
 * The kubelet of one lab node: watches its Pods (fieldSelector spec.nodeName), creates each
 * Pod's sandbox through the node's CNI conflist (lab/net/sandbox.ts) with servers on the declared
 * container ports, and reports status like a kubelet (phase, podIP(s), hostIP, conditions) through
 * the status subresource. Deleted Pods are torn down. On start it also removes sandboxes whose
 * Pods no longer exist (a restart after deletes happened while it was down).
 */
import type * as k8s from '@kubernetes/client-node';
import type { KubeObject } from '../../daemon/policy/types.js';
import { isImagePod } from './owners.js';
import { isTerminating } from './endpointslices.js';
import { startInformer } from './informers.js';
import { resolveKind } from '../kinds.js';
import { nodeIP } from '../net/names.js';
import { createPodSandbox, deletePodSandbox, listPodSandboxes, readPodSandbox, type PodSandbox } from '../net/sandbox.js';
import type { RestClient } from '../restclient.js';
import { servedPorts } from '../scenario.js';
import type { Controller } from './controllers.js';
import { KeyedQueue, type Log } from './workqueue.js';

const POD = resolveKind('pods');
const MAX_ATTEMPTS = 4;

export interface KubeletOptions {
  /** Awaited before the first sandbox is created (e.g. until the node's sluice agent listens). */
  beforeFirstPod?: () => Promise<void>;
}

/** The status a kubelet reports for a running Pod (pure). */
export function runningStatus(pod: KubeObject, sandbox: Pick<PodSandbox, 'ips'>, node: string, now: string): Record<string, unknown> {
  const cond = (type: string) => ({ type, status: 'True', lastProbeTime: null, lastTransitionTime: now });
  const hostIP = nodeIP(node);
  return {
    phase: 'Running',
    podIP: sandbox.ips[0],
    podIPs: sandbox.ips.map((ip) => ({ ip })),
    hostIP,
    hostIPs: [{ ip: hostIP }],
    startTime: pod.status?.startTime ?? now,
    conditions: [cond('PodReadyToStartContainers'), cond('Initialized'), cond('Ready'), cond('ContainersReady'), cond('PodScheduled')],
    containerStatuses: ((pod.spec?.containers ?? []) as { name: string; image?: string }[]).map((c) => ({
      name: c.name,
      image: c.image ?? 'sluice-lab/workload',
      imageID: '',
      ready: true,
      started: true,
      restartCount: 0,
      state: { running: { startedAt: now } },
    })),
  };
}

/**
 * A lab Pod whose application talks from its first moment (as a container that connects at
 * start-up): "udp,IP,PORT,EVERY_MS,FOR_MS" (lab/net/workload.ts --talk).
 */
export const TALK_ANNOTATION = 'lab.sluice.dev/talk-on-start';

export function startKubelet(lab: string, node: string, kc: k8s.KubeConfig, rest: RestClient, log: Log, opts: KubeletOptions = {}): Controller {
  let gate: Promise<void> | undefined;
  const failures = new Map<string, number>();
  const queue = new KeyedQueue(
    async (key) => {
      const [ns, name] = key.split('/') as [string, string];
      const pod = pods.get(name, ns);
      // DaemonSet and Deployment Pods run from their images with podman (lab/cluster/podman-kubelet.ts), not as workload sandboxes.
      if (pod && isImagePod(pod)) return;
      if (!pod || isTerminating(pod) || pod.spec?.nodeName !== node) {
        const sandbox = readPodSandbox(lab, ns, name);
        if (sandbox && sandbox.node === node) {
          await deletePodSandbox({ lab, namespace: ns, name });
          log('info', 'pod sandbox removed', { pod: key, node });
        }
        failures.delete(key);
        return;
      }
      if (pod.status?.phase === 'Failed') return; // gave up on it (see below); delete and re-create to retry
      gate ??= opts.beforeFirstPod?.() ?? Promise.resolve();
      await gate;
      const sandbox = await createPodSandbox({
        lab,
        node,
        namespace: ns,
        name,
        hostNetwork: Boolean(pod.spec?.hostNetwork),
        ports: servedPorts(pod),
        ...(typeof pod.metadata.annotations?.[TALK_ANNOTATION] === 'string' ? { talk: pod.metadata.annotations[TALK_ANNOTATION] } : {}),
      });
      failures.delete(key);
      const ip = sandbox.ips[0];
      if (pod.status?.phase === 'Running' && pod.status?.podIP === ip && pod.status?.hostIP === nodeIP(node)) return;
      await rest.patch(POD, name, ns, { status: runningStatus(pod, sandbox, node, new Date().toISOString()) }, 'status');
      log('info', 'pod running', { pod: key, node, ip });
    },
    (key, err) => {
      const n = (failures.get(key) ?? 0) + 1;
      failures.set(key, n);
      const message = (err as Error).message;
      log('error', `pod ${key} on ${node}: ${message}`, { attempt: n });
      const [ns, name] = key.split('/') as [string, string];
      // Retried a few times with backoff (Pending), then reported as Failed so nobody waits forever.
      const phase = n < MAX_ATTEMPTS ? 'Pending' : 'Failed';
      void rest
        .patch(POD, name, ns, { status: { phase, reason: 'SandboxFailed', message, conditions: [{ type: 'Ready', status: 'False', reason: 'SandboxFailed', message }] } }, 'status')
        .catch(() => undefined);
      if (n < MAX_ATTEMPTS) setTimeout(() => queue.enqueue(key), 1000 * n);
    },
    4,
  );
  const pods = startInformer(kc, rest, POD, (_ev, pod) => queue.enqueue(`${pod.metadata.namespace}/${pod.metadata.name}`), {
    fieldSelector: `spec.nodeName=${node}`,
  });
  // Sandboxes left from Pods deleted while nobody watched.
  void pods.synced.then(() => {
    for (const s of listPodSandboxes(lab)) {
      if (s.node === node && !pods.get(s.name, s.namespace)) queue.enqueue(`${s.namespace}/${s.name}`);
    }
  });
  return { synced: pods.synced, stop: () => pods.stop() };
}
