/**
 * A connection judged from one node's rule set alone (pure, no I/O): what the policy flows this
 * node installs (daemon/flows/policy/compile.ts) decide for a new connection with that tuple, per
 * side the node enforces — the egress of a local source Pod, the ingress of a local destination
 * Pod. It needs no cluster: only `NodeRule[]` and `NodeIsolation[]` (from the engine's
 * nodeRuleSet()/nodeIsolations(), or from the controller through NodePolicyState) and, for Service
 * connections, where kube-proxy sends a Service port. It is what an agent in controller mode, which
 * holds no PolicyEngine, judges its open connections with (the conntrack sweep).
 *
 * ```ts
 * const v = new NodeVerdicts(rules, isolations, { serviceEndpoints, nodeIPs });   // anew when rules or isolations change
 * v.judge({ src: '10.1.0.5', dst: '10.1.1.7', protocol: 'TCP', port: 80, sourcePort: 40000 });
 * v.judgeService({ src: '10.1.0.5', dst: '10.96.0.10', protocol: 'UDP', port: 53, sourcePort: 40001 }); // dst = a ClusterIP
 * // -> [{ direction: 'Egress', target: 'ns/client', verdict: 'drop', decidedBy: { kind: 'rule', ... }, passed: [] }, ...]
 * ```
 *
 * Semantics, per direction, in the compiler's table order (which the reference evaluator,
 * evaluator.ts, follows too):
 *  - stage 0 (Antrea tiers but baseline, AdminNetworkPolicy, CNP Admin) in (stage, tier, policy,
 *    rule, tieBreak, node-rule id) order — the order allocatePriorities gives the flows; the first
 *    match decides; a Pass goes on to stage 1;
 *  - stage 1, Kubernetes NetworkPolicy: a matching rule allows (they are all Allow, which is why
 *    the flows can give them one priority; a stage-1 rule of another action, which no kind makes,
 *    would decide here in order with its own action);
 *  - the Kubernetes isolation of the target in that direction drops (the first isolating policy by
 *    kind/namespace/name is named, as the evaluator names it);
 *  - stage 2 (baseline tier, BaselineAdminNetworkPolicy, CNP Baseline), first match decides; a Pass
 *    there allows (the flows go on to the Metric table; the evaluator's default);
 *  - nothing matched: allow, decided by 'default'.
 * A rule matches when the side's address is one of its Pod targets' addresses (Node targets are
 * host traffic, never judged on the bridge), the other address is among its peers ('any', an
 * address, inside a CIDR — ipBlock excepts come already subtracted) and the protocol/ports match
 * (named ports come resolved to numbers; a name left unresolved, or an IGMP condition, never
 * matches, as no flow can). Ingress never sees toServices peers (it judges the post-DNAT packet).
 *
 * Where the flows and the evaluator differ, this follows the flows (the packets meet them):
 *  - Services. The client's packet to the ClusterIP (before the host's DNAT) meets only the egress
 *    rules with toServices peers (stage 0, then, unless the Pod is egress-isolated, stage 2; the
 *    Kubernetes rules are skipped): a toServices Drop/Reject decides there, even when a rule of
 *    higher precedence would allow the endpoint (the evaluator judges the endpoint with every rule
 *    in order). The packet after DNAT (`service` set: dst = endpoint, port = target port) then meets
 *    every egress rule, a toServices peer matching when the endpoint is one of its Service's
 *    endpoints — of any Service naming it, so an endpoint shared by two Services matches the
 *    toServices rules of both (the evaluator: the Service of the connection only; so does this
 *    function when given no resolver).
 *  - Host traffic. A connection from this node's own address (`nodeIPs`: kubelet probes, and
 *    hostNetwork Pods of this node) is exempt from ingress rules; the evaluator agrees for the
 *    local node. A Pod's connection to its own address never reaches the bridge: no side.
 *  - A local Pod that no rule or isolation targets has no side here (the flows have nothing for
 *    it: default allow), where the evaluator reports an allow decided by the default.
 *
 * What this cannot know without the cluster: the other node's side, and, for a connection to a
 * ClusterIP, which endpoint kube-proxy chose — judgeService() judges each endpoint the resolver
 * gives and says whether they disagree (judge.ts keeps such connections). The resolver is asked at
 * judging time, so endpoint moves need no rebuild.
 *
 * Tests: test/unit/policy-node-verdict.test.ts (random clusters of every policy kind, against the
 * evaluator's explain(); precedence mutations must be caught) and
 * test/unit/policy-node-verdict-flows.test.ts (against the compiled flows, run through an OpenFlow
 * interpreter of the policy tables; with a reproducer of the pre-DNAT toServices difference).
 */
