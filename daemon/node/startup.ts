/**
 * The waits of a node agent's start-up, on an injected clock: Open vSwitch and the API server may
 * come up after the agent (two containers of one DaemonSet Pod, a control plane still starting).
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';

/** Start-up cannot go on: the message names what is missing and what to check. */
export class StartupError extends Error {}

export const sleep = (clock: Clock, ms: number): Promise<void> => new Promise((r) => clock.setTimeout(r, ms));

/**
 * Calls `ping` once a second until it answers or `ms` have passed (then its last error is thrown),
 * or until `cancelled()` says the caller stopped.
 */
export async function waitForOvsdb(
  ping: () => Promise<void>,
  opts: { ms: number; clock: Clock; cancelled?: () => boolean; onRetry?: (err: Error) => void },
): Promise<void> {
  const deadline = opts.clock.now() + opts.ms;
  for (;;) {
    try {
      await ping();
      return;
    } catch (err) {
      if (opts.clock.now() > deadline || opts.cancelled?.()) throw err;
      opts.onRetry?.(err as Error);
      await sleep(opts.clock, 1000);
    }
  }
}

/** What start-up reads from the API server. */
export interface StartupApi {
  readonly server: string;
  nodeInternalIPs(nodeName: string): Promise<{ nodeIP?: string; nodeIPv6?: string }>;
  /** "namespace/name" of the Pods bound to the node. */
  nodePods(nodeName: string): Promise<Set<string>>;
}

export interface NodeAddresses {
  nodeIP?: string;
  nodeIPv6?: string;
}

export interface ApiConnectOptions<Api extends StartupApi> {
  nodeName: string;
  /** Configured addresses: with one of them the API server is optional. */
  nodeIP?: string | undefined;
  nodeIPv6?: string | undefined;
  /** Where the API server was looked for, for the error message. */
  kubeconfig?: string | undefined;
  connect: () => Promise<Api>;
  clock: Clock;
  log: Logger;
  deadlineMs: number;
}

/**
 * nodeIP / nodeIPv6 (configured or the Node's InternalIPs) and, when the API answers, the client and
 * the Pods on this node. Without a configured address the API server is retried with backoff until
 * `deadlineMs`, then a StartupError names the server and its last error.
 */
export async function connectApi<Api extends StartupApi>(o: ApiConnectOptions<Api>): Promise<NodeAddresses & { api?: Api; livePods?: Set<string> }> {
  const deadline = o.clock.now() + o.deadlineMs;
  const configured: NodeAddresses = { ...(o.nodeIP ? { nodeIP: o.nodeIP } : {}), ...(o.nodeIPv6 ? { nodeIPv6: o.nodeIPv6 } : {}) };
  let lastErr: unknown;
  for (let attempt = 0; ; attempt++) {
    try {
      const api = await o.connect();
      const { nodeIP, nodeIPv6 } = o.nodeIP || o.nodeIPv6 ? configured : await api.nodeInternalIPs(o.nodeName);
      if (!nodeIP && !nodeIPv6) throw new StartupError(`Node ${o.nodeName} has no InternalIP; set nodeIP (and/or nodeIPv6) in the config`);
      const livePods = await api.nodePods(o.nodeName);
      o.log.info({ server: api.server, nodeIP, nodeIPv6, pods: livePods.size }, 'startup: API server reachable');
      return { ...(nodeIP ? { nodeIP } : {}), ...(nodeIPv6 ? { nodeIPv6 } : {}), api, livePods };
    } catch (err) {
      lastErr = err;
      if (err instanceof StartupError) throw err;
      if (o.nodeIP || o.nodeIPv6) {
        // Enough to run the datapath; leftovers are then judged by their netns alone.
        o.log.warn({ err: (err as Error).message }, 'startup: API server unavailable; continuing with the configured nodeIP');
        return configured;
      }
      if (o.clock.now() > deadline) break;
      o.log.warn({ err: (err as Error).message, attempt }, 'startup: API server not reachable yet, retrying');
      await sleep(o.clock, Math.min(1000 * 2 ** attempt, 5000));
    }
  }
  throw new StartupError(
    `cannot learn this node's IP: nodeIP is not configured and the Node ${o.nodeName} could not be read from the API server ` +
      `(${o.kubeconfig ? `kubeconfig ${o.kubeconfig}` : 'in-cluster config'}): ${(lastErr as Error)?.message}`,
  );
}
