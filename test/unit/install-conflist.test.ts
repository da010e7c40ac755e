import t from 'tap';
import { mkdtemp, readFile, readdir, rm, writeFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chainSluice, toConfList, unchainSluice } from '../../install/conflist.js';
import { installCni, uninstallCni } from '../../install/cni-install.js';

const awsLike = {
  cniVersion: '0.4.0',
  name: 'aws-cni',
  disableCheck: true,
  plugins: [
    { type: 'aws-cni', name: 'aws-cni', mtu: '9001' },
    { type: 'egress-cni', enabled: 'false' },
    { type: 'portmap', capabilities: { portMappings: true }, snat: true },
  ],
};

t.test('sluice goes right after the primary and its egress-cni (which adds v4if0 to IPv6 Pods); other fields are kept', async (t) => {
  const out = chainSluice(toConfList(awsLike), { socketPath: '/run/s.sock' });
  t.same(out.plugins.map((p) => p.type), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap']);
  t.equal(out.plugins[2]!.socketPath, '/run/s.sock');
  t.equal(out.disableCheck, true);
  t.same(chainSluice(out, { socketPath: '/run/s.sock' }), out, 'chaining twice changes nothing');
  t.same(unchainSluice(out), awsLike, 'unchain restores the original');
});

t.test('a sluice entry chained before an interface plugin (an older install) is moved behind it; one after it stays', async (t) => {
  const before = { ...awsLike, plugins: [awsLike.plugins[0]!, { type: 'sluice-cni' }, ...awsLike.plugins.slice(1)] };
  t.same(chainSluice(toConfList(before)).plugins.map((p) => p.type), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap']);
  const old = { ...awsLike, plugins: [awsLike.plugins[0]!, { type: 'egress-v4-cni' }, { type: 'sluice-cni' }] };
  t.same(chainSluice(toConfList({ ...old, plugins: [old.plugins[0]!, old.plugins[2]!, old.plugins[1]!] })).plugins.map((p) => p.type), ['aws-cni', 'egress-v4-cni', 'sluice-cni'], 'egress-v4-cni (before v1.13) too');
  const afterPortmap = { ...awsLike, plugins: [...awsLike.plugins, { type: 'sluice-cni', socketPath: '/x' }] };
  t.same(chainSluice(toConfList(afterPortmap), { socketPath: '/x' }), afterPortmap, 'a place after every interface plugin is kept');
});

t.test('a single-plugin .conf becomes a conflist', async (t) => {
  const out = chainSluice(toConfList({ cniVersion: '1.0.0', name: 'n', type: 'ptp', ipam: { type: 'host-local' } }));
  t.same(out, { cniVersion: '1.0.0', name: 'n', plugins: [{ type: 'ptp', ipam: { type: 'host-local' } }, { type: 'sluice-cni' }] });
});

t.test('bad configurations are refused with a reason', async (t) => {
  t.throws(() => toConfList([]), { name: 'ConfListError', message: /not a JSON object/ });
  t.throws(() => toConfList({ cniVersion: '1.0.0', plugins: [] }), /missing "name"/);
  t.throws(() => toConfList({ cniVersion: '1.0.0', name: 'x', plugins: [] }), /no primary CNI/);
  t.throws(() => toConfList({ cniVersion: '1.0.0', name: 'x', plugins: [{}] }), /plugins\[0\] has no "type"/);
  t.throws(() => chainSluice({ cniVersion: '1.0.0', name: 'x', plugins: [{ type: 'sluice-cni' }] }), /no primary/);
});

t.test('install and uninstall on a node directory', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'sluice-install-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  const conf = join(root, 'net.d');
  const bin = join(root, 'bin');
  await import('node:fs/promises').then((fs) => Promise.all([fs.mkdir(conf), fs.mkdir(bin)]));
  await t.rejects(installCni({ confDir: conf, binDir: bin }), /install the primary CNI first/);
  await writeFile(join(conf, '10-aws.conflist'), JSON.stringify(awsLike));
  await writeFile(join(conf, '99-other.conf'), JSON.stringify({ cniVersion: '1.0.0', name: 'z', type: 'bridge' }));
  const built = join(root, 'built');
  await import('node:fs/promises').then((fs) => fs.mkdir(built));
  const fakeBinary = join(built, 'sluice-cni');
  await writeFile(fakeBinary, '#!/bin/sh\necho front end\n');
  await t.rejects(
    installCni({ confDir: conf, binDir: bin, pluginBinary: fakeBinary }),
    /sluice-cni-standalone not found: the front end .* needs the standalone plugin beside it/,
    'a front end without its standalone plugin is refused',
  );
  t.same(await readdir(bin), [], 'and nothing was installed');
  await writeFile(join(built, 'sluice-cni-standalone'), '#!/bin/sh\necho standalone\n');

  const first = await installCni({ confDir: conf, binDir: bin, pluginBinary: fakeBinary });
  t.same(first, { config: join(conf, '10-aws.conflist'), changed: true });
  const written = JSON.parse(await readFile(first.config, 'utf8'));
  t.same(written.plugins.map((p: { type: string }) => p.type), ['aws-cni', 'egress-cni', 'sluice-cni', 'portmap']);
  for (const name of ['sluice-cni', 'sluice-cni-standalone']) {
    t.equal((await stat(join(bin, name))).mode & 0o777, 0o755, `${name} is executable`);
    t.equal(await readFile(join(bin, name), 'utf8'), await readFile(join(built, name), 'utf8'), `${name} is the built one`);
  }
  t.same((await installCni({ confDir: conf, binDir: bin })).changed, false, 'second install changes nothing');
  t.same((await readdir(conf)).sort(), ['10-aws.conflist', '99-other.conf'], 'no temp files left');

  const removed = await uninstallCni({ confDir: conf, binDir: bin });
  t.equal(removed.changed, true);
  t.same(JSON.parse(await readFile(first.config, 'utf8')), awsLike);
  t.same(await readdir(bin), []);
  t.same((await uninstallCni({ confDir: conf, binDir: bin })).changed, false, 'uninstall is idempotent');

  await writeFile(join(conf, '10-aws.conflist'), '{not json');
  await t.rejects(installCni({ confDir: conf, binDir: bin }), /not valid JSON/);
});

t.test('installers running at once into one bin and configuration directory all succeed, leaving no temporary file', async (t) => {
  const root = await mkdtemp(join(tmpdir(), 'sluice-install-race-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  const [conf, bin, built] = ['net.d', 'bin', 'built'].map((d) => join(root, d)) as [string, string, string];
  const fs = await import('node:fs/promises');
  await Promise.all([conf, bin, built].map((d) => fs.mkdir(d)));
  await writeFile(join(conf, '10-aws.conflist'), JSON.stringify(awsLike));
  await writeFile(join(built, 'sluice-cni'), '#!/bin/sh\necho front end\n');
  await writeFile(join(built, 'sluice-cni-standalone'), `#!/bin/sh\n${'echo standalone\n'.repeat(20_000)}`);
  const results = await Promise.allSettled(Array.from({ length: 8 }, () => installCni({ confDir: conf, binDir: bin, pluginBinary: join(built, 'sluice-cni') })));
  t.same(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)), [], 'no installer failed');
  t.same((await readdir(bin)).sort(), ['sluice-cni', 'sluice-cni-standalone'], 'the two executables, no temporary file');
  t.same((await readdir(conf)).sort(), ['10-aws.conflist'], 'the one configuration, no temporary file');
  t.equal(await readFile(join(bin, 'sluice-cni-standalone'), 'utf8'), await readFile(join(built, 'sluice-cni-standalone'), 'utf8'), 'the whole standalone plugin');
});
