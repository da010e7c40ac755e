/**
 * The evaluator: answers "is this connection allowed, and which rule decided?" for a probe.
 *
 * Order per direction (issue 4 §2): stage 0 rules in (tier, policy, rule, tieBreak) order, the
 * first match decides and Pass jumps to stage 1; stage 1 = Kubernetes NetworkPolicy (allow if any
 * rule matches, else drop when the Pod is isolated); stage 2 (baselines), where Pass falls
 * through; then the default, allow. Egress is decided for the source Pod, ingress for the
 * destination Pod; the first non-allow (egress first) is the verdict.
 *
 * Speed: the rules that apply to a Pod come from the AppliedToGroups of the internal model (an
 * index by target), cached per Pod version; only peers and ports are matched per query.
 */
import { ipv4ToNumber } from './cidr.js';
import { podKey, type ClusterState } from './cluster.js';
import { groupId } from './internal.js';
import { compilePeer, compilePorts, podEndpoint, type Endpoint, type MatchContext, type MatchEnv, type PeerMatcher, type PortMatcher, type PortProbe } from './match.js';
import { compareRules } from './order.js';
import { parseEndpoint, type ParsedEndpoint } from './probes.js';
import type { DecidedBy, Direction, InternalRule, Isolation, PodInfo, Probe, ProbeResult, ServiceInfo } from './types.js';

/** Thrown by evaluate() for a probe naming something the cluster does not have. */
export class UnknownEndpointError extends Error {}

interface CompiledRule {
  rule: InternalRule;
  /** undefined = any peer */
  peers?: PeerMatcher[];
  ports: PortMatcher;
  decidedBy: DecidedBy;
  /** The (shared, frozen) result when this rule decides. */
  outcome: Outcome;
  /** Position in the evaluation order. */
  order: number;
}

interface Outcome {
  readonly verdict: ProbeResult['verdict'];
  readonly decidedBy: DecidedBy | null;
}

const DEFAULT_ALLOW: Outcome = Object.freeze({ verdict: 'allow', decidedBy: null });

function ruleMatches(r: CompiledRule, other: Endpoint, ctx: MatchContext, portProbe: PortProbe): boolean {
  if (!r.ports(portProbe)) return false;
  const peers = r.peers;
  if (!peers) return true;
  for (let i = 0; i < peers.length; i++) if (peers[i]!(other, ctx)) return true;
  return false;
}

interface CompiledIsolation {
  isolation: Isolation;
  decidedBy: DecidedBy;
  outcome: Outcome;
  order: number;
}

/** The rules that apply to one Pod, per direction, in evaluation order. */
interface PodRules {
  pod: PodInfo;
  Ingress: CompiledRule[];
  Egress: CompiledRule[];
  /** Index of the first stage-1 / stage-2 rule in each list. */
  stage1: { Ingress: number; Egress: number };
  stage2: { Ingress: number; Egress: number };
  isolated: { Ingress?: Outcome; Egress?: Outcome };
}


interface Compiled {
  rules: CompiledRule[];
  isolations: CompiledIsolation[];
  /** AppliedToGroup id → the rules applied through it (targets come from the internal model's groups). */
  rulesByGroup: Map<string, CompiledRule[]>;
  isolationsByGroup: Map<string, CompiledIsolation[]>;
}

type Resolved = Endpoint | { kind: 'service'; service: ServiceInfo };

/** One side's decision: egress of the source Pod or ingress of the destination Pod. */
export interface SideDecision {
  direction: Direction;
  pod: string;
  verdict: ProbeResult['verdict'];
  decidedBy: DecidedBy | null;
}

export class Evaluator {
  private compiled?: Compiled;
  private podRules = new WeakMap<PodInfo, PodRules>();
  /** Bumped by every change; endpoint resolutions cached under an older value are stale. */
  private generation = 0;
  private readonly resolveCache = new Map<string, { generation: number; endpoint: Resolved }>();
  private readonly endpointParseCache = new Map<string, ParsedEndpoint>();

