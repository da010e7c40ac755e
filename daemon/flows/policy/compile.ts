/**
 * Policy rules -> OpenFlow flows for the policy hook tables, kept incrementally (pure, no I/O).
 *
 * Each node rule becomes a conjunctive match over the dimensions it restricts, numbered in this
 * order over the dimensions present: source addresses, destination addresses, services.
 *   egress:  1 = local target IPs (nw_src), 2 = peer IPs/CIDRs (nw_dst), 3 = protocol/ports
 *   ingress: 1 = peer IPs/CIDRs (nw_src), 2 = local target IPs (nw_dst), 3 = protocol/ports
 * so a rule costs (sum of the dimension sizes) + 1 flows instead of their product. A peer set used
 * at several places has an address class (addrclass.ts): its peer clause is then one flow on the
 * class bit, and the set's addresses are matched once, in the classification tables. A rule with one
 * dimension needs no conjunction: its flows carry the action. Clause flows with the same table,
 * priority and match (shared by several rules, e.g. the same Pod in two Kubernetes rules) are one
 * flow with several conjunction() actions.
 *
 * Pod -> Service: the Pod's packet to the ClusterIP (reg0 toService, before kube-proxy's DNAT)
 * only meets `toServices` rules (a clause matching proto,nw_dst=ClusterIP,tp_dst=port): every
 * other stage-0/baseline egress rule requires reg0 toService = 0, the Kubernetes rules are skipped
 * (EgressRule 65000), and an egress-isolated Pod's pre-DNAT packet is let through (its endpoint is
 * judged after DNAT). The post-DNAT packet re-entering from antrea-gw0 (source = the client Pod IP,
 * destination = the endpoint, reg0 toService = 0) is then decided by the egress rules of the client
 * Pod, which match by nw_src whatever the in_port, and by the endpoint's ingress rules if local.
 * toServices rules match both packets (see familyUnits): the pre-DNAT one decides Drop/Reject (so a
 * Reject answers for the ClusterIP), the post-DNAT one keeps Allow/Pass in order with the rules
 * that judge the endpoint.
 *
 * Address families: IPv6 addresses and CIDRs match as `ipv6,ipv6_src=`/`ipv6_dst=` and IPv6
 * ports as `tcp6`/`udp6`/`sctp6`/`icmp6` (every IPv6 field needs dl_type=0x86dd). A unit's clauses
 * are built per family and the families whose every clause has flows are united: a packet has one
 * family, so it can complete the conjunction only through flows of that family, and a family
 * some clause lacks (an IPv4-only target with IPv6 peers) installs nothing.
 *
 * See priorities.ts for the table/priority layout, conjids.ts for conjunction ids, punt.ts for the
 * packet-in contract of Reject and audit logging.
 */
import { isIPv4, isIPv6 } from 'node:net';
import type { ChangeSet, NodeRule } from '../../policy/internal.js';
import type { Direction, PolicyKind, PortMatch } from '../../policy/types.js';
import { type Flow, FlowCategory, withCookie } from '../flow.js';
import { flat } from '../../policy/flat-string.js';
import { hex, masked, nextTable, REG0, RULE_REG, tableId, type TableName } from '../tables.js';
import { allocateClassBits, CLASS_BITS, CLASS_PRIORITY_BASE, CLASS_TABLE, type ClassPrefix, type ClassSide, ClassTable, classBitMatch, classPrefix, classSetActions, naturalClassBit } from './addrclass.js';
import { allocateConjIds } from './conjids.js';
import { maskedPortText, rangeToMasks } from './portmasks.js';
import { allocatePriorities, PRIORITY } from './priorities.js';
import { knownListDiff, lastListStep } from '../../policy/liststeps.js';
import { type AddressList, addressArray, sameAddressList, SortedList } from '../../policy/sorted-list.js';
import { comparePriority } from '../../policy/order.js';
import { Disposition, policyCopyActions, policyPuntActions } from './punt.js';
import type { MetricFlow } from './stats.js';

export class PolicyFlowError extends Error {
  override name = 'PolicyFlowError';
}

/** Kubernetes NetworkPolicy isolation of local Pods (the default drop of stage 1). */
export interface NodeIsolation {
  direction: Direction;
  ref: { kind: PolicyKind; namespace?: string | undefined; name: string };
  targets: { ref: string; ips: string[] }[];
  logging?: { enabled: boolean; label?: string };
}

/** The endpoints (post-DNAT address and port) behind one Service address/protocol/port. */
export type ServiceResolver = (clusterIP: string, protocol: string, port: number) => { ip: string; port: number }[];

export interface PolicyFlowInput {
  rules: readonly NodeRule[];
  isolations: readonly NodeIsolation[];
  /** For toServices rules: where kube-proxy sends each Service port (see familyUnits). */
  serviceEndpoints?: ServiceResolver;
}

export interface PolicyFlowDelta {
  add: Flow[];
  remove: Flow[];
}

/** What a conjunction id stands for (audit log). */
export interface RuleIdentity {
  conjId: number;
  nodeRuleId: string;
  ruleId: string;
  ref: NodeRule['ref'];
  direction: Direction;
  action: NodeRule['action'];
  table: TableName;
  /** The flow's OpenFlow priority. */
  priority: number;
  /** The policy's own priority (Antrea, ANP, CNP; 0 for kinds without one). */
  policyPriority: number;
  logging?: { enabled: boolean; label?: string };
}

export const DIRECTION_TABLES: Record<Direction, { stage0: TableName; k8s: TableName; dflt: TableName; metric: TableName; self: 'nw_src' | 'nw_dst'; peer: 'nw_src' | 'nw_dst' }> = {
  Egress: { stage0: 'AntreaPolicyEgressRule', k8s: 'EgressRule', dflt: 'EgressDefaultRule', metric: 'EgressMetric', self: 'nw_src', peer: 'nw_dst' },
  Ingress: { stage0: 'AntreaPolicyIngressRule', k8s: 'IngressRule', dflt: 'IngressDefaultRule', metric: 'IngressMetric', self: 'nw_dst', peer: 'nw_src' },
};

/** Match that keeps a stage-0 egress rule off Pod->ClusterIP packets (decided after DNAT). */
const NOT_PRE_DNAT = `reg0=${masked(0, REG0.toService)}`;
/** A Pod's packet re-entering from the gateway after the host's DNAT (from the gateway, not to a ClusterIP). */
const POST_DNAT = `reg0=${masked(REG0.srcGateway, REG0.srcMask | REG0.toService)}`;
const PRE_DNAT = `reg0=${masked(REG0.toService, REG0.toService)}`;

export function ruleTable(rule: Pick<NodeRule, 'direction' | 'priority'>): TableName {
  const t = DIRECTION_TABLES[rule.direction];
  return rule.priority.stage === 0 ? t.stage0 : rule.priority.stage === 1 ? t.k8s : t.dflt;
}

/** Flows that do not depend on rules: established bypass (rule and class tables) and the pre-DNAT skip (both families). */
export function staticPolicyFlows(): Flow[] {
  const out: Flow[] = [];
  // A connection's later packets never reach a peer clause (they bypass the rule tables, below):
  // they skip the address classification, so their megaflows need not match the addresses.
  for (const side of ['src', 'dst'] as const) {
    for (const ip of ['ip', 'ipv6']) out.push(policyFlow(CLASS_TABLE[side], PRIORITY.bypass, `ct_state=-new+trk,${ip}`, `goto_table:${nextTable(CLASS_TABLE[side])}`));
  }
  for (const dir of ['Egress', 'Ingress'] as const) {
    const t = DIRECTION_TABLES[dir];
    for (const state of ['-new+est+trk', '-new+rel+trk']) {
      for (const ip of ['ip', 'ipv6']) {
        out.push(policyFlow(t.stage0, PRIORITY.bypass, `ct_state=${state},${ip}`, `goto_table:${t.metric}`));
      }
    }
  }
  // Pod->ClusterIP before DNAT: no Kubernetes rule can judge it (they judge the endpoint); only
  // baseline toServices rules are left, for Pods that are not isolated (see isolationContributions).
  for (const ip of ['ip', 'ipv6']) out.push(policyFlow('EgressRule', PRIORITY.preDnatSkip, `${ip},${PRE_DNAT}`, 'goto_table:EgressDefaultRule'));
  return out;
}

const policyFlow = (table: TableName, priority: number, match: string, actions: string): Flow =>
  withCookie({ table, priority, match, actions, category: FlowCategory.policy });

