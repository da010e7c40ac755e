/**
 * The Pod objects the policy engine sees: the API server's Pods, with this node's Pods completed
 * by what CNI ADD knows before the API does (the IPs from prevResult). A local attachment wins over
 * the API's addresses (the API may still show a previous sandbox's IP); an attachment whose Pod the
 * API has not shown yet becomes a minimal Pod until it does. Pure.
 */
import type { KubeObject } from '../policy/types.js';

export interface LocalPod {
  namespace: string;
  name: string;
  ips: string[];
}

export const podRefKey = (namespace: string, name: string): string => `${namespace}/${name}`;

/** A Pod status's address fields for these addresses, as the kubelet writes them. */
export const statusAddresses = (ips: readonly string[]): { podIP: string | undefined; podIPs: { ip: string }[] } => ({ podIP: ips[0], podIPs: ips.map((ip) => ({ ip })) });

export class PodView {
  private readonly api = new Map<string, KubeObject>();
  private readonly local = new Map<string, LocalPod>();

  constructor(private readonly nodeName: string) {}

  /** Records an API Pod; returns the object to feed the engine. */
  setApi(obj: KubeObject): KubeObject {
    const key = podRefKey(obj.metadata.namespace ?? 'default', obj.metadata.name);
    this.api.set(key, obj);
    return this.effective(key)!;
  }

  /** Forgets an API Pod; returns what the engine should now hold for it (undefined = remove). */
  removeApi(namespace: string, name: string): KubeObject | undefined {
    const key = podRefKey(namespace, name);
    this.api.delete(key);
    return this.effective(key);
  }

  setLocal(p: LocalPod): KubeObject {
    const key = podRefKey(p.namespace, p.name);
    this.local.set(key, { ...p, ips: [...p.ips] });
    return this.effective(key)!;
  }

  removeLocal(namespace: string, name: string): KubeObject | undefined {
    const key = podRefKey(namespace, name);
    this.local.delete(key);
    return this.effective(key);
  }

  hasApi(namespace: string, name: string): boolean {
    return this.api.has(podRefKey(namespace, name));
  }

  /** The merged Pod for a key, or undefined when neither side knows it. */
  effective(key: string): KubeObject | undefined {
    const api = this.api.get(key);
    const local = this.local.get(key);
    if (!local) return api;
    const addresses = statusAddresses(local.ips);
    if (!api) {
      return {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: local.namespace, name: local.name },
        spec: { nodeName: this.nodeName },
        status: { phase: 'Running', ...addresses },
      };
    }
    const spec = { ...(api.spec ?? {}) } as Record<string, unknown>;
    if (!spec.nodeName) spec.nodeName = this.nodeName;
    return { ...api, spec, status: { ...(api.status ?? {}), ...addresses } } as KubeObject;
  }
}
