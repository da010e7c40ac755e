/**
 * The compiler driven by the real policy engine: the flow-count test (100 source
 * Pods x 100 target Pods x 10 ports = a sum, not a product), determinism across "restarts", and the
 * incremental property: for random sequences of cluster and policy changes, the deltas computed
 * from each ChangeSet compose to exactly the flows of a full recompile. The sequences move the
 * endpoints of the Services toServices rules name (EndpointSlices by Pod and by address, not-ready
 * endpoints, Service edits, a hostNetwork endpoint whose Node changes address), which reach the
 * compiler only through the ChangeSet.
 */
import t from 'tap';
import type { Flow } from '../../daemon/flows/flow.js';
import { dirtyRuleIds, PolicyFlows, policyFlowInput, staticPolicyFlows } from '../../daemon/flows/policy/index.js';
import { FlowStore } from '../../daemon/flows/store.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { ChangeSet } from '../../daemon/policy/internal.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const nsObj = (name: string, labels: Record<string, string> = {}, annotations?: Record<string, string>): KubeObject => ({
  apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { ns: name, ...labels }, ...(annotations ? { annotations } : {}) },
});
const podObj = (namespace: string, name: string, ip: string, node: string, labels: Record<string, string>, ip6?: string): KubeObject => ({
  apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels },
  spec: { nodeName: node, containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 8000 + (Number(ip.split('.')[3]) % 3) }, { name: 'dns', containerPort: 53, protocol: 'UDP' }] }] },
  status: { podIP: ip, ...(ip6 ? { podIPs: [{ ip }, { ip: ip6 }] } : {}) },
});

t.test('flow count: one rule, 100 sources x 100 targets x 10 ports', async (t) => {
  const engine = new PolicyEngine({ nodeName: 'n1' });
  engine.upsert(nsObj('srv'));
  engine.upsert(nsObj('cli'));
  for (let i = 0; i < 100; i++) {
    engine.upsert(podObj('srv', `s${i}`, `10.1.${Math.floor(i / 200)}.${(i % 200) + 1}`, 'n1', { role: 'server' }));
    engine.upsert(podObj('cli', `c${i}`, `10.2.${Math.floor(i / 200)}.${(i % 200) + 1}`, 'n2', { role: 'client' }));
  }
  const ports = Array.from({ length: 10 }, (_, i) => ({ protocol: 'TCP', port: 8000 + i * 7 }));
  engine.upsert({
    apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: 'clients' },
    spec: {
      priority: 1, tier: 'application', appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'srv' } }, podSelector: { matchLabels: { role: 'server' } } }],
      ingress: [{ action: 'Allow', from: [{ namespaceSelector: { matchLabels: { ns: 'cli' } }, podSelector: { matchLabels: { role: 'client' } } }], ports }],
    },
  });
  t.same(engine.errors(), []);
  const pf = new PolicyFlows();
  pf.sync(policyFlowInput(engine));
  // Without the rule's counter flows in the Metric table (per-rule statistics).
  const rules = pf.flows().filter((f) => !f.table.endsWith('Metric')).length - staticPolicyFlows().length;
  t.comment(`Antrea rule: ${rules} rule flows (+${staticPolicyFlows().length} static) for 100 x 100 x 10 = ${100 * 100 * 10} combinations`);
  t.equal(rules, 100 + 100 + 10 + 1, '100 source + 100 target + 10 port clause flows + 1 action flow');

  // The same as a Kubernetes NetworkPolicy: the targets are also isolated (one default drop each).
  const k8s = new PolicyEngine({ nodeName: 'n1' });
  k8s.upsert(nsObj('srv'));
  k8s.upsert(nsObj('cli'));
  for (let i = 0; i < 100; i++) {
    k8s.upsert(podObj('srv', `s${i}`, `10.1.0.${i + 1}`, 'n1', { role: 'server' }));
    k8s.upsert(podObj('cli', `c${i}`, `10.2.0.${i + 1}`, 'n2', { role: 'client' }));
  }
  k8s.upsert({
    apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'clients', namespace: 'srv' },
    spec: { podSelector: { matchLabels: { role: 'server' } }, ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'cli' } }, podSelector: { matchLabels: { role: 'client' } } }], ports }] },
  });
  const pk = new PolicyFlows();
  pk.sync(policyFlowInput(k8s));
  const k8sRules = pk.flows().filter((f) => !f.table.endsWith('Metric')).length - staticPolicyFlows().length;
  t.comment(`Kubernetes NetworkPolicy: ${k8sRules} flows = 211 rule flows + 100 isolation drops`);
  t.equal(k8sRules, 211 + 100);
});

