/**
 * sluice-agent configuration: a YAML file, every field optional except where noted, validated
 * strictly (unknown keys are errors, so a typo never silently falls back to a default).
 *
 * ```yaml
 * nodeName: node-1              # default: $NODE_NAME, else the host name
 * kubeconfig: /etc/sluice/kubeconfig   # absent = in-cluster service account
 * bridge: br-int
 * datapath: auto                # auto | system | netdev (userspace; needs veth isolation + TX csum off)
 *                               # (auto: system when the kernel has the openvswitch module, else netdev;
 *                               # an explicit system on a node without the module stops the agent at start)
 * iptablesBackend: auto        # auto | nft | legacy: the host's backend (auto: as kube-proxy's image decides)
 * gateway: antrea-gw0
 * serviceCIDRs: [10.96.0.0/12]   # default: none; used when the cluster does not serve ServiceCIDR
 *                               # (networking.k8s.io/v1, Kubernetes 1.33+), whose ranges win when it does;
 *                               # with neither, the agent refuses to start (node/service-cidrs.ts)
 * socketPath: /var/run/sluice/cni.sock
 * ovsRunDir: /var/run/openvswitch   # holds db.sock and <bridge>.mgmt
 * stateDir: /var/lib/sluice
 * healthAddress: 127.0.0.1:9376     # /healthz, /readyz, /status, /policies, /flows, /metrics
 * metricsAddress: 0.0.0.0:9377      # default: none; also serve /metrics here (for Prometheus: hostNetwork
 *                                   # Pods are scraped on the node's address, which 127.0.0.1 is not)
 * logLevel: info                # fatal error warn info debug trace
 * nodeIP: 192.168.77.11         # default: the Node object's IPv4 InternalIP
 * nodeIPv6: fd00:77::11         # default: the Node object's IPv6 InternalIP (IPv6 / dual-stack nodes)
 * resyncIntervalSeconds: 60     # host networking + flows convergence
 * flowCheckIntervalSeconds: 5   # quick check that OVS still has the flows (ovs-vswitchd restart)
 * rtTablesFile: /etc/iproute2/rt_tables.d/sluice.conf   # "" = do not register the table name
 * cniConfDir: /host/etc/cni/net.d   # default: none; keep sluice chained in the runtime's CNI configuration there
 * cniBinDir: /host/opt/cni/bin     # where the sluice-cni plugin is installed (chained only while it is there)
 * cniCacheDir: /host/var/lib/cni   # the runtime's CNI cache (libcni's; results/ in it): running Pods are adopted from it
 * auditLogPath: /var/log/antrea/networkpolicy/np.log     # policy audit log (rules with logging)
 * enforcePolicies: true         # default: on when an API server is configured (kubeconfig or in-cluster)
 * packetInRate: 5000            # packets/s each packet-in meter lets through to the agent (Reject replies and
 *                               # audit logging; DNS learning; traceflow), bursts of twice that; the bridge
 *                               # drops the rest (sluice_packet_in_meter_drops_total)
 * networkPolicyConnections: cut # cut | keep: open connections that a change now denies are cut, for
 *                               # every policy kind; keep: those only Kubernetes NetworkPolicy denies
 *                               # stay open (that kind's connection-based semantics). Set it the same
 *                               # on every node (the DaemonSet's ConfigMap).
 * realizationPort: 9378         # the agent answers other agents on the node's addresses here: is a new
 *                               # Pod enforced on this node yet (a new Pod's ADD asks the nodes where
 *                               # its address matters). The same on every node; 1-65535.
 * policySource: standalone      # standalone | controller: where the policy state comes from. standalone:
 *                               # this agent watches the whole cluster and computes every group itself
 *                               # (small clusters). controller: sluice-controller computes them once and
 *                               # serves this Node its span (daemon/enforcement/controller-mode); the agent
 *                               # watches the API server only for the ServiceCIDRs and its own Pods' status.
 * controllerServer: https://sluice-controller.sluice-system.svc:443   # controller mode: the controller's API.
 *                               # A Service name (<service>.<namespace>.svc[.<cluster domain>]) is looked
 *                               # up through the API server (its ClusterIP): the agent is on the host
 *                               # network, whose resolver does not know cluster names; TLS still
 *                               # verifies the certificate against the name
 * controllerCAFile: ""          # the CA the controller's certificate chains to (https). "" (default): read
 *                               # at each connection attempt from the ConfigMap sluice-ca (key ca.crt) in
 *                               # the controllerServer Service's namespace through the API, where the
 *                               # controller publishes it once it first leads (needs get on it; a host
 *                               # that is not a Service name needs a file here). A path: that PEM file,
 *                               # also read at each attempt (it may appear later, or rotate)
 * controllerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token   # the agent's bearer token,
 *                               # read at each request (projected tokens rotate); "" = none
 * ```
 */
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { isAbsolute } from 'node:path';
import { isIPv4, isIPv6 } from 'node:net';
import { parseYaml } from './kube-yaml.js';
import { checkCIDR, PipelineInputError } from './flows/pipeline.js';
import { chooseDatapath, kernelOvs, type KernelOvs } from './ovs/datapath.js';
import type { IptablesBackendSetting } from './hostnet/iptables-backend.js';
import { CA_CONFIGMAP } from './controlplane/controller-ca.js';
import { serviceOfHost } from './controlplane/service-address.js';

