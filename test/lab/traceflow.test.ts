/**
 * `sluicectl node traceflow` with real packets (lab `tfl`, 2 nodes, ptp, the model of
 * test/scenarios/model.yaml, a Kubernetes default deny on ingress to x and an Antrea Reject of z
 * into y): for every ordered pair of Pods on the same node (TCP 80 and UDP 81) and on two nodes
 * (TCP 80), the traced end-to-end verdict equals `sluicectl simulate`'s on the same objects; a
 * packet to another node's Pod is observed there and decided there. A Service destination is traced
 * in both legs (to antrea-gw0 before the host's DNAT, back to the endpoint after it) and decided as
 * the endpoint; a Reject names its rule; the destination node's agent frozen makes the trace
 * incomplete (exit 3), never allow; a source on another node and a bad destination are refused with
 * why; no observation flow is left behind on either node.
 */
import t from 'tap';
import { join } from 'node:path';
import { OBSERVE_MS } from '../../daemon/enforcement/traceflow.js';
import { sleep } from '../../lab/net/exec.js';
import { ovsDir, repoRoot } from '../../lab/net/names.js';
import { freezeAgent, labCli, run, simulate, snapshot, traceflow as traceflowOn, type ProbeSpec, withEnforcingLab, upEnforcingLab, writeTempFile } from './enforce-helpers.js';
import { cliJson, type ListJson } from './labcli-helpers.js';

const LAB = 'tfl';
const MODEL = join(repoRoot(), 'test', 'scenarios', 'model.yaml');
const POLICIES = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-in, namespace: x}
spec: {podSelector: {}, policyTypes: [Ingress]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: reject-z-to-y}
spec:
  priority: 5
  tier: securityops
  appliedTo: [{namespaceSelector: {matchLabels: {ns: "y"}}}]
  ingress:
    - action: Reject
      name: no-z
      from: [{namespaceSelector: {matchLabels: {ns: z}}}]
