/**
 * The V8 flags and environment the agent's node process starts with, wherever it is started (the
 * image's sluice-agent wrapper, the lab, the benches): they can only be given on the command line
 * (or NODE_OPTIONS) and in the environment, not set once the process runs.
 *
 * --max-semi-space-size (MiB): the young generation is two semi-spaces (plus a third during a
 * scavenge) that V8 grows up to 16 MiB each on a 64-bit host whenever allocation is fast, as it
 * is while the initial lists are parsed and the first compile runs; it keeps them at that size
 * afterwards, ~30–45 MiB of RSS holding no live data. The agent's live heap is a few tens of MiB
 * of long-lived state (cluster view, compiled flows), so small semi-spaces cost only more, shorter
 * scavenges.
 *
 * --expose-gc: for collectStartupGarbage() below.
 */
export const AGENT_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--expose-gc'];

/**
 * Environment the agent's node process starts with (a value set by the user wins).
 *
 * MALLOC_ARENA_MAX: glibc gives each thread that allocates its own malloc arena (up to 8 per core),
 * and node's threads (libuv's pool: DNS, file I/O, crypto for cookies; V8's compiler and GC
 * helpers) each keep one with free memory that is rarely returned. Two arenas cut the agent's
 * settled RSS by 5–9 MiB at 10 000 Pods and 1 000 policies (bench/cold-start --env), with the
 * same start-up time: the agent's allocation is on its main thread.
 */
export const AGENT_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };

/**
 * One full collection once start-up is done. Start-up leaves tens of MiB of dead objects in the
 * old generation (the initial list bodies and their parsed objects, the first flow bundle's
 * text), and an agent that then idles allocates too little for V8 to collect them soon: its RSS
 * would stay at the start-up peak. Returns whether it ran (only with --expose-gc).
 */
export function collectStartupGarbage(): boolean {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc !== 'function') return false;
  gc();
  return true;
}
