/**
 * `sluicectl traceflow --from ns/pod --to ns/pod|service:ns/name|ip:ADDRESS --port N
 * [--protocol TCP|UDP|ICMP] [--family 4|6] [-o json] [--kubeconfig FILE]` — also `kubectl sluice
 * traceflow` (sluicectl installed as `kubectl-sluice`): the same trace as `sluicectl node traceflow`
 * from anywhere kubectl reaches the cluster. It creates a Traceflow through the API server's
 * aggregation layer (`traceflows.controlplane.sluice.io`, create only: each is run once and kept
 * nowhere); sluice-controller hands it to the agent of the source Pod's Node, whose report (with
 * the Node the packet leaves for, observed there too) comes back as its status. Needs agents in
 * controller mode and RBAC `create` on traceflows.controlplane.sluice.io.
 */
import type { Argv, CommandModule } from 'yargs';
import { CONTROLPLANE_API_VERSION, CONTROLPLANE_GROUP, CONTROLPLANE_VERSION } from '../controlplane/types.js';
import type { TraceReport } from '../enforcement/traceflow.js';
import { KubeAccess } from '../kube/access.js';
import { renderTrace } from './node-traceflow.js';

interface Args {
  from: string;
  to: string;
  port?: number | undefined;
  protocol: string;
  family?: number | undefined;
  kubeconfig?: string | undefined;
  output: string;
}

export const traceflowCommand: CommandModule<object, Args> = {
  command: 'traceflow',
  describe: 'trace a real packet from a Pod through every Node it crosses, from anywhere (through sluice-controller; kubectl sluice traceflow)',
  builder: (y) =>
    (y as Argv)
      .option('from', { type: 'string', demandOption: 'traceflow needs --from ns/pod', describe: 'source Pod (ns/name)' })
      .option('to', { type: 'string', demandOption: 'traceflow needs --to ns/pod|service:ns/name|ip:ADDRESS', describe: 'destination: ns/pod, service:ns/name or ip:ADDRESS (IPv4 or IPv6)' })
      .option('port', { type: 'number', describe: 'destination port (TCP/UDP; for a Service, its port)' })
      .option('protocol', { type: 'string', choices: ['TCP', 'UDP', 'ICMP'], default: 'TCP', describe: 'ICMP: an echo request (ICMPv6 over IPv6)' })
      .option('family', { type: 'number', choices: [4, 6], describe: 'address family of the traced packet (default as sluicectl node traceflow)' })
      .option('kubeconfig', { type: 'string', describe: 'kubeconfig file (default as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster)' })
      .option('output', { alias: 'o', choices: ['table', 'json'], default: 'table', describe: 'output format' }) as unknown as Argv<Args>,
  handler: async (argv) => {
    const api = KubeAccess.load(argv.kubeconfig);
    const body = {
      apiVersion: CONTROLPLANE_API_VERSION, kind: 'Traceflow', metadata: {},
      spec: {
        from: argv.from, to: argv.to, protocol: argv.protocol,
        ...(argv.port !== undefined ? { port: argv.port } : {}), ...(argv.family !== undefined ? { family: argv.family } : {}),
      },
    };
    const created = (await api.postJson(`/apis/${CONTROLPLANE_GROUP}/${CONTROLPLANE_VERSION}/traceflows`, body, 30_000)) as { status?: TraceReport & { node?: string } };
    const report = created.status;
    if (!report || !Array.isArray(report.legs)) throw new Error('the answer carries no trace report (status)');
    console.log(argv.output === 'json' ? JSON.stringify(created, null, 2) : renderTrace(report));
    // A script must not read an unfinished trace as an answer (as sluicectl node traceflow).
    if (report.verdict === 'incomplete') process.exitCode = 3;
  },
};
