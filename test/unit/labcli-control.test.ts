import t from 'tap';
import type { KubeObject, ProbeResult } from '../../daemon/policy/types.js';
import { agentConfig } from '../../lab/agent.js';
import { matrixDifferences } from '../../lab/demo.js';
import { runningStatus } from '../../lab/cluster/kubelet.js';
import { renderServiceRules } from '../../lab/net/service-nat.js';
import { podNetns } from '../../lab/net/names.js';
import { formatObjects, table } from '../../lab/output.js';
import { defaultProbes, planProbes, ProbePlanError } from '../../lab/probeplan.js';
import { resolveKind } from '../../lab/kinds.js';
import { servicePortRules } from '../../lab/cluster/service-rules.js';
import { nodeObject, nodeStatus, parseSupervisorArgs } from '../../lab/supervisor.js';
import { Coalescer, KeyedQueue } from '../../lab/cluster/workqueue.js';

const pod = (ns: string, name: string, ip: string | undefined, node: string, ports: [number, string][], extra: Record<string, unknown> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace: ns, name },
  spec: { nodeName: node, containers: [{ name: 'c', ports: ports.map(([containerPort, protocol]) => ({ containerPort, protocol })) }], ...extra },
  status: ip ? { phase: 'Running', podIP: ip } : { phase: 'Pending' },
});

t.test('service rules: ClusterIP Service ports with the ready endpoints of the matching slice port', async (t) => {
  const svc = (name: string, extra: Record<string, unknown> = {}): KubeObject => ({
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { namespace: 'x', name },
    spec: { clusterIP: '10.96.0.5', ports: [{ name: 'web', port: 80, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }, { name: 's', port: 9, protocol: 'SCTP' }], ...extra },
  });
  const slice = (name: string, svcName: string, eps: [string, boolean][], ports: { name: string; port: number; protocol: string }[]): KubeObject => ({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { namespace: 'x', name, labels: { 'kubernetes.io/service-name': svcName } },
    addressType: 'IPv4',
    endpoints: eps.map(([ip, ready]) => ({ addresses: [ip], conditions: { ready } })),
    ports,
  });
  const rules = servicePortRules(
    [svc('a'), svc('headless', { clusterIP: 'None' }), { ...svc('other'), metadata: { namespace: 'y', name: 'other' }, spec: { ...svc('other').spec, clusterIP: '10.96.0.6' } }],
    [
      slice('a-1', 'a', [['10.10.1.2', true], ['10.10.1.3', false]], [{ name: 'web', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 5353, protocol: 'UDP' }]),
      slice('a-2', 'a', [['10.10.2.2', true]], [{ name: 'web', port: 8081, protocol: 'TCP' }]),
      slice('h-1', 'headless', [['10.10.2.9', true]], [{ name: 'web', port: 80, protocol: 'TCP' }]),
    ],
  );
  t.same(rules.map((r) => `${r.namespace}/${r.name}:${r.portName} ${r.port}/${r.protocol} -> ${r.endpoints.map((e) => `${e.ip}:${e.port}`).join(',')}`), [
    'x/a:web 80/TCP -> 10.10.1.2:8080,10.10.2.2:8081',
    'x/a:dns 53/UDP -> 10.10.1.2:5353',
    'y/other:web 80/TCP -> ',
    'y/other:dns 53/UDP -> ',
  ], 'not-ready endpoints, headless Services and SCTP ports are left out');
  t.doesNotThrow(() => renderServiceRules(rules), 'lab/net accepts them');

  const dualSvc: KubeObject = { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 'd' }, spec: { clusterIP: '10.96.0.9', clusterIPs: ['10.96.0.9', 'fd00:96::9'], ports: [{ port: 80 }] } };
  const dslice = (name: string, addressType: string, ip: string): KubeObject => ({ ...slice(name, 'd', [[ip, true]], [{ name: '', port: 8080, protocol: 'TCP' }]), addressType });
  const dualRules = servicePortRules([dualSvc], [dslice('d-4', 'IPv4', '10.10.1.2'), dslice('d-6', 'IPv6', 'fd00:10:1::2')]);
  t.same(dualRules.map((r) => `${r.clusterIP} -> ${r.endpoints.map((e) => e.ip).join(',')}`), ['10.96.0.9 -> 10.10.1.2', 'fd00:96::9 -> fd00:10:1::2'], 'a dual-stack Service: one rule set per ClusterIP, endpoints of its family');
});

