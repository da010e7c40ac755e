import t from 'tap';
import { FqdnLearner } from '../../daemon/enforcement/fqdn/learner.js';
import { FqdnPatternSet } from '../../daemon/policy/fqdn.js';
import { PolicyEngine } from '../../daemon/policy/engine.js';
import { ManualClock } from './manual-clock.js';
import { normalizers as k8s } from '../../daemon/policy/k8s/index.js';
import { namespace, pod, podsIn, rule, rulesObject, testKind } from './policy-core-helpers.js';

const names = (o: Record<string, [string, number][]>) => new Map(Object.entries(o).map(([n, l]) => [n, l.map(([address, ttl]) => ({ address, ttl }))]));

/** A ManualClock started away from 0, so "expiry 0" bugs cannot pass by accident. */
async function clockAt(ms = 1_000_000): Promise<ManualClock> {
  const c = new ManualClock();
  await c.advance(ms);
  return c;
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
  engine.setFqdnAddresses(candidates.map((n, i) => ({ name: n, ips: [`192.0.2.${i + 1}`] })));
  const engineMatches = (n: string) => patterns.some((p) => engine.fqdnIps(p).has(`192.0.2.${candidates.indexOf(n) + 1}`));
  t.same(candidates.filter(engineMatches), candidates.filter((n) => set.matches(n)), 'same verdicts as PolicyEngine.fqdnIps');
});

t.test('the engine\'s fqdn patterns: egress fqdn peers only, one source with the interception\'s rule ids', async (t) => {
  const e = new PolicyEngine({ normalizers: [...k8s, testKind] });
  for (const o of [namespace('x'), pod('x', 'a')]) e.upsert(o);
  const first = e.fqdnPatterns();
  t.equal(first.size, 0);
  e.upsert(rulesObject('p', { rules: [
    rule({ direction: 'Egress', action: 'Allow', appliedTo: [podsIn('x')], peers: [{ kind: 'fqdn', pattern: '*.Example.com' }, { kind: 'ipBlock', cidr: '0.0.0.0/0', except: [] }] }, {}, 'web'),
    rule({ direction: 'Egress', action: 'Drop', appliedTo: [podsIn('x')] }, { rule: 1 }, 'rest'),
  ] }));
  t.same(e.fqdnPatterns().patterns, ['*.example.com']);
  t.same([...e.fqdnEgressRules().keys()], ['test/web'], 'the rule ids DNS interception reads come from the same map');
  t.equal(e.fqdnPatterns(), e.fqdnPatterns(), 'kept between calls (no rebuild while the patterns stay)');
  t.ok(e.fqdnPatterns().matches('www.example.com'));
});

t.test('TTL floor, cap, accumulation and expiry of one of several addresses', async (t) => {
  const c = await clockAt();
  const t0 = c.now();
  const l = new FqdnLearner({ clock: c, minTtlSeconds: 10, maxTtlSeconds: 3600 });
  const p = new FqdnPatternSet(['*.example.com']);
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.10', 5], ['192.0.2.11', 0]] }), p), [
    { name: 'www.example.com', ips: ['192.0.2.10', '192.0.2.11'] },
  ]);
  t.equal(l.nextExpiryAt(), t0 + 10_000, 'TTLs below the floor are raised to it');
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.10', 5]] }), p), [], 'the same answer again changes nothing');
  await c.advance(2000);
  t.same(l.observe(names({ 'www.example.com': [['192.0.2.12', 30]] }), p), [
    { name: 'www.example.com', ips: ['192.0.2.10', '192.0.2.11', '192.0.2.12'] },
  ], 'a new subset adds to the name');
  t.same(l.observe(names({ 'other.net': [['198.51.100.1', 60]] }), p), [], 'names no pattern matches are not learned');
  t.same(l.observe(names({ 'big.example.com': [['198.51.100.2', 999_999]] }), p), [{ name: 'big.example.com', ips: ['198.51.100.2'] }]);
  t.same(l.addresses('big.example.com'), [{ ip: '198.51.100.2', expiresAt: c.now() + 3_600_000 }], 'huge TTLs are capped');
  await c.advance(7999);
  t.same(l.expire(), [], 'nothing due 1 ms before the floor');
  await c.advance(1);
  t.same(l.expire(), [{ name: 'www.example.com', ips: ['192.0.2.12'] }], 'the first two addresses expired, the third stays');
  t.equal(l.nextExpiryAt(), t0 + 32_000);
  await c.advance(22_000);
  t.same(l.expire(), [{ name: 'www.example.com', ips: [] }], 'the last address gone: the name is forgotten');
  t.same(l.addresses('www.example.com'), []);
  t.equal(l.size, 1, 'big.example.com is still known');
});

t.test('a repeated address keeps the later expiry; extending it changes no address set', async (t) => {
  const c = await clockAt();
  const t0 = c.now();
  const l = new FqdnLearner({ clock: c, minTtlSeconds: 0 });
  const p = new FqdnPatternSet(['a.test']);
  l.observe(names({ 'a.test': [['192.0.2.1', 100]] }), p);
  await c.advance(1000);
  t.same(l.observe(names({ 'a.test': [['192.0.2.1', 50]] }), p), [], 'a shorter TTL does not shorten it');
  t.same(l.addresses('a.test'), [{ ip: '192.0.2.1', expiresAt: t0 + 100_000 }]);
  t.same(l.observe(names({ 'a.test': [['192.0.2.1', 200]] }), p), [], 'a longer one extends it without an engine update');
  t.same(l.addresses('a.test'), [{ ip: '192.0.2.1', expiresAt: t0 + 201_000 }]);
  await c.advance(100_000);
  t.same(l.expire(), [], 'the old expiry passed: still live');
});

t.test('snapshot and the name limit', async (t) => {
  const c = await clockAt();
  const l = new FqdnLearner({ clock: c, maxNames: 2, minTtlSeconds: 0 });
  const p = new FqdnPatternSet(['*']);
  l.observe(names({ 'a.test': [['192.0.2.1', 30]] }), p);
  l.observe(names({ 'b.test': [['192.0.2.2', 10], ['192.0.2.4', 40]] }), p);
  t.same(l.observe(names({ 'c.test': [['192.0.2.3', 50]] }), p), [
    { name: 'a.test', ips: [] },
    { name: 'c.test', ips: ['192.0.2.3'] },
  ], 'over the limit the name whose last address expires soonest is dropped (and the engine told)');
  t.same(l.snapshot(), [{ name: 'b.test', ips: ['192.0.2.2', '192.0.2.4'] }, { name: 'c.test', ips: ['192.0.2.3'] }]);
});

t.test('bad options are refused with their name', async (t) => {
  t.throws(() => new FqdnLearner({ minTtlSeconds: -1 }), /minTtlSeconds -1/);
  t.throws(() => new FqdnLearner({ minTtlSeconds: 100, maxTtlSeconds: 10 }), /maxTtlSeconds 10 is below minTtlSeconds 100/);
});
