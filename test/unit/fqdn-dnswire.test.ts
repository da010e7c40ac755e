import t from 'tap';
import { parseDnsMessage, readName, resolvedNames, type DnsMessage } from '../../daemon/enforcement/fqdn/dnswire.js';
import { a, aaaa, header, opt, question, rr, simpleResponse, wireName, wireNameWithPointer } from './fqdn-helpers.js';

function parsed(buf: Buffer): DnsMessage {
  const r = parseDnsMessage(buf);
  if (!r.ok) throw new Error(`expected a parse, got: ${r.error}`);
  return r.message;
}

function learned(buf: Buffer): Record<string, string[]> {
  const r = resolvedNames(parsed(buf));
  if (!r.ok) throw new Error(r.error);
  return Object.fromEntries([...r.names].map(([n, addrs]) => [n, addrs.map((x) => `${x.address}/${x.ttl}`)]));
}

t.test('A answer with a compression pointer to the question', async (t) => {
  const msg = simpleResponse('WWW.Example.COM', [{ ip: '192.0.2.10', ttl: 5 }]);
  const m = parsed(msg);
  t.equal(m.response, true);
  t.equal(m.id, 0x4242);
  t.same(m.questions, [{ name: 'www.example.com', type: 1, class: 1 }], 'names are lower-cased');
  t.same(m.answers, [{ name: 'www.example.com', type: 1, ttl: 5, address: '192.0.2.10' }]);
  t.same(learned(msg), { 'www.example.com': ['192.0.2.10/5'] });
});

t.test('CNAME chain: every alias gets the final addresses with the chain minimum TTL', async (t) => {
  // question www.example.com at 12; answers: www -> edge.cdn.example.net (suffix "example" not shared: plain),
  // edge.cdn.example.net -> e1.cdn.example.net (pointer into the previous target), A/AAAA for e1.
  const q = question(wireName('www.example.com'));
  const h = header({ an: 5 });
  const first = rr(wireNameWithPointer('', 12), 5, 300, wireName('edge.cdn.example.net'));
  // offset of the CNAME target "edge.cdn.example.net" inside the message:
  const targetAt = 12 + q.length + 2 + 10;
  const second = rr(wireNameWithPointer('', targetAt), 5, 60, wireNameWithPointer('e1', targetAt + 5 /* "cdn.example.net" */));
  const e1At = 12 + q.length + first.length + 2 + 10; // where "e1" + pointer starts
  const msg = Buffer.concat([
    h, q, first, second,
    rr(wireNameWithPointer('', e1At), 1, 30, a('198.51.100.1')),
    rr(wireNameWithPointer('', e1At), 1, 600, a('198.51.100.2')),
    rr(wireNameWithPointer('', e1At), 28, 20, aaaa([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])),
  ]);
  const m = parsed(msg);
  t.same(m.answers.map((r) => (r.type === 5 ? `${r.name} CNAME ${r.target}` : `${r.name} ${r.address}`)), [
    'www.example.com CNAME edge.cdn.example.net',
    'edge.cdn.example.net CNAME e1.cdn.example.net',
    'e1.cdn.example.net 198.51.100.1',
    'e1.cdn.example.net 198.51.100.2',
    'e1.cdn.example.net 2001:db8::1',
  ]);
  const addrs = ['198.51.100.1/30', '198.51.100.2/60', '2001:db8::1/20'];
  t.same(learned(msg), { 'www.example.com': addrs, 'edge.cdn.example.net': addrs, 'e1.cdn.example.net': addrs }, 'TTL = min(CNAME TTLs, record TTL)');
});

t.test('multiple answers, duplicates, TTL 0 and TTLs with the top bit set', async (t) => {
  const msg = simpleResponse('a.example.org', [
    { ip: '203.0.113.1', ttl: 0 },
    { ip: '203.0.113.2', ttl: 0x80000000 },
    { ip: '203.0.113.3', ttl: 100 },
    { ip: '203.0.113.3', ttl: 200 },
  ]);
  t.same(learned(msg), { 'a.example.org': ['203.0.113.1/0', '203.0.113.2/0', '203.0.113.3/200'] }, 'RFC 2181: top-bit TTL is 0; a repeated address keeps its longest TTL');
});