import { canonicalIp, cidrContainsIp, formatIp, parseCidr, parseIp, type ParsedCidr } from './cidr.js';
import type { NodeIsolation, NodeRule } from './internal.js';
import type { SideDecision } from './evaluator.js';
import { comparePriority } from './order.js';
import type { Action, DecidedBy, Direction, PolicyKind, PortMatch, RuleRef, Verdict } from './types.js';
import { type AddressList, SortedList } from './sorted-list.js';

export class NodeVerdictError extends Error {
  override name = 'NodeVerdictError';
}

/**
 * An isolation as the engine (NodeIsolation) or the flow compiler's input gives it: only its
 * direction, policy and local targets are read.
 */
export interface IsolationInput {
  id?: string;
  direction: Direction;
  ref: { kind: PolicyKind; namespace?: string | undefined; name: string };
  targets: NodeIsolation['targets'];
}

/** A connection by its first packet's tuple, as the bridge sees it. */
export interface NodeConnection {
  src: string;
  /** The destination address: a Pod, a Node, an external address, or (judgeService) a ClusterIP. */
  dst: string;
  protocol: 'TCP' | 'UDP' | 'SCTP' | 'ICMP';
  /** Destination port (after DNAT: the endpoint's target port); ignored for ICMP. */
  port: number;
  /** The client's port: required for TCP, UDP and SCTP (rules may match it). */
  sourcePort?: number;
  /** ICMP type and code of the first packet; default an echo request (8, or 128 over IPv6; code 0). */
  icmpType?: number;
  icmpCode?: number;
  /**
   * Set when the client addressed a Service and `dst`:`port` is the endpoint the host's DNAT sent
   * it to: the ClusterIP and Service port of the packet before DNAT.
   */
  service?: { ip: string; port: number };
}

/** The endpoints (post-DNAT address and port) behind one Service address/protocol/port (the flow compiler's ServiceResolver). */
export type ServiceBackendResolver = (clusterIP: string, protocol: string, port: number) => { ip: string; port: number }[];

export interface NodeVerdictOptions {
  /** Where kube-proxy sends a Service port: toServices peers after DNAT, and judgeService(). */
  serviceEndpoints?: ServiceBackendResolver;
  /** This node's own addresses: connections from them are host traffic, exempt from ingress rules. */
  nodeIPs?: readonly string[];
}

/** What decided a side: a node rule, a Kubernetes isolation, or nothing (the default allow). */
export type NodeDecider =
  | { kind: 'rule'; id: string; ruleId: string; ref: RuleRef; action: Action; stage: 0 | 1 | 2 }
  | { kind: 'isolation'; id?: string; ref: IsolationInput['ref'] }
  | { kind: 'default' };

/** One side this node enforces. */
export interface NodeSideVerdict {
  direction: Direction;
  /** The local Pod ("ns/name") whose address the connection uses on this side. */
  target: string;
  verdict: Verdict;
  decidedBy: NodeDecider;
  /** Ids of the Pass rules the walk went through, in order. */
  passed: string[];
}

/** judgeService(): the sides per endpoint, and the sides reported (the first endpoint with a denial, else the first). */
export interface NodeServiceVerdict {
  endpoints: { ip: string; port: number; sides: NodeSideVerdict[] }[];
  sides: NodeSideVerdict[];
  /** The endpoints' local verdicts differ (which endpoint the connection reached is not known). */
  disagree: boolean;
}

/** A decider in the evaluator's form (SideDecision.decidedBy; null for the default). */
export function decidedByOf(side: Pick<NodeSideVerdict, 'direction' | 'decidedBy'>): DecidedBy | null {
  const d = side.decidedBy;
  if (d.kind === 'default') return null;
  const ns = d.ref.namespace ? { namespace: d.ref.namespace } : {};
  if (d.kind === 'isolation') return { kind: 'K8sNetworkPolicyIsolation', ...ns, name: d.ref.name, direction: side.direction, action: 'IsolationDrop' };
  return { kind: d.ref.kind, ...ns, name: d.ref.name, rule: d.ref.rule, direction: side.direction, ...(d.ref.tier ? { tier: d.ref.tier } : {}), action: d.action };
}

