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
