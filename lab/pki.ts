/**
 * The lab's TLS material, made with the openssl CLI (node:crypto signs but does not build X.509
 * certificates): a self-signed CA and an API server certificate for 127.0.0.1 and the in-cluster
 * names, as a Pod's mounted ca.crt must verify; and the aggregation layer's front-proxy CA and
 * client certificate. Made once per lab state dir and reused.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface LabPki {
  caCert: string; // PEM
  cert: string;
  key: string;
  caCertPath: string;
}

/** Subject alternative names of the API server certificate. */
export const API_SERVER_SANS = ['IP:127.0.0.1', 'DNS:localhost', 'DNS:kubernetes', 'DNS:kubernetes.default', 'DNS:kubernetes.default.svc', 'DNS:kubernetes.default.svc.cluster.local'];

export function ensureLabPki(dir: string): LabPki {
  const p = (f: string) => join(dir, f);
  if (![p('ca.crt'), p('apiserver.crt'), p('apiserver.key')].every(existsSync)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const openssl = (...args: string[]) => {
      try {
        execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
      } catch (err) {
        const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
        throw new Error(`openssl ${args[0]} failed making the lab's API certificates in ${dir}: ${stderr || (err as Error).message}`);
      }
    };
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '3650',
      '-subj', '/CN=sluice-lab-ca', '-keyout', p('ca.key'), '-out', p('ca.crt'),
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=kube-apiserver',
      '-keyout', p('apiserver.key'), '-out', p('apiserver.csr'));
    writeFileSync(p('apiserver.ext'), `subjectAltName=${API_SERVER_SANS.join(',')}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n`);
    openssl('x509', '-req', '-in', p('apiserver.csr'), '-CA', p('ca.crt'), '-CAkey', p('ca.key'), '-CAcreateserial', '-days', '3650',
      '-extfile', p('apiserver.ext'), '-out', p('apiserver.crt'));
    for (const f of ['apiserver.csr', 'apiserver.ext', 'ca.srl']) rmSync(p(f), { force: true });
  }
  return { caCert: readFileSync(p('ca.crt'), 'utf8'), cert: readFileSync(p('apiserver.crt'), 'utf8'), key: readFileSync(p('apiserver.key'), 'utf8'), caCertPath: p('ca.crt') };
}

export interface FrontProxyPki {
  caCert: string; // PEM
  clientCert: string;
  clientKey: string;
  caCertPath: string;
}

/**
 * The aggregation layer's own CA and its client certificate (CN front-proxy-client, clientAuth),
 * apart from the API server's CA as kubeadm keeps them: extension API servers trust this CA only
 * for the identity headers it vouches for. Made once per dir and reused.
 */
export function ensureFrontProxyPki(dir: string): FrontProxyPki {
  const p = (f: string) => join(dir, f);
  if (![p('front-proxy-ca.crt'), p('front-proxy-client.crt'), p('front-proxy-client.key')].every(existsSync)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const openssl = (...args: string[]) => {
      try {
        execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
      } catch (err) {
        const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
        throw new Error(`openssl ${args[0]} failed making the lab's front-proxy certificates in ${dir}: ${stderr || (err as Error).message}`);
      }
    };
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '3650',
      '-subj', '/CN=sluice-lab-front-proxy-ca', '-keyout', p('front-proxy-ca.key'), '-out', p('front-proxy-ca.crt'),
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
    openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', '/CN=front-proxy-client',
      '-keyout', p('front-proxy-client.key'), '-out', p('front-proxy-client.csr'));
    writeFileSync(p('front-proxy-client.ext'), 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n');
    openssl('x509', '-req', '-in', p('front-proxy-client.csr'), '-CA', p('front-proxy-ca.crt'), '-CAkey', p('front-proxy-ca.key'), '-CAcreateserial',
      '-days', '3650', '-extfile', p('front-proxy-client.ext'), '-out', p('front-proxy-client.crt'));
    for (const f of ['front-proxy-client.csr', 'front-proxy-client.ext', 'front-proxy-ca.srl']) rmSync(p(f), { force: true });
  }
  return {
    caCert: readFileSync(p('front-proxy-ca.crt'), 'utf8'), clientCert: readFileSync(p('front-proxy-client.crt'), 'utf8'),
    clientKey: readFileSync(p('front-proxy-client.key'), 'utf8'), caCertPath: p('front-proxy-ca.crt'),
  };
}
