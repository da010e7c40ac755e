/**
 * The agent's V8 flags (daemon/node-flags.ts): node accepts them, they bound the young
 * generation and expose gc() to the agent's full collections (daemon/quiet-collector.ts); its
 * environment preloads jemalloc where it is installed.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { AGENT_ENV, AGENT_NODE_FLAGS, agentEnv, JEMALLOC_CONF, jemallocPath } from '../../daemon/node-flags.js';

t.test('node starts with the flags: semi-spaces bounded, gc exposed', async (t) => {
  // Allocates fast enough that V8 would grow the young generation to its default maximum.
  const script = `
    const keep = [];
    for (let i = 0; i < 2e6; i++) { const o = { i, s: String(i) }; if (i % 16 === 0) keep.push(o); }
    const young = require('node:v8').getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
    console.log(JSON.stringify({ young: young.space_size, gc: typeof globalThis.gc }));`;
  const run = (flags: readonly string[]) => {
    const r = spawnSync(process.execPath, [...flags, '-e', script], { encoding: 'utf8' });
    t.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as { young: number; gc: string };
  };
  const semi = Number(/^--max-semi-space-size=(\d+)$/.exec(AGENT_NODE_FLAGS.find((f) => f.startsWith('--max-semi-space-size=')) ?? '')?.[1]);
  t.ok(semi > 0, 'a semi-space bound is set');
  const bounded = run(AGENT_NODE_FLAGS);
  // new_space reports the two semi-spaces.
  t.ok(bounded.young <= 2 * semi * 2 ** 20, `young generation ${bounded.young} bytes within 2 x ${semi} MiB`);
  t.equal(bounded.gc, 'function');
  const plain = run([]);
  t.ok(plain.young > bounded.young, `without the flags it grows further (${plain.young} bytes)`);
  t.equal(plain.gc, 'undefined');
});

t.test('agentEnv: jemalloc preloaded when it is installed, the glibc settings otherwise', async (t) => {
  t.equal(jemallocPath('x64'), '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2');
  t.equal(jemallocPath('arm64'), '/usr/lib/aarch64-linux-gnu/libjemalloc.so.2');
  t.equal(jemallocPath('s390x'), undefined);
  t.same(agentEnv(() => false), AGENT_ENV, 'not installed: glibc tunables only');
  const lib = jemallocPath();
  t.same(agentEnv((p) => p === lib), { ...AGENT_ENV, LD_PRELOAD: lib, MALLOC_CONF: JEMALLOC_CONF });
});

const lib = jemallocPath();
const notInstalled = !lib || !existsSync(lib) ? `${lib ?? 'jemalloc'} is not installed on this host (npm run prepare-host installs it)` : false;
t.test('a node process started with agentEnv() runs on jemalloc', { skip: notInstalled }, async (t) => {
  const r = spawnSync(process.execPath, ['-e', "const m = require('fs').readFileSync('/proc/self/maps', 'utf8'); console.log(m.includes('libjemalloc'))"], {
    encoding: 'utf8',
    env: { ...process.env, ...agentEnv() },
  });
  t.equal(r.status, 0, r.stderr);
  t.equal(r.stdout.trim(), 'true', 'jemalloc mapped');
  t.equal(r.stderr, '', 'no loader or allocator complaint (MALLOC_CONF read as given)');
});
