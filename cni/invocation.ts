/**
 * One run of the plugin as pure functions: what the runtime handed over (CNI_* environment and the
 * network config text) becomes either a local answer, an error, or a request for the agent; the
 * agent's answer (or why there was none) becomes what the plugin prints and its exit status.
 *
 * Both ends run this: the standalone plugin (main.ts) before and after its own round trip, and the
 * agent for the native front end (native/sluice-cni.c), which forwards the raw invocation and
 * prints what comes back. So the same input gives the same output byte for byte on either path.
 * Dependency-free (protocol.ts only): it is compiled into the standalone plugin.
 */
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

export type Env = Readonly<Record<string, string | undefined>>;
export type AgentCommand = Exclude<CniCommand, 'VERSION'>;

/** What the plugin does with one invocation before any agent is asked. */
export type Prepared =
  | { kind: 'answer'; outcome: Outcome }
  | { kind: 'forward'; command: AgentCommand; request: CniRequest; socketPath: string; timeoutS: number; cniVersion: string };

/** What the plugin prints and how it exits. */
export interface Outcome {
  /** The stdout text, without its final newline; undefined prints nothing. */
  stdout?: string | undefined;
  exitCode: 0 | 1;
  /** Lines for stderr, each printed as "sluice-cni: <line>". */
  logs: string[];
  /** The error printed on stdout, when the run failed. */
  failure?: CniFailure | undefined;
}

/** Why a round trip to the agent produced no answer. */
export type TransportFailure =
  | { kind: 'unreachable'; why: string }
  | { kind: 'timeout' }
  | { kind: 'closed' }
  | { kind: 'malformed'; why: string };

export type Exchange = { ok: true; response: CniResponse } | { ok: false; failure: TransportFailure };

/** Thrown inside this module to end the run with a CNI error object. */
class PluginError extends Error {
  constructor(readonly failure: CniFailure) {
    super(failure.msg);
  }
}

function fail(code: number, msg: string, details?: string): never {
  throw new PluginError({ code, msg, details });
}

function failWith(failure: CniFailure | undefined): void {
  if (failure) throw new PluginError(failure);
}

/** The version errors are reported in: the config's, once read, when it is one sluice speaks. */
function reportVersion(version: unknown): string {
  return typeof version === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(version) ? version : LATEST_VERSION;
}

/** A CNI error object on stdout (exit 1) and its one-line log. */
export function failureOutcome(failure: CniFailure, cniVersion: string): Outcome {
  return {
    stdout: JSON.stringify({ cniVersion: reportVersion(cniVersion), code: failure.code, msg: failure.msg, details: failure.details ?? '' }),
    exitCode: 1,
    failure,
    logs: [`${failure.code}: ${failure.msg}${failure.details ? ` (${failure.details})` : ''}`],
  };
}

