/**
 * Egress-only source addresses of local Pods (pure).
 *
 * An IPv6-only Pod on the AWS VPC CNI reaches IPv4 destinations through a second interface with a
 * link-local IPv4 address that the host SNATs to the node's address (see EgressV4Port). That
 * address is in no Pod object, yet the packets it sends are the Pod's: it is added to the Pod's
 * targets of egress rules (the clause that matches the source) and of egress isolation, and to
 * nothing else. It is never a peer address (no other Pod's rule matches it: its connections leave
 * the node from the node's address) nor an ingress target (nothing connects to it).
 */
import type { NodeIsolation, PolicyFlowInput } from './compile.js';
import type { NodeRule } from '../../policy/internal.js';

/** Pod ref ("namespace/name") -> the addresses only its egress uses. */
export type EgressSources = ReadonlyMap<string, readonly string[]>;

type Targets = readonly { ref: string; ips: string[] }[];

/** The sources that concern `targets`, as a key (empty: none). */
function sourcesKey(targets: Targets, sources: EgressSources): string {
  let key = '';
  for (const t of targets) {
    const extra = sources.get(t.ref);
    if (extra?.length) key += `${t.ref}=${extra.join(',')};`;
  }
  return key;
}

const withSources = <T extends { ref: string; ips: string[] }>(targets: readonly T[], sources: EgressSources): T[] =>
  targets.map((t) => {
    const extra = sources.get(t.ref)?.filter((ip) => !t.ips.includes(ip));
    return extra?.length ? { ...t, ips: [...t.ips, ...extra] } : t;
  });

/**
 * Adds egress sources to egress rules and isolations. An object nothing concerns is returned as it
 * is, and one that is concerned gives the same new object while the sources stay the same (the
 * compiler sees an unchanged isolation list by identity).
 */
export class EgressSourceView {
  private readonly memo = new WeakMap<object, { key: string; value: object }>();

  apply(input: PolicyFlowInput, sources: EgressSources): PolicyFlowInput {
    if (sources.size === 0) return input;
    return {
      ...input,
      rules: input.rules.map((r) => (r.direction === 'Egress' ? this.memoized(r, r.targets, sources, () => ({ ...r, targets: withSources(r.targets, sources) })) : r)),
      isolations: input.isolations.map((i) => (i.direction === 'Egress' ? this.memoized(i, i.targets, sources, () => ({ ...i, targets: withSources(i.targets, sources) })) : i)),
    };
  }

  private memoized<T extends NodeRule | NodeIsolation>(obj: T, targets: Targets, sources: EgressSources, make: () => T): T {
    const key = sourcesKey(targets, sources);
    if (!key) return obj;
    const cur = this.memo.get(obj);
    if (cur?.key === key) return cur.value as T;
    const value = make();
    this.memo.set(obj, { key, value });
    return value;
  }
}

/** The ids (NodeRule.ruleId) of the egress rules that have the Pod `ref` among their targets. */
export function egressRulesOf(rules: readonly NodeRule[], ref: string): string[] {
  return rules.filter((r) => r.direction === 'Egress' && r.targets.some((t) => t.ref === ref)).map((r) => r.ruleId);
}
