/**
 * kube-proxy for one lab node: watches Services and EndpointSlices and converges the node
 * namespace's nat table through lab/net's iptables rendering (full resync per change burst).
 */
import type * as k8s from '@kubernetes/client-node';
import { startInformer } from './informers.js';
import { resolveKind } from '../kinds.js';
import { applyServiceRules } from '../net/service-nat.js';
import { nodeNetns } from '../net/names.js';
import type { RestClient } from '../restclient.js';
import { servicePortRules } from './service-rules.js';
import { Coalescer, type Log } from './workqueue.js';
import type { Controller } from './controllers.js';

export function startKubeProxy(lab: string, node: string, kc: k8s.KubeConfig, rest: RestClient, log: Log): Controller {
  const netns = nodeNetns(lab, node);
  let last = '';
  const sync = new Coalescer(
    async () => {
      const rules = servicePortRules(services.list(), slices.list());
      const fingerprint = JSON.stringify(rules);
      if (fingerprint === last) return;
      await applyServiceRules(netns, rules);
      last = fingerprint;
      log('info', 'service rules applied', { node, servicePorts: rules.length, endpoints: rules.reduce((n, r) => n + r.endpoints.length, 0) });
    },
    (err) => log('error', `kube-proxy ${node}: ${(err as Error).message}`),
  );
  const ready = (): Promise<void> => Promise.all([services.synced, slices.synced]).then(() => undefined);
  const trigger = (): void => void ready().then(() => sync.trigger());
  const services = startInformer(kc, rest, resolveKind('services'), trigger);
  const slices = startInformer(kc, rest, resolveKind('endpointslices'), trigger);
  void ready().then(() => sync.trigger(0));
  return {
    synced: ready(),
    stop: async () => {
      sync.stop();
      await Promise.all([services.stop(), slices.stop()]);
    },
  };
}
