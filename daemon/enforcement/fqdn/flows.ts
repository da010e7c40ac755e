/**
 * DNS interception: the flows that send DNS responses bound for local Pods to the agent, so fqdn
 * rules follow what the Pods resolve. Pure.
 *
 * Where: table IngressSecurityClassifier, priority 220 — above its 210 (to the gateway) and 200
 * (host-originated: skip ingress policy) flows, so a response reaches the agent whoever sent it
 * (a DNS Pod, a host-network resolver on the node, or a server behind the gateway), and after
 * L3Forwarding has already rewritten the MACs, decremented the TTL and put the Pod's ofport in reg1:
 * the frame is final, and the agent releases it with `output:<reg1>`.
 * Match: `ct_state=+rpl+trk` (a reply to a query the Pod itself sent: unsolicited packets from
 * port 53 teach nothing), `reg0=0x200/0xf00` (to a local Pod), udp/tcp (udp6/tcp6 for IPv6)
 * `tp_src=53`, and per Pod address `nw_dst=`/`ipv6_dst=` unless every local Pod is intercepted.
 *
 * Hold (default): the response goes only to the agent (`controller(userdata=02.00,meter_id=258)`).
 * The agent learns the addresses, commits the changed policy flows, then packet-outs the response,
 * so the Pod cannot connect before its rule allows the address (the race Antrea avoids the same
 * way). Cost: each intercepted response waits one engine update + one flow bundle (measured in
 * test/lab/fqdn-intercept.test.ts), nothing when no address changed; if the agent is down or the
 * packet-in meter/queue overflows, the response is lost and the client retries (DNS is built for
 * that). Only Pods targeted by fqdn rules are held by default, so other Pods never depend on it.
 * Copy: the agent gets a copy (`controller(userdata=02.01,…)`) and the response goes on at once
 * (no dependency on the agent, but the Pod's first connection may race the rule update).
 *
 * DNS is never blocked here: the flows only punt replies and the agent releases every held packet
 * it receives, parseable or not. Queries are ordinary egress traffic, judged by the user's policies.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { type Flow, FlowCategory, withCookie } from '../../flows/flow.js';
import { PUNT_METER_ID, PuntCategory, puntUserdata } from '../../flows/punt.js';
import { masked, REG0, type TableName } from '../../flows/tables.js';
import type { FqdnPolicy } from '../dns-learning.js';
import { DNS_PORT } from './frame.js';

export const DNS_INTERCEPT_TABLE: TableName = 'IngressSecurityClassifier';
export const DNS_INTERCEPT_PRIORITY = 220;

/** userdata ops byte of a DNS punt: whether the agent must release the packet. */
export const DnsPuntOp = { hold: 0x00, copy: 0x01 } as const;

export type DnsInterceptMode = 'hold' | 'copy';

export interface DnsInterceptInput {
  /** Local Pod addresses (IPv4 or IPv6) whose DNS responses are intercepted, or 'all' local Pods. */
  pods: readonly string[] | 'all';
  mode?: DnsInterceptMode;
}

export function dnsPuntActions(mode: DnsInterceptMode): string {
  const ud = puntUserdata({ category: PuntCategory.dns, ops: mode === 'hold' ? DnsPuntOp.hold : DnsPuntOp.copy });
  const hex = [...ud].map((x) => x.toString(16).padStart(2, '0')).join('.');
  const punt = `controller(userdata=${hex},meter_id=${PUNT_METER_ID[PuntCategory.dns]})`;
  // Copy: the pipeline goes on where the miss of this table would have sent it.
  return mode === 'hold' ? punt : `${punt},goto_table:AntreaPolicyIngressRule`;
}

/** The interception flows (category policy, so policy syncs own them). Empty list = none to install. */
export function dnsInterceptFlows(input: DnsInterceptInput): Flow[] {
  const mode = input.mode ?? 'hold';
  const actions = dnsPuntActions(mode);
  const flows: Flow[] = [];
  const intercept = (proto: string, dst: string) =>
    flows.push(withCookie({
      table: DNS_INTERCEPT_TABLE,
      priority: DNS_INTERCEPT_PRIORITY,
      match: `ct_state=+rpl+trk,${proto},reg0=${masked(REG0.dstPod, REG0.dstMask)}${dst},tp_src=${DNS_PORT}`,
      actions,
      category: FlowCategory.policy,
    }));
  if (input.pods === 'all') {
    for (const proto of ['udp', 'tcp', 'udp6', 'tcp6']) intercept(proto, '');
    return flows;
  }
  for (const ip of [...new Set(input.pods)].sort()) {
    const v6 = isIPv6(ip);
    if (!v6 && !isIPv4(ip)) throw new Error(`dnsInterceptFlows: Pod address "${ip}" is not an IP address`);
    for (const proto of ['udp', 'tcp']) intercept(v6 ? `${proto}6` : proto, v6 ? `,ipv6_dst=${ip}` : `,nw_dst=${ip}`);
  }
  return flows;
}

/** Convenience: the interception flows for a policy side's fqdn targets, for the agent's desired flow set. */
export function dnsInterceptFlowsFor(policy: Pick<FqdnPolicy, 'fqdnTargetPodIps'>, mode: DnsInterceptMode = 'hold'): Flow[] {
  return dnsInterceptFlows({ pods: policy.fqdnTargetPodIps(), mode });
}
