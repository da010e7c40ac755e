// daemon/controlplane/service-address.ts and controller-ca.ts, and their wiring for controller
// mode (enforcement/index.ts controllerAccess): a host-network agent reaches the controller's
// Service at its ClusterIP read through the API, with the CA read through the API (or a file) at
// each connection attempt; over real HTTPS on 127.0.0.1, TLS verifies the Service's name.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { LookupAddress } from 'node:dns';
import type { AddressInfo, LookupFunction } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { makeServingCertificate, serviceNames } from '../../daemon/controller/certificate.js';
import { startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';
import { CA_CONFIGMAP as PUBLISHED_CA_CONFIGMAP, CONTROLLER_SERVICE } from '../../daemon/controller/tls-secret.js';
import { askController, ControlPlaneWatcher } from '../../daemon/controlplane/client.js';
import { CA_CONFIGMAP, caFromConfigMap, caFromFile } from '../../daemon/controlplane/controller-ca.js';
import { clusterIPsOf, type ObjectGetter, readThroughApi, ServiceAddresses, serviceOfHost } from '../../daemon/controlplane/service-address.js';
import { CONTROLPLANE_API_VERSION } from '../../daemon/controlplane/types.js';
import { parseConfig } from '../../daemon/config.js';
import { controllerAccess } from '../../daemon/enforcement/index.js';
import { KubeApiError } from '../../daemon/kube/access.js';
import type { KubeObject } from '../../daemon/policy/types.js';

const service = (spec: Record<string, unknown>, name = 'sluice-controller', namespace = 'sluice-system'): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec });
const configMap = (data: Record<string, string> | undefined): KubeObject => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'sluice-ca', namespace: 'sluice-system' }, ...(data ? { data } : {}) });

/** A getter over a mutable table ("ns/name" → object, or an Error to throw), counting its reads. */
function fakeGetter(objects: Record<string, KubeObject | Error>) {
  const reads: string[] = [];
  const get: ObjectGetter = async (ns, name) => {
    reads.push(`${ns}/${name}`);
    const o = objects[`${ns}/${name}`];
    if (o instanceof Error) throw o;
    return o;
  };
  return { get, reads, objects };
}

/** One call of a LookupFunction: its error or its answer. */
function lookupOnce(lookup: LookupFunction, host: string, options: Parameters<LookupFunction>[1]): Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family: number | undefined }> {
  return new Promise((resolve) => lookup(host, options, (err, address, family) => resolve({ err, address, family })));
}

t.test('serviceOfHost: <service>.<namespace>.svc with any cluster domain, nothing else', async (t) => {
  t.same(serviceOfHost('sluice-controller.sluice-system.svc'), { name: 'sluice-controller', namespace: 'sluice-system' });
  t.same(serviceOfHost('sluice-controller.sluice-system.svc.cluster.local'), { name: 'sluice-controller', namespace: 'sluice-system' });
  t.same(serviceOfHost('Sluice-Controller.sluice-system.svc.corp.example.'), { name: 'sluice-controller', namespace: 'sluice-system' }, 'case and a final dot do not matter');
  for (const h of ['127.0.0.1', '[::1]', '::1', 'localhost', 'sluice-controller', 'sluice-controller.sluice-system', 'a.b.c.svc', 'controller.example.com', '-x.ns.svc']) {
    t.equal(serviceOfHost(h), undefined, `${h}: not a Service name`);
  }
  t.equal(PUBLISHED_CA_CONFIGMAP, CA_CONFIGMAP, 'the agent reads the ConfigMap the controller publishes');
  t.same(serviceNames(CONTROLLER_SERVICE, 'sluice-system').filter((n) => serviceOfHost(n)), ['sluice-controller.sluice-system.svc', 'sluice-controller.sluice-system.svc.cluster.local'],
    'the controller\'s certificate names the Service names the agents may be given');
});