t.test('records outside the CNAME chain, other classes and other types are not learned', async (t) => {
  const msg = Buffer.concat([
    header({ an: 4 }),
    question(wireName('www.example.com')),
    rr(wireName('evil.example.net'), 1, 60, a('6.6.6.6')),
    rr(wireNameWithPointer('', 12), 16, 60, Buffer.from('\x05hello', 'latin1')), // TXT
    rr(wireNameWithPointer('', 12), 1, 60, a('7.7.7.7'), 3), // class CH
    rr(wireNameWithPointer('', 12), 1, 60, a('192.0.2.1')),
  ]);
  t.same(learned(msg), { 'www.example.com': ['192.0.2.1/60'] });
});

t.test('EDNS0 OPT and authority records after the answers are tolerated', async (t) => {
  const base = simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 5 }]);
  base.writeUInt16BE(1, 8); // NSCOUNT
  base.writeUInt16BE(1, 10); // ARCOUNT
  const msg = Buffer.concat([base, rr(wireName('example.com'), 2, 60, wireName('ns.example.com')), opt()]);
  t.same(learned(msg), { 'www.example.com': ['192.0.2.10/5'] });
});

t.test('NXDOMAIN, SERVFAIL, queries and odd opcodes teach nothing', async (t) => {
  const nx = Buffer.concat([header({ rcode: 3 }), question(wireName('nope.example.com'))]);
  const r1 = resolvedNames(parsed(nx));
  t.equal(r1.ok, false);
  t.match(!r1.ok && r1.error, /NXDOMAIN/);
  const sf = resolvedNames(parsed(Buffer.concat([header({ rcode: 2 }), question(wireName('x.com'))])));
  t.match(!sf.ok && sf.error, /response code 2/);
  const query = Buffer.concat([header({ qr: false, an: 1 }), question(wireName('x.com')), rr(wireNameWithPointer('', 12), 1, 9, a('1.2.3.4'))]);
  const r2 = resolvedNames(parsed(query));
  t.match(!r2.ok && r2.error, /not a response/);
  const notify = resolvedNames(parsed(Buffer.concat([header({ opcode: 4 }), question(wireName('x.com'))])));
  t.match(!notify.ok && notify.error, /opcode 4/);
  const two = resolvedNames(parsed(Buffer.concat([header({ qd: 2 }), question(wireName('x.com')), question(wireName('y.com'))])));
  t.match(!two.ok && two.error, /2 questions/);
});

t.test('NOERROR without addresses (NODATA) learns nothing but is not an error', async (t) => {
  const r = resolvedNames(parsed(Buffer.concat([header({}), question(wireName('x.com'), 28)])));
  t.ok(r.ok);
  t.equal(r.ok && r.names.size, 0);
});

t.test('every truncation of a valid message is an error value, never an exception', async (t) => {
  const msg = simpleResponse('www.example.com', [{ ip: '192.0.2.10', ttl: 5 }, { ip: '192.0.2.11', ttl: 5 }]);
  let errors = 0;
  for (let n = 0; n < msg.length; n++) {
    const r = parseDnsMessage(msg.subarray(0, n));
    if (!r.ok) errors++;
  }
  t.equal(errors, msg.length, 'all proper prefixes fail');
  t.match((parseDnsMessage(msg.subarray(0, 5)) as { error: string }).error, /header .* cut off/);
  t.match((parseDnsMessage(msg.subarray(0, msg.length - 2)) as { error: string }).error, /answer 1 data .* cut off/);
});

t.test('compression pointer loops and forward pointers are refused', async (t) => {
  // question name = pointer to itself (offset 12)
  const self = Buffer.concat([header({}), Buffer.from([0xc0, 12]), Buffer.from([0, 1, 0, 1])]);
  t.match((parseDnsMessage(self) as { error: string }).error, /not backwards/);
  // answer name -> pointer to 30 which points back to the answer (two-node loop)
  const q = question(wireName('x.com')); // 12..(12+11)
  const ansAt = 12 + q.length;
  const loop = Buffer.concat([header({ an: 1 }), q, Buffer.from([0xc0, ansAt + 2, 0xc0, ansAt]), Buffer.alloc(10)]);
  t.equal(parseDnsMessage(loop).ok, false);
  // a label followed by a pointer into itself
  const inner = Buffer.concat([header({}), Buffer.from([1, 0x61, 0xc0, 12]), Buffer.from([0, 1, 0, 1])]);
  t.match((parseDnsMessage(inner) as { error: string }).error, /not backwards/);
  t.throws(() => readName(Buffer.from([0xc0, 0]), 0), /not backwards/, 'readName itself throws; parseDnsMessage turns that into a value');
});

