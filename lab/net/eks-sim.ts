#!/usr/bin/env node
/**
 * eks-sim: a CNI plugin that leaves a Pod wired exactly like the AWS VPC CNI does (routed,
 * no bridge): Pod eth0 holds a /32, routes `169.254.1.1 dev eth0 scope link` and
 * `default via 169.254.1.1`, a PERMANENT neighbour 169.254.1.1 -> host veth MAC; the host veth is
 * `eni<11 hex of sha1(containerId)>`, has no IP, and carries `<podIP>/32 dev eni… scope link`.
 * IPAM is delegated to the configured IPAM plugin (host-local in the lab) found on CNI_PATH.
 * Runs in the node namespace; CNI spec 1.x contract: ADD/DEL/CHECK/VERSION/STATUS/GC, DEL idempotent,
 * errors as a CNI error object on stdout with exit 1.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { eniName } from './names.js';

const SUPPORTED = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const GATEWAY = '169.254.1.1';

class CniFailure extends Error {
  constructor(readonly code: number, msg: string, readonly details?: string) {
    super(msg);
  }
}

interface NetConf {
  cniVersion: string;
  name: string;
  type: string;
  mtu?: number;
  ipam?: { type?: string };
  prevResult?: { ips?: { address: string }[] };
}

function sh(file: string, args: string[], input?: string): string {
  const r = spawnSync(file, args, { input, encoding: 'utf8' });
  if (r.error) throw new CniFailure(999, `${file} could not run`, r.error.message);
  if (r.status !== 0) throw new CniFailure(999, `${[file, ...args].join(' ')} failed`, (r.stderr || r.stdout).trim());
  return r.stdout;
}

const inPod = (netns: string, args: string[], input?: string): string => sh('nsenter', [`--net=${netns}`, 'ip', ...args], input);

function linkExists(name: string): boolean {
  return spawnSync('ip', ['link', 'show', 'dev', name], { encoding: 'utf8' }).status === 0;
}

function linkMac(json: string): string {
  const mac = (JSON.parse(json) as { address?: string }[])[0]?.address;
  if (!mac) throw new CniFailure(999, 'could not read a MAC address');
  return mac;
}

function findPlugin(type: string): string {
  for (const dir of (process.env.CNI_PATH ?? '').split(':').filter(Boolean)) {
    const file = join(dir, type);
    if (existsSync(file)) return file;
  }
  throw new CniFailure(50, `IPAM plugin ${type} not found on CNI_PATH`, process.env.CNI_PATH ?? '');
}

/** Runs the IPAM plugin with our environment and config (the delegation ptp and friends do). */
function ipam(command: string, raw: string, conf: NetConf): { ips?: { address: string }[] } | null {
  const type = conf.ipam?.type;
  if (!type) throw new CniFailure(7, 'ipam.type is required');
  const r = spawnSync(findPlugin(type), [], { input: raw, encoding: 'utf8', env: { ...process.env, CNI_COMMAND: command } });
  if (r.status !== 0) {
    let e: { code?: number; msg?: string; details?: string } = {};
    try {
      e = JSON.parse(r.stdout) as typeof e;
    } catch {
      // not JSON
    }
    throw new CniFailure(e.code ?? 999, `IPAM ${type} ${command}: ${e.msg ?? (r.stderr || r.stdout).trim()}`, e.details);
  }
  return command === 'ADD' ? (JSON.parse(r.stdout) as { ips?: { address: string }[] }) : null;
}

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new CniFailure(4, `environment variable ${name} is required`);
  return v;
}

function add(raw: string, conf: NetConf): unknown {
  const containerId = env('CNI_CONTAINERID');
  const netns = env('CNI_NETNS');
  const ifName = env('CNI_IFNAME');
  const mtu = conf.mtu ?? 1500;
  const hostIf = eniName(containerId);
  const alloc = ipam('ADD', raw, conf);
  const cidr = alloc?.ips?.[0]?.address;
  if (!cidr) throw new CniFailure(999, 'IPAM returned no address');
  const podIP = cidr.split('/')[0]!;
  try {
    if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]); // a retried ADD starts clean
    sh('ip', ['link', 'add', hostIf, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', ifName, 'mtu', String(mtu), 'netns', netns]);
    sh('ip', ['link', 'set', hostIf, 'up']);
    sh('ip', ['route', 'replace', `${podIP}/32`, 'dev', hostIf, 'scope', 'link']);
    const hostMac = linkMac(sh('ip', ['-j', 'link', 'show', 'dev', hostIf]));
    inPod(netns, ['-batch', '-'], [
      'link set lo up',
      `addr add ${podIP}/32 dev ${ifName}`,
      `link set ${ifName} up`,
      `route replace ${GATEWAY} dev ${ifName} scope link`,
      `route replace default via ${GATEWAY} dev ${ifName}`,
      `neigh replace ${GATEWAY} lladdr ${hostMac} dev ${ifName} nud permanent`,
    ].join('\n') + '\n');
    const podMac = linkMac(inPod(netns, ['-j', 'link', 'show', 'dev', ifName]));
    const old = conf.cniVersion.startsWith('0.');
    return {
      cniVersion: conf.cniVersion,
      interfaces: [{ name: hostIf, mac: hostMac }, { name: ifName, mac: podMac, sandbox: netns }],
      ips: [{ ...(old ? { version: '4' } : {}), address: `${podIP}/32`, gateway: GATEWAY, interface: 1 }],
      routes: [{ dst: '0.0.0.0/0', gw: GATEWAY }],
      dns: {},
    };
  } catch (err) {
    // Leave nothing half-configured: the veth (and with it the Pod side) and the address go.
    if (linkExists(hostIf)) spawnSync('ip', ['link', 'del', hostIf]);
    try {
      ipam('DEL', raw, conf);
    } catch {
      // the original error matters more
    }
    throw err;
  }
}

