/**
 * The agent's end of the sluice-cni socket: accepts one JSON request line per connection
 * (cni/protocol.ts), validates it, runs the handler — one operation at a time per container,
 * different containers concurrently, GC exclusively — and answers one JSON line.
 *
 * A handler runs to completion even if the plugin went away meanwhile (its runtime timed out):
 * half an ADD or DEL is worse than a late one, and the runtime's retry finds the work done.
 */
import { constants as fsConstants } from 'node:fs';
import { chmod, lstat, mkdir, unlink } from 'node:fs/promises';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { dirname } from 'node:path';
import type { Logger } from 'pino';
import { failureOutcome, prepare, settle, type Outcome } from '../../cni/invocation.js';
import { CniErrorCode, encodeInvocationAnswer, LATEST_VERSION, type CniCommand, type CniResponse } from '../../cni/protocol.js';
import { CniError } from './errors.js';
import { parseRequest, type GcAttachment, type PodRequest } from './request.js';
import { convertResult, type CniResult } from './result.js';
import { OperationSerializer } from './serializer.js';

export { CniError } from './errors.js';
export type { PodRequest, GcAttachment } from './request.js';
export type { CniResult, CniInterface, CniIpConfig, CniRoute, CniDns } from './result.js';

export interface CniHandler {
  /** Attach; throw CniError on failure (after rolling back). */
  add(req: PodRequest): Promise<void>;
  /** Detach; an unknown container is a success. */
  del(req: PodRequest): Promise<void>;
  /** Throw CniError(CheckFailed, "<what is missing>") when the attachment is incomplete. */
  check(req: PodRequest): Promise<void>;
  /** Throw CniError(50, why) when not ready to serve ADD. */
  status(): Promise<void>;
  gc(valid: GcAttachment[], req: { networkName: string }): Promise<void>;
}

export interface CniServer {
  /** Stops accepting, waits for running operations, removes the socket file. */
  close(): Promise<void>;
}

/** Largest request line accepted; a prevResult is a few KiB. */
const MAX_REQUEST_BYTES = 4 << 20;
/** A client that connects and sends no complete request within this time is dropped. */
const REQUEST_READ_TIMEOUT_MS = 30_000;

/** Code for an unexpected (non-CniError) exception from the handler, per command. */
const UNEXPECTED_FAILURE_CODE: Record<Exclude<CniCommand, 'VERSION'>, number> = {
  ADD: CniErrorCode.AttachFailed,
  DEL: CniErrorCode.DetachFailed,
  CHECK: CniErrorCode.CheckFailed,
  GC: CniErrorCode.GcFailed,
  STATUS: CniErrorCode.PluginNotAvailable,
};

/** How each answered request went: its command (undefined if unparseable), result and duration. */
export type CniRequestObserver = (command: string | undefined, result: 'ok' | number, seconds: number) => void;

export async function startCniServer(socketPath: string, handler: CniHandler, log: Logger, observe?: CniRequestObserver): Promise<CniServer> {
  await prepareSocketPath(socketPath, log);

  const serializer = new OperationSerializer();
  const inFlight = new Set<Promise<void>>();
  const connections = new Set<Socket>();

  const server: Server = createServer({ allowHalfOpen: true }, (sock) => {
    connections.add(sock);
    sock.on('close', () => connections.delete(sock));
    const work = serveConnection(sock, handler, serializer, log, observe).catch((err: unknown) => {
      log.error({ err }, 'cni: unexpected failure serving a connection');
    });
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', (err) => log.error({ err }, 'cni: socket server error'));
  // Only root (the runtime) may talk to the agent: the socket drives host networking.
  await chmod(socketPath, 0o600);
  log.info({ socketPath }, 'cni: listening');

  let closing: Promise<void> | undefined;
  return {
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        // Idle connections (no request yet) would keep close() waiting; running ones finish first.
        for (const sock of connections) if (sock.bytesRead === 0) sock.destroy();
        await Promise.all([...inFlight]);
        await stopped;
        await unlink(socketPath).catch(() => undefined);
        log.info({ socketPath }, 'cni: closed');
      })();
      return closing;
    },
  };
}

/**
 * Creates the socket's directory (0700) and removes a stale socket left by a crashed agent. A live
 * socket (another agent answers) or a path that is not a socket is refused, never deleted.
 */
