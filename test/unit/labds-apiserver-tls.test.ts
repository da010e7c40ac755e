// The lab API server over HTTPS with the lab's own CA (lab/pki.ts), and ServiceAccount tokens
// (lab/apiserver/satoken.ts): what an in-cluster client — the agent in a DaemonSet Pod — uses.
import { spawnSync } from 'node:child_process';
import * as k8s from '@kubernetes/client-node';
import t from 'tap';
import { startApiServer } from '../../lab/apiserver/server.js';
import { serviceAccountToken, verifyServiceAccountToken } from '../../lab/apiserver/satoken.js';
import { ensureLabPki } from '../../lab/pki.js';

t.test('ServiceAccount tokens: round trip, tampering and other keys are refused', async (t) => {
  const tok = serviceAccountToken('k1', 'sluice-system', 'sluice-agent');
  t.same(verifyServiceAccountToken('k1', tok), { namespace: 'sluice-system', name: 'sluice-agent' });
  t.equal(verifyServiceAccountToken('k2', tok), undefined);
  const forged = tok.replace(/^lab-sa\.[^.]+/, `lab-sa.${Buffer.from('kube-system/default').toString('base64url')}`);
  t.equal(verifyServiceAccountToken('k1', forged), undefined);
  t.equal(verifyServiceAccountToken('k1', 'admin-token'), undefined);
  t.throws(() => serviceAccountToken('', 'a', 'b'), /signing key is empty/);
});

const noOpenssl = spawnSync('openssl', ['version']).status !== 0 ? 'openssl is not installed' : false;

t.test('HTTPS verified against the lab CA; a ServiceAccount token works while its ServiceAccount exists', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir();
  const pki = ensureLabPki(dir);
  t.equal(ensureLabPki(dir).cert, pki.cert, 'made once, then reused');
  const server = await startApiServer({ token: 'admin', tls: { cert: pki.cert, key: pki.key }, serviceAccountKey: 'signing' });
  t.teardown(() => server.close());
  t.match(server.httpsUrl, /^https:\/\/127\.0\.0\.1:\d+$/);

  const client = (token: string) => {
    const kc = new k8s.KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: server.httpsUrl!, caData: Buffer.from(pki.caCert).toString('base64') }],
      users: [{ name: 'u', token }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    return kc.makeApiClient(k8s.CoreV1Api);
  };
  const saToken = serviceAccountToken('signing', 'sys', 'agent');
  await t.rejects(client(saToken).listNamespace(), /401|Unauthorized/, 'no such ServiceAccount yet');
  const admin = client('admin');
  await admin.createNamespace({ body: { metadata: { name: 'sys' } } });
  await admin.createNamespacedServiceAccount({ namespace: 'sys', body: { metadata: { name: 'agent' } } });
  const names = (await client(saToken).listNamespace()).items.map((n) => n.metadata!.name);
  t.ok(names.includes('sys'), 'the ServiceAccount token lists over verified TLS');
  await t.rejects(client(serviceAccountToken('other-key', 'sys', 'agent')).listNamespace(), /401|Unauthorized/);
  await admin.deleteNamespacedServiceAccount({ namespace: 'sys', name: 'agent' });
  await t.rejects(client(saToken).listNamespace(), /401|Unauthorized/, 'refused once the ServiceAccount is gone');

  // A client that does not trust the lab CA fails the handshake.
  const untrusted = new k8s.KubeConfig();
  untrusted.loadFromOptions({
    clusters: [{ name: 'c', server: server.httpsUrl! }], users: [{ name: 'u', token: 'admin' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x',
  });
  await t.rejects(untrusted.makeApiClient(k8s.CoreV1Api).listNamespace(), /certificate|self.signed|UNABLE/i);
});