// ---------------------------------------------------------------------------------------------
// services (protocol/port) clause

const L4 = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp' } as const;
const L4_6 = { TCP: 'tcp6', UDP: 'udp6', SCTP: 'sctp6' } as const;

type Family = 4 | 6;
const FAMILIES: readonly Family[] = [4, 6];
const familyOf = (a: string): Family | undefined => (isIPv4(a.split('/')[0]!) ? 4 : isIPv6(a.split('/')[0]!) ? 6 : undefined);
/** The protocol keyword of an L4 protocol in one family ('tcp' / 'tcp6'), undefined for others. */
const l4 = (protocol: string, family: Family): string | undefined => (family === 4 ? L4 : L4_6)[protocol as keyof typeof L4];
/**
 * `ip,nw_src=A` / `ipv6,ipv6_src=A` (the whole family's range: bare `ip` / `ipv6`), flat: one
 * string per address match, shared by every rule and flow that has the address (a peer address
 * appears in many rules, and each kept contribution holds its match).
 */
function addressMatch(field: 'nw_src' | 'nw_dst', address: string): string {
  if (familyOf(address) === 6) return address === '::/0' ? 'ipv6' : flat(`ipv6,${field === 'nw_src' ? 'ipv6_src' : 'ipv6_dst'}=${address}`);
  return address === '0.0.0.0/0' ? 'ip' : flat(`ip,${field}=${address}`);
}

/** `k/n`, the clause a conjunction action names: one string per value. */
const PARTS = new Map<string, string>();
function partLabel(k: number, n: number): string {
  const text = `${k}/${n}`;
  const known = PARTS.get(text);
  if (known !== undefined) return known;
  PARTS.set(text, text);
  return text;
}

/** A number naming (conjunction id, clause) within one shared flow: ids are 32-bit, clauses few. */
const PART_INDEX = new Map<string, number>();
function conjKey(id: number, part: string): number {
  let i = PART_INDEX.get(part);
  if (i === undefined) PART_INDEX.set(part, (i = PART_INDEX.size));
  return id * 4096 + i;
}

function portBlocks(lo: number | undefined, hi: number | undefined): (string | undefined)[] {
  if (lo === undefined) return [undefined];
  return rangeToMasks(lo, hi ?? lo).map((m) => (m.mask === 0 ? undefined : maskedPortText(m)));
}

/**
 * Matches for one port condition in one family; [] when flows cannot express it (the engine never
 * matches it either). ICMP type and code match in the family's own ICMP version (ICMPv6 in IPv6).
 */
