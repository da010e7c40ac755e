/**
 * Adopting running Pods (pure parts): libcni's cache files as containerd and CRI-O write them, and
 * which of a node's Pods get attached from which entry — or are named with why they cannot be.
 */
import t from 'tap';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { planAdoption } from '../../daemon/node/adoption.js';
import { type CachedAttachment, parseCacheEntry, readCniCache } from '../../daemon/cni/runtime-cache.js';
import { libcniFile } from './cni-fixtures.js';

const entry = (o: Parameters<typeof libcniFile>[0]): CachedAttachment => {
  const e = parseCacheEntry(`/c/results/aws-cni-${o.id}-eth0`, libcniFile(o));
  if (typeof e === 'string') throw new Error(e);
  return e;
};

t.test('a libcni cache file gives the container, interface, netns, Pod name and addresses of both families', async (t) => {
  const e = entry({ id: 'abc', ip: '10.0.1.5', ns: 'default', name: 'web-1' });
  t.match(e, { containerId: 'abc', ifName: 'eth0', networkName: 'aws-cni', netns: '/var/run/netns/cni-abc', podNamespace: 'default', podName: 'web-1' });
  t.same(e.ips, ['10.0.1.5', 'fd00::5']);
  t.equal(entry({ id: 'old', ip: '10.0.1.6', sandboxOnly: true }).netns, '/var/run/netns/cni-old', 'older libcni: the netns comes from the sandbox interface');
  t.notOk('podName' in entry({ id: 'x', ip: '10.0.1.7' }), 'no CNI_ARGS name: none invented');
});

t.test('unusable cache files are named with why', async (t) => {
  t.match(parseCacheEntry('/f', '{'), /^\/f: not JSON/);
  t.match(parseCacheEntry('/f', '[]'), /not a JSON object/);
  t.match(parseCacheEntry('/f', JSON.stringify({ kind: 'other' })), /kind "other" is not cniCacheV1/);
  t.match(parseCacheEntry('/f', JSON.stringify({ kind: 'cniCacheV1', containerId: 'a' })), /containerId, ifName and networkName are required/);
  t.match(parseCacheEntry('/f', JSON.stringify({ kind: 'cniCacheV1', containerId: 'a', ifName: 'eth0', networkName: 'n' })), /no result with ips/);
});

t.test('readCniCache reads <dir>/results and lists what it could not use', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cnicache-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  t.same(await readCniCache(dir), { entries: [], problems: [] }, 'no results dir yet: nothing, no problem');
  mkdirSync(join(dir, 'results'));
  writeFileSync(join(dir, 'results', 'aws-cni-abc-eth0'), libcniFile({ id: 'abc', ip: '10.0.1.5' }));
  writeFileSync(join(dir, 'results', 'junk'), 'not json');
  const r = await readCniCache(dir);
  t.same(r.entries.map((e) => e.containerId), ['abc']);
  t.equal(r.problems.length, 1);
  t.match(r.problems[0], /junk: not JSON/);
});

t.test('planAdoption: unattached Pods with a usable entry are adopted; the others are named with why', async (t) => {
  const exists = (p: string) => !p.includes('gone');
  const pods = [
    { namespace: 'default', name: 'attached', ips: ['10.0.1.1'] },
    { namespace: 'default', name: 'web-1', ips: ['10.0.1.5'] },
    { namespace: 'default', name: 'no-cache', ips: ['10.0.1.9'] },
    { namespace: 'default', name: 'reused-ip', ips: ['10.0.1.20'] },
    { namespace: 'default', name: 'netns-gone', ips: ['10.0.1.30'] },
    { namespace: 'default', name: 'unnamed', ips: ['10.0.1.40'] },
    { namespace: 'default', name: 'v6-only', ips: ['fd00::9'] },
  ];
  const entries = [
    entry({ id: 'abc', ip: '10.0.1.5', ns: 'default', name: 'web-1' }),
    entry({ id: 'stale', ip: '10.0.1.20', ns: 'default', name: 'someone-else' }),
    entry({ id: 'dead', ip: '10.0.1.30', ns: 'default', name: 'netns-gone', netns: '/var/run/netns/gone' }),
    entry({ id: 'anon', ip: '10.0.1.40' }),
  ];
  const plan = planAdoption(pods, new Set(['10.0.1.1']), entries, exists, '/var/lib/cni');
  t.same(plan.adopt.map((a) => [a.pod.name, a.entry.containerId]), [['unnamed', 'anon'], ['web-1', 'abc']]);
  t.same(plan.cannot.map((c) => c.pod.name), ['netns-gone', 'no-cache', 'reused-ip', 'v6-only']);
  const why = Object.fromEntries(plan.cannot.map((c) => [c.pod.name, c.reason]));
  t.match(why['no-cache'], /no CNI result for 10\.0\.1\.9 is cached in \/var\/lib\/cni\/results/);
  t.match(why['reused-ip'], /names another Pod \(default\/someone-else\)/);
  t.match(why['v6-only'], /no CNI result for fd00::9 is cached/, 'an IPv6 Pod is looked up by its IPv6 address');
  t.match(why['netns-gone'], /network namespace of its cached CNI result is gone \(\/var\/run\/netns\/gone\)/);
});

t.test('planAdoption: an IPv6-only Pod is adopted by its IPv6 address, however the API writes it', async (t) => {
  const pods = [{ namespace: 'a', name: 'v6', ips: ['FD00:0::7'] }];
  const plan = planAdoption(pods, new Set(), [entry({ id: 'v6', ip: '10.0.0.7', ip6: 'fd00::7', ns: 'a', name: 'v6' })], () => true, '/c');
  t.same(plan.adopt.map((a) => a.entry.containerId), ['v6']);
  t.same(planAdoption(pods, new Set(['fd00::7']), [], () => true, '/c'), { adopt: [], cannot: [] }, 'attached already (canonical text): nothing to do');
});

t.test('planAdoption: an entry naming the Pod beats an older unnamed one for the same address', async (t) => {
  const pods = [{ namespace: 'a', name: 'p', ips: ['10.0.0.2'] }];
  const plan = planAdoption(pods, new Set(), [entry({ id: 'a-old', ip: '10.0.0.2' }), entry({ id: 'z-new', ip: '10.0.0.2', ns: 'a', name: 'p' })], () => true, '/c');
  t.equal(plan.adopt[0]?.entry.containerId, 'z-new');
});
