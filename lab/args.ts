/**
 * `sluice-lab` command-line parsing (no I/O): argv -> a typed command, or a UsageError saying what
 * is wrong. The CLI (lab/cli.ts) only dispatches on the result.
 */
import yargs from 'yargs';
import { DEFAULT_LAB, IP_FAMILIES, type IpFamily, LAB_NAME, MAX_NODES } from './net/names.js';

export class UsageError extends Error {
  override name = 'UsageError';
}

export type Primary = 'ptp' | 'eks';
export type Output = 'table' | 'json';
export type PatchType = 'json' | 'merge';

export const POLICY_SOURCES = ['standalone', 'controller'] as const;
export type PolicySource = (typeof POLICY_SOURCES)[number];
/** What a lab's agents follow unless told: the controller, as a cluster of any size should. */
export const DEFAULT_POLICY_SOURCE: PolicySource = 'controller';

export type Command =
  | { cmd: 'up'; name: string; nodes: number; primary: Primary; sluice: boolean; files: string[]; ipFamily: IpFamily; policySource: PolicySource; seed?: string }
  | { cmd: 'down'; name: string; all: boolean }
  | { cmd: 'apply'; name: string; files: string[] }
  | { cmd: 'delete'; name: string; files: string[]; ignoreNotFound: boolean }
  | { cmd: 'label'; name: string; kind: string; ref: string; labels: string[] }
  | { cmd: 'patch'; name: string; kind: string; ref: string; type: PatchType; patch: unknown }
  | { cmd: 'get'; name: string; kind: string; ref?: string; output: Output }
  | { cmd: 'kubeconfig'; name: string }
  | { cmd: 'probe'; name: string; probes?: string; family?: 4 | 6; output: Output }
  | { cmd: 'demo'; name: string; nodes: number; primary: Primary; sluice: boolean }
  | { cmd: 'help'; text: string };

const COMMANDS = ['up', 'down', 'apply', 'delete', 'label', 'patch', 'get', 'kubeconfig', 'probe', 'demo'] as const;

function parser(argv: string[]) {
  return yargs(argv)
    .scriptName('sluice-lab')
    .usage('$0 <command> [options]\n\nA self-contained Kubernetes-node lab on this machine (run as root).')
    .option('name', { type: 'string', default: process.env.SLUICE_LAB ?? DEFAULT_LAB, describe: 'lab name (namespaces <name>-*, state /run/sluice-lab/<name>)' })
    .command('up', 'create a lab: nodes, API server, controllers, scenario Pods', (y) =>
      y
        .option('nodes', { type: 'number', default: 2, describe: 'number of lab nodes' })
        .option('primary', { type: 'string', choices: ['ptp', 'eks'], default: 'ptp', describe: 'primary CNI flavour' })
        .option('ip-family', { type: 'string', choices: [...IP_FAMILIES], default: 'ipv4', describe: 'Pod address families (ipv6, dual: ptp only; host-local IPv6 ranges fd00:10:<node>::/64)' })
        .option('sluice', { type: 'boolean', default: true, describe: 'chain sluice after the primary and run an enforcing sluice-agent per node (--no-sluice: primary CNI only)' })
        .option('policy-source', { type: 'string', choices: [...POLICY_SOURCES], describe: `the agents' policy state: controller (sluice-controller runs on the host and serves each node its span; the default) or standalone (each agent computes the whole cluster)` })
        .option('f', { alias: 'filename', type: 'string', array: true, default: [], describe: 'scenario manifest file or directory' })
        .option('seed', {
          type: 'string',
          describe: 'start the API server with the objects of this file ({"resourceVersion": N, "resources": {...}}, the API server\'s data file format): a large cluster at once. Its Pods on the lab\'s nodes run; the others stay objects. A seeded lab keeps its objects in memory only',
        }),
    )
    .command('down', 'remove a lab completely (works after a crash)', (y) =>
      y.option('all', { type: 'boolean', default: false, describe: 'remove every lab on this machine' }),
    )
    .command('apply', 'create or update objects from manifests', (y) =>
      y.option('f', { alias: 'filename', type: 'string', array: true, demandOption: 'apply needs -f FILE', describe: 'manifest file or directory' }),
    )
    .command('delete', 'delete the objects named in manifests', (y) =>
      y
        .option('f', { alias: 'filename', type: 'string', array: true, demandOption: 'delete needs -f FILE', describe: 'manifest file or directory' })
        .option('ignore-not-found', { type: 'boolean', default: false, describe: 'an object already gone is not an error (kubectl delete --ignore-not-found)' }),
    )
    .command('label <kind> <ref> [labels..]', 'set (k=v) or remove (k-) labels of an object')
    .command('patch <kind> <ref>', 'change an object with a JSON patch (RFC 6902) or a JSON merge patch (RFC 7386), as kubectl patch does', (y) =>
      y
        .option('type', { type: 'string', choices: ['json', 'merge'], default: 'merge', describe: 'patch type (kubectl patch --type)' })
        .option('p', { alias: 'patch', type: 'string', demandOption: 'patch needs -p PATCH', describe: 'the patch, as JSON' }),
    )
    .command('get <kind> [ref]', 'show objects as the API server holds them', (y) =>
      y
        .option('o', { alias: 'output', type: 'string', choices: ['table', 'json'], default: 'table' })
        // kubectl's spelling of what `get` always does here.
        .option('A', { alias: 'all-namespaces', type: 'boolean', describe: 'every namespace (the lab always lists all)' }),
    )
    .command('kubeconfig', "print the path of the lab's kubeconfig")
    .command('probe', 'send real packets and report reachability', (y) =>
      y
        .option('probes', { type: 'string', describe: 'JSON probe file (default: every Pod to every Pod on every served port)' })
        .option('family', { type: 'string', choices: ['4', '6'], describe: 'address family of every probe without its own "family" (default: the destination\'s primary address)' })
        .option('o', { alias: 'output', type: 'string', choices: ['table', 'json'], default: 'table' }),
    )
    // Listed for --help only: lab/cli.ts hands `verify` to lab/proof/verify-command.ts before this parser runs.
    .command('verify', 'apply scenario files step by step and compare real packets with sluicectl simulate (verify --help)')
    .command('demo', 'the README main job: a 2-node lab, the example workload and policies, two matrices', (y) =>
      y
        .option('nodes', { type: 'number', default: 2 })
        .option('primary', { type: 'string', choices: ['ptp', 'eks'], default: 'ptp' })
        .option('sluice', { type: 'boolean', default: true, describe: 'with enforcing sluice-agents (--no-sluice: without, policies have no effect)' }),
    )
    .strict()
    .help(false)
    .version(false)
    .exitProcess(false)
    .fail((msg, err) => {
      throw new UsageError(msg ?? err?.message ?? 'bad arguments');
    });
}

