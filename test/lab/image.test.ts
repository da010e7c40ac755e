// test-schedule: exclusive: podman builds the image that the install suites also build (one content-addressed cache).
/**
 * The container image (npm run image → scripts/image.mjs): built from Debian packages and this
 * repository, cached by content (a second build is a cache hit), with every binary the DaemonSet
 * runs; inside it the agent's iptables backend detection picks the backend that holds the host's
 * rules (a network namespace with legacy rules, one with nft rules), as the agent does at start-up.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseYamlDocuments } from '../../daemon/kube-yaml.js';
import { AGENT_ENV, jemallocPath } from '../../daemon/node-flags.js';
import { repoRoot } from '../../lab/net/names.js';

const IMAGE_SCRIPT = join(repoRoot(), 'scripts', 'image.mjs');
const CONTAINERS_CONF = join(repoRoot(), 'install', 'image', 'containers.conf');
const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 64 << 20 });
  return { code: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}
const podman = (args: string[]) => run('podman', ['--runtime', 'runc', ...args], { CONTAINERS_CONF });

function build(): { image: string; cached: boolean; seconds: number; sizeBytes: number } {
  const r = run(process.execPath, [IMAGE_SCRIPT]);
  if (r.code !== 0) throw new Error(`image build failed (${r.code}):\n${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

const why = process.getuid?.() !== 0 ? 'needs root (podman, network namespaces)' : !has('podman') || !has('mmdebstrap') || !has('runc') ? 'needs podman, runc and mmdebstrap (npm run prepare-host)' : undefined;
if (why) {
  t.plan(0, why);
} else {
  const first = build();
  t.comment(`image ${first.image}: ${(first.sizeBytes / 2 ** 20).toFixed(0)} MiB, ${first.cached ? 'cache hit' : 'built'} in ${first.seconds} s`);

  t.test('cached by content: a second build with nothing changed is a cache hit', async (t) => {
    const second = build();
    t.equal(second.cached, true, `cache hit in ${second.seconds} s`);
    t.equal(second.image, first.image);
  });

  t.test("the manifests run this image", async (t) => {
    for (const file of ['sluice.yaml', 'uninstall.yaml']) {
      const docs = parseYamlDocuments(readFileSync(join(repoRoot(), 'install', file), 'utf8')).map((d) => ('value' in d ? d.value : undefined)) as { kind?: string; spec?: { template?: { spec?: Record<string, { image?: string }[]> } } }[];
      const images = docs.filter((d) => d?.kind === 'DaemonSet').flatMap((d) => ['initContainers', 'containers'].flatMap((k) => (d.spec?.template?.spec?.[k] ?? []).map((c) => c.image)));
      t.ok(images.length > 0, `${file}: DaemonSet containers`);
      // A short name "sluice:V" is docker.io/library/sluice:V on a node (containerd) and localhost/sluice:V for podman: both tags exist.
      for (const image of images) t.equal(`localhost/${image}`, first.image, `${file}: ${image}`);
    }
  });

  t.test('every binary the DaemonSet runs is in the image and runs', async (t) => {
    const inImage = (script: string) => podman(['run', '--rm', '--network', 'none', first.image, 'sh', '-c', script]);
    const checks: [string, RegExp][] = [
      ['sluice-agent --help', /The sluice node agent/],
      ['sluice-controller --help', /The sluice controller/],
      ['sluicectl --help', /sluicectl/],
      ['kubectl-sluice whatif --help', /what a policy change would do to the live cluster/],
      ['CNI_COMMAND=VERSION sluice-cni </dev/null', /"supportedVersions"/],
      ['ovs-vswitchd --version', /Open vSwitch/],
      ['ovsdb-server --version', /Open vSwitch/],
      ['test -x /usr/share/openvswitch/scripts/ovs-ctl && echo ovs-ctl', /ovs-ctl/],
      ['iptables-nft -V', /nf_tables/],
      ['iptables-legacy -V', /legacy/],
      ['nft --version', /nftables/],
      ['ip -V', /iproute2/],
      // The userspace datapath (datapath: netdev) turns TX checksum offload off on Pod veths.
      ['ethtool --version', /ethtool/],
      ['node --version', new RegExp(`^${process.version.replace(/\./g, '\\.')}`)],
    ];
    for (const [cmd, re] of checks) {
      const r = inImage(cmd);
      t.equal(r.code, 0, `${cmd}: exit 0${r.code ? `: ${r.stderr.trim()}` : ''}`);
      t.match(r.stdout, re, cmd);
    }
    // The agent's launcher sets its environment defaults (daemon/node-flags.ts), and the
    // container's own value wins: sh -x shows the values the exec'd node gets.
    for (const [given, expect] of [['', AGENT_ENV.MALLOC_ARENA_MAX], ['MALLOC_ARENA_MAX=4 ', '4']] as const) {
      const r = inImage(`${given}sh -x /usr/local/bin/sluice-agent --help 2>&1 >/dev/null | grep MALLOC_ARENA_MAX`);
      t.match(r.stdout, new RegExp(`export MALLOC_ARENA_MAX=${expect}\\b`), `${given || 'no value given: '}the agent starts with MALLOC_ARENA_MAX=${expect}`);
    }
    // The agent runs on the image's jemalloc: its launcher preloads it, and node maps it.
    const lib = jemallocPath()!;
    const preload = inImage(`test -f ${lib} && sh -x /usr/local/bin/sluice-agent --help 2>&1 >/dev/null | grep LD_PRELOAD`);
    t.match(preload.stdout, new RegExp(`export LD_PRELOAD=${lib.replace(/\./g, '\\.')}$`, 'm'), `the launcher preloads ${lib}, which the image holds${preload.code ? `: ${preload.stderr}` : ''}`);
    const mapped = inImage(`LD_PRELOAD=${lib} node -e "process.stdout.write(String(require('fs').readFileSync('/proc/self/maps', 'utf8').includes('libjemalloc')))"`);
    t.equal(mapped.stdout.trim(), 'true', 'node runs with it mapped');
    const lean = inImage('ls /usr/bin/gcc /usr/bin/cc /usr/bin/npm /root/.npm /usr/share/doc/openvswitch-switch 2>/dev/null; true');
    t.equal(lean.stdout.trim(), '', 'no compiler, npm, npm cache or documentation');
  });

  t.test("inside the container the agent picks the backend that holds the host's rules", async (t) => {
    const detect = (ns: string) =>
      podman(['run', '--rm', '--privileged', '--network', `ns:/run/netns/${ns}`, first.image, 'node', '--input-type=module', '-e',
        "const m = await import('/usr/local/lib/sluice/dist/daemon/hostnet/iptables-backend.js'); console.log(JSON.stringify(await m.resolveIptables('auto')));"]);
    const cases: [string, string, string][] = [
      ['sl-img-legacy', 'iptables-legacy', 'legacy'],
      ['sl-img-nft', 'iptables-nft', 'nft'],
    ];
    for (const [ns, bin, want] of cases) {
      run('ip', ['netns', 'del', ns]);
      t.equal(run('ip', ['netns', 'add', ns]).code, 0);
      t.teardown(() => void run('ip', ['netns', 'del', ns]));
      for (let i = 0; i < 3; i++) t.equal(run('ip', ['netns', 'exec', ns, bin, '-t', 'mangle', '-A', 'PREROUTING', '-m', 'comment', '--comment', `host rule ${i}`, '-j', 'ACCEPT']).code, 0);
      const r = detect(ns);
      t.equal(r.code, 0, `detection ran in ${ns}${r.code ? `: ${r.stderr}` : ''}`);
      const got = JSON.parse(r.stdout.trim()) as { commands: { backend?: string; iptables: string }; why: string };
      t.equal(got.commands.backend, want, `${ns}: ${got.why}`);
      t.equal(got.commands.iptables, `iptables-${want}`);
    }
  });
}
