/**
 * Flows that keep cut connections cut (enforcement/conntrack decides which). Removing a denied
 * connection's conntrack entry makes its next packet a new connection, judged by the policy in
 * force; but if that packet comes from the side whose policy allows it (a server's ACK, a reply
 * datagram), it opens the connection again in the reverse direction, and the denied side's packets
 * then pass as its replies. So each cut connection's 5-tuple is dropped in both directions before
 * its entry goes, in ConntrackState (before any policy table), until a policy change allows it
 * again. TCP, UDP and SCTP: those with ports (an ICMP echo reply cannot open a connection). Pure.
 */
import { withCookie, FlowCategory, type Flow } from './flow.js';
import { PRIORITY } from './policy/priorities.js';

export interface CutTuple {
  protocol: 'TCP' | 'UDP' | 'SCTP';
  family: 4 | 6;
  src: string;
  dst: string;
  sport: number;
  dport: number;
}

const PROTO = { TCP: ['tcp', 'tcp6'], UDP: ['udp', 'udp6'], SCTP: ['sctp', 'sctp6'] } as const;

export function cutConnectionFlows(tuples: readonly CutTuple[]): Flow[] {
  const flows = new Map<string, Flow>();
  for (const c of tuples) {
    const v6 = c.family === 6;
    const proto = PROTO[c.protocol][v6 ? 1 : 0];
    const [s, d] = v6 ? ['ipv6_src', 'ipv6_dst'] : ['nw_src', 'nw_dst'];
    for (const [from, to, fp, tp] of [[c.src, c.dst, c.sport, c.dport], [c.dst, c.src, c.dport, c.sport]] as const) {
      const f = withCookie({ table: 'ConntrackState', priority: PRIORITY.cutConnection, match: `${proto},${s}=${from},${d}=${to},tp_src=${fp},tp_dst=${tp}`, actions: 'drop', category: FlowCategory.policy });
      flows.set(f.cookie, f);
    }
  }
  return [...flows.values()].sort((a, b) => (a.cookie < b.cookie ? -1 : a.cookie > b.cookie ? 1 : 0));
}