t.test('lookup: a Service name resolves to its ClusterIP, in both callback shapes and both families', async (t) => {
  const api = fakeGetter({
    'sluice-system/sluice-controller': service({ clusterIP: '10.100.0.7', clusterIPs: ['10.100.0.7'] }),
    'sluice-system/v6': service({ clusterIP: 'fd00:100::7', clusterIPs: ['fd00:100::7'] }),
  });
  const { lookup } = new ServiceAddresses({ getService: api.get });
  t.same(await lookupOnce(lookup, 'sluice-controller.sluice-system.svc', {}), { err: null, address: '10.100.0.7', family: 4 }, 'one address');
  t.same(await lookupOnce(lookup, 'sluice-controller.sluice-system.svc.cluster.local', { all: true }), { err: null, address: [{ address: '10.100.0.7', family: 4 }], family: undefined }, 'all: every address (Node ≥ 20 with autoSelectFamily)');
  t.same(await lookupOnce(lookup, 'v6.sluice-system.svc', {}), { err: null, address: 'fd00:100::7', family: 6 }, 'IPv6: family 6');
  t.same(await lookupOnce(lookup, 'v6.sluice-system.svc', { all: true, family: 6 }), { err: null, address: [{ address: 'fd00:100::7', family: 6 }], family: undefined });
  const v4only = await lookupOnce(lookup, 'v6.sluice-system.svc', { family: 4 });
  t.match(v4only.err, { message: 'Service sluice-system/v6 has no IPv4 ClusterIP (it has fd00:100::7)', code: 'ENOTFOUND', hostname: 'v6.sluice-system.svc' }, 'a family the Service lacks');
});

t.test('lookup: dual-stack clusterIPs keep their order; a family asked for keeps that family', async (t) => {
  const api = fakeGetter({ 'sluice-system/sluice-controller': service({ clusterIP: 'fd00:100::7', clusterIPs: ['fd00:100::7', '10.100.0.7'], ipFamilies: ['IPv6', 'IPv4'] }) });
  const { lookup } = new ServiceAddresses({ getService: api.get });
  const host = 'sluice-controller.sluice-system.svc';
  t.same((await lookupOnce(lookup, host, { all: true })).address, [{ address: 'fd00:100::7', family: 6 }, { address: '10.100.0.7', family: 4 }], 'both, the primary family first');
  t.same(await lookupOnce(lookup, host, {}), { err: null, address: 'fd00:100::7', family: 6 }, 'one: the primary');
  t.same(await lookupOnce(lookup, host, { family: 4 }), { err: null, address: '10.100.0.7', family: 4 });
  t.same(await lookupOnce(lookup, host, { family: 'IPv4', all: true }), { err: null, address: [{ address: '10.100.0.7', family: 4 }], family: undefined });
  t.same(api.reads, ['sluice-system/sluice-controller'], 'one read for all four');
  t.same(clusterIPsOf({ namespace: 'ns', name: 's' }, service({ clusterIP: '10.0.0.1' })), ['10.0.0.1'], 'spec.clusterIP when there is no clusterIPs');
});

t.test('lookup: an answer is kept for the TTL and read again after; a failure is never kept', async (t) => {
  let now = 0;
  const api = fakeGetter({ 'sluice-system/sluice-controller': service({ clusterIPs: ['10.100.0.7'] }) });
  const addrs = new ServiceAddresses({ getService: api.get, ttlMs: 10_000, now: () => now });
  const svc = { namespace: 'sluice-system', name: 'sluice-controller' };
  t.same(await addrs.clusterIPs(svc), ['10.100.0.7']);
  api.objects['sluice-system/sluice-controller'] = service({ clusterIPs: ['10.100.0.8'] });
  now = 9_999;
  t.same(await addrs.clusterIPs(svc), ['10.100.0.7'], 'within the TTL: the answer kept');
  t.equal(api.reads.length, 1);
  now = 10_000;
  t.same(await addrs.clusterIPs(svc), ['10.100.0.8'], 'after it: read again (the Service was recreated)');
  t.equal(api.reads.length, 2);

  // Readers at once share one read (a reconnect storm of every watch).
  now = 30_000;
  const all = await Promise.all([addrs.clusterIPs(svc), addrs.clusterIPs(svc), addrs.clusterIPs(svc)]);
  t.same(all, [['10.100.0.8'], ['10.100.0.8'], ['10.100.0.8']]);
  t.equal(api.reads.length, 3, 'three callers at once, one read');

  // A definitive answer (gone) fails and is not kept: the Service back, it is used at once.
  now = 50_000;
  delete api.objects['sluice-system/sluice-controller'];
  await t.rejects(addrs.clusterIPs(svc), { message: 'Service sluice-system/sluice-controller not found' });
  api.objects['sluice-system/sluice-controller'] = service({ clusterIPs: ['10.100.0.9'] });
  t.same(await addrs.clusterIPs(svc), ['10.100.0.9'], 'read again at the next attempt, no wait');

  // The API server unreadable with nothing read before: an error naming the Service; not kept.
  const fresh = fakeGetter({ 'sluice-system/sluice-controller': new KubeApiError('GET /api/v1/namespaces/sluice-system/services/sluice-controller: HTTP 429', 429) });
  const cold = new ServiceAddresses({ getService: fresh.get, now: () => now });
  await t.rejects(cold.clusterIPs(svc), { message: /^Service sluice-system\/sluice-controller: cannot read it through the API: GET .*HTTP 429$/ });
  fresh.objects['sluice-system/sluice-controller'] = service({ clusterIPs: ['10.100.0.9'] });
  t.same(await cold.clusterIPs(svc), ['10.100.0.9'], 'the failure was not kept');
  // Unreadable after an answer (expired): that answer is the best guess meanwhile, and the next attempt asks again.
  now += 60_000;
  fresh.objects['sluice-system/sluice-controller'] = new Error('connect ECONNREFUSED');
  t.same(await cold.clusterIPs(svc), ['10.100.0.9'], 'the last answer while the API server cannot be read');
  fresh.objects['sluice-system/sluice-controller'] = service({ clusterIPs: ['10.100.0.10'] });
  t.same(await cold.clusterIPs(svc), ['10.100.0.10'], 'asked again at once');
});

