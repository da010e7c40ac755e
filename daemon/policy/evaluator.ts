/**
 * The evaluator: answers "is this connection allowed, and which rule decided?" for a probe.
 *
 * Order per direction (README, "Policy precedence"): stage 0 rules in (tier, policy, rule, tieBreak) order, the
 * first match decides and Pass jumps to stage 1; stage 1 = Kubernetes NetworkPolicy (allow if any
 * rule matches, else drop when the Pod is isolated); stage 2 (baselines), where Pass falls
 * through; then the default, allow. Egress is decided for the source Pod, ingress for the
 * destination Pod; the first non-allow (egress first) is the verdict.
 *
 * Speed: the rules that apply to a Pod come from the AppliedToGroups of the internal model (an
 * index by target), cached per Pod version; only peers and ports are matched per query. Each
 * probe endpoint string resolves, through one map lookup, to a slot holding the endpoint, its
 * rule lists and a small array caching whether it is a member of each Pod-selecting peer (one
 * byte per distinct peer term): with many Pods, a random query then touches few memory lines.
 * Slots are dropped after every change (they are rebuilt lazily).
 *
 * Address families: a connection is IPv4 or IPv6, so a probe is judged per family with each
 * endpoint at its address of that family (a dual-stack Pod is matched by ipBlocks through the
 * address the connection uses). A probe that names no family is judged for every family both
 * endpoints have; see Probe.family.
 */
import { ipFamily, ipv4ToNumber } from './cidr.js';
import { podKey, targetPortOn, type ClusterState } from './cluster.js';
import { groupId } from './internal.js';
import { compilePeer, compilePorts, podEndpointOf, podEndpoints, realizableMembers, type Endpoint, type MatchContext, type MatchEnv, type PeerMatcher, type PortMatcher, type PortProbe } from './match.js';
import { canonicalJson, compareRules } from './order.js';
import { DEFAULT_EPHEMERAL_PORTS, parseEndpoint, type ParsedEndpoint } from './probes.js';
import type { DecidedBy, Direction, InternalRule, Isolation, Peer, PodInfo, PortRange, Probe, ProbeResult, ServiceInfo } from './types.js';

/** Thrown by evaluate() for a probe naming something the cluster does not have. */
export class UnknownEndpointError extends Error {}

/**
 * A compiled peer. `slot` >= 0: whether a Pod is a member depends on the Pod alone (not on the
 * target or the Service of the probe), so the answer is cached per Pod at that index.
 */
interface CompiledPeer {
  match: PeerMatcher;
  slot: number;
}

interface CompiledRule {
  rule: InternalRule;
  /** undefined = any peer */
  peers?: CompiledPeer[];
  ports: PortMatcher;
  decidedBy: DecidedBy;
  /** The (shared, frozen) result when this rule decides. */
  outcome: Outcome;
  /** Position in the evaluation order. */
  order: number;
  /** action === 'Pass' */
  pass: boolean;
}

interface Outcome {
  readonly verdict: ProbeResult['verdict'];
  readonly decidedBy: DecidedBy | null;
}

const DEFAULT_ALLOW: Outcome = Object.freeze({ verdict: 'allow', decidedBy: null });
const SAME_NODE_HOST = Object.freeze({ verdict: 'allow' as const, decidedBy: null, note: 'host to a Pod on the same Node is always allowed' });
const LOOPBACK = Object.freeze({ verdict: 'allow' as const, decidedBy: null, note: 'loopback: traffic to the Pod itself stays inside the Pod' });

/** A resolved probe endpoint with what queries about it reuse. */
interface Slot {
  endpoint: Resolved;
  /** The Pod's rules (pod endpoints). */
  rules?: PodRules;
  /** Per cacheable peer: 0 unknown, 1 not a member, 2 member (pod endpoints). */
  members?: Uint8Array;
  /** Match context when this Pod is the deciding side (no Service). */
  ctx?: MatchContext;
}

