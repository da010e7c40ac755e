#!/usr/bin/env node
/**
 * sluice-cni: the chained CNI plugin. It validates what the runtime passed (environment and
 * network config on stdin) exactly as CNI spec 1.1 asks, answers VERSION itself, and forwards
 * every other command to sluice-agent over a unix socket (one JSON line each way, see
 * protocol.ts). stdout carries only the CNI result or error object; diagnostics go to stderr.
 *
 * Compiled into one self-contained executable by scripts/build-cni.mjs, so it imports nothing but
 * node: builtins and protocol.ts: its start-up is on every Pod's critical path.
 *
 * When the agent cannot be reached:
 *   ADD, CHECK -> 11 (try again later), naming the socket and what to check;
 *   STATUS     -> 50 (plugin not available);
 *   DEL        -> success: a Pod's teardown must never wedge on sluice; the agent removes what is
 *                 left of gone Pods when it starts (reconcile);
 *   GC         -> success, for the same reason: GC only removes leftovers, the agent's start-up
 *                 reconcile removes the same leftovers, and the spec asks plugins to complete GC
 *                 without error whenever they can.
 * Errors the agent itself returns are always passed through, for every command.
 */
import { createConnection } from 'node:net';
import {
  AGENT_HINT,
  CniErrorCode,
  DEFAULT_SOCKET_PATH,
  DEFAULT_TIMEOUT_SECONDS,
  LATEST_VERSION,
  REQUIRED_ENV,
  SUPPORTED_VERSIONS,
  containerIdError,
  ifNameError,
  isCniCommand,
  networkNameError,
  parseCniArgs,
  versionError,
  type CniCommand,
  type CniFailure,
  type CniRequest,
  type CniResponse,
} from './protocol.js';

/** The version errors are reported in: the config's, once read, when it is one sluice speaks. */
let configVersion = LATEST_VERSION;

/** Largest agent response accepted (an ADD result is a few KiB). */
const MAX_RESPONSE_BYTES = 16 << 20;

/** Thrown to end the run with a CNI error object (its cniVersion is added when printed). */
class PluginError extends Error {
  constructor(
    readonly failure: CniFailure,
  ) {
    super(failure.msg);
  }
}

function fail(code: number, msg: string, details?: string): never {
  throw new PluginError({ code, msg, details });
}

function failWith(failure: CniFailure | undefined): void {
  if (failure) throw new PluginError(failure);
}

function logErr(line: string): void {
  process.stderr.write(`sluice-cni: ${line}\n`);
}

function readStdin(): Promise<string> {
  // A terminal means nobody piped a config (someone ran the binary by hand): do not block on it.
  if (process.stdin.isTTY) return Promise.resolve('');
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    process.stdin.on('data', (c: Buffer) => chunks.push(c));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', reject);
  });
}

