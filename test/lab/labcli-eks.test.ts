/**
 * sluice-lab end to end through the real CLI on the EKS-style primary flavour: up with a small
 * scenario, real Pod IPs, full reachability (Pod↔Pod same/cross node, Pod→Service with local and
 * remote endpoint, Pod→node, Pod→external host), and a complete `down`. One lab (lb2).
 */
import t from 'tap';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { runIn } from '../../lab/net/exec.js';
import { podNetns } from '../../lab/net/names.js';
import { SMALL_SCENARIO, cli, cliJson, inCidr, labRemains, skipReason, writeTemp, type ListJson, type PodJson, type ProbeJson } from './labcli-helpers.js';

const LAB = 'lb2';
const reason = skipReason();

if (reason) {
  t.plan(0, reason);
} else {
  const dir = writeTemp({ 'scenario.yaml': SMALL_SCENARIO });
  const n = ['--name', LAB];
  t.before(async () => {
    await cli(['down', ...n]);
  });
  t.teardown(async () => {
    await cli(['down', ...n]);
    rmSync(dir, { recursive: true, force: true });
  });

  t.test('eks flavour: up, reachability, down', async (t) => {
    const up = await cli(['up', ...n, '--policy-source', 'standalone', '--primary', 'eks', '-f', join(dir, 'scenario.yaml')]);
    t.equal(up.code, 0, `up exits 0 (${up.stderr})`);
    t.comment(`eks: sluice-lab up (2 nodes, 4 Pods, 3 Services) took ${(up.ms / 1000).toFixed(1)} s`);
    t.match(up.stdout, /primary CNI eks/);

    const pods = new Map((await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', ...n])).items.map((p) => [p.metadata.name, p]));
    for (const name of ['p1', 'p2', 'p3']) {
      const p = pods.get(name)!;
      t.equal(p.status.phase, 'Running');
      t.ok(inCidr(p.status.podIP!, `10.10.${p.spec.nodeName!.slice(5)}.0/24`), `${name} ${p.status.podIP} in ${p.spec.nodeName}'s Pod CIDR`);
      // What the AWS VPC CNI leaves in the Pod: a /32 and a default route via 169.254.1.1.
      const { stdout } = await runIn(podNetns(LAB, 'lbt', name), 'ip', ['-4', 'route', 'show', 'default']);
      t.match(stdout, /default via 169\.254\.1\.1/, `${name}: EKS-style default route`);
    }

    const all = await cliJson<ProbeJson[]>(['probe', '-o', 'json', ...n]);
    t.equal(all.length, 28, 'every Pod to every Pod on every served port');
    t.same(all.filter((r) => r.verdict !== 'allow'), [], 'all allowed');

    const p3node = pods.get('p3')!.spec.nodeName;
    const local = p3node === 'node-1' ? 'svc1' : 'svc2';
    const remote = p3node === 'node-1' ? 'svc2' : 'svc1';
    const probes = [
      { from: 'lbt/p3', to: `service:lbt/${local}`, port: 8000, protocol: 'TCP' },
      { from: 'lbt/p3', to: `service:lbt/${remote}`, port: 8000, protocol: 'TCP' },
      { from: 'lbt/p3', to: `service:lbt/${local}`, port: 53, protocol: 'UDP' },
      { from: 'lbt/p3', to: `service:lbt/${remote}`, port: 53, protocol: 'UDP' },
      { from: 'lbt/p1', to: 'lbt/hn', port: 8080, protocol: 'TCP' },
      { from: 'lbt/p1', to: 'ip:192.168.77.12', port: 0, protocol: 'ICMP' },
      { from: 'lbt/p1', to: 'ip:192.168.77.250', port: 80, protocol: 'TCP' },
      { from: 'lbt/p2', to: 'ip:192.168.77.250', port: 81, protocol: 'UDP' },
    ];
    const file = join(dir, 'probes.json');
    (await import('node:fs')).writeFileSync(file, JSON.stringify(probes));
    const res = await cliJson<ProbeJson[]>(['probe', '--probes', file, '-o', 'json', ...n]);
    t.same(res.map((r) => `${r.from} -> ${r.to} ${r.port}/${r.protocol}: ${r.verdict}`), probes.map((p) => `${p.from} -> ${p.to} ${p.port}/${p.protocol}: allow`));

    // A crashed control plane: commands say so, and down still cleans up everything.
    const pid = Number(readFileSync(`/run/sluice-lab/${LAB}/supervisor.pid`, 'utf8'));
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 50; i++) {
      try {
        process.kill(pid, 0);
        await new Promise((r) => setTimeout(r, 100));
      } catch {
        break;
      }
    }
    const get = await cli(['get', 'pods', ...n]);
    t.not(get.code, 0, 'get after a supervisor crash fails');
    t.match(get.stderr, /lab "lb2" is not running .*sluice-lab down --name lb2/, 'and says how to clean up');
    const down = await cli(['down', ...n]);
    t.equal(down.code, 0, `down after the crash exits 0 (${down.stderr})`);
    const remains = labRemains(LAB);
    t.same(remains.filter((x) => x.startsWith('netns')), [], `no ${LAB}-* namespace`);
    t.same(remains.filter((x) => x.startsWith('process')), [], 'no process mentioning the state dir');
    t.same(remains.filter((x) => x.startsWith('directory')), [], `no /run/sluice-lab/${LAB}`);
  });
}
