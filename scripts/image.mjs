#!/usr/bin/env node
/**
 * `npm run image`: the sluice container image (agent, sluicectl, sluice-cni, Open vSwitch, iptables
 * with both backends, nftables, iproute2), built from this repository and Debian's packages alone
 * (no registry): mmdebstrap makes the base root filesystem, podman imports it, and a COPY-only build
 * adds the application (a Node 20 runtime from the npm registry, the compiled agent, production
 * node_modules). Reproducible and cached by content:
 *   - the base (suite, package list, options) is built once per content hash and kept as
 *     /var/cache/sluice-image/rootfs-<hash>.tar and image localhost/sluice-base:<hash>;
 *   - the application layer is rebuilt only when its inputs change (dist/, package-lock.json, the
 *     Node version, this recipe); an image whose io.sluice.content label matches is left alone.
 *
 * usage: node scripts/image.mjs [--tag NAME] [--export FILE.tar [--format docker-archive|oci-archive]]
 * The image is tagged localhost/sluice:<version> and docker.io/library/sluice:<version>, the name a
 * node's containerd gives `sluice:<version>` (install/sluice.yaml's image) after `ctr images import`.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
export const IMAGE_NAME = `localhost/sluice:${PKG.version}`;
const CACHE = process.env.SLUICE_IMAGE_CACHE ?? '/var/cache/sluice-image';
export const CONTAINERS_CONF = join(ROOT, 'install', 'image', 'containers.conf');
/** Fixed file times: the same inputs give the same layers. */
const EPOCH = 1700000000;

/** The base root filesystem: what the DaemonSet's containers run besides sluice itself. */
const BASE = {
  suite: 'bookworm',
  variant: 'minbase',
  // openvswitch-switch: ovs-vswitchd/ovsdb-server/ovs-ctl (the ovs container); iptables: both the nft and
  // the legacy backend; kmod: ovs-ctl loads the openvswitch module; procps: ovs-ctl's process checks;
  // ethtool: the userspace datapath (datapath: netdev) turns TX checksum offload off on Pod veths
  // through a perl helper (perl-base is in every Debian system); ethtool is its per-Pod fallback;
  // libjemalloc2: the agent's allocator (daemon/node-flags.ts agentEnv).
  packages: ['ca-certificates', 'ethtool', 'iproute2', 'iptables', 'kmod', 'libjemalloc2', 'nftables', 'openvswitch-switch', 'procps'],
  // Lean: no documentation, manual pages or translations.
  dpkgopts: ['path-exclude=/usr/share/doc/*', 'path-exclude=/usr/share/man/*', 'path-exclude=/usr/share/locale/*', 'path-include=/usr/share/locale/locale.alias'],
  recipe: 1,
};

const log = (msg) => process.stderr.write(`image: ${msg}\n`);
const sha = (data) => createHash('sha256').update(data).digest('hex');

/** podman with runc and no default ulimits (crun and raising rlimits both fail on these hosts). */
export function podman(args, opts = {}) {
  const r = spawnSync('podman', ['--runtime', 'runc', ...args], { env: { ...process.env, CONTAINERS_CONF }, encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`podman ${args[0]}: ${r.error.message} (is podman installed? npm run prepare-host)`);
  return r;
}
function podmanOk(args, opts) {
  const r = podman(args, opts);
  if (r.status !== 0) throw new Error(`podman ${args.join(' ')} failed (${r.status}): ${(r.stderr ?? '').trim()}`);
  return (r.stdout ?? '').trim();
}

/** sha256 over every file under the given paths (relative names and contents, sorted). */
function treeHash(paths) {
  const h = createHash('sha256');
  const walk = (p) => {
    const st = statSync(p);
    if (st.isDirectory()) {
      for (const e of readdirSync(p).sort()) walk(join(p, e));
      return;
    }
    h.update(relative(ROOT, p)).update('\0').update(readFileSync(p)).update('\0');
  };
  for (const p of paths) walk(p);
  return h.digest('hex');
}

function baseImage() {
  const key = sha(JSON.stringify(BASE)).slice(0, 16);
  const tag = `localhost/sluice-base:${key}`;
  if (podman(['image', 'exists', tag]).status === 0) return { tag, built: false };
  mkdirSync(CACHE, { recursive: true });
  const tar = join(CACHE, `rootfs-${key}.tar`);
  if (!existsSync(tar)) {
    log(`building the base root filesystem from Debian ${BASE.suite} packages (mmdebstrap, ~40 s)`);
    // mmdebstrap picks its output format from the name: keep the .tar suffix.
    const tmp = join(CACHE, `rootfs-${key}.partial.tar`);
    execFileSync('mmdebstrap', [
      `--variant=${BASE.variant}`, `--include=${BASE.packages.join(',')}`, ...BASE.dpkgopts.map((o) => `--dpkgopt=${o}`), BASE.suite, tmp,
    ], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, SOURCE_DATE_EPOCH: String(EPOCH) } });
    renameSync(tmp, tar);
  }
  podmanOk(['import', tar, tag]);
  return { tag, built: true };
}

