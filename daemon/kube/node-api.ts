/**
 * The agent's node-side reads and writes of the API (the policy side watches through informers):
 * its Node's InternalIP, the Pods scheduled on the node (adoption at start-up), and Events on
 * Pods and policies. Plain JSON through KubeAccess.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { NodePod } from '../node/adoption.js';
import { KubeAccess } from './access.js';

const API_TIMEOUT_MS = 10_000;

/** The object an Event is about. */
export interface EventSubject {
  apiVersion?: string | undefined;
  kind: string;
  namespace?: string | undefined;
  name: string;
  uid?: string | undefined;
}

/** Pod fields the agent reads from the API (plain JSON, as served). */
interface ApiPod {
  metadata?: { namespace?: string; name?: string; uid?: string; deletionTimestamp?: string };
  spec?: { hostNetwork?: boolean };
  status?: { phase?: string; podIP?: string; podIPs?: { ip: string }[] };
}

/** The API server as the agent's node side needs it: this Node, this node's Pods, Events on objects. */
export class NodeApi {
  private constructor(
    private readonly api: KubeAccess,
    readonly server: string,
  ) {}

  static async connect(kubeconfig: string | undefined): Promise<NodeApi> {
    const api = KubeAccess.load(kubeconfig);
    return new NodeApi(api, api.server);
  }

  /** The Node's first InternalIP of each family. */
  async nodeInternalIPs(nodeName: string): Promise<{ nodeIP?: string; nodeIPv6?: string }> {
    const node = (await this.api.getJson(`/api/v1/nodes/${encodeURIComponent(nodeName)}`, API_TIMEOUT_MS)) as { status?: { addresses?: { type: string; address: string }[] } };
    const internal = (node.status?.addresses ?? []).filter((a) => a.type === 'InternalIP').map((a) => a.address);
    const v4 = internal.find((a) => isIPv4(a));
    const v6 = internal.find((a) => isIPv6(a));
    return { ...(v4 ? { nodeIP: v4 } : {}), ...(v6 ? { nodeIPv6: v6 } : {}) };
  }

  private async podsOfNode(nodeName: string): Promise<ApiPod[]> {
    const selector = encodeURIComponent(`spec.nodeName=${nodeName}`);
    const list = (await this.api.getJson(`/api/v1/pods?fieldSelector=${selector}`, API_TIMEOUT_MS)) as { items?: ApiPod[] };
    if (!Array.isArray(list.items)) throw new Error('listing Pods: the answer is not a list');
    return list.items;
  }

  /** "namespace/name" of every Pod the API schedules on this node. */
  async nodePods(nodeName: string): Promise<Set<string>> {
    return new Set((await this.podsOfNode(nodeName)).map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`));
  }

  /** This node's Pods on the Pod network (not hostNetwork, not finished or terminating) with their addresses. */
  async nodePodNetworkPods(nodeName: string): Promise<NodePod[]> {
    return (await this.podsOfNode(nodeName))
      .filter((p) => !p.spec?.hostNetwork && p.status?.podIP && p.status.phase !== 'Succeeded' && p.status.phase !== 'Failed' && !p.metadata?.deletionTimestamp)
      .map((p) => ({
        namespace: p.metadata?.namespace ?? '',
        name: p.metadata?.name ?? '',
        ips: [...new Set([p.status!.podIP!, ...(p.status?.podIPs ?? []).map((x) => x.ip)])],
      }));
  }

  /**
   * Records a Kubernetes Event on an object (best effort: the caller logs a failure). The Event
   * names the object by apiVersion, kind and uid as well as name: `kubectl describe` lists only
   * Events whose involvedObject carries the object's uid, so a Pod's is read when not given.
   */
  async objectEvent(nodeName: string, obj: EventSubject, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    const now = new Date();
    // A cluster-scoped object's Events live in "default", as the API server's own do.
    const namespace = obj.namespace ?? 'default';
    let { uid, apiVersion } = obj;
    if (obj.kind === 'Pod') {
      apiVersion = 'v1';
      if (!uid && obj.namespace) {
        const path = `/api/v1/namespaces/${encodeURIComponent(obj.namespace)}/pods/${encodeURIComponent(obj.name)}`;
        const pod = (await this.api.getJson(path, API_TIMEOUT_MS).catch(() => undefined)) as ApiPod | undefined;
        uid = pod?.metadata?.uid;
      }
    }
    const at = now.toISOString().replace(/\.\d{3}Z$/, 'Z');
    await this.api.postJson(
      `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`,
      {
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { generateName: `${obj.name}.`, namespace },
        involvedObject: { ...(apiVersion ? { apiVersion } : {}), kind: obj.kind, ...(obj.namespace ? { namespace: obj.namespace } : {}), name: obj.name, ...(uid ? { uid } : {}) },
        type,
        reason,
        message,
        source: { component: 'sluice-agent', host: nodeName },
        reportingComponent: 'sluice-agent',
        reportingInstance: nodeName,
        firstTimestamp: at,
        lastTimestamp: at,
        count: 1,
      },
      API_TIMEOUT_MS,
    ).catch((err: Error) => {
      throw new Error(`recording an Event on ${obj.kind} ${obj.namespace ? `${obj.namespace}/` : ''}${obj.name}: ${err.message}`);
    });
  }
}
