/**
 * A new Pod's first packets, with real packets on a 2-node lab (one primary per test file): new
 * Pods on node-1 talk from their first moment (lab/net/workload.ts --talk: before the lab's kubelet
 * reports their address) to servers on node-2, one that drops namespace z (Antrea
 * ClusterNetworkPolicy), one that admits only namespace x (Kubernetes NetworkPolicy):
 *  - not one datagram of a new z Pod reaches the server that drops z;
 *  - every new x Pod's very first datagram is answered (no startup blackout); the time from its
 *    sandbox's creation to the first answer is printed, split at the CNI ADD's answer;
 *  - node-2's agent frozen (SIGSTOP, its flows stay): a new z Pod is guarded on node-1 from the
 *    Pods of node-2 that drop it, so still nothing arrives; once node-2 thaws and confirms, the
 *    guard is lifted and a new x Pod's connection to the server that admits it works.
 * And the node's Service ranges: found from the lab's ServiceCIDR, one added later followed by the
 * host's rules and the bridge. Both address families where the lab has them.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { newPodAdmissions } from '../../lab/agent.js';
import { TALK_ANNOTATION } from '../../lab/cluster/kubelet.js';
import { nodeNetns, ovsDir, podNetns, repoRoot } from '../../lab/net/names.js';
import { talkFile } from '../../lab/net/sandbox.js';
import type { TalkRecord } from '../../lab/net/workload.js';
import { cli, cliJson, type ListJson } from './labcli-helpers.js';
import { agentStatus, freezeAgent, labCli, readText, withEnforcingLab } from './enforce-helpers.js';
import { ConnProcess } from './conn-traffic.js';

const FIXTURE = join(repoRoot(), 'test', 'lab', 'fixtures', 'newpods', 'cluster.yaml');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface PodJson { metadata: { namespace: string; name: string }; status: { phase?: string; podIP?: string; podIPs?: { ip: string }[] } }

const percentile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? NaN;
};

export function newPodsSuite(lab: string, primary: 'ptp' | 'eks', ipFamily: 'ipv4' | 'dual', policySource: 'standalone' | 'controller' = 'standalone'): void {
  withEnforcingLab(lab, `newpods-${lab}-`, (dir) => {
    const families: (4 | 6)[] = ipFamily === 'dual' ? [4, 6] : [4];
    const pods = async () => new Map((await cliJson<ListJson<PodJson>>(['get', 'pods', '-o', 'json', '--name', lab])).items.map((p) => [`${p.metadata.namespace}/${p.metadata.name}`, p]));
    const addressOf = (p: PodJson | undefined, family: 4 | 6): string => {
      const ip = (p?.status.podIPs ?? []).map((x) => x.ip).find((a) => a.includes(':') === (family === 6)) ?? (family === 4 ? p?.status.podIP : undefined);
      if (!ip) throw new Error(`no IPv${family} address for ${p?.metadata.namespace}/${p?.metadata.name}`);
      return ip;
    };
    let receivers: ConnProcess[] = [];
    const servers = { denyZ: { 4: '', 6: '' }, onlyX: { 4: '', 6: '' } };
    const RECEIVE_PORT = 7000;

    t.before(async () => {
      await cli(['down', '--name', lab]);
      await labCli(lab, ['up', '--sluice', '--nodes', '2', '--primary', primary, '--ip-family', ipFamily, '--policy-source', policySource, '-f', FIXTURE]);
      const all = await pods();
      for (const f of families) {
        servers.denyZ[f] = addressOf(all.get('y/deny-z'), f);
        servers.onlyX[f] = addressOf(all.get('y/only-x'), f);
      }
      // What reaches y/deny-z, per source address: one receiver per family.
      receivers = families.map((f) => ConnProcess.receiver(podNetns(lab, 'y', 'deny-z'), RECEIVE_PORT + (f === 6 ? 6 : 0), f));
      for (const r of receivers) if (!(await r.ready())) throw new Error('the receiver in y/deny-z did not start');
    });
    t.teardown(async () => {
      for (const r of receivers) await r.stop();
    });

    /** New Pods on node-1, each talking to `target(i)` from its first moment; resolves with their talk records once all are done. */
    const createTalkers = async (ns: string, prefix: string, count: number, target: (i: number) => { ip: string; port: number }, everyMs: number, forMs: number) => {
      const docs = [];
      for (let i = 0; i < count; i++) {
        const { ip, port } = target(i);
        docs.push(
          [
            'apiVersion: v1', 'kind: Pod',
            `metadata: {name: ${prefix}-${i}, namespace: ${ns}, labels: {pod: ${prefix}}, annotations: {${TALK_ANNOTATION}: "udp,${ip},${port},${everyMs},${forMs}"}}`,
            'spec: {nodeName: node-1, containers: [{name: app, image: sluice-lab/workload}]}',
          ].join('\n'),
        );
      }
      const file = join(dir, `${prefix}.yaml`);
      writeFileSync(file, docs.join('\n---\n'));
      await labCli(lab, ['apply', '-f', file]);
      const names = Array.from({ length: count }, (_, i) => `${prefix}-${i}`);
      const records = new Map<string, TalkRecord>();
      const deadline = Date.now() + 120_000;
      while (records.size < count) {
        if (Date.now() > deadline) throw new Error(`talkers not done: ${names.filter((n) => !records.has(n)).join(', ')}`);
        for (const n of names) {
          if (records.has(n)) continue;
          const text = readText(talkFile(lab, ns, n));
          if (!text) continue;
          const rec = JSON.parse(text) as TalkRecord;
          if (rec.done) records.set(n, rec);
        }
        await sleep(100);
      }
      const all = await pods();
      return names.map((n) => ({ name: n, record: records.get(n)!, pod: all.get(`${ns}/${n}`)! }));
    };

    /** Datagrams y/deny-z received from `ip`. */
    const arrivedFrom = (ip: string): number => receivers.reduce((sum, r) => sum + (r.from('udp', ip)?.packets ?? 0), 0);

    const COUNT = 10;
    const familyOf = (i: number): 4 | 6 => families[i % families.length]!;

    t.test(`${COUNT} new Pods of z: not one datagram reaches the Pod that drops z`, async (t) => {
      const talkers = await createTalkers('z', 'nz', COUNT, (i) => ({ ip: servers.denyZ[familyOf(i)], port: RECEIVE_PORT + (familyOf(i) === 6 ? 6 : 0) }), 1, 1500);
      let sent = 0;
      let arrived = 0;
      for (const [i, { name, record, pod }] of talkers.entries()) {
        sent += record.sent;
        const n = arrivedFrom(addressOf(pod, familyOf(i)));
        arrived += n;
        t.equal(n, 0, `z/${name} (IPv${familyOf(i)}): ${record.sent} datagrams sent from its first moment, none arrived`);
        t.ok(record.sent > 500 && record.errors.length === 0, `z/${name} did send (${record.sent}, errors ${record.errors.join(', ') || 'none'})`);
      }
      t.comment(`new z Pods: ${COUNT}, datagrams sent ${sent}, reached y/deny-z ${arrived}`);
    });

    t.test(`${COUNT} new Pods of x: answered from their first datagrams by the Pod that admits only x`, async (t) => {
      const talkers = await createTalkers('x', 'nx', COUNT, (i) => ({ ip: servers.onlyX[familyOf(i)], port: 80 }), 5, 1500);
      // What node-1's agent logged for each new Pod's ADD: how long it asked node-2, whether it guarded the Pod.
      const outcomes = newPodAdmissions(lab, 'node-1');
      const fromSandbox: number[] = [];
      const add: number[] = [];
      const fromAdd: number[] = [];
      let guarded = 0;
      for (const [i, { name, record }] of talkers.entries()) {
        const outcome = outcomes.get(`x/${name}`);
        t.ok(outcome, `x/${name}: its ADD asked its span (node-2)`);
        if (outcome && outcome.guarded.length > 0) {
          // node-2 did not confirm within the ADD's wait (a loaded machine): the Pod starts guarded
          // from node-2's Pods, so its first datagrams are dropped on node-1 by design, and the
          // guard is lifted once node-2 confirms.
          guarded++;
          const talkEnd = record.started + 1500;
          if (outcome.liftedAt !== undefined && outcome.liftedAt < talkEnd - 300) {
            t.not(record.firstAnsweredSeq, undefined, `x/${name} (IPv${familyOf(i)}): guarded from ${outcome.guarded.join(', ')} after ${outcome.ms} ms of asking, lifted ${outcome.liftedAt - record.started} ms into its talk, then answered (first answered datagram: ${record.firstAnsweredSeq})`);
          } else {
            t.comment(`x/${name}: guarded from ${outcome.guarded.join(', ')} for the whole of its talk (${outcome.liftedAt === undefined ? 'not lifted yet' : `lifted ${outcome.liftedAt - record.started} ms into it`}); ${record.replies} answers`);
          }
          continue;
        }
        t.equal(record.firstAnsweredSeq, 0, `x/${name} (IPv${familyOf(i)}): its very first datagram was answered (node-2 confirmed within ${outcome?.ms} ms)`);
        if (record.firstReply === undefined) continue;
        fromSandbox.push(record.firstReply - record.since);
        add.push(record.added - record.since);
        fromAdd.push(record.firstReply - record.added);
      }
      const fig = (xs: number[]) => `p50 ${percentile(xs, 50)} ms, p99 ${percentile(xs, 99)} ms`;
      t.comment(`new x Pods: ${guarded} of ${COUNT} started guarded (node-2 slower than the ADD's wait); of the others, sandbox → first answer ${fig(fromSandbox)}; of which sandbox → CNI ADD answered ${fig(add)}, ADD answered → first answer (the lab starts the workload's process) ${fig(fromAdd)}`);
      const asked = [...outcomes].filter(([pod]) => /^[xz]\/n[xz]-/.test(pod)).map(([, o]) => o.ms);
      t.equal(asked.length, 2 * COUNT, 'every new Pod\'s ADD asked its span (node-2)');
      t.comment(`the ADD's wait for node-2's confirmation: ${fig(asked)}`);
      if (policySource === 'controller') {
        // node-2's agent reports every commit to the controller, which answers for it: node-1
        // asks node-2 only when its report is late (a loaded machine).
        const byController = [...outcomes].filter(([pod, o]) => /^[xz]\/n[xz]-/.test(pod) && (o.confirmed ?? 0) > 0).length;
        t.ok(byController > 0, `node-2 confirmed by the controller from its reports for ${byController} of ${2 * COUNT} new Pods`);
        t.match(((await agentStatus(lab, 'node-2')) as { enforcement?: { controlPlane?: unknown } }).enforcement?.controlPlane, { realizedReports: { connected: true } }, 'node-2 reports what it enforces');
      }
    });

    t.test('the Service ranges come from the lab\'s ServiceCIDRs, and one added later is followed', async (t) => {
      type Ranges = { serviceCIDRs?: { cidrs: string[]; source: string; outside?: unknown[] } };
      const ranges = async () => ((await agentStatus(lab, 'node-1')) as Ranges).serviceCIDRs;
      const lab4 = '10.96.0.0/16';
      if (policySource === 'standalone') t.match(await ranges(), { source: 'ServiceCIDR kubernetes', outside: [] }, 'found, not configured; no Service outside them');
      // A controller-mode agent holds no Service: which ClusterIPs lie outside the ranges is not its to see.
      else t.match(await ranges(), { source: 'ServiceCIDR kubernetes', outside: undefined }, 'found, not configured');
      t.ok((await ranges())?.cidrs.includes(lab4), `the lab's range ${lab4} is used`);
      const extra = join(dir, 'servicecidr.yaml');
      writeFileSync(extra, 'apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: extra}\nspec: {cidrs: [10.97.0.0/16]}\n');
      await labCli(lab, ['apply', '-f', extra]);
      const mangle = () => spawnSync('ip', ['netns', 'exec', nodeNetns(lab, 'node-1'), 'iptables-save', '-t', 'mangle'], { encoding: 'utf8' }).stdout;
      const bridge = () => spawnSync('ovs-ofctl', ['-O', 'OpenFlow15', 'dump-flows', 'br-int'], { env: { ...process.env, OVS_RUNDIR: ovsDir(lab, 'node-1') }, encoding: 'utf8' }).stdout;
      const deadline = Date.now() + 30_000;
      while (!((await ranges())?.cidrs.includes('10.97.0.0/16') && mangle().includes('-d 10.97.0.0/16') && bridge().includes('nw_dst=10.97.0.0/16'))) {
        if (Date.now() > deadline) throw new Error(`the new range was not followed: ${JSON.stringify(await ranges())}`);
        await sleep(100);
      }
      t.match(await ranges(), { source: 'ServiceCIDR extra, kubernetes' }, 'the agent uses the new range');
      t.pass('ANTREA-MANGLE marks it and the bridge sends its traffic through the re-entrance path');
      await labCli(lab, ['delete', '-f', extra]);
      while ((await ranges())?.cidrs.includes('10.97.0.0/16') || mangle().includes('-d 10.97.0.0/16')) {
        if (Date.now() > deadline + 30_000) throw new Error('the removed range stayed');
        await sleep(100);
      }
      t.pass('and drops it once it is gone');
    });

    t.test('node-2\'s agent frozen: a new z Pod is guarded on node-1 until node-2 confirms', async (t) => {
      const thaw = await freezeAgent(t, lab, 'node-2');
      const f = familyOf(0);
      const [talker] = await createTalkers('z', 'gz', 1, () => ({ ip: servers.denyZ[f], port: RECEIVE_PORT + (f === 6 ? 6 : 0) }), 1, 1500);
      const status = (await agentStatus(lab, 'node-1')) as { enforcement?: { newPods?: { guardedPods: { pod: string; nodes: string[] }[] } } };
      t.match(status.enforcement?.newPods?.guardedPods, [{ pod: 'z/gz-0', nodes: ['node-2'] }], 'node-1 guards the new Pod from node-2');
      t.equal(arrivedFrom(addressOf(talker!.pod, f)), 0, `z/gz-0 sent ${talker!.record.sent} datagrams while node-2 did not know it: none arrived`);
      thaw();
      const deadline = Date.now() + 30_000;
      for (;;) {
        const s = (await agentStatus(lab, 'node-1')) as { enforcement?: { newPods?: { guardedPods: unknown[] } } };
        if (s.enforcement?.newPods?.guardedPods.length === 0) break;
        if (Date.now() > deadline) throw new Error('the guard was not lifted within 30 s of node-2 thawing');
        await sleep(100);
      }
      t.pass('the guard is lifted once node-2 confirms');
      const [after] = await createTalkers('x', 'gx', 1, () => ({ ip: servers.onlyX[f], port: 80 }), 5, 500);
      t.ok(after!.record.firstReply !== undefined, 'a new x Pod afterwards is answered');
    });
  });
}
