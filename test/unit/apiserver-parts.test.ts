// The lab API server's pure parts (selectors, patches, store history) and its CLI process.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import t from 'tap';
import { applyPatch, jsonPatch, mergePatch, type PatchError } from '../../lab/apiserver/patch.js';
import { parseServiceCIDRs } from '../../lab/apiserver/registry.js';
import { compareKubeVersions } from '../../lab/apiserver/resources.js';
import { parseFieldSelector, parseLabelSelector } from '../../lab/apiserver/selectors.js';
import { serviceAccountToken } from '../../lab/apiserver/satoken.js';
import { ObjectStore } from '../../lab/apiserver/store.js';

t.test('label selector grammar', async (t) => {
  const m = (sel: string, labels: Record<string, string>) => parseLabelSelector(sel)(labels);
  t.ok(m('', {}), 'empty matches all');
  t.ok(m('a=1', { a: '1' }));
  t.ok(m('a==1', { a: '1' }));
  t.notOk(m('a=1', { a: '2' }));
  t.notOk(m('a=1', {}));
  t.ok(m('a!=1', {}), '!= matches a missing key');
  t.notOk(m('a!=1', { a: '1' }));
  t.ok(m('a in (1, 2)', { a: '2' }));
  t.notOk(m('a in (1,2)', {}));
  t.ok(m('a notin (1,2)', { a: '3' }));
  t.ok(m('a notin (1,2)', {}));
  t.ok(m('a', { a: '' }), 'exists');
  t.notOk(m('!a', { a: 'x' }));
  t.ok(m('!a', { b: 'x' }));
  t.ok(m('app.kubernetes.io/name=web, tier in (fe),!legacy', { 'app.kubernetes.io/name': 'web', tier: 'fe' }), 'prefixed keys, spaces, and AND');
  t.notOk(m('app.kubernetes.io/name=web,tier in (fe),!legacy', { 'app.kubernetes.io/name': 'web', tier: 'fe', legacy: 'y' }));
  t.ok(m('a=', { a: '' }), 'empty value');
  for (const bad of ['a in (1', 'a)', 'a=b c', '=x', 'a in (b,c d)', '-a=1']) {
    t.throws(() => parseLabelSelector(bad), { name: 'SelectorError' }, `rejects "${bad}"`);
  }
});

t.test('field selectors: supported fields per resource', async (t) => {
  const p = { metadata: { name: 'a', namespace: 'x' }, spec: { nodeName: 'node-1' }, status: { phase: 'Running' } };
  t.ok(parseFieldSelector('spec.nodeName=node-1', '/pods')(p));
  t.ok(parseFieldSelector('spec.nodeName==node-1,status.phase!=Pending', '/pods')(p));
  t.notOk(parseFieldSelector('spec.nodeName!=node-1', '/pods')(p));
  t.ok(parseFieldSelector('spec.nodeName=', '/pods')({ metadata: { name: 'u' }, spec: {} }), 'an unscheduled Pod has an empty nodeName');
  t.ok(parseFieldSelector('metadata.name=a,metadata.namespace=x', '/services')(p));
  t.throws(() => parseFieldSelector('spec.nodeName=node-1', '/services'), /field label not supported: spec.nodeName/);
  t.throws(() => parseFieldSelector('metadata.name', '/pods'), /cannot parse/);
});

t.test('merge patch (RFC 7386)', async (t) => {
  t.same(mergePatch({ a: 1, b: { c: 2, d: 3 }, e: [1] }, { b: { c: null, f: 4 }, e: [2, 3], g: 'x' }), { a: 1, b: { d: 3, f: 4 }, e: [2, 3], g: 'x' });
  t.same(mergePatch({ a: 1 }, { a: { b: null } }), { a: {} });
  const target = { a: { b: 1 } };
  mergePatch(target, { a: { b: 2 } });
  t.same(target, { a: { b: 1 } }, 'the target is not mutated');
  t.throws(() => applyPatch({}, 'application/merge-patch+json', [1]), { name: 'PatchError', invalid: true });
  t.throws(() => applyPatch({}, 'text/plain', {}), /unsupported patch type/);
});

t.test('JSON patch (RFC 6902)', async (t) => {
  const doc = { a: { b: [1, 2, 3] }, 'x/y': { '~z': 1 } };
  t.same(jsonPatch(doc, [{ op: 'add', path: '/a/b/1', value: 9 }]), { a: { b: [1, 9, 2, 3] }, 'x/y': { '~z': 1 } });
  t.same((jsonPatch(doc, [{ op: 'add', path: '/a/b/-', value: 4 }]) as typeof doc).a, { b: [1, 2, 3, 4] });
  t.same((jsonPatch(doc, [{ op: 'remove', path: '/x~1y/~0z' }]) as typeof doc)['x/y'], {}, 'escaped pointer tokens');
  t.same(jsonPatch(doc, [{ op: 'test', path: '/a', value: { b: [1, 2, 3] } }]), doc, 'test compares structurally');
  t.throws(() => jsonPatch(doc, [{ op: 'replace', path: '/nope', value: 1 }]), /does not exist/);
  t.throws(() => jsonPatch(doc, [{ op: 'remove', path: '/a/b/3' }]), /out of range/);
  t.throws(() => jsonPatch(doc, [{ op: 'add', path: '/q/r', value: 1 }]), /does not exist/);
  t.throws(() => jsonPatch(doc, [{ op: 'frob', path: '/a' }]), /unknown op/);
  t.throws(() => jsonPatch(doc, { op: 'add' }), /must be an array/);
  const err = (() => { try { jsonPatch(doc, [{ op: 'add', path: 'a' }]); } catch (e) { return e as PatchError; } })();
  t.equal(err?.invalid, true, 'a malformed operation is a bad request');
  t.same(doc, { a: { b: [1, 2, 3] }, 'x/y': { '~z': 1 } }, 'the target is never mutated');
});

