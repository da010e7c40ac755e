/**
 * Traceflow, the live part: installs the observation flows (../flows/traceflow.ts) for one trace,
 * sends the crafted packet into the bridge at the source Pod's port, collects what the bridge
 * reports until it has been quiet for a moment, removes the flows, and assembles the report. One
 * trace at a time per node. A reject punt of the traced packet is recorded as the verdict and not
 * answered (no RST or ICMP is sent to the Pod for a packet it never sent).
 *
 * A packet that leaves through antrea-gw0 for a Pod of another Node is decided there: before the
 * packet is sent, the agents of the Nodes it may reach (the destination Pod's, a Service's
 * endpoints') are asked to observe it too (trace-observers.ts), and their legs and verdict complete
 * the report. A trace whose end no bridge reported is `incomplete`, never `allow`.
 *
 * Also the names a trace request uses: its destination and the Nodes after this one, resolved from
 * the cluster view (the standalone agent's or the controller's), its rules from the compiler.
 */
import { randomInt } from 'node:crypto';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import { OFPP } from '../ovs/openflow/wire.js';
import type { DecodedPunt } from '../flows/punt.js';
import {
  assembleTrace, type TraceContext, type TraceLeg, type TraceObservation, traceFrame, traceObservationFlows, type TraceProtocol,
  TRACE_TOS, type TraceVerdict,
} from '../flows/traceflow.js';
import { ipv4ToString, ipv6ToString } from '../packet.js';
import { canonicalIp, parseIp } from '../policy/cidr.js';
import type { ClusterState } from '../policy/cluster.js';
import type { PodInfo } from '../policy/types.js';
import type { TraceDestination, TraceNode } from '../controlplane/types.js';
import type { RuleIdentity } from '../flows/policy/index.js';

export type { TraceDestination, TraceNode };

export interface TraceSource {
  pod: string;
  ip: string;
  mac: string;
  ofport: number;
}

export interface TraceRequest {
  source: TraceSource;
  /** What the user asked for ("x/b", "service:x/s-x", "ip:10.0.0.1"), its address and where it leads. */
  to: string;
  destination: TraceDestination;
  protocol: TraceProtocol;
  dstPort: number;
}

export interface TraceIo {
  addFlows(text: string): Promise<void>;
  removeFlows(): Promise<void>;
  packetOut(po: PacketOut): boolean;
}

/** What the agent gives a trace of its bridge: the observation flows and the names of its ports. */
export interface TraceBridge {
  io: Omit<TraceIo, 'packetOut'>;
  /** A name for an OpenFlow port: "antrea-gw0 (port 2)", "Pod x/a (port 3)". */
  port(ofport: number): string;
  gatewayOfport: number;
}

/** The end-to-end verdict: what the last bridge did with the packet, or `incomplete` when no bridge reported where it ended. */
export type TraceOutcome = TraceVerdict | 'incomplete';

export interface TraceReport {
  from: string;
  to: string;
  dstIp: string;
  protocol: TraceProtocol;
  port: number;
  verdict: TraceOutcome;
  /** Every leg in order; with another Node's legs, each leg names its Node. */
  legs: TraceLeg[];
  /** How the trace ended when no bridge decided last: why it is incomplete, or where the packet went beyond sluice's bridges. */
  note?: string;
}

export class TraceError extends Error {
  override name = 'TraceError';
}

/** Another Node's agent, observing the traced packet on its bridge (trace-observers.ts). */
export interface TraceObserver {
  node: string;
  /** Resolves with the observation's id once that Node's observation flows are in place. */
  start(srcIp: string): Promise<string>;
  /** The legs that Node's bridge reported (none: the packet did not arrive) once its observation ends. */
  result(id: string): Promise<TraceLeg[]>;
  /** Ends the observation now (the packet was decided before it left this Node). */
  stop(id: string): Promise<void>;
}

const ofFamily = (family: 4 | 6) => (a: string) => a.includes(':') === (family === 6);

/**
 * The address of `family` a traceflow destination names ("ns/pod", "service:ns/name" (its
 * ClusterIP) or "ip:ADDRESS", which must be of that family) and where it leads from `ownNode`, from
 * a whole cluster view (the standalone agent's, or the controller's for an agent that follows it).
 */
