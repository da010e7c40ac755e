/**
 * The one path from the policy side into the agent's FlowStore. The compiler only produces the
 * desired policy flows and the delta of each compile; this writer keeps those deltas, netted, until
 * the agent's next flow sync calls `write(store)`, and then states every owner of the policy side
 * in the store: the compiled policy flows (a full replace the first time it sees a store, the netted
 * delta afterwards, so a change costs O(the change)), DNS interception (restated after a compile),
 * the new-Pod guards and the blocked connections.
 */
import type { Flow } from '../flows/flow.js';
import type { PolicyFlowDelta } from '../flows/policy/index.js';
import type { FlowStore } from '../flows/store.js';

/** The FlowStore owners of the policy side. */
export const POLICY_OWNER = 'policy';
export const DNS_INTERCEPT_OWNER = 'dns-intercept';
export const NEW_POD_GUARD_OWNER = 'new-pod-guard';
export const CUT_CONNECTIONS_OWNER = 'cut-connections';

/** Where each owner's flows come from; a getter returning undefined leaves its owner alone (that part is off). */
export interface PolicyFlowSources {
  /** Every compiled policy flow (the state the deltas lead to). */
  policy(): Flow[];
  /** How many of them are in each table. */
  policyCountByTable(): Record<string, number>;
  dnsIntercept(): Flow[] | undefined;
  newPodGuards(): Flow[] | undefined;
  cutConnections(): Flow[] | undefined;
}

export class PolicyFlowWriter {
  /** The store written last; deltas are kept only for it (a new store gets the whole set). */
  private store?: FlowStore | undefined;
  /** Cookies to add and to remove since the last write, netted: applying them is applying every delta in turn. */
  private readonly pendingAdd = new Map<string, Flow>();
  private readonly pendingRemove = new Set<string>();
  /** A compile ran since the DNS interception flows were last stated. */
  private interceptStale = true;

  constructor(private readonly sources: PolicyFlowSources) {}

  /** Records one compile's delta for the next write. */
  compiled(delta: PolicyFlowDelta): void {
    this.interceptStale = true;
    if (!this.store) return;
    for (const f of delta.remove) {
      this.pendingAdd.delete(f.cookie);
      this.pendingRemove.add(f.cookie);
    }
    for (const f of delta.add) {
      this.pendingRemove.delete(f.cookie);
      this.pendingAdd.set(f.cookie, f);
    }
  }

  /** Brings the policy side's owners in `store` up to date (the caller compiled first). */
  write(store: FlowStore): void {
    const { sources } = this;
    if (store !== this.store) {
      // The compiler keeps what it needs to build its flows again: the store keeps their cookies only.
      store.renderedBy(POLICY_OWNER, { flows: () => sources.policy(), countByTable: () => sources.policyCountByTable() });
      store.replace(POLICY_OWNER, sources.policy());
      this.store = store;
      this.interceptStale = true;
    } else if (this.pendingAdd.size + this.pendingRemove.size > 0) {
      store.patch(POLICY_OWNER, [...this.pendingAdd.values()], [...this.pendingRemove]);
    }
    this.pendingAdd.clear();
    this.pendingRemove.clear();
    const intercept = this.interceptStale ? sources.dnsIntercept() : undefined;
    if (intercept) store.replace(DNS_INTERCEPT_OWNER, intercept);
    this.interceptStale = false;
    // Few or none: a guard lasts only while a node has not confirmed a new Pod (newpods/gate.ts).
    const guards = sources.newPodGuards();
    if (guards) store.replace(NEW_POD_GUARD_OWNER, guards);
    const blocked = sources.cutConnections();
    if (blocked) store.replace(CUT_CONNECTIONS_OWNER, blocked);
  }

  /** Every flow of the policy side in one list (what the owners hold after a write). */
  flows(): Flow[] {
    const { sources } = this;
    const flows = sources.policy();
    const extra = [...(sources.dnsIntercept() ?? []), ...(sources.newPodGuards() ?? []), ...(sources.cutConnections() ?? [])];
    return extra.length > 0 ? [...flows, ...extra] : flows;
  }
}
