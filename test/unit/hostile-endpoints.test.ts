/**
 * Hostile clients on the agent's own endpoints, spoken to with raw sockets: the CNI socket (seeded
 * mutations of valid requests, binary junk, an oversized request, many clients at once) and the
 * read-only HTTP endpoint (/status, /policies, /metrics: other methods, prototype-member paths,
 * broken request lines, a route that throws). Every request gets a well-formed answer naming what
 * is wrong, the handler never sees an invalid request, and the server keeps serving afterwards.
 */
import { request } from 'node:http';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { startCniServer } from '../../daemon/cni/server.js';
import { startEndpoint } from '../../daemon/health.js';
import { PTP_040 } from './cni-fixtures.js';
import { RecordingHandler, capturingLogger, tempDir, type Call } from './cni-harness.js';
import { rng, type Rng } from './policy-core-helpers.js';

const tmp = tempDir();
t.teardown(tmp.remove);

const addRequest = (containerId: string) => ({
  command: 'ADD',
  containerId,
  netns: '/var/run/netns/cn-pod',
  ifName: 'eth0',
  args: { K8S_POD_NAMESPACE: 'x', K8S_POD_NAME: 'a' },
  cniPath: '',
  config: { cniVersion: '0.4.0', name: 'k8s', type: 'sluice-cni', prevResult: PTP_040 },
});

/** Writes `payload` (then half-closes) on a unix or TCP socket and resolves with the whole answer. */
function exchange(target: string | number, payload: Buffer | string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = typeof target === 'string' ? createConnection(target) : createConnection(target, '127.0.0.1');
    let got = '';
    sock.on('data', (d: Buffer) => (got += d.toString()));
    sock.on('end', () => resolve(got));
    sock.on('close', () => resolve(got));
    sock.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? resolve(got) : reject(err)));
    sock.on('connect', () => sock.end(payload));
  });
}

const JUNK: unknown[] = [null, 0, -1, 1.5, '', 'x'.repeat(3000), true, [], {}, '../../etc/passwd', '\u0000', { constructor: 1 }];

/** A valid request with one to three values replaced by junk, or a key named like a prototype member. */
function mutateRequest(r: Rng): string {
  const req = JSON.parse(JSON.stringify(addRequest(`c${r.int(1e6)}`)));
  const slots: { parent: any; key: string | number }[] = [];
  const walk = (x: any) => {
    if (Array.isArray(x)) x.forEach((y, i) => { slots.push({ parent: x, key: i }); walk(y); });
    else if (x && typeof x === 'object') for (const k of Object.keys(x)) { slots.push({ parent: x, key: k }); walk(x[k]); }
  };
  walk(req);
  for (let n = 0; n < 1 + r.int(3); n++) {
    const s = r.pick(slots);
    const value = JSON.parse(JSON.stringify(r.pick(JUNK)));
    if (r.int(6) === 0 && !Array.isArray(s.parent)) Object.defineProperty(s.parent, r.pick(['__proto__', 'constructor', 'toString']), { value, enumerable: true });
    else s.parent[s.key] = value;
  }
  return JSON.stringify(req);
}

function junkBytes(r: Rng): Buffer {
  return Buffer.from(Array.from({ length: 1 + r.int(2000) }, () => r.int(256)));
}

