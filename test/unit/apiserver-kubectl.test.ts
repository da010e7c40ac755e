// What the lab API server gives kubectl beyond list/watch: OpenAPI v3 documents that make
// kubectl's apply validate on the server, and server-side printing (Tables).
import t from 'tap';
import { openApiDocument, openApiIndex } from '../../lab/apiserver/openapi.js';
import { builtinTypes, seedCrds, typesFromCrd } from '../../lab/apiserver/resources.js';
import { humanAge, toTable, wantsTable } from '../../lab/apiserver/table.js';
import type { KObject } from '../../lab/apiserver/store.js';

const types = [...builtinTypes, ...seedCrds().flatMap(typesFromCrd)];

t.test('OpenAPI v3: one document per group-version, each PATCH declares fieldValidation for its kind', async (t) => {
  const index = openApiIndex(types) as { paths: Record<string, { serverRelativeURL: string }> };
  t.match(index.paths['api/v1']?.serverRelativeURL, /^\/openapi\/v3\/api\/v1\?hash=[0-9A-F]{32}$/, 'core');
  t.ok(index.paths['apis/crd.antrea.io/v1beta1'], 'Antrea CRDs');
  t.ok(index.paths['apis/networking.k8s.io/v1'], 'NetworkPolicy');
  t.equal(openApiDocument(types, 'apis/no.such/v1'), undefined, 'an unknown group-version has none');

  const doc = openApiDocument(types, 'api/v1') as { paths: Record<string, Record<string, { parameters?: { name: string; in: string }[]; 'x-kubernetes-group-version-kind'?: unknown; requestBody?: { content: Record<string, unknown> } }>> };
  const patch = doc.paths['/api/v1/namespaces/{namespace}/pods/{name}']?.patch;
  t.same(patch?.['x-kubernetes-group-version-kind'], { group: '', version: 'v1', kind: 'Pod' }, 'the Pod PATCH names its kind');
  t.ok(patch?.parameters?.some((p) => p.name === 'fieldValidation' && p.in === 'query'), 'and declares fieldValidation (kubectl then validates on the server)');
  t.notOk('application/strategic-merge-patch+json' in (patch?.requestBody?.content ?? {}), 'no strategic merge from field-less schemas');
  t.ok(doc.paths['/api/v1/nodes/{name}'], 'a cluster-scoped kind has no namespace segment');
  t.ok(doc.paths['/api/v1/namespaces/{namespace}/pods/{name}/status']?.patch, 'the status subresource');
  const again = openApiIndex(types) as typeof index;
  t.same(again, index, 'the hashes are stable for the same types');
});

t.test('Tables: asked for by Accept, with kube-apiserver\'s Pod columns', async (t) => {
  t.ok(wantsTable('application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json'), 'kubectl get');
  t.notOk(wantsTable('application/json'), 'an informer');
  t.notOk(wantsTable(undefined), 'no Accept');

  const now = Date.parse('2026-01-01T01:00:00Z');
  const pod = {
    apiVersion: 'v1', kind: 'Pod',
    metadata: { name: 'a', namespace: 'x', creationTimestamp: '2026-01-01T00:55:00Z' },
    spec: { nodeName: 'node-1', containers: [{ name: 'c' }, { name: 'd' }] },
    status: { phase: 'Running', podIP: '10.0.0.5', containerStatuses: [{ ready: true, restartCount: 2 }, { ready: false, restartCount: 1 }] },
  } as unknown as KObject;
  const podType = builtinTypes.find((b) => b.storageKey === '/pods')!;
  const table = toTable(podType, [pod], '7', now) as { kind: string; columnDefinitions: { name: string; priority: number }[]; rows: { cells: unknown[]; object: unknown }[]; metadata: unknown };
  t.equal(table.kind, 'Table');
  t.same(table.metadata, { resourceVersion: '7' });
  t.same(table.columnDefinitions.filter((c) => c.priority === 0).map((c) => c.name), ['Name', 'Ready', 'Status', 'Restarts', 'Age']);
  t.same(table.rows[0]?.cells.slice(0, 7), ['a', '1/2', 'Running', 3, '5m', '10.0.0.5', 'node-1'], 'ready count, restarts summed, age, IP, node');
  t.equal(table.rows[0]?.object, pod, 'each row carries its object (kubectl reads the namespace from it)');
  const terminating = { ...pod, metadata: { ...pod.metadata, deletionTimestamp: '2026-01-01T00:59:00Z' } } as KObject;
  t.equal((toTable(podType, [terminating], '7', now) as typeof table).rows[0]?.cells[2], 'Terminating');
  const other = builtinTypes.find((b) => b.storageKey === '/configmaps')!;
  t.same((toTable(other, [pod], '7', now) as typeof table).columnDefinitions.map((c) => c.name), ['Name', 'Age'], 'other kinds: Name and Age');
});

t.test('ages as kubectl shows them', async (t) => {
  const s = 1000;
  t.same([0, 59 * s, 119 * s, 150 * s, 600 * s, 179 * 60 * s, 3 * 3600 * s + 5 * 60 * s, 30 * 3600 * s, 3 * 86400 * s + 3600 * s, 100 * 86400 * s, 800 * 86400 * s].map(humanAge),
    ['0s', '59s', '119s', '2m30s', '10m', '179m', '3h5m', '30h', '3d1h', '100d', '2y70d']);
});