export interface AgentConfig {
  nodeName: string;
  kubeconfig?: string;
  bridge: string;
  datapath: 'system' | 'netdev';
  /** How `datapath: auto` was resolved (absent when set explicitly). */
  datapathWhy?: string;
  iptablesBackend: IptablesBackendSetting;
  gateway: string;
  /** The configured Service ranges (empty: none; the cluster's ServiceCIDR objects are used, node/service-cidrs.ts). */
  serviceCIDRs: string[];
  socketPath: string;
  ovsRunDir: string;
  stateDir: string;
  healthAddress: { host: string; port: number };
  metricsAddress?: { host: string; port: number };
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
  nodeIP?: string;
  nodeIPv6?: string;
  resyncIntervalSeconds: number;
  flowCheckIntervalSeconds: number;
  /** null: do not register the route table name. */
  rtTablesFile: string | null;
  /** Keep sluice chained in this CNI configuration directory (daemon/node/chainkeeper.ts); absent: not kept. */
  cniConfDir?: string;
  cniBinDir: string;
  /** The runtime's libcni cache directory (results/ in it): what running Pods are adopted from. */
  cniCacheDir: string;
  auditLogPath: string;
  /** undefined: enforce when an API server is configured; false: datapath only. */
  enforcePolicies?: boolean;
  /** Packets per second each packet-in meter passes to the agent. */
  packetInRate: number;
  /** What happens to open connections that only Kubernetes NetworkPolicy now denies. */
  networkPolicyConnections: 'cut' | 'keep';
  /** Port of the realization endpoint other agents ask about new Pods (enforcement/newpods). */
  realizationPort: number;
  /** Where the policy state comes from: the agent's own whole-cluster engine, or sluice-controller. */
  policySource: 'standalone' | 'controller';
  /** Controller mode: the controller's API; the CA its certificate chains to ('' = ConfigMap sluice-ca through the API); the agent's token file ('' = none). */
  controllerServer: string;
  controllerCAFile: string;
  controllerTokenFile: string;
}

export const CONFIG_DEFAULTS = {
  bridge: 'br-int',
  datapath: 'auto',
  iptablesBackend: 'auto',
  gateway: 'antrea-gw0',
  socketPath: '/var/run/sluice/cni.sock',
  ovsRunDir: '/var/run/openvswitch',
  stateDir: '/var/lib/sluice',
  healthAddress: '127.0.0.1:9376',
  logLevel: 'info',
  resyncIntervalSeconds: 60,
  flowCheckIntervalSeconds: 5,
  rtTablesFile: '/etc/iproute2/rt_tables.d/sluice.conf',
  cniBinDir: '/opt/cni/bin',
  cniCacheDir: '/var/lib/cni',
  auditLogPath: '/var/log/antrea/networkpolicy/np.log',
  packetInRate: 5000,
  networkPolicyConnections: 'cut',
  realizationPort: 9378,
  policySource: 'standalone',
  controllerServer: 'https://sluice-controller.sluice-system.svc:443',
  controllerCAFile: '',
  controllerTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
} as const;