/** A side in the evaluator's form (what judge.ts reads of `explain().sides`). */
export function toSideDecision(side: NodeSideVerdict): SideDecision {
  return { direction: side.direction, pod: side.target, verdict: side.verdict, decidedBy: decidedByOf(side) };
}

/** One-shot form of NodeVerdicts#judge (builds the index each call: prefer the class for many connections). */
export function nodeVerdict(rules: readonly NodeRule[], isolations: readonly IsolationInput[], conn: NodeConnection, opts: NodeVerdictOptions = {}): NodeSideVerdict[] {
  return new NodeVerdicts(rules, isolations, opts).judge(conn);
}

interface Addr {
  text: string;
  ip: { family: 4 | 6; value: bigint };
}

interface CompiledRule {
  rule: NodeRule;
  stage: 0 | 1 | 2;
  ports: (p: PacketPorts) => boolean;
  /** undefined = any peer */
  ips?: IpLookup;
  cidrs?: ParsedCidr[];
  /** toServices peers, addresses in canonical form (`raw`: as the rule names them, for the resolver). */
  services?: { ip: string; raw: string; family: 4 | 6 | undefined; protocol: string; port: number }[];
  decider: NodeDecider & { kind: 'rule' };
}

interface PacketPorts {
  protocol: NodeConnection['protocol'];
  family: 4 | 6;
  port: number;
  sourcePort: number | undefined;
  icmpType: number;
  icmpCode: number;
}

/** The rules and isolation of one local address, per direction, in evaluation order. */
interface TargetIndex {
  ref: string;
  Egress: CompiledRule[];
  Ingress: CompiledRule[];
  isolation: { Egress?: NodeDecider & { kind: 'isolation' }; Ingress?: NodeDecider & { kind: 'isolation' } };
}

const isPodTarget = (x: NodeRule['targets'][number]): boolean => (x.kind ?? (x.ref.includes('/') ? 'pod' : 'node')) === 'pod';
const canon = (ip: string): string => canonicalIp(ip) ?? ip;
const verdictOf = (a: Action): Verdict => (a === 'Allow' ? 'allow' : a === 'Reject' ? 'reject' : 'drop');
const isolationKey = (i: IsolationInput): string => `${i.ref.kind}/${i.ref.namespace ?? ''}/${i.ref.name}/${i.direction}`;

/** Membership in a peer address list, asked with a canonical address. */
interface IpLookup {
  has(ip: string): boolean;
}

/**
 * Peer address lists are shared between rules (one per address group): one lookup each. A
 * SortedList whose addresses are all canonical answers by binary search itself, nothing copied:
 * a Set of a 75 000-member group's addresses is 2.5 MiB of hash table for every version of the
 * list the verdicts hold (bench/scale-lab, a heap snapshot of an agent at 150 000 Pods). Any other
 * list gets a Set of its canonical forms.
 */
const IP_LOOKUPS = new WeakMap<AddressList, IpLookup>();
function ipLookup(list: AddressList): IpLookup {
  let s = IP_LOOKUPS.get(list);
  if (!s) IP_LOOKUPS.set(list, (s = list instanceof SortedList && allCanonical(list) ? list : new Set(Array.from(list, canon))));
  return s;
}

function allCanonical(list: Iterable<string>): boolean {
  for (const ip of list) if (canon(ip) !== ip) return false;
  return true;
}

/** The rule set of one node, indexed by local address, judging connections (see the module comment). */
export class NodeVerdicts {
  private readonly byIp = new Map<string, TargetIndex>();
  private readonly nodeIPs: ReadonlySet<string>;
  private readonly resolve: ServiceBackendResolver | undefined;

