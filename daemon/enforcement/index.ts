/**
 * Wiring of policy enforcement into the agent (see enforcer.ts): whether it runs, and the hooks the
 * agent calls.
 */
import type { Logger } from 'pino';
import type { AgentConfig } from '../config.js';
import { FqdnLearning } from './fqdn/index.js';
import { Enforcer } from './enforcer.js';
import type { EnforcementHooks } from './hooks.js';
import { clusterIPsOutside } from '../node/service-cidrs.js';
import { readFileSync } from 'node:fs';
import type { KubeObject } from '../policy/types.js';
import type { ClusterWatch } from './watch/clusterwatch.js';
import { askController, askTraceDestination, type ControllerAccess, TraceDestinationRefused } from '../controlplane/client.js';
import { RealizedReporter } from '../controlplane/realized-reporter.js';
import { CA_CONFIGMAP, caFromConfigMap, caFromFile } from '../controlplane/controller-ca.js';
import { readThroughApi, ServiceAddresses, serviceOfHost } from '../controlplane/service-address.js';
import { KubeAccess } from '../kube/access.js';
import { ControllerModeEnforcer } from './controller-mode/enforcer.js';
import type { PodAttachment } from '../node/attachment.js';
import type { OpenFlowController } from '../ovs/openflow/controller.js';
import type { ConntrackIo } from './conntrack/index.js';
import type { EnforcerStatus } from './status.js';
import type { PolicyReport } from './policy-report.js';
import { type TraceBridge, TraceError, type TraceReport, type TraceRequest } from './traceflow.js';
import type { ObserveRoute } from './trace-observers.js';
import type { EnforcementMetrics } from '../metrics.js';
import type { RuleStatistics } from '../flows/policy/stats.js';

export { Enforcer, type DnsLearning, type DnsPuntHook, type EnforcerOptions, type EnforcerStatus } from './enforcer.js';
export { PodView } from './podview.js';
export { buildPolicyReport, type EnforcedPolicy, type PolicyReport } from './policy-report.js';
export { decidePolicyPunt } from './punthandler.js';
export type { EnforcementHooks, EnforcementNode } from './hooks.js';

/** Enforcement runs when configured so, or by default when an API server is configured. */
export function enforcementWanted(cfg: AgentConfig, env: NodeJS.ProcessEnv = process.env): { on: boolean; why: string } {
  if (cfg.enforcePolicies === false) return { on: false, why: 'enforcePolicies: false' };
  const api = Boolean(cfg.kubeconfig) || Boolean(env.KUBERNETES_SERVICE_HOST);
  if (cfg.enforcePolicies === true) return { on: true, why: 'enforcePolicies: true' };
  return api ? { on: true, why: cfg.kubeconfig ? `kubeconfig ${cfg.kubeconfig}` : 'in-cluster API server' } : { on: false, why: 'no API server configured (no kubeconfig, not in a cluster)' };
}

/** What start-up reads of the policy side, in either mode: the Service ranges it waits for, and closing. */
export interface PolicySide {
  serviceCidrObjects(): Promise<KubeObject[] | undefined>;
  currentServiceCidrObjects(): KubeObject[] | undefined;
  onServiceCidrs?: () => void;
  readonly clusterWatch: Pick<ClusterWatch, 'pending'> | undefined;
  close(): Promise<void>;
}

/**
 * Starts the policy side now (in parallel with the agent's start-up) and returns the agent hooks:
 * the whole-cluster engine (`policySource: standalone`), or following sluice-controller.
 */
export async function startEnforcement(
  cfg: AgentConfig,
  log: Logger,
  opts: { onRealized?: (seconds: number) => void; onConnectionsCut?: (count: number) => void } = {},
): Promise<{ enforcer: PolicySide; hooks: EnforcementHooks }> {
  if (cfg.policySource === 'controller') return startControllerMode(cfg, log, opts);
  // FQDN peers follow what DNS tells local Pods (enforcement/fqdn).
  const enforcer = new Enforcer({ ...sharedOptions(cfg, log, opts), dns: fqdnLearning(log) });
  await enforcer.startWatch();
  const hooks: EnforcementHooks = {
    ...commonHooks(enforcer),
    servicesOutside: (cidrs) => clusterIPsOutside(enforcer.engine.cluster.services.values(), cidrs),
    policyObject: (e) => enforcer.policyObject(e),
  };
  return { enforcer, hooks };
}

