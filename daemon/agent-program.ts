/**
 * The sluice-agent program (daemon/main.ts runs it): flags and configuration, the agent's parts
 * assembled and started, or the node's cleanup. Importing it runs nothing, so a bench can load
 * every module a whole agent loads.
 */
import { pino, type Logger } from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { existsSync } from 'node:fs';
import { Agent } from './agent.js';
import { PodAdopter } from './node/adopter.js';
import { ChainKeeper } from './node/chainkeeper.js';
import { realClock } from './clock.js';
import { type AgentConfig, ConfigError, DEFAULT_CONFIG_PATH, loadConfig } from './config.js';
import { explicitDatapathProblem, kernelOvs } from './ovs/datapath.js';
import { chooseServiceCidrs } from './node/service-cidrs.js';
import type { KubeObject } from './policy/types.js';
import { type EnforcementHooks, enforcementWanted, type PolicySide, startEnforcement } from './enforcement/index.js';
import { ATTACH_STEPS, type AttachStep, PodAttacher } from './cni/attacher.js';
import { cleanupNode, runningAgent } from './node/cleanup.js';
import { OvsBridge } from './ovs/bridge.js';
import { FlowProgrammer } from './ovs/flow-programmer.js';
import { FlowSync } from './flows/sync.js';
import { OpenFlowController } from './ovs/openflow/controller.js';
import { packetInMeters } from './flows/punt.js';
import { CT_ZONE } from './flows/tables.js';
import { startHealthServer } from './health.js';
import { HostNetwork, NetnsHelper, PodLinks, podInterfaceIPv4, resolveIptables } from './hostnet/index.js';
import { NodeApi } from './kube/node-api.js';
import { SharedExclusiveLock } from './lock.js';
import { AgentMetrics } from './metrics.js';
import type { PodAttachment } from './node/attachment.js';
import { type InvalidPolicy, type InvalidPolicySource, NodeEvents } from './node/events.js';
import { PodRegistry } from './node/pod-registry.js';
import { NodeReconciler } from './node/reconciler.js';
import { NodeSchedules } from './node/schedules.js';
import { realQuietCollector } from './quiet-collector.js';
import { sluiceEntry } from '../install/conflist.js';

