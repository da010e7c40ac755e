/**
 * The controller's TLS material: a self-signed CA (10 years) and serving certificates it signs
 * (1 year) for the controller Service's names, as the seed's controller makes its own (no
 * cert-manager needed). The CA is what the APIService's caBundle and the agents trust; it stays
 * when a serving certificate is renewed, so a renewal changes nothing anyone trusts. The replicas
 * share one set, kept in a Secret (tls-secret.ts), so a takeover changes no certificate either.
 *
 * X.509 is built with @peculiar/x509 (node:crypto signs but cannot build certificates; the lab
 * uses the openssl CLI, which the image does not carry). ECDSA P-256 keys.
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type KeyPair = webcrypto.CryptoKeyPair;

export interface ServingCertificate {
  /** PEM of the CA certificate (the trust anchor to publish). */
  caCert: string;
  /** PEM of the serving certificate, and of its PKCS#8 private key. */
  cert: string;
  key: string;
  /** When the serving certificate expires (ISO 8601). */
  notAfter: string;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

/** Serial numbers are random (RFC 5280: positive, at most 20 octets). */
function serial(): string {
  const bytes = webcrypto.getRandomValues(new Uint8Array(16));
  bytes[0]! &= 0x7f;
  return Buffer.from(bytes).toString('hex');
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64').replace(/(.{64})/g, '$1\n').trimEnd();
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

/** The controller's CA: what agents and the APIService trust, kept across serving certificates. */
export interface ControllerCa {
  caCert: string;
  /** PEM of its PKCS#8 private key (kept in the Secret only). */
  caKey: string;
  notAfter: string;
}

/** A new CA, valid `days` (default 10 years) from `now`. */
export async function makeCa(now: Date, days = 3650): Promise<ControllerCa> {
  const notAfter = new Date(now.getTime() + days * 86_400_000);
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as KeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(), name: 'CN=sluice-controller-ca', notBefore: new Date(now.getTime() - 5 * 60_000), notAfter, keys, signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { caCert: `${ca.toString('pem')}\n`, caKey: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)), notAfter: notAfter.toISOString() };
}

/**
 * A serving certificate for `dnsNames` and `ips` signed by `ca`, valid `days` (default 1 year)
 * from `now`, never past the CA's own end.
 */
export async function issueServingCertificate(ca: ControllerCa, opts: { dnsNames: string[]; ips?: string[]; now: Date; days?: number }): Promise<ServingCertificate> {
  if (opts.dnsNames.length + (opts.ips?.length ?? 0) === 0) throw new Error('a serving certificate needs at least one DNS name or IP address');
  const caCert = new x509.X509Certificate(ca.caCert);
  const der = Buffer.from(ca.caKey.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
  const caKey = await webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, false, ['sign']);
  const notBefore = new Date(opts.now.getTime() - 5 * 60_000); // clocks of other hosts may run behind
  const notAfter = new Date(Math.min(opts.now.getTime() + (opts.days ?? 365) * 86_400_000, Date.parse(ca.notAfter)));
  const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as KeyPair;
  const names = [...opts.dnsNames.map((value) => ({ type: 'dns' as const, value })), ...(opts.ips ?? []).map((value) => ({ type: 'ip' as const, value }))];
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(), subject: `CN=${opts.dnsNames[0] ?? opts.ips![0]}`, issuer: caCert.subject, notBefore, notAfter,
    publicKey: keys.publicKey, signingKey: caKey, signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension(names),
      await x509.AuthorityKeyIdentifierExtension.create(caCert, false),
    ],
  });
  return {
    caCert: ca.caCert,
    cert: `${cert.toString('pem')}\n`,
    key: pem('PRIVATE KEY', await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)),
    notAfter: notAfter.toISOString(),
  };
}

/** A new CA and a serving certificate it signs (tests, and a first start). */
export async function makeServingCertificate(opts: { dnsNames: string[]; ips?: string[]; now: Date; days?: number }): Promise<ServingCertificate> {
  return issueServingCertificate(await makeCa(opts.now), opts);
}

/** Whether a certificate set should be replaced: expired, or expiring within `renewBeforeDays`. */
export function needsRenewal(c: Pick<ServingCertificate, 'notAfter'>, now: Date, renewBeforeDays = 30): boolean {
  const end = Date.parse(c.notAfter);
  return !Number.isFinite(end) || end - now.getTime() < renewBeforeDays * 86_400_000;
}

/** The names the controller Service answers to in namespace `ns`. */
export function serviceNames(service: string, ns: string): string[] {
  return [service, `${service}.${ns}`, `${service}.${ns}.svc`, `${service}.${ns}.svc.cluster.local`];
}
