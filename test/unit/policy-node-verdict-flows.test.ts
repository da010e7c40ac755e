/**
 * nodeVerdict against the compiled flows themselves: the policy flows PolicyFlows compiles from the
 * same node rule set (address classes, conjunctions, priorities, the pre-DNAT skip, isolation drops,
 * Pass gotos, punts) run through a small OpenFlow interpreter of the policy hook tables, for random
 * clusters and probes (Pod, Node, external and Service destinations). The interpreter follows OVS:
 * per table the highest-priority matching flow wins, a conjunction matches when every clause has a
 * matching flow at its priority, a miss goes on to the next table, and a Metric table drops what a
 * rule marked ruleDrop (the pipeline's catch-all). Unknown match fields or actions throw, so a flow
 * the interpreter does not understand cannot pass silently.
 */
import t from 'tap';
import type { Flow } from '../../daemon/flows/flow.js';
import { PolicyFlows, policyFlowInput } from '../../daemon/flows/policy/index.js';
import { nextTable, REG0, type TableName } from '../../daemon/flows/tables.js';
import { cidrContainsIp, parseCidr, parseIp } from '../../daemon/policy/cidr.js';
import type { NodeConnection, NodeSideVerdict } from '../../daemon/policy/node-verdict.js';
import { NodeVerdicts } from '../../daemon/policy/node-verdict.js';
import { canonicalJson } from '../../daemon/policy/order.js';
import { rng } from './policy-core-helpers.js';
import { EXTERNAL, engineFor, NODES, PORTS, randomCluster } from './policy-node-verdict-helpers.js';

interface Packet {
  family: 4 | 6;
  src: { family: 4 | 6; value: bigint };
  dst: { family: 4 | 6; value: bigint };
  protocol: NodeConnection['protocol'];
  tpSrc: number;
  tpDst: number;
  icmpType: number;
  icmpCode: number;
  regs: number[];
}

type Pred = (p: Packet) => boolean;

const PROTO: Record<string, { family: 4 | 6; protocol?: NodeConnection['protocol'] }> = {
  ip: { family: 4 }, ipv6: { family: 6 },
  tcp: { family: 4, protocol: 'TCP' }, udp: { family: 4, protocol: 'UDP' }, sctp: { family: 4, protocol: 'SCTP' }, icmp: { family: 4, protocol: 'ICMP' },
  tcp6: { family: 6, protocol: 'TCP' }, udp6: { family: 6, protocol: 'UDP' }, sctp6: { family: 6, protocol: 'SCTP' }, icmp6: { family: 6, protocol: 'ICMP' },
};

const num = (text: string): number => (text.startsWith('0x') ? Number.parseInt(text, 16) : Number(text));
function valueMask(text: string, width: number): { value: number; mask: number } {
  const [v, m] = text.split('/');
  return { value: num(v!) >>> 0, mask: m === undefined ? (width === 32 ? 0xffffffff : (1 << width) - 1) : num(m) >>> 0 };
}

/** A flow's match as a predicate over a new, tracked packet (ct_state and conj_id handled by the caller). */
function compileMatch(match: string): { pred: Pred; conjId?: number; ct?: string } {
  const preds: Pred[] = [];
  let conjId: number | undefined;
  let ct: string | undefined;
  for (const tok of match.split(',').filter(Boolean)) {
    const eq = tok.indexOf('=');
    const key = eq < 0 ? tok : tok.slice(0, eq);
    const val = eq < 0 ? '' : tok.slice(eq + 1);
    if (eq < 0) {
      const p = PROTO[key];
      if (!p) throw new Error(`unknown match token ${tok}`);
      preds.push((x) => x.family === p.family && (p.protocol === undefined || x.protocol === p.protocol));
      continue;
    }
    switch (key) {
      case 'nw_src': case 'nw_dst': case 'ipv6_src': case 'ipv6_dst': {
        const c = parseCidr(val.includes('/') ? val : `${val}/${val.includes(':') ? 128 : 32}`);
        if (!c) throw new Error(`bad address ${tok}`);
        const src = key.endsWith('src');
        preds.push((x) => cidrContainsIp(c, src ? x.src : x.dst));
        break;
      }
      case 'tp_dst': case 'tp_src': {
        const { value, mask } = valueMask(val, 16);
        preds.push((x) => x.protocol !== 'ICMP' && ((key === 'tp_dst' ? x.tpDst : x.tpSrc) & mask) === value);
        break;
      }
      case 'icmp_type': case 'icmpv6_type': preds.push((x) => x.icmpType === num(val)); break;
      case 'icmp_code': case 'icmpv6_code': preds.push((x) => x.icmpCode === num(val)); break;
      case 'ct_state': ct = val; break;
      case 'conj_id': conjId = num(val); break;
      case 'ct_label': preds.push(() => false); break; // a new connection has no label yet
      default: {
        const m = /^reg(\d+)$/.exec(key);
        if (!m) throw new Error(`unknown match field ${tok}`);
        const r = Number(m[1]);
        const { value, mask } = valueMask(val, 32);
        preds.push((x) => ((x.regs[r]! & mask) >>> 0) === value);
      }
    }
  }
  return { pred: (p) => preds.every((f) => f(p)), ...(conjId !== undefined ? { conjId } : {}), ...(ct !== undefined ? { ct } : {}) };
}