export function traceDestination(cluster: ClusterState, to: string, family: 4 | 6, ownNode: string): TraceDestination {
  const nodeOf = (name: string): TraceNode => ({ name, address: cluster.nodes.get(name)?.ips[0] });
  const onNodes = (pods: PodInfo[], what: string): Omit<TraceDestination, 'ip'> => {
    const nodes = new Set<string>();
    const hosts: string[] = [];
    for (const p of pods) {
      if (p.hostNetwork) hosts.push(p.nodeName ?? '?');
      else if (p.nodeName && p.nodeName !== ownNode) nodes.add(p.nodeName);
    }
    const out = { nodes: [...nodes].sort().map(nodeOf) };
    if (hosts.length > 0 && nodes.size === 0) return { ...out, beyond: `${what} is on the host network of Node ${[...new Set(hosts)].sort().join(', ')}, which sluice does not police` };
    return out;
  };
  const service = (s: { namespace: string; name: string }, ip: string): TraceDestination => {
    const endpoints = cluster.serviceEndpoints(s.namespace, s.name, family);
    return { ip, ...onNodes(endpoints, `every endpoint of Service ${s.namespace}/${s.name}`) };
  };
  const address = addressTarget(to, family);
  if (address !== undefined) {
    const ip = canonicalIp(address) ?? address;
    const pod = cluster.podByIp.get(ip);
    if (pod) return { ip: address, ...onNodes([pod], `Pod ${pod.namespace}/${pod.name}`) };
    const svc = cluster.serviceByIp.get(ip);
    if (svc) return service(svc, address);
    const node = cluster.nodeByIp.get(ip);
    if (node) return { ip: address, nodes: [], beyond: `${address} is an address of Node ${node.name}, whose host network sluice does not police` };
    return { ip: address, nodes: [], beyond: `${address} is no Pod, Service or Node of the cluster: no sluice bridge decides after this one` };
  }
  const svc = /^service:([^/]+)\/(.+)$/.exec(to);
  if (svc) {
    const s = [...cluster.services.values()].find((x) => x.namespace === svc[1] && x.name === svc[2]);
    const cip = s?.clusterIPs.find(ofFamily(family));
    if (!s || !cip) throw new TraceError(`${to}: no such Service with an IPv${family} ClusterIP`);
    return service(s, cip);
  }
  const pod = /^([^/:]+)\/([^/]+)$/.exec(to);
  if (pod) {
    const p = cluster.pods.get(`${pod[1]}/${pod[2]}`);
    const pip = p?.ips.find(ofFamily(family));
    if (!p || !pip) throw new TraceError(`${to}: no such Pod with an IPv${family} address`);
    return { ip: pip, ...onNodes([p], `Pod ${to}`) };
  }
  throw new TraceError(`destination "${to}": use ns/pod, service:ns/name or ip:ADDRESS`);
}

/** The address an "ip:ADDRESS" destination names (undefined: not of that form); throws when it is not one of `family`. */
export function addressTarget(to: string, family: 4 | 6): string | undefined {
  const ip = /^ip:(.+)$/.exec(to);
  if (!ip) return undefined;
  const parsed = parseIp(ip[1]!);
  if (!parsed) throw new TraceError(`${to}: not an IPv4 or IPv6 address`);
  if (parsed.family !== family) throw new TraceError(`${to}: an IPv${parsed.family} destination for an IPv${family} trace`);
  return ip[1]!;
}

/** How a trace names what it saw: the bridge's ports, and rules from the compiler's conjunction ids (Antrea-native rules with their priority). */
export function traceContext(bridge: TraceBridge, describe: (conjId: number) => RuleIdentity | undefined): TraceContext {
  return {
    rule: (conjId) => {
      const r = describe(conjId);
      return r && { ...r.ref, action: r.action, ...(r.ref.kind === 'NetworkPolicy' ? {} : { priority: r.policyPriority }) };
    },
    port: (ofport) => bridge.port(ofport),
    gatewayOfport: bridge.gatewayOfport,
  };
}

