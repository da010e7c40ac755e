/**
 * The chaos suite's two scenarios at the edges of time:
 *  - new Pods talking from their first moment (the lab's talk-on-start workloads) to Pods on the
 *    other node: not one datagram of a Pod that a Drop names may be answered, and every Pod that
 *    a policy admits must have its very first datagram answered (no startup blackout); the
 *    figure is each admitted Pod's sandbox → first answer;
 *  - a quarantine applied while a flow runs: the flow must stop, and the figure is the API change
 *    → its last answered datagram.
 * A datagram answered is one that arrived: the servers echo every one. The servers are Pods of
 * their own (y/chaos-drop-z, y/chaos-only-x, one per node), so the other scenarios' probed pairs
 * and their allowed connection are not touched by these policies.
 */
import { readFileSync } from 'node:fs';
import { newPodAdmissions } from '../agent.js';
import { TALK_ANNOTATION } from '../cluster/kubelet.js';
import { resolveKind } from '../kinds.js';
import { sleep } from '../net/exec.js';
import { talkFile } from '../net/sandbox.js';
import type { TalkRecord } from '../net/workload.js';
import { clientFor } from '../ops.js';
import type { RestClient } from '../restclient.js';
import type { ChaosRun } from './harness.js';

interface TimeScenarioContext {
  lab: string;
  rest: RestClient;
  nodes: string[];
  /** Reports a broken promise (counted in the scenario's BROKEN column) with what broke. */
  broke(what: string): void;
}

const DROP_Z_TO_YA = {
  apiVersion: 'crd.antrea.io/v1beta1',
  kind: 'ClusterNetworkPolicy',
  metadata: { name: 'chaos-drop-z' },
  spec: {
    priority: 1,
    tier: 'emergency',
    appliedTo: [{ namespaceSelector: { matchLabels: { ns: 'y' } }, podSelector: { matchLabels: { pod: 'chaos-drop-z' } } }],
    ingress: [{ name: 'drop-z', action: 'Drop', from: [{ namespaceSelector: { matchLabels: { ns: 'z' } } }] }],
  },
};
const ONLY_X = {
  apiVersion: 'networking.k8s.io/v1',
  kind: 'NetworkPolicy',
  metadata: { name: 'chaos-only-x', namespace: 'y' },
  spec: { podSelector: { matchLabels: { pod: 'chaos-only-x' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: 'x' } } }] }] },
};

const readTalk = (lab: string, ns: string, name: string): TalkRecord | undefined => {
  try {
    return JSON.parse(readFileSync(talkFile(lab, ns, name), 'utf8')) as TalkRecord;
  } catch {
    return undefined;
  }
};

async function waitTalk(lab: string, ns: string, name: string, done: (r: TalkRecord) => boolean, timeoutMs = 90_000): Promise<TalkRecord> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = readTalk(lab, ns, name);
    if (r && done(r)) return r;
    if (Date.now() > deadline) throw new Error(`talking Pod ${ns}/${name}: not ${r ? 'done' : 'started'} within ${timeoutMs / 1000} s`);
    await sleep(100);
  }
}

interface Server {
  node: string;
  ip: string;
}

/** The two servers (UDP echo on 80), on different nodes; created by the first round that needs them. */
async function servers(c: TimeScenarioContext): Promise<{ dropZ: Server; onlyX: Server }> {
  const podKind = resolveKind('pods');
  const out: Server[] = [];
  for (const [i, name] of ['chaos-drop-z', 'chaos-only-x'].entries()) {
    const node = c.nodes[i % c.nodes.length]!;
    await c.rest.apply(podKind, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: 'y', labels: { pod: name } },
      spec: { nodeName: node, containers: [{ name: 'server', image: 'sluice-lab/workload', ports: [{ containerPort: 80, protocol: 'UDP' }] }] },
    } as never);
    const deadline = Date.now() + 60_000;
    for (;;) {
      const p = (await c.rest.get(podKind, name, 'y')) as { status?: { phase?: string; podIP?: string } };
      if (p.status?.phase === 'Running' && p.status.podIP) {
        out.push({ node, ip: p.status.podIP });
        break;
      }
      if (Date.now() > deadline) throw new Error(`server y/${name} not running within 60 s`);
      await sleep(100);
    }
  }
  return { dropZ: out[0]!, onlyX: out[1]! };
}

const otherNode = (c: TimeScenarioContext, node: string) => c.nodes.find((n) => n !== node) ?? node;

/** A Pod on `node` that sends a UDP datagram to ip:80 every `everyMs` for `forMs` from its first moment. */
async function talker(c: TimeScenarioContext, ns: string, name: string, node: string, ip: string, everyMs: number, forMs: number): Promise<void> {
  await c.rest.apply(resolveKind('pods'), {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { chaos: 'talker' }, annotations: { [TALK_ANNOTATION]: `udp,${ip},80,${everyMs},${forMs}` } },
    spec: { nodeName: node, containers: [{ name: 'app', image: 'sluice-lab/workload' }] },
  } as never);
}

