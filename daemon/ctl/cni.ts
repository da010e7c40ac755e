/** `sluicectl cni install|uninstall`: chain sluice into (or out of) this node's CNI configuration. */
import type { Argv, CommandModule } from 'yargs';
import { installCni, uninstallCni } from '../../install/cni-install.js';

interface CniArgs {
  'conf-dir': string;
  'bin-dir': string;
  plugin?: string;
  'socket-path'?: string;
}

function withDirs<T>(y: Argv<T>) {
  return y
    .option('conf-dir', { type: 'string', default: '/etc/cni/net.d', describe: 'CNI configuration directory' })
    .option('bin-dir', { type: 'string', default: '/opt/cni/bin', describe: 'CNI plugin directory' });
}

export const cniCommand: CommandModule<object, CniArgs> = {
  command: 'cni <action>',
  describe: 'install or uninstall the sluice CNI plugin on this node (chain it after the primary CNI)',
  builder: (y) =>
    withDirs(y)
      .positional('action', { choices: ['install', 'uninstall'] as const, demandOption: true })
      .option('plugin', { type: 'string', describe: 'the sluice-cni front end to copy into --bin-dir (sluice-cni-standalone must be beside it)' })
      .option('socket-path', { type: 'string', describe: 'agent socket, when not the default' }) as unknown as Argv<CniArgs>,
  handler: async (argv) => {
    const action = (argv as unknown as { action: string }).action;
    if (action === 'install') {
      const r = await installCni({
        confDir: argv['conf-dir'], binDir: argv['bin-dir'], pluginBinary: argv.plugin, socketPath: argv['socket-path'],
      });
      console.log(r.changed ? `chained sluice into ${r.config}` : `${r.config} already chains sluice; nothing to do`);
    } else {
      const r = await uninstallCni({ confDir: argv['conf-dir'], binDir: argv['bin-dir'] });
      console.log(r.changed ? `removed sluice from ${r.config ?? argv['conf-dir']}` : 'sluice was not installed; nothing to do');
    }
  },
};
