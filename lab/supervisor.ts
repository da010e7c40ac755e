/**
 * The lab supervisor: one detached process per lab (started by `sluice-lab up`) that runs the
 * control plane a real cluster would have — the API server (TCP on 127.0.0.1 plus a unix socket in
 * the state dir), a 127.0.0.1:6443 forwarder in every node namespace and a dialer in the VPC
 * namespace (the aggregation layer's way to the nodes), the Node objects, the scheduler, the
 * EndpointSlice, DaemonSet and Deployment controllers, and per node a kubelet (workload Pods), a
 * podman kubelet (DaemonSet and Deployment Pods, lab/cluster/podman-kubelet.ts) and a kube-proxy
 * (and, with --sluice, sluice-agent). It writes control.json once all of that runs; SIGTERM stops it.
 *
 * usage: supervisor.js --name L --nodes N --primary ptp|eks [--sluice [--policy-source standalone|controller]] [--seed FILE] --state-dir /run/sluice-lab/L/
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import net from 'node:net';
import type { KubeObject } from '../daemon/policy/types.js';
import { kubeconfigYaml, startApiServer } from './apiserver/server.js';
import { nodeKubeconfigPath, startAgent } from './agent.js';
import {
  apiDataPath, apiSocketPath, apiTlsSocketPath, controlPath, hostKubeconfigPath, pkiDir, readControl, serviceAccountKeyPath, supervisorPidPath,
  type ControlInfo,
} from './control.js';
import { startEndpointSliceController, startScheduler, type Controller } from './cluster/controllers.js';
import { kubeConfigFor } from './cluster/informers.js';
import { ensureFrontProxyPki, ensureLabPki } from './pki.js';
import { resolveKind } from './kinds.js';
import { startKubelet } from './cluster/kubelet.js';
import { startDaemonSetController } from './cluster/daemonset-controller.js';
import { startDeploymentController } from './cluster/deployment-controller.js';
import { startPodmanKubelet } from './cluster/podman-kubelet.js';
import { startKubeProxy } from './cluster/kube-proxy.js';
import { sleep } from './net/exec.js';
import { hasIPv4, hasIPv6, type IpFamily, nodeIP, nodeIPv6, nodeName, nodeNetns, nodeStateDir, podCidr, podCidr6, repoRoot, serviceCIDRs, stateDir, vpcNetns } from './net/names.js';
import { readLabInfo } from './net/lab.js';
import { ApiError, RestClient } from './restclient.js';
import { jsonLog } from './cluster/workqueue.js';
import { serviceAccountToken } from './apiserver/satoken.js';
import { CONTROLLER_NAMESPACE, controllerLogPath, controllerModeSettings, controllerServiceInNodes, freePort, LAB_CONTROLLER_ARGS, startController } from './controller.js';
import { CA_CONFIGMAP } from '../daemon/controller/tls-secret.js';

const NODE = resolveKind('nodes');
export const API_PORT_IN_NODE = 6443;
/** HTTPS (the lab CA's certificate has IP:127.0.0.1): KUBERNETES_SERVICE_HOST/PORT of a Pod on the node. */
export const API_TLS_PORT_IN_NODE = 6444;

export interface SupervisorArgs {
  name: string;
  nodes: number;
  primary: 'ptp' | 'eks';
  sluice: boolean;
  /** The agents follow sluice-controller, which the supervisor runs on the host. */
  controller?: boolean;
  /** The API server starts with this file's objects, kept in memory only (see startApiServer below). */
  seed?: string;
}

/** The Node object a kubelet registers (pure). */
export function nodeObject(node: string, family: IpFamily = 'ipv4'): KubeObject {
  const cidrs = [...(hasIPv4(family) ? [podCidr(node)] : []), ...(hasIPv6(family) ? [podCidr6(node)] : [])];
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: node,
      labels: { 'kubernetes.io/hostname': node, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': process.arch === 'arm64' ? 'arm64' : 'amd64' },
    },
    spec: { podCIDR: cidrs[0], podCIDRs: cidrs },
  };
}

