#!/usr/bin/env node
/**
 * eks-sim: CNI plugins that leave a Pod wired the way the AWS VPC CNI does (routed, no bridge).
 *
 * `type: "eks-sim"` (the VPC CNI's `aws-cni`): one veth, host end `eni<11 hex of sha1(containerId)>`
 * with no address of its own. Per address family of the IPAM result:
 * - IPv4: Pod `eth0` holds `<ip>/32`, routes `169.254.1.1 dev eth0 scope link` and
 *   `default via 169.254.1.1`, PERMANENT neighbour 169.254.1.1 -> host veth MAC; host route
 *   `<ip>/32 dev eni… scope link`.
 * - IPv6: Pod `eth0` (IPv6 on, also on `lo`) holds `<ip>/128` (the lab's node prefix stands for the
 *   prefix delegated to the node's ENI), routes `fe80::1 dev eth0` and `default via fe80::1`,
 *   PERMANENT neighbour fe80::1 -> host veth MAC (nothing on the host owns fe80::1: the host routes
 *   whatever arrives on the veth); host route `<ip>/128 dev eni…`; the host veth gets accept_ra=0,
 *   accept_redirects=1, forwarding=0; ADD returns once DAD has finished on `eth0` (the VPC CNI waits
 *   for its addresses to be stable, with a 10 s limit).
 * The result has the VPC CNI's shape: interfaces `[host veth (name only), eth0 (sandbox, mac = the
 * route table id "1" of the primary ENI), dummy<…> (mac "0" = no VLAN, sandbox "0" = device
 * number)]`, one ip per family on interface 1. Those `mac` values are not MAC addresses; a chained
 * plugin must hand them on untouched.
 *
 * `type: "egress-cni"` (the VPC CNI's `egress-cni` in IPv4 mode, under its name so that sluice's
 * installer chains after it as after the real one; chained after the primary in IPv6 clusters): gives the Pod an IPv4 path out without an IPv4 Pod address. A second veth, Pod end
 * `v4if0` holding a 169.254.172.0/22 address from its own IPAM (a host-local range), routes via
 * 169.254.172.1 (on the host end, `vethXXXXXXXX`, scope link, with the host route `<ip>/32`), and
 * SNAT to the node's IPv4 address (`nodeIP` in its config) in the nat table: `POSTROUTING -s <ip>
 * -j CNI-E4-<hash>`, that chain accepting multicast and SNATting the rest. It appends its two
 * interfaces to prevResult and returns it otherwise unchanged: the IPv4 address is in no result, so
 * it is no Pod IP. It does nothing when prevResult already has an IPv4 address.
 *
 * IPAM is delegated to the configured IPAM plugin (host-local in the lab) found on CNI_PATH. Both
 * run in the node namespace; CNI spec 1.x contract: ADD/DEL/CHECK/VERSION/STATUS/GC, DEL
 * idempotent, failures as a CNI error object on stdout with exit 1 after undoing what ADD did.
 *
 * Left out of the VPC CNI: ENIs, warm pools, the `to <podIP> lookup main` rules (priority 512) and
 * per-ENI route tables (one flat node network here), branch ENIs / security groups for Pods,
 * multi-NIC Pods.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { join } from 'node:path';
import { eniName } from './names.js';

const SUPPORTED = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const GATEWAY4 = '169.254.1.1';
const GATEWAY6 = 'fe80::1';
const EGRESS_IF = 'v4if0';
const EGRESS_GATEWAY = '169.254.172.1';
const DAD_TIMEOUT_MS = 10_000;

class CniFailure extends Error {
  constructor(readonly code: number, msg: string, readonly details?: string) {
    super(msg);
  }
}

interface ResultIp {
  address: string;
  gateway?: string;
  interface?: number;
  [extra: string]: unknown;
}
interface ResultIface {
  name: string;
  mac?: string;
  sandbox?: string;
}
interface Result {
  cniVersion?: string;
  interfaces?: ResultIface[];
  ips?: ResultIp[];
  [extra: string]: unknown;
}

interface NetConf {
  cniVersion: string;
  name: string;
  type: string;
  mtu?: number;
  /** egress-cni: the node's IPv4 address the Pod's IPv4 egress is SNATed to. */
  nodeIP?: string;
  ipam?: { type?: string };
  prevResult?: Result;
}