/** The agent program: its flags, its configuration, then the agent or the cleanup. Resolves with the exit code. */
export async function main(): Promise<number> {
  const argv = yargs(hideBin(process.argv))
    .scriptName('sluice-agent')
    .usage('$0 [--config FILE]\n\nThe sluice node agent: OVS bridge behind the primary CNI, CNI socket, host networking.')
    .option('config', { alias: 'c', type: 'string', default: DEFAULT_CONFIG_PATH, describe: 'YAML configuration file' })
    .option('cleanup', { type: 'boolean', default: false, describe: 'uninstall: restore every Pod to the primary CNI alone and remove sluice from this node (OVS running, agent stopped), then exit' })
    .option('cleanup-then-wait', { type: 'boolean', default: false, describe: 'like --cleanup, then idle until SIGTERM (also: env SLUICE_CLEANUP=1)' })
    .strict()
    .help()
    .parseSync();

  let config: AgentConfig;
  try {
    config = await loadConfig(argv.config);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`sluice-agent: invalid configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const envCleanup = process.env.SLUICE_CLEANUP ?? '';
  if (!['', '0', '1'].includes(envCleanup)) {
    process.stderr.write(`sluice-agent: SLUICE_CLEANUP must be 1 (clean up this node, then idle) or 0/unset, got "${envCleanup}"\n`);
    return 2;
  }
  const wait = argv['cleanup-then-wait'] || envCleanup === '1';
  if (argv.cleanup || wait) {
    // stdout carries the cleanup's report, one line per item; the JSON log goes to stderr.
    return cleanup(config, pino({ level: config.logLevel, base: { node: config.nodeName } }, pino.destination(2)), wait);
  }
  const log = pino({ level: config.logLevel, base: { node: config.nodeName } });

  // Test hook only: SLUICE_FAILPOINT=<step> makes every ADD fail after that step.
  const failpoint = process.env.SLUICE_FAILPOINT;
  if (failpoint && !(ATTACH_STEPS as readonly string[]).includes(failpoint)) {
    process.stderr.write(`sluice-agent: SLUICE_FAILPOINT must be one of ${ATTACH_STEPS.join(', ')}\n`);
    return 2;
  }
  if (failpoint) log.warn({ failpoint }, 'SLUICE_FAILPOINT set: every ADD will fail (testing only)');

  if (config.datapathWhy) log.info({ datapath: config.datapath, why: config.datapathWhy }, 'datapath: auto');
  const datapathProblem = explicitDatapathProblem(config.datapath, config.datapathWhy !== undefined, kernelOvs());
  if (datapathProblem) {
    log.fatal({ datapath: config.datapath }, datapathProblem);
    process.stderr.write(`sluice-agent: ${datapathProblem}\n`);
    return 2;
  }
  let agent: Agent;
  try {
    const wanted = enforcementWanted(config);
    log.info({ reason: wanted.why }, wanted.on ? 'policy enforcement on' : 'policy enforcement OFF (datapath only)');
    const metrics = new AgentMetrics({ node: config.nodeName, datapath: { datapath: config.datapath, setting: config.datapathWhy !== undefined ? 'auto' : 'explicit' } });
    const started = wanted.on ? await startEnforcement(config, log, { onRealized: (s) => metrics.observeRealization(s), onConnectionsCut: (n) => metrics.observeConnectionsCut(n) }) : undefined;
    const enforcement = started?.hooks;
    // The Service ranges before anything is built on them: the cluster's ServiceCIDRs, else the configuration's.
    const configured = [...config.serviceCIDRs];
    const ranges = chooseServiceCidrs(started ? await waitServiceCidrs(started.enforcer, log) : undefined, configured);
    if ('error' in ranges) {
      log.fatal({}, ranges.error);
      process.stderr.write(`sluice-agent: ${ranges.error}\n`);
      await started?.enforcer.close();
      return 2;
    }
    if (configured.length > 0 && ranges.cidrs.join() !== [...configured].sort().join() && !ranges.source.startsWith('configuration')) {
      log.warn({ configured, used: ranges.cidrs, source: ranges.source }, 'serviceCIDRs: the configuration differs from the cluster\'s ServiceCIDRs, which are used');
    }
    config.serviceCIDRs = ranges.cidrs;
    log.info({ cidrs: ranges.cidrs, source: ranges.source }, 'Service ranges');
    agent = await startAgent(config, log, { metrics, enforcement, serviceCidrSource: ranges.source, ...(failpoint ? { failAfter: failpoint as AttachStep } : {}) });
    if (started) {
      const running = agent;
      // A range added or removed later is followed; with none left, the last ones stay in use.
      started.enforcer.onServiceCidrs = () => {
        const next = chooseServiceCidrs(started.enforcer.currentServiceCidrObjects(), configured);
        if ('error' in next) log.error({ kept: config.serviceCIDRs }, `Service ranges: ${next.error}; the ones in use are kept`);
        else running.serviceCidrsChanged(next.cidrs, next.source);
      };
    }
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'startup failed');
    process.stderr.write(`sluice-agent: startup failed: ${(err as Error).message}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info({ signal }, 'stopping (datapath left in place)');
      void agent.close().then(resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  return 0;
}

/**
 * The agent's parts, built and connected: the OVS adapters (OVSDB session, OpenFlow connection),
 * the flow programming over them, the Pod-side netlink socket and helper, the node reconciler and
 * the CNI attacher. Policy enforcement's flows join the desired set before the first sync.
 */
async function startAgent(
  config: AgentConfig,
  log: Logger,
  opts: { metrics: AgentMetrics; enforcement: EnforcementHooks | undefined; serviceCidrSource?: string; failAfter?: AttachStep },
): Promise<Agent> {
  const { enforcement } = opts;
  const ovs = new OvsBridge({ ovsRunDir: config.ovsRunDir, bridge: config.bridge, datapath: config.datapath, log });
  const flowProgrammer = new FlowProgrammer({ ovsRunDir: config.ovsRunDir, bridge: config.bridge, datapath: config.datapath, log });
  const openflow = new OpenFlowController({
    socketPath: `${config.ovsRunDir}/${config.bridge}.mgmt`,
    meters: packetInMeters(config.packetInRate),
    // After an ovs-vswitchd restart the flows are replayed on reconnection: retry at least every 500 ms.
    reconnectMaxMs: 500,
    log: { debug: (o, m) => log.debug(o, m), info: (o, m) => log.info(o, m), warn: (o, m) => log.warn(o, m) },
  });
  // Every flow is programmed and read back over the agent's OpenFlow connection (no ovs-ofctl).
  flowProgrammer.useOpenFlow(openflow);
  /** Finds Pods' veths for ADD and adoption over one rtnetlink socket (daemon/hostnet/podlink.ts). */
  const podLinks = new PodLinks();
  const netnsHelper = new NetnsHelper({ log });
  const lock = new SharedExclusiveLock();
  const clock = realClock;
  const pods = new PodRegistry();
  // Closures below reach the attacher (stale leftovers at start-up) and the node (flows, host network).
  let attacher: PodAttacher | undefined;
  const node: NodeReconciler<NodeApi, HostNetwork> = new NodeReconciler({
    config,
    log,
    ovs,
    flowProgrammer,
    flows: new FlowSync(flowProgrammer, log),
    connectApi: () => NodeApi.connect(config.kubeconfig),
    createHostNetwork: async (addresses) => {
      const iptables = await resolveIptables(config.iptablesBackend);
      log.info({ backend: iptables.commands.backend ?? 'iptables', why: iptables.why }, 'startup: iptables backend');
      return HostNetwork.create({ gateway: config.gateway, serviceCIDRs: config.serviceCIDRs, ...addresses, rtTablesFile: config.rtTablesFile, iptables: iptables.commands, log });
    },
    clock,
    lock,
    pods,
    pathExists: existsSync,
    detach: (pod) => attacher!.detach(pod),
    openflow,
    ...(enforcement
      ? {
          prepare: (local: PodAttachment[]) =>
            enforcement.prepare({
              openflow, syncFlows: () => node.syncFlows(), portMac: (p) => node.portMac(p),
              conntrack: { dump: () => ovs.dumpConntrack(CT_ZONE), flush: (tuple) => ovs.flushConntrack(CT_ZONE, tuple) },
              nodeIPs: [node.nodeIP, node.nodeIPv6].filter((a): a is string => a !== undefined),
            }, local),
          flowsConverged: () => enforcement.flowsConverged?.(),
        }
      : {}),
  });
  if (enforcement) node.addFlowSource((store) => enforcement.writeFlows(store));
  attacher = new PodAttacher({
    datapath: config.datapath,
    bridge: config.bridge,
    ovs,
    flowProgrammer,
    hostnet: {
      movePodRoutes: (ips, veth) => node.net.movePodRoutes(ips, veth),
      restorePodRoutes: (ips, veth) => node.net.restorePodRoutes(ips, veth),
      checkPodRoutes: (ips) => node.net.checkPodRoutes(ips),
      isolateHostVeth: (veth) => node.net.isolateHostVeth(veth),
      releaseHostVeth: (veth) => node.net.releaseHostVeth(veth),
      isolatedVeths: () => node.net.isolatedVeths(),
    },
    // One rtnetlink socket for every ADD; no process enters the Pod's namespace.
    findHostVeth: (netns, ifName) => podLinks.findHostVeth(netns, ifName),
    podInterfaceIPv4,
    // One long-lived helper process for every Pod (started on the first netdev ADD).
    disablePodTxOffload: (netns, ifName) => netnsHelper.disableTxOffload(netns, ifName),
    pods,
    syncFlows: (o) => node.syncFlows(o),
    isReady: () => node.ready,
    ...(enforcement
      ? {
          onPodDetached: (p: PodAttachment) => enforcement.podDetached(p),
          beforePodFlows: (p: PodAttachment) => enforcement.podAttaching(p),
          podFlowsUndone: (p: PodAttachment) => enforcement.podDetached(p),
        }
      : {}),
    ...(opts.failAfter ? { failAfter: opts.failAfter } : {}),
    log,
  });
  const events = new NodeEvents({
    nodeName: config.nodeName,
    clock,
    log,
    sink: () => node.api,
    ...(enforcement ? { policies: invalidPolicySource(enforcement) } : {}),
  });
  enforcement?.watchControlPlane?.((state, reason) => events.controlPlane(state, reason));
  const adopter = new PodAdopter({
    nodeName: config.nodeName,
    cniCacheDir: config.cniCacheDir,
    log,
    clock,
    api: () => node.api,
    ready: () => node.ready,
    pods,
    lock,
    attach: (req) => attacher!.adopt(req),
    events,
    pathExists: existsSync,
  });
  const collector = realQuietCollector(clock);
  const schedules = new NodeSchedules({
    clock,
    work: {
      collectIfQuiet: () => {
        if (collector.check()) log.debug(collector.status(), 'quiet: full garbage collection');
      },
      resync: (reason) => node.resync(reason),
      checkFlows: () => node.checkFlows(),
      adoptUnattached: (reason) => adopter.adoptUnattached(reason),
      reportInvalidPolicies: () => {
        events.reportInvalidPolicies();
        if (enforcement?.servicesOutside) events.reportServicesOutside(enforcement.servicesOutside(config.serviceCIDRs), config.serviceCIDRs);
      },
    },
    resyncIntervalMs: config.resyncIntervalSeconds * 1000,
    flowCheckIntervalMs: config.flowCheckIntervalSeconds * 1000,
  });
  const chainKeeper = config.cniConfDir
    ? new ChainKeeper({
        confDir: config.cniConfDir,
        binDir: config.cniBinDir,
        entry: sluiceEntry(config.socketPath),
        log,
        clock,
        onRechained: (file) => schedules.afterRechain(file),
      })
    : undefined;
  return Agent.start({
    config,
    log,
    node,
    attacher,
    lock,
    ovs,
    flowProgrammer,
    openflow,
    enforcement,
    metrics: opts.metrics,
    ...(opts.serviceCidrSource ? { serviceCidrSource: opts.serviceCidrSource } : {}),
    clock,
    schedules,
    collector,
    adopter,
    events,
    chainKeeper,
    closeAdapters: () => {
      podLinks.close();
      netnsHelper.close();
      flowProgrammer.close();
      ovs.close();
    },
  });
}

/** The cluster's ServiceCIDR objects (undefined: not served), once listed; says what it waits for. */
async function waitServiceCidrs(enforcer: PolicySide, log: Logger): Promise<KubeObject[] | undefined> {
  const t0 = Date.now();
  const tick = setInterval(() => log.warn({ waitedMs: Date.now() - t0, pending: enforcer.clusterWatch?.pending() }, 'startup: waiting for the list of ServiceCIDRs (the Service ranges)'), 5000);
  try {
    return await enforcer.serviceCidrObjects();
  } finally {
    clearInterval(tick);
  }
}

/** The invalid objects of enforcement's policy report, and the API object behind each, for their Events. */
function invalidPolicySource(enforcement: EnforcementHooks): InvalidPolicySource {
  return {
    invalidPolicies: () => (enforcement.policyReport?.() as { invalid?: InvalidPolicy[] } | undefined)?.invalid,
    policyObject: (e) => enforcement.policyObject?.(e),
  };
}

async function cleanup(config: AgentConfig, log: Logger, wait: boolean): Promise<number> {
  const busy = await runningAgent(config);
  if (busy) {
    process.stderr.write(`sluice-agent: --cleanup refused: ${busy}\n`);
    return 1;
  }
  // Waiting mode serves the health address from the start: alive while cleaning, ready once done.
  let ready = false;
  const health = wait ? await startHealthServer(config.healthAddress, () => ({ ready, ovsReachable: true }), log) : undefined;
  const report = await cleanupNode(config, log, { onDone: (line) => process.stdout.write(`${line}\n`) });
  if (report.failed.length) {
    process.stderr.write(`sluice-agent: cleanup incomplete (run it again once fixed; every step is idempotent):\n${report.failed.map((f) => `  FAILED ${f}`).join('\n')}\n`);
    await health?.close();
    return 1;
  }
  process.stdout.write(`cleanup of ${config.nodeName} complete: sluice removed, Pods use the primary CNI alone\n`);
  if (!health) return 0;
  ready = true;
  log.info('cleanup done; idling until SIGTERM (uninstall DaemonSet mode)');
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('SIGINT', () => resolve());
  });
  await health.close();
  return 0;
}
