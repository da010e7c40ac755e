/**
 * Wire protocol between the `sluice-cni` plugin and the agent: one JSON request, one JSON
 * response, each terminated by "\n", over a unix stream socket (default /var/run/sluice/cni.sock).
 * Kept dependency-free: the plugin binary imports only this and node:net.
 */

export const DEFAULT_SOCKET_PATH = '/var/run/sluice/cni.sock';
export const SUPPORTED_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;

export type CniCommand = 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC' | 'VERSION';

export interface CniRequest {
  command: CniCommand;
  containerId: string;
  netns: string;
  ifName: string;
  /** CNI_ARGS parsed into key/value pairs (K8S_POD_NAMESPACE, K8S_POD_NAME, ...). */
  args: Record<string, string>;
  cniPath: string;
  /** The network configuration from stdin, parsed (includes cniVersion, name, prevResult, ...). */
  config: Record<string, unknown>;
}

export type CniResponse =
  | { ok: true; result?: unknown }
  | { ok: false; code: number; msg: string; details?: string | undefined };

/** CNI spec error codes used by sluice (plugin-specific codes are >= 100). */
export const CniErrorCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IoFailure: 5,
  DecodeFailure: 6,
  InvalidNetworkConfig: 7,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  /** sluice: the agent failed to attach the Pod (details say which step; everything was rolled back). */
  AttachFailed: 100,
  /** sluice: the agent failed to detach the Pod. */
  DetachFailed: 101,
  /** sluice: CHECK found the attachment incomplete (msg lists what is missing). */
  CheckFailed: 102,
  /** sluice: GC failed to remove some stale attachments (msg lists them). */
  GcFailed: 103,
  /** sluice: an unexpected internal error in the plugin or the agent (a bug; see the stderr/agent log). */
  Internal: 104,
} as const;

// ---------------------------------------------------------------------------------------------
// Spec-level rules shared by the plugin (which rejects bad input before dialling the agent) and
// the agent (which re-checks, because anything local can write to the socket). Pure functions.
// ---------------------------------------------------------------------------------------------

/** A spec-shaped failure: the CNI error code and a message naming what is wrong. */
export interface CniFailure {
  code: number;
  msg: string;
  details?: string | undefined;
}

/** The newest spec version sluice speaks; used when the input names none (VERSION, errors). */
export const LATEST_VERSION = '1.1.0';

/** Per-command client timeouts (seconds) when the network config sets no `timeoutSeconds`. */
export const DEFAULT_TIMEOUT_SECONDS: Record<Exclude<CniCommand, 'VERSION'>, number> = {
  ADD: 60,
  CHECK: 30,
  DEL: 30,
  GC: 60,
  STATUS: 10,
};

/** Commands newer than 0.3.0 exist only from the spec version that introduced them. */
export const MIN_VERSION_FOR_COMMAND: Partial<Record<CniCommand, string>> = {
  CHECK: '0.4.0',
  STATUS: '1.1.0',
  GC: '1.1.0',
};

/** Environment variables each command requires (CNI spec 1.1, section 2). */
export const REQUIRED_ENV: Record<CniCommand, readonly string[]> = {
  ADD: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  CHECK: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME'],
  DEL: ['CNI_CONTAINERID', 'CNI_IFNAME'],
  GC: ['CNI_PATH'],
  STATUS: [],
  VERSION: [],
};

export const CNI_COMMANDS: readonly CniCommand[] = ['ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION'];

export function isCniCommand(value: unknown): value is CniCommand {
  return typeof value === 'string' && (CNI_COMMANDS as readonly string[]).includes(value);
}

export function isSupportedVersion(version: unknown): version is (typeof SUPPORTED_VERSIONS)[number] {
  return typeof version === 'string' && (SUPPORTED_VERSIONS as readonly string[]).includes(version);
}

/** Compares two "x.y.z" versions numerically: negative, zero or positive like a sort comparator. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** Container ids and network names share one rule: alphanumeric first, then [A-Za-z0-9_.-]. */
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

export function containerIdError(id: string): CniFailure | undefined {
  if (id === '') return { code: CniErrorCode.InvalidEnvironment, msg: 'CNI_CONTAINERID is empty' };
  if (!NAME_PATTERN.test(id)) {
    return {
      code: CniErrorCode.InvalidEnvironment,
      msg: 'CNI_CONTAINERID has invalid characters: it must start with a letter or digit, followed by letters, digits, "_", "." or "-"',
      details: id,
    };
  }
  return undefined;
}