function sh(file: string, args: string[], input?: string): string {
  const r = spawnSync(file, args, { input, encoding: 'utf8' });
  if (r.error) throw new CniFailure(999, `${file} could not run`, r.error.message);
  if (r.status !== 0) throw new CniFailure(999, `${[file, ...args].join(' ')} failed`, (r.stderr || r.stdout).trim());
  return r.stdout;
}

const inPod = (netns: string, args: string[], input?: string): string => sh('nsenter', [`--net=${netns}`, 'ip', ...args], input);
const inPodCmd = (netns: string, file: string, args: string[]): string => sh('nsenter', [`--net=${netns}`, file, ...args]);

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
function ipam(command: string, raw: string, conf: NetConf): Result | null {
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
  return command === 'ADD' ? (JSON.parse(r.stdout) as Result) : null;
}

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new CniFailure(4, `environment variable ${name} is required`);
  return v;
}

const addressOf = (cidr: string): string => cidr.split('/')[0]!;

/** The first IPv4 and the first IPv6 address of a result (without prefix length). */
function families(result: Result | null | undefined): { v4?: string; v6?: string } {
  const addrs = (result?.ips ?? []).map((ip) => addressOf(ip.address));
  const v4 = addrs.find((a) => !isIPv6(a));
  const v6 = addrs.find((a) => isIPv6(a));
  return { ...(v4 ? { v4 } : {}), ...(v6 ? { v6 } : {}) };
}

/** Writes an IPv6 sysctl of an interface in this process's namespace. */
function ipv6Sysctl(ifName: string, key: string, value: string): void {
  writeFileSync(`/proc/sys/net/ipv6/conf/${ifName}/${key}`, value);
}

/** Waits until no IPv6 address on the Pod's interface is tentative (DAD done), or fails. */
function waitForDad(netns: string, ifName: string): void {
  const deadline = Date.now() + DAD_TIMEOUT_MS;
  for (;;) {
    const out = inPod(netns, ['-6', '-o', 'addr', 'show', 'dev', ifName]);
    if (/dadfailed/.test(out)) throw new CniFailure(999, `duplicate address detection failed on ${ifName}`, out.trim());
    if (!/tentative/.test(out)) return;
    if (Date.now() > deadline) throw new CniFailure(999, `the IPv6 addresses of ${ifName} were still tentative after ${DAD_TIMEOUT_MS / 1000} s`, out.trim());
    spawnSync('sleep', ['0.05']);
  }
}

const dummyName = (containerId: string): string => `dummy${createHash('sha1').update(containerId).digest('hex').slice(0, 11)}`;

