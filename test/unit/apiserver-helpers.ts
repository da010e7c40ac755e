// Shared by the apiserver-*.test.ts files: start a lab API server, talk to it with
// @kubernetes/client-node (as sluicectl and the lab do), and record informer events.
import * as k8s from '@kubernetes/client-node';
import { startApiServer, type ApiServer, type ApiServerOptions } from '../../lab/apiserver/server.js';
import { KubeAccess } from '../../daemon/kube/access.js';

export const token = 'test-token';

export function kubeConfigFor(url: string, withToken = token): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'lab', server: url, skipTLSVerify: true }],
    users: [{ name: 'u', token: withToken }],
    contexts: [{ name: 'lab', cluster: 'lab', user: 'u' }],
    currentContext: 'lab',
  });
  return kc;
}

export interface Lab {
  server: ApiServer;
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  net: k8s.NetworkingV1Api;
  custom: k8s.CustomObjectsApi;
}

interface Teardown { teardown(fn: () => unknown): void }

export async function startLab(t: Teardown, opts: ApiServerOptions = {}): Promise<Lab> {
  const server = await startApiServer({ token, ...opts });
  t.teardown(() => server.close());
  const kc = kubeConfigFor(server.url);
  return {
    server, kc, core: kc.makeApiClient(k8s.CoreV1Api), net: kc.makeApiClient(k8s.NetworkingV1Api),
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
  };
}

export const pod = (name: string, extra: { labels?: Record<string, string>; nodeName?: string } = {}): k8s.V1Pod => ({
  metadata: { name, ...(extra.labels ? { labels: extra.labels } : {}) },
  spec: { ...(extra.nodeName ? { nodeName: extra.nodeName } : {}), containers: [{ name: 'main', image: 'busybox', ports: [{ name: 'http', containerPort: 80 }] }] },
});

/** The HTTP status of a failed client-node call (ApiException.code). */
export async function failureCode(p: Promise<unknown>): Promise<{ code: number; body: Record<string, unknown> }> {
  try {
    await p;
  } catch (e) {
    const err = e as { code?: number; body?: unknown };
    const body = typeof err.body === 'string' ? (JSON.parse(err.body) as Record<string, unknown>) : (err.body as Record<string, unknown>);
    return { code: err.code ?? -1, body };
  }
  throw new Error('the call succeeded but was expected to fail');
}

export interface Seen { verb: 'add' | 'update' | 'delete'; key: string; rv: string; obj: k8s.KubernetesObject }

/**
 * Records every informer event and restarts the informer from its 'error' handler, as the
 * agent does with its own informers (client-node stops the informer on anything but 410 or a clean close).
 */
export class Recorder<T extends k8s.KubernetesObject> {
  readonly seen: Seen[] = [];
  errors = 0;
  lastError: unknown;
  private stopped = false;
  private waiters: Array<() => void> = [];

  constructor(readonly informer: k8s.Informer<T> & k8s.ObjectCache<T>, restartDelayMs = 50) {
    for (const verb of ['add', 'update', 'delete'] as const) {
      informer.on(verb, (obj: T) => {
        const m = obj.metadata!;
        this.seen.push({ verb, key: m.namespace ? `${m.namespace}/${m.name}` : m.name!, rv: m.resourceVersion!, obj });
        this.wake();
      });
    }
    informer.on('error', (err: unknown) => {
      this.errors++;
      this.lastError = err;
      this.wake();
      if (!this.stopped) setTimeout(() => { if (!this.stopped) void informer.start(); }, restartDelayMs);
    });
  }

  async start(): Promise<void> {
    this.stopped = false;
    await this.informer.start();
  }

  /** Stops without the error handler restarting it (client-node reports the aborted watch as an error). */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.informer.stop();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    w.forEach((f) => f());
  }

  /** Events of the given keys only, as "verb key" strings (compact for assertions). */
  log(filter?: (s: Seen) => boolean): string[] {
    return this.seen.filter(filter ?? (() => true)).map((s) => `${s.verb} ${s.key}`);
  }

  /** Resolves once pred holds; rejects with the events seen so far if it does not within the deadline. */
  async until(pred: () => boolean, what: string, deadlineMs = 10_000): Promise<void> {
    const end = Date.now() + deadlineMs;
    while (!pred()) {
      const left = end - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}; seen: ${JSON.stringify(this.log())}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  cacheKeys(): string[] {
    return this.informer.list().map((o) => (o.metadata!.namespace ? `${o.metadata!.namespace}/${o.metadata!.name}` : o.metadata!.name!)).sort();
  }
}

/** Reads a raw watch stream (as curl would) until `count` lines have arrived or the stream ends. */
export async function rawWatch(url: string, path: string, count: number, withToken = token): Promise<{ status: number; lines: Array<{ type: string; object: Record<string, any> }> }> {
  const controller = new AbortController();
  const res = await fetch(url + path, { headers: { Authorization: `Bearer ${withToken}` }, signal: controller.signal });
  const lines: Array<{ type: string; object: Record<string, any> }> = [];
  if (res.status !== 200) {
    lines.push({ type: 'HTTP', object: (await res.json()) as Record<string, any> });
    return { status: res.status, lines };
  }
  const decoder = new TextDecoder();
  let buf = '';
  const reader = res.body!.getReader();
  try {
    while (lines.length < count) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        lines.push(JSON.parse(buf.slice(0, nl)) as { type: string; object: Record<string, any> });
        buf = buf.slice(nl + 1);
      }
    }
  } finally {
    controller.abort();
  }
  return { status: 200, lines };
}

/** The agent's own API access (daemon/kube) to the lab API server, with the test token. */
export function labAccess(lab: Pick<Lab, 'server'>): KubeAccess {
  return KubeAccess.fromKubeconfigObject({
    clusters: [{ name: 'lab', cluster: { server: lab.server.url } }], users: [{ name: 'u', user: { token } }],
    contexts: [{ name: 'lab', context: { cluster: 'lab', user: 'u' } }], 'current-context': 'lab',
  }, '/');
}
