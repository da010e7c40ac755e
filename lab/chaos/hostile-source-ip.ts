/**
 * A hostile Pod (z/c) sending to an allowed peer with another Pod's address, then with a MAC it
 * does not own: each such datagram that arrives counts as a gap; recovery: until it connects again
 * with its own.
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { runIn, sleep } from '../net/exec.js';
import { podNetns } from '../net/names.js';
import { runProbes } from '../net/probe-runner.js';
import { type ChaosRun, waitUntil } from './harness.js';
import { CHAOS_PROBES } from './traffic.js';

export async function hostileSourceIp(run: ChaosRun): Promise<void> {
  const { lab } = run;
  // Spoofing is seen where it would land: a UDP listener in y/a records every source address that
  // reaches it, so a spoofed datagram that the bridge let through is counted (a TCP connect from a
  // forged address fails anyway, its replies going elsewhere).
  let spoofed = 0;
  let spoofedThrough = 0;
  await run.scenario('hostile Pod: another Pod\'s source IP, then a forged MAC', run.quick ? 1 : 5, async () => {
    const ns = podNetns(lab, 'z', 'c');
    const to = run.pod('y/a').status.podIP;
    const own = run.pod('z/c').status.podIP;
    const forged = run.pod('y/c').status.podIP;
    const listener = spawn('ip', ['netns', 'exec', podNetns(lab, 'y', 'a'), process.execPath, '-e', "require('dgram').createSocket('udp4').on('message',(m,r)=>console.log(r.address+' '+m)).bind(9999)"], { stdio: ['ignore', 'pipe', 'ignore'] });
    let heard = '';
    listener.stdout.setEncoding('utf8').on('data', (d: string) => (heard += d));
    await sleep(300);
    const send = (tag: string, from?: string) => runIn(ns, process.execPath, ['-e', `const s=require('dgram').createSocket('udp4');s.bind({${from ? `address:'${from}'` : ''}},()=>{let n=0;const t=setInterval(()=>{s.send('${tag}',9999,'${to}');if(++n===5){clearInterval(t);setTimeout(()=>process.exit(0),100)}},20)})`], { allowFail: true, timeoutMs: 5000 });
    try {
      await send('own');
      await runIn(ns, 'ip', ['addr', 'add', `${forged}/32`, 'dev', 'eth0']);
      try {
        await send('forged-ip', forged);
      } finally {
        await runIn(ns, 'ip', ['addr', 'del', `${forged}/32`, 'dev', 'eth0'], { allowFail: true });
      }
      const mac = (await runIn(ns, 'cat', ['/sys/class/net/eth0/address'])).stdout.trim();
      await runIn(ns, 'ip', ['link', 'set', 'eth0', 'address', '02:de:ad:be:ef:01']);
      try {
        await send('forged-mac');
      } finally {
        await runIn(ns, 'ip', ['link', 'set', 'eth0', 'address', mac]);
      }
      await sleep(300);
    } finally {
      listener.kill();
    }
    const lines = heard.trim().split('\n').filter(Boolean);
    spoofed += 10;
    spoofedThrough += lines.filter((l) => l.endsWith(' forged-ip') || l.endsWith(' forged-mac')).length;
    if (!lines.some((l) => l === `${own} own`)) throw new Error(`hostile Pod: y/a heard nothing from z/c's own address (${lines.join(', ') || 'nothing'}): the check cannot see spoofing`);
    const k = performance.now();
    await waitUntil('z/c reaches y/a again', async () => (await runProbes([{ sourceNetns: ns, ip: to, port: 80, protocol: 'TCP' }], 1000, CHAOS_PROBES))[0]!.verdict === 'allow');
    return Math.round(performance.now() - k);
  });
  const spoofRow = run.ranLast('hostile Pod: another');
  if (spoofRow) {
    spoofRow.gaps += spoofedThrough;
    console.error(`hostile Pod: ${spoofedThrough} of ${spoofed} spoofed datagrams reached y/a`);
  }
}