function add(raw: string, conf: NetConf): unknown {
  const containerId = env('CNI_CONTAINERID');
  const netns = env('CNI_NETNS');
  const ifName = env('CNI_IFNAME');
  const mtu = conf.mtu ?? 1500;
  const hostIf = eniName(containerId);
  const alloc = ipam('ADD', raw, conf);
  const { v4, v6 } = families(alloc);
  if (!v4 && !v6) throw new CniFailure(999, 'IPAM returned no address');
  try {
    if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]); // a retried ADD starts clean
    sh('ip', ['link', 'add', hostIf, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', ifName, 'mtu', String(mtu), 'netns', netns]);
    if (v6) {
      ipv6Sysctl(hostIf, 'accept_ra', '0');
      ipv6Sysctl(hostIf, 'accept_redirects', '1');
      ipv6Sysctl(hostIf, 'forwarding', '0');
    }
    sh('ip', ['link', 'set', hostIf, 'up']);
    if (v4) sh('ip', ['route', 'replace', `${v4}/32`, 'dev', hostIf, 'scope', 'link']);
    if (v6) sh('ip', ['-6', 'route', 'replace', `${v6}/128`, 'dev', hostIf]);
    const hostMac = linkMac(sh('ip', ['-j', 'link', 'show', 'dev', hostIf]));
    if (v6) inPodCmd(netns, 'sysctl', ['-qw', `net.ipv6.conf.${ifName}.disable_ipv6=0`, 'net.ipv6.conf.lo.disable_ipv6=0']);
    const batch = ['link set lo up', `link set ${ifName} up`];
    if (v4) {
      batch.push(
        `addr add ${v4}/32 dev ${ifName}`,
        `route replace ${GATEWAY4} dev ${ifName} scope link`,
        `route replace default via ${GATEWAY4} dev ${ifName}`,
        `neigh replace ${GATEWAY4} lladdr ${hostMac} dev ${ifName} nud permanent`,
      );
    }
    if (v6) {
      batch.push(
        // (a batch line takes no -6: the addresses give the family)
        `route replace ${GATEWAY6}/128 dev ${ifName}`,
        `route replace ::/0 via ${GATEWAY6} dev ${ifName}`,
        `addr add ${v6}/128 dev ${ifName}`,
        `neigh replace ${GATEWAY6} lladdr ${hostMac} dev ${ifName} nud permanent`,
      );
    }
    inPod(netns, ['-batch', '-'], batch.join('\n') + '\n');
    if (v6) waitForDad(netns, ifName);
    const old = conf.cniVersion.startsWith('0.');
    const ip = (addr: string, bits: number, gateway: string, version: string): ResultIp => ({ ...(old ? { version } : {}), address: `${addr}/${bits}`, gateway, interface: 1 });
    return {
      cniVersion: conf.cniVersion,
      interfaces: [{ name: hostIf }, { name: ifName, sandbox: netns, mac: '1' }, { name: dummyName(containerId), mac: '0', sandbox: '0' }],
      ips: [...(v4 ? [ip(v4, 32, GATEWAY4, '4')] : []), ...(v6 ? [ip(v6, 128, GATEWAY6, '6')] : [])],
      routes: [...(v4 ? [{ dst: '0.0.0.0/0', gw: GATEWAY4 }] : []), ...(v6 ? [{ dst: '::/0', gw: GATEWAY6 }] : [])],
      dns: {},
    };
  } catch (err) {
    // Leave nothing half-configured: the veth (and with it the Pod side and host routes) and the addresses go.
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
  if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]); // takes the Pod end and the host routes with it
  if (conf.ipam?.type) ipam('DEL', raw, conf);
}

function check(raw: string, conf: NetConf): void {
  const containerId = env('CNI_CONTAINERID');
  const netns = env('CNI_NETNS');
  const ifName = env('CNI_IFNAME');
  const hostIf = eniName(containerId);
  const { v4, v6 } = families(conf.prevResult);
  if (!v4 && !v6) throw new CniFailure(7, 'CHECK needs prevResult with an IP');
  const problems: string[] = [];
  if (!linkExists(hostIf)) problems.push(`host veth ${hostIf} missing`);
  else {
    if (sh('ip', ['-4', '-o', 'addr', 'show', 'dev', hostIf]).trim()) problems.push(`host veth ${hostIf} has an IPv4 address`);
    if (v4 && !sh('ip', ['route', 'show', `${v4}/32`, 'dev', hostIf]).includes('scope link')) problems.push(`host route ${v4}/32 dev ${hostIf} missing`);
    if (v6 && !sh('ip', ['-6', 'route', 'show', `${v6}/128`, 'dev', hostIf]).trim()) problems.push(`host route ${v6}/128 dev ${hostIf} missing`);
  }
  try {
    const gateways = [...(v4 ? [['-4', `${v4}/32`, GATEWAY4]] : []), ...(v6 ? [['-6', `${v6}/128`, GATEWAY6]] : [])];
    for (const [fam, cidr, gw] of gateways as [string, string, string][]) {
      if (!inPod(netns, [fam, '-o', 'addr', 'show', 'dev', ifName]).includes(cidr)) problems.push(`${ifName} lacks ${cidr}`);
      if (!inPod(netns, [fam, 'route', 'show', 'default']).includes(`via ${gw}`)) problems.push(`default route via ${gw} missing`);
      if (!inPod(netns, [fam, 'neigh', 'show', gw, 'dev', ifName]).includes('PERMANENT')) problems.push(`permanent neighbour ${gw} missing`);
    }
  } catch (err) {
    problems.push(`cannot inspect the Pod namespace: ${(err as Error).message}`);
  }
  if (problems.length) throw new CniFailure(999, 'eks-sim CHECK failed', problems.join('; '));
  ipam('CHECK', raw, conf);
}

