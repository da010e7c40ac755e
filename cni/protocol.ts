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
  | { ok: false; code: number; msg: string; details?: string };

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
} as const;
