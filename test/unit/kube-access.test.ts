/**
 * daemon/kube KubeAccess: the kubeconfig and in-cluster configuration read as client-go reads them,
 * against the lab API server over HTTPS with the lab's CA (openssl-made): the CA is checked, the
 * bearer token is sent, the token file is re-read after a minute, API errors carry the Status
 * message, and every unusable configuration is refused with an error naming what is wrong.
 */
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeAccess, KubeAccessError, KubeApiError } from '../../daemon/kube/access.js';
import { startApiServer } from '../../lab/apiserver/server.js';
import { ensureLabPki } from '../../lab/pki.js';

const dir = mkdtempSync(join(tmpdir(), 'kube-access-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const pki = ensureLabPki(join(dir, 'pki'));
const TOKEN = 'tok-1';

const server = await startApiServer({ token: TOKEN, tls: { cert: pki.cert, key: pki.key } });
t.teardown(() => server.close());
const httpsUrl = server.httpsUrl!;
const port = new URL(httpsUrl).port;

/** A kubeconfig object with one context; `cluster` and `user` bodies as given. */
const kubeconfig = (cluster: Record<string, unknown>, user: Record<string, unknown>) => ({
  apiVersion: 'v1',
  kind: 'Config',
  clusters: [{ name: 'c', cluster }],
  users: [{ name: 'u', user }],
  contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'u' } }],
  'current-context': 'ctx',
});

