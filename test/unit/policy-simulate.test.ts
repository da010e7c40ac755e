/**
 * `sluicectl simulate`: probe sources, output formats, invalid objects on stderr,
 * and exit status only for unusable input.
 */
import t from 'tap';
import { spawnSync, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runSimulate, type SimulateOptions } from '../../daemon/ctl/simulate.js';

const SCENARIO = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {addresses: [{type: InternalIP, address: 172.18.0.2}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  nodeName: n1
  containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]
status: {podIP: 10.1.0.5}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: shop, labels: {app: db}}
spec:
  containers: [{name: c, ports: [{name: pg, containerPort: 5432}, {name: dns, containerPort: 53, protocol: UDP}]}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: shop}
spec: {clusterIP: 10.96.0.20, selector: {app: db}, ports: [{port: 5432, targetPort: pg}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db-from-web, namespace: shop}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}], ports: [{port: pg}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: broken, namespace: shop}
spec:
  podSelector: {}
  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8, except: [192.168.0.0/16]}}]}]
`;

const dir = mkdtempSync(join(tmpdir(), 'sluice-simulate-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const scenario = join(dir, 'scenario.yaml');
writeFileSync(scenario, SCENARIO);

async function run(opts: Partial<SimulateOptions>) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSimulate({ files: [scenario], ...opts }, { stdout: (s) => out.push(s), stderr: (s) => err.push(s) });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

t.test('one probe, JSON: verdict and decidedBy', async (t) => {
  const r = await run({ from: 'shop/web', to: 'shop/db', port: 5432, protocol: 'TCP', output: 'json' });
  t.equal(r.code, 0);
  t.same(JSON.parse(r.stdout), [{
    from: 'shop/web', to: 'shop/db', port: 5432, protocol: 'TCP', verdict: 'allow',
    decidedBy: { kind: 'NetworkPolicy', namespace: 'shop', name: 'db-from-web', rule: 'ingress-0', direction: 'Ingress', action: 'Allow' },
  }]);
  t.match(r.stderr, /invalid NetworkPolicy shop\/broken: spec\.egress\[0\]\.to\[0\]\.ipBlock\.except\[0\]: .*strict subset/, 'invalid objects on stderr, run continues');
});

t.test('default decision is null; isolation drop says so', async (t) => {
  const r = await run({ from: 'shop/db', to: 'shop/web', port: 8080, output: 'json' });
  t.equal(JSON.parse(r.stdout)[0].decidedBy, null);
  const d = await run({ from: 'shop/db', to: 'shop/db', port: 5432, output: 'json' });
  t.equal(JSON.parse(d.stdout)[0].verdict, 'allow', 'loopback');
  const iso = await run({ from: 'ip:8.8.8.8', to: 'shop/db', port: 5432, output: 'json' });
  t.same(JSON.parse(iso.stdout)[0].decidedBy, { kind: 'K8sNetworkPolicyIsolation', namespace: 'shop', name: 'db-from-web', direction: 'Ingress', action: 'IsolationDrop' });
});

t.test('service: and ip: endpoints', async (t) => {
  const r = await run({ from: 'shop/web', to: 'service:shop/db', port: 5432, output: 'json' });
  t.equal(JSON.parse(r.stdout)[0].verdict, 'allow');
  t.match(JSON.parse(r.stdout)[0].note, /via endpoint shop\/db/);
  const n = await run({ from: 'ip:172.18.0.2', to: 'shop/web', port: 8080, output: 'json' });
  t.match(JSON.parse(n.stdout)[0].note, /same Node/);
});

t.test('table output: matrices plus the explanation of a single probe', async (t) => {
  const r = await run({ from: 'ip:10.2.0.1', to: 'shop/db', port: 5432 });
  t.equal(r.code, 0);
  t.match(r.stdout, /5432\/TCP/);
  t.match(r.stdout, /ip:10\.2\.0\.1\s+X/);
  t.match(r.stdout, /decided by: isolated by Kubernetes NetworkPolicy shop\/db-from-web \(Ingress\)/);
  t.match(r.stdout, /ingress of shop\/db: drop/);
  t.notMatch(r.stdout, /egress of/, 'an external source has no egress side');
  const both = await run({ from: 'shop/web', to: 'service:shop/db', port: 5432 });
  t.match(both.stdout, /decided by: NetworkPolicy shop\/db-from-web, rule ingress-0 \(Ingress\), action Allow/);
  t.match(both.stdout, /egress of shop\/web: allow \(no rule applies: default\)/);
  t.match(both.stdout, /ingress of shop\/db: allow \(NetworkPolicy shop\/db-from-web/, 'sides of the post-DNAT flow');
  t.match(both.stdout, /note: via endpoint shop\/db/);
});

t.test('no probes given: every Pod to every other Pod on every declared port', async (t) => {
  const r = await run({ output: 'json' });
  const probes = JSON.parse(r.stdout) as { from: string; to: string; port: number; protocol: string; verdict: string }[];
  t.same([...new Set(probes.map((p) => `${p.port}/${p.protocol}`))].sort(), ['53/UDP', '5432/TCP', '8080/TCP']);
  t.equal(probes.length, 3 * 2, 'two Pods, two ordered pairs, three port/protocols');
  t.equal(probes.find((p) => p.from === 'shop/web' && p.to === 'shop/db' && p.port === 53)?.verdict, 'drop');
  const table = await run({});
  t.match(table.stdout, /53\/UDP[\s\S]*5432\/TCP[\s\S]*8080\/TCP/);
});

t.test('probe file', async (t) => {
  const file = join(dir, 'probes.json');
  writeFileSync(file, JSON.stringify([{ from: 'shop/web', to: 'shop/db', port: 5432, protocol: 'tcp' }, { from: 'shop/web', to: 'shop/db', port: 53, protocol: 'UDP' }]));
  const r = await run({ probes: file, output: 'json' });
  t.same(JSON.parse(r.stdout).map((p: { verdict: string }) => p.verdict), ['allow', 'drop']);
});

t.test('unusable input: non-zero exit with a clear message', async (t) => {
  const cases: [Partial<SimulateOptions>, RegExp][] = [
    [{ files: [join(dir, 'missing.yaml')] }, /missing\.yaml: no such file/],
    [{ probes: join(dir, 'nope.json') }, /--probes .*nope\.json: cannot read/],
    [{ from: 'shop/web', to: 'bad endpoint', port: 80 }, /expected ns\/pod/],
    [{ from: 'shop/web', to: 'shop/db', port: 70000 }, /port: must be an integer/],
    [{ from: 'shop/web', to: 'shop/db', port: 80, protocol: 'HTTP' }, /protocol: must be TCP, UDP, SCTP or ICMP/],
    [{ from: 'shop/web', to: 'shop/db' }, /--port is required/],
    [{ from: 'shop/web', port: 80 }, /--from and --to/],
    [{ from: 'shop/ghost', to: 'shop/db', port: 80 }, /no Pod shop\/ghost/],
  ];
  for (const [opts, message] of cases) {
    const r = await run(opts);
    t.equal(r.code, 1, `${JSON.stringify(opts)} exits 1`);
    t.match(r.stderr, message);
  }
  const bad = join(dir, 'bad.json');
  writeFileSync(bad, '[{"from": "shop/web"}]');
  const r = await run({ probes: bad });
  t.equal(r.code, 1);
  t.match(r.stderr, /probe 0\.to/);
});

t.test('one unusable document costs only itself: the others are still simulated', async (t) => {
  const extra = join(dir, 'extra.yaml');
  writeFileSync(extra, `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: shop}