async function prepareSocketPath(socketPath: string, log: Logger): Promise<void> {
  await mkdir(dirname(socketPath), { recursive: true, mode: 0o700 });
  let info: Awaited<ReturnType<typeof lstat>>;
  try {
    info = await lstat(socketPath);
  } catch {
    return;
  }
  if ((info.mode & fsConstants.S_IFMT) !== fsConstants.S_IFSOCK) {
    throw new Error(`cannot listen on ${socketPath}: it exists and is not a socket; remove it or choose another socket path`);
  }
  if (await socketAnswers(socketPath)) {
    throw new Error(`cannot listen on ${socketPath}: another process (a second sluice-agent?) is already listening on it`);
  }
  await unlink(socketPath);
  log.info({ socketPath }, 'cni: removed stale socket');
}

/**
 * Whether something accepts a connection on a unix socket path or a TCP host:port (another agent
 * is live). `timeoutMs` bounds the wait for a peer that neither accepts nor refuses.
 */
export function socketAnswers(target: string | { host: string; port: number }, timeoutMs?: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = typeof target === 'string' ? createConnection(target) : createConnection(target.port, target.host);
    const done = (ok: boolean) => {
      probe.destroy();
      resolve(ok);
    };
    if (timeoutMs !== undefined) probe.setTimeout(timeoutMs, () => done(false));
    probe.once('connect', () => done(true));
    probe.once('error', () => done(false));
  });
}

/** Reads the request line, runs it, writes the response line. Never rejects for client faults. */
async function serveConnection(sock: Socket, handler: CniHandler, serializer: OperationSerializer, log: Logger, observe?: CniRequestObserver): Promise<void> {
  // A client that vanishes (its runtime timed out) makes the answer fail with EPIPE/ECONNRESET:
  // worth a warning, never a crash. Before a request arrives it is just noise.
  let request: { command?: string | undefined; containerId?: string | undefined } | undefined;
  const vanished = () => log.warn({ ...request }, 'cni: client went away before the answer; the operation completed anyway');
  sock.on('error', (err) => (request ? vanished() : log.debug({ err }, 'cni: client connection error')));
  const line = await readLine(sock);
  if (line === undefined) {
    sock.destroy();
    return;
  }
  const started = Date.now();
  const t0 = performance.now();
  const { response, command, containerId, answer } = await respond(line, handler, serializer, log);
  request = { command, containerId };
  const fields = { command, containerId, ms: Date.now() - started, ...(response.ok ? {} : { code: response.code, msg: response.msg }) };
  observe?.(command, response.ok ? 'ok' : response.code, (performance.now() - t0) / 1000);
  if (response.ok) log.info(fields, 'cni: request done');
  else log.warn(fields, 'cni: request failed');
  if (sock.destroyed || !sock.writable) {
    vanished();
    return;
  }
  sock.end(answer ?? JSON.stringify(response) + '\n');
}

/** Resolves with the first line (without "\n"), or undefined if the client left or misbehaved. */
function readLine(sock: Socket): Promise<string | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const finish = (value: string | undefined) => {
      if (done) return;
      done = true;
      sock.setTimeout(0);
      sock.off('data', onData);
      resolve(value);
    };
    const onData = (chunk: Buffer) => {
      const nl = chunk.indexOf(0x0a);
      const line = nl >= 0 ? chunk.subarray(0, nl) : chunk;
      chunks.push(line);
      size += line.length;
      // Checked before the end of the line too: the last chunk can carry most of an oversized request.
      if (size > MAX_REQUEST_BYTES) {
        sock.end(JSON.stringify({ ok: false, code: CniErrorCode.IoFailure, msg: `request larger than ${MAX_REQUEST_BYTES} bytes` } satisfies CniResponse) + '\n');
        finish(undefined);
        return;
      }
      if (nl >= 0) finish(Buffer.concat(chunks).toString('utf8'));
    };
    sock.on('data', onData);
    // A request without the final newline, then end-of-stream, is still one request.
    sock.on('end', () => finish(size > 0 ? Buffer.concat(chunks).toString('utf8') : undefined));
    sock.on('close', () => finish(undefined));
    sock.setTimeout(REQUEST_READ_TIMEOUT_MS, () => finish(undefined));
  });
}

interface Responded {
  response: CniResponse;
  command?: string | undefined;
  containerId?: string | undefined;
  /** The bytes to send instead of the response line (the framed answer to an invocation). */
  answer?: Buffer | undefined;
}

async function respond(line: string, handler: CniHandler, serializer: OperationSerializer, log: Logger): Promise<Responded> {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (err) {
    return { response: errorResponse(new CniError(CniErrorCode.DecodeFailure, `request is not valid JSON: ${(err as Error).message}`)) };
  }
  if (raw !== null && typeof raw === 'object' && 'invocation' in raw) return runInvocation((raw as { invocation: unknown }).invocation, handler, serializer, log);
  return dispatch(raw, handler, serializer, log);
}

/**
 * The native front end's request: the plugin's own checks and outputs (cni/invocation.ts) run
 * here on the raw invocation, so the front end prints exactly what the standalone plugin would.
 */
