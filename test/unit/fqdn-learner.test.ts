import t from 'tap';
import { FqdnLearner } from '../../daemon/enforcement/fqdn/learner.js';
import { FqdnPatternSet, fqdnPatternsOf } from '../../daemon/enforcement/fqdn/patterns.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';

const names = (o: Record<string, [string, number][]>) => new Map(Object.entries(o).map(([n, l]) => [n, l.map(([address, ttl]) => ({ address, ttl }))]));

function clock(start = 1_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => { now += ms; } };
}

t.test('pattern semantics: exact names and * over any characters, as the engine matches them', async (t) => {
  const patterns = ['www.example.com', '*.example.org', '*foobar.com', 'A.Mixed.Case.', 'x*y.net'];
  const candidates = [
    'www.example.com', 'example.com', 'wwww.example.com', 'a.www.example.com',
    'example.org', 'www.example.org', 'a.b.example.org', 'xexample.org',
    'foobar.com', 'www.foobar.com', 'test.uswest.foobar.com', 'myfoobar.com', 'foobar.com.evil',
    'a.mixed.case', 'xy.net', 'x.y.net', 'y.net',
  ];
  const set = new FqdnPatternSet(patterns);
  const expected = new Set(['www.example.com', 'www.example.org', 'a.b.example.org', 'foobar.com', 'www.foobar.com', 'test.uswest.foobar.com', 'myfoobar.com', 'a.mixed.case', 'xy.net', 'x.y.net']);
  t.same(candidates.filter((n) => set.matches(n)), candidates.filter((n) => expected.has(n)));
  t.ok(set.matches('WWW.EXAMPLE.COM.'), 'case and a trailing dot do not matter');
  // The engine (which resolves fqdn peers) must agree name by name.
  const engine = new PolicyEngine();
  candidates.forEach((n, i) => engine.learnFqdn(n, [`192.0.2.${i + 1}`]));
  const engineMatches = (n: string) => patterns.some((p) => engine.fqdnIps(p).has(`192.0.2.${candidates.indexOf(n) + 1}`));
  t.same(candidates.filter(engineMatches), candidates.filter((n) => set.matches(n)), 'same verdicts as PolicyEngine.fqdnIps');
});

t.test('fqdnPatternsOf reads egress fqdn peers only', async (t) => {
  const set = fqdnPatternsOf([
    { id: '1', ref: { kind: 'AntreaClusterNetworkPolicy', name: 'p', rule: 'r' }, direction: 'Egress', action: 'Allow', priority: { stage: 0, tier: 250, policy: 1, rule: 0, tieBreak: '' }, appliedTo: [], peers: [{ kind: 'fqdn', pattern: '*.Example.com' }, { kind: 'ipBlock', cidr: '0.0.0.0/0', except: [] }], ports: [] },
    { id: '2', ref: { kind: 'AntreaClusterNetworkPolicy', name: 'p', rule: 'q' }, direction: 'Egress', action: 'Drop', priority: { stage: 0, tier: 250, policy: 1, rule: 1, tieBreak: '' }, appliedTo: [], ports: [] },
  ]);
  t.same(set.patterns, ['*.example.com']);
});

t.test('TTL floor, cap, accumulation and expiry', async (t) => {
  const c = clock();
  const l = new FqdnLearner({ now: c.now, minTtlSeconds: 10, maxTtlSeconds: 3600 });
  const p = new FqdnPatternSet(['*.example.com']);
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.10', 5], ['192.0.2.11', 0]] }), p), [
    { name: 'www.example.com', ips: ['192.0.2.10', '192.0.2.11'], ttlSeconds: 10 },
  ], 'TTLs below the floor are raised to it');
  t.equal(l.nextExpiryAt(), c.now() + 10_000);
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.10', 5]] }), p), [], 'the same answer again changes nothing');
  c.advance(2000);
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.12', 30]] }), p), [
    { name: 'www.example.com', ips: ['192.0.2.10', '192.0.2.11', '192.0.2.12'], ttlSeconds: 30 },
  ], 'a new subset adds to the name; the engine TTL covers the latest expiry');
  t.same(l.observe(names({ 'other.net': [['198.51.100.1', 60]] }), p), [], 'names no pattern matches are not learned');
  t.same(l.observe(names({ 'big.example.com': [['198.51.100.2', 999_999]] }), p), [{ name: 'big.example.com', ips: ['198.51.100.2'], ttlSeconds: 3600 }], 'huge TTLs are capped');
  t.same(l.expire(), [], 'nothing due yet');
  c.advance(8000); // 10 s after the first answer
  t.same(l.expire(), [{ name: 'www.example.com', ips: ['192.0.2.12'], ttlSeconds: 22 }], 'the first two addresses expired, the third stays');
  t.equal(l.nextExpiryAt(), c.now() + 22_000);
  c.advance(22_000);
  t.same(l.expire(), [{ name: 'www.example.com', ips: [] }], 'the last address gone: forget the name');
  t.same(l.addresses('www.example.com'), []);
  t.equal(l.size, 1, 'big.example.com is still known');
});

t.test('a repeated address keeps the later expiry', async (t) => {
  const c = clock();
  const l = new FqdnLearner({ now: c.now, minTtlSeconds: 0 });
  const p = new FqdnPatternSet(['a.test']);
  l.observe(names({ 'a.test': [['192.0.2.1', 100]] }), p);
  c.advance(1000);
  t.same(l.observe(names({ 'a.test': [['192.0.2.1', 50]] }), p), [], 'a shorter TTL does not shorten it');
  t.same(l.addresses('a.test'), [{ ip: '192.0.2.1', expiresAt: 1_000_000 + 100_000 }]);
  t.same(l.observe(names({ 'a.test': [['192.0.2.1', 200]] }), p), [{ name: 'a.test', ips: ['192.0.2.1'], ttlSeconds: 200 }], 'a longer one extends it');
});

t.test('retain, snapshot and the name limit', async (t) => {
  const c = clock();
  const l = new FqdnLearner({ now: c.now, maxNames: 2, minTtlSeconds: 0 });
  const p = new FqdnPatternSet(['*']);
  l.observe(names({ 'a.test': [['192.0.2.1', 30]] }), p);
  l.observe(names({ 'b.test': [['192.0.2.2', 10]] }), p);
  t.same(l.observe(names({ 'c.test': [['192.0.2.3', 20]] }), p), [
    { name: 'c.test', ips: ['192.0.2.3'], ttlSeconds: 20 },
    { name: 'b.test', ips: [] },
  ], 'over the limit the name expiring soonest is dropped (and the engine told)');
  t.same(l.snapshot().map((u) => u.name), ['a.test', 'c.test']);
  t.same(l.retain(new FqdnPatternSet(['a.test'])), ['c.test']);
  t.same(l.snapshot(), [{ name: 'a.test', ips: ['192.0.2.1'], ttlSeconds: 30 }]);
});

t.test('bad options are refused with their name', async (t) => {
  t.throws(() => new FqdnLearner({ minTtlSeconds: -1 }), /minTtlSeconds -1/);
  t.throws(() => new FqdnLearner({ minTtlSeconds: 100, maxTtlSeconds: 10 }), /maxTtlSeconds 10 is below minTtlSeconds 100/);
});
