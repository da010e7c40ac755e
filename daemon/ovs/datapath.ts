/**
 * `datapath: auto`: the kernel datapath (`system`) when the kernel has the openvswitch module,
 * loaded or loadable (the ovs container's ovs-ctl loads it at start), else the userspace datapath
 * (`netdev`), which works everywhere but needs the veth isolation and TX checksum settings the
 * agent applies in that mode.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export interface KernelOvs {
  loaded: boolean;
  loadable: boolean;
}

export function chooseDatapath(k: KernelOvs): { datapath: 'system' | 'netdev'; why: string } {
  if (k.loaded) return { datapath: 'system', why: 'the openvswitch kernel module is loaded' };
  if (k.loadable) return { datapath: 'system', why: 'the openvswitch kernel module is available (modinfo)' };
  return { datapath: 'netdev', why: 'no openvswitch kernel module: userspace datapath' };
}

export function kernelOvs(): KernelOvs {
  if (existsSync('/sys/module/openvswitch')) return { loaded: true, loadable: true };
  const info = spawnSync('modinfo', ['openvswitch'], { stdio: 'ignore' });
  return { loaded: false, loadable: info.status === 0 };
}

/**
 * Why an explicit `datapath: system` cannot work on this node, or undefined: without the module
 * ovs-vswitchd cannot create the kernel datapath, and the agent would only find out later as a
 * gateway without an OpenFlow port.
 */
export function explicitDatapathProblem(datapath: 'system' | 'netdev', auto: boolean, k: KernelOvs): string | undefined {
  if (auto || datapath !== 'system' || k.loaded || k.loadable) return undefined;
  return 'datapath: system needs the openvswitch kernel module, and this node\'s kernel has none (not loaded, and modinfo openvswitch finds none): set datapath: auto (the default: system where the module exists, the userspace netdev datapath elsewhere) or datapath: netdev in the agent\'s configuration (the DaemonSet\'s ConfigMap)';
}