t.test('names over 255 octets, extended label types and bad A/CNAME data are refused', async (t) => {
  const long = Array.from({ length: 5 }, () => 'x'.repeat(60)).join('.');
  t.match((parseDnsMessage(Buffer.concat([header({}), question(wireName(long))])) as { error: string }).error, /longer than 255/);
  const ext = Buffer.concat([header({}), Buffer.from([0x41, 0]), Buffer.from([0, 1, 0, 1])]);
  t.match((parseDnsMessage(ext) as { error: string }).error, /label type 0x40/);
  const badA = Buffer.concat([header({ an: 1 }), question(wireName('x.com')), rr(wireNameWithPointer('', 12), 1, 9, Buffer.from([1, 2, 3]))]);
  t.match((parseDnsMessage(badA) as { error: string }).error, /A record data is 3 bytes/);
  const cnameStray = Buffer.concat([header({ an: 1 }), question(wireName('x.com')), rr(wireNameWithPointer('', 12), 5, 9, Buffer.concat([wireName('y.com'), Buffer.from([7])]))]);
  t.match((parseDnsMessage(cnameStray) as { error: string }).error, /stray bytes/);
  const cnameOver = Buffer.concat([header({ an: 1 }), question(wireName('x.com')), rr(wireNameWithPointer('', 12), 5, 9, Buffer.from([3, 0x61, 0x62]))]);
  t.equal(parseDnsMessage(cnameOver).ok, false, 'CNAME target must end inside its rdata');
});

t.test('CNAME loops end the chain', async (t) => {
  const q = question(wireName('a.test'));
  const msg = Buffer.concat([
    header({ an: 3 }), q,
    rr(wireName('a.test'), 5, 60, wireName('b.test')),
    rr(wireName('b.test'), 5, 60, wireName('a.test')),
    rr(wireName('b.test'), 1, 60, a('192.0.2.99')),
  ]);
  t.same(learned(msg), { 'a.test': ['192.0.2.99/60'], 'b.test': ['192.0.2.99/60'] });
});

t.test('labels with unusual bytes are escaped and cannot impersonate dotted names', async (t) => {
  const name = Buffer.concat([Buffer.from([7]), Buffer.from('www.evi', 'latin1'), wireName('com')]);
  const m = parsed(Buffer.concat([header({}), question(name)]));
  t.equal(m.questions[0]!.name, 'www\\046evi.com');
});

t.test('random corruption never throws', async (t) => {
  const base = Buffer.concat([
    header({ an: 3, ar: 1 }), question(wireName('www.example.com')),
    rr(wireNameWithPointer('', 12), 5, 300, wireNameWithPointer('cdn', 16)),
    rr(wireNameWithPointer('cdn', 16), 1, 30, a('198.51.100.1')),
    rr(wireNameWithPointer('cdn', 16), 28, 30, aaaa([0xfe80, 0, 0, 0, 1, 2, 3, 4])),
    opt(),
  ]);
  t.ok(parseDnsMessage(base).ok, 'the base message is valid');
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  let ok = 0;
  let failed = 0;
  for (let i = 0; i < 5000; i++) {
    const m = Buffer.from(base);
    const flips = 1 + Math.floor(rnd() * 4);
    for (let f = 0; f < flips; f++) m[Math.floor(rnd() * m.length)] = Math.floor(rnd() * 256);
    const cut = rnd() < 0.3 ? m.subarray(0, Math.floor(rnd() * m.length)) : m;
    const r = parseDnsMessage(cut);
    if (r.ok) {
      ok++;
      resolvedNames(r.message);
    } else failed++;
  }
  t.equal(ok + failed, 5000, `no exceptions (${ok} parsed, ${failed} refused)`);
  t.ok(failed > 0 && ok > 0, 'corruption produces both outcomes');
});
