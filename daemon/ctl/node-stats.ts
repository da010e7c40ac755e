/**
 * `sluicectl node stats [--policy NAME] [-o table|json]`: per-rule statistics of the policies this
 * node enforces, read by the agent from the bridge's counter flows (GET /stats): connections an
 * Allow rule allowed and their packets/bytes, packets a Drop/Reject rule dropped.
 */
import type { CommandModule } from 'yargs';
import type { RuleStatistics } from '../flows/policy/stats.js';
import { agentBody, type NodeArgs, table, withConfig } from './node-common.js';

const policyName = (r: RuleStatistics['ref']) => (r.namespace ? `${r.namespace}/${r.name}` : r.name);

/** Whether a rule belongs to the policy named `name` ("name" or "namespace/name"). */
export function matchesPolicy(s: RuleStatistics, name: string): boolean {
  return name.includes('/') ? policyName(s.ref) === name : s.ref.name === name;
}

/** The human view (pure). */
export function renderRuleStats(stats: readonly RuleStatistics[]): string {
  if (stats.length === 0) return 'no policy rules enforced on this node';
  return table(
    ['KIND', 'NAMESPACE/NAME', 'RULE', 'DIRECTION', 'ACTION', 'SESSIONS', 'PACKETS', 'BYTES'],
    stats.map((s) => [
      s.ref.kind,
      policyName(s.ref),
      s.ref.rule,
      s.direction,
      s.action,
      s.action === 'Allow' ? String(s.sessions) : '-',
      String(s.packets),
      String(s.bytes),
    ]),
  );
}

export const nodeStatsCommand: CommandModule<object, NodeArgs & { policy?: string | undefined; output: string }> = {
  command: 'stats',
  describe: "per-rule statistics from the bridge's counters: sessions allowed, packets and bytes allowed or dropped/rejected",
  builder: (y) =>
    withConfig(y)
      .option('policy', { type: 'string', describe: 'only the rules of this policy (name, or namespace/name)' })
      .option('output', { alias: 'o', choices: ['table', 'json'], default: 'table', describe: 'output format' }),
  handler: async (argv) => {
    const body = await agentBody(argv.config, '/stats', 'node stats');
    if (body === undefined) return;
    let stats = body as RuleStatistics[];
    if (argv.policy !== undefined) {
      stats = stats.filter((s) => matchesPolicy(s, argv.policy!));
      if (stats.length === 0) {
        console.error(`sluicectl node stats: no rule of a policy named ${argv.policy} is enforced on this node (sluicectl node policies lists them)`);
        process.exitCode = 1;
        return;
      }
    }
    console.log(argv.output === 'json' ? JSON.stringify(stats, null, 2) : renderRuleStats(stats));
  },
};
