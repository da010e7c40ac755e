#!/usr/bin/env node
/**
 * sluice-lab: a self-contained Kubernetes-node lab on this machine. See `sluice-lab --help`.
 * Parsing is in lab/args.ts, the commands in lab/ops.ts and lab/demo.ts.
 */
import { parseArgs, UsageError } from './args.js';
import { apply, down, get, kubeconfig, label, patch, probe, remove, up } from './ops.js';

const out = (text: string): void => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);

async function main(argv: string[]): Promise<number> {
  // `verify` (lab/proof/verify-command.ts) has its own argument parser: real packets vs the simulator, same objects.
  if (argv[0] === 'verify') return (await import('./proof/verify-command.js')).main(argv.slice(1));
  const cmd = parseArgs(argv);
  switch (cmd.cmd) {
    case 'help':
      out(cmd.text);
      return 0;
    case 'up':
      await up(cmd, out);
      return 0;
    case 'down':
      await down(cmd, out);
      return 0;
    case 'apply':
      await apply(cmd, out);
      return 0;
    case 'delete':
      await remove(cmd, out);
      return 0;
    case 'label':
      await label(cmd, out);
      return 0;
    case 'patch':
      await patch(cmd, out);
      return 0;
    case 'get':
      await get(cmd, out);
      return 0;
    case 'kubeconfig':
      kubeconfig(cmd, out);
      return 0;
    case 'probe':
      await probe(cmd, out);
      return 0;
    case 'demo':
      // Loaded on demand: its informers bring @kubernetes/client-node, about a second of CPU at
      // start-up that the short commands (run hundreds of times by the tests) do not need.
      await (await import('./demo.js')).demo(cmd, out);
      return 0;
  }
}

/** Exits once stdout and stderr are flushed: a pipe (`get -o json | jq`) would otherwise lose all but 64 KiB. */
function exitFlushed(code: number): void {
  process.exitCode = code;
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
}

main(process.argv.slice(2)).then(
  (code) => exitFlushed(code),
  (err: unknown) => {
    const e = err as Error;
    process.stderr.write(`sluice-lab: ${e?.message ?? String(err)}\n`);
    if (err instanceof UsageError) process.stderr.write('run "sluice-lab --help" for usage\n');
    else if (process.env.SLUICE_LAB_DEBUG && e?.stack) process.stderr.write(`${e.stack}\n`);
    exitFlushed(err instanceof UsageError ? 2 : 1);
  },
);