/** Controller mode (controller-mode/): the policy state from sluice-controller. */
async function startControllerMode(
  cfg: AgentConfig,
  log: Logger,
  opts: { onRealized?: (seconds: number) => void; onConnectionsCut?: (count: number) => void },
): Promise<{ enforcer: PolicySide; hooks: EnforcementHooks }> {
  const access = controllerAccess(cfg);
  const reporter = new RealizedReporter({ ...access, log });
  const listeners: ((state: 'connected' | 'disconnected', reason: string) => void)[] = [];
  const enforcer = new ControllerModeEnforcer({
    ...sharedOptions(cfg, log, opts),
    dns: fqdnLearning(log),
    controller: access,
    askController: (pod, waitMs, confirmMs) => askController(access, pod, waitMs, confirmMs),
    realizedViews: reporter,
    traceDestination: async (to, family) => {
      try {
        return await askTraceDestination(access, to, family);
      } catch (err) {
        throw err instanceof TraceDestinationRefused ? new TraceError(err.message) : err;
      }
    },
    serviceRanges: () => cfg.serviceCIDRs,
    onControlPlane: (state, reason) => {
      for (const l of listeners) l(state, reason);
    },
  });
  await enforcer.start();
  reporter.start();
  const hooks: EnforcementHooks = {
    ...commonHooks(enforcer),
    watchControlPlane: (listener) => listeners.push(listener),
    serveTraceTasks: (run) => enforcer.serveTraceTasks(run),
  };
  return { enforcer, hooks };
}

/** DNS learning for fqdn peers: each Node learns what its own Pods resolve, in both modes. */
function fqdnLearning(log: Logger): FqdnLearning {
  return new FqdnLearning({ log: { debug: (o, m) => log.debug(o, m), warn: (o, m) => log.warn(o, m) } });
}

/** The settings both modes take from the configuration. */
function sharedOptions(cfg: AgentConfig, log: Logger, opts: { onRealized?: (seconds: number) => void; onConnectionsCut?: (count: number) => void }) {
  return {
    nodeName: cfg.nodeName,
    ...(cfg.kubeconfig ? { kubeconfig: cfg.kubeconfig } : {}),
    ovsRunDir: cfg.ovsRunDir,
    bridge: cfg.bridge,
    auditLogPath: cfg.auditLogPath,
    stateDir: cfg.stateDir,
    log,
    ...(opts.onRealized ? { onRealized: opts.onRealized } : {}),
    ...(opts.onConnectionsCut ? { onConnectionsCut: opts.onConnectionsCut } : {}),
    connections: { datapath: cfg.datapath, keepNetworkPolicy: cfg.networkPolicyConnections === 'keep' },
    newPods: { realizationPort: cfg.realizationPort },
  };
}

/** What the agent's hooks call on the policy side, the same in both modes (Enforcer, ControllerModeEnforcer). */
interface NodeEnforcement {
  writeFlows: EnforcementHooks['writeFlows'];
  localPodsAtStart(pods: PodAttachment[]): void;
  waitSynced(): Promise<void>;
  attach(opts: { controller: OpenFlowController; applyFlows: () => Promise<unknown>; portMac: (ofport: number) => string | undefined; conntrack?: ConntrackIo; nodeIPs: readonly string[] }): Promise<void>;
  flowsConverged(): void;
  podAttaching: EnforcementHooks['podAttaching'];
  podDetached: EnforcementHooks['podDetached'];
  podStarting(pod: PodAttachment): Promise<void>;
  realizedAnswer(query: URLSearchParams): Promise<{ code: number; body: unknown }>;
  close(): Promise<void>;
  status(): EnforcerStatus;
  policyReport(): PolicyReport;
  traceflow(req: Omit<TraceRequest, 'destination'>, bridge: TraceBridge): Promise<TraceReport>;
  traceObserveRoutes(bridge: () => TraceBridge | undefined): Record<string, ObserveRoute>;
  metrics(): EnforcementMetrics;
  ruleStats(dump: () => Promise<string>): Promise<RuleStatistics[]>;
  meterDrops(): Promise<Record<string, number>>;
}

