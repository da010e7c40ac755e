/**
 * The CA the controller's serving certificate chains to, as the agent reads it at each connection
 * attempt: from the ConfigMap the controller publishes (read through the API server), or from a
 * file.
 *
 * Why through the API and not a ConfigMap volume: the controller publishes its CA only once it
 * first leads, so on a fresh install the agents start before it exists; a volume of a missing
 * ConfigMap stays empty until the kubelet's next sync (every 60-90 s), which would hold back every
 * node's enforcement that long, and a CA rotation would reach the agents as late. Read at each
 * attempt (kept a few seconds), a CA not published yet is just a reason the controller is
 * unreachable, retried with the watcher's backoff, and a rotated one is used at the next
 * connection.
 */
import { readFile } from 'node:fs/promises';
import type { ObjectGetter } from './service-address.js';

/** The ConfigMap the controller publishes its CA in, in its own namespace (tls-secret.ts writes it). */
export const CA_CONFIGMAP = 'sluice-ca';
/** The key of the CA certificate (PEM) in it. */
export const CA_CONFIGMAP_KEY = 'ca.crt';

/** The PEM CA bundle to trust now; rejects with an error naming where it was looked for. */
export type CaSource = () => Promise<string>;

/**
 * The CA from ConfigMap `namespace/name` (key ca.crt), read through `getConfigMap`; an answer is
 * kept `ttlMs` (default 5000 ms), a failure never; while the API server cannot be read, the CA
 * read last is used.
 */
export function caFromConfigMap(opts: { getConfigMap: ObjectGetter; namespace: string; name?: string; ttlMs?: number; now?: () => number }): CaSource {
  const name = opts.name ?? CA_CONFIGMAP;
  const id = `ConfigMap ${opts.namespace}/${name}`;
  const now = opts.now ?? Date.now;
  let held: { pem: string; at: number } | undefined;
  let reading: Promise<string> | undefined;
  const read = async (): Promise<string> => {
    let cm: Awaited<ReturnType<ObjectGetter>>;
    try {
      cm = await opts.getConfigMap(opts.namespace, name);
    } catch (err) {
      // The API server unreachable for now: the CA read last still verifies the controller
      // (held stays expired, so the next attempt asks again).
      if (held) return held.pem;
      throw new Error(`${id}: cannot read the controller's CA through the API: ${(err as Error).message}`);
    }
    held = undefined;
    if (cm === undefined) throw new Error(`CA not published yet: ${id} not found (the controller publishes it when it first leads)`);
    const pem = (cm.data as Record<string, unknown> | undefined)?.[CA_CONFIGMAP_KEY];
    if (typeof pem !== 'string' || pem.trim() === '') throw new Error(`CA not published yet: ${id} has no ${CA_CONFIGMAP_KEY}`);
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`${id}: ${CA_CONFIGMAP_KEY} holds no PEM certificate`);
    held = { pem, at: now() };
    return pem;
  };
  return () => {
    if (held && now() - held.at < (opts.ttlMs ?? 5000)) return Promise.resolve(held.pem);
    // Callers asking while a read is under way (the watches reconnecting together) share it.
    reading ??= read().finally(() => (reading = undefined));
    return reading;
  };
}

/**
 * The CA from file `path`, read at each call: a file that is not there yet (a volume not synced)
 * fails that attempt only, naming the file.
 */
export function caFromFile(path: string, hint?: string): CaSource {
  return async () => {
    let pem: string;
    try {
      pem = await readFile(path, 'utf8');
    } catch (err) {
      throw new Error(`controllerCAFile ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}${hint ? ` (${hint})` : ''}`);
    }
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new Error(`controllerCAFile ${path}: holds no PEM certificate`);
    return pem;
  };
}
