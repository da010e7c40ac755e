/**
 * Informers for the lab's controllers: @kubernetes/client-node ListWatch against the lab API
 * server, as real components use them. client-node stops an informer on any watch error other
 * than 410, so every informer here restarts itself after a short pause until stopped.
 */
import * as k8s from '@kubernetes/client-node';
import type { KubeObject } from '../../daemon/policy/types.js';
import { resourcePath, type ResourceKind } from '../kinds.js';
import type { RestClient } from '../restclient.js';

export interface LabInformer {
  readonly kind: ResourceKind;
  list(namespace?: string): KubeObject[];
  get(name: string, namespace?: string): KubeObject | undefined;
  /** Resolves once the first list has been received. */
  synced: Promise<void>;
  stop(): Promise<void>;
}

export type InformerEvent = 'add' | 'update' | 'delete';

export function kubeConfigFor(server: string, token?: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'lab', server, skipTLSVerify: true }],
    users: [{ name: 'lab', ...(token ? { token } : {}) }],
    contexts: [{ name: 'lab', cluster: 'lab', user: 'lab' }],
    currentContext: 'lab',
  });
  return kc;
}

export function startInformer(
  kc: k8s.KubeConfig,
  rest: RestClient,
  kind: ResourceKind,
  onEvent: (event: InformerEvent, obj: KubeObject) => void,
  opts: { labelSelector?: string; fieldSelector?: string; onError?: (err: unknown) => void } = {},
): LabInformer {
  const listFn = async (): Promise<k8s.KubernetesListObject<k8s.KubernetesObject>> => {
    const l = await rest.list(kind, { labelSelector: opts.labelSelector, fieldSelector: opts.fieldSelector });
    // client-node fills its cache right after this returns (same microtask run); report synced after that.
    setImmediate(markSynced);
    return l as unknown as k8s.KubernetesListObject<k8s.KubernetesObject>;
  };
  let markSynced: () => void = () => undefined;
  const synced = new Promise<void>((resolve) => (markSynced = resolve));
  const lw = new k8s.ListWatch<k8s.KubernetesObject>(resourcePath(kind), new k8s.Watch(kc), listFn, false, opts.labelSelector, opts.fieldSelector);
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  for (const ev of ['add', 'update', 'delete'] as const) lw.on(ev, (o) => onEvent(ev, o as unknown as KubeObject));
  lw.on('error', (err) => {
    if (stopped) return;
    opts.onError?.(err);
    timer = setTimeout(() => void lw.start().catch(() => undefined), 500);
  });
  void lw.start().catch((err) => {
    // The first list failed (server not reachable yet): the error handler above restarts it.
    opts.onError?.(err);
  });
  return {
    kind,
    synced,
    list: (ns) => lw.list(ns) as unknown as KubeObject[],
    get: (name, ns) => lw.get(name, ns) as unknown as KubeObject | undefined,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await lw.stop();
    },
  };
}
