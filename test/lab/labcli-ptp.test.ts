/**
 * sluice-lab end to end through the real CLI on the ptp flavour: up with a small scenario, Pods
 * with real IPs, full reachability (Pod↔Pod same/cross node, Pod→Service with local and remote
 * endpoint, Pod→node via a hostNetwork Pod, Pod→external host), apply/label/delete changing the
 * running lab, an informer watching the API server's EndpointSlices, CLI errors, and a complete
 * `down`. One lab (lb1) for the whole file.
 */
import t from 'tap';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { netnsPath, podNetns } from '../../lab/net/names.js';
import {
  SMALL_SCENARIO, cli, cliJson, inCidr, labRemains, skipReason, writeTemp, type ListJson, type PodJson, type ProbeJson,
} from './labcli-helpers.js';

const LAB = 'lb1';
const reason = skipReason();

if (reason) {
  t.plan(0, reason);
} else {
  const dir = writeTemp({
    'scenario.yaml': SMALL_SCENARIO,
    'p4.yaml': `apiVersion: v1
kind: Pod
metadata: {name: p4, namespace: lbt, labels: {app: p4}}
spec:
  containers: [{name: s, ports: [{name: http, containerPort: 80}]}]
`,
    'p4-ref.yaml': 'apiVersion: v1\nkind: Pod\nmetadata: {name: p4, namespace: lbt}\n',
    'bad.yaml': 'apiVersion: v1\nkind: Pod\nmetadata: {namespace: lbt}\n',
    'p4-changed.yaml': `apiVersion: v1
kind: Pod
metadata: {name: p4, namespace: lbt, labels: {app: p4}}
spec:
  containers: [{name: s, ports: [{name: http, containerPort: 90}]}]
`,
    'ns.yaml': `apiVersion: v1
kind: Namespace
metadata: {name: lbn}
---
apiVersion: v1
kind: Pod
metadata: {name: q, namespace: lbn}
spec:
  containers: [{name: s, ports: [{containerPort: 80}]}]
`,
    'ns-ref.yaml': 'apiVersion: v1\nkind: Namespace\nmetadata: {name: lbn}\n',
  });
  const n = ['--name', LAB];
  const pods = async (): Promise<Map<string, PodJson>> =>
    new Map((await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', ...n])).items.map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, p]));
  const probe = async (probes: object[]): Promise<ProbeJson[]> => {
    const file = join(dir, `probes-${Math.random().toString(36).slice(2)}.json`);
    (await import('node:fs')).writeFileSync(file, JSON.stringify(probes));
    return cliJson<ProbeJson[]>(['probe', '--probes', file, '-o', 'json', ...n]);
  };

  t.before(async () => {
    await cli(['down', ...n]); // leftovers of an aborted earlier run
  });
  t.teardown(async () => {
    await cli(['down', ...n]);
    rmSync(dir, { recursive: true, force: true });
  });

  t.test('up with a scenario: Pods get real IPs on their nodes', async (t) => {
    const r = await cli(['up', ...n, '--policy-source', 'standalone', '--primary', 'ptp', '-f', join(dir, 'scenario.yaml')]);
    t.equal(r.code, 0, `up exits 0 (stderr: ${r.stderr})`);
    t.comment(`ptp: sluice-lab up (2 nodes, 4 Pods, 3 Services) took ${(r.ms / 1000).toFixed(1)} s`);
    t.match(r.stdout, /node-1\s+192\.168\.77\.11\s+10\.10\.1\.0\/24/, 'prints the nodes');
    t.match(r.stdout, /lbt\/svc1\s+10\.96\.\d+\.\d+/, 'prints Services with ClusterIPs');
    const list = await pods();
    t.same([...list.keys()].sort(), ['lbt/hn', 'lbt/p1', 'lbt/p2', 'lbt/p3']);
    for (const [ref, p] of list) {
      t.equal(p.status.phase, 'Running', `${ref} Running`);
      const node = p.spec.nodeName!;
      t.match(node, /^node-[12]$/, `${ref} has spec.nodeName`);
      const idx = node.slice(5);
      if (p.spec.hostNetwork) t.equal(p.status.podIP, `192.168.77.${10 + Number(idx)}`, `${ref}: hostNetwork Pod has its node's IP`);
      else t.ok(inCidr(p.status.podIP!, `10.10.${idx}.0/24`), `${ref} IP ${p.status.podIP} is in ${node}'s Pod CIDR`);
      t.equal(p.status.hostIP, `192.168.77.${10 + Number(idx)}`, `${ref} hostIP`);
      if (!p.spec.hostNetwork) t.ok(existsSync(netnsPath(podNetns(LAB, 'lbt', p.metadata.name))), `${ref} has its netns`);
    }
    t.equal(list.get('lbt/p1')!.spec.nodeName, 'node-1');
    t.equal(list.get('lbt/p2')!.spec.nodeName, 'node-2');
    const nodes = await cliJson<ListJson<{ metadata: { name: string; labels: Record<string, string> }; status: { addresses: { type: string; address: string }[] } }>>(['get', 'nodes', '-o', 'json', ...n]);
    const n2 = nodes.items.find((x) => x.metadata.name === 'node-2')!;
    t.equal(n2.metadata.labels.zone, 'b', 'scenario Node labels are added to the lab node');
    t.equal(n2.metadata.labels['kubernetes.io/hostname'], 'node-2');
    t.equal(n2.metadata.labels['kubernetes.io/os'], 'linux');
    t.same(n2.status.addresses.find((a) => a.type === 'InternalIP')?.address, '192.168.77.12');
    const kc = await cli(['kubeconfig', ...n]);
    t.equal(kc.stdout.trim(), `/run/sluice-lab/${LAB}/kubeconfig`);
  });

  t.test('default probe: every Pod to every Pod on every served port', async (t) => {
    const results = await cliJson<ProbeJson[]>(['probe', '-o', 'json', ...n]);
    // 4 Pods (hn on node-2's address included) × their served ports: 3 Pods × 2 ports + hn × 1.
    t.equal(results.length, 4 * 3 * 2 + 4 * 1, 'one probe per (from, to, port)');
    t.same(results.filter((r) => r.verdict !== 'allow'), [], 'all allowed');
    const list = await pods();
    const p3node = list.get('lbt/p3')!.spec.nodeName;
    const same = p3node === 'node-1' ? 'lbt/p1' : 'lbt/p2';
    const cross = p3node === 'node-1' ? 'lbt/p2' : 'lbt/p1';
    t.ok(results.some((r) => r.from === 'lbt/p3' && r.to === same && r.protocol === 'TCP' && r.verdict === 'allow'), 'same-node Pod to Pod');
    t.ok(results.some((r) => r.from === 'lbt/p3' && r.to === cross && r.protocol === 'UDP' && r.verdict === 'allow'), 'cross-node Pod to Pod');
    const table = await cli(['probe', ...n]);
    t.match(table.stdout, /80\/TCP {2}\(\. allow, X drop, R reject\)/, 'table output has a matrix per port/protocol');
  });

  t.test('Services (local and remote endpoint), node, external host', async (t) => {
    // p3 (placed by the scheduler) probes svc1 -> p1 and svc2 -> p2: one endpoint shares its node, one does not.
    const p3node = (await pods()).get('lbt/p3')!.spec.nodeName;
    const local = p3node === 'node-1' ? 'svc1' : 'svc2';
    const remote = p3node === 'node-1' ? 'svc2' : 'svc1';
    t.comment(`p3 runs on ${p3node}: ${local} has a local endpoint, ${remote} a remote one`);
    const probes = [
      { from: 'lbt/p3', to: `service:lbt/${local}`, port: 8000, protocol: 'TCP' },
      { from: 'lbt/p3', to: `service:lbt/${remote}`, port: 8000, protocol: 'TCP' },
      { from: 'lbt/p3', to: `service:lbt/${local}`, port: 53, protocol: 'UDP' },
      { from: 'lbt/p3', to: `service:lbt/${remote}`, port: 53, protocol: 'UDP' },
      { from: 'lbt/p2', to: 'service:lbt/svc1', port: 8000, protocol: 'TCP' },
      { from: 'lbt/p1', to: 'lbt/hn', port: 8080, protocol: 'TCP' }, // Pod to node (hostNetwork server)
      { from: 'lbt/p1', to: 'ip:192.168.77.12', port: 0, protocol: 'ICMP' },
      { from: 'lbt/p1', to: 'ip:192.168.77.250', port: 80, protocol: 'TCP' }, // external host
      { from: 'lbt/p2', to: 'ip:192.168.77.250', port: 81, protocol: 'UDP' },
      { from: 'ip:192.168.77.250', to: 'lbt/p3', port: 80, protocol: 'TCP' },
    ];
    const results = await probe(probes);
    t.same(results.map((r) => r.verdict), probes.map(() => 'allow'), 'all allowed');
    t.same(results.map(({ verdict: _v, ...p }) => p), probes, 'the same probes come back, with verdicts');
    const closed = await probe([{ from: 'lbt/p1', to: 'lbt/p2', port: 82, protocol: 'TCP' }]);
    t.equal(closed[0]!.verdict, 'reject', 'a port nobody serves is rejected (the probes are real)');
  });

  t.test('an informer sees the EndpointSlices of every Service', async (t) => {
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(`/run/sluice-lab/${LAB}/kubeconfig`);
    const api = kc.makeApiClient(k8s.DiscoveryV1Api);
    const inf = k8s.makeInformer(kc, '/apis/discovery.k8s.io/v1/endpointslices', () => api.listEndpointSliceForAllNamespaces());
    // client-node stops an informer on errors other than 410; restart it, but not after our own stop.
    let running = false;
    inf.on('error', () => running && setTimeout(() => running && void inf.start(), 500));
    await inf.start();
    running = true;
    t.teardown(() => {
      running = false;
      return inf.stop();
    });
    const list = await pods();
    const bySvc = (svc: string) => inf.list('lbt').filter((s) => s.metadata?.labels?.['kubernetes.io/service-name'] === svc);
    for (const [svc, pod] of [['svc1', 'lbt/p1'], ['svc2', 'lbt/p2']] as const) {
      const slices = bySvc(svc);
      t.equal(slices.length, 1, `${svc} has one EndpointSlice`);
      t.same(slices[0]!.endpoints.map((e) => e.addresses[0]), [list.get(pod)!.status.podIP], `${svc} points at ${pod}`);
      t.same(slices[0]!.ports?.map((p) => [p.name, p.port, p.protocol]), [['web', 80, 'TCP'], ['dns', 81, 'UDP']], `${svc}: named targetPort resolved`);
    }
    t.same(bySvc('extra')[0]?.endpoints ?? [], [], 'a Service selecting nothing has an empty slice');

    // label: the Service now selects p3; the informer sees the slice change, the ClusterIP works.
    const r = await cli(['label', 'pod', 'lbt/p3', 'extra=yes', ...n]);
    t.equal(r.code, 0, `label exits 0 (${r.stderr})`);
    const p3ip = list.get('lbt/p3')!.status.podIP;
    for (let i = 0; i < 100 && bySvc('extra')[0]?.endpoints?.[0]?.addresses[0] !== p3ip; i++) await new Promise((res) => setTimeout(res, 100));
    t.equal(bySvc('extra')[0]?.endpoints?.[0]?.addresses[0], p3ip, 'after label, the informer sees p3 in the slice');
    t.equal((await probe([{ from: 'lbt/p1', to: 'service:lbt/extra', port: 80, protocol: 'TCP' }]))[0]!.verdict, 'allow', 'the Service reaches the newly labelled Pod');
    const labels = (await cliJson<ListJson<PodJson>>(['get', 'pods', 'lbt/p3', '-o', 'json', ...n])).items[0]!.metadata.labels;
    t.same(labels, { app: 'p3', extra: 'yes' });
    t.equal((await cli(['label', 'pod', 'lbt/p3', 'extra-', ...n])).code, 0);
    for (let i = 0; i < 100 && (bySvc('extra')[0]?.endpoints ?? []).length > 0; i++) await new Promise((res) => setTimeout(res, 100));
    t.same(bySvc('extra')[0]?.endpoints ?? [], [], 'after removing the label the slice is empty again');
  });

  t.test('apply adds a running, reachable Pod; delete tears it down', async (t) => {
    const r = await cli(['apply', '-f', join(dir, 'p4.yaml'), ...n]);
    t.equal(r.code, 0, `apply exits 0 (${r.stderr})`);
    t.match(r.stdout, /pod\/lbt\/p4 created/);
    const p4 = (await pods()).get('lbt/p4')!;
    t.equal(p4.status.phase, 'Running', 'apply waited for Running');
    t.ok(p4.spec.nodeName, 'the scheduler placed it');
    const res = await probe([{ from: 'lbt/p1', to: 'lbt/p4', port: 80, protocol: 'TCP' }, { from: 'lbt/p4', to: 'lbt/p2', port: 81, protocol: 'UDP' }]);
    t.same(res.map((x) => x.verdict), ['allow', 'allow'], 'the new Pod is reachable and can reach others');
    const again = await cli(['apply', '-f', join(dir, 'p4.yaml'), ...n]);
    t.match(again.stdout, /pod\/lbt\/p4 (unchanged|configured)/, 'apply is idempotent');
    t.equal((await pods()).get('lbt/p4')!.status.podIP, p4.status.podIP, 'same Pod, same IP');

    const changed = await cli(['apply', '-f', join(dir, 'p4-changed.yaml'), ...n]);
    t.not(changed.code, 0, 'changing a running Pod\'s ports is refused');
    t.match(changed.stderr, /container ports cannot change/);

    const netns = netnsPath(podNetns(LAB, 'lbt', 'p4'));
    t.ok(existsSync(netns), 'p4 has a netns');
    const d = await cli(['delete', '-f', join(dir, 'p4-ref.yaml'), ...n]);
    t.equal(d.code, 0, `delete with only apiVersion/kind/metadata exits 0 (${d.stderr})`);
    t.notOk(existsSync(netns), 'deleting the Pod removed its netns');
    t.notOk((await pods()).has('lbt/p4'), 'and the API object');

    t.equal((await cli(['apply', '-f', join(dir, 'ns.yaml'), ...n])).code, 0, 'a namespace with a Pod');
    const qNetns = netnsPath(podNetns(LAB, 'lbn', 'q'));
    t.ok(existsSync(qNetns), 'its Pod runs');
    const dn = await cli(['delete', '-f', join(dir, 'ns-ref.yaml'), ...n]);
    t.equal(dn.code, 0, `deleting the namespace exits 0 (${dn.stderr})`);
    t.notOk(existsSync(qNetns), 'and tears down the Pods in it');
  });

  t.test('large output through a pipe is complete (the CLI flushes before it exits)', async (t) => {
    // 300 Namespaces print ~150 KiB of JSON: more than a pipe takes at once (64 KiB).
    const docs = Array.from({ length: 300 }, (_, i) => `apiVersion: v1\nkind: Namespace\nmetadata:\n  name: lbbig-${i}\n  labels: { bulk: "yes", index: "i${i}" }\n`);
    writeFileSync(join(dir, 'many-ns.yaml'), docs.join('---\n'));
    t.equal((await cli(['apply', '-f', join(dir, 'many-ns.yaml'), ...n])).code, 0, 'applied 300 Namespaces');
    const r = await cli(['get', 'namespaces', '-o', 'json', ...n]);
    t.ok(r.stdout.length > 128 * 1024, `output is ${r.stdout.length} bytes`);
    const names = (JSON.parse(r.stdout) as ListJson<PodJson>).items.map((o) => o.metadata.name).filter((x) => x.startsWith('lbbig-'));
    t.equal(names.length, 300, 'every Namespace is in the parsed output');
    t.equal((await cli(['delete', '-f', join(dir, 'many-ns.yaml'), ...n])).code, 0, 'deleted again');
  });

  t.test('errors are clear and exit non-zero', async (t) => {
    const cases: [string[], RegExp][] = [
      [['get', 'widgets', ...n], /unknown kind "widgets"/],
      [['get', 'pods', 'lbt/nope', ...n], /not found/i],
      [['apply', '-f', join(dir, 'missing.yaml'), ...n], /no such file/],
      [['apply', '-f', join(dir, 'bad.yaml'), ...n], /bad\.yaml document 1: metadata\.name: Required value/],
      [['get', 'pods', '--name', 'lbzz'], /no lab "lbzz" is running/],
      [['up', ...n], /already up/],
      [['label', 'pod', 'lbt/p1', 'bad key=v', ...n], /not a valid label key/],
      [['bogus'], /unknown command|Unknown argument/],
      // Bad scenarios are refused before anything is created (checked below: no lb4 remains).
      [['up', '--name', 'lb4', '-f', join(dir, 'bad.yaml')], /bad\.yaml document 1: metadata\.name: Required value/],
      [['up', '--name', 'lb4', '--nodes', '1', '-f', join(dir, 'scenario.yaml')], /node-2 is not a lab node/],
    ];
    for (const [args, msg] of cases) {
      const r = await cli(args);
      t.not(r.code, 0, `${args.join(' ')} exits non-zero`);
      t.match(r.stderr, msg, `${args.join(' ')}: ${r.stderr.trim().split('\n')[0]}`);
    }
    t.same(labRemains('lb4'), [], 'a refused up creates nothing');
  });

  t.test('down removes everything', async (t) => {
    const r = await cli(['down', ...n]);
    t.equal(r.code, 0, `down exits 0 (${r.stderr})`);
    t.comment(`ptp: sluice-lab down took ${(r.ms / 1000).toFixed(1)} s`);
    const remains = labRemains(LAB);
    t.same(remains.filter((x) => x.startsWith('netns')), [], `no ${LAB}-* namespace`);
    t.same(remains.filter((x) => x.startsWith('process')), [], 'no process mentioning the state dir');
    t.same(remains.filter((x) => x.startsWith('directory')), [], `no /run/sluice-lab/${LAB}`);
    const again = await cli(['down', ...n]);
    t.equal(again.code, 0, 'down again is harmless');
    t.match(again.stdout, /nothing to remove/);
  });
}
