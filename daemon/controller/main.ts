#!/usr/bin/env node
/**
 * sluice-controller: computes the policy groups once for the whole cluster and serves each agent
 * its Node's span (`controlplane.sluice.io/v1beta1`, over HTTPS with its own CA).
 *
 * Every replica watches the cluster and keeps every Node's view up to date, so a standby that
 * takes over serves at once; only the leader (a coordination.k8s.io Lease) answers /readyz and the
 * API, so the Service sends the agents to it. A replica that loses the lease ends its watches (the
 * agents reconnect to the new leader and resume or relist) and keeps computing.
 *
 * Exits 2 on bad flags, 1 when start-up fails (no API server, no certificate).
 */
import { hostname } from 'node:os';
import { pino } from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { ClusterWatch } from '../enforcement/watch/clusterwatch.js';
import { KubeAccess } from '../kube/access.js';
import { startControlPlaneApiServer } from './apiserver.js';
import { TokenReviewAuthenticator } from './auth.js';
import { PolicyController } from './controller.js';
import { KubeLeaseLock, LeaderElector } from './leader.js';
import { ControlPlaneStore } from './store.js';
import { ensureSharedCertificate, publishCa } from './tls-secret.js';

export const DEFAULT_CONTROLLER_PORT = 10351;
export const LEASE_NAME = 'sluice-controller';

function parseListen(text: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const port = Number(text.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`--listen ${text}: expected HOST:PORT`);
  return { host: text.slice(0, i).replace(/^\[|\]$/g, ''), port };
}

async function main(): Promise<number> {
  const argv = yargs(hideBin(process.argv))
    .scriptName('sluice-controller')
    .usage('$0 [options]\n\nThe sluice controller: one policy computation for the cluster, each agent served its Node\'s span.')
    .option('kubeconfig', { type: 'string', describe: 'kubeconfig file (default: the in-cluster ServiceAccount)' })
    .option('listen', { type: 'string', default: `0.0.0.0:${DEFAULT_CONTROLLER_PORT}`, describe: 'HOST:PORT of the HTTPS API' })
    .option('namespace', { type: 'string', default: process.env.POD_NAMESPACE ?? 'sluice-system', describe: 'where the Lease, the certificate Secret and the CA ConfigMap are' })
    .option('identity', { type: 'string', default: process.env.POD_NAME ?? hostname(), describe: 'this replica\'s name in the Lease' })
    .option('certificate-ips', { type: 'string', default: '', describe: 'comma-separated IP addresses the serving certificate also names' })
    .option('read-all-users', { type: 'string', default: '', describe: 'comma-separated users (no Node of their own) allowed to read every Node\'s view' })
    .option('log-level', { type: 'string', default: 'info' })
    .strict()
    .help()
    .parseSync();
  let listen: { host: string; port: number };
  try {
    listen = parseListen(argv.listen);
  } catch (err) {
    console.error(`sluice-controller: ${(err as Error).message}`);
    return 2;
  }
  const log = pino({ level: argv['log-level'], base: { component: 'sluice-controller', identity: argv.identity } });
  const ns = argv.namespace;
  const access = argv.kubeconfig ? KubeAccess.load(argv.kubeconfig) : KubeAccess.inCluster();
  const readAll = new Set(argv['read-all-users'].split(',').map((s) => s.trim()).filter(Boolean));

  // The certificate first: without it nothing can be served. The API server may be starting too.
  let cert: Awaited<ReturnType<typeof ensureSharedCertificate>>['cert'] | undefined;
  for (let attempt = 1; !cert; attempt++) {
    try {
      const r = await ensureSharedCertificate(access, ns, new Date(), argv['certificate-ips'].split(',').map((s) => s.trim()).filter(Boolean));
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

  const store = new ControlPlaneStore();
  const controller = new PolicyController({ log, sink: store });
  let leading = false;
  let watch: ClusterWatch | undefined;
  const auth = new TokenReviewAuthenticator({ api: access });
  const server = await startControlPlaneApiServer({
    store, host: listen.host, port: listen.port, tls: { key: cert.key, cert: cert.cert }, log,
    authenticate: (req) => auth.authenticateRequest(req),
    readAll: (user) => readAll.has(user),
    readiness: () => {
      if (!watch?.isSynced()) return { ready: false, reason: `the cluster's initial lists are not all in (${watch?.pending().join(', ') ?? 'informers starting'})` };
      if (!leading) return { ready: false, reason: 'a standby replica (another holds the Lease)' };
      return { ready: true };
    },
  });
  log.info({ url: server.url }, 'controlplane API listening');

  watch = await ClusterWatch.start({
    log,
    ...(argv.kubeconfig ? { kubeconfig: argv.kubeconfig } : {}),
    onEvent: (ev) => store.batch(() => controller.onWatchEvent(ev)),
  });
  void watch.waitSynced().then(() => log.info(controller.status(), 'cluster listed: every Node\'s view is computed'));

  const elector = new LeaderElector({
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
      publishCa(access, ns, cert!.caCert).then(
        ({ apiService }) => log.info({ apiService }, 'CA published'),
        (err) => log.warn({ err: (err as Error).message }, 'CA not published; retried at the next leadership'),
      );
    },
    onStoppedLeading: () => {
      leading = false;
      // The agents go to the new leader, resuming where they were (or relisting).
      server.api.endWatches();
      log.warn('leader: lost the Lease; standing by');
    },
    onNewLeader: (id) => log.info({ leader: id }, 'leader: observed'),
  });
  elector.start();

  await new Promise<void>((resolve) => {
    const stop = (sig: string) => {
      log.info({ signal: sig }, 'stopping: releasing the Lease');
      resolve();
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  await elector.stop();
  server.api.endWatches();
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