t.test('CNI socket: every hostile request gets one well-formed answer; the server keeps serving', async (t) => {
  const path = join(tmp.dir, 'cni', 'cni.sock');
  const handler = new RecordingHandler();
  const server = await startCniServer(path, handler, capturingLogger().log);
  t.teardown(() => server.close());
  const r = rng(4242);

  let refused = 0;
  let accepted = 0;
  for (let i = 0; i < 300; i++) {
    const payload = i % 3 === 0 ? Buffer.concat([junkBytes(r), Buffer.from('\n')]) : `${mutateRequest(r)}\n`;
    const answer = await exchange(path, payload);
    const lines = answer.split('\n').filter(Boolean);
    t.equal(lines.length, 1, `one answer line for input ${i}`);
    const response = JSON.parse(lines[0]!);
    if (response.ok) {
      accepted++;
      continue;
    }
    refused++;
    t.ok(Number.isInteger(response.code) && response.code > 0, `input ${i}: a CNI error code`);
    t.ok(typeof response.msg === 'string' && response.msg.length > 0, `input ${i}: a message`);
  }
  t.ok(refused > 150, `most mutated inputs are refused (${refused} refused, ${accepted} accepted)`);
  // The handler saw only requests that parsed: an ADD always has a container id, interface, netns
  // and a prevResult (whose addresses the handler itself checks); the server answered ok exactly for those.
  const adds = handler.calls.filter((c): c is Extract<Call, { req: unknown }> => c.op === 'add' && c.phase === 'start');
  t.equal(adds.length, accepted, 'the handler ran exactly the accepted requests');
  for (const { req } of adds) {
    t.ok(/^[A-Za-z0-9][\w.-]*$/.test(req.containerId), `container id ${JSON.stringify(req.containerId.slice(0, 40))}`);
    t.ok(req.ifName.length > 0 && req.netns.length > 0, 'interface and netns');
    t.ok(typeof req.prevResult?.cniVersion === 'string', `a normalized prevResult: ${JSON.stringify(req.prevResult)}`);
  }

  const big = `{"command":"ADD","pad":"${'x'.repeat((4 << 20) + 10)}"}\n`;
  t.match(JSON.parse(await exchange(path, big)), { ok: false, code: 5, msg: /larger than/ }, 'an oversized request is refused by size');

  const many = await Promise.all(Array.from({ length: 100 }, (_, i) => exchange(path, i % 2 ? '{nope\n' : `${JSON.stringify(addRequest(`many${i}`))}\n`)));
  t.equal(many.filter((a) => JSON.parse(a).ok === true).length, 50, '100 clients at once: every valid ADD answered ok');
  t.equal(many.filter((a) => JSON.parse(a).code === 6).length, 50, 'and every malformed one with the decoding error code');

  t.same(JSON.parse(await exchange(path, `${JSON.stringify(addRequest('after01'))}\n`)), { ok: true, result: PTP_040 }, 'still serves after the storm');
});

t.test('HTTP endpoint: hostile requests get 4xx/5xx JSON answers; the server keeps serving', async (t) => {
  const { log } = capturingLogger();
  const endpoint = await startEndpoint('test endpoint', { host: '127.0.0.1', port: 0 }, log, {
    '/status': () => ({ code: 200, body: { ready: true } }),
    '/policies': () => {
      throw new Error('engine not started');
    },
    '/metrics': async () => ({ code: 200, body: 'm 1\n', contentType: 'text/plain' }),
  });
  t.teardown(() => endpoint.close());
  const port = endpoint.port;
  const get = (path: string, method = 'GET') =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, method }, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    });
  const status = (raw: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1]);

  for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
    const res = await get('/status', method);
    t.equal(res.status, 405, `${method} refused`);
    t.match(JSON.parse(res.body), { error: 'only GET' });
  }
  for (const path of ['/__proto__', '/constructor', '/toString', '/hasOwnProperty', '/status/../policies', `/${'a'.repeat(5000)}`, '/%00']) {
    const res = await get(path);
    t.equal(res.status, 404, `${path.slice(0, 40)}: not a route`);
    t.match(JSON.parse(res.body), { error: /no such path/ });
  }
  const failing = await get('/policies');
  t.equal(failing.status, 500, 'a route that throws answers 500');
  t.match(JSON.parse(failing.body), { error: '/policies: engine not started' });

  for (const junk of ['GARBAGE\r\n\r\n', '\u0000\u0001\u0002\r\n\r\n', `GET /${'x'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n${'X-A: b\r\n'.repeat(2000)}\r\n`]) {
    const raw = await exchange(port, junk);
    t.ok(raw === '' || status(raw) >= 400, `broken request line or oversized headers: refused (${JSON.stringify(raw.slice(0, 30))})`);
  }
  t.equal((await get('/status?x=__proto__')).status, 200, 'still serves; a query string does not change the route');
  t.equal((await get('/metrics')).body, 'm 1\n');
});