t.test('lookup: a Service with no ClusterIP to connect to is refused, naming it', async (t) => {
  const api = fakeGetter({
    'sluice-system/headless': service({ clusterIP: 'None', clusterIPs: ['None'] }, 'headless'),
    'sluice-system/external': service({ type: 'ExternalName', externalName: 'controller.example.com' }, 'external'),
    'sluice-system/pending': service({}, 'pending'),
  });
  const { lookup } = new ServiceAddresses({ getService: api.get, notFoundHint: 'the controller is installed by install/sluice.yaml' });
  const cases: [string, string][] = [
    ['sluice-controller.sluice-system.svc', 'Service sluice-system/sluice-controller not found (the controller is installed by install/sluice.yaml)'],
    ['headless.sluice-system.svc', 'Service sluice-system/headless is headless (clusterIP None): it has no ClusterIP to connect to'],
    ['external.sluice-system.svc', 'Service sluice-system/external is of type ExternalName (controller.example.com): it has no ClusterIP to connect to'],
    ['pending.sluice-system.svc', 'Service sluice-system/pending has no ClusterIP (not allocated yet)'],
  ];
  for (const [host, message] of cases) {
    for (const all of [false, true]) {
      const r = await lookupOnce(lookup, host, { all });
      t.match(r.err, { message, code: 'ENOTFOUND', hostname: host }, `${host} (all: ${all})`);
    }
  }
});

t.test('lookup: other names go to dns.lookup, and the API is not asked', async (t) => {
  const api = fakeGetter({});
  const { lookup } = new ServiceAddresses({ getService: api.get });
  const one = await lookupOnce(lookup, 'localhost', { family: 4 });
  t.same(one, { err: null, address: '127.0.0.1', family: 4 }, 'localhost through the system resolver');
  const all = await lookupOnce(lookup, 'localhost', { all: true, family: 4 });
  t.same(all.address, [{ address: '127.0.0.1', family: 4 }], 'all: true as dns.lookup answers it');
  t.same(await lookupOnce(lookup, '127.0.0.1', {}), { err: null, address: '127.0.0.1', family: 4 }, 'an address literal');
  const fallback: string[] = [];
  const custom = new ServiceAddresses({
    getService: api.get,
    fallback: (host, _o, cb) => {
      fallback.push(host);
      cb(null, '192.0.2.1', 4);
    },
  });
  t.same(await lookupOnce(custom.lookup, 'controller.example.com', {}), { err: null, address: '192.0.2.1', family: 4 });
  t.same(fallback, ['controller.example.com']);
  t.same(api.reads, [], 'no Service read');
});

