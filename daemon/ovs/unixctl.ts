/**
 * ovs-vswitchd's control socket (`<rundir>/ovs-vswitchd.<pid>.ctl`), the one ovs-appctl talks to:
 * a command is a JSON-RPC request whose method is the command name and whose params are its
 * arguments; the reply's result is the text ovs-appctl would print. A connection per command: it
 * costs microseconds, and an ovs-vswitchd restart (a new pid, a new socket) needs no bookkeeping.
 */
import { JsonRpcConnection, JsonRpcError } from './jsonrpc.js';

export class UnixctlError extends Error {
  override name = 'UnixctlError';
}

export async function unixctl(socketPath: string, command: string, args: string[] = [], timeoutMs = 15_000): Promise<string> {
  const conn = await JsonRpcConnection.connect(socketPath, timeoutMs);
  try {
    const result = await conn.request(command, args, timeoutMs);
    return typeof result === 'string' ? result : JSON.stringify(result);
  } catch (err) {
    if (err instanceof JsonRpcError) throw new UnixctlError(String(err.error).trim());
    throw err;
  } finally {
    conn.close();
  }
}
