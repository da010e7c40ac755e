/**
 * Health endpoint: GET /healthz (the process serves and OVS answers) and GET /readyz (start-up
 * finished: bridge, flows, host networking converged, CNI socket open). JSON bodies say why.
 * Further read-only paths (e.g. /policies) come from the caller's `routes`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';

export interface HealthView {
  ready: boolean;
  ovsReachable: boolean;
}

/** An extra GET path: computes the status code and JSON body at each request. */
export type HealthRoute = () => { code: number; body: unknown };

export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

export async function startHealthServer(
  address: { host: string; port: number },
  view: () => HealthView,
  log: Logger,
  routes: Record<string, HealthRoute> = {},
): Promise<HealthServer> {
  const paths = ['/healthz', '/readyz', '/status', ...Object.keys(routes)].join(', ');
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const answer = (code: number, body: unknown) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    if (req.method !== 'GET') return answer(405, { error: 'only GET' });
    const route = Object.hasOwn(routes, path) ? routes[path] : undefined;
    if (route) {
      try {
        const r = route();
        return answer(r.code, r.body);
      } catch (err) {
        return answer(500, { error: `${path}: ${(err as Error).message}` });
      }
    }
    const v = view();
    if (path === '/healthz') return answer(v.ovsReachable ? 200 : 503, { status: v.ovsReachable ? 'ok' : 'OVS unreachable' });
    if (path === '/readyz') return answer(v.ready ? 200 : 503, { status: v.ready ? 'ready' : 'starting' });
    if (path === '/status') return answer(200, v);
    return answer(404, { error: `no such path ${path}; try ${paths}` });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`healthAddress ${address.host}:${address.port}: ${err.message}`)));
    server.listen(address.port, address.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  log.info({ address: `${address.host}:${port}` }, 'health: listening');
  return {
    port,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
