// The cluster install artifacts (install/*.yaml) checked against the code they deploy: the RBAC covers
// every watched resource read-only, the ConfigMap passes the agent's own config parser, every path the
// config names is a host mount, the sluicectl commands parse with sluicectl's real command definitions,
// and install/crds.yaml is exactly what install/crds.ts produces. Each check is also run on a broken
// copy of the manifests, to show it fails.
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseYamlDocuments } from '../../daemon/kube-yaml.js';
import yargs from 'yargs';
import { WATCHED_RESOURCES } from '../../daemon/enforcement/watch/resources.js';
import { parseConfig, type AgentConfig } from '../../daemon/config.js';
import { cniCommand } from '../../daemon/ctl/cni.js';
import { DEFAULT_SOCKET_PATH } from '../../cni/protocol.js';
import { crdsYaml, sluiceCrds } from '../../install/crds.js';
import { crdProblem, seedCrds } from '../../lab/apiserver/resources.js';
import { parseControllerFlags } from '../../daemon/controller/flags.js';
import { LEADER_LABEL } from '../../daemon/controller/leader-pod.js';
import { APISERVICE, CA_CONFIGMAP, CONTROLLER_SERVICE } from '../../daemon/controller/tls-secret.js';
import { CONTROLPLANE_GROUP, CONTROLPLANE_VERSION } from '../../daemon/controlplane/types.js';

const installDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'install');

// ---- a minimal typed view of the documents ----
interface Meta { name: string; namespace?: string | undefined }
interface Doc { apiVersion: string; kind: string; metadata: Meta; [k: string]: unknown }
interface Mount { name: string; mountPath: string; readOnly?: boolean; mountPropagation?: string }
interface Probe { httpGet?: { host?: string; path?: string; port?: number | string } }
interface Container {
  name: string; image?: string; command?: string[]; args?: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath?: string } } }[];
  volumeMounts?: Mount[]; readinessProbe?: Probe; livenessProbe?: Probe;
  ports?: { name?: string; containerPort: number; protocol?: string }[];
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
}
interface Volume { name: string; hostPath?: { path: string; type?: string }; configMap?: { name: string; optional?: boolean } }
interface PodSpec {
  serviceAccountName?: string; hostNetwork?: boolean; priorityClassName?: string;
  tolerations?: { operator?: string; key?: string; effect?: string }[];
  initContainers?: Container[]; containers: Container[]; volumes?: Volume[];
}
interface DaemonSet extends Doc { spec: { template: { metadata?: { annotations?: Record<string, string> }; spec: PodSpec } } }
interface Rule { apiGroups: string[]; resources: string[]; verbs: string[] }

function loadDocs(file: string): Doc[] {
  return parseYamlDocuments(readFileSync(join(installDir, file), 'utf8')).map((d) => {
    if ('error' in d) throw new Error(`${file} document ${d.index + 1}: ${d.error}`);
    return d.value;
  }).filter((d): d is Doc => d !== null);
}
const clone = <T>(x: T): T => structuredClone(x);

function find<T extends Doc = Doc>(docs: Doc[], kind: string, name?: string): T {
  const found = docs.filter((d) => d.kind === kind && (name === undefined || d.metadata.name === name));
  if (found.length !== 1) throw new Error(`expected exactly one ${kind}${name ? ` ${name}` : ''}, found ${found.length}`);
  return found[0] as T;
}
const podSpec = (ds: DaemonSet): PodSpec => ds.spec.template.spec;
function container(spec: PodSpec, name: string): Container {
  const c = [...(spec.initContainers ?? []), ...spec.containers].find((x) => x.name === name);
  if (!c) throw new Error(`no container ${name}`);
  return c;
}
const agentDs = (docs: Doc[]) => find<DaemonSet>(docs, 'DaemonSet', 'sluice-agent');
function agentConfig(docs: Doc[]): AgentConfig {
  const cm = find(docs, 'ConfigMap', 'sluice-agent-config') as Doc & { data: Record<string, string> };
  return parseConfig(cm.data['agent.yaml'] ?? '', 'ConfigMap sluice-agent-config agent.yaml', { NODE_NAME: 'node-1' });
}

// ---- checks: each returns the problems it finds (empty = fine) ----
const READ_VERBS = ['get', 'list', 'watch'];

function rbacProblems(docs: Doc[]): string[] {
  const out: string[] = [];
  const role = find(docs, 'ClusterRole', 'sluice-agent') as Doc & { rules: Rule[] };
  for (const r of WATCHED_RESOURCES) {
    const ok = role.rules.some((rule) => rule.apiGroups.includes(r.group) && rule.resources.includes(r.plural)
      && READ_VERBS.every((v) => rule.verbs.includes(v)));
    if (!ok) out.push(`ClusterRole grants no get/list/watch on ${r.plural} in apiGroup "${r.group}"`);
  }
  for (const rule of role.rules) {
    // The writes: Events on Pods the agent adopts or cannot attach (core group, create/patch only),
    // and a new Pod's addresses in its status (core group, pods/status, patch only).
    const only = (resource: string) => rule.apiGroups.length === 1 && rule.apiGroups[0] === '' && rule.resources.length === 1 && rule.resources[0] === resource;
    const allowed = only('events') ? ['create', 'patch'] : only('pods/status') ? ['patch'] : [];
    for (const v of rule.verbs) if (!READ_VERBS.includes(v) && !allowed.includes(v)) out.push(`ClusterRole grants write verb "${v}" on ${rule.resources.join(',')}`);
    if ([...rule.apiGroups, ...rule.resources].includes('*')) out.push('ClusterRole uses a wildcard');
  }
  return out;
}

