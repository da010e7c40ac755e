/**
 * A NetworkPolicy enforced on IPv6 traffic with real packets, the evaluator as the oracle: a
 * dual-stack `sluice-lab up --ip-family dual` (API server, kubelets, enforcing agents), Pods
 * serving TCP 8080 on both families, a policy with a podSelector peer and an IPv6 ipBlock (with an
 * except) and an Antrea policy rejecting one Pod (a TCP RST over IPv6 as over IPv4), and every
 * probe's real verdict over IPv6 (and IPv4) equal to `sluicectl simulate
 * --family 6` (`--family 4`) on a snapshot of the lab's objects. The rejects as the client sees
 * them on the wire: a TCP RST, ICMPv6 destination unreachable code 1 for UDP and ICMPv6, checksums
 * verified by tcpdump.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { TraceReport } from '../../daemon/enforcement/traceflow.js';
import { agentConfigPath } from '../../lab/agent.js';
import { nodeNetns, podNetns, runIn } from '../../lab/net/index.js';
import { run, SLUICECTL, snapshot, tempDir } from './enforce-helpers.js';
import { cli, cliJson, sluiceSkipReason } from './labcli-helpers.js';

const LAB = 'v6p';
const PORT = 8080;
const PODS = [['x', 'a', 'node-1'], ['x', 'b', 'node-1'], ['x', 'e', 'node-1'], ['y', 'c', 'node-2'], ['y', 'd', 'node-2']] as const;

const yaml = (docs: string[]) => docs.join('\n---\n');
const workload = yaml([
  ...['x', 'y'].map((n) => `apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "${n}"\n  labels:\n    ns: "${n}"`),
  ...PODS.map(([ns, name, node]) => `apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${name}\n  namespace: "${ns}"\n  labels:\n    pod: ${name}\nspec:\n  nodeName: ${node}\n  containers:\n    - name: server\n      image: sluice-lab/workload`),
]);

type Probe = { from: string; to: string; port: number; protocol: 'TCP'; family: 4 | 6 };
/** A probe as `sluicectl simulate` reads it. */
type SimProbe = { from: string; to: string; port: number; protocol: 'TCP' | 'ICMP'; family: 4 | 6 };

const reason = sluiceSkipReason();
if (reason) {
  t.plan(0, `skipped: ${reason}`);
} else {
  const dir = tempDir('v6policy-');
  writeFileSync(join(dir, 'workload.yaml'), workload);
  await cli(['down', '--name', LAB]);
  t.teardown(async () => {
    await cli(['down', '--name', LAB]);
    rmSync(dir, { recursive: true, force: true });
  });
  const up = await cli(['up', '--name', LAB, '--policy-source', 'standalone', '--nodes', '2', '--ip-family', 'dual', '-f', join(dir, 'workload.yaml')], 600_000);
  if (up.code !== 0) throw new Error(`sluice-lab up failed: ${up.stderr}`);

  type PodJson = { metadata: { namespace: string; name: string }; status?: { phase?: string; podIPs?: { ip: string }[] } };
  let ips = new Map<string, string[]>();
  for (let i = 0; i < 120; i++) {
    const list = await cliJson<{ items: PodJson[] }>(['get', 'pods', '-o', 'json', '--name', LAB]);
    ips = new Map(list.items.filter((p) => p.status?.phase === 'Running').map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, (p.status?.podIPs ?? []).map((x) => x.ip)]));
    if (PODS.every(([ns, name]) => (ips.get(`${ns}/${name}`)?.length ?? 0) === 2)) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const addr = (ref: string, family: 4 | 6) => ips.get(ref)?.find((ip) => ip.includes(':') === (family === 6));
  const d6 = addr('y/d', 6)!;
  const policy = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: a-in
  namespace: x
spec:
  podSelector:
    matchLabels:
      pod: a
  ingress:
    - from:
        - podSelector:
            matchLabels:
              pod: b
      ports:
        - port: ${PORT}
    - from:
        - ipBlock:
            cidr: fd00:10:2::/64
            except: ["${d6}/128"]
      ports:
        - port: ${PORT}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: a-reject-e
spec:
  priority: 5
  tier: securityops
  appliedTo:
    - namespaceSelector:
        matchLabels:
          ns: x
      podSelector:
        matchLabels:
          pod: a
  ingress:
    - name: reject-e
      action: Reject
      from:
        - podSelector:
            matchLabels:
              pod: e
