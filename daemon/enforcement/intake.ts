/**
 * Event intake: what the engine is told. Informer events, and CNI ADD/DEL's local attachments,
 * become engine upserts and removes; the engine's ChangeSets go to `changed`. Pods are fed as the
 * PodView merges them (podview.ts) with only the addresses they hold against rival claims
 * (claims.ts); a Pod without an address is kept out of the engine. ServiceCIDR objects are no
 * policy input: they are only kept for the node's Service ranges.
 */
import type { Logger } from 'pino';
import type { PodAttachment } from '../node/attachment.js';
import type { KubeAccess } from '../kube/access.js';
import type { ChangeSet, PolicyEngine } from '../policy/engine.js';
import { podAddresses, podKey } from '../policy/cluster.js';
import type { KubeObject } from '../policy/types.js';
import { AddressClaims } from './claims.js';
import { PodView, podRefKey, statusAddresses } from './podview.js';
import type { WatchEvent } from './watch/clusterwatch.js';
import { SERVICE_CIDR_RESOURCE } from './watch/resources.js';
import { trimObject } from './watch/trim.js';

export interface IntakeOptions {
  engine: PolicyEngine;
  nodeName: string;
  log: Pick<Logger, 'warn' | 'error'>;
  /** Each engine ChangeSet. */
  changed(cs: ChangeSet): void;
  /** Changes taken in so far (recorded per Pod after it is fed, for podFedAt). */
  changes(): number;
  /** After each Pod event (realization questions are checked again). */
  podsChanged(): void;
  /** After each ServiceCIDR event. */
  serviceCidrsChanged(): void;
  /** The last valid version to feed before an object first seen (kept-versions.ts). */
  seedFor?(obj: KubeObject): KubeObject | undefined;
}

/** `obj` with exactly these addresses in its status (no published ones left to fall back on). */
function withAddresses(obj: KubeObject, ips: string[]): KubeObject {
  const { conditions: _published, ...status } = (obj.status ?? {}) as Record<string, unknown>;
  return { ...obj, status: { ...status, ...statusAddresses(ips) } } as KubeObject;
}

const isCoreKind = (o: { apiVersion: string; kind: string }, kind: string) => o.apiVersion === 'v1' && o.kind === kind;

export class PolicyIntake {
  private readonly engine: PolicyEngine;
  private readonly pods: PodView;
  /** Which Pod each address belongs to when two claim it (claims.ts). */
  private readonly claims = new AddressClaims();
  /** Pods that lost every address to a newer owner → their span when they did. */
  private readonly displaced = new Map<string, Map<string, string[]>>();
  /** Each Pod in the engine (cluster-wide) → the change count after it was last fed. */
  private readonly podFedSeq = new Map<string, number>();
  /** The cluster's ServiceCIDR objects by name. */
  private readonly serviceCidrs = new Map<string, KubeObject>();

  constructor(private readonly opts: IntakeOptions) {
    this.engine = opts.engine;
    this.pods = new PodView(opts.nodeName);
  }

  /** One object event (from the informers, or tests). */
  onWatchEvent(ev: WatchEvent): void {
    const o = ev.object;
    try {
      if (o.apiVersion === SERVICE_CIDR_RESOURCE.apiVersion && o.kind === SERVICE_CIDR_RESOURCE.kind) {
        // Not a policy input: the node's Service ranges (node/service-cidrs.ts).
        if (ev.type === 'upsert') this.serviceCidrs.set(o.metadata.name, o);
        else this.serviceCidrs.delete(o.metadata.name);
        this.opts.serviceCidrsChanged();
      } else if (isCoreKind(o, 'Pod')) {
        const ns = o.metadata.namespace ?? 'default';
        const obj = ev.type === 'upsert' ? this.pods.setApi(o) : this.pods.removeApi(ns, o.metadata.name);
        this.feedPod(obj ?? o, obj !== undefined);
      } else {
        this.feed(o, ev.type);
      }
    } catch (err) {
      this.opts.log.error({ kind: o.kind, name: o.metadata?.name, namespace: o.metadata?.namespace, err: (err as Error).message }, 'policy: event not applied');
    }
  }

  /** The ServiceCIDR objects received so far. */
  serviceCidrObjects(): KubeObject[] {
    return [...this.serviceCidrs.values()];
  }

  /**
   * CNI ADD: reads the Pod from the API if the informer has not shown it yet (its labels), then
   * feeds it with the attachment's IPs.
   */
  async attaching(pod: PodAttachment & { podName: string }, access: Pick<KubeAccess, 'getJson'> | undefined): Promise<void> {
    if (!this.pods.hasApi(pod.podNamespace, pod.podName) && access) {
      try {
        const path = `/api/v1/namespaces/${encodeURIComponent(pod.podNamespace)}/pods/${encodeURIComponent(pod.podName)}`;
        const read = (await access.getJson(path, 5000)) as KubeObject;
        read.apiVersion = 'v1';
        read.kind = 'Pod';
        const obj = trimObject(read);
        // Only if the informer still has not delivered it (it is newer when it has).
        if (!this.pods.hasApi(pod.podNamespace, pod.podName)) this.pods.setApi(obj);
      } catch (err) {
        this.opts.log.warn({ pod: `${pod.podNamespace}/${pod.podName}`, err: (err as Error).message }, 'policy: Pod not readable from the API at ADD; enforcing with what is known');
      }
    }
    this.attached(pod);
  }

