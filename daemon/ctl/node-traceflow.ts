/**
 * `sluicectl node traceflow --from ns/pod --to ns/pod|service:ns/name|ip:ADDRESS --port N
 * --protocol TCP|UDP|ICMP [--family 4|6] [-o json]`: the agent injects a real packet at the source Pod's port and
 * reports every table it visited, the rule that decided and where it went (observed; `node trace`
 * is ofproto/trace's computation); a packet that leaves for another Node is observed and decided
 * there too. The verdict is the end-to-end one, or `incomplete` (exit 3) when no bridge reported
 * where the packet ended. Run on the source Pod's node.
 */
import type { CommandModule } from 'yargs';
import type { TraceReport } from '../enforcement/traceflow.js';
import { describeRule } from '../flows/traceflow.js';
import { agentBody, type NodeArgs, withConfig } from './node-common.js';

interface Args extends NodeArgs {
  from: string;
  to: string;
  port?: number | undefined;
  protocol: string;
  family?: number | undefined;
  output: string;
}

/** How a leg came to the bridge: sent by the source, back from the host after a Service's DNAT, or arrived from another Node. */
function legTitle(r: TraceReport, i: number): string {
  const leg = r.legs[i]!;
  const on = leg.node !== undefined ? ` on ${leg.node}` : '';
  if (i === 0) return `leg 1${on} (as sent${r.legs.length > 1 && r.legs[1]!.node === leg.node ? ", before the host's Service DNAT" : ''}):`;
  if (leg.node !== r.legs[i - 1]!.node) return `leg ${i + 1}${on} (arrived from ${r.legs[i - 1]!.node} through antrea-gw0):`;
  return `leg ${i + 1}${on} (back from the host after DNAT):`;
}

/** The report as text: one block per leg (a Service adds the leg after the host's DNAT, another Node its own). */
export function renderTrace(r: TraceReport): string {
  const icmp = r.dstIp.includes(':') ? 'ICMPv6' : 'ICMP';
  const lines = [`${r.from} -> ${r.to} (${r.dstIp}) ${r.protocol === 'ICMP' ? icmp : `${r.port}/${r.protocol}`}: ${r.verdict}`];
  // A packet that keeps coming back from the host (a loop until its TTL runs out): the first two
  // legs and the last show it.
  const shown = r.legs.length > 4 ? [0, 1, r.legs.length - 1] : r.legs.map((_l, i) => i);
  r.legs.forEach((leg, i) => {
    if (!shown.includes(i)) {
      if (i === 2) lines.push('', `… ${r.legs.length - 3} more legs, each back from the host through antrea-gw0 (-o json lists them)`);
      return;
    }
    if (r.legs.length > 1) lines.push('', legTitle(r, i));
    lines.push(`  tables:  ${leg.tables.join(' -> ')}`);
    if (leg.egressRule) lines.push(`  egress:  ${describeRule(leg.egressRule)}`);
    if (leg.ingressRule) lines.push(`  ingress: ${describeRule(leg.ingressRule)}`);
    lines.push(`  result:  ${leg.verdict}: ${leg.outcome}`);
  });
  if (r.note) lines.push('', `note: ${r.note}`);
  return lines.join('\n');
}

export const nodeTraceflowCommand: CommandModule<object, Args> = {
  command: 'traceflow',
  describe: 'inject a real packet from a local Pod and report the tables it visited on every Node it crossed, the rule that decided and where it went',
  builder: (y) =>
    withConfig(y)
      .option('from', { type: 'string', demandOption: 'traceflow needs --from ns/pod (a Pod on this node)', describe: 'source Pod (ns/name), on this node' })
      .option('to', { type: 'string', demandOption: 'traceflow needs --to ns/pod|service:ns/name|ip:ADDRESS', describe: 'destination: ns/pod, service:ns/name or ip:ADDRESS (IPv4 or IPv6)' })
      .option('port', { type: 'number', describe: 'destination port (TCP/UDP; for a Service, its port)' })
      .option('protocol', { type: 'string', choices: ['TCP', 'UDP', 'ICMP'], default: 'TCP', describe: 'ICMP: an echo request (ICMPv6 over IPv6)' })
      .option('family', { type: 'number', choices: [4, 6], describe: 'address family of the traced packet (default: an ip: destination\'s, else IPv4 when the source Pod has an IPv4 address, else IPv6)' })
      .option('output', { alias: 'o', choices: ['table', 'json'], default: 'table', describe: 'output format' }) as never,
  handler: async (argv) => {
    const q = new URLSearchParams({
      from: argv.from, to: argv.to, protocol: argv.protocol,
      ...(argv.port !== undefined ? { port: String(argv.port) } : {}),
      ...(argv.family !== undefined ? { family: String(argv.family) } : {}),
    });
    const body = await agentBody(argv.config, `/traceflow?${q}`, 'node traceflow', 15_000);
    if (body === undefined) return;
    console.log(argv.output === 'json' ? JSON.stringify(body, null, 2) : renderTrace(body as TraceReport));
    // A script must not read an unfinished trace as an answer.
    if ((body as TraceReport).verdict === 'incomplete') process.exitCode = 3;
  },
};
