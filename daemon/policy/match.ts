/**
 * Compiled matchers for selectors, peers and ports: the evaluator's hot path. Each IR peer is
 * turned once into a closure; closures read live cluster state through `MatchEnv`, so they stay
 * valid across Pod/Namespace changes (the engine only recompiles when rules change).
 */
import { cidrContainsIp, ipFamily, ipv4ToNumber, parseCidr, parseIp, subtractCidrs } from './cidr.js';
import { appliedToMembers, expandGroupMembers } from './antrea/groups.js';
import { labelValue } from './labels.js';
import type { ClusterState } from './cluster.js';
import type { GroupDef, LabelSelector, NamespaceMatch, NodeInfo, Peer, PodInfo, PortMatch, ServiceInfo } from './types.js';

/** A resolved probe endpoint. */
export type Endpoint =
  | { kind: 'pod'; pod: PodInfo; ip: string; ipNum: number }
  /** A Node address, or a hostNetwork Pod (which has its Node's address and no policy side of its own). */
  | { kind: 'host'; ip: string; ipNum: number; node?: NodeInfo; nodeName?: string; pod?: PodInfo }
  | { kind: 'external'; ip: string; ipNum: number };

const endpointCache = new WeakMap<PodInfo, Endpoint[]>();

/**
 * One Endpoint per address of a Pod, in status order (one object per Pod version: PodInfo objects
 * are replaced, never mutated). A dual-stack Pod has one per family; a Pod without an address one
 * with the empty address.
 */
export function podEndpoints(pod: PodInfo): Endpoint[] {
  let eps = endpointCache.get(pod);
  if (!eps) {
    const ips = pod.ips.length > 0 ? pod.ips : [''];
    endpointCache.set(pod, (eps = ips.map((ip): Endpoint => ({ kind: 'pod', pod, ip, ipNum: ipv4ToNumber(ip) }))));
  }
  return eps;
}

/** The Pod as an endpoint at its first address. */
export function podEndpoint(pod: PodInfo): Endpoint {
  return podEndpoints(pod)[0]!;
}

/** The Pod as an endpoint at its first address of `family`; undefined when it has none. */
export function podEndpointOf(pod: PodInfo, family: 4 | 6): Endpoint | undefined {
  return podEndpoints(pod).find((ep) => ipFamily(ep.ip) === family);
}

export interface MatchContext {
  /** The Pod the rule is evaluated for (for `self` / `sameLabels` namespace matches). */
  target: PodInfo;
  /** The Service a probe was addressed to (pre-DNAT), for `service` (toServices) peers. */
  service?: ServiceInfo;
}

export interface MatchEnv {
  cluster: ClusterState;
  group(namespace: string | undefined, name: string): GroupDef | undefined;
  /** Pod keys ("ns/name") behind a Service. */
  serviceEndpointKeys(namespace: string, name: string): Set<string>;
  /** Whether `ip` is a learned address of a name matching the fqdn pattern. */
  fqdnMatches(pattern: string, ip: string): boolean;
}

export type PeerMatcher = (ep: Endpoint, ctx: MatchContext) => boolean;
export type LabelMatcher = (labels: Record<string, string>) => boolean;

/** Compiles a LabelSelector (same semantics as labels.ts matchesSelector). */
export function compileSelector(selector: LabelSelector): LabelMatcher {
  const eq = Object.entries(selector.matchLabels ?? {});
  const exprs = (selector.matchExpressions ?? []).map((r) => ({ key: r.key, op: r.operator, values: new Set(r.values ?? []) }));
  if (eq.length === 0 && exprs.length === 0) return () => true;
  return (labels) => {
    for (let i = 0; i < eq.length; i++) if (labelValue(labels, eq[i]![0]) !== eq[i]![1]) return false;
    for (let i = 0; i < exprs.length; i++) {
      const r = exprs[i]!;
      const v = labelValue(labels, r.key);
      switch (r.op) {
        case 'In': if (v === undefined || !r.values.has(v)) return false; break;
        case 'NotIn': if (v !== undefined && r.values.has(v)) return false; break;
        case 'Exists': if (v === undefined) return false; break;
        case 'DoesNotExist': if (v !== undefined) return false; break;
        default: return false;
      }
    }
    return true;
  };
}

export type NamespaceMatcher = (namespace: string, target: PodInfo) => boolean;