/** A new, tracked packet's ct_state: +new+trk, nothing else. */
function ctMatches(state: string): boolean {
  const flags = state.match(/[+-][a-z]+/g) ?? [];
  return flags.every((f) => (f.slice(1) === 'new' || f.slice(1) === 'trk') === (f[0] === '+'));
}

/** Top-level comma split (controller(...) and conjunction(...) hold commas). */
function splitActions(actions: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of actions) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (cur) out.push(cur);
  return out;
}

interface CFlow {
  flow: Flow;
  pred: Pred;
  conjId?: number;
  /** conjunction(id,k/n) actions */
  clauses: { id: number; k: number; n: number }[];
}

class FlowTables {
  private readonly tables = new Map<string, Map<number, CFlow[]>>();

  constructor(flows: readonly Flow[]) {
    for (const flow of flows) {
      const m = compileMatch(flow.match);
      if (m.ct !== undefined && !ctMatches(m.ct)) continue; // never matches a new connection's first packet
      const clauses = splitActions(flow.actions).flatMap((a) => {
        const c = /^conjunction\((\d+),(\d+)\/(\d+)\)$/.exec(a);
        return c ? [{ id: Number(c[1]), k: Number(c[2]), n: Number(c[3]) }] : [];
      });
      let byPrio = this.tables.get(flow.table);
      if (!byPrio) this.tables.set(flow.table, (byPrio = new Map()));
      let list = byPrio.get(flow.priority);
      if (!list) byPrio.set(flow.priority, (list = []));
      list.push({ flow, pred: m.pred, ...(m.conjId !== undefined ? { conjId: m.conjId } : {}), clauses });
    }
  }

  /** The flow a packet meets in a table (undefined: miss). */
  lookup(table: string, p: Packet): Flow | undefined {
    const byPrio = this.tables.get(table);
    if (!byPrio) return undefined;
    for (const prio of [...byPrio.keys()].sort((a, b) => b - a)) {
      const list = byPrio.get(prio)!;
      const direct = list.filter((f) => f.conjId === undefined && f.clauses.length === 0 && f.pred(p));
      if (direct.length > 1 && new Set(direct.map((f) => f.flow.actions)).size > 1) throw new Error(`ambiguous: ${direct.map((f) => f.flow.match).join(' | ')}`);
      if (direct.length > 0) return direct[0]!.flow;
      const seen = new Map<number, { n: number; ks: Set<number> }>();
      for (const f of list) {
        if (f.clauses.length === 0 || !f.pred(p)) continue;
        for (const c of f.clauses) {
          let s = seen.get(c.id);
          if (!s) seen.set(c.id, (s = { n: c.n, ks: new Set() }));
          s.ks.add(c.k);
        }
      }
      const done = [...seen].filter(([, s]) => s.ks.size === s.n).map(([id]) => id);
      const conj = list.filter((f) => f.conjId !== undefined && done.includes(f.conjId) && f.pred(p));
      // Kubernetes NetworkPolicy rules share one priority (all Allow: any of them may record itself).
      const k8s = (table === 'EgressRule' || table === 'IngressRule') && prio === 200;
      if (!k8s && conj.length > 1 && new Set(conj.map((f) => f.flow.actions)).size > 1) throw new Error(`ambiguous conjunctions at ${table}/${prio}: ${conj.map((f) => f.flow.match).join(' | ')}`);
      if (conj.length > 0) return conj[0]!.flow;
    }
    return undefined;
  }

