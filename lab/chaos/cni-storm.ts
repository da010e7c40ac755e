/**
 * The runtime's CNI calls in odd orders, on the real plugin binaries and real namespaces: the
 * node's real conflist (the primary, then the real sluice-cni binary) run against real network
 * namespaces, with every plugin's answer kept raw so it can be judged against the CNI spec: exit 0
 * with a result, or a non-zero exit with a JSON error object carrying a numeric `code` on stdout.
 * Anything else (no JSON, a crash, no answer within the runtime's patience) is a broken answer.
 *
 * The runtime's timeout is a plugin killed mid-call (containerd cancels the call's context, which
 * kills the process) followed by the runtime's DEL without a cached result, as libcni caches only
 * a completed ADD.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { join } from 'node:path';
import type { Conflist, PluginConf } from '../net/cni-config.js';
import { type CniInvocation, type CniResult, nodeFilesystemView, pluginEnv, pluginStdin } from '../net/cni-runner.js';
import { run, sleep } from '../net/exec.js';
import { cniBinDir, conflistPath, nodeNetns, podNetns } from '../net/names.js';
import type { ChaosRun } from './harness.js';

type CniAnswerKind = 'ok' | 'cni-error' | 'killed' | 'broken';

interface CniAnswer {
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
function callPlugin(inv: CniInvocation, command: 'ADD' | 'DEL', list: Conflist, plugin: PluginConf, prevResult: CniResult | undefined, killAfterMs?: number): Promise<CniAnswer> {
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
async function chainAdd(inv: CniInvocation, list: Conflist, killSluiceAfterMs?: number): Promise<CniAnswer[]> {
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
async function chainDel(inv: CniInvocation, list: Conflist, prevResult?: CniResult): Promise<CniAnswer[]> {
  const answers: CniAnswer[] = [];
  for (const plugin of [...list.plugins].reverse()) answers.push(await callPlugin(inv, 'DEL', list, plugin, prevResult));
  return answers;
}

async function makeNetns(name: string): Promise<void> {
  await run('ip', ['netns', 'add', name]);
  await run('ip', ['netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up']);
}

async function removeNetns(name: string): Promise<void> {
  await run('ip', ['netns', 'del', name], { allowFail: true });
}

/**
 * Pod ADDs all at once; every fifth one raced by its own DEL, every fifth killed in sluice-cni
 * mid-call and then DELeted as containerd does after its timeout, every fifth ADDed to sluice
 * again (twice at once) once attached; DELs of containers nobody ADDed meanwhile. Every answer
 * must be a result or a CNI error object; then every container still ADDed must be attached
 * whole and every DELeted one gone whole; the runtime's DELs at the end must leave nothing.
 */