`;

  /**
   * Real verdict of one TCP probe: a connection to [addr]:PORT from the Pod's namespace. As the
   * lab's prober judges it: connected is allow, silence until the 2 s timeout is drop, any answer
   * that refuses (a RST, an ICMP error) before it is reject.
   */
  const real = async (p: Probe): Promise<'allow' | 'drop' | 'reject'> => {
    const [ns, name] = p.from.split('/') as [string, string];
    const started = Date.now();
    const r = await runIn(podNetns(LAB, ns, name), 'nc', ['-v', `-${p.family}`, '-z', '-w', '2', addr(p.to, p.family)!, String(p.port)], { allowFail: true });
    if (r.exitCode === 0) return 'allow';
    return /timed out/i.test(r.stderr + r.stdout) || Date.now() - started >= 1900 ? 'drop' : 'reject';
  };
  const simulate = async (probes: SimProbe[], scenario: string): Promise<string[]> => {
    const file = join(dir, 'probes.json');
    writeFileSync(file, JSON.stringify(probes));
    const r = await run(process.execPath, [SLUICECTL, 'simulate', '-f', scenario, '--probes', file, '-o', 'json']);
    if (r.code !== 0) throw new Error(`sluicectl simulate: ${r.stderr}`);
    return (JSON.parse(r.stdout) as { verdict: string }[]).map((v) => v.verdict);
  };

  /** The lab's objects once the policies are applied (sluicectl simulate's input). */
  let snapshotFile: string | undefined;
  const PROBES: Probe[] = [];
  for (const family of [6, 4] as const) {
    for (const from of ['x/b', 'x/e', 'y/c', 'y/d']) PROBES.push({ from, to: 'x/a', port: PORT, protocol: 'TCP', family });
    PROBES.push({ from: 'x/a', to: 'y/c', port: PORT, protocol: 'TCP', family });
  }

  await t.test('every Pod has an IPv4 and an IPv6 address in the API, and serves both', async (t) => {
    for (const [ns, name] of PODS) {
      t.equal(ips.get(`${ns}/${name}`)?.length, 2, `${ns}/${name}: ${ips.get(`${ns}/${name}`)?.join(', ')}`);
      await runIn(podNetns(LAB, ns, name), 'sh', ['-c', `nohup nc -k -l :: ${PORT} >/dev/null 2>&1 &`]);
    }
    await new Promise((r) => setTimeout(r, 500));
    const open = await Promise.all(PROBES.map(real));
    t.same(open, PROBES.map(() => 'allow'), 'before any policy every probe connects, in both families');
  });

  await t.test('the policies are enforced on IPv6 (and IPv4) traffic exactly as simulate --family says', async (t) => {
    writeFileSync(join(dir, 'policy.yaml'), policy);
    const applied = await cli(['apply', '--name', LAB, '-f', join(dir, 'policy.yaml')]);
    t.equal(applied.code, 0, `applied${applied.code ? `: ${applied.stderr}` : ''}`);
    const scenario = await snapshot(LAB, join(dir, 'snapshot'));
    snapshotFile = scenario;
    const want = await simulate(PROBES, scenario);
    t.ok(want.includes('allow') && want.includes('drop') && want.includes('reject'), `the simulator's verdicts are mixed: ${want.join(',')}`);
    const differ = PROBES.filter((p, i) => p.family === 6 && want[i] !== want[PROBES.findIndex((q) => q.family === 4 && q.from === p.from && q.to === p.to)]);
    t.ok(differ.length >= 1, `${differ.length} probes differ by family (the ipBlock is IPv6)`);
    // The agents realize the policy shortly after the API has it: probe until the verdicts settle.
    let got: string[] = [];
    for (let i = 0; i < 20; i++) {
      got = [];
      for (const p of PROBES) got.push(await real(p));
      if (got.every((v, k) => v === want[k])) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const counts: Record<string, number> = {};
    PROBES.forEach((p, i) => {
      t.equal(got[i], want[i], `IPv${p.family} ${p.from} -> ${p.to} TCP/${p.port}: simulate ${want[i]}, real packets ${got[i]}`);
      counts[`IPv${p.family} ${want[i]}`] = (counts[`IPv${p.family} ${want[i]}`] ?? 0) + 1;
    });
    t.comment(`${PROBES.length} probes with real packets: ${JSON.stringify(counts)}`);
  });

  await t.test('Reject over IPv6 on the wire: TCP gets a RST, UDP and ICMPv6 an ICMPv6 administratively prohibited, checksums valid', async (t) => {
    // x/e is rejected by x/a's ACNP on every protocol. tcpdump in x/e's namespace sees what the
    // client receives; -vv verifies each checksum ("(correct)", "[icmp6 sum ok]").
    const e = podNetns(LAB, 'x', 'e');
    const [a6, e6] = [addr('x/a', 6)!, addr('x/e', 6)!];
    const capture = runIn(e, 'timeout', ['6', 'tcpdump', '-i', 'eth0', '-n', '-vv', '-l', `ip6 and src host ${a6} and (tcp or icmp6)`], { allowFail: true, timeoutMs: 15_000 });
    await new Promise((r) => setTimeout(r, 1500));
    const tcp = await real({ from: 'x/e', to: 'x/a', port: PORT, protocol: 'TCP', family: 6 });
    // A connected UDP socket learns of the ICMPv6 error: administratively prohibited is EACCES.
    const udp = await runIn(e, 'python3', ['-c', [
      'import socket, sys',
      's = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(2)',
      `s.connect((${JSON.stringify(a6)}, ${PORT})); s.send(b"sluice")`,
      'try:\n  s.recv(100); print("answered")\nexcept PermissionError: print("EACCES")\nexcept socket.timeout: print("timeout")\nexcept OSError as err: print(err.errno)',
    ].join('\n')], { allowFail: true });
    const ping6 = await runIn(e, 'ping', ['-6', '-n', '-c', '1', '-W', '2', a6], { allowFail: true });
    const wire = (await capture).stdout;
    t.comment(`captured in x/e:\n${wire.trim()}`);
    t.equal(tcp, 'reject', 'TCP x/e -> x/a over IPv6: refused at once (reject)');
    t.match(wire, new RegExp(`${a6}\\.${PORT} > ${e6}\\.\\d+: Flags \\[R[^\\]]*\\], cksum 0x[0-9a-f]+ \\(correct\\)`), 'a RST from x/a:8080 to x/e with a correct checksum');
    t.equal(udp.stdout.trim(), 'EACCES', `UDP x/e -> x/a over IPv6: the socket gets EACCES, the ICMPv6 error for "administratively prohibited" (${udp.stdout.trim() || udp.stderr.trim()})`);
    // The error quotes the whole refused packet: its length tells which one it answers.
    const prohibited = [...wire.matchAll(new RegExp(`payload length: (\\d+)\\) ${a6} > ${e6}: \\[icmp6 sum ok\\] ICMP6, destination unreachable,\\s+unreachable prohibited`, 'g'))].map((m) => Number(m[1]));
    t.ok(prohibited.length >= 2, `${prohibited.length} ICMPv6 destination unreachable, code 1 (administratively prohibited), from x/a with a correct checksum`);
    t.ok(prohibited.includes(8 + 40 + 8 + 6), 'one quotes the UDP datagram (IPv6 + UDP header + 6 bytes)');
    t.ok(prohibited.includes(8 + 40 + 8 + 56), 'one quotes the echo request (IPv6 + ICMPv6 echo with ping\'s 56 bytes)');
    t.match(ping6.stdout, /Unreachable|prohibited|Administratively/i, `ping -6 reports the refusal (${ping6.stdout.split('\n').filter((l) => /icmp|Unreach|prohib/i.test(l)).join(' ').trim()})`);
  });

  await t.test('sluicectl node traceflow with IPv6 packets: the verdict and the rule, as simulate says', async (t) => {
    const traceflow = async (args: string[]) => {
      const r = await run('ip', ['netns', 'exec', nodeNetns(LAB, 'node-1'), process.execPath, SLUICECTL, 'node', 'traceflow', '--config', agentConfigPath(LAB, 'node-1'), ...args, '-o', 'json']);
      return { ...r, report: r.code === 0 ? (JSON.parse(r.stdout) as TraceReport) : undefined };
    };
    const a6 = addr('x/a', 6)!;
    // An allow and a Reject (an ICMPv6 echo: the reject claim of an IPv6 packet) over IPv6, and
    // IPv4 by default on this dual-stack lab.
    const cases: { args: string[]; probe: SimProbe; dst: string }[] = [
      { args: ['--from', 'x/b', '--to', 'x/a', '--port', String(PORT), '--family', '6'], probe: { from: 'x/b', to: 'x/a', port: PORT, protocol: 'TCP', family: 6 }, dst: a6 },
      { args: ['--from', 'x/e', '--to', `ip:${a6}`, '--protocol', 'ICMP'], probe: { from: 'x/e', to: `ip:${a6}`, port: 0, protocol: 'ICMP', family: 6 }, dst: a6 },
      { args: ['--from', 'x/b', '--to', 'x/a', '--port', String(PORT)], probe: { from: 'x/b', to: 'x/a', port: PORT, protocol: 'TCP', family: 4 }, dst: addr('x/a', 4)! },
    ];
    // Nothing changed since the policies were applied: their snapshot stands.
    const scenario = snapshotFile ?? (await snapshot(LAB, join(dir, 'snapshot-trace')));
    const want = await simulate(cases.map((c) => c.probe), scenario);
    for (const [i, c] of cases.entries()) {
      const r = await traceflow(c.args);
      t.equal(r.code, 0, `traceflow ${c.args.join(' ')}${r.code ? `: ${r.stderr.trim()}` : ''}`);
      t.equal(r.report?.dstIp, c.dst, `traced to ${c.dst} (IPv${c.dst.includes(':') ? 6 : 4})`);
      t.equal(r.report?.verdict, want[i], `${c.probe.from} -> ${c.probe.to} ${c.probe.protocol} IPv${c.probe.family}: traced ${r.report?.verdict}, simulate ${want[i]}`);
      if (want[i] === 'reject') t.match(r.report?.legs.at(-1)?.ingressRule, { name: 'a-reject-e', rule: 'reject-e' }, 'the Reject names its rule');
    }
    const mismatch = await traceflow(['--from', 'x/b', '--to', `ip:${a6}`, '--port', String(PORT), '--family', '4']);
    t.match(mismatch.stderr, /family 4: the destination ip:\S+ is an IPv6 address/, 'an IPv6 destination with --family 4 is refused with why');
  });
}