t.test('probe planning: default set and where packets go', async (t) => {
  const pods = [
    pod('x', 'b', '10.10.2.2', 'node-2', [[80, 'TCP'], [80, 'UDP']]),
    pod('x', 'a', '10.10.1.2', 'node-1', [[80, 'TCP'], [81, 'TCP'], [9, 'SCTP']]),
    pod('x', 'p', undefined, 'node-1', [[80, 'TCP']]),
    pod('x', 'h', '192.168.77.12', 'node-2', [[8080, 'TCP']], { hostNetwork: true }),
  ];
  const probes = defaultProbes(pods);
  t.same(probes.map((p) => `${p.from}>${p.to}:${p.port}/${p.protocol}`), [
    'x/a>x/a:80/TCP', 'x/a>x/b:80/TCP', 'x/b>x/a:80/TCP', 'x/b>x/b:80/TCP', 'x/h>x/a:80/TCP', 'x/h>x/b:80/TCP',
    'x/a>x/b:80/UDP', 'x/b>x/b:80/UDP', 'x/h>x/b:80/UDP',
    'x/a>x/a:81/TCP', 'x/b>x/a:81/TCP', 'x/h>x/a:81/TCP',
    'x/a>x/h:8080/TCP', 'x/b>x/h:8080/TCP', 'x/h>x/h:8080/TCP',
  ], 'running Pods only, ports each destination serves, no SCTP');
  const services: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 's' }, spec: { clusterIP: '10.96.0.7' } },
    { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 'hl' }, spec: { clusterIP: 'None' } },
  ];
  const view = { lab: 'lb9', nodes: ['node-1', 'node-2'], pods, services };
  const net = planProbes(
    [
      { from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' },
      { from: 'x/h', to: 'service:x/s', port: 80, protocol: 'UDP' },
      { from: 'ip:192.168.77.250', to: 'ip:10.10.1.2', port: 0, protocol: 'ICMP' },
      { from: 'ip:192.168.77.11', to: 'x/a', port: 81, protocol: 'TCP' },
    ],
    view,
  );
  t.match(net[0], { sourceNetns: /^lb9-p-[0-9a-f]{8}$/, ip: '10.10.2.2', port: 80, protocol: 'TCP' });
  t.same(net[1], { sourceNetns: 'lb9-node-2', ip: '10.96.0.7', port: 80, protocol: 'UDP' }, 'hostNetwork Pods send from their node');
  t.same(net[2], { sourceNetns: 'lb9-ext', ip: '10.10.1.2', port: 0, protocol: 'ICMP' });
  t.same(net[3]!.sourceNetns, 'lb9-node-1', 'a node IP sends from the node');
  const err = t.throws(() =>
    planProbes(
      [
        { from: 'x/p', to: 'x/a', port: 80, protocol: 'TCP' },
        { from: 'x/a', to: 'service:x/hl', port: 80, protocol: 'TCP' },
        { from: 'x/a', to: 'x/zz', port: 80, protocol: 'TCP' },
        { from: 'service:x/s', to: 'x/a', port: 80, protocol: 'TCP' },
        { from: 'x/a', to: 'x/b', port: 80, protocol: 'SCTP' },
        { from: 'ip:1.2.3.4', to: 'x/b', port: 80, protocol: 'TCP' },
        { from: 'x/a', to: 'ip:fd00::1', port: 80, protocol: 'TCP' },
        { from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP', family: 6 },
      ],
      view,
    ),
  ) as Error;
  t.ok(err instanceof ProbePlanError);
  for (const m of [/probe 0 .*x\/p is not running/, /probe 1 .*no ClusterIP/, /probe 2 .*no Pod x\/zz/, /probe 3 .*cannot send/, /probe 4 .*SCTP/, /probe 5 .*1\.2\.3\.4/, /probe 6 .*Pod x\/a has no IPv6 address/, /probe 7 .*IPv6.*Pod x\/a has no IPv6 address/]) t.match(err.message, m);
});

