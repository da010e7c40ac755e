#!/usr/bin/env node
// Builds the CNI plugin's two executables into dist/bin/, each only when it is older than its
// sources:
//   - sluice-cni: the native front end (cni/native/sluice-cni.c), compiled statically with the
//     system C compiler; the per-command default timeouts come from cni/protocol.ts (its compiled
//     dist/cni/protocol.js, so tsc runs first: `npm run build` does);
//   - sluice-cni-standalone: the whole plugin (cni/main.ts) in one executable (bun --compile),
//     needing neither Node.js nor npm packages on the node.
// Then proves that both run with a PATH that has no node on it.
//
//   node scripts/build-cni.mjs [--force]
//
// Exit 0 with "sluice-cni: up to date" or "sluice-cni: built ..." on stdout; non-zero with the
// reason on stderr.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const binDir = join(root, 'dist', 'bin');
const frontEnd = join(binDir, 'sluice-cni');
const standalone = join(binDir, 'sluice-cni-standalone');
const bun = join(root, 'node_modules', '.bin', 'bun');
const cniDir = join(root, 'cni');
const nativeSource = join(cniDir, 'native', 'sluice-cni.c');
const compiledProtocol = join(root, 'dist', 'cni', 'protocol.js');
const self = fileURLToPath(import.meta.url);

/** Everything the standalone plugin is built from: its sources, this script, the bun release. */
function standaloneSources() {
  const files = readdirSync(cniDir)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => join(cniDir, f));
  files.push(self);
  const bunPackage = join(root, 'node_modules', 'bun', 'package.json');
  if (existsSync(bunPackage)) files.push(bunPackage);
  return files;
}

function upToDate(output, sources) {
  if (!existsSync(output)) return false;
  const built = statSync(output).mtimeMs;
  return sources.every((f) => statSync(f).mtimeMs < built);
}

/** Runs the binary as a runtime would for VERSION, with no node reachable through PATH. */
function verify(binary) {
  const out = execFileSync(binary, [], {
    env: { PATH: '/nonexistent', CNI_COMMAND: 'VERSION' },
    input: '{"cniVersion":"1.1.0"}',
    cwd: '/',
    timeout: 10_000,
  }).toString();
  const answer = JSON.parse(out);
  if (answer.cniVersion !== '1.1.0' || !Array.isArray(answer.supportedVersions) || !answer.supportedVersions.includes('1.1.0')) {
    throw new Error(`${relative(root, binary)} answered VERSION with ${out.trim()}`);
  }
}

/** Builds `output` through `make(tmp)` into a private name, then renames: concurrent builds never see half a file. */
async function buildInto(output, make) {
  mkdirSync(dirname(output), { recursive: true });
  const tmp = `${output}.tmp-${process.pid}-${Date.now()}`;
  try {
    await make(tmp);
    chmodSync(tmp, 0o755);
    renameSync(tmp, output);
  } catch (err) {
    rmSync(tmp, { force: true });
    const stderr = err && typeof err === 'object' && 'stderr' in err && err.stderr ? String(err.stderr) : '';
    throw new Error(`building ${relative(root, output)} failed: ${err instanceof Error ? err.message : String(err)}${stderr ? `\n${stderr}` : ''}`);
  }
}

function buildStandalone(tmp) {
  if (!existsSync(bun)) throw new Error(`${relative(root, bun)} not found: run npm ci (bun is a devDependency)`);
  execFileSync(
    bun,
    [
      'build',
      '--compile',
      '--minify',
      // Precompiled bytecode: measured ~40% faster start-up than source for this plugin.
      '--bytecode',
      // The binary runs in the runtime's working directory: it must not pick up a stray .env or
      // bunfig.toml there (a .env could even set CNI_* variables).
      '--no-compile-autoload-dotenv',
      '--no-compile-autoload-bunfig',
      join(cniDir, 'main.ts'),
      '--outfile',
      tmp,
    ],
    { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] },
  );
}

async function buildFrontEnd(tmp) {
  if (!existsSync(compiledProtocol)) throw new Error(`${relative(root, compiledProtocol)} not found: run tsc first (npm run build)`);
  const { DEFAULT_TIMEOUT_SECONDS } = await import(pathToFileURL(compiledProtocol).href);
  const timeouts = Object.entries(DEFAULT_TIMEOUT_SECONDS).map(([command, seconds]) => `-DSLUICE_TIMEOUT_${command}=${Number(seconds)}`);
  const cc = process.env.CC || 'cc';
  try {
    execFileSync(
      cc,
      // Static: the runtime may run it on any Linux host, with whatever C library it has.
      ['-std=c11', '-O2', '-static', '-s', '-Wall', '-Wextra', '-Werror', '-D_FORTIFY_SOURCE=2', ...timeouts, '-o', tmp, nativeSource],
      { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] },
    );
  } catch (err) {
    if (err && typeof err === 'object' && 'code' in err && err.code === 'ENOENT') {
      throw new Error(`no C compiler "${cc}" on PATH: install gcc and libc6-dev (npm run prepare-host does), or set CC`);
    }
    throw err;
  }
}

export async function buildCni({ force = false } = {}) {
  const started = Date.now();
  const built = [];
  const standaloneFresh = !force && upToDate(standalone, standaloneSources());
  if (!standaloneFresh) {
    await buildInto(standalone, buildStandalone);
    built.push(standalone);
  }
  if (force || !upToDate(frontEnd, [nativeSource, self, join(cniDir, 'protocol.ts'), compiledProtocol])) {
    await buildInto(frontEnd, buildFrontEnd);
    built.push(frontEnd);
  }
  if (built.length > 0) {
    verify(standalone);
    // The front end answers VERSION by running the standalone plugin next to it: this checks both.
    verify(frontEnd);
  }
  return { built, ms: Date.now() - started };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    const r = await buildCni({ force: process.argv.includes('--force') });
    if (r.built.length === 0) console.log(`sluice-cni: up to date (${relative(root, frontEnd)}, ${relative(root, standalone)})`);
    else {
      const sizes = r.built.map((f) => `${relative(root, f)} ${(statSync(f).size / 1048576).toFixed(1)} MiB`).join(', ');
      console.log(`sluice-cni: built ${sizes} in ${r.ms} ms; runs without node on PATH`);
    }
  } catch (err) {
    console.error(err instanceof Error ? err.message : String(err));
    process.exit(1);
  }
}
