/** Table output for `sluice-lab get` and `up` (pure). */
import type { KubeObject } from '../daemon/policy/types.js';
import type { ResourceKind } from './kinds.js';
import { readyText } from './cluster/podstatus.js';

const restarts = (status: Record<string, unknown> | undefined): number =>
  ((status?.containerStatuses ?? []) as { restartCount?: number }[]).reduce((n, c) => n + (c.restartCount ?? 0), 0);

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  return [header, ...rows].map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('   ').trimEnd()).join('\n');
}

const labelText = (o: KubeObject): string =>
  Object.entries(o.metadata.labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',') || '<none>';

export const internalIP = (n: KubeObject): string =>
  ((n.status?.addresses ?? []) as { type: string; address: string }[]).find((a) => a.type === 'InternalIP')?.address ?? '<none>';

export const servicePorts = (s: KubeObject): string =>
  ((s.spec?.ports ?? []) as { name?: string; port: number; protocol?: string; targetPort?: number | string }[])
    .map((p) => `${p.name ? `${p.name}:` : ''}${p.port}/${p.protocol ?? 'TCP'}${p.targetPort !== undefined && String(p.targetPort) !== String(p.port) ? `->${p.targetPort}` : ''}`)
    .join(',') || '<none>';

export function formatObjects(kind: ResourceKind, items: KubeObject[]): string {
  if (items.length === 0) return `No ${kind.plural} found.`;
  const ns = (o: KubeObject) => o.metadata.namespace ?? '';
  switch (kind.kind) {
    case 'Pod':
      return table(
        ['NAMESPACE', 'NAME', 'READY', 'STATUS', 'RESTARTS', 'IP', 'NODE', 'LABELS'],
        items.map((p) => [
          ns(p), p.metadata.name, readyText(p.status), p.status?.phase ?? '', String(restarts(p.status)), p.status?.podIP ?? '<none>', p.spec?.nodeName ?? '<none>', labelText(p),
        ]),
      );
    case 'Node':
      return table(
        ['NAME', 'INTERNAL-IP', 'POD-CIDR', 'LABELS'],
        items.map((n) => [n.metadata.name, internalIP(n), n.spec?.podCIDR ?? '', labelText(n)]),
      );
    case 'Service':
      return table(
        ['NAMESPACE', 'NAME', 'TYPE', 'CLUSTER-IP', 'PORTS', 'SELECTOR'],
        items.map((s) => [
          ns(s), s.metadata.name, s.spec?.type ?? 'ClusterIP', s.spec?.clusterIP ?? '<none>', servicePorts(s),
          Object.entries(s.spec?.selector ?? {}).map(([k, v]) => `${k}=${v}`).join(',') || '<none>',
        ]),
      );
    case 'EndpointSlice':
      return table(
        ['NAMESPACE', 'NAME', 'SERVICE', 'PORTS', 'ENDPOINTS'],
        items.map((s) => [
          ns(s), s.metadata.name, s.metadata.labels?.['kubernetes.io/service-name'] ?? '',
          ((s.ports ?? []) as { port?: number; protocol?: string }[]).map((p) => `${p.port}/${p.protocol ?? 'TCP'}`).join(',') || '<unset>',
          ((s.endpoints ?? []) as { addresses?: string[]; conditions?: { ready?: boolean } }[])
            .map((e) => `${(e.addresses ?? []).join('+')}${e.conditions?.ready === false ? '(not ready)' : ''}`)
            .join(',') || '<none>',
        ]),
      );
    case 'DaemonSet':
      return table(
        ['NAMESPACE', 'NAME', 'DESIRED', 'CURRENT', 'READY', 'UP-TO-DATE', 'AVAILABLE'],
        items.map((d) => [ns(d), d.metadata.name, ...['desiredNumberScheduled', 'currentNumberScheduled', 'numberReady', 'updatedNumberScheduled', 'numberAvailable'].map((k) => String(d.status?.[k] ?? 0))]),
      );
    case 'Namespace':
      return table(['NAME', 'STATUS', 'LABELS'], items.map((n) => [n.metadata.name, n.status?.phase ?? '', labelText(n)]));
    default:
      return kind.namespaced
        ? table(['NAMESPACE', 'NAME', 'CREATED'], items.map((o) => [ns(o), o.metadata.name, o.metadata.creationTimestamp ?? '']))
        : table(['NAME', 'CREATED'], items.map((o) => [o.metadata.name, o.metadata.creationTimestamp ?? '']));
  }
}