function del(raw: string, conf: NetConf): void {
  const hostIf = eniName(env('CNI_CONTAINERID'));
  if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]); // takes the Pod end and the host route with it
  if (conf.ipam?.type) ipam('DEL', raw, conf);
}

function check(raw: string, conf: NetConf): void {
  const containerId = env('CNI_CONTAINERID');
  const netns = env('CNI_NETNS');
  const ifName = env('CNI_IFNAME');
  const hostIf = eniName(containerId);
  const cidr = conf.prevResult?.ips?.[0]?.address;
  if (!cidr) throw new CniFailure(7, 'CHECK needs prevResult with an IP');
  const podIP = cidr.split('/')[0]!;
  const problems: string[] = [];
  if (!linkExists(hostIf)) problems.push(`host veth ${hostIf} missing`);
  else {
    const addrs = sh('ip', ['-4', '-o', 'addr', 'show', 'dev', hostIf]).trim();
    if (addrs) problems.push(`host veth ${hostIf} has an IPv4 address`);
    if (!sh('ip', ['route', 'show', `${podIP}/32`, 'dev', hostIf]).includes('scope link')) problems.push(`host route ${podIP}/32 dev ${hostIf} missing`);
  }
  try {
    if (!inPod(netns, ['-4', '-o', 'addr', 'show', 'dev', ifName]).includes(`${podIP}/32`)) problems.push(`${ifName} lacks ${podIP}/32`);
    if (!inPod(netns, ['route', 'show', 'default']).includes(`via ${GATEWAY}`)) problems.push(`default route via ${GATEWAY} missing`);
    if (!inPod(netns, ['neigh', 'show', GATEWAY, 'dev', ifName]).includes('PERMANENT')) problems.push(`permanent neighbour ${GATEWAY} missing`);
  } catch (err) {
    problems.push(`cannot inspect the Pod namespace: ${(err as Error).message}`);
  }
  if (problems.length) throw new CniFailure(999, 'eks-sim CHECK failed', problems.join('; '));
  ipam('CHECK', raw, conf);
}

function main(): void {
  const command = process.env.CNI_COMMAND;
  let version = '1.0.0';
  try {
    if (command === 'VERSION') {
      process.stdout.write(JSON.stringify({ cniVersion: '1.0.0', supportedVersions: SUPPORTED }) + '\n');
      return;
    }
    const raw = readFileSync(0, 'utf8');
    let conf: NetConf;
    try {
      conf = JSON.parse(raw) as NetConf;
    } catch (err) {
      throw new CniFailure(6, 'network configuration on stdin is not JSON', (err as Error).message);
    }
    version = typeof conf.cniVersion === 'string' ? conf.cniVersion : version;
    if (!SUPPORTED.includes(conf.cniVersion)) {
      throw new CniFailure(1, `cniVersion ${JSON.stringify(conf.cniVersion)} is not supported`, `supported: ${SUPPORTED.join(', ')}`);
    }
    switch (command) {
      case 'ADD':
        process.stdout.write(JSON.stringify(add(raw, conf)) + '\n');
        return;
      case 'DEL':
        del(raw, conf);
        return;
      case 'CHECK':
        check(raw, conf);
        return;
      case 'STATUS':
      case 'GC':
        return;
      default:
        throw new CniFailure(4, `CNI_COMMAND ${JSON.stringify(command)} is not ADD, DEL, CHECK, VERSION, STATUS or GC`);
    }
  } catch (err) {
    const e = err instanceof CniFailure ? err : new CniFailure(999, (err as Error).message);
    process.stdout.write(JSON.stringify({ cniVersion: version, code: e.code, msg: e.message, ...(e.details ? { details: e.details } : {}) }) + '\n');
    process.exitCode = 1;
  }
}

main();