/** A node's uplink keeps IPv4 in every family (the control plane speaks it); IPv6 is added beside it. */
export function nodeStatus(node: string, now: string, family: IpFamily = 'ipv4'): Record<string, unknown> {
  return {
    addresses: [
      { type: 'InternalIP', address: nodeIP(node) },
      ...(hasIPv6(family) ? [{ type: 'InternalIP', address: nodeIPv6(node) }] : []),
      { type: 'Hostname', address: node },
    ],
    conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'sluice-lab kubelet is posting ready status', lastHeartbeatTime: now, lastTransitionTime: now }],
    nodeInfo: { operatingSystem: 'linux', architecture: process.arch, kubeletVersion: 'v1.31.0-sluice-lab', kubeProxyVersion: 'v1.31.0-sluice-lab', containerRuntimeVersion: 'sluice-lab://1', osImage: 'sluice lab node', kernelVersion: '', machineID: '', systemUUID: '', bootID: '' },
  };
}

/** Registers a lab node (keeping labels someone added, like a kubelet re-registering). */
async function registerNode(rest: RestClient, node: string, family: IpFamily): Promise<void> {
  const want = nodeObject(node, family);
  const existing = await rest.tryGet(NODE, node);
  if (!existing) {
    await rest.create(NODE, want);
  } else {
    const labels = { ...(existing.metadata.labels ?? {}), ...want.metadata.labels };
    await rest.update(NODE, { ...existing, metadata: { ...existing.metadata, labels }, spec: { ...existing.spec, ...want.spec } });
  }
  await rest.patch(NODE, node, undefined, { status: nodeStatus(node, new Date().toISOString(), family) }, 'status');
}

function startForwarder(lab: string, node: string, log: ReturnType<typeof jsonLog>): ChildProcess {
  const script = join(repoRoot(), 'dist', 'lab', 'forwarder.js');
  const logFile = openSync(join(nodeStateDir(lab, node), 'forwarder.log'), 'a');
  const child = spawn(
    'ip',
    [
      'netns', 'exec', nodeNetns(lab, node), process.execPath, script,
      '--listen', `127.0.0.1:${API_PORT_IN_NODE}`, '--unix', apiSocketPath(lab),
      '--listen', `127.0.0.1:${API_TLS_PORT_IN_NODE}`, '--unix', apiTlsSocketPath(lab),
      '--parent', String(process.pid),
    ],
    { stdio: ['ignore', logFile, logFile] },
  );
  closeSync(logFile);
  child.on('exit', (code, signal) => {
    if (!stopping) log('error', `forwarder in ${node} exited`, { code, signal });
  });
  return child;
}

const vpcDialSocketPath = (lab: string): string => join(stateDir(lab), 'vpc-dial.sock');

/** The forwarder that opens connections from the VPC namespace for the host (lab/forwarder.ts --dial). */
function startVpcDialer(lab: string, log: ReturnType<typeof jsonLog>): ChildProcess {
  rmSync(vpcDialSocketPath(lab), { force: true });
  const logFile = openSync(join(stateDir(lab), 'vpc-dialer.log'), 'a');
  const child = spawn('ip', ['netns', 'exec', vpcNetns(lab), process.execPath, join(repoRoot(), 'dist', 'lab', 'forwarder.js'), '--dial', vpcDialSocketPath(lab), '--parent', String(process.pid)],
    { stdio: ['ignore', logFile, logFile] });
  closeSync(logFile);
  child.on('exit', (code, signal) => {
    if (!stopping) log('error', 'the VPC dialer exited', { code, signal });
  });
  return child;
}