/** The official Node binary of the host's version, from the npm registry (node-linux-<arch>). */
function nodeBinary() {
  const version = process.version.slice(1);
  const arch = process.arch === 'arm64' ? 'arm64' : 'x64';
  const dir = join(CACHE, `node-${version}-${arch}`);
  const bin = join(dir, 'package', 'bin', 'node');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  log(`fetching node-linux-${arch}@${version} from the npm registry`);
  const tgz = execFileSync('npm', ['pack', `node-linux-${arch}@${version}`, '--pack-destination', dir, '--silent'], { encoding: 'utf8' }).trim().split('\n').pop();
  execFileSync('tar', ['-xzf', join(dir, tgz), '-C', dir, 'package/bin/node']);
  rmSync(join(dir, tgz));
  return bin;
}

/** Production dependencies for package-lock.json, installed once per lock file. */
function productionModules() {
  const lock = readFileSync(join(ROOT, 'package-lock.json'));
  const dir = join(CACHE, `node_modules-${sha(lock).slice(0, 16)}`);
  if (existsSync(join(dir, 'node_modules'))) return join(dir, 'node_modules');
  const tmp = `${dir}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  copyFileSync(join(ROOT, 'package.json'), join(tmp, 'package.json'));
  copyFileSync(join(ROOT, 'package-lock.json'), join(tmp, 'package-lock.json'));
  log('installing production dependencies (npm ci --omit=dev)');
  // No install scripts: the only native dependency (netlink) ships prebuilt binaries; the npm cache
  // stays outside the image.
  execFileSync('npm', ['ci', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error', '--cache', join(tmp, '.npm-cache')], { cwd: tmp, stdio: ['ignore', 'ignore', 'inherit'] });
  rmSync(join(tmp, '.npm-cache'), { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return join(dir, 'node_modules');
}

const APP_DIRS = ['dist/daemon', 'dist/cni', 'dist/install'];
/** The plugin's front end and the standalone plugin it execs; installed side by side on the host. */
const CNI_BINARIES = ['dist/bin/sluice-cni', 'dist/bin/sluice-cni-standalone'];

/** A launcher script; `env` values are defaults that the container's own environment overrides. */
function wrapper(main, flags = [], env = {}) {
  const exports = Object.entries(env).map(([k, v]) => `export ${k}="\${${k}:-${v}}"\n`).join('');
  return `#!/bin/sh\n${exports}exec /usr/local/bin/node ${flags.map((f) => `${f} `).join('')}/usr/local/lib/sluice/${main} "$@"\n`;
}

/** The agent's V8 flags and environment (dist/daemon/node-flags.js, built with the app); none before a build. */
const flagsModule = join(ROOT, 'dist', 'daemon', 'node-flags.js');
const flagsOf = existsSync(flagsModule) ? await import(pathToFileURL(flagsModule).href) : {};
const agentNodeFlags = flagsOf.AGENT_NODE_FLAGS ?? [];
// The image installs jemalloc (BASE.packages), so the agent's launcher preloads it.
const agentEnv = flagsOf.agentEnv?.(() => true) ?? flagsOf.AGENT_ENV ?? {};

