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

/**
 * Makes, once, a self-signed CA `<ca>.crt/.key` and a certificate `<leaf>.crt/.key` it signs, in
 * `dir`, with openssl; `ext` is the leaf's extension file (its SANs and key usages).
 */
function ensureCaAndLeaf(dir: string, what: string, ca: { name: string; cn: string }, leaf: { name: string; cn: string; ext: string }): void {
  const p = (f: string) => join(dir, f);
  if ([p(`${ca.name}.crt`), p(`${leaf.name}.crt`), p(`${leaf.name}.key`)].every(existsSync)) return;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const openssl = (...args: string[]) => {
    try {
      execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      const stderr = String((err as { stderr?: Buffer }).stderr ?? '').trim();
      throw new Error(`openssl ${args[0]} failed making the lab's ${what} in ${dir}: ${stderr || (err as Error).message}`);
    }
  };
  openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '3650',
    '-subj', `/CN=${ca.cn}`, '-keyout', p(`${ca.name}.key`), '-out', p(`${ca.name}.crt`),
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-subj', `/CN=${leaf.cn}`,
    '-keyout', p(`${leaf.name}.key`), '-out', p(`${leaf.name}.csr`));
  writeFileSync(p(`${leaf.name}.ext`), leaf.ext);
  openssl('x509', '-req', '-in', p(`${leaf.name}.csr`), '-CA', p(`${ca.name}.crt`), '-CAkey', p(`${ca.name}.key`), '-CAcreateserial', '-days', '3650',
    '-extfile', p(`${leaf.name}.ext`), '-out', p(`${leaf.name}.crt`));
  for (const f of [`${leaf.name}.csr`, `${leaf.name}.ext`, `${ca.name}.srl`]) rmSync(p(f), { force: true });
}

export function ensureLabPki(dir: string): LabPki {
  const p = (f: string) => join(dir, f);
  ensureCaAndLeaf(dir, 'API certificates', { name: 'ca', cn: 'sluice-lab-ca' }, {
    name: 'apiserver', cn: 'kube-apiserver',
    ext: `subjectAltName=${API_SERVER_SANS.join(',')}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n`,
  });
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
  ensureCaAndLeaf(dir, 'front-proxy certificates', { name: 'front-proxy-ca', cn: 'sluice-lab-front-proxy-ca' }, {
    name: 'front-proxy-client', cn: 'front-proxy-client', ext: 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n',
  });
  return {
    caCert: readFileSync(p('front-proxy-ca.crt'), 'utf8'), clientCert: readFileSync(p('front-proxy-client.crt'), 'utf8'),
    clientKey: readFileSync(p('front-proxy-client.key'), 'utf8'), caCertPath: p('front-proxy-ca.crt'),
  };
}
