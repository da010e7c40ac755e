/** `sluicectl node pods`: the Pod ports sluice attached to the bridge, from OVSDB. */
import type { CommandModule } from 'yargs';
import { type NodeArgs, nodeContext, table, withConfig } from './node-common.js';

export const nodePodsCommand: CommandModule<object, NodeArgs & { json: boolean }> = {
  command: 'pods',
  describe: 'list the Pod ports attached to the bridge (container, Pod, IPs, MAC, OpenFlow port)',
  builder: (y) => withConfig(y).option('json', { type: 'boolean', default: false }),
  handler: async (argv) => {
    const { ovs } = await nodeContext(argv.config);
    const ports = await ovs.listPodPorts();
    if (argv.json) {
      console.log(JSON.stringify(ports, null, 2));
      return;
    }
    console.log(
      table(
        ['PORT', 'OFPORT', 'POD', 'IPS', 'MAC', 'CONTAINER', 'PROBLEM'],
        ports.map((p) => [
          p.name,
          String(p.ofport),
          `${p.ids['pod-namespace']}/${p.ids['pod-name']}`,
          p.ids['ip-address'],
          p.ids['attached-mac'],
          p.ids['container-id'].slice(0, 12),
          p.ofport < 1 ? (p.error ?? 'not attached') : '',
        ]),
      ),
    );
  },
};