t.test('store: global RV, bounded history, 410 floor, persistence', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/apiserver-store-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = `${dir}/s.json`;
  const s = new ObjectStore(3, file);
  const seen: string[] = [];
  s.subscribe((e) => seen.push(`${e.type} ${e.resource} ${e.object.metadata.name}@${e.rv}`));
  s.write('/pods', { metadata: { name: 'a', namespace: 'x' } });
  s.write('/services', { metadata: { name: 'b', namespace: 'x' } });
  s.write('/pods', { metadata: { name: 'a', namespace: 'x', labels: { v: '2' } } });
  t.equal(s.remove('/pods', 'x/a')!.metadata.resourceVersion, '4');
  t.equal(s.remove('/pods', 'x/a'), undefined);
  t.same(seen, ['ADDED /pods a@1', 'ADDED /services b@2', 'MODIFIED /pods a@3', 'DELETED /pods a@4']);
  t.equal(s.eventsSince(0), 'expired', 'history keeps 3 events: RV 0 is too old');
  t.same((s.eventsSince(1) as unknown[]).length, 3);
  t.same((s.eventsSince(4) as unknown[]).length, 0);
  s.close();
  t.same(JSON.parse(readFileSync(file, 'utf8')).resourceVersion, 4);
  const again = new ObjectStore(3, file);
  t.equal(again.resourceVersion, 4);
  t.same(again.list('/services').map((o) => o.metadata.name), ['b']);
  t.equal(again.eventsSince(3), 'expired', 'history does not survive a restart');
  t.same(again.eventsSince(4), []);
  t.throws(() => new ObjectStore(0), /historyLimit/);

  const seed = `${dir}/seed.json`;
  const seedText = JSON.stringify({ resourceVersion: 7, resources: { '/pods': [{ metadata: { name: 'p', namespace: 'x', resourceVersion: '7' } }] } });
  writeFileSync(seed, seedText);
  const seeded = new ObjectStore(3, undefined, seed);
  t.equal(seeded.resourceVersion, 7, 'a seed file sets the version');
  t.same(seeded.list('/pods').map((o) => o.metadata.name), ['p']);
  seeded.write('/pods', { metadata: { name: 'q', namespace: 'x' } });
  seeded.close();
  t.equal(readFileSync(seed, 'utf8'), seedText, 'a seed file is never written');
  const persisted = `${dir}/persisted.json`;
  new ObjectStore(3, persisted, seed).close();
  t.equal(JSON.parse(readFileSync(persisted, 'utf8')).resourceVersion, 7, 'without a data file yet, the seed is the start and is written to the data file');
  writeFileSync(persisted, JSON.stringify({ resourceVersion: 9, resources: {} }));
  t.equal(new ObjectStore(3, persisted, seed).resourceVersion, 9, 'an existing data file wins over the seed');
});

t.test('service CIDR and version ordering', async (t) => {
  t.same(parseServiceCIDRs('10.96.0.0/16'), [{ family: 'IPv4', base: BigInt((10 * 256 + 96) * 65536), size: 65536n, cidr: '10.96.0.0/16' }]);
  t.same(parseServiceCIDRs('10.96.5.7/24')[0]!.size, 256n);
  t.same(parseServiceCIDRs('10.96.0.0/16,fd00:96::/112').map((r) => [r.family, r.cidr, r.size]), [['IPv4', '10.96.0.0/16', 65536n], ['IPv6', 'fd00:96::/112', 65536n]], 'dual-stack: IPv4 and IPv6');
  t.same(parseServiceCIDRs('fd00:96::/112')[0]!.family, 'IPv6', 'IPv6 alone');
  for (const bad of ['10.96.0.0', '10.96.0.0/31', '300.1.1.1/16', 'fd00::/48', 'fd00::/126', '10.96.0.0/16,10.97.0.0/16', '10.96.0.0/16,fd00:96::/112,fd00:97::/112']) {
    t.throws(() => parseServiceCIDRs(bad), /serviceCIDR/, bad);
  }
  t.same(['v1alpha1', 'v1', 'v1beta1', 'v2alpha1', 'v1alpha2', 'v2'].sort(compareKubeVersions), ['v2', 'v1', 'v1beta1', 'v2alpha1', 'v1alpha2', 'v1alpha1']);
});

