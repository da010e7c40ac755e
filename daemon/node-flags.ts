import { existsSync } from 'node:fs';

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
 * --expose-gc: for the full collections the agent asks for when start-up is done and when it has
 * gone quiet after a burst (daemon/quiet-collector.ts).
 */
export const AGENT_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--expose-gc'];

/**
 * Environment the agent's node process starts with (a value set by the user wins). Both are
 * glibc's malloc tunables, for an agent on glibc's malloc: jemalloc, which agentEnv() below
 * preloads where it is installed, ignores them, as another C library does.
 *
 * MALLOC_ARENA_MAX: glibc gives each thread that allocates its own malloc arena (up to 8 per core),
 * and node's threads (libuv's pool: DNS, file I/O, crypto for cookies; V8's compiler and GC
 * helpers) each keep one with free memory that is rarely returned. Two arenas cut the agent's
 * settled RSS by 5–9 MiB at 10 000 Pods and 1 000 policies (bench/cold-start --env), with the
 * same start-up time: the agent's allocation is on its main thread.
 *
 * MALLOC_MMAP_THRESHOLD_: blocks of 16 KiB and more get their own mapping, returned to the kernel
 * when freed. The agent's large transient blocks are of that size: the 16 KiB chunks TLS reads
 * come in (its whole view from the controller or the API server at start and on every relist),
 * and the 64 KiB chunks of plain sockets (a new Pod's questions to other agents). Below glibc's
 * default (128 KiB, raised further as big blocks are freed) they are carved from the main heap
 * between long-lived small blocks, and once freed that memory stays resident: glibc only returns
 * the top of the heap. Measured at 150 000 Pods (bench/scale-lab), an agent restarted on a running
 * node settled at 135 MiB of RSS, 28 of it free heap that a malloc_trim() gave back; with 16 KiB,
 * 106 MiB. At 10 000 Pods (bench/cold-start --env, 3 starts of each kind) it settled 2–7 MiB
 * lower, and the cost, a mapping per such block, showed in start-up to ready: 5–12 % longer idle,
 * 9–22 % on a loaded machine.
 */
export const AGENT_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '16384' };

/**
 * Where Debian's jemalloc (package libjemalloc2, in the agent's image) is for the architecture
 * node runs on; undefined for one it is not built for here.
 */
export function jemallocPath(arch: string = process.arch): string | undefined {
  const triplet = ({ x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' } as Record<string, string>)[arch];
  return triplet && `/usr/lib/${triplet}/libjemalloc.so.2`;
}

/**
 * jemalloc's settings: a background thread returns freed pages after their decay time (10 s)
 * even while the agent idles; without it jemalloc returns them only as it allocates.
 */
export const JEMALLOC_CONF = 'background_thread:true';

/**
 * The agent's environment: AGENT_ENV, and jemalloc (LD_PRELOAD) when it is installed. glibc's
 * malloc returns freed memory only from the top of its heap, short of a malloc_trim() node never
 * calls; jemalloc returns any freed page. A whole cluster starting at once leaves an agent's
 * heap of small blocks (sockets, requests) freed around ones that stay, and at 150 000 Pods
 * (bench/scale-lab) the agents settled after the churn at 133 / 164 MiB of RSS on glibc (malloc_trim
 * through gdb: 117 / 135) and at 117 / 134 MiB on jemalloc. At 10 000 Pods with no such start
 * (bench/cold-start), jemalloc started as fast or faster and settled 1–4 MiB higher. `exists` is
 * asked whether the library is there (the image build says yes: the image installs it).
 */
export function agentEnv(exists: (path: string) => boolean = existsSync): Record<string, string> {
  const lib = jemallocPath();
  return { ...AGENT_ENV, ...(lib !== undefined && exists(lib) ? { LD_PRELOAD: lib, MALLOC_CONF: JEMALLOC_CONF } : {}) };
}
