/**
 * A conformance Driver (lab/conformance.ts) backed by a running lab: objects go to the
 * lab's API server, every write is followed by a wait until the controllers (Pods, EndpointSlices,
 * kube-proxy) and the sluice agents have converged, and reachability is measured with real packets
 * (SCTP by ofproto/trace). One lab serves many cases: setUp() after the first resets the lab to the
 * model (deletes every policy object, restores labels) instead of rebuilding it.
 */
import type { Driver, ExpectStep } from '../conformance.js';
import type { KubeObject, Probe, ProbeResult } from '../../daemon/policy/types.js';
import type { ControlInfo } from '../control.js';
import { KINDS, kindOfObject, type ResourceKind } from '../kinds.js';
import { clientFor, waitForPods, waitForServices } from '../ops.js';
import { ApiError, type RestClient } from '../restclient.js';
import { objectRef, planApply } from '../scenario.js';
import { type ConvergeResult, waitForAgents } from './converge.js';
import { probeWithPackets } from './probe.js';

const POLICY_GROUPS = new Set(['networking.k8s.io', 'crd.antrea.io', 'policy.networking.k8s.io']);
/** The cluster's own objects in those groups, never a scenario's to delete: the Service ranges. */
const CLUSTER_KINDS = new Set(['ServiceCIDR']);
/** Policies before the groups and tiers they name. */
const POLICY_KINDS: ResourceKind[] = KINDS.filter((k) => POLICY_GROUPS.has(k.group) && !CLUSTER_KINDS.has(k.kind)).sort((a, b) => rank(a) - rank(b));
function rank(k: ResourceKind): number {
  return k.kind === 'Tier' ? 2 : k.kind === 'ClusterGroup' || k.kind === 'Group' ? 1 : 0;
}

export interface LabDriverStats {
  writes: number;
  convergeMs: number;
  probeRounds: number;
  probeMs: number;
  signals: Set<ConvergeResult['signal']>;
  /** Waits that ended without the strong signal, and why. */
  notes: string[];
}

export class LabDriver implements Driver {
  readonly rest: RestClient;
  private readonly ips = new Map<string, string>();
  private built = false;
  /** Writes happened that no convergence wait has covered yet. */
  private unsettled = false;
  /** The last probe round, with notes (SCTP traces). */
  lastResults: ProbeResult[] = [];
  readonly stats: LabDriverStats = { writes: 0, convergeMs: 0, probeRounds: 0, probeMs: 0, signals: new Set(), notes: [] };

  constructor(readonly info: ControlInfo) {
    this.rest = clientFor(info);
  }

  /** The real IP of a model Pod (after setUp). */
  podIp = (namespace: string, name: string): string => {
    const ip = this.ips.get(`${namespace}/${name}`);
    if (!ip) throw new Error(`lab driver: no IP known for Pod ${namespace}/${name} (not set up?)`);
    return ip;
  };

  async setUp(objects: KubeObject[]): Promise<void> {
    const model = objects.map(({ status: _status, ...o }) => o as KubeObject);
    if (this.built) {
      await this.deletePolicies();
      for (const o of model.filter((x) => x.kind === 'Namespace' || x.kind === 'Pod')) await this.relabelOnly(o);
      // The wait is left to the next write or probe: a case's first step is almost always a write.
      this.unsettled = true;
    } else {
      await this.write(model);
      this.built = true;
      await this.settle();
    }
    const pods = (await this.rest.list(KINDS.find((k) => k.kind === 'Pod')!)).items;
    for (const p of pods) if (p.status?.podIP) this.ips.set(objectRef(p), p.status.podIP);
  }

  async apply(objects: KubeObject[]): Promise<void> {
    await this.write(objects);
    await this.settle();
  }

  async delete(refs: { apiVersion: string; kind: string; namespace?: string | undefined; name: string }[]): Promise<void> {
    for (const r of refs) {
      const kind = kindOfObject(r);
      await this.rest.delete(kind, r.name, kind.namespaced ? r.namespace ?? 'default' : undefined);
    }
    await this.settle();
  }

  async relabel(obj: KubeObject): Promise<void> {
    await this.relabelOnly(obj);
    await this.settle();
  }

  async probe(pairs: [string, string][], port: number, protocol: ExpectStep['protocol']): Promise<Map<string, boolean>> {
    const results = await this.probeAll(pairs.map(([from, to]) => ({ from, to, port, protocol })));
    return new Map(results.map((r) => [`${r.from}>${r.to}`, r.verdict === 'allow']));
  }

  /** Verdicts for arbitrary probes (real packets; SCTP traced). */
  async probeAll(probes: Probe[]): Promise<ProbeResult[]> {
    if (this.unsettled) await this.settle();
    const t0 = performance.now();
    this.lastResults = await probeWithPackets(this.info, probes);
    this.stats.probeRounds++;
    this.stats.probeMs += performance.now() - t0;
    return this.lastResults;
  }

  /** Deletes every policy, group and tier object in the lab. */
  async deletePolicies(): Promise<number> {
    let n = 0;
    for (const kind of POLICY_KINDS) {
      let items: KubeObject[];
      try {
        items = (await this.rest.list(kind)).items;
      } catch (err) {
        if (err instanceof ApiError && err.code === 404) continue; // CRD not installed
        throw err;
      }
      for (const o of items) {
        await this.rest.delete(kind, o.metadata.name, kind.namespaced ? o.metadata.namespace : undefined);
        n++;
      }
    }
    this.stats.writes += n;
    return n;
  }

  /** Creates or replaces the objects, waiting for new Pods to run (no convergence wait). */
  async write(objects: KubeObject[]): Promise<void> {
    const plan = planApply(objects, this.info.nodes);
    for (const p of plan) {
      try {
        await this.rest.apply(p.kind, p.obj);
      } catch (err) {
        throw err instanceof ApiError ? new Error(`${p.kind.kind} ${p.ref}: ${err.message}`) : err;
      }
    }
    this.stats.writes += plan.length;
    await waitForPods(this.rest, plan.filter((p) => p.kind.kind === 'Pod').map((p) => ({ namespace: p.obj.metadata.namespace ?? 'default', name: p.obj.metadata.name })));
  }

  /** Sets exactly `obj`'s labels on the stored object (retrying on a concurrent update). */
  async relabelOnly(obj: KubeObject): Promise<void> {
    const kind = kindOfObject(obj);
    const ns = kind.namespaced ? obj.metadata.namespace ?? 'default' : undefined;
    const want = obj.metadata.labels ?? {};
    for (let attempt = 0; ; attempt++) {
      const cur = await this.rest.get(kind, obj.metadata.name, ns);
      if (JSON.stringify(Object.entries(cur.metadata.labels ?? {}).sort()) === JSON.stringify(Object.entries(want).sort())) return;
      try {
        await this.rest.update(kind, { ...cur, metadata: { ...cur.metadata, labels: { ...want } } });
        this.stats.writes++;
        return;
      } catch (err) {
        if (err instanceof ApiError && err.code === 409 && attempt < 5) continue;
        throw err;
      }
    }
  }

  /** Waits until controllers and agents caught up with the API server. */
  async settle(): Promise<ConvergeResult> {
    this.unsettled = false;
    const t0 = performance.now();
    const writtenAt = Date.now();
    await waitForServices(this.rest, this.info.name, this.info.nodes);
    const r = await waitForAgents(this.info, this.rest, writtenAt);
    this.stats.signals.add(r.signal);
    if (r.note) this.stats.notes.push(r.note);
    this.stats.convergeMs += performance.now() - t0;
    return r;
  }
}
