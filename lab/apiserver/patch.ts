// The three PATCH body formats the Kubernetes API accepts for JSON objects.
// Strategic merge patch is applied as a JSON merge patch (no per-field list merge keys).
// Errors are PatchError: `invalid` means the patch itself is malformed (400),
// otherwise it could not be applied to this object (422).

export class PatchError extends Error {
  override name = 'PatchError';
  constructor(message: string, readonly invalid: boolean) {
    super(message);
  }
}

export const patchContentTypes = [
  'application/merge-patch+json',
  'application/strategic-merge-patch+json',
  'application/json-patch+json',
] as const;

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

function isObject(v: unknown): v is Record<string, Json> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** RFC 7386: objects merge recursively, null deletes, anything else replaces. */
export function mergePatch(target: unknown, patch: unknown): Json {
  if (!isObject(patch)) return structuredClone(patch as Json);
  const result: Record<string, Json> = isObject(target) ? structuredClone(target) : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) throw new PatchError(`JSON pointer "${pointer}" must start with "/"`, true);
  return pointer.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function arrayIndex(arr: Json[], token: string, forInsert: boolean, pointer: string): number {
  if (forInsert && token === '-') return arr.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new PatchError(`"${token}" in "${pointer}" is not an array index`, false);
  const i = Number(token);
  if (i > arr.length || (!forInsert && i === arr.length)) throw new PatchError(`array index ${i} in "${pointer}" is out of range`, false);
  return i;
}

/** Returns the container and final token for a pointer, failing when an intermediate step is missing. */
function locate(doc: Json, pointer: string): { parent: Json; token: string } {
  const tokens = parsePointer(pointer);
  if (tokens.length === 0) throw new PatchError(`operations on the whole document ("") are not supported`, false);
  let cur: Json = doc;
  for (const t of tokens.slice(0, -1)) {
    if (Array.isArray(cur)) cur = cur[arrayIndex(cur, t, false, pointer)]!;
    else if (isObject(cur) && t in cur) cur = cur[t]!;
    else throw new PatchError(`path "${pointer}" does not exist`, false);
  }
  return { parent: cur, token: tokens[tokens.length - 1]! };
}

function getAt(doc: Json, pointer: string): Json {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) return parent[arrayIndex(parent, token, false, pointer)]!;
  if (isObject(parent) && token in parent) return parent[token]!;
  throw new PatchError(`path "${pointer}" does not exist`, false);
}

function removeAt(doc: Json, pointer: string): Json {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) return parent.splice(arrayIndex(parent, token, false, pointer), 1)[0]!;
  if (isObject(parent) && token in parent) {
    const v = parent[token]!;
    delete parent[token];
    return v;
  }
  throw new PatchError(`cannot remove "${pointer}": it does not exist`, false);
}

function addAt(doc: Json, pointer: string, value: Json, replace: boolean): void {
  const { parent, token } = locate(doc, pointer);
  if (Array.isArray(parent)) {
    const i = arrayIndex(parent, token, !replace, pointer);
    parent.splice(i, replace ? 1 : 0, value);
  } else if (isObject(parent)) {
    if (replace && !(token in parent)) throw new PatchError(`cannot replace "${pointer}": it does not exist`, false);
    parent[token] = value;
  } else {
    throw new PatchError(`path "${pointer}" does not point into an object or array`, false);
  }
}

/** Structural equality of JSON values (object key order ignored). */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (isObject(a)) {
    if (!isObject(b)) return false;
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && deepEqual(a[k], b[k]));
  }
  return a === b;
}

/** RFC 6902 operations, applied to a copy; any failure leaves the target unchanged. */
export function jsonPatch(target: unknown, ops: unknown): Json {
  if (!Array.isArray(ops)) throw new PatchError('a JSON patch must be an array of operations', true);
  const doc = structuredClone(target as Json);
  for (const [n, raw] of ops.entries()) {
    if (!isObject(raw) || typeof raw.op !== 'string' || typeof raw.path !== 'string') {
      throw new PatchError(`JSON patch operation ${n} needs string "op" and "path"`, true);
    }
    const { op, path } = raw;
    const needValue = () => {
      if (!('value' in raw)) throw new PatchError(`JSON patch operation ${n} (${op}) needs "value"`, true);
      return structuredClone(raw.value);
    };
    const from = () => {
      if (typeof raw.from !== 'string') throw new PatchError(`JSON patch operation ${n} (${op}) needs string "from"`, true);
      return raw.from;
    };
    switch (op) {
      case 'add': addAt(doc, path, needValue(), false); break;
      case 'replace': addAt(doc, path, needValue(), true); break;
      case 'remove': removeAt(doc, path); break;
      case 'move': addAt(doc, path, removeAt(doc, from()), false); break;
      case 'copy': addAt(doc, path, structuredClone(getAt(doc, from())), false); break;
      case 'test':
        if (!deepEqual(getAt(doc, path), needValue())) {
          throw new PatchError(`JSON patch test failed: "${path}" does not hold the expected value`, false);
        }
        break;
      default:
        throw new PatchError(`JSON patch operation ${n} has unknown op "${op}"`, true);
    }
  }
  return doc;
}

/** Applies a patch body (already parsed JSON) of the given Content-Type (without parameters). */
export function applyPatch(target: unknown, contentType: string, patch: unknown): Json {
  switch (contentType) {
    case 'application/json-patch+json':
      return jsonPatch(target, patch);
    case 'application/merge-patch+json':
    case 'application/strategic-merge-patch+json':
      if (!isObject(patch)) throw new PatchError('a merge patch must be a JSON object', true);
      return mergePatch(target, patch);
    default:
      throw new PatchError(`unsupported patch type ${contentType}`, true);
  }
}
