// ServiceAccount bearer tokens of the lab's API server (pure). A token names its ServiceAccount and
// carries an HMAC-SHA256 of that name under the server's signing key, so the server checks one
// without storing it, and a token stops working when its ServiceAccount is deleted (the server
// looks the ServiceAccount up). Not a JWT: nothing outside the lab reads these tokens.
//
// A token minted for a Pod (what a kubelet projects into it) is bound: it also names the Pod, its
// uid and its Node, all under the HMAC, so a holder cannot move it to another Node. The server
// refuses it once that Pod is gone, and a TokenReview reports the Pod and Node as Kubernetes ≥ 1.30
// does (user.extra["authentication.kubernetes.io/node-name"]). Unbound tokens keep their format.
import { createHmac, timingSafeEqual } from 'node:crypto';

const PREFIX = 'lab-sa';
const BOUND_PREFIX = 'lab-sa-bound';

/** What a token says about who holds it. */
export interface ServiceAccountTokenClaims {
  namespace: string;
  name: string;
  /** Set on a token bound to a Pod (with podUid when the kubelet knew it). */
  podName?: string;
  podUid?: string;
  nodeName?: string;
}

/** The Pod (and its Node) a token is minted for. */
export interface TokenBinding {
  podName: string;
  podUid?: string;
  nodeName: string;
}

const mac = (key: string, namespace: string, name: string): string =>
  createHmac('sha256', key).update(`system:serviceaccount:${namespace}:${name}`).digest('base64url');

// The prefix is part of the MAC input, so an unbound token's MAC can never pass for a bound one's.
const boundMac = (key: string, payload: string): string => createHmac('sha256', key).update(`${BOUND_PREFIX}.${payload}`).digest('base64url');

const sameMac = (want: string, got: string): boolean => {
  const [a, b] = [Buffer.from(want), Buffer.from(got)];
  return a.length === b.length && timingSafeEqual(a, b);
};

/** The token a Pod running as ServiceAccount namespace/name mounts; bound to the Pod and its Node when `bound` is given. */
export function serviceAccountToken(key: string, namespace: string, name: string, bound?: TokenBinding): string {
  if (!key) throw new Error('serviceAccountToken: the signing key is empty');
  if (!bound) return `${PREFIX}.${Buffer.from(`${namespace}/${name}`).toString('base64url')}.${mac(key, namespace, name)}`;
  if (!bound.podName || !bound.nodeName) throw new Error(`serviceAccountToken: a bound token for ${namespace}/${name} needs both a Pod name and a Node name`);
  const claims = { ns: namespace, sa: name, pod: bound.podName, ...(bound.podUid ? { uid: bound.podUid } : {}), node: bound.nodeName };
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url');
  return `${BOUND_PREFIX}.${payload}.${boundMac(key, payload)}`;
}

/** The ServiceAccount (and Pod and Node, for a bound token) a token was issued for, or undefined when it is not one signed with key. */
export function verifyServiceAccountToken(key: string, token: string): ServiceAccountTokenClaims | undefined {
  const parts = token.split('.');
  if (!key || parts.length !== 3) return undefined;
  if (parts[0] === BOUND_PREFIX) return verifyBound(key, parts[1]!, parts[2]!);
  if (parts[0] !== PREFIX) return undefined;
  const ref = Buffer.from(parts[1]!, 'base64url').toString('utf8');
  const slash = ref.indexOf('/');
  if (slash <= 0 || slash === ref.length - 1) return undefined;
  const [namespace, name] = [ref.slice(0, slash), ref.slice(slash + 1)];
  return sameMac(mac(key, namespace, name), parts[2]!) ? { namespace, name } : undefined;
}

function verifyBound(key: string, payload: string, got: string): ServiceAccountTokenClaims | undefined {
  // The MAC first: nothing of an unsigned payload is parsed.
  if (!sameMac(boundMac(key, payload), got)) return undefined;
  let claims: Record<string, unknown>;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const [namespace, name, podName, nodeName] = [str(claims.ns), str(claims.sa), str(claims.pod), str(claims.node)];
  if (!namespace || !name || !podName || !nodeName) return undefined;
  const podUid = str(claims.uid);
  return { namespace, name, podName, ...(podUid ? { podUid } : {}), nodeName };
}
