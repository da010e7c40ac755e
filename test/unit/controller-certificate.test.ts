/**
 * The controller's own CA and serving certificate: a TLS client that trusts only that CA connects
 * by every Service name and refuses another name; renewal is due 30 days before the end.
 */
import { X509Certificate } from 'node:crypto';
import { request, createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { startControlPlaneApiServer } from '../../daemon/controller/apiserver.js';
import { issueServingCertificate, makeCa, makeServingCertificate, needsRenewal, serviceNames } from '../../daemon/controller/certificate.js';
import { ControlPlaneStore } from '../../daemon/controller/store.js';

const names = serviceNames('sluice-controller', 'kube-system');

t.test('the serving certificate is issued by the CA for the Service names', async (t) => {
  const c = await makeServingCertificate({ dnsNames: names, ips: ['127.0.0.1'], now: new Date() });
  const ca = new X509Certificate(c.caCert);
  const cert = new X509Certificate(c.cert);
  t.ok(ca.ca, 'the CA certificate is a CA');
  t.ok(cert.checkIssued(ca) && cert.verify(ca.publicKey), 'the serving certificate is signed by it');
  t.notOk(cert.ca, 'the serving certificate is not a CA');
  for (const n of names) t.ok(cert.checkHost(n), `valid for ${n}`);
  t.ok(cert.checkIP('127.0.0.1'), 'and for its IP');
  t.notOk(cert.checkHost('other.kube-system.svc'), 'not for another name');
  const again = await makeServingCertificate({ dnsNames: names, now: new Date() });
  t.not(again.caCert, c.caCert, 'each call makes a new CA');
  await t.rejects(makeServingCertificate({ dnsNames: [], now: new Date() }), /at least one DNS name/);
});

t.test('a TLS client trusting only the CA connects; with a name not in the certificate it refuses', async (t) => {
  const c = await makeServingCertificate({ dnsNames: names, ips: ['127.0.0.1'], now: new Date() });
  const server = createServer({ cert: c.cert, key: c.key }, (_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const port = (server.address() as AddressInfo).port;
  const get = (servername: string) => new Promise<string>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', ca: c.caCert, servername }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(await get('sluice-controller.kube-system.svc'), 'ok');
  await t.rejects(get('evil.example'), /altnames|Hostname\/IP does not match/);
});

t.test('renewal is due 30 days before the end', async (t) => {
  const now = new Date('2026-11-28T00:00:00Z');
  t.notOk(needsRenewal({ notAfter: '2027-11-28T00:00:00Z' }, now));
  t.ok(needsRenewal({ notAfter: '2026-12-20T00:00:00Z' }, now));
  t.ok(needsRenewal({ notAfter: 'garbage' }, now), 'an unreadable date is renewed');
});

t.test('a serving certificate issued again by the same CA; the server serves a renewed one to new connections', async (t) => {
  const now = new Date();
  const ca = await makeCa(now);
  const first = await issueServingCertificate(ca, { dnsNames: names, ips: ['127.0.0.1'], now });
  const again = await issueServingCertificate(ca, { dnsNames: names, ips: ['127.0.0.1'], now });
  t.equal(again.caCert, first.caCert);
  t.ok(new X509Certificate(again.cert).checkIssued(new X509Certificate(ca.caCert)), 'signed by the kept CA');
  const late = await issueServingCertificate({ ...ca, notAfter: new Date(now.getTime() + 86_400_000).toISOString() }, { dnsNames: names, now });
  t.ok(Date.parse(late.notAfter) <= now.getTime() + 86_400_000, 'never valid past its CA');

  const other = await makeServingCertificate({ dnsNames: names, ips: ['127.0.0.1'], now });
  const server = await startControlPlaneApiServer({ store: new ControlPlaneStore(), host: '127.0.0.1', port: 0, tls: { key: first.key, cert: first.cert }, authenticate: async () => undefined, readAll: () => false });
  t.teardown(() => server.close());
  const healthz = (caCert: string) => new Promise<number>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: server.port, path: '/healthz', ca: caCert, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(await healthz(ca.caCert), 200);
  server.setCertificate({ key: other.key, cert: other.cert });
  t.equal(await healthz(other.caCert), 200, 'a new connection gets the new certificate');
  await t.rejects(healthz(ca.caCert), /self.signed|unable to verify|certificate/i, 'and no longer the old one');
});
