#!/usr/bin/env node
/**
 * sluice-controller: computes the policy groups once for the whole cluster and serves each agent
 * its Node's span (`controlplane.sluice.io/v1beta1`, over HTTPS with its own CA).
 *
 * Every replica watches the cluster and keeps every Node's view up to date, so a standby that
 * takes over serves at once, and is Ready once its views are computed. Only the leader (a
 * coordination.k8s.io Lease) serves the views, and its Pod carries the label the Service selects
 * on (leader-pod.ts). A replica that loses the Lease ends its watches (the agents reconnect to the
 * new leader and resume or relist) and keeps computing.
 *
 * Exits 2 on bad flags, 1 when start-up fails (no API server, no certificate).
 */
import { pino } from 'pino';
import { hideBin } from 'yargs/helpers';
import { ClusterWatch } from '../enforcement/watch/clusterwatch.js';
import { KubeAccess } from '../kube/access.js';
import { startControlPlaneApiServer } from './apiserver.js';
import { loadRequestHeaderConfig, proxiedIdentity, type RequestHeaderConfig, SubjectAccessReviewer } from './aggregation.js';
import { TokenReviewAuthenticator } from './auth.js';
import { PolicyController } from './controller.js';
import { EventCost } from './event-cost.js';
import { KubeLeaseLock, LeaderElector } from './leader.js';
import { LeaderPodLabel } from './leader-pod.js';
import { type ControllerFlags, LEASE_NAME, parseControllerFlags } from './flags.js';
import { ControlPlaneStore } from './store.js';
import { TraceflowBroker } from './traceflows.js';
import { ensureSharedCertificate, publishCa } from './tls-secret.js';

/** The process's memory for /status (MiB): resident, the JS heap in use and reserved, and memory outside it (buffers). */
function memoryFigures(): Record<string, number> {
  const m = process.memoryUsage();
  const mib = (n: number) => Math.round(n / 2 ** 20);
  return { rssMiB: mib(m.rss), heapUsedMiB: mib(m.heapUsed), heapTotalMiB: mib(m.heapTotal), externalMiB: mib(m.external) };
}

