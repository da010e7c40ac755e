/**
 * The probes of a model = datapath comparison (pure), built from the lab's running objects:
 *  - every Pod to every other Pod on every port it serves (TCP/UDP as packets; SCTP container
 *    ports are probed too, by trace);
 *  - every Pod to every Service port (service:ns/name), except a Pod reaching a Service that
 *    selects itself (hairpin: the lab's kube-proxy does not masquerade, see lab/README.md);
 *  - every Pod to the external host (ip:192.168.77.250, TCP 80 and UDP 81) and the external host
 *    to every Pod (TCP 80, UDP 81);
 *  - every node (ip:<InternalIP>, the host network) to every Pod on TCP 80: a node reaching its
 *    own Pods is never blocked, a remote node is an ordinary peer.
 * With `families` (a dual-stack lab) every probe is made once per family, with `family` set: the
 * external host and the nodes by their address of that family (ip:fd00:77::fa, the IPv6
 * InternalIP), a Service in the families of its ClusterIPs.
 */
import { labelValue } from '../../daemon/policy/labels.js';
import type { KubeObject, Probe } from '../../daemon/policy/types.js';
import { EXT_IP, EXT_IPV6 } from '../net/names.js';

const ref = (o: KubeObject): string => `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`;

type Port = { port: number; protocol: Probe['protocol'] };

function declaredPorts(pod: KubeObject): Port[] {
  const seen = new Map<string, Port>();
  for (const c of (pod.spec?.containers ?? []) as { ports?: { containerPort: number; protocol?: string }[] }[]) {
    for (const p of c.ports ?? []) {
      const protocol = (p.protocol ?? 'TCP') as Probe['protocol'];
      if (!['TCP', 'UDP', 'SCTP'].includes(protocol)) continue;
      seen.set(`${p.containerPort}/${protocol}`, { port: p.containerPort, protocol });
    }
  }
  return [...seen.values()].sort((a, b) => a.port - b.port || a.protocol.localeCompare(b.protocol));
}

const selects = (svc: KubeObject, pod: KubeObject): boolean => {
  const sel = (svc.spec?.selector ?? {}) as Record<string, string>;
  return svc.metadata.namespace === pod.metadata.namespace && Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => !!pod.metadata.labels && labelValue(pod.metadata.labels, k) === v);
};

export interface ProbeSetOptions {
  services?: boolean;
  external?: boolean;
  /** Node objects (their InternalIP sends the node probes); none: no node probes. */
  nodes?: KubeObject[];
  /** Probe each of these families explicitly (dual-stack); absent: one probe, no `family`. */
  families?: (4 | 6)[];
}

const internalIps = (n: KubeObject): string[] =>
  ((n.status?.addresses ?? []) as { type: string; address: string }[]).filter((a) => a.type === 'InternalIP').map((a) => a.address);

export function scenarioProbes(pods: KubeObject[], services: KubeObject[], opts: ProbeSetOptions = {}): Probe[] {
  if (!opts.families) return familyProbes(pods, services, opts, undefined);
  return opts.families.flatMap((f) => familyProbes(pods, services, opts, f));
}

function familyProbes(pods: KubeObject[], services: KubeObject[], opts: ProbeSetOptions, family: 4 | 6 | undefined): Probe[] {
  const running = pods.filter((p) => p.status?.phase === 'Running' && p.status?.podIP && !p.spec?.hostNetwork).sort((a, b) => ref(a).localeCompare(ref(b)));
  const probes: Probe[] = [];
  const fam = family === undefined ? {} : { family };
  for (const from of running) {
    for (const to of running) {
      if (to === from) continue;
      for (const p of declaredPorts(to)) probes.push({ from: ref(from), to: ref(to), ...p, ...fam });
    }
  }
  if (opts.services ?? true) {
    const clusterIPs = (s: KubeObject): string[] => ((s.spec?.clusterIPs ?? [s.spec?.clusterIP]) as unknown[]).filter((ip): ip is string => typeof ip === 'string' && ip !== '' && ip !== 'None');
    // A Service backed by host-network Pods (sluice-controller's, installed by the manifests) has
    // no echo server behind it: a probe could only ever say reject.
    const hostBacked = (s: KubeObject): boolean => pods.some((p) => p.spec?.hostNetwork === true && selects(s, p));
    const svcs = services.filter(
      (s) => clusterIPs(s).some((ip) => family === undefined || ip.includes(':') === (family === 6)) && !(s.metadata.namespace === 'default' && s.metadata.name === 'kubernetes') && !hostBacked(s),
    );
    for (const from of running) {
      for (const svc of svcs) {
        if (running.some((p) => selects(svc, p) && p === from)) continue;
        for (const sp of (svc.spec?.ports ?? []) as { port: number; protocol?: string }[]) {
          const protocol = (sp.protocol ?? 'TCP') as Probe['protocol'];
          if (protocol === 'TCP' || protocol === 'UDP') probes.push({ from: ref(from), to: `service:${ref(svc)}`, port: sp.port, protocol, ...fam });
        }
      }
    }
  }
  if (opts.external ?? true) {
    const ext = `ip:${family === 6 ? EXT_IPV6 : EXT_IP}`;
    for (const pod of running) {
      probes.push({ from: ref(pod), to: ext, port: 80, protocol: 'TCP' }, { from: ref(pod), to: ext, port: 81, protocol: 'UDP' });
      probes.push({ from: ext, to: ref(pod), port: 80, protocol: 'TCP' }, { from: ext, to: ref(pod), port: 81, protocol: 'UDP' });
    }
  }
  for (const node of opts.nodes ?? []) {
    const ip = internalIps(node).find((a) => family === undefined || a.includes(':') === (family === 6));
    if (ip) for (const pod of running) probes.push({ from: `ip:${ip}`, to: ref(pod), port: 80, protocol: 'TCP' });
  }
  return probes;
}