/** The hooks both modes answer alike. */
function commonHooks(enforcer: NodeEnforcement): EnforcementHooks {
  return {
    writeFlows: (store) => enforcer.writeFlows(store),
    prepare: async (node, localPods) => {
      enforcer.localPodsAtStart(localPods);
      await enforcer.waitSynced();
      await enforcer.attach({
        controller: node.openflow,
        applyFlows: () => node.syncFlows(),
        portMac: (ofport) => node.portMac(ofport),
        ...(node.conntrack ? { conntrack: node.conntrack } : {}),
        nodeIPs: node.nodeIPs ?? [],
      });
    },
    flowsConverged: () => enforcer.flowsConverged(),
    podAttaching: (pod) => enforcer.podAttaching(pod),
    podDetached: (pod) => enforcer.podDetached(pod),
    podStarting: (pod) => enforcer.podStarting(pod),
    realized: (query) => enforcer.realizedAnswer(query),
    close: () => enforcer.close(),
    status: () => enforcer.status(),
    policyReport: () => enforcer.policyReport(),
    traceflow: (req, bridge) => enforcer.traceflow(req, bridge),
    traceObserveRoutes: (bridge) => enforcer.traceObserveRoutes(bridge),
    metrics: () => enforcer.metrics(),
    ruleStats: (dump) => enforcer.ruleStats(dump),
    meterDrops: () => enforcer.meterDrops(),
  };
}

/**
 * The controller's address and the agent's credentials for it, from the configuration. A
 * controllerServer naming a Service (`<service>.<namespace>.svc`) is reached at the Service's
 * ClusterIP read through the API server: the agent is on the host network, whose resolver does
 * not know cluster names. Its CA is read before each connection (`controllerCAFile: ""`: from
 * ConfigMap sluice-ca in that namespace through the API; else from the file), so neither a CA the
 * controller has not published yet nor a file not there yet stops the start: the controller is
 * unreachable meanwhile, for a reason naming what is missing. An unreadable token file is named.
 */
export function controllerAccess(cfg: Pick<AgentConfig, 'controllerServer' | 'controllerCAFile' | 'controllerTokenFile' | 'kubeconfig'>, api?: () => Pick<KubeAccess, 'getJson'>): ControllerAccess {
  const host = new URL(cfg.controllerServer);
  const svc = serviceOfHost(host.hostname);
  let kube: Pick<KubeAccess, 'getJson'> | undefined;
  // Loaded only when something is read through it (not for the lab's https://127.0.0.1 and a CA file).
  const connection = () => (kube ??= api ? api() : KubeAccess.load(cfg.kubeconfig));
  const lazy = (resource: 'services' | 'configmaps') => {
    let get: ReturnType<typeof readThroughApi> | undefined;
    return (ns: string, name: string) => (get ??= readThroughApi(connection(), resource))(ns, name);
  };
  let ca: ControllerAccess['ca'];
  if (cfg.controllerCAFile) {
    ca = caFromFile(cfg.controllerCAFile, `the controller publishes its CA in the ConfigMap ${svc ? `${svc.namespace}/` : ''}${CA_CONFIGMAP}; controllerCAFile "" reads it from there through the API`);
  } else if (host.protocol === 'https:') {
    // parseConfig refuses "" with a host that is not a Service name.
    if (!svc) throw new Error(`controllerCAFile "" needs a controllerServer naming a Service (<service>.<namespace>.svc), not ${host.hostname}`);
    ca = caFromConfigMap({ getConfigMap: lazy('configmaps'), namespace: svc.namespace, name: CA_CONFIGMAP });
  }
  const tokenFile = cfg.controllerTokenFile;
  if (tokenFile) {
    try {
      readFileSync(tokenFile, 'utf8');
    } catch (err) {
      throw new Error(`controllerTokenFile ${tokenFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  return {
    server: cfg.controllerServer,
    // Read at every request: projected ServiceAccount tokens rotate.
    ...(tokenFile ? { token: () => readFileSync(tokenFile, 'utf8').trim() } : {}),
    ...(ca !== undefined ? { ca } : {}),
    ...(svc ? { lookup: new ServiceAddresses({ getService: lazy('services'), notFoundHint: 'the controller is installed by install/sluice.yaml' }).lookup } : {}),
  };
}
