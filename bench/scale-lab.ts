/**
 * Whole-agent scale bench (prints figures, asserts nothing): real sluice-agents, each with its own
 * Open vSwitch, real local Pods and real packets, in a cluster of bench/scale's size.
 *
 * bench/scale measures the controller and the agents' policy side at 150 000 Pods, in processes
 * without a bridge. This bench measures what that cannot: a whole agent as a Node runs it.
 *
 * - The cluster of bench/cluster-model.ts (`--pods` Pods, 20 per Namespace, on `--nodes` Nodes,
 *   `--policies` policies of every kind) is written as a seed, and `sluice-lab up --seed` starts a
 *   two-node lab with it: the lab's API server holds the whole cluster, sluice-controller computes
 *   it, and the lab's nodes, node-1 and node-2, are two of the model's Nodes. The model's Pods on
 *   them (30 each at the default size) run for real: the lab's kubelet creates their sandboxes
 *   through the CNI chain (ptp, then sluice) and reports their addresses.
 * - The other Nodes' agents are stand-ins: each reports to the controller that its bridge enforces
 *   every version (standInReports), and a responder answers yes to any question asked of them
 *   directly (standInAgents). The new-Pod admissions of the lab's Pods: how many span Nodes the
 *   controller confirmed, how many questions went to agents directly, the ADD's time.
 * - Once every local Pod runs and the agents' flows stand still: each agent's RSS (current and
 *   peak) and JS heap, the flows on its bridge, the controller's RSS.
 * - Real packets: a sample of connections between the lab's Pods, each verdict compared with the
 *   policy engine's (the evaluator, fed the API server's whole cluster as it then is).
 * - A churn, `--reps` times each kind: events in node-1's span (a Pod like a member of node-1's
 *   largest AddressGroup created on a remote Node and deleted; a NetworkPolicy of a node-1 Pod's
 *   Namespace made to select all its Pods and none) and one outside it (a remote Pod's label no
 *   policy reads). Per kind: API write -> node-1's flows committed on its
 *   bridge (the agent's log), with the part of it in the agent (from the first change it took in)
 *   and in the userspace datapath's megaflow purge (the lab's netdev datapath only), and node-1's
 *   agent CPU in the second from the write (its whole
 *   process, every thread, from /proc), beside its CPU in an idle second just before.
 * - After the churn, each agent's memory again 15 s after its quiet collection has run (or 2 min).
 *
 * Needs root and the lab's packages (npm run prepare-host). The lab is removed at the end, and
 * also when the bench fails.
 *
 * usage: node --max-old-space-size=8192 dist/bench/scale-lab.js [--pods 150000] [--nodes 5000] [--policies 10000] [--reps 10] [--probes 200] [--keep]
 * (--keep: the lab stays up at the end, to look at.)
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PolicyEngine } from '../daemon/policy/engine.js';
import type { KubeObject, Probe } from '../daemon/policy/types.js';
import { POLICY_INPUT_RESOURCES } from '../daemon/enforcement/watch/resources.js';
import { agentLogPath, newPodAdmissions } from '../lab/agent.js';
import { serviceAccountToken } from '../lab/apiserver/satoken.js';
import { CONTROLLER_NAMESPACE, controllerPidPath } from '../lab/controller.js';
import { serviceAccountKeyPath } from '../lab/control.js';
import { REALIZED_VIEWS_PATH, STORE_HEADER } from '../daemon/controlplane/types.js';
import { resolveKind } from '../lab/kinds.js';
import { nodeStateDir, vpcNetns } from '../lab/net/names.js';
import { missingLabPrerequisites } from '../lab/net/prereq.js';
import { listNetns } from '../lab/net/topology.js';
import { CONFIG_DEFAULTS } from '../daemon/config.js';
import { clientFor, down, probeLab, up } from '../lab/ops.js';
import { servedPorts } from '../lab/scenario.js';
import { agentHeapMiB, agentPid, agentStatus, flowCount, LogTail, pct, processCpuMs, processMemoryMiB, sleep } from './lab-agent.js';
import { clusterModel, numberArg, scaleClusterArgs } from './cluster-model.js';
import { writeClusterSeed } from './cluster-seed.js';

const { pods: PODS, nodes: NODES, policies: POLICIES } = scaleClusterArgs();
const REPS = numberArg('reps', 10);
const PROBES = numberArg('probes', 200);
const KEEP = process.argv.includes('--keep');
const PODS_PER_NS = 20;
const LAB = 'scale';
const LAB_NODES = ['node-1', 'node-2'];
const POD = resolveKind('pods');
/** Where bench/cluster-model.ts puts its Nodes' addresses. */
const MODEL_NODE_CIDR = '172.20.0.0/16';
const REALIZATION_PORT = CONFIG_DEFAULTS.realizationPort;
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(x < 10 ? 2 : 1) : '-');

