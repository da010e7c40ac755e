/**
 * `sluicectl whatif -f CHANGED.yaml [--delete GONE.yaml] [-n NS]`: what a proposed policy change
 * would do to the live cluster. Reads every object the agents read (the same resources, through the
 * API, read-only), applies the change in memory and prints each connection whose verdict flips,
 * before -> after, with the rule that decides each side (daemon/policy/whatif.ts). Nothing is
 * written to the cluster. Installed as `kubectl-sluice`, it runs as `kubectl sluice whatif`.
 *
 * Exit status: 0 when the comparison ran (whatever it found); 1 for unusable input or an API server
 * that cannot be read.
 */
import http from 'node:http';
import https from 'node:https';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Argv, CommandModule } from 'yargs';
import { ManifestError, formatInvalidDocument, readManifests } from '../manifests.js';
import { parsePortRange } from '../policy/probes.js';
import type { KubeObject } from '../policy/types.js';
import { type VerdictChange, type WhatIfResult, whatIf } from '../policy/whatif.js';
import { isNotFound, WATCHED_RESOURCES } from '../enforcement/watch/resources.js';
import { describeRule, formatWarning, type Output, UsageError, usageFailure } from './simulate.js';

export interface WhatIfCommandOptions {
  files: string[];
  deletes: string[];
  namespace?: string | undefined;
  kubeconfig?: string;
  ephemeralPorts?: string;
  output: 'table' | 'json';
}

/** Where the live objects come from (the API server; tests give a fixed list). */
export type LiveSource = () => Promise<KubeObject[]>;

/** Every resource the agents watch, listed once; CRD kinds the cluster does not serve are skipped. */
export function apiSource(kubeconfig: string | undefined): LiveSource {
  return async () => {
    const k8s = await import('@kubernetes/client-node');
    const kc = new k8s.KubeConfig();
    // As kubectl: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else in-cluster.
    if (kubeconfig) kc.loadFromFile(kubeconfig);
    else kc.loadFromDefault();
    const lists = await Promise.all(
      WATCHED_RESOURCES.map(async (r) => {
        try {
          const l = (await getJson(kc, r.path)) as { items?: unknown[] };
          return (l.items ?? []).map((item) => ({ ...(item as KubeObject), apiVersion: r.apiVersion, kind: r.kind }));
        } catch (err) {
          if (r.optional && isNotFound(err)) return [];
          throw new UsageError(`cannot read ${r.path} from ${kc.getCurrentCluster()?.server ?? '(no cluster)'}: ${(err as Error).message}`);
        }
      }),
    );
    return lists.flat();
  };
}

/**
 * GET of an API path as plain JSON, authenticated as the kubeconfig says. Not the typed clients:
 * they turn objects into model classes whose property names differ from the wire format
 * (NetworkPolicy peers `from` become `_from`), which the policy normalizers would then not see.
 */
async function getJson(kc: KubeConfig, path: string, timeoutMs = 30_000): Promise<unknown> {
  const server = kc.getCurrentCluster()?.server;
  if (!server) throw new Error('kubeconfig has no current cluster');
  const url = new URL(server.replace(/\/$/, '') + path);
  const opts: https.RequestOptions = { method: 'GET', headers: { accept: 'application/json' }, timeout: timeoutMs };
  await kc.applyToHTTPSOptions(opts);
  const mod = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.request(url, opts, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) {
          const err = new Error(`GET ${path}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`) as Error & { statusCode?: number | undefined };
          err.statusCode = res.statusCode;
          reject(err);
          return;
        }
        try {
          resolve(JSON.parse(text));
        } catch (e) {
          reject(new Error(`GET ${path}: not JSON: ${(e as Error).message}`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path}: no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

const endpoint = (c: VerdictChange) => `${c.from} -> ${c.to} ${c.port}/${c.protocol}`;
const rule = (d: VerdictChange['before']['decidedBy']) => (d ? describeRule(d) : 'no rule (the default: allow)');

export function formatWhatIf(r: WhatIfResult): string {
  const lines = [`${r.compared} connections compared; ${r.changes.length === 0 ? 'no verdict changes' : `${r.changes.length} would change`}`];
  for (const c of r.changes) {
    lines.push('', `${endpoint(c)}: ${c.before.verdict} -> ${c.after.verdict}`);
    lines.push(`  before: ${rule(c.before.decidedBy)}`);
    lines.push(`  after:  ${rule(c.after.decidedBy)}`);
  }
  return lines.join('\n');
}

async function objectsOf(files: string[], flag: string, out: Output): Promise<KubeObject[]> {
  try {
    const set = await readManifests(files);
    for (const d of set.invalid) out.stderr(formatInvalidDocument(d));
    return set.objects;
  } catch (err) {
    if (err instanceof ManifestError) throw new UsageError(`${flag}: ${err.message}`);
    throw err;
  }
}

export async function runWhatIf(opts: WhatIfCommandOptions, live: LiveSource, out: Output): Promise<number> {
  try {
    if (opts.files.length === 0 && opts.deletes.length === 0) throw new UsageError('name the change: -f CHANGED (created or replaced objects) and/or --delete GONE');
    const changed = opts.files.length ? await objectsOf(opts.files, '-f', out) : [];
    const deleted = opts.deletes.length ? await objectsOf(opts.deletes, '--delete', out) : [];
    const result = whatIf(await live(), changed, deleted, {
      ...(opts.namespace ? { namespace: opts.namespace } : {}),
      ...(opts.ephemeralPorts ? { ephemeralPorts: parsePortRange(opts.ephemeralPorts, '--ephemeral-ports') } : {}),
    });
    for (const p of result.problems) out.stderr(p);
    for (const w of result.warnings) out.stderr(formatWarning(w));
    out.stdout(opts.output === 'json' ? JSON.stringify(result, null, 2) : formatWhatIf(result));
    return 0;
  } catch (err) {
    return usageFailure('whatif', err, out);
  }
}

interface WhatIfArgs {
  f?: string[];
  delete?: string[];
  n?: string;
  kubeconfig?: string;
  'ephemeral-ports'?: string;
  o: string;
}

export const whatIfCommand: CommandModule<object, WhatIfArgs> = {
  command: 'whatif',
  describe: 'what a policy change would do to the live cluster: every connection whose verdict flips (read-only)',
  builder: (y) =>
    (y as Argv)
      .option('f', { alias: 'filename', type: 'string', array: true, describe: 'objects to create or replace (file or directory, repeatable)' })
      .option('delete', { type: 'string', array: true, describe: 'objects to delete (file or directory, repeatable)' })
      .option('n', { alias: 'namespace', type: 'string', describe: 'only connections from or to this namespace' })
      .option('kubeconfig', { type: 'string', describe: 'kubeconfig file (default as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster)' })
      .option('ephemeral-ports', { type: 'string', describe: 'FIRST-LAST source ports of clients (default 32768-60999)' })
      .option('o', { alias: 'output', type: 'string', choices: ['table', 'json'], default: 'table', describe: 'output format' }) as unknown as Argv<WhatIfArgs>,
  handler: async (argv) => {
    const code = await runWhatIf(
      {
        files: argv.f ?? [],
        deletes: argv.delete ?? [],
        ...(argv.n ? { namespace: argv.n } : {}),
        ...(argv['ephemeral-ports'] ? { ephemeralPorts: argv['ephemeral-ports'] } : {}),
        output: argv.o as 'table' | 'json',
      },
      apiSource(argv.kubeconfig),
      { stdout: (s) => process.stdout.write(`${s}\n`), stderr: (s) => process.stderr.write(`${s}\n`) },
    );
    process.exitCode = code;
  },
};
