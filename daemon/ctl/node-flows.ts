/**
 * `sluicectl node flows`: the bridge's flows with table names, optionally one table or one Pod;
 * `--check` compares them with what the agent wants installed (missing / unexpected).
 */
import type { CommandModule } from 'yargs';
import type { AgentConfig } from '../config.js';
import { diffFlows } from '../flows/diff.js';
import { type Flow, flowText, SLUICE_COOKIE_FILTER } from '../flows/flow.js';
import { podFlows } from '../flows/pipeline.js';
import { TABLES, type TableName } from '../flows/tables.js';
import { agentGet, type NodeArgs, nodeContext, withConfig } from './node-common.js';

/**
 * The agent's whole desired flow set (pipeline, Pods, policy, DNS intercept), as the agent itself
 * holds it: rebuilding it here from the pipeline alone would report every policy flow as unexpected.
 */
export async function agentDesiredFlows(config: AgentConfig): Promise<Flow[]> {
  const { code, body } = await agentGet(config, '/flows', 'desired flows');
  if (code !== 200) throw new Error(`agent /flows answered ${code}: ${(body as { error?: string })?.error ?? JSON.stringify(body)}`);
  if (!Array.isArray(body)) throw new Error('agent /flows: the answer is not a list of flows');
  return body as Flow[];
}

/** Human report of a desired-vs-installed comparison. */
export function flowCheckReport(desired: Flow[], installed: string[]): { ok: boolean; text: string } {
  const d = diffFlows(desired, installed);
  const lines = [`${d.unchanged} of ${desired.length} desired flows installed`];
  for (const f of d.add) lines.push(`  missing: ${f.table}${f.owner ? ` (container ${f.owner.slice(0, 12)})` : ''}: ${flowText(f)}`);
  for (const c of d.remove) lines.push(`  unexpected sluice flow: cookie ${c}`);
  return { ok: d.add.length === 0 && d.remove.length === 0, text: lines.join('\n') };
}

type FlowsArgs = NodeArgs & { table?: string; pod?: string; check: boolean; all: boolean };

export const nodeFlowsCommand: CommandModule<object, FlowsArgs> = {
  command: 'flows',
  describe: "show the bridge's flows by table name; --check compares them with the agent's desired state",
  builder: (y) =>
    withConfig(y)
      .option('table', { type: 'string', describe: `only this table (${TABLES.join(', ')})` })
      .option('pod', { type: 'string', describe: 'only the flows of this container id or namespace/name' })
      .option('check', { type: 'boolean', default: false, describe: 'compare with the desired flows (needs the agent)' })
      .option('all', { type: 'boolean', default: false, describe: 'include flows that are not sluice\'s' }) as never,
  handler: async (argv) => {
    const { config, ovs, flowProgrammer } = await nodeContext(argv.config);
    if (argv.table !== undefined && !(TABLES as readonly string[]).includes(argv.table)) {
      throw new Error(`--table: unknown table "${argv.table}" (known: ${TABLES.join(', ')})`);
    }
    if (argv.check) {
      const desired = await agentDesiredFlows(config);
      const report = flowCheckReport(desired, await flowProgrammer.installedCookies());
      console.log(report.text);
      if (!report.ok) process.exitCode = 1;
      return;
    }
    const filters: string[] = [];
    if (!argv.all) filters.push(SLUICE_COOKIE_FILTER);
    if (argv.table) filters.push(`table=${argv.table}`);
    let dump = await flowProgrammer.dumpFlows(filters.length ? [filters.join(',')] : []);
    if (argv.pod) {
      const rec = (await ovs.listPodPorts()).find(
        (p) => p.ids['container-id'].startsWith(argv.pod!) || `${p.ids['pod-namespace']}/${p.ids['pod-name']}` === argv.pod,
      );
      if (!rec) throw new Error(`--pod: no attached Pod matches "${argv.pod}" (see sluicectl node pods)`);
      const cookies = new Set(
        podFlows({ containerId: rec.ids['container-id'], ofport: rec.ofport, mac: rec.ids['attached-mac'], ips: rec.ids['ip-address'].split(',') }).map((f) => f.cookie),
      );
      dump = dump.split('\n').filter((l) => [...cookies].some((c) => l.includes(`cookie=${c}`))).join('\n');
    }
    console.log(dump.trimEnd());
  },
};

export const isTable = (s: string): s is TableName => (TABLES as readonly string[]).includes(s);