  /** A local attachment (ADD, or found at start-up): the Pod is fed with its IPs. */
  attached(pod: PodAttachment & { podName: string }): void {
    this.feedPod(this.pods.setLocal({ namespace: pod.podNamespace, name: pod.podName, ips: pod.ips }), true);
  }

  /** CNI DEL: the Pod falls back to what the API says of it (or leaves the engine). */
  detached(pod: PodAttachment & { podName: string }): void {
    const obj = this.pods.removeLocal(pod.podNamespace, pod.podName);
    this.feedPod(obj ?? { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: pod.podNamespace, name: pod.podName } }, obj !== undefined);
  }

  /** The change count after Pod `ref` was last fed (undefined: not in the engine). */
  podFedAt(ref: string): number | undefined {
    return this.podFedSeq.get(ref);
  }

  /** The Pod that holds `ip` when Pods claim it (claims.ts). */
  addressOwner(ip: string): string | undefined {
    return this.claims.owner(ip);
  }

  /**
   * Where the rules of the Pods that claimed `ips` before Pod `ref` are (node → addresses): those
   * nodes must have let go of a reused address too.
   */
  previousSpans(ref: string, ips: readonly string[]): Map<string, string[]> {
    const previous = new Map<string, string[]>();
    for (const rival of this.claims.rivals(ref, ips)) {
      const [ns, name] = rival.split('/') as [string, string];
      const span = this.displaced.get(rival) ?? this.engine.podSpan(ns, name);
      for (const [node, addrs] of span) previous.set(node, [...new Set([...(previous.get(node) ?? []), ...addrs])]);
    }
    return previous;
  }

  /**
   * A Pod without an address (not started yet) cannot send or receive: it is kept out of the engine,
   * which would otherwise give it a made-up address (for offline scenarios) that the bridge would
   * then match on. hostNetwork Pods use their Node's addresses.
   */
  private feedPod(obj: KubeObject, present: boolean): void {
    const ref = podKey({ namespace: obj.metadata.namespace ?? 'default', name: obj.metadata.name });
    const hostNetwork = obj.spec?.hostNetwork === true;
    // Another Pod sharing an address (a reused one) may win or lose it now: fed again too (claims.ts).
    const rivals = present && !hostNetwork
      ? this.claims.set(ref, podAddresses(obj), { terminating: Boolean(obj.metadata.deletionTimestamp), created: String(obj.metadata.creationTimestamp ?? '') })
      : this.claims.remove(ref);
    this.feedHeld(ref, obj, present);
    for (const other of rivals) {
      const [ns, name] = other.split('/') as [string, string];
      const o = this.pods.effective(podRefKey(ns, name));
      if (o) this.feedHeld(other, o, true);
    }
    this.opts.podsChanged();
  }

  /** Feeds a Pod with the addresses it holds (all it claims, but those a rival won). */
  private feedHeld(ref: string, obj: KubeObject, present: boolean): void {
    let fed = obj;
    if (present && obj.spec?.hostNetwork !== true) {
      const claimed = podAddresses(obj);
      const held = this.claims.held(ref, claimed);
      if (held.length !== claimed.length) fed = withAddresses(obj, held);
      // Losing its last address takes it out of the engine: where its rules were is kept for the
      // new owner's ADD, whose nodes must let go of it (newpods/gate.ts).
      if (held.length === 0 && claimed.length > 0 && this.engine.cluster.pods.has(ref)) {
        const [ns, name] = ref.split('/') as [string, string];
        this.displaced.set(ref, this.engine.podSpan(ns, name));
      }
    }
    if (!present) this.displaced.delete(ref);
    const addressed = fed.spec?.hostNetwork === true || podAddresses(fed).length > 0;
    this.feed(fed, present && addressed ? 'upsert' : 'remove');
    if (present && addressed) this.podFedSeq.set(ref, this.opts.changes());
    else this.podFedSeq.delete(ref);
  }

  private feed(obj: KubeObject, type: 'upsert' | 'remove'): void {
    const seed = type === 'upsert' && !isCoreKind(obj, 'Pod') ? this.opts.seedFor?.(obj) : undefined;
    if (seed) this.opts.changed(this.engine.upsert(seed));
    const cs =
      type === 'upsert'
        ? this.engine.upsert(obj)
        : this.engine.remove({ apiVersion: obj.apiVersion, kind: obj.kind, name: obj.metadata.name, ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}) });
    this.opts.changed(cs);
  }
}