t.test('kubeconfig with CA data and a token: HTTPS verified, token sent, lists read', async (t) => {
  const access = KubeAccess.fromKubeconfigObject(kubeconfig({ server: httpsUrl, 'certificate-authority-data': Buffer.from(pki.caCert).toString('base64') }, { token: TOKEN }), dir);
  const list = (await access.getJson('/api/v1/namespaces')) as { kind: string; items: unknown[] };
  t.equal(list.kind, 'NamespaceList');
  const created = (await access.postJson('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'made-by-access' } })) as { metadata: { uid?: string } };
  t.ok(created.metadata.uid, 'POST returns the created object');
  const err = await access.getJson('/api/v1/namespaces/nope').catch((e: unknown) => e);
  t.ok(err instanceof KubeApiError, 'an error answer is a KubeApiError');
  t.match(err, { statusCode: 404, reason: 'NotFound', message: /GET \/api\/v1\/namespaces\/nope: HTTP 404 NotFound: namespaces "nope" not found/ });
});

t.test('relative certificate-authority and tokenFile paths are relative to the kubeconfig', async (t) => {
  const sub = mkdtempSync(join(dir, 'cfg-'));
  writeFileSync(join(sub, 'ca.pem'), pki.caCert);
  writeFileSync(join(sub, 'token'), `${TOKEN}\n`);
  const file = join(sub, 'config');
  writeFileSync(file, JSON.stringify(kubeconfig({ server: httpsUrl, 'certificate-authority': 'ca.pem' }, { tokenFile: 'token' })));
  const access = KubeAccess.fromKubeconfig(file);
  t.match(await access.getJson('/api/v1/namespaces'), { kind: 'NamespaceList' }, 'the token file (trailing newline trimmed) authenticates');
});

t.test('the wrong CA or the wrong token fails with a clear error; insecure-skip-tls-verify skips the CA check', async (t) => {
  const other = ensureLabPki(join(dir, 'other-pki'));
  const wrongCa = KubeAccess.fromKubeconfigObject(kubeconfig({ server: httpsUrl, 'certificate-authority-data': Buffer.from(other.caCert).toString('base64') }, { token: TOKEN }), dir);
  await t.rejects(wrongCa.getJson('/api/v1/namespaces'), /self.signed|unable to verify|certificate/i, 'a server certificate the CA did not sign is refused');
  const badToken = KubeAccess.fromKubeconfigObject(kubeconfig({ server: httpsUrl, 'certificate-authority-data': Buffer.from(pki.caCert).toString('base64') }, { token: 'wrong' }), dir);
  t.match(await badToken.getJson('/api/v1/namespaces').catch((e: unknown) => e), { statusCode: 401, message: /HTTP 401/ }, 'a token the server does not accept: 401');
  const insecure = KubeAccess.fromKubeconfigObject(kubeconfig({ server: httpsUrl, 'insecure-skip-tls-verify': true }, { token: TOKEN }), dir);
  t.match(await insecure.getJson('/api/v1/namespaces'), { kind: 'NamespaceList' });
});

t.test('in-cluster: service host and port from the environment, the service account CA and token; the token re-read after a minute', async (t) => {
  const sa = mkdtempSync(join(dir, 'sa-'));
  writeFileSync(join(sa, 'ca.crt'), pki.caCert);
  writeFileSync(join(sa, 'token'), TOKEN);
  let now = 1_000_000;
  const access = KubeAccess.inCluster({ serviceAccountDir: sa, env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port }, now: () => now });
  t.equal(access.server, `https://127.0.0.1:${port}`);
  t.match(await access.getJson('/api/v1/namespaces'), { kind: 'NamespaceList' });
  writeFileSync(join(sa, 'token'), 'rotated-token-the-server-does-not-know');
  now += 59_000;
  t.match(await access.getJson('/api/v1/namespaces'), { kind: 'NamespaceList' }, 'within the minute the token read last is used');
  now += 1_000;
  t.match(await access.getJson('/api/v1/namespaces').catch((e: unknown) => e), { statusCode: 401 }, 'after a minute the rotated token is read and sent');
  t.equal(KubeAccess.inCluster({ serviceAccountDir: sa, env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' } }).server, 'https://[fd00::1]:443', 'an IPv6 service host is bracketed');
  t.throws(() => KubeAccess.inCluster({ serviceAccountDir: sa, env: {} }), /not running in a cluster \(KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT unset\) and no kubeconfig given/);
  t.throws(() => KubeAccess.inCluster({ serviceAccountDir: join(dir, 'none'), env: { KUBERNETES_SERVICE_HOST: 'h', KUBERNETES_SERVICE_PORT: '1' } }), /cannot read the service account CA \(.*none\/ca\.crt\)/);
});

t.test('unusable kubeconfigs are refused, naming what is wrong', async (t) => {
  const ok = { server: httpsUrl };
  const cases: [string, unknown, RegExp][] = [
    ['not a mapping', ['x'], /kubeconfig is not a YAML mapping/],
    ['no context', { clusters: [], users: [], contexts: [] }, /no current-context \(and not exactly one context\)/],
    ['unknown current-context', { ...kubeconfig(ok, {}), 'current-context': 'other' }, /current-context "other" is not among its contexts/],
    ['undefined cluster', { ...kubeconfig(ok, {}), clusters: [] }, /context "ctx" names cluster "c", which it does not define/],
    ['undefined user', { ...kubeconfig(ok, {}), users: [] }, /context "ctx" names user "u", which it does not define/],
    ['no server', kubeconfig({}, {}), /cluster "c" has no server/],
    ['bad server', kubeconfig({ server: 'not a url' }, {}), /server "not a url" is not a URL/],
    ['exec plugin', kubeconfig(ok, { exec: { command: 'aws' } }), /user "u" authenticates with exec, which sluice-agent does not run/],
    ['auth-provider', kubeconfig(ok, { 'auth-provider': { name: 'gcp' } }), /authenticates with auth-provider/],
    ['proxy-url', kubeconfig({ ...ok, 'proxy-url': 'http://proxy:3128' }, {}), /cluster "c" sets proxy-url, which sluice-agent does not support/],
    ['certificate without key', kubeconfig(ok, { 'client-certificate-data': Buffer.from(pki.cert).toString('base64') }), /client certificate without its key/],
    ['missing CA file', kubeconfig({ ...ok, 'certificate-authority': 'missing.pem' }, {}), /cannot read cluster "c" certificate-authority \(.*missing\.pem\)/],
  ];
  for (const [what, doc, re] of cases) {
    t.throws(() => KubeAccess.fromKubeconfigObject(doc, dir), re, what);
  }
  t.throws(() => KubeAccess.fromKubeconfig(join(dir, 'no-such-config')), /cannot read kubeconfig .*no-such-config/);
  writeFileSync(join(dir, 'bad.yaml'), 'clusters: [\n');
  t.throws(() => KubeAccess.fromKubeconfig(join(dir, 'bad.yaml')), KubeAccessError);
  t.equal(KubeAccess.fromKubeconfigObject({ ...kubeconfig(ok, {}), 'current-context': undefined }, dir).server, httpsUrl, 'the only context is used when none is current');
});
