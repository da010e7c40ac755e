#!/usr/bin/env node
/**
 * `sluice-lab verify -f MODEL -f SCENARIO [--probes FILE] [--name L] [--no-reset] [-o table|json]`:
 * applies the scenario to a running lab step by step, probes with real packets (SCTP by
 * ofproto/trace), runs `sluicectl simulate` on the same objects and probes, and prints the
 * differences per step. Exit status 0 when the lab agrees with the simulator everywhere, 1 when
 * it does not, 2 for unusable input. Also runnable alone: node dist/lab/proof/verify-command.js ...
 */
import { readFile } from 'node:fs/promises';
import { pathToFileURL } from 'node:url';
import yargs from 'yargs';
import { loadManifests } from '../../daemon/manifests.js';
import { parseProbes } from '../../daemon/policy/probes.js';
import { requireRunningLab } from '../control.js';
import { DEFAULT_LAB } from '../net/names.js';
import { mismatchTable } from './compare.js';
import { SCTP_NOTE } from './probe.js';
import { verifyScenario, type StepReport } from './verify.js';

export async function main(argv: string[], out = (s: string) => void process.stdout.write(`${s}\n`)): Promise<number> {
  const parser = yargs(argv)
    .scriptName('sluice-lab verify')
    .usage('$0 -f SCENARIO... [options]\n\nModel = datapath: the lab\'s real verdicts against `sluicectl simulate` on the same objects, after each step.')
    .option('name', { type: 'string', default: process.env.SLUICE_LAB ?? DEFAULT_LAB, describe: 'lab name' })
    .option('f', { alias: 'filename', type: 'string', array: true, describe: 'scenario manifest file or directory (Step documents separate steps)' })
    .option('probes', { type: 'string', describe: 'JSON probe file (default: Pod↔Pod, Pod→Service, Pod↔external host)' })
    .option('reset', { type: 'boolean', default: true, describe: 'delete every policy object in the lab first' })
    .option('o', { alias: 'output', choices: ['table', 'json'], default: 'table' })
    .strict()
    .help(false)
    .version(false)
    .exitProcess(false)
    .fail((msg, err) => {
      throw new Error(msg ?? err?.message);
    });
  if (argv.includes('--help') || argv.includes('-h')) {
    parser.showHelp((s: string) => out(s));
    return 0;
  }
  let a: { name: string; f?: string[]; probes?: string; reset: boolean; o: string };
  try {
    a = (await parser.parseAsync()) as typeof a;
    if (!a.f?.length) throw new Error('verify needs -f SCENARIO');
  } catch (err) {
    process.stderr.write(`sluice-lab verify: ${(err as Error).message}\n`);
    return 2;
  }
  const info = requireRunningLab(a.name);
  const objects = await loadManifests(a.f!);
  const probes = a.probes ? parseProbes(JSON.parse(await readFile(a.probes, 'utf8'))) : undefined;
  const reports = await verifyScenario(info, objects, {
    reset: a.reset,
    ...(probes ? { probes } : {}),
    onStep: a.o === 'table' ? (r) => out(describe(r)) : undefined,
  });
  if (a.o === 'json') out(JSON.stringify(reports.map((r) => ({ step: r.step, probes: r.probes.length, mismatches: r.mismatches, unstable: r.unstable, warnings: r.warnings, signal: r.signal })), null, 2));
  return reports.every((r) => r.mismatches.length === 0) ? 0 : 1;
}

function describe(r: StepReport): string {
  const traced = r.lab.filter((x) => x.note?.startsWith(SCTP_NOTE)).length;
  const head = `step ${r.step}: ${r.probes.length} probes (${traced} SCTP by ofproto/trace, not real packets), ` +
    `${r.mismatches.length} difference(s); converged by ${r.signal} in ${(r.ms.converge / 1000).toFixed(1)} s, compared in ${(r.ms.compare / 1000).toFixed(1)} s`;
  const warn = r.warnings.length ? `\n  simulate skipped invalid objects:\n    ${r.warnings.join('\n    ')}` : '';
  const unstable = r.unstable.length ? `\n  ${r.unstable.length} verdict(s) differed once and agreed when probed again:\n${mismatchTable(r.unstable)}` : '';
  return `${head}${warn}${r.mismatches.length ? `\n${mismatchTable(r.mismatches)}` : ''}${unstable}`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`sluice-lab verify: ${(err as Error).message}\n`);
      process.exit(2);
    },
  );
}