  /**
   * Runs a packet from `from` to the end of `last` (a Metric table): the verdict and the rule
   * register's conjunction id (0: none) — 'isolation' when a plain drop flow (the K8s default drop) dropped it.
   */
  run(from: TableName, last: TableName, p: Packet, ruleReg: number): { verdict: 'allow' | 'drop' | 'reject'; conj: number; isolation: boolean } {
    let table: TableName = from;
    let rejected = false;
    for (let steps = 0; steps < 50; steps++) {
      if (table === last) {
        // the rule's counter flows, then the pipeline's catch-all: a ruleDrop packet is dropped
        const dropped = (p.regs[0]! & REG0.ruleDrop) !== 0;
        return { verdict: dropped ? (rejected ? 'reject' : 'drop') : 'allow', conj: p.regs[ruleReg]!, isolation: false };
      }
      const f = this.lookup(table, p);
      if (!f) {
        table = nextTable(table);
        continue;
      }
      let next: TableName | undefined;
      for (const a of splitActions(f.actions)) {
        if (a === 'drop') return { verdict: 'drop', conj: p.regs[ruleReg]!, isolation: true };
        const g = /^goto_table:(\w+)$/.exec(a);
        if (g) {
          next = g[1] as TableName;
          continue;
        }
        const s = /^set_field:([0-9a-fx]+)(?:\/([0-9a-fx]+))?->reg(\d+)$/.exec(a);
        if (s) {
          const r = Number(s[3]);
          const v = num(s[1]!) >>> 0;
          const m = s[2] !== undefined ? num(s[2]) >>> 0 : 0xffffffff;
          p.regs[r] = ((p.regs[r]! & ~m) | (v & m)) >>> 0;
          continue;
        }
        const c = /^controller\(userdata=([0-9a-f.]+),meter_id=\d+\)$/.exec(a);
        if (c) {
          const ops = Number.parseInt(c[1]!.split('.')[1]!, 16);
          if (ops & 0x02) rejected = true;
          continue;
        }
        throw new Error(`unknown action ${a} in ${f.table}/${f.priority} ${f.match}`);
      }
      // No goto: OVS drops the packet (a logging isolation drop is a punt alone).
      if (!next) {
        if (f.table.endsWith('DefaultRule') && f.priority === 64500) return { verdict: 'drop', conj: p.regs[ruleReg]!, isolation: true };
        throw new Error(`flow ${f.table}/${f.priority} ${f.match} ends without a verdict`);
      }
      table = next;
    }
    throw new Error('table loop');
  }
}

function packet(src: string, dst: string, protocol: NodeConnection['protocol'], port: number, sourcePort: number, reg0: number): Packet {
  const s = parseIp(src)!;
  return {
    family: s.family, src: s, dst: parseIp(dst)!, protocol, tpSrc: sourcePort, tpDst: port, icmpType: s.family === 6 ? 128 : 8, icmpCode: 0,
    regs: Array.from({ length: 16 }, (_, i) => (i === 0 ? reg0 : 0)),
  };
}

