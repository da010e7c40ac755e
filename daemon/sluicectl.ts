#!/usr/bin/env node
/** sluicectl: the operator's command line. Each subcommand lives in daemon/ctl/<name>.ts. */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { cniCommand } from './ctl/cni.js';
import { failure } from './ctl/failure.js';
import { nodeCommand } from './ctl/node-commands.js';
import { simulateCommand } from './ctl/simulate.js';
import { traceflowCommand } from './ctl/traceflow.js';
import { whatIfCommand } from './ctl/whatif.js';

const commands = [simulateCommand, whatIfCommand, traceflowCommand, nodeCommand, cniCommand];

export async function main(argv: string[]): Promise<void> {
  let cli = yargs(hideBin(argv)).scriptName('sluicectl').strict().demandCommand(1, 'name a command (see --help)').help();
  for (const c of commands) cli = cli.command(c as never);
  cli = cli.fail((msg, err, y) => {
    const { text, help } = failure(msg, err);
    if (help) y.showHelp();
    process.stderr.write(`${text}\n`);
    process.exit(1);
  });
  await cli.parseAsync();
}

await main(process.argv);