t.test('readThroughApi: GET of the core object; 404 = none, other errors thrown', async (t) => {
  const paths: string[] = [];
  const api = {
    getJson: async (path: string) => {
      paths.push(path);
      if (path.endsWith('/missing')) throw new KubeApiError(`GET ${path}: HTTP 404 NotFound`, 404, 'NotFound');
      if (path.endsWith('/forbidden')) throw new KubeApiError(`GET ${path}: HTTP 403 Forbidden: configmaps "forbidden" is forbidden`, 403, 'Forbidden');
      return configMap({ 'ca.crt': 'x' });
    },
  };
  const get = readThroughApi(api, 'configmaps');
  t.match(await get('sluice-system', 'sluice-ca'), { kind: 'ConfigMap' });
  t.equal(await get('sluice-system', 'missing'), undefined);
  await t.rejects(get('sluice-system', 'forbidden'), /HTTP 403 Forbidden/);
  t.same(paths, ['/api/v1/namespaces/sluice-system/configmaps/sluice-ca', '/api/v1/namespaces/sluice-system/configmaps/missing', '/api/v1/namespaces/sluice-system/configmaps/forbidden']);
  t.same(await readThroughApi({ getJson: async (p) => ({ p }) }, 'services')('ns', 'svc'), { p: '/api/v1/namespaces/ns/services/svc' });
});

t.test('CA from the ConfigMap: not published yet is a clear reason; present is used; kept briefly; follows a rotation', async (t) => {
  let now = 0;
  const api = fakeGetter({});
  const ca = caFromConfigMap({ getConfigMap: api.get, namespace: 'sluice-system', now: () => now });
  await t.rejects(ca(), { message: 'CA not published yet: ConfigMap sluice-system/sluice-ca not found (the controller publishes it when it first leads)' });
  api.objects['sluice-system/sluice-ca'] = configMap(undefined);
  await t.rejects(ca(), { message: 'CA not published yet: ConfigMap sluice-system/sluice-ca has no ca.crt' }, 'no failure kept: read again');
  api.objects['sluice-system/sluice-ca'] = configMap({ 'ca.crt': 'garbage' });
  await t.rejects(ca(), { message: 'ConfigMap sluice-system/sluice-ca: ca.crt holds no PEM certificate' });
  const pem1 = '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n';
  const pem2 = '-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n';
  api.objects['sluice-system/sluice-ca'] = configMap({ 'ca.crt': pem1 });
  t.equal(await ca(), pem1, 'published: used');
  const reads = api.reads.length;
  api.objects['sluice-system/sluice-ca'] = configMap({ 'ca.crt': pem2 });
  now = 4_999;
  t.equal(await ca(), pem1, 'kept within 5 s');
  t.equal(api.reads.length, reads);
  now = 5_000;
  t.equal(await ca(), pem2, 'a rotated CA is read after');
  now = 20_000;
  api.objects['sluice-system/sluice-ca'] = new Error('connect ECONNREFUSED');
  t.equal(await ca(), pem2, 'the API server unreadable: the CA read last');
  const cold = caFromConfigMap({ getConfigMap: api.get, namespace: 'sluice-system' });
  await t.rejects(cold(), { message: 'ConfigMap sluice-system/sluice-ca: cannot read the controller\'s CA through the API: connect ECONNREFUSED' }, 'and nothing read before: named');
});

t.test('CA from a file: read at each attempt, a missing file names it and stops nothing', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'ctl-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'ca.crt');
  const ca = caFromFile(file, 'a hint');
  await t.rejects(ca(), { message: `controllerCAFile ${file}: ENOENT (a hint)` });
  writeFileSync(file, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
  t.match(await ca(), /BEGIN CERTIFICATE/, 'there now: read');
  writeFileSync(file, '');
  await t.rejects(ca(), { message: `controllerCAFile ${file}: holds no PEM certificate` });
});