function ruleMatches(r: CompiledRule, other: Slot, ctx: MatchContext, portProbe: PortProbe): boolean {
  if (!r.ports(portProbe)) return false;
  const peers = r.peers;
  if (!peers) return true;
  const ep = other.endpoint as Endpoint;
  const members = other.members;
  for (let i = 0; i < peers.length; i++) {
    const p = peers[i]!;
    if (p.slot >= 0 && members) {
      let v = members[p.slot]!;
      if (v === 0) members[p.slot] = v = p.match(ep, ctx) ? 2 : 1;
      if (v === 2) return true;
    } else if (p.match(ep, ctx)) return true;
  }
  return false;
}

/**
 * Peers whose membership for a Pod depends on the Pod alone (not on the target, the probe's
 * Service or the clock), for the current group definitions (a definition change recompiles).
 */
function cacheablePeer(p: Peer, env: MatchEnv, depth = 0): boolean {
  switch (p.kind) {
    case 'pods': return p.namespaces.kind !== 'self' && p.namespaces.kind !== 'sameLabels';
    case 'serviceRef': case 'ipBlock': case 'nodes': return true;
    case 'group': {
      const def = env.group(p.namespace, p.name);
      if (!def || depth > 3) return false;
      const members = realizableMembers(def, env, false);
      return !!members && members.every((m) => cacheablePeer(m, env, depth + 1));
    }
    default: return false;
  }
}

interface CompiledIsolation {
  isolation: Isolation;
  decidedBy: DecidedBy;
  outcome: Outcome;
  order: number;
}

/** The rules that apply to one Pod in one direction, in evaluation order. */
interface DirectionRules {
  list: CompiledRule[];
  /** Index of the first stage-1 / stage-2 rule. */
  stage1: number;
  stage2: number;
  /** The K8s isolation drop, when an isolation covers the Pod in this direction. */
  isolated: Outcome | undefined;
}

/** The rules that apply to a Pod, per direction (shared by Pods with the same rules). */
interface PodRules {
  Ingress: DirectionRules;
  Egress: DirectionRules;
}


interface Compiled {
  rules: CompiledRule[];
  /** Number of cacheable peer slots (length of Slot.members). */
  peerSlots: number;
  /** Rule lists by content (see rulesFor). */
  shared: Map<string, PodRules>;
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

/** Files `item` under each distinct AppliedToGroup of its `appliedTo` (the index rulesFor reads). */
function indexByAppliedToGroup<T>(index: Map<string, T[]>, appliedTo: Peer[], item: T): void {
  for (const id of new Set(appliedTo.map((p) => groupId('appliedTo', p)))) {
    let list = index.get(id);
    if (!list) index.set(id, (list = []));
    list.push(item);
  }
}

/** The probe part of a result (the source port and family only when the probe named them). */
function probeFields(probe: Probe): Probe {
  return {
    from: probe.from, to: probe.to, port: probe.port, protocol: probe.protocol,
    ...(probe.sourcePort !== undefined ? { sourcePort: probe.sourcePort } : {}), ...(probe.family !== undefined ? { family: probe.family } : {}),
  };
}

export class Evaluator {
  private compiled?: Compiled | undefined;
  private podRules = new WeakMap<PodInfo, PodRules>();
  /** Endpoint string -> slot; cleared by every change. */
  private slots = new Map<string, Slot>();
  private readonly endpointParseCache = new Map<string, ParsedEndpoint>();
  /** The families of an address list (null: no address), see endpointFamilies. */
  private readonly familiesByIps = new WeakMap<readonly string[], Set<4 | 6> | null>();
  /** Reused for every query (evaluation is synchronous and not re-entrant). */
  private readonly portProbe: PortProbe = { protocol: '', port: 0, sourcePort: undefined, dstPod: undefined, family: 4 };

