/**
 * From probe endpoints to packets (pure): the default probe set, and where each probe is sent
 * from (a network namespace) and to (an address) given the lab's Pods and Services.
 */
import type { KubeObject, Probe } from '../daemon/policy/types.js';
import { parseEndpoint } from '../daemon/policy/probes.js';
import type { NetProbe } from './net/probe-runner.js';
import { EXT_IP, EXT_PUBLIC_IP, nodeIP, nodeNetns, extNetns, podNetns } from './net/names.js';
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

/** Where each probe is sent from and to; throws ProbePlanError listing every unusable probe. */
export function planProbes(probes: Probe[], view: LabView): NetProbe[] {
  const pods = new Map(view.pods.map((p) => [podRef(p), p]));
  const services = new Map(view.services.map((s) => [`${s.metadata.namespace ?? 'default'}/${s.metadata.name}`, s]));
  const problems: string[] = [];
  const out: NetProbe[] = [];
  probes.forEach((probe, i) => {
    const where = `probe ${i} (${probe.from} -> ${probe.to} ${probe.port}/${probe.protocol})`;
    try {
      if (probe.protocol === 'SCTP') throw new ProbePlanError('SCTP cannot be probed in the lab (the kernel has no SCTP module)');
      // the lab's datapath carries IPv4 only (the engine judges IPv6: sluicectl simulate)
      if (probe.family === 6 || [probe.from, probe.to].some((r) => r.startsWith('ip:') && r.includes(':', 3))) throw new ProbePlanError('IPv6 cannot be probed in the lab (its datapath is IPv4-only; sluicectl simulate judges IPv6)');
      out.push({ sourceNetns: source(probe.from), ip: destination(probe.to), port: probe.port, protocol: probe.protocol });
    } catch (err) {
      problems.push(`${where}: ${(err as Error).message}`);
    }
  });
  if (problems.length) throw new ProbePlanError(problems.join('\n'));
  return out;

  function runningPod(ref: string): KubeObject {
    const pod = pods.get(ref);
    if (!pod) throw new ProbePlanError(`no Pod ${ref}`);
    if (!isRunning(pod)) throw new ProbePlanError(`Pod ${ref} is not running (phase ${pod.status?.phase ?? 'unknown'})`);
    return pod;
  }

  function source(ref: string): string {
    const ep = parseEndpoint(ref);
    if (ep.kind === 'pod') {
      const pod = runningPod(`${ep.namespace}/${ep.name}`);
      return pod.spec?.hostNetwork ? nodeNetns(view.lab, pod.spec.nodeName) : podNetns(view.lab, ep.namespace, ep.name);
    }
    if (ep.kind === 'service') throw new ProbePlanError('a Service cannot send probes');
    if (ep.ip === EXT_IP || ep.ip === EXT_PUBLIC_IP) return extNetns(view.lab);
    const node = view.nodes.find((n) => nodeIP(n) === ep.ip);
    if (node) return nodeNetns(view.lab, node);
    const pod = view.pods.find((p) => isRunning(p) && !p.spec?.hostNetwork && p.status.podIP === ep.ip);
    if (pod) return podNetns(view.lab, pod.metadata.namespace ?? 'default', pod.metadata.name);
    throw new ProbePlanError(`nothing in the lab has address ${ep.ip} to send from (Pod IPs, node IPs and ${EXT_IP} can)`);
  }

  function destination(ref: string): string {
    const ep = parseEndpoint(ref);
    if (ep.kind === 'pod') return runningPod(`${ep.namespace}/${ep.name}`).status.podIP;
    if (ep.kind === 'ip') return ep.ip;
    const svc = services.get(`${ep.namespace}/${ep.name}`);
    if (!svc) throw new ProbePlanError(`no Service ${ep.namespace}/${ep.name}`);
    const ip = svc.spec?.clusterIP;
    if (!ip || ip === 'None') throw new ProbePlanError(`Service ${ep.namespace}/${ep.name} has no ClusterIP`);
    return ip;
  }
}
