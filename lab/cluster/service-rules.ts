/**
 * What kube-proxy programs, computed from Services and EndpointSlices (pure): one rule set per
 * ClusterIP Service port with the ready endpoints of that port. The lab's iptables rendering
 * (lab/net/service-nat.ts) turns these into nat rules.
 */
import type { KubeObject } from '../../daemon/policy/types.js';
import type { ServicePortRule } from '../net/service-nat.js';
import { SERVICE_NAME_LABEL } from './endpointslices.js';

interface SliceEndpoint {
  addresses?: string[];
  conditions?: { ready?: boolean };
}
interface SlicePortSpec {
  name?: string;
  port?: number;
  protocol?: string;
}

export function hasClusterIP(svc: KubeObject): boolean {
  const ip = svc.spec?.clusterIP;
  return typeof ip === 'string' && ip !== '' && ip !== 'None' && svc.spec?.type !== 'ExternalName';
}

/** Every ClusterIP of a Service (spec.clusterIPs; spec.clusterIP alone when that is unset). */
function clusterIPs(svc: KubeObject): string[] {
  const listed = ((svc.spec?.clusterIPs ?? []) as unknown[]).filter((ip): ip is string => typeof ip === 'string' && ip !== '' && ip !== 'None');
  return listed.length ? listed : [svc.spec.clusterIP as string];
}

/**
 * One rule set per ClusterIP (so per family: kube-proxy runs one proxier per family) and Service
 * port, with the ready endpoints of that port from the slices of the ClusterIP's address type.
 */
export function servicePortRules(services: KubeObject[], slices: KubeObject[]): ServicePortRule[] {
  const bySvc = new Map<string, KubeObject[]>();
  for (const s of slices) {
    const svcName = s.metadata.labels?.[SERVICE_NAME_LABEL];
    if (!svcName || (s.addressType !== 'IPv4' && s.addressType !== 'IPv6')) continue;
    const key = `${s.metadata.namespace}/${svcName}/${s.addressType}`;
    if (!bySvc.has(key)) bySvc.set(key, []);
    bySvc.get(key)!.push(s);
  }
  const rules: ServicePortRule[] = [];
  for (const svc of services) {
    if (!hasClusterIP(svc)) continue;
    const namespace = svc.metadata.namespace ?? 'default';
    for (const clusterIP of clusterIPs(svc)) {
      const mine = bySvc.get(`${namespace}/${svc.metadata.name}/${clusterIP.includes(':') ? 'IPv6' : 'IPv4'}`) ?? [];
      for (const sp of (svc.spec?.ports ?? []) as { name?: string; port: number; protocol?: string }[]) {
        const protocol = (sp.protocol ?? 'TCP') as ServicePortRule['protocol'];
        // SCTP is neither served nor reliably matchable here (no sctp module): no rule rather than a failed restore.
        if (protocol === 'SCTP') continue;
        const seen = new Set<string>();
        const endpoints: ServicePortRule['endpoints'] = [];
        for (const slice of mine) {
          // A slice port belongs to a Service port by name ("" when the Service has a single unnamed port).
          const port = ((slice.ports ?? []) as SlicePortSpec[]).find((p) => (p.name ?? '') === (sp.name ?? '') && (p.protocol ?? 'TCP') === protocol);
          if (!port?.port) continue;
          for (const ep of (slice.endpoints ?? []) as SliceEndpoint[]) {
            if (ep.conditions?.ready === false) continue;
            for (const ip of ep.addresses ?? []) {
              const key = `${ip}:${port.port}`;
              if (seen.has(key)) continue;
              seen.add(key);
              endpoints.push({ ip, port: port.port });
            }
          }
        }
        rules.push({
          namespace,
          name: svc.metadata.name,
          ...(sp.name ? { portName: sp.name } : {}),
          clusterIP,
          port: sp.port,
          protocol,
          endpoints,
        });
      }
    }
  }
  return rules;
}
