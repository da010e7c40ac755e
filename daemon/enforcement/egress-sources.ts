/**
 * The local Pods' egress-only source addresses (an IPv6-only Pod's IPv4 egress interface; see
 * flows/policy/egress-sources.ts) and the compiler input they complete. Such an address is in no Pod
 * object: CNI ADD and DEL are the only ones who know it.
 */
import type { PodAttachment } from '../node/attachment.js';
import { EgressSourceView, egressRulesOf, type PolicyFlowInput } from '../flows/policy/index.js';

export class LocalEgressSources {
  /** Pod ref ("namespace/name") -> its IPv4 egress addresses. */
  private readonly sources = new Map<string, string[]>();
  private readonly view = new EgressSourceView();

  /** `base`: the compiler's input for the policy state (the engine's, or the controller's in controller mode). */
  constructor(private readonly base: () => PolicyFlowInput) {}

  /**
   * Records (or forgets) the Pod's IPv4 egress address; returns the egress rules that target the
   * Pod when it changed (they must be compiled again), undefined when nothing changed.
   */
  set(pod: PodAttachment, attached: boolean): string[] | undefined {
    const ref = `${pod.podNamespace}/${pod.podName}`;
    const want = attached && pod.egressV4 ? [pod.egressV4.ip] : undefined;
    const cur = this.sources.get(ref);
    if ((cur ?? []).join() === (want ?? []).join()) return undefined;
    if (want) this.sources.set(ref, want);
    else this.sources.delete(ref);
    return egressRulesOf(this.base().rules, ref);
  }

  /** The compiler's input: the policy state's rules and isolations with the egress sources added. */
  input(): PolicyFlowInput {
    return this.view.apply(this.base(), this.sources);
  }
}
