/**
 * The lab's cluster-wide controllers, each a thin adapter around a pure decision:
 * - scheduler: Pods without spec.nodeName -> RoundRobin (lab/cluster/scheduling.ts) -> spec.nodeName
 * - EndpointSlice controller: Services + Pods -> desiredEndpointSlices/diffSlices (lab/cluster/endpointslices.ts)
 * They watch through informers and write through the REST client, like real controllers.
 */
import type * as k8s from '@kubernetes/client-node';
import type { KubeObject } from '../../daemon/policy/types.js';
import { desiredEndpointSlices, diffSlices, isManagedSlice, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL } from './endpointslices.js';
import { startInformer, type LabInformer } from './informers.js';
import { resolveKind } from '../kinds.js';
import { ApiError, type RestClient } from '../restclient.js';
import { NoFitError, RoundRobin, needsScheduling } from './scheduling.js';
import { KeyedQueue, type Log } from './workqueue.js';

const POD = resolveKind('pods');
const NODE = resolveKind('nodes');
const SERVICE = resolveKind('services');
const SLICE = resolveKind('endpointslices');

export interface Controller {
  synced: Promise<void>;
  stop(): Promise<void>;
}

const keyOf = (o: KubeObject): string => `${o.metadata.namespace ?? ''}/${o.metadata.name}`;

export function startScheduler(kc: k8s.KubeConfig, rest: RestClient, log: Log): Controller {
  const rr = new RoundRobin();
  const unschedulable = new Set<string>();
  let nodes: LabInformer;
  const queue = new KeyedQueue(
    async (key) => {
      const [ns, name] = key.split('/') as [string, string];
      const pod = pods.get(name, ns);
      if (!pod || !needsScheduling(pod)) {
        unschedulable.delete(key);
        return;
      }
      let node: string;
      try {
        node = rr.pick(pod, nodes.list(), pods.list());
      } catch (err) {
        if (!(err instanceof NoFitError)) throw err;
        if (!unschedulable.has(key)) log('warn', err.message, { pod: key });
        unschedulable.add(key);
        return; // retried when a Node changes or a Pod goes (its host ports with it)
      }
      unschedulable.delete(key);
      // The lab API server has no binding subresource: bind by setting spec.nodeName.
      await rest.patch(POD, name, ns, { spec: { nodeName: node } });
      log('info', 'scheduled', { pod: key, node });
    },
    (key, err) => log('error', `scheduling ${key} failed: ${(err as Error).message}`),
    1, // one at a time keeps round-robin order equal to creation order
  );
  nodes = startInformer(kc, rest, NODE, () => [...unschedulable].forEach((k) => queue.enqueue(k)));
  const pods = startInformer(kc, rest, POD, (ev, pod) => {
    if (ev !== 'delete' && needsScheduling(pod)) void nodes.synced.then(() => queue.enqueue(keyOf(pod)));
    if (ev === 'delete') [...unschedulable].forEach((k) => queue.enqueue(k));
  });
  return {
    synced: Promise.all([nodes.synced, pods.synced]).then(() => undefined),
    stop: async () => void (await Promise.all([nodes.stop(), pods.stop()])),
  };
}

export function startEndpointSliceController(kc: k8s.KubeConfig, rest: RestClient, log: Log): Controller {
  const queue = new KeyedQueue(
    async (key) => {
      const [ns, name] = key.split('/') as [string, string];
      const svc = services.get(name, ns);
      const existing = slices.list(ns).filter((s) => isManagedSlice(s) && s.metadata.labels?.[SERVICE_NAME_LABEL] === name);
      const desired = svc ? desiredEndpointSlices(svc, pods.list(ns)) : [];
      if (desired === null) return; // no selector: someone else's slices
      const diff = diffSlices(desired, existing);
      for (const s of diff.create) await ignoring(409, () => rest.create(SLICE, s));
      for (const s of diff.update) await ignoring(409, () => rest.update(SLICE, s), () => queue.enqueue(key));
      for (const s of diff.delete) await ignoring(404, () => rest.delete(SLICE, s.metadata.name, ns));
      if (diff.create.length + diff.update.length + diff.delete.length) {
        log('info', 'endpointslices synced', { service: key, created: diff.create.length, updated: diff.update.length, deleted: diff.delete.length });
      }
    },
    (key, err) => {
      log('error', `endpointslices for ${key} failed: ${(err as Error).message}`);
      setTimeout(() => queue.enqueue(key), 1000);
    },
    2,
  );
  const ready = (): Promise<void> => Promise.all([services.synced, pods.synced, slices.synced]).then(() => undefined);
  const enqueue = (key: string): void => void ready().then(() => queue.enqueue(key));
  const services = startInformer(kc, rest, SERVICE, (_ev, svc) => enqueue(keyOf(svc)));
  const pods = startInformer(kc, rest, POD, (_ev, pod) => {
    for (const svc of services.list(pod.metadata.namespace)) enqueue(keyOf(svc));
  });
  const slices = startInformer(
    kc,
    rest,
    SLICE,
    (_ev, s) => {
      const svc = s.metadata.labels?.[SERVICE_NAME_LABEL];
      if (svc) enqueue(`${s.metadata.namespace}/${svc}`);
    },
    { labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}` },
  );
  return {
    synced: ready(),
    stop: async () => void (await Promise.all([services.stop(), pods.stop(), slices.stop()])),
  };
}

async function ignoring(code: number, fn: () => Promise<unknown>, onIgnored?: () => void): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (err instanceof ApiError && err.code === code) onIgnored?.();
    else throw err;
  }
}
