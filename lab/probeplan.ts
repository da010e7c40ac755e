/**
 * From probe endpoints to packets (pure): the default probe set, and where each probe is sent
 * from (a network namespace) and to (an address) given the lab's Pods and Services.
 */
import type { KubeObject, Probe } from '../daemon/policy/types.js';
import { parseEndpoint } from '../daemon/policy/probes.js';
import type { NetProbe } from './net/probe-runner.js';
import { EXT_IP, EXT_IPV6, EXT_PUBLIC_IP, extNetns, nodeIP, nodeIPv6, nodeNetns, podNetns } from './net/names.js';
import { servedPorts } from './scenario.js';

export class ProbePlanError extends Error {
  override name = 'ProbePlanError';
}

const podRef = (p: KubeObject): string => `${p.metadata.namespace ?? 'default'}/${p.metadata.name}`;
const isRunning = (p: KubeObject): boolean => p.status?.phase === 'Running' && Boolean(p.status?.podIP);

/** Every running Pod to every running Pod on every port/protocol the destination serves. */
export function defaultProbes(pods: KubeObject[]): Probe[] {
  const running = pods.filter(isRunning).sort((a, b) => podRef(a).localeCompare(podRef(b)));
  const portsUsed = new Map<string, { port: number; protocol: 'TCP' | 'UDP' }>();
  for (const p of running) for (const sp of servedPorts(p)) portsUsed.set(`${sp.port}/${sp.protocol}`, { port: sp.port, protocol: sp.protocol });
  const ports = [...portsUsed.values()].sort((a, b) => a.port - b.port || a.protocol.localeCompare(b.protocol));
  const probes: Probe[] = [];
  for (const pp of ports) {
    for (const from of running) {
      for (const to of running) {
        if (servedPorts(to).some((sp) => sp.port === pp.port && sp.protocol === pp.protocol)) {
          probes.push({ from: podRef(from), to: podRef(to), port: pp.port, protocol: pp.protocol });
        }
      }
    }
  }
  return probes;
}

export interface LabView {
  lab: string;
  nodes: string[];
  pods: KubeObject[];
  services: KubeObject[];
}

type Family = 4 | 6;
const familyOf = (ip: string): Family => (ip.includes(':') ? 6 : 4);

/** Every address of a Pod (status.podIPs, or status.podIP alone), the primary first. */
function podAddresses(pod: KubeObject): string[] {
  const listed = ((pod.status?.podIPs ?? []) as { ip?: string }[]).map((p) => p.ip).filter((ip): ip is string => typeof ip === 'string' && ip !== '');
  const primary: string | undefined = pod.status?.podIP;
  return [...new Set([...(primary ? [primary] : []), ...listed])];
}

/** Every ClusterIP of a Service (spec.clusterIPs, or spec.clusterIP alone), the primary first. */
function clusterIPs(svc: KubeObject): string[] {
  const listed = ((svc.spec?.clusterIPs ?? []) as unknown[]).filter((ip): ip is string => typeof ip === 'string' && ip !== '' && ip !== 'None');
  const primary: string | undefined = svc.spec?.clusterIP;
  return [...new Set([...(primary && primary !== 'None' ? [primary] : []), ...listed])];
}

/**
 * Where each probe is sent from and to; throws ProbePlanError listing every unusable probe.
 * A probe's family is its `family`, else the family of an `ip:` endpoint, else that of the
 * destination's primary address (status.podIP, spec.clusterIP): IPv4 on an IPv4 or dual-stack
 * lab unless asked otherwise, IPv6 on an IPv6-only one.
 */
