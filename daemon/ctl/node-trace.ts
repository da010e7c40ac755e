/**
 * `sluicectl node trace`: ofproto/trace of a packet through the pipeline, built from a Pod's (or the
 * gateway's) real port, MAC and IP, so "why is this dropped" needs no OpenFlow by hand.
 */
import type { CommandModule } from 'yargs';
import { TABLES, VIRTUAL_MAC } from '../flows/tables.js';
import { type NodeArgs, nodeContext, withConfig } from './node-common.js';

export interface TraceEndpoint {
  ofport: number;
  mac: string;
  ip?: string;
}

export interface TraceSpec {
  from: TraceEndpoint;
  src?: string;
  dst: string;
  proto: 'tcp' | 'udp' | 'icmp';
  dport?: number;
  ttl?: number;
}

/** The microflow for ofproto/trace (pure). */
export function traceFlow(s: TraceSpec): string {
  const src = s.src ?? s.from.ip;
  if (!src) throw new Error('--src is required when tracing from the gateway');
  const parts = [`in_port=${s.from.ofport}`, s.proto, `dl_src=${s.from.mac}`, `dl_dst=${VIRTUAL_MAC}`, `nw_src=${src}`, `nw_dst=${s.dst}`, `nw_ttl=${s.ttl ?? 64}`];
  if (s.proto !== 'icmp') parts.push(`tp_src=40000`, `tp_dst=${s.dport ?? 80}`);
  else parts.push('icmp_type=8', 'icmp_code=0');
  return parts.join(',');
}

/** ofproto/trace prints table numbers: add the pipeline's names (pure). */
export function nameTables(trace: string): string {
  const name = (n: string) => TABLES[Number(n)] ?? n;
  return trace
    .replace(/^(\s*)(\d+)\. /gm, (_m, sp: string, n: string) => `${sp}${n}. [${name(n)}] `)
    .replace(/(goto_table:|table=|resumed at table )(\d+)/g, (_m, kw: string, n: string) => `${kw}${name(n)}`);
}

type TraceArgs = NodeArgs & { from: string; src?: string; dst: string; proto: 'tcp' | 'udp' | 'icmp'; dport?: number; ct: string };

export const nodeTraceCommand: CommandModule<object, TraceArgs> = {
  command: 'trace',
  describe: 'trace a packet through the bridge (ovs-appctl ofproto/trace) from a Pod or the gateway',
  builder: (y) =>
    withConfig(y)
      .option('from', { type: 'string', demandOption: true, describe: 'container id prefix, namespace/name, host veth, or the gateway name' })
      .option('src', { type: 'string', describe: 'source IP (default: the Pod IP; required from the gateway)' })
      .option('dst', { type: 'string', demandOption: true, describe: 'destination IP' })
      .option('proto', { choices: ['tcp', 'udp', 'icmp'] as const, default: 'tcp' as const })
      .option('dport', { type: 'number', describe: 'destination port (tcp/udp)' })
      .option('ct', { type: 'string', default: 'trk,new', describe: 'conntrack state after ct() (e.g. trk,est,rpl)' }) as never,
  handler: async (argv) => {
    const { config, ovs } = await nodeContext(argv.config);
    let from: TraceEndpoint | undefined;
    if (argv.from === config.gateway) {
      const gw = await ovs.findGateway(config.gateway);
      if (gw) from = { ofport: gw.ofport, mac: '12:34:56:78:9a:bc' };
    } else {
      const rec = (await ovs.listPodPorts()).find(
        (p) => p.name === argv.from || p.ids['container-id'].startsWith(argv.from) || `${p.ids['pod-namespace']}/${p.ids['pod-name']}` === argv.from,
      );
      if (rec) from = { ofport: rec.ofport, mac: rec.ids['attached-mac'], ip: rec.ids['ip-address'].split(',')[0]! };
    }
    if (!from) throw new Error(`--from: nothing attached matches "${argv.from}" (see sluicectl node pods)`);
    const flow = traceFlow({ from, dst: argv.dst, proto: argv.proto, ...(argv.src ? { src: argv.src } : {}), ...(argv.dport ? { dport: argv.dport } : {}) });
    console.log(nameTables(await ovs.appctl(['ofproto/trace', config.bridge, flow, '--ct-next', argv.ct])));
  },
};