// ---- incremental == full recompile ----------------------------------------------------------

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 0x100000000;
  };
}

const APPS = ['a', 'b', 'c'];
const NAMESPACES = ['x', 'y'];

function randomPolicy(r: () => number): KubeObject {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const ports = (): unknown[] => {
    const n = Math.floor(r() * 3);
    return Array.from({ length: n }, () => {
      const k = r();
      if (k < 0.2) return { protocol: 'UDP', port: 53 };
      if (k < 0.4) return { protocol: 'TCP', port: 'http' };
      if (k < 0.6) return { protocol: 'TCP', port: 8000, endPort: 8010 + Math.floor(r() * 40) };
      if (k < 0.8) return { protocol: 'SCTP', port: 9000 };
      return { protocol: 'TCP', port: 80 + Math.floor(r() * 3) };
    });
  };
  const kind = r();
  const dir = r() < 0.5 ? 'ingress' : 'egress';
  const peerKey = dir === 'ingress' ? 'from' : 'to';
  if (kind < 0.35) {
    const ns = pick(NAMESPACES);
    const peer = r() < 0.3 ? { ipBlock: { cidr: '10.0.0.0/8', except: ['10.1.0.0/24'] } } : r() < 0.5 ? { namespaceSelector: { matchLabels: { env: pick(['prod', 'dev']) } } } : { podSelector: { matchLabels: { app: pick(APPS) } } };
    const rules = r() < 0.2 ? [] : [{ [peerKey]: r() < 0.2 ? [] : [peer], ports: ports().map((p: any) => (p.protocol === 'SCTP' || typeof p.port === 'string' || p.protocol === 'UDP' ? p : { ...p })) }];
    return {
      apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: `np${Math.floor(r() * 4)}`, namespace: ns },
      spec: { podSelector: r() < 0.2 ? {} : { matchLabels: { app: pick(APPS) } }, policyTypes: [dir === 'ingress' ? 'Ingress' : 'Egress'], [dir]: rules },
    };
  }
  if (kind < 0.75) {
    const tier = pick(['securityops', 'application', 'baseline']);
    const action = pick(tier === 'baseline' ? ['Allow', 'Drop', 'Reject'] : ['Allow', 'Drop', 'Reject', 'Pass']);
    const peer = r() < 0.25 ? { ipBlock: { cidr: '10.2.0.0/16' } } : { namespaceSelector: { matchLabels: { ns: pick(NAMESPACES) } }, podSelector: { matchLabels: { app: pick(APPS) } } };
    const toSvc = dir === 'egress' && r() < 0.3;
    return {
      apiVersion: 'crd.antrea.io/v1beta1', kind: 'ClusterNetworkPolicy', metadata: { name: `acnp${Math.floor(r() * 5)}` },
      spec: {
        priority: 1 + Math.floor(r() * 4), tier,
        appliedTo: [{ podSelector: { matchLabels: { app: pick(APPS) } } }],
        [dir]: [
          toSvc
            ? { action, toServices: r() < 0.6 ? [{ name: 'svc', namespace: 'x' }] : [{ name: 'svc2', namespace: 'x' }, { name: 'svc', namespace: 'x' }], enableLogging: r() < 0.3 }
            : { action, [peerKey]: r() < 0.15 ? [] : [peer], ports: ports().filter((p: any) => typeof p.port !== 'string' && p.endPort === undefined), enableLogging: r() < 0.3 },
          { action: 'Drop', [peerKey]: [{ namespaceSelector: { matchLabels: { ns: pick(NAMESPACES) } } }] },
        ],
      },
    };
  }
  const subject = { pods: { namespaceSelector: { matchLabels: { ns: pick(NAMESPACES) } }, podSelector: { matchLabels: { app: pick(APPS) } } } };
  const peer = dir === 'ingress' ? { namespaces: { matchLabels: { ns: pick(NAMESPACES) } } } : { pods: { namespaceSelector: {}, podSelector: { matchLabels: { app: pick(APPS) } } } };
  const portsAnp = r() < 0.5 ? {} : { ports: [r() < 0.5 ? { portNumber: { protocol: 'TCP', port: 80 } } : { portRange: { protocol: 'UDP', start: 1000, end: 1100 } }] };
  if (kind < 0.9) {
    return {
      apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'AdminNetworkPolicy', metadata: { name: `anp${Math.floor(r() * 3)}` },
      spec: { priority: Math.floor(r() * 50), subject, [dir]: [{ name: 'r0', action: pick(['Allow', 'Deny', 'Pass']), [peerKey]: [peer], ...portsAnp }] },
    };
  }
  return {
    apiVersion: 'policy.networking.k8s.io/v1alpha1', kind: 'BaselineAdminNetworkPolicy', metadata: { name: 'default' },
    spec: { subject, [dir]: [{ name: 'r0', action: pick(['Allow', 'Deny']), [peerKey]: [peer], ...portsAnp }] },
  };
}

