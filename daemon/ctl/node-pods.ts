/** `sluicectl node pods`: the Pod ports sluice attached to the bridge, from OVSDB. */
import type { CommandModule } from 'yargs';
import type { PodPortRecord } from '../ovs/bridge.js';
import { type NodeArgs, nodeContext, table, withConfig } from './node-common.js';

export const POD_PORT_COLUMNS = ['PORT', 'OFPORT', 'POD', 'IPS', 'MAC', 'CONTAINER', 'PROBLEM'];

/**
 * One row per port: each Pod's port, followed by its IPv4 egress port when it has one (an
 * IPv6-only EKS Pod's `v4if0`, a second port of the same Pod); a missing port says so.
 */
export function podPortRows(ports: readonly PodPortRecord[], egressOfports: ReadonlyMap<string, number>): string[][] {
  const rows: string[][] = [];
  for (const p of ports) {
    const pod = `${p.ids['pod-namespace']}/${p.ids['pod-name']}`;
    const container = p.ids['container-id'].slice(0, 12);
    rows.push([p.name, String(p.ofport), pod, p.ids['ip-address'], p.ids['attached-mac'], container, p.ofport < 1 ? (p.error ?? 'not attached') : '']);
    const egress = p.ids['egress-v4-veth'];
    if (egress) {
      const ofport = egressOfports.get(egress);
      const missing = ofport === undefined ? 'IPv4 egress port missing from the bridge' : ofport < 1 ? 'IPv4 egress port not attached' : '';
      rows.push([egress, String(ofport ?? '-'), `${pod} (IPv4 egress)`, p.ids['egress-v4-ip'] ?? '', p.ids['egress-v4-mac'] ?? '', container, missing]);
    }
  }
  return rows;
}

export const nodePodsCommand: CommandModule<object, NodeArgs & { json: boolean }> = {
  command: 'pods',
  describe: 'list the Pod ports attached to the bridge (container, Pod, IPs, MAC, OpenFlow port), IPv4 egress ports included',
  builder: (y) => withConfig(y).option('json', { type: 'boolean', default: false }),
  handler: async (argv) => {
    const { ovs } = await nodeContext(argv.config);
    const ports = await ovs.listPodPorts();
    const egressOfports = await ovs.egressPortOfports();
    if (argv.json) {
      const withEgress = ports.map((p) => {
        const egress = p.ids['egress-v4-veth'];
        return egress ? { ...p, egressV4: { name: egress, ofport: egressOfports.get(egress) ?? -1 } } : p;
      });
      console.log(JSON.stringify(withEgress, null, 2));
      return;
    }
    console.log(table(POD_PORT_COLUMNS, podPortRows(ports, egressOfports)));
  },
};