/** Linux interface-name rules as the spec states them (non-empty, < 16 bytes, no "/", ":", space). */
export function ifNameError(name: string): CniFailure | undefined {
  const bad = (why: string): CniFailure => ({ code: CniErrorCode.InvalidEnvironment, msg: `CNI_IFNAME ${why}`, details: name });
  if (name === '') return bad('is empty');
  if (Buffer.byteLength(name) > 15) return bad('is longer than 15 bytes');
  if (name === '.' || name === '..') return bad('must not be "." or ".."');
  if (/[/:\s]/.test(name)) return bad('must not contain "/", ":" or whitespace');
  return undefined;
}

export function networkNameError(name: unknown): CniFailure | undefined {
  if (name === undefined || name === '') return { code: CniErrorCode.InvalidNetworkConfig, msg: 'network config has no "name"' };
  if (typeof name !== 'string') return { code: CniErrorCode.InvalidNetworkConfig, msg: 'network config "name" must be a string' };
  if (!NAME_PATTERN.test(name)) {
    return {
      code: CniErrorCode.InvalidNetworkConfig,
      msg: 'network config "name" has invalid characters: it must start with a letter or digit, followed by letters, digits, "_", "." or "-"',
      details: name,
    };
  }
  return undefined;
}

/**
 * Checks the config's cniVersion against what sluice supports and what the command needs.
 * A missing cniVersion is an incompatible version (pre-0.2 configs had none), as upstream treats it.
 */
export function versionError(version: unknown, command: CniCommand): CniFailure | undefined {
  const supported = SUPPORTED_VERSIONS.join(', ');
  if (version === undefined) {
    return { code: CniErrorCode.IncompatibleVersion, msg: `network config has no "cniVersion"; sluice supports ${supported}` };
  }
  if (typeof version !== 'string') {
    return { code: CniErrorCode.InvalidNetworkConfig, msg: 'network config "cniVersion" must be a string' };
  }
  if (!isSupportedVersion(version)) {
    return { code: CniErrorCode.IncompatibleVersion, msg: `incompatible CNI version "${version}": sluice supports ${supported}` };
  }
  const min = MIN_VERSION_FOR_COMMAND[command];
  if (min && compareVersions(version, min) < 0) {
    return { code: CniErrorCode.IncompatibleVersion, msg: `config version ${version} does not allow ${command} (needs cniVersion >= ${min})` };
  }
  return undefined;
}

/**
 * Parses CNI_ARGS ("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"). Empty segments are ignored;
 * a segment without "=" or with an empty key is an error naming it.
 */
export function parseCniArgs(raw: string): { args: Record<string, string> } | { error: CniFailure } {
  const args: Record<string, string> = {};
  for (const pair of raw.split(';')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      return { error: { code: CniErrorCode.InvalidEnvironment, msg: `CNI_ARGS: "${pair}" is not a KEY=VALUE pair`, details: raw } };
    }
    args[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return { args };
}

/** What an operator should check when the agent cannot be reached; appended to error messages. */
export const AGENT_HINT =
  'is sluice-agent running on this node? (systemctl status sluice-agent, or kubectl -n kube-system get pods -l app=sluice-agent -o wide)';

/**
 * The native front end's request (native/sluice-cni.c): the invocation exactly as the runtime made
 * it, for the agent to run the plugin's own checks on (invocation.ts), so that the front end needs
 * to understand nothing but where the agent is. One JSON line:
 * `{"invocation": {"env": {"CNI_COMMAND": ..., ...}, "stdin": "<the network config text>"}}`.
 */
export interface InvocationRequest {
  invocation: { env: Record<string, string>; stdin: string };
}

/**
 * The answer to an InvocationRequest is framed rather than JSON, so that the front end needs no
 * JSON parser: a header line `<exit status> <stdout bytes> <stderr bytes>\n`, then exactly that many
 * bytes of stdout, then of stderr, which the front end writes out as they are.
 */
export function encodeInvocationAnswer(exitCode: number, stdout: string, stderr: string): Buffer {
  const out = Buffer.from(stdout, 'utf8');
  const err = Buffer.from(stderr, 'utf8');
  return Buffer.concat([Buffer.from(`${exitCode} ${out.length} ${err.length}\n`, 'ascii'), out, err]);
}
