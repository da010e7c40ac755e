/**
 * Traceflow, the live part: installs the observation flows (../flows/traceflow.ts) for one trace,
 * sends the crafted packet into the bridge at the source Pod's port, collects what the bridge
 * reports until it has been quiet for a moment, removes the flows, and assembles the report. One
 * trace at a time per node. A reject punt of the traced packet is recorded as the verdict and not
 * answered (no RST or ICMP is sent to the Pod for a packet it never sent). Also the names a trace
 * request uses: its destination resolved from the cluster view, its rules from the compiler.
 */
import { randomInt } from 'node:crypto';
import type { PacketIn, PacketOut } from '../ovs/openflow/wire.js';
import { OFPP } from '../ovs/openflow/wire.js';
import type { DecodedPunt } from '../flows/punt.js';
import {
  assembleTrace, type TraceContext, type TraceLeg, type TraceObservation, traceFrame, traceObservationFlows, type TraceProtocol, traceVerdict,
  TRACE_TOS, type TraceVerdict,
} from '../flows/traceflow.js';
import { ipv4ToString, ipv6ToString } from '../packet.js';
import { canonicalIp, parseIp } from '../policy/cidr.js';
import type { ClusterState } from '../policy/cluster.js';
import type { RuleIdentity } from '../flows/policy/index.js';

export interface TraceSource {
  pod: string;
  ip: string;
  mac: string;
  ofport: number;
}

export interface TraceRequest {
  source: TraceSource;
  /** What the user asked for ("x/b", "service:x/s-x", "ip:10.0.0.1") and the address it resolved to. */
  to: string;
  dstIp: string;
  protocol: TraceProtocol;
  dstPort: number;
}

export interface TraceIo {
  addFlows(text: string): Promise<void>;
  removeFlows(): Promise<void>;
  packetOut(po: PacketOut): boolean;
}

export interface TraceReport {
  from: string;
  to: string;
  dstIp: string;
  protocol: TraceProtocol;
  port: number;
  /** The simulator's words; undefined when the bridge reported nothing. */
  verdict: TraceVerdict;
  legs: TraceLeg[];
  /** A packet that left through antrea-gw0 to another node: that node's ingress policy is not traced here. */
  note?: string;
}

export class TraceError extends Error {
  override name = 'TraceError';
}

/**
 * The address of `family` a traceflow destination names: "ns/pod", "service:ns/name" (its
 * ClusterIP) or "ip:ADDRESS" (which must be of that family).
 */
export function traceTarget(cluster: ClusterState, to: string, family: 4 | 6 = 4): string {
  const ofFamily = (a: string) => a.includes(':') === (family === 6);
  const ip = addressTarget(to, family);
  if (ip !== undefined) return ip;
  const svc = /^service:([^/]+)\/(.+)$/.exec(to);
  if (svc) {
    const s = [...cluster.services.values()].find((x) => x.namespace === svc[1] && x.name === svc[2]);
    const cip = s?.clusterIPs.find(ofFamily);
    if (!cip) throw new TraceError(`${to}: no such Service with an IPv${family} ClusterIP`);
    return cip;
  }
  const pod = /^([^/:]+)\/([^/]+)$/.exec(to);
  if (pod) {
    const p = [...cluster.pods.values()].find((x) => x.namespace === pod[1] && x.name === pod[2]);
    const pip = p?.ips.find(ofFamily);
    if (!pip) throw new TraceError(`${to}: no such Pod with an IPv${family} address`);
    return pip;
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

/** A trace's rule names from the compiler's conjunction ids (Antrea-native rules with their priority). */
export function traceRules(describe: (conjId: number) => RuleIdentity | undefined): TraceContext['rule'] {
  return (conjId) => {
    const r = describe(conjId);
    return r && { ...r.ref, action: r.action, ...(r.ref.kind === 'NetworkPolicy' ? {} : { priority: r.policyPriority }) };
  };
}

/** How long the bridge may stay quiet before a trace is complete, and the longest a trace waits. */
const QUIET_MS = 300;
const MAX_MS = 3000;

export class Tracer {
  private active?: { srcIp: string; observations: TraceObservation[]; rejected: boolean; lastAt: number } | undefined;

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

  async trace(req: TraceRequest, io: TraceIo, ctx: TraceContext): Promise<TraceReport> {
    if (this.active) throw new TraceError('another trace is running on this node; try again in a few seconds');
    const a = { srcIp: req.source.ip, observations: [] as TraceObservation[], rejected: false, lastAt: 0 };
    this.active = a;
    try {
      await io.removeFlows(); // leftovers of a trace interrupted by a crash
      await io.addFlows(traceObservationFlows(req.source.ip));
      const frame = traceFrame({
        srcMac: req.source.mac, srcIp: req.source.ip, dstIp: req.dstIp, protocol: req.protocol, dstPort: req.dstPort,
        srcPort: randomInt(33000, 60999), ipId: randomInt(1, 0xffff),
      });
      const sent = Date.now();
      if (!io.packetOut({ packet: frame, inPort: req.source.ofport, actions: [{ type: 'output', port: OFPP.TABLE }] })) {
        throw new TraceError('the agent has no OpenFlow connection to the bridge');
      }
      while (Date.now() - sent < MAX_MS) {
        await new Promise((r) => setTimeout(r, 50));
        if (a.lastAt && Date.now() - a.lastAt >= QUIET_MS) break;
      }
    } finally {
      this.active = undefined;
      await io.removeFlows();
    }
    if (a.observations.length === 0) {
      throw new TraceError(`the bridge reported no table visit within ${MAX_MS} ms for the packet injected at port ${req.source.ofport}: is the Pod attached and the OpenFlow connection up?`);
    }
    const legs = assembleTrace(a.observations, a.rejected, ctx);
    const last = legs[legs.length - 1]!;
    const leftNode = last.verdict === 'allow' && /antrea-gw0/.test(last.outcome);
    return {
      from: req.source.pod, to: req.to, dstIp: req.dstIp, protocol: req.protocol, port: req.dstPort,
      verdict: traceVerdict(legs)!,
      legs,
      ...(leftNode ? { note: "left this node through antrea-gw0: the destination node's ingress policy decides there and is not traced here" } : {}),
    };
  }
}