  constructor(
    private readonly cluster: ClusterState,
    private readonly env: MatchEnv,
    /** Ids of the AppliedToGroups holding a Pod ("ns/name"). */
    private readonly targetsOf: (podKey: string) => ReadonlySet<string>,
    /** Every valid rule and isolation. */
    private readonly source: () => { rules: InternalRule[]; isolations: Isolation[] },
  ) {}

  /** Rules or isolations changed: recompile on next use. */
  rulesChanged(): void {
    this.compiled = undefined;
    this.podRules = new WeakMap();
  }

  /** Something every Pod's rule list may depend on changed (Namespace labels, groups, Services). */
  targetsChanged(): void {
    this.podRules = new WeakMap();
  }

  /** One Pod's targets changed. */
  podChanged(pod: PodInfo): void {
    this.podRules.delete(pod);
  }

  /** Called after every change: cached endpoint resolutions are stale. */
  changed(): void {
    this.generation++;
  }

  rules(): InternalRule[] {
    return this.compile().rules.map((c) => c.rule);
  }

  isolations(): Isolation[] {
    return this.compile().isolations.map((c) => c.isolation);
  }

  /** The valid rules and isolations, compiled and indexed by AppliedToGroup (rebuilt after rule changes). */
  compile(): Compiled {
    if (this.compiled) return this.compiled;
    const { rules: input, isolations: isoInput } = this.source();
    const all = [...input].sort(compareRules);
    const isolations = [...isoInput];
    isolations.sort((a, b) => (isolationKey(a) < isolationKey(b) ? -1 : isolationKey(a) > isolationKey(b) ? 1 : 0));
    const rulesByGroup = new Map<string, CompiledRule[]>();
    const rules = all.map((rule, order): CompiledRule => {
      const compiled: CompiledRule = {
        rule,
        ...(rule.peers ? { peers: rule.peers.map((p) => compilePeer(p, this.env)) } : {}),
        ports: compilePorts(rule.ports),
        decidedBy: decidedByRule(rule),
        outcome: Object.freeze({ verdict: verdictOf(rule.action), decidedBy: decidedByRule(rule) }),
        order,
      };
      for (const id of new Set(rule.appliedTo.map((p) => groupId('appliedTo', p)))) {
        let list = rulesByGroup.get(id);
        if (!list) rulesByGroup.set(id, (list = []));
        list.push(compiled);
      }
      return compiled;
    });
    const isolationsByGroup = new Map<string, CompiledIsolation[]>();
    const compiledIsolations = isolations.map((iso, order): CompiledIsolation => {
      const decidedBy: DecidedBy = {
        kind: 'K8sNetworkPolicyIsolation',
        ...(iso.ref.namespace ? { namespace: iso.ref.namespace } : {}),
        name: iso.ref.name,
        direction: iso.direction,
        action: 'IsolationDrop',
      };
      const compiled: CompiledIsolation = { isolation: iso, decidedBy, outcome: Object.freeze({ verdict: 'drop', decidedBy }), order };
      for (const id of new Set(iso.appliedTo.map((p) => groupId('appliedTo', p)))) {
        let list = isolationsByGroup.get(id);
        if (!list) isolationsByGroup.set(id, (list = []));
        list.push(compiled);
      }
      return compiled;
    });
    this.compiled = { rules, isolations: compiledIsolations, rulesByGroup, isolationsByGroup };
    return this.compiled;
  }

