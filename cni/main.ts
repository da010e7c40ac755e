#!/usr/bin/env node
/**
 * sluice-cni-standalone: the whole chained CNI plugin in one executable. It validates what the
 * runtime passed (environment and network config on stdin) exactly as CNI spec 1.1 asks, answers
 * VERSION itself, and forwards every other command to sluice-agent over a unix socket (one JSON
 * line each way, see protocol.ts). stdout carries only the CNI result or error object; diagnostics
 * go to stderr. The checks and the outputs live in invocation.ts, which the agent also runs for
 * the native front end (native/sluice-cni.c): the runtime starts the front end, which forwards the
 * raw invocation to the agent and execs this binary only when it has no answer to print (no
 * agent, VERSION, or input it does not parse), passing why on its command line.
 *
 * Compiled into one self-contained executable by scripts/build-cni.mjs, so it imports nothing but
 * node: builtins and this folder.
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
import { parseAgentFailureArg, prepare, responseShapeError, settle, type Exchange, type Outcome } from './invocation.js';
import type { CniRequest, CniResponse } from './protocol.js';

/** Largest agent response accepted (an ADD result is a few KiB). */
const MAX_RESPONSE_BYTES = 16 << 20;

function readStdin(): Promise<string | { unreadable: string }> {
  // A terminal means nobody piped a config (someone ran the binary by hand): do not block on it.
  if (process.stdin.isTTY) return Promise.resolve('');
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    process.stdin.on('data', (c: Buffer) => chunks.push(c));
    process.stdin.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    process.stdin.on('error', (err) => resolve({ unreadable: err.message }));
  });
}

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
      let response: unknown;
      try {
        response = JSON.parse(text);
      } catch (err) {
        finish({ ok: false, failure: { kind: 'malformed', why: (err as Error).message } });
        return;
      }
      const shapeError = responseShapeError(response);
      finish(shapeError === undefined ? { ok: true, response: response as CniResponse } : { ok: false, failure: { kind: 'malformed', why: shapeError } });
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

async function run(): Promise<Outcome> {
  const prepared = prepare(process.env, await readStdin());
  if (prepared.kind === 'answer') return prepared.outcome;
  const known = parseAgentFailureArg(process.argv.slice(2));
  const answer: Exchange = known ? { ok: false, failure: known } : await exchange(prepared.socketPath, prepared.request, prepared.timeoutS * 1000);
  return settle(prepared, answer);
}

function print(outcome: Outcome): void {
  for (const line of outcome.logs) process.stderr.write(`sluice-cni: ${line}\n`);
  if (outcome.stdout === undefined) process.exit(outcome.exitCode);
  process.stdout.write(outcome.stdout + '\n', () => process.exit(outcome.exitCode));
}

run().then(print, (err: unknown) => {
  // invocation.ts turns every failure into an Outcome; reaching here is a bug in this file.
  process.stderr.write(`sluice-cni: failed unexpectedly: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.stdout.write(`${JSON.stringify({ cniVersion: '1.1.0', code: 104, msg: `sluice-cni failed unexpectedly: ${String(err)}`, details: '' })}\n`, () => process.exit(1));
});
