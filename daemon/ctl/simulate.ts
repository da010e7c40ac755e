/**
 * `sluicectl simulate`: offline what-if. Loads a scenario (ordinary manifests), feeds it to the
 * policy engine and answers probes: from a probe file, one --from/--to probe, or (neither given)
 * every Pod to every other Pod on every port/protocol a Pod declares.
 *
 * Exit status: 0 when the probes were answered (whatever the verdicts); 1 for unusable input
 * (a path that does not exist, bad probe syntax, a probe naming something not in the scenario).
 * Every document or object that cannot be used (unparsable YAML, excessive aliasing, no
 * metadata.name, an invalid policy) is listed on stderr and skipped alone; the run goes on.
 */
import { readFile } from 'node:fs/promises';
import type { Argv, CommandModule } from 'yargs';
import { ManifestError, formatInvalidDocument, readManifests } from '../manifests.js';
import { PolicyEngine, UnknownEndpointError, type SideDecision } from '../policy/engine.js';
import { ProbeSyntaxError, formatMatrices, parseFamily, parsePortRange, parseProbes } from '../policy/probes.js';
import type { DecidedBy, KubeObject, Probe, ProbeResult, ValidationError } from '../policy/types.js';

export interface SimulateOptions {
  files: string[];
  probes?: string;
  from?: string;
  to?: string;
  port?: number;
  protocol?: string;
  /** The client's source port for the single probe (absent: any of the ephemeral range). */
  sourcePort?: number;
  /** "FIRST-LAST": where source ports of probes without one lie (default 32768-60999). */
  ephemeralPorts?: string;
  /** 4 or 6: judge every probe for this address family only (see Probe.family). */
  family?: string | number;
  output?: 'table' | 'json';
}

export interface Output {
  stdout(text: string): void;
  stderr(text: string): void;
}

/** Input the run cannot use; the message says what and where. */
export class UsageError extends Error {}

/** A usage or probe-syntax mistake: one line on stderr, exit status 1. Anything else is rethrown. */
export function usageFailure(command: string, err: unknown, out: Pick<Output, 'stderr'>): number {
  if (err instanceof UsageError || err instanceof ProbeSyntaxError) {
    out.stderr(`sluicectl ${command}: ${err.message}`);
    return 1;
  }
  throw err;
}

export function formatValidationError(e: ValidationError): string {
  return `invalid ${e.kind} ${e.namespace ? `${e.namespace}/` : ''}${e.name}: ${e.field}: ${e.message}`;
}

/** kubectl's form for a field the schema does not have: `Warning: unknown field "spec.x"`, with the object. */
export function formatWarning(w: ValidationError): string {
  return `warning: ${w.kind} ${w.namespace ? `${w.namespace}/` : ''}${w.name}: ${w.message} "${w.field}"`;
}

/** Every Pod to every other Pod, on each (port, protocol) some Pod declares. */
export function defaultProbes(engine: PolicyEngine): Probe[] {
  const pods = [...engine.cluster.pods.values()].sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
  const ports = new Map<string, { port: number; protocol: Probe['protocol'] }>();
  for (const p of pods) for (const c of p.ports) ports.set(`${c.containerPort}/${c.protocol}`, { port: c.containerPort, protocol: c.protocol });
  const sorted = [...ports.values()].sort((a, b) => a.port - b.port || a.protocol.localeCompare(b.protocol));
  const probes: Probe[] = [];
  for (const { port, protocol } of sorted) {
    for (const from of pods) for (const to of pods) {
      if (from === to) continue;
      probes.push({ from: `${from.namespace}/${from.name}`, to: `${to.namespace}/${to.name}`, port, protocol });
    }
  }
  return probes;
}

