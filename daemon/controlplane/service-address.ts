/**
 * Reaching a Service by its cluster DNS name from the host network. The agent runs with
 * `hostNetwork: true` and the node's resolv.conf, which does not know cluster names: a node
 * resolves `<service>.<namespace>.svc` only where it was set up to ask the cluster DNS, which EKS
 * nodes (and most others) are not. So, as Antrea's agent does, the Service's ClusterIP is read
 * through the API server and the connection is made to it, while the URL keeps the name: TLS then
 * sends it as SNI and verifies the server's certificate against it, not against an address.
 *
 * `ServiceAddresses.lookup` is a Node.js `lookup` (the option of `http(s).request`, `net.connect`,
 * `tls.connect`) doing that for `<service>.<namespace>.svc[.<cluster domain>]` and handing every
 * other name to `dns.lookup`. An answer is kept briefly, so that the watches reconnecting together
 * ask the API server once; a failure is never kept (but while the API server cannot be read, the
 * last answer is used).
 */
import dns from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { KubeApiError } from '../kube/access.js';
import type { KubeObject } from '../policy/types.js';

/** Reads a namespaced object: undefined when there is none (404); other failures reject. */
export type ObjectGetter = (namespace: string, name: string) => Promise<KubeObject | undefined>;

export interface ServiceName {
  namespace: string;
  name: string;
}

/** A DNS label (RFC 1123), as Service and Namespace names are. */
const LABEL = '[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?';
const SERVICE_HOST = new RegExp(`^(${LABEL})\\.(${LABEL})\\.svc(?:\\.[a-z0-9.-]+)?$`);

/**
 * The Service a host name names: `<service>.<namespace>.svc`, optionally followed by the cluster
 * domain (`.cluster.local` or another); undefined for any other name and for address literals.
 */
export function serviceOfHost(hostname: string): ServiceName | undefined {
  const host = hostname.toLowerCase().replace(/\.$/, '');
  if (isIP(host.replace(/^\[|\]$/g, ''))) return undefined;
  const m = SERVICE_HOST.exec(host);
  return m ? { name: m[1]!, namespace: m[2]! } : undefined;
}

/**
 * The addresses a client connects to for Service `svc`: its ClusterIPs (`spec.clusterIPs`, the
 * primary family first, else `spec.clusterIP`). A Service that has none (missing, headless,
 * ExternalName, not allocated yet) throws, naming it.
 */
export function clusterIPsOf(svc: ServiceName, service: KubeObject | undefined, notFoundHint?: string): string[] {
  const id = `Service ${svc.namespace}/${svc.name}`;
  if (service === undefined) throw new Error(`${id} not found${notFoundHint ? ` (${notFoundHint})` : ''}`);
  const spec = (service.spec ?? {}) as { type?: unknown; clusterIP?: unknown; clusterIPs?: unknown; externalName?: unknown };
  if (spec.type === 'ExternalName') throw new Error(`${id} is of type ExternalName (${String(spec.externalName)}): it has no ClusterIP to connect to`);
  const listed = Array.isArray(spec.clusterIPs) && spec.clusterIPs.length > 0 ? spec.clusterIPs : [spec.clusterIP];
  if (listed.includes('None')) throw new Error(`${id} is headless (clusterIP None): it has no ClusterIP to connect to`);
  const ips = listed.filter((ip): ip is string => typeof ip === 'string' && isIP(ip) !== 0);
  if (ips.length === 0) throw new Error(`${id} has no ClusterIP${spec.clusterIP === undefined || spec.clusterIP === '' ? ' (not allocated yet)' : `: ${JSON.stringify(spec.clusterIP)} is not an address`}`);
  return ips;
}

export interface ServiceAddressesOptions {
  /** Reads a Service through the API server (readThroughApi(api, 'services') in the agent). */
  getService: ObjectGetter;
  /** How long an answer is kept (default 10 000 ms). */
  ttlMs?: number;
  /** Added to the error of a missing Service: where it comes from. */
  notFoundHint?: string;
  now?: () => number;
  /** Where every other name goes (default dns.lookup). */
  fallback?: LookupFunction;
}

