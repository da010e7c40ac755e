/**
 * The pure parts of the model = datapath harness (lab/proof/): trace verdicts, convergence
 * fingerprints, scenario steps, generated probes, verdict comparison — and, offline, the
 * simulator side of every scenario in test/scenarios/ (`sluicectl simulate` on the objects as the
 * lab would export them) against the in-process PolicyEngine.
 */
import t from 'tap';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadManifests } from '../../daemon/manifests.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import type { KubeObject, ProbeResult } from '../../daemon/policy/types.js';
import { repoRoot } from '../../lab/net/names.js';
import { compareVerdicts, mismatchTable } from '../../lab/proof/compare.js';
import { bridgeHasDesired, enforcementActivity, expectedRuleCounts, flowFingerprint, reportedGeneration } from '../../lab/proof/converge.js';
import { scenarioProbes } from '../../lab/proof/probeset.js';
import { SLUICECTL, simulate } from '../../lab/proof/simulate.js';
import { changedLabels, splitSteps, StepError } from '../../lab/proof/steps.js';
import { datapathPorts, parseTrace, sctpFlow } from '../../lab/proof/trace.js';

const SCENARIOS = join(repoRoot(), 'test', 'scenarios');

t.test('parseTrace: the final datapath actions decide', async (t) => {
  const forward = 'Flow: sctp,...\n 0. in_port=2, priority 200\n    goto_table:1\nDatapath actions: ct(zone=65520),recirc(0x1)\n\n===\nrecirc\n18. ip, priority 200\n    output:NXM_NX_REG1[]\n     -> output port is 4\nDatapath actions: set(eth(src=aa:bb:cc:dd:ee:ff,dst=76:4e:24:12:cf:c2)),set(ipv4(ttl=63)),ct(commit,zone=65520),6\n';
  t.same(parseTrace(forward), { verdict: 'forward', dpPort: '6' });
  t.same(parseTrace('Datapath actions: ct(zone=65520),recirc(0x2)\n...\n14. priority 0\n    drop\nDatapath actions: drop\n'), { verdict: 'drop' });
  const reject = 'Datapath actions: ct(zone=65520),recirc(0x3)\n13. conj_id=5,ip, priority 14000\n    set_field:0x2->reg2,controller(userdata=01.02.0d.02.36.b0.00.00.00.05,meter_id=256)\nDatapath actions: userspace(pid=0,controller(reason=1,dont_send=0,continuation=0,recirc_id=4,rule_cookie=0x51ce02,controller_id=0,max_len=65535))\n';
  t.same(parseTrace(reject), { verdict: 'reject' });
  const loggedDrop = reject.replace('userdata=01.02', 'userdata=01.01');
  t.same(parseTrace(loggedDrop), { verdict: 'drop' }, 'a logging punt without the reject op is a drop');
  const loggedAllow = 'x\ncontroller(userdata=01.01.0d.00.36.b0.00.00.00.05,meter_id=256)\nDatapath actions: userspace(pid=0,controller(reason=1)),set(ipv4(ttl=63)),7\n';
  t.same(parseTrace(loggedAllow), { verdict: 'forward', dpPort: '7' }, 'a logged allow still outputs');
  t.throws(() => parseTrace('Bad openflow flow syntax'), /no datapath actions/);
});

t.test('sctpFlow and dpif/show', async (t) => {
  t.equal(
    sctpFlow({ inPort: 3, dlSrc: '16:94:e1:4d:fb:4a', nwSrc: '10.10.1.3', nwDst: '10.10.2.5', dport: 82 }),
    'sctp,in_port=3,dl_src=16:94:e1:4d:fb:4a,dl_dst=aa:bb:cc:dd:ee:ff,nw_src=10.10.1.3,nw_dst=10.10.2.5,nw_ttl=64,sctp_src=40000,sctp_dst=82',
  );
  t.equal(
    sctpFlow({ inPort: 3, dlSrc: '16:94:e1:4d:fb:4a', nwSrc: 'fd00:10:1::3', nwDst: 'fd00:10:2::5', dport: 82 }),
    'sctp6,in_port=3,dl_src=16:94:e1:4d:fb:4a,dl_dst=aa:bb:cc:dd:ee:ff,ipv6_src=fd00:10:1::3,ipv6_dst=fd00:10:2::5,nw_ttl=64,sctp_src=40000,sctp_dst=82',
    'an IPv6 first packet: sctp6 with IPv6 addresses',
  );
  const show = 'netdev@ovs-netdev: hit:15143 missed:418\n  br-int:\n    antrea-gw0 32769/2: (tap)\n    br-int 65534/1: (tap)\n    veth367f1cfb 1/3: (system)\n';
  t.same([...datapathPorts(show)], [['antrea-gw0', '2'], ['br-int', '1'], ['veth367f1cfb', '3']]);
});