export function portMatches(p: PortMatch, family: Family = 4): string[] {
  if (p.protocol === 'ICMP') {
    const [proto, type, code] = family === 4 ? ['icmp', 'icmp_type', 'icmp_code'] : ['icmp6', 'icmpv6_type', 'icmpv6_code'];
    return [[proto, p.icmpType !== undefined ? `${type}=${p.icmpType}` : '', p.icmpCode !== undefined ? `${code}=${p.icmpCode}` : ''].filter(Boolean).join(',')];
  }
  if (p.protocol === 'IGMP') return [];
  const proto = l4(p.protocol, family);
  if (!proto) return [];
  if (typeof p.port === 'string') return []; // unresolved named port: the destination has no such port
  const out: string[] = [];
  for (const dst of portBlocks(p.port, p.endPort)) {
    for (const src of portBlocks(p.sourcePort, p.sourceEndPort)) {
      out.push([proto, dst !== undefined ? `tp_dst=${dst}` : '', src !== undefined ? `tp_src=${src}` : ''].filter(Boolean).join(','));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// one rule -> contributions to (shared) flows

interface Contribution {
  key: string;
  table: TableName;
  priority: number;
  match: string;
  /** A `conjunction(id,k/n)` action (`part` = "k/n"), or undefined for a flow that carries the action itself. */
  conj?: { id: number; part: string };
  direct?: { owner: string; actions: string; logs: boolean };
  /** A rule's counter flow in a Metric table (stats.ts). */
  metric?: Omit<MetricFlow, 'cookie'>;
}

interface Unit {
  /** Conjunction-id key. */
  key: string;
  clauses: string[][];
  /**
   * Extra match on every flow of the first clause (egress: the targets). It must sit on a clause,
   * not on the conj_id flow: when a conjunction completes but its conj_id flow does not match, OVS
   * does not reliably go on to lower-priority conjunctions (measured with ofproto/trace, OVS 3.1).
   */
  extra: string;
}

const flowKey = (table: TableName, priority: number, match: string): string => flat(`${table}|${priority}|${match}`);

const uniqSorted = (xs: Iterable<string>): string[] => [...new Set(xs)].sort();

/**
 * Only Pods are enforced on the bridge: a Node target (Antrea nodeSelector appliedTo) is host
 * traffic, which the bridge never judges. (Hand-built rules without a kind are Pods when "ns/name".)
 */
const isPodTarget = (x: NodeRule['targets'][number]): boolean => (x.kind ?? (x.ref.includes('/') ? 'pod' : 'node')) === 'pod';

/** The units of a rule with the families they match (see the module comment and familyUnits). */
function unitsByFamily(rule: NodeRule, resolve?: ServiceResolver, peerClass?: PeerClassForm): { unit: Unit; families: Family[] }[] {
  const merged = new Map<string, { unit: Unit; families: Family[] }>();
  for (const family of FAMILIES) {
    for (const unit of familyUnits(rule, family, resolve, peerClass)) {
      if (unit.clauses.some((c) => c.length === 0)) continue;
      const cur = merged.get(unit.key);
      if (!cur) merged.set(unit.key, { unit, families: [family] });
      else {
        cur.unit = { ...cur.unit, clauses: cur.unit.clauses.map((c, i) => uniqSorted([...c, ...unit.clauses[i]!])) };
        cur.families.push(family);
      }
    }
  }
  return [...merged.values()];
}

/**
 * The conjunction units of a rule: main (addresses) and, for egress toServices, `svc` (the Pod's
 * pre-DNAT packet: proto,nw_dst=ClusterIP,tp_dst=port) and `svc-post` (the same connection after
 * the host's DNAT, re-entering from the gateway with the Pod's source IP: proto,nw_dst=endpoint,
 * tp_dst=target port). The post-DNAT unit keeps the rule in its place among the rules that judge
 * the endpoint (a toServices Allow before a drop-all works); a packet from the gateway with a local
 * Pod's source is always such a re-entered Service packet, so direct traffic to the endpoint is not
 * matched. (An endpoint shared by two Services matches for both.)
 */
function familyUnits(rule: NodeRule, family: Family, resolve?: ServiceResolver, peerClass?: PeerClassForm): Unit[] {
  const t = DIRECTION_TABLES[rule.direction];
  const inFamily = (a: string) => familyOf(a) === family;
  const targets = uniqSorted(rule.targets.filter(isPodTarget).flatMap((x) => x.ips).filter(inFamily).map((ip) => addressMatch(t.self, ip)));
  let services: string[] | undefined;
  if (rule.ports.length > 0) {
    services = uniqSorted(rule.ports.flatMap((p) => portMatches(p, family)));
    if (services.length === 0) return []; // only conditions that never match
  }
  const withPorts = (cl: string[][]) => (services ? [...cl, services] : cl);
  const egress = rule.direction === 'Egress';
  // Stage-0 and baseline egress tables see the Pod's pre-DNAT packet: only toServices may match it.
  const judgesEndpoint = egress && rule.priority.stage !== 1;
  if (rule.peers === 'any') {
    return [{ key: rule.id, clauses: withPorts([targets]), extra: judgesEndpoint ? NOT_PRE_DNAT : '' }];
  }
  const units: Unit[] = [];
  // A peer set with an address class: one flow on its bit (the class table matched the addresses).
  const addrs = peerClass
    ? (peerClass.families.has(family) ? [peerClass.match] : [])
    : uniqSorted([...rule.peers.ips, ...rule.peers.cidrs].filter(inFamily).map((a) => addressMatch(t.peer, a)));
  if (addrs.length > 0) {
    units.push({ key: rule.id, clauses: withPorts(egress ? [targets, addrs] : [addrs, targets]), extra: judgesEndpoint ? NOT_PRE_DNAT : '' });
  }
  if (egress && rule.peers.services.length > 0) {
    const svc = uniqSorted(rule.peers.services.filter((s) => inFamily(s.ip)).flatMap((s) => {
      const proto = l4(s.protocol, family);
      return proto ? [`${proto},${addressMatch('nw_dst', s.ip).split(',')[1]!},tp_dst=${s.port}`] : [];
    }));
    if (svc.length > 0) units.push({ key: `${rule.id}/svc`, clauses: withPorts([targets, svc]), extra: '' });
    const post = uniqSorted(resolvedEndpoints(rule, resolve).filter((e) => inFamily(e.ip)).map((e) => `${l4(e.protocol, family)!},${addressMatch('nw_dst', e.ip).split(',')[1]!},tp_dst=${e.port}`));
    if (post.length > 0) units.push({ key: `${rule.id}/svc-post`, clauses: withPorts([targets, post]), extra: POST_DNAT });
  }
  return units;
}

function resolvedEndpoints(rule: NodeRule, resolve?: ServiceResolver): { protocol: string; ip: string; port: number }[] {
  if (!resolve || rule.direction !== 'Egress' || rule.peers === 'any') return [];
  const out: { protocol: string; ip: string; port: number }[] = [];
  for (const s of rule.peers.services) {
    const family = familyOf(s.ip);
    if (!family || !l4(s.protocol, family)) continue;
    // kube-proxy keeps a connection in its family: a ClusterIP's endpoints are of the same one
    for (const e of resolve(s.ip, s.protocol, s.port)) if (familyOf(e.ip) === family) out.push({ protocol: s.protocol, ip: e.ip, port: e.port });
  }
  return out;
}

const hasServicePeers = (rule: NodeRule): boolean => rule.direction === 'Egress' && rule.peers !== 'any' && rule.peers.services.length > 0;

/** What a rule's flows depend on besides the rule itself: its Services' endpoints. */
const endpointsSignature = (rule: NodeRule, resolve?: ServiceResolver): string =>
  uniqSorted(resolvedEndpoints(rule, resolve).map((e) => `${L4[e.protocol as keyof typeof L4]}/${e.ip}/${e.port}`)).join(',');

/** Unit keys of a rule without building its clauses (for conjunction-id allocation). */
function unitKeys(rule: NodeRule): string[] {
  const keys = [rule.id];
  if (rule.direction === 'Egress' && rule.peers !== 'any' && rule.peers.services.length > 0) keys.push(`${rule.id}/svc`, `${rule.id}/svc-post`);
  return keys;
}

/**
 * A rule's action, recording the rule for statistics: Allow loads the rule's
 * conjunction id into the direction's rule register (committed to ct_label); Drop and Reject also
 * set reg0 ruleDrop and go to the Metric table, which counts the packet under the rule and drops it.
 */
function actionsFor(rule: NodeRule, table: TableName, priority: number, conjId: number): { actions: string; logs: boolean } {
  const t = DIRECTION_TABLES[rule.direction];
  const log = !!rule.logging?.enabled;
  const punt = (disposition: Disposition, reject = false) => policyPuntActions({ table, disposition, priority, conjId, log, reject });
  const copy = (disposition: Disposition) => `${policyCopyActions({ table, disposition, priority, conjId })},`;
  const record = `set_field:${conjId >>> 0}->${RULE_REG[rule.direction].reg}`;
  const dropInMetric = `${record},set_field:${masked(REG0.ruleDrop, REG0.ruleDrop)}->reg0,goto_table:${t.metric}`;
  switch (rule.action) {
    case 'Allow':
      return { actions: `${log ? copy(Disposition.allow) : ''}${record},goto_table:${t.metric}`, logs: log };
    case 'Pass': {
      const next = rule.priority.stage === 0 ? t.k8s : t.metric;
      return { actions: `${log ? copy(Disposition.pass) : ''}goto_table:${next}`, logs: log };
    }
    case 'Drop':
      return { actions: log ? `${punt(Disposition.drop)},${dropInMetric}` : dropInMetric, logs: log };
    case 'Reject':
      return { actions: `${punt(Disposition.reject, true)},${dropInMetric}`, logs: log };
  }
}

/**
 * The Metric-table flows that count a rule unit's packets (their n_packets are the statistics):
 * Drop/Reject: every packet the rule dropped; Allow: its connections' first packets (sessions) and
 * their later packets in both directions, matched by the ct_label the commit wrote. A toServices
 * rule's pre-DNAT unit counts no Allow: the same connection is counted after DNAT (svc-post).
 */
function metricContributions(rule: NodeRule, unitKey: string, conjId: number, families: readonly Family[]): Contribution[] {
  const t = DIRECTION_TABLES[rule.direction];
  const reg = RULE_REG[rule.direction];
  const id = conjId >>> 0;
  const flows: { priority: number; match: string; actions: string; counts: MetricFlow['counts'] }[] = [];
  // one set of counter flows per family the unit matches (`ip` / `ipv6`)
  for (const ip of families.map((f) => (f === 4 ? 'ip' : 'ipv6'))) {
    if (rule.action === 'Drop' || rule.action === 'Reject') {
      flows.push({ priority: PRIORITY.metricDrop, match: `${ip},reg0=${masked(REG0.ruleDrop, REG0.ruleDrop)},${reg.reg}=${id}`, actions: 'drop', counts: 'drop' });
    } else if (rule.action === 'Allow' && !unitKey.endsWith('/svc')) {
      const label = rule.direction === 'Egress' ? `${hex(id)}/0xffffffff` : `${hex(id)}00000000/0xffffffff00000000`;
      const next = `goto_table:${nextTable(t.metric)}`;
      flows.push(
        { priority: PRIORITY.metricNew, match: `ct_state=+new+trk,${ip},${reg.reg}=${id}`, actions: next, counts: 'new' },
        { priority: PRIORITY.metricEst, match: `ct_state=-new+trk,${ip},ct_label=${label}`, actions: next, counts: 'est' },
      );
    }
  }
  return flows.map((f) => ({
    key: flowKey(t.metric, f.priority, f.match), table: t.metric, priority: f.priority, match: f.match,
    direct: { owner: `${unitKey}/metric`, actions: f.actions, logs: false }, metric: { conjId: id, counts: f.counts },
  }));
}

function ruleContributions(rule: NodeRule, table: TableName, priority: number, conjIds: Map<string, number>, resolve?: ServiceResolver, peerClass?: PeerClassForm): Contribution[] {
  const out: Contribution[] = [];
  for (const { unit, families } of unitsByFamily(rule, resolve, peerClass)) {
    const conjId = conjIds.get(unit.key)!;
    const { actions, logs } = actionsFor(rule, table, priority, conjId);
    out.push(...metricContributions(rule, unit.key, conjId, families));
    const n = unit.clauses.length;
    const clauses = unit.clauses.map((c, i) => (i === 0 && unit.extra ? c.map((m) => `${m},${unit.extra}`) : c));
    if (n === 1) {
      for (const match of clauses[0]!) out.push({ key: flowKey(table, priority, match), table, priority, match, direct: { owner: unit.key, actions, logs } });
      continue;
    }
    clauses.forEach((clause, i) => {
      for (const match of clause) out.push({ key: flowKey(table, priority, match), table, priority, match, conj: { id: conjId, part: partLabel(i + 1, n) } });
    });
    const match = `conj_id=${conjId}`;
    out.push({ key: flowKey(table, priority, match), table, priority, match, direct: { owner: unit.key, actions, logs } });
  }
  return out;
}

function isolationContributions(isolations: readonly NodeIsolation[]): Map<string, Contribution> {
  // One drop flow per (direction, local Pod IP), logging if any isolating policy logs.
  const want = new Map<string, { dir: Direction; ip: string; log: boolean }>();
  for (const iso of isolations) {
    for (const target of iso.targets) {
      for (const ip of target.ips.filter((a) => familyOf(a) !== undefined)) {
        const owner = `iso/${iso.direction}/${ip}`;
        const cur = want.get(owner);
        want.set(owner, { dir: iso.direction, ip, log: (cur?.log ?? false) || !!iso.logging?.enabled });
      }
    }
  }
  const out = new Map<string, Contribution>();
  const put = (owner: string, table: TableName, match: string, actions: string, logs: boolean) =>
    out.set(owner, { key: flowKey(table, PRIORITY.isolation, match), table, priority: PRIORITY.isolation, match, direct: { owner, actions, logs } });
  for (const [owner, w] of want) {
    const t = DIRECTION_TABLES[w.dir];
    const actions = w.log ? policyPuntActions({ table: t.dflt, disposition: Disposition.drop, priority: PRIORITY.isolation, conjId: 0, log: true, reject: false }) : 'drop';
    if (w.dir === 'Ingress') {
      put(owner, t.dflt, addressMatch(t.self, w.ip), actions, w.log);
      continue;
    }
    // An isolated Pod's packet to a ClusterIP goes on: its endpoint is judged after DNAT, and
    // baseline rules (its only other judges) are never reached by an isolated Pod.
    put(owner, t.dflt, `${addressMatch(t.self, w.ip)},${NOT_PRE_DNAT}`, actions, w.log);
    put(`${owner}/pre-dnat`, t.dflt, `${addressMatch(t.self, w.ip)},${PRE_DNAT}`, `goto_table:${t.metric}`, false);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// shared flow table

interface ConjAction {
  id: number;
  part: string;
  /** Rules contributing it. */
  count: number;
}

interface SharedFlow {
  table: TableName;
  priority: number;
  match: string;
  /**
   * Conjunction actions (`id,k/n`), with how many rules contribute each: most flows have one, held
   * as itself; several by conjKey(id, part). (A Map per flow, mostly of one entry, was ~60 % of
   * this table's memory at 150 000 Pods: ~4 MiB for 16 000 flows.)
   */
  conj: ConjAction | Map<number, ConjAction> | undefined;
  /** Flow-carrying contributions by owner, while there are any (K8s allow rules meeting at one match). */
  direct: Map<string, { actions: string; logs: boolean }> | undefined;
}

function conjActions(s: SharedFlow): ConjAction[] {
  return s.conj === undefined ? [] : s.conj instanceof Map ? [...s.conj.values()] : [s.conj];
}

function addConj(s: SharedFlow, id: number, part: string): void {
  const one = s.conj;
  if (one === undefined) {
    s.conj = { id, part, count: 1 };
    return;
  }
  if (!(one instanceof Map)) {
    if (one.id === id && one.part === part) {
      one.count++;
      return;
    }
    s.conj = new Map([[conjKey(one.id, one.part), one]]);
  }
  const all = s.conj as Map<number, ConjAction>;
  const k = conjKey(id, part);
  const cur = all.get(k);
  if (cur) cur.count++;
  else all.set(k, { id, part, count: 1 });
}

function removeConj(s: SharedFlow, id: number, part: string): void {
  const held = s.conj;
  if (held === undefined) return;
  if (!(held instanceof Map)) {
    if (held.id === id && held.part === part && --held.count <= 0) s.conj = undefined;
    return;
  }
  const k = conjKey(id, part);
  const cur = held.get(k);
  if (!cur || --cur.count > 0) return;
  held.delete(k);
  if (held.size === 1) s.conj = held.values().next().value;
}

function render(s: SharedFlow): Flow | undefined {
  if (s.direct !== undefined && s.direct.size > 0) {
    // Several flows with one match and priority: only K8s allow rules (all allow) can meet here;
    // a flow that logs is preferred so the audit log sees the connection.
    const [, chosen] = [...s.direct].sort(([a, x], [b, y]) => Number(y.logs) - Number(x.logs) || (a < b ? -1 : a > b ? 1 : 0))[0]!;
    return policyFlow(s.table, s.priority, s.match, chosen.actions);
  }
  const conj = conjActions(s);
  if (conj.length === 0) return undefined;
  conj.sort((a, b) => a.id - b.id || (a.part < b.part ? -1 : a.part > b.part ? 1 : 0));
  return policyFlow(s.table, s.priority, s.match, conj.map((c) => `conjunction(${c.id},${c.part})`).join(','));
}

/** A rule's peer class form as text ('' = per-address flows): a change means its flows change. */
const peerClassSignature = (f: PeerClassForm | undefined): string => f?.sig ?? '';

/** What a contribution adds to its shared flow: equal signatures are interchangeable contributions. */
function contributionSig(c: Contribution): string {
  return c.conj ? `${c.key}\0c${c.conj.id},${c.conj.part}` : `${c.key}\0d${c.direct!.owner}\0${c.direct!.logs ? 1 : 0}\0${c.direct!.actions}`;
}

/** Every address of the rule (targets, peers, Service peers) is IPv4. */
function ipv4Only(r: NodeRule): boolean {
  if (r.peers === 'any') return false;
  return allIpv4(r.peers.ips) && [...r.peers.cidrs, ...r.peers.services.map((x) => x.ip), ...r.targets.flatMap((t) => t.ips)].every((a) => familyOf(a) === 4);
}

/**
 * Every address of a peer list is IPv4, remembered per list: the engine hands the same (never
 * modified) list to every rule whose peers are one address group, thousands of addresses each. A
 * version made from one known to be all IPv4 needs a look only at the addresses that came
 * (parsing 150 000 addresses costs over 100 ms).
 */
const IPV4_LISTS = new WeakMap<AddressList, boolean>();
function allIpv4(list: AddressList): boolean {
  let v4 = IPV4_LISTS.get(list);
  if (v4 !== undefined) return v4;
  const step = lastListStep(list);
  const all = (xs: Iterable<string>) => {
    for (const a of xs) if (familyOf(a) !== 4) return false;
    return true;
  };
  v4 = step && IPV4_LISTS.get(step.from as AddressList) === true ? all(step.come) : all(list);
  IPV4_LISTS.set(list, v4);
  return v4;
}

/** Everything of a rule its flows depend on except its peer IPs (addresses compared as text). */
function samePeerFrame(a: NodeRule, b: NodeRule): boolean {
  if (a.peers === 'any' || b.peers === 'any') return false;
  if (a.id !== b.id || a.ruleId !== b.ruleId || a.direction !== b.direction || a.action !== b.action) return false;
  if (a.targets.length !== b.targets.length) return false;
  for (let i = 0; i < a.targets.length; i++) {
    const x = a.targets[i]!;
    const y = b.targets[i]!;
    if (x.ref !== y.ref || x.kind !== y.kind || x.ips.join() !== y.ips.join()) return false;
  }
  return (
    a.peers.cidrs.join() === b.peers.cidrs.join() &&
    JSON.stringify(a.peers.services) === JSON.stringify(b.peers.services) &&
    JSON.stringify(a.ports) === JSON.stringify(b.ports) &&
    JSON.stringify(a.priority) === JSON.stringify(b.priority) &&
    JSON.stringify(a.logging ?? null) === JSON.stringify(b.logging ?? null)
  );
}

/** Where the peer addresses and the targets sit in a rule's main unit (see familyUnits): clause indexes and clause count. */
function ruleUnitShape(rule: NodeRule): { peerClause: number; targetClause: number; clauses: number } {
  const egress = rule.direction === 'Egress';
  return { peerClause: egress ? 1 : 0, targetClause: egress ? 0 : 1, clauses: rule.ports.length > 0 ? 3 : 2 };
}

/** Everything of a rule its flows depend on except its targets (peers without Services). */
function sameTargetFrame(a: NodeRule, b: NodeRule): boolean {
  if (a.peers === 'any' || b.peers === 'any' || a.peers.services.length > 0 || b.peers.services.length > 0) return false;
  if (a.id !== b.id || a.ruleId !== b.ruleId || a.direction !== b.direction || a.action !== b.action) return false;
  return (
    sameAddressList(a.peers.ips, b.peers.ips) &&
    a.peers.cidrs.join() === b.peers.cidrs.join() &&
    JSON.stringify(a.ports) === JSON.stringify(b.ports) &&
    JSON.stringify(a.priority) === JSON.stringify(b.priority) &&
    JSON.stringify(a.logging ?? null) === JSON.stringify(b.logging ?? null)
  );
}

/** A rule's target-clause matches in its main unit (IPv4 rules), as familyUnits builds them. */
function targetMatches(rule: NodeRule): string[] {
  const t = DIRECTION_TABLES[rule.direction];
  const pods = rule.targets.filter(isPodTarget);
  return uniqSorted(pods.flatMap((x) => x.ips).map((ip) => addressMatch(t.self, ip)));
}

/** What went from sorted `a` and came in sorted `b`; undefined when either is not strictly ascending. */
function sortedDiff(a: readonly string[], b: readonly string[]): { gone: string[]; come: string[] } | undefined {
  const gone: string[] = [];
  const come: string[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    const x = a[i];
    const y = b[j];
    if (y === undefined || (x !== undefined && x < y)) {
      if (i > 0 && a[i - 1]! >= x!) return undefined;
      gone.push(x!);
      i++;
    } else if (x === undefined || y < x) {
      if (j > 0 && b[j - 1]! >= y) return undefined;
      come.push(y);
      j++;
    } else {
      if ((i > 0 && a[i - 1]! >= x) || (j > 0 && b[j - 1]! >= y)) return undefined;
      i++;
      j++;
    }
  }
  return { gone, come };
}

/** How a rule's main unit matches its peers through their address class: the bit, and the families the set holds. */
interface PeerClassForm {
  match: string;
  families: ReadonlySet<Family>;
  /** match and families as one string (RuleEntry.peerClass). */
  sig: string;
}

/** A peer address set (NodeRule.peerSet) of one side, the rules using it and its bit if it has one. */
interface PeerClass {
  key: string;
  side: ClassSide;
  /** Node rule id -> its place (`table|priority`). */
  users: Map<string, string>;
  /** Place -> how many users are there. */
  places: Map<string, number>;
  ips: AddressList;
  cidrs: readonly string[];
  /** Prefixes of the set per family (families the rules match through the class). */
  familyCount: Record<Family, number>;
  bit?: number | undefined;
  /** The form rules take while the class has its bit (kept for identity: see RuleEntry.peerClass). */
  form?: PeerClassForm | undefined;
  /** The sync that last set the content (two contents in one sync: the later rule keeps per-address flows). */
  epoch: number;
}

const classSide = (d: Direction): ClassSide => (d === 'Ingress' ? 'src' : 'dst');

/** Prefixes of a set's addresses and CIDRs (invalid text skipped: no flow can match it). */
function prefixesOf(list: readonly string[]): ClassPrefix[] {
  const out: ClassPrefix[] = [];
  for (const a of list) {
    const p = classPrefix(a);
    if (p) out.push(p);
  }
  return out;
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * What went and came between two lists (one made from the other by the engine: its recorded steps;
 * sorted: a merge; otherwise through sets).
 */
function listDiff(listA: AddressList, listB: AddressList): { gone: string[]; come: string[] } {
  const known = knownListDiff(listA, listB);
  if (known) return known;
  if (listA instanceof SortedList && listB instanceof SortedList) return listB.diffFrom(listA);
  const a = addressArray(listA);
  const b = addressArray(listB);
  const sorted = sortedDiff(a, b);
  if (sorted) return sorted;
  const sa = new Set(a);
  const sb = new Set(b);
  return { gone: [...sa].filter((x) => !sb.has(x)), come: [...sb].filter((x) => !sa.has(x)) };
}

interface RuleEntry {
  rule: NodeRule;
  /** The class-bit match of the main unit's peer clause and the families it was compiled for ('' = per-address flows). */
  peerClass: string;
  /** Whether the rule's main unit (addresses) was compiled: its peer clause can then be patched. */
  mainUnit: boolean;
  table: TableName;
  priority: number;
  conjIds: number[];
  endpoints: string;
  contributions: Set<Contribution>;
  /** The main unit's peer-clause contributions by match, built by the first movePeerIps. */
  peerIndex?: Map<string, Contribution> | undefined;
  /** The same for the target clause, built by the first moveTargets. */
  targetIndex?: Map<string, Contribution> | undefined;
  /** Every address of the rule is IPv4 (ipv4Only), kept so a peer change checks only the addresses that came. */
  v4Only: boolean;
}

/**
 * The compiled policy flows of one node. `sync()` takes the current rule set (and optionally the
 * ChangeSet that led to it) and returns the flows to add and delete; `flows()` is the whole set.
 */
export class PolicyFlows {
  private readonly rules = new Map<string, RuleEntry>();
  private readonly isolations = new Map<string, Contribution>();
  private readonly shared = new Map<string, SharedFlow>();
  /**
   * The classification flows rendered since the last renderTouched, by `side|prefix`: the flow they
   * replace and the one now (undefined: none), until it takes them. No classification flow is kept
   * beyond that: a table holds one per address of every class, and its class table records the
   * actions each prefix was last rendered with, from which the flow is built again.
   */
  private classPending = new Map<string, { old: Flow | undefined; now: Flow | undefined }>();
  private readonly rendered = new Map<string, Flow>();
  private readonly identities = new Map<number, RuleIdentity>();
  private initialized = false;
  /** The priorities and conjunction ids of the current rule set (see allocation()). */
  private alloc?: { priorities: Map<string, number>; conjIds: Map<string, number> } | undefined;
  /**
   * Rules whose conjunction ids' identities (describe()) are restated at the end of the sync, each
   * with the ids its identities were stated under (none for a new rule).
   */
  private readonly identityStale = new Map<string, readonly number[]>();
  /** The isolations of the last sync, to see they did not change. */
  private lastIsolations?: readonly NodeIsolation[] | undefined;

  /** Peer address classes by key (`side|peerSet`), and each rule's class key. */
  private readonly classes = new Map<string, PeerClass>();
  private readonly ruleClass = new Map<string, { key: string; peerSet: string; side: ClassSide; table: TableName; priority: number }>();
  private readonly classTables: Record<ClassSide, ClassTable> = { src: new ClassTable(), dst: new ClassTable() };
  private classEpoch = 0;

  /**
   * `naturalConjId` replaces the conjunction-id hash (tests force collisions with it);
   * `classBits` = address class bits per side (default all of CLASS_REGS; tests force fallbacks),
   * `naturalClassBit` their hash.
   */
  constructor(private readonly opts: { naturalConjId?: (key: string) => number; classBits?: number; naturalClassBit?: (key: string, budget: number) => number } = {}) {}

  /**
   * Brings the compiled state to `input`. `dirtyRuleIds` = the computed-rule ids (NodeRule.ruleId)
   * whose content may have changed, the endpoints `input.serviceEndpoints` gives for their
   * Services included (dirtyRuleIds() of the engine's ChangeSet); undefined = recompile every rule
   * (full compile). Rules that appear or disappear, and rules whose priority or conjunction id
   * moved, are always handled.
   */
  sync(input: PolicyFlowInput, dirtyRuleIds?: ReadonlySet<string>): PolicyFlowDelta {
    const touched = new Set<string>();
    if (!this.initialized) {
      for (const f of staticPolicyFlows()) {
        const key = flowKey(f.table, f.priority, f.match);
        this.addContribution({ key, table: f.table, priority: f.priority, match: f.match, direct: { owner: 'static', actions: f.actions, logs: false } }, touched);
      }
      this.initialized = true;
    }
    const next = new Map<string, NodeRule>();
    for (const r of input.rules) {
      if (next.has(r.id)) throw new PolicyFlowError(`node rule id ${r.id} appears twice in the rule set`);
      next.set(r.id, r);
    }
    const { priorities, conjIds, reallocated, conjIdsMoved } = this.allocation(input.rules, next);
    this.planClasses(input.rules, next, priorities, dirtyRuleIds);
    for (const [id, entry] of this.rules) {
      if (next.has(id)) continue;
      for (const c of entry.contributions) this.removeContribution(c, touched);
      this.rules.delete(id);
      this.identityStale.set(id, entry.conjIds);
    }
    for (const rule of input.rules) {
      const table = ruleTable(rule);
      const prev = this.rules.get(rule.id);
      const peerClass = this.peerClassOf(rule.id);
      const peerClassSig = peerClassSignature(peerClass);
      // Unchanged content (Service endpoints included: the ChangeSet names their groups), priority,
      // conjunction ids and peer class: nothing to look at.
      if (prev && dirtyRuleIds && !dirtyRuleIds.has(rule.ruleId) && prev.table === table && !reallocated.has(table) && !conjIdsMoved && prev.peerClass === peerClassSig) {
        prev.rule = rule; // keep the latest object (its `order` may have moved)
        continue;
      }
      const priority = priorities.get(rule.id)!;
      const ids = unitKeys(rule).map((k) => conjIds.get(k)!);
      const endpoints = endpointsSignature(rule, input.serviceEndpoints);
      const dirty = !prev || !dirtyRuleIds || dirtyRuleIds.has(rule.ruleId) || prev.table !== table || prev.priority !== priority ||
        prev.conjIds.join() !== ids.join() || prev.endpoints !== endpoints || prev.peerClass !== peerClassSig;
      if (!dirty) {
        prev.rule = rule; // same content; keep the latest object (its `order` may have moved)
        continue;
      }
      this.identityStale.set(rule.id, prev?.conjIds ?? []);
      const samePlace = prev && prev.table === table && prev.priority === priority && prev.endpoints === endpoints && prev.conjIds.join() === ids.join() && prev.peerClass === peerClassSig;
      // Peers matched through their class (the same bit and families): the class table followed the addresses.
      if (samePlace && peerClass && samePeerFrame(prev.rule, rule)) {
        prev.rule = rule;
        continue;
      }
      if (samePlace && ((!peerClass && this.movePeerIps(prev, rule, touched)) || this.moveTargets(prev, rule, touched))) continue;
      const contributions = ruleContributions(rule, table, priority, conjIds, input.serviceEndpoints, peerClass);
      if (prev) this.replaceContributions(prev.contributions, contributions, touched);
      else for (const c of contributions) this.addContribution(c, touched);
      const conjMatch = `conj_id=${ids[0]}`;
      const mainUnit = contributions.some((c) => c.match === conjMatch && c.direct?.owner === rule.id);
      this.rules.set(rule.id, { rule, peerClass: peerClassSig, table, priority, conjIds: ids, endpoints, contributions: new Set(contributions), mainUnit, v4Only: ipv4Only(rule) });
    }
    // The engine keeps each isolation's object while it does not change: the same list, nothing to do.
    const sameIsolations = this.lastIsolations !== undefined && this.lastIsolations.length === input.isolations.length && this.lastIsolations.every((x, i) => x === input.isolations[i]);
    this.lastIsolations = [...input.isolations];
    const iso = sameIsolations ? this.isolations : isolationContributions(input.isolations);
    for (const [owner, c] of this.isolations) {
      const now = iso.get(owner);
      if (now && now.key === c.key && now.direct!.actions === c.direct!.actions) continue;
      this.removeContribution(c, touched);
      this.isolations.delete(owner);
    }
    for (const [owner, c] of iso) {
      if (this.isolations.has(owner)) continue;
      this.addContribution(c, touched);
      this.isolations.set(owner, c);
    }
    this.restateIdentities();
    return this.renderTouched(touched);
  }

  /** The class form of a rule's peers, undefined when it matches them address by address. */
  private peerClassOf(ruleId: string): PeerClassForm | undefined {
    const key = this.ruleClass.get(ruleId);
    return key === undefined ? undefined : this.classes.get(key.key)?.form;
  }

  /**
   * Brings the address classes to `rules`: which rules use which peer set (and where), each set's
   * content, the bits (allocateClassBits over every class), and the classification flows of the
   * prefixes whose bits changed (pending until renderTouched). Work follows the rules that changed,
   * plus one pass over the classes; a member that came or went changes only its own classification
   * flow.
   */
  private planClasses(rules: readonly NodeRule[], byId: ReadonlyMap<string, NodeRule>, priorities: ReadonlyMap<string, number>, dirtyRuleIds: ReadonlySet<string> | undefined): void {
    const epoch = ++this.classEpoch;
    /** Classes whose content changed: their content before (bits follow below). */
    const before = new Map<string, { ips: AddressList; cidrs: readonly string[] }>();
    /** Whether any class gained or lost a user or changed its content (else the bits stand). */
    let changed = false;
    const detach = (id: string) => {
      const cur = this.ruleClass.get(id);
      if (cur === undefined) return;
      changed = true;
      this.ruleClass.delete(id);
      const cls = this.classes.get(cur.key);
      const place = cls?.users.get(id);
      if (!cls || place === undefined) return;
      cls.users.delete(id);
      const n = cls.places.get(place)! - 1;
      if (n > 0) cls.places.set(place, n);
      else cls.places.delete(place);
    };
    for (const id of [...this.ruleClass.keys()]) if (!byId.has(id)) detach(id);
    for (const rule of rules) {
      const cur = this.ruleClass.get(rule.id);
      if (cur === undefined && (rule.peers === 'any' || rule.peerSet === undefined)) continue;
      const table = ruleTable(rule);
      const priority = priorities.get(rule.id)!;
      const side = classSide(rule.direction);
      const samePlace = cur !== undefined && cur.peerSet === rule.peerSet && cur.side === side && cur.table === table && cur.priority === priority;
      if (samePlace && dirtyRuleIds && !dirtyRuleIds.has(rule.ruleId)) continue;
      if (rule.peers === 'any' || rule.peerSet === undefined) {
        detach(rule.id);
        continue;
      }
      const key = `${side}|${rule.peerSet}`;
      let cls = this.classes.get(key);
      const { ips, cidrs } = rule.peers;
      if (!cls) {
        cls = { key, side, users: new Map(), places: new Map(), ips: [], cidrs: [], familyCount: { 4: 0, 6: 0 }, epoch };
        this.classes.set(key, cls);
        changed = true;
        before.set(key, { ips: [], cidrs: [] });
        cls.ips = ips;
        cls.cidrs = cidrs;
      } else if (!sameAddressList(cls.ips, ips) || !sameList(cls.cidrs, cidrs)) {
        if (cls.epoch === epoch && cls.users.size > (cls.users.has(rule.id) ? 1 : 0)) {
          // Two contents for one set in one rule set: this rule keeps its per-address flows.
          detach(rule.id);
          continue;
        }
        if (!before.has(key)) before.set(key, { ips: cls.ips, cidrs: cls.cidrs });
        changed = true;
        cls.ips = ips;
        cls.cidrs = cidrs;
      }
      cls.epoch = epoch;
      if (samePlace) continue;
      detach(rule.id);
      changed = true;
      const place = `${table}|${priority}`;
      cls.users.set(rule.id, place);
      cls.places.set(place, (cls.places.get(place) ?? 0) + 1);
      this.ruleClass.set(rule.id, { key, peerSet: rule.peerSet, side, table, priority });
    }
    if (!changed) return;
    const bits = allocateClassBits(
      [...this.classes.values()].filter((c) => c.users.size > 0).map((c) => ({ key: c.key, side: c.side, places: c.places.size, users: c.users.size, size: c.ips.length + c.cidrs.length })),
      this.opts.classBits ?? CLASS_BITS,
      this.opts.naturalClassBit ?? naturalClassBit,
    );
    const prefixTouched: Record<ClassSide, Set<string>> = { src: new Set(), dst: new Set() };
    for (const cls of [...this.classes.values()]) {
      const bit = cls.users.size > 0 ? bits.get(cls.key) : undefined;
      const was = before.get(cls.key);
      if (cls.users.size === 0) this.classes.delete(cls.key);
      if (bit === cls.bit && (!was || bit === undefined)) continue;
      const table = this.classTables[cls.side];
      const pt = prefixTouched[cls.side];
      // familyCount counts the prefixes the class has in its table (while it has a bit).
      if (bit !== undefined && bit === cls.bit && was) {
        // Same bit, members moved: only the prefixes that came or went.
        const ips = listDiff(was.ips, cls.ips);
        const cidrs = listDiff(was.cidrs, cls.cidrs);
        for (const p of prefixesOf([...ips.gone, ...cidrs.gone])) {
          table.remove(p, bit, pt);
          cls.familyCount[p.family]--;
        }
        for (const p of prefixesOf([...ips.come, ...cidrs.come])) {
          table.add(p, bit, pt);
          cls.familyCount[p.family]++;
        }
      } else {
        if (cls.bit !== undefined) {
          const old = was ?? cls;
          for (const p of prefixesOf([...old.ips, ...old.cidrs])) table.remove(p, cls.bit, pt);
        }
        cls.familyCount = { 4: 0, 6: 0 };
        if (bit !== undefined) {
          for (const p of prefixesOf([...cls.ips, ...cls.cidrs])) {
            table.add(p, bit, pt);
            cls.familyCount[p.family]++;
          }
        }
        cls.bit = bit;
      }
      const families = FAMILIES.filter((f) => cls.familyCount[f] > 0);
      const match = bit === undefined ? undefined : classBitMatch(cls.side, bit);
      const form = match === undefined ? undefined : { match, families: new Set(families), sig: `${match}|${families.join()}` };
      if (peerClassSignature(form) !== peerClassSignature(cls.form)) cls.form = form;
    }
    for (const side of ['src', 'dst'] as const) for (const text of prefixTouched[side]) this.renderClassFlow(side, text);
  }

  /** The classification flow of one prefix, as the class table now says (none when no class lists it). */
  private renderClassFlow(side: ClassSide, text: string): void {
    const classes = this.classTables[side];
    const f = classes.flowOf(text);
    // flat() also makes equal actions one string, which every prefix with those bits then shares.
    const actions = f && f.bits.length > 0 ? flat(`${classSetActions(side, f.bits).join(',')},goto_table:${nextTable(CLASS_TABLE[side])}`) : undefined;
    const was = classes.shown(text);
    classes.show(text, actions);
    if (actions === was) return;
    const prefix = f?.prefix ?? classPrefix(text)!;
    const key = `${side}|${text}`;
    const flow = (a: string | undefined) => (a === undefined ? undefined : classFlow(side, prefix, a));
    const pending = this.classPending.get(key);
    this.classPending.set(key, { old: pending ? pending.old : flow(was), now: flow(actions) });
  }

  /**
   * Priorities and conjunction ids for `rules` (`byId`: the same, by id). An ordered table's
   * priorities are recomputed only when a rule came into it, left it, or changed its place in the
   * order; conjunction ids only when the set of unit keys changed. Both are pure functions of what
   * they are computed from, so keeping them gives what a full compile gives.
   */
  private allocation(rules: readonly NodeRule[], byId: ReadonlyMap<string, NodeRule>): { priorities: Map<string, number>; conjIds: Map<string, number>; reallocated: Set<TableName>; conjIdsMoved: boolean } {
    if (!this.alloc) {
      this.alloc = allocate(rules, this.opts.naturalConjId);
      return { ...this.alloc, reallocated: new Set(rules.map(ruleTable)), conjIdsMoved: true };
    }
    const { priorities } = this.alloc;
    // Kubernetes NetworkPolicy rules (stage 1) all have one priority: their table is never reallocated.
    const reallocated = new Set<TableName>();
    const ordered = (r: NodeRule) => {
      if (r.priority.stage !== 1) reallocated.add(ruleTable(r));
    };
    let keysChanged = false;
    for (const [id, e] of this.rules) {
      const now = byId.get(id);
      if (!now) {
        ordered(e.rule);
        priorities.delete(id);
        keysChanged = true;
        continue;
      }
      if (ruleTable(now) !== e.table || comparePriority(now.priority, e.rule.priority) !== 0) {
        ordered(now);
        ordered(e.rule);
      }
      if (hasServicePeers(now) !== hasServicePeers(e.rule)) keysChanged = true;
    }
    for (const r of rules) {
      if (this.rules.has(r.id)) continue;
      keysChanged = true;
      ordered(r);
    }
    // (a rule may also have moved into stage 1)
    for (const r of rules) if (r.priority.stage === 1) priorities.set(r.id, PRIORITY.k8s);
    if (reallocated.size > 0) {
      const byTable = new Map<TableName, NodeRule[]>([...reallocated].map((t) => [t, []]));
      for (const r of rules) if (r.priority.stage !== 1) byTable.get(ruleTable(r))?.push(r);
      for (const [table, list] of byTable) for (const [id, p] of allocatePriorities(table, list)) priorities.set(id, p);
    }
    if (!keysChanged) return { priorities, conjIds: this.alloc.conjIds, reallocated, conjIdsMoved: false };
    const was = this.alloc.conjIds;
    const conjIds = allocateConjIds(rules.flatMap(unitKeys), this.opts.naturalConjId);
    this.alloc = { priorities, conjIds };
    // Ids of kept keys move only on a collision with a new key.
    const conjIdsMoved = [...conjIds].some(([k, id]) => was.has(k) && was.get(k) !== id);
    return { priorities, conjIds, reallocated, conjIdsMoved };
  }

  /**
   * Every policy flow, in a deterministic order. Built on each call (the classification flows are
   * rendered again from their tables): for a first write and for diagnostics, not per change.
   */
  flows(): Flow[] {
    const out = [...this.rendered.values()];
    for (const side of ['src', 'dst'] as const) for (const { prefix, actions } of this.classTables[side].shownFlows()) out.push(classFlow(side, prefix, actions));
    return out.sort(compareFlows);
  }

  /** Number of policy flows (without building flows()). */
  get size(): number {
    return this.rendered.size + this.classTables.src.shownCount + this.classTables.dst.shownCount;
  }

  /** Number of policy flows per table (without building flows()). */
  countByTable(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const f of this.rendered.values()) out[f.table] = (out[f.table] ?? 0) + 1;
    for (const side of ['src', 'dst'] as const) {
      const n = this.classTables[side].shownCount;
      if (n > 0) out[CLASS_TABLE[side]] = (out[CLASS_TABLE[side]] ?? 0) + n;
    }
    return out;
  }

  /** Every rule's counter flows (per-rule statistics), with the cookies they are installed under. */
  metricFlows(): MetricFlow[] {
    const out: MetricFlow[] = [];
    for (const e of this.rules.values()) {
      for (const c of e.contributions) {
        const flow = c.metric && this.rendered.get(c.key);
        if (flow) out.push({ ...c.metric!, cookie: flow.cookie });
      }
    }
    return out;
  }

  /** The rule behind a conjunction id (from a punt's userdata), or undefined. */
  describe(conjId: number): RuleIdentity | undefined {
    return this.identities.get(conjId);
  }

  /**
   * Restates the identities of the rules compiled, moved or removed in this sync, and only theirs
   * (a rule left as it was keeps its table, priority, conjunction ids and content).
   */
  private restateIdentities(): void {
    const stale = this.identityStale;
    // Every old id first: an id may pass from one of these rules to another within one sync.
    for (const [id, oldIds] of stale) {
      for (const conjId of oldIds) if (this.identities.get(conjId)?.nodeRuleId === id) this.identities.delete(conjId);
    }
    for (const id of stale.keys()) {
      const e = this.rules.get(id);
      if (!e) continue;
      for (const conjId of e.conjIds) {
        this.identities.set(conjId, {
          conjId, nodeRuleId: id, ruleId: e.rule.ruleId, ref: e.rule.ref, direction: e.rule.direction, action: e.rule.action,
          table: e.table, priority: e.priority, policyPriority: e.rule.priority.policy, ...(e.rule.logging ? { logging: e.rule.logging } : {}),
        });
      }
    }
    stale.clear();
  }

  /**
   * The common case of a group change: the rule differs from its compiled form only in its peer
   * IPs (a Pod elsewhere joined or left a peer group). Its flows then differ only in the peer clause
   * of its main unit, one flow per address that came or went, so only those are added and removed.
   * False (nothing done) when anything else differs or the peer clause appears or disappears.
   */
  private movePeerIps(prev: RuleEntry, rule: NodeRule, touched: Set<string>): boolean {
    const was = prev.rule;
    if (was.peers === 'any' || rule.peers === 'any' || !samePeerFrame(was, rule)) return false;
    // Only IPv4 rules take this path: with IPv6 anywhere in a rule, which families it installs
    // can change with its peers, and a full recompile decides. (The rule's other addresses are
    // the compiled ones, samePeerFrame says: only the peer addresses that came need a look.)
    if (!prev.v4Only) return false;
    const addrMatch = (a: string) => addressMatch(DIRECTION_TABLES[rule.direction].peer, a);
    // The main unit exists iff it has peer addresses; when it appears or disappears, recompile.
    const cidrs = was.peers.cidrs;
    if (cidrs.length === 0 && (was.peers.ips.length === 0 || rule.peers.ips.length === 0)) return false;
    const diff = knownListDiff(was.peers.ips, rule.peers.ips) ?? sortedDiff(addressArray(was.peers.ips), addressArray(rule.peers.ips));
    if (!diff?.come.every((a) => familyOf(a) === 4)) return false;
    const cidrMatches = new Set(cidrs.map(addrMatch));
    const gone = new Set(diff.gone.map(addrMatch));
    const come = diff.come.map(addrMatch);
    // An address whose match is also a CIDR's (one flow for both): recompile.
    for (const m of [...gone, ...come]) if (cidrMatches.has(m)) return false;
    if (gone.size === 0 && come.length === 0) {
      prev.rule = rule;
      return true;
    }
    if (!prev.mainUnit) return false;
    const units = ruleUnitShape(rule);
    const conjId = prev.conjIds[0]!;
    const part = partLabel(units.peerClause + 1, units.clauses);
    const { table, priority } = prev;
    if (!prev.peerIndex) {
      prev.peerIndex = new Map();
      for (const c of prev.contributions) if (c.conj !== undefined && c.conj.id === conjId && c.conj.part === part) prev.peerIndex.set(c.match, c);
    }
    for (const match of gone) {
      const c = prev.peerIndex.get(match);
      if (!c) continue;
      this.removeContribution(c, touched);
      prev.contributions.delete(c);
      prev.peerIndex.delete(match);
    }
    for (const match of come) {
      const c: Contribution = { key: flowKey(table, priority, match), table, priority, match, conj: { id: conjId, part } };
      this.addContribution(c, touched);
      prev.contributions.add(c);
      prev.peerIndex.set(match, c);
    }
    prev.rule = rule;
    return true;
  }

  /**
   * The common case of a local Pod change: the rule differs from its compiled form only in its
   * targets (a local Pod came into or left the groups it applies to). Its flows then differ only in
   * the target clause of its main unit, one flow per target address, so only those are added and
   * removed. IPv4 rules with a compiled main unit and no Service peers only; false (nothing done)
   * otherwise, or when the target clause would become empty.
   */
  private moveTargets(prev: RuleEntry, rule: NodeRule, touched: Set<string>): boolean {
    const was = prev.rule;
    if (!prev.v4Only || !prev.mainUnit || !sameTargetFrame(was, rule)) return false;
    if (!rule.targets.every((x) => x.ips.every((a) => familyOf(a) === 4))) return false;
    const before = targetMatches(was);
    const after = targetMatches(rule);
    if (before.length === 0 || after.length === 0) return false;
    const diff = sortedDiff(before, after);
    if (!diff) return false;
    const units = ruleUnitShape(rule);
    const conjId = prev.conjIds[0]!;
    const part = partLabel(units.targetClause + 1, units.clauses);
    // The egress tables that judge a Service's endpoint keep the rule off pre-DNAT packets on this clause.
    const extra = rule.direction === 'Egress' && rule.priority.stage !== 1 ? `,${NOT_PRE_DNAT}` : '';
    const { table, priority } = prev;
    if (!prev.targetIndex) {
      prev.targetIndex = new Map();
      for (const c of prev.contributions) if (c.conj !== undefined && c.conj.id === conjId && c.conj.part === part) prev.targetIndex.set(c.match, c);
    }
    const index = prev.targetIndex;
    // Not compiled as expected (cannot happen for a rule compiled by familyUnits): recompile.
    if (!diff.gone.every((m) => index.has(`${m}${extra}`))) return false;
    for (const m of diff.gone) {
      const c = index.get(`${m}${extra}`)!;
      this.removeContribution(c, touched);
      prev.contributions.delete(c);
      index.delete(c.match);
    }
    for (const m of diff.come) {
      const match = `${m}${extra}`;
      const c: Contribution = { key: flowKey(table, priority, match), table, priority, match, conj: { id: conjId, part } };
      this.addContribution(c, touched);
      prev.contributions.add(c);
      index.set(match, c);
    }
    prev.rule = rule;
    return true;
  }

  /**
   * A rule's contributions replaced by new ones, touching only the shared flows whose contributions
   * differ: a rule recompiled because one peer address moved keeps all its other flows as they are.
   */
  private replaceContributions(old: Iterable<Contribution>, fresh: readonly Contribution[], touched: Set<string>): void {
    const pending = new Map<string, Contribution[]>();
    for (const c of fresh) {
      const sig = contributionSig(c);
      const list = pending.get(sig);
      if (list) list.push(c);
      else pending.set(sig, [c]);
    }
    // Removals first: a flow-carrying contribution is keyed by its owner, so its replacement
    // (same owner, other actions) must land after the old one has gone.
    for (const c of old) {
      const list = pending.get(contributionSig(c));
      if (list && list.length > 0) list.pop();
      else this.removeContribution(c, touched);
    }
    for (const list of pending.values()) for (const c of list) this.addContribution(c, touched);
  }

  private addContribution(c: Contribution, touched: Set<string>): void {
    let s = this.shared.get(c.key);
    if (!s) this.shared.set(c.key, (s = { table: c.table, priority: c.priority, match: c.match, conj: undefined, direct: undefined }));
    if (c.conj) addConj(s, c.conj.id, c.conj.part);
    if (c.direct) (s.direct ??= new Map()).set(c.direct.owner, { actions: c.direct.actions, logs: c.direct.logs });
    touched.add(c.key);
  }

  private removeContribution(c: Contribution, touched: Set<string>): void {
    const s = this.shared.get(c.key);
    if (!s) return;
    if (c.conj) removeConj(s, c.conj.id, c.conj.part);
    if (c.direct && s.direct) {
      s.direct.delete(c.direct.owner);
      if (s.direct.size === 0) s.direct = undefined;
    }
    if (s.conj === undefined && s.direct === undefined) this.shared.delete(c.key);
    touched.add(c.key);
  }

  private renderTouched(touched: Set<string>): PolicyFlowDelta {
    const add: Flow[] = [];
    const remove: Flow[] = [];
    // The classification flows rendered since the last call (a sync that threw before reaching here included).
    const classPending = this.classPending;
    this.classPending = new Map();
    for (const { old, now } of classPending.values()) {
      if (old && now && old.cookie === now.cookie) continue;
      if (old) remove.push(old);
      if (now) add.push(now);
    }
    for (const key of touched) {
      const old = this.rendered.get(key);
      const s = this.shared.get(key);
      const now = s ? render(s) : undefined;
      if (old && now && old.cookie === now.cookie) continue;
      if (old) {
        remove.push(old);
        this.rendered.delete(key);
      }
      if (now) {
        add.push(now);
        this.rendered.set(key, now);
      }
    }
    return { add: add.sort(compareFlows), remove: remove.sort(compareFlows) };
  }
}

/** The classification flow of a prefix, setting its class bits with `actions` (longest prefix first). */
function classFlow(side: ClassSide, prefix: Pick<ClassPrefix, 'text' | 'len'>, actions: string): Flow {
  return policyFlow(CLASS_TABLE[side], CLASS_PRIORITY_BASE + prefix.len, addressMatch(side === 'src' ? 'nw_src' : 'nw_dst', prefix.text), actions);
}

const compareText = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function compareFlows(a: Flow, b: Flow): number {
  return tableId(a.table) - tableId(b.table) || b.priority - a.priority || compareText(a.match, b.match) || compareText(a.actions, b.actions);
}

/** Priorities of the ordered tables and conjunction ids, from the whole rule set. */
function allocate(rules: readonly NodeRule[], natural?: (key: string) => number): { priorities: Map<string, number>; conjIds: Map<string, number> } {
  const byTable = new Map<TableName, NodeRule[]>();
  const priorities = new Map<string, number>();
  for (const r of rules) {
    if (r.priority.stage === 1) {
      priorities.set(r.id, PRIORITY.k8s);
      continue;
    }
    const t = ruleTable(r);
    let list = byTable.get(t);
    if (!list) byTable.set(t, (list = []));
    list.push(r);
  }
  for (const [table, list] of byTable) for (const [id, p] of allocatePriorities(table, list)) priorities.set(id, p);
  return { priorities, conjIds: allocateConjIds(rules.flatMap(unitKeys), natural) };
}

/** Finds the computed rules naming some groups (the engine keeps an index for it). */
export interface RulesByGroup {
  rulesNamingGroups(groupIds: Iterable<string>): Iterable<string>;
}

/**
 * The computed-rule ids a ChangeSet may have changed: its rules and the rules using its groups
 * (named egress ports have groups of their own, so a Pod gaining or losing one is named too; a
 * toServices group whose Service's endpoints moved names the rules whose post-DNAT flows follow).
 * Costs O(the rules named), not O(all rules), with the engine's index.
 */
export function dirtyRuleIds(changes: ChangeSet, rules: RulesByGroup): Set<string> {
  const out = new Set<string>([...changes.rules.added, ...changes.rules.updated, ...changes.rules.removed]);
  const groups = [
    ...changes.addressGroups.added, ...changes.addressGroups.updated, ...changes.addressGroups.removed,
    ...changes.appliedToGroups.added, ...changes.appliedToGroups.updated, ...changes.appliedToGroups.removed,
    ...changes.serviceEndpoints,
  ];
  if (groups.length > 0) for (const id of rules.rulesNamingGroups(groups)) out.add(id);
  return out;
}
