/**
 * The lab's DaemonSet controller (adapter around lab/cluster/daemonset.ts): watches DaemonSets, Nodes and
 * Pods, creates and deletes the DaemonSet's Pods as planDaemonSet says and writes its status. Pods
 * whose DaemonSet is gone are deleted (the garbage collector's part). A DaemonSet the lab cannot
 * honour gets no Pods; the reason is logged and recorded as an Event on it.
 */
import type * as k8s from '@kubernetes/client-node';
import type { Controller } from './controllers.js';
import { controllingDaemonSet, daemonSetPod, daemonSetProblems, isOwnedBy, planDaemonSet } from './daemonset.js';
import { isTerminating } from './endpointslices.js';
import { podNameSuffix } from './owners.js';
import { startInformer } from './informers.js';
import { resolveKind } from '../kinds.js';
import { deepEqual } from '../apiserver/patch.js';
import { ignore404, recordEvent, type RestClient } from '../restclient.js';
import { KeyedQueue, type Log } from './workqueue.js';

const DS = resolveKind('daemonsets');
const POD = resolveKind('pods');
const NODE = resolveKind('nodes');

export function startDaemonSetController(kc: k8s.KubeConfig, rest: RestClient, log: Log): Controller {
  const refusedLogged = new Map<string, string>();
  const queue = new KeyedQueue(
    async (key) => {
      const [ns, name] = key.split('/') as [string, string];
      const ds = daemonsets.get(name, ns);
      if (!ds) {
        // Its Pods go with it.
        for (const p of pods.list(ns)) {
          if (controllingDaemonSet(p) === name) await ignore404(() => rest.delete(POD, p.metadata.name, ns));
        }
        return;
      }
      const problems = daemonSetProblems(ds);
      if (problems.length) {
        const message = `DaemonSet ${key} refused by the lab: ${problems.join('; ')}`;
        if (refusedLogged.get(key) !== message) {
          refusedLogged.set(key, message);
          log('error', message);
          await recordEvent(rest, { ...ds, kind: 'DaemonSet' }, { type: 'Warning', reason: 'LabRefused', message, component: 'sluice-lab-daemonset-controller' });
        }
        return;
      }
      refusedLogged.delete(key);
      const owned = pods.list(ns).filter((p) => isOwnedBy(p, ds) && !isTerminating(p));
      const plan = planDaemonSet(ds, nodes.list(), owned);
      for (const d of plan.delete) {
        log('info', 'deleting pod', { daemonset: key, pod: d.name, node: d.node, why: d.why });
        await ignore404(() => rest.delete(POD, d.name, ns));
      }
      for (const node of plan.create) {
        const pod = daemonSetPod(ds, node, podNameSuffix());
        await rest.create(POD, pod);
        log('info', 'created pod', { daemonset: key, pod: pod.metadata.name, node });
      }
      if (!deepEqual(ds.status ?? {}, { ...(ds.status ?? {}), ...plan.status })) {
        await ignore404(() => rest.patch(DS, name, ns, { status: plan.status }, 'status'));
      }
    },
    (key, err) => {
      log('error', `daemonset ${key}: ${(err as Error).message}`);
      setTimeout(() => queue.enqueue(key), 1000);
    },
    2,
  );
  const ready = (): Promise<void> => Promise.all([daemonsets.synced, nodes.synced, pods.synced]).then(() => undefined);
  const enqueue = (key: string): void => void ready().then(() => queue.enqueue(key));
  const all = (): void => {
    for (const ds of daemonsets.list()) enqueue(`${ds.metadata.namespace}/${ds.metadata.name}`);
  };
  const daemonsets = startInformer(kc, rest, DS, (_ev, ds) => enqueue(`${ds.metadata.namespace}/${ds.metadata.name}`));
  const nodes = startInformer(kc, rest, NODE, () => all());
  const pods = startInformer(kc, rest, POD, (_ev, pod) => {
    const owner = controllingDaemonSet(pod);
    if (owner) enqueue(`${pod.metadata.namespace}/${owner}`);
  });
  return {
    synced: ready().then(all),
    stop: async () => void (await Promise.all([daemonsets.stop(), nodes.stop(), pods.stop()])),
  };
}