  private rulesFor(pod: PodInfo): PodRules {
    const cached = this.podRules.get(pod);
    if (cached) return cached;
    const key = podKey(pod);
    const c = this.compile();
    // Targets come from the AppliedToGroups the internal model keeps up to date.
    const found = new Set<CompiledRule>();
    const isolations = new Set<CompiledIsolation>();
    for (const id of this.targetsOf(key)) {
      for (const r of c.rulesByGroup.get(id) ?? []) found.add(r);
      for (const i of c.isolationsByGroup.get(id) ?? []) isolations.add(i);
    }
    const candidates = [...found].sort((a, b) => a.order - b.order);
    const entry: PodRules = { pod, Ingress: [], Egress: [], stage1: { Ingress: 0, Egress: 0 }, stage2: { Ingress: 0, Egress: 0 }, isolated: {} };
    for (const r of candidates) entry[r.rule.direction].push(r);
    for (const dir of ['Ingress', 'Egress'] as const) {
      const list = entry[dir];
      entry.stage1[dir] = firstIndex(list, (r) => r.rule.priority.stage >= 1);
      entry.stage2[dir] = firstIndex(list, (r) => r.rule.priority.stage >= 2);
    }
    // The first isolating policy (by kind/namespace/name) is the one reported.
    for (const iso of [...isolations].sort((a, b) => a.order - b.order)) {
      const dir = iso.isolation.direction;
      if (!entry.isolated[dir]) entry.isolated[dir] = iso.outcome;
    }
    this.podRules.set(pod, entry);
    return entry;
  }

  evaluate(probe: Probe & { sourcePort?: number }): ProbeResult {
    const src = this.resolve(probe.from, 'from');
    const dst = this.resolve(probe.to, 'to');
    if (src.kind === 'service') throw new UnknownEndpointError(`${probe.from}: a Service cannot be a probe source; use one of its Pods`);
    if (dst.kind !== 'service') {
      const d = this.decide(src, dst, probe.protocol, probe.port, probe.sourcePort, undefined);
      const result: ProbeResult = { from: probe.from, to: probe.to, port: probe.port, protocol: probe.protocol, verdict: d.verdict, decidedBy: d.decidedBy ?? null };
      if (d.note) result.note = d.note;
      return result;
    }
    const base: Probe = { from: probe.from, to: probe.to, port: probe.port, protocol: probe.protocol };
    // A probe to a Service is decided for the post-DNAT flow: endpoint Pod and target port.
    const svc = dst.service;
    const sp = svc.ports.find((p) => p.port === probe.port && p.protocol === probe.protocol);
    if (!sp) return { ...base, verdict: 'reject', decidedBy: null, note: `Service ${svc.namespace}/${svc.name} has no ${probe.protocol} port ${probe.port}` };
    const outcomes: { pod: PodInfo; r: Pick<ProbeResult, 'verdict' | 'decidedBy' | 'note'> }[] = [];
    for (const pod of this.cluster.serviceEndpoints(svc.namespace, svc.name)) {
      const port = typeof sp.targetPort === 'number' ? sp.targetPort : pod.ports.find((p) => p.name === sp.targetPort && p.protocol === sp.protocol)?.containerPort;
      if (port === undefined) continue;
      outcomes.push({ pod, r: this.decide(src, podOrHostEndpoint(pod, this.cluster), probe.protocol, port, probe.sourcePort, svc) });
    }
    if (outcomes.length === 0) return { ...base, verdict: 'reject', decidedBy: null, note: `Service ${svc.namespace}/${svc.name} has no ready endpoints` };
    const chosen = outcomes.find((o) => o.r.verdict !== 'allow') ?? outcomes[0]!;
    const differs = outcomes.some((o) => o.r.verdict !== chosen.r.verdict);
    const note = [chosen.r.note, `via endpoint ${podKey(chosen.pod)}`, differs ? 'endpoints disagree: reporting the first that is not allowed' : undefined].filter(Boolean).join('; ');
    return { ...base, verdict: chosen.r.verdict, decidedBy: chosen.r.decidedBy ?? null, note };
  }

