/**
 * SCTP (which this kernel cannot carry) probed by `ovs-appctl ofproto/trace` of a synthetic first
 * packet instead of real packets: from the source Pod's port on its node's bridge, and — when that
 * bridge hands the packet to the gateway — again from the gateway port of the destination Pod's
 * node. The verdict is read from the final datapath actions of each hop.
 */
import { pino } from 'pino';
import { OvsBridge } from '../../daemon/ovs/bridge.js';
import { VIRTUAL_MAC } from '../../daemon/flows/tables.js';
import type { KubeObject, Probe, Verdict } from '../../daemon/policy/types.js';
import { parseEndpoint } from '../../daemon/policy/probes.js';
import { EXT_IP, EXT_IPV6, EXT_PUBLIC_IP, nodeIP, nodeIPv6, ovsDir } from '../net/names.js';

export const GATEWAY = 'antrea-gw0';
const BRIDGE = 'br-int';
/** Any MAC the host side of the gateway might use as the source of a routed packet. */
const HOST_MAC = '12:34:56:78:9a:bc';
const POLICY_PUNT = 0x01;
const REJECT_OP = 0x02;

export type HopVerdict = { verdict: 'forward'; dpPort: string } | { verdict: 'drop' | 'reject' };

/**
 * The verdict of one ofproto/trace (pure). `forward` names the datapath port of the final output;
 * otherwise the packet ends on this bridge: `reject` when a policy punt asked for a reject, else `drop`.
 */
export function parseTrace(trace: string): HopVerdict {
  const actions = [...trace.matchAll(/Datapath actions: (.*)/g)].pop()?.[1]?.trim();
  if (actions === undefined) throw new Error(`ofproto/trace printed no datapath actions:\n${trace.slice(-800)}`);
  const last = actions.split(',').pop()!.trim();
  if (/^\d+$/.test(last)) return { verdict: 'forward', dpPort: last };
  const rejects = [...trace.matchAll(/userdata=([0-9a-f]{2})\.([0-9a-f]{2})/g)].some(
    (m) => parseInt(m[1]!, 16) === POLICY_PUNT && (parseInt(m[2]!, 16) & REJECT_OP) !== 0,
  );
  return { verdict: rejects ? 'reject' : 'drop' };
}

/** The ofproto/trace microflow of an SCTP first packet, IPv4 or IPv6 by the addresses (pure). */
export function sctpFlow(p: { inPort: number; dlSrc: string; nwSrc: string; nwDst: string; dport: number }): string {
  const l3 = p.nwSrc.includes(':') ? `sctp6,in_port=${p.inPort},dl_src=${p.dlSrc},dl_dst=${VIRTUAL_MAC},ipv6_src=${p.nwSrc},ipv6_dst=${p.nwDst}` : `sctp,in_port=${p.inPort},dl_src=${p.dlSrc},dl_dst=${VIRTUAL_MAC},nw_src=${p.nwSrc},nw_dst=${p.nwDst}`;
  return `${l3},nw_ttl=64,sctp_src=40000,sctp_dst=${p.dport}`;
}

const familyOf = (ip: string): 4 | 6 => (ip.includes(':') ? 6 : 4);

/** Every address of a Pod, status.podIP first. */
function podAddresses(pod: KubeObject): string[] {
  const listed = ((pod.status?.podIPs ?? []) as { ip?: string }[]).flatMap((p) => (typeof p.ip === 'string' && p.ip ? [p.ip] : []));
  return [...new Set([...(pod.status?.podIP ? [pod.status.podIP as string] : []), ...listed])];
}

/**
 * The family a probe is traced in, as the lab's prober picks it (lab/probeplan.ts): the probe's
 * own, else that of an `ip:` endpoint, else that of the destination Pod's primary address.
 */
function traceFamily(probe: Probe, dstPod: KubeObject | undefined): 4 | 6 {
  if (probe.family !== undefined) return probe.family;
  for (const ep of [parseEndpoint(probe.from), parseEndpoint(probe.to)]) if (ep.kind === 'ip') return familyOf(ep.ip);
  return familyOf(dstPod?.status?.podIP ?? '');
}