function parseConfig(text: string, command: CniCommand): Record<string, unknown> {
  if (command === 'VERSION' && text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    fail(CniErrorCode.DecodeFailure, `failed to decode the network config on stdin: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    fail(CniErrorCode.DecodeFailure, 'failed to decode the network config on stdin: it must be a JSON object');
  }
  return parsed as Record<string, unknown>;
}

/** Validates everything the spec lets the plugin check locally, and builds the agent request. */
function buildRequest(command: Exclude<CniCommand, 'VERSION'>, env: NodeJS.ProcessEnv, config: Record<string, unknown>): CniRequest {
  const missing = REQUIRED_ENV[command].filter((name) => !env[name]);
  if (missing.length > 0) fail(CniErrorCode.InvalidEnvironment, `required environment variables missing for ${command}: ${missing.join(', ')}`);

  const containerId = env.CNI_CONTAINERID ?? '';
  const ifName = env.CNI_IFNAME ?? '';
  if (REQUIRED_ENV[command].includes('CNI_CONTAINERID')) failWith(containerIdError(containerId));
  if (REQUIRED_ENV[command].includes('CNI_IFNAME')) failWith(ifNameError(ifName));

  const parsedArgs = parseCniArgs(env.CNI_ARGS ?? '');
  if ('error' in parsedArgs) throw new PluginError(parsedArgs.error);

  failWith(versionError(config.cniVersion, command));
  failWith(networkNameError(config.name));

  if (command === 'ADD' && config.prevResult === undefined) {
    fail(
      CniErrorCode.InvalidNetworkConfig,
      'sluice must be chained after a primary CNI plugin: ADD got no prevResult. List sluice after the primary plugin (e.g. ptp or aws-cni) in the "plugins" array of the .conflist',
    );
  }
  if (command === 'CHECK' && config.prevResult === undefined) {
    fail(CniErrorCode.InvalidNetworkConfig, 'CHECK got no prevResult: the runtime must pass the result of the preceding ADD');
  }
  // DEL is best-effort: the agent ignores an unusable prevResult there (and says so in its log).
  const prev = config.prevResult;
  if (command !== 'DEL' && prev !== undefined && (prev === null || typeof prev !== 'object' || Array.isArray(prev))) {
    fail(CniErrorCode.InvalidNetworkConfig, 'network config "prevResult" must be a JSON object');
  }

  return {
    command,
    containerId,
    netns: env.CNI_NETNS ?? '',
    ifName,
    args: parsedArgs.args,
    cniPath: env.CNI_PATH ?? '',
    config,
  };
}

function socketPathOf(config: Record<string, unknown>): string {
  const p = config.socketPath;
  if (p === undefined) return DEFAULT_SOCKET_PATH;
  if (typeof p !== 'string' || !p.startsWith('/')) fail(CniErrorCode.InvalidNetworkConfig, 'network config "socketPath" must be an absolute path', String(p));
  return p;
}

function timeoutOf(config: Record<string, unknown>, command: Exclude<CniCommand, 'VERSION'>): number {
  const t = config.timeoutSeconds;
  if (t === undefined) return DEFAULT_TIMEOUT_SECONDS[command];
  if (typeof t !== 'number' || !Number.isFinite(t) || t <= 0) {
    fail(CniErrorCode.InvalidNetworkConfig, 'network config "timeoutSeconds" must be a positive number', String(t));
  }
  return t;
}

/** Why a round trip to the agent produced no answer. */
type TransportFailure =
  | { kind: 'unreachable'; why: string }
  | { kind: 'timeout' }
  | { kind: 'closed' }
  | { kind: 'malformed'; why: string };

type Exchange = { ok: true; response: CniResponse } | { ok: false; failure: TransportFailure };

/** One request line out, one response line back. Never throws. */
function exchange(socketPath: string, request: CniRequest, timeoutMs: number): Promise<Exchange> {
  return new Promise((resolve) => {
    let settled = false;
    let connected = false;
    const chunks: Buffer[] = [];
    let size = 0;
    const sock = createConnection(socketPath);
    const timer = setTimeout(() => finish({ ok: false, failure: { kind: 'timeout' } }), timeoutMs);

    function finish(result: Exchange): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(result);
    }

    function tryParse(text: string): void {
      try {
        const response = JSON.parse(text) as CniResponse;
        if (response === null || typeof response !== 'object' || typeof response.ok !== 'boolean') throw new Error('not a response object');
        if (!response.ok && (typeof response.code !== 'number' || typeof response.msg !== 'string')) throw new Error('error response without code/msg');
        finish({ ok: true, response });
      } catch (err) {
        finish({ ok: false, failure: { kind: 'malformed', why: (err as Error).message } });
      }
    }

    sock.on('connect', () => {
      connected = true;
      sock.write(JSON.stringify(request) + '\n');
    });
    sock.on('data', (chunk: Buffer) => {
      const nl = chunk.indexOf(0x0a);
      if (nl >= 0) {
        chunks.push(chunk.subarray(0, nl));
        tryParse(Buffer.concat(chunks).toString('utf8'));
        return;
      }
      chunks.push(chunk);
      size += chunk.length;
      if (size > MAX_RESPONSE_BYTES) finish({ ok: false, failure: { kind: 'malformed', why: 'response larger than 16 MiB' } });
    });
    sock.on('end', () => {
      // A response without the final newline is still a complete JSON document.
      if (size > 0) tryParse(Buffer.concat(chunks).toString('utf8'));
      else finish({ ok: false, failure: { kind: 'closed' } });
    });
    sock.on('error', (err: NodeJS.ErrnoException) => {
      if (!connected) finish({ ok: false, failure: { kind: 'unreachable', why: err.code ?? err.message } });
      else finish({ ok: false, failure: { kind: 'closed' } });
    });
  });
}

function describe(failure: TransportFailure, socketPath: string, command: string, timeoutS: number): string {
  switch (failure.kind) {
    case 'unreachable':
      return `sluice-agent is not reachable at ${socketPath} (${failure.why}): ${AGENT_HINT}`;
    case 'timeout':
      return `sluice-agent did not answer ${command} within ${timeoutS} s at ${socketPath}: it may be overloaded or stuck; check its log`;
    case 'closed':
      return `sluice-agent at ${socketPath} closed the connection without answering ${command}: it may have restarted; check its log`;
    case 'malformed':
      return `sluice-agent at ${socketPath} sent an unreadable answer to ${command} (${failure.why})`;
  }
}

/** Runs one command; returns what to print on stdout (if anything). Throws PluginError. */
async function run(env: NodeJS.ProcessEnv): Promise<string | undefined> {
  const command = env.CNI_COMMAND;
  if (!command) {
    logErr(`chained CNI plugin for sluice; CNI spec versions supported: ${SUPPORTED_VERSIONS.join(', ')}`);
    fail(CniErrorCode.InvalidEnvironment, 'required environment variable missing: CNI_COMMAND');
  }
  if (!isCniCommand(command)) fail(CniErrorCode.InvalidEnvironment, `unknown CNI_COMMAND "${command}": expected one of ADD, DEL, CHECK, STATUS, GC, VERSION`);

  let text: string;
  try {
    text = await readStdin();
  } catch (err) {
    fail(CniErrorCode.IoFailure, `failed to read the network config from stdin: ${(err as Error).message}`);
  }
  const config = parseConfig(text, command);
  configVersion = typeof config.cniVersion === 'string' ? config.cniVersion : LATEST_VERSION;

  if (command === 'VERSION') {
    return JSON.stringify({ cniVersion: configVersion, supportedVersions: [...SUPPORTED_VERSIONS] });
  }

  const request = buildRequest(command, env, config);
  const socketPath = socketPathOf(config);
  const timeoutS = timeoutOf(config, command);
  const answer = await exchange(socketPath, request, timeoutS * 1000);

  if (!answer.ok) {
    const why = describe(answer.failure, socketPath, command, timeoutS);
    if (command === 'DEL' || command === 'GC') {
      // Never block teardown/GC on sluice; the agent's start-up reconcile removes the leftovers.
      logErr(`${why}; reporting ${command} as successful, sluice-agent cleans up at its next start`);
      return undefined;
    }
    if (command === 'STATUS') fail(CniErrorCode.PluginNotAvailable, why);
    if (answer.failure.kind === 'malformed') fail(CniErrorCode.IoFailure, why);
    fail(CniErrorCode.TryAgainLater, why);
  }

  const response = answer.response;
  if (!response.ok) fail(response.code, response.msg, response.details);
  if (command === 'ADD') {
    if (response.result === undefined) fail(CniErrorCode.IoFailure, `sluice-agent at ${socketPath} answered ADD without a result`);
    return JSON.stringify(response.result);
  }
  return undefined;
}

function exitWith(output: string | undefined, code: number): void {
  if (output === undefined) {
    process.exit(code);
  }
  process.stdout.write(output + '\n', () => process.exit(code));
}

run(process.env).then(
  (output) => exitWith(output, 0),
  (err: unknown) => {
    const failure: CniFailure =
      err instanceof PluginError
        ? err.failure
        : { code: CniErrorCode.Internal, msg: `sluice-cni failed unexpectedly: ${err instanceof Error ? err.message : String(err)}`, details: (err as Error)?.stack };
    const cniVersion = (SUPPORTED_VERSIONS as readonly string[]).includes(configVersion) ? configVersion : LATEST_VERSION;
    logErr(`${failure.code}: ${failure.msg}${failure.details ? ` (${failure.details})` : ''}`);
    exitWith(JSON.stringify({ cniVersion, code: failure.code, msg: failure.msg, details: failure.details ?? '' }), 1);
  },
);