  /**
   * The verdict plus each side's own decision (egress of the source Pod, ingress of the
   * destination Pod), evaluated independently: what `sluicectl simulate` prints for one probe.
   */
  explain(probe: Probe & { sourcePort?: number }): { result: ProbeResult; sides: SideDecision[] } {
    const result = this.evaluate(probe);
    const src = this.resolve(probe.from, 'from') as Endpoint;
    let dst = this.resolve(probe.to, 'to');
    let port = probe.port;
    let service: ServiceInfo | undefined;
    if (dst.kind === 'service') {
      service = dst.service;
      const via = / via endpoint ([^;]+)/.exec(` ${result.note ?? ''}`)?.[1];
      const pod = via ? this.cluster.pods.get(via) : undefined;
      const sp = service.ports.find((p) => p.port === probe.port && p.protocol === probe.protocol);
      if (!pod || !sp) return { result, sides: [] };
      port = typeof sp.targetPort === 'number' ? sp.targetPort : pod.ports.find((p) => p.name === sp.targetPort && p.protocol === sp.protocol)?.containerPort ?? port;
      dst = podOrHostEndpoint(pod, this.cluster);
    }
    // Same-node host traffic and loopback are decided before either side.
    if ((src.kind === 'host' && dst.kind === 'pod' && src.nodeName !== undefined && src.nodeName === dst.pod.nodeName) ||
        (!service && src.kind === 'pod' && dst.kind === 'pod' && src.pod === dst.pod)) return { result, sides: [] };
    const portProbe: PortProbe = { protocol: probe.protocol, port, sourcePort: probe.sourcePort, dstPod: dst.kind === 'pod' ? dst.pod : undefined };
    const sides: SideDecision[] = [];
    if (src.kind === 'pod') sides.push({ direction: 'Egress', pod: podKey(src.pod), ...this.decideDirection('Egress', src.pod, dst, portProbe, service) });
    if (dst.kind === 'pod') sides.push({ direction: 'Ingress', pod: podKey(dst.pod), ...this.decideDirection('Ingress', dst.pod, src, portProbe, undefined) });
    return { result, sides };
  }

  private resolve(ref: string, which: string): Resolved {
    const hit = this.resolveCache.get(ref);
    if (hit && hit.generation === this.generation) return hit.endpoint;
    const endpoint = this.resolveUncached(ref, which);
    if (this.resolveCache.size > 100_000) this.resolveCache.clear();
    this.resolveCache.set(ref, { generation: this.generation, endpoint });
    return endpoint;
  }

  private resolveUncached(ref: string, which: string): Resolved {
    let parsed = this.endpointParseCache.get(ref);
    if (!parsed) {
      parsed = parseEndpoint(ref);
      if (this.endpointParseCache.size > 100_000) this.endpointParseCache.clear();
      this.endpointParseCache.set(ref, parsed);
    }
    switch (parsed.kind) {
      case 'pod': {
        const pod = this.cluster.pods.get(`${parsed.namespace}/${parsed.name}`);
        if (!pod) throw new UnknownEndpointError(`${which} "${ref}": no Pod ${parsed.namespace}/${parsed.name} in the cluster`);
        return podOrHostEndpoint(pod, this.cluster);
      }
      case 'service': {
        const service = this.cluster.services.get(`${parsed.namespace}/${parsed.name}`);
        if (!service) throw new UnknownEndpointError(`${which} "${ref}": no Service ${parsed.namespace}/${parsed.name} in the cluster`);
        return { kind: 'service', service };
      }
      case 'ip': {
        const ipNum = ipv4ToNumber(parsed.ip);
        const pod = this.cluster.podByIp.get(parsed.ip);
        if (pod) return podEndpoint(pod);
        const node = this.cluster.nodeByIp.get(parsed.ip);
        if (node) return { kind: 'host', ip: parsed.ip, ipNum, node, nodeName: node.name };
        const service = this.cluster.serviceByIp.get(parsed.ip);
        if (service) return { kind: 'service', service };
        return { kind: 'external', ip: parsed.ip, ipNum };
      }
    }
  }

