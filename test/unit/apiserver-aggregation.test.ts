// The lab API server as an aggregation layer: APIService objects, requests for their
// group-version proxied (streaming) to a fake extension API server over verified TLS with the
// front-proxy client certificate and X-Remote-* identity headers, the availability condition,
// discovery, the extension-apiserver-authentication ConfigMap, and a real kubectl through it.
import { execFile, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { makeServingCertificate, serviceNames } from '../../daemon/controller/certificate.js';
import { apiServiceProblem, authenticationConfigMapData, remoteUserHeaders, resolveBackend } from '../../lab/apiserver/apiservice.js';
import { serviceAccountToken } from '../../lab/apiserver/satoken.js';
import { type ApiServer, kubeconfigYaml, startApiServer } from '../../lab/apiserver/server.js';
import type { KObject } from '../../lab/apiserver/store.js';
import { ensureFrontProxyPki } from '../../lab/pki.js';

const TOKEN = 'agg-token';
const GROUP = 'controlplane.sluice.io';
const GV = `/apis/${GROUP}/v1beta1`;
const noOpenssl = spawnSync('openssl', ['version']).status !== 0 ? 'openssl is not installed (the front-proxy certificates are made with it)' : false;

async function waitFor<T>(probe: () => Promise<T | undefined> | T | undefined, what: string, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** What the fake extension server saw of one request. */
interface Seen {
  path: string;
  authorized: boolean;
  clientCN: string | undefined;
  user: string | undefined;
  groups: string[];
  extra: Record<string, string[]>;
  authorization: string | undefined;
}

/** An extension API server serving addressgroups in controlplane.sluice.io/v1beta1, requesting client certificates. */
async function fakeExtensionServer(clientCa: string, name: string, namespace: string) {
  const cert = await makeServingCertificate({ dnsNames: serviceNames(name, namespace), now: new Date() });
  const seen: Seen[] = [];
  const watchers: ServerResponse[] = [];
  const server = https.createServer({ cert: cert.cert, key: cert.key, ca: clientCa, requestCert: true, rejectUnauthorized: false }, (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket as import('node:tls').TLSSocket;
    const peer = socket.getPeerCertificate();
    const h = req.headersDistinct;
    const extra: Record<string, string[]> = {};
    for (const [k, v] of Object.entries(h)) if (k.startsWith('x-remote-extra-')) extra[decodeURIComponent(k.slice('x-remote-extra-'.length))] = v ?? [];
    seen.push({
      path: req.url ?? '', authorized: socket.authorized, clientCN: peer?.subject?.CN as string | undefined,
      user: h['x-remote-user']?.join('|'), groups: h['x-remote-group'] ?? [], extra, authorization: req.headers.authorization,
    });
    const url = new URL(req.url ?? '/', 'https://x');
    const json = (code: number, body: unknown) => {
      res.writeHead(code, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const discovery = /^\/apis\/([^/]+)\/([^/]+)$/.exec(url.pathname);
    if (discovery) {
      // Any group-version it is registered for has a discovery document; only controlplane's lists resources.
      const resources = url.pathname === GV ? [{ name: 'addressgroups', singularName: 'addressgroup', namespaced: false, kind: 'AddressGroup', verbs: ['get', 'list', 'watch'] }] : [];
      json(200, { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: `${discovery[1]}/${discovery[2]}`, resources });
    } else if (url.pathname === `${GV}/addressgroups` && url.searchParams.get('watch') === '1') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.flushHeaders();
      watchers.push(res);
    } else if (url.pathname === `${GV}/addressgroups`) {
      const node = /^nodeName=(.+)$/.exec(url.searchParams.get('fieldSelector') ?? '')?.[1];
      if (!node) json(400, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 400, reason: 'BadRequest', message: 'fieldSelector nodeName=<node> is required' });
      else json(200, { kind: 'AddressGroupList', apiVersion: `${GROUP}/v1beta1`, metadata: { resourceVersion: '5' }, items: [{ apiVersion: `${GROUP}/v1beta1`, kind: 'AddressGroup', metadata: { name: `ag-for-${node}`, resourceVersion: '5', creationTimestamp: '2026-01-01T00:00:00Z' }, groupMembers: [] }] });
    } else {
      json(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404, reason: 'NotFound', message: 'not found' });
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    caCert: cert.caCert, port: (server.address() as AddressInfo).port, seen, watchers,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

async function api(server: ApiServer, method: string, path: string, body?: unknown, headers: Record<string, string> = {}, token = TOKEN) {
  const res = await fetch(server.url + path, {
    method, headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}), ...headers },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const apiService = (version: string, group: string, service: { namespace: string; name: string; port?: number }, trust: { caBundle?: string; insecureSkipTLSVerify?: boolean }) => ({
  apiVersion: 'apiregistration.k8s.io/v1', kind: 'APIService', metadata: { name: `${version}.${group}` },
  spec: { group, version, service, groupPriorityMinimum: 100, versionPriority: 100, ...trust },
});

/** Creates a selector-less Service and (unless withoutEndpoints) its Endpoints pointing at 127.0.0.1:port. */
async function registerBackend(server: ApiServer, ns: string, name: string, port: number, withoutEndpoints = false): Promise<void> {
  if ((await api(server, 'GET', `/api/v1/namespaces/${ns}`)).status === 404) await api(server, 'POST', '/api/v1/namespaces', { metadata: { name: ns } });
  t.equal((await api(server, 'POST', `/api/v1/namespaces/${ns}/services`, { metadata: { name }, spec: { ports: [{ name: 'https', port: 443, targetPort: port }] } })).status, 201);
  if (withoutEndpoints) return;
  t.equal((await api(server, 'POST', `/api/v1/namespaces/${ns}/endpoints`, { metadata: { name }, subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port }] }] })).status, 201);
}

async function availableCondition(server: ApiServer, name: string, status: 'True' | 'False'): Promise<Record<string, string>> {
  return waitFor(async () => {
    const got = await api(server, 'GET', `/apis/apiregistration.k8s.io/v1/apiservices/${name}`);
    const c = (got.body.status?.conditions ?? []).find((x: Record<string, string>) => x.type === 'Available');
    return c?.status === status ? c : undefined;
  }, `APIService ${name} Available=${status}`);
}

t.test('pure parts: validation, endpoint resolution, identity headers, ConfigMap data', async (t) => {
  const obj = (spec: Record<string, unknown>, name = 'v1.x.example.com') => ({ metadata: { name }, spec }) as unknown as KObject;
  const good = { group: 'x.example.com', version: 'v1', groupPriorityMinimum: 100, versionPriority: 10, service: { namespace: 'a', name: 'b', port: 443 } };
  t.equal(apiServiceProblem(obj(good)), undefined);
  t.match(apiServiceProblem(obj(good, 'v2.x.example.com')), { field: 'metadata.name', message: /must be `spec.version\+"\."\+spec.group`: "v1.x.example.com"/ });
  t.match(apiServiceProblem(obj({ ...good, group: '' })), { field: 'spec.group' });
  t.match(apiServiceProblem(obj({ ...good, versionPriority: 0 })), { field: 'spec.versionPriority', message: /must be positive/ });
  t.match(apiServiceProblem(obj({ ...good, groupPriorityMinimum: 20001 })), { field: 'spec.groupPriorityMinimum' });
  t.match(apiServiceProblem(obj({ ...good, service: { namespace: 'a', port: 443 } })), { field: 'spec.service.name', message: 'Required value' });
  t.match(apiServiceProblem(obj({ ...good, caBundle: 'not base64!' })), { field: 'spec.caBundle', message: /base64/ });
  t.match(apiServiceProblem(obj({ ...good, caBundle: Buffer.from('hello').toString('base64') })), { field: 'spec.caBundle', message: /no PEM certificate/ });
  const pem = Buffer.from('-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n').toString('base64');
  t.match(apiServiceProblem(obj({ ...good, caBundle: pem, insecureSkipTLSVerify: true })), { field: 'spec.insecureSkipTLSVerify', message: /may not be true if caBundle is present/ });
  t.match(apiServiceProblem(obj({ ...good, service: undefined, insecureSkipTLSVerify: true })), { field: 'spec.insecureSkipTLSVerify', message: /local APIServices/ });

  const spec = { service: { namespace: 'ns', name: 'svc', port: 443 } };
  const svc = { metadata: { name: 'svc' }, spec: { ports: [{ name: 'https', port: 443, targetPort: 10349 }] } } as unknown as KObject;
  const eps = (subsets: unknown[]) => ({ metadata: { name: 'svc' }, subsets }) as unknown as KObject;
  t.match(resolveBackend(spec, undefined, undefined), { ok: false, reason: 'ServiceNotFound', message: 'service/svc in "ns" is not present' });
  t.match(resolveBackend({ service: { ...spec.service, port: 8443 } }, svc, undefined), { ok: false, reason: 'ServicePortError' });
  t.match(resolveBackend(spec, svc, undefined), { ok: false, reason: 'EndpointsNotFound' });
  t.match(resolveBackend(spec, svc, eps([{ notReadyAddresses: [{ ip: '10.0.0.1' }], ports: [{ name: 'https', port: 10349 }] }])), { ok: false, reason: 'MissingEndpoints', message: /no addresses with port name "https"/ });
  t.match(resolveBackend(spec, svc, eps([{ addresses: [{ ip: '10.0.0.9' }], ports: [{ name: 'metrics', port: 9 }] }, { addresses: [{ ip: '10.0.0.2' }, { ip: '10.0.0.3' }], ports: [{ name: 'https', port: 10349 }] }])), { ok: true, host: '10.0.0.2', port: 10349 }, 'the port named like the Service port, its subset\'s first ready address');

  t.same(remoteUserHeaders({ username: 'system:serviceaccount:a:b', groups: ['g1', 'g2'], extra: { 'authentication.kubernetes.io/node-name': ['node-1'] } }), {
    'X-Remote-User': 'system:serviceaccount:a:b', 'X-Remote-Group': ['g1', 'g2'], 'X-Remote-Extra-authentication.kubernetes.io%2Fnode-name': ['node-1'],
  });
  t.same(Object.keys(authenticationConfigMapData('PEM')).sort(), ['requestheader-allowed-names', 'requestheader-client-ca-file', 'requestheader-extra-headers-prefix', 'requestheader-group-headers', 'requestheader-username-headers'], 'no client-ca-file without a client CA');
  t.equal(authenticationConfigMapData('PEM', 'CLIENT')['client-ca-file'], 'CLIENT');
});

t.test('aggregation through the lab API server', { skip: noOpenssl }, async (t) => {
  const frontProxy = ensureFrontProxyPki(t.testdir());
  const labCert = await makeServingCertificate({ dnsNames: ['localhost'], ips: ['127.0.0.1'], now: new Date() });
  const server = await startApiServer({ token: TOKEN, frontProxy, serviceAccountKey: 'sa-key', tls: { cert: labCert.cert, key: labCert.key } });
  t.teardown(() => server.close());

  // The ConfigMap an extension server reads to trust the front proxy, in Kubernetes' format.
  const cm = await api(server, 'GET', '/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication');
  t.equal(cm.status, 200);
  t.same(cm.body.data, {
    'requestheader-client-ca-file': frontProxy.caCert, 'requestheader-allowed-names': '["front-proxy-client"]',
    'requestheader-username-headers': '["X-Remote-User"]', 'requestheader-group-headers': '["X-Remote-Group"]',
    'requestheader-extra-headers-prefix': '["X-Remote-Extra-"]',
  });

  const ext = await fakeExtensionServer(cm.body.data['requestheader-client-ca-file'], 'ext', 'ext-system');
  t.teardown(() => ext.close());
  await registerBackend(server, 'ext-system', 'ext', ext.port);
  const created = await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1beta1', GROUP, { namespace: 'ext-system', name: 'ext' }, { caBundle: Buffer.from(ext.caCert).toString('base64') }));
  t.equal(created.status, 201, JSON.stringify(created.body));
  t.equal(created.body.spec.service.port, 443, 'spec.service.port defaults to 443');
  const available = await availableCondition(server, `v1beta1.${GROUP}`, 'True');
  t.match(available, { reason: 'Passed', message: 'all checks passed' });

  await t.test('list: proxied with the front-proxy certificate and the caller as X-Remote-* headers', async (t) => {
    ext.seen.length = 0;
    const list = await api(server, 'GET', `${GV}/addressgroups?fieldSelector=nodeName%3Dnode-1`, undefined, { 'X-Remote-User': 'mallory', 'X-Remote-Group': 'system:masters', 'Impersonate-User': 'mallory' });
    t.equal(list.status, 200);
    t.same(list.body.items.map((i: KObject) => i.metadata.name), ['ag-for-node-1']);
    const s = ext.seen.at(-1)!;
    t.equal(s.path, `${GV}/addressgroups?fieldSelector=nodeName%3Dnode-1`, 'path and query as sent');
    t.ok(s.authorized, 'the client certificate verifies against the ConfigMap\'s requestheader-client-ca-file');
    t.equal(s.clientCN, 'front-proxy-client');
    t.equal(s.user, 'sluice-lab-admin', 'the caller\'s own X-Remote-User is dropped, the authenticated user sent');
    t.same(s.groups, ['system:masters', 'system:authenticated']);
    t.equal(s.authorization, undefined, 'the caller\'s bearer token does not reach the backend');

    await api(server, 'POST', '/api/v1/namespaces/ext-system/serviceaccounts', { metadata: { name: 'agent' } });
    const sa = serviceAccountToken('sa-key', 'ext-system', 'agent', { podName: 'p', podUid: 'u', nodeName: 'node-2' });
    t.equal((await api(server, 'GET', `${GV}/addressgroups?fieldSelector=nodeName%3Dnode-2`, undefined, {}, sa)).status, 200);
    t.match(ext.seen.at(-1), {
      user: 'system:serviceaccount:ext-system:agent', groups: ['system:serviceaccounts', 'system:serviceaccounts:ext-system', 'system:authenticated'],
      extra: { 'authentication.kubernetes.io/node-name': ['node-2'] },
    });
    t.equal((await api(server, 'GET', `${GV}/addressgroups`, undefined, {}, 'wrong')).status, 401, 'an unknown token is refused before any proxying');
  });

  await t.test('watch: events pass through as the backend writes them', async (t) => {
    const abort = new AbortController();
    const res = await fetch(`${server.url}${GV}/addressgroups?watch=1&fieldSelector=nodeName%3Dnode-1`, { headers: { Authorization: `Bearer ${TOKEN}` }, signal: abort.signal });
    t.equal(res.status, 200);
    const backend = await waitFor(() => ext.watchers.at(-1), 'the backend to see the watch');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    const nextLine = async () => {
      while (!buf.includes('\n')) {
        const { value, done } = await reader.read();
        if (done) throw new Error('the watch ended');
        buf += decoder.decode(value, { stream: true });
      }
      const line = buf.slice(0, buf.indexOf('\n'));
      buf = buf.slice(buf.indexOf('\n') + 1);
      return JSON.parse(line) as { type: string; object: KObject };
    };
    for (const [i, type] of ['ADDED', 'MODIFIED'].entries()) {
      backend.write(`${JSON.stringify({ type, object: { metadata: { name: 'ag', resourceVersion: String(10 + i) } } })}\n`);
      t.match(await nextLine(), { type, object: { metadata: { resourceVersion: String(10 + i) } } }, `${type} arrives while the backend's stream is still open`);
      t.notOk(backend.writableEnded);
    }
    abort.abort();
    await waitFor(() => (backend.destroyed || backend.closed ? true : undefined), 'the backend watch to close when the caller went away');
    const after = await api(server, 'GET', `/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.${GROUP}`);
    t.match(after.body.status.conditions, [{ type: 'Available', status: 'True', reason: 'Passed' }], 'a caller leaving says nothing against the backend');
  });

  await t.test('discovery lists the aggregated group; its group-version document comes from the backend', async (t) => {
    const groups = await api(server, 'GET', '/apis');
    t.same(groups.body.groups.find((g: { name: string }) => g.name === GROUP), { name: GROUP, versions: [{ groupVersion: `${GROUP}/v1beta1`, version: 'v1beta1' }], preferredVersion: { groupVersion: `${GROUP}/v1beta1`, version: 'v1beta1' } });
    t.match((await api(server, 'GET', `/apis/${GROUP}`)).body, { kind: 'APIGroup', name: GROUP, preferredVersion: { version: 'v1beta1' } });
    t.match((await api(server, 'GET', GV)).body, { kind: 'APIResourceList', resources: [{ name: 'addressgroups' }] });
  });

  await t.test('failures: a wrong caBundle, no Endpoints, no Service, a refused connection: 503 naming the APIService and why', async (t) => {
    const otherCa = await makeServingCertificate({ dnsNames: ['elsewhere'], now: new Date() });
    await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1', 'wrongca.example.com', { namespace: 'ext-system', name: 'ext' }, { caBundle: Buffer.from(otherCa.caCert).toString('base64') }));
    const wrong = await api(server, 'GET', '/apis/wrongca.example.com/v1/things');
    t.equal(wrong.status, 503);
    t.match(wrong.body, { kind: 'Status', code: 503, reason: 'ServiceUnavailable', message: /^APIService v1\.wrongca\.example\.com is unavailable: error trying to reach service\/ext in "ext-system" \(127\.0\.0\.1:\d+\): .*(certificate|verify)/i });
    t.match(await availableCondition(server, 'v1.wrongca.example.com', 'False'), { reason: 'FailedDiscoveryCheck', message: /certificate|verify/i });

    await registerBackend(server, 'ext-system', 'noeps', ext.port, true);
    await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1', 'noeps.example.com', { namespace: 'ext-system', name: 'noeps' }, { insecureSkipTLSVerify: true }));
    const noEps = await api(server, 'GET', '/apis/noeps.example.com/v1/things');
    t.equal(noEps.status, 503);
    t.equal(noEps.body.message, 'APIService v1.noeps.example.com is unavailable (EndpointsNotFound): cannot find endpoints for service/noeps in "ext-system"');
    t.match(await availableCondition(server, 'v1.noeps.example.com', 'False'), { reason: 'EndpointsNotFound' });
    // Endpoints appearing make it available (insecureSkipTLSVerify: the name is not checked).
    await api(server, 'POST', '/api/v1/namespaces/ext-system/endpoints', { metadata: { name: 'noeps' }, subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port: ext.port }] }] });
    t.match(await availableCondition(server, 'v1.noeps.example.com', 'True'), { reason: 'Passed' });

    await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1', 'nosvc.example.com', { namespace: 'ext-system', name: 'missing' }, {}));
    const noSvc = await api(server, 'GET', '/apis/nosvc.example.com/v1');
    t.equal(noSvc.status, 503);
    t.match(noSvc.body.message, /v1\.nosvc\.example\.com.*ServiceNotFound.*service\/missing in "ext-system" is not present/);

    const closed = await fakeExtensionServer(frontProxy.caCert, 'gone', 'ext-system');
    await closed.close();
    await registerBackend(server, 'ext-system', 'gone', closed.port);
    await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1', 'gone.example.com', { namespace: 'ext-system', name: 'gone' }, { insecureSkipTLSVerify: true }));
    const refused = await api(server, 'GET', '/apis/gone.example.com/v1/things');
    t.equal(refused.status, 503);
    t.match(refused.body.message, /^APIService v1\.gone\.example\.com is unavailable: error trying to reach service\/gone in "ext-system" \(127\.0\.0\.1:\d+\): .*ECONNREFUSED/);
  });

  await t.test('APIService validation through the API', async (t) => {
    const bad = await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', { ...apiService('v1', 'x.example.com', { namespace: 'a', name: 'b' }, {}), metadata: { name: 'v2.x.example.com' } });
    t.equal(bad.status, 422);
    t.match(bad.body.message, /APIService "v2.x.example.com" is invalid: metadata.name: .*"v1.x.example.com"/);
    const both = await api(server, 'POST', '/apis/apiregistration.k8s.io/v1/apiservices', apiService('v1', 'x.example.com', { namespace: 'a', name: 'b' }, { caBundle: Buffer.from(ext.caCert).toString('base64'), insecureSkipTLSVerify: true }));
    t.equal(both.status, 422);
    t.match(both.body.message, /spec.insecureSkipTLSVerify: .*may not be true if caBundle is present/);
  });

  const noKubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status !== 0 ? 'kubectl is not on PATH' : false;
  await t.test('a real kubectl gets the aggregated resource through the lab', { skip: noKubectl }, async (t) => {
    const dir = t.testdir();
    const kubeconfig = join(dir, 'kubeconfig');
    writeFileSync(kubeconfig, kubeconfigYaml(server.httpsUrl!, TOKEN, labCert.caCert));
    const kubectl = (...args: string[]) => new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile('kubectl', ['--kubeconfig', kubeconfig, '--cache-dir', join(dir, 'cache'), '--request-timeout', '20s', ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      });
    });
    ext.seen.length = 0;
    const table = await kubectl('get', `addressgroups.${GROUP}`, '--field-selector', 'nodeName=node-1');
    t.equal(table.code, 0, table.stderr);
    t.match(table.stdout, /ag-for-node-1/);
    t.ok(ext.seen.some((s) => s.path.startsWith(`${GV}/addressgroups?`) && s.path.includes('fieldSelector=nodeName%3Dnode-1') && s.user === 'sluice-lab-admin' && s.clientCN === 'front-proxy-client'), 'the list reached the backend as the lab admin, through the front proxy');
    const json = await kubectl('get', `addressgroups.${GROUP}`, '--field-selector', 'nodeName=node-3', '-o', 'json');
    t.equal(json.code, 0, json.stderr);
    t.same((JSON.parse(json.stdout) as { items: KObject[] }).items.map((i) => i.metadata.name), ['ag-for-node-3']);
  });
});
