/**
 * FQDN egress end to end through `sluice-lab up --sluice --ip-family dual` (one node, ptp), with
 * the agent standalone (fqdn-e2e.test.ts) or following sluice-controller (fqdn-e2e-controller.test.ts:
 * the controller sends the fqdn group with no member, the Node learns its Pods' answers): the real
 * agent (its enforcer drives daemon/enforcement/fqdn's FqdnLearning), an Antrea
 * ClusterNetworkPolicy
 *   egress: Allow UDP/TCP 53 to the external host (the user's own DNS rule), Allow TCP 80 to
 *   fqdn "*.example.com", Drop everything else
 * and DNS servers on the lab's external host: over IPv4 answering www.example.com A 198.51.100.10
 * (the external host's "Internet" address, which serves TCP 80), over IPv6 answering
 * www6.example.com AAAA with a second IPv6 address of the external host; TTL 5.
 * Shown with real packets (sluice-lab probe and queries from inside the Pod's namespace), for each
 * family: before DNS the address is dropped; the Pod's query is answered (the IPv6 one over UDP
 * over IPv6, so its response is held by the IPv6 interception flows) and a connection opened right
 * after it succeeds; the address is then allowed while the external host's other address stays
 * dropped; and after the TTL (raised to the agent's 10 s floor) the addresses are dropped again.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import t from 'tap';
import { EXT_IP, EXT_IPV6, EXT_PUBLIC_IP, extNetns, podNetns } from '../../lab/net/names.js';
import { simpleQuery } from '../unit/fqdn-helpers.js';
import { cli, cliJson, skipReason, writeTemp, type ProbeJson } from './labcli-helpers.js';
import { dnsServerProgram, nodeIn, queryProgram } from './fqdn-programs.js';
import { agentStatus } from './enforce-helpers.js';

/** A second IPv6 address of the external host (on its VPC link): the AAAA answer. */
const EXT_WEB6 = 'fd00:77::fb';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const SCENARIO = `apiVersion: v1
kind: Namespace
metadata: {name: fqe, labels: {ns: fqe}}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: fqe, labels: {app: client}}
spec:
  containers: [{name: s, ports: [{name: http, containerPort: 80}]}]
`;

const POLICY = `apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: fqe-fqdn}
spec:
  priority: 1
  appliedTo: [{podSelector: {matchLabels: {app: client}}}]
  egress:
    - action: Allow
      name: dns
      to: [{ipBlock: {cidr: ${EXT_IP}/32}}, {ipBlock: {cidr: "${EXT_IPV6}/128"}}]
      ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]
    - action: Allow
      name: web
      to: [{fqdn: "*.example.com"}]
      ports: [{protocol: TCP, port: 80}]
    - action: Drop
      name: rest
`;