  constructor(
    private readonly cluster: ClusterState,
    private readonly env: MatchEnv,
    /** Ids of the AppliedToGroups holding a Pod ("ns/name"). */
    private readonly targetsOf: (podKey: string) => ReadonlySet<string>,
    /** Every valid rule and isolation. */
    private readonly source: () => { rules: InternalRule[]; isolations: Isolation[] },
    /** Where the source port of a probe that names none lies. */
    private readonly ephemeralPorts: PortRange = DEFAULT_EPHEMERAL_PORTS,
  ) {}

  /** The ephemeral range cut where some rule's sourcePort range begins or ends (rebuilt after rule changes). */
  private sourcePortPieces?: PortRange[] | undefined;

  /** Rules or isolations changed: recompile on next use. */
  rulesChanged(): void {
    this.compiled = undefined;
    this.sourcePortPieces = undefined;
    this.podRules = new WeakMap();
    this.slots = new Map();
  }

  /** Something every Pod's rule list may depend on changed (Namespace labels, groups, Services). */
  targetsChanged(): void {
    this.podRules = new WeakMap();
  }

  /** One Pod's targets changed. */
  podChanged(pod: PodInfo): void {
    this.podRules.delete(pod);
  }

  /** Called after every change: cached endpoint resolutions (and peer memberships) are stale. */
  changed(): void {
    if (this.slots.size > 0) this.slots = new Map();
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
    // One compiled matcher (and cache slot) per distinct peer term.
    const peerByKey = new Map<string, CompiledPeer>();
    let peerSlots = 0;
    const peerOf = (p: Peer): CompiledPeer => {
      const key = canonicalJson(p);
      let c = peerByKey.get(key);
      if (!c) peerByKey.set(key, (c = { match: compilePeer(p, this.env), slot: p.kind !== 'ipBlock' && cacheablePeer(p, this.env) ? peerSlots++ : -1 }));
      return c;
    };
    const rules = all.map((rule, order): CompiledRule => {
      const compiled: CompiledRule = {
        rule,
        ...(rule.peers ? { peers: rule.peers.map(peerOf) } : {}),
        ports: compilePorts(rule.ports),
        decidedBy: decidedByRule(rule),
        outcome: Object.freeze({ verdict: verdictOf(rule.action), decidedBy: decidedByRule(rule) }),
        order,
        pass: rule.action === 'Pass',
      };
      indexByAppliedToGroup(rulesByGroup, rule.appliedTo, compiled);
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
      indexByAppliedToGroup(isolationsByGroup, iso.appliedTo, compiled);
      return compiled;
    });
    this.compiled = { rules, peerSlots, shared: new Map(), isolations: compiledIsolations, rulesByGroup, isolationsByGroup };
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
    // The first isolating policy (by kind/namespace/name) is the one reported.
    const sortedIsolations = [...isolations].sort((a, b) => a.order - b.order);
    // Pods with the same rules share one entry (fewer distinct objects for queries to touch).
    const shareKey = `${candidates.map((r) => r.order).join(',')}/${sortedIsolations.map((i) => `${i.isolation.direction[0]}${i.order}`).join(',')}`;
    let entry = c.shared.get(shareKey);
    if (!entry) {
      const forDirection = (dir: Direction): DirectionRules => {
        const list = candidates.filter((r) => r.rule.direction === dir);
        return {
          list,
          stage1: firstIndex(list, (r) => r.rule.priority.stage >= 1),
          stage2: firstIndex(list, (r) => r.rule.priority.stage >= 2),
          isolated: sortedIsolations.find((i) => i.isolation.direction === dir)?.outcome,
        };
      };
      entry = { Ingress: forDirection('Ingress'), Egress: forDirection('Egress') };
      c.shared.set(shareKey, entry);
    }
    this.podRules.set(pod, entry);
    return entry;
  }