export function compileNamespaceMatch(m: NamespaceMatch, cluster: ClusterState): NamespaceMatcher {
  switch (m.kind) {
    case 'all': return () => true;
    case 'names': { const names = new Set(m.names); return (ns) => names.has(ns); }
    case 'selector': {
      const sel = compileSelector(m.selector);
      // the answer per namespace holds until some Namespace changes
      const cache = new Map<string, boolean>();
      let generation = cluster.namespaceGeneration;
      return (ns) => {
        if (generation !== cluster.namespaceGeneration) {
          cache.clear();
          generation = cluster.namespaceGeneration;
        }
        let hit = cache.get(ns);
        if (hit === undefined) cache.set(ns, (hit = sel(cluster.namespaceLabels(ns))));
        return hit;
      };
    }
    case 'self': return (ns, target) => ns === target.namespace;
    case 'sameLabels': {
      const keys = [...m.keys];
      return (ns, target) => {
        const mine = cluster.namespaceLabels(target.namespace);
        const theirs = cluster.namespaceLabels(ns);
        for (const k of keys) {
          const value = labelValue(mine, k);
          if (value === undefined || labelValue(theirs, k) !== value) return false;
        }
        return true;
      };
    }
  }
}

/**
 * An IP range set (cidr minus except) with a fast IPv4 path. A block matches addresses of its own
 * family only: an IPv4 block (even 0.0.0.0/0) never matches an IPv6 address, nor the reverse.
 */
export function compileIpBlock(cidr: string, except: string[]): (ip: string, ipNum: number) => boolean {
  const base = parseCidr(cidr);
  if (!base) return () => false;
  const pieces = subtractCidrs(base, except.map(parseCidr).filter((c): c is NonNullable<typeof c> => !!c));
  if (base.family === 4) {
    // [start0, end0, start1, end1, ...]
    const bounds = pieces.flatMap((p) => [Number(p.start), Number(p.end)]);
    if (bounds.length === 2) {
      const lo = bounds[0]!, hi = bounds[1]!;
      return (_ip, n) => n >= lo && n <= hi;
    }
    return (_ip, n) => {
      if (n < 0) return false;
      for (let i = 0; i < bounds.length; i += 2) if (n >= bounds[i]! && n <= bounds[i + 1]!) return true;
      return false;
    };
  }
  return (ip) => {
    const parsed = parseIp(ip);
    return !!parsed && pieces.some((p) => cidrContainsIp(p, parsed));
  };
}

const MAX_GROUP_DEPTH = 3;

/**
 * `asTarget`: the peer is an appliedTo term. Then a group's ipBlock members are ignored (they
 * cannot be targets), and a namespaced Group whose members reach outside its namespace is not
 * realizable as a target (Antrea: an Antrea NetworkPolicy only ever applies in its namespace).
 */
export function compilePeer(peer: Peer, env: MatchEnv, depth = 0, asTarget = false): PeerMatcher {
  switch (peer.kind) {
    case 'pods': {
      const ns = compileNamespaceMatch(peer.namespaces, env.cluster);
      const sel = compileSelector(peer.pods);
      const sa = peer.serviceAccount;
      return (ep, ctx) =>
        ep.kind === 'pod' &&
        ns(ep.pod.namespace, ctx.target) &&
        sel(ep.pod.labels) &&
        (!sa || (ep.pod.serviceAccount === sa.name && ep.pod.namespace === sa.namespace));
    }
    case 'ipBlock': {
      const inBlock = compileIpBlock(peer.cidr, peer.except);
      return (ep) => inBlock(ep.ip, ep.ipNum);
    }
    case 'nodes': {
      const sel = compileSelector(peer.selector);
      return (ep) => ep.kind === 'host' && !!ep.node && sel(ep.node.labels);
    }
    case 'fqdn': {
      const pattern = peer.pattern;
      return (ep) => env.fqdnMatches(pattern, ep.ip);
    }
    case 'group': {
      if (depth >= MAX_GROUP_DEPTH) return () => false;
      // Group definitions change independently of rules: resolve at match time, cache per definition.
      const cache = new WeakMap<GroupDef, { members: PeerMatcher[]; children: GroupDef[] }>();
      const { namespace, name } = peer;
      return (ep, ctx) => {
        const def = env.group(namespace, name);
        if (!def) return false;
        let c = cache.get(def);
        if (c?.children.some((child) => env.group(child.namespace, child.name) !== child)) c = undefined;
        if (!c) {
          const children = def.members.flatMap((m) => (m.kind === 'group' ? [env.group(m.namespace, m.name)].filter((d): d is GroupDef => !!d) : []));
          const members = realizableMembers(def, env, asTarget);
          c = { members: (members ?? []).map((m) => compilePeer(m, env, depth + 1)), children };
          cache.set(def, c);
        }
        for (const m of c.members) if (m(ep, ctx)) return true;
        return false;
      };
    }
    case 'serviceRef': {
      const { namespace, name } = peer;
      return (ep) => ep.kind === 'pod' && env.serviceEndpointKeys(namespace, name).has(`${ep.pod.namespace}/${ep.pod.name}`);
    }
    case 'service': {
      const { namespace, name } = peer;
      return (_ep, ctx) => !!ctx.service && ctx.service.namespace === namespace && ctx.service.name === name;
    }
  }
}

