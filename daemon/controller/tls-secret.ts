/**
 * Where the controller's certificate lives and who trusts it: one Secret shared by the replicas
 * (the first to start makes it; the others, and every restart, read it; it is renewed 30 days
 * before it ends, by whichever replica sees that first), the CA published in a ConfigMap the agents
 * read, and in the caBundle of the APIService through which the Kubernetes API server proxies the
 * controller's API. Creation and renewal use the API's optimistic concurrency (409: another
 * replica won; its set is read back), so two replicas never serve different certificates for long.
 */
import type { KubeAccess } from '../kube/access.js';
import { KubeApiError } from '../kube/access.js';
import { makeServingCertificate, needsRenewal, type ServingCertificate, serviceNames } from './certificate.js';

export const TLS_SECRET = 'sluice-controller-tls';
export const CA_CONFIGMAP = 'sluice-ca';
export const CONTROLLER_SERVICE = 'sluice-controller';
export const APISERVICE = 'v1beta1.controlplane.sluice.io';
const NOT_AFTER = 'sluice.dev/not-after';

export type KubeIo = Pick<KubeAccess, 'getJson' | 'postJson' | 'patchJson'>;

const status = (err: unknown) => (err instanceof KubeApiError ? err.statusCode : undefined);
const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: unknown) => (typeof s === 'string' ? Buffer.from(s, 'base64').toString('utf8') : '');

interface SecretJson {
  metadata: { resourceVersion?: string; annotations?: Record<string, string> };
  data?: Record<string, string>;
}

function fromSecret(s: SecretJson): ServingCertificate | undefined {
  const d = s.data ?? {};
  const c = { caCert: unb64(d['ca.crt']), cert: unb64(d['tls.crt']), key: unb64(d['tls.key']), notAfter: s.metadata.annotations?.[NOT_AFTER] ?? '' };
  return c.caCert && c.cert && c.key ? c : undefined;
}

function secretBody(ns: string, c: ServingCertificate, resourceVersion?: string): Record<string, unknown> {
  return {
    apiVersion: 'v1', kind: 'Secret', type: 'kubernetes.io/tls',
    metadata: { name: TLS_SECRET, namespace: ns, annotations: { [NOT_AFTER]: c.notAfter }, ...(resourceVersion ? { resourceVersion } : {}) },
    data: { 'ca.crt': b64(c.caCert), 'tls.crt': b64(c.cert), 'tls.key': b64(c.key) },
  };
}

/**
 * The certificate set the replicas share, made or renewed when needed. `ips`: addresses the
 * certificate also names (the lab's controllers listen on 127.0.0.1).
 */
export async function ensureSharedCertificate(io: KubeIo, ns: string, now: Date, ips: string[] = []): Promise<{ cert: ServingCertificate; made: boolean }> {
  const path = `/api/v1/namespaces/${encodeURIComponent(ns)}/secrets/${TLS_SECRET}`;
  const make = () => makeServingCertificate({ dnsNames: serviceNames(CONTROLLER_SERVICE, ns), ips, now });
  for (let attempt = 0; attempt < 3; attempt++) {
    let existing: SecretJson | undefined;
    try {
      existing = (await io.getJson(path)) as SecretJson;
    } catch (err) {
      if (status(err) !== 404) throw new Error(`reading Secret ${ns}/${TLS_SECRET}: ${(err as Error).message}`);
    }
    const held = existing && fromSecret(existing);
    if (held && !needsRenewal(held, now)) return { cert: held, made: false };
    const fresh = await make();
    try {
      if (!existing) await io.postJson(`/api/v1/namespaces/${encodeURIComponent(ns)}/secrets`, secretBody(ns, fresh));
      // The resourceVersion makes the update fail (409) if another replica renewed it meanwhile.
      else await io.patchJson(path, secretBody(ns, fresh, existing.metadata.resourceVersion), 'application/merge-patch+json');
      return { cert: fresh, made: true };
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