t.test('probe planning over IPv6: the family chosen, every endpoint resolved in it', async (t) => {
  const dual = (ns: string, name: string, v4: string, v6: string, node: string): KubeObject => {
    const p = pod(ns, name, v4, node, [[80, 'TCP']]);
    p.status.podIPs = [{ ip: v4 }, { ip: v6 }];
    return p;
  };
  const pods = [dual('x', 'a', '10.10.1.2', 'fd00:10:1::2', 'node-1'), dual('x', 'b', '10.10.2.2', 'fd00:10:2::2', 'node-2'), pod('x', 'o', 'fd00:10:1::3', 'node-1', [[80, 'TCP']]), pod('x', 'f', '10.10.1.9', 'node-1', [[80, 'TCP']])];
  const services: KubeObject[] = [
    { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 'ds' }, spec: { clusterIP: '10.96.0.7', clusterIPs: ['10.96.0.7', 'fd00:96::7'] } },
    { apiVersion: 'v1', kind: 'Service', metadata: { namespace: 'x', name: 'v4' }, spec: { clusterIP: '10.96.0.8', clusterIPs: ['10.96.0.8'] } },
  ];
  const view = { lab: 'lb9', nodes: ['node-1', 'node-2'], pods, services };
  const net = planProbes(
    [
      { from: 'x/a', to: 'x/b', port: 80, protocol: 'TCP' },
      { from: 'x/a', to: 'x/b', port: 80, protocol: 'UDP', family: 6 },
      { from: 'x/a', to: 'service:x/ds', port: 80, protocol: 'TCP', family: 6 },
      { from: 'x/a', to: 'service:x/ds', port: 80, protocol: 'TCP' },
      { from: 'ip:fd00:77::b', to: 'x/a', port: 0, protocol: 'ICMP' },
      { from: 'ip:fd00:77::fa', to: 'x/b', port: 80, protocol: 'TCP' },
      { from: 'ip:fd00:10:2::2', to: 'ip:fd00:77::c', port: 80, protocol: 'TCP' },
      { from: 'x/a', to: 'x/o', port: 80, protocol: 'TCP' },
    ],
    view,
  );
  t.same(net.map((n) => n.ip), ['10.10.2.2', 'fd00:10:2::2', 'fd00:96::7', '10.96.0.7', 'fd00:10:1::2', 'fd00:10:2::2', 'fd00:77::c', 'fd00:10:1::3'],
    'IPv4 by default on dual-stack, IPv6 when asked or when an ip: endpoint or an IPv6-only destination says so');
  t.same(net.slice(4, 7).map((n) => n.sourceNetns), ['lb9-node-1', 'lb9-ext', podNetns('lb9', 'x', 'b')],
    'node, external host and Pod IPv6 addresses send from their namespaces');
  const err = t.throws(() =>
    planProbes(
      [
        { from: 'x/a', to: 'service:x/v4', port: 80, protocol: 'TCP', family: 6 },
        { from: 'x/f', to: 'x/a', port: 80, protocol: 'TCP', family: 6 },
        { from: 'x/a', to: 'ip:fd00:77::c', port: 80, protocol: 'TCP', family: 4 },
        { from: 'ip:fd00:77::99', to: 'x/a', port: 80, protocol: 'TCP' },
      ],
      view,
    ),
  ) as Error;
  for (const m of [/probe 0 .*no IPv6 ClusterIP/, /probe 1 .*Pod x\/f has no IPv6 address/, /probe 2 .*an IPv6 address cannot take part in an IPv4 probe/, /probe 3 .*nothing in the lab has address fd00:77::99/]) t.match(err.message, m);
});

t.test('demo: matrix differences', async (t) => {
  const r = (from: string, verdict: ProbeResult['verdict']): ProbeResult => ({ from, to: 'x/b', port: 80, protocol: 'TCP', verdict });
  t.same(matrixDifferences([r('x/a', 'allow'), r('x/c', 'allow')], [r('x/a', 'allow'), r('x/c', 'allow')]), []);
  t.same(matrixDifferences([r('x/a', 'allow'), r('x/c', 'allow')], [r('x/a', 'drop'), r('x/c', 'allow')]), ['x/a -> x/b 80/TCP: allow -> drop']);
  t.same(matrixDifferences([r('x/a', 'allow')], []), ['x/a -> x/b 80/TCP: allow -> not probed']);
});

