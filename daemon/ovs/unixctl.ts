/**
 * ovs-vswitchd's control socket (`<rundir>/ovs-vswitchd.<pid>.ctl`), the one ovs-appctl talks to:
 * a command is a JSON-RPC request whose method is the command name and whose params are its
 * arguments; the reply's result is the text ovs-appctl would print. A connection per command: it
 * costs microseconds, and an ovs-vswitchd restart (a new pid, a new socket) needs no bookkeeping.
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

export async function unixctl(socketPath: string, command: string, args: string[] = [], timeoutMs = 15_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  const done = await turn(socketPath);
  try {
    const conn = await connectRetrying(socketPath, deadline);
    try {
      const result = await conn.request(command, args, Math.max(1, deadline - Date.now()));
      return typeof result === 'string' ? result : JSON.stringify(result);
    } catch (err) {
      if (err instanceof JsonRpcError) throw new UnixctlError(String(err.error).trim());
      throw err;
    } finally {
      conn.close();
    }
  } finally {
    done();
  }
}
