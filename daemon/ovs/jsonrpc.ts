/**
 * JSON-RPC 1.0 over a Unix stream socket, the way Open vSwitch speaks it: OVSDB (RFC 7047 §4) and
 * ovs-vswitchd's control socket (what ovs-appctl uses) both send JSON objects back to back with no
 * delimiter. A connection answers the server's "echo" requests (OVSDB's keep-alive: a session that
 * ignores them is dropped), matches replies to requests by id, and hands notifications (OVSDB
 * "update") to a listener. It never reconnects by itself: the clients above decide when to.
 */
import { connect, type Socket } from 'node:net';
import { replyDeadline } from '../clock.js';

export class JsonRpcError extends Error {
  override name = 'JsonRpcError';
  constructor(
    readonly method: string,
    readonly error: unknown,
  ) {
    super(`${method}: ${typeof error === 'string' ? error : JSON.stringify(error)}`);
  }
}

/** The socket is gone (refused, closed by the server, timed out): the request may not have run. */
export class JsonRpcClosed extends Error {
  override name = 'JsonRpcClosed';
  constructor(
    message: string,
    /** The socket error's code (ENOENT, ECONNREFUSED, EAGAIN…) when the connection failed with one. */
    readonly code?: string,
  ) {
    super(message);
  }
}

/**
 * Splits a stream of concatenated JSON objects or arrays into parsed values. Chunks may end
 * anywhere, also inside a string or an escape; braces inside strings do not count.
 */
export class JsonSplitter {
  private buf = '';
  private depth = 0;
  private inString = false;
  private escaped = false;
  private start = -1;
  /** Where scanning resumes in buf (everything before it is already accounted for). */
  private pos = 0;

  push(chunk: string): unknown[] {
    this.buf += chunk;
    const out: unknown[] = [];
    for (let i = this.pos; i < this.buf.length; i++) {
      const c = this.buf.charCodeAt(i);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true; // backslash
        else if (c === 0x22) this.inString = false; // "
        continue;
      }
      if (c === 0x22) this.inString = true;
      else if (c === 0x7b || c === 0x5b) {
        if (this.depth++ === 0) this.start = i;
      } else if (c === 0x7d || c === 0x5d) {
        if (this.depth === 0) throw new SyntaxError(`JSON-RPC stream: unbalanced "${String.fromCharCode(c)}"`);
        if (--this.depth === 0) {
          out.push(JSON.parse(this.buf.slice(this.start, i + 1)));
          this.start = -1;
        }
      } else if (this.depth === 0 && c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) {
        throw new SyntaxError(`JSON-RPC stream: expected an object, got "${this.buf.slice(i, i + 20)}"`);
      }
    }
    // Keep only the value still being read.
    if (this.depth === 0) {
      this.buf = '';
      this.pos = 0;
    } else {
      this.buf = this.buf.slice(this.start);
      this.pos = this.buf.length;
      this.start = 0;
    }
    return out;
  }
}

interface Pending {
  method: string;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  /** Cancels the reply deadline. */
  cancel: () => void;
}

export class JsonRpcConnection {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closeError?: Error;
  private notify?: (method: string, params: unknown) => void;
  /** Resolves when the socket is closed, for whatever reason. */
  readonly closed: Promise<void>;

  private constructor(
    private readonly socket: Socket,
    readonly path: string,
  ) {
    const splitter = new JsonSplitter();
    // An idle session must not keep a process alive (a CLI, a test); a request's timer does while it waits.
    socket.unref();
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      let msgs: unknown[];
      try {
        msgs = splitter.push(chunk);
      } catch (err) {
        this.fail(new JsonRpcClosed(`${path}: ${(err as Error).message}`));
        return;
      }
      for (const m of msgs) this.dispatch(m as Record<string, unknown>);
    });
    this.closed = new Promise((resolve) => {
      socket.on('close', () => {
        this.fail(this.closeError ?? new JsonRpcClosed(`${path}: connection closed`));
        resolve();
      });
    });
    socket.on('error', (err) => {
      this.closeError = new JsonRpcClosed(`${path}: ${err.message}`);
    });
  }

  /** Connects to a Unix socket; rejects with JsonRpcClosed naming the path when nothing listens there. */
  static connect(path: string, timeoutMs = 5000): Promise<JsonRpcConnection> {
    return new Promise((resolve, reject) => {
      const socket = connect(path);
      const cancel = replyDeadline(timeoutMs, () => {
        socket.destroy();
        reject(new JsonRpcClosed(`${path}: no connection within ${timeoutMs} ms`));
      });
      socket.once('connect', () => {
        cancel();
        socket.removeAllListeners('error');
        resolve(new JsonRpcConnection(socket, path));
      });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        cancel();
        reject(new JsonRpcClosed(`${path}: ${err.message}`, err.code));
      });
    });
  }

  get isOpen(): boolean {
    return !this.socket.destroyed;
  }

  onNotification(fn: (method: string, params: unknown) => void): void {
    this.notify = fn;
  }

  request(method: string, params: unknown[], timeoutMs = 15_000): Promise<unknown> {
    if (this.socket.destroyed) return Promise.reject(this.closeError ?? new JsonRpcClosed(`${this.path}: connection closed`));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const cancel = replyDeadline(timeoutMs, () => {
        this.pending.delete(id);
        reject(new JsonRpcClosed(`${this.path}: ${method}: no reply within ${timeoutMs} ms`));
      });
      this.pending.set(id, { method, resolve, reject, cancel });
      this.socket.write(JSON.stringify({ method, params, id }));
    });
  }

  close(): void {
    this.socket.destroy();
  }

  private dispatch(m: Record<string, unknown>): void {
    if (typeof m.method === 'string') {
      // A request or notification from the server.
      if (m.method === 'echo' && m.id !== undefined && m.id !== null) {
        this.socket.write(JSON.stringify({ result: m.params ?? [], error: null, id: m.id }));
      } else if (m.id === null || m.id === undefined) {
        this.notify?.(m.method, m.params);
      }
      return;
    }
    const p = typeof m.id === 'number' ? this.pending.get(m.id) : undefined;
    if (!p) return; // a reply to a request that already timed out
    this.pending.delete(m.id as number);
    p.cancel();
    if (m.error !== null && m.error !== undefined) p.reject(new JsonRpcError(p.method, m.error));
    else p.resolve(m.result);
  }

  private fail(err: Error): void {
    for (const [id, p] of this.pending) {
      p.cancel();
      this.pending.delete(id);
      p.reject(err);
    }
    this.socket.destroy();
  }
}
