/**
 * Requests through the aggregation layer: the user in X-Remote-User/X-Remote-Group is trusted
 * only on a connection whose client certificate the controller verified against the front-proxy
 * CA, with an allowed name; anything else must bring a token. Users without a Node are authorized
 * by RBAC through a SubjectAccessReview (cached when allowed, never allowed on an error).
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import { request } from 'node:https';
import * as x509 from '@peculiar/x509';
import t from 'tap';
import { loadRequestHeaderConfig, proxiedIdentity, type RequestHeaderConfig, SubjectAccessReviewer } from '../../daemon/controller/aggregation.js';
import { startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { makeServingCertificate } from '../../daemon/controller/certificate.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';
import { KubeApiError } from '../../daemon/kube/access.js';

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** A CA and client certificates it signs (clientAuth), as PEM. */
async function clientPki(names: string[]) {
  const caKeys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const now = new Date(Date.now() - 60_000);
  const end = new Date(Date.now() + 86_400_000);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({ serialNumber: '01', name: 'CN=front-proxy-ca', notBefore: now, notAfter: end, keys: caKeys, signingAlgorithm: ALG, extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)] });
  const clients: Record<string, { cert: string; key: string }> = {};
  for (const [i, cn] of names.entries()) {
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.create({ serialNumber: `0${i + 2}`, subject: `CN=${cn}`, issuer: ca.subject, notBefore: now, notAfter: end, publicKey: keys.publicKey, signingKey: caKeys.privateKey, signingAlgorithm: ALG, extensions: [new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.clientAuth])] });
    const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
    clients[cn] = { cert: cert.toString('pem'), key: `-----BEGIN PRIVATE KEY-----\n${pkcs8.replace(/(.{64})/g, '$1\n')}\n-----END PRIVATE KEY-----\n` };
  }
  return { ca: ca.toString('pem'), clients };
}

t.test('X-Remote-User is trusted on a verified front-proxy certificate only', async (t) => {
  const front = await clientPki(['front-proxy-client', 'intruder']);
  const other = await clientPki(['front-proxy-client']);
  const serving = await makeServingCertificate({ dnsNames: ['sluice-controller.sluice-system.svc'], ips: ['127.0.0.1'], now: new Date() });
  const cfg: RequestHeaderConfig = { clientCa: front.ca, allowedNames: ['front-proxy-client'], usernameHeaders: ['X-Remote-User'], groupHeaders: ['X-Remote-Group'], extraPrefixes: ['X-Remote-Extra-'] };
  const server = await startControlPlaneApiServer({
    store: new ControlPlaneStore(), host: '127.0.0.1', port: 0, tls: { key: serving.key, cert: serving.cert, clientCa: front.ca },
    authenticate: async (req) => proxiedIdentity(req, cfg),
    readAll: (_user, id) => (id.groups ?? []).includes('system:masters'),
  });
  t.teardown(() => server.close());
  const get = (client: { cert: string; key: string } | undefined, headers: Record<string, string | string[]>) => new Promise<number>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path: '/apis/controlplane.sluice.io/v1beta1/addressgroups?fieldSelector=nodeName=node-1', ca: serving.caCert, ...(client ?? {}), headers }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
  const admin = { 'X-Remote-User': 'alice', 'X-Remote-Group': ['system:authenticated', 'system:masters'] };
  t.equal(await get(front.clients['front-proxy-client'], admin), 200, 'the aggregation layer\'s user, allowed by its group');
  t.equal(await get(front.clients['front-proxy-client'], { 'X-Remote-User': 'bob', 'X-Remote-Group': 'system:authenticated' }), 403, 'a user RBAC does not allow');
  t.equal(await get(undefined, admin), 401, 'the headers without the certificate are not believed');
  t.equal(await get(front.clients.intruder, admin), 401, 'a certificate of the CA with a name not allowed');
  t.equal(await get(other.clients['front-proxy-client'], admin), 401, 'a certificate of another CA');
  t.equal(await get(front.clients['front-proxy-client'], { 'X-Remote-Group': 'system:masters' }), 401, 'no user header');
  const agent = { 'X-Remote-User': 'system:serviceaccount:sluice-system:sluice-agent', 'X-Remote-Group': 'system:masters' };
  t.equal(await get(front.clients['front-proxy-client'], { ...agent, 'X-Remote-Extra-authentication.kubernetes.io%2Fnode-name': 'node-1' }), 200, 'an agent through the proxy reads its Node');
  t.equal(await get(front.clients['front-proxy-client'], { ...agent, 'X-Remote-Extra-authentication.kubernetes.io%2Fnode-name': 'node-2' }), 403, 'and not another Node, whatever its groups');
});

t.test('the requestheader settings as the cluster publishes them', async (t) => {
  const cm = (data: Record<string, string>) => ({ getJson: async () => ({ data }) });
  t.same(await loadRequestHeaderConfig(cm({
    'requestheader-client-ca-file': 'PEM', 'requestheader-allowed-names': '["front-proxy-client"]',
    'requestheader-username-headers': '["X-Remote-User"]', 'requestheader-group-headers': '["X-Remote-Group"]', 'requestheader-extra-headers-prefix': '["X-Remote-Extra-"]',
  })), { clientCa: 'PEM', allowedNames: ['front-proxy-client'], usernameHeaders: ['X-Remote-User'], groupHeaders: ['X-Remote-Group'], extraPrefixes: ['X-Remote-Extra-'] });
  t.equal(await loadRequestHeaderConfig(cm({})), undefined, 'no front-proxy CA: tokens only');
  t.equal(await loadRequestHeaderConfig({ getJson: async () => { throw new KubeApiError('not found', 404); } }), undefined, 'no ConfigMap: tokens only');
  await t.rejects(loadRequestHeaderConfig(cm({ 'requestheader-client-ca-file': 'PEM', 'requestheader-allowed-names': 'front-proxy-client' })), /extension-apiserver-authentication/, 'a malformed list names the ConfigMap');
});

t.test('SubjectAccessReview: allowed answers cached, denials and errors are not allows', async (t) => {
  let now = 0;
  const asked: unknown[] = [];
  let allowed = true;
  let fail = false;
  const reviewer = new SubjectAccessReviewer({
    postJson: async (_path: string, body: unknown) => {
      asked.push(body);
      if (fail) throw new Error('connection refused');
      return { status: { allowed } };
    },
  }, { clock: { now: () => now }, ttlMs: 10_000 });
  const alice = { user: 'alice', groups: ['devs'] };
  t.ok(await reviewer.mayList(alice, 'addressgroups'));
  t.match(asked[0], { spec: { user: 'alice', groups: ['devs'], resourceAttributes: { group: 'controlplane.sluice.io', resource: 'addressgroups', verb: 'list' } } });
  t.ok(await reviewer.mayList(alice, 'addressgroups'));
  t.equal(asked.length, 1, 'cached');
  now = 11_000;
  allowed = false;
  t.notOk(await reviewer.mayList(alice, 'addressgroups'), 'asked again after the TTL: now denied');
  t.notOk(await reviewer.mayList(alice, 'addressgroups'));
  t.equal(asked.length, 3, 'a denial is not cached');
  fail = true;
  await t.rejects(reviewer.mayList(alice, 'addressgroups'), /connection refused/, 'an error is no verdict');
});
