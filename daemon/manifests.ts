import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import yaml from 'js-yaml';
import type { KubeObject } from './policy/types.js';

/** A manifest that could not be read or parsed, with where and why. */
export class ManifestError extends Error {
  override name = 'ManifestError';
}

/**
 * Reads Kubernetes manifests the way kubectl -f does: a file (multi-document YAML or JSON) or a
 * directory (its *.yaml, *.yml, *.json files, sorted by name, not recursive). `List` objects are
 * flattened. Documents that are empty are skipped; anything without apiVersion/kind/metadata.name
 * is an error naming the file and document.
 */
export async function loadManifests(paths: string[]): Promise<KubeObject[]> {
  const objects: KubeObject[] = [];
  for (const path of paths) {
    let info;
    try {
      info = await stat(path);
    } catch {
      throw new ManifestError(`${path}: no such file or directory`);
    }
    const files = info.isDirectory()
      ? (await readdir(path)).filter((f) => /\.(ya?ml|json)$/.test(f)).sort().map((f) => join(path, f))
      : [path];
    for (const file of files) objects.push(...parseManifests(await readFile(file, 'utf8'), file));
  }
  return objects;
}

/** Parses manifest text (YAML stream or JSON); `source` names it in errors. */
export function parseManifests(text: string, source = '<input>'): KubeObject[] {
  let docs: unknown[];
  try {
    docs = yaml.loadAll(text);
  } catch (err) {
    throw new ManifestError(`${source}: not valid YAML/JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  const out: KubeObject[] = [];
  docs.forEach((doc, index) => {
    if (doc === null || doc === undefined) return;
    const items = isList(doc) ? (doc as { items: unknown[] }).items : [doc];
    for (const item of items) out.push(checkObject(item, `${source} document ${index + 1}`));
  });
  return out;
}

function isList(doc: unknown): boolean {
  const d = doc as { kind?: unknown; items?: unknown };
  return typeof d === 'object' && typeof d.kind === 'string' && d.kind.endsWith('List') && Array.isArray(d.items);
}

function checkObject(item: unknown, where: string): KubeObject {
  const o = item as Partial<KubeObject>;
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new ManifestError(`${where}: not an object`);
  if (typeof o.apiVersion !== 'string' || !o.apiVersion) throw new ManifestError(`${where}: missing apiVersion`);
  if (typeof o.kind !== 'string' || !o.kind) throw new ManifestError(`${where}: missing kind`);
  if (typeof o.metadata !== 'object' || o.metadata === null || typeof o.metadata.name !== 'string' || !o.metadata.name) {
    throw new ManifestError(`${where}: ${o.kind} without metadata.name`);
  }
  return o as KubeObject;
}