t.test('convergence: fingerprints ignore counters and order; generations parse', async (t) => {
  const a = ' cookie=0x51ce0001, duration=1.5s, table=0, n_packets=3, n_bytes=180, idle_age=1, priority=200,ip actions=drop\n cookie=0x51ce0002, duration=2s, table=1, n_packets=0, n_bytes=0, priority=0 actions=goto_table:2\n';
  const b = ' cookie=0x51ce0002, duration=9s, table=1, n_packets=7, n_bytes=10, priority=0 actions=goto_table:2\n cookie=0x51ce0001, duration=3s, table=0, n_packets=9, n_bytes=999, idle_age=0, priority=200,ip actions=drop\n';
  t.equal(flowFingerprint(a), flowFingerprint(b));
  t.not(flowFingerprint(a), flowFingerprint(a.replace('actions=drop', 'actions=goto_table:1')), 'a changed action changes the fingerprint');
  t.equal(reportedGeneration({ policy: { resourceVersion: '42' } }), 42n);
  t.equal(reportedGeneration({ policy: { resourceVersion: 7 } }), 7n);
  t.equal(reportedGeneration({ ready: true }), undefined);
  t.equal(reportedGeneration(undefined), undefined);
  t.equal(reportedGeneration({ policy: { resourceVersion: 'abc' } }), undefined);
  t.equal(reportedGeneration({ enforcement: { resourceVersion: '1234' } }), 1234n, 'the enforcement section may carry it');
  t.same(enforcementActivity({ ready: true }), { text: '', synced: true }, 'an agent without enforcement is never busy');
  t.same(enforcementActivity({ enforcement: { synced: false, applies: 3 } }), { text: 'synced=false applies=3 rules=undefined', synced: false });
  t.not(enforcementActivity({ enforcement: { synced: true, applies: 3 } }).text, enforcementActivity({ enforcement: { synced: true, applies: 4 } }).text, 'a new apply is activity');
  t.ok(bridgeHasDesired(a, [{ cookie: '0x51ce0002' }, { cookie: '0x51ce0001' }]), 'the bridge holds exactly the desired flows');
  t.notOk(bridgeHasDesired(a, [{ cookie: '0x51ce0001' }, { cookie: '0x51ce0002' }, { cookie: '0x51ce0003' }]), 'a desired flow not committed yet');
  t.notOk(bridgeHasDesired(a, [{ cookie: '0x51ce0001' }]), 'a flow the agent no longer wants is still there');
  t.ok(bridgeHasDesired(a, { error: 'starting' }), 'an agent without a desired set: not judged by it');
});

t.test('expected rule counts: per node, from the objects the agents watch', async (t) => {
  const objs: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'x', labels: { ns: 'x' } } },
    { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'a', namespace: 'x', labels: { pod: 'a' } }, spec: { nodeName: 'node-1', containers: [{ name: 'c', ports: [{ containerPort: 80 }] }] }, status: { phase: 'Running', podIP: '10.10.1.2' } },
  ];
  const np: KubeObject = { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name: 'allow-80', namespace: 'x' }, spec: { podSelector: {}, ingress: [{ ports: [{ port: 80 }] }] } };
  const before = expectedRuleCounts(objs, ['node-1', 'node-2']);
  const after = expectedRuleCounts([...objs, np], ['node-1', 'node-2']);
  t.ok(after['node-1']! > before['node-1']!, `a policy for a node-1 Pod adds rules on node-1 (${before['node-1']} -> ${after['node-1']})`);
  t.equal(after['node-2'], before['node-2'], 'and none on node-2, which has no Pod it applies to');
  t.same(enforcementActivity({ enforcement: { synced: true, applies: 1, rules: 4 } }).rules, 4);
});

