/** A Pod blasting SYNs that a Reject rule answers through the agent; recovery: how long a Pod created during the flood takes to attach. */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { resolveKind } from '../kinds.js';
import { runIn, sleep } from '../net/exec.js';
import { nodeNetns, podNetns } from '../net/names.js';
import { clientFor } from '../ops.js';
import { type ChaosRun, waitUntil } from './harness.js';

export async function packetInFlood(run: ChaosRun): Promise<void> {
  const { lab } = run;
  // A Pod blasting connection attempts that a Reject rule answers: every SYN is a packet-in. The
  // bridge's meter must hold the rate the agent sees, and the agent must keep serving (a Pod created
  // meanwhile is attached: recovery is that time).
  const REJECT = `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: chaos-reject-82}
spec:
  priority: 1
  tier: application
  appliedTo: [{podSelector: {matchLabels: {pod: b}}, namespaceSelector: {matchLabels: {ns: "y"}}}]
  ingress:
    - {name: reject-z-82, action: Reject, from: [{namespaceSelector: {matchLabels: {ns: z}}}], ports: [{protocol: TCP, port: 82}]}
`;
  const rejectFile = join(run.dir, 'reject.yaml');
  writeFileSync(rejectFile, REJECT);
  await run.labCli(['apply', '-f', rejectFile]);
  const yb = run.pod('y/b');
  const metric = async (name: string) => {
    const text = (await runIn(nodeNetns(lab, yb.spec.nodeName), 'curl', ['-s', '--max-time', '2', 'http://127.0.0.1:10349/metrics'], { allowFail: true })).stdout;
    return [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)`, 'gm'))].reduce((n, m) => n + Number(m[1]), 0);
  };
  await run.scenario(`packet-in flood: ${run.quick ? 5 : 30} s of SYNs to a Reject rule`, 1, async () => {
    const seconds = run.quick ? 5 : 30;
    const [in0, dropped0] = [await metric('sluice_packet_ins_total'), await metric('sluice_packet_ins_dropped_total')];
    const flood = spawn('ip', ['netns', 'exec', podNetns(lab, 'z', 'a'), process.execPath, '-e',
      `const net=require('net');const end=Date.now()+${seconds * 1000};let n=0;(function go(){for(let i=0;i<50;i++){const s=net.connect({host:'${yb.status.podIP}',port:82});s.on('error',()=>{});s.on('connect',()=>s.destroy());n++}if(Date.now()<end)setTimeout(go,5);else setTimeout(()=>{console.log(n);process.exit(0)},1500)})()`], { stdio: ['ignore', 'pipe', 'ignore'] });
    let attempts = '';
    flood.stdout.setEncoding('utf8').on('data', (d: string) => (attempts += d));
    const done = new Promise<void>((r) => flood.on('close', () => r()));
    await sleep(1000);
    const rest = clientFor(run.info);
    const k = performance.now();
    await rest.apply(resolveKind('pods'), { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'during-flood', namespace: 'y' }, spec: { nodeName: yb.spec.nodeName, containers: [{ name: 's', image: 'sluice-lab/workload', ports: [{ containerPort: 80 }] }] } } as never);
    await waitUntil('a Pod created during the flood is attached', async () => (((await run.status(yb.spec.nodeName))?.pods ?? []) as { podName: string }[]).some((p) => p.podName === 'during-flood'), 60_000);
    const ms = Math.round(performance.now() - k);
    await done;
    const [in1, dropped1] = [await metric('sluice_packet_ins_total'), await metric('sluice_packet_ins_dropped_total')];
    console.error(`packet-in flood: ${attempts.trim()} connection attempts in ${seconds} s; the agent received ${in1 - in0} packet-ins (${Math.round((in1 - in0) / seconds)}/s; the bridge meters them per category), dropped ${dropped1 - dropped0} from its queue; a Pod created meanwhile was attached after ${ms} ms`);
    await rest.delete(resolveKind('pods'), 'during-flood', 'y');
    return ms;
  });
  await run.labCli(['delete', '-f', rejectFile]);
}
