/**
 * CNI result objects: validation and conversion between spec versions. Pure.
 *
 * The only structural difference between the result versions sluice supports is `ips[].version`
 * ("4" | "6"): required by 0.3.0/0.3.1/0.4.0, removed in 1.0.0. 1.1.0 only adds optional fields
 * (interface mtu/socketPath/pciID, route mtu/advmss/priority/table/scope) on top of 1.0.0. So a
 * conversion rewrites `cniVersion`, adds or drops `ips[].version`, and leaves every other field —
 * including ones sluice does not know — exactly as it was: a chained plugin must hand on
 * prevResult unchanged apart from its own modifications.
 */
import { isIP } from 'node:net';
import { CniErrorCode, compareVersions, isSupportedVersion } from '../../cni/protocol.js';
import { canonicalIp } from '../policy/cidr.js';
import { CniError } from './errors.js';

export interface CniInterface {
  name: string;
  mac?: string;
  mtu?: number;
  sandbox?: string;
  socketPath?: string;
  pciID?: string;
  [extra: string]: unknown;
}

/** An IP in the 1.x shape (no `version`). */
export interface CniIpConfig {
  address: string;
  gateway?: string;
  interface?: number;
  [extra: string]: unknown;
}

export interface CniRoute {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
  [extra: string]: unknown;
}

export interface CniDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
  [extra: string]: unknown;
}

/** A result in the 1.x shape. */
export interface CniResult {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIpConfig[];
  routes?: CniRoute[];
  dns?: CniDns;
  [extra: string]: unknown;
}

/** 0.3.0, 0.3.1 and 0.4.0 results carry `ips[].version`. */
export function hasIpVersionField(cniVersion: string): boolean {
  return compareVersions(cniVersion, '1.0.0') < 0;
}

type Obj = Record<string, unknown>;

function invalid(msg: string, details?: string): CniError {
  return new CniError(CniErrorCode.InvalidNetworkConfig, msg, details);
}

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** "10.0.0.5/24" or "fd00::5/64": a valid IP and a prefix length within its family's range. */
export function isCidr(value: unknown): value is string {
  if (typeof value !== 'string') return false;
  const slash = value.indexOf('/');
  if (slash < 0) return false;
  const family = isIP(value.slice(0, slash));
  const prefix = value.slice(slash + 1);
  if (family === 0 || !/^\d{1,3}$/.test(prefix)) return false;
  return Number(prefix) <= (family === 4 ? 32 : 128);
}

/**
 * The addresses a result gives interface `ifName` (or no interface in particular), both families,
 * without prefix length, each once, IPv6 in canonical text (so they compare with the API's).
 */
export function interfaceIPs(result: CniResult | undefined, ifName: string): string[] {
  const ifaces = Array.isArray(result?.interfaces) ? result.interfaces : [];
  const ips = (Array.isArray(result?.ips) ? result.ips : [])
    .filter((ip) => ip && typeof ip.address === 'string')
    .filter((ip) => ip.interface === undefined || ifaces[ip.interface]?.name === ifName)
    .map((ip) => ip.address.split('/')[0]!)
    .filter((a) => isIP(a) !== 0)
    .map((a) => canonicalIp(a) ?? a);
  return [...new Set(ips)].sort();
}

/** IP family ("4" | "6") of a CIDR or bare address, as 0.x results spell it. */
export function ipFamily(addressOrCidr: string): '4' | '6' {
  return isIP(addressOrCidr.split('/')[0] ?? '') === 6 ? '6' : '4';
}

function checkUint(where: string, v: unknown): void {
  if (v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 0)) throw invalid(`${where} must be a non-negative integer`, String(v));
}

function checkString(where: string, v: unknown): void {
  if (v !== undefined && typeof v !== 'string') throw invalid(`${where} must be a string`);
}

function checkStringList(where: string, v: unknown): void {
  if (v !== undefined && !(Array.isArray(v) && v.every((s) => typeof s === 'string'))) throw invalid(`${where} must be a list of strings`);
}

function checkList(where: string, v: unknown): unknown[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw invalid(`${where} must be a list`);
  return v;
}

/**
 * Checks a result's shape and fields; throws CniError(7) naming the first bad field
 * (e.g. "prevResult.ips[1].address must be an IP address in CIDR notation").
 */
