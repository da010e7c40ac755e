/**
 * Shared by the cni-* integration tests: builds and runs the real plugin executables, a handler
 * that records every call and can be told to block or fail, and a logger whose lines tests can
 * wait for (ordering is asserted on events, never on elapsed time).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino, { type Logger } from 'pino';
import type { CniHandler, GcAttachment, PodRequest } from '../../daemon/cni/server.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** The native front end the runtime runs (it forwards the invocation; the agent runs the checks). */
export const FRONT_END_BINARY = join(ROOT, 'dist', 'bin', 'sluice-cni');
/** The whole plugin in one executable (it runs the checks itself, then asks the agent). */
export const STANDALONE_BINARY = join(ROOT, 'dist', 'bin', 'sluice-cni-standalone');
/**
 * The executable `runCni` runs: the front end, unless the test file asks for the standalone plugin
 * (SLUICE_CNI_UNDER_TEST=standalone), so that one suite of expectations holds for both.
 */
export const CNI_BINARY = process.env.SLUICE_CNI_UNDER_TEST === 'standalone' ? STANDALONE_BINARY : FRONT_END_BINARY;

/** Builds both plugin executables with the project's build script (a no-op when up to date). */
export function buildCniBinary(): string {
  return execFileSync(process.execPath, [join(ROOT, 'scripts', 'build-cni.mjs')], { cwd: ROOT }).toString().trim();
}

/** A private temp directory under /tmp with the cn- prefix; removed by the returned function. */
export function tempDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync('/tmp/cn-');
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface CniRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON, or undefined when stdout is empty. */
  json: Record<string, unknown> | undefined;
}

/**
 * Runs the binary the way a runtime does: CNI_* in the environment, config on stdin. PATH points
 * nowhere, so the run also proves the binary needs no node (or anything else) on PATH.
 */
export function runCni(env: Record<string, string>, stdin: string | object, binary = CNI_BINARY): Promise<CniRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, [], { env: { PATH: '/nonexistent', ...env }, cwd: '/', stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      let json: Record<string, unknown> | undefined;
      if (stdout.trim() !== '') {
        try {
          json = JSON.parse(stdout) as Record<string, unknown>;
        } catch {
          reject(new Error(`sluice-cni printed non-JSON on stdout: ${stdout}`));
          return;
        }
      }
      resolve({ code, stdout, stderr, json });
    });
    child.stdin.on('error', () => undefined); // the plugin may exit before reading stdin
    child.stdin.end(typeof stdin === 'string' ? stdin : JSON.stringify(stdin));
  });
}

/**
 * Leaves a socket file nobody listens on, as an agent killed with -9 does: a child node listens,
 * then SIGKILLs itself before it could unlink anything.
 */
export function makeStaleSocket(path: string): void {
  const script = `require('node:net').createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, 'SIGKILL'))`;
  try {
    execFileSync(process.execPath, ['-e', script], { stdio: 'ignore' });
  } catch {
    // expected: the child dies of SIGKILL
  }
}

/** Polls `cond` until true (synchronisation only; the cap just turns a hang into a failure). */
export async function until(cond: () => boolean, what: string, capMs = 20_000): Promise<void> {
  const started = Date.now();
  while (!cond()) {
    if (Date.now() - started > capMs) throw new Error(`gave up waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

/** A pino logger that keeps every line as an object. */
export function capturingLogger(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { log, lines };
}

export type Call =
  | { op: 'add' | 'del' | 'check'; phase: 'start' | 'end'; req: PodRequest }
  | { op: 'status'; phase: 'start' | 'end' }
  | { op: 'gc'; phase: 'start' | 'end'; valid: GcAttachment[]; networkName: string };

/** Records every call; `behave` decides per call what happens (default: succeed at once). */
export class RecordingHandler implements CniHandler {
  calls: Call[] = [];
  behave: (op: string, req?: PodRequest) => Promise<void> = async () => undefined;

  private async record(start: Call, end: Call, req?: PodRequest): Promise<void> {
    this.calls.push(start);
    try {
      await this.behave(start.op, req);
    } finally {
      this.calls.push(end);
    }
  }

  add(req: PodRequest) {
    return this.record({ op: 'add', phase: 'start', req }, { op: 'add', phase: 'end', req }, req);
  }
  del(req: PodRequest) {
    return this.record({ op: 'del', phase: 'start', req }, { op: 'del', phase: 'end', req }, req);
  }
  check(req: PodRequest) {
    return this.record({ op: 'check', phase: 'start', req }, { op: 'check', phase: 'end', req }, req);
  }
  status() {
    return this.record({ op: 'status', phase: 'start' }, { op: 'status', phase: 'end' });
  }
  gc(valid: GcAttachment[], req: { networkName: string }) {
    return this.record({ op: 'gc', phase: 'start', valid, networkName: req.networkName }, { op: 'gc', phase: 'end', valid, networkName: req.networkName });
  }

  count(op: string, phase: 'start' | 'end' = 'start'): number {
    return this.calls.filter((c) => c.op === op && c.phase === phase).length;
  }
}