export function usage(): string {
  let text = '';
  parser([]).showHelp((s: string) => (text = s));
  return text;
}

export function parseArgs(argv: string[]): Command {
  if (argv.length === 0 || argv[0] === 'help' || argv.includes('--help') || argv.includes('-h')) return { cmd: 'help', text: usage() };
  const a = parser(argv).parseSync() as Record<string, unknown> & { _: (string | number)[] };
  const cmd = String(a._[0] ?? '');
  if (!(COMMANDS as readonly string[]).includes(cmd)) throw new UsageError(`unknown command "${cmd}"; commands: ${COMMANDS.join(', ')}`);
  if (a._.length > 1 && cmd !== 'label') throw new UsageError(`${cmd}: unexpected argument "${a._[1]}"`);
  const name = String(a.name);
  if (!LAB_NAME.test(name)) throw new UsageError(`--name ${JSON.stringify(name)}: a lab name is 1-6 lowercase letters/digits starting with a letter`);
  const files = (a.f as string[] | undefined) ?? [];
  const checkNodes = (): number => {
    const n = a.nodes as number;
    if (!Number.isInteger(n) || n < 1 || n > MAX_NODES) throw new UsageError(`--nodes must be an integer 1-${MAX_NODES}, got ${a.nodes}`);
    return n;
  };
  switch (cmd) {
    case 'up':
    {
      const ipFamily = a['ip-family'] as IpFamily;
      const given = a['policy-source'] as PolicySource | undefined;
      if (given === 'controller' && !a.sluice) throw new UsageError('--policy-source controller needs the lab\'s agents (not --no-sluice)');
      // Without agents nothing follows a policy source; the field keeps its type.
      const policySource = given ?? (a.sluice ? DEFAULT_POLICY_SOURCE : 'standalone');
      const seed = a.seed === undefined ? {} : { seed: String(a.seed) };
      if (seed.seed === '') throw new UsageError('--seed needs a file');
      return { cmd, name, nodes: checkNodes(), primary: a.primary as Primary, sluice: Boolean(a.sluice), files, ipFamily, policySource, ...seed };
    }
    case 'down':
      return { cmd, name, all: Boolean(a.all) };
    case 'apply':
      if (files.length === 0) throw new UsageError(`${cmd} needs -f FILE`);
      return { cmd, name, files };
    case 'delete':
      if (files.length === 0) throw new UsageError(`${cmd} needs -f FILE`);
      return { cmd, name, files, ignoreNotFound: Boolean(a['ignore-not-found']) };
    case 'label':
      if (!a.labels || (a.labels as string[]).length === 0) throw new UsageError('label needs at least one k=v or k- argument');
      return { cmd, name, kind: String(a.kind), ref: String(a.ref), labels: (a.labels as unknown[]).map(String) };
    case 'patch': {
      let patch: unknown;
      try {
        patch = JSON.parse(String(a.p));
      } catch (err) {
        throw new UsageError(`patch -p: not JSON (${(err as Error).message})`);
      }
      const type = a.type as PatchType;
      if (type === 'json' && !Array.isArray(patch)) throw new UsageError('patch --type json: -p must be a JSON array of operations');
      if (type === 'merge' && (patch === null || typeof patch !== 'object' || Array.isArray(patch))) throw new UsageError('patch --type merge: -p must be a JSON object');
      return { cmd, name, kind: String(a.kind), ref: String(a.ref), type, patch };
    }
    case 'get':
      return { cmd, name, kind: String(a.kind), ...(a.ref !== undefined ? { ref: String(a.ref) } : {}), output: a.o as Output };
    case 'kubeconfig':
      return { cmd, name };
    case 'probe':
      return { cmd, name, ...(a.probes ? { probes: String(a.probes) } : {}), ...(a.family !== undefined ? { family: Number(a.family) as 4 | 6 } : {}), output: a.o as Output };
    default:
      return { cmd: 'demo', name, nodes: checkNodes(), primary: a.primary as Primary, sluice: Boolean(a.sluice) };
  }
}