export function validateResult(raw: unknown, where = 'prevResult'): asserts raw is Obj {
  if (!isObj(raw)) throw invalid(`${where} must be a JSON object`);

  const interfaces = checkList(`${where}.interfaces`, raw.interfaces) ?? [];
  interfaces.forEach((itf, i) => {
    const w = `${where}.interfaces[${i}]`;
    if (!isObj(itf)) throw invalid(`${w} must be an object`);
    if (typeof itf.name !== 'string' || itf.name === '') throw invalid(`${w}.name must be a non-empty string`);
    // Not checked as a hardware address: the AWS VPC CNI stores other numbers there (the route
    // table id on the Pod's interface, the VLAN id "0" on its dummy interface), and sluice never
    // reads it (the Pod's MAC is read from the interface itself).
    checkString(`${w}.mac`, itf.mac);
    checkUint(`${w}.mtu`, itf.mtu);
    checkString(`${w}.sandbox`, itf.sandbox);
    checkString(`${w}.socketPath`, itf.socketPath);
    checkString(`${w}.pciID`, itf.pciID);
  });

  const ips = checkList(`${where}.ips`, raw.ips) ?? [];
  ips.forEach((ip, i) => {
    const w = `${where}.ips[${i}]`;
    if (!isObj(ip)) throw invalid(`${w} must be an object`);
    if (!isCidr(ip.address)) throw invalid(`${w}.address must be an IP address in CIDR notation (e.g. 10.10.1.5/24)`, String(ip.address));
    if (ip.gateway !== undefined && !(typeof ip.gateway === 'string' && isIP(ip.gateway))) throw invalid(`${w}.gateway must be an IP address`, String(ip.gateway));
    if (ip.gateway !== undefined && ipFamily(ip.gateway as string) !== ipFamily(ip.address)) {
      throw invalid(`${w}.gateway ${String(ip.gateway)} is not in the address family of ${ip.address}`);
    }
    if (ip.version !== undefined) {
      if (ip.version !== '4' && ip.version !== '6') throw invalid(`${w}.version must be "4" or "6"`, String(ip.version));
      if (ip.version !== ipFamily(ip.address)) throw invalid(`${w}.version is "${ip.version}" but ${ip.address} is IPv${ipFamily(ip.address)}`);
    }
    if (ip.interface !== undefined) {
      checkUint(`${w}.interface`, ip.interface);
      if ((ip.interface as number) >= interfaces.length) {
        throw invalid(`${w}.interface is ${String(ip.interface)} but ${where}.interfaces has ${interfaces.length} entr${interfaces.length === 1 ? 'y' : 'ies'}`);
      }
    }
  });

  const routes = checkList(`${where}.routes`, raw.routes) ?? [];
  routes.forEach((route, i) => {
    const w = `${where}.routes[${i}]`;
    if (!isObj(route)) throw invalid(`${w} must be an object`);
    if (!isCidr(route.dst)) throw invalid(`${w}.dst must be a destination in CIDR notation (e.g. 0.0.0.0/0)`, String(route.dst));
    if (route.gw !== undefined && !(typeof route.gw === 'string' && isIP(route.gw))) throw invalid(`${w}.gw must be an IP address`, String(route.gw));
    for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope']) checkUint(`${w}.${k}`, route[k]);
  });

  if (raw.dns !== undefined) {
    if (!isObj(raw.dns)) throw invalid(`${where}.dns must be an object`);
    checkStringList(`${where}.dns.nameservers`, raw.dns.nameservers);
    checkString(`${where}.dns.domain`, raw.dns.domain);
    checkStringList(`${where}.dns.search`, raw.dns.search);
    checkStringList(`${where}.dns.options`, raw.dns.options);
  }
}

/**
 * Validates `raw` (a result in any supported version's shape) and returns it in the shape of
 * `toVersion`. The input is never modified. `ips[].version` is accepted on any input (some
 * runtimes leave it on 1.x results) and derived from the address when the target needs it.
 */
export function convertResult(raw: unknown, toVersion: string, where = 'prevResult'): CniResult {
  if (!isSupportedVersion(toVersion)) throw new CniError(CniErrorCode.IncompatibleVersion, `cannot convert ${where} to unsupported CNI version "${toVersion}"`);
  validateResult(raw, where);
  if (raw.cniVersion !== undefined && !isSupportedVersion(raw.cniVersion)) {
    throw new CniError(CniErrorCode.IncompatibleVersion, `${where}.cniVersion "${String(raw.cniVersion)}" is not a version sluice supports`);
  }
  const out: Obj = structuredClone(raw);
  out.cniVersion = toVersion;
  if (Array.isArray(out.ips)) {
    const withVersion = hasIpVersionField(toVersion);
    out.ips = (out.ips as Obj[]).map(({ version: _dropped, ...rest }) =>
      withVersion ? { version: ipFamily(rest.address as string), ...rest } : rest,
    );
  }
  return out as CniResult;
}

/** A result as the handler sees it: validated, in the 1.x shape (cniVersion "1.1.0"). */
export function normalizeResult(raw: unknown, where = 'prevResult'): CniResult {
  return convertResult(raw, '1.1.0', where);
}

/**
 * Interfaces a result puts in the Pod's namespace besides `ifName` that no IP of the result is on:
 * a path out of the Pod that chained plugins added after the primary. The AWS VPC CNI's
 * `egress-cni` (IPv6 clusters) appends its host veth `{name, mac}` and the Pod's `v4if0`
 * `{name, mac, sandbox: CNI_NETNS}` and no IP (its IPv4 address is link-local and SNATed, so no
 * Pod IP); the primary's own dummy interface has sandbox "0" (not a namespace) and is not one.
 */
export function extraPodInterfaces(result: CniResult | undefined, ifName: string, netns: string): string[] {
  const ifaces = Array.isArray(result?.interfaces) ? result.interfaces : [];
  const withIps = new Set((Array.isArray(result?.ips) ? result.ips : []).map((ip) => ip?.interface).filter((i): i is number => typeof i === 'number'));
  const out: string[] = [];
  ifaces.forEach((itf, i) => {
    if (itf && itf.sandbox === netns && itf.name !== ifName && !withIps.has(i) && !out.includes(itf.name)) out.push(itf.name);
  });
  return out;
}
