/**
 * Installing sluice on nodes that already run Pods (lab `ar`, 2 nodes, ptp, no sluice at first):
 * while a client pings a Pod on the other node every 10 ms and keeps a TCP connection busy, the
 * agents start, chain sluice into the conflist and adopt every running Pod. Printed and asserted:
 * packets lost (goal 0), the TCP connection never reset, the time from agent start to every Pod
 * attached. Then a deny policy applies to the adopted Pods (real packets), the runtime's DEL of an
 * adopted Pod (which sluice never ADDed) detaches it, and a Pod whose CNI result the runtime did not
 * cache is named, with why, instead of being skipped silently. `sluicectl whatif` against the lab's
 * API server predicts the policy's effect before it is applied.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { agentConfigPath, agentLogPath, agentPidPath, startAgent } from '../../lab/agent.js';
import { hostKubeconfigPath, readControl } from '../../lab/control.js';
import { resolveKind } from '../../lab/kinds.js';
import { cniCacheDir, podNetns, repoRoot } from '../../lab/net/names.js';
import { run } from '../../lab/net/exec.js';
import { startNodeOvs } from '../../lab/net/ovs.js';
import { clientFor } from '../../lab/ops.js';
import { agentStatus, probe, tempDir, writeTempFile } from './enforce-helpers.js';
import { cli, sluiceSkipReason } from './labcli-helpers.js';

const LAB = 'ar';
const NODES = ['node-1', 'node-2'];
const MODEL = join(repoRoot(), 'test', 'scenarios', 'model.yaml');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A TCP client in a Pod: one byte every 10 ms, counts echoes; prints a JSON summary on SIGTERM. */
const STREAM = `
const s = require('net').connect({ host: process.argv[1], port: 80 });
let sent = 0, echoed = 0, error = null, gapMs = 0, last = Date.now();
s.on('data', (d) => { echoed += d.length; const now = Date.now(); gapMs = Math.max(gapMs, now - last); last = now; });
s.on('error', (e) => { error = e.code || e.message; });
s.on('close', () => { if (!error) error = 'closed'; });
const timer = setInterval(() => { if (!s.destroyed) { s.write('x'); sent++; } }, 10);
process.on('SIGTERM', () => { clearInterval(timer); console.log(JSON.stringify({ sent, echoed, error, maxGapMs: gapMs })); process.exit(0); });
`;