if (process.getuid?.() !== 0) {
  console.log('bench/scale-lab: skipped: it builds a lab (network namespaces, Open vSwitch), which needs root');
  process.exit(0);
}
const missing = missingLabPrerequisites();
if (missing.length > 0) {
  console.log(`bench/scale-lab: skipped: the lab needs ${missing.join(', ')} (npm run prepare-host installs them)`);
  process.exit(0);
}

/**
 * The agents of the Nodes outside the lab, as far as a lab agent sees them: each new local Pod's
 * agent asks the Nodes whose rules name the Pod, and that the controller did not confirm from
 * their reports, whether they enforce it (enforcement/newpods), at
 * their addresses (the model's 172.20.0.0/16, routed to the lab's VPC namespace). A responder there
 * takes every such address and answers yes at once, as healthy agents would; without it no answer
 * comes and every local Pod stays guarded from those Nodes (fail closed, as designed). It counts
 * the questions.
 */
async function standInAgents(): Promise<{ questions(): Promise<number>; stop(): void }> {
  const netns = vpcNetns(LAB);
  for (const deadline = Date.now() + 120_000; !(await listNetns()).includes(netns); await sleep(100)) {
    if (Date.now() > deadline) throw new Error(`the lab's ${netns} namespace did not appear within 120 s`);
  }
  const ip = spawnSync('ip', ['netns', 'exec', netns, 'ip', 'route', 'replace', 'local', MODEL_NODE_CIDR, 'dev', 'lo'], { encoding: 'utf8' });
  if (ip.status !== 0) throw new Error(`routing ${MODEL_NODE_CIDR} in ${netns}: ${ip.stderr}`);
  const server = `let n = 0; require('node:http').createServer((req, res) => {
    if (req.url === '/count') return res.end(String(n));
    n++; res.setHeader('content-type', 'application/json'); res.end('{"realized":true}');
  }).listen(${REALIZATION_PORT}, '0.0.0.0', () => console.log('listening'));`;
  const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', server], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the stand-in agents' responder exited (${code})`)));
  });
  return {
    questions: async () => {
      const r = spawnSync('ip', ['netns', 'exec', netns, 'curl', '-s', `http://127.0.0.1:${REALIZATION_PORT}/count`], { encoding: 'utf8' });
      return Number(r.stdout);
    },
    stop: () => child.kill(),
  };
}

/**
 * The realized-views reports of the Nodes outside the lab (controlplane/realized-reporter.ts): a
 * stand-in for each holds its own request to the controller, authenticated as its Node's agent,
 * and reports that its bridge enforces every version, as a healthy agent does once it commits.
 * The controller then confirms those Nodes for a new Pod as it would real ones, and the lab's
 * agents ask them nothing. Opened as soon as the controller's CA and port are known (before the
 * lab's Pods start), and opened again until every one is taken.
 */