const cookies = (flows: readonly Flow[]) => flows.map((f) => f.cookie).sort();
const conjIdsOf = (f: Flow): number[] => [...`${f.match} ${f.actions}`.matchAll(/conj_id=(\d+)|conjunction\((\d+),/g)].map((m) => Number(m[1] ?? m[2]));

// A tiny id space: most rules collide, so ids move between rules as rules come and go.
const crowdedIds = (key: string) => 256 + (fnv(key) % 6);
function fnv(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

t.test('incremental deltas == full recompile, for random change sequences', async (t) => {
  let checked = 0;
  let nonEmpty = 0;
  let maxDelta = 0;
  let ownerChanges = 0;
  let ipv6Steps = 0;
  let classSteps = 0;
  let classFallbackSteps = 0;
  let endpointSteps = 0;
  // Seeds 7 and 8: dual-stack Pods, so rules carry IPv6 targets and peers beside IPv4 ones.
  // Seeds 9 and 10: one address class bit per side, all in one place (the other sets keep
  // per-address flows, and sets take the bit from each other as their gains change).
  const oneBit = { classBits: 1, naturalClassBit: () => 0 };
  for (const [seed, hash, dual, bits] of [[1, undefined, false, undefined], [2, undefined, false, undefined], [3, undefined, false, undefined], [4, undefined, false, undefined], [5, crowdedIds, false, undefined], [6, crowdedIds, false, undefined], [7, undefined, true, undefined], [8, crowdedIds, true, undefined], [9, undefined, false, oneBit], [10, crowdedIds, true, oneBit]] as const) {
    const r = rng(seed);
    const live = new PolicyEngine({ nodeName: 'n1' });
    // The objects as they stand, for the from-scratch oracle (a new engine and a new compiler).
    const objects = new Map<string, KubeObject>();
    const objKey = (o: { apiVersion: string; kind: string; namespace?: string | undefined; name: string }) => `${o.apiVersion}/${o.kind}/${o.namespace ?? ''}/${o.name}`;
    const engine = {
      upsert: (o: KubeObject) => {
        objects.set(objKey({ ...o, namespace: o.metadata.namespace, name: o.metadata.name }), o);
        return live.upsert(o);
      },
      remove: (ref: { apiVersion: string; kind: string; namespace?: string; name: string }) => {
        objects.delete(objKey(ref));
        return live.remove(ref);
      },
      errors: () => live.errors(),
      internalRules: () => live.internalRules(),
    };
    const opts = { ...(hash ? { naturalConjId: hash } : {}), ...(bits ?? {}) };
    const inc = new PolicyFlows(opts);
    // The agent's store, patched with each delta as the enforcer patches its owner.
    const store = new FlowStore();
    let installed = new Map<string, Flow>();
    const apply = (cs: ChangeSet, what: string) => {
      const input = policyFlowInput(live);
      const ownerBefore = new Map<number, string | undefined>();
      for (const f of installed.values()) for (const id of conjIdsOf(f)) ownerBefore.set(id, inc.describe(id)?.nodeRuleId);
      const delta = inc.sync(input, dirtyRuleIds(cs, live));
      store.patch('policy', delta.add, delta.remove);
      // A conjunction id that changed owner keeps none of its old owner's flows: a flow that stays
      // must be one the new owner needs as it is (same table, priority, match and actions).
      const removed = new Set(delta.remove.map((f) => f.cookie));
      const desiredNow = new Set(inc.flows().map((f) => f.cookie));
      for (const f of installed.values()) {
        if (removed.has(f.cookie)) continue;
        for (const id of conjIdsOf(f)) {
          if (inc.describe(id)?.nodeRuleId !== ownerBefore.get(id) && !desiredNow.has(f.cookie)) t.fail(`${what}: conjunction ${id} changed owner while ${f.match} stays installed`);
        }
      }
      for (const [id, owner] of ownerBefore) if (inc.describe(id) && inc.describe(id)!.nodeRuleId !== owner) ownerChanges++;
      for (const f of delta.remove) {
        if (!installed.delete(f.cookie)) t.fail(`${what}: delta removes ${f.match}, which is not installed`);
      }
      for (const f of delta.add) {
        if (installed.has(f.cookie)) t.fail(`${what}: delta adds ${f.match} twice`);
        installed.set(f.cookie, f);
      }
      const full = new PolicyFlows(opts);
      full.sync(input);
      const want = cookies(full.flows());
      const ok = JSON.stringify(cookies([...installed.values()])) === JSON.stringify(want) && JSON.stringify(cookies(inc.flows())) === JSON.stringify(want);
      if (!ok) {
        t.fail(`seed ${seed}, ${what}: incremental state differs from a full recompile`);
        installed = new Map(full.flows().map((f) => [f.cookie, f]));
      }
      // From scratch: a new engine fed the same objects (its node rules, isolations, groups all
      // built at once) and a new compiler give the same flows as the incremental engine and compiler.
      const scratch = new PolicyEngine({ nodeName: 'n1' });
      const rank = (o: KubeObject) => (o.kind === 'Namespace' ? 0 : o.kind === 'Pod' ? 1 : o.kind === 'Service' ? 2 : 3);
      for (const o of [...objects.values()].sort((a, b) => rank(a) - rank(b))) scratch.upsert(o);
      const fresh = new PolicyFlows(opts);
      fresh.sync(policyFlowInput(scratch));
      if (JSON.stringify(cookies(fresh.flows())) !== JSON.stringify(cookies(inc.flows()))) t.fail(`seed ${seed}, ${what}: incremental engine + compiler differ from a from-scratch engine + compiler`);
      if (JSON.stringify(cookies(store.flows())) !== JSON.stringify(want)) t.fail(`seed ${seed}, ${what}: the FlowStore fed the deltas differs from a full recompile`);
      // The rule behind each conjunction id (what the audit log and reject replies name) is the
      // full recompile's, and no id the flows no longer use is still described.
      const flowConjIds = new Set(full.flows().flatMap(conjIdsOf));
      for (const id of new Set([...flowConjIds, ...ownerBefore.keys()])) {
        if (JSON.stringify(inc.describe(id)) !== JSON.stringify(full.describe(id))) t.fail(`seed ${seed}, ${what}: conjunction ${id} is described as ${JSON.stringify(inc.describe(id))}, a full recompile says ${JSON.stringify(full.describe(id))}`);
      }
      checked++;
      if (inc.flows().some((f) => /ipv6_(src|dst)=/.test(f.match))) ipv6Steps++;
      const classFlows = inc.flows().filter((f) => (f.table === 'SrcAddressClass' || f.table === 'DstAddressClass') && !f.match.startsWith('ct_state='));
      if (classFlows.length > 0) {
        classSteps++;
        // with a class in use, some peer clause of another set still lists addresses
        if (bits && inc.flows().some((f) => f.table.endsWith('Rule') && /conjunction/.test(f.actions) && /nw_(src|dst)=10\.2\./.test(f.match))) classFallbackSteps++;
      }
      if (delta.add.length + delta.remove.length > 0) nonEmpty++;
      // a post-DNAT endpoint clause flow (a Pod or Node address and target port) came or went
      if ([...delta.add, ...delta.remove].some((f) => /^(tcp|udp)6?,(nw|ipv6)_dst=(10\.[12]\.|172\.20\.|fd00:[12]::)/.test(f.match) && /tp_dst=/.test(f.match))) endpointSteps++;
      maxDelta = Math.max(maxDelta, delta.add.length + delta.remove.length);
    };
    for (const ns of NAMESPACES) apply(engine.upsert(nsObj(ns, { env: 'prod' })), `namespace ${ns}`);
    apply(engine.upsert({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'svc', namespace: 'x' }, spec: { clusterIP: '10.96.0.10', selector: { app: 'a' }, ports: [{ port: 80, targetPort: 'http' }] } }), 'service');
    const pods = new Map<string, { ns: string; node: string; app: string }>();
    const podIp4 = (name: string) => `10.${pods.get(name)?.node === 'n2' ? 2 : 1}.0.${Number(name.slice(1)) + 1}`;
    const service = (name: string) => {
      const ports: unknown[] = [{ name: 'web', port: 80, targetPort: r() < 0.5 ? 'http' : 8000 + Math.floor(r() * 3) }];
      if (r() < 0.4) ports.push({ name: 'dns', port: 53, protocol: 'UDP', targetPort: 'dns' });
      const ip = name === 'svc' ? '10.96.0.10' : '10.96.0.11';
      return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace: 'x' }, spec: { clusterIP: ip, clusterIPs: dual ? [ip, `fd00:96::${ip.split('.')[3]}`] : [ip], selector: { app: APPS[Math.floor(r() * 3)]! }, ports } } as KubeObject;
    };
    /** A slice of svc or svc2: endpoints by Pod reference (hostNetwork hn included) or by bare address, some not ready. */
    const slice = () => {
      const svc = r() < 0.6 ? 'svc' : 'svc2';
      const endpoints = Array.from({ length: Math.floor(r() * 4) }, () => {
        const name = r() < 0.15 ? 'hn' : `p${Math.floor(r() * 12)}`;
        const byRef = name === 'hn' || r() < 0.6;
        return {
          addresses: [name === 'hn' ? '172.20.0.2' : podIp4(name)],
          ...(r() < 0.2 ? { conditions: { ready: false } } : {}),
          ...(byRef ? { targetRef: { kind: 'Pod', namespace: name === 'hn' ? 'x' : (pods.get(name)?.ns ?? 'x'), name } } : {}),
        };
      });
      return { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: `${svc}-${Math.floor(r() * 2)}`, namespace: 'x', labels: { 'kubernetes.io/service-name': svc } }, addressType: 'IPv4', endpoints } as KubeObject;
    };
    const nodeObj = (ip: string): KubeObject => ({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n2' }, status: { addresses: [{ type: 'InternalIP', address: ip }] } });
    apply(engine.upsert(nodeObj('172.20.0.2')), 'node n2');
    apply(engine.upsert({ ...podObj('x', 'hn', '172.20.0.2', 'n2', { app: 'a' }), spec: { ...podObj('x', 'hn', '172.20.0.2', 'n2', {}).spec, hostNetwork: true } }), 'hostNetwork pod x/hn');
    for (let step = 0; step < 120; step++) {
      if (r() < 0.15) {
        const sub = r();
        if (sub < 0.5) {
          const o = slice();
          if (r() < 0.25) apply(engine.remove({ apiVersion: o.apiVersion, kind: o.kind, namespace: 'x', name: o.metadata.name }), `remove slice ${o.metadata.name}`);
          else apply(engine.upsert(o), `slice ${o.metadata.name} ${JSON.stringify((o as any).endpoints)}`);
        } else if (sub < 0.85) {
          const name = r() < 0.6 ? 'svc' : 'svc2';
          if (r() < 0.15) apply(engine.remove({ apiVersion: 'v1', kind: 'Service', namespace: 'x', name }), `remove service ${name}`);
          else {
            const o = service(name);
            apply(engine.upsert(o), `service ${name} ${JSON.stringify(o.spec)}`);
          }
        } else {
          const ip = r() < 0.5 ? '172.20.0.2' : '172.20.0.3';
          apply(engine.upsert(nodeObj(ip)), `node n2 at ${ip}`);
        }
        continue;
      }
      const k = r();
      if (k < 0.35) {
        const name = `p${Math.floor(r() * 12)}`;
        const cur = pods.get(name);
        const ns = cur?.ns ?? NAMESPACES[Math.floor(r() * 2)]!;
        const next = { ns, node: r() < 0.6 ? 'n1' : 'n2', app: APPS[Math.floor(r() * 3)]! };
        pods.set(name, next);
        const ip = `10.${next.node === 'n1' ? 1 : 2}.0.${Number(name.slice(1)) + 1}`;
        const ip6 = dual ? `fd00:${next.node === 'n1' ? 1 : 2}::${Number(name.slice(1)) + 1}` : undefined;
        apply(engine.upsert(podObj(ns, name, ip, next.node, { app: next.app }, ip6)), `pod ${ns}/${name} ${JSON.stringify(next)}`);
      } else if (k < 0.45 && pods.size > 0) {
        const name = [...pods.keys()][Math.floor(r() * pods.size)]!;
        const ns = pods.get(name)!.ns;
        pods.delete(name);
        apply(engine.remove({ apiVersion: 'v1', kind: 'Pod', namespace: ns, name }), `remove pod ${ns}/${name}`);
      } else if (k < 0.8) {
        const p = randomPolicy(r);
        apply(engine.upsert(p), `upsert ${p.kind} ${p.metadata.name}`);
      } else if (k < 0.92) {
        const p = randomPolicy(r);
        apply(engine.remove({ apiVersion: p.apiVersion, kind: p.kind, ...(p.metadata.namespace ? { namespace: p.metadata.namespace } : {}), name: p.metadata.name }), `remove ${p.kind} ${p.metadata.name}`);
      } else {
        const ns = NAMESPACES[Math.floor(r() * 2)]!;
        apply(engine.upsert(nsObj(ns, { env: r() < 0.5 ? 'prod' : 'dev' }, r() < 0.5 ? { 'networkpolicy.antrea.io/enable-logging': 'true' } : undefined)), `relabel namespace ${ns}`);
      }
    }
    t.same(engine.errors(), [], `seed ${seed}: the random policies are valid`);
  }
  t.comment(`${checked} changes checked, ${nonEmpty} with a non-empty delta, largest delta ${maxDelta} flows, ${ownerChanges} conjunction ids moved to another rule`);
  t.ok(ownerChanges > 0, 'the crowded id space really moves ids between rules');
  t.ok(nonEmpty > 100, 'the sequences really change flows');
  t.comment(`${classSteps} steps with address classes, ${classFallbackSteps} of them with a set left without a bit`);
  t.ok(classSteps > 200, `the sequences really use address classes (${classSteps} steps)`);
  t.ok(classFallbackSteps > 20, `sets beyond the bit budget keep per-address flows beside classes (${classFallbackSteps} steps)`);
  t.ok(ipv6Steps > 50, `the dual-stack sequences really install IPv6 policy flows (${ipv6Steps} steps)`);
  t.comment(`${endpointSteps} steps moved toServices post-DNAT endpoint flows`);
  t.ok(endpointSteps > 30, `the sequences really move toServices endpoints (${endpointSteps} steps)`);
});