  /**
   * The verdict for a probe. Without a source port the probe stands for a client connecting from
   * any port of the ephemeral range: it is judged on every piece of that range that rules with
   * sourcePort tell apart, and when the pieces disagree the most restrictive verdict is reported,
   * with a note giving the verdict per source-port range.
   */
  evaluate(probe: Probe): ProbeResult {
    return this.judge(probe).result;
  }

  /** evaluate(), plus the source port and family the reported verdict was decided for. */
  private judge(probe: Probe): { result: ProbeResult; sourcePort: number; family: 4 | 6 } {
    const families = this.familiesOf(probe);
    const judged = families.map((family) => ({ family, ...this.judgeFamily(probe, family) }));
    const restrictive = judged.find((j) => j.result.verdict !== 'allow') ?? judged[0]!;
    if (judged.length === 1) return restrictive;
    const same = judged.every((j) => j.result.verdict === restrictive.result.verdict && canonicalJson(j.result.decidedBy ?? null) === canonicalJson(restrictive.result.decidedBy ?? null));
    const each = judged.map((j) => `IPv${j.family} ${j.result.verdict}${j.result.decidedBy ? ` (${j.result.decidedBy.kind} ${j.result.decidedBy.namespace ? `${j.result.decidedBy.namespace}/` : ''}${j.result.decidedBy.name})` : ''}`).join(', ');
    const familyNote = same
      ? `judged for IPv4 and IPv6 alike`
      : `the verdict depends on the address family: ${each}; reporting the most restrictive (IPv${restrictive.family}; a probe's family option picks one)`;
    return { ...restrictive, result: { ...restrictive.result, note: [restrictive.result.note, familyNote].filter(Boolean).join('; ') } };
  }

  /**
   * The families a probe is judged for: its own, else those both endpoints have (an `ip:` endpoint
   * has its address's; a Pod or Service without any address does not constrain). Throws
   * UnknownEndpointError when the endpoints share none (or a named family is missing).
   */
  private familiesOf(probe: Probe): (4 | 6)[] {
    const from = this.endpointFamilies(probe.from, 'from');
    const to = this.endpointFamilies(probe.to, 'to');
    const both = [4, 6].filter((f): f is 4 | 6 => (!from || from.has(f as 4 | 6) || (f === 4 && this.ipv4EgressOnly(probe))) && (!to || to.has(f as 4 | 6)));
    const have = (ref: string, fams: Set<number> | undefined) => `${ref} has ${fams ? [...fams].sort().map((f) => `IPv${f}`).join(' and ') : 'no address'}`;
    if (probe.family !== undefined) {
      if (!both.includes(probe.family)) throw new UnknownEndpointError(`no IPv${probe.family} connection between ${probe.from} and ${probe.to}: ${have(probe.from, from)}, ${have(probe.to, to)}`);
      return [probe.family];
    }
    if (!from && !to) return [4];
    if (both.length === 0) throw new UnknownEndpointError(`${probe.from} and ${probe.to} share no address family: ${have(probe.from, from)}, ${have(probe.to, to)}`);
    return both;
  }

  /**
   * Whether the probe is an IPv6-only Pod's IPv4 egress: its source is a Pod without an IPv4
   * address and its destination an IPv4 address outside the cluster's Pods and Services. Such a
   * Pod can still reach IPv4 destinations where its CNI gives it an IPv4 path out, SNATed to its
   * node's address (the AWS VPC CNI's egress-cni on IPv6 clusters). That connection is the Pod's:
   * its egress rules judge it (IPv4 ipBlocks, FQDN and Node peers match the destination), its
   * egress isolation applies, and no Pod's ingress sees it.
   */
  private ipv4EgressOnly(probe: Probe): boolean {
    const src = this.parse(probe.from);
    const dst = this.parse(probe.to);
    if (src.kind !== 'pod' || dst.kind !== 'ip' || ipFamily(dst.ip) !== 4) return false;
    if (this.cluster.podByIp.has(dst.ip) || this.cluster.serviceByIp.has(dst.ip)) return false;
    const pod = this.cluster.pods.get(`${src.namespace}/${src.name}`);
    return pod !== undefined && !pod.hostNetwork && pod.ips.length > 0 && !pod.ips.some((ip) => ipFamily(ip) === 4);
  }

