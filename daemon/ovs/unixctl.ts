/**
 * ovs-vswitchd's control socket (`<rundir>/ovs-vswitchd.<pid>.ctl`), the one ovs-appctl talks to:
 * a command is a JSON-RPC request whose method is the command name and whose params are its
 * arguments; the reply's result is the text ovs-appctl would print. A connection that answered is
 * kept for the next command to the same socket (the netdev datapath's purge follows every flow
 * bundle, a Pod ADD's among them): each accept and each close costs ovs-vswitchd an iteration of
 * its main loop, whose cost grows with the number of ports. A kept connection found closed (an
 * ovs-vswitchd restart closes them; the new one listens on a new socket) is replaced by a new one.
 *
 * ovs-vswitchd runs the commands one at a time in its main loop and accepts connections only
 * between iterations, so many callers at once (a trace per probe, say) gain nothing from parallel
 * connections and overflow the socket's small listen backlog: connect() then fails with EAGAIN.
 * Commands to one socket therefore queue behind a few in flight, and an EAGAIN connect is retried
 * until the caller's deadline.
 */
import { JsonRpcClosed, JsonRpcConnection, JsonRpcError } from './jsonrpc.js';

export class UnixctlError extends Error {
  override name = 'UnixctlError';
}

/** Commands in flight per control socket; the rest wait their turn. */
export const UNIXCTL_IN_FLIGHT = 4;

const queues = new Map<string, { running: number; waiting: (() => void)[] }>();

async function turn(socketPath: string): Promise<() => void> {
  let q = queues.get(socketPath);
  if (!q) queues.set(socketPath, (q = { running: 0, waiting: [] }));
  const queue = q;
  if (queue.running >= UNIXCTL_IN_FLIGHT) await new Promise<void>((resolve) => queue.waiting.push(resolve));
  else queue.running++;
  return () => {
    const next = queue.waiting.shift();
    if (next) next(); // the slot passes straight to the next command
    else if (--queue.running === 0) queues.delete(socketPath);
  };
}

async function connectRetrying(socketPath: string, deadline: number): Promise<JsonRpcConnection> {
  for (let pause = 1; ; pause = Math.min(pause * 2, 50)) {
    try {
      return await JsonRpcConnection.connect(socketPath, Math.max(1, deadline - Date.now()));
    } catch (err) {
      if (!(err instanceof JsonRpcClosed && err.code === 'EAGAIN') || Date.now() + pause >= deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** Open connections that answered their last command, per control socket (at most UNIXCTL_IN_FLIGHT each). */
const idle = new Map<string, JsonRpcConnection[]>();

function takeIdle(socketPath: string): JsonRpcConnection | undefined {
  const kept = idle.get(socketPath) ?? [];
  let conn = kept.pop();
  while (conn && !conn.isOpen) conn = kept.pop();
  if (kept.length === 0) idle.delete(socketPath);
  return conn;
}

function keep(socketPath: string, conn: JsonRpcConnection): void {
  const kept = idle.get(socketPath) ?? [];
  if (!conn.isOpen || kept.length >= UNIXCTL_IN_FLIGHT) {
    conn.close();
    return;
  }
  kept.push(conn);
  idle.set(socketPath, kept);
  // Forgotten once the server closes it, so a dead socket's connections do not linger.
  void conn.closed.then(() => {
    const list = idle.get(socketPath);
    const i = list?.indexOf(conn) ?? -1;
    if (list && i >= 0) list.splice(i, 1);
    if (list?.length === 0) idle.delete(socketPath);
  });
}

/** Closes the kept connections (a caller that is done with ovs-vswitchd, e.g. the agent's shutdown). */
export function closeUnixctlConnections(): void {
  for (const list of idle.values()) for (const c of list) c.close();
  idle.clear();
}

export async function unixctl(socketPath: string, command: string, args: string[] = [], timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  const done = await turn(socketPath);
  let conn: JsonRpcConnection | undefined;
  try {
    const reused = takeIdle(socketPath);
    conn = reused ?? (await connectRetrying(socketPath, deadline));
    let result: unknown;
    try {
      result = await conn.request(command, args, Math.max(1, deadline - Date.now()));
    } catch (err) {
      // A kept connection the server has closed since (a restart): once more on a new one. The
      // commands sent here (purge, trace) may run twice without harm.
      if (!(reused && err instanceof JsonRpcClosed && !conn.isOpen)) throw err;
      conn = await connectRetrying(socketPath, deadline);
      result = await conn.request(command, args, Math.max(1, deadline - Date.now()));
    }
    keep(socketPath, conn);
    conn = undefined;
    return typeof result === 'string' ? result : JSON.stringify(result);
  } catch (err) {
    if (err instanceof JsonRpcError) throw new UnixctlError(String(err.error).trim());
    throw err;
  } finally {
    // Not kept (a failure): a reply may still be on its way, so the connection is not reused.
    conn?.close();
    done();
  }
}