export function fqdnE2eSuite(LAB: string, policySource: 'standalone' | 'controller'): void {
  const n = ['--name', LAB];
  const reason = skipReason();
  if (reason) {
    t.plan(0, reason);
    return;
  }
  const dir = writeTemp({ 'scenario.yaml': SCENARIO, 'policy.yaml': POLICY });
  const dns: { pid?: number | undefined }[] = [];
  const probe = async (probes: object[]): Promise<ProbeJson[]> => {
    const file = join(dir, `probes-${Math.random().toString(36).slice(2)}.json`);
    (await import('node:fs')).writeFileSync(file, JSON.stringify(probes));
    return cliJson<ProbeJson[]>(['probe', '--probes', file, '-o', 'json', ...n]);
  };
  const web = (ip: string, port = 80) => ({ from: 'fqe/client', to: `ip:${ip}`, port, protocol: 'TCP' });
  const verdicts = async (...ps: object[]) => (await probe(ps)).map((r) => `${r.to}:${r.port} ${r.verdict}`);
  /** Polls until the probe gives `want` (flows follow API events asynchronously), up to `ms`. */
  const until = async (p: object, want: string, ms: number): Promise<string> => {
    const end = Date.now() + ms;
    let got = '';
    do {
      got = (await probe([p]))[0]!.verdict;
      if (got === want) return got;
      await sleep(500);
    } while (Date.now() < end);
    return got;
  };

  t.before(async () => {
    await cli(['down', ...n]);
  });
  t.teardown(async () => {
    for (const d of dns) {
      try {
        if (d.pid) process.kill(d.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await cli(['down', ...n]);
    rmSync(dir, { recursive: true, force: true });
  });

  t.test(`fqdn egress follows DNS through the real agent (${policySource})`, async (t) => {
    const up = await cli(['up', ...n, '--nodes', '1', '--primary', 'ptp', '--ip-family', 'dual', '--sluice', '--policy-source', policySource, '-f', join(dir, 'scenario.yaml')]);
    t.equal(up.code, 0, `up exits 0 (stderr: ${up.stderr.slice(-2000)})`);
    if (up.code !== 0) return;
    const status = (await agentStatus(LAB, 'node-1')) as { enforcement?: { controlPlane?: { connected?: boolean } } };
    if (policySource === 'controller') t.equal(status.enforcement?.controlPlane?.connected, true, 'the agent follows sluice-controller');
    else t.equal(status.enforcement?.controlPlane, undefined, 'the agent computes its own policy state');
    await execa('ip', ['netns', 'exec', extNetns(LAB), 'ip', '-6', 'addr', 'add', `${EXT_WEB6}/64`, 'dev', 'eth0', 'nodad']);
    t.same(await verdicts(web(EXT_PUBLIC_IP), web(EXT_IP), web(EXT_WEB6)), [`ip:${EXT_PUBLIC_IP}:80 allow`, `ip:${EXT_IP}:80 allow`, `ip:${EXT_WEB6}:80 allow`], 'without policy the external host is reachable');

    const ap = await cli(['apply', '-f', join(dir, 'policy.yaml'), ...n]);
    t.equal(ap.code, 0, `apply exits 0 (stderr: ${ap.stderr})`);
    t.equal(await until(web(EXT_PUBLIC_IP), 'drop', 15_000), 'drop', 'policy applied: before DNS the address is dropped');
    t.same(await verdicts(web(EXT_IP)), [`ip:${EXT_IP}:80 drop`], 'and so is the external host\'s other address');

    const zone = { 'www.example.com': [EXT_PUBLIC_IP, 5], 'www6.example.com': [EXT_WEB6, 5] } as Record<string, [string, number]>;
    for (const listen of [EXT_IP, EXT_IPV6]) {
      const proc = execa('ip', ['netns', 'exec', extNetns(LAB), process.execPath, '--input-type=module', '-e', dnsServerProgram(listen, zone, false)], { reject: false });
      dns.push(proc);
      await new Promise<void>((resolve, reject) => {
        proc.stdout?.on('data', (d: Buffer) => { if (d.toString().includes('ready')) resolve(); });
        void proc.then((r) => reject(new Error(`DNS server on ${listen} exited: ${String(r.stderr)}`)));
      });
    }

    const q = await nodeIn(podNetns(LAB, 'fqe', 'client'), queryProgram(EXT_IP, simpleQuery('www.example.com', 0x6666), 'udp', true));
    t.equal(q.code, 'ANSWER', 'the Pod\'s DNS query is answered through the agent\'s hold');
    t.equal(q.connect, 'CONNECTED', 'a connection opened right after the answer is allowed');
    t.comment(`query RTT seen by the Pod: ${Number(q.ms).toFixed(1)} ms`);
    t.same(await verdicts(web(EXT_PUBLIC_IP), web(EXT_IP), web(EXT_PUBLIC_IP, 81)), [
      `ip:${EXT_PUBLIC_IP}:80 allow`, `ip:${EXT_IP}:80 drop`, `ip:${EXT_PUBLIC_IP}:81 drop`,
    ], 'the learned address is allowed on the rule\'s port only; other addresses stay dropped');

    const nx = await nodeIn(podNetns(LAB, 'fqe', 'client'), queryProgram(EXT_IP, simpleQuery('nothing.example.com', 0x7777), 'udp', false));
    t.same([nx.code, nx.rcode], ['ANSWER', 3], 'NXDOMAIN answers reach the Pod');

    t.same(await verdicts(web(EXT_WEB6)), [`ip:${EXT_WEB6}:80 drop`], 'IPv6: before DNS the address is dropped');
    const q6 = await nodeIn(podNetns(LAB, 'fqe', 'client'), queryProgram(EXT_IPV6, simpleQuery('www6.example.com', 0x6767, 28), 'udp', true));
    t.equal(q6.code, 'ANSWER', 'the Pod\'s AAAA query over IPv6 is answered through the agent\'s hold');
    t.equal(q6.connect, 'CONNECTED', `a connection to the AAAA answer (${String(q6.ip)}) opened right after it is allowed`);
    t.same(await verdicts(web(EXT_WEB6), web(EXT_IPV6), web(EXT_WEB6, 81)), [
      `ip:${EXT_WEB6}:80 allow`, `ip:${EXT_IPV6}:80 drop`, `ip:${EXT_WEB6}:81 drop`,
    ], 'IPv6: the learned address is allowed on the rule\'s port only; the external host\'s other address stays dropped');

    // TTL 5 is raised to the agent's 10 s floor; the agent's expiry timer fires at that expiry.
    t.equal(await until(web(EXT_PUBLIC_IP), 'drop', 25_000), 'drop', 'after the TTL the address is dropped again');
    t.equal(await until(web(EXT_WEB6), 'drop', 25_000), 'drop', 'and so is the IPv6 one');
  });
}