export class ServiceAddresses {
  private readonly cache = new Map<string, { ips: string[]; at: number }>();
  /** Reads under way: callers asking meanwhile share them. */
  private readonly reading = new Map<string, Promise<string[]>>();
  private readonly now: () => number;

  constructor(private readonly opts: ServiceAddressesOptions) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * The Service's ClusterIPs, from the API server unless read within the TTL. Rejects with an
   * error naming the Service (missing, headless, ExternalName, unreadable).
   */
  clusterIPs(svc: ServiceName): Promise<string[]> {
    const key = `${svc.namespace}/${svc.name}`;
    const held = this.cache.get(key);
    if (held && this.now() - held.at < (this.opts.ttlMs ?? 10_000)) return Promise.resolve(held.ips);
    let reading = this.reading.get(key);
    if (!reading) {
      reading = (async () => {
        let service: KubeObject | undefined;
        try {
          service = await this.opts.getService(svc.namespace, svc.name);
        } catch (err) {
          // The API server unreachable or refusing for now (a reconnect storm can be throttled):
          // the addresses it gave last are still the best guess; they stay expired, so the next
          // caller asks again.
          const last = this.cache.get(key);
          if (last) return last.ips;
          throw new Error(`Service ${key}: cannot read it through the API: ${(err as Error).message}`);
        }
        try {
          const ips = clusterIPsOf(svc, service, this.opts.notFoundHint);
          this.cache.set(key, { ips, at: this.now() });
          return ips;
        } catch (err) {
          this.cache.delete(key);
          throw err;
        }
      })().finally(() => this.reading.delete(key));
      this.reading.set(key, reading);
    }
    return reading;
  }

  /**
   * Node's `lookup` (the `lookup` option of http(s).request and net/tls.connect): a Service name's
   * ClusterIPs, any other name through dns.lookup. With `options.all` (Node ≥ 20 asks so when
   * autoSelectFamily is on) the callback takes every address, else the first; `options.family`
   * 4 or 6 keeps that family only.
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    const svc = serviceOfHost(hostname);
    if (!svc) {
      (this.opts.fallback ?? (dns.lookup as unknown as LookupFunction))(hostname, options, callback);
      return;
    }
    const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : (options.family ?? 0);
    this.clusterIPs(svc).then(
      (ips) => {
        const found = ips.map((address) => ({ address, family: isIP(address) })).filter((a) => family === 0 || a.family === family);
        if (found.length === 0) {
          callback(lookupError(hostname, `Service ${svc.namespace}/${svc.name} has no IPv${family} ClusterIP (it has ${ips.join(', ')})`), '', undefined);
        } else if (options.all) callback(null, found);
        else callback(null, found[0]!.address, found[0]!.family);
      },
      (err: Error) => callback(lookupError(hostname, err.message), '', undefined),
    );
  };
}

function lookupError(hostname: string, message: string): NodeJS.ErrnoException {
  return Object.assign(new Error(message), { code: 'ENOTFOUND', hostname, syscall: 'getaddrinfo' });
}

/**
 * An ObjectGetter of a core (v1) resource through the agent's API connection: GET
 * `/api/v1/namespaces/<ns>/<resource>/<name>`, undefined on 404.
 */
export function readThroughApi(api: { getJson(path: string, timeoutMs?: number): Promise<unknown> }, resource: 'services' | 'configmaps', timeoutMs = 10_000): ObjectGetter {
  return async (namespace, name) => {
    try {
      return (await api.getJson(`/api/v1/namespaces/${encodeURIComponent(namespace)}/${resource}/${encodeURIComponent(name)}`, timeoutMs)) as KubeObject;
    } catch (err) {
      if (err instanceof KubeApiError && err.statusCode === 404) return undefined;
      throw err;
    }
  };
}
