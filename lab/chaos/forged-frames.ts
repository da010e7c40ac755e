/**
 * Forged ARP and frames from or to the re-entrance and virtual MACs, sent raw from the hostile
 * Pod (lab/forged-frames.py): what reaches a victim and poisoned neighbour entries are gaps.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { runIn, sleep } from '../net/exec.js';
import { nodeNetns, podNetns, repoRoot } from '../net/names.js';
import type { ChaosRun } from './harness.js';

export async function forgedFrames(run: ChaosRun): Promise<void> {
  const { lab, target } = run;
  // Forged frames from the hostile Pod's eth0 (raw frames: lab/forged-frames.py): gratuitous ARP
  // replies and requests claiming the gateway's and y/b's addresses (broadcast and unicast to y/b),
  // and UDP from or to the re-entrance MAC, from the virtual MAC, to the broadcast MAC. Sniffers on
  // y/b (same node), y/a (other node) and the node's antrea-gw0 record every ARP frame and every
  // tagged datagram that arrives: only the controls (z/c's own frames to the virtual MAC) and the
  // ARP responder's answers may; any forged one that does is a gap, as is a victim's neighbour
  // entry pointing at the hostile Pod's or a forged MAC.
  const python = spawnSync('python3', ['--version']).status === 0;
  if (!python) console.error('forged frames: SKIPPED, no python3 on this machine to send raw frames (the rest of the scenario ran)');
  let forgedSent = 0;
  let forgedThrough = 0;
  let poisoned = 0;
  await run.scenario('hostile Pod: forged ARP, frames from/to the re-entrance and virtual MACs', run.quick ? 1 : 5, async () => {
    const k = performance.now();
    if (!python) return 0;
    const frames = join(repoRoot(), 'lab', 'forged-frames.py');
    const ns = podNetns(lab, 'z', 'c');
    const macOf = async (netns: string) => (await runIn(netns, 'cat', ['/sys/class/net/eth0/address'])).stdout.trim();
    const [zc, yb, ya] = [run.pod('z/c'), run.pod('y/b'), run.pod('y/a')];
    const [zMac, ybMac] = [await macOf(ns), await macOf(podNetns(lab, 'y', 'b'))];
    const gwIP = (await runIn(ns, 'ip', ['-4', 'route', 'show', 'default'])).stdout.split(' ')[2]!;
    const V = 'aa:bb:cc:dd:ee:ff';
    const R = 'de:ad:be:ef:de:ad';
    const B = 'ff:ff:ff:ff:ff:ff';
    const Z = '00:00:00:00:00:00';
    const udp = (tag: string, src: string, dst: string, to: string) => ({ kind: 'udp', src, dst, ip_src: zc.status.podIP, ip_dst: to, tag });
    const arp = (src: string, dst: string, op: number, sha: string, spa: string, tha: string, tpa: string) => ({ kind: 'arp', src, dst, op, sha, spa, tha, tpa });
    const controls = [udp('own-local', zMac, V, yb.status.podIP), udp('own-remote', zMac, V, ya.status.podIP)];
    const forged = [
      arp(zMac, B, 2, zMac, gwIP, B, gwIP), // gratuitous reply: "I am the gateway"
      arp(zMac, B, 2, zMac, yb.status.podIP, B, yb.status.podIP), // gratuitous reply: "I am y/b"
      arp(zMac, B, 1, zMac, yb.status.podIP, Z, yb.status.podIP), // gratuitous request claiming y/b
      arp(zMac, ybMac, 2, zMac, gwIP, ybMac, yb.status.podIP), // unicast to y/b: "the gateway is at my MAC"
      arp(zMac, B, 2, '02:de:ad:be:ef:02', gwIP, B, gwIP), // the gateway at a MAC nobody has
      arp(R, B, 1, R, zc.status.podIP, Z, gwIP), // from the re-entrance MAC
      arp(V, B, 2, V, gwIP, B, gwIP), // as the ARP responder itself
      udp('from-reentrance-local', R, V, yb.status.podIP),
      udp('from-reentrance-remote', R, V, ya.status.podIP),
      udp('from-virtual-local', V, V, yb.status.podIP),
      udp('from-virtual-remote', V, V, ya.status.podIP),
      udp('to-reentrance-local', zMac, R, yb.status.podIP),
      udp('to-reentrance-remote', zMac, R, ya.status.podIP),
      udp('to-broadcast-local', zMac, B, yb.status.podIP),
    ];
    const sniff = (netns: string, dev: string) => runIn(netns, 'python3', [frames, 'sniff', dev, '2.5'], { timeoutMs: 10_000 });
    const heard = Promise.all([sniff(podNetns(lab, 'y', 'b'), 'eth0'), sniff(podNetns(lab, 'y', 'a'), 'eth0'), sniff(nodeNetns(lab, target), 'antrea-gw0')]);
    await sleep(500);
    const sent = await runIn(ns, 'python3', [frames, 'send', 'eth0', JSON.stringify([...controls, ...forged])]);
    forgedSent += Number(sent.stdout.trim()) - controls.length * 3;
    const [atYb, atYa, atGw] = (await heard).map((r) => r.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { kind: string; src: string; sha?: string; tag?: string }));
    if (!atYb!.some((f) => f.tag === 'own-local') || !atYa!.some((f) => f.tag === 'own-remote')) {
      throw new Error(`forged frames: the controls did not arrive (y/b heard ${JSON.stringify(atYb)}, y/a ${JSON.stringify(atYa)}): the check cannot see`);
    }
    for (const [where, got] of [['y/b', atYb!], ['y/a', atYa!], ['the node', atGw!]] as const) {
      // The ARP responder answers with the virtual MAC; every other ARP frame here is forged.
      const through = got.filter((f) => (f.kind === 'arp' && f.sha !== V) || (f.kind === 'udp' && !f.tag?.startsWith('own-')));
      forgedThrough += through.length;
      for (const f of through) console.error(`forged frames: GAP at ${where}: ${JSON.stringify(f)}`);
    }
    const bad = [zMac, R, '02:de:ad:be:ef:02'];
    for (const [where, netns, dev] of [['y/b', podNetns(lab, 'y', 'b'), 'eth0'], ['y/a', podNetns(lab, 'y', 'a'), 'eth0'], ['the node', nodeNetns(lab, target), 'antrea-gw0']] as const) {
      const neigh = (await runIn(netns, 'ip', ['neigh', 'show', 'dev', dev])).stdout.split('\n').filter((l) => bad.some((m) => l.includes(m)));
      poisoned += neigh.length;
      for (const l of neigh) console.error(`forged frames: POISONED neighbour entry at ${where}: ${l}`);
    }
    return Math.round(performance.now() - k);
  });
  const forgedRow = run.ranLast('hostile Pod: forged');
  if (forgedRow) forgedRow.gaps += forgedThrough + poisoned;
  if (forgedRow && python) console.error(`forged frames: ${forgedSent} sent, ${forgedThrough} reached a victim, ${poisoned} neighbour entries poisoned`);
}
