/**
 * `sluicectl node policies`: the policies the agent on this node enforces (per policy: tier, rules,
 * actions, local Pods it applies to) and the objects it ignored as invalid, from GET /policies.
 */
import type { CommandModule } from 'yargs';
import type { EnforcedPolicy, PolicyReport } from '../enforcement/policy-report.js';
import type { ValidationError } from '../policy/types.js';
import { agentBody, type NodeArgs, table, withConfig } from './node-common.js';

/** At most this many Pod names in the APPLIED-TO column; beyond, a count. */
const MAX_NAMES = 3;

const policyName = (p: { namespace?: string | undefined; name: string }) => (p.namespace ? `${p.namespace}/${p.name}` : p.name);

function rulesCell(p: EnforcedPolicy): string {
  if (p.rules === 0) return '0';
  const parts = [p.ingressRules ? `${p.ingressRules} in` : '', p.egressRules ? `${p.egressRules} out` : ''].filter(Boolean);
  return `${p.rules} (${parts.join(', ')})`;
}

function actionsCell(p: EnforcedPolicy): string {
  const cells: string[] = [...p.actions];
  if (p.isolates.length) cells.push(`isolate ${p.isolates.join('+')}`);
  return cells.join(', ') || '-';
}

function appliedToCell(p: EnforcedPolicy): string {
  const pods = p.pods.length === 0 ? [] : p.pods.length <= MAX_NAMES ? [p.pods.join(', ')] : [`${p.pods.length} Pods`];
  const nodes = (p.nodes ?? []).map((n) => `node ${n}`);
  return [...pods, ...nodes].join(', ') || '-';
}

export function invalidLine(e: ValidationError): string {
  return `${e.kind} ${policyName(e)}: ${e.field}: ${e.message}`;
}

/** The human view of a report (pure). */
export function renderPolicyReport(r: PolicyReport): string {
  const lines: string[] = [];
  const covered = r.localPods - r.unselectedPods.length;
  lines.push(`node ${r.node}: ${r.policies.length} polic${r.policies.length === 1 ? 'y' : 'ies'} enforced; ${covered} of ${r.localPods} local Pod(s) selected by a policy`);
  if (r.policies.length) {
    lines.push(
      table(
        ['KIND', 'NAMESPACE/NAME', 'TIER', 'PRIORITY', 'RULES', 'ACTIONS', 'APPLIED-TO'],
        r.policies.map((p) => [
          p.kind,
          policyName(p),
          p.tier ? `${p.tier.name} (${p.tier.priority})` : '-',
          p.priority !== undefined ? String(p.priority) : '-',
          rulesCell(p),
          actionsCell(p),
          appliedToCell(p),
        ]),
      ),
    );
  }
  if (r.unselectedPods.length) lines.push(`local Pods selected by no policy (not restricted on this node): ${r.unselectedPods.join(', ')}`);
  if (r.invalid.length) {
    lines.push(`${r.invalid.length} invalid object(s) ignored:`);
    for (const e of r.invalid) lines.push(`  ${invalidLine(e)}`);
  } else {
    lines.push('no invalid objects');
  }
  const warnings = r.warnings ?? [];
  if (warnings.length) {
    lines.push(`${warnings.length} unknown field(s), not part of the kind's schema (a typo changes what a policy means; the rest of the object is used):`);
    for (const w of warnings) lines.push(`  ${w.kind} ${policyName(w)}: ${w.message} "${w.field}"`);
  }
  return lines.join('\n');
}

export const nodePoliciesCommand: CommandModule<object, NodeArgs & { json: boolean }> = {
  command: 'policies',
  describe: 'the policies this node enforces (tier, rules, local Pods) and the objects ignored as invalid, with why',
  builder: (y) => withConfig(y).option('json', { type: 'boolean', default: false, describe: 'print the raw JSON' }),
  handler: async (argv) => {
    const body = await agentBody(argv.config, '/policies', 'node policies');
    if (body === undefined) return;
    const report = body as PolicyReport;
    if (!report.synced) console.error('warning: the agent has not listed every policy input yet (watches not synced); this view may be incomplete');
    console.log(argv.json ? JSON.stringify(report, null, 2) : renderPolicyReport(report));
  },
};
