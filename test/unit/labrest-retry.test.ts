/**
 * The lab's REST client sends a request again after a transport failure, within a bound: a GET or
 * DELETE whose connection is reset mid-way, a request to a server that is not listening yet; not
 * a POST that may have been applied. Real sockets on loopback.
 */
import t from 'tap';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError, RestClient } from '../../lab/restclient.js';
import { resolveKind } from '../../lab/kinds.js';

const POD = resolveKind('pod');

/** A server whose handler sees the request number (from 1) and may reset the connection. */
async function server(handle: (n: number, method: string, res: import('node:http').ServerResponse) => void): Promise<{ url: string; seen: () => string[]; close: () => Promise<void> }> {
  const seen: string[] = [];
  const s: Server = createServer((req, res) => {
    seen.push(req.method!);
    req.resume();
    req.on('end', () => handle(seen.length, req.method!, res));
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen: () => seen, close: () => new Promise((r) => { s.closeAllConnections(); s.close(() => r()); }) };
}
const reset = (res: import('node:http').ServerResponse) => res.socket?.destroy();
const json = (res: import('node:http').ServerResponse, code: number, body: unknown) => {
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};
const FAST = { attempts: 4, firstDelayMs: 5 };

t.test('a GET reset twice is answered by the third attempt', async (t) => {
  const s = await server((n, _m, res) => (n <= 2 ? reset(res) : json(res, 200, { apiVersion: 'v1', kind: 'PodList', metadata: {}, items: [] })));
  t.teardown(s.close);
  const list = await new RestClient(s.url, 'tok', FAST).list(POD, { namespace: 'x' });
  t.same(list.items, []);
  t.same(s.seen(), ['GET', 'GET', 'GET']);
});

t.test('a DELETE applied and then reset counts as done when the retry finds the object gone', async (t) => {
  const s = await server((n, _m, res) => (n === 1 ? reset(res) : json(res, 404, { kind: 'Status', reason: 'NotFound', message: 'pods "a" not found' })));
  t.teardown(s.close);
  await new RestClient(s.url, 'tok', FAST).delete(POD, 'a', 'x');
  t.same(s.seen(), ['DELETE', 'DELETE']);
});

t.test('a DELETE of a missing object on the first attempt is still a 404', async (t) => {
  const s = await server((_n, _m, res) => json(res, 404, { kind: 'Status', reason: 'NotFound', message: 'pods "a" not found' }));
  t.teardown(s.close);
  const err = await new RestClient(s.url, 'tok', FAST).delete(POD, 'a', 'x').catch((e: unknown) => e);
  t.ok(err instanceof ApiError && err.code === 404, 'NotFound');
});

t.test('a POST reset mid-way is not repeated (it may have been applied)', async (t) => {
  const s = await server((_n, _m, res) => reset(res));
  t.teardown(s.close);
  const err = (await new RestClient(s.url, 'tok', FAST).create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'a' } }).catch((e: unknown) => e)) as ApiError;
  t.ok(err instanceof ApiError && err.code === 0, 'an Unreachable error');
  t.match(err.message, /cannot reach the lab API server/);
  t.same(s.seen(), ['POST'], 'sent once');
});

t.test('a server that keeps resetting gives up after the bound, naming the attempts', async (t) => {
  const s = await server((_n, _m, res) => reset(res));
  t.teardown(s.close);
  const err = (await new RestClient(s.url, 'tok', FAST).get(POD, 'a', 'x').catch((e: unknown) => e)) as ApiError;
  t.match(err.message, /cannot reach the lab API server at .*\(4 attempts\)/);
  t.equal(s.seen().length, 4);
});

t.test('a refused connection is retried for any method, and succeeds once the server listens', async (t) => {
  const probe = await server(() => {});
  const url = probe.url;
  await probe.close(); // the port is now free: connections are refused
  const port = Number(new URL(url).port);
  let late: Server | undefined;
  const started = new Promise<void>((r) => setTimeout(() => {
    late = createServer((_req, res) => json(res, 201, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'a' } }));
    late.listen(port, '127.0.0.1', () => r());
  }, 20));
  t.teardown(() => late?.close());
  const created = await new RestClient(url, 'tok', { attempts: 8, firstDelayMs: 10 }).create(POD, { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'x', name: 'a' } });
  await started;
  t.equal(created.metadata.name, 'a', 'the POST went through once the server was up');
});