/** Waits until something accepts connections on 127.0.0.1:6443 inside the node namespace. */
async function waitForForwarder(lab: string, node: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = spawn('ip', ['netns', 'exec', nodeNetns(lab, node), 'nc', '-z', '-w', '1', '127.0.0.1', String(API_PORT_IN_NODE)], { stdio: 'ignore' });
      c.on('exit', (code) => resolve(code === 0));
      c.on('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`the API forwarder in ${node} does not listen on 127.0.0.1:${API_PORT_IN_NODE}`);
}

let stopping = false;

/**
 * sluice-controller for a lab whose agents follow it: one replica on the host (its namespace and
 * the agents' ServiceAccount created first), its Service in every node namespace, and each agent's
 * settings (the controller's CA once published, a token bound to a Pod on the agent's node).
 */
async function startLabController(lab: string, nodes: string[], rest: RestClient, saKey: string, log: ReturnType<typeof jsonLog>): Promise<{ settings(node: string): Record<string, unknown>; stop(): Promise<void> }> {
  for (const obj of [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: CONTROLLER_NAMESPACE } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'sluice-agent', namespace: CONTROLLER_NAMESPACE } },
  ] as KubeObject[]) await rest.apply(resolveKind(obj.kind), obj);
  const port = await freePort();
  // The controller's API through the API server's aggregation layer (kubectl get
  // addressgroups.controlplane.sluice.io, kubectl sluice traceflow): APIService -> Service ->
  // Endpoints, the lab's stand-in for the Service selecting the leader's Pod. The replica fills in
  // the APIService's caBundle as it leads.
  for (const obj of [
    { apiVersion: 'v1', kind: 'Service', metadata: { name: 'sluice-controller', namespace: CONTROLLER_NAMESPACE }, spec: { ports: [{ port: 443 }] } },
    { apiVersion: 'v1', kind: 'Endpoints', metadata: { name: 'sluice-controller', namespace: CONTROLLER_NAMESPACE }, subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ port }] }] },
    {
      apiVersion: 'apiregistration.k8s.io/v1', kind: 'APIService', metadata: { name: 'v1beta1.controlplane.sluice.io' },
      spec: { group: 'controlplane.sluice.io', version: 'v1beta1', service: { name: 'sluice-controller', namespace: CONTROLLER_NAMESPACE, port: 443 }, groupPriorityMinimum: 1000, versionPriority: 100 },
    },
  ] as KubeObject[]) await rest.apply(resolveKind(obj.kind), obj);
  const replica = await startController(lab, 'controller-0', port, [...LAB_CONTROLLER_ARGS]);
  log('info', 'sluice-controller running', { pid: replica.pid, port });
  let caCert: string | undefined;
  for (const deadline = Date.now() + 60_000; caCert === undefined; await sleep(200)) {
    try {
      caCert = ((await rest.get(resolveKind('ConfigMap'), CA_CONFIGMAP, CONTROLLER_NAMESPACE)).data as Record<string, string> | undefined)?.['ca.crt'];
    } catch {
      // Not published yet: the replica publishes it once it leads.
    }
    if (caCert === undefined && Date.now() > deadline) throw new Error(`sluice-controller did not publish ${CONTROLLER_NAMESPACE}/${CA_CONFIGMAP} within 60 s (log ${controllerLogPath(lab, 'controller-0')})`);
  }
  const service = await controllerServiceInNodes(lab, nodes, port);
  return {
    settings: (node) => controllerModeSettings(lab, node, caCert!, serviceAccountToken(saKey, CONTROLLER_NAMESPACE, 'sluice-agent', { podName: `sluice-agent-${node}`, nodeName: node })),
    stop: async () => {
      try {
        process.kill(replica.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      await service.close();
    },
  };
}

/** The ServiceAccount token signing key, made once per lab. */
function serviceAccountKey(lab: string): string {
  const path = serviceAccountKeyPath(lab);
  if (!existsSync(path)) writeFileSync(path, randomBytes(32).toString('hex'), { mode: 0o600 });
  return readFileSync(path, 'utf8').trim();
}

export function parseSupervisorArgs(argv: string[]): SupervisorArgs {
  const get = (flag: string): string | undefined => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const name = get('--name');
  const nodes = Number(get('--nodes'));
  const primary = get('--primary');
  if (!name || !Number.isInteger(nodes) || nodes < 1 || (primary !== 'ptp' && primary !== 'eks')) {
    throw new Error('usage: supervisor.js --name L --nodes N --primary ptp|eks [--sluice [--policy-source standalone|controller]] [--seed FILE] --state-dir DIR/');
  }
  const source = get('--policy-source') ?? 'standalone';
  if (source !== 'standalone' && source !== 'controller') throw new Error(`--policy-source "${source}": standalone or controller`);
  const seed = get('--seed');
  return { name, nodes, primary, sluice: argv.includes('--sluice'), controller: source === 'controller', ...(seed !== undefined ? { seed } : {}) };
}

export async function runSupervisor(args: SupervisorArgs): Promise<void> {
  const lab = args.name;
  const log = jsonLog('supervisor');
  const nodes = Array.from({ length: args.nodes }, (_, k) => nodeName(k + 1));
  if (!existsSync(stateDir(lab))) throw new Error(`lab ${lab} has no state dir ${stateDir(lab)}: create its network first`);
  writeFileSync(supervisorPidPath(lab), `${process.pid}\n`);
  rmSync(controlPath(lab), { force: true });

  const family = readLabInfo(lab)?.ipFamily ?? 'ipv4';
  const token = readControl(lab)?.token ?? randomBytes(16).toString('hex');
  const pki = ensureLabPki(pkiDir(lab));
  // The aggregation layer's identity towards extension API servers (sluice-controller).
  const frontProxy = ensureFrontProxyPki(pkiDir(lab));
  const saKey = serviceAccountKey(lab);
  // The aggregation layer reaches the nodes' addresses (a host-network sluice-controller Pod)
  // through a dialer in the VPC namespace, the host's loopback directly.
  const dialer = startVpcDialer(lab, log);
  const api = await startApiServer({
    host: '127.0.0.1', port: 0, unixSocket: apiSocketPath(lab), token, installCRDs: true,
    // A seeded cluster is large: rewriting it to disk after each change would stall the API server
    // for seconds each time, so it is held in memory only (a restarted supervisor starts from the seed).
    ...(args.seed !== undefined ? { seedFile: args.seed } : { dataFile: apiDataPath(lab) }),
    tls: { cert: pki.cert, key: pki.key, unixSocket: apiTlsSocketPath(lab) }, serviceAccountKey: saKey,
    serviceCIDR: serviceCIDRs(family).join(','), bookmarkOnChange: true,
    frontProxy: { caCert: frontProxy.caCert, clientCert: frontProxy.clientCert, clientKey: frontProxy.clientKey },
    dial: (host, port) => {
      // The host's own replicas (the lab's process-mode controller) listen on its loopback.
      if (host === '127.0.0.1' || host === '::1' || host === 'localhost') return net.connect(port, host);
      const socket = net.connect(vpcDialSocketPath(lab));
      socket.write(`${host} ${port}\n`);
      return socket;
    },
  });
  log('info', 'API server listening', { url: api.url, unix: apiSocketPath(lab) });
  // The host's kubeconfig is what a user's kubectl reads: HTTPS, verified with the lab's CA.
  writeFileSync(hostKubeconfigPath(lab), kubeconfigYaml(api.httpsUrl!, token, pki.caCert), { mode: 0o600 });
  for (const node of nodes) {
    mkdirSync(nodeStateDir(lab, node), { recursive: true });
    writeFileSync(nodeKubeconfigPath(lab, node), kubeconfigYaml(`http://127.0.0.1:${API_PORT_IN_NODE}`, token), { mode: 0o600 });
  }

  const forwarders = nodes.map((node) => startForwarder(lab, node, log));
  const rest = new RestClient(api.url, token);
  const kc = kubeConfigFor(api.url, token);
  await Promise.all(nodes.map((node) => registerNode(rest, node, family)));
  await Promise.all(nodes.map((node) => waitForForwarder(lab, node)));

  // Controller mode: sluice-controller first (the agents wait for its state before their first flows).
  const controlPlane = args.sluice && args.controller ? await startLabController(lab, nodes, rest, saKey, log) : undefined;

  // The agents start now; each node's kubelet creates its first Pod only once its agent listens.
  const agents = new Map<string, Promise<void>>();
  if (args.sluice) {
    for (const node of nodes) {
      const started = startAgent(lab, node, 30_000, {}, controlPlane?.settings(node) ?? {}).then((pid) => log('info', 'sluice-agent running', { node, pid }));
      started.catch((err) => log('error', (err as Error).message, { node }));
      agents.set(node, started);
    }
  }

  const controllers: Controller[] = [
    startScheduler(kc, rest, jsonLog('scheduler')),
    startEndpointSliceController(kc, rest, jsonLog('endpointslice-controller')),
    startDaemonSetController(kc, rest, jsonLog('daemonset-controller')),
    startDeploymentController(kc, rest, jsonLog('deployment-controller')),
    ...nodes.flatMap((node) => [
      startPodmanKubelet(lab, node, kc, rest, jsonLog(`podman-kubelet/${node}`), { caCert: pki.caCert, serviceAccountKey: saKey }),
      startKubelet(lab, node, kc, rest, jsonLog(`kubelet/${node}`), { beforeFirstPod: () => agents.get(node) ?? Promise.resolve() }),
      startKubeProxy(lab, node, kc, rest, jsonLog(`kube-proxy/${node}`)),
    ]),
  ];
  await Promise.all(controllers.map((c) => c.synced));
  if (args.sluice) await Promise.all(agents.values());

  const info: ControlInfo = {
    name: lab, nodes, primary: args.primary, sluice: args.sluice, apiUrl: api.url, apiHttpsUrl: api.httpsUrl!, caCertPath: pki.caCertPath, token,
    supervisorPid: process.pid, startedAt: new Date().toISOString(),
  };
  writeFileSync(controlPath(lab), JSON.stringify(info, null, 2) + '\n', { mode: 0o600 });
  log('info', 'lab control plane ready', { nodes });

  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    log('info', 'stopping', { signal });
    rmSync(controlPath(lab), { force: true });
    await Promise.race([Promise.all(controllers.map((c) => c.stop())), sleep(2000)]);
    await controlPlane?.stop();
    for (const f of [...forwarders, dialer]) f.kill('SIGTERM');
    await Promise.race([api.close(), sleep(2000)]);
    try {
      if (readFileSync(supervisorPidPath(lab), 'utf8').trim() === String(process.pid)) rmSync(supervisorPidPath(lab), { force: true });
    } catch {
      // already gone
    }
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  // Fault injection (the chaos suite): every watch stream cut, and the history they could resume
  // from forgotten, so each client's next watch gets 410 Gone and must relist.
  process.on('SIGUSR2', () => {
    // Including the present: the agents' informers are up to date (a bookmark follows every change).
    api.compact(true);
    api.dropWatches();
    log('info', 'API server: watch history compacted and every watch stream cut (SIGUSR2)');
  });
}

// Run when executed as a script (not when imported by tests).
if (process.argv[1] && /supervisor\.js$/.test(process.argv[1])) {
  let args: SupervisorArgs;
  try {
    args = parseSupervisorArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
  runSupervisor(args).catch((err) => {
    const msg = err instanceof ApiError ? `API error: ${err.message}` : (err as Error).stack ?? String(err);
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level: 'fatal', component: 'supervisor', msg })}\n`);
    process.exit(1);
  });
}
