// The OpenAPI v3 documents a kubectl needs to write objects: /openapi/v3 (one entry per served
// group-version) and /openapi/v3/<api/v1 | apis/<group>/<version>>. kubectl's apply and create
// validate with the server's fieldValidation when a kind's PATCH operation declares that parameter,
// and otherwise download schemas to validate on the client, failing without them. So every
// document declares fieldValidation on each object path, and each kind's schema keeps unknown
// fields: the lab API server checks what it understands (registry.ts), not the whole schema.
// The PATCH bodies do not list strategic merge: kubectl would compute one from these field-less
// schemas; without it, it uses its built-in types for built-in kinds and a JSON merge patch for
// custom resources, as with a real CRD.
import { createHash } from 'node:crypto';
import type { ResourceType } from './resources.js';

/** The documents' key for a type's group-version: 'api/v1' or 'apis/<group>/<version>'. */
export const openApiGroupVersionPath = (t: Pick<ResourceType, 'group' | 'version'>): string =>
  t.group ? `apis/${t.group}/${t.version}` : `api/${t.version}`;

const queryParam = (name: string, description: string) => ({ name, in: 'query', description, schema: { type: 'string', uniqueItems: true } });
const pathParam = (name: string) => ({ name, in: 'path', required: true, schema: { type: 'string', uniqueItems: true } });
const objectParams = [queryParam('fieldValidation', 'Strict, Warn or Ignore: what the server does with unknown or duplicate fields.'), queryParam('fieldManager', 'The actor making the change.'), queryParam('dryRun', 'All: do not persist.')];

/** The OpenAPI v3 document of one group-version, or undefined when no served type has it. */
export function openApiDocument(types: readonly ResourceType[], gvPath: string): Record<string, unknown> | undefined {
  const served = types.filter((t) => openApiGroupVersionPath(t) === gvPath);
  if (served.length === 0) return undefined;
  const paths: Record<string, unknown> = {};
  const schemas: Record<string, unknown> = {};
  for (const t of served) {
    const gvk = [{ group: t.group, version: t.version, kind: t.kind }];
    const schemaName = `${t.group ? t.group.split('.').reverse().join('.') : 'io.k8s.api.core'}.${t.version}.${t.kind}`;
    schemas[schemaName] = { type: 'object', description: `${t.kind} (fields checked by the lab API server where it understands them)`, 'x-kubernetes-group-version-kind': gvk, 'x-kubernetes-preserve-unknown-fields': true };
    const ref = { $ref: `#/components/schemas/${schemaName}` };
    const body = { content: { 'application/json': { schema: ref } } };
    const answer = { 200: { description: 'OK', ...body } };
    // kubectl looks for fieldValidation among the PATCH operation's own parameters.
    const op = (verb: string, action: string) => ({ operationId: `${verb}${t.kind}`, 'x-kubernetes-action': action, 'x-kubernetes-group-version-kind': gvk[0], parameters: objectParams, responses: answer });
    const base = `/${gvPath}${t.namespaced ? '/namespaces/{namespace}' : ''}/${t.plural}`;
    const scope = t.namespaced ? [pathParam('namespace')] : [];
    paths[base] = { parameters: scope, get: op('list', 'list'), post: { ...op('create', 'post'), requestBody: body } };
    const item = { parameters: [pathParam('name'), ...scope], get: op('read', 'get'), put: { ...op('replace', 'put'), requestBody: body }, patch: { ...op('patch', 'patch'), requestBody: { content: { 'application/merge-patch+json': { schema: { type: 'object' } }, 'application/json-patch+json': { schema: { type: 'object' } } } } }, delete: op('delete', 'delete') };
    paths[`${base}/{name}`] = item;
    if (t.statusSubresource) paths[`${base}/{name}/status`] = { ...item, delete: undefined };
  }
  return { openapi: '3.0.0', info: { title: 'sluice-lab', version: 'v1.31.0-sluice-lab' }, paths, components: { schemas } };
}

/** /openapi/v3: where each group-version's document is, with a hash of its content (clients cache by it). */
export function openApiIndex(types: readonly ResourceType[]): Record<string, unknown> {
  const paths: Record<string, { serverRelativeURL: string }> = {};
  for (const gvPath of new Set(types.map(openApiGroupVersionPath))) {
    const hash = createHash('sha256').update(JSON.stringify(openApiDocument(types, gvPath))).digest('hex').slice(0, 32).toUpperCase();
    paths[gvPath] = { serverRelativeURL: `/openapi/v3/${gvPath}?hash=${hash}` };
  }
  return { paths };
}