t.test('kubelet status, Node object, agent config, supervisor args', async (t) => {
  const p = pod('x', 'a', undefined, 'node-2', [[80, 'TCP']]);
  const s = runningStatus(p, { ips: ['10.10.2.7'] }, 'node-2', '2026-01-01T00:00:00Z') as Record<string, any>;
  t.equal(s.phase, 'Running');
  t.equal(s.podIP, '10.10.2.7');
  t.same(s.podIPs, [{ ip: '10.10.2.7' }]);
  t.equal(s.hostIP, '192.168.77.12');
  t.ok(s.conditions.some((c: { type: string; status: string }) => c.type === 'Ready' && c.status === 'True'));
  t.same(s.containerStatuses.map((c: { name: string }) => c.name), ['c']);

  const n = nodeObject('node-3');
  t.same(n.metadata.labels, { 'kubernetes.io/hostname': 'node-3', 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': n.metadata.labels!['kubernetes.io/arch'] });
  t.equal(n.spec.podCIDR, '10.10.3.0/24');
  t.same((nodeStatus('node-3', 'now').addresses as unknown[])[0], { type: 'InternalIP', address: '192.168.77.13' });
  t.same((nodeStatus('node-3', 'now', 'dual').addresses as { address: string }[]).map((a) => a.address), ['192.168.77.13', 'fd00:77::d', 'node-3'], 'IPv6 InternalIP beside the IPv4 one');
  t.same(nodeObject('node-3', 'dual').spec.podCIDRs, ['10.10.3.0/24', 'fd00:10:3::/64']);
  t.same(nodeObject('node-3', 'ipv6').spec.podCIDR, 'fd00:10:3::/64');
  t.same(agentConfig('sl', 'node-1', 'dual').serviceCIDRs, ['10.96.0.0/16', 'fd00:96::/112'], 'the agent treats IPv6 ClusterIPs as Services');

  t.same(agentConfig('sl', 'node-1'), {
    nodeName: 'node-1',
    kubeconfig: '/run/sluice-lab/sl/node-1/kubeconfig',
    bridge: 'br-int',
    datapath: 'netdev',
    gateway: 'antrea-gw0',
    serviceCIDRs: ['10.96.0.0/16'],
    socketPath: '/run/sluice-lab/sl/node-1/cni.sock',
    ovsRunDir: '/run/sluice-lab/sl/node-1/ovs',
    stateDir: '/run/sluice-lab/sl/node-1/agent',
    healthAddress: '127.0.0.1:10349',
    logLevel: 'info',
    rtTablesFile: '',
    auditLogPath: '/run/sluice-lab/sl/node-1/np.log',
    cniConfDir: '/run/sluice-lab/sl/node-1/cni',
    cniBinDir: '/run/sluice-lab/sl/cni-bin',
    cniCacheDir: '/run/sluice-lab/sl/node-1/cni-cache',
  });

  t.same(parseSupervisorArgs(['--name', 'lb1', '--nodes', '3', '--primary', 'eks', '--sluice', '--state-dir', '/run/sluice-lab/lb1/']), { name: 'lb1', nodes: 3, primary: 'eks', sluice: true, controller: false });
  t.same(parseSupervisorArgs(['--name', 'lb1', '--nodes', '1', '--primary', 'ptp', '--sluice', '--policy-source', 'controller']), { name: 'lb1', nodes: 1, primary: 'ptp', sluice: true, controller: true });
  t.same(parseSupervisorArgs(['--name', 'lb1', '--nodes', '2', '--primary', 'ptp', '--sluice', '--seed', '/tmp/c.json']), { name: 'lb1', nodes: 2, primary: 'ptp', sluice: true, controller: false, seed: '/tmp/c.json' });
  t.throws(() => parseSupervisorArgs(['--name', 'lb1', '--nodes', '1', '--primary', 'ptp', '--policy-source', 'central']), /--policy-source "central": standalone or controller/);
  t.throws(() => parseSupervisorArgs(['--name', 'lb1', '--nodes', 'x', '--primary', 'ptp']), /usage/);
});

t.test('table output', async (t) => {
  t.equal(table(['A', 'BB'], [['xxx', 'y'], ['z', 'w']]), 'A     BB\nxxx   y\nz     w');
  const text = formatObjects(resolveKind('pods'), [{ ...pod('x', 'a', '10.10.1.2', 'node-1', []), metadata: { namespace: 'x', name: 'a', labels: { pod: 'a' } } }]);
  t.match(text, /^NAMESPACE\s+NAME\s+READY\s+STATUS\s+RESTARTS\s+IP\s+NODE\s+LABELS\nx\s+a\s+\d+\/\d+\s+Running\s+0\s+10\.10\.1\.2\s+node-1\s+pod=a$/);
  t.equal(formatObjects(resolveKind('svc'), []), 'No services found.');
});

t.test('work queues: per-key serialization and coalescing', async (t) => {
  const log: string[] = [];
  let active = 0;
  let maxActive = 0;
  const done = new Promise<void>((resolve) => {
    let count = 0;
    const q = new KeyedQueue(async (key) => {
      active++;
      maxActive = Math.max(maxActive, active);
      log.push(`start ${key}`);
      await new Promise((r) => setTimeout(r, 10));
      log.push(`end ${key}`);
      active--;
      if (++count === 4) resolve();
    }, () => undefined, 2);
    q.enqueue('a');
    q.enqueue('a'); // queued, not started yet: merged
    q.enqueue('b');
    q.enqueue('c');
    setTimeout(() => q.enqueue('a'), 5); // while a runs: runs once more afterwards
  });
  await done;
  t.equal(maxActive, 2, 'concurrency limit');
  t.equal(log.filter((l) => l === 'start a').length, 2, 'a ran twice (once merged, once re-enqueued while active)');
  const firstEnd = log.indexOf('end a');
  const secondStart = log.lastIndexOf('start a');
  t.ok(secondStart > firstEnd, 'work for one key never overlaps');

  let runs = 0;
  const c = new Coalescer(async () => void runs++, () => undefined, 5);
  for (let i = 0; i < 10; i++) c.trigger();
  await new Promise((r) => setTimeout(r, 60));
  t.equal(runs, 1, 'a burst of triggers runs once');
  c.trigger();
  await new Promise((r) => setTimeout(r, 30));
  t.equal(runs, 2);
  c.stop();
});