/** The egress plugin's host veth: `veth` + 8 hex, like the random names it has on EKS, but derived from the container. */
const egressHostIf = (containerId: string): string => `veth${createHash('sha1').update(`egress-v4/${containerId}`).digest('hex').slice(0, 8)}`;
const egressChain = (containerId: string): string => `CNI-E4-${createHash('sha1').update(containerId).digest('hex').slice(0, 20)}`;
const egressComment = (conf: NetConf, containerId: string): string => `name: "${conf.name}" id: "${containerId}"`;

function iptables(args: string[], allowFail = false): boolean {
  const r = spawnSync('iptables', ['-w', '-t', 'nat', ...args], { encoding: 'utf8' });
  if (r.status !== 0 && !allowFail) throw new CniFailure(999, `iptables -t nat ${args.join(' ')} failed`, (r.stderr || r.stdout).trim());
  return r.status === 0;
}

/** The Pod's SNAT rules: gone when absent already (DEL is idempotent). */
function removeSnat(conf: NetConf, containerId: string, podV4: string | undefined): void {
  const chain = egressChain(containerId);
  if (podV4) iptables(['-D', 'POSTROUTING', '-s', podV4, '-j', chain, '-m', 'comment', '--comment', egressComment(conf, containerId)], true);
  iptables(['-F', chain], true);
  iptables(['-X', chain], true);
}

function egressAdd(raw: string, conf: NetConf): unknown {
  const containerId = env('CNI_CONTAINERID');
  const netns = env('CNI_NETNS');
  const prev = conf.prevResult;
  if (!prev) throw new CniFailure(7, 'egress-cni must be chained after the primary plugin (no prevResult)');
  if (families(prev).v4) return { ...prev, cniVersion: conf.cniVersion }; // the Pod has IPv4 of its own
  if (!conf.nodeIP) throw new CniFailure(7, 'nodeIP is required (the node address IPv4 egress is SNATed to)');
  const mtu = conf.mtu ?? 1500;
  const hostIf = egressHostIf(containerId);
  const alloc = ipam('ADD', raw, conf);
  const cidr = alloc?.ips?.find((ip) => !isIPv6(addressOf(ip.address)))?.address;
  if (!cidr) throw new CniFailure(999, 'egress IPAM returned no IPv4 address');
  const podV4 = addressOf(cidr);
  try {
    if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]);
    removeSnat(conf, containerId, podV4);
    sh('ip', ['link', 'add', hostIf, 'mtu', String(mtu), 'type', 'veth', 'peer', 'name', EGRESS_IF, 'mtu', String(mtu), 'netns', netns]);
    sh('ip', ['link', 'set', hostIf, 'up']);
    sh('ip', ['addr', 'add', `${EGRESS_GATEWAY}/32`, 'dev', hostIf, 'scope', 'link']);
    sh('ip', ['route', 'replace', `${podV4}/32`, 'dev', hostIf, 'scope', 'link']);
    const hostMac = linkMac(sh('ip', ['-j', 'link', 'show', 'dev', hostIf]));
    const [net, bits] = cidr.split('/') as [string, string];
    inPod(netns, ['-batch', '-'], [
      `link set ${EGRESS_IF} up`,
      `addr add ${cidr} dev ${EGRESS_IF} noprefixroute`,
      `route replace ${EGRESS_GATEWAY} dev ${EGRESS_IF} scope link src ${podV4}`,
      `route replace ${subnetOf(net, Number(bits))}/${bits} via ${EGRESS_GATEWAY} dev ${EGRESS_IF} src ${podV4}`,
      `route replace default via ${EGRESS_GATEWAY} dev ${EGRESS_IF}`,
    ].join('\n') + '\n');
    const podMac = linkMac(inPod(netns, ['-j', 'link', 'show', 'dev', EGRESS_IF]));
    const comment = egressComment(conf, containerId);
    const chain = egressChain(containerId);
    iptables(['-N', chain]);
    iptables(['-A', chain, '-d', '224.0.0.0/4', '-j', 'ACCEPT', '-m', 'comment', '--comment', comment]);
    iptables(['-A', chain, '-j', 'SNAT', '--to-source', conf.nodeIP, '-m', 'comment', '--comment', comment, '--random-fully']);
    iptables(['-A', 'POSTROUTING', '-s', podV4, '-j', chain, '-m', 'comment', '--comment', comment]);
    return {
      ...prev,
      cniVersion: conf.cniVersion,
      interfaces: [...(prev.interfaces ?? []), { name: hostIf, mac: hostMac }, { name: EGRESS_IF, mac: podMac, sandbox: netns }],
    };
  } catch (err) {
    if (linkExists(hostIf)) spawnSync('ip', ['link', 'del', hostIf]);
    removeSnat(conf, containerId, podV4);
    try {
      ipam('DEL', raw, conf);
    } catch {
      // the original error matters more
    }
    throw err;
  }
}