/** `dpif/show` lines "name ofport/dpport" → name → datapath port (pure). */
export function datapathPorts(show: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of show.matchAll(/^\s+(\S+) \d+\/(\d+)/gm)) out.set(m[1]!, m[2]!);
  return out;
}

interface NodeBridge {
  ovs: OvsBridge;
  gateway: { ofport: number; mac: string; dpPort: string };
  /** "ns/name" → its port on the bridge. */
  pods: Map<string, { ofport: number; mac: string; ips: string[]; dpPort: string }>;
}

async function nodeBridge(lab: string, node: string): Promise<NodeBridge> {
  const ovs = new OvsBridge({ ovsRunDir: ovsDir(lab, node), bridge: BRIDGE, datapath: 'netdev', log: pino({ level: 'silent' }) });
  const [gw, ports, show] = await Promise.all([ovs.findGateway(GATEWAY), ovs.listPodPorts(), ovs.appctl(['dpif/show'])]);
  if (!gw) throw new Error(`SCTP trace: ${node} has no ${GATEWAY} on ${BRIDGE} (is the lab up with --sluice?)`);
  const dp = datapathPorts(show);
  const pods = new Map<string, { ofport: number; mac: string; ips: string[]; dpPort: string }>();
  for (const p of ports) {
    if (p.ofport < 1) continue;
    pods.set(`${p.ids['pod-namespace']}/${p.ids['pod-name']}`, { ofport: p.ofport, mac: p.ids['attached-mac'], ips: p.ids['ip-address'].split(','), dpPort: dp.get(p.name) ?? '?' });
  }
  return { ovs, gateway: { ofport: gw.ofport, mac: gw.mac, dpPort: dp.get(GATEWAY) ?? '?' }, pods };
}

export interface TraceContext {
  lab: string;
  nodes: string[];
  pods: KubeObject[];
}

/**
 * Verdicts of SCTP probes by ofproto/trace. Pod and ip: endpoints only (a Service's SCTP DNAT
 * would need the kernel's SCTP conntrack, which is exactly what is missing here).
 */
