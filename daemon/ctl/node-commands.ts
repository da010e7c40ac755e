/** `sluicectl node <status|pods|flows|trace|traceflow|policies|stats>`: troubleshooting the datapath on this node. */
import type { CommandModule } from 'yargs';
import { nodeFlowsCommand } from './node-flows.js';
import { nodePodsCommand } from './node-pods.js';
import { nodePoliciesCommand } from './node-policies.js';
import { nodeStatsCommand } from './node-stats.js';
import { nodeStatusCommand } from './node-status.js';
import { nodeTraceCommand } from './node-trace.js';
import { nodeTraceflowCommand } from './node-traceflow.js';

export const nodeCommand: CommandModule = {
  command: 'node <command>',
  describe: "troubleshoot this node's datapath (run on the node: sluicectl node status|pods|flows|trace|traceflow|policies|stats)",
  builder: (y) =>
    y
      .command(nodeStatusCommand as never)
      .command(nodePodsCommand as never)
      .command(nodeFlowsCommand as never)
      .command(nodeTraceCommand as never)
      .command(nodeTraceflowCommand as never)
      .command(nodePoliciesCommand as never)
      .command(nodeStatsCommand as never)
      .demandCommand(1, 'name a node command: status, pods, flows, trace, traceflow, policies, stats'),
  handler: () => undefined,
};
