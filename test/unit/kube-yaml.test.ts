/**
 * The shared YAML reader resolves plain scalars as kubectl does (sigs.k8s.io/yaml over go-yaml v2,
 * then JSON): the expected values below are what `kubectl apply` sends to the API server.
 */
import t from 'tap';
import { dumpYaml, parseYaml, parseYamlDocuments, resolvePlainScalar } from '../../daemon/kube-yaml.js';

t.test('plain scalars resolve as go-yaml v2 resolves them', async (t) => {
  const doc = parseYaml(`
date: 2024-05-01
stamp: 2024-05-01T10:00:00Z
yes1: yes
on1: on
off1: Off
n1: n
y1: Y
true1: True
octal: 0755
octal12: 0o17
hex: 0x1F
bin: 0b101
notOctal: 08
underscored: 1_000
exp: 1e3
onePointZero: 1.0
half: .5
minusHalf: -.5
tilde: ~
nullWord: Null
empty:
quoted: "yes"
single: '0755'
version: 1.10
text: hello
`);
  t.same(doc, {
    date: '2024-05-01', stamp: '2024-05-01T10:00:00Z',
    yes1: true, on1: true, off1: false, n1: false, y1: true, true1: true,
    octal: 493, octal12: 15, hex: 31, bin: 5, notOctal: 8, underscored: 1000,
    exp: 1000, onePointZero: 1, half: 0.5, minusHalf: -0.5,
    tilde: null, nullWord: null, empty: null,
    quoted: 'yes', single: '0755', version: 1.1, text: 'hello',
  });
  t.equal(typeof (doc as Record<string, unknown>).date, 'string', 'a timestamp is no Date');
});

t.test('map keys become their string form, as sigs.k8s.io/yaml converts them', async (t) => {
  t.same(parseYaml('yes: a\n0755: b\nNo: c\n'), { true: 'a', 493: 'b', false: 'c' });
});

t.test('anchors, aliases and merge keys', async (t) => {
  const doc = parseYaml('base: &b {app: web, tier: fe}\nsel: {<<: *b, tier: be}\nsame: *b\n') as Record<string, Record<string, string>>;
  t.same(doc.sel, { app: 'web', tier: 'be' });
  t.same(doc.same, { app: 'web', tier: 'fe' });
  t.not(doc.same, doc.base, 'an alias is a copy, as after a JSON round trip');
});

t.test('.inf and .nan cannot be represented in JSON: that document is refused', async (t) => {
  t.throws(() => parseYaml('a: .inf\n'), /cannot be represented in JSON/);
  t.same(resolvePlainScalar('.NaN')[0], 'float');
});

t.test('documents are split like kubectl splits them; one bad document costs only itself', async (t) => {
  const docs = parseYamlDocuments('a: 1\n---\nb: [\n--- # comment\nc: 2\n--- d: 3\n---\n# only a comment\n---\ne: 4\n');
  t.same(docs.map((d) => ('error' in d ? `error@${d.line}` : d.value)), [{ a: 1 }, 'error@3', { c: 2 }, 'error@6', { e: 4 }]);
  t.match((docs[1] as { error: string }).error, /not valid YAML\/JSON \(line \d+\)/);
  t.match((docs[3] as { error: string }).error, /invalid YAML document separator: d: 3/);
});

t.test('alias amplification is refused with go-yaml\'s rule; big honest documents are not', async (t) => {
  const lines = ['a: &a [x, x, x, x, x, x, x, x, x, x]'];
  for (let i = 1; i < 9; i++) lines.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(10).fill(`*${String.fromCharCode(96 + i)}`).join(', ')}]`);
  const bomb = lines.join('\n');
  t.ok(bomb.length < 1000);
  // 10^9 nodes when expanded: refused while reading, long before that.
  t.throws(() => parseYaml(bomb), /excessive aliasing/);
  const honest = `items: [${Array.from({ length: 20000 }, (_, i) => `{name: n${i}}`).join(', ')}]`;
  t.equal((parseYaml(honest) as { items: unknown[] }).items.length, 20000);
  const reused = 'base: &b {app: web}\n' + Array.from({ length: 50 }, (_, i) => `k${i}: *b`).join('\n');
  t.equal(Object.keys(parseYaml(reused) as object).length, 51, 'modest alias use is fine');
});

t.test('an object larger than the API server accepts is refused', async (t) => {
  const big = `data: [${Array.from({ length: 40000 }, () => '"' + 'x'.repeat(100) + '"').join(', ')}]`;
  t.throws(() => parseYaml(big), /larger than the API server accepts/);
});

t.test('__proto__ and other prototype-named keys are own data', async (t) => {
  const doc = parseYaml('__proto__: {polluted: yes}\nconstructor: c\n') as Record<string, unknown>;
  t.ok(Object.hasOwn(doc, '__proto__'));
  t.equal(Object.getPrototypeOf(doc), Object.prototype);
  t.equal(({} as Record<string, unknown>).polluted, undefined);
});

t.test('dumpYaml quotes every string go-yaml would read as another type', async (t) => {
  const value = { a: 'yes', b: '0755', c: '1e3', d: '', e: 'on', f: '~', g: 'plain', h: 3, i: true, j: null, k: '2024-05-01', l: 1.5 };
  t.same(parseYaml(dumpYaml(value)), value);
});