spec: {podSelector: {}}
---
kind: [unclosed
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-web, namespace: shop}
spec: {podSelector: {matchLabels: {app: web}}, policyTypes: [Ingress]}
`);
  const out: string[] = [];
  const err: string[] = [];
  const code = await runSimulate({ files: [scenario, extra], from: 'shop/db', to: 'shop/web', port: 8080 }, { stdout: (s) => out.push(s), stderr: (s) => err.push(s) });
  t.equal(code, 0);
  t.match(err.join('\n'), /invalid NetworkPolicy \(.*extra\.yaml document 1\): metadata\.name: Required value/);
  t.match(err.join('\n'), /invalid .*extra\.yaml document 2: not valid YAML\/JSON \(line \d+\)/);
  t.match(out.join('\n'), /shop\/db -> shop\/web 8080\/TCP: drop/, 'the valid policy after the bad documents applies');
});

t.test('YAML is read as kubectl reads it: dates stay strings, yes is a boolean (a type error)', async (t) => {
  const file = join(dir, 'kubectl-yaml.yaml');
  writeFileSync(file, `
apiVersion: v1
kind: Namespace
metadata: {name: rel}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: rel, labels: {released: 2024-05-01}}
status: {podIP: 10.2.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: rel, labels: {released: 2024-06-01}}
status: {podIP: 10.2.0.2}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: rel, labels: {app: server}}
spec: {containers: [{name: c, ports: [{containerPort: 80}]}]}
status: {podIP: 10.2.0.3}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-released, namespace: rel}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress: [{from: [{podSelector: {matchLabels: {released: 2024-05-01}}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: debug, namespace: rel}
spec:
  podSelector: {matchLabels: {debug: yes}}
`);
  const verdict = async (from: string) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runSimulate({ files: [file], from, to: 'rel/server', port: 80, output: 'json' }, { stdout: (s) => out.push(s), stderr: (s) => err.push(s) });
    t.equal(code, 0);
    return { verdict: JSON.parse(out.join(''))[0].verdict, stderr: err.join('\n') };
  };
  const a = await verdict('rel/client');
  t.equal(a.verdict, 'allow', 'the date-like label matches the date-like selector value');
  t.equal((await verdict('rel/other')).verdict, 'drop', 'and the policy is in force for others');
  t.match(a.stderr, /invalid NetworkPolicy rel\/debug: spec\.podSelector\.matchLabels\.debug: must be a string, not a boolean \(true\)/);
  t.notMatch(a.stderr, /from-released/);
});

t.test('the compiled CLI', async (t) => {
  const root = new URL('../..', import.meta.url).pathname;
  const cli = join(root, 'dist/daemon/sluicectl.js');
  if (!existsSync(cli)) execFileSync('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: root, stdio: 'ignore' });
  const ok = spawnSync('node', [cli, 'simulate', '-f', scenario, '--from', 'shop/web', '--to', 'shop/db', '--port', '5432', '-o', 'json'], { encoding: 'utf8' });
  t.equal(ok.status, 0);
  t.equal(JSON.parse(ok.stdout)[0].verdict, 'allow');
  t.match(ok.stderr, /invalid NetworkPolicy shop\/broken/);
  const bad = spawnSync('node', [cli, 'simulate', '-f', join(dir, 'nothing-here')], { encoding: 'utf8' });
  t.equal(bad.status, 1);
  t.match(bad.stderr, /nothing-here: no such file or directory/);
  const bomb = join(dir, 'bomb.yaml');
  const lines = ['apiVersion: networking.k8s.io/v1', 'kind: NetworkPolicy', 'metadata: {name: bomb, namespace: shop}', 'a0: &a0 [{ipBlock: {cidr: 10.0.0.0/8}}, {ipBlock: {cidr: 10.0.0.0/8}}]'];
  for (let i = 1; i < 24; i++) lines.push(`a${i}: &a${i} [*a${i - 1}, *a${i - 1}]`);
  lines.push('spec: {podSelector: {}, ingress: [{from: *a23}]}');
  writeFileSync(bomb, lines.join('\n'));
  const bombRun = spawnSync('node', [cli, 'simulate', '-f', scenario, '-f', bomb, '--from', 'shop/web', '--to', 'shop/db', '--port', '5432'], { encoding: 'utf8' });
  t.equal(bombRun.status, 0, 'alias amplification costs its document alone');
  t.match(bombRun.stderr, /invalid .*bomb\.yaml document 1: document contains excessive aliasing/);
  t.notMatch(bombRun.stderr, /RangeError|Options:/);
  t.match(bombRun.stdout, /shop\/web -> shop\/db 5432\/TCP: allow/);
});

t.test('dual-stack: IPv6 ip: probes, --family, and a verdict that differs per family', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-sim6-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'dual.yaml');
  writeFileSync(file, `
apiVersion: v1
kind: Namespace
metadata: {name: d}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: d, labels: {app: client}}
spec: {containers: [{name: c}]}
status: {podIP: 10.1.0.7, podIPs: [{ip: 10.1.0.7}, {ip: "fd00:1::7"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: server, namespace: d, labels: {app: server}}
spec: {containers: [{name: c, ports: [{containerPort: 80}]}]}
status: {podIP: 10.1.0.8, podIPs: [{ip: 10.1.0.8}, {ip: "fd00:1::8"}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: v6-only, namespace: d}
spec:
  podSelector: {matchLabels: {app: server}}
  ingress: [{from: [{ipBlock: {cidr: "fd00:1::/64"}}]}]
`);
  const run = async (opts: Partial<SimulateOptions>) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runSimulate({ files: [file], port: 80, ...opts }, { stdout: (s) => out.push(s), stderr: (s) => err.push(s) });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };
  const both = await run({ from: 'd/client', to: 'd/server' });
  t.equal(both.code, 0);
  t.match(both.out, /d\/client -> d\/server 80\/TCP: drop/);
  t.match(both.out, /note: the verdict depends on the address family: IPv4 drop \(K8sNetworkPolicyIsolation d\/v6-only\), IPv6 allow/);
  const six = await run({ from: 'd/client', to: 'd/server', family: '6' });
  t.match(six.out, /80\/TCP IPv6 /);
  t.match(six.out, /d\/client -> d\/server 80\/TCP IPv6: allow/);
  const ip = await run({ from: 'ip:FD00:1:0::7', to: 'ip:fd00:1::8', output: 'json' });
  t.same(JSON.parse(ip.out).map((r: { verdict: string }) => r.verdict), ['allow'], 'ip: probes of IPv6 addresses name the Pods');
  const bad = await run({ from: 'd/client', to: 'd/server', family: '5' });
  t.equal(bad.code, 1);
  t.match(bad.err, /--family: the address family must be 4 or 6/);
  const mixed = await run({ from: 'ip:10.1.0.7', to: 'ip:fd00:1::8' });
  t.equal(mixed.code, 1);
  t.match(mixed.err, /share no address family/);
});