/** The network address of `ip`/`bits` (IPv4). */
function subnetOf(ip: string, bits: number): string {
  const n = ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
  const masked = bits === 0 ? 0 : n - (n % 2 ** (32 - bits));
  return [24, 16, 8, 0].map((s) => Math.floor(masked / 2 ** s) % 256).join('.');
}

function egressDel(raw: string, conf: NetConf): void {
  const containerId = env('CNI_CONTAINERID');
  const netns = process.env.CNI_NETNS;
  let podV4: string | undefined;
  if (netns && existsSync(netns)) {
    const r = spawnSync('nsenter', [`--net=${netns}`, 'ip', '-4', '-j', 'addr', 'show', 'dev', EGRESS_IF], { encoding: 'utf8' });
    if (r.status === 0) podV4 = (JSON.parse(r.stdout || '[]') as { addr_info?: { local?: string }[] }[])[0]?.addr_info?.[0]?.local;
  }
  const hostIf = egressHostIf(containerId);
  if (linkExists(hostIf)) sh('ip', ['link', 'del', hostIf]);
  removeSnat(conf, containerId, podV4);
  if (conf.ipam?.type) ipam('DEL', raw, conf);
}

function egressCheck(conf: NetConf): void {
  if (!conf.prevResult || families(conf.prevResult).v4) return;
  const containerId = env('CNI_CONTAINERID');
  const problems: string[] = [];
  if (!linkExists(egressHostIf(containerId))) problems.push(`egress host veth ${egressHostIf(containerId)} missing`);
  if (!iptables(['-S', egressChain(containerId)], true)) problems.push(`SNAT chain ${egressChain(containerId)} missing`);
  if (problems.length) throw new CniFailure(999, 'egress-cni CHECK failed', problems.join('; '));
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
    const egress = conf.type === 'egress-cni';
    switch (command) {
      case 'ADD':
        process.stdout.write(JSON.stringify(egress ? egressAdd(raw, conf) : add(raw, conf)) + '\n');
        return;
      case 'DEL':
        if (egress) egressDel(raw, conf);
        else del(raw, conf);
        return;
      case 'CHECK':
        if (egress) egressCheck(conf);
        else check(raw, conf);
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