t.test('a restart with the same objects compiles the same flows (ids and priorities are a function of the rule set)', async (t) => {
  const build = (order: number[]) => {
    const engine = new PolicyEngine({ nodeName: 'n1' });
    const r = rng(99);
    const objs: KubeObject[] = [nsObj('x', { env: 'prod' }), nsObj('y', { env: 'dev' })];
    for (let i = 0; i < 10; i++) objs.push(podObj(i % 2 ? 'x' : 'y', `p${i}`, `10.${i % 3 ? 1 : 2}.0.${i + 1}`, i % 3 ? 'n1' : 'n2', { app: APPS[i % 3]! }));
    const policies: KubeObject[] = [];
    const seen = new Set<string>();
    while (policies.length < 12) {
      const p = randomPolicy(r);
      const key = `${p.kind}/${p.metadata.namespace ?? ''}/${p.metadata.name}`;
      if (!seen.has(key)) policies.push(p);
      seen.add(key);
    }
    for (const i of order) objs.push(policies[i]!);
    for (const o of objs) engine.upsert(o);
    const pf = new PolicyFlows();
    pf.sync(policyFlowInput(engine));
    return cookies(pf.flows());
  };
  const fwd = Array.from({ length: 12 }, (_, i) => i);
  const a = build(fwd);
  t.ok(a.length > 20);
  t.same(build([...fwd].reverse()), a, 'policies applied in another order: identical flows (same cookies)');
});