export async function cniStorm(chaos: ChaosRun): Promise<void> {
  const { lab, target } = chaos;
  await chaos.scenario(`CNI storm: ${chaos.quick ? 20 : 100} ADDs at once, DEL during ADD, unknown DELs, repeated ADDs, plugin killed mid-call`, 1, async () => {
    const n = chaos.quick ? 20 : 100;
    const list = JSON.parse(readFileSync(conflistPath(lab, target), 'utf8')) as Conflist;
    const sluice = list.plugins.find((p) => p.type === 'sluice-cni')!;
    const hex = Date.now().toString(16);
    const invs: CniInvocation[] = Array.from({ length: n }, (_, i) => ({
      lab, node: target, containerId: `cnistorm${hex}${String(i).padStart(4, '0')}`, netns: podNetns(lab, 'cnistorm', `c${i}`), podNamespace: 'cnistorm', podName: `c${i}`,
    }));
    const answers: CniAnswer[] = [];
    const results = new Map<number, CniResult>();
    /** Containers the runtime DELeted (raced or timed out): nothing of them may remain. */
    const gone = new Set<number>();
    const k = performance.now();
    await Promise.all(invs.map((inv) => makeNetns(inv.netns)));
    const unknown = Array.from({ length: Math.ceil(n / 4) }, (_, i): CniInvocation => ({
      lab, node: target, containerId: `cnistormunknown${hex}${i}`, netns: podNetns(lab, 'cnistorm', `never-${i}`), podNamespace: 'cnistorm', podName: `never-${i}`,
    }));
    await Promise.all([
      ...invs.map(async (inv, i) => {
        if (i % 5 === 1) {
          const [add] = await Promise.all([chainAdd(inv, list), sleep(Math.random() * 80).then(async () => answers.push(...(await chainDel(inv, list))))]);
          answers.push(...add);
          // The runtime's ADD was cancelled by its DEL: it DELs once more when the ADD returns.
          answers.push(...(await chainDel(inv, list, add.at(-1)?.result ?? add[0]?.result)));
          gone.add(i);
        } else if (i % 5 === 2) {
          const add = await chainAdd(inv, list, Math.random() * 60);
          answers.push(...add);
          answers.push(...(await chainDel(inv, list, add[0]?.result)));
          gone.add(i);
        } else {
          const add = await chainAdd(inv, list);
          answers.push(...add);
          const last = add.at(-1)!;
          if (last.kind === 'ok' && last.result) results.set(i, last.result);
          else {
            answers.push(...(await chainDel(inv, list, add[0]?.result)));
            gone.add(i);
          }
          if (i % 5 === 3 && last.kind === 'ok') {
            const prev = add[0]!.result;
            answers.push(...(await Promise.all([callPlugin(inv, 'ADD', list, sluice, prev), callPlugin(inv, 'ADD', list, sluice, prev)])));
          }
        }
      }),
      ...unknown.map(async (inv) => answers.push(...(await chainDel(inv, list)))),
    ]);
    const storm = Math.round(performance.now() - k);
    // Whole or nothing: attached (port, flows, route via the gateway) exactly the containers still ADDed.
    const attached = (await chaos.attachedPods(target)).filter((p) => p.podNamespace === 'cnistorm');
    const want = invs.filter((_, i) => !gone.has(i)).map((inv) => inv.containerId).sort();
    const have = attached.map((p) => p.containerId).sort();
    if (want.join() !== have.join()) {
      chaos.broken++;
      console.error(`CNI storm: attached [${have.join(', ')}], but the runtime holds [${want.join(', ')}]`);
    }
    const half = await chaos.settledLeaks([target]);
    for (const l of half) console.error(`CNI storm: HALF-ATTACHED before the runtime's DELs: ${l}`);
    chaos.broken += half.length;
    // The Pods go away: the runtime's DELs, then the namespaces.
    await Promise.all(invs.map(async (inv, i) => {
      answers.push(...(await chainDel(inv, list, results.get(i))));
      await removeNetns(inv.netns);
    }));
    const bad = answers.filter((a) => a.kind === 'broken');
    chaos.broken += bad.length;
    for (const a of bad) console.error(`CNI storm: BROKEN ANSWER ${a.plugin} ${a.command}: ${a.detail}`);
    const count = (kind: string) => answers.filter((a) => a.kind === kind).length;
    const byCode = new Map<string, { n: number; first: string }>();
    for (const a of answers.filter((a) => a.kind === 'cni-error')) {
      const key = `${a.plugin} ${a.command} code ${a.code}`;
      const seen = byCode.get(key) ?? { n: 0, first: a.detail.slice(0, 100) };
      seen.n++;
      byCode.set(key, seen);
    }
    const codes = [...byCode].map(([key, { n, first }]) => `${n}× ${key}, e.g. "${first}"`).join('; ');
    const slowest = Math.max(0, ...answers.filter((a) => a.plugin === 'sluice-cni').map((a) => a.ms));
    console.error(`CNI storm: ${answers.length} plugin calls in ${storm} ms: ${count('ok')} succeeded, ${count('cni-error')} CNI errors (${codes || 'none'}), ${count('killed')} killed mid-call, ${bad.length} broken; slowest sluice-cni call ${slowest} ms; ${have.length} of ${n} containers attached after the storm, ${gone.size} DELeted whole`);
    return storm;
  });
}