function identityProblems(docs: Doc[]): string[] {
  const out: string[] = [];
  const ns = find(docs, 'Namespace').metadata.name;
  for (const d of docs) {
    if (['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'APIService'].includes(d.kind)) continue;
    // The controller's binding to read the aggregation layer's settings lives in kube-system.
    if (d.kind === 'RoleBinding' && d.metadata.namespace === 'kube-system' && (d as Doc & { roleRef: { name: string } }).roleRef.name === 'extension-apiserver-authentication-reader') continue;
    if (d.metadata.namespace !== ns) out.push(`${d.kind} ${d.metadata.name} is in namespace "${d.metadata.namespace}", not "${ns}"`);
  }
  const ds = agentDs(docs);
  const sa = podSpec(ds).serviceAccountName;
  if (!docs.some((d) => d.kind === 'ServiceAccount' && d.metadata.name === sa && d.metadata.namespace === ns)) {
    out.push(`DaemonSet's serviceAccountName "${sa}" is not a ServiceAccount in ${ns}`);
  }
  const role = find(docs, 'ClusterRole', 'sluice-agent');
  const binding = find(docs, 'ClusterRoleBinding', 'sluice-agent') as Doc & { roleRef: { kind: string; name: string; apiGroup: string }; subjects: { kind: string; name: string; namespace?: string | undefined }[] };
  if (binding.roleRef.kind !== 'ClusterRole' || binding.roleRef.name !== role.metadata.name || binding.roleRef.apiGroup !== 'rbac.authorization.k8s.io') {
    out.push(`ClusterRoleBinding refers to ${binding.roleRef.kind} ${binding.roleRef.name}, not ClusterRole ${role.metadata.name}`);
  }
  if (!binding.subjects.some((s) => s.kind === 'ServiceAccount' && s.name === sa && s.namespace === ns)) {
    out.push(`ClusterRoleBinding does not bind ServiceAccount ${ns}/${sa}`);
  }
  for (const v of podSpec(ds).volumes ?? []) {
    // An optional one may come later from elsewhere (sluice-ca: the controller publishes it).
    if (v.configMap && !v.configMap.optional && !docs.some((d) => d.kind === 'ConfigMap' && d.metadata.name === v.configMap!.name)) {
      out.push(`volume ${v.name} uses ConfigMap ${v.configMap.name}, which is not defined`);
    }
  }
  return out;
}

/** Placement any node-level DaemonSet needs: host network, every taint tolerated, highest node priority. */
function placementProblems(ds: DaemonSet): string[] {
  const out: string[] = [];
  const spec = podSpec(ds);
  if (spec.hostNetwork !== true) out.push(`${ds.metadata.name}: hostNetwork is not true`);
  if (spec.priorityClassName !== 'system-node-critical') out.push(`${ds.metadata.name}: priorityClassName is "${spec.priorityClassName}", not system-node-critical`);
  if (!(spec.tolerations ?? []).some((x) => x.operator === 'Exists' && x.key === undefined && x.effect === undefined)) {
    out.push(`${ds.metadata.name}: does not tolerate every taint (operator: Exists without key/effect)`);
  }
  const volumes = new Set((spec.volumes ?? []).map((v) => v.name));
  for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
    for (const m of c.volumeMounts ?? []) if (!volumes.has(m.name)) out.push(`${c.name}: mounts undefined volume ${m.name}`);
  }
  return out;
}

/** The agent container: config file, probes, NODE_NAME, and a host mount for every path the config names. */
function agentProblems(docs: Doc[]): string[] {
  const out: string[] = [];
  const cfg = agentConfig(docs);
  const spec = podSpec(agentDs(docs));
  const agent = container(spec, 'sluice-agent');
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const mounts = agent.volumeMounts ?? [];

  const argv = [...(agent.command ?? []), ...(agent.args ?? [])];
  const flag = argv.findIndex((a) => a === '--config' || a === '-c');
  const configFile = flag >= 0 ? argv[flag + 1] : '/etc/sluice/agent.yaml';
  const configMount = mounts.find((m) => volumes.get(m.name)?.configMap?.name === 'sluice-agent-config');
  if (argv[0] !== 'sluice-agent') out.push(`agent command is ${argv[0]}, not sluice-agent`);
  if (!configMount || configFile !== posix.join(configMount.mountPath, 'agent.yaml')) {
    out.push(`agent reads ${configFile}, but the ConfigMap's agent.yaml is mounted at ${configMount?.mountPath ?? '(nowhere)'}/agent.yaml`);
  }

  for (const [which, probe, path] of [['readiness', agent.readinessProbe, '/readyz'], ['liveness', agent.livenessProbe, '/healthz']] as const) {
    const get = probe?.httpGet;
    if (!get) { out.push(`agent has no ${which} httpGet probe`); continue; }
    if (get.port !== cfg.healthAddress.port) out.push(`${which} probe port ${get.port} != healthAddress port ${cfg.healthAddress.port}`);
    if (get.host !== cfg.healthAddress.host) out.push(`${which} probe host ${get.host} != healthAddress host ${cfg.healthAddress.host}`);
    if (get.path !== path) out.push(`${which} probe path ${get.path} != ${path}`);
  }
  // Prometheus scrapes the Pod (hostNetwork: the node's address) at the annotated port and path.
  const ann = agentDs(docs).spec.template.metadata?.annotations ?? {};
  if (!cfg.metricsAddress) out.push('no metricsAddress: /metrics is only on the loopback health address, which Prometheus cannot reach');
  else {
    if (/^127\.|^localhost$|^::1$/.test(cfg.metricsAddress.host)) out.push(`metricsAddress ${cfg.metricsAddress.host} is loopback: Prometheus cannot reach it`);
    if (ann['prometheus.io/scrape'] !== 'true') out.push('the Pod template lacks prometheus.io/scrape: "true"');
    if (ann['prometheus.io/port'] !== String(cfg.metricsAddress.port)) out.push(`prometheus.io/port ${ann['prometheus.io/port']} != metricsAddress port ${cfg.metricsAddress.port}`);
    if (ann['prometheus.io/path'] !== '/metrics') out.push(`prometheus.io/path ${ann['prometheus.io/path']} != /metrics`);
    if (!agent.ports?.some((p) => p.containerPort === cfg.metricsAddress!.port)) out.push(`the agent container declares no port ${cfg.metricsAddress.port} (metricsAddress)`);
  }
  // Other agents connect to it on the node's address (hostNetwork): declared, as the metrics port.
  if (!agent.ports?.some((p) => p.containerPort === cfg.realizationPort)) out.push(`the agent container declares no port ${cfg.realizationPort} (realizationPort)`);
  if (!cfg.nodeName || !agent.env?.some((e) => e.name === 'NODE_NAME' && e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName')) {
    out.push('agent has no NODE_NAME from spec.nodeName (the ConfigMap names no node)');
  }

  // Paths the agent shares with the host (CNI binary, container runtime, operators): same path on both sides.
  const needed: [string, string][] = [
    ['socketPath directory', posix.dirname(cfg.socketPath)],
    ['ovsRunDir', cfg.ovsRunDir],
    ['stateDir', cfg.stateDir],
    ['auditLogPath directory', posix.dirname(cfg.auditLogPath)],
    ['network namespaces', '/var/run/netns'],
    ...(cfg.rtTablesFile ? [['rtTablesFile directory', posix.dirname(cfg.rtTablesFile)] as [string, string]] : []),
  ];
  for (const [what, dir] of needed) {
    const m = mounts.find((x) => x.mountPath === dir);
    const host = m ? volumes.get(m.name)?.hostPath?.path : undefined;
    if (!m) out.push(`${what} ${dir} is not mounted into the agent`);
    else if (host !== dir) out.push(`${what} ${dir} is mounted from host path ${host ?? '(not a hostPath)'}, not ${dir}`);
    else if (m.readOnly) out.push(`${what} ${dir} is mounted read-only`);
  }
  const netns = mounts.find((x) => x.mountPath === '/var/run/netns');
  if (netns && netns.mountPropagation !== 'HostToContainer') out.push('/var/run/netns mount lacks mountPropagation: HostToContainer (new Pod netns would be invisible)');

  // OVS: the agent reaches ovsdb/ovs-vswitchd through the rundir the ovs container's daemons use (ovs-ctl default).
  const ovs = container(spec, 'ovs');
  const agentRun = mounts.find((x) => x.mountPath === cfg.ovsRunDir);
  const ovsRun = (ovs.volumeMounts ?? []).find((x) => x.mountPath === '/var/run/openvswitch');
  if (!agentRun || !ovsRun || agentRun.name !== ovsRun.name) out.push(`agent's ovsRunDir ${cfg.ovsRunDir} is not the ovs container's /var/run/openvswitch volume`);
  return out;
}

/** Requests on the long-running containers, and no limits that could OOM-kill or throttle them. */
function resourceProblems(docs: Doc[]): string[] {
  const out: string[] = [];
  const spec = podSpec(agentDs(docs));
  for (const name of ['sluice-agent', 'ovs']) {
    const r = container(spec, name).resources;
    for (const k of ['cpu', 'memory']) if (!r?.requests?.[k]) out.push(`${name}: no ${k} request`);
    if (r?.limits && Object.keys(r.limits).length > 0) out.push(`${name}: has limits ${JSON.stringify(r.limits)}`);
  }
  return out;
}

/** The ovs container's main process must stay in the foreground and stop the daemons on SIGTERM. */
function ovsProblems(docs: Doc[]): string[] {
  const out: string[] = [];
  const argv = [...(container(podSpec(agentDs(docs)), 'ovs').command ?? [])];
  if (argv[0]?.endsWith('ovs-ctl')) return [`ovs container runs ${argv.join(' ')} directly: ovs-ctl start detaches and returns, so the container exits`];
  if (argv[0] !== 'sh' || argv[1] !== '-c' || typeof argv[2] !== 'string') return [`ovs container command is not sh -c SCRIPT: ${argv.join(' ')}`];
  const script = argv[2];
  if (!/ovs-ctl"? start\b[^\n]*--system-id=/.test(script) && !/\$ctl"? start\b[^\n]*--system-id=/.test(script)) out.push('script does not start OVS with ovs-ctl start --system-id=...');
  if (!/--no-monitor/.test(script)) out.push('script does not pass --no-monitor (the shell is the monitor)');
  if (!/while [^\n]*status/.test(script)) out.push('script does not stay in the foreground polling ovs-ctl status');
  if (!/trap [^\n]*TERM/.test(script)) out.push('script does not trap SIGTERM');
  if (!/\bstop\b/.test(script)) out.push('script never runs ovs-ctl stop');
  if (/--delete-bridges|del-br|--cleanup/.test(script)) out.push('script deletes bridges or datapath state');
  return out;
}

/** sluicectl arguments parsed by sluicectl's own `cni` command definition (strict: unknown options fail). */
async function parseSluicectl(argv: string[]): Promise<Record<string, unknown>> {
  if (argv[0] !== 'sluicectl') throw new Error(`not a sluicectl command: ${argv.join(' ')}`);
  let parsed: Record<string, unknown> | undefined;
  const captured = { ...cniCommand, handler: (a: unknown) => { parsed = a as Record<string, unknown>; } };
  await yargs(argv.slice(1)).scriptName('sluicectl').strict().demandCommand(1).exitProcess(false)
    .fail((msg, err) => { throw err ?? new Error(msg); }).command(captured as never).parseAsync();
  if (!parsed) throw new Error(`sluicectl ${argv.slice(1).join(' ')} ran no command`);
  return parsed;
}

/** The CNI install/uninstall commands: valid sluicectl, pointed at the host's CNI directories. */
async function cniCommandProblems(ds: DaemonSet, containerName: string, action: 'install' | 'uninstall', docs: Doc[]): Promise<string[]> {
  const spec = podSpec(ds);
  const c = container(spec, containerName);
  if (!(spec.initContainers ?? []).includes(c)) return [`${containerName} is not an init container`];
  let args: Record<string, unknown>;
  try {
    args = await parseSluicectl([...(c.command ?? []), ...(c.args ?? [])]);
  } catch (err) {
    return [`${ds.metadata.name}/${containerName}: sluicectl rejects its command: ${(err as Error).message}`];
  }
  const out: string[] = [];
  if (args.action !== action) out.push(`${containerName}: action ${String(args.action)}, not ${action}`);
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  for (const [opt, host] of [['conf-dir', '/etc/cni/net.d'], ['bin-dir', '/opt/cni/bin']]) {
    const m = (c.volumeMounts ?? []).find((x) => x.mountPath === args[opt!]);
    const hp = m ? volumes.get(m.name)?.hostPath?.path : undefined;
    if (hp !== host) out.push(`${containerName}: --${opt} ${String(args[opt!])} is not the host's ${host} (${hp ?? 'not mounted'})`);
  }
  if (action === 'install') {
    const socket = (args['socket-path'] as string | undefined) ?? DEFAULT_SOCKET_PATH;
    const cfg = agentConfig(docs);
    if (socket !== cfg.socketPath) out.push(`the CNI plugin connects to ${socket} but the agent listens on ${cfg.socketPath}`);
    if (typeof args.plugin !== 'string' || !posix.isAbsolute(args.plugin)) out.push('install-cni: --plugin is not an absolute path');
  }
  return out;
}

function crdProblems(crdDocs: Doc[]): string[] {
  const out: string[] = [];
  type Crd = ReturnType<typeof sluiceCrds>[number];
  const crds = crdDocs as unknown as Crd[];
  for (const r of WATCHED_RESOURCES.filter((x) => x.crd)) {
    const c = crds.find((x) => x.spec.group === r.group && x.spec.names.plural === r.plural);
    const v = c?.spec.versions.find((x) => x.name === r.version);
    if (!c || !v?.served) out.push(`no CRD serves ${r.group}/${r.version} ${r.plural}`);
    else if (c.spec.names.kind !== r.kind) out.push(`CRD ${c.metadata.name} has kind ${c.spec.names.kind}, not ${r.kind}`);
  }
  for (const c of crds) {
    const problem = crdProblem(c as never);
    if (problem) out.push(`CRD ${c.metadata.name}: ${problem.field}: ${problem.message}`);
    if (c.spec.versions.filter((v) => v.storage).length !== 1) out.push(`CRD ${c.metadata.name}: not exactly one storage version`);
    for (const v of c.spec.versions) if (!v.schema?.openAPIV3Schema) out.push(`CRD ${c.metadata.name} ${v.name}: no openAPIV3Schema (required by apiextensions.k8s.io/v1)`);
  }
  return out;
}

// ---- the uninstall procedure in uninstall.yaml's header ----
/** The header's comment text (the lines before the first document), '#' stripped. */
const headerText = (text: string) => text.split('\n').filter((_l, i, a) => a.slice(0, i + 1).every((x) => x.startsWith('#'))).map((l) => l.replace(/^# ?/, '')).join('\n');

/** Applies the JSON patch ops the procedure uses (remove, add with "-" = append) to a copy of `doc`. */
function jsonPatch<T>(doc: T, ops: { op: string; path: string; value?: unknown }[]): T {
  const out = clone(doc) as unknown as Record<string, unknown>;
  for (const o of ops) {
    const keys = o.path.split('/').slice(1).map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~'));
    const last = keys.pop()!;
    let at: unknown = out;
    for (const k of keys) {
      at = (at as Record<string, unknown> | undefined)?.[k];
      if (at === undefined) throw new Error(`${o.op} ${o.path}: ${k} does not exist`);
    }
    const parent = at as Record<string, unknown> & unknown[];
    if (o.op === 'remove') {
      if (!(last in parent)) throw new Error(`remove ${o.path}: does not exist`);
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else if (o.op === 'add') {
      if (Array.isArray(parent) && last === '-') parent.push(o.value);
      else parent[last] = o.value;
    } else throw new Error(`unsupported op ${o.op}`);
  }
  return out as unknown as T;
}

/**
 * The procedure: the steps in order (unchain first, so no new Pod calls sluice during the cleanup;
 * delete last), and the cleanup-mode patch, applied to sluice.yaml's DaemonSet, yields an agent
 * container with SLUICE_CLEANUP=1 (its probes still answered: sluice-agent serves /readyz once
 * the node is clean) and no init container that would chain sluice again.
 */
function cleanupProcedureProblems(uninstallText: string, docs: Doc[]): string[] {
  const out: string[] = [];
  const header = headerText(uninstallText);
  const steps = [
    'kubectl apply -f install/uninstall.yaml',
    'rollout status daemonset sluice-uninstall',
    'patch daemonset sluice-agent',
    'rollout status daemonset sluice-agent',
    'kubectl delete --ignore-not-found -f install/uninstall.yaml -f install/sluice.yaml',
  ];
  const at = steps.map((s) => header.indexOf(s));
  steps.forEach((s, i) => {
    if (at[i]! < 0) out.push(`header lacks the step "${s}"`);
    else if (i > 0 && at[i - 1]! >= 0 && at[i]! < at[i - 1]!) out.push(`header: "${s}" comes before "${steps[i - 1]}"`);
  });
  const m = /patch daemonset sluice-agent --type json -p '([^']*)'/.exec(header);
  if (!m) return [...out, 'header has no `kubectl patch daemonset sluice-agent --type json -p \'...\'`'];
  let patched: DaemonSet;
  try {
    patched = jsonPatch(agentDs(docs), JSON.parse(m[1]!) as { op: string; path: string; value?: unknown }[]);
  } catch (err) {
    return [...out, `the cleanup patch does not apply to sluice.yaml: ${(err as Error).message}`];
  }
  const spec = podSpec(patched);
  const agent = spec.containers.find((c) => c.name === 'sluice-agent');
  if (!agent) return [...out, 'the patched DaemonSet has no sluice-agent container'];
  if (!(agent.env ?? []).some((e) => e.name === 'SLUICE_CLEANUP' && e.value === '1')) out.push('the patch does not set SLUICE_CLEANUP=1 on the sluice-agent container');
  for (const c of spec.containers.filter((x) => x.name !== 'sluice-agent')) if (Array.isArray(c.env) && c.env.some((e) => e.name === 'SLUICE_CLEANUP')) out.push(`the patch sets SLUICE_CLEANUP on container ${c.name}`);
  for (const c of spec.initContainers ?? []) if ([...(c.command ?? []), ...(c.args ?? [])].includes('install')) out.push(`init container ${c.name} still runs an install (it would chain sluice again)`);
  if (!agent.readinessProbe?.httpGet || !agent.livenessProbe?.httpGet) out.push('the patched agent lost its probes');
  out.push(...agentProblems(docs.map((d) => (d === agentDs(docs) ? patched : d))));
  return out;
}

/**
 * The controller's part of install/sluice.yaml against the controller's code: read-only RBAC on
 * every watched resource plus exactly the writes it makes, its command parsed by its real flags,
 * probes and Service on the port it listens on, the Service selecting the leader's label, the
 * APIService naming that Service and the served group, all in the agent's namespace; the replicas
 * on the host network (not on the Pod network they secure) with a disruption budget keeping one;
 * the agents following it, able to look up its Service and read its CA.
 */
function controllerProblems(docs: Doc[], agentNs: string): string[] {
  const out: string[] = [];
  for (const d of docs) {
    // The one document elsewhere: the binding to read the aggregation layer's settings in kube-system.
    const authReader = d.kind === 'RoleBinding' && d.metadata.namespace === 'kube-system' && (d as Doc & { roleRef: { name: string } }).roleRef.name === 'extension-apiserver-authentication-reader';
    if (!['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'APIService'].includes(d.kind) && !authReader && d.metadata.namespace !== agentNs) out.push(`${d.kind} ${d.metadata.name} is not in ${agentNs}`);
  }
  if (!docs.some((d) => d.kind === 'RoleBinding' && d.metadata.namespace === 'kube-system')) out.push('no binding to read kube-system/extension-apiserver-authentication (the aggregation layer\'s front-proxy CA)');
  const role = find(docs, 'ClusterRole', 'sluice-controller') as Doc & { rules: (Rule & { resourceNames?: string[] })[] };
  for (const r of WATCHED_RESOURCES) {
    if (!role.rules.some((rule) => rule.apiGroups.includes(r.group) && rule.resources.includes(r.plural) && READ_VERBS.every((v) => rule.verbs.includes(v)))) out.push(`ClusterRole grants no get/list/watch on ${r.plural}`);
  }
  const writes = role.rules.flatMap((rule) => rule.verbs.filter((v) => !READ_VERBS.includes(v)).map((v) => `${v} ${rule.resources.join(',')}${rule.resourceNames ? `/${rule.resourceNames.join(',')}` : ''}`)).sort();
  if (JSON.stringify(writes) !== JSON.stringify(['create subjectaccessreviews', 'create tokenreviews', `patch apiservices/${APISERVICE}`])) out.push(`ClusterRole writes: ${writes.join('; ')}`);
  // Tracing through the controller: a role to bind, bound to nobody by the install.
  const tracing = find(docs, 'ClusterRole', 'sluice-traceflow') as Doc & { rules: Rule[] };
  if (JSON.stringify(tracing.rules) !== JSON.stringify([{ apiGroups: [CONTROLPLANE_GROUP], resources: ['traceflows'], verbs: ['create'] }])) out.push(`ClusterRole sluice-traceflow grants ${JSON.stringify(tracing.rules)}, not just create traceflows`);
  if (docs.some((d) => d.kind === 'ClusterRoleBinding' && (d as Doc & { roleRef: { name: string } }).roleRef.name === 'sluice-traceflow')) out.push('the install binds sluice-traceflow: who may trace is the cluster admin\'s choice');
  const deploy = find(docs, 'Deployment', 'sluice-controller') as Doc & { spec: { replicas: number; template: { metadata: { labels: Record<string, string> }; spec: PodSpec } } };
  const spec = deploy.spec.template.spec;
  if (deploy.spec.replicas < 2) out.push(`Deployment runs ${deploy.spec.replicas} replica(s): a standby is needed for a takeover`);
  if (spec.hostNetwork !== true) out.push('the controller is not on the host network: it would depend on the Pod network it secures');
  const pdb = docs.find((d) => d.kind === 'PodDisruptionBudget') as (Doc & { spec: { minAvailable?: number; selector: { matchLabels: Record<string, string> } } }) | undefined;
  if (pdb?.spec.minAvailable !== 1 || Object.entries(pdb.spec.selector.matchLabels).some(([k, v]) => deploy.spec.template.metadata.labels[k] !== v)) out.push('no PodDisruptionBudget keeping one controller replica');
  const cfg = (() => {
    try {
      return agentConfig(docs);
    } catch {
      return undefined;
    }
  })();
  if (cfg && cfg.policySource !== 'controller') out.push(`the agents compute for themselves (policySource ${cfg.policySource}): they do not follow the controller`);
  if (cfg && new URL(cfg.controllerServer).hostname !== `${CONTROLLER_SERVICE}.${agentNs}.svc`) out.push(`the agents look for the controller at ${cfg.controllerServer}, not its Service`);
  const agentRole = docs.find((d) => d.kind === 'Role' && d.metadata.name === 'sluice-agent') as (Doc & { rules: (Rule & { resourceNames?: string[] })[] }) | undefined;
  if (cfg && cfg.controllerCAFile === '' && !agentRole?.rules.some((r) => r.resources.includes('configmaps') && r.verbs.includes('get') && (r.resourceNames ?? [CA_CONFIGMAP]).includes(CA_CONFIGMAP))) {
    out.push(`the agents read the controller's CA through the API but may not get ConfigMap ${CA_CONFIGMAP}`);
  }
  if (!docs.some((d) => d.kind === 'ServiceAccount' && d.metadata.name === spec.serviceAccountName)) out.push(`serviceAccountName ${spec.serviceAccountName} is not defined`);
  const c = spec.containers[0]!;
  const [bin, ...args] = c.command ?? [];
  if (bin !== 'sluice-controller') out.push(`the container runs ${bin}, not sluice-controller`);
  let port = 0;
  try {
    const flags = parseControllerFlags(args, { POD_NAME: 'p', POD_NAMESPACE: agentNs });
    port = flags?.listen.port ?? 0;
  } catch (err) {
    out.push(`sluice-controller rejects its command: ${(err as Error).message}`);
  }
  for (const name of ['POD_NAME', 'POD_NAMESPACE']) if (!c.env?.some((e) => e.name === name && e.valueFrom?.fieldRef)) out.push(`env ${name} is not set from the Pod`);
  for (const [what, probe] of [['readiness', c.readinessProbe], ['liveness', c.livenessProbe]] as const) {
    if (probe?.httpGet?.port !== port) out.push(`${what} probe on port ${probe?.httpGet?.port}, the controller listens on ${port}`);
  }
  const svc = find(docs, 'Service', CONTROLLER_SERVICE) as Doc & { spec: { selector: Record<string, string>; ports: { port: number; targetPort: number }[] } };
  if (svc.spec.selector[LEADER_LABEL] !== 'true') out.push(`the Service does not select the leader's label ${LEADER_LABEL}`);
  for (const [k, v] of Object.entries(svc.spec.selector)) if (k !== LEADER_LABEL && deploy.spec.template.metadata.labels[k] !== v) out.push(`the Service selects ${k}=${v}, which the Pods do not carry`);
  if (!svc.spec.ports.some((p) => p.targetPort === port)) out.push(`the Service targets ${svc.spec.ports.map((p) => p.targetPort).join(',')}, the controller listens on ${port}`);
  const api = find(docs, 'APIService', APISERVICE) as Doc & { spec: { group: string; version: string; service: { name: string; namespace: string; port: number } } };
  if (api.spec.group !== CONTROLPLANE_GROUP || api.spec.version !== CONTROLPLANE_VERSION) out.push(`the APIService registers ${api.spec.group}/${api.spec.version}`);
  if (api.spec.service.name !== svc.metadata.name || api.spec.service.namespace !== agentNs || !svc.spec.ports.some((p) => p.port === api.spec.service.port)) out.push('the APIService does not point at the Service');
  return out;
}

// ---- the manifests as they are ----
const sluice = loadDocs('sluice.yaml');
const uninstall = loadDocs('uninstall.yaml');
const crds = loadDocs('crds.yaml');

t.test('every install/*.yaml document loads and has apiVersion, kind and a name', async (t) => {
  const files = readdirSync(installDir).filter((f) => f.endsWith('.yaml')).sort();
  t.same(files, ['crds.yaml', 'sluice.yaml', 'uninstall.yaml'], 'the install files this test knows');
  for (const f of files) {
    for (const d of loadDocs(f)) t.ok(d.apiVersion && d.kind && d.metadata?.name, `${f}: ${d.kind} ${d.metadata?.name}`);
  }
});

t.test('sluice.yaml is correct', async (t) => {
  t.same(rbacProblems(sluice), [], 'RBAC: get/list/watch on every watched resource, nothing else');
  t.same(identityProblems(sluice), [], 'namespace, ServiceAccount, ClusterRoleBinding and ConfigMap line up');
  t.same(placementProblems(agentDs(sluice)), [], 'agent DaemonSet: hostNetwork, tolerates all, system-node-critical');
  t.same(agentProblems(sluice), [], 'agent: config parses, probes match healthAddress, host mounts for every path');
  t.same(resourceProblems(sluice), [], 'agent and ovs: cpu/memory requests, no limits');
  t.same(ovsProblems(sluice), [], 'ovs: a foreground process that stops OVS on SIGTERM, keeping bridges');
  t.same(await cniCommandProblems(agentDs(sluice), 'install-cni', 'install', sluice), [], 'install-cni: valid sluicectl cni install');
});

t.test('sluice.yaml runs the controller correctly', async (t) => {
  const ns = find(sluice, 'Namespace').metadata.name;
  t.same(controllerProblems(sluice, ns), [], 'RBAC, command, probes, Service and APIService line up with the code; the agents follow it');
  const broken: [string, (d: Doc[]) => void, RegExp][] = [
    ['a bad --listen', (d) => { (find(d, 'Deployment') as unknown as { spec: { template: { spec: PodSpec } } }).spec.template.spec.containers[0]!.command = ['sluice-controller', '--listen', '10351']; }, /rejects its command/],
    ['the Service on another port', (d) => { (find(d, 'Service') as unknown as { spec: { ports: { targetPort: number }[] } }).spec.ports[0]!.targetPort = 9999; }, /the Service targets 9999/],
    ['the Service not selecting the leader', (d) => { delete (find(d, 'Service') as unknown as { spec: { selector: Record<string, string> } }).spec.selector[LEADER_LABEL]; }, /leader's label/],
    ['tracing granted to everyone', (d) => { d.push({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: 'all-trace' }, roleRef: { name: 'sluice-traceflow' } } as unknown as Doc); }, /the install binds sluice-traceflow/],
    ['the controller on the Pod network', (d) => { delete (find(d, 'Deployment') as unknown as { spec: { template: { spec: PodSpec } } }).spec.template.spec.hostNetwork; }, /not on the host network/],
    ['no disruption budget', (d) => { d.splice(d.findIndex((x) => x.kind === 'PodDisruptionBudget'), 1); }, /no PodDisruptionBudget/],
    ['agents in standalone mode', (d) => {
      const cm = find(d, 'ConfigMap', 'sluice-agent-config') as unknown as { data: Record<string, string> };
      cm.data['agent.yaml'] = cm.data['agent.yaml']!.replace('policySource: controller', 'policySource: standalone');
    }, /do not follow the controller/],
    ['agents unable to read the CA', (d) => { d.splice(d.findIndex((x) => x.kind === 'Role' && x.metadata.name === 'sluice-agent'), 1); }, /may not get ConfigMap sluice-ca/],
    ['a write on pods cluster-wide', (d) => { (find(d, 'ClusterRole', 'sluice-controller') as unknown as { rules: Rule[] }).rules.push({ apiGroups: [''], resources: ['pods'], verbs: ['delete'] }); }, /ClusterRole writes: .*delete pods/],
  ];
  for (const [name, breakIt, expected] of broken) {
    const docs = clone(sluice);
    breakIt(docs);
    t.match(controllerProblems(docs, ns).join('\n'), expected, `fails on ${name}`);
  }
});

t.test('uninstall.yaml is correct', async (t) => {
  const ds = find<DaemonSet>(uninstall, 'DaemonSet', 'sluice-uninstall');
  t.equal(ds.metadata.namespace, find(uninstall, 'Namespace').metadata.name, 'in its own Namespace document');
  t.equal(ds.metadata.namespace, find(sluice, 'Namespace').metadata.name, 'the same namespace as sluice.yaml');
  t.same(placementProblems(ds), [], 'uninstall DaemonSet: hostNetwork, tolerates all, system-node-critical');
  t.same(await cniCommandProblems(ds, 'uninstall-cni', 'uninstall', sluice), [], 'uninstall-cni: valid sluicectl cni uninstall');
  t.same(cleanupProcedureProblems(readFileSync(join(installDir, 'uninstall.yaml'), 'utf8'), sluice), [],
    'header: unchain, cleanup-mode patch (SLUICE_CLEANUP=1 on the agent, no install-cni), wait, delete; the patch applies to sluice.yaml');
});

t.test('the uninstall procedure check fails when the procedure is wrong', async (t) => {
  const text = readFileSync(join(installDir, 'uninstall.yaml'), 'utf8');
  const cases: [string, string, Doc[], RegExp][] = [
    ['the patch aims at the ovs container (no env list there)', text.replace('/containers/0/env/-', '/containers/1/env/-'), sluice, /does not apply to sluice.yaml: add \/spec\/template\/spec\/containers\/1\/env\/-: env does not exist/],
    ['the env added to the ovs container',
      text.replace('"path": "/spec/template/spec/containers/0/env/-", "value": {"name": "SLUICE_CLEANUP", "value": "1"}', '"path": "/spec/template/spec/containers/1/env", "value": [{"name": "SLUICE_CLEANUP", "value": "1"}]'),
      sluice, /does not set SLUICE_CLEANUP=1 on the sluice-agent container\nthe patch sets SLUICE_CLEANUP on container ovs/],
    ['the patch keeps install-cni', text.replace(/\{"op": "remove", "path": "\/spec\/template\/spec\/initContainers"\},\s*#?\s*/, ''), sluice, /install-cni still runs an install/],
    ['the wrong value', text.replace('"value": "1"}', '"value": "true"}'), sluice, /SLUICE_CLEANUP=1/],
    ['delete before the cleanup', text.replace('kubectl delete --ignore-not-found -f install/uninstall.yaml -f install/sluice.yaml', 'x').replace('#  1. ', '#  1. kubectl delete --ignore-not-found -f install/uninstall.yaml -f install/sluice.yaml '), sluice, /comes before/],
    ['no patch step', text.replace(/patch daemonset sluice-agent/g, 'edit daemonset sluice-agent'), sluice, /lacks the step "patch daemonset sluice-agent"/],
    ['sluice.yaml without env on the agent', text, ((d) => { delete agentC(d).env; return d; })(clone(sluice)), /does not apply to sluice.yaml/],
  ];
  for (const [name, broken, docs, expected] of cases) t.match(cleanupProcedureProblems(broken, docs).join('\n'), expected, name);
});

t.test('crds.yaml is generated from install/crds.ts and is what the lab serves', async (t) => {
  t.equal(readFileSync(join(installDir, 'crds.yaml'), 'utf8'), crdsYaml(),
    'install/crds.yaml is byte-for-byte crdsYaml() (regenerate: node dist/install/crds.js > install/crds.yaml)');
  t.same(crds, sluiceCrds(), 'its documents are the module\'s objects');
  t.same(seedCrds(), sluiceCrds(), 'the lab API server seeds the same CRDs');
  t.same(crdProblems(crds), [], 'a valid CRD serves every CRD-backed watched resource');
  const role = find(sluice, 'ClusterRole', 'sluice-agent') as Doc & { rules: Rule[] };
  for (const c of sluiceCrds()) {
    t.ok(role.rules.some((r) => r.apiGroups.includes(c.spec.group) && r.resources.includes(c.spec.names.plural)),
      `the agent may read ${c.metadata.name}`);
  }
  const header = readFileSync(join(installDir, 'crds.yaml'), 'utf8').split('\n---')[0]!;
  t.match(header, /must NOT apply/, 'header warns clusters with the upstream CRDs');
  t.match(header, /validates every\s*\n?#?\s*object/, 'header says the agent validates');
  t.match(header, /prunes fields they do not\s*\n?#?\s*have/, 'header explains the schemas');
});

// ---- each check fails on a broken copy ----
type Breakage = [string, (docs: Doc[]) => void, (docs: Doc[]) => string[] | Promise<string[]>, RegExp];
const role = (d: Doc[]) => find(d, 'ClusterRole', 'sluice-agent') as Doc & { rules: Rule[] };
const agentC = (d: Doc[]) => container(podSpec(agentDs(d)), 'sluice-agent');
const ovsC = (d: Doc[]) => container(podSpec(agentDs(d)), 'ovs');
const initC = (d: Doc[]) => container(podSpec(agentDs(d)), 'install-cni');
const setConfig = (d: Doc[], edit: (text: string) => string) => {
  const cm = find(d, 'ConfigMap') as Doc & { data: Record<string, string> };
  cm.data['agent.yaml'] = edit(cm.data['agent.yaml']!);
};
const install = (d: Doc[]) => cniCommandProblems(agentDs(d), 'install-cni', 'install', d);

const breakages: Breakage[] = [
  ['a watched resource missing from the ClusterRole', (d) => { role(d).rules[0]!.resources = role(d).rules[0]!.resources.filter((r) => r !== 'serviceaccounts'); }, rbacProblems, /serviceaccounts/],
  ['Antrea resources under the wrong apiGroup', (d) => { role(d).rules.find((r) => r.apiGroups.includes('crd.antrea.io'))!.apiGroups = ['antrea.io']; }, rbacProblems, /tiers in apiGroup "crd.antrea.io"/],
  ['list without watch', (d) => { role(d).rules.find((r) => r.resources.includes('endpointslices'))!.verbs = ['get', 'list']; }, rbacProblems, /endpointslices/],
  ['a write verb', (d) => { role(d).rules[0]!.verbs.push('patch'); }, rbacProblems, /write verb "patch"/],
  ['the binding names another ServiceAccount', (d) => { (find(d, 'ClusterRoleBinding', 'sluice-agent') as Doc & { subjects: { name: string }[] }).subjects[0]!.name = 'default'; }, identityProblems, /does not bind/],
  ['the ServiceAccount in another namespace', (d) => { find(d, 'ServiceAccount', 'sluice-agent').metadata.namespace = 'kube-system'; }, identityProblems, /ServiceAccount/],
  ['the binding refers to another role', (d) => { (find(d, 'ClusterRoleBinding', 'sluice-agent') as Doc & { roleRef: { name: string } }).roleRef.name = 'view'; }, identityProblems, /refers to ClusterRole view/],
  ['no hostNetwork', (d) => { delete podSpec(agentDs(d)).hostNetwork; }, (d) => placementProblems(agentDs(d)), /hostNetwork/],
  ['a keyed toleration only', (d) => { podSpec(agentDs(d)).tolerations = [{ key: 'x', operator: 'Exists' }]; }, (d) => placementProblems(agentDs(d)), /every taint/],
  ['no priority class', (d) => { delete podSpec(agentDs(d)).priorityClassName; }, (d) => placementProblems(agentDs(d)), /system-node-critical/],
  ['a mount of an undefined volume', (d) => { podSpec(agentDs(d)).volumes = podSpec(agentDs(d)).volumes!.filter((v) => v.name !== 'ovs-log'); }, (d) => placementProblems(agentDs(d)), /undefined volume ovs-log/],
  ['an unknown config key', (d) => setConfig(d, (s) => s + 'bridgeName: br0\n'), agentProblems, /unknown setting/],
  ['health port differs from the probes', (d) => setConfig(d, (s) => s.replace(':9376', ':9375')), agentProblems, /probe port 9376 != healthAddress port 9375/],
  ['metrics port moved in the config only', (d) => setConfig(d, (s) => s.replace('metricsAddress: 0.0.0.0:9377', 'metricsAddress: 0.0.0.0:9379')), agentProblems, /prometheus\.io\/port 9377 != metricsAddress port 9379/],
  ['realization port not declared', (d) => { agentC(d).ports = agentC(d).ports!.filter((p) => p.name !== 'realization'); }, agentProblems, /declares no port 9378 \(realizationPort\)/],
  ['no scrape annotation', (d) => { delete agentDs(d).spec.template.metadata!.annotations!['prometheus.io/scrape']; }, agentProblems, /prometheus\.io\/scrape/],
  ['metrics only on loopback', (d) => setConfig(d, (s) => s.replace('metricsAddress: 0.0.0.0:9377', 'metricsAddress: 127.0.0.1:9377')), agentProblems, /loopback/],
  ['probe on another host', (d) => { agentC(d).livenessProbe!.httpGet!.host = '0.0.0.0'; }, agentProblems, /liveness probe host/],
  ['config moved without moving the mount', (d) => { agentC(d).command = ['sluice-agent', '--config', '/etc/sluice-agent/agent.yaml']; }, agentProblems, /agent reads/],
  ['socket directory not mounted', (d) => { agentC(d).volumeMounts = agentC(d).volumeMounts!.filter((m) => m.mountPath !== '/var/run/sluice'); }, agentProblems, /socketPath directory/],
  ['stateDir moved in the config only', (d) => setConfig(d, (s) => s.replace('stateDir: /var/lib/sluice', 'stateDir: /var/lib/sluice-agent')), agentProblems, /stateDir \/var\/lib\/sluice-agent is not mounted/],
  ['audit log directory not a host path', (d) => { delete podSpec(agentDs(d)).volumes!.find((v) => v.name === 'np-log')!.hostPath; }, agentProblems, /auditLogPath directory/],
  ['netns without propagation', (d) => { delete agentC(d).volumeMounts!.find((m) => m.mountPath === '/var/run/netns')!.mountPropagation; }, agentProblems, /HostToContainer/],
  ['ovs container on a different rundir volume', (d) => { ovsC(d).volumeMounts!.find((m) => m.mountPath === '/var/run/openvswitch')!.name = 'sluice-run'; }, agentProblems, /ovsRunDir/],
  ['no NODE_NAME', (d) => { agentC(d).env = []; }, agentProblems, /NODE_NAME/],
  ['no memory request', (d) => { delete agentC(d).resources!.requests!.memory; }, resourceProblems, /sluice-agent: no memory request/],
  ['a memory limit', (d) => { ovsC(d).resources!.limits = { memory: '256Mi' }; }, resourceProblems, /ovs: has limits/],
  ['bare ovs-ctl start', (d) => { ovsC(d).command = ['/usr/share/openvswitch/scripts/ovs-ctl', 'start', '--no-monitor', '--system-id=random']; }, ovsProblems, /detaches and returns/],
  ['ovs script that returns after start', (d) => { ovsC(d).command![2] = ovsC(d).command![2]!.replace(/while[\s\S]*done/, 'sleep 1'); }, ovsProblems, /foreground/],
  ['ovs script without a SIGTERM trap', (d) => { ovsC(d).command![2] = ovsC(d).command![2]!.replace(/trap [^\n]*/, ''); }, ovsProblems, /SIGTERM/],
  ['ovs script deleting bridges', (d) => { ovsC(d).command![2] = ovsC(d).command![2]!.replace('--no-monitor', '--no-monitor --delete-bridges'); }, ovsProblems, /deletes bridges/],
  ['a misspelt sluicectl option', (d) => { initC(d).command = initC(d).command!.map((a) => (a === '--conf-dir' ? '--confdir' : a)); }, install, /sluicectl rejects its command: Unknown argument/],
  ['an unknown sluicectl action', (d) => { initC(d).command = initC(d).command!.map((a) => (a === 'install' ? 'setup' : a)); }, install, /sluicectl rejects its command/],
  ['--bin-dir not the host bin directory', (d) => { initC(d).command = initC(d).command!.map((a) => (a === '/host/opt/cni/bin' ? '/opt/cni/bin' : a)); }, install, /--bin-dir/],
  ['plugin socket differs from the agent\'s', (d) => setConfig(d, (s) => s.replace('socketPath: /var/run/sluice/cni.sock', 'socketPath: /var/run/sluice/agent.sock')), install, /agent listens on \/var\/run\/sluice\/agent.sock/],
];

t.test('each check fails when the manifest is broken', async (t) => {
  for (const [name, breakIt, check, expected] of breakages) {
    const docs = clone(sluice);
    breakIt(docs);
    let problems: string[];
    try {
      problems = await check(docs);
    } catch (err) {
      problems = [(err as Error).message];
    }
    t.match(problems.join('\n'), expected, name);
  }
});

t.test('the CRD checks fail on broken CRDs', async (t) => {
  const missing = clone(crds).filter((c) => c.metadata.name !== 'baselineadminnetworkpolicies.policy.networking.k8s.io');
  t.match(crdProblems(missing).join('\n'), /no CRD serves policy.networking.k8s.io\/v1alpha1 baselineadminnetworkpolicies/, 'a missing CRD');
  const unserved = clone(crds) as unknown as ReturnType<typeof sluiceCrds>;
  unserved[0]!.spec.versions[0]!.served = false;
  t.match(crdProblems(unserved as unknown as Doc[]).join('\n'), /no CRD serves crd.antrea.io\/v1beta1 tiers/, 'the watched version not served');
  const misnamed = clone(crds);
  misnamed[1]!.metadata.name = 'acnps.crd.antrea.io';
  t.match(crdProblems(misnamed).join('\n'), /metadata.name/, 'a name that is not plural.group');
  const twoStorage = clone(crds) as unknown as ReturnType<typeof sluiceCrds>;
  twoStorage[2]!.spec.versions.forEach((v) => { v.storage = true; });
  t.match(crdProblems(twoStorage as unknown as Doc[]).join('\n'), /one storage version/, 'two storage versions');
});