function build() {
  const t0 = Date.now();
  for (const d of [...APP_DIRS, ...CNI_BINARIES]) {
    if (!existsSync(join(ROOT, d))) throw new Error(`${d} is missing: run npm run build first (npm run image does)`);
  }
  const base = baseImage();
  const node = nodeBinary();
  const modules = productionModules();
  const content = sha(JSON.stringify({
    base: base.tag, node: process.version, arch: process.arch,
    lock: sha(readFileSync(join(ROOT, 'package-lock.json'))),
    app: treeHash([...APP_DIRS.map((d) => join(ROOT, d)), ...CNI_BINARIES.map((f) => join(ROOT, f)), join(ROOT, 'package.json')]),
    recipe: sha(readFileSync(fileURLToPath(import.meta.url))),
  })).slice(0, 16);
  const have = podman(['image', 'inspect', IMAGE_NAME, '--format', '{{index .Labels "io.sluice.content"}}']);
  if (have.status === 0 && have.stdout.trim() === content) {
    log(`${IMAGE_NAME} is up to date (content ${content}) [${Date.now() - t0} ms]`);
    return { content, cached: true, ms: Date.now() - t0 };
  }

  const stage = join(CACHE, `stage-${process.pid}`);
  rmSync(stage, { recursive: true, force: true });
  try {
    const lib = join(stage, 'root', 'usr', 'local', 'lib', 'sluice');
    const bin = join(stage, 'root', 'usr', 'local', 'bin');
    mkdirSync(bin, { recursive: true });
    mkdirSync(lib, { recursive: true });
    for (const d of APP_DIRS) cpSync(join(ROOT, d), join(lib, d), { recursive: true, filter: (src) => !src.endsWith('.map') });
    writeFileSync(join(lib, 'package.json'), JSON.stringify({ name: PKG.name, version: PKG.version, type: 'module' }, null, 2));
    cpSync(modules, join(lib, 'node_modules'), { recursive: true });
    copyFileSync(node, join(bin, 'node'));
    for (const f of CNI_BINARIES) copyFileSync(join(ROOT, f), join(bin, basename(f)));
    writeFileSync(join(bin, 'sluice-agent'), wrapper('dist/daemon/main.js', agentNodeFlags, agentEnv));
    writeFileSync(join(bin, 'sluicectl'), wrapper('dist/daemon/sluicectl.js'));
    writeFileSync(join(bin, 'sluice-controller'), wrapper('dist/daemon/controller/main.js'));
    // kubectl finds plugins by name on PATH: `kubectl sluice whatif ...` runs sluicectl.
    writeFileSync(join(bin, 'kubectl-sluice'), wrapper('dist/daemon/sluicectl.js'));
    for (const f of ['node', ...CNI_BINARIES.map((b) => basename(b)), 'sluice-agent', 'sluice-controller', 'sluicectl', 'kubectl-sluice']) chmodSync(join(bin, f), 0o755);
    writeFileSync(join(stage, 'Containerfile'), [
      `FROM ${base.tag}`,
      'COPY root/ /',
      `LABEL io.sluice.content=${content} org.opencontainers.image.title=sluice org.opencontainers.image.version=${PKG.version}`,
      'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin',
      '',
    ].join('\n'));
    log(`building ${IMAGE_NAME} (content ${content})`);
    podmanOk(['build', '--quiet', '--timestamp', String(EPOCH), '-t', IMAGE_NAME, '-t', `docker.io/library/sluice:${PKG.version}`, '-f', join(stage, 'Containerfile'), stage]);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
  return { content, cached: false, ms: Date.now() - t0 };
}

function main(argv) {
  const opt = (name) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const format = opt('--format') ?? 'docker-archive';
  if (!['docker-archive', 'oci-archive'].includes(format)) throw new Error(`--format must be docker-archive or oci-archive, got ${format}`);
  const result = build();
  const size = Number(podmanOk(['image', 'inspect', IMAGE_NAME, '--format', '{{.Size}}']));
  log(`${IMAGE_NAME}: ${(size / 2 ** 20).toFixed(0)} MiB, ${result.cached ? 'cached' : 'built'} in ${(result.ms / 1000).toFixed(1)} s`);
  const out = opt('--export');
  if (out) {
    rmSync(out, { force: true });
    podmanOk(['save', '--format', format, '-o', out, `docker.io/library/sluice:${PKG.version}`]);
    log(`exported ${format} to ${out} (${(statSync(out).size / 2 ** 20).toFixed(0)} MiB): ctr -n k8s.io images import ${out} | kind load image-archive ${out} | podman load -i ${out}`);
  }
  process.stdout.write(`${JSON.stringify({ image: IMAGE_NAME, content: result.content, cached: result.cached, seconds: result.ms / 1000, sizeBytes: size })}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`image: ${err.message}\n`);
    process.exit(1);
  }
}