  constructor(rules: readonly NodeRule[], isolations: readonly IsolationInput[], opts: NodeVerdictOptions = {}) {
    this.resolve = opts.serviceEndpoints;
    this.nodeIPs = new Set((opts.nodeIPs ?? []).map(canon));
    const index = (ref: string, ip: string): TargetIndex => {
      const key = canon(ip);
      let t = this.byIp.get(key);
      if (!t) this.byIp.set(key, (t = { ref, Egress: [], Ingress: [], isolation: {} }));
      return t;
    };
    const seen = new Set<string>();
    // The order the flow compiler gives priorities in (allocatePriorities: priority, then node-rule id).
    const sorted = [...rules].sort((a, b) => comparePriority(a.priority, b.priority) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    for (const rule of sorted) {
      if (seen.has(rule.id)) throw new NodeVerdictError(`node rule id ${rule.id} appears twice in the rule set`);
      seen.add(rule.id);
      const stage = rule.priority.stage;
      if (stage !== 0 && stage !== 1 && stage !== 2) throw new NodeVerdictError(`node rule ${rule.id}: stage ${String(stage)} is not 0, 1 or 2`);
      const c: CompiledRule = {
        rule,
        stage,
        ports: compilePorts(rule.ports),
        ...(rule.peers === 'any' ? {} : { ips: ipLookup(rule.peers.ips), cidrs: rule.peers.cidrs.map((t) => cidrOf(t, rule.id)), services: rule.peers.services.map((x) => ({ ip: canon(x.ip), raw: x.ip, family: parseIp(x.ip)?.family, protocol: x.protocol, port: x.port })) }),
        decider: { kind: 'rule', id: rule.id, ruleId: rule.ruleId, ref: rule.ref, action: rule.action, stage },
      };
      const ips = new Set<string>();
      for (const t of rule.targets) if (isPodTarget(t)) for (const ip of t.ips) if (!ips.has(canon(ip))) {
        ips.add(canon(ip));
        index(t.ref, ip)[rule.direction].push(c);
      }
    }
    // The first isolating policy (kind/namespace/name) is the one named, as the evaluator names it.
    const isoSorted = [...isolations].sort((a, b) => (isolationKey(a) < isolationKey(b) ? -1 : isolationKey(a) > isolationKey(b) ? 1 : 0));
    for (const iso of isoSorted) {
      for (const t of iso.targets) {
        if (!isPodTarget(t)) continue;
        for (const ip of t.ips) {
          const entry = index(t.ref, ip);
          entry.isolation[iso.direction] ??= { kind: 'isolation', ...(iso.id !== undefined ? { id: iso.id } : {}), ref: iso.ref };
        }
      }
    }
  }

  /**
   * The sides this node enforces for a connection whose packets are src -> dst (with `service`:
   * the packet after DNAT, whose pre-DNAT packet the egress side judges first). Throws
   * NodeVerdictError for a connection that is not one (bad address, families mixed, no port).
   */
  judge(conn: NodeConnection): NodeSideVerdict[] {
    const src = addr(conn.src, 'src');
    const dst = addr(conn.dst, 'dst');
    if (src.ip.family !== dst.ip.family) throw new NodeVerdictError(`connection ${conn.src} -> ${conn.dst}: the addresses are of different families`);
    const family = src.ip.family;
    const pre = conn.service ? addr(conn.service.ip, 'service.ip') : undefined;
    if (pre && pre.ip.family !== family) throw new NodeVerdictError(`connection ${conn.src} -> ${conn.service!.ip}: the Service address is of another family`);
    const ports = packetPorts(conn, family, conn.port);
    // A Pod talking to its own address never leaves its network namespace (via a Service it does: hairpin).
    if (!conn.service && src.text === dst.text) return [];
    const sides: NodeSideVerdict[] = [];
    const self = this.byIp.get(src.text);
    if (self) {
      let side: NodeSideVerdict | undefined;
      if (pre && conn.service) {
        const before = this.preDnat(self, pre.text, packetPorts(conn, family, conn.service.port));
        if (before.verdict !== 'allow') side = before;
      }
      side ??= this.walk('Egress', self, (r) => r.ports(ports) && this.egressPeer(r, dst, conn, pre));
      sides.push(side);
    }
    const target = this.byIp.get(dst.text);
    if (target && !this.nodeIPs.has(src.text)) {
      sides.push(this.walk('Ingress', target, (r) => r.ports(ports) && peerAddress(r, src)));
    }
    return sides;
  }

  /**
   * A connection to a Service address (conntrack's pre-DNAT entry: dst = ClusterIP, port = Service
   * port), judged for every endpoint the resolver gives (of the same family). No endpoint: no side
   * (kube-proxy, not policy, answers it).
   */
  judgeService(conn: NodeConnection): NodeServiceVerdict {
    if (!this.resolve) throw new NodeVerdictError(`connection to Service ${conn.dst}:${conn.port}: no Service endpoint resolver was given`);
    const family = addr(conn.dst, 'dst').ip.family;
    const endpoints = this.resolve(canon(conn.dst), conn.protocol, conn.port)
      .filter((e) => parseIp(e.ip)?.family === family)
      .map((e) => ({ ip: e.ip, port: e.port, sides: this.judge({ ...conn, dst: e.ip, port: e.port, service: { ip: conn.dst, port: conn.port } }) }));
    const signature = (s: NodeSideVerdict[]) => s.map((x) => `${x.direction}:${x.verdict}`).join(',');
    const chosen = endpoints.find((e) => e.sides.some((s) => s.verdict !== 'allow')) ?? endpoints[0];
    return {
      endpoints,
      sides: chosen?.sides ?? [],
      disagree: endpoints.some((e) => signature(e.sides) !== signature(endpoints[0]!.sides)),
    };
  }

  /**
   * The client's packet to the ClusterIP, before DNAT: only toServices peers can match it (every
   * other stage-0/stage-2 egress flow requires "not to a ClusterIP", the Kubernetes table skips it,
   * and an egress-isolated Pod's such packet goes on to be judged after DNAT).
   */
  private preDnat(self: TargetIndex, clusterIP: string, ports: PacketPorts): NodeSideVerdict {
    const list = self.Egress;
    const passed: string[] = [];
    const matches = (r: CompiledRule) => !!r.services?.some((s) => s.protocol === ports.protocol && s.ip === clusterIP && s.port === ports.port) && r.ports(ports);
    const decided = (r: CompiledRule): NodeSideVerdict => ({ direction: 'Egress', target: self.ref, verdict: verdictOf(r.rule.action), decidedBy: r.decider, passed });
    let i = 0;
    for (; i < list.length && list[i]!.stage === 0; i++) {
      const r = list[i]!;
      if (!matches(r)) continue;
      if (r.rule.action !== 'Pass') return decided(r);
      passed.push(r.rule.id);
      break;
    }
    const dflt: NodeSideVerdict = { direction: 'Egress', target: self.ref, verdict: 'allow', decidedBy: { kind: 'default' }, passed };
    if (self.isolation.Egress) return dflt;
    for (i = firstOfStage(list, 2); i < list.length; i++) {
      const r = list[i]!;
      if (!matches(r)) continue;
      if (r.rule.action === 'Pass') {
        passed.push(r.rule.id);
        return dflt;
      }
      return decided(r);
    }
    return dflt;
  }

  /** One direction's tables for a local address (see the module comment). */
  private walk(direction: Direction, self: TargetIndex, matches: (r: CompiledRule) => boolean): NodeSideVerdict {
    const list = self[direction];
    const passed: string[] = [];
    const out = (verdict: Verdict, decidedBy: NodeDecider): NodeSideVerdict => ({ direction, target: self.ref, verdict, decidedBy, passed });
    let i = 0;
    for (; i < list.length && list[i]!.stage === 0; i++) {
      const r = list[i]!;
      if (!matches(r)) continue;
      if (r.rule.action !== 'Pass') return out(verdictOf(r.rule.action), r.decider);
      passed.push(r.rule.id);
      break;
    }
    for (i = firstOfStage(list, 1); i < list.length && list[i]!.stage === 1; i++) {
      const r = list[i]!;
      if (!matches(r)) continue;
      // A Pass outside stage 0 goes to the Metric table: allowed, no rule recorded.
      if (r.rule.action === 'Pass') {
        passed.push(r.rule.id);
        return out('allow', { kind: 'default' });
      }
      return out(verdictOf(r.rule.action), r.decider);
    }
    const iso = self.isolation[direction];
    if (iso) return out('drop', iso);
    for (i = firstOfStage(list, 2); i < list.length; i++) {
      const r = list[i]!;
      if (!matches(r)) continue;
      if (r.rule.action === 'Pass') {
        passed.push(r.rule.id);
        return out('allow', { kind: 'default' });
      }
      return out(verdictOf(r.rule.action), r.decider);
    }
    return out('allow', { kind: 'default' });
  }

  /**
   * An egress rule's peers for the packet to `dst`: its addresses and CIDRs; after DNAT also its
   * toServices peers whose Service sends the port to this endpoint (the flows' post-DNAT unit).
   */
  private egressPeer(r: CompiledRule, dst: Addr, conn: NodeConnection, pre: Addr | undefined): boolean {
    if (peerAddress(r, dst)) return true;
    if (!pre || !conn.service || !r.services || r.services.length === 0) return false;
    for (const s of r.services) {
      if (s.protocol !== conn.protocol) continue;
      if (!this.resolve) {
        if (s.ip === pre.text && s.port === conn.service.port) return true;
        continue;
      }
      if (s.family !== dst.ip.family) continue;
      for (const e of this.resolve(s.raw, s.protocol, s.port)) if (canon(e.ip) === dst.text && e.port === conn.port) return true;
    }
    return false;
  }
}

/** The rule's address peers (any, an address, a CIDR) hold `a`. */
function peerAddress(r: CompiledRule, a: Addr): boolean {
  if (!r.ips) return true;
  if (r.ips.has(a.text)) return true;
  for (const c of r.cidrs!) if (cidrContainsIp(c, a.ip)) return true;
  return false;
}

function firstOfStage(list: readonly CompiledRule[], stage: 1 | 2): number {
  let i = 0;
  while (i < list.length && list[i]!.stage < stage) i++;
  return i;
}

function addr(text: string, field: string): Addr {
  const ip = typeof text === 'string' ? parseIp(text) : undefined;
  if (!ip) throw new NodeVerdictError(`connection ${field} ${JSON.stringify(text)} is not an IP address`);
  return { text: formatIp(ip.family, ip.value), ip };
}

const CIDRS = new Map<string, ParsedCidr>();
function cidrOf(text: string, ruleId: string): ParsedCidr {
  let c = CIDRS.get(text);
  if (!c) {
    c = parseCidr(text);
    if (!c) throw new NodeVerdictError(`node rule ${ruleId}: peer CIDR ${JSON.stringify(text)} is not a CIDR`);
    if (CIDRS.size > 65536) CIDRS.clear();
    CIDRS.set(text, c);
  }
  return c;
}

function packetPorts(conn: NodeConnection, family: 4 | 6, port: number): PacketPorts {
  const { protocol } = conn;
  if (protocol === 'ICMP') {
    return { protocol, family, port: 0, sourcePort: undefined, icmpType: conn.icmpType ?? (family === 6 ? 128 : 8), icmpCode: conn.icmpCode ?? 0 };
  }
  if (protocol !== 'TCP' && protocol !== 'UDP' && protocol !== 'SCTP') throw new NodeVerdictError(`connection protocol ${JSON.stringify(protocol)} is not TCP, UDP, SCTP or ICMP`);
  const valid = (p: unknown): p is number => Number.isInteger(p) && (p as number) >= 0 && (p as number) <= 65535;
  if (!valid(port)) throw new NodeVerdictError(`connection ${conn.src} -> ${conn.dst}: destination port ${JSON.stringify(port)} is not a port number`);
  if (!valid(conn.sourcePort)) throw new NodeVerdictError(`connection ${conn.src} -> ${conn.dst}: ${protocol} needs its source port (got ${JSON.stringify(conn.sourcePort)})`);
  return { protocol, family, port, sourcePort: conn.sourcePort, icmpType: 0, icmpCode: 0 };
}

/** Port conditions as the flows match them (portMatches in compile.ts): any one of them; [] = any traffic. */
function compilePorts(ports: readonly PortMatch[]): (p: PacketPorts) => boolean {
  if (ports.length === 0) return () => true;
  const each = ports.map(compilePort);
  return (p) => each.some((m) => m(p));
}

function compilePort(pm: PortMatch): (p: PacketPorts) => boolean {
  if (pm.protocol === 'ICMP') return (p) => p.protocol === 'ICMP' && (pm.icmpType === undefined || pm.icmpType === p.icmpType) && (pm.icmpCode === undefined || pm.icmpCode === p.icmpCode);
  // IGMP is never matched by a flow; a named port left unresolved means the destination has no such port.
  if (pm.protocol === 'IGMP' || typeof pm.port === 'string') return () => false;
  const lo = pm.port;
  const hi = pm.endPort ?? pm.port;
  const slo = pm.sourcePort;
  const shi = pm.sourceEndPort ?? pm.sourcePort;
  return (p) =>
    p.protocol === pm.protocol &&
    (lo === undefined || (p.port >= lo && p.port <= hi!)) &&
    (slo === undefined || (p.sourcePort !== undefined && p.sourcePort >= slo && p.sourcePort <= shi!));
}