/** How long the bridge may stay quiet before a trace is complete, and the longest a trace waits. */
const QUIET_MS = 300;
const MAX_MS = 3000;
/**
 * The longest another Node observes for a trace: from its flows being in place, through this Node's
 * own trace (up to MAX_MS) and the way across the network.
 */
export const OBSERVE_MS = MAX_MS + 2000;

interface Session {
  srcIp: string;
  observations: TraceObservation[];
  rejected: boolean;
  lastAt: number;
  /** Ends the wait early (an observation stopped by the tracing Node). */
  stop?: () => void;
}

/** One observation for another Node's trace, while it runs and after. */
interface Observation {
  id: string;
  done: Promise<TraceLeg[]>;
  stop(): void;
}

export class Tracer {
  private active?: Session | undefined;
  private observation?: Observation | undefined;

  /** A trace punt (one table visit). */
  onTracePunt(pin: PacketIn, punt: DecodedPunt): void {
    const a = this.active;
    if (!a || punt.extra.length < 1) return;
    a.observations.push({ table: punt.extra[0]!, registers: [...pin.registers] });
    a.lastAt = Date.now();
  }

  /** True (and recorded) when a reject punt is for the traced packet: the caller must not answer it. */
  claimsReject(pin: PacketIn): boolean {
    const a = this.active;
    const f = pin.packet;
    if (!a || f.length < 34) return false;
    const type = f.readUInt16BE(12);
    if (type === 0x0800) {
      if (f[15] !== TRACE_TOS || ipv4ToString(f, 26) !== a.srcIp) return false;
    } else if (type === 0x86dd) {
      // Traffic class: the low nibble of byte 0 and the high nibble of byte 1 of the IPv6 header.
      if (f.length < 54 || (((f[14]! & 0x0f) << 4) | (f[15]! >> 4)) !== TRACE_TOS || canonicalIp(ipv6ToString(f.subarray(22, 38))) !== canonicalIp(a.srcIp)) return false;
    } else {
      return false;
    }
    a.rejected = true;
    a.lastAt = Date.now();
    return true;
  }

  get busy(): boolean {
    return this.active !== undefined;
  }

  /** Claims the bridge's observation for packets from `srcIp` and puts its flows in place. */
  private async open(srcIp: string, io: Omit<TraceIo, 'packetOut'>): Promise<Session> {
    if (this.active) throw new TraceError('another trace is running on this node; try again in a few seconds');
    const a: Session = { srcIp, observations: [], rejected: false, lastAt: 0 };
    this.active = a;
    try {
      await io.removeFlows(); // leftovers of a trace interrupted by a crash
      await io.addFlows(traceObservationFlows(srcIp));
    } catch (err) {
      await this.close(a, io);
      throw err;
    }
    return a;
  }

  private async close(a: Session, io: Omit<TraceIo, 'packetOut'>): Promise<void> {
    if (this.active === a) this.active = undefined;
    await io.removeFlows();
  }

  /** Waits until the bridge has been quiet for QUIET_MS after reporting, or `maxMs` have passed, or the session is stopped. */
  private async collect(a: Session, maxMs: number): Promise<void> {
    const since = Date.now();
    let stopped = false;
    a.stop = () => (stopped = true);
    while (!stopped && Date.now() - since < maxMs) {
      await new Promise((r) => setTimeout(r, 50));
      if (a.lastAt && Date.now() - a.lastAt >= QUIET_MS) break;
    }
  }