  private decide(
    src: Endpoint, dst: Endpoint, protocol: string, port: number, sourcePort: number | undefined, service: ServiceInfo | undefined,
  ): Pick<ProbeResult, 'verdict' | 'decidedBy' | 'note'> {
    // Kubelet probes: a Node (or hostNetwork Pod) reaches the Pods on its own Node unconditionally.
    if (src.kind === 'host' && dst.kind === 'pod' && src.nodeName !== undefined && src.nodeName === dst.pod.nodeName) {
      return { verdict: 'allow', decidedBy: null, note: 'host to a Pod on the same Node is always allowed' };
    }
    // A Pod talking to its own address never leaves its network namespace (not so via a Service: hairpin).
    if (!service && src.kind === 'pod' && dst.kind === 'pod' && src.pod === dst.pod) {
      return { verdict: 'allow', decidedBy: null, note: 'loopback: traffic to the Pod itself stays inside the Pod' };
    }
    const dstPod = dst.kind === 'pod' ? dst.pod : undefined;
    const portProbe: PortProbe = { protocol, port, sourcePort, dstPod };
    let egress: { verdict: ProbeResult['verdict']; decidedBy: DecidedBy | null } | undefined;
    if (src.kind === 'pod') {
      egress = this.decideDirection('Egress', src.pod, dst, portProbe, service);
      if (egress.verdict !== 'allow') return egress;
    }
    let ingress: typeof egress;
    if (dst.kind === 'pod') {
      // Ingress sees the post-DNAT flow: toServices peers (pre-DNAT) never match here.
      ingress = this.decideDirection('Ingress', dst.pod, src, portProbe, undefined);
      if (ingress.verdict !== 'allow') return ingress;
    }
    return { verdict: 'allow', decidedBy: egress?.decidedBy ?? ingress?.decidedBy ?? null };
  }

  private decideDirection(
    dir: Direction, self: PodInfo, other: Endpoint, portProbe: { protocol: string; port: number; sourcePort?: number; dstPod?: PodInfo }, service: ServiceInfo | undefined,
  ): { verdict: ProbeResult['verdict']; decidedBy: DecidedBy | null } {
    const pr = this.rulesFor(self);
    const list = pr[dir];
    const ctx: MatchContext = service ? { target: self, service } : { target: self };
    const s1 = pr.stage1[dir];
    const s2 = pr.stage2[dir];
    let i = 0;
    for (; i < s1; i++) {
      const r = list[i]!;
      if (!ruleMatches(r, other, ctx, portProbe)) continue;
      if (r.rule.action === 'Pass') break;
      return r.outcome;
    }
    for (i = s1; i < s2; i++) {
      const r = list[i]!;
      if (ruleMatches(r, other, ctx, portProbe)) return r.outcome;
    }
    const iso = pr.isolated[dir];
    if (iso) return iso;
    for (i = s2; i < list.length; i++) {
      const r = list[i]!;
      if (!ruleMatches(r, other, ctx, portProbe)) continue;
      if (r.rule.action === 'Pass') break;
      return r.outcome;
    }
    return DEFAULT_ALLOW;
  }
}

function verdictOf(action: string): ProbeResult['verdict'] {
  return action === 'Allow' ? 'allow' : action === 'Reject' ? 'reject' : 'drop';
}

function decidedByRule(rule: InternalRule): DecidedBy {
  return {
    kind: rule.ref.kind,
    ...(rule.ref.namespace ? { namespace: rule.ref.namespace } : {}),
    name: rule.ref.name,
    rule: rule.ref.rule,
    direction: rule.direction,
    ...(rule.ref.tier ? { tier: rule.ref.tier } : {}),
    action: rule.action,
  };
}

function isolationKey(i: Isolation): string {
  return `${i.ref.kind}/${i.ref.namespace ?? ''}/${i.ref.name}/${i.direction}`;
}

function podOrHostEndpoint(pod: PodInfo, cluster: ClusterState): Endpoint {
  if (!pod.hostNetwork) return podEndpoint(pod);
  const ip = pod.ips[0] ?? '';
  const node = pod.nodeName ? cluster.nodes.get(pod.nodeName) : undefined;
  return { kind: 'host', ip, ipNum: ipv4ToNumber(ip), ...(node ? { node } : {}), ...(pod.nodeName ? { nodeName: pod.nodeName } : {}), pod };
}

function firstIndex<T>(list: T[], pred: (x: T) => boolean): number {
  for (let i = 0; i < list.length; i++) if (pred(list[i]!)) return i;
  return list.length;
}
