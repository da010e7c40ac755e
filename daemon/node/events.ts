/**
 * The Kubernetes Events the agent records where an operator looks (`kubectl describe`), never a
 * flood (README.md, "Events"). Which Events are due is decided by pure functions over what was
 * already sent and the injected clock's time; `NodeEvents` keeps that memory and sends them.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { EventSubject } from '../kube/node-api.js';

export type EventType = 'Normal' | 'Warning';

/** Where Events go (real: NodeApi.objectEvent, which names the object as `kubectl describe` selects it). */
export interface EventSink {
  objectEvent(nodeName: string, obj: EventSubject, type: EventType, reason: string, message: string): Promise<void>;
}

/** A policy object this node ignores as invalid, as the policy report lists it. */
export interface InvalidPolicy {
  kind: string;
  namespace?: string | undefined;
  name: string;
  field: string;
  message: string;
}

/** What policy enforcement says about invalid objects (absent when enforcement is off). */
export interface InvalidPolicySource {
  /** The objects ignored as invalid now; undefined while there is no report. */
  invalidPolicies(): readonly InvalidPolicy[] | undefined;
  /** The API object (apiVersion, kind, uid) behind an entry; undefined when it is gone. */
  policyObject(e: InvalidPolicy): EventSubject | undefined;
}

/** At most one attach-failure Event per Pod in this long: the runtime retries a failed sandbox over and over. */
export const ATTACH_FAILED_EVENT_MS = 60_000;

/**
 * The invalid-policy Events due (pure): one per object and problem while it lasts. `reported` is
 * what the previous report held; the returned set replaces it, so a problem that went away and came
 * back is due again.
 */
export function invalidPolicyEventsDue(reported: ReadonlySet<string>, invalid: readonly InvalidPolicy[]): { due: InvalidPolicy[]; reported: Set<string> } {
  const now = new Set<string>();
  const due: InvalidPolicy[] = [];
  for (const e of invalid) {
    const key = JSON.stringify([e.kind, e.namespace ?? '', e.name, e.field, e.message]);
    now.add(key);
    if (!reported.has(key)) due.push(e);
  }
  return { due, reported: now };
}

/**
 * Whether an attach-failure Event on `pod` is due at `now` (pure): not when one went out within
 * ATTACH_FAILED_EVENT_MS. `sent` maps each Pod to when its last Event went out; the returned map
 * replaces it, without entries old enough to be forgotten.
 */
export function attachFailedEventDue(sent: ReadonlyMap<string, number>, pod: string, now: number): { due: boolean; sent: Map<string, number> } {
  const kept = new Map([...sent].filter(([, at]) => now - at <= ATTACH_FAILED_EVENT_MS));
  if (kept.has(pod)) return { due: false, sent: kept };
  kept.set(pod, now);
  return { due: true, sent: kept };
}

export interface NodeEventsDeps {
  nodeName: string;
  clock: Clock;
  log: Logger;
  /** The API server once connected; without it no Event is recorded. */
  sink(): EventSink | undefined;
  /** Policy enforcement's invalid objects, when enforcement is on. */
  policies?: InvalidPolicySource | undefined;
}

/** The agent's Events: recorded with failures logged (never thrown), deduplicated and rate limited. */
export class NodeEvents {
  private attachFailedSent: ReadonlyMap<string, number> = new Map();
  private invalidReported: ReadonlySet<string> = new Set();
  /** "ns/name ip" of the Services reported outside the Service ranges while they are. */
  private outsideReported = new Set<string>();
  /** The controller connection state last reported (controller mode). */
  private controlPlaneReported: 'connected' | 'disconnected' | undefined;

  constructor(private readonly d: NodeEventsDeps) {}

  /** One Event on `obj` (a Pod unless `kind` says otherwise); a failure to record it is logged. */
  async record(obj: Omit<EventSubject, 'kind'> & { kind?: string }, type: EventType, reason: string, message: string): Promise<void> {
    const kind = obj.kind ?? 'Pod';
    try {
      await this.d.sink()?.objectEvent(this.d.nodeName, { ...obj, kind }, type, reason, message);
    } catch (err) {
      this.d.log.warn({ object: `${kind} ${obj.namespace ? `${obj.namespace}/` : ''}${obj.name}`, reason, err: (err as Error).message }, 'could not record an Event');
    }
  }

