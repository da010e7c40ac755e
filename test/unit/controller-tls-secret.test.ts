/**
 * The replicas share one certificate through a Secret, against the lab API server's real
 * create/patch semantics: two replicas starting together end up with the same set (one makes it,
 * the other reads it), a set near its end is renewed once, and the CA is published for the agents
 * (ConfigMap) and, when installed, the APIService.
 */
import { X509Certificate } from 'node:crypto';
import t from 'tap';
import { CA_CONFIGMAP, ensureSharedCertificate, publishCa, TLS_SECRET } from '../../daemon/controller/tls-secret.js';
import { labAccess, startLab } from './apiserver-helpers.js';

t.test('two replicas share one set; renewal 30 days before the end; the CA is published', async (t) => {
  const lab = await startLab(t);
  const io = labAccess(lab);
  await lab.core.createNamespace({ body: { metadata: { name: 'kube-system' } } }).catch(() => undefined);
  const now = new Date();
  const [a, b] = await Promise.all([ensureSharedCertificate(io, 'kube-system', now, ['127.0.0.1']), ensureSharedCertificate(io, 'kube-system', now, ['127.0.0.1'])]);
  t.equal(a.cert.cert, b.cert.cert, 'both replicas serve the same certificate');
  t.equal([a.made, b.made].filter(Boolean).length, 1, 'exactly one made it');
  const secret = await lab.core.readNamespacedSecret({ name: TLS_SECRET, namespace: 'kube-system' });
  t.equal(secret.type, 'kubernetes.io/tls');
  t.ok(new X509Certificate(a.cert.cert).checkHost('sluice-controller.kube-system.svc'), 'for the Service name');

  const again = await ensureSharedCertificate(io, 'kube-system', now);
  t.notOk(again.made, 'a restart reads the set');
  const late = new Date(Date.parse(a.cert.notAfter) - 10 * 86_400_000);
  const [r1, r2] = await Promise.all([ensureSharedCertificate(io, 'kube-system', late), ensureSharedCertificate(io, 'kube-system', late)]);
  t.equal(r1.cert.cert, r2.cert.cert, 'renewed once for both');
  t.not(r1.cert.cert, a.cert.cert, 'a new serving certificate 10 days before the end');
  t.equal(r1.cert.caCert, a.cert.caCert, 'issued by the same CA: nothing anyone trusts changes');
  t.ok(new X509Certificate(r1.cert.cert).checkIssued(new X509Certificate(a.cert.caCert)), 'and signed by it');
  t.notOk(r1.newCa || r2.newCa, 'no new CA');
  // A CA itself near its end (10 years on) is replaced with the serving certificate.
  const decade = new Date(now.getTime() + 3640 * 86_400_000);
  const r3 = await ensureSharedCertificate(io, 'kube-system', decade);
  t.ok(r3.made && r3.newCa, 'a new CA when the CA is due');
  t.not(r3.cert.caCert, a.cert.caCert);

  t.same(await publishCa(io, 'kube-system', r1.cert.caCert), { apiService: false }, 'no APIService installed: the ConfigMap only');
  const cm = await lab.core.readNamespacedConfigMap({ name: CA_CONFIGMAP, namespace: 'kube-system' });
  t.equal(cm.data?.['ca.crt'], r1.cert.caCert, 'the agents read the CA from the ConfigMap');
  await publishCa(io, 'kube-system', r3.cert.caCert);
  const cm2 = await lab.core.readNamespacedConfigMap({ name: CA_CONFIGMAP, namespace: 'kube-system' });
  t.equal(cm2.data?.['ca.crt'], r3.cert.caCert, 'and follow a new one');
});
