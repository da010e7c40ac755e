/**
 * Turns one wire request (a parsed JSON line from the socket) into a validated command for the
 * handler. Pure. The plugin has already checked most of this, but anything local can write to the
 * socket, so the agent re-checks with the same rules (cni/protocol.ts) and names the bad field.
 */
import {
  CniErrorCode,
  containerIdError,
  ifNameError,
  isCniCommand,
  networkNameError,
  versionError,
  type CniFailure,
} from '../../cni/protocol.js';
import { CniError } from './errors.js';
import { normalizeResult, type CniResult } from './result.js';

/** What the handler gets for ADD, DEL and CHECK. */
export interface PodRequest {
  containerId: string;
  netns: string;
  ifName: string;
  /** From CNI_ARGS K8S_POD_NAMESPACE / K8S_POD_NAME. */
  podNamespace?: string;
  podName?: string;
  cniVersion: string;
  networkName: string;
  /** Normalized to the 1.x shape (no ips[].version). */
  prevResult?: CniResult;
  config: Record<string, unknown>;
}

export interface GcAttachment {
  containerId: string;
  ifName: string;
}

export type ParsedRequest =
  | { command: 'ADD' | 'DEL' | 'CHECK'; pod: PodRequest; warnings: string[] }
  | { command: 'STATUS'; warnings: string[] }
  | { command: 'GC'; networkName: string; valid: GcAttachment[]; warnings: string[] };

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function check(failure: CniFailure | undefined): void {
  if (failure) throw CniError.from(failure);
}

function wireField(req: Obj, key: string): string {
  const v = req[key];
  if (v === undefined) return '';
  if (typeof v !== 'string') throw new CniError(CniErrorCode.DecodeFailure, `request field "${key}" must be a string`);
  return v;
}

/**
 * Validates a request object. Throws CniError with the spec code for the first problem found:
 * 4 for environment (container id, ifname, netns), 1 for versions, 7 for network config/prevResult.
 */
export function parseRequest(raw: unknown): ParsedRequest {
  if (!isObj(raw)) throw new CniError(CniErrorCode.DecodeFailure, 'request must be a JSON object');
  const command = raw.command;
  if (!isCniCommand(command)) throw new CniError(CniErrorCode.InvalidEnvironment, `unknown CNI command ${JSON.stringify(command)}`);
  if (command === 'VERSION') throw new CniError(CniErrorCode.InvalidEnvironment, 'VERSION is answered by the plugin itself, not the agent');

  const config = raw.config;
  if (!isObj(config)) throw new CniError(CniErrorCode.DecodeFailure, 'request field "config" must be a JSON object (the network config)');
  check(versionError(config.cniVersion, command));
  check(networkNameError(config.name));
  const cniVersion = config.cniVersion as string;
  const networkName = config.name as string;
  const warnings: string[] = [];

  if (command === 'STATUS') return { command, warnings };
  if (command === 'GC') return { command, networkName, valid: parseValidAttachments(config), warnings };

  const containerId = wireField(raw, 'containerId');
  const ifName = wireField(raw, 'ifName');
  const netns = wireField(raw, 'netns');
  check(containerIdError(containerId));
  check(ifNameError(ifName));
  if (command !== 'DEL' && netns === '') throw new CniError(CniErrorCode.InvalidEnvironment, `CNI_NETNS is required for ${command}`);

  const args = raw.args === undefined ? {} : raw.args;
  if (!isObj(args) || !Object.values(args).every((v) => typeof v === 'string')) {
    throw new CniError(CniErrorCode.DecodeFailure, 'request field "args" must map CNI_ARGS keys to strings');
  }

  let prevResult: CniResult | undefined;
  if (config.prevResult === undefined) {
    if (command === 'ADD') {
      throw new CniError(
        CniErrorCode.InvalidNetworkConfig,
        'sluice must be chained after a primary CNI plugin: ADD got no prevResult. List sluice after the primary plugin in the "plugins" array of the .conflist',
      );
    }
    if (command === 'CHECK') throw new CniError(CniErrorCode.InvalidNetworkConfig, 'CHECK got no prevResult: the runtime must pass the result of the preceding ADD');
  } else {
    try {
      prevResult = normalizeResult(config.prevResult);
    } catch (err) {
      // DEL is best-effort: a damaged prevResult must not keep a Pod from being torn down.
      if (command !== 'DEL' || !(err instanceof CniError)) throw err;
      warnings.push(`ignoring unusable prevResult on DEL: ${err.message}`);
    }
  }

  const pod: PodRequest = {
    containerId,
    netns,
    ifName,
    cniVersion,
    networkName,
    config,
    ...(prevResult ? { prevResult } : {}),
    ...(args.K8S_POD_NAMESPACE ? { podNamespace: args.K8S_POD_NAMESPACE as string } : {}),
    ...(args.K8S_POD_NAME ? { podName: args.K8S_POD_NAME as string } : {}),
  };
  return { command, pod, warnings };
}

/**
 * Reads `cni.dev/valid-attachments` (spec 1.1; libcni also writes the older `cni.dev/attachments`).
 * A GC without the list is rejected rather than read as "nothing is valid", which would detach
 * every Pod on the node.
 */
export function parseValidAttachments(config: Obj): GcAttachment[] {
  const key = config['cni.dev/valid-attachments'] !== undefined ? 'cni.dev/valid-attachments' : 'cni.dev/attachments';
  const list = config[key];
  if (list === undefined) {
    throw new CniError(CniErrorCode.InvalidNetworkConfig, 'GC needs "cni.dev/valid-attachments" in the network config (the list of attachments to keep)');
  }
  if (!Array.isArray(list)) throw new CniError(CniErrorCode.InvalidNetworkConfig, `"${key}" must be a list of {containerID, ifname}`);
  return list.map((a, i) => {
    if (!isObj(a) || typeof a.containerID !== 'string' || typeof a.ifname !== 'string' || a.containerID === '' || a.ifname === '') {
      throw new CniError(CniErrorCode.InvalidNetworkConfig, `"${key}"[${i}] must be an object with non-empty string "containerID" and "ifname"`);
    }
    return { containerId: a.containerID, ifName: a.ifname };
  });
}