t.test('configuration: controllerCAFile "" by default (the API); a path as before; "" needs a Service name', async (t) => {
  const env = { NODE_NAME: 'n1' };
  t.equal(parseConfig('', 'a', env).controllerCAFile, '', 'default: from the API');
  t.equal(parseConfig('policySource: controller', 'a', env).controllerCAFile, '', 'the default server is a Service name');
  t.equal(parseConfig('controllerCAFile: ""', 'a', env).controllerCAFile, '');
  t.equal(parseConfig('controllerCAFile: /etc/sluice/ca.crt', 'a', env).controllerCAFile, '/etc/sluice/ca.crt');
  t.throws(() => parseConfig('policySource: controller\ncontrollerServer: https://127.0.0.1:10351', 'x.yaml', env),
    /^x\.yaml: controllerCAFile: must be set: "" reads the CA from ConfigMap sluice-ca in the controllerServer Service's namespace, and "127\.0\.0\.1" is not a Service name/);
  t.equal(parseConfig('policySource: controller\ncontrollerServer: http://127.0.0.1:10351', 'a', env).controllerCAFile, '', 'plain http needs no CA');
  t.equal(parseConfig('controllerServer: https://127.0.0.1:10351', 'a', env).policySource, 'standalone', 'standalone agents do not care');
});

t.test('controllerAccess: a Service name is looked up and its CA read through the API, lazily; an address is not', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'ctl-access-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let loaded = 0;
  const paths: string[] = [];
  const api = () => {
    loaded++;
    return {
      getJson: async (path: string) => {
        paths.push(path);
        throw new KubeApiError(`GET ${path}: HTTP 404`, 404);
      },
    };
  };
  const access = controllerAccess({ controllerServer: 'https://sluice-controller.sluice-system.svc:443', controllerCAFile: '', controllerTokenFile: '' }, api);
  t.equal(loaded, 0, 'nothing read at start: the CA may not be published yet');
  t.type(access.lookup, 'function');
  t.type(access.ca, 'function');
  await t.rejects((access.ca as () => Promise<string>)(), /CA not published yet: ConfigMap sluice-system\/sluice-ca not found/);
  const r = await lookupOnce(access.lookup!, 'sluice-controller.sluice-system.svc', {});
  t.equal(r.err?.message, 'Service sluice-system/sluice-controller not found (the controller is installed by install/sluice.yaml)');
  t.equal(loaded, 1, 'one API connection for both');
  t.same(paths, ['/api/v1/namespaces/sluice-system/configmaps/sluice-ca', '/api/v1/namespaces/sluice-system/services/sluice-controller']);

  const missing = join(dir, 'not-yet.crt');
  const lab = controllerAccess({ controllerServer: 'https://127.0.0.1:10351', controllerCAFile: missing, controllerTokenFile: '' }, api);
  t.equal(lab.lookup, undefined, 'an address: no lookup');
  await t.rejects((lab.ca as () => Promise<string>)(), { message: `controllerCAFile ${missing}: ENOENT (the controller publishes its CA in the ConfigMap sluice-ca; controllerCAFile "" reads it from there through the API)` },
    'a CA file not there yet fails the attempt, not the start');
  t.equal(loaded, 1, 'the API is not used for an address and a file');
  t.throws(() => controllerAccess({ controllerServer: 'https://127.0.0.1:1', controllerCAFile: '', controllerTokenFile: join(dir, 'no-token') }, api), /controllerCAFile "" needs a controllerServer naming a Service/);
  t.throws(() => controllerAccess({ controllerServer: 'http://127.0.0.1:1', controllerCAFile: '', controllerTokenFile: join(dir, 'no-token') }, api), /controllerTokenFile .*no-token: ENOENT/);
});

