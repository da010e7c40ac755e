/**
 * The enforcement proof on one lab flavour: `sluice-lab up --sluice` (2 nodes), then a sequence of
 * policy steps (the examples, Reject, Pass, ANP Deny over a K8s allow, toServices, a policy edit,
 * a label change, deletions); after each step every probe (Pod->Pod on all ports, Pod->Service,
 * node->Pod) is sent with real packets and compared with `sluicectl simulate` on a snapshot of
 * the same objects. Plus explicit Reject error codes and node->own-Pod.
 */
import { join } from 'node:path';
import type { Test } from 'tap';
import { nodeIP, repoRoot } from '../../lab/net/names.js';
import { cli, labRemains } from './labcli-helpers.js';
import { compareWithSimulate, fullProbeSet, labCli, POLICIES, probe, probeDetailed, tempDir, WORKLOAD, type Comparison } from './enforce-helpers.js';

const FIX = join(repoRoot(), 'test', 'lab', 'fixtures', 'enforce');

export async function runMatrix(t: Test, lab: string, primary: 'ptp' | 'eks'): Promise<void> {
  const dir = tempDir(`enforce-${lab}-`);
  const nodeIPs = [nodeIP('node-1'), nodeIP('node-2')];
  const probes = fullProbeSet(nodeIPs);
  await cli(['down', '--name', lab]);
  t.teardown(async () => {
    await cli(['down', '--name', lab]);
  });
  await labCli(lab, ['up', '--sluice', '--policy-source', 'standalone', '--nodes', '2', '--primary', primary, '-f', WORKLOAD]);

  const check = async (t: Test, step: string): Promise<Comparison> => {
    const c = await compareWithSimulate(lab, dir, probes);
    t.same(c.mismatches, [], `${step}: ${c.probes} probes, lab verdicts = simulate verdicts (${JSON.stringify(c.counts)}${c.skipped ? `; ${c.skipped} to Services without endpoints not compared` : ''}${c.retried ? `; ${c.retried} probed again` : ''})`);
    return c;
  };

  await t.test('no policies: everything allowed, as simulate says', async (t) => {
    const c = await check(t, 'no policies');
    t.equal(c.counts.allow, c.probes, 'all allow');
  });

  const steps: [string, string][] = [
    ['K8s default deny of x', join(POLICIES, '01-default-deny-x.yaml')],
    ['K8s allow from y', join(POLICIES, '02-allow-from-y.yaml')],
    ['K8s named port', join(POLICIES, '03-allow-named-port.yaml')],
    ['Antrea ACNP drop', join(POLICIES, '04-antrea-acnp.yaml')],
    ['AdminNetworkPolicy deny', join(POLICIES, '05-admin-anp.yaml')],
    ['Antrea Reject', join(FIX, '10-reject.yaml')],
    ['Pass falls through to K8s NP', join(FIX, '11-pass.yaml')],
    ['ANP Deny beats K8s NP allow', join(FIX, '12-anp-deny.yaml')],
    ['toServices', join(FIX, '13-toservices.yaml')],
  ];
  for (const [name, file] of steps) {
    await t.test(name, async (t) => {
      await labCli(lab, ['apply', '-f', file]);
      const c = await check(t, name);
      t.ok((c.counts.drop ?? 0) + (c.counts.reject ?? 0) > 0, 'the policies block something');
    });
  }

  await t.test('Reject: TCP refused, UDP admin-prohibited, at once', async (t) => {
    const r = await probeDetailed(lab, [
      { from: 'x/a', to: 'z/b', port: 80, protocol: 'TCP' },
      { from: 'x/a', to: 'z/b', port: 80, protocol: 'UDP' },
      { from: 'x/c', to: 'service:z/b', port: 80, protocol: 'TCP' },
      { from: 'x/c', to: 'service:z/b', port: 80, protocol: 'UDP' },
    ]);
    t.match(r[0], { verdict: 'reject', detail: 'ECONNREFUSED' }, `TCP: connection refused (a RST) after ${r[0]!.ms} ms`);
    t.match(r[1], { verdict: 'reject', detail: 'EHOSTUNREACH' }, `UDP: ICMP admin-prohibited after ${r[1]!.ms} ms`);
    t.match(r[2], { verdict: 'reject', detail: 'ECONNREFUSED' }, 'TCP to the Service: refused (reply un-DNATed by the host)');
    t.match(r[3], { verdict: 'reject', detail: 'EHOSTUNREACH' }, 'UDP to the Service: admin-prohibited');
    t.comment(`answer times (a reject verdict means before the probe timeout): ${r.map((x) => x.ms).join(', ')} ms`);
  });

  await t.test('policy edit: Reject becomes a TCP-only Drop', async (t) => {
    await labCli(lab, ['apply', '-f', join(FIX, '14-reject-edit.yaml')]);
    await check(t, 'edited policy');
    const r = await probe(lab, dir, [
      { from: 'x/a', to: 'z/b', port: 80, protocol: 'TCP' },
      { from: 'x/a', to: 'z/b', port: 80, protocol: 'UDP' },
    ]);
    t.same(r.map((v) => v.verdict), ['drop', 'allow'], 'TCP now dropped, UDP allowed');
  });

  await t.test('label changes move Pods in and out of policies', async (t) => {
    await labCli(lab, ['label', 'pod', 'y/a', 'pod=q']);
    await check(t, 'y/a relabelled pod=q');
    await labCli(lab, ['label', 'namespace', 'z', 'ns=zz']);
    await check(t, 'namespace z relabelled ns=zz');
    await labCli(lab, ['label', 'pod', 'y/a', 'pod=a']);
    await labCli(lab, ['label', 'namespace', 'z', 'ns=z']);
    await check(t, 'labels restored');
  });

  await t.test('the endpoints of a toServices Service move: its rules follow', async (t) => {
    // y/c may reach Service z/a only (13-toservices): its post-DNAT flows must follow the
    // Service's EndpointSlice from z/a to z/b, or the drop-rest rule drops the re-entered packet.
    await labCli(lab, ['label', 'pod', 'z/a', 'pod=q']);
    await labCli(lab, ['label', 'pod', 'z/b', 'pod=a']);
    // z/b -> Service z/a is now a Pod to its own endpoint: hairpin, not probed (see fullProbeSet).
    const c = await compareWithSimulate(lab, dir, probes.filter((p) => !(p.from === 'z/b' && p.to === 'service:z/a')));
    t.same(c.mismatches, [], `Service z/a sends to z/b only: ${c.probes} probes, lab verdicts = simulate verdicts (${JSON.stringify(c.counts)})`);
    const one = await compareWithSimulate(lab, dir, [{ from: 'y/c', to: 'service:z/a', port: 80, protocol: 'TCP' }]);
    t.same(one.mismatches, [], `y/c -> Service z/a 80/TCP, now at z/b: ${JSON.stringify(one.counts)} as simulate says`);
    await labCli(lab, ['label', 'pod', 'z/b', 'pod=b']);
    await labCli(lab, ['label', 'pod', 'z/a', 'pod=a']);
    await check(t, 'Service z/a sends to z/a again');
  });

  await t.test('deleting policies restores reachability', async (t) => {
    for (const f of [join(FIX, '13-toservices.yaml'), join(FIX, '12-anp-deny.yaml'), join(FIX, '11-pass.yaml'), join(FIX, '14-reject-edit.yaml')]) {
      await labCli(lab, ['delete', '-f', f]);
    }
    await check(t, 'custom policies deleted');
    await labCli(lab, ['delete', '-f', POLICIES]);
    const c = await check(t, 'all policies deleted');
    t.equal(c.counts.allow, c.probes, 'all allow again');
  });

  await t.test('down leaves nothing behind', async (t) => {
    const r = await cli(['down', '--name', lab]);
    t.equal(r.code, 0, r.stderr);
    t.same(labRemains(lab), [], 'no namespaces, processes or state left');
  });
}
