/** Thin wrappers over child processes; every failure names the command and carries its stderr. */
import { spawn } from 'node:child_process';

export class CommandError extends Error {
  constructor(
    readonly command: string[],
    readonly exitCode: number | null,
    readonly stdout: string,
    readonly stderr: string,
  ) {
    super(`${command.join(' ')} failed (exit ${exitCode}): ${stderr.trim() || stdout.trim() || 'no output'}`);
  }
}

export interface RunOptions {
  input?: string;
  env?: NodeJS.ProcessEnv;
  /** Resolve instead of throwing on a non-zero exit. */
  allowFail?: boolean;
  timeoutMs?: number;
}

export interface RunResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

export function run(file: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs) : undefined;
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(new CommandError([file, ...args], null, stdout, `${err.message}\n${stderr}`));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const res = { exitCode: code, stdout, stderr: signal ? `${stderr}killed by ${signal}` : stderr };
      if (code === 0 || opts.allowFail) resolve(res);
      else reject(new CommandError([file, ...args], code, stdout, res.stderr));
    });
    child.stdin.on('error', () => undefined); // the child may exit without reading stdin
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs a command inside a named network namespace. */
export const runIn = (netns: string, file: string, args: string[], opts: RunOptions = {}): Promise<RunResult> =>
  run('ip', ['netns', 'exec', netns, file, ...args], opts);

/** Feeds `ip -batch -` (one line per command) inside a namespace, or the current one when netns is null. */
export const ipBatch = (netns: string | null, lines: string[]): Promise<RunResult> =>
  lines.length === 0
    ? Promise.resolve({ exitCode: 0, stdout: '', stderr: '' })
    : run('ip', [...(netns ? ['-n', netns] : []), '-batch', '-'], { input: lines.join('\n') + '\n' });

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