t.test('HTTPS by the ClusterIP: SNI and verification use the Service name; a CA from the API; another name fails', async (t) => {
  const host = 'sluice-controller.sluice-system.svc';
  const pki = await makeServingCertificate({ dnsNames: serviceNames(CONTROLLER_SERVICE, 'sluice-system'), now: new Date() });
  const sni: (string | false | null)[] = [];
  const server = https.createServer({ key: pki.key, cert: pki.cert }, (req, res) => {
    sni.push((req.socket as TLSSocket).servername);
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ realized: false }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.address() as AddressInfo).port;
  const api = fakeGetter({
    'sluice-system/sluice-controller': service({ clusterIP: '127.0.0.1', clusterIPs: ['127.0.0.1'] }),
    'sluice-system/other': service({ clusterIP: '127.0.0.1' }, 'other'),
    'sluice-system/sluice-ca': configMap(undefined),
  });
  const addresses = new ServiceAddresses({ getService: api.get });
  const looked: string[] = [];
  const lookup: LookupFunction = (h, o, cb) => {
    looked.push(h);
    addresses.lookup(h, o, cb);
  };
  const ca = caFromConfigMap({ getConfigMap: api.get, namespace: 'sluice-system', ttlMs: 0 });
  const access = { server: `https://${host}:${port}`, lookup, ca };
  const q = { namespace: 'x', name: 'a', ips: ['10.1.0.5'] };

  await t.rejects(askController(access, q, 0), { message: `controller https://${host}:${port}: CA not published yet: ConfigMap sluice-system/sluice-ca has no ca.crt` }, 'no CA yet: the reason says so');
  api.objects['sluice-system/sluice-ca'] = configMap({ 'ca.crt': pki.caCert });
  t.equal(await askController(access, q, 0), undefined, 'the controller answered, reached at 127.0.0.1 by the Service name');
  t.same(sni, [host], 'SNI: the Service name');
  t.same(looked, [host], 'the connection asked the lookup for the Service name');
  await t.rejects(askController({ ...access, server: `https://other.sluice-system.svc:${port}` }, q, 0), /other\.sluice-system\.svc:\d+: Hostname\/IP does not match certificate's altnames/,
    'the same address by a name the certificate does not hold: refused (verification is by name)');
  const foreign = await makeServingCertificate({ dnsNames: [host], now: new Date() });
  await t.rejects(askController({ ...access, ca: async () => foreign.caCert }, q, 0), /certificate/, 'a CA the certificate does not chain to: refused');
  // (Another name: the keep-alive connection to the first one would be reused.)
  await t.rejects(askController({ ...access, server: `https://gone.sluice-system.svc:${port}` }, q, 0), { message: `controller https://gone.sluice-system.svc:${port}: gone.sluice-system.svc:${port}: Service sluice-system/gone not found` }, 'no Service: named');
});

t.test('the watcher: waits for the CA, then lists and watches the controller by its Service name', async (t) => {
  const host = 'sluice-controller.sluice-system.svc';
  const pki = await makeServingCertificate({ dnsNames: serviceNames(CONTROLLER_SERVICE, 'sluice-system'), now: new Date() });
  const store = new ControlPlaneStore();
  store.set('n1', 'AddressGroup', 'ag-1', { apiVersion: CONTROLPLANE_API_VERSION, kind: 'AddressGroup', metadata: { name: 'ag-1' }, members: [], ipBlocks: [] });
  const server = await startControlPlaneApiServer({ store, authenticate: async () => ({ user: 'agent', nodeName: 'n1' }), readAll: () => false, tls: { key: pki.key, cert: pki.cert } });
  t.teardown(() => server.close());
  const api = fakeGetter({ 'sluice-system/sluice-controller': service({ clusterIPs: ['127.0.0.1'] }) });
  const states: string[] = [];
  const synced: string[] = [];
  const watcher = new ControlPlaneWatcher({
    server: `https://${host}:${server.port}`,
    nodeName: 'n1',
    kinds: ['AddressGroup'],
    lookup: new ServiceAddresses({ getService: api.get }).lookup,
    ca: caFromConfigMap({ getConfigMap: api.get, namespace: 'sluice-system', ttlMs: 0 }),
    initialBackoffMs: 10,
    maxBackoffMs: 20,
    onSync: (_k, items) => synced.push(items.map((i) => i.metadata.name).join(',')),
    onEvent: () => {},
    onState: (s, reason) => states.push(`${s}: ${reason}`),
  });
  watcher.start();
  await until(() => states.length === 1, 'a state');
  t.same(states, ['disconnected: addressgroups: CA not published yet: ConfigMap sluice-system/sluice-ca not found (the controller publishes it when it first leads)']);
  api.objects['sluice-system/sluice-ca'] = configMap({ 'ca.crt': pki.caCert });
  await until(() => states.length === 2, 'connected');
  t.match(states[1], /^connected: /);
  t.same(synced, ['ag-1']);
  await watcher.stop();

  // Stopped while its CA is being read: the stop does not wait for the read.
  let release: () => void = () => {};
  const hanging = new ControlPlaneWatcher({
    server: `https://${host}:${server.port}`, nodeName: 'n1', kinds: ['AddressGroup'],
    ca: () => new Promise<string>((resolve) => (release = () => resolve(pki.caCert))),
    onSync: () => {}, onEvent: () => {},
  });
  hanging.start();
  await new Promise((r) => setTimeout(r, 20));
  await hanging.stop();
  release();
  t.pass('stopped during the CA read');
});

async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