function inPod(ns: string, name: string, cmd: string, args: string[]) {
  const child = spawn('ip', ['netns', 'exec', podNetns(LAB, ns, name), cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (out += d));
  const done = new Promise<string>((resolve) => child.on('close', () => resolve(out)));
  return { child, done };
}

const why = sluiceSkipReason();
if (why) t.plan(0, why);
else {
  const dir = tempDir('adopt-');
  t.teardown(async () => {
    await cli(['down', '--name', LAB]);
    rmSync(dir, { recursive: true, force: true });
  });

  t.test('install on busy nodes: running Pods adopted without loss, enforced, DEL-able; the unadoptable named', async (t) => {
    await cli(['down', '--name', LAB]);
    const up = await cli(['up', '--no-sluice', '--name', LAB, '--nodes', '2', '--primary', 'ptp', '-f', MODEL]);
    t.equal(up.code, 0, `lab up without sluice (${up.stderr.trim().split('\n').pop()})`);
    const info = readControl(LAB)!;
    const rest = clientFor(info);
    const pods = (await rest.list(resolveKind('pods'))).items as { metadata: { namespace: string; name: string }; spec: { nodeName: string }; status: { podIP: string } }[];
    const ip = (ref: string) => pods.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === ref)!.status.podIP;
    const nodeOf = (ref: string) => pods.find((p) => `${p.metadata.namespace}/${p.metadata.name}` === ref)!.spec.nodeName;
    t.not(nodeOf('y/b'), nodeOf('x/b'), 'the ping crosses nodes');

    // A Pod whose CNI result the runtime did not cache (as with a runtime that keeps none).
    const lost = 'z/c';
    const lostNode = nodeOf(lost);
    const results = join(cniCacheDir(LAB, lostNode), 'results');
    let removed = 0;
    for (const f of readdirSync(results)) {
      const entry = JSON.parse(readFileSync(join(results, f), 'utf8')) as { cniArgs: [string, string][] };
      const args = new Map(entry.cniArgs);
      if (args.get('K8S_POD_NAMESPACE') === 'z' && args.get('K8S_POD_NAME') === 'c') {
        rmSync(join(results, f));
        removed++;
      }
    }
    t.equal(removed, 1, `the runtime's cached CNI result of ${lost} is removed`);

    // Traffic across the install: ping every 10 ms, a TCP connection writing every 10 ms.
    // Ended by its count, not a signal (a signal would count the echo in flight as lost).
    const ping = inPod('y', 'b', 'ping', ['-i', '0.01', '-c', '1000', '-W', '1', ip('x/b')]);
    const stream = inPod('z', 'a', process.execPath, ['-e', STREAM, ip('x/a')]);
    await sleep(1000);

    // Installing sluice: Open vSwitch (as the DaemonSet's ovs container; idempotent) and the agents.
    await Promise.all(NODES.map((n) => startNodeOvs(LAB, n)));
    const t0 = Date.now();
    await Promise.all(NODES.map((n) => startAgent(LAB, n)));
    const expected = pods.filter((p) => `${p.metadata.namespace}/${p.metadata.name}` !== lost);
    let attachedMs = -1;
    let statuses: Record<string, unknown>[] = [];
    for (let i = 0; i < 300; i++) {
      statuses = await Promise.all(NODES.map((n) => agentStatus(LAB, n)));
      const attached = statuses.flatMap((s) => (s.pods as { podNamespace: string; podName: string }[]).map((p) => `${p.podNamespace}/${p.podName}`));
      if (expected.every((p) => attached.includes(`${p.metadata.namespace}/${p.metadata.name}`))) {
        attachedMs = Date.now() - t0;
        break;
      }
      await sleep(50);
    }
    t.ok(attachedMs >= 0, `every running Pod with a cached CNI result is attached (${attachedMs} ms from agent start)`);
    await sleep(1500); // traffic keeps flowing after the last route move

    stream.child.kill('SIGTERM');
    const pingOut = await ping.done;
    const streamOut = JSON.parse((await stream.done).trim().split('\n').pop() ?? '{}') as { sent: number; echoed: number; error: string | null; maxGapMs: number };
    const m = /(\d+) packets transmitted, (\d+) received/.exec(pingOut);
    t.ok(m, `ping summary: ${pingOut.trim().split('\n').slice(-2).join(' | ')}`);
    const [sent, received] = [Number(m?.[1]), Number(m?.[2])];
    t.comment(`adoption under traffic: ${sent} pings every 10 ms, ${sent - received} lost; TCP: ${streamOut.sent} bytes written every 10 ms, ${streamOut.echoed} echoed, longest gap ${streamOut.maxGapMs} ms, error ${streamOut.error ?? 'none'}; all Pods attached ${attachedMs} ms after the agents started`);
    // Measured here: 0 lost in nearly every run, 1 in 1000 once while the machine was busy. A wrong
    // order (the route moved before the flows, the veth isolated before the port) loses dozens.
    t.ok(sent - received <= 2, `at most 2 of ${sent} pings lost across the adoption (${sent - received} lost)`);
    t.equal(streamOut.error, null, 'the TCP connection was never reset');
    t.ok(streamOut.echoed >= streamOut.sent - 5, 'the TCP connection kept echoing to the end');

    // What could not be adopted is named, with why (once the agent's first adoption run has ended).
    let lostStatus = statuses[NODES.indexOf(lostNode)]!;
    for (let i = 0; i < 100 && !(lostStatus.adoption as { lastRun?: unknown } | undefined)?.lastRun; i++) {
      await sleep(100);
      lostStatus = await agentStatus(LAB, lostNode);
    }
    t.match(lostStatus.adoption, { unattached: [{ pod: lost, reason: /no CNI result for .* is cached/ }] }, 'the Pod without a cached CNI result is named in /status with why');
    const ctl = await run('ip', ['netns', 'exec', `${LAB}-${lostNode}`, process.execPath, join(repoRoot(), 'dist', 'daemon', 'sluicectl.js'), 'node', 'status', '--config', agentConfigPath(LAB, lostNode)], { allowFail: true });
    t.match(ctl.stdout, new RegExp(`NOT ENFORCED: ${lost} crosses no bridge`), 'sluicectl node status names it');
    t.equal(ctl.exitCode, 1, 'and exits 1');
    // ... and as Events on the Pods, where kubectl describe shows them.
    type Ev = { involvedObject: { apiVersion?: string; kind: string; name: string; namespace?: string | undefined; uid?: string }; type: string; reason: string; message: string };
    const events = (await rest.list(resolveKind('events'))).items as unknown as Ev[];
    const on = (ref: string, reason: string) => events.filter((e) => `${e.involvedObject.namespace}/${e.involvedObject.name}` === ref && e.involvedObject.kind === 'Pod' && e.reason === reason);
    t.match(on(lost, 'SluiceNotEnforced'), [{ type: 'Warning', message: /no network policy applies to it: no CNI result/ }], 'a Warning Event SluiceNotEnforced on the Pod, with why');
    t.match(on('x/b', 'SluiceAdopted'), [{ type: 'Normal', message: /attached this running Pod to its bridge/ }], 'a Normal Event SluiceAdopted on an adopted Pod');
    const uidOf = async (ns: string, name: string) => (await rest.get(resolveKind('pods'), name, ns)).metadata.uid;
    t.same(on('x/b', 'SluiceAdopted')[0]?.involvedObject, { apiVersion: 'v1', kind: 'Pod', namespace: 'x', name: 'b', uid: await uidOf('x', 'b') }, "with the Pod's uid, which kubectl describe selects Events by");
    t.equal(on(lost, 'SluiceNotEnforced')[0]?.involvedObject.uid, await uidOf('z', 'c'), 'the Warning too');

    // Policies apply to adopted Pods (real packets), as `sluicectl whatif` against the lab's API server predicted.
    const deny = writeTempFile(dir, 'deny.yaml', 'apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: deny-in, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n');
    const wi = await run(process.execPath, [join(repoRoot(), 'dist', 'daemon', 'sluicectl.js'), 'whatif', '-f', deny, '--kubeconfig', hostKubeconfigPath(LAB), '-o', 'json'], { allowFail: true });
    t.equal(wi.exitCode, 0, `sluicectl whatif reads the live cluster (${wi.stderr.trim()})`);
    const predicted = (JSON.parse(wi.stdout || '{"changes":[]}') as { compared: number; changes: { from: string; to: string; port: number; protocol: string; after: { verdict: string } }[] });
    const flips = (from: string, to: string) => predicted.changes.find((c) => c.from === from && c.to === to && c.port === 80 && c.protocol === 'TCP')?.after.verdict;
    t.same([flips('y/b', 'x/b'), flips('z/a', 'x/a'), flips('y/b', 'z/a')], ['drop', 'drop', undefined], `whatif: ${predicted.changes.length} of ${predicted.compared} connections would change, into x only`);
    t.ok(predicted.changes.every((c) => /^(service:)?x\//.test(c.to)), 'every predicted change is a connection into x');
    t.equal((await cli(['apply', '-f', deny, '--name', LAB])).code, 0);
    let verdicts: { verdict: string }[] = [];
    for (let i = 0; i < 50; i++) {
      verdicts = await probe(LAB, dir, [{ from: 'y/b', to: 'x/b', port: 80, protocol: 'TCP' }, { from: 'z/a', to: 'x/a', port: 80, protocol: 'TCP' }, { from: 'y/b', to: 'z/a', port: 80, protocol: 'TCP' }]);
      if (verdicts[0]?.verdict === 'drop' && verdicts[1]?.verdict === 'drop') break;
      await sleep(200);
    }
    t.same(verdicts.map((v) => v.verdict), ['drop', 'drop', 'allow'], 'the deny applies to adopted Pods; other traffic still flows');

    // The runtime's DEL of an adopted Pod: sluice never saw its ADD.
    const gone = 'x/c';
    const goneNode = nodeOf(gone);
    await rest.delete(resolveKind('pods'), 'c', 'x');
    let still = true;
    for (let i = 0; i < 100 && still; i++) {
      await sleep(100);
      still = ((await agentStatus(LAB, goneNode)).pods as { podName: string; podNamespace: string }[]).some((p) => `${p.podNamespace}/${p.podName}` === gone);
    }
    t.notOk(still, 'the runtime DEL of an adopted Pod detached it');
    const ports = await run('ip', ['netns', 'exec', `${LAB}-${goneNode}`, 'sh', '-c', `OVS_RUNDIR=/run/sluice-lab/${LAB}/${goneNode}/ovs ovs-vsctl --columns=external_ids find Interface external_ids:pod-name=c external_ids:pod-namespace=x`], { allowFail: true });
    t.equal(ports.stdout.trim(), '', 'no OVS port left for it');
    for (const n of NODES) {
      const pid = Number(readFileSync(agentPidPath(LAB, n), 'utf8').trim());
      if (!t.ok(pid > 0 && existsSync(`/proc/${pid}`), `${n}: the agent is still running`)) t.comment(readFileSync(agentLogPath(LAB, n), 'utf8').trim().split('\n').slice(-8).join('\n'));
    }
  });
}
