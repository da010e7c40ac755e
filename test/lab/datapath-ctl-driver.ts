/** Runs the `sluicectl node …` command modules the way sluicectl will (for datapath-agent.test.ts). */
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { nodeCommand } from '../../daemon/ctl/node-commands.js';

await yargs(hideBin(process.argv)).scriptName('sluicectl').command(nodeCommand as never).strict().demandCommand(1).help().parseAsync();