export async function traceProbes(probes: Probe[], ctx: TraceContext): Promise<{ verdict: Verdict; detail: string }[]> {
  // One connection per node, shared by every probe (they run concurrently: one each would exhaust
  // ovsdb-server's listen backlog).
  const bridges = new Map<string, Promise<NodeBridge>>();
  const bridge = (node: string): Promise<NodeBridge> => {
    if (!bridges.has(node)) bridges.set(node, nodeBridge(ctx.lab, node));
    return bridges.get(node)!;
  };
  const pods = new Map(ctx.pods.map((p) => [`${p.metadata.namespace ?? 'default'}/${p.metadata.name}`, p]));
  const podAt = (ref: string) => {
    const pod = pods.get(ref);
    if (!pod?.status?.podIP || !pod.spec?.nodeName) throw new Error(`SCTP trace: Pod ${ref} is not running`);
    return pod;
  };
  try {
    return await Promise.all(probes.map((probe) => traceOne(probe)));
  } finally {
    for (const b of bridges.values()) await b.then((x) => x.ovs.close()).catch(() => undefined);
  }

  async function traceOne(probe: Probe): Promise<{ verdict: Verdict; detail: string }> {
    const src = parseEndpoint(probe.from);
    const dst = parseEndpoint(probe.to);
    if (dst.kind === 'service') throw new Error(`SCTP trace: ${probe.to}: Service targets are not traced (no SCTP conntrack for the DNAT)`);
    let srcIp: string;
    let first: { node: string; flow: string; dstNode?: string } | undefined;
    const dstPod = dst.kind === 'pod' ? podAt(`${dst.namespace}/${dst.name}`) : ctx.pods.find((p) => podAddresses(p).includes(dst.ip) && !p.spec?.hostNetwork);
    const family = traceFamily(probe, dstPod);
    const addressOf = (pod: KubeObject, ref: string): string => {
      const ip = podAddresses(pod).find((a) => familyOf(a) === family);
      if (!ip) throw new Error(`SCTP trace: Pod ${ref} has no IPv${family} address`);
      return ip;
    };
    const dstIp: string = dst.kind === 'ip' ? dst.ip : addressOf(dstPod!, probe.to);
    if (src.kind === 'pod' && !podAt(`${src.namespace}/${src.name}`).spec?.hostNetwork) {
      const pod = podAt(`${src.namespace}/${src.name}`);
      const b = await bridge(pod.spec.nodeName);
      const port = b.pods.get(`${src.namespace}/${src.name}`);
      if (!port) throw new Error(`SCTP trace: ${probe.from} has no port on ${pod.spec.nodeName}'s ${BRIDGE}`);
      srcIp = port.ips.find((a) => familyOf(a) === family) ?? addressOf(pod, probe.from);
      first = { node: pod.spec.nodeName, flow: sctpFlow({ inPort: port.ofport, dlSrc: port.mac, nwSrc: srcIp, nwDst: dstIp, dport: probe.port }) };
    } else if (src.kind === 'ip' && [EXT_IP, EXT_IPV6, EXT_PUBLIC_IP].includes(src.ip)) {
      srcIp = src.ip;
    } else if (src.kind === 'ip' && ctx.nodes.some((n) => nodeIP(n) === src.ip || nodeIPv6(n) === src.ip)) {
      srcIp = src.ip;
    } else {
      throw new Error(`SCTP trace: ${probe.from}: only Pods, node IPs and the external host are traced as sources`);
    }
    let details = '';
    if (first) {
      const b = await bridge(first.node);
      const hop = parseTrace(await b.ovs.appctl(['ofproto/trace', BRIDGE, first.flow, '--ct-next', 'trk,new']));
      details = `trace ${first.node}`;
      if (hop.verdict !== 'forward') return { verdict: hop.verdict, detail: `${details}: ${hop.verdict}` };
      const local = [...b.pods.values()].find((p) => p.ips.includes(dstIp));
      if (local) {
        return local.dpPort === hop.dpPort
          ? { verdict: 'allow' as Verdict, detail: `${details}: output to the destination Pod` }
          : { verdict: 'drop' as Verdict, detail: `${details}: output to datapath port ${hop.dpPort}, not the destination Pod (${local.dpPort})` };
      }
      if (hop.dpPort !== b.gateway.dpPort) return { verdict: 'drop' as Verdict, detail: `${details}: output to datapath port ${hop.dpPort}, not ${GATEWAY}` };
      if (!dstPod) return { verdict: 'allow' as Verdict, detail: `${details}: leaves through ${GATEWAY} (destination outside the bridges)` };
    }
    if (!dstPod) throw new Error(`SCTP trace: ${probe.to}: nothing on a bridge has ${dstIp}`);
    // Routed by the source host to the destination node, where it enters br-int from the gateway.
    const node = dstPod.spec.nodeName as string;
    const b = await bridge(node);
    const port = b.pods.get(`${dstPod.metadata.namespace ?? 'default'}/${dstPod.metadata.name}`);
    if (!port) throw new Error(`SCTP trace: ${probe.to} has no port on ${node}'s ${BRIDGE}`);
    const hop = parseTrace(await b.ovs.appctl(['ofproto/trace', BRIDGE, sctpFlow({ inPort: b.gateway.ofport, dlSrc: HOST_MAC, nwSrc: srcIp, nwDst: dstIp, dport: probe.port }), '--ct-next', 'trk,new']));
    details = `${details ? `${details} -> ` : ''}trace ${node} from ${GATEWAY}`;
    if (hop.verdict !== 'forward') return { verdict: hop.verdict, detail: `${details}: ${hop.verdict}` };
    return hop.dpPort === port.dpPort
      ? { verdict: 'allow' as Verdict, detail: `${details}: output to the destination Pod` }
      : { verdict: 'drop' as Verdict, detail: `${details}: output to datapath port ${hop.dpPort}, not the destination Pod (${port.dpPort})` };
  }
}