t.test('random clusters: nodeVerdict gives what the compiled flows give', async (t) => {
  const counts: Record<string, number> = {};
  const bump = (k: string) => (counts[k] = (counts[k] ?? 0) + 1);
  const mismatches: string[] = [];
  let mismatchCount = 0;
  let probes = 0;
  for (let seed = 5000; seed < 5000 + 24 * 41; seed += 41) {
    const cluster = randomCluster(seed);
    const r = rng(seed + 3);
    for (const { name: nodeName, ip: nodeIP } of NODES) {
      const engine = engineFor(nodeName, cluster.objects);
      const input = policyFlowInput(engine);
      const pf = new PolicyFlows();
      pf.sync(input);
      const tables = new FlowTables(pf.flows());
      const nv = new NodeVerdicts(input.rules, input.isolations, { serviceEndpoints: input.serviceEndpoints!, nodeIPs: [nodeIP] });
      const localPods = cluster.pods.filter((p) => p.node === nodeName);
      const isLocalIp = (ip: string) => localPods.some((p) => p.ip === ip);
      const ruleOf = (conj: number) => pf.describe(conj)?.nodeRuleId;
      // Which Kubernetes rule the flows record is arbitrary (one priority): compared as 'k8s rule'.
      const stageOf = new Map(input.rules.map((x) => [x.id, x.priority.stage]));
      const label = (id: string) => (stageOf.get(id) === 1 ? 'rule k8s' : `rule ${id}`);
      /** One side of a packet through the flows, as a NodeSideVerdict-like summary. */
      const side = (dir: 'Egress' | 'Ingress', p: Packet): string => {
        const res = dir === 'Egress' ? tables.run('SrcAddressClass', 'EgressMetric', p, 5) : runIngress(p);
        const by = res.isolation ? 'isolation' : res.conj === 0 ? 'default' : label(ruleOf(res.conj)!);
        return `${dir} ${res.verdict} ${by}`;
      };
      // Ingress: the classification tables set the class bits, then the ingress tables.
      const runIngress = (p: Packet) => {
        tables.run('SrcAddressClass', 'AntreaPolicyEgressRule', p, 6);
        return tables.run('AntreaPolicyIngressRule', 'IngressMetric', p, 6);
      };
      // a local Pod no rule targets: no side here, a default allow in the flows
      const norm = (xs: string[]) => xs.filter((x) => !/^\w+ allow default$/.test(x)).sort();
      const mine = (sides: NodeSideVerdict[]) => sides.map((s) => `${s.direction} ${s.verdict} ${s.decidedBy.kind === 'rule' ? label(s.decidedBy.id) : s.decidedBy.kind}`);
      for (let i = 0; i < 200; i++) {
        const localEnd = r.pick(localPods).ip;
        const roll = r.next();
        const other = roll < 0.7 ? r.pick(cluster.pods).ip : roll < 0.85 ? r.pick(NODES).ip : r.pick(EXTERNAL);
        const [src, dst] = r.next() < 0.5 ? [localEnd, other] : [other, localEnd];
        const [protocol, port] = r.pick(PORTS);
        const sourcePort = r.pick([1025, 32000, 50000]);
        const toService = r.next() < 0.3;
        const expected: string[] = [];
        let got: string[];
        probes++;
        if (toService) {
          const [p, n] = r.pick([['TCP', 80], ['UDP', 53]] as const);
          const conn: NodeConnection = { src: localEnd, dst: cluster.clusterIP, protocol: p, port: n, sourcePort };
          const sv = nv.judgeService(conn);
          for (const e of sv.endpoints) {
            // before DNAT: the Pod's packet to the ClusterIP (toService); a drop there decides the egress side
            const pre = side('Egress', packet(localEnd, cluster.clusterIP, p, n, sourcePort, REG0.srcPod | REG0.toService));
            const post = side('Egress', packet(localEnd, e.ip, p, e.port, sourcePort, REG0.srcGateway));
            const want = [pre.startsWith('Egress allow') ? post : pre];
            if (isLocalIp(e.ip)) want.push(side('Ingress', packet(localEnd, e.ip, p, e.port, sourcePort, REG0.srcGateway)));
            const have = mine(e.sides);
            for (const x of have) bump(`service ${x.replace(/rule \S+/g, 'rule')}`);
            if (canonicalJson(norm(want)) !== canonicalJson(norm(have))) {
              mismatchCount++;
              if (mismatches.length < 5) mismatches.push(`seed ${seed} ${nodeName} ${p} ${localEnd} -> ${cluster.clusterIP}:${n} via ${e.ip}:${e.port}: flows ${want.join(' / ')}, here ${have.join(' / ')}`);
            }
          }
          continue;
        }
        if (src === dst) continue;
        const conn: NodeConnection = { src, dst, protocol, port, ...(protocol === 'ICMP' ? {} : { sourcePort }) };
        const tp = protocol === 'ICMP' ? 0 : port;
        if (isLocalIp(src)) expected.push(side('Egress', packet(src, dst, protocol, tp, sourcePort, REG0.srcPod)));
        // host-originated traffic (this node's address) skips the ingress tables
        if (isLocalIp(dst) && src !== nodeIP) expected.push(side('Ingress', packet(src, dst, protocol, tp, sourcePort, 0)));
        got = mine(nv.judge(conn));
        for (const x of got) bump(x.replace(/rule \S+/g, 'rule'));
        if (canonicalJson(norm(expected)) !== canonicalJson(norm(got))) {
          mismatchCount++;
          if (mismatches.length < 5) mismatches.push(`seed ${seed} ${nodeName} ${protocol} ${src} -> ${dst}:${port} sport ${sourcePort}: flows ${expected.join(' / ')}, here ${got.join(' / ')}`);
        }
      }
    }
  }
  t.comment(`${probes} probes; sides here: ${canonicalJson(counts)}`);
  t.equal(mismatchCount, 0, 'no probe differs from the flows');
  t.same(mismatches, [], 'the first that differ');
  for (const k of ['Egress drop rule', 'Ingress drop rule', 'Egress reject rule', 'Ingress reject rule', 'Egress drop isolation', 'Ingress drop isolation', 'Egress allow rule', 'Ingress allow rule']) {
    t.ok((counts[k] ?? 0) > 5, `${k}: ${counts[k] ?? 0}`);
  }
});