/**
 * A group's effective members (childGroups expanded one level; a child with children of its own
 * makes the group unrealizable: undefined). As a target, ipBlocks are dropped and a namespaced
 * Group must stay inside its namespace.
 */
export function realizableMembers(def: GroupDef, env: Pick<MatchEnv, 'group'>, asTarget: boolean): Peer[] | undefined {
  const expanded = expandGroupMembers(def, (ns, n) => env.group(ns, n));
  if (!expanded) return undefined;
  if (!asTarget) return expanded;
  const targets = appliedToMembers(expanded);
  if (def.namespace !== undefined) {
    const inside = targets.every((m) => m.kind === 'pods' ? m.namespaces.kind === 'names' && m.namespaces.names.every((n) => n === def.namespace) : m.kind === 'serviceRef' ? m.namespace === def.namespace : m.kind !== 'nodes');
    if (!inside) return undefined;
  }
  return targets;
}

/** The traffic a port condition is checked against. */
export interface PortProbe {
  protocol: string;
  /** Destination port (post-DNAT); 0 for ICMP. */
  port: number;
  sourcePort?: number | undefined;
  /** The destination Pod, for named ports. */
  dstPod?: PodInfo | undefined;
  /** The address family (an ICMP probe is an echo request: type 8 in ICMP, 128 in ICMPv6). */
  family?: 4 | 6 | undefined;
}

export type PortMatcher = (p: PortProbe) => boolean;

/** `[]` = any traffic; otherwise any entry matching is enough. */
export function compilePorts(ports: PortMatch[]): PortMatcher {
  if (ports.length === 0) return () => true;
  if (ports.length === 1) return compilePort(ports[0]!);
  const each = ports.map(compilePort);
  return (p) => {
    for (let i = 0; i < each.length; i++) if (each[i]!(p)) return true;
    return false;
  };
}

function compilePort(pm: PortMatch): PortMatcher {
  const { protocol } = pm;
  if (protocol === 'ICMP') {
    // A probe is an echo request, code 0: type 8, or 128 over IPv6 (ICMPv6; a rule's type and
    // code are matched as given in the packet's own ICMP version, as the datapath matches them).
    return (p) => p.protocol === 'ICMP' && (pm.icmpType === undefined || pm.icmpType === (p.family === 6 ? 128 : 8)) && (pm.icmpCode === undefined || pm.icmpCode === 0);
  }
  if (protocol === 'IGMP') return () => false;
  const srcLo = pm.sourcePort;
  const srcHi = pm.sourceEndPort ?? pm.sourcePort;
  const srcOk = srcLo === undefined ? () => true : (p: PortProbe) => p.sourcePort !== undefined && p.sourcePort >= srcLo && p.sourcePort <= srcHi!;
  if (typeof pm.port === 'string') {
    const name = pm.port;
    return (p) => {
      if (p.protocol !== protocol || !p.dstPod || !srcOk(p)) return false;
      for (const cp of p.dstPod.ports) if (cp.name === name && cp.protocol === protocol) return cp.containerPort === p.port;
      return false;
    };
  }
  if (pm.port === undefined) return srcLo === undefined ? (p) => p.protocol === protocol : (p) => p.protocol === protocol && srcOk(p);
  const lo = pm.port;
  const hi = pm.endPort ?? pm.port;
  if (srcLo === undefined) return (p) => p.port >= lo && p.port <= hi && p.protocol === protocol;
  return (p) => p.protocol === protocol && p.port >= lo && p.port <= hi && srcOk(p);
}

export { ipv4ToNumber };