export const DEFAULT_CONFIG_PATH = '/etc/sluice/agent.yaml';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;
const KEYS = [
  'nodeName', 'kubeconfig', 'bridge', 'datapath', 'iptablesBackend', 'gateway', 'serviceCIDRs', 'socketPath', 'ovsRunDir', 'stateDir',
  'healthAddress', 'metricsAddress', 'logLevel', 'nodeIP', 'nodeIPv6', 'resyncIntervalSeconds', 'flowCheckIntervalSeconds', 'rtTablesFile',
  'auditLogPath', 'enforcePolicies', 'cniConfDir', 'cniBinDir', 'cniCacheDir', 'packetInRate', 'networkPolicyConnections',
  'realizationPort', 'policySource', 'controllerServer', 'controllerCAFile', 'controllerTokenFile',
] as const;
/** Linux interface names: 1-15 bytes, no '/', whitespace or ':'. */
const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

/** Parses and validates the YAML text; `source` names the file in messages. */
export function parseConfig(text: string, source: string, env: NodeJS.ProcessEnv = process.env, kernel: () => KernelOvs = kernelOvs): AgentConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`${source}: not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  if (doc === undefined || doc === null) doc = {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw new ConfigError(`${source}: must be a YAML mapping of settings`);
  const raw = doc as Record<string, unknown>;
  const bad = (field: string, why: string): never => {
    throw new ConfigError(`${source}: ${field}: ${why}`);
  };
  for (const k of Object.keys(raw)) {
    if (!(KEYS as readonly string[]).includes(k)) bad(k, `unknown setting (known: ${KEYS.join(', ')})`);
  }
  const str = (field: string, dflt?: string): string | undefined => {
    const v = raw[field];
    if (v === undefined || v === null) return dflt;
    if (typeof v !== 'string' || v.trim() === '') return bad(field, `must be a non-empty string, got ${JSON.stringify(v)}`);
    return v;
  };
  const path = (field: string, dflt?: string): string | undefined => {
    const v = str(field, dflt);
    if (v !== undefined && !isAbsolute(v)) bad(field, `must be an absolute path, got "${v}"`);
    return v;
  };
  const ifname = (field: string, dflt: string): string => {
    const v = str(field, dflt)!;
    if (!IFNAME.test(v)) bad(field, `"${v}" is not a valid interface name (1-15 of A-Z a-z 0-9 _ . -)`);
    return v;
  };
  const seconds = (field: string, dflt: number): number => {
    const v = raw[field] ?? dflt;
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) bad(field, `must be a positive number of seconds, got ${JSON.stringify(v)}`);
    return v as number;
  };

  const nodeName = str('nodeName') ?? env.NODE_NAME ?? hostname();
  const datapathSetting = str('datapath', CONFIG_DEFAULTS.datapath)!;
  if (datapathSetting !== 'system' && datapathSetting !== 'netdev' && datapathSetting !== 'auto') return bad('datapath', `must be "system", "netdev" or "auto", got "${datapathSetting}"`);
  const auto = datapathSetting === 'auto' ? chooseDatapath(kernel()) : undefined;
  const datapath = auto?.datapath ?? (datapathSetting as 'system' | 'netdev');
  const iptablesBackend = str('iptablesBackend', CONFIG_DEFAULTS.iptablesBackend)!;
  if (iptablesBackend !== 'auto' && iptablesBackend !== 'nft' && iptablesBackend !== 'legacy') bad('iptablesBackend', `must be "auto", "nft" or "legacy", got "${iptablesBackend}"`);

  const cidrs = raw.serviceCIDRs ?? [];
  const cidrList = typeof cidrs === 'string' ? [cidrs] : cidrs;
  if (!Array.isArray(cidrList) || (raw.serviceCIDRs !== undefined && raw.serviceCIDRs !== null && cidrList.length === 0)) bad('serviceCIDRs', 'must be a non-empty list of CIDRs (leave it out to use the cluster\'s ServiceCIDR objects)');
  const serviceCIDRs = (cidrList as unknown[]).map((c, i) => {
    if (typeof c !== 'string') return bad(`serviceCIDRs[${i}]`, `must be a string, got ${JSON.stringify(c)}`);
    try {
      checkCIDR(c, `serviceCIDRs[${i}]`);
    } catch (err) {
      if (err instanceof PipelineInputError) throw new ConfigError(`${source}: ${err.message}`);
      throw err;
    }
    return c;
  });

  const hostPort = (field: string, v: string): { host: string; port: number } => {
    const m = /^(.*):(\d{1,5})$/.exec(v);
    const port = m ? Number(m[2]) : NaN;
    if (!m?.[1] || port > 65535) return bad(field, `must be host:port (port 0-65535), got "${v}"`);
    return { host: m[1], port };
  };
  const healthAddress = hostPort('healthAddress', str('healthAddress', CONFIG_DEFAULTS.healthAddress)!);
  const metrics = str('metricsAddress');
  const metricsAddress = metrics === undefined ? undefined : hostPort('metricsAddress', metrics);
  if (metricsAddress && metricsAddress.port !== 0 && metricsAddress.port === healthAddress.port) bad('metricsAddress', `port ${metricsAddress.port} is healthAddress's port`);

  const logLevel = str('logLevel', CONFIG_DEFAULTS.logLevel)!;
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) bad('logLevel', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);

  const nodeIP = str('nodeIP');
  if (nodeIP !== undefined && !isIPv4(nodeIP)) bad('nodeIP', `"${nodeIP}" is not an IPv4 address`);
  const nodeIPv6 = str('nodeIPv6');
  if (nodeIPv6 !== undefined && !isIPv6(nodeIPv6)) bad('nodeIPv6', `"${nodeIPv6}" is not an IPv6 address`);

  let rtTablesFile: string | null = CONFIG_DEFAULTS.rtTablesFile;
  if ('rtTablesFile' in raw) {
    const v = raw.rtTablesFile;
    if (v === null || v === '') rtTablesFile = null;
    else rtTablesFile = path('rtTablesFile')!;
  }

  const enforce = raw.enforcePolicies;
  if (enforce !== undefined && enforce !== null && typeof enforce !== 'boolean') bad('enforcePolicies', `must be true or false, got ${JSON.stringify(enforce)}`);

  const packetInRate = raw.packetInRate ?? CONFIG_DEFAULTS.packetInRate;
  // The meter's rate is a 32-bit field, and its burst (twice the rate) must fit too.
  if (typeof packetInRate !== 'number' || !Number.isInteger(packetInRate) || packetInRate < 1 || packetInRate > 0x7fffffff) {
    bad('packetInRate', `must be a whole number of packets per second from 1 to ${0x7fffffff}, got ${JSON.stringify(packetInRate)}`);
  }

  const networkPolicyConnections = str('networkPolicyConnections', CONFIG_DEFAULTS.networkPolicyConnections)!;
  if (networkPolicyConnections !== 'cut' && networkPolicyConnections !== 'keep') {
    bad('networkPolicyConnections', `must be "cut" (open connections a change denies are cut) or "keep" (those only Kubernetes NetworkPolicy denies stay open), got "${networkPolicyConnections}"`);
  }

  const realizationPort = raw.realizationPort ?? CONFIG_DEFAULTS.realizationPort;
  if (typeof realizationPort !== 'number' || !Number.isInteger(realizationPort) || realizationPort < 1 || realizationPort > 65535) {
    bad('realizationPort', `must be a port 1-65535 (every node's agent answers other agents there), got ${JSON.stringify(realizationPort)}`);
  }
  for (const [field, a] of [['healthAddress', healthAddress], ['metricsAddress', metricsAddress]] as const) {
    if (a && a.port === realizationPort) bad('realizationPort', `port ${realizationPort} is ${field}'s port`);
  }

  const policySource = str('policySource', CONFIG_DEFAULTS.policySource)!;
  if (policySource !== 'standalone' && policySource !== 'controller') {
    bad('policySource', `must be "standalone" (this agent computes the whole cluster) or "controller" (sluice-controller serves this Node its span), got "${policySource}"`);
  }
  const controllerServer = str('controllerServer', CONFIG_DEFAULTS.controllerServer)!;
  let serverUrl: URL | undefined;
  try {
    serverUrl = new URL(controllerServer);
  } catch {
    bad('controllerServer', `"${controllerServer}" is not a URL (e.g. https://sluice-controller.sluice-system.svc:443)`);
  }
  if (serverUrl && serverUrl.protocol !== 'https:' && serverUrl.protocol !== 'http:') bad('controllerServer', `"${controllerServer}" is neither http nor https`);
  const controllerTokenFile = raw.controllerTokenFile === '' ? '' : path('controllerTokenFile', CONFIG_DEFAULTS.controllerTokenFile)!;
  const controllerCAFile = raw.controllerCAFile === undefined || raw.controllerCAFile === null || raw.controllerCAFile === '' ? CONFIG_DEFAULTS.controllerCAFile : path('controllerCAFile')!;
  // The CA comes from the API only for a Service name: its namespace says where the ConfigMap is.
  if (policySource === 'controller' && serverUrl?.protocol === 'https:' && controllerCAFile === '' && !serviceOfHost(serverUrl.hostname)) {
    bad('controllerCAFile', `must be set: "" reads the CA from ConfigMap ${CA_CONFIGMAP} in the controllerServer Service's namespace, and "${serverUrl.hostname}" is not a Service name (<service>.<namespace>.svc)`);
  }

  const bridge = ifname('bridge', CONFIG_DEFAULTS.bridge);
  const gateway = ifname('gateway', CONFIG_DEFAULTS.gateway);
  if (bridge === gateway) bad('gateway', `must differ from bridge "${bridge}"`);

  return {
    nodeName,
    ...(raw.kubeconfig !== undefined && raw.kubeconfig !== null ? { kubeconfig: path('kubeconfig')! } : {}),
    bridge,
    datapath,
    ...(auto ? { datapathWhy: auto.why } : {}),
    iptablesBackend: iptablesBackend as IptablesBackendSetting,
    gateway,
    serviceCIDRs,
    socketPath: path('socketPath', CONFIG_DEFAULTS.socketPath)!,
    ovsRunDir: path('ovsRunDir', CONFIG_DEFAULTS.ovsRunDir)!,
    stateDir: path('stateDir', CONFIG_DEFAULTS.stateDir)!,
    healthAddress,
    ...(metricsAddress ? { metricsAddress } : {}),
    logLevel: logLevel as AgentConfig['logLevel'],
    ...(nodeIP !== undefined ? { nodeIP } : {}),
    ...(nodeIPv6 !== undefined ? { nodeIPv6 } : {}),
    resyncIntervalSeconds: seconds('resyncIntervalSeconds', CONFIG_DEFAULTS.resyncIntervalSeconds),
    flowCheckIntervalSeconds: seconds('flowCheckIntervalSeconds', CONFIG_DEFAULTS.flowCheckIntervalSeconds),
    rtTablesFile,
    ...(raw.cniConfDir !== undefined && raw.cniConfDir !== null ? { cniConfDir: path('cniConfDir')! } : {}),
    cniBinDir: path('cniBinDir', CONFIG_DEFAULTS.cniBinDir)!,
    cniCacheDir: path('cniCacheDir', CONFIG_DEFAULTS.cniCacheDir)!,
    auditLogPath: path('auditLogPath', CONFIG_DEFAULTS.auditLogPath)!,
    ...(typeof enforce === 'boolean' ? { enforcePolicies: enforce } : {}),
    packetInRate: packetInRate as number,
    networkPolicyConnections: networkPolicyConnections as AgentConfig['networkPolicyConnections'],
    realizationPort: realizationPort as number,
    policySource: policySource as AgentConfig['policySource'],
    controllerServer,
    controllerCAFile,
    controllerTokenFile,
  };
}

export async function loadConfig(path: string, env: NodeJS.ProcessEnv = process.env): Promise<AgentConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseConfig(text, path, env);
}