t.test('CLI: listens, serves TCP and the unix socket, persists, stops on SIGTERM', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/apiserver-cli-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const sock = `${dir}/api.sock`;
  const data = `${dir}/state.json`;
  // Run main.ts the way this test runs (same TypeScript loader flags).
  const child = spawn(process.execPath, [...process.execArgv, 'lab/apiserver/main.ts', '--port', '0', '--unix', sock, '--token', 'T', '--data', data],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  const lines = createInterface(child.stdout!);
  const iter = lines[Symbol.asyncIterator]();
  const first = JSON.parse((await iter.next()).value as string) as { msg: string; url: string; unixSocket: string };
  t.equal(first.msg, 'listening');
  t.match(first.url, /^http:\/\/127\.0\.0\.1:[0-9]+$/);
  const created = await fetch(`${first.url}/api/v1/namespaces`, { method: 'POST', headers: { Authorization: 'Bearer T', 'Content-Type': 'application/json' }, body: JSON.stringify({ metadata: { name: 'cli' } }) });
  t.equal(created.status, 201);
  t.equal((await fetch(`${first.url}/api/v1/namespaces`)).status, 401, 'token enforced');
  const viaSocket = await new Promise<number>((resolve, reject) => {
    http.get({ socketPath: sock, path: '/api/v1/namespaces/cli', headers: { Authorization: 'Bearer T' } }, (res) => { res.resume(); resolve(res.statusCode!); }).on('error', reject);
  });
  t.equal(viaSocket, 200);
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  child.kill('SIGTERM');
  t.equal(await exited, 0);
  t.match(JSON.parse((await iter.next()).value as string), { msg: 'stopped', signal: 'SIGTERM' });
  t.ok(JSON.parse(readFileSync(data, 'utf8')).resources['/namespaces'].some((n: { metadata: { name: string } }) => n.metadata.name === 'cli'), 'data file written');
  t.notOk(existsSync(sock), 'socket removed');

  const bad = spawn(process.execPath, [...process.execArgv, 'lab/apiserver/main.ts', '--port', 'abc'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  bad.stderr!.on('data', (c) => (err += c));
  t.equal(await new Promise((resolve) => bad.on('exit', resolve)), 2);
  t.match(err, /--port needs a non-negative integer, got "abc"/);

  const noKey = spawn(process.execPath, [...process.execArgv, 'lab/apiserver/main.ts', '--service-account-key-file', `${dir}/absent.key`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let keyErr = '';
  noKey.stderr!.on('data', (c) => (keyErr += c));
  t.equal(await new Promise((resolve) => noKey.on('exit', resolve)), 2);
  t.match(keyErr, /--service-account-key-file .*absent\.key: ENOENT/, 'a missing key file is named');
});

t.test('CLI: --seed loads a cluster, --service-account-key-file signs the tokens it accepts', async (t) => {
  const dir = mkdtempSync(`${tmpdir()}/apiserver-seed-`);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(`${dir}/seed.json`, JSON.stringify({
    resourceVersion: 2,
    resources: {
      '/namespaces': [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'sys', resourceVersion: '1', uid: 'u1' } }],
      '/serviceaccounts': [{ apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'agent', namespace: 'sys', resourceVersion: '2', uid: 'u2' } }],
    },
  }));
  writeFileSync(`${dir}/sa.key`, 'k3y\n');
  const child = spawn(process.execPath, [...process.execArgv, 'lab/apiserver/main.ts', '--port', '0', '--token', 'T', '--seed', `${dir}/seed.json`, '--service-account-key-file', `${dir}/sa.key`],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  const iter = createInterface(child.stdout!)[Symbol.asyncIterator]();
  const { url } = JSON.parse((await iter.next()).value as string) as { url: string };
  const sa = await fetch(`${url}/api/v1/namespaces/sys/serviceaccounts/agent`, { headers: { Authorization: 'Bearer T' } });
  t.equal(sa.status, 200, 'the seeded ServiceAccount is served');
  const token = serviceAccountToken('k3y', 'sys', 'agent', { podName: 'a-1', nodeName: 'node-9' });
  const review = await fetch(`${url}/apis/authentication.k8s.io/v1/tokenreviews`, { method: 'POST', headers: { Authorization: 'Bearer T', 'Content-Type': 'application/json' }, body: JSON.stringify({ spec: { token } }) });
  t.match(await review.json(), { status: { authenticated: true, user: { username: 'system:serviceaccount:sys:agent', extra: { 'authentication.kubernetes.io/node-name': ['node-9'] } } } }, 'a token signed with the key file (trailing newline trimmed) authenticates');
  const forged = serviceAccountToken('other', 'sys', 'agent');
  const refused = await fetch(`${url}/apis/authentication.k8s.io/v1/tokenreviews`, { method: 'POST', headers: { Authorization: 'Bearer T', 'Content-Type': 'application/json' }, body: JSON.stringify({ spec: { token: forged } }) });
  t.match(await refused.json(), { status: { authenticated: false } }, 'a token signed with another key does not');
  child.kill('SIGTERM');
});
