/**
 * Small Node programs the fqdn lab tests run inside network namespaces (not a test file itself):
 * a DNS server (UDP and TCP 53) with a fixed zone, a TCP connect probe, and a DNS query that can
 * connect to the answer right away.
 */
import { execa } from 'execa';

/** Runs `program` (ESM) with this Node inside `ns`; returns the JSON object of its last output line. */
export async function nodeIn(ns: string, program: string): Promise<Record<string, unknown>> {
  const r = await execa('ip', ['netns', 'exec', ns, process.execPath, '--input-type=module', '-e', program], { reject: false });
  if (r.exitCode !== 0) throw new Error(`program in ${ns} exited ${r.exitCode}: ${String(r.stderr)}`);
  return JSON.parse(String(r.stdout).trim().split('\n').pop() ?? '{}') as Record<string, unknown>;
}

/**
 * DNS on `listenIp`:53 (UDP and TCP, IPv4 or IPv6): records of `zone` (name -> [ip, ttl]; an A
 * record for an IPv4 address, AAAA for IPv6, each answered to a query of its type only, NODATA to
 * the other), NXDOMAIN for other names. With `web`, also a TCP server on 0.0.0.0:80. Prints
 * "ready" once listening.
 */
export const dnsServerProgram = (listenIp: string, zone: Record<string, [string, number]>, web: boolean) => `
import { createSocket } from 'node:dgram';
import { createServer, isIPv6 } from 'node:net';
const ZONE = ${JSON.stringify(zone)};
function qname(m) { const l = []; let i = 12; while (m[i]) { l.push(m.subarray(i + 1, i + 1 + m[i]).toString('latin1')); i += 1 + m[i]; } return [l.join('.').toLowerCase(), i + 5, m.readUInt16BE(i + 1)]; }
function rdata(ip) {
  if (!isIPv6(ip)) return Buffer.from(ip.split('.').map(Number));
  const [head, tail = ''] = ip.split('::');
  const h = head ? head.split(':') : [], t = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...h, ...Array(8 - h.length - t.length).fill('0'), ...t] : h;
  const b = Buffer.alloc(16); groups.forEach((g, i) => b.writeUInt16BE(parseInt(g, 16), i * 2)); return b;
}
function answer(q) {
  const [name, end, qtype] = qname(q);
  const rec = ZONE[name];
  const type = rec && (isIPv6(rec[0]) ? 28 : 1);
  const data = type === qtype ? rdata(rec[0]) : undefined;
  const h = Buffer.from(q.subarray(0, 12));
  h.writeUInt16BE(0x8180 | (rec ? 0 : 3), 2); h.writeUInt16BE(data ? 1 : 0, 6); h.writeUInt16BE(0, 8); h.writeUInt16BE(0, 10);
  const parts = [h, q.subarray(12, end)];
  if (data) { const rr = Buffer.alloc(12); rr.writeUInt16BE(0xc00c, 0); rr.writeUInt16BE(type, 2); rr.writeUInt16BE(1, 4); rr.writeUInt32BE(rec[1], 6); rr.writeUInt16BE(data.length, 10); parts.push(rr, data); }
  return Buffer.concat(parts);
}
let waiting = ${web ? 3 : 2};
const up = () => { if (--waiting === 0) console.log('ready'); };
const udp = createSocket(isIPv6('${listenIp}') ? 'udp6' : 'udp4');
udp.on('message', (m, r) => udp.send(answer(m), r.port, r.address));
udp.bind(53, '${listenIp}', up);
createServer((s) => { let buf = Buffer.alloc(0); s.on('data', (d) => { buf = Buffer.concat([buf, d]); if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) { const a = answer(buf.subarray(2, 2 + buf.readUInt16BE(0))); const l = Buffer.alloc(2); l.writeUInt16BE(a.length); s.end(Buffer.concat([l, a])); } }); s.on('error', () => {}); }).listen(53, '${listenIp}', up);
if (${web}) createServer((s) => { s.end('hello'); s.on('error', () => {}); }).listen(80, '0.0.0.0', up);
`;

/** TCP connect to ip:port: CONNECTED once the handshake completes, TIMEOUT after 1.5 s, or the error code. */
export const connectProgram = (ip: string, port = 80) => `
import { connect } from 'node:net';
const s = connect({ host: '${ip}', port: ${port} });
s.setTimeout(1500, () => { console.log(JSON.stringify({ code: 'TIMEOUT' })); process.exit(0); });
s.on('connect', () => { console.log(JSON.stringify({ code: 'CONNECTED' })); process.exit(0); });
s.on('error', (e) => { console.log(JSON.stringify({ code: e.code })); process.exit(0); });`;

/**
 * One DNS query to dnsIp (UDP or TCP, IPv4 or IPv6), then optionally an immediate TCP connection
 * to port 80 of the (last) answer: the A or AAAA record ending the reply.
 */
export const queryProgram = (dnsIp: string, query: Buffer, transport: 'udp' | 'tcp', connectAfter: boolean) => `
import { createSocket } from 'node:dgram';
import { connect, isIPv6 } from 'node:net';
const q = Buffer.from('${query.toString('hex')}', 'hex');
const started = process.hrtime.bigint();
const fail = (code) => { console.log(JSON.stringify({ code })); process.exit(0); };
setTimeout(() => fail('DNS_TIMEOUT'), 4000);
function then(reply) {
  const ms = Number(process.hrtime.bigint() - started) / 1e6;
  const an = reply.readUInt16BE(6);
  const aaaa = an > 0 && reply.readUInt16BE(reply.length - 2 - 16) === 16;
  const ip = an === 0 ? undefined : aaaa
    ? [0, 2, 4, 6, 8, 10, 12, 14].map((o) => reply.readUInt16BE(reply.length - 16 + o).toString(16)).join(':')
    : [...reply.subarray(reply.length - 4)].join('.');
  const out = { code: 'ANSWER', rcode: reply.readUInt16BE(2) & 15, reply: reply.toString('hex'), ms, ...(ip ? { ip } : {}) };
  if (!${connectAfter} || !ip) { console.log(JSON.stringify(out)); process.exit(0); }
  const s = connect({ host: ip, port: 80 });
  s.setTimeout(1500, () => { console.log(JSON.stringify({ ...out, connect: 'TIMEOUT' })); process.exit(0); });
  s.on('connect', () => { console.log(JSON.stringify({ ...out, connect: 'CONNECTED' })); process.exit(0); });
  s.on('error', (e) => { console.log(JSON.stringify({ ...out, connect: e.code })); process.exit(0); });
}
if ('${transport}' === 'udp') {
  const u = createSocket(isIPv6('${dnsIp}') ? 'udp6' : 'udp4');
  u.on('message', (m) => { u.close(); then(m); });
  u.send(q, 53, '${dnsIp}');
} else {
  const s = connect({ host: '${dnsIp}', port: 53 });
  let buf = Buffer.alloc(0);
  const l = Buffer.alloc(2); l.writeUInt16BE(q.length);
  s.on('connect', () => s.write(Buffer.concat([l, q])));
  s.on('data', (d) => { buf = Buffer.concat([buf, d]); if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) { s.destroy(); then(buf.subarray(2, 2 + buf.readUInt16BE(0))); } });
  s.on('error', (e) => fail(e.code));
}`;
