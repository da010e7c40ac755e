/**
 * CNI calls in the orders a container runtime can make them, for the chaos suite (lab/chaos.ts):
 * the node's real conflist (the primary, then the real sluice-cni binary) run against real network
 * namespaces, with every plugin's answer kept raw so it can be judged against the CNI spec: exit 0
 * with a result, or a non-zero exit with a JSON error object carrying a numeric `code` on stdout.
 * Anything else (no JSON, a crash, no answer within the runtime's patience) is a broken answer.
 *
 * The runtime's timeout is a plugin killed mid-call (containerd cancels the call's context, which
 * kills the process) followed by the runtime's DEL without a cached result, as libcni caches only
 * a completed ADD.
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import type { Conflist, PluginConf } from './net/cni-config.js';
import { type CniInvocation, type CniResult, nodeFilesystemView, pluginEnv, pluginStdin } from './net/cni-runner.js';
import { run } from './net/exec.js';
import { cniBinDir, nodeNetns } from './net/names.js';

export type CniAnswerKind = 'ok' | 'cni-error' | 'killed' | 'broken';

export interface CniAnswer {
  plugin: string;
  command: 'ADD' | 'DEL';
  kind: CniAnswerKind;
  code?: number;
  ms: number;
  /** What was wrong with a broken answer, or the error's msg. */
  detail: string;
  result?: CniResult;
}

/** How long one plugin may take before it counts as hung: the kubelet gives a whole sandbox start 2 minutes (its runtime request timeout); the lab's agent answers an ADD in about a second even under a storm. */
const PATIENCE_MS = 120_000;

/** Runs one plugin; `killAfterMs` kills it that long after it started (the runtime's timeout). */
export function callPlugin(inv: CniInvocation, command: 'ADD' | 'DEL', list: Conflist, plugin: PluginConf, prevResult: CniResult | undefined, killAfterMs?: number): Promise<CniAnswer> {
  const env = pluginEnv(inv, command);
  const t0 = performance.now();
  const file = join(cniBinDir(inv.lab), plugin.type);
  // `ip netns exec` and the filesystem view's shell both exec the plugin: the child is the plugin.
  const child = spawn('ip', ['netns', 'exec', nodeNetns(inv.lab, inv.node), ...nodeFilesystemView(inv.lab, inv.node), file], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdin.on('error', () => undefined); // a plugin killed before reading its config
  child.stdin.end(JSON.stringify(pluginStdin(list, plugin, prevResult)));
  let killedByUs = false;
  let hung = false;
  const killer = killAfterMs === undefined ? undefined : setTimeout(() => {
    killedByUs = true;
    child.kill('SIGKILL');
  }, killAfterMs);
  const patience = setTimeout(() => {
    hung = true;
    child.kill('SIGKILL');
  }, PATIENCE_MS);
  return new Promise((resolve) => {
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      clearTimeout(patience);
      const base = { plugin: plugin.type, command, ms: Math.round(performance.now() - t0) };
      if (hung) return resolve({ ...base, kind: 'broken', detail: `no answer within ${PATIENCE_MS / 1000} s` });
      if (killedByUs && code !== 0) return resolve({ ...base, kind: 'killed', detail: `killed after ${killAfterMs} ms` });
      let out: unknown;
      try {
        out = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        out = undefined;
      }
      const obj = (out && typeof out === 'object' ? out : {}) as { code?: unknown; msg?: unknown; cniVersion?: unknown };
      if (code === 0) {
        if (command === 'ADD' && typeof obj.cniVersion !== 'string') return resolve({ ...base, kind: 'broken', detail: `ADD exit 0 without a result on stdout (${stdout.slice(0, 120)})` });
        return resolve({ ...base, kind: 'ok', detail: '', ...(command === 'ADD' ? { result: obj as CniResult } : {}) });
      }
      if (typeof obj.code === 'number' && typeof obj.msg === 'string') return resolve({ ...base, kind: 'cni-error', code: obj.code, detail: obj.msg });
      resolve({ ...base, kind: 'broken', detail: `exit ${code ?? signal} without a CNI error object: ${(stdout.trim() || stderr.trim()).slice(0, 200)}` });
    });
  });
}

/** ADD through the chain, stopping at the first plugin that does not succeed; `killSluiceAfterMs` kills sluice-cni mid-call. */
export async function chainAdd(inv: CniInvocation, list: Conflist, killSluiceAfterMs?: number): Promise<CniAnswer[]> {
  const answers: CniAnswer[] = [];
  let prev: CniResult | undefined;
  for (const plugin of list.plugins) {
    const a = await callPlugin(inv, 'ADD', list, plugin, prev, plugin.type === 'sluice-cni' ? killSluiceAfterMs : undefined);
    answers.push(a);
    if (a.kind !== 'ok') break;
    prev = a.result;
  }
  return answers;
}

/** DEL through the chain in reverse; every plugin is called whatever the one before answered, so each answer is judged. */
export async function chainDel(inv: CniInvocation, list: Conflist, prevResult?: CniResult): Promise<CniAnswer[]> {
  const answers: CniAnswer[] = [];
  for (const plugin of [...list.plugins].reverse()) answers.push(await callPlugin(inv, 'DEL', list, plugin, prevResult));
  return answers;
}

export async function makeNetns(name: string): Promise<void> {
  await run('ip', ['netns', 'add', name]);
  await run('ip', ['netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up']);
}

export async function removeNetns(name: string): Promise<void> {
  await run('ip', ['netns', 'del', name], { allowFail: true });
}
