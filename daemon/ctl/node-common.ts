/** Shared plumbing of the `sluicectl node …` troubleshooting commands (read-only). */
import { request } from 'node:http';
import { pino } from 'pino';
import type { Argv } from 'yargs';
import type { AgentStatus } from '../agent.js';
import { type AgentConfig, DEFAULT_CONFIG_PATH, loadConfig } from '../config.js';
import { OvsBridge } from '../ovs/bridge.js';
import { FlowProgrammer } from '../ovs/flow-programmer.js';

export interface NodeArgs {
  config: string;
}

export function withConfig<T>(y: Argv<T>): Argv<T & NodeArgs> {
  return y.option('config', {
    alias: 'c',
    type: 'string',
    default: DEFAULT_CONFIG_PATH,
    describe: "the agent's configuration file (bridge, OVS run dir, health address)",
  }) as Argv<T & NodeArgs>;
}

export async function nodeContext(configPath: string): Promise<{ config: AgentConfig; ovs: OvsBridge; flowProgrammer: FlowProgrammer }> {
  const config = await loadConfig(configPath);
  const opts = { ovsRunDir: config.ovsRunDir, bridge: config.bridge, datapath: config.datapath, log: pino({ level: 'silent' }) };
  return { config, ovs: new OvsBridge(opts), flowProgrammer: new FlowProgrammer(opts) };
}

/**
 * GET `path` from the agent's health endpoint (on this node, so run in the node's network
 * namespace): the status code and the parsed JSON body. `what` names the answer in errors.
 */
export function agentGet(config: AgentConfig, path: string, what: string, timeoutMs = 3000): Promise<{ code: number; body: unknown }> {
  const { host, port } = config.healthAddress;
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => {
        try {
          resolve({ code: res.statusCode ?? 0, body: JSON.parse(body) as unknown });
        } catch (err) {
          reject(new Error(`agent ${what} at ${host}:${port}: bad answer: ${(err as Error).message}`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (err) => reject(new Error(`agent not reachable at http://${host}:${port}${path} (${err.message}); is sluice-agent running on this node?`)));
    req.end();
  });
}

/**
 * GET `path` for the command `cmd` (e.g. "node policies"): the body of a 200 answer, or undefined
 * after printing why not (agent unreachable, or its error answer) and setting exit code 1.
 */
export async function agentBody(configPath: string, path: string, cmd: string, timeoutMs = 3000): Promise<unknown> {
  let answer: { code: number; body: unknown };
  try {
    answer = await agentGet(await loadConfig(configPath), path, cmd, timeoutMs);
  } catch (err) {
    console.error(`sluicectl ${cmd}: ${(err as Error).message}`);
    process.exitCode = 1;
    return undefined;
  }
  if (answer.code !== 200) {
    const why = (answer.body as { error?: string } | null)?.error ?? JSON.stringify(answer.body);
    console.error(`sluicectl ${cmd}: the agent answered ${answer.code}: ${why}`);
    process.exitCode = 1;
    return undefined;
  }
  return answer.body;
}

/** GET /status from the agent's health endpoint (on this node, so run in the node's network namespace). */
export async function agentStatus(config: AgentConfig, timeoutMs = 3000): Promise<AgentStatus> {
  return (await agentGet(config, '/status', 'status', timeoutMs)).body as AgentStatus;
}

/** Left-aligned text table. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) => r.map((c, i) => (c ?? '').padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}