  /**
   * Traces `req` through this bridge and, when the packet leaves through antrea-gw0 towards one of
   * `observers`' Nodes, through theirs.
   */
  async trace(req: TraceRequest, io: TraceIo, ctx: TraceContext, observers: TraceObserver[] = [], ownNode?: string): Promise<TraceReport> {
    // The other Nodes observe from before the packet is sent; one that cannot is named if it matters.
    const started = await Promise.all(observers.map(async (o) => {
      try {
        return { o, id: await o.start(req.source.ip) };
      } catch (err) {
        return { o, error: (err as Error).message };
      }
    }));
    const stopObserving = () => {
      for (const s of started) if (s.id !== undefined) void s.o.stop(s.id).catch(() => {});
    };
    let a: Session;
    try {
      a = await this.open(req.source.ip, io);
    } catch (err) {
      stopObserving();
      throw err;
    }
    try {
      const frame = traceFrame({
        srcMac: req.source.mac, srcIp: req.source.ip, dstIp: req.destination.ip, protocol: req.protocol, dstPort: req.dstPort,
        srcPort: randomInt(33000, 60999), ipId: randomInt(1, 0xffff),
      });
      if (!io.packetOut({ packet: frame, inPort: req.source.ofport, actions: [{ type: 'output', port: OFPP.TABLE }] })) {
        throw new TraceError('the agent has no OpenFlow connection to the bridge');
      }
      await this.collect(a, MAX_MS);
    } finally {
      await this.close(a, io);
    }
    if (a.observations.length === 0) {
      stopObserving();
      throw new TraceError(`the bridge reported no table visit within ${MAX_MS} ms for the packet injected at port ${req.source.ofport}: is the Pod attached and the OpenFlow connection up?`);
    }
    const legs = assembleTrace(a.observations, a.rejected, ctx);
    const last = legs[legs.length - 1]!;
    const head = { from: req.source.pod, to: req.to, dstIp: req.destination.ip, protocol: req.protocol, port: req.dstPort };
    if (!last.toGateway) {
      stopObserving();
      return { ...head, verdict: last.verdict, legs };
    }
    // Left this Node: the Node that reported the packet decides.
    const why: string[] = [];
    const remote: TraceLeg[] = [];
    for (const s of started) {
      if (s.id === undefined) {
        why.push(`Node ${s.o.node} could not observe: ${s.error}`);
        continue;
      }
      try {
        const got = await s.o.result(s.id);
        if (got.length === 0) why.push(`the packet did not reach Node ${s.o.node}'s bridge within ${OBSERVE_MS} ms`);
        else if (remote.length === 0) remote.push(...got.map((l) => ({ ...l, node: s.o.node })));
      } catch (err) {
        why.push(`Node ${s.o.node}'s observation was lost: ${(err as Error).message}`);
      }
    }
    if (remote.length > 0) {
      const all = [...legs.map((l) => ({ ...l, node: ownNode })), ...remote];
      return { ...head, verdict: remote[remote.length - 1]!.verdict, legs: all };
    }
    const dst = req.destination;
    if (dst.beyond !== undefined && observers.length === 0) return { ...head, verdict: 'allow', legs, note: `left this node through antrea-gw0: ${dst.beyond}` };
    if (dst.unknown !== undefined) why.unshift(dst.unknown);
    else if (observers.length === 0) why.unshift(`no other Node's bridge is known to receive ${dst.ip}`);
    return { ...head, verdict: 'incomplete', legs, note: `left this node through antrea-gw0 and no bridge reported it after: ${why.join('; ')}` };
  }

  /**
   * Observes packets from `srcIp` for another Node's trace: resolves with the observation's id once
   * its flows are in place; the observation ends OBSERVE_MS later, or once the bridge has been quiet
   * after reporting, or when stopped.
   */
  async observe(srcIp: string, io: Omit<TraceIo, 'packetOut'>, ctx: TraceContext): Promise<string> {
    const a = await this.open(srcIp, io);
    const id = `${Date.now().toString(36)}-${randomInt(1, 2 ** 40).toString(36)}`;
    const done = (async () => {
      try {
        await this.collect(a, OBSERVE_MS);
      } finally {
        await this.close(a, io);
      }
      return a.observations.length === 0 ? [] : assembleTrace(a.observations, a.rejected, ctx);
    })();
    done.catch(() => {});
    this.observation = { id, done, stop: () => a.stop?.() };
    return id;
  }

  /** The legs observation `id` saw, once it ends (stopped first when `stop`); undefined for an id this Node does not know. */
  observed(id: string, stop: boolean): Promise<TraceLeg[]> | undefined {
    const o = this.observation;
    if (o?.id !== id) return undefined;
    if (stop) o.stop();
    return o.done;
  }
}