t.test('steps: split at Step documents, label and delete changes, clear errors', async (t) => {
  const np = (name: string): KubeObject => ({ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', metadata: { name, namespace: 'x' }, spec: { podSelector: {} } });
  const step = (name: string, extra: Record<string, unknown> = {}): KubeObject => ({ apiVersion: 'test.sluice.dev/v1', kind: 'Step', metadata: { name }, ...extra }) as KubeObject;
  const steps = splitSteps([np('a'), step('s1', { label: [{ kind: 'Pod', namespace: 'x', name: 'c', set: { pod: 'a' }, remove: ['old'] }] }), step('s2', { delete: [{ apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', namespace: 'x', name: 'a' }] }), np('b')]);
  t.same(steps.map((s) => [s.name, s.apply.map((o) => o.metadata.name), s.delete.map((d) => d.name), s.label.length]), [['initial', ['a'], [], 0], ['s1', [], [], 1], ['s2', ['b'], ['a'], 0]]);
  t.same(changedLabels({ pod: 'c', old: '1', keep: 'k' }, steps[1]!.label[0]!), { pod: 'a', keep: 'k' });
  t.throws(() => splitSteps([step('bad', { label: [{ kind: 'Service', name: 's' }], delete: [{ kind: 'Pod' }] })]), StepError);
  try {
    splitSteps([step('bad', { label: [{ kind: 'Pod', name: 'p' }], delete: 'x' })]);
    t.fail('should throw');
  } catch (err) {
    t.match((err as Error).message, /Step bad\.label\[0\]\.namespace: required for a Pod/);
    t.match((err as Error).message, /Step bad\.delete: must be a list/);
  }
  t.throws(() => splitSteps([{ apiVersion: 'v9', kind: 'Step', metadata: { name: 'v' } } as KubeObject]), /apiVersion must be test\.sluice\.dev\/v1/);
});

t.test('generated probes: Pods, Services without hairpin, the external host, SCTP ports', async (t) => {
  const pod = (ns: string, name: string, ports: [number, string][]): KubeObject => ({
    apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: ns, labels: { pod: name } },
    spec: { nodeName: 'node-1', containers: [{ name: 'c', ports: ports.map(([containerPort, protocol]) => ({ containerPort, protocol })) }] },
    status: { phase: 'Running', podIP: `10.10.1.${name.charCodeAt(0)}` },
  });
  const pods = [pod('x', 'a', [[80, 'TCP'], [82, 'SCTP']]), pod('x', 'b', [[80, 'UDP']]), { ...pod('x', 'p', [[80, 'TCP']]), status: { phase: 'Pending' } }];
  const svc: KubeObject = { apiVersion: 'v1', kind: 'Service', metadata: { name: 's', namespace: 'x' }, spec: { clusterIP: '10.96.0.5', selector: { pod: 'a' }, ports: [{ port: 8080, protocol: 'TCP' }, { port: 9, protocol: 'SCTP' }] } };
  const probes = scenarioProbes(pods, [svc]).map((p) => `${p.from}>${p.to}:${p.port}/${p.protocol}`);
  t.same(probes.filter((p) => !p.includes('ip:')), ['x/a>x/b:80/UDP', 'x/b>x/a:80/TCP', 'x/b>x/a:82/SCTP', 'x/b>service:x/s:8080/TCP'], 'no Pending Pod, no hairpin, no SCTP Service port');
  t.equal(probes.filter((p) => p.includes('ip:192.168.77.250')).length, 8, 'each Pod to and from the external host, TCP 80 and UDP 81');
  const node: KubeObject = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-1' }, status: { addresses: [{ type: 'Hostname', address: 'node-1' }, { type: 'InternalIP', address: '192.168.77.11' }] } };
  const withNodes = scenarioProbes(pods, [svc], { nodes: [node], services: false, external: false }).map((p) => `${p.from}>${p.to}:${p.port}/${p.protocol}`);
  t.same(withNodes.filter((p) => p.startsWith('ip:')), ['ip:192.168.77.11>x/a:80/TCP', 'ip:192.168.77.11>x/b:80/TCP'], 'each node to each running Pod on TCP 80');

  // Dual-stack: every probe once per family; a Service only in the families of its ClusterIPs.
  const dualNode: KubeObject = { ...node, status: { addresses: [{ type: 'InternalIP', address: '192.168.77.11' }, { type: 'InternalIP', address: 'fd00:77::b' }] } };
  const svc6: KubeObject = { ...svc, metadata: { name: 's6', namespace: 'x' }, spec: { ...svc.spec, clusterIPs: ['10.96.0.6', 'fd00:96::6'] } };
  const dual = scenarioProbes(pods, [svc, svc6], { nodes: [dualNode], families: [4, 6] });
  const text = dual.map((p) => `${p.from}>${p.to}:${p.port}/${p.protocol}${p.family ? ` v${p.family}` : ''}`);
  t.same(text.filter((p) => p.startsWith('x/a>x/b')), ['x/a>x/b:80/UDP v4', 'x/a>x/b:80/UDP v6'], 'Pod to Pod in each family');
  t.same(text.filter((p) => p.includes('service:')), ['x/b>service:x/s:8080/TCP v4', 'x/b>service:x/s6:8080/TCP v4', 'x/b>service:x/s6:8080/TCP v6'], 'a single-stack Service in its family only');
  t.same(text.filter((p) => p.startsWith('x/a>ip:')), ['x/a>ip:192.168.77.250:80/TCP', 'x/a>ip:192.168.77.250:81/UDP', 'x/a>ip:fd00:77::fa:80/TCP', 'x/a>ip:fd00:77::fa:81/UDP'], 'the external host by its address of each family');
  t.same(text.filter((p) => /^ip:(192\.168\.77\.11|fd00:77::b)>x\/a:/.test(p)), ['ip:192.168.77.11>x/a:80/TCP', 'ip:fd00:77::b>x/a:80/TCP'], 'each node by its InternalIP of each family');
});

t.test('compare: differences and missing verdicts, as a table', async (t) => {
  const probes = [{ from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' as const }, { from: 'x/b', to: 'x/a', port: 80, protocol: 'TCP' as const }, { from: 'x/a', to: 'ip:1.2.3.4', port: 80, protocol: 'TCP' as const }];
  const lab: ProbeResult[] = [{ ...probes[0]!, verdict: 'allow' }, { ...probes[1]!, verdict: 'drop' }];
  const sim: ProbeResult[] = [{ ...probes[0]!, verdict: 'allow' }, { ...probes[1]!, verdict: 'reject', decidedBy: { kind: 'AntreaClusterNetworkPolicy', name: 'p', rule: 'r', direction: 'Ingress', action: 'Reject' } as never }, { ...probes[2]!, verdict: 'allow' }];
  const ms = compareVerdicts(probes, lab, sim);
  t.same(ms.map((m) => [m.probe.from, m.lab, m.simulate]), [['x/b', 'drop', 'reject'], ['x/a', 'missing', 'allow']]);
  t.match(mismatchTable(ms), /x\/b\s+x\/a\s+80\/TCP\s+drop\s+reject\s+simulate: Ingress AntreaClusterNetworkPolicy p rule r/);
  t.equal(mismatchTable([]), 'no differences');
});

const simulateReady = existsSync(SLUICECTL());
t.test('offline: sluicectl simulate on every scenario step = the in-process engine', { skip: simulateReady ? false : `${SLUICECTL()} is missing: build first` }, async (t) => {
  const files = readdirSync(SCENARIOS).filter((f) => f.endsWith('.yaml') && f !== 'model.yaml');
  t.ok(files.length >= 3, `${files.length} scenarios`);
  for (const f of files) {
    const steps = splitSteps(await loadManifests([join(SCENARIOS, 'model.yaml'), join(SCENARIOS, f)]));
    t.ok(steps.length >= 3, `${f}: ${steps.length} steps`);
    // What the lab would export: Pods running on their nodes with addresses, Services with ClusterIPs.
    const state = new Map<string, KubeObject>();
    const key = (o: { apiVersion?: string; kind: string; metadata?: { namespace?: string | undefined; name: string }; namespace?: string | undefined; name?: string }) =>
      `${o.apiVersion?.split('/')[0]}/${o.kind}/${o.metadata?.namespace ?? o.namespace ?? ''}/${o.metadata?.name ?? o.name}`;
    let podN = 0;
    let svcN = 0;
    for (const step of steps) {
      for (const o of step.apply) {
        const concrete: KubeObject =
          o.kind === 'Pod' ? { ...o, status: { phase: 'Running', podIP: `10.10.${o.spec.nodeName === 'node-2' ? 2 : 1}.${10 + podN++}` } }
          : o.kind === 'Service' ? { ...o, spec: { ...o.spec, clusterIP: `10.96.0.${10 + svcN++}` } }
          : o;
        const existing = state.get(key(o));
        state.set(key(o), existing?.status ? { ...concrete, status: existing.status } : concrete);
      }
      for (const d of step.delete) t.ok(state.delete(key(d)), `${f} ${step.name}: deletes an existing ${d.kind} ${d.name}`);
      for (const l of step.label) {
        const k = key({ apiVersion: 'v1', kind: l.kind, namespace: l.namespace, name: l.name });
        const o = state.get(k)!;
        t.ok(o, `${f} ${step.name}: relabels an existing ${l.kind} ${l.name}`);
        state.set(k, { ...o, metadata: { ...o.metadata, labels: changedLabels(o.metadata.labels, l) } });
      }
      const objects = [...state.values()];
      const probes = scenarioProbes(objects.filter((o) => o.kind === 'Pod'), objects.filter((o) => o.kind === 'Service'), { services: false });
      const sim = await simulate(objects, probes);
      t.same(sim.warnings, [], `${f} ${step.name}: every object valid`);
      const engine = new PolicyEngine();
      const rank = (o: KubeObject) => (o.kind === 'Namespace' || o.kind === 'Node' ? 0 : o.kind === 'Tier' ? 1 : 2);
      for (const o of [...objects].sort((a, b) => rank(a) - rank(b))) engine.upsert(o);
      const direct = probes.map((p) => engine.evaluate(p));
      t.same(compareVerdicts(probes, sim.results, direct), [], `${f} ${step.name}: ${probes.length} verdicts agree`);
      const verdicts = new Set(sim.results.map((r) => r.verdict));
      t.ok(verdicts.size >= 2, `${f} ${step.name}: the scenario decides something (${[...verdicts].join(', ')})`);
    }
  }
});
