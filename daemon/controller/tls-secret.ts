/**
 * Where the controller's certificate lives and who trusts it: one Secret shared by the replicas,
 * holding the CA with its key and the serving certificate (the first replica to start makes them;
 * the others, and every restart, read them; the serving certificate is issued again by the same CA
 * 30 days before it ends, by whichever replica sees that first), the CA published in a ConfigMap the agents
 * read, and in the caBundle of the APIService through which the Kubernetes API server proxies the
 * controller's API. Creation and renewal use the API's optimistic concurrency (409: another
 * replica won; its set is read back), so two replicas never serve different certificates for long.
 */
import type { KubeAccess } from '../kube/access.js';
import { KubeApiError } from '../kube/access.js';
import { CA_CONFIGMAP } from '../controlplane/controller-ca.js';
import { type ControllerCa, issueServingCertificate, makeCa, needsRenewal, type ServingCertificate, serviceNames } from './certificate.js';

/** Where the agents read the CA (defined with their reader, daemon/controlplane/controller-ca.ts). */
export { CA_CONFIGMAP };
export const TLS_SECRET = 'sluice-controller-tls';
export const CONTROLLER_SERVICE = 'sluice-controller';
export const APISERVICE = 'v1beta1.controlplane.sluice.io';
const NOT_AFTER = 'sluice.dev/not-after';
const CA_NOT_AFTER = 'sluice.dev/ca-not-after';

export type KubeIo = Pick<KubeAccess, 'getJson' | 'postJson' | 'patchJson'>;

const status = (err: unknown) => (err instanceof KubeApiError ? err.statusCode : undefined);
const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: unknown) => (typeof s === 'string' ? Buffer.from(s, 'base64').toString('utf8') : '');

interface SecretJson {
  metadata: { resourceVersion?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

interface HeldSet {
  ca?: ControllerCa | undefined;
  cert?: ServingCertificate | undefined;
}

function fromSecret(s: SecretJson): HeldSet {
  const d = s.data ?? {};
  const a = s.metadata.annotations ?? {};
  const caCert = unb64(d['ca.crt']);
  const caKey = unb64(d['ca.key']);
  const c = { caCert, cert: unb64(d['tls.crt']), key: unb64(d['tls.key']), notAfter: a[NOT_AFTER] ?? '' };
  return {
    ...(caCert && caKey ? { ca: { caCert, caKey, notAfter: a[CA_NOT_AFTER] ?? '' } } : {}),
    ...(c.caCert && c.cert && c.key ? { cert: c } : {}),
  };
}

function secretBody(ns: string, ca: ControllerCa, c: ServingCertificate, resourceVersion?: string): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Secret', type: 'kubernetes.io/tls',
    metadata: { name: TLS_SECRET, namespace: ns, annotations: { [NOT_AFTER]: c.notAfter, [CA_NOT_AFTER]: ca.notAfter }, ...(resourceVersion ? { resourceVersion } : {}) },
    data: { 'ca.crt': b64(ca.caCert), 'ca.key': b64(ca.caKey), 'tls.crt': b64(c.cert), 'tls.key': b64(c.key) },
  };
}

/**
 * The certificate set the replicas share, made or renewed when needed: a serving certificate due
 * for renewal is issued again by the same CA (nothing anyone trusts changes); a new CA is made only
 * when there is none or it is itself within 30 days of its end. `ips`: addresses the certificate
 * also names (the lab's controllers listen on 127.0.0.1).
 */
export async function ensureSharedCertificate(io: KubeIo, ns: string, now: Date, ips: string[] = []): Promise<{ cert: ServingCertificate; made: boolean; newCa: boolean }> {
  const path = `/api/v1/namespaces/${encodeURIComponent(ns)}/secrets/${TLS_SECRET}`;
  for (let attempt = 0; attempt < 3; attempt++) {
    let existing: SecretJson | undefined;
    try {
      existing = (await io.getJson(path)) as SecretJson;
    } catch (err) {
      if (status(err) !== 404) throw new Error(`reading Secret ${ns}/${TLS_SECRET}: ${(err as Error).message}`);
    }
    const held = existing ? fromSecret(existing) : {};
    if (held.ca && held.cert && !needsRenewal(held.cert, now)) return { cert: held.cert, made: false, newCa: false };
    const keepCa = held.ca && !needsRenewal(held.ca, now) ? held.ca : undefined;
    const ca = keepCa ?? (await makeCa(now));
    const fresh = await issueServingCertificate(ca, { dnsNames: serviceNames(CONTROLLER_SERVICE, ns), ips, now });
    try {
      if (!existing) await io.postJson(`/api/v1/namespaces/${encodeURIComponent(ns)}/secrets`, secretBody(ns, ca, fresh));
      // The resourceVersion makes the update fail (409) if another replica renewed it meanwhile.
      else await io.patchJson(path, secretBody(ns, ca, fresh, existing.metadata.resourceVersion), 'application/merge-patch+json');
      return { cert: fresh, made: true, newCa: !keepCa };
    } catch (err) {
      if (status(err) !== 409) throw new Error(`writing Secret ${ns}/${TLS_SECRET}: ${(err as Error).message}`);
      // Another replica wrote it first: read its set.
    }
  }
  throw new Error(`Secret ${ns}/${TLS_SECRET} kept changing under three attempts to read or write it`);
}

/**
 * Publishes the CA: ConfigMap `sluice-ca` (ca.crt) for the agents, and the APIService's caBundle
 * when it is installed (the API server then verifies the controller when it proxies to it).
 * Returns whether the APIService was found.
 */
export async function publishCa(io: KubeIo, ns: string, caCert: string): Promise<{ apiService: boolean }> {
  const cmPath = `/api/v1/namespaces/${encodeURIComponent(ns)}/configmaps/${CA_CONFIGMAP}`;
  try {
    await io.patchJson(cmPath, { data: { 'ca.crt': caCert } }, 'application/merge-patch+json');
  } catch (err) {
    if (status(err) !== 404) throw new Error(`updating ConfigMap ${ns}/${CA_CONFIGMAP}: ${(err as Error).message}`);
    await io.postJson(`/api/v1/namespaces/${encodeURIComponent(ns)}/configmaps`, { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: CA_CONFIGMAP, namespace: ns }, data: { 'ca.crt': caCert } });
  }
  try {
    await io.patchJson(`/apis/apiregistration.k8s.io/v1/apiservices/${APISERVICE}`, { spec: { caBundle: b64(caCert) } }, 'application/merge-patch+json');
    return { apiService: true };
  } catch (err) {
    if (status(err) === 404) return { apiService: false };
    throw new Error(`updating APIService ${APISERVICE}: ${(err as Error).message}`);
  }
}
