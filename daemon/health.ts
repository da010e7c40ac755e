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

/** An answer of an extra GET path: JSON `body`, or text as is when `contentType` is given. */
export interface RouteAnswer {
  code: number;
  body: unknown;
  contentType?: string;
}

/** An extra GET path: computes the answer at each request. */
/** A GET route; `query` holds the request's query parameters. */
export type HealthRoute = (query: URLSearchParams) => RouteAnswer | Promise<RouteAnswer>;

export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

/** The health endpoint: /healthz, /readyz, /status from `view`, plus `routes`. */
export function startHealthServer(
  address: { host: string; port: number },
  view: () => HealthView,
  log: Logger,
  routes: Record<string, HealthRoute> = {},
): Promise<HealthServer> {
  const v = () => view();
  return startEndpoint('health endpoint (healthAddress)', address, log, {
    '/healthz': () => (v().ovsReachable ? { code: 200, body: { status: 'ok' } } : { code: 503, body: { status: 'OVS unreachable' } }),
    '/readyz': () => (v().ready ? { code: 200, body: { status: 'ready' } } : { code: 503, body: { status: 'starting' } }),
    '/status': () => ({ code: 200, body: v() }),
    ...routes,
  });
}

/** A read-only HTTP endpoint serving exactly `routes` (GET only); `what` names it in logs and errors. */
export async function startEndpoint(
  what: string,
  address: { host: string; port: number },
  log: Logger,
  routes: Record<string, HealthRoute>,
): Promise<HealthServer> {
  const paths = Object.keys(routes).join(', ');
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const answer = ({ code, body, contentType }: RouteAnswer) => {
      if (contentType !== undefined && typeof body === 'string') {
        res.writeHead(code, { 'content-type': contentType });
        res.end(body);
        return;
      }
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(body)}\n`);
    };
    if (req.method !== 'GET') return answer({ code: 405, body: { error: 'only GET' } });
    const route = Object.hasOwn(routes, path) ? routes[path] : undefined;
    if (!route) return answer({ code: 404, body: { error: `no such path ${path}; try ${paths}` } });
    const query = new URL(req.url ?? '/', 'http://agent').searchParams;
    Promise.resolve()
      .then(() => route(query))
      .then(answer, (err: unknown) => answer({ code: 500, body: { error: `${path}: ${(err as Error).message}` } }))
      .catch((err: unknown) => log.warn({ path, err: (err as Error).message }, `${what}: answer not sent`));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(new Error(`${what} address ${address.host}:${address.port}: ${err.message}`)));
    server.listen(address.port, address.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  log.info({ address: `${address.host}:${port}` }, `${what}: listening`);
  return {
    port,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
