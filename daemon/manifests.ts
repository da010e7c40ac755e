import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { parseYamlDocuments } from './kube-yaml.js';
import { typeName } from './policy/problems.js';
import type { KubeObject } from './policy/types.js';

/** A manifest that could not be read or parsed, with where and why. */
export class ManifestError extends Error {
  override name = 'ManifestError';
}

/** One document that is not a usable object: where, what it is as far as known, why. */
export interface InvalidDocument {
  /** "FILE document N". */
  where: string;
  /** The object's kind and name when the document has them. */
  kind?: string;
  name?: string;
  message: string;
}

export interface ManifestSet {
  objects: KubeObject[];
  invalid: InvalidDocument[];
}

/** "invalid <kind> <name>: <why>" (or the document's place when it has no kind or name). */
export function formatInvalidDocument(d: InvalidDocument): string {
  const what = d.kind ? `${d.kind} ${d.name ?? `(${d.where})`}` : d.where;
  return `invalid ${what}: ${d.message}${d.kind && d.name ? ` (${d.where})` : ''}`;
}

/**
 * Reads Kubernetes manifests the way kubectl -f does: a file (multi-document YAML or JSON, read by
 * kube-yaml as kubectl reads it) or a directory (its *.yaml, *.yml, *.json files, sorted by name,
 * not recursive). `List` objects are flattened; empty documents skipped. A document that cannot be
 * used (unreadable YAML, no apiVersion/kind/metadata.name) is reported in `invalid` and costs
 * only itself; a path that does not exist is a ManifestError.
 */
export async function readManifests(paths: string[]): Promise<ManifestSet> {
  const set: ManifestSet = { objects: [], invalid: [] };
  for (const path of paths) {
    let info: Awaited<ReturnType<typeof stat>>;
    try {
      info = await stat(path);
    } catch {
      throw new ManifestError(`${path}: no such file or directory`);
    }
    const files = info.isDirectory()
      ? (await readdir(path)).filter((f) => /\.(ya?ml|json)$/.test(f)).sort().map((f) => join(path, f))
      : [path];
    for (const file of files) {
      const one = parseManifestSet(await readFile(file, 'utf8'), file);
      set.objects.push(...one.objects);
      set.invalid.push(...one.invalid);
    }
  }
  return set;
}

/** readManifests for tools that need every document usable: the first invalid one is a ManifestError. */
export async function loadManifests(paths: string[]): Promise<KubeObject[]> {
  return strict(await readManifests(paths));
}

/** Parses manifest text (YAML stream or JSON); `source` names it in messages. */
export function parseManifestSet(text: string, source = '<input>'): ManifestSet {
  const set: ManifestSet = { objects: [], invalid: [] };
  for (const doc of parseYamlDocuments(text)) {
    const where = `${source} document ${doc.index + 1}`;
    if ('error' in doc) {
      set.invalid.push({ where, message: doc.error });
      continue;
    }
    if (doc.value === null) continue;
    const items = isList(doc.value) ? (doc.value as { items: unknown[] }).items : [doc.value];
    items.forEach((item, i) => {
      const at = items.length > 1 || item !== doc.value ? `${where} item ${i}` : where;
      const problem = objectProblem(item, at);
      if (problem) set.invalid.push(problem);
      else set.objects.push(item as KubeObject);
    });
  }
  return set;
}

/** parseManifestSet, where any invalid document is a ManifestError. */
export function parseManifests(text: string, source = '<input>'): KubeObject[] {
  return strict(parseManifestSet(text, source));
}

function strict(set: ManifestSet): KubeObject[] {
  const first = set.invalid[0];
  if (first) throw new ManifestError(`${first.where}: ${first.message}`);
  return set.objects;
}

function isList(doc: unknown): boolean {
  const d = doc as { kind?: unknown; items?: unknown };
  return typeof d === 'object' && d !== null && typeof d.kind === 'string' && d.kind.endsWith('List') && Array.isArray(d.items);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function objectProblem(item: unknown, where: string): InvalidDocument | undefined {
  if (!isObject(item)) return { where, message: 'not an object' };
  const kind = typeof item.kind === 'string' && item.kind ? item.kind : undefined;
  const meta = item.metadata;
  const name = isObject(meta) && typeof meta.name === 'string' && meta.name ? meta.name : undefined;
  const known = { where, ...(kind ? { kind } : {}), ...(name ? { name } : {}) };
  if (typeof item.apiVersion !== 'string' || !item.apiVersion) return { ...known, message: 'apiVersion: Required value' };
  if (!kind) return { ...known, message: 'kind: Required value' };
  if (meta !== undefined && !isObject(meta)) return { ...known, message: 'metadata: must be an object' };
  if (isObject(meta) && meta.name !== undefined && typeof meta.name !== 'string') return { ...known, message: `metadata.name: must be a string, not ${typeName(meta.name)}` };
  if (!name) return { ...known, message: 'metadata.name: Required value' };
  if (isObject(meta) && meta.namespace !== undefined && typeof meta.namespace !== 'string') return { ...known, message: `metadata.namespace: must be a string, not ${typeName(meta.namespace)}` };
  return undefined;
}