  /** A failed CNI ADD as a Warning Event on the Pod (what failed and what to check), at most one per Pod a minute. */
  attachFailed(pod: { podNamespace?: string | undefined; podName?: string | undefined }, err: unknown): void {
    if (!pod.podNamespace || !pod.podName) return;
    const { due, sent } = attachFailedEventDue(this.attachFailedSent, `${pod.podNamespace}/${pod.podName}`, this.d.clock.now());
    this.attachFailedSent = sent;
    if (!due) return;
    const e = err as { message?: string; details?: string };
    const msg = `sluice-agent on ${this.d.nodeName} could not attach the Pod's network (the runtime retries): ${e.message ?? String(err)}${e.details ? ` (${e.details})` : ''}. Check: sluicectl node status on the node, and the agent's log.`;
    void this.record({ namespace: pod.podNamespace, name: pod.podName }, 'Warning', 'SluiceAttachFailed', msg);
  }

  /**
   * Controller mode: the agent stopped or resumed following sluice-controller. A Warning Event on
   * the Node when it stops (the last state received stays enforced; changes made meanwhile are not),
   * a Normal one when it follows again; once per change of state.
   */
  controlPlane(state: 'connected' | 'disconnected', reason: string): void {
    if (state === this.controlPlaneReported || (state === 'connected' && this.controlPlaneReported === undefined)) {
      this.controlPlaneReported = state;
      return;
    }
    this.controlPlaneReported = state;
    const name = this.d.nodeName;
    if (state === 'disconnected') {
      void this.record({ kind: 'Node', name }, 'Warning', 'SluiceControllerUnreachable',
        `sluice-agent on ${name} cannot follow sluice-controller (${reason}): the policies it received last stay enforced; changes made meanwhile reach this node when the controller is back. Check: the controller's Pods and Service, and sluicectl node status.`);
    } else {
      void this.record({ kind: 'Node', name }, 'Normal', 'SluiceControllerReachable', `sluice-agent on ${name} follows sluice-controller again; its state is resynced.`);
    }
  }

  /**
   * Services whose ClusterIP lies outside the Service ranges: their Pod -> Service traffic would
   * skip the re-entrance path, so the egress policy would not judge its real endpoint. A warning
   * and a Warning Event on the Service, once while it lasts (again after a fix and a new break).
   */
  reportServicesOutside(outside: readonly { service: string; ip: string }[], cidrs: readonly string[]): void {
    const now = new Set(outside.map((o) => `${o.service} ${o.ip}`));
    for (const o of outside) {
      const key = `${o.service} ${o.ip}`;
      if (this.outsideReported.has(key)) continue;
      const [namespace, name] = o.service.split('/') as [string, string];
      const msg = `ClusterIP ${o.ip} is outside the Service ranges sluice-agent on ${this.d.nodeName} uses (${cidrs.join(', ')}): Pod traffic to it skips egress enforcement of its endpoints. Add the range to the cluster's ServiceCIDRs or to serviceCIDRs in the agent's configuration.`;
      this.d.log.warn({ service: o.service, ip: o.ip, cidrs }, 'a Service\'s ClusterIP is outside the Service ranges');
      void this.record({ kind: 'Service', namespace, name }, 'Warning', 'SluiceServiceOutsideServiceCIDRs', msg);
    }
    this.outsideReported = now;
  }

  /**
   * Policy objects this node ignores as invalid, as a Warning Event on each (field and reason, as
   * `sluicectl node policies` shows them): once per object and problem while it lasts; an object
   * fixed and broken again is reported again. Cluster-scoped objects' Events go to "default".
   * Nothing is remembered while there is no report or no API server, so those problems are
   * reported once both are there.
   */
  reportInvalidPolicies(): void {
    const { policies } = this.d;
    const invalid = policies?.invalidPolicies();
    if (!policies || !invalid || !this.d.sink()) return;
    const { due, reported } = invalidPolicyEventsDue(this.invalidReported, invalid);
    this.invalidReported = reported;
    for (const e of due) {
      const msg = `ignored by sluice-agent on ${this.d.nodeName} (no rule of it is enforced): ${e.field}: ${e.message}`;
      // Under the object's own apiVersion, kind and uid; the report's kind when it is gone meanwhile.
      const target = policies.policyObject(e) ?? { kind: e.kind, ...(e.namespace ? { namespace: e.namespace } : {}), name: e.name };
      void this.record(target, 'Warning', 'SluiceInvalidPolicy', msg);
    }
  }
}