  /** The families of an endpoint's addresses; undefined when it has none (any family). */
  private endpointFamilies(ref: string, which: string): Set<4 | 6> | undefined {
    const parsed = this.parse(ref);
    let ips: string[];
    switch (parsed.kind) {
      case 'ip': return new Set([ipFamily(parsed.ip)!]);
      case 'pod': {
        const pod = this.cluster.pods.get(`${parsed.namespace}/${parsed.name}`);
        if (!pod) throw new UnknownEndpointError(`${which} "${ref}": no Pod ${parsed.namespace}/${parsed.name} in the cluster`);
        ips = pod.ips;
        break;
      }
      case 'service': {
        const service = this.cluster.services.get(`${parsed.namespace}/${parsed.name}`);
        if (!service) throw new UnknownEndpointError(`${which} "${ref}": no Service ${parsed.namespace}/${parsed.name} in the cluster`);
        ips = service.clusterIPs;
        break;
      }
    }
    // per address list: Pod and Service objects are replaced on change, never mutated
    let fams = this.familiesByIps.get(ips);
    if (fams === undefined) {
      const found = new Set(ips.map(ipFamily).filter((f): f is 4 | 6 => f !== undefined));
      this.familiesByIps.set(ips, (fams = found.size > 0 ? found : null));
    }
    return fams ?? undefined;
  }

  /** judge() for one address family. */
  private judgeFamily(probe: Probe, family: 4 | 6): { result: ProbeResult; sourcePort: number } {
    if (probe.sourcePort !== undefined) return { result: this.evaluateAt(probe, probe.sourcePort, family), sourcePort: probe.sourcePort };
    const pieces = this.sourcePortRanges();
    const judged = pieces.map((r) => ({ range: r, result: this.evaluateAt(probe, r.first, family) }));
    const restrictive = judged.find((j) => j.result.verdict !== 'allow') ?? judged[0]!;
    const same = judged.every((j) => j.result.verdict === restrictive.result.verdict && canonicalJson(j.result.decidedBy ?? null) === canonicalJson(restrictive.result.decidedBy ?? null));
    if (same) return { result: restrictive.result, sourcePort: restrictive.range.first };
    // Merge neighbouring pieces with the same verdict for the note.
    const runs: { first: number; last: number; verdict: string }[] = [];
    for (const j of judged) {
      const prev = runs[runs.length - 1];
      if (prev && prev.verdict === j.result.verdict) prev.last = j.range.last;
      else runs.push({ first: j.range.first, last: j.range.last, verdict: j.result.verdict });
    }
    const span = (r: { first: number; last: number }) => (r.first === r.last ? `${r.first}` : `${r.first}-${r.last}`);
    const depends = `the verdict depends on the source port (no source port given: any of ${span(this.ephemeralPorts)}): ${runs.map((r) => `${r.verdict} from ${span(r)}`).join(', ')}; reporting the most restrictive`;
    const result = { ...restrictive.result, note: [restrictive.result.note, depends].filter(Boolean).join('; ') };
    return { result, sourcePort: restrictive.range.first };
  }