async function runInvocation(invocation: unknown, handler: CniHandler, serializer: OperationSerializer, log: Logger): Promise<Responded> {
  const env = invocationEnv(invocation);
  const stdin = (invocation as { stdin?: unknown } | null)?.stdin;
  let outcome: Outcome;
  let responded: Omit<Responded, 'answer'>;
  if (env === undefined || typeof stdin !== 'string') {
    const failure = { code: CniErrorCode.DecodeFailure, msg: 'invocation request must have "env" (an object of strings) and "stdin" (a string)' };
    outcome = failureOutcome(failure, LATEST_VERSION);
    responded = { response: { ok: false, ...failure } };
  } else {
    const prepared = prepare(env, stdin);
    if (prepared.kind === 'answer') {
      outcome = prepared.outcome;
      const label = env.CNI_COMMAND;
      responded = { command: label, response: outcome.failure ? { ok: false, code: outcome.failure.code, msg: outcome.failure.msg } : { ok: true } };
    } else {
      responded = await dispatch(prepared.request, handler, serializer, log);
      outcome = settle(prepared, { ok: true, response: responded.response });
    }
  }
  const stderr = outcome.logs.map((l) => `sluice-cni: ${l}\n`).join('');
  return { ...responded, answer: encodeInvocationAnswer(outcome.exitCode, outcome.stdout === undefined ? '' : `${outcome.stdout}\n`, stderr) };
}

/** The CNI_* variables of an invocation; undefined when it is not an object of strings. */
function invocationEnv(invocation: unknown): Record<string, string> | undefined {
  const env = (invocation as { env?: unknown } | null)?.env;
  if (env === null || typeof env !== 'object' || Array.isArray(env)) return undefined;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (typeof v !== 'string') return undefined;
    if (k.startsWith('CNI_')) out[k] = v;
  }
  return out;
}

async function dispatch(raw: unknown, handler: CniHandler, serializer: OperationSerializer, log: Logger): Promise<Omit<Responded, 'answer'>> {
  const command = (raw as { command?: unknown } | null)?.command;
  const label = typeof command === 'string' ? command : undefined;
  let parsed: ReturnType<typeof parseRequest>;
  try {
    parsed = parseRequest(raw);
  } catch (err) {
    return { response: toResponse(err, CniErrorCode.Internal), command: label };
  }
  for (const w of parsed.warnings) log.warn({ command: parsed.command }, `cni: ${w}`);

  switch (parsed.command) {
    case 'STATUS':
      return { command: 'STATUS', response: await attempt('STATUS', () => handler.status()) };
    case 'GC': {
      const { valid, networkName } = parsed;
      return { command: 'GC', response: await attempt('GC', () => serializer.runExclusive(() => handler.gc(valid, { networkName }))) };
    }
    default: {
      const { pod } = parsed;
      const op = parsed.command;
      log.info({ command: op, containerId: pod.containerId, pod: pod.podName ? `${pod.podNamespace}/${pod.podName}` : undefined }, 'cni: request received');
      const response = await attempt(op, () =>
        serializer.run(pod.containerId, async () => {
          if (op === 'ADD') {
            await handler.add(pod);
            // prevResult was validated on parse; hand it on in the config's version, otherwise unchanged.
            return convertResult(pod.prevResult as CniResult, pod.cniVersion);
          }
          if (op === 'DEL') await handler.del(pod);
          else await handler.check(pod);
          return undefined;
        }),
      );
      return { command: op, containerId: pod.containerId, response };
    }
  }
}

/** Runs one handler call; maps its outcome to a response. */
async function attempt(command: Exclude<CniCommand, 'VERSION'>, fn: () => Promise<unknown>): Promise<CniResponse> {
  try {
    const result = await fn();
    return result === undefined ? { ok: true } : { ok: true, result };
  } catch (err) {
    return toResponse(err, UNEXPECTED_FAILURE_CODE[command]);
  }
}

function toResponse(err: unknown, unexpectedCode: number): CniResponse {
  if (err instanceof CniError) return errorResponse(err);
  const e = err instanceof Error ? err : new Error(String(err));
  return { ok: false, code: unexpectedCode, msg: e.message || e.name, details: e.stack?.split('\n').slice(0, 4).join('\n') };
}

function errorResponse(err: CniError): CniResponse {
  // Code 0 would read as success to a runtime; keep whatever the handler meant as a failure.
  const code = Number.isInteger(err.code) && err.code > 0 ? err.code : CniErrorCode.Internal;
  return err.details === undefined ? { ok: false, code, msg: err.message } : { ok: false, code, msg: err.message, details: err.details };
}
