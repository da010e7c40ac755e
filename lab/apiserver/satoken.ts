// ServiceAccount bearer tokens of the lab's API server (pure). A token names its ServiceAccount and
// carries an HMAC-SHA256 of that name under the server's signing key, so the server checks one
// without storing it, and a token stops working when its ServiceAccount is deleted (the server
// looks the ServiceAccount up). Not a JWT: nothing outside the lab reads these tokens.
import { createHmac, timingSafeEqual } from 'node:crypto';

const PREFIX = 'lab-sa';

const mac = (key: string, namespace: string, name: string): string =>
  createHmac('sha256', key).update(`system:serviceaccount:${namespace}:${name}`).digest('base64url');

/** The token a Pod running as ServiceAccount namespace/name mounts. */
export function serviceAccountToken(key: string, namespace: string, name: string): string {
  if (!key) throw new Error('serviceAccountToken: the signing key is empty');
  return `${PREFIX}.${Buffer.from(`${namespace}/${name}`).toString('base64url')}.${mac(key, namespace, name)}`;
}

/** The ServiceAccount a token was issued for, or undefined when it is not one signed with key. */
export function verifyServiceAccountToken(key: string, token: string): { namespace: string; name: string } | undefined {
  const parts = token.split('.');
  if (!key || parts.length !== 3 || parts[0] !== PREFIX) return undefined;
  const ref = Buffer.from(parts[1]!, 'base64url').toString('utf8');
  const slash = ref.indexOf('/');
  if (slash <= 0 || slash === ref.length - 1) return undefined;
  const [namespace, name] = [ref.slice(0, slash), ref.slice(slash + 1)];
  const want = Buffer.from(mac(key, namespace, name));
  const got = Buffer.from(parts[2]!);
  return want.length === got.length && timingSafeEqual(want, got) ? { namespace, name } : undefined;
}