t.test('reproducer: a toServices Drop decides before DNAT in the flows, after a higher Allow in the evaluator', async (t) => {
  const { namespace, node, pod } = await import('./policy-core-helpers.js');
  const engine = engineFor('node-1', [
    namespace('x'),
    node('node-1', '172.18.0.1'),
    node('node-2', '172.18.0.2'),
    pod('x', 'client', { labels: { app: 'client' }, ip: '10.1.0.10', node: 'node-1', ports: [] }),
    pod('x', 'db', { labels: { app: 'db' }, ip: '10.1.0.20', node: 'node-2', ports: [{ name: 'http', containerPort: 8080 }] }),
    { apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: '10.96.0.1', selector: { app: 'db' }, ports: [{ port: 80, targetPort: 8080 }] } },
    {
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'svc-1', namespace: 'x', labels: { 'kubernetes.io/service-name': 'svc' } },
      addressType: 'IPv4', endpoints: [{ addresses: ['10.1.0.20'], targetRef: { kind: 'Pod', namespace: 'x', name: 'db' } }],
    },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'allow-db' }, spec: { priority: 1, tier: 'securityops', appliedTo: [{ podSelector: { matchLabels: { app: 'client' } } }], egress: [{ name: 'db', action: 'Allow', to: [{ podSelector: { matchLabels: { app: 'db' } } }] }] } },
    { apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'no-svc' }, spec: { priority: 1, tier: 'application', appliedTo: [{ podSelector: { matchLabels: { app: 'client' } } }], egress: [{ name: 'svc', action: 'Drop', toServices: [{ name: 'svc', namespace: 'x' }] }] } },
  ]);
  t.same(engine.errors(), []);
  const ex = engine.explain({ from: 'ip:10.1.0.10', to: 'ip:10.96.0.1', protocol: 'TCP', port: 80, sourcePort: 40000 });
  t.equal(ex.sides[0]!.verdict, 'allow', 'the evaluator: the securityops Allow to the endpoint decides');
  const input = policyFlowInput(engine);
  const pf = new PolicyFlows();
  pf.sync(input);
  const tables = new FlowTables(pf.flows());
  const pre = tables.run('SrcAddressClass', 'EgressMetric', packet('10.1.0.10', '10.96.0.1', 'TCP', 80, 40000, REG0.srcPod | REG0.toService), 5);
  t.equal(pre.verdict, 'drop', 'the flows: the packet to the ClusterIP meets only the toServices Drop');
  t.equal(pf.describe(pre.conj)?.ref.name, 'no-svc');
  const post = tables.run('SrcAddressClass', 'EgressMetric', packet('10.1.0.10', '10.1.0.20', 'TCP', 8080, 40000, REG0.srcGateway), 5);
  t.equal(post.verdict, 'allow', '(after DNAT the Allow would come first)');
  const nv = new NodeVerdicts(input.rules, input.isolations, { serviceEndpoints: input.serviceEndpoints! });
  const sv = nv.judgeService({ src: '10.1.0.10', dst: '10.96.0.1', protocol: 'TCP', port: 80, sourcePort: 40000 });
  t.equal(sv.sides[0]!.verdict, 'drop', 'nodeVerdict follows the flows');
  t.equal(sv.sides[0]!.decidedBy.kind === 'rule' && sv.sides[0]!.decidedBy.ref.name, 'no-svc');
});