`;

withEnforcingLab(LAB, 'traceflow-', (dir) => {
  const traceflow = (node: string, args: string[]) => traceflowOn(LAB, node, args);

  t.test('traceflow verdicts with real packets = simulate; Service legs; refusals; nothing left behind', async (t) => {
    await upEnforcingLab(LAB, 2, MODEL);
    await labCli(LAB, ['apply', '-f', writeTempFile(dir, 'policies.yaml', POLICIES)]);
    const pods = (await cliJson<ListJson<{ metadata: { namespace: string; name: string }; spec: { nodeName: string } }>>(['get', 'pods', '-o', 'json', '--name', LAB])).items;
    const ref = (p: (typeof pods)[number]) => `${p.metadata.namespace}/${p.metadata.name}`;
    const nodeOf = new Map(pods.map((p) => [ref(p), p.spec.nodeName]));
    const probes: ProbeSpec[] = [];
    for (const a of pods) for (const b of pods) {
      if (a === b) continue;
      probes.push({ from: ref(a), to: ref(b), port: 80, protocol: 'TCP' });
      if (a.spec.nodeName === b.spec.nodeName) probes.push({ from: ref(a), to: ref(b), port: 81, protocol: 'UDP' });
    }
    const sim = await simulate(await snapshot(LAB, join(dir, 'snap')), probes);
    // The policies are realized once a traced deny is seen.
    for (let i = 0; i < 50; i++) {
      const r = await traceflow(nodeOf.get('z/a')!, ['--from', 'z/a', '--to', 'x/c', '--port', '80', '-o', 'json']);
      if (r.report?.verdict === 'drop') break;
      await new Promise((res) => setTimeout(res, 200));
    }
    const mismatches: string[] = [];
    let started = performance.now();
    for (const [i, p] of probes.entries()) {
      const r = await traceflow(nodeOf.get(p.from)!, ['--from', p.from, '--to', p.to, '--port', String(p.port), '--protocol', p.protocol, '-o', 'json']);
      const got = r.report?.verdict ?? `error: ${r.stderr.trim()}`;
      if (got !== sim[i]!.verdict) mismatches.push(`${p.from} -> ${p.to} ${p.port}/${p.protocol}: traceflow ${got}, simulate ${sim[i]!.verdict}`);
    }
    t.same(mismatches, [], `${probes.length} traced end-to-end verdicts = simulate (same-node and cross-node pairs; ${((performance.now() - started) / probes.length).toFixed(0)} ms per trace)`);
    t.ok(sim.some((v) => v.verdict === 'drop') && sim.some((v) => v.verdict === 'reject') && sim.some((v) => v.verdict === 'allow'), 'the matrix holds allow, drop and reject');

    // A Reject names the rule that decided.
    const rej = await traceflow(nodeOf.get('z/a')!, ['--from', 'z/a', '--to', 'y/b', '--port', '80']);
    t.match(rej.stdout, /^z\/a -> y\/b \(\S+\) 80\/TCP: reject$/m, 'reject');
    t.match(rej.stdout, /ingress: AntreaClusterNetworkPolicy reject-z-to-y rule no-z \(Reject, tier securityops, priority 5\)/, 'the rule, its tier and priority');

    // A Service: before the host's DNAT to antrea-gw0, then back to the endpoint, decided there.
    started = performance.now();
    const svc = await traceflow(nodeOf.get('z/c')!, ['--from', 'z/c', '--to', 'service:x/s-x', '--port', '8080', '-o', 'json']);
    t.equal(svc.report?.legs.length, 2, `two legs (${svc.stderr})`);
    t.match(svc.report?.legs[0], { verdict: 'allow', outcome: /^output to antrea-gw0/ }, 'leg 1: to the host');
    t.match(svc.report?.legs[1], { verdict: 'drop', outcome: /dropped in IngressDefaultRule/ }, 'leg 2: the endpoint x/a is isolated');
    t.equal(svc.report?.verdict, 'drop', 'the verdict is the endpoint\'s');
    const svcY = await traceflow(nodeOf.get('x/a')!, ['--from', 'x/a', '--to', 'service:y/s-y', '--port', '8080']);
    t.match(svcY.stdout, /^x\/a -> service:y\/s-y \(10\.96\.\S+\) 8080\/TCP: allow$/m, 'allowed through a Service');
    t.match(svcY.stdout, /leg 2 \(back from the host after DNAT\):[\s\S]*result: {2}allow: output to Pod y\/b/, 'delivered to the endpoint y/b');

    // Another node's Pod: observed and decided on its node, each leg naming its node.
    const [srcNode, dstNode] = [nodeOf.get('y/b')!, nodeOf.get('x/b')!];
    t.not(srcNode, dstNode, 'y/b and x/b are on two nodes');
    const cross = await traceflow(srcNode, ['--from', 'y/b', '--to', 'x/b', '--port', '80']);
    t.match(cross.stdout, /^y\/b -> x\/b \(\S+\) 80\/TCP: drop$/m, `dropped on the destination's node (${cross.stderr})`);
    t.match(cross.stdout, new RegExp(`leg 1 on ${srcNode} \\(as sent\\):[\\s\\S]*result: {2}allow: output to antrea-gw0`), 'leg 1: allowed out of the source node');
    t.match(cross.stdout, new RegExp(`leg 2 on ${dstNode} \\(arrived from ${srcNode} through antrea-gw0\\):[\\s\\S]*result: {2}drop: dropped in IngressDefaultRule`), 'leg 2: dropped by x\'s default deny there');
    t.comment(cross.stdout);
    const crossJson = await traceflow(srcNode, ['--from', 'y/b', '--to', 'x/b', '--port', '80', '-o', 'json']);
    t.same(crossJson.report?.legs.map((l) => [l.node, l.verdict]), [[srcNode, 'allow'], [dstNode, 'drop']], 'json: the legs with their nodes');

    // The destination node's agent frozen: nobody can say what happened there.
    const thaw = await freezeAgent(t, LAB, dstNode);
    const frozen = await traceflow(srcNode, ['--from', 'y/b', '--to', 'x/b', '--port', '80']);
    thaw();
    t.equal(frozen.code, 3, 'incomplete: exit 3');
    t.match(frozen.stdout, /^y\/b -> x\/b \(\S+\) 80\/TCP: incomplete$/m, 'the verdict says the trace is incomplete');
    t.match(frozen.stdout, new RegExp(`note: left this node through antrea-gw0 and no bridge reported it after: Node ${dstNode} could not observe: .*no answer within`), 'and why');

    // Refusals name what is wrong.
    const elsewhere = pods.find((p) => p.spec.nodeName !== nodeOf.get('z/a'))!;
    const remote = await traceflow(nodeOf.get('z/a')!, ['--from', ref(elsewhere), '--to', 'z/a', '--port', '80']);
    t.equal(remote.code, 1, 'a source on another node: exit 1');
    t.match(remote.stderr, new RegExp(`no Pod of that name is attached on ${nodeOf.get('z/a')} \\(traceflow runs on the source Pod's node\\)`), 'naming the node to run it on');
    const badTo = await traceflow(nodeOf.get('z/a')!, ['--from', 'z/a', '--to', 'nowhere', '--port', '80']);
    t.match(badTo.stderr, /destination "nowhere": use ns\/pod, service:ns\/name or ip:ADDRESS/, 'a destination that is none: the forms it can take');
    const noPort = await traceflow(nodeOf.get('z/a')!, ['--from', 'z/a', '--to', 'x/c']);
    t.match(noPort.stderr, /a port 1-65535 is needed for TCP/, 'TCP without a port');

    // An observation ends by itself, OBSERVE_MS after its flows are in place: the frozen node's agent,
    // once thawed, may still start one for the request it then reads (its tracer gave up long before).
    const deadline = performance.now() + OBSERVE_MS + 5000;
    for (const node of ['node-1', 'node-2']) {
      let left: string[];
      for (;;) {
        const dump = await run('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', `unix:${ovsDir(LAB, node)}/br-int.mgmt`, 'cookie=0x7ace000000000000/0xffff000000000000']);
        left = dump.stdout.split('\n').filter((l) => l.includes('cookie='));
        if (left.length === 0 || performance.now() > deadline) break;
        await sleep(200);
      }
      t.same(left, [], `${node}: no observation flow left (an observation ends within ${OBSERVE_MS} ms)`);
    }
  });
});