async function standInReports(nodes: string[]): Promise<{ open(): number; stop(): void }> {
  const caPath = join(nodeStateDir(LAB, LAB_NODES[0]!), 'controller-ca.crt');
  const pidPath = controllerPidPath(LAB, 'controller-0');
  for (const deadline = Date.now() + 300_000; !(existsSync(caPath) && existsSync(pidPath)); await sleep(100)) {
    if (Date.now() > deadline) throw new Error(`the lab's controller did not start within 300 s (${caPath}, ${pidPath})`);
  }
  const args = readFileSync(`/proc/${readFileSync(pidPath, 'utf8').trim()}/cmdline`, 'utf8').split('\0');
  const port = Number(args[args.indexOf('--listen') + 1]?.split(':').pop());
  const ca = readFileSync(caPath);
  const key = readFileSync(serviceAccountKeyPath(LAB), 'utf8').trim();
  const agent = new https.Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY });
  // The largest version a report may carry (30 digits): above any a store issues.
  const EVERY = '9'.repeat(30);
  const open = new Map<string, http.ClientRequest>();
  let stopped = false;
  const report = (node: string) => new Promise<void>((resolve) => {
    const token = serviceAccountToken(key, CONTROLLER_NAMESPACE, 'sluice-agent', { podName: `sluice-agent-${node}`, nodeName: node });
    const req = https.request({ host: '127.0.0.1', port, path: REALIZED_VIEWS_PATH, method: 'POST', ca, agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson' } });
    req.on('response', (res) => {
      const store = res.headers[STORE_HEADER];
      if (res.statusCode === 200 && typeof store === 'string') {
        req.write(`${JSON.stringify({ store, versions: { NetworkPolicy: EVERY, AppliedToGroup: EVERY, AddressGroup: EVERY } })}\n`);
        open.set(node, req);
        res.on('close', () => open.delete(node));
        res.on('error', () => undefined);
      } else req.destroy();
      res.resume();
      resolve();
    });
    req.on('error', () => resolve());
    req.flushHeaders();
  });
  const ready = () => new Promise<boolean>((resolve) => {
    const req = https.get({ host: '127.0.0.1', port, path: '/readyz', ca, agent }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
  });
  // As agents do, they back off while the controller cannot take them: every attempt costs it a
  // TLS handshake and a TokenReview, and thousands at once would starve its first lists.
  void (async () => {
    while (!stopped && !(await ready())) await sleep(500);
    while (!stopped && open.size < nodes.length) {
      const missing = nodes.filter((n) => !open.has(n));
      for (let i = 0; i < missing.length && !stopped; i += 200) await Promise.all(missing.slice(i, i + 200).map(report));
      if (open.size < nodes.length) await sleep(2000);
    }
  })();
  return {
    open: () => open.size,
    stop: () => {
      stopped = true;
      for (const r of open.values()) r.destroy();
    },
  };
}

// ---------------------------------------------------------------------------- the cluster

const dir = mkdtempSync(join(tmpdir(), 'sluice-scale-lab-'));
const seed = join(dir, 'seed.json');
const namespaces = Math.round(PODS / PODS_PER_NS);
console.log(`== scale-lab: ${PODS} Pods in ${namespaces} Namespaces on ${NODES} Nodes (the lab runs ${LAB_NODES.join(' and ')}), ${POLICIES} policies (load ${loadavg()[0]!.toFixed(1)})`);
let npCandidates: KubeObject[];
let modelNodes: string[];
{
  const model = clusterModel({ namespaces, podsPerNamespace: PODS_PER_NS, nodes: NODES, policies: POLICIES });
  const labNamespaces = new Set(model.cluster.filter((o) => o.kind === 'Pod' && LAB_NODES.includes(String(o.spec?.nodeName))).map((o) => o.metadata.namespace));
  modelNodes = model.cluster.filter((o) => o.kind === 'Node').map((o) => o.metadata.name);
  npCandidates = model.policies.filter((p) => p.kind === 'NetworkPolicy' && p.apiVersion === 'networking.k8s.io/v1' && labNamespaces.has(p.metadata.namespace));
  // The lab's Pods as the scheduler leaves them, bound and not running yet: their sandboxes, and so
  // their addresses, come from the lab's kubelets (a seeded Pod's status would claim an address of
  // the model's, which the new-Pod gate would wait for the kubelet to correct).
  for (const o of model.cluster) if (o.kind === 'Pod' && LAB_NODES.includes(String(o.spec?.nodeName))) o.status = { phase: 'Pending' };
  writeClusterSeed(seed, [...model.cluster, ...model.policies]);
}

let labUp = false;
let responder: Awaited<ReturnType<typeof standInAgents>> | undefined;
let reports: Awaited<ReturnType<typeof standInReports>> | undefined;
const cleanup = async () => {
  responder?.stop();
  reports?.stop();
  if (labUp && KEEP) console.log(`lab ${LAB} left up (--keep): sluice-lab down --name ${LAB} removes it`);
  else if (labUp) await down({ name: LAB, all: false }, () => undefined).catch((err: Error) => console.log(`removing lab ${LAB}: ${err.message}`));
  rmSync(dir, { recursive: true, force: true });
};
process.on('SIGINT', () => void cleanup().finally(() => process.exit(130)));

try {
  await run();
} finally {
  await cleanup();
}

async function run(): Promise<void> {
  const t0 = performance.now();
  labUp = true;
  const upDone = up({ name: LAB, nodes: LAB_NODES.length, primary: 'ptp', sluice: true, files: [], seed, policySource: 'controller' }, () => undefined);
  upDone.catch(() => undefined); // awaited below
  // Ready long before the first Pod starts (the supervisor first loads the cluster and starts the
  // controller and the agents). A question it missed would leave a guard, which the agent lifts
  // when it asks again; the figures below are taken once no guard is left.
  responder = await standInAgents();
  reports = await standInReports(modelNodes.filter((n) => !LAB_NODES.includes(n)));
  const { info } = await upDone;
  const rest = clientFor(info);
  const upS = (performance.now() - t0) / 1000;

  // Every model Pod of the lab's nodes running in its sandbox, with the lab's address.
  let local: KubeObject[] = [];
  for (const deadline = Date.now() + 600_000; ; await sleep(500)) {
    local = (await Promise.all(LAB_NODES.map((n) => rest.list(POD, { fieldSelector: `spec.nodeName=${n}` })))).flatMap((l) => l.items);
    if (local.length > 0 && local.every((p) => p.status?.phase === 'Running' && String(p.status?.podIP ?? '').startsWith('10.10.'))) break;
    if (Date.now() > deadline) throw new Error(`the lab's Pods did not all run within 600 s: ${local.filter((p) => p.status?.phase !== 'Running').map((p) => `${p.metadata.namespace}/${p.metadata.name} ${String(p.status?.phase)}`).slice(0, 5).join(', ')}`);
  }
  const podsS = (performance.now() - t0) / 1000;
  type NewPodsStatus = { newPods?: { guardedPods?: { pod: string }[]; spanNodes?: number; confirmedByController?: number } };
  const guarded = () => LAB_NODES.flatMap((n) => (agentStatus(LAB, n)?.enforcement as NewPodsStatus | undefined)?.newPods?.guardedPods ?? [{ pod: `${n}: /status unavailable` }]);
  for (const deadline = Date.now() + 300_000; guarded().length > 0; await sleep(500)) {
    if (Date.now() > deadline) throw new Error(`Pods still guarded 300 s after they ran: ${guarded().slice(0, 3).map((g) => g.pod).join(', ')}`);
  }
  const tails = new Map(LAB_NODES.map((n) => [n, new LogTail(agentLogPath(LAB, n))]));
  await Promise.all([...tails.values()].map((t) => t.settle()));
  const admissions = LAB_NODES.flatMap((n) => [...newPodAdmissions(LAB, n).values()]);
  // Each agent's /status read once for both figures.
  const newPods = LAB_NODES.map((n) => (agentStatus(LAB, n)?.enforcement as NewPodsStatus | undefined)?.newPods);
  const spanNodes = newPods.reduce((sum, p) => sum + (p?.spanNodes ?? 0), 0);
  const confirmed = newPods.reduce((sum, p) => sum + (p?.confirmedByController ?? 0), 0);
  console.log(`the controller's answers named ${spanNodes} span Nodes and confirmed ${confirmed} of them from their agents' reports (${reports.open()} stand-ins reporting); ` +
    `${await responder.questions()} questions asked of agents directly`);
  console.log('new-Pod admissions of the lab\'s Pods (CNI ADD): ' +
    `p50 ${f1(pct(admissions.map((a) => a.ms), 50))} ms, max ${f1(Math.max(...admissions.map((a) => a.ms)))} ms; ${admissions.filter((a) => a.guarded.length > 0).length} of ${admissions.length} started guarded`);
  console.log(`lab up ${upS.toFixed(1)} s after the start (API server loaded, controller serving, agents running); the lab's ${local.length} Pods running ${podsS.toFixed(1)} s after it; flows standing still ${((performance.now() - t0) / 1000).toFixed(1)} s after it`);

  const controllerPid = Number(readFileSync(controllerPidPath(LAB, 'controller-0'), 'utf8').trim());
  const memory = () => LAB_NODES.map((n) => {
    const p = processMemoryMiB(agentPid(LAB, n));
    const heap = agentHeapMiB(LAB, n);
    return `${n}: agent RSS ${p.rss.toFixed(0)} MiB (peak ${p.peak.toFixed(0)}), JS heap ${heap ? `${heap.used.toFixed(0)} of ${heap.total.toFixed(0)} MiB` : '?'}, ${flowCount(LAB, n)} flows on its bridge, ${local.filter((q) => q.spec?.nodeName === n).length} local Pods`;
  }).join('\n  ');
  console.log(`whole agents at rest:\n  ${memory()}\n  controller RSS ${processMemoryMiB(controllerPid).rss.toFixed(0)} MiB`);

  // ---------------------------------------------------------------------- real packets

  {
    const engine = new PolicyEngine();
    let objects = 0;
    for (const r of POLICY_INPUT_RESOURCES) {
      let items: KubeObject[];
      try {
        // By path: a plural alone names two kinds (networkpolicies, clusternetworkpolicies).
        items = (await rest.request<{ items: KubeObject[] }>('GET', r.path)).items;
      } catch {
        continue; // a kind this API server does not serve
      }
      for (const o of items) engine.upsert({ ...o, apiVersion: r.apiVersion, kind: r.kind });
      objects += items.length;
    }
    let rand = 7;
    // A fixed sequence (a linear congruential generator): the same sample in every run.
    const next = (n: number) => {
      rand = (rand * 1103515245 + 12345) % 2 ** 31;
      return rand % n;
    };
    const probes: Probe[] = [];
    for (let i = 0; probes.length < PROBES && i < PROBES * 4; i++) {
      const from = local[next(local.length)]!;
      const to = local[next(local.length)]!;
      const ports = servedPorts(to);
      if (from === to || ports.length === 0) continue;
      const p = ports[next(ports.length)]!;
      probes.push({ from: `${from.metadata.namespace}/${from.metadata.name}`, to: `${to.metadata.namespace}/${to.metadata.name}`, port: p.port, protocol: p.protocol });
    }
    const results = await probeLab(info, probes);
    const differ = results.filter((r, i) => r.verdict !== engine.evaluate(probes[i]!).verdict);
    const allowed = results.filter((r) => r.verdict === 'allow').length;
    console.log(`real packets: ${results.length} connections between the lab's Pods (${allowed} allowed, ${results.length - allowed} not), each compared with the evaluator fed the whole cluster (${objects} objects): ${differ.length} differed` +
      differ.slice(0, 5).map((r) => `\n  ${r.from} -> ${r.to} ${r.protocol}/${r.port}: datapath ${r.verdict}`).join(''));
  }

  // ---------------------------------------------------------------------- new Pods, the lab running

  // A real Pod started on node-1 once everything stands still, like one of its own (the same
  // Namespace and labels, so the same span), then deleted: the ADD's time, the span Nodes the
  // controller confirmed from their agents' reports, and the questions asked of agents directly.
  {
    // The steady state: every stand-in reporting (they connect while the lab starts).
    const standIns = modelNodes.length - LAB_NODES.length;
    for (const deadline = Date.now() + 300_000; reports.open() < standIns; await sleep(500)) {
      if (Date.now() > deadline) throw new Error(`only ${reports.open()} of ${standIns} stand-ins report to the controller after 300 s`);
    }
    const template = local.find((p) => p.spec?.nodeName === LAB_NODES[0])!;
    const ns = template.metadata.namespace!;
    const times: number[] = [];
    const confirmedOf: number[] = [];
    const spans: number[] = [];
    let guardedCount = 0;
    const questions0 = await responder.questions();
    for (let i = 0; i < REPS; i++) {
      const name = `bench-new-${i}`;
      await rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: ns, labels: template.metadata.labels ?? {} }, spec: { ...template.spec } });
      let outcome: { ms: number; guarded: string[]; confirmed?: number; span?: number } | undefined;
      for (const deadline = Date.now() + 120_000; !(outcome = newPodAdmissions(LAB, LAB_NODES[0]!).get(`${ns}/${name}`)); await sleep(100)) {
        if (Date.now() > deadline) throw new Error(`${ns}/${name}: no ADD on ${LAB_NODES[0]} within 120 s`);
      }
      times.push(outcome.ms);
      confirmedOf.push(outcome.confirmed ?? 0);
      spans.push(outcome.span ?? 0);
      if (outcome.guarded.length > 0) guardedCount++;
      await rest.delete(POD, name, ns);
      for (const deadline = Date.now() + 120_000; ; await sleep(200)) {
        try {
          await rest.get(POD, name, ns);
        } catch {
          break; // gone: its sandbox was torn down
        }
        if (Date.now() > deadline) throw new Error(`${ns}/${name}: not gone within 120 s of its deletion`);
      }
    }
    const questions = (await responder.questions()) - questions0;
    console.log(`\nnew Pods on ${LAB_NODES[0]} once the lab runs (like ${ns}/${template.metadata.name}, ${REPS} reps): CNI ADD p50 ${f1(pct(times, 50))} ms, max ${f1(Math.max(...times))} ms; ` +
      `span ${pct(spans, 50)} Nodes, ${pct(confirmedOf, 50)} confirmed by the controller (p50); ${questions} questions asked of agents directly; ${guardedCount} of ${REPS} started guarded`);
  }

  // ---------------------------------------------------------------------- churn

  // node-1's largest AddressGroup, and one of its Pod members on a Node outside the lab.
  // (An AddressGroup's members carry no Node: the lab's own Pods are told apart by name.)
  const groups = (await rest.request('GET', `/apis/controlplane.sluice.io/v1beta1/addressgroups?fieldSelector=nodeName=${LAB_NODES[0]}`)) as { items: { metadata: { name: string }; members: { kind: string; ref: string }[] }[] };
  const largest = groups.items.sort((a, b) => b.members.length - a.members.length)[0];
  const localRefs = new Set(local.map((p) => `${p.metadata.namespace}/${p.metadata.name}`));
  const member = largest?.members.find((m) => m.kind === 'pod' && !localRefs.has(m.ref));
  if (!largest || !member) throw new Error(`${LAB_NODES[0]} holds no AddressGroup with a Pod member outside the lab: no in-span event to make`);
  const [memberNs, memberName] = member.ref.split('/') as [string, string];
  const memberPod = await rest.get(POD, memberName, memberNs);
  const memberLabels = memberPod.metadata.labels ?? {};
  const np = npCandidates[0];
  const outsider = (await rest.list(POD, { fieldSelector: `spec.nodeName=node-${NODES - 1}` })).items[0];
  if (!np || !outsider) throw new Error('the model has no NetworkPolicy in a lab Pod\'s Namespace, or no Pod on its last Node');
  console.log(`node-1's span: ${groups.items.length} AddressGroups, the largest ${largest.metadata.name} with ${largest.members.length} members`);

  const churn: { name: string; inSpan: boolean; run(i: number): Promise<unknown> }[] = [
    {
      name: `a Pod like ${member.ref} created on a remote Node and deleted`, inSpan: true, run: async (i) => {
        if (i % 2) return rest.delete(POD, 'scale-new', memberNs);
        await rest.create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'scale-new', namespace: memberNs, labels: memberLabels }, spec: { nodeName: `node-${NODES - 7}`, containers: memberPod.spec?.containers } });
        // Its address comes with its status (the kubelet's report), as in Kubernetes.
        return rest.patch(POD, 'scale-new', memberNs, { status: { phase: 'Running', podIP: '10.200.0.9', podIPs: [{ ip: '10.200.0.9' }] } }, 'status');
      },
    },
    {
      // Every Pod of the Namespace, then none: the first holds node-1's Pod, the second not, so
      // each edit changes what node-1 enforces, whatever the policy selected before.
      name: `NetworkPolicy ${np.metadata.namespace}/${np.metadata.name}: podSelector edited (all its Namespace's Pods <-> none)`, inSpan: true,
      // (A merge patch: null removes a field, an object merges into it.)
      run: (i) => rest.patch(resolveKind('networkpolicies'), np.metadata.name, np.metadata.namespace,
        { spec: { podSelector: i % 2 ? { matchLabels: { 'bench.sluice.dev/none': 'x' } } : { matchLabels: null, matchExpressions: null } } }),
    },
    {
      name: `a label no policy reads on ${outsider.metadata.namespace}/${outsider.metadata.name} (outside node-1's span)`, inSpan: false,
      run: (i) => rest.patch(POD, outsider.metadata.name, outsider.metadata.namespace, { metadata: { labels: { 'pod-template-hash': `h${i}` } } }),
    },
  ];
  const tail = tails.get(LAB_NODES[0]!)!;
  const pid = agentPid(LAB, LAB_NODES[0]!);
  for (const kind of churn) {
    const realized: number[] = [];
    // The userspace datapath's megaflow purge after each commit (FlowProgrammer.applyDiff: netdev
    // only, the kernel datapath needs none), from the agent's "flows: applied" line.
    const purges: number[] = [];
    // The agent's own part: from the first change it took in to the flows committed (the line's `ms`).
    const inAgent: number[] = [];
    const cpu: number[] = [];
    const idle: number[] = [];
    let silent = 0;
    for (let i = 0; i < REPS; i++) {
      await tail.settle();
      // CPU in one second with nothing to do, then in the second that starts with the write.
      const q0 = processCpuMs(pid);
      await sleep(1000);
      idle.push(processCpuMs(pid) - q0);
      const c0 = processCpuMs(pid);
      const wrote = Date.now();
      await kind.run(i);
      try {
        const passed: string[] = [];
        const { line } = await tail.waitFor(['policy: flows committed'], kind.inSpan ? 10_000 : 1000, passed);
        const committed = JSON.parse(line) as { time: number; ms?: number };
        realized.push(Number(committed.time) - wrote);
        if (committed.ms !== undefined) inAgent.push(committed.ms);
        const applied = passed.findLast((l) => l.includes('"msg":"flows: applied"'));
        if (applied) purges.push(Number((JSON.parse(applied) as { purgeMs?: number }).purgeMs ?? 0));
      } catch {
        silent++;
      }
      await sleep(Math.max(0, wrote + 1000 - Date.now()));
      cpu.push(processCpuMs(pid) - c0);
    }
    const parts = [
      ...(inAgent.length ? [`in the agent from the change taken in p50 ${f1(pct(inAgent, 50))} ms, max ${f1(Math.max(...inAgent))} ms`] : []),
      ...(purges.length ? [`the netdev datapath's megaflow purge p50 ${f1(pct(purges, 50))} ms, max ${f1(Math.max(...purges))} ms`] : []),
    ];
    const split = parts.length ? ` (of which ${parts.join('; ')})` : '';
    console.log(`\n${kind.name} (${REPS} reps):\n  node-1: ${realized.length ? `flows committed p50 ${f1(pct(realized, 50))} ms, p99 ${f1(pct(realized, 99))} ms after the API write${split}` : 'nothing committed'}` +
      `${silent ? ` (${silent} of ${REPS} reps committed nothing within ${kind.inSpan ? 10 : 1} s)` : ''}; agent CPU (the whole process) in the second from the write p50 ${f1(pct(cpu, 50))} ms, in an idle second before it p50 ${f1(pct(idle, 50))} ms`);
  }
  console.log(`\nafter the churn:\n  ${memory()}\n  controller RSS ${processMemoryMiB(controllerPid).rss.toFixed(0)} MiB`);

  // The agents' quiet collection (daemon/quiet-collector.ts) runs at a look every 10 s once the
  // loop has gone quiet: the memory once each has run one more since the churn (or 2 min passed).
  const quietCount = (n: string) => ((agentStatus(LAB, n)?.memory as { quietCollections?: { collections: number } } | undefined)?.quietCollections?.collections ?? 0);
  const counts = new Map(LAB_NODES.map((n) => [n, quietCount(n)]));
  const quietT0 = performance.now();
  while (performance.now() - quietT0 < 120_000 && LAB_NODES.some((n) => quietCount(n) <= counts.get(n)!)) await sleep(1000);
  const ran = LAB_NODES.filter((n) => quietCount(n) > counts.get(n)!);
  // The collection's own working memory is freed with it; the allocator returns such pages after
  // its decay time (jemalloc's, 10 s).
  await sleep(15_000);
  console.log(`once quiet (${((performance.now() - quietT0) / 1000).toFixed(0)} s later; ${ran.length ? `a quiet collection ran on ${ran.join(', ')}, 15 s before` : 'no quiet collection ran'}):\n  ${memory()}`);
}