/** Builds the probe list from the options (throws UsageError / ProbeSyntaxError). */
export async function probesFromOptions(opts: SimulateOptions, engine: PolicyEngine): Promise<Probe[]> {
  const single = opts.from !== undefined || opts.to !== undefined || opts.port !== undefined || opts.sourcePort !== undefined;
  if (opts.probes !== undefined && single) throw new UsageError('give either --probes FILE or --from/--to/--port/--protocol, not both');
  if (opts.probes !== undefined) {
    let text: string;
    try {
      text = await readFile(opts.probes, 'utf8');
    } catch (err) {
      throw new UsageError(`--probes ${opts.probes}: cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (err) {
      throw new UsageError(`--probes ${opts.probes}: not valid JSON: ${(err as Error).message}`);
    }
    try {
      return parseProbes(json);
    } catch (err) {
      throw new UsageError(`--probes ${opts.probes}: ${(err as Error).message}`);
    }
  }
  if (single) {
    if (opts.from === undefined || opts.to === undefined) throw new UsageError('--from and --to are both required for a single probe');
    const protocol = (opts.protocol ?? 'TCP').toUpperCase();
    if (opts.port === undefined && protocol !== 'ICMP') throw new UsageError('--port is required (except for --protocol ICMP)');
    return parseProbes([{ from: opts.from, to: opts.to, port: opts.port, protocol, ...(opts.sourcePort !== undefined ? { sourcePort: opts.sourcePort } : {}) }]);
  }
  return defaultProbes(engine);
}

export function describeRule(d: DecidedBy): string {
  if (d.kind === 'K8sNetworkPolicyIsolation') {
    return `isolated by Kubernetes NetworkPolicy ${d.namespace}/${d.name} (${d.direction}) and no NetworkPolicy rule allows it`;
  }
  return `${d.kind} ${d.namespace ? `${d.namespace}/` : ''}${d.name}, rule ${d.rule ?? '?'} (${d.direction}${d.tier ? `, tier ${d.tier}` : ''}), action ${d.action}`;
}

/** The explanation printed under the matrix for a single probe. */
export function describeDecision(r: ProbeResult, sides: SideDecision[]): string {
  const lines = [`${r.from}${r.sourcePort !== undefined ? ` (source port ${r.sourcePort})` : ''} -> ${r.to} ${r.port}/${r.protocol}${r.family !== undefined ? ` IPv${r.family}` : ''}: ${r.verdict}`];
  lines.push(`  decided by: ${r.decidedBy ? describeRule(r.decidedBy) : 'no rule (the default: allow)'}`);
  for (const s of sides) {
    lines.push(`  ${s.direction === 'Egress' ? 'egress of' : 'ingress of'} ${s.pod}: ${s.verdict} (${s.decidedBy ? describeRule(s.decidedBy) : 'no rule applies: default'})`);
  }
  if (r.note) lines.push(`  note: ${r.note}`);
  return lines.join('\n');
}

/** Runs a simulation; returns the exit status. */
export async function runSimulate(opts: SimulateOptions, out: Output): Promise<number> {
  try {
    if (opts.files.length === 0) throw new UsageError('at least one -f SCENARIO (file or directory) is required');
    const output = opts.output ?? 'table';
    if (output !== 'table' && output !== 'json') throw new UsageError(`-o ${String(output)}: must be table or json`);
    let objects: KubeObject[];
    try {
      const set = await readManifests(opts.files);
      for (const d of set.invalid) out.stderr(formatInvalidDocument(d));
      objects = set.objects;
    } catch (err) {
      if (err instanceof ManifestError) throw new UsageError(err.message);
      throw err;
    }
    const engine = new PolicyEngine(opts.ephemeralPorts !== undefined ? { ephemeralPorts: parsePortRange(opts.ephemeralPorts, '--ephemeral-ports') } : {});
    // Namespaces, Nodes and Tiers first so dependent objects see them (order in files is free-form).
    const rank = (o: KubeObject) => (o.kind === 'Namespace' || o.kind === 'Node' ? 0 : o.kind === 'Tier' ? 1 : 2);
    for (const o of [...objects].sort((a, b) => rank(a) - rank(b))) {
      // Whatever goes wrong with one object costs that object alone.
      try {
        engine.upsert(o);
      } catch (err) {
        out.stderr(`invalid ${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}: ${(err as Error).message}`);
      }
    }
    for (const e of engine.errors()) out.stderr(formatValidationError(e));
    for (const w of engine.warnings()) out.stderr(formatWarning(w));

    const family = opts.family !== undefined ? parseFamily(opts.family, '--family') : undefined;
    const probes = (await probesFromOptions(opts, engine)).map((p) => (family !== undefined && p.family === undefined ? { ...p, family } : p));
    const results: ProbeResult[] = [];
    for (const p of probes) {
      try {
        results.push(engine.evaluate(p));
      } catch (err) {
        if (err instanceof UnknownEndpointError) throw new UsageError(err.message);
        throw err;
      }
    }
    if (output === 'json') {
      out.stdout(JSON.stringify(results.map((r) => ({ ...r, decidedBy: r.decidedBy ?? null })), null, 2));
    } else {
      out.stdout(results.length > 0 ? formatMatrices(results) : '(no probes: the scenario has no Pods with declared ports)');
      if (results.length === 1) {
        const { result, sides } = engine.explain(probes[0]!);
        out.stdout(`\n${describeDecision(result, sides)}`);
      }
    }
    return 0;
  } catch (err) {
    return usageFailure('simulate', err, out);
  }
}

interface SimulateArgs {
  f: string[];
  probes?: string;
  from?: string;
  to?: string;
  port?: number;
  protocol?: string;
  'source-port'?: number;
  'ephemeral-ports'?: string;
  family?: string;
  o: string;
}

export const simulateCommand: CommandModule<object, SimulateArgs> = {
  command: 'simulate',
  describe: 'evaluate probes against a scenario of manifests, offline (no cluster needed)',
  builder: (y) =>
    (y as Argv)
      .option('f', { alias: 'filename', type: 'string', array: true, demandOption: true, describe: 'scenario manifest file or directory (repeatable)' })
      .option('probes', { type: 'string', describe: 'JSON probe file: [{from, to, port, protocol, sourcePort?, family?}]' })
      .option('from', { type: 'string', describe: 'source endpoint: ns/pod, service:ns/name or ip:ADDRESS (IPv4 or IPv6)' })
      .option('to', { type: 'string', describe: 'destination endpoint' })
      .option('port', { type: 'number', describe: 'destination port' })
      .option('protocol', { type: 'string', describe: 'TCP, UDP, SCTP or ICMP (default TCP)' })
      .option('source-port', { type: 'number', describe: 'the client\'s source port (default: judged over the whole ephemeral range)' })
      .option('ephemeral-ports', { type: 'string', describe: 'FIRST-LAST source ports of probes that name none (default 32768-60999, Linux ip_local_port_range)' })
      .option('family', { type: 'string', describe: '4 or 6: judge probes for this address family only (default: every family both endpoints have; the most restrictive is reported, with each family\'s verdict in a note when they differ)' })
      .option('o', { alias: 'output', type: 'string', choices: ['table', 'json'], default: 'table', describe: 'output format' }) as unknown as Argv<SimulateArgs>,
  handler: async (argv) => {
    const code = await runSimulate(
      {
        files: argv.f,
        ...(argv.probes !== undefined ? { probes: argv.probes } : {}),
        ...(argv.from !== undefined ? { from: argv.from } : {}),
        ...(argv.to !== undefined ? { to: argv.to } : {}),
        ...(argv.port !== undefined ? { port: argv.port } : {}),
        ...(argv.protocol !== undefined ? { protocol: argv.protocol } : {}),
        ...(argv['source-port'] !== undefined ? { sourcePort: argv['source-port'] } : {}),
        ...(argv['ephemeral-ports'] !== undefined ? { ephemeralPorts: argv['ephemeral-ports'] } : {}),
        ...(argv.family !== undefined ? { family: argv.family } : {}),
        output: argv.o as 'table' | 'json',
      },
      { stdout: (s) => process.stdout.write(`${s}\n`), stderr: (s) => process.stderr.write(`${s}\n`) },
    );
    process.exitCode = code;
  },
};
