/**
 * The lab's Deployment controller (adapter around lab/cluster/deployment.ts): watches Deployments and
 * Pods, creates and deletes the Deployment's Pods as planDeployment says and writes its status. Pods
 * whose Deployment is gone are deleted (the garbage collector's part). A Deployment the lab cannot
 * honour gets no Pods; the reason is logged and recorded as an Event on it.
 */
import type * as k8s from '@kubernetes/client-node';
import type { Controller } from './controllers.js';
import { deploymentPod, deploymentProblems, isDeploymentPod, planDeployment } from './deployment.js';
import { isTerminating } from './endpointslices.js';
import { startInformer } from './informers.js';
import { controllerOf, podNameSuffix } from './owners.js';
import { resolveKind } from '../kinds.js';
import { deepEqual } from '../apiserver/patch.js';
import { ignore404, recordEvent, type RestClient } from '../restclient.js';
import { KeyedQueue, type Log } from './workqueue.js';

const DEPLOYMENT = resolveKind('deployments');
const POD = resolveKind('pods');

export function startDeploymentController(kc: k8s.KubeConfig, rest: RestClient, log: Log): Controller {
  const refusedLogged = new Map<string, string>();
  const queue = new KeyedQueue(
    async (key) => {
      const [ns, name] = key.split('/') as [string, string];
      const d = deployments.get(name, ns);
      if (!d) {
        for (const p of pods.list(ns)) {
          if (controllerOf(p, 'Deployment') === name) await ignore404(() => rest.delete(POD, p.metadata.name, ns));
        }
        return;
      }
      const problems = deploymentProblems(d);
      if (problems.length) {
        const message = `Deployment ${key} refused by the lab: ${problems.join('; ')}`;
        if (refusedLogged.get(key) !== message) {
          refusedLogged.set(key, message);
          log('error', message);
          await recordEvent(rest, { ...d, kind: 'Deployment' }, { type: 'Warning', reason: 'LabRefused', message, component: 'sluice-lab-deployment-controller' });
        }
        return;
      }
      refusedLogged.delete(key);
      const owned = pods.list(ns).filter((p) => isDeploymentPod(p, d) && !isTerminating(p));
      const plan = planDeployment(d, owned);
      for (const p of plan.delete) {
        log('info', 'deleting pod', { deployment: key, pod: p.name, why: p.why });
        await ignore404(() => rest.delete(POD, p.name, ns));
      }
      for (let i = 0; i < plan.create; i++) {
        const pod = deploymentPod(d, podNameSuffix());
        await rest.create(POD, pod);
        log('info', 'created pod', { deployment: key, pod: pod.metadata.name });
      }
      if (!deepEqual(d.status ?? {}, { ...(d.status ?? {}), ...plan.status })) {
        await ignore404(() => rest.patch(DEPLOYMENT, name, ns, { status: plan.status }, 'status'));
      }
    },
    (key, err) => {
      log('error', `deployment ${key}: ${(err as Error).message}`);
      setTimeout(() => queue.enqueue(key), 1000);
    },
    2,
  );
  const ready = (): Promise<void> => Promise.all([deployments.synced, pods.synced]).then(() => undefined);
  const enqueue = (key: string): void => void ready().then(() => queue.enqueue(key));
  const deployments = startInformer(kc, rest, DEPLOYMENT, (_ev, d) => enqueue(`${d.metadata.namespace}/${d.metadata.name}`));
  const pods = startInformer(kc, rest, POD, (_ev, pod) => {
    const owner = controllerOf(pod, 'Deployment');
    if (owner) enqueue(`${pod.metadata.namespace}/${owner}`);
  });
  return {
    synced: ready().then(() => {
      for (const d of deployments.list()) enqueue(`${d.metadata.namespace}/${d.metadata.name}`);
    }),
    stop: async () => void (await Promise.all([deployments.stop(), pods.stop()])),
  };
}