  /** The ephemeral range, cut at every boundary of a rule's sourcePort..sourceEndPort range. */
  private sourcePortRanges(): PortRange[] {
    if (this.sourcePortPieces) return this.sourcePortPieces;
    const { first, last } = this.ephemeralPorts;
    const cuts = new Set<number>([first]);
    for (const c of this.compile().rules) {
      for (const pm of c.rule.ports) {
        if (pm.sourcePort === undefined) continue;
        const end = (pm.sourceEndPort ?? pm.sourcePort) + 1;
        if (pm.sourcePort > first && pm.sourcePort <= last) cuts.add(pm.sourcePort);
        if (end > first && end <= last) cuts.add(end);
      }
    }
    const starts = [...cuts].sort((a, b) => a - b);
    this.sourcePortPieces = starts.map((s, i) => ({ first: s, last: i + 1 < starts.length ? starts[i + 1]! - 1 : last }));
    return this.sourcePortPieces;
  }

  private evaluateAt(probe: Probe, sourcePort: number, family: 4 | 6): ProbeResult {
    const srcSlot = this.slot(probe.from, 'from', family);
    const dstSlot = this.slot(probe.to, 'to', family);
    const src = srcSlot.endpoint;
    const dst = dstSlot.endpoint;
    if (src.kind === 'service') throw new UnknownEndpointError(`${probe.from}: a Service cannot be a probe source; use one of its Pods`);
    if (dst.kind !== 'service') {
      const d = this.decide(srcSlot, dstSlot, probe.protocol, probe.port, sourcePort, undefined, family);
      const result: ProbeResult = { ...probeFields(probe), verdict: d.verdict, decidedBy: d.decidedBy ?? null };
      if (d.note) result.note = d.note;
      return result;
    }
    const base: Probe = probeFields(probe);
    // A probe to a Service is decided for the post-DNAT flow: endpoint Pod and target port.
    const svc = dst.service;
    const sp = svc.ports.find((p) => p.port === probe.port && p.protocol === probe.protocol);
    if (!sp) return { ...base, verdict: 'reject', decidedBy: null, note: `Service ${svc.namespace}/${svc.name} has no ${probe.protocol} port ${probe.port}` };
    const outcomes: { pod: PodInfo; r: Pick<ProbeResult, 'verdict' | 'decidedBy' | 'note'> }[] = [];
    for (const pod of this.cluster.serviceEndpoints(svc.namespace, svc.name, family)) {
      const port = targetPortOn(pod, sp);
      if (port === undefined) continue;
      outcomes.push({ pod, r: this.decide(srcSlot, this.podSlot(pod, family), probe.protocol, port, sourcePort, svc, family) });
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
  explain(probe: Probe): { result: ProbeResult; sides: SideDecision[] } {
    const { result, sourcePort, family } = this.judge(probe);
    const srcSlot = this.slot(probe.from, 'from', family);
    const src = srcSlot.endpoint as Endpoint;
    let dstSlot = this.slot(probe.to, 'to', family);
    let port = probe.port;
    let service: ServiceInfo | undefined;
    if (dstSlot.endpoint.kind === 'service') {
      service = dstSlot.endpoint.service;
      const via = / via endpoint ([^;]+)/.exec(` ${result.note ?? ''}`)?.[1];
      const pod = via ? this.cluster.pods.get(via) : undefined;
      const sp = service.ports.find((p) => p.port === probe.port && p.protocol === probe.protocol);
      if (!pod || !sp) return { result, sides: [] };
      port = typeof sp.targetPort === 'number' ? sp.targetPort : pod.ports.find((p) => p.name === sp.targetPort && p.protocol === sp.protocol)?.containerPort ?? port;
      dstSlot = this.podSlot(pod, family);
    }
    const dst = dstSlot.endpoint as Endpoint;
    // Same-node host traffic and loopback are decided before either side.
    if ((src.kind === 'host' && dst.kind === 'pod' && src.nodeName !== undefined && src.nodeName === dst.pod.nodeName) ||
        (!service && src.kind === 'pod' && dst.kind === 'pod' && src.pod === dst.pod)) return { result, sides: [] };
    const portProbe = this.setPortProbe(probe.protocol, port, sourcePort, dst.kind === 'pod' ? dst.pod : undefined, family);
    const sides: SideDecision[] = [];
    if (src.kind === 'pod') {
      const d = this.decideDirection('Egress', srcSlot, dstSlot, portProbe, service);
      sides.push({ direction: 'Egress', pod: podKey(src.pod), verdict: d.verdict, decidedBy: d.decidedBy });
    }
    if (dst.kind === 'pod') {
      const d = this.decideDirection('Ingress', dstSlot, srcSlot, portProbe, undefined);
      sides.push({ direction: 'Ingress', pod: podKey(dst.pod), verdict: d.verdict, decidedBy: d.decidedBy });
    }
    return { result, sides };
  }

  /** The slot of a probe endpoint string in one family (resolved once per change). Throws UnknownEndpointError. */
  private slot(ref: string, which: string, family: 4 | 6): Slot {
    const key = family === 4 ? ref : `${ref}\u00006`;
    let slot = this.slots.get(key);
    if (slot) return slot;
    slot = this.newSlot(this.resolveUncached(ref, which, family));
    if (this.slots.size > 100_000) this.slots.clear();
    this.slots.set(key, slot);
    return slot;
  }

  /** The slot of a Pod reached through a Service (post-DNAT destination). */
  private podSlot(pod: PodInfo, family: 4 | 6): Slot {
    return pod.hostNetwork ? this.newSlot(podOrHostEndpoint(pod, this.cluster, family)) : this.slot(podKey(pod), 'to', family);
  }

  private newSlot(endpoint: Resolved): Slot {
    if (endpoint.kind !== 'pod') return { endpoint };
    const peerSlots = this.compile().peerSlots;
    return { endpoint, members: new Uint8Array(peerSlots), ctx: { target: endpoint.pod } };
  }

  private setPortProbe(protocol: string, port: number, sourcePort: number | undefined, dstPod: PodInfo | undefined, family: 4 | 6): PortProbe {
    const p = this.portProbe;
    p.family = family;
    p.protocol = protocol;
    p.port = port;
    p.sourcePort = sourcePort;
    p.dstPod = dstPod;
    return p;
  }

  private parse(ref: string): ParsedEndpoint {
    let parsed = this.endpointParseCache.get(ref);
    if (!parsed) {
      parsed = parseEndpoint(ref);
      if (this.endpointParseCache.size > 100_000) this.endpointParseCache.clear();
      this.endpointParseCache.set(ref, parsed);
    }
    return parsed;
  }

  private resolveUncached(ref: string, which: string, family: 4 | 6): Resolved {
    const parsed = this.parse(ref);
    switch (parsed.kind) {
      case 'pod': {
        const pod = this.cluster.pods.get(`${parsed.namespace}/${parsed.name}`);
        if (!pod) throw new UnknownEndpointError(`${which} "${ref}": no Pod ${parsed.namespace}/${parsed.name} in the cluster`);
        return podOrHostEndpoint(pod, this.cluster, family);
      }
      case 'service': {
        const service = this.cluster.services.get(`${parsed.namespace}/${parsed.name}`);
        if (!service) throw new UnknownEndpointError(`${which} "${ref}": no Service ${parsed.namespace}/${parsed.name} in the cluster`);
        return { kind: 'service', service };
      }
      case 'ip': {
        const ipNum = ipv4ToNumber(parsed.ip);
        const pod = this.cluster.podByIp.get(parsed.ip);
        if (pod) return podEndpoints(pod).find((ep) => ep.ip === parsed.ip)!;
        const node = this.cluster.nodeByIp.get(parsed.ip);
        if (node) return { kind: 'host', ip: parsed.ip, ipNum, node, nodeName: node.name };
        const service = this.cluster.serviceByIp.get(parsed.ip);
        if (service) return { kind: 'service', service };
        return { kind: 'external', ip: parsed.ip, ipNum };
      }
    }
  }

  private decide(
    srcSlot: Slot, dstSlot: Slot, protocol: string, port: number, sourcePort: number | undefined, service: ServiceInfo | undefined, family: 4 | 6,
  ): Pick<ProbeResult, 'verdict' | 'decidedBy' | 'note'> {
    const src = srcSlot.endpoint as Endpoint;
    const dst = dstSlot.endpoint as Endpoint;
    // Kubelet probes: a Node (or hostNetwork Pod) reaches the Pods on its own Node unconditionally.
    if (src.kind === 'host' && dst.kind === 'pod' && src.nodeName !== undefined && src.nodeName === dst.pod.nodeName) {
      return SAME_NODE_HOST;
    }
    // A Pod talking to its own address never leaves its network namespace (not so via a Service: hairpin).
    if (!service && src.kind === 'pod' && dst.kind === 'pod' && src.pod === dst.pod) {
      return LOOPBACK;
    }
    const portProbe = this.setPortProbe(protocol, port, sourcePort, dst.kind === 'pod' ? dst.pod : undefined, family);
    let egress: Outcome | undefined;
    if (src.kind === 'pod') {
      egress = this.decideDirection('Egress', srcSlot, dstSlot, portProbe, service);
      if (egress.verdict !== 'allow') return egress;
    }
    let ingress: Outcome | undefined;
    if (dst.kind === 'pod') {
      // Ingress sees the post-DNAT flow: toServices peers (pre-DNAT) never match here.
      ingress = this.decideDirection('Ingress', dstSlot, srcSlot, portProbe, undefined);
      if (ingress.verdict !== 'allow') return ingress;
    }
    // Both allow: report the egress rule that allowed, else the ingress one, else the default.
    if (egress?.decidedBy) return egress;
    if (ingress?.decidedBy) return ingress;
    return DEFAULT_ALLOW;
  }

  private decideDirection(dir: Direction, selfSlot: Slot, other: Slot, portProbe: PortProbe, service: ServiceInfo | undefined): Outcome {
    const self = (selfSlot.endpoint as Extract<Endpoint, { kind: 'pod' }>).pod;
    const pr = selfSlot.rules ?? (selfSlot.rules = this.rulesFor(self));
    const d = dir === 'Egress' ? pr.Egress : pr.Ingress;
    const list = d.list;
    const ctx: MatchContext = service ? { target: self, service } : selfSlot.ctx!;
    const s1 = d.stage1;
    const s2 = d.stage2;
    let i = 0;
    for (; i < s1; i++) {
      const r = list[i]!;
      if (!ruleMatches(r, other, ctx, portProbe)) continue;
      if (r.pass) break;
      return r.outcome;
    }
    for (i = s1; i < s2; i++) {
      const r = list[i]!;
      if (ruleMatches(r, other, ctx, portProbe)) return r.outcome;
    }
    const iso = d.isolated;
    if (iso) return iso;
    for (i = s2; i < list.length; i++) {
      const r = list[i]!;
      if (!ruleMatches(r, other, ctx, portProbe)) continue;
      if (r.pass) break;
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

/** A Pod (or, hostNetwork, its Node) at its address of `family`; a Pod without addresses at none. */
function podOrHostEndpoint(pod: PodInfo, cluster: ClusterState, family: 4 | 6): Endpoint {
  if (!pod.hostNetwork) return podEndpointOf(pod, family) ?? podEndpoints(pod)[0]!;
  const ip = pod.ips.find((a) => ipFamily(a) === family) ?? pod.ips[0] ?? '';
  const node = pod.nodeName ? cluster.nodes.get(pod.nodeName) : undefined;
  return { kind: 'host', ip, ipNum: ipv4ToNumber(ip), ...(node ? { node } : {}), ...(pod.nodeName ? { nodeName: pod.nodeName } : {}), pod };
}

function firstIndex<T>(list: T[], pred: (x: T) => boolean): number {
  for (let i = 0; i < list.length; i++) if (pred(list[i]!)) return i;
  return list.length;
}
