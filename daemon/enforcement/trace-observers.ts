/**
 * A trace's other Nodes: the agent that traces a packet asks the agents of the Nodes the packet may
 * reach to observe it on their bridges too, over HTTP on the node network (the agents' realization
 * endpoint, `realizationPort` on each Node's addresses, as for new Pods: newpods/peers.ts).
 *
 *   GET /traceflow/observe?src=<address>                  -> 200 {"id": ...} once the observation flows are in place
 *   GET /traceflow/observed?id=<id>[&stop=1]              -> 200 {"legs": [...]} once the observation has ended
 *   409 {"error": ...}: the Node is tracing already; 404: no such observation; 400 names what is wrong.
 *
 * An observation matches only the traced packets (DSCP 63 from the source address) and ends by
 * itself (traceflow.ts OBSERVE_MS), so a tracing agent that goes away leaves nothing behind.
 */
import type { TraceLeg } from '../flows/traceflow.js';
import type { RuleIdentity } from '../flows/policy/index.js';
import { canonicalIp } from '../policy/cidr.js';
import { agentUrl, getAgentJson } from './agent-http.js';
import { OBSERVE_MS, type TraceBridge, traceContext, TraceError, type TraceNode, type TraceObserver, type Tracer } from './traceflow.js';

/** The observer at the agent of `node` (its address and realization port). */
export function remoteObserver(node: TraceNode, port: number): TraceObserver {
  const get = (path: string, timeoutMs: number) => {
    if (node.address === undefined) throw new Error('the Node has no address its agent listens on');
    return getAgentJson(agentUrl(node.address, port, path), timeoutMs);
  };
  return {
    node: node.name,
    start: async (srcIp) => {
      const body = await get(`/traceflow/observe?${new URLSearchParams({ src: srcIp })}`, 5000);
      if (typeof (body as { id?: unknown }).id !== 'string') throw new Error('not an answer: no "id"');
      return (body as { id: string }).id;
    },
    result: async (id) => {
      const body = await get(`/traceflow/observed?${new URLSearchParams({ id })}`, OBSERVE_MS + 5000);
      const legs = (body as { legs?: unknown }).legs;
      if (!Array.isArray(legs) || !legs.every(isLeg)) throw new Error('not an answer: no "legs"');
      return legs;
    },
    stop: async (id) => {
      await get(`/traceflow/observed?${new URLSearchParams({ id, stop: '1' })}`, 5000);
    },
  };
}

function isLeg(l: unknown): l is TraceLeg {
  const o = l as Partial<TraceLeg>;
  return Array.isArray(o?.tables) && (o.verdict === 'allow' || o.verdict === 'drop' || o.verdict === 'reject') && typeof o.outcome === 'string';
}

export type ObserveRoute = (q: URLSearchParams) => Promise<{ code: number; body: unknown }>;

/** The two routes another Node's trace asks this Node's agent (GET /traceflow/observe and /traceflow/observed). */
export function observeRoutes(tracer: Tracer, bridge: () => TraceBridge | undefined, describe: (conjId: number) => RuleIdentity | undefined): Record<string, ObserveRoute> {
  return {
    '/traceflow/observe': async (q) => {
      const src = canonicalIp(q.get('src') ?? '');
      if (src === undefined) return { code: 400, body: { error: `src "${q.get('src') ?? ''}": the traced packet's source address is needed` } };
      const b = bridge();
      if (!b) return { code: 503, body: { error: 'starting: the bridge is not set up yet' } };
      if (tracer.busy) return { code: 409, body: { error: 'another trace is running on this node' } };
      try {
        return { code: 200, body: { id: await tracer.observe(src, b.io, traceContext(b, describe)) } };
      } catch (err) {
        if (err instanceof TraceError) return { code: 409, body: { error: err.message } };
        throw err;
      }
    },
    '/traceflow/observed': async (q) => {
      const legs = tracer.observed(q.get('id') ?? '', q.get('stop') === '1');
      if (!legs) return { code: 404, body: { error: `no observation "${q.get('id') ?? ''}" on this node` } };
      return { code: 200, body: { legs: await legs } };
    },
  };
}