/** One round of new Pods: `count` in z towards y/chaos-drop-z, `count` in x towards y/chaos-only-x. Returns sandbox → first answer per admitted Pod. */
async function newPodsRound(c: TimeScenarioContext, round: number, count: number): Promise<number[]> {
  const { dropZ, onlyX } = await servers(c);
  const podKind = resolveKind('pods');
  await c.rest.apply(resolveKind('acnp'), DROP_Z_TO_YA as never);
  await c.rest.apply(resolveKind('networkpolicies'), ONLY_X as never);
  const z = Array.from({ length: count }, (_, i) => `chaos-nz-${round}-${i}`);
  const x = Array.from({ length: count }, (_, i) => `chaos-nx-${round}-${i}`);
  try {
    for (const name of z) await talker(c, 'z', name, otherNode(c, dropZ.node), dropZ.ip, 1, 1000);
    for (const name of x) await talker(c, 'x', name, otherNode(c, onlyX.node), onlyX.ip, 5, 1000);
    for (const name of z) {
      const r = await waitTalk(c.lab, 'z', name, (t) => t.done);
      if (r.replies > 0) c.broke(`new Pod z/${name}: ${r.replies} of its ${r.sent} datagrams reached y/chaos-drop-z, which drops z`);
    }
    const records = new Map<string, TalkRecord>();
    for (const name of x) records.set(name, await waitTalk(c.lab, 'x', name, (t) => t.done));
    // Every x Pod has talked, so every ADD is in the log.
    const admissions = newPodAdmissions(c.lab, otherNode(c, onlyX.node));
    const ms: number[] = [];
    for (const [name, r] of records) {
      // A node that did not confirm within the ADD's wait (a loaded machine) has the Pod start
      // guarded from its Pods: its first datagrams are dropped on purpose, and that is no blackout.
      if ((admissions.get(`x/${name}`)?.guarded.length ?? 0) > 0) continue;
      if (r.firstAnsweredSeq !== 0) c.broke(`new Pod x/${name}: its first datagram to y/chaos-only-x (which admits x) was not answered (first answered: ${r.firstAnsweredSeq ?? 'none'})`);
      if (r.firstReply !== undefined) ms.push(r.firstReply - r.since);
    }
    return ms;
  } finally {
    for (const [ns, names] of [['z', z], ['x', x]] as const) for (const name of names) await c.rest.delete(podKind, name, ns).catch(() => undefined);
    await c.rest.delete(resolveKind('acnp'), DROP_Z_TO_YA.metadata.name).catch(() => undefined);
    await c.rest.delete(resolveKind('networkpolicies'), ONLY_X.metadata.name, 'y').catch(() => undefined);
  }
}

/** One quarantine of y/chaos-drop-z from z while a z Pod's flow to it runs; returns the API change → its last answered datagram. */
async function quarantineRound(c: TimeScenarioContext, round: number): Promise<number> {
  const { dropZ } = await servers(c);
  const name = `chaos-q-${round}`;
  await talker(c, 'z', name, otherNode(c, dropZ.node), dropZ.ip, 5, 8000);
  try {
    await waitTalk(c.lab, 'z', name, (t) => t.replies >= 20, 60_000);
    const changed = Date.now();
    await c.rest.apply(resolveKind('acnp'), DROP_Z_TO_YA as never);
    const r = await waitTalk(c.lab, 'z', name, (t) => t.done, 60_000);
    const last = r.lastReply ?? 0;
    if (last > changed + 5000) c.broke(`quarantine: z/${name}'s flow to y/chaos-drop-z went on ${last - changed} ms after the change`);
    return Math.max(0, last - changed);
  } finally {
    await c.rest.delete(resolveKind('pods'), name, 'z').catch(() => undefined);
    await c.rest.delete(resolveKind('acnp'), DROP_Z_TO_YA.metadata.name).catch(() => undefined);
  }
}

/** New Pods' first packets, then connections a change denies; the two share their servers and a round counter for Pod names. */
export async function edgesOfTime(run: ChaosRun): Promise<void> {
  let timeRound = 0;
  const timeCtx: TimeScenarioContext = {
    lab: run.lab,
    rest: clientFor(run.info),
    nodes: run.info.nodes,
    broke: (what) => {
      run.broken++;
      console.error(`edges of time: ${what}`);
    },
  };
  const newPods = run.quick ? 5 : 10;
  await run.scenario(`new Pods: ${newPods} of z (dropped) and ${newPods} of x (admitted only) talking from their first moment, per round`, run.quick ? 1 : 3, () => newPodsRound(timeCtx, timeRound++, newPods));
  await run.scenario('quarantine from z while a z flow runs (recovery: change → last datagram)', run.quick ? 2 : 5, () => quarantineRound(timeCtx, timeRound++));
}