async function main(): Promise<number> {
  let argv: ControllerFlags | undefined;
  try {
    argv = parseControllerFlags(hideBin(process.argv));
  } catch (err) {
    console.error(`sluice-controller: ${(err as Error).message}`);
    return 2;
  }
  if (!argv) return 0;
  const listen = argv.listen;
  const log = pino({ level: argv.logLevel, base: { component: 'sluice-controller', identity: argv.identity } });
  const ns = argv.namespace;
  const access = argv.kubeconfig ? KubeAccess.load(argv.kubeconfig) : KubeAccess.inCluster();
  const readAll = new Set(argv.readAllUsers);

  // The certificate first: without it nothing can be served. The API server may be starting too.
  let cert: Awaited<ReturnType<typeof ensureSharedCertificate>>['cert'] | undefined;
  for (let attempt = 1; !cert; attempt++) {
    try {
      const r = await ensureSharedCertificate(access, ns, new Date(), argv.certificateIps);
      cert = r.cert;
      log.info({ made: r.made, notAfter: cert.notAfter }, r.made ? 'certificate: made and stored in the shared Secret' : 'certificate: read from the shared Secret');
    } catch (err) {
      if (attempt >= 30) {
        log.error({ err: (err as Error).message }, 'startup failed: no serving certificate');
        return 1;
      }
      log.warn({ err: (err as Error).message, attempt }, 'certificate: not available yet; retrying in 2 s');
      await new Promise((r) => setTimeout(r, 2000));
    }
  }

  // Nothing is served before the initial lists are computed: no log for them (store.ts deferLog).
  const store = new ControlPlaneStore({ eventsPerNode: argv.eventsPerNode, deferLog: true });
  const traceflows = new TraceflowBroker();
  const eventCost = new EventCost();
  const controller = new PolicyController({ log, sink: store, versions: (node) => store.lastChanges(node) });
  // The initial lists are computed into views at once when they are all in (computation.ts hold).
  controller.computation.hold();
  let leading = false;
  let watch: ClusterWatch | undefined;
  let elector: LeaderElector | undefined;
  // In a Pod, the Service sends agents to the Pod labelled as the leader's (leader-pod.ts).
  const podName = process.env.POD_NAME;
  const leaderLabel = podName ? new LeaderPodLabel({ io: access, namespace: ns, pod: podName, log: (level, message) => log[level](message) }) : undefined;
  const label = (on: boolean) => leaderLabel?.set(on);
  const auth = new TokenReviewAuthenticator({ api: access });
  const sar = new SubjectAccessReviewer(access);
  // Requests the aggregation layer proxies carry the user in headers, trusted on its client certificate only.
  let requestHeader: RequestHeaderConfig | undefined;
  try {
    requestHeader = await loadRequestHeaderConfig(access);
    log.info({ aggregation: requestHeader !== undefined }, requestHeader ? 'aggregation layer: its front-proxy certificate is trusted for X-Remote-User' : 'aggregation layer: none published (kube-system/extension-apiserver-authentication); tokens only');
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'aggregation layer: settings unreadable; tokens only');
  }
  // Ready once the initial lists are in and every Node's view is computed from them.
  const computed = (): { ready: true } | { ready: false; reason: string } => {
    if (!watch?.isSynced()) return { ready: false, reason: `the cluster's initial lists are not all in (${watch?.pending().join(', ') ?? 'informers starting'})` };
    if (controller.computation.holding) return { ready: false, reason: 'computing every Node\'s view from the initial lists' };
    return { ready: true };
  };
  const server = await startControlPlaneApiServer({
    store, host: listen.host, port: listen.port, tls: { key: cert.key, cert: cert.cert, clientCa: requestHeader?.clientCa }, log,
    authenticate: async (req) => (requestHeader && proxiedIdentity(req, requestHeader)) || auth.authenticateRequest(req),
    // Users with no Node of their own: the allow-list, else RBAC through a SubjectAccessReview.
    readAll: (user, id, resource) => readAll.has(user) || sar.mayList(id, resource),
    realization: (q, waitMs, confirmMs) => controller.whenPodRealized(q, waitMs, confirmMs),
    realizedViews: controller.realizedViews,
    traceDestination: (to, family, node) => controller.traceDestination(to, family, node),
    traceflows: {
      broker: traceflows,
      sourceNode: (from) => controller.traceSourceNode(from),
      mayTrace: (id) => readAll.has(id.user) || sar.mayList(id, 'traceflows', 'create'),
    },
    status: () => ({
      identity: argv.identity, leading, leader: elector?.leader ?? '', synced: watch?.isSynced() ?? false, pending: watch?.pending() ?? [],
      viewsComputed: computed().ready,
      certificateNotAfter: cert!.notAfter, aggregation: requestHeader !== undefined, ...controller.status(), eventCost: eventCost.figures(),
      memory: memoryFigures(),
    }),
    readiness: () => computed(),
    serving: () => {
      const c = computed();
      if (!c.ready) return c;
      if (!leading) return { ready: false, reason: `a standby replica (${elector?.leader ? `${elector.leader} leads` : 'no leader yet'})` };
      return { ready: true };
    },
  });
  log.info({ url: server.url }, 'controlplane API listening');

  watch = await ClusterWatch.start({
    log,
    ...(argv.kubeconfig ? { kubeconfig: argv.kubeconfig } : {}),
    onEvent: (ev) => {
      const start = performance.now();
      store.batch(() => controller.onWatchEvent(ev));
      // After the batch: the views (and their versions) hold the change an answer names.
      controller.poke();
      eventCost.record(performance.now() - start);
    },
  });
  let shuttingDown = false;
  void watch.waitSynced().then(() => {
    const start = performance.now();
    store.batch(() => controller.computation.release());
    controller.poke();
    store.startLog();
    log.info({ ...controller.status(), computeMs: Math.round(performance.now() - start) }, 'cluster listed: every Node\'s view is computed');
    // Only a replica that can serve campaigns: a replica still listing (a replacement just
    // started) must not take the Lease from a computed standby and keep the agents waiting.
    if (shuttingDown) return;
    elector = new LeaderElector({
      lock: new KubeLeaseLock(access, ns, LEASE_NAME),
      identity: argv.identity,
      // A standby takes over at most lease + 2 retry periods after the leader's last renewal
      // (15 s); a leader that cannot renew steps down after 7 s, before anyone can take over.
      leaseDurationSeconds: 11,
      renewDeadlineMs: 7000,
      retryPeriodMs: 2000,
      log: (level, message) => log[level](message),
      onStartedLeading: () => {
        leading = true;
        log.info('leader: serving the controlplane API');
        label(true);
        publishCa(access, ns, cert!.caCert).then(
          ({ apiService }) => log.info({ apiService }, 'CA published'),
          (err) => log.warn({ err: (err as Error).message }, 'CA not published; retried at the next leadership'),
        );
      },
      onStoppedLeading: () => {
        leading = false;
        // The agents go to the new leader, resuming where they were (or relisting), and report
        // to it what they enforce; what they reported here is not kept for a later term.
        server.api.endWatches();
        controller.realizedViews.clear();
        traceflows.close('this replica stopped leading: ask again (the new leader runs it)');
        label(false);
        log.warn('leader: lost the Lease; standing by');
      },
      onNewLeader: (id) => log.info({ leader: id }, 'leader: observed'),
    });
    elector.start();
  });

  // The serving certificate is issued again 30 days before its end by whichever replica sees it
  // due first (the same CA); every replica serves the Secret's current one.
  const renewal = setInterval(() => {
    ensureSharedCertificate(access, ns, new Date(), argv.certificateIps).then(
      (r) => {
        if (r.cert.cert === cert!.cert) return;
        cert = r.cert;
        server.setCertificate({ key: cert.key, cert: cert.cert });
        log.info({ made: r.made, newCa: r.newCa, notAfter: cert.notAfter }, 'certificate: serving the renewed one');
        if (r.newCa && leading) void publishCa(access, ns, cert.caCert).catch((err) => log.warn({ err: (err as Error).message }, 'CA not published'));
      },
      (err) => log.warn({ err: (err as Error).message }, 'certificate: renewal check failed; retried in 12 h'),
    );
  }, 12 * 3600_000);
  renewal.unref();

  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      log.info({ signal: sig }, 'stopping: releasing the Lease');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  shuttingDown = true;
  clearInterval(renewal);
  await elector?.stop();
  leaderLabel?.close();
  server.api.endWatches();
  // Waiting realization questions and traces are answered before the server waits for open requests.
  controller.close();
  traceflows.close('the controller is shutting down: ask again');
  await server.close();
  await watch.stop();
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`sluice-controller: ${(err as Error).stack ?? err}`);
    process.exit(1);
  },
);
