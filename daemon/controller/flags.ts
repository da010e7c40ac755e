/**
 * sluice-controller's command line (its own file so that install/sluice.yaml's controller command is
 * checked against the real definition).
 */
import { hostname } from 'node:os';
import yargs from 'yargs';

export const DEFAULT_CONTROLLER_PORT = 10351;
export const LEASE_NAME = 'sluice-controller';

export interface ControllerFlags {
  kubeconfig?: string | undefined;
  listen: { host: string; port: number };
  namespace: string;
  identity: string;
  certificateIps: string[];
  readAllUsers: string[];
  /** Events kept per Node for resuming watches (a watch from before them lists again). */
  eventsPerNode: number;
  logLevel: string;
}

function parseListen(text: string): { host: string; port: number } {
  const i = text.lastIndexOf(':');
  const port = Number(text.slice(i + 1));
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) throw new Error(`--listen ${text}: expected HOST:PORT`);
  return { host: text.slice(0, i).replace(/^\[|\]$/g, ''), port };
}

const list = (s: string) => s.split(',').map((x) => x.trim()).filter(Boolean);

/**
 * The flags of `args` (without the program), or an error naming the bad one; undefined after
 * --help printed the usage. `env` gives the defaults a Pod sets.
 */
export function parseControllerFlags(args: string[], env: NodeJS.ProcessEnv = process.env): ControllerFlags | undefined {
  const argv = yargs(args)
    .scriptName('sluice-controller')
    .usage('$0 [options]\n\nThe sluice controller: one policy computation for the cluster, each agent served its Node\'s span.')
    .option('kubeconfig', { type: 'string', describe: 'kubeconfig file (default: the in-cluster ServiceAccount)' })
    .option('listen', { type: 'string', default: `0.0.0.0:${DEFAULT_CONTROLLER_PORT}`, describe: 'HOST:PORT of the HTTPS API' })
    .option('namespace', { type: 'string', default: env.POD_NAMESPACE ?? 'sluice-system', describe: 'where the Lease, the certificate Secret and the CA ConfigMap are' })
    .option('identity', { type: 'string', default: env.POD_NAME ?? hostname(), describe: 'this replica\'s name in the Lease' })
    .option('certificate-ips', { type: 'string', default: '', describe: 'comma-separated IP addresses the serving certificate also names' })
    .option('read-all-users', { type: 'string', default: '', describe: 'comma-separated users (no Node of their own) allowed to read every Node\'s view' })
    .option('events-per-node', { type: 'number', default: 1000, describe: 'events kept per Node for agents resuming their watches, and ten times as many changes of objects shared by Nodes; an agent away for more lists its view again (410 Gone)' })
    .option('log-level', { type: 'string', default: 'info', choices: ['trace', 'debug', 'info', 'warn', 'error'] })
    .strict()
    .exitProcess(false)
    .fail((msg, err) => {
      throw err ?? new Error(msg);
    })
    .help()
    .parseSync();
  if (argv.help) return undefined;
  const eventsPerNode = argv['events-per-node'];
  if (!Number.isInteger(eventsPerNode) || eventsPerNode < 10) throw new Error(`--events-per-node ${String(eventsPerNode)}: an integer of at least 10`);
  return {
    ...(argv.kubeconfig ? { kubeconfig: argv.kubeconfig } : {}),
    listen: parseListen(argv.listen), namespace: argv.namespace, identity: argv.identity,
    certificateIps: list(argv['certificate-ips']), readAllUsers: list(argv['read-all-users']), eventsPerNode, logLevel: argv['log-level'],
  };
}
