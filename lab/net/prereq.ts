/** What a lab needs from the machine; callers (tests, the CLI) report the missing pieces. */
import { accessSync, constants, existsSync } from 'node:fs';
import { join } from 'node:path';
import { OVS_SCHEMA } from './ovs.js';

const COMMANDS = ['ip', 'nsenter', 'ovsdb-tool', 'ovsdb-server', 'ovs-vswitchd', 'ovs-vsctl', 'iptables-save', 'iptables-restore', 'ethtool', 'ping', 'sysctl', 'conntrack'];
const FILES = ['/usr/lib/cni/ptp', '/usr/lib/cni/host-local', OVS_SCHEMA];

function onPath(cmd: string): boolean {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin', '/usr/bin', '/bin'];
  return dirs.filter(Boolean).some((d) => {
    try {
      accessSync(join(d, cmd), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Missing prerequisites, each as a short phrase; empty when a lab can run here. */
export function missingLabPrerequisites(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root privileges');
  for (const c of COMMANDS) if (!onPath(c)) missing.push(`command ${c}`);
  for (const f of FILES) if (!existsSync(f)) missing.push(f);
  return missing;
}