/** A bug (anything but a PluginError) still ends as a CNI error the runtime can read. */
function unexpected(err: unknown): CniFailure {
  if (err instanceof PluginError) return err.failure;
  return {
    code: CniErrorCode.Internal,
    msg: `sluice-cni failed unexpectedly: ${err instanceof Error ? err.message : String(err)}`,
    details: err instanceof Error ? err.stack : undefined,
  };
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
function buildRequest(command: AgentCommand, env: Env, config: Record<string, unknown>): CniRequest {
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

function timeoutOf(config: Record<string, unknown>, command: AgentCommand): number {
  const t = config.timeoutSeconds;
  if (t === undefined) return DEFAULT_TIMEOUT_SECONDS[command];
  if (typeof t !== 'number' || !Number.isFinite(t) || t <= 0) {
    fail(CniErrorCode.InvalidNetworkConfig, 'network config "timeoutSeconds" must be a positive number', String(t));
  }
  return t;
}

/**
 * Everything up to the agent: the command, the config on stdin (or why it could not be read),
 * VERSION answered here, every local check, the agent's address.
 */
export function prepare(env: Env, stdin: string | { unreadable: string }): Prepared {
  let cniVersion = LATEST_VERSION;
  try {
    const command = env.CNI_COMMAND;
    if (!command) {
      const failure: CniFailure = { code: CniErrorCode.InvalidEnvironment, msg: 'required environment variable missing: CNI_COMMAND' };
      const outcome = failureOutcome(failure, cniVersion);
      // Someone ran the binary by hand: say what it is before the error.
      return { kind: 'answer', outcome: { ...outcome, logs: [`chained CNI plugin for sluice; CNI spec versions supported: ${SUPPORTED_VERSIONS.join(', ')}`, ...outcome.logs] } };
    }
    if (!isCniCommand(command)) fail(CniErrorCode.InvalidEnvironment, `unknown CNI_COMMAND "${command}": expected one of ADD, DEL, CHECK, STATUS, GC, VERSION`);
    if (typeof stdin !== 'string') fail(CniErrorCode.IoFailure, `failed to read the network config from stdin: ${stdin.unreadable}`);
    const config = parseConfig(stdin, command);
    cniVersion = typeof config.cniVersion === 'string' ? config.cniVersion : LATEST_VERSION;
    if (command === 'VERSION') {
      return { kind: 'answer', outcome: { stdout: JSON.stringify({ cniVersion, supportedVersions: [...SUPPORTED_VERSIONS] }), exitCode: 0, logs: [] } };
    }
    const request = buildRequest(command, env, config);
    return { kind: 'forward', command, request, socketPath: socketPathOf(config), timeoutS: timeoutOf(config, command), cniVersion };
  } catch (err) {
    return { kind: 'answer', outcome: failureOutcome(unexpected(err), cniVersion) };
  }
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

/** What the plugin prints once the agent answered, or could not. */
export function settle(forward: Extract<Prepared, { kind: 'forward' }>, exchange: Exchange): Outcome {
  const { command, socketPath, timeoutS, cniVersion } = forward;
  const failed = (code: number, msg: string, details?: string) => failureOutcome({ code, msg, details }, cniVersion);
  if (!exchange.ok) {
    const why = describe(exchange.failure, socketPath, command, timeoutS);
    if (command === 'DEL' || command === 'GC') {
      // Never block teardown/GC on sluice; the agent's start-up reconcile removes the leftovers.
      return { exitCode: 0, logs: [`${why}; reporting ${command} as successful, sluice-agent cleans up at its next start`] };
    }
    if (command === 'STATUS') return failed(CniErrorCode.PluginNotAvailable, why);
    if (exchange.failure.kind === 'malformed') return failed(CniErrorCode.IoFailure, why);
    return failed(CniErrorCode.TryAgainLater, why);
  }
  const response = exchange.response;
  if (!response.ok) return failed(response.code, response.msg, response.details);
  if (command === 'ADD') {
    if (response.result === undefined) return failed(CniErrorCode.IoFailure, `sluice-agent at ${socketPath} answered ADD without a result`);
    return { stdout: JSON.stringify(response.result), exitCode: 0, logs: [] };
  }
  return { exitCode: 0, logs: [] };
}

/** Checks that a parsed agent answer has the shape of a CniResponse; the reason when it does not. */
export function responseShapeError(response: unknown): string | undefined {
  if (response === null || typeof response !== 'object' || typeof (response as { ok?: unknown }).ok !== 'boolean') return 'not a response object';
  const r = response as { ok: boolean; code?: unknown; msg?: unknown };
  if (!r.ok && (typeof r.code !== 'number' || typeof r.msg !== 'string')) return 'error response without code/msg';
  return undefined;
}

/**
 * The standalone plugin is told on its command line why the front end got no answer, so that it
 * reports that failure instead of asking the agent a second time:
 * `--agent-failure=unreachable:<why>`, `timeout`, `closed` or `malformed:<why>`.
 */
export function parseAgentFailureArg(argv: readonly string[]): TransportFailure | undefined {
  const arg = argv.find((a) => a.startsWith('--agent-failure='));
  if (arg === undefined) return undefined;
  const value = arg.slice('--agent-failure='.length);
  const colon = value.indexOf(':');
  const kind = colon < 0 ? value : value.slice(0, colon);
  const why = colon < 0 ? '' : value.slice(colon + 1);
  switch (kind) {
    case 'unreachable':
      return { kind, why: why || 'unknown error' };
    case 'malformed':
      return { kind, why: why || 'unreadable answer' };
    case 'timeout':
    case 'closed':
      return { kind };
    default:
      return { kind: 'malformed', why: `the front end reported an unknown failure "${value}"` };
  }
}