export function planProbes(probes: Probe[], view: LabView): NetProbe[] {
  const pods = new Map(view.pods.map((p) => [podRef(p), p]));
  const services = new Map(view.services.map((s) => [`${s.metadata.namespace ?? 'default'}/${s.metadata.name}`, s]));
  const problems: string[] = [];
  const out: NetProbe[] = [];
  probes.forEach((probe, i) => {
    const where = `probe ${i} (${probe.from} -> ${probe.to} ${probe.port}/${probe.protocol}${probe.family !== undefined ? ` IPv${probe.family}` : ''})`;
    try {
      if (probe.protocol === 'SCTP') throw new ProbePlanError('SCTP cannot be probed in the lab (the kernel has no SCTP module)');
      const family = probeFamily(probe);
      out.push({ sourceNetns: source(probe.from, family), ip: destination(probe.to, family), port: probe.port, protocol: probe.protocol });
    } catch (err) {
      problems.push(`${where}: ${(err as Error).message}`);
    }
  });
  if (problems.length) throw new ProbePlanError(problems.join('\n'));
  return out;

  function probeFamily(probe: Probe): Family {
    const fixed = [probe.from, probe.to].map(parseEndpoint).flatMap((ep) => (ep.kind === 'ip' ? [familyOf(ep.ip)] : []));
    const family = probe.family ?? fixed[0];
    if (family !== undefined) {
      if (fixed.some((f) => f !== family)) throw new ProbePlanError(`an IPv${fixed.find((f) => f !== family)} address cannot take part in an IPv${family} probe`);
      return family;
    }
    const to = parseEndpoint(probe.to);
    const primary = to.kind === 'pod' ? runningPod(`${to.namespace}/${to.name}`).status.podIP : to.kind === 'service' ? services.get(`${to.namespace}/${to.name}`)?.spec?.clusterIP : undefined;
    return typeof primary === 'string' && primary.includes(':') ? 6 : 4;
  }

  function runningPod(ref: string): KubeObject {
    const pod = pods.get(ref);
    if (!pod) throw new ProbePlanError(`no Pod ${ref}`);
    if (!isRunning(pod)) throw new ProbePlanError(`Pod ${ref} is not running (phase ${pod.status?.phase ?? 'unknown'})`);
    return pod;
  }

  function podAddress(ref: string, family: Family): string {
    const ip = podAddresses(runningPod(ref)).find((a) => familyOf(a) === family);
    if (!ip) throw new ProbePlanError(`Pod ${ref} has no IPv${family} address`);
    return ip;
  }

  function source(ref: string, family: Family): string {
    const ep = parseEndpoint(ref);
    if (ep.kind === 'pod') {
      const podName = `${ep.namespace}/${ep.name}`;
      const pod = runningPod(podName);
      podAddress(podName, family); // it must have an address of the probe's family to send from
      return pod.spec?.hostNetwork ? nodeNetns(view.lab, pod.spec.nodeName) : podNetns(view.lab, ep.namespace, ep.name);
    }
    if (ep.kind === 'service') throw new ProbePlanError('a Service cannot send probes');
    if (ep.ip === EXT_IP || ep.ip === EXT_PUBLIC_IP || ep.ip === EXT_IPV6) return extNetns(view.lab);
    const node = view.nodes.find((n) => nodeIP(n) === ep.ip || nodeIPv6(n) === ep.ip);
    if (node) return nodeNetns(view.lab, node);
    const pod = view.pods.find((p) => isRunning(p) && !p.spec?.hostNetwork && podAddresses(p).includes(ep.ip));
    if (pod) return podNetns(view.lab, pod.metadata.namespace ?? 'default', pod.metadata.name);
    throw new ProbePlanError(`nothing in the lab has address ${ep.ip} to send from (Pod IPs, node IPs, ${EXT_IP} and ${EXT_IPV6} can)`);
  }

  function destination(ref: string, family: Family): string {
    const ep = parseEndpoint(ref);
    if (ep.kind === 'pod') return podAddress(`${ep.namespace}/${ep.name}`, family);
    if (ep.kind === 'ip') return ep.ip;
    const svc = services.get(`${ep.namespace}/${ep.name}`);
    if (!svc) throw new ProbePlanError(`no Service ${ep.namespace}/${ep.name}`);
    const ips = clusterIPs(svc);
    if (ips.length === 0) throw new ProbePlanError(`Service ${ep.namespace}/${ep.name} has no ClusterIP`);
    const ip = ips.find((a) => familyOf(a) === family);
    if (!ip) throw new ProbePlanError(`Service ${ep.namespace}/${ep.name} has no IPv${family} ClusterIP`);
    return ip;
  }
}
